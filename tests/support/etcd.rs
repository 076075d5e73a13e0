//! Real etcd clusters on loopback for host tests: 1 or 3 members of a cached release
//! (tests/inputs/fetch-etcd), each on its own loopback address (127.X.Y.1, .2, .3) with the
//! same client and peer ports, as real nodes have; data dirs in a scratch folder
//! (tests/support/scratch.rs, outside the paths etcd's sandbox hides); every wait bounded
//! and awaited on etcd's own log ("serving client traffic" comes once the member is ready,
//! which for a new cluster means it has a quorum), never slept; each member killed when
//! the cluster drops, and by the kernel if the test process dies (parent-death signal).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a member may take to become ready.
pub const READY_WAIT: Duration = Duration::from_secs(60);

/// The folder of cached releases, fetched once per test process.
pub fn releases() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new(super::vm::repo().join("tests/inputs/fetch-etcd"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/inputs/fetch-etcd");
        assert!(out.status.success(), "tests/inputs/fetch-etcd failed");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// The folder of release `version` (`3.4.23`, `3.5.16`, ...).
pub fn release(version: &str) -> PathBuf {
    let dir = releases().join(format!("etcd-v{version}-linux-amd64"));
    assert!(dir.join("etcd").is_file(), "{} missing", dir.display());
    dir
}

/// What one member's process printed, and whether it is ready or gone.
#[derive(Default)]
struct Log {
    lines: Vec<String>,
    ready: bool,
    exited: bool,
}

/// One etcd member.
pub struct Member {
    /// Its name, `m1`...
    pub name: String,
    /// Its loopback address.
    pub ip: Ipv4Addr,
    /// Its data dir.
    pub data_dir: PathBuf,
    child: Option<Child>,
    log: Arc<(Mutex<Log>, Condvar)>,
}

impl Member {
    /// Whether its process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Its log lines so far.
    pub fn log(&self) -> Vec<String> {
        self.log.0.lock().unwrap().lines.clone()
    }

    /// Waits until the process exited (its log ended) or `wait` passed; true if it did.
    pub fn await_exit(&self, wait: Duration) -> bool {
        let (lock, cv) = &*self.log;
        let g = lock.lock().unwrap();
        let (g, _) = cv.wait_timeout_while(g, wait, |l| !l.exited).unwrap();
        g.exited
    }
}

/// A cluster of real etcd members on loopback.
pub struct Cluster {
    /// The release folder.
    pub bin: PathBuf,
    /// The release's version.
    pub version: String,
    /// The cluster token.
    pub token: String,
    /// The client port every member listens on, on its own address.
    pub client_port: u16,
    /// The peer port likewise.
    pub peer_port: u16,
    /// The members, in start order.
    pub members: Vec<Member>,
    /// Extra flags every member starts with.
    pub extra: Vec<String>,
    /// Client TLS (https, client certificates required) when set.
    pub tls: Option<etcd_setup::shared::config::TlsFiles>,
    dir: tempfile::TempDir,
}

/// A loopback prefix `127.X.Y.` of this process, and client and peer ports free on
/// `n` of its addresses (bound and released, so two tests rarely race for them).
fn addresses(n: usize) -> (Vec<Ipv4Addr>, u16, u16) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    for _ in 0..50 {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let seed = std::process::id()
            .wrapping_mul(2654435761)
            .wrapping_add(k.wrapping_mul(40503));
        let (x, y) = (((seed >> 8) % 200 + 20) as u8, (seed % 250 + 1) as u8);
        let ips: Vec<Ipv4Addr> = (1..=n as u8).map(|i| Ipv4Addr::new(127, x, y, i)).collect();
        let Ok(first) = TcpListener::bind((ips[0], 0)) else {
            continue;
        };
        let Ok(second) = TcpListener::bind((ips[0], 0)) else {
            continue;
        };
        let client = first.local_addr().unwrap().port();
        let peer = second.local_addr().unwrap().port();
        let mut held = vec![first, second];
        let all = ips[1..].iter().all(|ip| {
            match (
                TcpListener::bind((*ip, client)),
                TcpListener::bind((*ip, peer)),
            ) {
                (Ok(a), Ok(b)) => {
                    held.push(a);
                    held.push(b);
                    true
                }
                _ => false,
            }
        });
        if all {
            return (ips, client, peer);
        }
    }
    panic!("no free loopback ports for {n} members");
}

impl Cluster {
    /// Starts a new cluster of `n` members of release `version` with token `token`,
    /// and waits until every member is ready.
    pub fn start(version: &str, n: usize, token: &str) -> Cluster {
        Cluster::start_with(version, n, token, &[])
    }

    /// [`Cluster::start`] with `extra` flags for every member.
    pub fn start_with(version: &str, n: usize, token: &str, extra: &[&str]) -> Cluster {
        Cluster::start_full(version, n, token, extra, false)
    }

    /// [`Cluster::start`] with client TLS: https client URLs, client certificates required,
    /// a CA, server and client certificate made with openssl for the members' addresses.
    pub fn start_tls(version: &str, n: usize, token: &str) -> Cluster {
        Cluster::start_full(version, n, token, &[], true)
    }

    /// A new cluster of `n` members of which only the first `started` are started (and
    /// awaited: they need a quorum of `n`).
    pub fn start_some(version: &str, n: usize, started: usize, token: &str) -> Cluster {
        Cluster::start_full_some(version, n, started, token, &[], false)
    }

    fn start_full(version: &str, n: usize, token: &str, extra: &[&str], with_tls: bool) -> Cluster {
        Cluster::start_full_some(version, n, n, token, extra, with_tls)
    }

    fn start_full_some(
        version: &str,
        n: usize,
        started: usize,
        token: &str,
        extra: &[&str],
        with_tls: bool,
    ) -> Cluster {
        let (ips, client_port, peer_port) = addresses(n);
        let dir = super::scratch::dir("etcd-cluster");
        let members = ips
            .iter()
            .enumerate()
            .map(|(i, ip)| Member {
                name: format!("m{}", i + 1),
                ip: *ip,
                data_dir: dir.path().join(format!("m{}", i + 1)),
                child: None,
                log: Arc::default(),
            })
            .collect();
        let mut c = Cluster {
            bin: release(version),
            version: version.to_string(),
            token: token.to_string(),
            client_port,
            peer_port,
            members,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls: None,
            dir,
        };
        c.tls = tls(c.dir(), &ips, with_tls);
        let initial = c.initial_cluster_arg();
        for i in 0..started {
            c.launch(i, &initial, "new");
        }
        for i in 0..started {
            c.await_ready(i);
        }
        c
    }

    /// A scratch folder beside the members' data dirs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Member `i`'s client URL.
    pub fn client_url(&self, i: usize) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.members[i].ip, self.client_port)
    }

    /// Member `i`'s peer URL.
    pub fn peer_url(&self, i: usize) -> String {
        format!("http://{}:{}", self.members[i].ip, self.peer_port)
    }

    /// Every member's client URL.
    pub fn client_urls(&self) -> Vec<String> {
        (0..self.members.len())
            .map(|i| self.client_url(i))
            .collect()
    }

    /// The initial cluster as (name, peer URL) pairs.
    pub fn initial_cluster(&self) -> Vec<(String, String)> {
        (0..self.members.len())
            .map(|i| (self.members[i].name.clone(), self.peer_url(i)))
            .collect()
    }

    /// The initial cluster as etcd's `--initial-cluster` value.
    pub fn initial_cluster_arg(&self) -> String {
        self.initial_cluster()
            .iter()
            .map(|(n, u)| format!("{n}={u}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// An etcd-setup configuration for member `i`, its files under `dir`, written to
    /// `dir/config-I.toml`: `etcd_lines` are added to its `[etcd]` table (a
    /// `metrics_port` there replaces the default, the peer port + 1) and `extra` is
    /// appended (whole tables). The one writer the day-2 host tests share.
    pub fn config_file(&self, i: usize, dir: &Path, etcd_lines: &str, extra: &str) -> PathBuf {
        let metrics = if etcd_lines.contains("metrics_port") {
            String::new()
        } else {
            format!(
                "metrics_port = {}\n",
                self.peer_port.wrapping_add(1).max(1024)
            )
        };
        let text = format!(
            r#"[node]
name = "{name}"
ip = "{ip}"

[etcd]
initial_cluster = "{initial}"
cluster_token = "{token}"
data_dir = "{dir}/data"
client_port = {client}
peer_port = {peer}
{metrics}{etcd_lines}
[install]
dir = "{bin}"

[report]
failure_file = "{dir}/failed"

{extra}
"#,
            name = self.members[i].name,
            ip = self.members[i].ip,
            initial = self.initial_cluster_arg(),
            token = self.token,
            dir = dir.display(),
            client = self.client_port,
            peer = self.peer_port,
            bin = self.bin.display(),
        );
        let path = dir.join(format!("config-{i}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The release's etcdctl.
    pub fn etcdctl(&self) -> PathBuf {
        self.bin.join("etcdctl")
    }

    /// An etcd-setup client of every member.
    pub fn client(&self) -> etcd_setup::cluster::etcd::Client {
        etcd_setup::cluster::etcd::Client::new(self.etcdctl(), self.client_urls(), self.tls.clone())
    }

    /// Adds a member slot (not started) on the next loopback address, named `name`.
    pub fn add_slot(&mut self, name: &str) -> usize {
        let last = self.members.last().unwrap().ip.octets();
        let ip = Ipv4Addr::new(127, last[1], last[2], last[3] + 1);
        self.members.push(Member {
            name: name.to_string(),
            ip,
            data_dir: self.dir.path().join(name),
            child: None,
            log: Arc::default(),
        });
        self.members.len() - 1
    }

    /// Starts member `i`'s etcd with `--initial-cluster INITIAL --initial-cluster-state
    /// STATE` (does not wait for it).
    pub fn launch(&mut self, i: usize, initial: &str, state: &str) {
        assert!(!self.members[i].is_running(), "member {i} runs already");
        let (client, peer) = (self.client_url(i), self.peer_url(i));
        let m = &mut self.members[i];
        let mut cmd = Command::new(self.bin.join("etcd"));
        cmd.env_clear()
            .arg("--logger=zap")
            .arg(format!("--name={}", m.name))
            .arg(format!("--data-dir={}", m.data_dir.display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={initial}"))
            .arg(format!("--initial-cluster-state={state}"))
            .arg(format!("--initial-cluster-token={}", self.token))
            // Fast elections on loopback keep the tests short.
            .arg("--heartbeat-interval=50")
            .arg("--election-timeout=500")
            .args(&self.extra)
            .args(self.tls.iter().flat_map(|t| {
                [
                    format!("--cert-file={}", t.cert.display()),
                    format!("--key-file={}", t.key.display()),
                    format!("--trusted-ca-file={}", t.trusted_ca.display()),
                    "--client-cert-auth".to_string(),
                ]
            }))
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
        m.log = Arc::default();
        let log = m.log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let (lock, cv) = &*log;
                let mut l = lock.lock().unwrap();
                if line.contains(r#""msg":"serving client traffic"#) {
                    l.ready = true;
                    cv.notify_all();
                }
                l.lines.push(line);
            }
            let (lock, cv) = &*log;
            lock.lock().unwrap().exited = true;
            cv.notify_all();
        });
        m.child = Some(child);
    }

    /// Waits until member `i` serves clients; panics with its log if it exits or the wait
    /// passes [`READY_WAIT`].
    pub fn await_ready(&self, i: usize) {
        let (lock, cv) = &*self.members[i].log;
        let g = lock.lock().unwrap();
        let (g, _) = cv
            .wait_timeout_while(g, READY_WAIT, |l| !l.ready && !l.exited)
            .unwrap();
        if !g.ready {
            let tail = g.lines[g.lines.len().saturating_sub(20)..].join("\n");
            panic!(
                "etcd {} member {} not ready (exited: {}):\n{tail}",
                self.version, self.members[i].name, g.exited
            );
        }
    }

    /// Kills member `i` (SIGKILL) and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops member `i` as systemd would (SIGTERM: etcd commits its backend and closes)
    /// and reaps it; SIGKILL if it has not exited within `wait`. True if it exited on
    /// SIGTERM.
    pub fn stop(&mut self, i: usize, wait: Duration) -> bool {
        let Some(mut c) = self.members[i].child.take() else {
            return true;
        };
        let pid = nix::unistd::Pid::from_raw(c.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let clean = self.members[i].await_exit(wait);
        if !clean {
            let _ = c.kill();
        }
        let _ = c.wait();
        clean
    }

    /// Sends `signal` to member `i`'s etcd (SIGSTOP: a member that stalls but keeps its
    /// sockets, as a guest starved of CPU; SIGCONT: it goes on).
    pub fn signal(&self, i: usize, signal: nix::sys::signal::Signal) {
        let c = self.members[i].child.as_ref().expect("member runs");
        let pid = nix::unistd::Pid::from_raw(c.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal etcd");
    }

    /// Kills member `i` and removes its data dir: the VM that was recreated empty.
    pub fn wipe(&mut self, i: usize) {
        self.kill(i);
        let _ = std::fs::remove_dir_all(&self.members[i].data_dir);
    }

    /// The socket address of member `i`'s client listener.
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from((self.members[i].ip, self.client_port))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// A CA and one certificate for server and client use, valid for `ips`, made with
/// openssl in `dir` (`None` unless `on`).
fn tls(dir: &Path, ips: &[Ipv4Addr], on: bool) -> Option<etcd_setup::shared::config::TlsFiles> {
    if !on {
        return None;
    }
    let run = |args: &[&str]| openssl(dir, args);
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    // The members' addresses and the one `add_slot` gives next (a learner added later).
    let last = ips[ips.len() - 1].octets();
    let spare = Ipv4Addr::new(127, last[1], last[2], last[3] + 1);
    let sans: Vec<String> = ips
        .iter()
        .chain([&spare])
        .map(|ip| format!("IP:{ip}"))
        .collect();
    std::fs::write(
        dir.join("ext.cnf"),
        format!(
            "subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n",
            sans.join(",")
        ),
    )
    .unwrap();
    run(&[
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=etcd", "-keyout", "node.key", "-out",
        "node.csr",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "node.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "node.crt",
    ]);
    Some(etcd_setup::shared::config::TlsFiles {
        cert: dir.join("node.crt"),
        key: dir.join("node.key"),
        trusted_ca: dir.join("ca.crt"),
    })
}

/// How long `f` took, and its value.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}

/// Runs `openssl ARGS` in `dir` for a test PKI; fails the test with its error otherwise.
/// The one openssl runner of the host tests.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
