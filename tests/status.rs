//! `etcd-setup status` and `serve-status` on the host: the protocol, who may ask, hostile
//! clients, every exit code, `--wait` and stale runs. The server is the real binary, given
//! its socket the way systemd gives it (LISTEN_FDS, fd 3); etcd's live view comes from a
//! JSON fixture (`serve-status --live-fixture`, built with the test-fixtures feature), since the host has no system bus.

use etcd_setup::reason::{Failure, ReasonCode};
use etcd_setup::shared::report::{Phase, State, StateStore};
use etcd_setup::shared::systemd::UnitState;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

const BIN: &str = env!("CARGO_BIN_EXE_etcd-setup");

mod support;

/// A valid configuration with `[report] status_group = GROUP`.
fn config(group: &str) -> String {
    format!(
        r#"
[node]
name = "etcd-1"
ip = "10.1.1.11"

[etcd]
initial_cluster = "etcd-1=http://10.1.1.11:2380"
cluster_token = "tok"

[report]
status_group = "{group}"
"#
    )
}

/// A server on a socket in a temporary folder, with its state folders and fixtures.
struct Server {
    dir: tempfile::TempDir,
    child: Child,
}

impl Server {
    /// A server reading the configuration `config` (none when `None`).
    fn start(config: Option<&str>) -> Server {
        Server::start_beside(config, &[])
    }

