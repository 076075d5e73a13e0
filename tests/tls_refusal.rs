//! A peer refusing the TLS handshake, as `run`'s start wait reads it from etcd's log
//! (`shared::service::refusal`): two real etcd members on loopback whose peer
//! certificates come from two CAs (made with openssl here) refuse each other from their
//! first seconds, and the watch fed with one member's log fails with `etcd-tls-refused`
//! naming the other's peer URL and etcd's words, within seconds; the same two members with
//! one CA elect a leader and the watch says nothing.
mod support;

use etcd_setup::member::service::refusal::Watch;
use etcd_setup::reason::{Failure, ReasonCode};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::pki::{days_from_now, Pki};

struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Two loopback addresses of this process and a free port (client, peer) on each.
fn addresses() -> [(Ipv4Addr, u16, u16); 2] {
    let x = (std::process::id() % 200 + 20) as u8;
    let y = (std::process::id() / 200 % 250 + 1) as u8;
    [1u8, 2].map(|i| {
        let ip = Ipv4Addr::new(127, x, y, i);
        let a = TcpListener::bind((ip, 0)).unwrap();
        let b = TcpListener::bind((ip, 0)).unwrap();
        (
            ip,
            a.local_addr().unwrap().port(),
            b.local_addr().unwrap().port(),
        )
    })
}

/// What the watch says about member 1's log, until it fails the start, member 1 serves
/// clients (READY), or 60 s passed; and how long after the start.
fn watch_two(version: &str, same_ca: bool) -> (Option<Failure>, Duration, bool) {
    let bin = support::etcd::release(version);
    let cas = [Pki::new(), Pki::new()];
    let members = addresses();
    let initial: Vec<(String, String)> = members
        .iter()
        .enumerate()
        .map(|(i, (ip, _, peer))| (format!("m{}", i + 1), format!("https://{ip}:{peer}")))
        .collect();
    let initial_arg = initial
        .iter()
        .map(|(n, u)| format!("{n}={u}"))
        .collect::<Vec<_>>()
        .join(",");
    let data = support::scratch::dir("tls-refusal");
    let mut children = Killed(Vec::new());
    let mut log = None;
    let started = Instant::now();
    for (i, (ip, client, peer)) in members.iter().enumerate() {
        let ca = &cas[if same_ca { 0 } else { i }];
        let name = format!("m{}", i + 1);
        let key = ca.key(&name, "ec");
        let crt: PathBuf = ca.leaf(
            &name,
            &key,
            // Loopback dials come from 127.0.0.1, which etcd checks a peer's SAN against.
            &format!("IP:{ip},IP:127.0.0.1"),
            &days_from_now(-1),
            &days_from_now(2),
        );
        let mut cmd = Command::new(bin.join("etcd"));
        cmd.env_clear()
            .arg("--logger=zap")
            .arg(format!("--name={name}"))
            .arg(format!("--data-dir={}", data.path().join(&name).display()))
            .arg(format!("--listen-client-urls=http://{ip}:{client}"))
            .arg(format!("--advertise-client-urls=http://{ip}:{client}"))
            .arg(format!("--listen-peer-urls=https://{ip}:{peer}"))
            .arg(format!("--initial-advertise-peer-urls=https://{ip}:{peer}"))
            .arg(format!("--initial-cluster={initial_arg}"))
            .arg("--initial-cluster-token=tok-refusal")
            .arg(format!("--peer-cert-file={}", crt.display()))
            .arg(format!("--peer-key-file={}", key.display()))
            .arg(format!(
                "--peer-trusted-ca-file={}",
                ca.path("ca.crt").display()
            ))
            .arg("--peer-client-cert-auth")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: only the async-signal-safe prctl between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Some(nix::sys::signal::Signal::SIGKILL))
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = cmd.spawn().expect("spawn etcd");
        let stderr = child.stderr.take().unwrap();
        if i == 0 {
            log = Some(stderr);
        } else {
            std::thread::spawn(move || for _ in BufReader::new(stderr).lines() {});
        }
        children.0.push(child);
    }
    let (tx, rx) = mpsc::channel();
    let stderr = log.unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Member 1's peers, as the start wait builds them: every member but itself.
    let mut watch = Watch::new(&initial[1..], "tok-refusal");
    let mut last = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(60).saturating_sub(started.elapsed()))
    {
        if let Some(f) = watch.observe(&line, Instant::now()) {
            return (Some(f), started.elapsed(), false);
        }
        last.push(line.clone());
        if line.contains("published local member to cluster through raft") {
            return (None, started.elapsed(), true);
        }
    }
    eprintln!(
        "etcd {version}: member 1's last lines:\n{}",
        last[last.len().saturating_sub(8)..].join("\n")
    );
    (None, started.elapsed(), false)
}

fn refused_within_seconds(version: &str) {
    let (failure, after, ready) = watch_two(version, false);
    let f = failure.unwrap_or_else(|| panic!("etcd {version}: no refusal seen (ready: {ready})"));
    println!(
        "etcd {version}: {} after {:.1} s: {}",
        f.code.as_str(),
        after.as_secs_f64(),
        f.message
    );
    assert_eq!(f.code, ReasonCode::EtcdTlsRefused);
    assert!(
        f.message.contains("peer m2 at https://127."),
        "{}",
        f.message
    );
    assert!(
        f.message.contains("tls: bad certificate") || f.message.contains("x509: "),
        "{}",
        f.message
    );
}

fn one_ca_is_no_refusal(version: &str) {
    let (failure, after, ready) = watch_two(version, true);
    assert!(failure.is_none(), "etcd {version}: {failure:?}");
    assert!(ready, "etcd {version}: not ready after {after:?}");
}

#[test]
fn two_cas_are_refused_within_seconds_on_3_4_23() {
    refused_within_seconds("3.4.23");
}

#[test]
fn two_cas_are_refused_within_seconds_on_3_5_16() {
    refused_within_seconds("3.5.16");
}

#[test]
fn one_ca_starts_without_a_refusal_on_3_4_23() {
    one_ca_is_no_refusal("3.4.23");
}

#[test]
fn one_ca_starts_without_a_refusal_on_3_5_16() {
    one_ca_is_no_refusal("3.5.16");
}
