//! Would systemd's `Accept=yes` serve `status` as well as the poll loop? (issue 9 item 6;
//! a benchmark: it prints figures and asserts nothing about time.)
//!
//! `cargo build --release --features test-fixtures --bin etcd-setup --example status_accept`
//! then, as root, `target/release/examples/status_accept [ROUNDS]`.
//!
//! Two servers answer the same state (phase `running`, a fixed healthy live view from the
//! `--live-fixture` file) under the same client load:
//!
//! - **loop**: the shipped server, `etcd-setup serve-status` (one poll loop, one evaluator
//!   thread), a separate process, as under `Accept=no`.
//! - **accept**: what `Accept=yes` would run. A harness in this process does what systemd
//!   does for such a socket: accepts, and for every connection forks and execs a handler
//!   (this example, `one`) with the connection as fd 3, at most [`MAX_CONNECTIONS`] (64,
//!   systemd's default `MaxConnections=`) at once; a connection beyond that is closed at
//!   once, as systemd does. The handler reads the peer's credentials, the request (2 s at
//!   most), the state file, evaluates with the same library code and replies. It is a
//!   lower bound of the real cost: on a node each handler would also open its own D-Bus
//!   connection and ask etcd's health endpoint (the loop keeps one connection and shares a
//!   500 ms look), and systemd forks from PID 1, a larger process than this one.
//!
//! The load, for each server: (1) answers one after another; (2) 1,000 clients
//! connecting at once (all connect, then all write, then all read); (3) root asking 10
//! times while uid 65534 holds 300 silent connections, reconnecting as each closes,
//! first as a member of the group, then as an outsider. The flood runs as this example
//! (`flood`) under `setpriv`.

use etcd_setup::shared::report::{Phase, State, StateStore};
use etcd_setup::shared::systemd::UnitState;
use etcd_setup::status::{self, server, FileLive, LiveView, Reply, Request};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use nix::unistd::{Gid, Uid};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// systemd's default `MaxConnections=` for `Accept=yes`.
const MAX_CONNECTIONS: usize = 64;
const HONEST: &[u8] = b"{\"version\":1,\"wait\":false,\"timeout_ms\":0}\n";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("one") => one(&args[2], Path::new(&args[3]), Path::new(&args[4])),
        Some("flood") => flood(Path::new(&args[2]), args[3].parse()?),
        other => {
            let rounds = other.and_then(|n| n.parse().ok()).unwrap_or(300);
            bench(rounds)
        }
    }
}

/// The `Accept=yes` handler: one connection on fd 3, answered like the loop answers.
fn one(group: &str, dir: &Path, fixture: &Path) -> anyhow::Result<()> {
    // SAFETY: the harness put this connection on fd 3 for this process alone.
    let stream = unsafe { UnixStream::from_raw_fd(3) };
    let creds = getsockopt(&stream, PeerCredentials)?;
    let access = server::Access::new(group);
    let reply = if !access.allows(Uid::from_raw(creds.uid()), Gid::from_raw(creds.gid())) {
        Reply::Error(access.refusal(Uid::from_raw(creds.uid())))
    } else {
        stream.set_read_timeout(Some(status::REQUEST_TIMEOUT))?;
        let mut line = Vec::new();
        let read = BufReader::new(&stream)
            .take(status::MAX_REQUEST as u64)
            .read_until(b'\n', &mut line);
        match read
            .map_err(|e| e.to_string())
            .and_then(|_| server::parse_request(line.trim_ascii_end()).map_err(|e| e.message))
        {
            Ok(_) => {
                let store = StateStore::new(dir.join("run"), dir.join("lib"));
                let answer = status::evaluate(
                    &store.load_detailed(),
                    &store.run_path(),
                    &FileLive(fixture.to_path_buf()) as &dyn LiveView,
                    &status::pid_alive,
                );
                Reply::Answer(Box::new(answer))
            }
            Err(why) => Reply::Error(status::ErrorBody::new("bad-request", why)),
        }
    };
    let _ = (&stream).write_all(&reply.to_line());
    Ok(())
}

/// Holds `n` silent connections to `socket`, opening a new one whenever one is closed,
/// until stdin closes. Prints `ready` once they are open.
fn flood(socket: &Path, n: usize) -> anyhow::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let connect = || loop {
        if let Ok(s) = UnixStream::connect(socket) {
            return s;
        }
        std::thread::yield_now();
    };
    let mut conns: Vec<UnixStream> = (0..n).map(|_| connect()).collect();
    println!("ready");
    std::io::stdout().flush()?;
    let stdin = std::io::stdin();
    let mut reconnects = 0u64;
    loop {
        let mut fds = vec![PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        fds.extend(
            conns
                .iter()
                .map(|c| PollFd::new(c.as_fd(), PollFlags::POLLIN)),
        );
        poll(&mut fds, PollTimeout::from(1000u16))?;
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            break;
        }
        let ready: Vec<usize> = (1..fds.len())
            .filter(|&i| fds[i].revents().is_some_and(|r| !r.is_empty()))
            .map(|i| i - 1)
            .collect();
        drop(fds);
        for i in ready {
            conns[i] = connect();
            reconnects += 1;
        }
    }
    println!("{reconnects}");
    Ok(())
}