    /// [`Server::start`] with `files` (name, text) written beside the configuration.
    fn start_beside(config: Option<&str>, files: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        // The unprivileged client must reach the socket inside.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.path().join("status.sock");
        let config_path = dir.path().join("config.toml");
        if let Some(text) = config {
            std::fs::write(&config_path, text).unwrap();
        }
        // The socket is listening before the server starts, as with systemd: no race.
        let listener = UnixListener::bind(&socket).unwrap();
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
        let raw = listener.as_raw_fd();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "export LISTEN_PID=$$; exec \"$@\"", "sh", BIN])
            .args(["serve-status", "--idle-exit", "0", "--config"])
            .arg(&config_path)
            .env("LISTEN_FDS", "1")
            .arg("--run-dir")
            .arg(dir.path().join("run"))
            .arg("--state-dir")
            .arg(dir.path().join("lib"))
            .arg("--live-fixture")
            .arg(dir.path().join("etcd.json"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
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
        let child = cmd.spawn().unwrap();
        drop(listener);
        let server = Server { dir, child };
        server.etcd(&fake_unit("active", "running", 3), "healthy");
        server
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("status.sock")
    }

    fn store(&self) -> StateStore {
        StateStore::new(self.dir.path().join("run"), self.dir.path().join("lib"))
    }

    /// Sets etcd's live view.
    fn etcd(&self, unit: &UnitState, health: &str) {
        let json = serde_json::json!({ "unit": unit, "health": health });
        let path = self.dir.path().join("etcd.json");
        etcd_setup::shared::report::atomic_write(&path, json.to_string().as_bytes(), 0o644, None)
            .unwrap();
    }

    /// Sets etcd's live view with the version the running etcd reports.
    fn etcd_with_version(&self, unit: &UnitState, health: &str, version: &str) {
        let json = serde_json::json!({ "unit": unit, "health": health, "version": version });
        let path = self.dir.path().join("etcd.json");
        etcd_setup::shared::report::atomic_write(&path, json.to_string().as_bytes(), 0o644, None)
            .unwrap();
    }

    /// `etcd-setup status ARGS` against this server.
    fn status(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("status")
            .args(args)
            .arg("--socket")
            .arg(self.socket())
            .output()
            .unwrap()
    }

    /// Sends `bytes` raw and returns the reply line.
    fn raw(&self, bytes: &[u8]) -> serde_json::Value {
        let mut s = UnixStream::connect(self.socket()).unwrap();
        s.write_all(bytes).unwrap();
        reply(&mut s)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn reply(s: &mut UnixStream) -> serde_json::Value {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

fn fake_unit(active: &str, sub: &str, restarts: u32) -> UnitState {
    UnitState {
        load_state: "loaded".into(),
        active_state: active.into(),
        sub_state: sub.into(),
        n_restarts: restarts,
        active_enter_timestamp_us: 1_780_000_000_000_000,
        ..UnitState::default()
    }
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A state in `phase` written by this (living) test process.
fn state(phase: Phase) -> State {
    let mut s = State::begin(Phase::WaitingForIso);
    if phase > Phase::WaitingForIso && phase != Phase::Failed {
        s.device = Some("/dev/sr0".into());
        s.label = Some("KUBERNETES".into());
        s.enter(Phase::Validating, SystemTime::now());
        s.sha256 = Some("ab".repeat(32));
        s.etcd_version = Some("3.5.16".into());
        s.enter(phase, SystemTime::now());
    }
    s.progress = Some("waiting for the Kubernetes ISO, 12 s of 600 s".into());
    s
}

fn failed(code: ReasonCode, message: &str) -> State {
    let mut s = State::begin(Phase::WaitingForIso);
    s.fail(&Failure::new(code, message), SystemTime::now());
    s
}

/// A PID no process has: a child that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn exit_4_and_not_started_before_any_run() {
    let server = Server::start(None);
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(text(&out).starts_with("not-started: "), "{}", text(&out));
    let out = server.status(&["--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["verdict"], "not-started");
    assert_eq!(json["exit_code"], 4);
}

#[test]
fn exit_0_when_etcd_runs_and_is_healthy() {
    let server = Server::start(None);
    server.store().save(&state(Phase::Running)).unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out),
        "running: etcd 3.5.16 active, healthy (3 restarts)\n"
    );
    let out = server.status(&["--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["phase"], "running");
    assert_eq!(json["device"], "/dev/sr0");
    assert_eq!(json["label"], "KUBERNETES");
    assert_eq!(json["etcd"]["active_state"], "active");
    assert_eq!(json["etcd"]["n_restarts"], 3);
    assert_eq!(json["etcd"]["health"], "healthy");
    assert_eq!(json["reason"], serde_json::Value::Null);
    let phases: Vec<&str> = json["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["waiting-for-iso", "validating", "running"]);
    let out = server.status(&["--long"]);
    assert_eq!(out.status.code(), Some(0));
    for label in [
        "verdict:  running",
        "iso:      /dev/sr0 (label KUBERNETES)",
        "unit:     etcd.service active/running",
    ] {
        assert!(text(&out).contains(label), "{label}: {}", text(&out));
    }
}

#[test]
fn exit_1_with_the_recorded_reason_after_a_failed_run() {
    let server = Server::start(None);
    let message =
        "the Kubernetes ISO on /dev/sr0 (label CDROM) has no etcd/etcd-linux-amd64.tar.gz";
    server
        .store()
        .save(&failed(ReasonCode::ArchiveMissing, message))
        .unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(text(&out), format!("failed: archive-missing: {message}\n"));
}

#[test]
fn exit_1_etcd_unhealthy_when_etcd_crash_loops_after_a_successful_run() {
    let server = Server::start(None);
    server.store().save(&state(Phase::Running)).unwrap();
    server.etcd(
        &fake_unit("activating", "auto-restart", 5),
        "unreachable: refused",
    );
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out).starts_with(
            "failed: etcd-unhealthy: etcd.service is activating/auto-restart after 5 restarts"
        ),
        "{}",
        text(&out)
    );
    // Active but not healthy is no better.
    server.etcd(
        &fake_unit("active", "running", 0),
        "unhealthy: HTTP 503: no leader",
    );
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("health check says unhealthy: HTTP 503"),
        "{}",
        text(&out)
    );
}

#[test]
fn exit_3_with_the_progress_line_while_a_run_is_under_way() {
    let server = Server::start(None);
    server.store().save(&state(Phase::WaitingForIso)).unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(
        text(&out),
        "waiting-for-iso: waiting for the Kubernetes ISO, 12 s of 600 s\n"
    );
}

#[test]
fn a_run_whose_process_is_gone_is_reported_interrupted() {
    let server = Server::start(None);
    let mut s = state(Phase::Validating);
    let pid = dead_pid();
    s.pid = Some(pid);
    server.store().save(&s).unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out).starts_with(&format!(
            "failed: interrupted: the run (pid {pid}) ended without finishing, while validating"
        )),
        "{}",
        text(&out)
    );
}

#[test]
fn after_a_reboot_an_unfinished_run_is_interrupted_even_if_its_pid_is_reused() {
    let server = Server::start(None);
    // Only the persistent copy: /run was emptied by the reboot. The PID is alive (ours).
    let lib = server.dir.path().join("lib");
    StateStore::new(&lib, &lib)
        .save(&state(Phase::Installing))
        .unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out).contains("before the last reboot"),
        "{}",
        text(&out)
    );
    // A finished run answers from the persistent copy as it was.
    StateStore::new(&lib, &lib)
        .save(&state(Phase::Running))
        .unwrap();
    assert_eq!(server.status(&[]).status.code(), Some(0));
}

#[test]
fn exit_5_when_the_socket_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["status", "--socket"])
        .arg(dir.path().join("none.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect to the status socket"));
}

