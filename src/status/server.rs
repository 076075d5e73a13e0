//! `etcd-setup serve-status`: the server behind the status socket.
//!
//! Started by systemd on the first connection (`etcd-setup-status.socket`, `Accept=no`),
//! it takes the listening socket from systemd (`LISTEN_FDS`, fd 3), answers, and exits
//! after being idle, so nothing of ours runs between queries. Without `LISTEN_FDS` it binds
//! the path itself (tests, or by hand).
//!
//! # Design: one event loop, one evaluator
//!
//! One thread (the loop) polls the listening socket, every open connection, the inotify
//! watch and a wake-up socket. It accepts, checks the peer's credentials, reads each
//! request without blocking (at most 4 KiB, within 2 s of connecting), parses, and writes
//! replies; it never waits on anything but `poll`. So a client that never writes, that
//! writes megabytes or garbage, costs the others a few microseconds of the loop's time
//! and one slot, never a wait. At most [`MAX_CLIENTS`] connections are held open at once
//! (reading, waiting for their answer, `--wait`ing, or writing); beyond that a client gets
//! a `busy` error at once, unless some slots only wait for the evaluation under way: then
//! new clients stay in the listen backlog a moment, so a burst is answered, not refused.
//!
//! Answers come from a second thread (the evaluator), because building one may block: the
//! live view asks systemd over D-Bus and etcd's health endpoint (bounded, but seconds).
//! Every request that needs an answer is served by an evaluation that *began after the
//! request was read*, so an answer is never older than its question: the same freshness
//! as evaluating per request, which the server did before. Requests that arrive while
//! one evaluation runs share the next, so under a burst one evaluation answers hundreds.
//! An evaluation reuses the parsed live state file while the inotify watch on its folder
//! reports no change (the persistent copy, read only when the live one is missing, is
//! read every time; a copy that cannot be read is read again every time too): inotify queues its events within the writer's own rename,
//! and the evaluator reads the queue before deciding, so a change made before a request
//! is always seen. Each evaluation still checks the run's PID (a run killed by SIGKILL
//! writes nothing) and asks the live view, which caches its own look (500 ms on a node).
//! Without a working watch it re-reads the files every time.
//!
//! `--wait` is pushed: a waiting connection stays in the loop; every change the watch
//! reports (and at least every second, for a run that dies by SIGKILL) asks for a new
//! evaluation, and the waiter is answered once the verdict is terminal or its time is up.
//! A waiter that hangs up is dropped at once, freeing its slot.
//!
//! # Who holds a slot
//!
//! The socket is 0666 so that anyone gets a clear refusal; so anyone can connect. The
//! peer's credentials (`SO_PEERCRED`) are known the moment a connection is accepted, and
//! are looked at then: a peer that is neither root nor of the group is told `forbidden`
//! at once (one non-blocking write into the socket's buffer) and closed. It never holds a
//! slot nor a read deadline, so an outsider's flood of silent connections, reconnecting
//! as each is closed, costs the loop an accept, a `getsockopt` and a close per
//! connection, and root and the group are answered throughout.
//!
//! The group's own clients could still take every slot (silent, or `--wait`ing for an
//! hour). [`ROOT_RESERVE`] slots are kept for root: the group may hold at most
//! `MAX_CLIENTS - ROOT_RESERVE` connections, root all of them. A reserve rather than a
//! bound per uid, because the group's honest client is usually one uid (the management
//! server's) that may rightly hold many connections, and a per-uid bound would turn its
//! burst into `busy`; while what must never be starved is root, the operator on the node,
//! whose `status` is how a flood is diagnosed. A burst that outruns one evaluation still
//! waits in the listen backlog rather than being told `busy` (see above), for root and
//! the group alike.
//!
//! The loop's one call that is not on a socket: for a peer that is neither root nor of
//! the group by its gid, the user database (`getpwuid`, a local file on the node); its
//! verdict is kept for [`ACCESS_TTL`], so a flood does not read the file per connection.

mod access;
mod evaluator;
mod socket;
mod watch;

pub use access::Access;
pub use socket::{bind, socket_from_systemd};
pub use watch::Watch;

use evaluator::{evaluator, Evaluated, Evaluations, StopOnDrop};

