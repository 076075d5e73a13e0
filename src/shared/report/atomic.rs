//! Atomic file writes: temp file in the same folder, fsync, rename, fsync the folder.

use nix::sys::signal::kill;
use nix::unistd::Pid;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{fchown, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` atomically: a temp file in the same folder (created with
/// `O_EXCL` under a unique name), written, `fchmod` to `mode`, `fchown` to `owner`
/// (uid, gid) when given, fsynced, renamed over `path`, and the folder fsynced.
///
/// The folder must exist. On error `path` is untouched and the temp file removed; temp
/// files that an earlier process left behind (it died mid-write) are removed first.
/// Errors are the plain system error; the caller names the file.
pub fn atomic_write(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let name = name.to_string_lossy();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    remove_dead_temps(dir, &name);

    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let mut tries = 0;
    let (mut file, temp) = loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".{name}.{pid}.{n}.tmp"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
        {
            Ok(f) => break (f, TempFile(Some(temp))),
            // A name left by an earlier process with our PID; the counter moves on.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    file.write_all(bytes)?;
    file.set_permissions(Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        fchown(&file, Some(uid), Some(gid))?;
    }
    file.sync_all()?;
    drop(file);
    let from = temp.path();
    fs::rename(from, path)?;
    temp.keep();
    File::open(dir)?.sync_all()
}

/// Removes a temp file unless kept (renamed into place).
struct TempFile(Option<PathBuf>);

impl TempFile {
    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new(""))
    }

    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// Removes `.NAME.PID.N.tmp` files in `dir` whose PID is no live process: what a writer
/// killed between create and rename left behind. Best effort.
fn remove_dead_temps(dir: &Path, name: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
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
            let _ = fs::remove_file(entry.path());
        }
    }
}
