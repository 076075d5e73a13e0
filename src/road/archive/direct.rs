//! Writes a large file around the page cache (`O_DIRECT`), in whole aligned chunks.
//!
//! Issue 24 item 2: in a TCG guest the pass's writes of the three etcd binaries (58 MB)
//! went through the guest kernel's buffered write path (`ext4_da_write_begin`,
//! `alloc_page_buffers`, a copy into each page), 0.5–1.4 s of emulated kernel code that
//! swung with the host's load; written `O_DIRECT` the same 58 MB take 0.09–0.14 s, the
//! device model's own copy being the host's native code (docs/measurements.md). The
//! bytes are the same and so are the crash guarantees: a direct write may reach the
//! drive's volatile cache, not the disk, so the installer's `fsync_tree` still flushes
//! every file and folder (and the drive's cache) before the rename that gives them their
//! names; a crash before it leaves only the staging folder, which the next run removes.
//!
//! Chunks of [`CHUNK`] bytes, aligned in memory and in the file to [`ALIGN`] (a multiple
//! of the 512- and 4096-byte logical blocks of disks; a device wanting more refuses the
//! write with `EINVAL`), go out `O_DIRECT`; the last partial chunk goes through the page
//! cache, the flag cleared first. A filesystem that refuses the flag (tmpfs before Linux
//! 6.6, some FUSE) gets every byte buffered, as does the rest of a file whose direct
//! write was refused or came back short: one judgment per file, never a failure for the
//! flag's sake.
//!
//! A file about to be executed (etcd, started within the second) then has its pages
//! loaded back into the page cache, on a thread beside the pass ([`warm_page_cache`]):
//! started from the drive page fault by page fault, etcd took about 0.9 s longer to log
//! its first line under TCG; written through the page cache instead, its 23 MB cost the
//! pass 0.2–1.5 s again.

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use std::fs::File;
use std::io::{self, Write};

/// The alignment of a direct write's memory, length and file offset.
const ALIGN: usize = 4096;
/// How much one direct write carries.
const CHUNK: usize = 1 << 20;
/// Files smaller than this are written through the page cache: one chunk would not
/// fill, and the flag's two `fcntl` calls would cost more than they save.
pub(super) const MIN_SIZE: u64 = CHUNK as u64;

/// A file being written in aligned chunks with `O_DIRECT`, the rest buffered.
pub(super) struct DirectWriter {
    file: File,
    /// Memory `CHUNK + ALIGN` long, of which `start..start + CHUNK` is aligned.
    buf: Vec<u8>,
    start: usize,
    /// Bytes of the chunk filled so far.
    fill: usize,
    /// Whether the file still has `O_DIRECT` set.
    direct: bool,
}

impl DirectWriter {
    /// Sets `O_DIRECT` on `file` (opened for writing, at offset 0) if its filesystem
    /// takes it; otherwise every write goes through the page cache.
    pub(super) fn new(file: File) -> DirectWriter {
        let direct = fcntl(&file, FcntlArg::F_SETFL(OFlag::O_DIRECT)).is_ok();
        let buf = if direct {
            vec![0u8; CHUNK + ALIGN]
        } else {
            Vec::new()
        };
        let start = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        DirectWriter {
            file,
            buf,
            start,
            fill: 0,
            direct,
        }
    }

    /// Whether the bytes written so far went out `O_DIRECT`.
    #[cfg(test)]
    fn is_direct(&self) -> bool {
        self.direct
    }

    /// Appends `data`.
    pub(super) fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        if !self.direct {
            return self.file.write_all(data);
        }
        while !data.is_empty() {
            let n = data.len().min(CHUNK - self.fill);
            let at = self.start + self.fill;
            self.buf[at..at + n].copy_from_slice(&data[..n]);
            self.fill += n;
            data = &data[n..];
            if self.fill == CHUNK {
                self.flush_chunk()?;
            }
        }
        Ok(())
    }

    /// Writes the full chunk `O_DIRECT`; a refusal (`EINVAL`) or a short write sends it,
    /// or its rest, and everything after through the page cache.
    fn flush_chunk(&mut self) -> io::Result<()> {
        let chunk = &self.buf[self.start..self.start + CHUNK];
        let written = loop {
            match self.file.write(chunk) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => break 0,
                Err(e) => return Err(e),
            }
        };
        if written < CHUNK {
            self.buffered()?;
            self.file
                .write_all(&self.buf[self.start + written..self.start + CHUNK])?;
        }
        self.fill = 0;
        Ok(())
    }

    /// Clears `O_DIRECT`: from here on every byte goes through the page cache.
    fn buffered(&mut self) -> io::Result<()> {
        if self.direct {
            fcntl(&self.file, FcntlArg::F_SETFL(OFlag::empty())).map_err(io::Error::from)?;
            self.direct = false;
        }
        Ok(())
    }

    /// Writes what is left (less than a chunk) through the page cache and gives the file
    /// back; it is not synced (see the module's comment).
    pub(super) fn finish(mut self) -> io::Result<File> {
        if self.fill > 0 {
            self.buffered()?;
            self.file
                .write_all(&self.buf[self.start..self.start + self.fill])?;
            self.fill = 0;
        }
        self.buffered()?;
        Ok(self.file)
    }
}

