//! Load test of the status server on the host (a benchmark: it prints figures and asserts
//! nothing about time).
//! `cargo run --release --example status_load [CLIENTS] [DRIVERS] [SLICE|all]`.
//!
//! Starts the server in this process on a temporary socket, with a state file in phase
//! `running` and a fixed, healthy live view of etcd (what the node's live view returns
//! from its 500 ms cache), then measures:
//!
//! 1. All at once: CLIENTS (default 1,000) clients, 90 % honest, 4 % that connect and
//!    never write, 3 % that send garbage, 3 % that send 1 MiB without a newline, started
//!    as fast as DRIVERS (default 1) threads can connect them. Each thread drives its
//!    clients with non-blocking sockets and `poll`, as that many separate client
//!    processes would behave, without 1,000 OS threads competing with the server for a
//!    2-core host. A client's latency runs from just before its `connect` to the moment
//!    its whole reply line is read; replies are checked after the clock stops. Run twice
//!    (unless SLICE is given): connecting 16 clients at a time with a look at the replies
//!    in between, then connecting every client first and only then reading (a queue as
//!    deep as it gets, where a reply also waits for the generator to finish connecting).
//!    Each run prints the CPU time the server's loop, its evaluator and the generator
//!    used, and how long each was runnable but waiting for a CPU.
//! 2. One after another: as many honest requests as in (1), each on its own connection.
//! 3. All at once with one OS thread per client released by a barrier, each honest one
//!    using the real client (`status::query`, which also parses the answer): the old way
//!    of this test, where the generator's own threads compete with the server.
//!
//! For each: the honest requests' p50, p99 and max, and how many of them failed (must be
//! 0); for (1) also what the hostile clients got. The first line says how busy the host
//! was before the test: the figures mean little on a host busy with something else.

use etcd_setup::shared::report::{Phase, State, StateStore};
use etcd_setup::shared::systemd::UnitState;
use etcd_setup::status::{self, server, EtcdLive, FileLive, LiveView, Reply, Request};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime};

/// A live view that answers what it was built with, as the node's does from its cache.
struct Fixed(Result<EtcdLive, String>);

impl LiveView for Fixed {
    fn etcd(&self) -> Result<EtcdLive, String> {
        self.0.clone()
    }
}

/// etcd active and healthy, read once through the fixture format of `serve-status`.
fn healthy(dir: &Path) -> anyhow::Result<Fixed> {
    let unit = UnitState {
        load_state: "loaded".into(),
        active_state: "active".into(),
        sub_state: "running".into(),
        ..UnitState::default()
    };
    let file = dir.join("etcd.json");
    std::fs::write(
        &file,
        serde_json::json!({ "unit": unit, "health": "healthy" }).to_string(),
    )?;
    Ok(Fixed(FileLive(file).etcd()))
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Honest,
    Silent,
    Garbage,
    Oversize,
}

fn kind(i: usize) -> Kind {
    match i % 100 {
        0..=3 => Kind::Silent,
        4..=6 => Kind::Garbage,
        7..=9 => Kind::Oversize,
        _ => Kind::Honest,
    }
}

const HONEST: &[u8] = b"{\"version\":1,\"wait\":false,\"timeout_ms\":0}\n";
const GARBAGE: &[u8] = b"\x00\x01 not json at all\n";
static OVERSIZE: [u8; 1 << 20] = [b'x'; 1 << 20];

fn request(kind: Kind) -> &'static [u8] {
    match kind {
        Kind::Honest => HONEST,
        Kind::Silent => b"",
        Kind::Garbage => GARBAGE,
        Kind::Oversize => &OVERSIZE,
    }
}

/// One client's result: its kind, its latency, and the reply (or why there is none).
struct Outcome {
    kind: Kind,
    latency: Duration,
    reply: Result<Vec<u8>, String>,
}

impl Outcome {
    /// For an honest client: `Ok` when the answer says running (exit code 0).
    fn honest_ok(&self) -> Result<Duration, String> {
        let bytes = self.reply.as_ref().map_err(|e| e.clone())?;
        match Reply::parse(bytes)? {
            Reply::Answer(a) if a.exit_code == 0 => Ok(self.latency),
            Reply::Answer(a) => Err(format!("verdict {}", a.verdict.as_str())),
            Reply::Error(e) => Err(format!("{}: {}", e.code, e.message)),
        }
    }

    /// What a hostile client got: the error code, or what went wrong.
    fn code(&self) -> String {
        match self.reply.as_deref().map(Reply::parse) {
            Ok(Ok(Reply::Error(e))) => e.code,
            Ok(Ok(Reply::Answer(_))) => "an answer".into(),
            Ok(Err(e)) => e,
            Err(e) => e.clone(),
        }
    }
}