#[test]
fn exit_2_on_a_bad_command_line_and_help_lists_every_exit_code() {
    for args in [
        vec!["status", "--timeout", "soon"],
        vec!["status", "--format", "xml"],
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = Command::new(BIN)
        .args(["status", "--help"])
        .output()
        .unwrap();
    let help = text(&out);
    for code in [
        "0  etcd is running",
        "1  failed",
        "2  the command line",
        "3  a run is in progress",
        "4  not started",
        "5  the status socket",
    ] {
        assert!(help.contains(code), "{code}: {help}");
    }
}

#[test]
fn protocol_answers_good_requests_and_names_each_bad_one() {
    let server = Server::start(None);
    let good = server.raw(b"{\"version\":1,\"wait\":false,\"timeout_ms\":0}\n");
    assert_eq!(good["schema_version"], 1);
    assert_eq!(good["verdict"], "not-started");
    let cases: [(&[u8], &str); 4] = [
        (b"GET / HTTP/1.0\r\n\r\n", "bad-request"),
        (b"{\"version\":2}\n", "unsupported-version"),
        (b"{\"version\":\"one\"}\n", "bad-request"),
        (&[b' '; 5000], "request-too-large"),
    ];
    for (bytes, code) in cases {
        let reply = server.raw(bytes);
        assert_eq!(reply["error"]["code"], code, "{reply}");
    }
}

#[test]
fn a_silent_client_times_out_without_delaying_another() {
    let server = Server::start(None);
    let mut silent = UnixStream::connect(server.socket()).unwrap();
    // Another client is answered while the silent one still waits for its timeout.
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(4));
    silent.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(
        silent.read(&mut buf).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the silent client was answered before the other"
    );
    silent.set_nonblocking(false).unwrap();
    let reply = reply(&mut silent);
    assert_eq!(reply["error"]["code"], "request-timeout", "{reply}");
}

#[test]
fn a_client_writing_10_mb_gets_an_error_and_the_server_stays_up() {
    let server = Server::start(None);
    let mut flood = UnixStream::connect(server.socket()).unwrap();
    let mut writer = flood.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..10 {
            if writer.write_all(&chunk).is_err() {
                break; // the server closed: expected
            }
        }
    });
    let reply = reply(&mut flood);
    assert_eq!(reply["error"]["code"], "request-too-large", "{reply}");
    drop(flood);
    t.join().unwrap();
    assert_eq!(server.status(&[]).status.code(), Some(4));
}

/// Runs `etcd-setup status` as uid/gid 65534 with no supplementary groups.
fn status_as_nobody(server: &Server) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            BIN,
            "status",
            "--socket",
        ])
        .arg(server.socket())
        .output()
        .unwrap()
}

#[test]
fn others_than_root_and_the_group_are_refused_by_name() {
    let server = Server::start(None); // no configuration: group cloud
    let out = status_as_nobody(&server);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("forbidden")
            && err.contains("only root and members of group cloud may query etcd-setup status"),
        "{err}"
    );
}

#[test]
fn members_of_the_configured_group_are_allowed() {
    let server = Server::start(Some(&config("nogroup")));
    let out = status_as_nobody(&server);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(text(&out).starts_with("not-started: "));
}

/// An unsound advisories file beside the configuration fails every command that reads
/// it, but not the status server's answers: the configured group still may ask.
#[test]
fn a_bad_advisories_file_does_not_change_who_may_ask() {
    let server = Server::start_beside(
        Some(&config("nogroup")),
        &[("advisories.toml", "[[advisory]]\nid = \"x\"\n")],
    );
    let out = status_as_nobody(&server);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(text(&out).starts_with("not-started: "));
}

#[test]
fn wait_returns_when_the_run_reaches_a_terminal_phase() {
    let server = Server::start(None);
    let store = server.store();
    let mut s = state(Phase::WaitingForIso);
    store.save(&s).unwrap();
    let started = Instant::now();
    let client = Command::new(BIN)
        .args(["status", "--wait", "--timeout", "10min", "--socket"])
        .arg(server.socket())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The client waits on the server, which waits on the state file.
    s.fail(
        &Failure::new(
            ReasonCode::IsoTimeout,
            "no Kubernetes ISO appeared within 600 s",
        ),
        SystemTime::now(),
    );
    store.save(&s).unwrap();
    let out = client.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        text(&out),
        "failed: iso-timeout: no Kubernetes ISO appeared within 600 s\n"
    );
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "answered at the timeout, not at the change"
    );
}

