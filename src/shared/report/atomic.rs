//! Atomic file writes: temp file in the same folder, fsync, rename, fsync the folder.
//!
//! Every step is relative to the folder opened once without following a link (`openat`,
//! `renameat`, `unlinkat`): a folder another user owns (node-exporter's textfile folder,
//! say) swapped for a link after the open changes nothing, and one that is a link when
//! opened is refused. Temp names carry random bits, so nobody plants them beforehand.

use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::signal::kill;
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, Pid, UnlinkatFlags};
use std::fs::{self, File, Permissions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{fchown, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

fn errno(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// 64 bits from the kernel's random source, with a counter beside them should it fail.
fn random_bits() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut b = [0u8; 8];
    let read = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    let r = if read.is_ok() {
        u64::from_ne_bytes(b)
    } else {
        0
    };
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    r ^ n.rotate_left(32) ^ if read.is_ok() { 0 } else { t }
}

/// Writes `bytes` to `path` atomically: a temp file in the same folder (created with
/// `O_EXCL|O_NOFOLLOW` under a unique, unpredictable name), written, `fchmod` to `mode`,
/// `fchown` to `owner` (uid, gid) when given, fsynced, renamed over `path`, and the
/// folder fsynced; all of it relative to the folder opened once (`O_NOFOLLOW`).
///
/// The folder must exist and not be a symbolic link. On error `path` is untouched and
/// the temp file removed; temp files that an earlier process left behind (it died
/// mid-write) are removed first. Errors are the plain system error; the caller names
/// the file.
pub fn atomic_write(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let name = name.to_string_lossy().into_owned();
    let dir_path = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir: OwnedFd = nix::fcntl::open(
        dir_path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        // O_DIRECTORY|O_NOFOLLOW on a link: ENOTDIR (or ELOOP), told apart from a file.
        let link = fs::symlink_metadata(dir_path).is_ok_and(|m| m.file_type().is_symlink());
        if link {
            io::Error::other(format!(
                "its folder {} is a symbolic link; name the folder itself",
                dir_path.display()
            ))
        } else {
            errno(e)
        }
    })?;
    remove_dead_temps(dir_path, &dir, &name);

    let pid = std::process::id();
    let mut tries = 0;
    let (mut file, temp) = loop {
        let temp = format!(".{name}.{pid}.{:016x}.tmp", random_bits());
        match openat(
            dir.as_fd(),
            temp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => {
                break (
                    File::from(fd),
                    TempFile {
                        dir: &dir,
                        name: Some(temp),
                    },
                )
            }
            Err(nix::errno::Errno::EEXIST) if tries < 100 => tries += 1,
            Err(e) => return Err(errno(e)),
        }
    };
    file.write_all(bytes)?;
    file.set_permissions(Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        fchown(&file, Some(uid), Some(gid))?;
    }
    file.sync_all()?;
    drop(file);
    renameat(dir.as_fd(), temp.name(), dir.as_fd(), name.as_str()).map_err(errno)?;
    temp.keep();
    File::from(dir).sync_all()
}

/// Removes a temp file in its folder unless kept (renamed into place).
struct TempFile<'a> {
    dir: &'a OwnedFd,
    name: Option<String>,
}

impl TempFile<'_> {
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    fn keep(mut self) {
        self.name = None;
    }
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.name.take() {
            let _ = unlinkat(self.dir.as_fd(), n.as_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
}

/// Removes `.NAME.PID.X.tmp` files in the folder `dir` (at `dir_path`) whose PID is no
/// live process: what a writer killed between create and rename left behind. Best effort;
/// listed by path, removed relative to the opened folder.
fn remove_dead_temps(dir_path: &Path, dir: &OwnedFd, name: &str) {
    let Ok(entries) = fs::read_dir(dir_path) else {
        return;
    };
    let prefix = format!(".{name}.");
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(rest) = file_name
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|f| f.strip_suffix(".tmp"))
        else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let dead = pid > 0 && kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH);
        if dead {
            let _ = unlinkat(
                dir.as_fd(),
                file_name.as_os_str(),
                UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}