/// A client in flight.
struct Client {
    kind: Kind,
    stream: UnixStream,
    started: Instant,
    written: usize,
    reply: Vec<u8>,
}

impl Client {
    fn start(socket: &Path, kind: Kind) -> Result<Client, Outcome> {
        let started = Instant::now();
        let stream = UnixStream::connect(socket)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|e| Outcome {
                kind,
                latency: started.elapsed(),
                reply: Err(format!("connect: {e}")),
            })?;
        let mut client = Client {
            kind,
            stream,
            started,
            written: 0,
            reply: Vec::new(),
        };
        client.write_more();
        Ok(client)
    }

    fn to_write(&self) -> &'static [u8] {
        &request(self.kind)[self.written..]
    }

    fn write_more(&mut self) {
        while !self.to_write().is_empty() {
            match (&self.stream).write(self.to_write()) {
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // The server closed on a flood: stop writing, read its reply.
                Err(_) => self.written = request(self.kind).len(),
            }
        }
    }

    /// Reads what arrived; the outcome once the reply line is complete (or cannot be).
    fn read_more(&mut self) -> Option<Outcome> {
        let mut buf = [0u8; 8192];
        loop {
            match (&self.stream).read(&mut buf) {
                Ok(0) => return Some(self.finish(None)),
                Ok(n) => {
                    self.reply.extend_from_slice(&buf[..n]);
                    if self.reply.ends_with(b"\n") {
                        return Some(self.finish(None));
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) => return Some(self.finish(Some(e.to_string()))),
            }
        }
    }

    fn finish(&mut self, error: Option<String>) -> Outcome {
        let latency = self.started.elapsed();
        let reply = std::mem::take(&mut self.reply);
        Outcome {
            kind: self.kind,
            latency,
            reply: match error {
                Some(e) if reply.is_empty() => Err(format!("read: {e}")),
                _ if reply.is_empty() => Err("no reply".into()),
                _ => Ok(reply),
            },
        }
    }
}

/// Drives `clients` from this thread: starts them all, `slice` at a time with a
/// look at the replies in between, and serves every one until its reply is read.
/// Returns the outcomes and when the last client connected.
fn drive(
    socket: &Path,
    clients: Vec<Kind>,
    slice: usize,
    barrier: &Barrier,
) -> (Vec<Outcome>, Instant, (u64, u64)) {
    let mut todo = clients.into_iter();
    let mut active: Vec<Client> = Vec::new();
    let mut outcomes = Vec::new();
    barrier.wait();
    let cpu = own_schedstat();
    let mut last_connect = Instant::now();
    let mut starting = true;
    while starting || !active.is_empty() {
        if starting {
            for _ in 0..slice {
                let Some(kind) = todo.next() else {
                    starting = false;
                    break;
                };
                match Client::start(socket, kind) {
                    Ok(c) => active.push(c),
                    Err(o) => outcomes.push(o),
                }
                last_connect = Instant::now();
            }
        }
        let mut fds: Vec<PollFd> = active
            .iter()
            .map(|c| {
                let mut flags = PollFlags::POLLIN;
                if !c.to_write().is_empty() {
                    flags |= PollFlags::POLLOUT;
                }
                PollFd::new(c.stream.as_fd(), flags)
            })
            .collect();
        let timeout = if starting {
            PollTimeout::ZERO
        } else {
            PollTimeout::from(100u16)
        };
        if nix::poll::poll(&mut fds, timeout).is_err() {
            continue;
        }
        let ready: Vec<PollFlags> = fds
            .iter()
            .map(|f| f.revents().unwrap_or(PollFlags::empty()))
            .collect();
        drop(fds);
        let mut index = 0;
        active.retain_mut(|c| {
            let r = ready[index];
            index += 1;
            if r.contains(PollFlags::POLLOUT) {
                c.write_more();
            }
            if r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                if let Some(o) = c.read_more() {
                    outcomes.push(o);
                    return false;
                }
            }
            true
        });
    }
    let now = own_schedstat();
    (outcomes, last_connect, (now.0 - cpu.0, now.1 - cpu.1))
}

/// This thread's CPU time and time runnable but waiting for a CPU, in nanoseconds.
fn own_schedstat() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut fields = stat.split_whitespace().map(|f| f.parse().unwrap_or(0));
    (fields.next().unwrap_or(0), fields.next().unwrap_or(0))
}

