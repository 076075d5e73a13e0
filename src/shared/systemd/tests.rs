#[test]
fn renders_etcd_json_log_lines_as_msg_and_error() {
    let line = r#"{"level":"fatal","ts":"2026-11-30T03:11:55.557Z","caller":"etcdmain/etcd.go:203","msg":"discovery failed","error":"listen tcp 10.0.2.99:2380: bind: cannot assign requested address","stacktrace":"go.etcd.io/etcd/server/v3/etcdmain.startEtcdOrProxyV2\n\t/tmp/etcd"#;
    assert_eq!(
        readable(line),
        "discovery failed: listen tcp 10.0.2.99:2380: bind: cannot assign requested address"
    );
    assert_eq!(
        readable(r#"{"level":"info","msg":"say \"hi\""}"#),
        r#"say \"hi\""#
    );
    assert_eq!(readable("  plain text line "), "plain text line");
}

use super::journal::tail_lines;
use super::*;
use std::collections::HashMap;
use zbus::zvariant::{OwnedValue, Value};

fn failed_exit_1() -> UnitState {
    UnitState {
        load_state: "loaded".into(),
        active_state: "failed".into(),
        sub_state: "failed".into(),
        n_restarts: 5,
        exec_main_code: 1,
        exec_main_status: 1,
        result: "exit-code".into(),
        ..UnitState::default()
    }
}

fn owned(v: Value<'static>) -> OwnedValue {
    v.try_to_owned().unwrap()
}

#[test]
fn unit_state_reads_the_unit_and_service_properties() {
    let unit: HashMap<String, OwnedValue> = [
        ("LoadState", owned("loaded".into())),
        ("ActiveState", owned("active".into())),
        ("SubState", owned("running".into())),
        (
            "ActiveEnterTimestamp",
            owned(1_700_000_000_123_456u64.into()),
        ),
        ("Id", owned("etcd.service".into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let service: HashMap<String, OwnedValue> = [
        ("NRestarts", owned(3u32.into())),
        ("ExecMainStatus", owned(0i32.into())),
        ("ExecMainCode", owned(0i32.into())),
        ("Result", owned("success".into())),
        ("MainPID", owned(4242u32.into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let s = UnitState::from_properties(&unit, &service);
    assert_eq!(
        s,
        UnitState {
            load_state: "loaded".into(),
            active_state: "active".into(),
            sub_state: "running".into(),
            n_restarts: 3,
            active_enter_timestamp_us: 1_700_000_000_123_456,
            exec_main_status: 0,
            exec_main_code: 0,
            result: "success".into(),
            main_pid: 4242,
        }
    );
    assert!(s.is_active());
    assert_eq!(s.summary(), "active/running, 3 restarts");
}

#[test]
fn unit_state_of_an_unknown_unit_is_zero_and_wrong_types_are_ignored() {
    let unit: HashMap<String, OwnedValue> = [
        ("LoadState".to_string(), owned("not-found".into())),
        ("ActiveState".to_string(), owned(7u32.into())),
    ]
    .into_iter()
    .collect();
    let s = UnitState::from_properties(&unit, &HashMap::new());
    assert_eq!(s.load_state, "not-found");
    assert_eq!(s.active_state, "");
    assert_eq!(s.n_restarts, 0);
    assert!(!s.is_active());
}

#[test]
fn job_results_parse_from_systemd_names() {
    for (name, want) in [
        ("done", JobResult::Done),
        ("failed", JobResult::Failed),
        ("timeout", JobResult::Timeout),
        ("canceled", JobResult::Canceled),
        ("dependency", JobResult::Dependency),
        ("skipped", JobResult::Skipped),
        ("invalid", JobResult::Other("invalid".into())),
    ] {
        assert_eq!(JobResult::parse(name), want);
    }
}

#[test]
fn exit_names_the_status_or_the_signal() {
    let mut s = failed_exit_1();
    assert_eq!(s.exit(), "exited with status 1");
    s.exec_main_code = 2;
    s.exec_main_status = 9;
    assert_eq!(s.exit(), "was killed by signal SIGKILL");
    s.exec_main_code = 3;
    s.exec_main_status = 11;
    assert_eq!(s.exit(), "dumped core on signal SIGSEGV");
    s.exec_main_status = 99;
    assert_eq!(s.exit(), "dumped core on signal signal 99");
    s.exec_main_code = 0;
    assert_eq!(s.exit(), "");
}

#[test]
fn failed_start_names_exit_status_and_last_log_line() {
    let journal = vec![
        "{\"level\":\"info\",\"msg\":\"configuring peer listeners\"}".to_string(),
        "{\"level\":\"fatal\",\"msg\":\"listen tcp 10.9.9.9:2380: bind: cannot assign requested address\"}".to_string(),
        "".to_string(),
    ];
    let f = start_failure(
        "etcd.service",
        &JobResult::Failed,
        &failed_exit_1(),
        &journal,
    )
    .unwrap();
    assert_eq!(f.code, ReasonCode::EtcdStartFailed);
    assert_eq!(
        f.headline(),
        "etcd-start-failed: etcd.service failed to start: it exited with status 1; its last log line: listen tcp 10.9.9.9:2380: bind: cannot assign requested address"
    );
    let detail = format!("{:#}", f.source.unwrap());
    assert!(
        detail.contains("unit state: failed/failed, exited with status 1, 5 restarts"),
        "{detail}"
    );
    assert!(detail.contains("configuring peer listeners"), "{detail}");
}

#[test]
fn failed_start_explains_each_service_result() {
    for (result, code, status, want) in [
        (
            "timeout",
            2,
            15,
            "did not report ready (READY=1) within its start timeout",
        ),
        (
            "start-limit-hit",
            1,
            1,
            "restarted too often, so systemd gave up",
        ),
        (
            "resources",
            0,
            0,
            "a missing binary, user, EnvironmentFile or directory",
        ),
        ("signal", 2, 6, "was killed by signal SIGABRT"),
        ("core-dump", 3, 11, "dumped core on signal SIGSEGV"),
        ("oom-kill", 2, 9, "out-of-memory killer"),
        ("protocol", 1, 0, "without sending READY=1"),
        ("exit-code", 0, 0, "exited with a failure status"),
        (
            "frobnicated",
            1,
            2,
            "exited with status 2 (result frobnicated)",
        ),
    ] {
        let state = UnitState {
            result: result.into(),
            exec_main_code: code,
            exec_main_status: status,
            ..failed_exit_1()
        };
        let f = start_failure("etcd.service", &JobResult::Failed, &state, &[]).unwrap();
        assert!(f.message.contains(want), "{result}: {}", f.message);
        assert!(
            f.message.ends_with("; see `journalctl -u etcd.service`"),
            "{}",
            f.message
        );
    }
}

#[test]
fn other_job_results_blame_systemd_and_done_or_pending_are_not_failures() {
    let s = failed_exit_1();
    for (r, code, want) in [
        (
            JobResult::Dependency,
            ReasonCode::SystemdFailed,
            "a unit it requires failed",
        ),
        (
            JobResult::Canceled,
            ReasonCode::SystemdFailed,
            "canceled by another job",
        ),
        (JobResult::Skipped, ReasonCode::SystemdFailed, "skipped"),
        (JobResult::Timeout, ReasonCode::EtcdStartFailed, "timed out"),
        (
            JobResult::Other("once".into()),
            ReasonCode::SystemdFailed,
            "result \"once\"",
        ),
    ] {
        let f = start_failure("etcd.service", &r, &s, &[]).unwrap();
        assert_eq!(f.code, code, "{r:?}");
        assert!(f.message.contains(want), "{r:?}: {}", f.message);
    }
    assert!(start_failure("etcd.service", &JobResult::Done, &s, &[]).is_none());
    assert!(start_failure("etcd.service", &JobResult::StillRunning, &s, &[]).is_none());
}

#[test]
fn refusals_name_the_action_the_unit_and_systemds_words() {
    let msg = zbus::message::Message::method_call("/", "Reload")
        .unwrap()
        .build(&())
        .unwrap();
    let e = zbus::Error::MethodError(
        "org.freedesktop.DBus.Error.AccessDenied"
            .try_into()
            .unwrap(),
        Some("Access denied".into()),
        msg,
    );
    let f = refused("start", "etcd.service", e);
    assert_eq!(
        f.headline(),
        "systemd-failed: systemd could not start etcd.service: Access denied (org.freedesktop.DBus.Error.AccessDenied); etcd-setup must run as root"
    );
    let f = refused("reload its unit files", "", zbus::Error::InvalidReply);
    assert_eq!(
        f.message,
        "systemd could not reload its unit files: Invalid D-Bus method reply"
    );
}

#[test]
fn tail_keeps_the_last_non_empty_lines_cut_on_char_boundaries() {
    let long = "é".repeat(400);
    let text = format!("one\n\ntwo\nthree\n{long}\n");
    let got = tail_lines(text.as_bytes(), 3);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], "two");
    assert_eq!(got[1], "three");
    assert_eq!(got[2], "é".repeat(250));
    assert!(tail_lines(b"", 5).is_empty());
}

#[test]
fn journal_tail_of_an_unknown_unit_is_empty_not_an_error() {
    // Without a journal (this build host) or with one, a unit that never ran has no
    // lines; the call must not fail or hang either way.
    assert!(journal_tail("etcd-setup-test-no-such-unit.service", 5).is_empty());
}