/// One server under test.
enum Served {
    Loop(Child),
    Accept {
        stop: Arc<AtomicBool>,
        spawned: Arc<AtomicU64>,
        refused: Arc<AtomicU64>,
    },
}

impl Drop for Served {
    fn drop(&mut self) {
        match self {
            Served::Loop(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Served::Accept { stop, .. } => stop.store(true, Ordering::Relaxed),
        }
    }
}

/// The group, config and fixture folder for a server answering as group `group`.
fn setup(dir: &Path, group: &str) -> anyhow::Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let unit = UnitState {
        load_state: "loaded".into(),
        active_state: "active".into(),
        sub_state: "running".into(),
        ..UnitState::default()
    };
    std::fs::write(
        dir.join("etcd.json"),
        serde_json::json!({ "unit": unit, "health": "healthy" }).to_string(),
    )?;
    let mut state = State::begin(Phase::WaitingForIso);
    state.enter(Phase::Running, SystemTime::now());
    state.etcd_version = Some("3.5.16".into());
    state.confirmed_n_restarts = Some(0);
    StateStore::new(dir.join("run"), dir.join("lib")).save(&state)?;
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[node]\nname = \"etcd-1\"\nip = \"10.1.1.11\"\n[etcd]\n\
             initial_cluster = \"etcd-1=http://10.1.1.11:2380\"\ncluster_token = \"t\"\n\
             [report]\nstatus_group = \"{group}\"\n"
        ),
    )?;
    Ok(())
}

/// The `etcd-setup` binary of the same build (`target/release/`).
fn start_bin() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("etcd-setup"))
        .filter(|b| b.exists())
        .ok_or_else(|| anyhow::anyhow!("no etcd-setup beside {}", exe.display()))
}

fn start_loop(dir: &Path) -> anyhow::Result<Served> {
    let bin = start_bin()?;
    let socket = dir.join("status.sock");
    let child = Command::new(&bin)
        .args(["serve-status", "--idle-exit", "0", "--socket"])
        .arg(&socket)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--run-dir")
        .arg(dir.join("run"))
        .arg("--state-dir")
        .arg(dir.join("lib"))
        .arg("--live-fixture")
        .arg(dir.join("etcd.json"))
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(&socket).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "{} did not bind", bin.display());
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(Served::Loop(child))
}

/// The `Accept=yes` harness on `dir/status.sock`, in a thread.
fn start_accept(dir: &Path, group: &str) -> anyhow::Result<Served> {
    let socket = dir.join("status.sock");
    let listener = UnixListener::bind(&socket)?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))?;
    let stop = Arc::new(AtomicBool::new(false));
    let spawned = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let exe = std::env::current_exe()?;
    let (group, dir) = (group.to_string(), dir.to_path_buf());
    let (s, n, r) = (
        Arc::clone(&stop),
        Arc::clone(&spawned),
        Arc::clone(&refused),
    );
    listener.set_nonblocking(true)?;
    std::thread::spawn(move || {
        let mut children: Vec<Child> = Vec::new();
        while !s.load(Ordering::Relaxed) {
            children.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
            let conn = match listener.accept() {
                Ok((conn, _)) => conn,
                Err(_) => {
                    // Nothing queued: wait for a connection or a child to end.
                    let mut fds = [nix::poll::PollFd::new(
                        std::os::fd::AsFd::as_fd(&listener),
                        nix::poll::PollFlags::POLLIN,
                    )];
                    let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(2u8));
                    continue;
                }
            };
            if children.len() >= MAX_CONNECTIONS {
                r.fetch_add(1, Ordering::Relaxed);
                continue; // systemd closes what passes MaxConnections=
            }
            let raw = conn.as_raw_fd();
            let mut cmd = Command::new(&exe);
            cmd.arg("one")
                .arg(&group)
                .arg(&dir)
                .arg(dir.join("etcd.json"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: only dup2/fcntl between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
                    let fd = std::os::fd::BorrowedFd::borrow_raw(raw);
                    if raw == 3 {
                        fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))?;
                    } else {
                        std::mem::forget(nix::unistd::dup2_raw(fd, 3)?);
                    }
                    Ok(())
                });
            }
            if let Ok(child) = cmd.spawn() {
                n.fetch_add(1, Ordering::Relaxed);
                children.push(child);
            }
        }
        for mut c in children {
            let _ = c.wait();
        }
    });
    Ok(Served::Accept {
        stop,
        spawned,
        refused,
    })
}

