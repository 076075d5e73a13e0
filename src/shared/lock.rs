//! One `etcd-setup run` at a time: cloud-init's `runcmd` and the systemd unit may both
//! start one at boot.
//!
//! The lock is `flock(LOCK_EX)` on `/run/etcd-setup/run.lock`, not the file's existence:
//! the kernel drops it when the holder exits however it exits (`kill -9` included), so a
//! crashed run never leaves a lock that needs cleaning up. The holder writes its PID into
//! the file, for the message of a run that gives up waiting.

use crate::reason::{Failure, ReasonCode};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The run lock's name in the live state folder (`/run/etcd-setup`).
pub const LOCK_FILE: &str = "run.lock";

/// How often a waiting run tries the lock again.
const POLL: Duration = Duration::from_millis(100);

/// The held run lock; released when dropped, or by the kernel when the process dies.
#[derive(Debug)]
pub struct RunLock {
    _file: Flock<File>,
    path: PathBuf,
}

impl RunLock {
    /// Takes the lock at `path`, waiting up to `wait` for another holder to let go;
    /// `Duration::ZERO` tries once. The file and its folder are created when missing.
    ///
    /// Waiting is a non-blocking `flock` retried every 100 ms, not a blocking one in a
    /// helper thread: a thread stuck in `flock` cannot be cancelled at the deadline and
    /// would take the lock later for a run that has already given up.
    ///
    /// Fails with `locked` naming the holder's PID when the wait runs out, and with
    /// `internal-error` (`disk-full` when out of space) when the file cannot be opened.
    pub fn acquire(path: &Path, wait: Duration) -> Result<RunLock, Failure> {
        let mut file = open(path).map_err(|e| match e.raw_os_error() {
            // O_NOFOLLOW: the holder writes its PID into the file, and a link planted
            // there would have root write into whatever it points at.
            Some(n) if n == Errno::ELOOP as i32 => Failure::new(
                ReasonCode::InternalError,
                format!(
                    "the lock file {} is a symbolic link; refusing to follow it (remove it: \
                     the lock is the kernel's flock, the file holds nothing else)",
                    path.display()
                ),
            ),
            _ => Failure::io(path, "cannot open the run lock", e),
        })?;
        let deadline = Instant::now() + wait;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => {
                    // The PID is only for others' messages; failing to write it is no
                    // reason to give up a lock we hold.
                    let pid = format!("{}\n", std::process::id());
                    let _ = locked.set_len(0);
                    let _ = locked.write_all_at(pid.as_bytes(), 0);
                    return Ok(RunLock {
                        _file: locked,
                        path: path.to_path_buf(),
                    });
                }
                Err((f, Errno::EWOULDBLOCK)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(timed_out(path, &f, wait));
                    }
                    std::thread::sleep(POLL.min(deadline - now));
                    file = f;
                }
                Err((f, Errno::EINTR)) => file = f,
                Err((_, e)) => {
                    return Err(Failure::new(
                        ReasonCode::InternalError,
                        format!("cannot lock {}: {e}", path.display()),
                    )
                    .with_source(io::Error::from(e)))
                }
            }
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn open(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
}

/// The `locked` failure, naming the PID the holder wrote.
fn timed_out(path: &Path, file: &File, wait: Duration) -> Failure {
    let mut buf = [0u8; 32];
    let holder = file
        .read_at(&mut buf, 0)
        .ok()
        .and_then(|n| std::str::from_utf8(&buf[..n]).ok())
        .and_then(|t| t.trim().parse::<u32>().ok());
    let who = match holder {
        Some(pid) => format!("another etcd-setup run (pid {pid})"),
        None => "another process (it recorded no pid)".to_string(),
    };
    Failure::new(
        ReasonCode::Locked,
        format!(
            "{who} held {} for more than {}; let it finish (etcd-setup status shows what it \
             is doing) or stop it, then run again",
            path.display(),
            show(wait)
        ),
    )
}

/// `wait` as `5s`, `1500ms`, `600s`.
fn show(wait: Duration) -> String {
    if wait.subsec_millis() == 0 {
        format!("{}s", wait.as_secs())
    } else {
        format!("{}ms", wait.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    fn lock_path(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("etcd-setup").join("run.lock")
    }

    #[test]
    fn a_second_run_times_out_with_locked_naming_the_holder_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(&dir);
        let held = RunLock::acquire(&path, Duration::ZERO).expect("free lock");
        assert_eq!(held.path(), path);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );

        // flock locks belong to the open file description: a second open conflicts even
        // within one process, as a second `etcd-setup run` would.
        let start = Instant::now();
        let f = RunLock::acquire(&path, Duration::from_millis(250)).expect_err("held");
        let waited = start.elapsed();
        assert_eq!(f.code, ReasonCode::Locked);
        assert_eq!(
            f.message,
            format!(
                "another etcd-setup run (pid {}) held {} for more than 250ms; let it finish \
                 (etcd-setup status shows what it is doing) or stop it, then run again",
                std::process::id(),
                path.display()
            )
        );
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    }

    #[test]
    fn dropping_the_lock_releases_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(&dir);
        let held = RunLock::acquire(&path, Duration::ZERO).unwrap();
        assert!(RunLock::acquire(&path, Duration::ZERO).is_err());
        drop(held);
        RunLock::acquire(&path, Duration::ZERO).expect("released on drop");
    }

    #[test]
    fn a_waiting_run_gets_the_lock_when_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(&dir);
        let held = RunLock::acquire(&path, Duration::ZERO).unwrap();
        let holder = std::thread::spawn(move || {
            // The holder's work; the waiter cannot observe its start without polling.
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        let start = Instant::now();
        RunLock::acquire(&path, Duration::from_secs(30)).expect("released within the wait");
        assert!(start.elapsed() < Duration::from_secs(10));
        holder.join().unwrap();
    }

    #[test]
    fn a_lock_file_that_is_a_link_is_refused_and_its_target_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(&dir);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let target = dir.path().join("precious");
        fs::write(&target, "keep me\n").unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = RunLock::acquire(&path, Duration::ZERO).expect_err("a link is refused");
        assert_eq!(err.code, ReasonCode::InternalError, "{err:?}");
        assert!(
            err.message.contains(&path.display().to_string())
                && err.message.contains("symbolic link"),
            "{err:?}"
        );
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep me\n");
    }

    #[test]
    fn a_lock_file_left_by_a_dead_run_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(&dir);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "4194999\n").unwrap(); // a PID above pid_max: long gone
        let _held = RunLock::acquire(&path, Duration::ZERO).expect("no holder");
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
    }

    #[test]
    fn the_kernel_releases_the_lock_of_a_killed_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(&dir);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        // flock(1) holds the lock in its own process while its command runs (-o: the
        // command does not inherit it); the command says when the lock is held.
        let mut holder = Command::new("flock")
            .arg("-o")
            .arg(&path)
            .args(["sh", "-c", "echo held; read _"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("flock(1) from util-linux");
        let mut line = String::new();
        BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "held\n");

        let f = RunLock::acquire(&path, Duration::from_millis(100)).expect_err("held");
        assert_eq!(f.code, ReasonCode::Locked);
        assert!(
            f.message
                .starts_with("another process (it recorded no pid) held "),
            "{}",
            f.message
        );

        holder.kill().unwrap(); // SIGKILL: no cleanup of any kind
        holder.wait().unwrap();
        drop(holder.stdin.take()); // ends the orphaned `sh`
        RunLock::acquire(&path, Duration::ZERO).expect("released by the kernel");
    }
}
