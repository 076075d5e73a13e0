//! `etcd-setup serve-status`: the server behind the status socket.
//!
//! Started by systemd on the first connection (`etcd-setup-status.socket`, `Accept=no`),
//! it takes the listening socket from systemd (`LISTEN_FDS`, fd 3), answers, and exits
//! after being idle, so nothing of ours runs between queries. Without `LISTEN_FDS` it binds
//! the path itself (tests, or by hand).
//!
//! One thread per connection, at most [`MAX_CLIENTS`] at once; beyond that a client gets
//! a `busy` error at once. Each connection reads its request under a 2 s deadline and at
//! most 4 KiB, so a client that never writes, writes megabytes or garbage holds only its
//! own thread, for at most 2 s. Threads rather than a poll loop: an answer may block on
//! D-Bus or on etcd's health endpoint (bounded, but seconds), and `--wait` parks a
//! connection for minutes; a thread each keeps every one of them out of the others' way
//! with plain blocking code. A thread costs a small stack ([`STACK`]).
//!
//! `--wait` is pushed: one inotify watch on the live state folder bumps a generation
//! counter; waiting connections sleep on a condition variable and re-evaluate on every
//! change (and at least every second, since a run that dies by SIGKILL writes nothing).

use super::{
    evaluate, pid_alive, ErrorBody, LiveView, Reply, Request, MAX_REQUEST, MAX_WAIT,
    PROTOCOL_VERSION, REQUEST_TIMEOUT,
};
use crate::report::StateStore;
use anyhow::{bail, Context};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use nix::unistd::{Gid, Group, Uid, User};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, FromRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Connections served at once; more get `busy`.
pub const MAX_CLIENTS: usize = 256;
/// Stack of a connection's thread.
const STACK: usize = 256 * 1024;
/// How long writing a reply may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// A waiting connection re-evaluates at least this often.
const RECHECK: Duration = Duration::from_secs(1);

/// What the server needs.
pub struct Options {
    /// The state files.
    pub store: StateStore,
    /// The group allowed besides root.
    pub group: String,
    /// Exit after this long without connections; `None`: never.
    pub idle_exit: Option<Duration>,
}

/// Who may ask: root and the members of one group.
pub struct Access {
    group: String,
    gid: Option<Gid>,
    members: Vec<String>,
}

impl Access {
    /// Resolves `group` in the group database; an unknown group admits only root.
    pub fn new(group: &str) -> Access {
        let found = Group::from_name(group).ok().flatten();
        Access {
            group: group.to_string(),
            gid: found.as_ref().map(|g| g.gid),
            members: found.map(|g| g.mem).unwrap_or_default(),
        }
    }

    /// Whether a peer with `uid` and (effective) `gid` may ask: root; a peer whose gid,
    /// or whose user's primary group, is the group; a user listed in the group.
    pub fn allows(&self, uid: Uid, gid: Gid) -> bool {
        if uid.is_root() {
            return true;
        }
        let Some(group_gid) = self.gid else {
            return false;
        };
        if gid == group_gid {
            return true;
        }
        match User::from_uid(uid) {
            Ok(Some(user)) => user.gid == group_gid || self.members.contains(&user.name),
            _ => false,
        }
    }

    /// The refusal.
    pub fn refusal(&self, uid: Uid) -> ErrorBody {
        ErrorBody::new(
            "forbidden",
            format!(
                "uid {uid} may not query etcd-setup status: only root and members of group {} may query etcd-setup status",
                self.group
            ),
        )
    }
}

/// Counts changes to the state folder; waiters sleep until it moves.
#[derive(Default)]
pub struct Changes {
    generation: Mutex<u64>,
    changed: Condvar,
}

