//! `etcd-setup rotate-ca`'s guards against real etcd 3.5.16 on loopback: three members
//! with mutual TLS on peer and client URLs, the binary run with `--config` describing one
//! of them. Every refusal comes before etcd.service is touched (no systemd here): a bundle
//! that lacks the CA of this member's own certificate, a peer serving a certificate of a
//! CA this member's bundle lacks (read from its peer port), and a cluster without quorum.
mod support;

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-setup");
const VERSION: &str = "3.5.16";

use support::etcd::openssl;

/// A CA `name` in `dir` (`NAME.crt`, `NAME.key`) and a leaf of it (`NAME-leaf.crt`,
/// `.key`) for server and client use at `ips`.
fn ca_and_leaf(dir: &Path, name: &str, ips: &[Ipv4Addr]) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    // 127.0.0.1 too: etcd checks a peer's client certificate against the address it dials
    // from, which on loopback is 127.0.0.1.
    let mut sans: Vec<String> = ips.iter().map(|ip| format!("IP:{ip}")).collect();
    sans.push("IP:127.0.0.1".into());
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!(
            "subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n",
            sans.join(",")
        ),
    )
    .unwrap();
    let leaf = format!("{name}-leaf");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{leaf}.key"),
            "-out",
            &format!("{leaf}.csr"),
            "-subj",
            &format!("/CN={leaf}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{leaf}.csr"),
            "-CA",
            &format!("{name}.crt"),
            "-CAkey",
            &format!("{name}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &format!("{leaf}.crt"),
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

/// Three loopback addresses with a client and a peer port free on each.
fn addresses() -> (Vec<Ipv4Addr>, u16, u16) {
    for k in 0..50u32 {
        let seed = std::process::id()
            .wrapping_mul(2654435761)
            .wrapping_add(k * 7919);
        let (x, y) = (((seed >> 8) % 200 + 20) as u8, (seed % 250 + 1) as u8);
        let ips: Vec<Ipv4Addr> = (1..=3).map(|i| Ipv4Addr::new(127, x, y, i)).collect();
        let (Ok(a), Ok(b)) = (
            TcpListener::bind((ips[0], 0)),
            TcpListener::bind((ips[0], 0)),
        ) else {
            continue;
        };
        let (client, peer) = (
            a.local_addr().unwrap().port(),
            b.local_addr().unwrap().port(),
        );
        let free = ips[1..].iter().all(|ip| {
            TcpListener::bind((*ip, client)).is_ok() && TcpListener::bind((*ip, peer)).is_ok()
        });
        if free {
            return (ips, client, peer);
        }
    }
    panic!("no free loopback ports");
}

/// What a member's log said: (serving clients, exited, its lines), and its signal.
type Log = Arc<(Mutex<(bool, bool, Vec<String>)>, Condvar)>;

/// One etcd member and whether it said it serves clients.
struct Member {
    child: Child,
    ready: Log,
}

/// A three-member etcd cluster with mutual TLS on both sides; member `i` presents
/// `leaves[i]` and every member trusts `bundle`.
struct Tls3 {
    dir: tempfile::TempDir,
    ips: Vec<Ipv4Addr>,
    client_port: u16,
    peer_port: u16,
    members: Vec<Option<Member>>,
}

impl Tls3 {
    fn initial(&self) -> String {
        (0..3)
            .map(|i| format!("m{}=https://{}:{}", i + 1, self.ips[i], self.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn start(leaves: [&str; 3], bundle: &str) -> Tls3 {
        let dir = support::scratch::dir("rotate-ca");
        let (ips, client_port, peer_port) = addresses();
        ca_and_leaf(dir.path(), "ca1", &ips);
        ca_and_leaf(dir.path(), "ca2", &ips);
        let pem = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        std::fs::write(
            dir.path().join("both.crt"),
            pem("ca1.crt") + &pem("ca2.crt"),
        )
        .unwrap();
        let mut c = Tls3 {
            dir,
            ips,
            client_port,
            peer_port,
            members: Vec::new(),
        };
        let bin = support::etcd::release(VERSION);
        let initial = c.initial();
        for (i, leaf) in leaves.iter().enumerate() {
            let d = c.dir.path();
            let (client, peer) = (
                format!("https://{}:{}", c.ips[i], client_port),
                format!("https://{}:{}", c.ips[i], peer_port),
            );
            let (crt, key, ca) = (
                d.join(format!("{leaf}.crt")),
                d.join(format!("{leaf}.key")),
                d.join(bundle),
            );
            let mut cmd = Command::new(bin.join("etcd"));
            cmd.env_clear()
                .arg(format!("--name=m{}", i + 1))
                .arg(format!(
                    "--data-dir={}",
                    d.join(format!("m{}", i + 1)).display()
                ))
                .arg(format!("--listen-client-urls={client}"))
                .arg(format!("--advertise-client-urls={client}"))
                .arg(format!("--listen-peer-urls={peer}"))
                .arg(format!("--initial-advertise-peer-urls={peer}"))
                .arg(format!("--initial-cluster={initial}"))
                .arg("--initial-cluster-state=new")
                .arg("--initial-cluster-token=tok-rotate")
                .arg("--heartbeat-interval=50")
                .arg("--election-timeout=500")
                .arg(format!("--cert-file={}", crt.display()))
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--trusted-ca-file={}", ca.display()))
                .arg("--client-cert-auth")
                .arg(format!("--peer-cert-file={}", crt.display()))
                .arg(format!("--peer-key-file={}", key.display()))
                .arg(format!("--peer-trusted-ca-file={}", ca.display()))
                .arg("--peer-client-cert-auth")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().expect("spawn etcd");
            let stderr = child.stderr.take().unwrap();
            let ready: Log = Arc::default();
            let seen = ready.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut g = seen.0.lock().unwrap();
                    if line.contains(r#""msg":"serving client traffic"#) {
                        g.0 = true;
                    }
                    g.2.push(line);
                    seen.1.notify_all();
                }
                seen.0.lock().unwrap().1 = true;
                seen.1.notify_all();
            });
            c.members.push(Some(Member { child, ready }));
        }
        for m in c.members.iter().flatten() {
            let (lock, cv) = &*m.ready;
            let g = cv
                .wait_timeout_while(lock.lock().unwrap(), Duration::from_secs(60), |g| {
                    !g.0 && !g.1
                })
                .unwrap()
                .0;
            assert!(
                g.0,
                "etcd not ready:\n{}",
                g.2[g.2.len().saturating_sub(20)..].join("\n")
            );
        }
        c
    }

    fn stop(&mut self, i: usize) {
        if let Some(mut m) = self.members[i].take() {
            let _ = m.child.kill();
            let _ = m.child.wait();
        }
    }

    /// A configuration of member `i` with `client_ca` and `peer_ca` as its bundles and
    /// `leaf` as its certificate on both sides.
    fn config(&self, i: usize, leaf: &str, client_ca: &str, peer_ca: &str) -> PathBuf {
        let d = self.dir.path();
        let state = d.join(format!("state-{i}"));
        std::fs::create_dir_all(&state).unwrap();
        let f = |n: &str| d.join(n).display().to_string();
        let text = format!(
            r#"[node]
name = "m{n}"
ip = "{ip}"

[etcd]
initial_cluster = "{initial}"
cluster_token = "tok-rotate"
data_dir = "{data}"
client_port = {client}
peer_port = {peer}
metrics_port = {metrics}

[install]
dir = "{bin}"

[report]
failure_file = "{state}/failed"

[tls]
client_cert = "{cert}"
client_key = "{key}"
client_trusted_ca = "{client_ca}"
peer_cert = "{cert}"
peer_key = "{key}"
peer_trusted_ca = "{peer_ca}"
"#,
            n = i + 1,
            ip = self.ips[i],
            initial = self.initial(),
            data = d.join(format!("m{}", i + 1)).display(),
            client = self.client_port,
            peer = self.peer_port,
            metrics = self.peer_port.wrapping_add(1).max(1024),
            bin = support::etcd::release(VERSION).display(),
            state = state.display(),
            cert = f(&format!("{leaf}.crt")),
            key = f(&format!("{leaf}.key")),
            client_ca = f(client_ca),
            peer_ca = f(peer_ca),
        );
        let path = d.join(format!("config-{i}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `etcd-setup rotate-ca --config CFG` with the state folders in the scratch folder.
    fn rotate_ca(&self, i: usize, cfg: &Path) -> Output {
        let state = self.dir.path().join(format!("state-{i}"));
        Command::new(BIN)
            .args(["rotate-ca", "--health-wait", "15s", "--config"])
            .arg(cfg)
            .arg("--run-dir")
            .arg(state.join("run"))
            .arg("--state-dir")
            .arg(state.join("lib"))
            .args(["--lock-wait", "20s"])
            // Never the host's systemd: a restart that passed every check stops at the bus.
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                "unix:path=/nonexistent/system_bus_socket",
            )
            .output()
            .unwrap()
    }
}

impl Drop for Tls3 {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.stop(i);
        }
    }
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Member m2 presents a leaf of CA 2, m1 and m3 of CA 1; every member trusts both.
#[test]
fn rotate_ca_refuses_a_bundle_that_would_cut_this_member_or_a_peer_off() {
    let c = Tls3::start(["ca1-leaf", "ca2-leaf", "ca1-leaf"], "both.crt");
    let dir = c.dir.path().display().to_string();

    // This member's own certificate (CA 1) against a peer bundle of CA 2 only.
    let cfg = c.config(0, "ca1-leaf", "both.crt", "ca2.crt");
    let out = c.rotate_ca(0, &cfg);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(6), "{text}");
    assert!(
        text.contains("cert-untrusted: tls.peer_trusted_ca"),
        "{text}"
    );
    assert!(text.contains(&format!("{dir}/ca2.crt")), "{text}");
    assert!(text.contains(&format!("{dir}/ca1-leaf.crt")), "{text}");

    // A peer bundle of CA 1 only: m2 serves a certificate of CA 2 on its peer port.
    let cfg = c.config(0, "ca1-leaf", "both.crt", "ca1.crt");
    let out = c.rotate_ca(0, &cfg);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(6), "{text}");
    assert!(
        text.contains(&format!(
            "cert-untrusted: member m2 at https://{}:{}",
            c.ips[1], c.peer_port
        )),
        "{text}"
    );
    assert!(text.contains("CN=ca2-leaf"), "{text}");
    assert!(text.contains(&format!("{dir}/ca1.crt")), "{text}");

    // Both CAs trusted, and the cluster healthy: every check passes (the restart itself
    // needs systemd, which the VM test has); the served certificates were read.
    let cfg = c.config(0, "ca1-leaf", "both.crt", "both.crt");
    let out = c.rotate_ca(0, &cfg);
    let text = said(&out);
    assert!(
        text.contains("this member's certificate and 2 served by the others chain to it"),
        "{text}"
    );
    assert!(text.contains("holds etcd-setup/rotate-ca"), "{text}");
}

#[test]
fn rotate_ca_refuses_without_quorum_and_touches_nothing() {
    let mut c = Tls3::start(["ca1-leaf", "ca1-leaf", "ca1-leaf"], "ca1.crt");
    c.stop(1);
    c.stop(2);
    let cfg = c.config(0, "ca1-leaf", "ca1.crt", "ca1.crt");
    let out = c.rotate_ca(0, &cfg);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(6), "{text}");
    assert!(text.contains("cluster-unhealthy:"), "{text}");
    // Asked again within --health-wait before the refusal.
    assert!(
        text.contains("; asking again in 5 s (until 15 s of --health-wait)"),
        "{text}"
    );
    // etcd of this member still runs (nothing stopped it).
    assert!(c.members[0]
        .as_mut()
        .unwrap()
        .child
        .try_wait()
        .unwrap()
        .is_none());
}