/// One honest query on its own connection; the answer must say running.
fn ask(socket: &Path) -> Result<Duration, String> {
    let t = Instant::now();
    let request = Request {
        version: 1,
        wait: false,
        timeout_ms: 0,
    };
    let a = status::query(socket, &request, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    if a.exit_code != 0 {
        return Err(format!("verdict {}", a.verdict.as_str()));
    }
    Ok(t.elapsed())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn summary(mut took: Vec<Duration>, failed: usize) -> String {
    if took.is_empty() {
        return format!("0 answered, {failed} failed");
    }
    took.sort();
    format!(
        "p50 {}, p99 {}, max {}; {failed} failed",
        ms(took[took.len() / 2]),
        ms(took[(took.len() * 99 / 100).min(took.len() - 1)]),
        ms(took[took.len() - 1])
    )
}

/// 1,000 clients at once: every one connects, then every one writes, then all are read.
fn burst(socket: &Path, clients: usize) -> (Vec<Duration>, usize) {
    let t0 = Instant::now();
    let mut conns = Vec::new();
    let mut failed = 0;
    for _ in 0..clients {
        match UnixStream::connect(socket) {
            Ok(s) => conns.push(s),
            Err(_) => failed += 1,
        }
    }
    for s in &mut conns {
        let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
        let _ = s.write_all(HONEST);
    }
    let mut took = Vec::new();
    for s in &mut conns {
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let mut line = String::new();
        let ok = BufReader::new(&*s).read_line(&mut line).is_ok()
            && matches!(Reply::parse(line.as_bytes()), Ok(Reply::Answer(a)) if a.exit_code == 0);
        if ok {
            took.push(t0.elapsed());
        } else {
            failed += 1;
        }
    }
    (took, failed)
}

/// Root asks 10 times while uid 65534 floods with 300 silent connections.
fn under_flood(socket: &Path) -> anyhow::Result<String> {
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe()?)
        .arg("flood")
        .arg(socket)
        .arg("300")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line)?;
    anyhow::ensure!(line.trim() == "ready", "the flood did not start: {line:?}");
    let t0 = Instant::now();
    let mut took = Vec::new();
    let mut failed = Vec::new();
    for _ in 0..10 {
        match ask(socket) {
            Ok(d) => took.push(d),
            Err(e) => failed.push(e),
        }
    }
    let span = t0.elapsed();
    drop(child.stdin.take());
    line.clear();
    out.read_line(&mut line)?;
    child.wait()?;
    Ok(format!(
        "root answered {}/10 ({}); the flood reconnected {} times during root's 10 queries ({:.1} s){}",
        took.len(),
        summary(took, failed.len()),
        line.trim(),
        span.as_secs_f64(),
        failed
            .first()
            .map(|e| format!("; e.g. {e}"))
            .unwrap_or_default()
    ))
}

fn bench(rounds: usize) -> anyhow::Result<()> {
    println!(
        "status_accept: {rounds} sequential queries, 1000 at once, floods of 300; load before: {}",
        std::fs::read_to_string("/proc/loadavg")?.trim()
    );
    for kind in ["loop", "accept"] {
        for (who, group) in [("a group member", "nogroup"), ("an outsider", "cloud")] {
            let dir = tempfile::tempdir()?;
            setup(dir.path(), group)?;
            let socket: PathBuf = dir.path().join("status.sock");
            let served = match kind {
                "loop" => start_loop(dir.path())?,
                _ => start_accept(dir.path(), group)?,
            };
            if group == "nogroup" {
                let mut took = Vec::new();
                let mut failed = 0;
                let cpu0 = children_cpu();
                for _ in 0..rounds {
                    match ask(&socket) {
                        Ok(d) => took.push(d),
                        Err(_) => failed += 1,
                    }
                }
                let cpu = children_cpu().saturating_sub(cpu0);
                println!("{kind:6} one after another: {}", summary(took, failed));
                if kind == "accept" {
                    println!(
                        "{kind:6}   CPU of the handler processes: {:.2} ms per answer",
                        cpu.as_secs_f64() * 1e3 / rounds as f64
                    );
                }
                let bin = start_bin()?;
                let mut took = Vec::new();
                let mut failed = 0;
                for _ in 0..rounds.min(100) {
                    let t = Instant::now();
                    let out = Command::new(&bin)
                        .args(["status", "--socket"])
                        .arg(&socket)
                        .output()?;
                    if out.status.code() == Some(0) {
                        took.push(t.elapsed());
                    } else {
                        failed += 1;
                    }
                }
                println!(
                    "{kind:6} the whole `etcd-setup status` command, one after another: {}",
                    summary(took, failed)
                );
                let (took, failed) = burst(&socket, 1000);
                println!(
                    "{kind:6} 1000 at once (time from the first connect): {}",
                    summary(took, failed)
                );
            }
            println!("{kind:6} flood by {who}: {}", under_flood(&socket)?);
            if let Served::Accept {
                spawned, refused, ..
            } = &served
            {
                println!(
                    "{kind:6}   processes spawned so far {}, connections closed past MaxConnections {}",
                    spawned.load(Ordering::Relaxed),
                    refused.load(Ordering::Relaxed)
                );
            }
            drop(served);
        }
    }
    Ok(())
}

/// CPU time (user + system) of this process's reaped children (`/proc/self/stat`,
/// fields cutime and cstime, in clock ticks of 10 ms).
fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // After the name: state is field 3; cutime and cstime are fields 16 and 17.
    let ticks = fields.get(13).copied().unwrap_or(0) + fields.get(14).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}
