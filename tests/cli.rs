//! The command line of `run` and `upgrade` themselves, and the lock seen from a second caller (its other
//! exit codes need a node: tests/vm_run.rs).

use std::process::Command;

fn etcd_setup(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_etcd-setup"))
        .args(args)
        .output()
        .expect("run etcd-setup")
}

#[test]
fn run_exits_2_on_a_bad_command_line_before_touching_anything() {
    for args in [
        vec!["run", "--no-such-flag"],
        vec!["run", "--lock-timeout", "soon"],
        vec!["run", "extra-argument"],
    ] {
        let out = etcd_setup(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}: no explanation");
    }
    let out = etcd_setup(&["run", "--lock-timeout", "soon"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a duration like 90s"));
}

#[test]
fn run_help_lists_every_exit_code() {
    let out = etcd_setup(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "0  etcd is installed, enabled, active and healthy",
        "1  the run failed; the reason is in the failure file",
        "2  the command line is wrong",
        "3  the configuration file is missing or invalid",
        "4  the run was stopped by a signal",
        "5  another run held the lock",
    ] {
        assert!(text.contains(line), "--help lacks {line:?}:\n{text}");
    }
}

#[test]
fn version_names_the_git_commit() {
    let out = etcd_setup(&["--version"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("etcd-setup 0.1.0 ("), "{text}");
    assert!(
        !text.contains("(unknown)"),
        "built without the git commit: {text}"
    );
}

/// A second run stopped while it waits for the lock leaves the node's record alone: the
/// run holding the lock reports for the node (and its etcd is not stopped).
#[test]
fn a_run_stopped_while_waiting_for_the_lock_writes_nothing() {
    use nix::fcntl::{Flock, FlockArg};
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::Duration;

    let dir = tempfile::tempdir().expect("tempdir");
    let (run, lib) = (dir.path().join("run"), dir.path().join("lib"));
    std::fs::create_dir_all(&run).expect("run dir");
    let failed = dir.path().join("failed");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nname = \"etcd-1\"\nip = \"127.0.0.1\"\n\
             [etcd]\ninitial_cluster = \"etcd-1=http://127.0.0.1:2380\"\ncluster_token = \"t\"\n\
             [report]\nfailure_file = \"{}\"\nowner = \"root\"\n",
            failed.display()
        ),
    )
    .expect("config");
    // The other run: holds the lock the whole time.
    let lock_file = std::fs::File::create(run.join("run.lock")).expect("lock file");
    let _held = Flock::lock(lock_file, FlockArg::LockExclusive).expect("flock");

    let mut child = Command::new(env!("CARGO_BIN_EXE_etcd-setup"))
        .args(["run", "--config"])
        .arg(&config)
        .arg("--run-dir")
        .arg(&run)
        .arg("--state-dir")
        .arg(&lib)
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start etcd-setup run");
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    while !lines.iter().any(|l: &String| l.contains("waiting for it")) {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => lines.push(line),
            Err(e) => {
                let _ = child.kill();
                panic!("the run never said it waits for the lock ({e}): {lines:?}");
            }
        }
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = child.wait().expect("wait");
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        lines.push(line);
    }
    assert_eq!(status.code(), Some(4), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("stopped by SIGTERM while waiting for another run")),
        "{lines:?}"
    );
    assert!(!failed.exists(), "a failure file was written");
    for state in [run.join("state.json"), lib.join("state.json")] {
        assert!(!state.exists(), "{} was written", state.display());
    }
}

/// `run` with a configuration of node etcd-1 on 127.0.0.1 whose `initial_cluster` URL is
/// `peer_url`, `extra` TOML appended, and `files` (name, text) written beside it: that it
/// exits 3 at once, the failure file's first line, and that it never waited for the ISO
/// nor took the lock. Returns the first line and the config's folder (removed on drop).
fn refused_at_once(
    peer_url: &str,
    extra: &str,
    files: &[(&str, &str)],
) -> (String, tempfile::TempDir) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let (run, lib) = (dir.join("run"), dir.join("lib"));
    let failed = dir.join("failed");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nname = \"etcd-1\"\nip = \"127.0.0.1\"\n\
             [etcd]\ninitial_cluster = \"etcd-1={peer_url}\"\ncluster_token = \"t\"\n\
             [iso]\nwait = \"10min\"\n\
             [report]\nfailure_file = \"{}\"\nowner = \"root\"\n{extra}",
            failed.display()
        ),
    )
    .expect("config");
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect(name);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_etcd-setup"))
        .args(["run", "--config"])
        .arg(&config)
        .arg("--run-dir")
        .arg(&run)
        .arg("--state-dir")
        .arg(&lib)
        .env_remove("JOURNAL_STREAM")
        .output()
        .expect("run etcd-setup run");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let text = std::fs::read_to_string(&failed).expect("failure file");
    // The run never got as far as waiting for the ISO, nor took the lock.
    let state = std::fs::read_to_string(run.join("state.json")).expect("live state");
    assert!(!state.contains("waiting-for-iso"), "{state}");
    assert!(!run.join("run.lock").exists(), "the lock was taken");
    let first = text.lines().next().unwrap_or_default().to_string();
    (first, tmp)
}