impl Changes {
    /// The current generation.
    pub fn generation(&self) -> u64 {
        *self.generation.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the generation on and wakes every waiter.
    pub fn bump(&self) {
        *self.generation.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.changed.notify_all();
    }

    /// Waits until the generation differs from `seen`, or `timeout` passed.
    pub fn wait_past(&self, seen: u64, timeout: Duration) {
        let guard = self.generation.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self
            .changed
            .wait_timeout_while(guard, timeout, |g| *g == seen);
    }
}

/// Watches `dir` (created when missing) for new or replaced files in a thread of its own,
/// bumping `changes` on each. Fails when inotify is not available; waiters then still
/// re-check every second.
pub fn watch(dir: &Path, changes: Arc<Changes>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC).context("cannot start inotify")?;
    inotify
        .add_watch(
            dir,
            AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_DELETE,
        )
        .with_context(|| format!("cannot watch {}", dir.display()))?;
    std::thread::Builder::new()
        .name("status-watch".into())
        .stack_size(STACK)
        .spawn(move || loop {
            match inotify.read_events() {
                Ok(_) => changes.bump(),
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return,
            }
        })
        .context("cannot start the watch thread")?;
    Ok(())
}

/// The listening socket systemd passed (`LISTEN_PID` is this process, `LISTEN_FDS` ≥ 1:
/// fd 3), made close-on-exec; the variables are removed so no child sees them. `None`
/// when systemd passed nothing.
pub fn socket_from_systemd() -> anyhow::Result<Option<UnixListener>> {
    let (Some(pid), Some(fds)) = (
        std::env::var_os("LISTEN_PID"),
        std::env::var_os("LISTEN_FDS"),
    ) else {
        return Ok(None);
    };
    if pid.to_str().and_then(|p| p.parse::<u32>().ok()) != Some(std::process::id()) {
        return Ok(None);
    }
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    let count: u32 = fds
        .to_str()
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("LISTEN_FDS={fds:?} is not a number"))?;
    if count == 0 {
        return Ok(None);
    }
    const FIRST: i32 = 3;
    let stat = nix::sys::stat::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(FIRST) })
        .context("systemd passed fd 3, but it is not open")?;
    if stat.st_mode & libc_s_ifmt() != libc_s_ifsock() {
        bail!("systemd passed fd 3, but it is not a socket");
    }
    // SAFETY: fd 3 is open (fstat succeeded), a socket, and ours alone from here on:
    // systemd hands it to this process, and nothing else in it uses fd 3.
    let listener = unsafe { UnixListener::from_raw_fd(FIRST) };
    nix::fcntl::fcntl(
        &listener,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .context("cannot make the passed socket close-on-exec")?;
    Ok(Some(listener))
}

fn libc_s_ifmt() -> u32 {
    nix::sys::stat::SFlag::S_IFMT.bits()
}

fn libc_s_ifsock() -> u32 {
    nix::sys::stat::SFlag::S_IFSOCK.bits()
}

