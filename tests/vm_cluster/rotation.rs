//! Certificate rotation on the TLS cluster c3 (issue 22 items 2 and 3): new leaves from
//! the same CA replace the old ones on every node without a restart; then the CA itself
//! is rotated in three phases with `etcd-setup rotate-ca`.

use crate::bed::*;
use crate::pki::*;
use crate::support::vm::{report, unix_now, Remote};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The client certificate and key the probes present: a copy made before any rotation,
/// so a probe never reads a certificate and key caught between two renames.
const PROBE: &str = "/root/probe";

/// One TLS health probe: when it was sent, when its answer came, whether etcd said healthy.
#[derive(Clone, Debug)]
pub struct Probe {
    pub asked: f64,
    pub at: f64,
    pub ok: bool,
    pub said: String,
}

/// Every probe of one node, in order; the thread signals each new one.
#[derive(Default)]
struct Probes {
    list: Mutex<Vec<Probe>>,
    added: Condvar,
}

/// A thread per node asking that node's etcd over its https client URL whether it is
/// healthy, one new TLS connection (and handshake) each time, until stopped.
pub struct Prober {
    stop: Arc<AtomicBool>,
    threads: Vec<(String, Arc<Probes>, std::thread::JoinHandle<()>)>,
}

impl Prober {
    /// Starts probing every node of `c`, through `ca` as the client's trust bundle.
    pub fn start(c: &Cluster, ca: &str) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = c
            .nodes
            .iter()
            .map(|n| {
                let (remote, stop) = (n.remote(), stop.clone());
                let probes = Arc::new(Probes::default());
                let kept = probes.clone();
                let cmd = format!(
                    "sudo ETCDCTL_API=3 /opt/bin/etcdctl --dial-timeout=3s --command-timeout=5s \
                     --cacert={ca} --cert={PROBE}.crt --key={PROBE}.key \
                     --endpoints=https://{}:2379 endpoint health 2>&1",
                    n.ip
                );
                let handle = std::thread::spawn(move || probe(&remote, &cmd, &stop, &kept));
                (n.name.clone(), probes, handle)
            })
            .collect();
        Prober { stop, threads }
    }

    /// Awaits, on every node, a probe sent at or after host time `since` and a status poll
    /// too (at most 120 s): the probes and polls have seen that moment.
    pub fn await_after(&self, c: &Cluster, since: f64) {
        for (name, probes, _) in &self.threads {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut list = probes.list.lock().unwrap();
            while !list.iter().any(|p| p.asked >= since) {
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(!left.is_zero(), "{name}: no TLS health probe within 120 s");
                list = probes.added.wait_timeout(list, left).unwrap().0;
            }
        }
        for n in &c.nodes {
            n.await_sample(since, Duration::from_secs(120), |_| true);
        }
    }

    /// Stops the probes; every node's probes.
    pub fn finish(self) -> Vec<(String, Vec<Probe>)> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|(name, probes, h)| {
                h.join().expect("prober thread");
                let list = std::mem::take(&mut *probes.list.lock().unwrap());
                (name, list)
            })
            .collect()
    }
}

fn probe(remote: &Remote, cmd: &str, stop: &AtomicBool, probes: &Probes) {
    while !stop.load(Ordering::Relaxed) {
        let asked = unix_now();
        let o = remote.run(Duration::from_secs(30), cmd);
        let said = String::from_utf8_lossy(&o.stdout).trim().to_string();
        probes.list.lock().unwrap().push(Probe {
            asked,
            at: unix_now(),
            ok: o.status.success() && said.contains("is healthy"),
            said,
        });
        probes.added.notify_all();
        std::thread::sleep(POLL_EVERY);
    }
}

/// etcd's MainPID on every node.
fn main_pids(c: &Cluster) -> Vec<String> {
    c.nodes
        .iter()
        .map(|n| {
            n.vm()
                .ssh_ok("systemctl show -p MainPID --value etcd")
                .trim()
                .to_string()
        })
        .collect()
}