/// Asks the kernel to read the file at `path` into the page cache now, on a thread of
/// its own so that the pass goes on meanwhile: large sequential reads the drive's DMA
/// fills, instead of the page faults of an exec, and no copy to user space. The kernel
/// caps one `POSIX_FADV_WILLNEED` at the device's readahead window (about 1.3 MB on the
/// node's virtio disk), so the advice is given a [`CHUNK`] at a time over the whole file.
/// Only advice: a refusal, or no thread, changes nothing but the speed.
///
/// The thread holds a descriptor of its own, opened here **read-only**: the file is
/// executed as soon as it is installed, and `execve` fails with `ETXTBSY` ("Text file
/// busy") while any process holds the file open for writing, as a clone of the writer's
/// descriptor did (the insert benchmark's second run, etcd exiting with status 203).
pub(super) fn warm_page_cache(path: &std::path::Path) {
    let Ok(file) = open_to_warm(path) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("page-cache-warm".into())
        .spawn(move || {
            let Ok(len) = file.metadata().map(|m| m.len()) else {
                return;
            };
            let mut at = 0u64;
            while at < len {
                let advised = nix::fcntl::posix_fadvise(
                    &file,
                    at as i64,
                    CHUNK as i64,
                    nix::fcntl::PosixFadviseAdvice::POSIX_FADV_WILLNEED,
                );
                if advised.is_err() {
                    return;
                }
                at += CHUNK as u64;
            }
        });
}

/// The warming thread's descriptor: read-only (see [`warm_page_cache`]).
fn open_to_warm(path: &std::path::Path) -> io::Result<File> {
    File::open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1])
            .collect()
    }

    /// The warming thread never holds the file open for writing: an `execve` of it
    /// would fail with `ETXTBSY` while it does. Checked on the descriptor itself and by
    /// an exec of the file while that descriptor is open (a file that is no program:
    /// the kernel refuses a writer's file before it reads the first byte).
    #[test]
    fn the_warming_descriptor_is_read_only_and_lets_the_file_be_executed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd");
        std::fs::write(&path, b"#!/bin/sh\nexit 7\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let held = open_to_warm(&path).unwrap();
        assert_eq!(
            flags(&held) & OFlag::O_ACCMODE,
            OFlag::O_RDONLY,
            "{:?}",
            flags(&held)
        );
        let ran = std::process::Command::new(&path).status().unwrap();
        assert_eq!(ran.code(), Some(7));
        // The check can fail: with a writer open, the same exec is refused.
        let writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let busy = std::process::Command::new(&path).status().unwrap_err();
        assert_eq!(busy.raw_os_error(), Some(nix::libc::ETXTBSY), "{busy}");
        drop((writer, held));
    }

    fn flags(file: &File) -> OFlag {
        let bits = fcntl(file, FcntlArg::F_GETFL).unwrap();
        OFlag::from_bits_truncate(bits)
    }

    /// Whatever the pieces and the filesystem, the file holds exactly the bytes given,
    /// and the flag is off once it is finished.
    #[test]
    fn writes_exactly_the_bytes_given_in_any_pieces() {
        let dir = tempfile::tempdir().unwrap();
        for (len, piece) in [
            (0, 1),
            (100, 7),
            (CHUNK, CHUNK),
            (CHUNK, 4099),
            (3 * CHUNK + 12_345, 65_536),
            (2 * CHUNK + 1, 2 * CHUNK + 1),
            (CHUNK - 1, 1 << 16),
        ] {
            let data = pattern(len);
            let path = dir.path().join(format!("f-{len}-{piece}"));
            let mut w = DirectWriter::new(File::create(&path).unwrap());
            for p in data.chunks(piece) {
                w.write(p).unwrap();
            }
            let file = w.finish().unwrap();
            assert!(!flags(&file).contains(OFlag::O_DIRECT), "{len}/{piece}");
            drop(file);
            assert!(std::fs::read(&path).unwrap() == data, "{len}/{piece}");
        }
    }

    /// On a filesystem that takes the flag the whole chunks go out `O_DIRECT`: the test
    /// folder's filesystem is asked first with a plain `fcntl`, so the test holds
    /// wherever the clone lives (tmpfs before 6.6 refuses the flag: buffered, above).
    #[test]
    fn whole_chunks_go_out_direct_where_the_filesystem_takes_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let probe = File::create(dir.path().join("probe")).unwrap();
        let takes = fcntl(&probe, FcntlArg::F_SETFL(OFlag::O_DIRECT)).is_ok();
        let path = dir.path().join("big");
        let mut w = DirectWriter::new(File::create(&path).unwrap());
        assert_eq!(w.is_direct(), takes);
        let data = pattern(2 * CHUNK + 100);
        w.write(&data[..2 * CHUNK]).unwrap();
        // Both chunks were written O_DIRECT and the flag is still set: no fallback.
        assert_eq!(w.is_direct(), takes);
        assert_eq!(flags(&w.file).contains(OFlag::O_DIRECT), takes);
        assert_eq!(w.fill, 0);
        w.write(&data[2 * CHUNK..]).unwrap();
        drop(w.finish().unwrap());
        assert!(std::fs::read(&path).unwrap() == data);
    }

    /// A write the file refuses (here a descriptor opened read-only) is reported with
    /// its own error, not taken for a refusal of the flag.
    #[test]
    fn a_write_error_is_reported_not_swallowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro");
        std::fs::write(&path, b"").unwrap();
        let mut w = DirectWriter::new(File::open(&path).unwrap());
        let err = w
            .write(&pattern(CHUNK))
            .and_then(|()| w.finish().map(drop))
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(nix::libc::EBADF), "{err}");
    }
}
