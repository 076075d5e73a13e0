//! Load test of the status server on the host (a benchmark: it prints figures and asserts
//! nothing about time). `cargo run --release --example status_load [CLIENTS]`.
//!
//! Starts the server in this process on a temporary socket, with a state file in phase
//! `running` and a fixed, healthy live view of etcd, then starts CLIENTS (default 1,000)
//! clients at once: 90 % honest, 4 % that connect and never write, 3 % that send garbage,
//! 3 % that send 1 MiB without a newline. Prints the latency of the honest requests (p50,
//! p99, max) and how many of them failed (must be 0); then the latency of the same number
//! of requests one after another.

use etcd_setup::health::Health;
use etcd_setup::report::{Phase, State, StateStore};
use etcd_setup::status::{self, server, EtcdLive, LiveView, Request};
use etcd_setup::systemd::UnitState;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime};

struct Healthy;

impl LiveView for Healthy {
    fn etcd(&self) -> Result<EtcdLive, String> {
        Ok(EtcdLive {
            unit: UnitState {
                load_state: "loaded".into(),
                active_state: "active".into(),
                sub_state: "running".into(),
                ..UnitState::default()
            },
            health: Health::Healthy,
            version: Some("3.5.16".into()),
        })
    }
}

#[derive(Clone, Copy, PartialEq)]
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

fn honest(socket: &Path) -> Result<Duration, String> {
    let request = Request {
        version: status::PROTOCOL_VERSION,
        wait: false,
        timeout_ms: 0,
    };
    let started = Instant::now();
    let answer =
        status::query(socket, &request, Duration::from_secs(30)).map_err(|e| e.to_string())?;
    if answer.exit_code != 0 {
        return Err(format!("verdict {}", answer.verdict.as_str()));
    }
    Ok(started.elapsed())
}

fn hostile(socket: &Path, kind: Kind) {
    let Ok(mut s) = UnixStream::connect(socket) else {
        return;
    };
    match kind {
        Kind::Silent => std::thread::sleep(Duration::from_secs(3)),
        Kind::Garbage => {
            let _ = s.write_all(b"\x00\x01 not json at all\n");
        }
        _ => {
            let _ = s.write_all(&vec![b'x'; 1 << 20]);
        }
    }
    let _ = std::io::Read::read_to_end(&mut s, &mut Vec::new());
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

fn main() -> anyhow::Result<()> {
    let clients: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1000);
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
    };
    std::thread::spawn(move || server::serve(listener, options, Arc::new(Healthy)));

    let barrier = Arc::new(Barrier::new(clients));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let socket = socket.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    barrier.wait();
                    match kind(i) {
                        Kind::Honest => Some(honest(&socket)),
                        k => {
                            hostile(&socket, k);
                            None
                        }
                    }
                })
        })
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Some(Ok(d))) => latencies.push(d),
            Ok(Some(Err(e))) => failures.push(e),
            Ok(None) => {}
            Err(_) => failures.push("client thread panicked".into()),
        }
    }
    let wall = started.elapsed();
    latencies.sort();
    let count = |k: Kind| (0..clients).filter(|&i| kind(i) == k).count();
    println!(
        "{clients} concurrent clients: {} honest, {} silent, {} garbage, {} oversize (1 MiB)",
        count(Kind::Honest),
        count(Kind::Silent),
        count(Kind::Garbage),
        count(Kind::Oversize)
    );
    println!(
        "honest requests: p50 {}, p99 {}, max {}; failed: {}",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default()),
        failures.len()
    );
    for f in failures.iter().take(5) {
        println!("  failed: {f}");
    }
    println!("all clients done after {} (silent ones hold 3 s)", ms(wall));

    let mut one_by_one = Vec::new();
    for _ in 0..count(Kind::Honest) {
        match honest(&socket) {
            Ok(d) => one_by_one.push(d),
            Err(e) => println!("  sequential request failed: {e}"),
        }
    }
    one_by_one.sort();
    println!(
        "sequential honest requests: p50 {}, p99 {}",
        ms(percentile(&one_by_one, 0.5)),
        ms(percentile(&one_by_one, 0.99))
    );
    if failures.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{} honest requests failed", failures.len())
    }
}