/// Serial numbers compare without leading zeros (DER pads a serial whose high bit is
/// set; openssl does not print that byte).
fn same_serial(a: &str, b: &str) -> bool {
    a.trim_start_matches('0')
        .eq_ignore_ascii_case(b.trim_start_matches('0'))
}

/// The serial etcd serves on `ip:port`, as a new handshake from node `via` shows it.
pub fn served(c: &Cluster, via: usize, ip: &str, port: u16, ca: &str) -> (String, String) {
    let out = c.nodes[via].vm().ssh_ok(&format!(
        "sudo openssl s_client -connect {ip}:{port} -CAfile {ca} -cert {PROBE}.crt -key {PROBE}.key \
         </dev/null 2>/dev/null | openssl x509 -noout -serial -issuer"
    ));
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in what {ip}:{port} served: {out}"))
            .trim()
            .to_string()
    };
    (field("serial"), field("issuer"))
}

/// The certificate `key` (`tls.peer_cert`, …) in node `i`'s status JSON.
fn status_cert(c: &Cluster, i: usize, key: &str) -> Value {
    let out = c.nodes[i].vm().ssh("etcd-setup status --format json");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    doc["certificates"]
        .as_array()
        .and_then(|a| a.iter().find(|v| v["key"] == key).cloned())
        .unwrap_or_else(|| panic!("no {key} in status: {doc}"))
}

/// Installs `files` ((name in PKI_DIR, mode, PEM)) on node `i` as an operator's `install`
/// or cloud-init's write_files would: each written to a temporary file in the same folder,
/// then renamed over the old one, the key first.
fn replace_files(c: &Cluster, i: usize, files: &[(&str, &str, &str)]) {
    let vm = c.nodes[i].vm();
    let staged = tempfile::tempdir().expect("tempdir");
    let mut script = String::from("set -e; umask 077; ");
    let mut renames = String::new();
    for (name, mode, pem) in files {
        let local = staged.path().join(name);
        std::fs::write(&local, pem).expect("stage PEM");
        let upload = format!("/home/cloud/.upload-{name}");
        vm.copy_in(&local, &upload);
        script.push_str(&format!(
            "install -o root -g etcd -m {mode} {upload} {PKI_DIR}/.{name}.new; rm -f {upload}; "
        ));
        renames.push_str(&format!("mv -f {PKI_DIR}/.{name}.new {PKI_DIR}/{name}; "));
    }
    vm.ssh_ok(&format!("sudo sh -c '{script}{renames}'"));
}

/// The probes' client certificate: a copy of node `i`'s current leaf and key.
fn keep_probe_cert(c: &Cluster) {
    for n in &c.nodes {
        n.vm().ssh_ok(&format!(
            "sudo install -m 0600 {PKI_DIR}/node.crt {PROBE}.crt && sudo install -m 0600 {PKI_DIR}/node.key {PROBE}.key"
        ));
    }
}

/// The failed status polls of every node answered in `from..=to`, and their count.
fn failed_polls(c: &Cluster, from: f64, to: f64) -> (usize, Vec<String>) {
    let mut count = 0;
    let mut failed = Vec::new();
    for n in &c.nodes {
        for s in n.samples.list.lock().unwrap().iter() {
            if s.asked >= from && s.at <= to {
                count += 1;
                if (s.verdict.as_str(), s.exit) != ("running", 0) {
                    failed.push(format!("{}: {s:?}", n.name));
                }
            }
        }
    }
    (count, failed)
}