/// Scenario 1: every client started at once, driven by `drivers` threads, each
/// connecting `slice` clients between looks at the replies. Prints the figures; returns
/// how many honest requests failed.
fn all_at_once(socket: &Path, clients: usize, drivers: usize, slice: usize) -> usize {
    let barrier = Arc::new(Barrier::new(drivers + 1));
    let threads: Vec<_> = (0..drivers)
        .map(|d| {
            let share: Vec<Kind> = (d..clients).step_by(drivers).map(kind).collect();
            let (socket, barrier) = (socket.to_path_buf(), Arc::clone(&barrier));
            std::thread::Builder::new()
                .name(format!("load-driver-{d}"))
                .spawn(move || drive(&socket, share, slice, &barrier))
                .expect("cannot start a driver thread")
        })
        .collect();
    let server_before = cpu_by_thread();
    barrier.wait();
    let started = Instant::now();
    let mut outcomes = Vec::new();
    let mut spread = Duration::ZERO;
    let mut generator = (0, 0);
    for t in threads {
        let (o, last, cpu) = t.join().expect("a driver thread panicked");
        outcomes.extend(o);
        spread = spread.max(last.saturating_duration_since(started));
        generator = (generator.0 + cpu.0, generator.1 + cpu.1);
    }
    let wall = started.elapsed();
    let server_after = cpu_by_thread();
    let how = if slice >= clients {
        "connecting all its clients first, then reading the replies".to_string()
    } else {
        format!("connecting {slice} clients at a time, reading the replies in between")
    };
    println!(
        "(1) all at once: {clients} clients driven by {drivers} thread(s) with non-blocking sockets, {how}; all connected within {} of the start; latency from a client's connect to its whole reply",
        ms(spread)
    );
    let failed = report(
        outcomes
            .iter()
            .filter(|o| o.kind == Kind::Honest)
            .map(Outcome::honest_ok),
    );
    let mut got: BTreeMap<(Kind, String), usize> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.kind != Kind::Honest) {
        *got.entry((o.kind, o.code())).or_default() += 1;
    }
    let got: Vec<String> = got
        .iter()
        .map(|((k, code), n)| format!("{k:?} -> {code} x{n}").to_lowercase())
        .collect();
    println!("    hostile: {}", got.join(", "));
    let used = |name: &str| {
        let (run0, wait0) = server_before.get(name).copied().unwrap_or_default();
        let (run, wait) = server_after.get(name).copied().unwrap_or_default();
        (run.saturating_sub(run0), wait.saturating_sub(wait0))
    };
    let (loop_run, loop_wait) = used("status-loop");
    let (eval_run, eval_wait) = used("status-eval");
    let cpu_ms = |ns: u64| format!("{:.1} ms", ns as f64 / 1e6);
    println!(
        "    CPU time (runnable but waiting for a CPU): server loop {} ({}), {:.1} us per client; evaluator {} ({}); load generator {} ({})",
        cpu_ms(loop_run),
        cpu_ms(loop_wait),
        loop_run as f64 / 1e3 / clients as f64,
        cpu_ms(eval_run),
        cpu_ms(eval_wait),
        cpu_ms(generator.0),
        cpu_ms(generator.1),
    );
    // The floor under any burst: the work every client costs, spread over every CPU.
    let work = loop_run + eval_run + generator.0;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    println!(
        "    together {} of CPU ({:.1} us per client): had all {clients} connected at the same instant, even {cpus} CPUs doing nothing else could not get the median reply out sooner than about {} after it",
        cpu_ms(work),
        work as f64 / 1e3 / clients as f64,
        cpu_ms(work / 2 / cpus),
    );
    println!(
        "    all done after {} (silent clients hold until their 2 s request timeout)",
        ms(wall)
    );
    failed
}

/// Scenario 2: honest requests one after another, each on its own connection.
fn one_by_one(socket: &Path, count: usize) -> Vec<Outcome> {
    (0..count)
        .map(|_| {
            let started = Instant::now();
            let reply = (|| {
                let mut s = UnixStream::connect(socket)?;
                s.write_all(HONEST)?;
                let mut reply = Vec::new();
                let mut buf = [0u8; 8192];
                while !reply.ends_with(b"\n") {
                    match s.read(&mut buf)? {
                        0 => break,
                        n => reply.extend_from_slice(&buf[..n]),
                    }
                }
                Ok::<_, std::io::Error>(reply)
            })();
            Outcome {
                kind: Kind::Honest,
                latency: started.elapsed(),
                reply: reply.map_err(|e| e.to_string()),
            }
        })
        .collect()
}

/// Scenario 3: one OS thread per client, released by a barrier.
fn thread_per_client(
    socket: &Path,
    clients: usize,
) -> anyhow::Result<Vec<Result<Duration, String>>> {
    let barrier = Arc::new(Barrier::new(clients));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (socket, barrier) = (socket.to_path_buf(), Arc::clone(&barrier));
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    barrier.wait();
                    let k = kind(i);
                    if k == Kind::Honest {
                        let request = Request {
                            version: status::PROTOCOL_VERSION,
                            wait: false,
                            timeout_ms: 0,
                        };
                        let started = Instant::now();
                        let answer = status::query(&socket, &request, Duration::from_secs(30))
                            .map_err(|e| e.to_string())?;
                        if answer.exit_code != 0 {
                            return Err(format!("verdict {}", answer.verdict.as_str()));
                        }
                        return Ok(Some(started.elapsed()));
                    }
                    if let Ok(mut s) = UnixStream::connect(&socket) {
                        let _ = s.write_all(request(k));
                        let _ = s.read_to_end(&mut Vec::new());
                    }
                    Ok(None)
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(threads
        .into_iter()
        .filter_map(|t| match t.join() {
            Ok(Ok(Some(d))) => Some(Ok(d)),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => Some(Err(e)),
            Err(_) => Some(Err("client thread panicked".into())),
        })
        .collect())
}

