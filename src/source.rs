//! Where the etcd archive comes from: the Kubernetes ISO (an image file or a CD-ROM block
//! device, read in userspace without mounting) or the tarball itself. Feeds the bytes to
//! the archive pass and turns what is missing or unreadable into reason codes.

use crate::archive::{self, Extracted, Policy};
use crate::iso9660::{self, IsoImage};
use crate::reason::{Failure, ReasonCode};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Where the platform's Kubernetes ISO keeps the etcd release tarball for this machine.
#[cfg(not(target_arch = "aarch64"))]
pub const DEFAULT_ARCHIVE_PATH: &str = "etcd/etcd-linux-amd64.tar.gz";
/// Where the platform's Kubernetes ISO keeps the etcd release tarball for this machine.
#[cfg(target_arch = "aarch64")]
pub const DEFAULT_ARCHIVE_PATH: &str = "etcd/etcd-linux-arm64.tar.gz";

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
    let unreadable = |e: std::io::Error| {
        Failure::new(
            ReasonCode::IsoUnreadable,
            format!("cannot read {shown}: {e}"),
        )
        .with_source(e)
    };
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
        Failure::new(
            ReasonCode::IsoUnreadable,
            format!("cannot look up {archive_path} on {device} (label {label}): {e}"),
        )
        .with_source(e)
    })?;
    let Some(file) = found else {
        let holds = iso
            .list_root()
            .map(|names| names.join(", "))
            .unwrap_or_else(|e| format!("(cannot list: {e})"));
        return Err(Failure::new(
            ReasonCode::ArchiveMissing,
            format!(
                "the Kubernetes ISO on {device} (label {label}) has no {archive_path}; \
                 rebuild it with an etcd version"
            ),
        )
        .with_source(anyhow::anyhow!("the disc's top level holds: {holds}")));
    };
    let name = format!("{device}:{archive_path}");
    let reader = iso.open_file(&file).map_err(|e| {
        Failure::new(
            ReasonCode::IsoUnreadable,
            format!("cannot read {name}: {e}"),
        )
        .with_source(e)
    })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_archive_path_names_this_machines_release() {
        let goarch = crate::elf::Machine::host().goarch();
        assert_eq!(
            DEFAULT_ARCHIVE_PATH,
            format!("etcd/etcd-linux-{goarch}.tar.gz")
        );
    }
}
