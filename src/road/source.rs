//! Where the etcd archive comes from: the Kubernetes ISO (an image file or a CD-ROM block
//! device, read in userspace without mounting) or the tarball itself. Feeds the bytes to
//! the archive pass and turns what is missing or unreadable into reason codes.

use crate::reason::{Failure, ReasonCode};
use crate::road::archive::{self, Extracted, Policy};
use crate::road::discover::FoundIso;
use crate::road::iso9660::{self, IsoFile, IsoImage, Naming};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// What kind of input held the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// An ISO 9660 image or disc, with its volume label.
    Iso {
        /// The volume label, e.g. `CDROM`.
        label: String,
        /// The directory tree the archive was read through, as Linux would mount it.
        naming: Naming,
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
///
/// `path` is opened without blocking and looked at first: a regular file or a block
/// device is read as today (seeking); a pipe (`<(cat t.tgz)`, `/dev/stdin`, a FIFO) is
/// streamed, which only a tarball can be, once data arrives within [`PIPE_WAIT`]; a
/// directory, a character device or a socket is refused, naming what it is.
pub fn validate_path(
    path: &Path,
    archive_path: &str,
    staging_parent: &Path,
    policy: &Policy,
) -> Result<Validated, Failure> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let shown = path.display();
    let refuse = |why: String| Failure::new(ReasonCode::IsoUnreadable, why);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|e| refuse(format!("cannot open {shown}: {e}")).with_source(e))?;
    let unreadable = |e: std::io::Error| Failure::iso_unreadable(&shown, e);
    let kind = file.metadata().map_err(unreadable)?.file_type();
    if !(kind.is_file() || kind.is_block_device() || kind.is_fifo()) {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_char_device() {
            "a character device"
        } else {
            "neither a file nor a device"
        };
        return Err(refuse(format!(
            "{shown} is {what}: give an ISO image file, a CD-ROM block device or an etcd tarball"
        )));
    }
    if kind.is_fifo() && !data_within(&file, PIPE_WAIT) {
        return Err(refuse(format!(
            "the pipe {shown} gave no data within {} s",
            PIPE_WAIT.as_secs()
        )));
    }
    // Reads block again from here on; waiting for data is the reader's job now.
    nix::fcntl::fcntl(
        &file,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .map_err(|e| unreadable(e.into()))?;
    if kind.is_fifo() {
        // No seeking: sniff the first bytes, then hand them on with the rest.
        let mut head = vec![0u8; 32 * 1024 + 6];
        let n = read_up_to(&mut file, &mut head[..2]).map_err(unreadable)?;
        if n == 2 && head[..2] == [0x1f, 0x8b] {
            let input = std::io::Read::chain(&head[..2], file);
            let extracted =
                archive::extract_from_pipe(input, &shown.to_string(), staging_parent, policy)?;
            return Ok(Validated {
                kind: Kind::Tarball,
                extracted,
            });
        }
        let m = read_up_to(&mut file, &mut head[n..]).map_err(unreadable)?;
        if n + m == head.len() && &head[32 * 1024 + 1..] == b"CD001" {
            return Err(refuse(format!(
                "{shown} is a pipe holding an ISO 9660 image, which is read at offsets: give \
                 the image file or the device (only a tarball can be read from a pipe)"
            )));
        }
        return Err(refuse(format!(
            "the pipe {shown} holds no gzip-compressed tarball (only a tarball can be read \
             from a pipe)"
        )));
    }
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

/// How long `check` waits for the first bytes from a pipe (a FIFO nobody writes to
/// would otherwise hold it forever).
pub const PIPE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether `pipe` (opened non-blocking) has data, or its writer is gone, within `wait`.
fn data_within(pipe: &File, wait: std::time::Duration) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let deadline = std::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = PollTimeout::try_from(left.as_millis()).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return true, // let the read say what is wrong
        }
    }
}

/// Validates the archive at `archive_path` inside an ISO 9660 image or disc. `device` is
/// what messages call the disc, e.g. `/dev/sr0`.
pub fn validate_iso<R: Read + Seek + Send>(
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
        let what = format!("{archive_path} on {device} (label {label})");
        // A link or special file on the disc is refused as one inside the archive is.
        if e.is_unsafe() {
            Failure::new(ReasonCode::ArchiveUnsafe, format!("{what}: {e}")).with_source(e)
        } else {
            Failure::iso_unreadable(what, e)
        }
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
        ..
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
fn extract_entry<R: Read + Seek + Send>(
    mut iso: IsoImage<R>,
    entry: &IsoFile,
    device: &str,
    label: String,
    archive_path: &str,
    staging_parent: &Path,
    policy: &Policy,
) -> Result<Validated, Failure> {
    let name = format!("{device}:{archive_path}");
    let naming = iso.naming();
    let reader = iso
        .open_file(entry)
        .map_err(|e| Failure::iso_unreadable(&name, e))?;
    let extracted = archive::extract(reader, &name, staging_parent, policy)?;
    Ok(Validated {
        kind: Kind::Iso { label, naming },
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
    use crate::shared::config::DEFAULT_ARCHIVE_PATH;

    #[test]
    fn the_default_archive_path_names_this_machines_release() {
        let goarch = crate::road::elf::Machine::host().goarch();
        assert_eq!(
            DEFAULT_ARCHIVE_PATH,
            format!("etcd/etcd-linux-{goarch}.tar.gz")
        );
    }
}