/// Binds `path`, replacing a stale socket left there, mode 0666 (access is decided by
/// peer credentials, so everyone gets a clear refusal rather than EACCES).
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    match UnixStream::connect(path) {
        Ok(_) => bail!("{} is already served by another process", path.display()),
        Err(_) => {
            use std::os::unix::fs::FileTypeExt;
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot chmod {}", path.display()))?;
    Ok(listener)
}

/// What every connection shares.
struct Shared {
    store: StateStore,
    access: Access,
    live: Arc<dyn LiveView>,
    changes: Arc<Changes>,
    active: AtomicUsize,
    last_activity: Mutex<Instant>,
}

/// Serves `listener` until idle for `options.idle_exit` (never, when `None`).
pub fn serve(
    listener: UnixListener,
    options: Options,
    live: Arc<dyn LiveView>,
) -> anyhow::Result<()> {
    let changes = Arc::new(Changes::default());
    let run_path = options.store.run_path();
    let run_dir = run_path.parent().unwrap_or(Path::new("/"));
    if let Err(e) = watch(run_dir, Arc::clone(&changes)) {
        eprintln!("etcd-setup serve-status: {e:#}; --wait re-checks every second instead");
    }
    let shared = Arc::new(Shared {
        store: options.store,
        access: Access::new(&options.group),
        live,
        changes,
        active: AtomicUsize::new(0),
        last_activity: Mutex::new(Instant::now()),
    });
    listener
        .set_nonblocking(true)
        .context("cannot make the socket non-blocking")?;
    loop {
        let mut fds = [nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let tick = nix::poll::PollTimeout::from(500u16);
        match nix::poll::poll(&mut fds, tick) {
            Ok(0) => {
                if let Some(idle) = options.idle_exit {
                    let last = *shared
                        .last_activity
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    if shared.active.load(Ordering::SeqCst) == 0 && last.elapsed() >= idle {
                        return Ok(());
                    }
                }
                continue;
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).context("cannot poll the status socket"),
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => admit(stream, &shared),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE and the like: let connections finish, then try again.
                    eprintln!("etcd-setup serve-status: accept: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    break;
                }
            }
        }
    }
}

/// Gives `stream` a thread, or a `busy` reply when too many are served.
fn admit(stream: UnixStream, shared: &Arc<Shared>) {
    *shared
        .last_activity
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Instant::now();
    if shared.active.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
        shared.active.fetch_sub(1, Ordering::SeqCst);
        refuse_busy(stream);
        return;
    }
    let for_thread = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || {
            let _done = Done(&for_thread);
            serve_one(stream, &for_thread);
        });
    if spawned.is_err() {
        shared.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a connection out when its thread ends, however it ends.
struct Done<'a>(&'a Shared);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        *self
            .0
            .last_activity
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

fn refuse_busy(stream: UnixStream) {
    let reply = Reply::Error(ErrorBody::new(
        "busy",
        format!("{MAX_CLIENTS} queries are being answered; try again"),
    ));
    // Never block the accepting thread: one try, into the socket's buffer.
    let _ = stream.set_nonblocking(true);
    let _ = (&stream).write(&reply.to_line());
}

/// One connection: credentials, request, answer.
fn serve_one(mut stream: UnixStream, shared: &Shared) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let request = read_request(&mut stream);
    let reply = match request {
        Err(e) => Reply::Error(e),
        Ok(bytes) => answer(&stream, &bytes, shared),
    };
    let _ = stream.write_all(&reply.to_line());
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

fn answer(stream: &UnixStream, bytes: &[u8], shared: &Shared) -> Reply {
    let creds = match getsockopt(stream, PeerCredentials) {
        Ok(c) => c,
        Err(e) => {
            return Reply::Error(ErrorBody::new(
                "internal-error",
                format!("cannot read the peer's credentials: {e}"),
            ))
        }
    };
    let (uid, gid) = (Uid::from_raw(creds.uid()), Gid::from_raw(creds.gid()));
    if !shared.access.allows(uid, gid) {
        return Reply::Error(shared.access.refusal(uid));
    }
    let request = match parse_request(bytes) {
        Ok(r) => r,
        Err(e) => return Reply::Error(e),
    };
    let live_copy = shared.store.run_path();
    let look = || {
        evaluate(
            &shared.store.load_detailed(),
            &live_copy,
            shared.live.as_ref(),
            &pid_alive,
        )
    };
    if !request.wait {
        return Reply::Answer(Box::new(look()));
    }
    let deadline = Instant::now() + Duration::from_millis(request.timeout_ms).min(MAX_WAIT);
    loop {
        // The generation before the look: a change during it wakes the next wait.
        let seen = shared.changes.generation();
        let answer = look();
        let now = Instant::now();
        if answer.verdict.is_terminal() || now >= deadline {
            return Reply::Answer(Box::new(answer));
        }
        if hung_up(stream) {
            // Nobody to answer: free the connection's slot now, not at the deadline.
            return Reply::Error(ErrorBody::new("gone", "the client hung up while waiting"));
        }
        shared
            .changes
            .wait_past(seen, (deadline - now).min(RECHECK));
    }
}