use super::{
    evaluate, pid_alive, ErrorBody, LiveView, Reply, Request, SystemLive, MAX_REQUEST, MAX_WAIT,
    PROTOCOL_VERSION, REQUEST_TIMEOUT,
};
use crate::cli::ServeStatusArgs;
use crate::shared::report::StateStore;
use crate::{exit, shared::config};
use anyhow::Context;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use nix::unistd::{Gid, Uid};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections held open at once; more get `busy`.
pub const MAX_CLIENTS: usize = 256;
/// Of [`MAX_CLIENTS`], the slots only root may take: the group holds at most the rest.
pub const ROOT_RESERVE: usize = 32;
/// How long a peer's admission (by uid and gid) is remembered.
const ACCESS_TTL: Duration = Duration::from_secs(5);
/// Connections accepted per turn of the loop before it serves those it holds: a burst
/// of clients is taken in slices, so the first are answered (and their slots freed)
/// while later ones still queue in the kernel, instead of all waiting for the last.
const ACCEPT_BATCH: usize = 32;
/// How long writing a reply may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// A waiting connection re-evaluates at least this often.
const RECHECK: Duration = Duration::from_secs(1);
/// The loop wakes at least this often, to notice idleness.
const TICK: Duration = Duration::from_millis(500);
/// Stack of the evaluator thread.
const STACK: usize = 256 * 1024;

/// What the server needs.
pub struct Options {
    /// The state files.
    pub store: StateStore,
    /// The group allowed besides root.
    pub group: String,
    /// Exit after this long without connections; `None`: never.
    pub idle_exit: Option<Duration>,
    /// The `[tls]` files to show and judge; `None` without `[tls]` (or a configuration).
    pub tls: Option<crate::shared::config::certs::Policy>,
    /// `backup.period` when `[backup]` is configured: the answer then has its block.
    pub backup_period: Option<Duration>,
}

/// Where a connection is.
enum Stage {
    /// Reading its request line (what came so far).
    Reading(Vec<u8>),
    /// Its request is read: it wants the reply of an evaluation numbered `ticket` or
    /// later (0: not asked for yet). `until`: a `--wait`, and when it ends.
    Asking { ticket: u64, until: Option<Instant> },
    /// A `--wait` whose last answer was not terminal: parked until the state changes, the
    /// next re-check, or `until`.
    Waiting { until: Instant },
    /// Writing its reply, `at` bytes of it written.
    Writing { line: Arc<[u8]>, at: usize },
    /// Done: removed at the end of the turn.
    Closed,
}

struct Conn {
    stream: UnixStream,
    stage: Stage,
    /// Until when it may read (its request) or write (its reply).
    deadline: Instant,
}

impl Conn {
    /// What `poll` should watch for. A parked connection polls for nothing: `poll` still
    /// reports POLLHUP, which comes only when the client closed both directions (a
    /// client that only shut its write side after the request still gets its answer).
    fn interest(&self) -> PollFlags {
        match self.stage {
            Stage::Reading(_) => PollFlags::POLLIN,
            Stage::Writing { .. } => PollFlags::POLLOUT,
            _ => PollFlags::empty(),
        }
    }
}

/// The loop's state.
struct Server {
    access: Access,
    /// Admissions decided lately, by (uid, gid), with when.
    admitted: std::collections::HashMap<(u32, u32), (bool, Instant)>,
    evaluations: Arc<Evaluations>,
    watch: Arc<Watch>,
    conns: Vec<Conn>,
    /// The last evaluation the loop handed out.
    last: Option<Evaluated>,
    /// When a parked `--wait` was last (re)considered.
    rechecked: Instant,
    /// The watch generation the parked waiters have seen.
    generation: u64,
    last_activity: Instant,
    scratch: Vec<u8>,
}

