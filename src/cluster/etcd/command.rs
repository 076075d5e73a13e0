//! Running `etcdctl` (or `etcdutl`) as a child process: bounded in time and output, killed
//! with us, its error line kept.
//!
//! Every call has two bounds: etcdctl's own `--dial-timeout`/`--command-timeout`, and our
//! deadline, after which the child is killed (SIGKILL) and the call fails with
//! [`ErrorKind::Timeout`]. stdout and stderr are read by one thread each into capped
//! buffers; what passes the cap is read and dropped, so a chatty child can neither block
//! on a full pipe nor grow our memory. The child gets `PR_SET_PDEATHSIG` in `pre_exec`:
//! when the thread that spawned it dies (and with it this process), the kernel kills it.

use super::error::{ErrorKind, EtcdError};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// The most of a child's stdout kept (a member list of hundreds of members fits).
pub const MAX_STDOUT: usize = 4 << 20;
/// The most of a child's stderr kept: the last lines are what matter.
pub const MAX_STDERR: usize = 64 << 10;

/// What a finished child left.
#[derive(Debug)]
pub struct Output {
    /// Its exit status.
    pub status: ExitStatus,
    /// stdout, at most [`MAX_STDOUT`] bytes.
    pub stdout: Vec<u8>,
    /// stderr, at most [`MAX_STDERR`] bytes.
    pub stderr: Vec<u8>,
}

/// What the error of an etcd tool killed at its deadline says (the time follows): a
/// member that answered too late for it, as etcdctl's own `context deadline exceeded`.
pub const NOT_IN_TIME: &str = "did not finish within";

/// A `Command` for `program` with a clean environment (no inherited `ETCDCTL_*` setting
/// can change what we asked for), no stdin, piped output, and death with the spawning
/// thread (`signal` is sent to it then).
pub fn command(program: &Path, signal: nix::sys::signal::Signal) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("ETCDCTL_API", "3")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let parent = nix::unistd::getpid();
    // SAFETY: between fork and exec only async-signal-safe system calls are made (prctl,
    // getppid, _exit); nothing allocates or takes a lock.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Some(signal)).map_err(std::io::Error::from)?;
            // The parent may have died between fork and prctl: then nobody would kill us.
            if nix::unistd::getppid() != parent {
                nix::libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd
}

/// Reads `reader` to its end, keeping the first `cap` bytes (stdout) or the last `cap`
/// bytes (stderr, `keep_tail`).
pub fn drain(mut reader: impl Read, cap: usize, keep_tail: bool) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > cap {
                    if keep_tail {
                        let cut = kept.len() - cap;
                        kept.drain(..cut);
                    } else {
                        kept.truncate(cap);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    kept
}

/// Runs `cmd` to its end or until `deadline` passed, then kills it. `what` and
/// `endpoints` name the call in errors.
pub fn run(
    mut cmd: Command,
    deadline: Duration,
    what: &str,
    endpoints: &[String],
) -> Result<Output, EtcdError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd.spawn().map_err(|e| {
        EtcdError::new(
            ErrorKind::Spawn,
            what,
            endpoints,
            format!("cannot run {program}: {e}"),
        )
    })?;
    let out = child
        .stdout
        .take()
        .map(|s| thread::spawn(move || drain(s, MAX_STDOUT, false)));
    let err = child
        .stderr
        .take()
        .map(|s| thread::spawn(move || drain(s, MAX_STDERR, true)));
    let exited = wait_exited(&child, deadline);
    if !exited {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| {
        EtcdError::new(
            ErrorKind::Spawn,
            what,
            endpoints,
            format!("waiting for {program}: {e}"),
        )
    })?;
    let stdout = out.and_then(|t| t.join().ok()).unwrap_or_default();
    let stderr = err.and_then(|t| t.join().ok()).unwrap_or_default();
    if !exited {
        let line = super::error::error_line(&stderr);
        let tail = if line.is_empty() {
            String::new()
        } else {
            format!("; it said: {line}")
        };
        return Err(EtcdError::new(
            ErrorKind::Timeout,
            what,
            endpoints,
            format!(
                "{program} {NOT_IN_TIME} {} s and was killed{tail}",
                deadline.as_secs_f32()
            ),
        ));
    }
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Waits until `child` exited (without reaping it, so its PID stays ours to kill) or
/// `deadline` passed; true when it exited.
pub fn wait_exited(child: &Child, deadline: Duration) -> bool {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        use nix::sys::wait::{waitid, Id, WaitPidFlag};
        while let Err(nix::errno::Errno::EINTR) =
            waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
        {}
        let _ = tx.send(());
    });
    rx.recv_timeout(deadline).is_ok()
}