#[test]
fn wait_answers_in_progress_when_its_timeout_passes() {
    let server = Server::start(None);
    server.store().save(&state(Phase::WaitingForIso)).unwrap();
    let out = server.status(&["--wait", "--timeout", "300ms"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

#[test]
fn without_systemd_it_binds_the_path_itself_and_exits_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sub").join("status.sock");
    let mut child = Command::new(BIN)
        .args(["serve-status", "--idle-exit", "1s", "--config"])
        .arg(dir.path().join("none.toml"))
        .arg("--socket")
        .arg(&socket)
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .arg("--state-dir")
        .arg(dir.path().join("lib"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("serving"), "{line}");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o666);
    let out = Command::new(BIN)
        .args(["status", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(child.wait().unwrap().success());
    let _ = Path::new(&socket);
}

#[test]
fn a_waiting_request_is_answered_by_the_server_when_the_state_changes() {
    let server = Server::start(None);
    let store = server.store();
    let mut s = state(Phase::Starting);
    store.save(&s).unwrap();
    let mut waiter = UnixStream::connect(server.socket()).unwrap();
    waiter
        .write_all(b"{\"version\":1,\"wait\":true,\"timeout_ms\":600000}\n")
        .unwrap();
    // Another client is answered meanwhile, and the waiter still has no reply: the run
    // is in progress, so the server holds it.
    assert_eq!(server.status(&[]).status.code(), Some(3));
    waiter.set_nonblocking(true).unwrap();
    assert_eq!(
        waiter.read(&mut [0u8; 16]).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    waiter.set_nonblocking(false).unwrap();
    s.enter(Phase::Running, SystemTime::now());
    store.save(&s).unwrap();
    let reply = reply(&mut waiter);
    assert_eq!(reply["verdict"], "running", "{reply}");
    assert_eq!(reply["exit_code"], 0);
}

/// The run's last write (running, as its settle period ends) is what the very next query
/// answers, never the phase it left, though the server keeps the parsed state between
/// queries while the state folder does not change: round after round, written and asked
/// at once. (The VM test that saw `in-progress` after `systemctl start etcd-setup`
/// returned had taken an answer to a poll sent before the run ended.)
#[test]
fn a_query_after_the_runs_last_write_never_gets_the_phase_it_left() {
    let server = Server::start(None);
    let store = server.store();
    for round in 0..50 {
        let mut s = state(Phase::Starting);
        s.progress = Some("etcd is active and healthy; confirming it stays up for 10 s".into());
        store.save(&s).unwrap();
        let out = server.status(&["--format", "json"]);
        assert_eq!(out.status.code(), Some(3), "round {round}: {}", text(&out));
        s.enter(Phase::Running, SystemTime::now());
        s.progress = Some("etcd is running and healthy".into());
        store.save(&s).unwrap();
        let out = server.status(&["--format", "json"]);
        assert_eq!(out.status.code(), Some(0), "round {round}: {}", text(&out));
        assert_eq!(json(&out)["phase"], "running", "round {round}");
    }
}

#[test]
fn a_half_closed_waiting_client_still_gets_its_answer() {
    let server = Server::start(None);
    server.store().save(&state(Phase::WaitingForIso)).unwrap();
    let mut waiter = UnixStream::connect(server.socket()).unwrap();
    waiter
        .write_all(b"{\"version\":1,\"wait\":true,\"timeout_ms\":1500}\n")
        .unwrap();
    waiter.shutdown(std::net::Shutdown::Write).unwrap();
    let reply = reply(&mut waiter);
    assert_eq!(reply["verdict"], "in-progress", "{reply}");
}

#[test]
fn a_waiting_client_that_hangs_up_frees_the_server_to_exit_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("status.sock");
    let run = dir.path().join("run");
    StateStore::new(&run, dir.path().join("lib"))
        .save(&state(Phase::WaitingForIso))
        .unwrap();
    let mut child = Command::new(BIN)
        .args(["serve-status", "--idle-exit", "1s", "--config"])
        .arg(dir.path().join("none.toml"))
        .arg("--socket")
        .arg(&socket)
        .arg("--run-dir")
        .arg(&run)
        .arg("--state-dir")
        .arg(dir.path().join("lib"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut waiter = UnixStream::connect(&socket).unwrap();
    waiter
        .write_all(b"{\"version\":1,\"wait\":true,\"timeout_ms\":3600000}\n")
        .unwrap();
    drop(waiter);
    // Were the hour-long wait kept, the server would not be idle for an hour.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let exited = rx.recv_timeout(Duration::from_secs(120));
    assert!(
        matches!(exited, Ok(Ok(s)) if s.success()),
        "the server kept waiting for a client that hung up: {exited:?}"
    );
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{o:?}: {e}"))
}

#[test]
fn the_answer_names_the_member_the_run_recorded() {
    let server = Server::start(None);
    let mut s = state(Phase::Running);
    s.member_name = Some("etcd-1".into());
    server.store().save(&s).unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out),
        "running: member etcd-1, etcd 3.5.16 active, healthy (3 restarts)\n"
    );
    assert_eq!(
        json(&server.status(&["--format", "json"]))["member_name"],
        "etcd-1"
    );
    assert!(text(&server.status(&["--long"])).contains("member:   etcd-1\n"));
}

#[test]
fn the_running_etcd_version_is_shown_beside_the_installed_one() {
    let server = Server::start(None);
    server.store().save(&state(Phase::Running)).unwrap();
    server.etcd_with_version(&fake_unit("active", "running", 0), "healthy", "3.5.1");
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out),
        "running: etcd 3.5.1 active, healthy (0 restarts)\n"
    );
    let j = json(&server.status(&["--format", "json"]));
    assert_eq!(
        (&j["etcd_version"], &j["etcd"]["version"]),
        (&"3.5.16".into(), &"3.5.1".into())
    );
    let long = text(&server.status(&["--long"]));
    assert!(
        long.contains("etcd:     installed 3.5.16 (sha256 abab"),
        "{long}"
    );
    assert!(
        long.contains("running 3.5.1 (not the installed 3.5.16: "),
        "{long}"
    );
}

#[test]
fn exit_1_when_etcd_restarted_since_the_run_confirmed_it_even_if_active_and_healthy_now() {
    let server = Server::start(None);
    let mut s = state(Phase::Running);
    s.confirmed_n_restarts = Some(1);
    server.store().save(&s).unwrap();
    // Polled between two crashes: active and healthy, 3 restarts, last start 4 s ago.
    let mut unit = fake_unit("active", "running", 4);
    let started = SystemTime::now() - Duration::from_secs(4);
    unit.active_enter_timestamp_us = started
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    server.etcd(&unit, "healthy");
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let line = text(&out);
    assert!(
        line.starts_with(
            "failed: etcd-unhealthy: etcd.service restarted 3 times since etcd-setup confirmed it running at "
        ) && line.contains("; last start ")
            && line.ends_with(" s ago; see `journalctl -u etcd`\n"),
        "{line}"
    );
    let j = json(&server.status(&["--format", "json"]));
    assert_eq!(j["verdict"], "failed");
    assert_eq!(j["reason"]["code"], "etcd-unhealthy");
    assert_eq!(j["etcd"]["n_restarts"], 4);
    assert_eq!(j["etcd"]["restarts_since_confirmed"], 3);
    // Stable for longer than the window: running again, restarts still shown.
    unit.active_enter_timestamp_us = 1_780_000_000_000_000;
    server.etcd(&unit, "healthy");
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out),
        "running: etcd 3.5.16 active, healthy (4 restarts)\n"
    );
}