/// Whether the client closed its end entirely (a waiting client that gave up). POLLHUP
/// comes only when both directions are shut, so a client that only half-closed (shut its
/// write side after the request) still gets its answer.
fn hung_up(stream: &UnixStream) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(stream.as_fd(), PollFlags::empty())];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// Reads one request line: at most [`MAX_REQUEST`] bytes within [`REQUEST_TIMEOUT`].
fn read_request(stream: &mut UnixStream) -> Result<Vec<u8>, ErrorBody> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    let mut len = 0;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(timeout_error());
        }
        let _ = stream.set_read_timeout(Some(deadline - now));
        match stream.read(&mut buf[len..]) {
            Ok(0) => {
                if len == 0 {
                    return Err(ErrorBody::new(
                        "bad-request",
                        "the connection closed before a request arrived",
                    ));
                }
                buf.truncate(len);
                return Ok(buf);
            }
            Ok(n) => {
                if let Some(end) = buf[len..len + n].iter().position(|&b| b == b'\n') {
                    buf.truncate(len + end);
                    return Ok(buf);
                }
                len += n;
                if len > MAX_REQUEST - 1 {
                    return Err(ErrorBody::new(
                        "request-too-large",
                        format!("a request is one line of at most {MAX_REQUEST} bytes"),
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timeout_error())
            }
            Err(e) => {
                return Err(ErrorBody::new(
                    "bad-request",
                    format!("cannot read the request: {e}"),
                ))
            }
        }
    }
}

fn timeout_error() -> ErrorBody {
    ErrorBody::new(
        "request-timeout",
        format!(
            "no complete request line within {} s of connecting",
            REQUEST_TIMEOUT.as_secs()
        ),
    )
}

/// Parses a request line and checks its version.
pub fn parse_request(bytes: &[u8]) -> Result<Request, ErrorBody> {
    let request: Request = serde_json::from_slice(bytes).map_err(|e| {
        ErrorBody::new(
            "bad-request",
            format!(
                "the request is not JSON like {{\"version\":{PROTOCOL_VERSION},\"wait\":false,\"timeout_ms\":0}}: {e}"
            ),
        )
    })?;
    if request.version != PROTOCOL_VERSION {
        return Err(ErrorBody::new(
            "unsupported-version",
            format!(
                "protocol version {} is not served; this server speaks version {PROTOCOL_VERSION}",
                request.version
            ),
        ));
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests_and_refuses_other_versions_and_garbage() {
        let r = parse_request(br#"{"version":1,"wait":true,"timeout_ms":5}"#).unwrap();
        assert!(r.wait && r.timeout_ms == 5);
        let r = parse_request(br#"{"version":1}"#).unwrap();
        assert!(!r.wait);
        assert_eq!(
            parse_request(br#"{"version":2}"#).unwrap_err().code,
            "unsupported-version"
        );
        assert_eq!(parse_request(b"hello").unwrap_err().code, "bad-request");
    }

    #[test]
    fn root_is_always_allowed_and_an_unknown_group_admits_no_one_else() {
        let access = Access::new("no-such-group-etcd-setup");
        assert!(access.allows(Uid::from_raw(0), Gid::from_raw(0)));
        assert!(!access.allows(Uid::from_raw(65534), Gid::from_raw(65534)));
        let refusal = access.refusal(Uid::from_raw(65534));
        assert_eq!(refusal.code, "forbidden");
        assert!(refusal
            .message
            .contains("only root and members of group no-such-group-etcd-setup"));
    }

    #[test]
    fn a_change_wakes_a_waiter() {
        let changes = Arc::new(Changes::default());
        let seen = changes.generation();
        let bumper = Arc::clone(&changes);
        let t = std::thread::spawn(move || bumper.bump());
        changes.wait_past(seen, Duration::from_secs(30));
        t.join().unwrap();
        assert_ne!(changes.generation(), seen);
    }
}