/// Serves `listener` until idle for `options.idle_exit` (never, when `None`).
pub fn serve(
    listener: UnixListener,
    options: Options,
    live: Arc<dyn LiveView>,
) -> anyhow::Result<()> {
    let run_path = options.store.run_path();
    let run_dir = run_path.parent().unwrap_or(Path::new("/"));
    let watch = Arc::new(Watch::new(run_dir).unwrap_or_else(|e| {
        eprintln!(
            "etcd-setup serve-status: {e:#}; state files are read on every query, --wait re-checks every second"
        );
        Watch::absent()
    }));
    let (wake_rx, wake_tx) = UnixStream::pair().context("cannot make the wake-up socket")?;
    wake_rx
        .set_nonblocking(true)
        .and_then(|()| wake_tx.set_nonblocking(true))
        .context("cannot make the wake-up socket non-blocking")?;
    listener
        .set_nonblocking(true)
        .context("cannot make the socket non-blocking")?;
    let evaluations = Arc::new(Evaluations::default());
    let _stop = StopOnDrop(Arc::clone(&evaluations));
    {
        let (evaluations, watch) = (Arc::clone(&evaluations), Arc::clone(&watch));
        let store = options.store.clone();
        let tls = options.tls.clone();
        let backup = options.backup_period;
        std::thread::Builder::new()
            .name("status-eval".into())
            .stack_size(STACK)
            .spawn(move || evaluator(evaluations, store, (tls, backup), live, watch, wake_tx))
            .context("cannot start the evaluator thread")?;
    }
    let now = Instant::now();
    let mut server = Server {
        access: Access::new(&options.group),
        admitted: std::collections::HashMap::new(),
        evaluations,
        generation: watch.current().0,
        watch,
        conns: Vec::new(),
        last: None,
        rechecked: now,
        last_activity: now,
        scratch: vec![0; MAX_REQUEST + 1],
    };
    loop {
        let now = Instant::now();
        if let Some(idle) = options.idle_exit {
            if server.conns.is_empty() && now >= server.last_activity + idle {
                return Ok(());
            }
        }
        let timeout = server.timeout(now);
        let (listening, woken, changed, revents) = {
            let watch_fd = server.watch.fd();
            let mut fds = Vec::with_capacity(server.conns.len() + 3);
            let accepting = if server.holds_back() {
                PollFlags::empty()
            } else {
                PollFlags::POLLIN
            };
            fds.push(PollFd::new(listener.as_fd(), accepting));
            fds.push(PollFd::new(wake_rx.as_fd(), PollFlags::POLLIN));
            if let Some(fd) = watch_fd {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
            let first = fds.len();
            fds.extend(
                server
                    .conns
                    .iter()
                    .map(|c| PollFd::new(c.stream.as_fd(), c.interest())),
            );
            match nix::poll::poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e).context("cannot poll the status socket"),
            }
            let ready = |i: usize| fds[i].revents().unwrap_or(PollFlags::empty());
            let revents: Vec<PollFlags> = (first..fds.len()).map(ready).collect();
            (
                !ready(0).is_empty(),
                !ready(1).is_empty(),
                first == 3 && !ready(2).is_empty(),
                revents,
            )
        };
        let now = Instant::now();
        if woken {
            while let Ok(n) = (&wake_rx).read(&mut server.scratch) {
                if n == 0 {
                    break;
                }
            }
        }
        if changed || woken {
            // Also after an evaluation: the evaluator may have drained the watch's events
            // before this loop saw its fd readable.
            server.state_changed();
        }
        for (i, ready) in revents.into_iter().enumerate() {
            if !ready.is_empty() {
                server.ready(i, ready, now);
            }
        }
        if woken {
            server.answer(now);
        }
        server.expire(now);
        if listening && !server.holds_back() {
            server.accept(&listener, now);
        }
        server.ask();
        let before = server.conns.len();
        server.conns.retain(|c| !matches!(c.stage, Stage::Closed));
        if server.conns.len() != before {
            server.last_activity = now;
        }
    }
}

impl Server {
    /// Until the next deadline, the next re-check of waiters, or the idle tick.
    fn timeout(&self, now: Instant) -> PollTimeout {
        let mut next = now + TICK;
        for c in &self.conns {
            let at = match c.stage {
                Stage::Reading(_) | Stage::Writing { .. } => c.deadline,
                Stage::Waiting { until } => until.min(self.rechecked + RECHECK),
                _ => continue,
            };
            next = next.min(at);
        }
        // Rounded up: a deadline 0.4 ms away must not become a busy spin.
        let micros = next.saturating_duration_since(now).as_micros();
        PollTimeout::try_from(micros.div_ceil(1000)).unwrap_or(PollTimeout::MAX)
    }

    /// The state folder changed: every parked waiter asks again.
    fn state_changed(&mut self) {
        let (generation, _) = self.watch.current();
        if generation == self.generation {
            return;
        }
        self.generation = generation;
        for c in &mut self.conns {
            if let Stage::Waiting { until } = c.stage {
                c.stage = Stage::Asking {
                    ticket: 0,
                    until: Some(until),
                };
            }
        }
    }

