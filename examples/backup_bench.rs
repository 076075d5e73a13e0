//! The off-node backup upload (issue 21 item 10): `etcd-setup snapshot` with `[backup]`
//! (age-encrypted streaming multipart upload, read back and compared) against `rclone
//! copy` of the same snapshot file, to the same bucket of a real radosgw
//! (`tests/support/radosgw`), in one run; prints the figures and their ratios, asserts
//! only that every run did its work.
//!
//! `cargo build --release && cargo run --release --example backup_bench [-- VERSION [MIB
//! [ROUNDS]]]` (default 3.5.16, 100, 4); needs root (the radosgw bed), `rclone` and `age`
//! (vm-images/host-setup installs both).
//!
//! 1. One etcd VERSION member on loopback, written MIB MiB of Kubernetes-like keys
//!    (`/registry/pods/ns-NN/pod-NNNNN`, 10 KiB values of pseudo-random JSON text, 100
//!    puts a transaction through `etcdctl txn`); `etcdctl snapshot save` makes the
//!    plaintext file; the stock `age -r` seals a copy of it (timed once).
//! 2. A warm-up round, not counted (a fresh radosgw takes seconds over its first requests
//!    of each kind), then ROUNDS rounds of three runs, A B C then C B A alternately (so
//!    none always runs first or with the warmer cache):
//!    - A, the agent: the real binary, `etcd-setup snapshot --config ...` with a
//!      `[backup]` under a prefix of its own (so that every run is due). It re-snapshots
//!      each time: the moment its verified snapshot is renamed into `snapshot.dir`
//!      (inotify) splits its time into the snapshot part and the upload part (the bucket
//!      listed, the cluster lock, the file hashed, sealed into the multipart upload, read
//!      back and compared, marked verified, retention, the records, exit). Its peak RSS is
//!      the `VmHWM` of `/proc/PID/status`, read every 2 ms while it runs (etcdutl, its
//!      child, is not in it); `ru_maxrss` of wait4 (which is the larger of the process
//!      and its children, etcdutl included) is printed beside it.
//!    - B: `rclone copy` of the plaintext file (rclone's defaults; configured only by
//!      `RCLONE_CONFIG_BENCH_*` variables, its config and cache in the scratch folder).
//!    - C: `rclone copy` of the age-sealed copy: the same transfer of the same bytes as
//!      the agent's object, without encrypting; A against C isolates the encryption's cost.
//!
//!    Each run's requests are read back from radosgw's own log (its beast access lines:
//!    method, target, latency): by kind (parts, read-back, lists: count and summed
//!    latency), where each kind lies in time after the snapshot was placed, and how much
//!    of the upload part had no request open (the union of the requests' intervals taken
//!    from it: parts overlap). The agent's CPU in its upload part is the `utime + stime`
//!    of `/proc/PID/stat` (its own threads, not etcdutl), sampled with `VmHWM`: on two
//!    shared cores the store and the agent compete for the CPU, so the agent's CPU
//!    seconds are a steadier figure than its wall time.
//!    Every object is checked in the bucket (size, the agent's `verified` mark), then
//!    deleted and radosgw's garbage collected (`radosgw-admin gc process`, untimed): the
//!    bed's OSD keeps its objects in 1 GiB of RAM.
//!
//!    With `ETCD_SETUP_BENCH_BASELINE=PATH` (another build of etcd-setup, say of the commit
//!    before a change), that binary runs too, A' beside A in each round (A A' B C, then
//!    C B A' A), so a change is measured against what it changes in the same bed and
//!    run; its medians and ratios are printed beside the agent's.
//!
//!    The read-back's time is the span of the agent's object GETs in radosgw's log, from
//!    the first one's start (its end less its latency) to the last one's end (one GET
//!    since the read-back hashes the parts of one stream; ranged GETs in 51b6a77's
//!    build, a baseline that may be measured beside it).
//! 3. Verification of the last agent object (`etcd-setup backups verify` is not there
//!    yet), alternated: the library (`Client::get` streamed into `seal::open`, the
//!    plaintext's SHA-256 compared with the object's metadata) against the stock tools
//!    (`rclone cat | age -d | sha256sum`); then once the library's whole proof
//!    (`backup::trial`: decrypted to a file, hashed, etcd's trailer, `etcdutl snapshot
//!    status`, a trial restore).

#[path = "../tests/support/mod.rs"]
mod support;

use etcd_setup::backup::s3::Client;
use etcd_setup::backup::{bucket, seal, trial};
use etcd_setup::shared::config::{self, BackupSettings};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::etcd::Cluster;

/// The other etcd-setup binary to run beside [`bin`] (`ETCD_SETUP_BENCH_BASELINE`).
fn baseline_bin() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var_os("ETCD_SETUP_BENCH_BASELINE")?);
    assert!(
        p.is_file(),
        "ETCD_SETUP_BENCH_BASELINE: {} is no file",
        p.display()
    );
    Some(p)
}