/// CPU time and time spent runnable but waiting for a CPU, per thread name, from
/// `/proc/self/task/*/schedstat` (nanoseconds).
fn cpu_by_thread() -> BTreeMap<String, (u64, u64)> {
    let mut by = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(path.join("comm")),
            std::fs::read_to_string(path.join("schedstat")),
        ) else {
            continue;
        };
        let mut fields = stat
            .split_whitespace()
            .map(|f| f.parse::<u64>().unwrap_or(0));
        let (run, wait) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
        let name = comm.trim().trim_end_matches(|c: char| c.is_ascii_digit());
        let entry: &mut (u64, u64) = by.entry(name.to_string()).or_default();
        entry.0 += run;
        entry.1 += wait;
    }
    by
}

/// The share of the host's CPU time that went to anything but idle over `span`, from
/// `/proc/stat`: what else competes with this test.
fn host_busy(span: Duration) -> Option<f64> {
    let sample = || -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let idle = cpu.get(3)? + cpu.get(4)?;
        Some((cpu.iter().sum(), idle))
    };
    let (total0, idle0) = sample()?;
    std::thread::sleep(span);
    let (total1, idle1) = sample()?;
    let total = total1.checked_sub(total0).filter(|&t| t > 0)?;
    Some(100.0 * (total - (idle1 - idle0)) as f64 / total as f64)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Prints p50/p99/max and the failures; returns how many failed.
fn report(results: impl IntoIterator<Item = Result<Duration, String>>) -> usize {
    let (mut latencies, mut failures) = (Vec::new(), Vec::new());
    for r in results {
        match r {
            Ok(d) => latencies.push(d),
            Err(e) => failures.push(e),
        }
    }
    latencies.sort();
    println!(
        "    honest: p50 {}, p99 {}, max {}; failed: {}",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default()),
        failures.len()
    );
    for f in failures.iter().take(5) {
        println!("      failed: {f}");
    }
    failures.len()
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let clients: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(1000);
    let drivers: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(1);
    let slices: Vec<usize> = match args.next().as_deref() {
        None => vec![16, clients],
        Some("all") => vec![clients],
        Some(n) => vec![n.parse()?],
    };
    let busy = host_busy(Duration::from_secs(1));
    let dir = tempfile::tempdir()?;
    let store = StateStore::new(dir.path().join("run"), dir.path().join("lib"));
    let mut state = State::begin(Phase::WaitingForIso);
    state.etcd_version = Some("3.5.16".into());
    state.enter(Phase::Running, SystemTime::now());
    store.save(&state)?;
    let socket = dir.path().join("status.sock");
    let listener = server::bind(&socket)?;
    let options = server::Options {
        store,
        group: "root".into(),
        idle_exit: None,
        tls: None,
        backup_period: None,
    };
    let live = Arc::new(healthy(dir.path())?);
    std::thread::Builder::new()
        .name("status-loop".into())
        .spawn(move || server::serve(listener, options, live))?;

    let count = |k: Kind| (0..clients).filter(|&i| kind(i) == k).count();
    let honest = count(Kind::Honest);
    println!(
        "status server, in this process; {clients} clients: {honest} honest, {} silent, {} garbage, {} oversize (1 MiB); {} CPUs, busy {} before the test (other processes), load average {}",
        count(Kind::Silent),
        count(Kind::Garbage),
        count(Kind::Oversize),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        busy.map_or_else(|| "unknown".into(), |b| format!("{b:.0} %")),
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_else(|| "unknown".into()),
    );
    let mut failed = 0;

    for slice in slices {
        failed += all_at_once(&socket, clients, drivers, slice);
    }

    println!("(2) one after another: {honest} honest requests, each on a new connection");
    failed += report(one_by_one(&socket, honest).iter().map(Outcome::honest_ok));

    println!(
        "(3) all at once, one OS thread per client ({clients} threads released by a barrier; the generator's threads compete with the server for the CPUs); honest clients use status::query, which also parses the answer"
    );
    failed += report(thread_per_client(&socket, clients)?);

    if failed == 0 {
        Ok(())
    } else {
        anyhow::bail!("{failed} honest requests failed")
    }
}
