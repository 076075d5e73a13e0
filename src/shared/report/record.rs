//! The one way a record is read: `state.json`, `snapshot.json`, `backup.json`, `operation.json`, by the
//! commands and by the status server alike.
//!
//! A record's folder is root's, but a record is still opened as if anyone could have put
//! something at its name: without following a symbolic link (`O_NOFOLLOW`), without
//! blocking (`O_NONBLOCK`: a FIFO there would hold the reader, and the status server,
//! for good), and only a regular file of at most a bounded size is read.

use std::fs;
use std::io::{self, Read};
use std::path::Path;

/// Why a record was not read.
#[derive(Debug)]
pub enum RecordError {
    /// The system refused (permissions, I/O).
    Io(io::Error),
    /// Something that is no record of ours is at the name; the sentence says what
    /// (`is a FIFO, not a file the agent wrote`).
    Invalid(String),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Io(e) => write!(f, "cannot be read: {e}"),
            RecordError::Invalid(why) => f.write_str(why),
        }
    }
}

/// `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, the flags every record is opened with.
pub(crate) fn open_flags() -> i32 {
    use nix::fcntl::OFlag;
    (OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits()
}

/// The bytes of the record at `path`, `None` when there is none. `what` names the kind
/// of record in a sentence (`a state file`); `max` is the most it may hold.
pub fn read_record(path: &Path, what: &str, max: u64) -> Result<Option<Vec<u8>>, RecordError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(open_flags())
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            let target = fs::read_link(path)
                .map(|t| format!(" to {}", t.display()))
                .unwrap_or_default();
            return Err(RecordError::Invalid(format!(
                "is a symbolic link{target}, not a file the agent wrote"
            )));
        }
        Err(e) => return Err(RecordError::Io(e)),
    };
    let meta = file.metadata().map_err(RecordError::Io)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let is = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else {
            "not a regular file"
        };
        return Err(RecordError::Invalid(format!(
            "is {is}, not a file the agent wrote"
        )));
    }
    if meta.len() > max {
        return Err(RecordError::Invalid(format!(
            "is {} bytes, larger than the {max} {what} may be",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(RecordError::Io)?;
    if bytes.len() as u64 > max {
        return Err(RecordError::Invalid(format!(
            "is larger than the {max} bytes {what} may be"
        )));
    }
    Ok(Some(bytes))
}

/// A JSON record at `path` read through [`read_record`] (`what` names it in errors, at
/// most `max` bytes): `None` when nothing was recorded yet; a bad file is `InvalidData`.
pub fn read_json_record<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
    max: u64,
) -> io::Result<Option<T>> {
    let bytes = match read_record(path, what, max) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(RecordError::Io(e)) => return Err(e),
        Err(RecordError::Invalid(why)) => {
            return Err(io::Error::new(io::ErrorKind::InvalidData, why))
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_link_folder_and_oversize_are_refused_at_once_saying_what_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_record(&fifo, "a record", 100).unwrap_err();
        assert_eq!(e.to_string(), "is a FIFO, not a file the agent wrote");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        let e = read_record(&link, "a record", 100).unwrap_err();
        assert_eq!(
            e.to_string(),
            "is a symbolic link to /etc/hostname, not a file the agent wrote"
        );
        let e = read_record(dir.path(), "a record", 100).unwrap_err();
        assert!(e.to_string().starts_with("is a directory"), "{e}");
        let big = dir.path().join("big.json");
        fs::write(&big, [b' '; 101]).unwrap();
        let e = read_record(&big, "a record", 100).unwrap_err();
        assert_eq!(
            e.to_string(),
            "is 101 bytes, larger than the 100 a record may be"
        );
        fs::write(&big, b"{}").unwrap();
        assert_eq!(read_record(&big, "a record", 100).unwrap().unwrap(), b"{}");
        assert!(read_record(&dir.path().join("none"), "a record", 100)
            .unwrap()
            .is_none());
    }
}