/// Starts the flood of `tests/support/status_flood.rs` as uid/gid 65534 against `server`; returns once it
/// holds its connections, with the reader of its stdout (kept open until it ends).
/// Dropping the child's stdin ends it.
fn flood_as_nobody(server: &Server, conns: usize) -> (Child, impl Read) {
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_status-flood"))
        .env("FLOOD_SOCKET", server.socket())
        .env("FLOOD_CONNS", conns.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert_ne!(
            out.read_line(&mut line).unwrap(),
            0,
            "the flood did not start"
        );
    }
    (child, out)
}

/// Issue 15 item 1: any local user could deny `status` to root with 300 silent
/// connections, and so could the group's own clients. Root asks 10 times during each
/// flood and must get 10 answers; the figures (answers, latency) are printed, not
/// asserted on time.
#[test]
fn root_is_answered_while_an_outsider_or_a_group_member_floods_the_socket() {
    let mut failures = Vec::new();
    // No configuration: group `cloud`, which uid 65534 is not in. Then group nogroup,
    // uid 65534's own.
    for (who, config_text) in [
        ("an outsider (uid 65534)", None),
        (
            "a group member (uid 65534, group nogroup)",
            Some(config("nogroup")),
        ),
    ] {
        let server = Server::start(config_text.as_deref());
        let (mut flood, _its_stdout) = flood_as_nobody(&server, 300);
        let mut answered = 0;
        let mut took = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            let out = server.status(&[]);
            took.push(t.elapsed());
            if out.status.code() == Some(4) {
                answered += 1;
            } else {
                seen.push(format!(
                    "exit {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        drop(flood.stdin.take());
        flood.wait().unwrap();
        took.sort();
        eprintln!(
            "flood by {who}, 300 silent connections reconnecting: root answered {answered}/10, \
             median {:.1} ms, max {:.1} ms{}",
            took[took.len() / 2].as_secs_f64() * 1e3,
            took[took.len() - 1].as_secs_f64() * 1e3,
            seen.first()
                .map(|s| format!("; e.g. {s}"))
                .unwrap_or_default()
        );
        if answered != 10 {
            failures.push(format!("{who}: root answered {answered}/10: {seen:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Issue 10: a management server parsing `--format json` gets one JSON object of schema
/// 1 for every outcome, also when there is no socket at all.
#[test]
fn json_without_a_socket_is_one_object_saying_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("none.sock");
    let out = Command::new(BIN)
        .args(["status", "--format", "json", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {:?}", text(&out)));
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["verdict"], "unreachable");
    assert_eq!(doc["exit_code"], 5);
    assert_eq!(doc["error"]["code"], "unreachable");
    assert!(
        doc["error"]["message"].as_str().unwrap().contains(&format!(
            "cannot connect to the status socket {}",
            socket.display()
        )),
        "{doc}"
    );
    assert_eq!(doc["socket"], socket.display().to_string());
}

/// The server's refusals, too, are that object, with the server's own code.
#[test]
fn json_of_a_refused_request_is_one_object_with_the_servers_code() {
    let server = Server::start(None); // group cloud: uid 65534 is refused
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(["status", "--format", "json", "--socket"])
        .arg(server.socket())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&doc["verdict"], &doc["exit_code"], &doc["error"]["code"]),
        (&"unreachable".into(), &5.into(), &"forbidden".into()),
        "{doc}"
    );
}

/// A server that accepts and never answers: the client says so in words, not with
/// "Resource temporarily unavailable (os error 11)". Takes the client's 20 s.
#[test]
fn a_silent_server_is_reported_as_no_answer_within_20_s() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("mute.sock");
    // It never accepts: the backlog holds the connections. Both formats at once: each
    // waits the whole 20 s.
    let _listener = UnixListener::bind(&socket).unwrap();
    let children: Vec<_> = ["text", "json"]
        .into_iter()
        .map(|format| {
            let child = Command::new(BIN)
                .args(["status", "--format", format, "--socket"])
                .arg(&socket)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (format, child)
        })
        .collect();
    for (format, child) in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(5));
        let err = String::from_utf8_lossy(&out.stderr);
        let expected = format!("no answer within 20 s from {}", socket.display());
        assert!(
            err.contains(&expected) && !err.contains("os error"),
            "{err}"
        );
        if format == "json" {
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(doc["error"]["code"], "timeout", "{doc}");
            assert_eq!(doc["error"]["message"], expected.as_str(), "{doc}");
        }
    }
}

/// Issue 15 items 3 and 4: a state file that exists but cannot be read is said to be
/// unreadable, naming the file, with its own verdict and exit code 6: never
/// `not-started`, never a phase made up, never the older persistent copy. A FIFO there
/// does not block the server: the next query is answered too.
#[test]
fn a_state_file_that_cannot_be_read_is_unreadable_naming_it_even_a_fifo() {
    let server = Server::start(None);
    let store = server.store();
    // A good persistent copy that must not answer for the broken live one.
    store.save(&state(Phase::Validating)).unwrap();
    let live = store.run_path();
    type Make = fn(&Path);
    let cases: [(&str, Make, &str); 4] = [
        (
            "truncated",
            |p| std::fs::write(p, b"{\"schema_version\":1,\"pha").unwrap(),
            "is not a state file: corrupt JSON",
        ),
        (
            "a symlink",
            |p| std::os::unix::fs::symlink("/etc/passwd", p).unwrap(),
            "is a symbolic link to /etc/passwd",
        ),
        (
            "a directory",
            |p| std::fs::create_dir(p).unwrap(),
            "is a directory",
        ),
        (
            "a FIFO",
            |p| nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap(),
            "is a FIFO",
        ),
    ];
    for (what, make, says) in cases {
        let _ = std::fs::remove_file(&live).or_else(|_| std::fs::remove_dir(&live));
        make(&live);
        for _ in 0..2 {
            let out = server.status(&[]);
            assert_eq!(out.status.code(), Some(6), "{what}: {out:?}");
            let line = text(&out);
            assert!(
                line.starts_with(&format!(
                    "unreadable: state-unreadable: the state file {} {says}",
                    live.display()
                )),
                "{what}: {line}"
            );
            assert_eq!(line.lines().count(), 1, "{what}: {line}");
        }
        let doc = json(&server.status(&["--format", "json"]));
        assert_eq!(doc["verdict"], "unreadable", "{what}: {doc}");
        assert_eq!(doc["exit_code"], 6, "{what}");
        assert_eq!(doc["phase"], serde_json::Value::Null, "{what}");
        assert_eq!(doc["reason"]["code"], "state-unreadable", "{what}");
        assert_eq!(doc["state_file"], live.display().to_string(), "{what}");
        assert!(
            doc["notes"][0].as_str().unwrap().contains(says),
            "{what}: {doc}"
        );
        let long = text(&server.status(&["--long"]));
        assert!(
            long.contains("\nnote:     ") && long.contains(says),
            "{what}: {long}"
        );
    }
}

/// Issue 15 item 2: a label or a reason holding a newline and an escape sequence stays
/// on its line in `status`'s text, escaped; JSON keeps the exact value.
#[test]
fn text_from_the_state_cannot_forge_a_line_or_colour_the_terminal() {
    let server = Server::start(None);
    let evil = "no etcd\nrunning: member etcd-1, etcd 9.9.9 active, healthy\x1b[31m";
    server
        .store()
        .save(&failed(ReasonCode::ArchiveMissing, evil))
        .unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(1));
    let line = text(&out);
    assert_eq!(
        line,
        "failed: archive-missing: no etcd\\nrunning: member etcd-1, etcd 9.9.9 active, healthy\\x1b[31m\n"
    );
    let long = text(&server.status(&["--long"]));
    assert!(
        !long.contains('\x1b') && !long.contains("\nrunning:"),
        "{long}"
    );
    assert_eq!(
        json(&server.status(&["--format", "json"]))["reason"]["message"],
        evil
    );
}

/// A closed stdout (`etcd-setup status --long | head -0`) ends the client quietly with
/// the verdict's exit code, in every format (issue 15 item 9).
#[test]
fn a_closed_stdout_ends_status_quietly_with_the_verdicts_exit_code() {
    let server = Server::start(None);
    for args in [&[][..], &["--long"], &["--format", "json"]] {
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        drop(read_end);
        let out = Command::new(BIN)
            .arg("status")
            .args(args)
            .arg("--socket")
            .arg(server.socket())
            .stdout(Stdio::from(write_end))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

/// The server logs the socket it really serves: the one systemd passed, wherever it was
/// bound, not the default path it would have bound itself (issue 20 item 10).
#[test]
fn serve_status_logs_the_path_of_the_socket_systemd_passed() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("elsewhere.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let raw = listener.as_raw_fd();
    let mut cmd = Command::new("sh");
    // No --socket: the default path is what the server would name if it guessed.
    cmd.args(["-c", "export LISTEN_PID=$$; exec \"$@\"", "sh", BIN])
        .args(["serve-status", "--idle-exit", "0", "--config"])
        .arg(dir.path().join("none.toml"))
        .env("LISTEN_FDS", "1")
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .arg("--state-dir")
        .arg(dir.path().join("lib"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
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
    let mut child = cmd.spawn().unwrap();
    drop(listener);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.contains("serving"));
    let _ = child.kill();
    let _ = child.wait();
    let line = line.expect("serve-status logged no `serving` line");
    assert!(
        line.contains(&format!("serving {} ", socket.display())),
        "{line}"
    );
    assert!(!line.contains("/run/etcd-setup/status.sock"), "{line}");
}

/// An `operation.json` left by a killed restore whose pid now belongs to an unrelated
/// process (pid reuse) counts for nothing: etcd down is `failed`, not `in-progress`. The
/// record counts only while the pid *and* the process's start time match.
#[test]
fn an_operation_record_naming_a_live_unrelated_pid_does_not_read_in_progress() {
    let server = Server::start(None);
    server.store().save(&state(Phase::Running)).unwrap();
    server.etcd(&fake_unit("inactive", "dead", 3), "unreachable: refused");
    let mut unrelated = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = unrelated.id();
    let started = etcd_setup::shared::report::start_time(pid).expect("its start time");
    let record = |start_time: u64| {
        serde_json::json!({
            "command": "restore",
            "pid": pid,
            "start_time": start_time,
            "since": "2026-05-28T20:26:49Z",
            "step": "restoring /var/lib/etcd-snapshots/x.db (etcd is stopped and started again)",
            "etcd_down_expected": true,
        })
        .to_string()
    };
    let path = server.dir.path().join("run").join("operation.json");
    // The restore that wrote it ran before the process now holding its pid.
    std::fs::write(&path, record(started.saturating_sub(1))).unwrap();
    let out = server.status(&["--format", "json"]);
    let answer = json(&out);
    assert_eq!(out.status.code(), Some(1), "{answer}");
    assert_eq!(answer["verdict"], "failed", "{answer}");
    assert_eq!(answer["operation"], serde_json::Value::Null, "{answer}");
    // A record without a start time (pid only) is no better.
    std::fs::write(&path, record(0).replace(r#""start_time":0,"#, "")).unwrap();
    assert_eq!(server.status(&[]).status.code(), Some(1));
    // The same pid with its own start time is that process: then it counts.
    std::fs::write(&path, record(started)).unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "etcd-setup restore (pid {pid}) has etcd down on purpose"
        )),
        "{}",
        text(&out)
    );
    unrelated.kill().unwrap();
    unrelated.wait().unwrap();
}

/// `[tls]` in status: a leaf within `tls.warn_days` is a warning with exit 0 (text and
/// JSON carry it and every certificate's facts); the same file replaced by an expired one
/// fails the member with `cert-expired` naming the key, at the next query.
#[test]
fn certificates_show_in_status_expiring_warns_and_expired_fails() {
    use crate::support::pki::{days_from_now, Pki};
    let pki = Pki::new();
    let key = pki.key("peer", "ec");
    let soon = pki.leaf(
        "soon",
        &key,
        "IP:10.1.1.11",
        &days_from_now(-300),
        &days_from_now(10),
    );
    let live = pki.path("peer.crt");
    std::fs::copy(&soon, &live).unwrap();
    let config = format!(
        "[node]\nname = \"etcd-1\"\nip = \"10.1.1.11\"\n\
         [etcd]\ninitial_cluster = \"etcd-1=https://10.1.1.11:2380\"\ncluster_token = \"tok\"\n\
         [report]\nstatus_group = \"root\"\n{}",
        Pki::tls_table(&live, &key, &pki.path("ca.crt"))
    );
    let server = Server::start(Some(&config));
    server.store().save(&state(Phase::Running)).unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let line = text(&out);
    assert!(line.starts_with("running: "), "{line}");
    assert!(
        line.contains(&format!(
            "; certificate tls.client_cert {} ends in 9 days",
            live.display()
        )) || line.contains(&format!(
            "; certificate tls.client_cert {} ends in 10 days",
            live.display()
        )),
        "{line}"
    );
    let j = json(&server.status(&["--format", "json"]));
    assert_eq!(j["verdict"], "running");
    let certs = j["certificates"].as_array().expect("certificates");
    assert_eq!(certs.len(), 4, "{certs:?}");
    assert_eq!(certs[0]["key"], "tls.client_cert");
    assert_eq!(certs[0]["subject"], "CN=soon");
    assert_eq!(certs[0]["issuer"], "CN=test-ca");
    assert_eq!(certs[0]["key_matches"], true);
    assert_eq!(certs[0]["covers_ip"], true);
    assert_eq!(certs[0]["expiring"], true);
    assert!(certs[0]["not_after_unix"].as_u64().is_some(), "{certs:?}");
    assert_eq!(certs[1]["kind"], "ca");
    let warnings: Vec<&str> = j["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("tls.peer_cert: ") && w.contains(" days, on ")),
        "{warnings:?}"
    );
    let long = text(&server.status(&["--long"]));
    assert!(
        long.contains(&format!(
            "cert:     tls.peer_cert {}: CN=soon, serial ",
            live.display()
        )),
        "{long}"
    );
    assert!(long.contains("warning:  tls.client_cert: "), "{long}");

    let expired = pki.leaf(
        "old",
        &key,
        "IP:10.1.1.11",
        "20200101000000Z",
        "20210101000000Z",
    );
    let tmp = pki.path("peer.crt.new");
    std::fs::copy(&expired, &tmp).unwrap();
    std::fs::rename(&tmp, &live).unwrap();
    let out = server.status(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out).starts_with(&format!(
            "failed: cert-expired: tls.client_cert: {} (serial ",
            live.display()
        )),
        "{}",
        text(&out)
    );
    let j = json(&server.status(&["--format", "json"]));
    assert_eq!(j["reason"]["code"], "cert-expired");
    assert_eq!(j["exit_code"], 1);
}

/// `status --format prometheus` of a real answer (with `[tls]`, so the certificate
/// series too) is accepted by `promtool check metrics`; `--output` writes the same text
/// into the file; and without a server the exposition says `etcd_setup_status_up 0`.
#[test]
fn prometheus_format_passes_promtool_and_output_writes_the_file() {
    use crate::support::pki::{days_from_now, Pki};
    let pki = Pki::new();
    let key = pki.key("peer", "rsa");
    let crt = pki.leaf(
        "peer",
        &key,
        "IP:10.1.1.11",
        &days_from_now(-1),
        &days_from_now(100),
    );
    let config = format!(
        "[node]\nname = \"etcd-1\"\nip = \"10.1.1.11\"\n\
         [etcd]\ninitial_cluster = \"etcd-1=https://10.1.1.11:2380\"\ncluster_token = \"tok\"\n\
         [report]\nstatus_group = \"root\"\n{}",
        Pki::tls_table(&crt, &key, &pki.path("ca.crt"))
    );
    let server = Server::start(Some(&config));
    server
        .store()
        .save(&failed(ReasonCode::EtcdStartFailed, "etcd \"said\" no"))
        .unwrap();
    let out = server.status(&["--format", "prometheus"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    for line in [
        "etcd_setup_status_up 1",
        "etcd_setup_verdict{verdict=\"failed\"} 1",
        "etcd_setup_failed{reason=\"etcd-start-failed\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
    }
    assert!(
        text.contains("etcd_setup_certificate_expiry_timestamp_seconds{key=\"tls.peer_cert\""),
        "{text}"
    );
    let file = server.dir.path().join("etcd-setup.prom");
    let written = server.status(&["--format", "prometheus", "--output", file.to_str().unwrap()]);
    assert_eq!(written.status.code(), Some(1), "{written:?}");
    assert!(written.stdout.is_empty(), "{written:?}");
    let in_file = std::fs::read_to_string(&file).unwrap();
    assert!(
        in_file.contains("etcd_setup_failed{reason=\"etcd-start-failed\"} 1"),
        "{in_file}"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);

    let none = Command::new(BIN)
        .args(["status", "--format", "prometheus", "--socket"])
        .arg(server.dir.path().join("none.sock"))
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(5), "{none:?}");
    assert!(
        String::from_utf8_lossy(&none.stdout).ends_with("etcd_setup_status_up 0\n"),
        "{none:?}"
    );

    if Command::new("promtool").arg("--version").output().is_err() {
        println!("skipped promtool check metrics: promtool is not installed (vm-images/host-setup installs it)");
        return;
    }
    for exposition in [out.stdout, none.stdout] {
        let mut child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&exposition).unwrap();
        let checked = child.wait_with_output().unwrap();
        // promtool's lint also fails on style (counters without _total, ...); any line
        // from it is a finding.
        assert!(
            checked.status.success(),
            "{checked:?}\n{}",
            String::from_utf8_lossy(&exposition)
        );
        assert!(
            checked.stdout.is_empty() && checked.stderr.is_empty(),
            "{checked:?}"
        );
    }
}