    /// Connection `i` is ready for what it polled, or was hung up on.
    fn ready(&mut self, i: usize, ready: PollFlags, now: Instant) {
        let hung_up = ready.intersects(PollFlags::POLLHUP | PollFlags::POLLERR);
        match self.conns[i].stage {
            Stage::Reading(_) => self.read(i, now),
            Stage::Writing { .. } => write_more(&mut self.conns[i]),
            // Nobody to answer: free the slot now, not at the deadline.
            Stage::Asking { .. } | Stage::Waiting { .. } if hung_up => {
                self.conns[i].stage = Stage::Closed
            }
            _ => {}
        }
    }

    /// Reads what connection `i` sent; once its request is complete, or refused, moves on.
    fn read(&mut self, i: usize, now: Instant) {
        let conn = &mut self.conns[i];
        let Stage::Reading(buf) = &mut conn.stage else {
            return;
        };
        let outcome = match read_some(&mut conn.stream, buf, &mut self.scratch) {
            None => return,
            Some(outcome) => outcome,
        };
        let next = outcome.and_then(|line| self.check(&line, now));
        let conn = &mut self.conns[i];
        match next {
            Ok(stage) => conn.stage = stage,
            Err(e) => reply(conn, Reply::Error(e).to_line().into(), now),
        }
    }

    /// What is asked: the stage a complete request line leads to (who asks was decided
    /// at accept).
    fn check(&self, line: &[u8], now: Instant) -> Result<Stage, ErrorBody> {
        let request = parse_request(line)?;
        let until = request
            .wait
            .then(|| now + Duration::from_millis(request.timeout_ms).min(MAX_WAIT));
        Ok(Stage::Asking { ticket: 0, until })
    }

    /// Whether the peer of `stream` may ask, and whether it is root; `Err` with the
    /// refusal otherwise.
    fn admit(&mut self, stream: &UnixStream, now: Instant) -> Result<bool, ErrorBody> {
        let creds = getsockopt(stream, PeerCredentials).map_err(|e| {
            ErrorBody::new(
                "internal-error",
                format!("cannot read the peer's credentials: {e}"),
            )
        })?;
        let (uid, gid) = (Uid::from_raw(creds.uid()), Gid::from_raw(creds.gid()));
        if uid.is_root() {
            return Ok(true);
        }
        let key = (creds.uid(), creds.gid());
        let allowed = match self.admitted.get(&key) {
            Some(&(allowed, at)) if now < at + ACCESS_TTL => allowed,
            _ => {
                if self.admitted.len() >= 1024 {
                    self.admitted.clear();
                }
                let allowed = self.access.allows(uid, gid);
                self.admitted.insert(key, (allowed, now));
                allowed
            }
        };
        if allowed {
            Ok(false)
        } else {
            Err(self.access.refusal(uid))
        }
    }

    /// Hands the newest evaluation to every connection it serves.
    fn answer(&mut self, now: Instant) {
        let Some(done) = self.evaluations.take_done() else {
            return;
        };
        if self.last.as_ref().is_some_and(|l| l.ticket == done.ticket) {
            return;
        }
        let mut parked = false;
        let generation = self.generation;
        for c in &mut self.conns {
            let Stage::Asking { ticket, until } = c.stage else {
                continue;
            };
            if ticket == 0 || ticket > done.ticket {
                continue; // asked after this evaluation began
            }
            match until {
                // The state changed after this evaluation read it: the waiter asks again
                // now rather than at the next re-check.
                Some(until) if !done.terminal && now < until && done.generation != generation => {
                    c.stage = Stage::Asking {
                        ticket: 0,
                        until: Some(until),
                    };
                }
                Some(until) if !done.terminal && now < until => {
                    c.stage = Stage::Waiting { until };
                    parked = true;
                }
                _ => reply(c, Arc::clone(&done.line), now),
            }
        }
        if parked {
            self.rechecked = now;
        }
        self.last = Some(done);
    }

    /// Ends what ran out of time; re-checks parked waiters when due.
    fn expire(&mut self, now: Instant) {
        let recheck = now >= self.rechecked + RECHECK;
        for c in &mut self.conns {
            match c.stage {
                Stage::Reading(_) if now >= c.deadline => {
                    reply(c, Reply::Error(timeout_error()).to_line().into(), now)
                }
                Stage::Writing { .. } if now >= c.deadline => c.stage = Stage::Closed,
                // Its time is up (answered with a fresh look), or a run may have died
                // without a trace: ask again.
                Stage::Waiting { until } if recheck || now >= until => {
                    c.stage = Stage::Asking {
                        ticket: 0,
                        until: Some(until),
                    }
                }
                _ => {}
            }
        }
    }

