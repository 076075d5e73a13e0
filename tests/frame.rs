//! The day-2 frame, as the binary: `restore` takes the node lock (a held one makes it
//! refuse with `locked`, touching nothing); `leave` with no system bus leaves the member
//! list of a real three-member cluster on loopback unchanged; a SIGTERM to `upgrade`
//! while it waits for the ISO gives `interrupted` and removes its operation record.
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use support::etcd::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-setup");

/// A scratch folder outside /tmp (which etcd's sandbox hides, so config refuses it).
fn scratch() -> tempfile::TempDir {
    support::scratch::dir("frame")
}

/// A configuration for member `i` of `c`, its files under `dir`, with `metrics` as its
/// metrics port.
fn config(c: &Cluster, i: usize, dir: &Path, metrics: u16) -> PathBuf {
    c.config_file(i, dir, &format!("metrics_port = {metrics}"), "")
}

/// A configuration of a lone node that needs no etcd (for steps before etcd is asked).
fn lone_config(dir: &Path, metrics: u16) -> PathBuf {
    let text = format!(
        r#"[node]
name = "n1"
ip = "127.0.0.1"

[etcd]
initial_cluster = "n1=http://127.0.0.1:2380"
cluster_token = "tok"
data_dir = "{dir}/data"
metrics_port = {metrics}

[install]
dir = "{dir}/bin"

[report]
failure_file = "{dir}/failed"
"#,
        dir = dir.display()
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    // The install folder a node running etcd has: without it `upgrade` fails at once
    // ("cannot sync .../bin") instead of waiting for the ISO, racing the test's SIGTERM.
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    path
}

fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A restore while another etcd-setup command holds the node lock refuses with `locked`
/// once --lock-timeout passes, and touches nothing: no record, no data dir moved.
#[test]
fn a_restore_refuses_with_locked_while_the_run_lock_is_held() {
    let dir = scratch();
    let cfg = lone_config(dir.path(), 2381);
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("member")).unwrap();
    std::fs::write(data.join("member/marker"), "old").unwrap();
    let snap = dir.path().join("snap.db");
    std::fs::write(&snap, "not looked at").unwrap();
    // flock(1) holds the lock, as `etcd-setup run` does, and says when it holds it.
    let mut holder = Command::new("flock")
        .arg(run.join("run.lock"))
        .args(["sh", "-c", "echo held; read _"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("flock(1) from util-linux");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "held\n");

    let out = Command::new(BIN)
        .arg("restore")
        .arg(&snap)
        .arg("--config")
        .arg(&cfg)
        .args(["--no-systemd", "--lock-timeout", "1s", "--run-dir"])
        .arg(&run)
        .output()
        .unwrap();
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(5), "{so}{se}");
    assert!(se.starts_with("locked: "), "{se}");
    assert!(se.contains("run.lock for more than 1s"), "{se}");
    assert!(!run.join("operation.json").exists());
    assert_eq!(
        std::fs::read_to_string(data.join("member/marker")).unwrap(),
        "old"
    );
    let beside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("data."))
        .collect();
    assert!(beside.is_empty(), "{beside:?}");

    drop(holder.stdin.take());
    holder.wait().unwrap();
    // Free again: the same restore gets past the lock (and fails on the file itself).
    let out = Command::new(BIN)
        .arg("restore")
        .arg(&snap)
        .arg("--config")
        .arg(&cfg)
        .args(["--no-systemd", "--lock-timeout", "1s", "--run-dir"])
        .arg(&run)
        .output()
        .unwrap();
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(se.starts_with("snapshot-corrupt: "), "{se}");
    assert!(!run.join("operation.json").exists());
}

/// `leave` on a node whose system bus does not answer refuses before it touches the
/// cluster: the member list is as it was, and the node's record does not say `left`.
#[test]
fn leave_with_no_system_bus_leaves_the_member_list_unchanged() {
    let c = Cluster::start("3.5.16", 3, "tok-frame-leave");
    let dir = scratch();
    let cfg = config(&c, 0, dir.path(), 2381);
    let before = c.client().member_list().unwrap();
    assert_eq!(before.members.len(), 3);
    let (run, lib) = (dir.path().join("run"), dir.path().join("lib"));
    let out = Command::new(BIN)
        .arg("leave")
        .arg("--config")
        .arg(&cfg)
        .arg("--run-dir")
        .arg(&run)
        .arg("--state-dir")
        .arg(&lib)
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            format!("unix:path={}", dir.path().join("no-bus").display()),
        )
        .output()
        .unwrap();
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(
        se.starts_with("systemd-failed: cannot reach systemd on the system bus"),
        "{se}"
    );
    let after = c.client().member_list().unwrap();
    assert_eq!(after.members, before.members);
    assert!(!run.join("operation.json").exists());
    assert!(!run.join("state.json").exists(), "nothing recorded");
}

/// Answers `GET /metrics` with an etcd version, telling `hit` at each request.
fn fake_metrics(version: &'static str) -> (u16, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let body = format!("etcd_server_version{{server_version=\"{version}\"}} 1\n");
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tx.send(());
        }
    });
    (port, rx)
}

/// SIGTERM while `upgrade` waits for the newer ISO (a safe point: etcd is untouched)
/// stops it with `interrupted` and exit 4, and its operation record is gone.
#[test]
fn a_sigterm_to_upgrade_while_it_waits_gives_interrupted_and_removes_its_record() {
    let dir = scratch();
    let (port, hit) = fake_metrics("3.5.16");
    let cfg = lone_config(dir.path(), port);
    let (run, lib) = (dir.path().join("run"), dir.path().join("lib"));
    let child = Command::new(BIN)
        .arg("upgrade")
        .arg("--config")
        .arg(&cfg)
        .args(["--iso-wait", "10min", "--run-dir"])
        .arg(&run)
        .arg("--state-dir")
        .arg(&lib)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It asked this member's version, so it holds the lock and keeps its record.
    hit.recv_timeout(Duration::from_secs(60))
        .expect("upgrade asked /metrics");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("operation.json")).unwrap()).unwrap();
    assert_eq!(record["command"], "upgrade", "{record}");
    assert_eq!(record["pid"], child.id(), "{record}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{so}{se}");
    assert!(
        se.starts_with("interrupted: etcd-setup upgrade was stopped by SIGTERM while validating"),
        "{se}"
    );
    assert!(!run.join("operation.json").exists());
}