/// A configuration etcd's sandbox cannot honour (a TLS file under /home, hidden by
/// `ProtectHome=`) fails `config-invalid` at once, naming the key the operator wrote:
/// before the lock, before the ISO wait, before anything is installed.
#[test]
fn a_tls_file_under_home_is_config_invalid_before_any_wait() {
    let (first, dir) = refused_at_once(
        "https://127.0.0.1:2380",
        "[tls]\npeer_cert = \"/home/cloud/pki/peer.crt\"\n\
         peer_key = \"/home/cloud/pki/peer.key\"\npeer_trusted_ca = \"/home/cloud/pki/ca.crt\"\n",
        &[],
    );
    assert!(
        first.starts_with(&format!(
            "config-invalid: {}: tls.peer_cert: /home/cloud/pki/peer.crt lies under /home",
            dir.path().join("config.toml").display()
        )),
        "{first}"
    );
}

/// The operator's advisories beside the configuration (issue 37) are read with it: an
/// unsound entry fails `run` as `config-invalid` at once, naming the file and the entry,
/// before the ISO wait, since it decides what the node refuses.
#[test]
fn an_unsound_advisories_file_beside_the_config_is_config_invalid_before_any_wait() {
    let (first, dir) = refused_at_once(
        "http://127.0.0.1:2380",
        "",
        &[(
            "advisories.toml",
            "[[advisory]]\nid = \"site-1\"\nfirst = \"3.6\"\nlast = \"3.6.16\"\n\
             severity = \"data-safety\"\nsummary = \"s\"\nsource = \"etcd\"\n",
        )],
    );
    assert!(
        first.starts_with(&format!(
            "config-invalid: {}: site-1: \"3.6\" is not MAJOR.MINOR.PATCH",
            dir.path().join("advisories.toml").display()
        )),
        "{first}"
    );
}

#[test]
fn upgrade_help_lists_every_exit_code() {
    let out = etcd_setup(&["upgrade", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "0  this member runs the release of the attached ISO",
        "1  the upgrade failed",
        "3  the configuration file is missing or invalid",
        "5  a run of etcd-setup held the node's lock",
        "6  refused by a rule",
    ] {
        assert!(text.contains(line), "--help lacks {line:?}:\n{text}");
    }
}

/// No etcd answers on this node: the upgrade is refused (exit 6, upgrade-unhealthy)
/// before it looks for a disc or touches install.dir (the default /opt/bin is only named),
/// and the node's state records the refusal for `status`.
#[test]
fn upgrade_without_a_running_etcd_is_refused_and_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (run, lib) = (dir.path().join("run"), dir.path().join("lib"));
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nname = \"etcd-1\"\nip = \"127.0.0.1\"\n\
             [etcd]\ninitial_cluster = \"etcd-1=http://127.0.0.1:2380\"\ncluster_token = \"t\"\n\
             metrics_port = {port}\n\
             [report]\nfailure_file = \"{}\"\nowner = \"root\"\n",
            dir.path().join("failed").display()
        ),
    )
    .expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_etcd-setup"))
        .args(["upgrade", "--config"])
        .arg(&config)
        .arg("--run-dir")
        .arg(&run)
        .arg("--state-dir")
        .arg(&lib)
        .output()
        .expect("run etcd-setup upgrade");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("upgrade-unhealthy: this member's etcd does not tell its version"),
        "{stderr}"
    );
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("state.json")).expect("state.json"))
            .expect("state JSON");
    assert_eq!(state["upgrade"]["phase"], "refused", "{state}");
    assert!(state["upgrade"]["progress"]
        .as_str()
        .unwrap_or_default()
        .starts_with("upgrade-unhealthy"));
    // Refused before anything else: no disc was looked for, no staging folder made.
    assert!(!stderr.contains("iso"), "{stderr}");
}