    /// Accepts up to [`ACCEPT_BATCH`] connections: each peer's credentials are looked at
    /// first (a refused one never holds a slot), then what each has sent is read at once.
    fn accept(&mut self, listener: &UnixListener, now: Instant) {
        for _ in 0..ACCEPT_BATCH {
            if self.holds_back() {
                return;
            }
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and the like: the connection stays queued; serve those held.
                    eprintln!("etcd-setup serve-status: accept: {e}");
                    return;
                }
            };
            let root = match self.admit(&stream, now) {
                Ok(root) => root,
                Err(refusal) => {
                    refuse(stream, &refusal);
                    continue;
                }
            };
            self.last_activity = now;
            if self.is_full(root) {
                refuse_busy(stream, root);
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue; // cannot serve it without blocking the loop: closed
            }
            self.conns.push(Conn {
                stream,
                stage: Stage::Reading(Vec::new()),
                deadline: now + REQUEST_TIMEOUT,
            });
            // A client usually writes its request right after connecting: read it now
            // rather than one more turn of the loop later.
            self.read(self.conns.len() - 1, now);
        }
    }

    /// Whether a new connection of root (`root`), or of the group, can be taken now.
    fn is_full(&self, root: bool) -> bool {
        let limit = if root {
            MAX_CLIENTS
        } else {
            MAX_CLIENTS - ROOT_RESERVE
        };
        self.conns.len() >= limit
    }

    /// Whether new connections should stay queued in the kernel for now: the group's
    /// slots are taken but some are only waiting for the evaluation under way, which frees
    /// them in a moment. `busy` is for slots held by slow or waiting clients, not for a
    /// burst that outruns one evaluation (the listen backlog, 4096 by default, holds
    /// those).
    fn holds_back(&self) -> bool {
        self.is_full(false)
            && self
                .conns
                .iter()
                .any(|c| matches!(c.stage, Stage::Asking { until: None, .. }))
    }

    /// Asks one evaluation for every connection that waits for one and has not asked.
    fn ask(&mut self) {
        let mut ticket = None;
        for c in &mut self.conns {
            if let Stage::Asking { ticket: t @ 0, .. } = &mut c.stage {
                *t = *ticket.get_or_insert_with(|| self.evaluations.ask());
            }
        }
    }
}

/// Starts writing `line` to `conn`; closes it once written.
fn reply(conn: &mut Conn, line: Arc<[u8]>, now: Instant) {
    conn.stage = Stage::Writing { line, at: 0 };
    conn.deadline = now + WRITE_TIMEOUT;
    write_more(conn);
}

/// Writes what the socket takes; closes the connection once the reply is out, or when
/// the client is gone.
fn write_more(conn: &mut Conn) {
    let Stage::Writing { line, at } = &mut conn.stage else {
        return;
    };
    while *at < line.len() {
        match (&conn.stream).write(&line[*at..]) {
            Ok(0) => break,
            Ok(n) => *at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(_) => break,
        }
    }
    // Dropping the stream closes it: the client reads the line, then end of file.
    conn.stage = Stage::Closed;
}

/// Answers `error` and closes, without reading the request: one non-blocking write into
/// the socket's buffer, so the loop never waits for a client it turns away.
fn refuse(stream: UnixStream, error: &ErrorBody) {
    let _ = stream.set_nonblocking(true);
    let _ = (&stream).write(&Reply::Error(error.clone()).to_line());
}

fn refuse_busy(stream: UnixStream, root: bool) {
    let message = if root {
        format!("{MAX_CLIENTS} queries are being answered; try again")
    } else {
        format!(
            "{} queries are being answered ({ROOT_RESERVE} more slots are kept for root); try again",
            MAX_CLIENTS - ROOT_RESERVE
        )
    };
    refuse(stream, &ErrorBody::new("busy", message));
}