/// The etcd-setup binary of the same profile: target/PROFILE/etcd-setup beside
/// target/PROFILE/examples/.
fn bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("etcd-setup");
    assert!(
        bin.is_file(),
        "{} missing: cargo build --release first",
        bin.display()
    );
    bin
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn secs(v: &[f64]) -> String {
    v.iter()
        .map(|t| format!("{t:.3}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256_file(p: &Path) -> [u8; 32] {
    let mut f = std::fs::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).unwrap();
    h.finalize().into()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Days from 1970-01-01 to the civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// One request in radosgw's log (its beast access line): when it ended (Unix ms, the
/// line's own stamp), its method and target, and the latency radosgw measured.
struct Req {
    end_ms: u128,
    method: String,
    target: String,
    latency: f64,
}

/// `2026-12-02T10:34:18.046+0000 ... beast: 0x..: 127.0.0.1 - user [...] "PUT /b/k?q
/// HTTP/1.1" 200 ... latency=2.80s`.
fn parse_req(line: &str) -> Option<Req> {
    if !line.contains(" beast: ") || line.get(23..28) != Some("+0000") {
        return None;
    }
    let n = |a: usize, b: usize| line.get(a..b)?.parse::<i64>().ok();
    let days = days_from_civil(n(0, 4)?, n(5, 7)?, n(8, 10)?);
    let ms = (((days * 24 + n(11, 13)?) * 60 + n(14, 16)?) * 60 + n(17, 19)?) * 1000 + n(20, 23)?;
    let request = line.split('"').nth(1)?;
    let mut words = request.split(' ');
    let (method, target) = (words.next()?, words.next()?);
    let latency = line
        .rsplit_once("latency=")?
        .1
        .trim()
        .strip_suffix('s')?
        .parse()
        .ok()?;
    Some(Req {
        end_ms: u128::try_from(ms).ok()?,
        method: method.to_string(),
        target: target.to_string(),
        latency,
    })
}

/// What kind of S3 call a request was.
fn class(r: &Req) -> &'static str {
    let query = r.target.split_once('?').map_or("", |(_, q)| q);
    let object = r.target.trim_start_matches('/').contains('/');
    match r.method.as_str() {
        "PUT" if query.contains("partNumber=") => "part",
        "PUT" if !object => "create-bucket",
        "PUT" => "put",
        "POST" if query.contains("uploadId=") => "complete",
        "POST" => "initiate",
        "GET" if query.contains("uploads") => "list-uploads",
        "GET" if object && !query.contains("prefix=") && !query.contains("list-type") => "get",
        "GET" => "list",
        "HEAD" => "head",
        "DELETE" => "delete",
        _ => "other",
    }
}

/// Count and summed latency of each kind of call among `reqs`, in their order of kinds.
fn by_class(reqs: &[Req]) -> Vec<(&'static str, usize, f64)> {
    let mut out: Vec<(&'static str, usize, f64)> = Vec::new();
    for r in reqs {
        let k = class(r);
        match out.iter_mut().find(|(c, _, _)| *c == k) {
            Some(e) => {
                e.1 += 1;
                e.2 += r.latency;
            }
            None => out.push((k, 1, r.latency)),
        }
    }
    out
}

/// Seconds during which at least one of `reqs` was open (the union of their intervals,
/// each its end less its latency to its end).
fn busy(reqs: &[Req]) -> f64 {
    let mut spans: Vec<(f64, f64)> = reqs
        .iter()
        .map(|r| {
            let end = r.end_ms as f64 / 1000.0;
            (end - r.latency, end)
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut open: Option<(f64, f64)> = None;
    for (a, b) in spans {
        match open {
            Some((s, e)) if a <= e => open = Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                open = Some((a, b));
            }
            None => open = Some((a, b)),
        }
    }
    total + open.map_or(0.0, |(s, e)| e - s)
}

/// Seconds from the first start (end less latency) to the last end of `kind`'s requests
/// among `reqs`: their wall time when they overlap.
fn span(reqs: &[Req], kind: &str) -> f64 {
    let of: Vec<&Req> = reqs.iter().filter(|r| class(r) == kind).collect();
    let first = of
        .iter()
        .map(|r| r.end_ms as f64 / 1000.0 - r.latency)
        .fold(f64::INFINITY, f64::min);
    let last = of
        .iter()
        .map(|r| r.end_ms as f64 / 1000.0)
        .fold(f64::NEG_INFINITY, f64::max);
    if of.is_empty() {
        0.0
    } else {
        last - first
    }
}

/// Where each kind of `reqs` lies in time, in seconds from `zero_ms` (first start to last
/// end), in the order each kind first started, and when the process exited.
fn timeline(reqs: &[Req], zero_ms: u128, exit_ms: u128) -> String {
    let at = |ms: f64| (ms - zero_ms as f64) / 1000.0;
    let mut kinds: Vec<(&'static str, f64, f64)> = Vec::new();
    for r in reqs {
        let end = r.end_ms as f64;
        let start = end - r.latency * 1000.0;
        let k = class(r);
        match kinds.iter_mut().find(|(c, _, _)| *c == k) {
            Some(e) => {
                e.1 = e.1.min(start);
                e.2 = e.2.max(end);
            }
            None => kinds.push((k, start, end)),
        }
    }
    kinds.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut out: Vec<String> = kinds
        .iter()
        .map(|(k, a, b)| format!("{k} {:.3}-{:.3}", at(*a), at(*b)))
        .collect();
    out.push(format!("exit {:.3}", at(exit_ms as f64)));
    out.join(", ")
}

fn show_classes(v: &[(&'static str, usize, f64)]) -> String {
    v.iter()
        .map(|(k, n, s)| format!("{k} {n}x {s:.3} s"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `cmd` to success; its stdout. Panics with its output otherwise.
fn ok(what: &str, cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The radosgw bed of this run, stopped and removed when dropped.
struct Bed {
    dir: tempfile::TempDir,
    endpoint: String,
    access: PathBuf,
    secret: PathBuf,
    bucket: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/radosgw")
}

/// Two free loopback ports in a row: PORT (S3) and PORT+1 (the monitor).
fn port() -> u16 {
    for _ in 0..50 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        drop(l);
        let free = |q: u16| TcpListener::bind(("127.0.0.1", q)).is_ok();
        if p < 65000 && free(p) && free(p + 1) {
            return p;
        }
    }
    panic!("no two free loopback ports in a row");
}

impl Bed {
    fn start() -> Bed {
        let dir = support::scratch::dir("radosgw-bench");
        let text = ok(
            "tests/support/radosgw start",
            Command::new(script())
                .arg("start")
                .arg(dir.path())
                .arg(port().to_string()),
        );
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("no {k} in {text}"))
                .to_string()
        };
        Bed {
            endpoint: get("endpoint"),
            access: get("access_key_file").into(),
            secret: get("secret_key_file").into(),
            bucket: get("bucket"),
            dir,
        }
    }

    /// radosgw's log.
    fn log(&self) -> PathBuf {
        self.dir.path().join("log/client.rgw.log")
    }

    /// Its length now: where the next run's requests begin.
    fn log_mark(&self) -> u64 {
        std::fs::metadata(self.log()).map_or(0, |m| m.len())
    }

    /// The requests logged after `mark` that ended in [from_ms, to_ms].
    fn requests(&self, mark: u64, from_ms: u128, to_ms: u128) -> Vec<Req> {
        use std::io::{Read, Seek};
        let mut f = std::fs::File::open(self.log()).unwrap();
        f.seek(std::io::SeekFrom::Start(mark)).unwrap();
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        text.lines()
            .filter_map(parse_req)
            .filter(|r| r.end_ms >= from_ms && r.end_ms <= to_ms)
            .collect()
    }

    /// Frees what deleted objects held now, not after radosgw's two-hour wait.
    fn collect_garbage(&self) {
        ok(
            "radosgw-admin gc process",
            Command::new("radosgw-admin")
                .env("CEPH_CONF", self.dir.path().join("ceph.conf"))
                .args(["gc", "process", "--include-all"]),
        );
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// A 10 KiB value like a Pod's JSON: field names and pseudo-random text (xorshift), no
/// spaces.
fn pod_value(ns: &str, name: &str, len: usize, seed: &mut u64) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let head = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","uid":"{:016x}","annotations":{{"bench/blob":""#,
        *seed
    );
    let tail = r#""}},"spec":{"containers":[{"name":"app","image":"registry.k8s.io/pause:3.9"}]},"status":{"phase":"Running"}}"#;
    let mut v = String::with_capacity(len);
    v.push_str(&head);
    while v.len() < len - tail.len() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.push(ALPHABET[(*seed % 64) as usize] as char);
    }
    v.push_str(tail);
    v
}

/// `keys` keys of `len`-byte values written through `etcdctl txn`, 100 puts a transaction.
fn write_keys(c: &Cluster, keys: usize, len: usize) -> (u64, String, String) {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut total = 0u64;
    let mut sample = (String::new(), String::new());
    let mut i = 0;
    while i < keys {
        let mut script = String::from("\n");
        for k in i..(i + 100).min(keys) {
            let ns = format!("ns-{:02}", k % 40);
            let name = format!("pod-{k:05}");
            let key = format!("/registry/pods/{ns}/{name}");
            let value = pod_value(&ns, &name, len, &mut seed);
            total += (key.len() + value.len()) as u64;
            script.push_str(&format!(
                "put {key} \"{}\"\n",
                value.replace('\\', "\\\\").replace('"', "\\\"")
            ));
            if k == keys / 2 {
                sample = (key, value);
            }
        }
        // The end of the success requests, then no failure requests.
        script.push_str("\n\n");
        let mut child = Command::new(c.etcdctl())
            .env_clear()
            .env("ETCDCTL_API", "3")
            .args([&format!("--endpoints={}", c.client_url(0)), "txn"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("SUCCESS"),
            "etcdctl txn (keys {i}..): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        i += 100;
    }
    (total, sample.0, sample.1)
}

/// One run of the agent: the times of its snapshot part and its upload part, its peak RSS
/// (VmHWM, KiB), wait4's ru_maxrss (KiB, children included), the object it uploaded.
struct AgentRun {
    snapshot_s: f64,
    upload_s: f64,
    hwm_kib: u64,
    /// CPU seconds (user + system, all its threads, not its children) etcd-setup spent
    /// from the snapshot's placing to its last sample before exit.
    upload_cpu_s: f64,
    tree_maxrss_kib: u64,
    object: String,
    size: u64,
    spawned_ms: u128,
    exited_ms: u128,
}

/// CPU seconds (utime + stime of /proc/PID/stat) of `pid` so far: its own threads, not
/// its children.
fn cpu_s(pid: i32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the `(comm)`, which may hold spaces: state is field 3, utime 14, stime 15.
    let rest = s.rsplit_once(") ")?.1;
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) };
    Some(ticks as f64 / hz.max(1) as f64)
}

fn vm_hwm(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

fn agent_run(bin: &Path, cfg: &Path, snaps: &Path, state: &Path) -> AgentRun {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let notify = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
    notify.add_watch(snaps, AddWatchFlags::IN_MOVED_TO).unwrap();
    let spawned_ms = unix_ms();
    let t0 = Instant::now();
    // Reaped below by wait4 (Child::wait gives no rusage).
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(bin)
        .arg("snapshot")
        .arg("--config")
        .arg(cfg)
        .arg("--state-dir")
        .arg(state)
        .arg("--run-dir")
        .arg(state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut placed = None;
    let mut hwm = 0;
    let (mut cpu_at_placed, mut cpu_last) = (None, 0.0);
    let (status, rusage, exited, exited_ms) = loop {
        if let Some(h) = vm_hwm(pid) {
            hwm = hwm.max(h);
        }
        if let Some(c) = cpu_s(pid) {
            cpu_last = c;
        }
        if placed.is_none() {
            if let Ok(events) = notify.read_events() {
                if events.iter().any(|e| {
                    e.name
                        .as_ref()
                        .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
                }) {
                    placed = Some(t0.elapsed());
                    cpu_at_placed = Some(cpu_last);
                }
            }
        }
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
        let mut ru: nix::libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child, writing into the two locals above.
        let r = unsafe { nix::libc::wait4(pid, &mut status, nix::libc::WNOHANG, &mut ru) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            break (status, ru, t0.elapsed(), unix_ms());
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        nix::libc::WIFEXITED(status) && nix::libc::WEXITSTATUS(status) == 0,
        "etcd-setup snapshot failed (wait status {status}): {stdout}{stderr}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("backup ") && l.ends_with(" age-encrypted verified read-back"))
        .unwrap_or_else(|| panic!("etcd-setup snapshot uploaded nothing: {stdout}{stderr}"));
    let mut words = line.split(' ');
    let object = words.nth(1).unwrap().to_string();
    let size = line
        .split(" size ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in {line}"));
    let placed = placed.unwrap_or_else(|| {
        panic!(
            "no snapshot was renamed into {}: {stdout}{stderr}",
            snaps.display()
        )
    });
    AgentRun {
        snapshot_s: placed.as_secs_f64(),
        upload_s: (exited - placed).as_secs_f64(),
        hwm_kib: hwm,
        upload_cpu_s: cpu_last - cpu_at_placed.unwrap_or(0.0),
        tree_maxrss_kib: rusage.ru_maxrss as u64,
        object,
        size,
        spawned_ms,
        exited_ms,
    }
}

/// rclone, configured for the bed by environment variables alone (remote `bench:`), its
/// config file and cache in `home`.
fn rclone(bed: &Bed, home: &Path) -> Command {
    with_rclone_env(Command::new("rclone"), bed, home)
}

/// `cmd` with only the environment [`rclone`] runs in (and a PATH), for a pipeline.
fn with_rclone_env(mut cmd: Command, bed: &Bed, home: &Path) -> Command {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap().trim().to_string();
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("RCLONE_CONFIG", home.join("rclone.conf"))
        .env("RCLONE_CACHE_DIR", home.join("cache"))
        .env("RCLONE_CONFIG_BENCH_TYPE", "s3")
        .env("RCLONE_CONFIG_BENCH_PROVIDER", "Ceph")
        .env("RCLONE_CONFIG_BENCH_ENV_AUTH", "false")
        .env("RCLONE_CONFIG_BENCH_ACCESS_KEY_ID", read(&bed.access))
        .env("RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY", read(&bed.secret))
        .env("RCLONE_CONFIG_BENCH_ENDPOINT", &bed.endpoint)
        .env("RCLONE_CONFIG_BENCH_REGION", "us-east-1");
    cmd
}

/// `rclone copy FILE bench:BUCKET/DEST/`: seconds, and the Unix ms of its spawn and exit.
fn rclone_copy(bed: &Bed, home: &Path, file: &Path, dest: &str) -> (f64, u128, u128) {
    let spawned = unix_ms();
    let t = Instant::now();
    ok(
        "rclone copy",
        rclone(bed, home)
            .arg("copy")
            .arg(file)
            .arg(format!("bench:{}/{dest}/", bed.bucket)),
    );
    (t.elapsed().as_secs_f64(), spawned, unix_ms())
}

#[derive(Clone, Copy)]
enum Side {
    Agent,
    /// The binary of `ETCD_SETUP_BENCH_BASELINE`.
    Baseline,
    Plain,
    Sealed,
}

/// What the runs of one etcd-setup binary gave.
#[derive(Default)]
struct Runs {
    runs: Vec<AgentRun>,
    reqs: Vec<Vec<(&'static str, usize, f64)>>,
    read_back_s: Vec<f64>,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let version = args.next().unwrap_or_else(|| "3.5.16".into());
    let mib_arg: usize = args.next().and_then(|m| m.parse().ok()).unwrap_or(100);
    let rounds: usize = args.next().and_then(|m| m.parse().ok()).unwrap_or(4);
    assert!(
        rounds >= 3,
        "at least 3 rounds: each side runs once a round"
    );
    let load_before = loadavg();
    let bed = Bed::start();
    let c = Cluster::start(&version, 1, "tok-backup-bench");
    let dir = support::scratch::dir("backup-bench");
    let d = dir.path();
    let (snaps, state, home) = (d.join("snaps"), d.join("state"), d.join("rclone"));
    for p in [&snaps, &state, &home] {
        std::fs::create_dir(p).unwrap();
    }

    // The data: 10 KiB values, MIB MiB of them.
    let len = 10 << 10;
    let keys = (mib_arg << 20).div_ceil(len);
    let t = Instant::now();
    let (written, sample_key, sample_value) = write_keys(&c, keys, len);
    let took = t.elapsed();
    let got = c.client().get(&sample_key).unwrap();
    assert_eq!(
        got.as_deref(),
        Some(sample_value.as_bytes()),
        "{sample_key} did not read back as written"
    );
    let st = c.client().endpoint_status().unwrap().remove(0);
    println!(
        "etcd {version}: {keys} keys (/registry/pods/ns-NN/pod-NNNNN) of {len} bytes, \
         {:.1} MiB of keys and values, written in {:.1} s; db {:.1} MiB",
        mib(written),
        took.as_secs_f64(),
        mib(st.db_size)
    );

    // The plaintext file, and its stock age copy.
    let plain = d.join("plain.db");
    ok(
        "etcdctl snapshot save",
        Command::new(c.etcdctl())
            .env_clear()
            .env("ETCDCTL_API", "3")
            .args([
                &format!("--endpoints={}", c.client_url(0)),
                "snapshot",
                "save",
            ])
            .arg(&plain),
    );
    let plain_len = std::fs::metadata(&plain).unwrap().len();
    assert!(
        plain_len >= 100 << 20,
        "the snapshot is {:.1} MiB, less than 100",
        mib(plain_len)
    );
    let identity = d.join("identity");
    ok(
        "age-keygen",
        Command::new("age-keygen").arg("-o").arg(&identity),
    );
    std::fs::set_permissions(&identity, std::fs::Permissions::from_mode(0o600)).unwrap();
    let recipient = ok(
        "age-keygen -y",
        Command::new("age-keygen").arg("-y").arg(&identity),
    );
    let recipients = d.join("recipients");
    std::fs::write(&recipients, &recipient).unwrap();
    let sealed = d.join("plain.db.age");
    let t = Instant::now();
    ok(
        "age -r",
        Command::new("age")
            .arg("-r")
            .arg(recipient.trim())
            .arg("-o")
            .arg(&sealed)
            .arg(&plain),
    );
    let age_s = t.elapsed().as_secs_f64();
    let sealed_len = std::fs::metadata(&sealed).unwrap().len();
    println!(
        "etcdctl snapshot save: {:.1} MiB ({plain_len} bytes); age -r: {:.3} s, {sealed_len} bytes",
        mib(plain_len),
        age_s
    );

    let config_for = |prefix: &str| {
        let extra = format!(
            r#"[snapshot]
dir = "{snaps}"
retain = 2

[backup]
endpoint = "{endpoint}"
allow_http = true
bucket = "{bucket}"
prefix = "{prefix}"
path_style = true
access_key_file = "{access}"
secret_key_file = "{secret}"
recipients_file = "{recipients}"
identity_file = "{identity}"
"#,
            snaps = snaps.display(),
            endpoint = bed.endpoint,
            bucket = bed.bucket,
            access = bed.access.display(),
            secret = bed.secret.display(),
            recipients = recipients.display(),
            identity = identity.display(),
        );
        c.config_file(0, d, "", &extra)
    };
    let settings: BackupSettings = config::load(&config_for("agent-0/"))
        .unwrap()
        .backup
        .unwrap();
    let client = Client::new(&settings, settings.credentials().unwrap()).unwrap();
    let object_len = |key: &str| {
        client
            .head(key)
            .unwrap()
            .unwrap_or_else(|| panic!("{key} is not in the bucket"))
            .size
    };

    let (mut agent, mut base) = (Runs::default(), Runs::default());
    let (mut plain_s, mut sealed_s) = (Vec::new(), Vec::new());
    let baseline = baseline_bin();
    let forward: Vec<Side> = [Side::Agent, Side::Baseline, Side::Plain, Side::Sealed]
        .into_iter()
        .filter(|s| baseline.is_some() || !matches!(s, Side::Baseline))
        .collect();
    let mut last_agent_object: Option<String> = None;
    // Round 0 warms the bed up and is not counted: a fresh radosgw takes seconds over its
    // first requests of each kind (its first multipart upload, its first HEAD).
    for r in 0..=rounds {
        let mut order = forward.clone();
        if r % 2 == 0 {
            order.reverse();
        }
        let counted = r > 0;
        let round = if counted {
            format!("round {r}")
        } else {
            "warm-up (not counted)".to_string()
        };
        for side in order {
            let mark = bed.log_mark();
            match side {
                Side::Agent | Side::Baseline => {
                    let is_agent = matches!(side, Side::Agent);
                    let (who, bin, runs) = match &baseline {
                        Some(b) if !is_agent => ("baseline", b.clone(), &mut base),
                        _ => ("agent", bin(), &mut agent),
                    };
                    let cfg = config_for(&format!("{who}-{r}/"));
                    let run = agent_run(&bin, &cfg, &snaps, &state);
                    let reqs = bed.requests(mark, run.spawned_ms, run.exited_ms);
                    let head = client.head(&run.object).unwrap().unwrap();
                    assert_eq!(head.size, run.size, "{}", run.object);
                    assert_eq!(
                        head.get(bucket::key::VERIFIED),
                        Some("read-back"),
                        "{}",
                        run.object
                    );
                    println!(
                        "{round} {who} (etcd-setup snapshot): snapshot {:.3} s + upload {:.3} \
                         s (CPU {:.2} s) = {:.3} s; object {} bytes; VmHWM {:.1} MiB \
                         (ru_maxrss with etcdutl {:.1} MiB)",
                        run.snapshot_s,
                        run.upload_s,
                        run.upload_cpu_s,
                        run.snapshot_s + run.upload_s,
                        run.size,
                        run.hwm_kib as f64 / 1024.0,
                        run.tree_maxrss_kib as f64 / 1024.0
                    );
                    let in_store = busy(&reqs);
                    let read_back = span(&reqs, "get");
                    println!(
                        "  radosgw's log of its requests: {}; read-back {read_back:.3} s; \
                         {in_store:.3} s with a request open, {:.3} s of the upload part \
                         without",
                        show_classes(&by_class(&reqs)),
                        run.upload_s - in_store
                    );
                    let placed_ms = run.spawned_ms + (run.snapshot_s * 1000.0) as u128;
                    println!(
                        "  seconds after the snapshot was placed: {}",
                        timeline(&reqs, placed_ms, run.exited_ms)
                    );
                    if is_agent {
                        if let Some(old) = last_agent_object.replace(run.object.clone()) {
                            client.delete(&old).unwrap();
                        }
                    } else {
                        client.delete(&run.object).unwrap();
                    }
                    if counted {
                        runs.reqs.push(by_class(&reqs));
                        runs.read_back_s.push(read_back);
                        runs.runs.push(run);
                    }
                }
                Side::Plain | Side::Sealed => {
                    let (file, len, name, list) = if matches!(side, Side::Plain) {
                        (&plain, plain_len, "plain.db", &mut plain_s)
                    } else {
                        (&sealed, sealed_len, "plain.db.age", &mut sealed_s)
                    };
                    let prefix = format!(
                        "rclone-{}-{r}",
                        if matches!(side, Side::Plain) {
                            "plain"
                        } else {
                            "sealed"
                        }
                    );
                    let (s, from, to) = rclone_copy(&bed, &home, file, &prefix);
                    let reqs = bed.requests(mark, from, to);
                    let key = format!("{prefix}/{name}");
                    assert_eq!(object_len(&key), len, "{key}");
                    client.delete(&key).unwrap();
                    println!(
                        "{round} rclone copy {name}: {s:.3} s; radosgw: {}",
                        show_classes(&by_class(&reqs))
                    );
                    if counted {
                        list.push(s);
                    }
                }
            }
            bed.collect_garbage();
        }
    }

    // Verification of the last agent object.
    let key = last_agent_object.unwrap();
    let head = client.head(&key).unwrap().unwrap();
    let want = head
        .get(bucket::key::PLAIN_SHA256)
        .unwrap_or_else(|| panic!("{key} has no plaintext SHA-256"))
        .to_string();
    let id = seal::Identity::read(&identity).unwrap();
    let (mut lib_s, mut stock_s) = (Vec::new(), Vec::new());
    for r in 0..3 {
        let lib = || {
            let t = Instant::now();
            let (mut rx, mut tx) = std::io::pipe().unwrap();
            let opened = std::thread::scope(|s| {
                let get = s.spawn(|| {
                    let got = client.get(&key, head.size, &mut tx);
                    drop(tx);
                    got
                });
                let opened = seal::open(&mut rx, &id, &mut std::io::sink());
                drop(rx);
                (get.join().unwrap(), opened)
            });
            let (got, opened) = opened;
            let got = got.unwrap();
            let opened = opened.unwrap();
            assert_eq!(got.len, head.size, "{key}");
            assert_eq!(hex(&opened.plain_sha256), want, "{key}");
            t.elapsed().as_secs_f64()
        };
        let stock = || {
            let t = Instant::now();
            let out = ok(
                "rclone cat | age -d | sha256sum",
                with_rclone_env(Command::new("bash"), &bed, &home)
                    .arg("-o")
                    .arg("pipefail")
                    .arg("-c")
                    .arg(r#"rclone cat "bench:$1" | age -d -i "$2" | sha256sum"#)
                    .arg("bash")
                    .arg(format!("{}/{key}", bed.bucket))
                    .arg(&identity),
            );
            assert!(out.starts_with(&want), "{key}: {out}");
            t.elapsed().as_secs_f64()
        };
        let (a, b) = if r % 2 == 0 {
            let a = lib();
            (a, stock())
        } else {
            let b = stock();
            (lib(), b)
        };
        println!(
            "verify {r}: library get + open + SHA-256 {a:.3} s; rclone cat | age -d | \
             sha256sum {b:.3} s"
        );
        lib_s.push(a);
        stock_s.push(b);
    }
    // The library's whole proof once: decrypted to a file, then backup::trial.
    let t = Instant::now();
    let restored = d.join("restored.db");
    {
        let (mut rx, mut tx) = std::io::pipe().unwrap();
        let mut out = std::fs::File::create(&restored).unwrap();
        std::thread::scope(|s| {
            let get = s.spawn(|| {
                let got = client.get(&key, head.size, &mut tx);
                drop(tx);
                got
            });
            seal::open(&mut rx, &id, &mut out).unwrap();
            drop(rx);
            get.join().unwrap().unwrap();
        });
        out.sync_all().unwrap();
    }
    let decrypted_s = t.elapsed().as_secs_f64();
    let sha: [u8; 32] = sha256_file(&restored);
    assert_eq!(hex(&sha), want, "{key}");
    let revision = head
        .get(bucket::key::REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap();
    let etcd_version = head.get(bucket::key::ETCD_VERSION).unwrap().to_string();
    let proof = trial::trial(
        &restored,
        &trial::Expect {
            sha256: sha,
            revision,
            total_keys: None,
            etcd_version: &etcd_version,
        },
        &c.bin,
        d,
    )
    .unwrap();
    println!(
        "trial: download + decrypt to a file {decrypted_s:.3} s, then backup::trial \
         (SHA-256, trailer, etcdutl snapshot status, trial restore) {:.3} s, {} key \
         revisions at revision {}",
        proof.took.as_secs_f64(),
        proof.keys,
        proof.revision
    );
    client.delete(&key).unwrap();

    // The CPU the upload part spends outside requests, alone (the library, from the page
    // cache): sealing the file to nowhere, and one SHA-256 of it (the upload takes four:
    // the file before, the plaintext as read, the object as sent, the read-back).
    let recips = settings.recipients().unwrap();
    let (mut seal_s, mut sha_s) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        let mut f =
            std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&plain).unwrap());
        let sealed_digests = seal::seal(&mut f, &recips, &mut std::io::sink()).unwrap();
        seal_s.push(t.elapsed().as_secs_f64());
        assert_eq!(sealed_digests.plain_len, plain_len);
        let t = Instant::now();
        sha256_file(&plain);
        sha_s.push(t.elapsed().as_secs_f64());
    }
    println!(
        "library alone on plain.db: seal::seal to a sink {} s, SHA-256 {} s",
        secs(&seal_s),
        secs(&sha_s)
    );

    let (m_plain, m_sealed) = (median(&plain_s), median(&sealed_s));
    println!(
        "\n--- summary (etcd {version}, radosgw on loopback, {} cores, load {load_before} \
         before, {} after) ---",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    println!(
        "snapshot {:.1} MiB ({plain_len} bytes), sealed {sealed_len} bytes; {rounds} rounds \
         {} / {} after a warm-up round",
        mib(plain_len),
        if baseline.is_some() {
            "A A' B C"
        } else {
            "A B C"
        },
        if baseline.is_some() {
            "C B A' A"
        } else {
            "C B A"
        },
    );
    let m_up = summarize("agent", &agent, m_plain, m_sealed);
    if let Some(b) = &baseline {
        println!("\nbaseline {}:", b.display());
        let m_base = summarize("baseline", &base, m_plain, m_sealed);
        println!(
            "ratio agent upload / baseline upload: {:.2}x",
            m_up / m_base
        );
    }
    println!(
        "rclone copy plain.db: {} s, median {m_plain:.3} s",
        secs(&plain_s)
    );
    println!(
        "rclone copy plain.db.age: {} s, median {m_sealed:.3} s; age -r alone {age_s:.3} s \
         (age -r then rclone copy: {:.3} s); rclone sealed / plain {:.2}x",
        secs(&sealed_s),
        age_s + m_sealed,
        m_sealed / m_plain
    );
    println!(
        "library alone: seal::seal of plain.db to a sink median {:.3} s, one SHA-256 of it \
         median {:.3} s",
        median(&seal_s),
        median(&sha_s)
    );
    println!(
        "verification of {} bytes: library get + open + SHA-256 {} s, median {:.3} s; \
         rclone cat | age -d | sha256sum {} s, median {:.3} s; whole trial once {:.3} s \
         (+ {decrypted_s:.3} s to decrypt to a file)",
        head.size,
        secs(&lib_s),
        median(&lib_s),
        secs(&stock_s),
        median(&stock_s),
        proof.took.as_secs_f64()
    );
}

/// Prints the figures of `who`'s runs; the median of its upload part.
fn summarize(who: &str, runs: &Runs, m_plain: f64, m_sealed: f64) -> f64 {
    let agents = &runs.runs;
    let up: Vec<f64> = agents.iter().map(|a| a.upload_s).collect();
    let snap: Vec<f64> = agents.iter().map(|a| a.snapshot_s).collect();
    let whole: Vec<f64> = agents.iter().map(|a| a.snapshot_s + a.upload_s).collect();
    let hwm = agents.iter().map(|a| a.hwm_kib).max().unwrap();
    let tree = agents.iter().map(|a| a.tree_maxrss_kib).max().unwrap();
    let m_up = median(&up);
    let cpu: Vec<f64> = agents.iter().map(|a| a.upload_cpu_s).collect();
    let verdict = |ok: bool| if ok { "within target" } else { "OVER target" };
    println!(
        "{who} upload part (bucket listed, lock, hash, seal + multipart upload, read back, \
         marked verified, retention, records, exit): {} s, median {m_up:.3} s",
        secs(&up)
    );
    println!(
        "{who} upload part's CPU (etcd-setup's threads, user + system, clock ticks): {} s, \
         median {:.2} s",
        secs(&cpu),
        median(&cpu)
    );
    println!(
        "{who} snapshot part (etcdctl snapshot, verified, placed): {} s, median {:.3} s; \
         whole command median {:.3} s",
        secs(&snap),
        median(&snap),
        median(&whole)
    );
    let mut kinds: Vec<&'static str> = Vec::new();
    for run in &runs.reqs {
        for (k, _, _) in run {
            if !kinds.contains(k) {
                kinds.push(k);
            }
        }
    }
    let per_kind: Vec<String> = kinds
        .iter()
        .map(|k| {
            let of = |run: &Vec<(&'static str, usize, f64)>| {
                run.iter()
                    .find(|(c, _, _)| c == k)
                    .map_or((0, 0.0), |e| (e.1, e.2))
            };
            let n = runs.reqs.iter().map(|r| of(r).0).max().unwrap_or(0);
            let t: Vec<f64> = runs.reqs.iter().map(|r| of(r).1).collect();
            format!("{k} {n}x {:.3} s", median(&t))
        })
        .collect();
    println!(
        "{who}'s requests as radosgw timed them (count, summed latency, medians): {}",
        per_kind.join(", ")
    );
    println!(
        "{who} read-back (its object GETs, first start to last end): {} s, median {:.3} s",
        secs(&runs.read_back_s),
        median(&runs.read_back_s)
    );
    println!(
        "ratio {who} upload / rclone copy plain: {:.2}x (target <= 1.2x: {}); / rclone copy \
         sealed {:.2}x",
        m_up / m_plain,
        verdict(m_up / m_plain <= 1.2),
        m_up / m_sealed
    );
    println!(
        "{who} peak RSS (VmHWM of etcd-setup, every 2 ms): {:.1} MiB (target <= 32 MiB: {}); \
         ru_maxrss with its children (etcdutl) {:.1} MiB",
        hwm as f64 / 1024.0,
        verdict(hwm <= 32 << 10),
        tree as f64 / 1024.0
    );
    m_up
}