/// Issue 22 item 2: new leaf certificates and keys from the same CA, renamed over the old
/// files on every node while every node's status and TLS health are polled. etcd re-reads
/// its leaf per handshake: its PID stays, a new handshake (client and peer port) shows
/// the new serial, status shows the new expiry, and no poll failed.
pub fn leaves_from_the_same_ca_replace_the_old_ones_without_a_restart(c: &Cluster, pki: &Pki) {
    let ca = format!("{PKI_DIR}/ca.crt");
    keep_probe_cert(c);
    let pids = main_pids(c);
    let before: Vec<String> = (0..3)
        .map(|i| {
            status_cert(c, i, "tls.peer_cert")["serial"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    // One day instead of two: a not-after of its own.
    let fresh: Vec<NodeCert> = c
        .nodes
        .iter()
        .map(|n| pki.issue_for(&n.name, &n.ip, 1))
        .collect();
    let t0 = unix_now();
    let prober = Prober::start(c, &ca);
    // Probes and polls before the swap, so "throughout" has a before.
    prober.await_after(c, t0);
    let swap = unix_now();
    for (i, cert) in fresh.iter().enumerate() {
        replace_files(
            c,
            i,
            &[
                ("node.key", "0640", &cert.key),
                ("node.crt", "0644", &cert.cert),
            ],
        );
    }
    let swapped = unix_now();
    // What a new handshake shows, on the client and the peer port of every member.
    let mut shown = Vec::new();
    for (i, (n, cert)) in c.nodes.iter().zip(&fresh).enumerate() {
        let want = x509_field(&cert.cert, "serial");
        for port in [2379, 2380] {
            let (serial, _) = served(c, (i + 1) % 3, &n.ip, port, &ca);
            assert!(
                same_serial(&serial, &want),
                "{}:{port} serves serial {serial}, want the new {want}",
                n.name
            );
            shown.push(format!("{}:{port} {serial}", n.name));
        }
    }
    // status (its cache keyed by inode, mtime and size) shows the new facts.
    let mut expiries = Vec::new();
    for (i, (n, cert)) in c.nodes.iter().zip(&fresh).enumerate() {
        for key in ["tls.peer_cert", "tls.client_cert"] {
            let v = status_cert(c, i, key);
            let serial = v["serial"].as_str().unwrap_or_default();
            assert!(
                same_serial(serial, &x509_field(&cert.cert, "serial")),
                "{}: status shows {key} serial {serial}: {v}",
                n.name
            );
            assert!(
                !same_serial(serial, &before[i]),
                "{}: old serial: {v}",
                n.name
            );
            assert!(v.get("problem").is_none(), "{}: {v}", n.name);
            if key == "tls.peer_cert" {
                expiries.push(format!(
                    "{} {} -> {}",
                    n.name,
                    before[i],
                    v["not_after"].as_str().unwrap_or_default()
                ));
            }
        }
    }
    // And after it.
    prober.await_after(c, unix_now());
    let probes = prober.finish();
    let t1 = unix_now();
    assert_eq!(main_pids(c), pids, "etcd restarted during a leaf rotation");
    let (polls, failed) = failed_polls(c, t0, t1);
    let probe_count: usize = probes.iter().map(|(_, p)| p.len()).sum();
    let probe_failed: Vec<String> = probes
        .iter()
        .flat_map(|(name, p)| {
            p.iter().filter(|p| !p.ok).map(move |p| {
                format!(
                    "{name} +{:.1}..{:.1} s: {}",
                    p.asked - t0,
                    p.at - t0,
                    p.said
                )
            })
        })
        .collect();
    report(&format!(
        "cluster c3: leaf rotation: new leaves copied in and renamed over the old, node after node, in {:.1} s; etcd MainPIDs unchanged {pids:?}; \
         new handshakes serve {shown:?}; status (old serial -> new not-after): {expiries:?}; over {:.1} s: {polls} status polls ({} failed), \
         {probe_count} TLS health probes ({} failed)",
        swapped - swap,
        t1 - t0,
        failed.len(),
        probe_failed.len()
    ));
    assert!(failed.is_empty(), "status polls failed: {failed:#?}");
    assert!(
        probe_failed.is_empty(),
        "TLS health probes failed: {probe_failed:#?}"
    );
    assert!(
        polls >= 3 && probe_count >= 3,
        "too few polls: {polls}, {probe_count}"
    );
}
