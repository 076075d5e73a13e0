//! A cluster-wide lock held in etcd itself: `etcdctl lock NAME --ttl=TTL`, kept running
//! as a child process for as long as the lock is held.
//!
//! etcdctl creates a session lease of TTL seconds, keeps it alive, waits for its turn on
//! the key prefix NAME, prints the key it holds and then blocks. The lock is released when
//! the [`ClusterLock`] is dropped (SIGTERM: etcdctl deletes its key and exits), when this
//! process dies (the child's parent-death signal is SIGTERM: the same), and when both are
//! killed outright (the lease is no longer kept alive and expires after TTL).
//!
//! The parent-death signal belongs to the thread that spawned the child: take the lock on
//! the thread that holds it for its whole life (the main thread of a command).
//!
//! etcdctl's stderr goes to an unnamed temporary file, not a pipe: when this process dies,
//! a pipe's reading end dies with it, and etcdctl, releasing the lock on its parent-death
//! SIGTERM, would be killed by SIGPIPE the moment its client logged a line (Go exits on a
//! broken stderr), leaving the lock held until its lease expired.

use super::command;
use super::error::{ErrorKind, EtcdError};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// How long a released lock's holder gets to delete its key before it is killed.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// A held cluster-wide lock. Released on drop.
#[derive(Debug)]
pub struct ClusterLock {
    child: Option<Child>,
    key: String,
    name: String,
    endpoints: Vec<String>,
    stderr: Stderr,
}

/// Where the holder's stderr goes.
#[derive(Debug)]
enum Stderr {
    /// An unnamed temporary file (`O_TMPFILE`), read when the holder is done.
    File(File),
    /// A pipe drained by a thread, where no temporary file can be made.
    Pipe(Option<thread::JoinHandle<Vec<u8>>>),
}

/// An unnamed temporary file for the holder's stderr, or `None` where the temporary
/// folder's filesystem has no `O_TMPFILE`.
fn stderr_file() -> Option<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_TMPFILE)
        .open(std::env::temp_dir())
        .ok()
}

impl ClusterLock {
    /// Spawns `cmd` (an `etcdctl … lock NAME`) and waits at most `wait` until it holds
    /// the lock.
    pub(super) fn acquire(
        mut cmd: Command,
        name: &str,
        endpoints: &[String],
        wait: Duration,
    ) -> Result<ClusterLock, EtcdError> {
        let what = format!("lock {name}");
        let file = stderr_file();
        if let Some(f) = file.as_ref().and_then(|f| f.try_clone().ok()) {
            cmd.stderr(f);
        }
        let mut child = cmd.spawn().map_err(|e| {
            EtcdError::new(
                ErrorKind::Spawn,
                &what,
                endpoints,
                format!("cannot run etcdctl: {e}"),
            )
        })?;
        let stderr = match file {
            Some(f) => Stderr::File(f),
            None => Stderr::Pipe(
                child
                    .stderr
                    .take()
                    .map(|s| thread::spawn(move || command::drain(s, command::MAX_STDERR, true))),
            ),
        };
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            thread::spawn(move || {
                let mut reader = BufReader::new(out);
                let mut first = String::new();
                let got = matches!(reader.read_line(&mut first), Ok(n) if n > 0);
                let _ = tx.send(got.then(|| first.trim().to_string()));
                // Keep the pipe drained for as long as etcdctl lives.
                let _ = std::io::copy(&mut reader, &mut std::io::sink());
            });
        }
        let mut lock = ClusterLock {
            child: Some(child),
            key: String::new(),
            name: name.to_string(),
            endpoints: endpoints.to_vec(),
            stderr,
        };
        match rx.recv_timeout(wait) {
            Ok(Some(key)) if !key.is_empty() => {
                lock.key = key;
                Ok(lock)
            }
            Ok(_) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                // etcdctl exited without holding the lock: its error line says why.
                let stderr = lock.finish(Duration::from_secs(1));
                Err(EtcdError::from_stderr(
                    &what, endpoints, &stderr, "an error",
                ))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let stderr = lock.finish(Duration::ZERO);
                let said = super::error::error_line(&stderr);
                let said = if said.is_empty() {
                    String::new()
                } else {
                    format!("; etcdctl said: {said}")
                };
                Err(EtcdError::new(
                    ErrorKind::Timeout,
                    &what,
                    endpoints,
                    format!(
                        "not granted within {} s: another holder kept it, or no endpoint \
                         answered{said}",
                        wait.as_secs()
                    ),
                ))
            }
        }
    }

    /// The key etcd holds for us (`NAME/<lease id>`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client URLs the holder talks to.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The holder's process ID while it runs.
    pub fn holder_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the holder still runs (a holder that lost its session exits).
    pub fn is_held(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// `Ok` while the holder runs; else the lost lock as an error naming it, for a caller
    /// about to do what the lock guards (its lease may already be another's).
    pub fn ensure_held(&mut self) -> Result<(), EtcdError> {
        if self.is_held() {
            return Ok(());
        }
        Err(EtcdError::new(
            ErrorKind::Other,
            &format!("lock {}", self.name),
            &self.endpoints,
            "the lock's holder (etcdctl lock) ended: its session is gone and another node may hold the lock now",
        ))
    }

    /// Releases the lock now: etcdctl deletes its key and exits.
    pub fn release(mut self) {
        self.finish(RELEASE_WAIT);
    }

    /// SIGTERM, `grace` to exit, then SIGKILL; returns its stderr.
    fn finish(&mut self, grace: Duration) -> Vec<u8> {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            if !command::wait_exited(&child, grace) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        match &mut self.stderr {
            Stderr::File(f) => {
                // Its last MAX_STDERR bytes: the error line is at the end.
                let len = f.metadata().map_or(0, |m| m.len());
                let from = len.saturating_sub(command::MAX_STDERR as u64);
                let mut bytes = Vec::new();
                if f.seek(SeekFrom::Start(from)).is_ok() {
                    let _ = f.read_to_end(&mut bytes);
                }
                bytes
            }
            Stderr::Pipe(t) => t.take().and_then(|t| t.join().ok()).unwrap_or_default(),
        }
    }
}

impl Drop for ClusterLock {
    fn drop(&mut self) {
        self.finish(RELEASE_WAIT);
    }
}
