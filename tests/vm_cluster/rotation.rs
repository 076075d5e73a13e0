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

impl Probe {
    /// Whether it failed for want of an answer in time (etcdctl's `context deadline
    /// exceeded`, a guest starved of CPU under TCG) and not on the certificate or the
    /// handshake: what a rotation must never cause.
    fn only_late(&self) -> bool {
        let s = self.said.to_ascii_lowercase();
        !self.ok
            && s.contains("deadline exceeded")
            && !["certificate", "x509", "tls", "handshake"]
                .iter()
                .any(|w| s.contains(w))
    }
}

/// Whether probe `k` of one node's `list` is excused: it only ran out of time and that
/// node's next probe answered healthy. etcdctl can hide a refused handshake behind the
/// same deadline; one that a rotation broke would not answer the next time either.
fn excused(list: &[Probe], k: usize) -> bool {
    list[k].only_late() && list.get(k + 1).is_some_and(|next| next.ok)
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
                    "sudo ETCDCTL_API=3 /opt/bin/etcdctl --dial-timeout=5s --command-timeout=10s \
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
pub fn replace_files(c: &Cluster, i: usize, files: &[(&str, &str, &str)]) {
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

/// What node-exporter on the first node serves as `etcd_setup_certificate_expiring` of
/// tls.peer_cert: (the serial label, the value).
fn expiring_peer_cert(c: &Cluster) -> (String, f64) {
    let samples = c.nodes[0].vm().scrape_node_exporter();
    let series: Vec<(&String, &f64)> = samples
        .iter()
        .filter(|(k, _)| {
            k.starts_with("etcd_setup_certificate_expiring{") && k.contains("key=\"tls.peer_cert\"")
        })
        .collect();
    assert_eq!(series.len(), 1, "{samples:?}");
    let (name, value) = series[0];
    let serial = name
        .split("serial=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no serial label: {name}"));
    (serial.to_string(), *value)
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
    // warn_days = 1 (pki::with_tls): the leaves of two days are not yet within it, the
    // new ones of one day are. node-exporter serves the crossing.
    let before_scrape = expiring_peer_cert(c);
    assert_eq!(before_scrape.1, 0.0, "{before_scrape:?}");
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
    let after_scrape = expiring_peer_cert(c);
    assert_eq!(after_scrape.1, 1.0, "{after_scrape:?}");
    assert!(
        same_serial(&after_scrape.0, &x509_field(&fresh[0].cert, "serial")),
        "{after_scrape:?}"
    );
    report(&format!(
        "cluster c3: node-exporter on {}: etcd_setup_certificate_expiring of tls.peer_cert (tls.warn_days = 1): \
         serial {} {} -> serial {} {}",
        c.nodes[0].name, before_scrape.0, before_scrape.1, after_scrape.0, after_scrape.1
    ));
    // And after it.
    prober.await_after(c, unix_now());
    let probes = prober.finish();
    let t1 = unix_now();
    assert_eq!(main_pids(c), pids, "etcd restarted during a leaf rotation");
    let (polls, failed) = failed_polls(c, t0, t1);
    let probe_count: usize = probes.iter().map(|(_, p)| p.len()).sum();
    // A probe that timed out, the node's next one healthy, is counted and shown, not
    // failed: whether the cluster stayed healthy is the status polls' to say (each
    // unhealthy answer read again, as the management server gets it); a probe's own is
    // whether the handshake held.
    let late: Vec<String> = probes
        .iter()
        .flat_map(|(name, list)| {
            (0..list.len()).filter(|&k| excused(list, k)).map(move |k| {
                let p = &list[k];
                format!("{name} +{:.1}..{:.1} s", p.asked - t0, p.at - t0)
            })
        })
        .collect();
    let probe_failed: Vec<String> = probes
        .iter()
        .flat_map(|(name, list)| {
            let failed = (0..list.len()).filter(|&k| !list[k].ok && !excused(list, k));
            failed.map(move |k| {
                let p = &list[k];
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
         {probe_count} TLS health probes ({} failed, {} out of time {late:?})",
        swapped - swap,
        t1 - t0,
        failed.len(),
        probe_failed.len(),
        late.len()
    ));
    assert!(failed.is_empty(), "status polls failed: {failed:#?}");
    assert!(
        probe_failed.is_empty(),
        "TLS health probes failed: {probe_failed:#?}"
    );
    // Handshakes on every node, before and after the swap (await_after), that answered.
    let answered = probe_count - late.len();
    assert!(
        polls >= 3 && answered >= 6,
        "too few polls or answered probes: {polls}, {answered} of {probe_count}"
    );
}

/// `etcd-setup rotate-ca` started on every node at once; each node's (name, host time it
/// ended, exit code, stdout, stderr), in node order.
fn rotate_ca_everywhere(c: &Cluster) -> Vec<(String, f64, i32, String, String)> {
    let remotes: Vec<Remote> = c.nodes.iter().map(|n| n.remote()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = remotes
            .iter()
            .map(|r| {
                s.spawn(move || {
                    let out = r.run(
                        Duration::from_secs(1500),
                        "sudo etcd-setup rotate-ca --lock-wait 20min --leader-wait 10min",
                    );
                    (
                        r.name.clone(),
                        unix_now(),
                        out.status.code().unwrap_or(-1),
                        String::from_utf8_lossy(&out.stdout).trim().to_string(),
                        String::from_utf8_lossy(&out.stderr).trim().to_string(),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// One phase's restarts: every node's rotate-ca exits 0; each node's turn runs from the
/// previous node's end to its own, and no poll of a node outside its turn says `failed`
/// (inside it, one caught mid-restart says `in-progress`, naming rotate-ca). The order
/// and the counts are printed.
fn rolling_restart(c: &Cluster, phase: &str) {
    let t0 = unix_now();
    let results = rotate_ca_everywhere(c);
    for (name, end, code, out, err) in &results {
        report(&format!(
            "cluster c3: {phase}: rotate-ca on {name}: exit {code} at +{:.1} s: {out} | {}",
            end - t0,
            err.replace('\n', " | ")
        ));
        assert_eq!(*code, 0, "{name}: {out}\n{err}");
    }
    let mut ends: Vec<(f64, String)> = results.iter().map(|r| (r.1, r.0.clone())).collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let last = ends[2].0;
    let mut begin = t0;
    for (end, name) in &ends {
        let n = c.nodes.iter().find(|n| &n.name == name).expect("a node");
        let samples: Vec<Sample> = n.samples.list.lock().unwrap().clone();
        let own: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.at > begin && s.at <= *end)
            .collect();
        let on_purpose = own
            .iter()
            .filter(|s| s.verdict == "in-progress" && s.progress.contains("rotate-ca"))
            .count();
        let outside: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.asked >= t0 && s.at <= last && (s.at <= begin || s.at > *end))
            .collect();
        let failed: Vec<String> = outside
            .iter()
            .filter(|s| s.verdict == "failed")
            .map(|s| format!("+{:.1} s {}: {}", s.at - t0, s.reason, s.message))
            .collect();
        report(&format!(
            "cluster c3: {phase}: {name} turn +{:.1}..+{:.1} s: {} polls ({on_purpose} in-progress on purpose, {} failed); \
             outside its turn: {} polls, {} failed {failed:?}",
            begin - t0,
            end - t0,
            own.len(),
            own.iter().filter(|s| s.verdict == "failed").count(),
            outside.len(),
            failed.len()
        ));
        assert!(
            failed.is_empty(),
            "{name}: {failed:?}\n{}",
            n.timeline(c.zero)
        );
        begin = *end;
    }
    let health = crate::c3::etcdctl_tls(c, 0, "endpoint health --cluster");
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
}

/// Issue 22 item 3: the CA rotated in the README's three phases. 1) a bundle of the old
/// and the new CA on every node, `rotate-ca` on all three at once; 2) new leaves from the
/// new CA, renamed over the old (no restart); 3) a bundle of the new CA only, `rotate-ca`
/// on all three again. Every member's status polled throughout: none failed outside its
/// own turn. Then a new handshake on 2379 and 2380 of every member shows the new CA as
/// issuer, and status the new CA's expiry.
pub fn the_ca_is_rotated_in_three_phases_with_rotate_ca(c: &Cluster, old: &Pki) {
    let ca = format!("{PKI_DIR}/ca.crt");
    let new = Pki::new("c3-ca-2");
    let read = |p: &Pki, f: &str| std::fs::read_to_string(p.dir.path().join(f)).expect("PEM");
    let (old_ca, new_ca) = (read(old, "ca.crt"), read(&new, "ca.crt"));
    let t_all = unix_now();

    let both = format!("{old_ca}{new_ca}");
    for i in 0..3 {
        replace_files(c, i, &[("ca.crt", "0644", &both)]);
    }
    rolling_restart(c, "phase 1 (old + new CA)");

    let pids = main_pids(c);
    let fresh: Vec<NodeCert> = c.nodes.iter().map(|n| new.issue(&n.name, &n.ip)).collect();
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
    assert_eq!(main_pids(c), pids, "etcd restarted for new leaves");
    report("cluster c3: phase 2: leaves of the new CA renamed over the old on 3 nodes, etcd PIDs unchanged");
    // The probes' client certificate from now on: a leaf of the new CA.
    keep_probe_cert(c);

    for i in 0..3 {
        replace_files(c, i, &[("ca.crt", "0644", &new_ca)]);
    }
    rolling_restart(c, "phase 3 (new CA only)");

    let want = x509_field(&new_ca, "subject");
    let mut shown = Vec::new();
    for (i, n) in c.nodes.iter().enumerate() {
        for port in [2379, 2380] {
            let (_, issuer) = served(c, (i + 1) % 3, &n.ip, port, &ca);
            assert_eq!(issuer, want, "{}:{port}", n.name);
            shown.push(format!("{}:{port} issuer {issuer}", n.name));
        }
    }
    let ca_end = x509_field(&new_ca, "enddate");
    for i in 0..3 {
        let out = c.nodes[i].vm().ssh("etcd-setup status --format json");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
        let cas: Vec<&Value> = doc["certificates"]
            .as_array()
            .expect("certificates")
            .iter()
            .filter(|v| v["key"] == "tls.peer_trusted_ca")
            .collect();
        assert_eq!(cas.len(), 1, "{cas:?}");
        assert_eq!(cas[0]["subject"], "CN=c3-ca-2", "{}", cas[0]);
        assert!(cas[0].get("problem").is_none(), "{}", cas[0]);
        if i == 0 {
            report(&format!(
                "cluster c3: CA rotated in {:.1} s: new handshakes {shown:?}; status tls.peer_trusted_ca {} not after {} (openssl: {ca_end})",
                unix_now() - t_all,
                cas[0]["subject"],
                cas[0]["not_after"]
            ));
        }
    }
}
