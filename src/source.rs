//! Where the etcd archive comes from: the Kubernetes ISO (an image file or a CD-ROM block
//! device, read in userspace without mounting) or the tarball itself. Feeds the bytes to
//! the archive pass and turns what is missing or unreadable into reason codes.

use crate::archive::{self, Extracted, Policy};
use crate::discover::FoundIso;
use crate::iso9660::{self, IsoFile, IsoImage};
use crate::reason::{Failure, ReasonCode};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Where the platform's Kubernetes ISO keeps the etcd release tarball.
pub const DEFAULT_ARCHIVE_PATH: &str = "etcd/etcd-linux-amd64.tar.gz";

/// What kind of input held the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// An ISO 9660 image or disc, with its volume label.
    Iso {
        /// The volume label, e.g. `CDROM`.
        label: String,
    },
    /// A gzip-compressed tarball given directly.
    Tarball,
}

/// An input whose archive passed every check, extracted into its staging folder.
#[derive(Debug)]
pub struct Validated {
    /// What held the archive.
    pub kind: Kind,
    /// The extracted release.
    pub extracted: Extracted,
}

/// Validates the archive in `path` (an ISO image, a CD-ROM device or a tarball, told apart
/// by content) and extracts it into a staging folder under `staging_parent`.
pub fn validate_path(
    path: &Path,
    archive_path: &str,
    staging_parent: &Path,
    policy: &Policy,
) -> Result<Validated, Failure> {
    let shown = path.display();
    let mut file = File::open(path).map_err(|e| {
        Failure::new(
            ReasonCode::IsoUnreadable,
            format!("cannot open {shown}: {e}"),
        )
        .with_source(e)
    })?;
    let unreadable = |e: std::io::Error| Failure::iso_unreadable(&shown, e);
    if iso9660::is_iso9660(&mut file).map_err(unreadable)? {
        file.seek(SeekFrom::Start(0)).map_err(unreadable)?;
        return validate_iso(
            file,
            &shown.to_string(),
            archive_path,
            staging_parent,
            policy,
        );
    }
    let mut magic = [0u8; 2];
    file.seek(SeekFrom::Start(0)).map_err(unreadable)?;
    let n = read_up_to(&mut file, &mut magic).map_err(unreadable)?;
    if n == 2 && magic == [0x1f, 0x8b] {
        file.seek(SeekFrom::Start(0)).map_err(unreadable)?;
        let extracted = archive::extract(file, &shown.to_string(), staging_parent, policy)?;
        return Ok(Validated {
            kind: Kind::Tarball,
            extracted,
        });
    }
    Err(Failure::new(
        ReasonCode::IsoUnreadable,
        format!(
            "{shown} is neither an ISO 9660 image (no CD001 descriptor at sector 16) nor a \
             gzip-compressed tarball"
        ),
    ))
}

/// Validates the archive at `archive_path` inside an ISO 9660 image or disc. `device` is
/// what messages call the disc, e.g. `/dev/sr0`.
pub fn validate_iso<R: Read + Seek>(
    reader: R,
    device: &str,
    archive_path: &str,
    staging_parent: &Path,
    policy: &Policy,
) -> Result<Validated, Failure> {
    let mut iso = IsoImage::open(reader).map_err(|e| {
        Failure::new(
            ReasonCode::IsoUnreadable,
            format!("{device} is not a readable ISO 9660 image: {e}"),
        )
        .with_source(e)
    })?;
    let label = iso.volume_label().to_string();
    let found = iso.find(archive_path).map_err(|e| {
        Failure::iso_unreadable(format!("{archive_path} on {device} (label {label})"), e)
    })?;
    let Some(entry) = found else {
        let top_level = iso
            .list_root()
            .unwrap_or_else(|e| vec![format!("(cannot list: {e})")]);
        return Err(Failure::archive_missing(
            device,
            &label,
            archive_path,
            &top_level,
        ));
    };
    extract_entry(
        iso,
        &entry,
        device,
        label,
        archive_path,
        staging_parent,
        policy,
    )
}

/// Validates the archive of the disc discovery found, read from the image discovery
/// parsed: the disc is not opened or parsed again.
pub fn validate_found(
    found: FoundIso,
    archive_path: &str,
    staging_parent: &Path,
    policy: &Policy,
) -> Result<Validated, Failure> {
    let FoundIso {
        device,
        label,
        image,
        archive,
    } = found;
    let device = device.display().to_string();
    extract_entry(
        image,
        &archive,
        &device,
        label,
        archive_path,
        staging_parent,
        policy,
    )
}

/// The archive pass over `entry` of `iso`.
fn extract_entry<R: Read + Seek>(
    mut iso: IsoImage<R>,
    entry: &IsoFile,
    device: &str,
    label: String,
    archive_path: &str,
    staging_parent: &Path,
    policy: &Policy,
) -> Result<Validated, Failure> {
    let name = format!("{device}:{archive_path}");
    let reader = iso
        .open_file(entry)
        .map_err(|e| Failure::iso_unreadable(&name, e))?;
    let extracted = archive::extract(reader, &name, staging_parent, policy)?;
    Ok(Validated {
        kind: Kind::Iso { label },
        extracted,
    })
}

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