/// Reads what the client sent so far into `buf` (through `scratch`, at least
/// [`MAX_REQUEST`] + 1 bytes): `None` while the request line is incomplete, else the
/// line (without its newline) or why it is refused. A request is one line of at most
/// [`MAX_REQUEST`] bytes, newline included; end of file also ends it.
fn read_some(
    stream: &mut UnixStream,
    buf: &mut Vec<u8>,
    scratch: &mut [u8],
) -> Option<Result<Vec<u8>, ErrorBody>> {
    loop {
        let room = (MAX_REQUEST + 1).saturating_sub(buf.len()).max(1);
        match stream.read(&mut scratch[..room]) {
            Ok(0) if buf.is_empty() => {
                return Some(Err(ErrorBody::new(
                    "bad-request",
                    "the connection closed before a request arrived",
                )))
            }
            Ok(0) => return Some(Ok(std::mem::take(buf))),
            Ok(n) => {
                if let Some(end) = scratch[..n].iter().position(|&b| b == b'\n') {
                    buf.extend_from_slice(&scratch[..end]);
                    return Some(Ok(std::mem::take(buf)));
                }
                buf.extend_from_slice(&scratch[..n]);
                if buf.len() > MAX_REQUEST - 1 {
                    return Some(Err(ErrorBody::new(
                        "request-too-large",
                        format!("a request is one line of at most {MAX_REQUEST} bytes"),
                    )));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Err(e) => {
                return Some(Err(ErrorBody::new(
                    "bad-request",
                    format!("cannot read the request: {e}"),
                )))
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

/// The live view on a node, asking the role at `role` when the configuration says where.
fn system_live(metrics_port: u16, role: Option<super::live::RoleSource>) -> SystemLive {
    let live = SystemLive::new(metrics_port);
    match role {
        Some(r) => live.with_role(r),
        None => live,
    }
}

/// `etcd-setup serve-status`: reads the group and metrics port from the configuration
/// (defaults when it is missing or bad: the server must answer why anyway), takes the
/// socket from systemd or binds `--socket`, and serves until idle. Returns the exit code.
pub fn command(args: &ServeStatusArgs) -> u8 {
    // The operator's advisories are read best effort: a bad file is every command's
    // `config-invalid`, but the server answers with the configured group and ports.
    if let Err(f) = config::load_advisories_beside(&args.config) {
        eprintln!(
            "etcd-setup serve-status: {}",
            crate::shared::printable::line(&f.headline())
        );
    }
    let (group, metrics_port, tls, role, backup_period) = match config::load_settings(&args.config)
    {
        Ok(s) => {
            let tls = config::certs::Policy::of(&s);
            let role = super::live::role_source(&s);
            let backup = s.backup.as_ref().map(|b| b.period);
            (s.status_group, s.metrics_port, tls, Some(role), backup)
        }
        Err(f) => {
            if args.config.exists() {
                eprintln!(
                    "etcd-setup serve-status: {}; only root and group {} may query",
                    crate::shared::printable::line(&f.headline()),
                    config::DEFAULT_STATUS_GROUP
                );
            }
            (
                config::DEFAULT_STATUS_GROUP.to_string(),
                config::DEFAULT_METRICS_PORT,
                None,
                None,
                None,
            )
        }
    };
    #[cfg(feature = "test-fixtures")]
    let live: Arc<dyn LiveView> = match &args.live_fixture {
        Some(file) => Arc::new(super::FileLive(file.clone())),
        None => Arc::new(system_live(metrics_port, role)),
    };
    #[cfg(not(feature = "test-fixtures"))]
    let live: Arc<dyn LiveView> = Arc::new(system_live(metrics_port, role));
    let taken = socket_from_systemd().and_then(|passed| match passed {
        Some(l) => Ok((l, " (passed by systemd)")),
        None => bind(&args.socket).map(|l| (l, "")),
    });
    let (listener, origin) = match taken {
        Ok(taken) => taken,
        Err(e) => {
            eprintln!("etcd-setup serve-status: {e:#}");
            return exit::serve::FAILED;
        }
    };
    // The address the socket really has: systemd's unit decides where a passed one is.
    eprintln!(
        "etcd-setup serve-status: serving {}{origin} for root and group {group}",
        socket::address(&listener)
    );
    let options = Options {
        store: StateStore::new(&args.dirs.run_dir, &args.dirs.state_dir),
        group,
        idle_exit: (!args.idle_exit.is_zero()).then_some(args.idle_exit),
        tls,
        backup_period,
    };
    match serve(listener, options, live) {
        Ok(()) => exit::serve::OK,
        Err(e) => {
            eprintln!("etcd-setup serve-status: {e:#}");
            exit::serve::FAILED
        }
    }
}

#[cfg(test)]
mod tests;
