use super::verdict::ago;
use super::*;
use crate::cluster::health::Health;
use crate::reason::{Failure, ReasonCode};
use crate::shared::report::{Loaded, Phase, State};
use crate::shared::systemd::UnitState;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

struct Fixed(Result<EtcdLive, String>);

impl LiveView for Fixed {
    fn etcd(&self) -> Result<EtcdLive, String> {
        self.0.clone()
    }
}

fn unit(load: &str, active: &str, sub: &str, restarts: u32) -> UnitState {
    UnitState {
        load_state: load.into(),
        active_state: active.into(),
        sub_state: sub.into(),
        n_restarts: restarts,
        ..UnitState::default()
    }
}

fn healthy() -> Fixed {
    Fixed(Ok(EtcdLive {
        unit: unit("loaded", "active", "running", 0),
        health: Health::Healthy,
        version: None,
    }))
}

const LIVE: &str = "/run/etcd-setup/state.json";

fn loaded(state: State) -> Loaded {
    Loaded {
        state: Some(state),
        from: Some(PathBuf::from(LIVE)),
        notes: Vec::new(),
        unreadable: None,
    }
}

fn running() -> State {
    let mut s = State::begin(Phase::WaitingForIso);
    s.etcd_version = Some("3.5.16".into());
    s.enter(Phase::Running, SystemTime::now());
    s
}

fn eval(l: &Loaded, live: &dyn LiveView, alive: bool) -> Answer {
    evaluate(l, Path::new(LIVE), live, &move |_| alive)
}

#[test]
fn running_and_healthy_is_running_with_exit_0() {
    let a = eval(&loaded(running()), &healthy(), false);
    assert_eq!((a.verdict, a.exit_code), (Verdict::Running, 0));
    assert_eq!(
        text_line(&a),
        "running: etcd 3.5.16 active, healthy (0 restarts)"
    );
    assert_eq!(a.reason, None);
}

#[test]
fn systemd_unreachable_while_running_is_failed_not_running() {
    let a = eval(&loaded(running()), &Fixed(Err("no bus".into())), false);
    assert_eq!(a.verdict, Verdict::Failed);
    let r = a.reason.unwrap();
    assert_eq!(r.code.as_str(), "etcd-unhealthy");
    assert!(r.message.contains("no bus"), "{}", r.message);
    assert_eq!(a.etcd, None);
}

#[test]
fn a_stopped_etcd_names_its_exit_and_the_time_it_was_confirmed() {
    let mut u = unit("loaded", "failed", "failed", 5);
    u.exec_main_code = 1;
    u.exec_main_status = 1;
    let live = Fixed(Ok(EtcdLive {
        unit: u,
        health: Health::Unreachable("etcd.service is failed".into()),
        version: None,
    }));
    let a = eval(&loaded(running()), &live, false);
    let m = a.reason.unwrap().message;
    assert!(
        m.starts_with("etcd.service is failed/failed after 5 restarts; its process exited with status 1 (etcd-setup confirmed it running at "),
        "{m}"
    );
}

#[test]
fn a_failed_run_keeps_its_reason_and_shows_an_absent_unit_as_null() {
    let mut s = State::begin(Phase::WaitingForIso);
    s.fail(
        &Failure::new(ReasonCode::ArchiveMissing, "no etcd on the ISO"),
        SystemTime::now(),
    );
    let live = Fixed(Ok(EtcdLive {
        unit: unit("not-found", "inactive", "dead", 0),
        health: Health::Unreachable("etcd.service is inactive".into()),
        version: None,
    }));
    let a = eval(&loaded(s), &live, false);
    assert_eq!((a.verdict, a.exit_code), (Verdict::Failed, 1));
    assert_eq!(text_line(&a), "failed: archive-missing: no etcd on the ISO");
    assert_eq!(a.etcd, None);
}

#[test]
fn an_unfinished_phase_is_in_progress_only_while_its_run_lives() {
    let s = State::begin(Phase::WaitingForIso);
    let a = eval(&loaded(s.clone()), &healthy(), true);
    assert_eq!((a.verdict, a.exit_code), (Verdict::InProgress, 3));
    assert!(a.run.alive && a.reason.is_none() && a.etcd.is_none());
    let a = eval(&loaded(s), &healthy(), false);
    assert_eq!(a.verdict, Verdict::Failed);
    assert_eq!(a.reason.unwrap().code.as_str(), "interrupted");
}

#[test]
fn no_state_is_not_started_with_exit_4() {
    let a = eval(&Loaded::default(), &healthy(), true);
    assert_eq!((a.verdict, a.exit_code), (Verdict::NotStarted, 4));
    assert_eq!(a.phase.map(|p| p.as_str()), Some("not-started"));
}

#[test]
fn replies_survive_a_round_trip() {
    let a = eval(&loaded(running()), &healthy(), true);
    let line = Reply::Answer(Box::new(a.clone())).to_line();
    assert!(line.ends_with(b"\n") && !line[..line.len() - 1].contains(&b'\n'));
    assert_eq!(Reply::parse(&line).unwrap(), Reply::Answer(Box::new(a)));
    let e = Reply::Error(ErrorBody::new("busy", "try again"));
    assert_eq!(Reply::parse(&e.to_line()).unwrap(), e);
}

/// 2026-06-01T00:00:00Z, the tests' "now".
const NOW_S: u64 = 1_780_272_000;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW_S)
}

/// A state that reached `running` at NOW - 1 h, as member etcd-1, with etcd.service
/// at `confirmed` restarts then.
fn confirmed(confirmed: Option<u32>) -> State {
    let at = now() - Duration::from_secs(3600);
    let mut s = State::begin_at(Phase::WaitingForIso, at);
    s.etcd_version = Some("3.5.1".into());
    s.member_name = Some("etcd-1".into());
    s.confirmed_n_restarts = confirmed;
    s.enter(Phase::Running, at);
    s
}

/// etcd.service active with `restarts`, last started `ago` before NOW.
fn active(restarts: u32, ago: Duration, health: Health, version: Option<&str>) -> Fixed {
    let mut u = unit("loaded", "active", "running", restarts);
    u.active_enter_timestamp_us = u64::try_from(
        (now() - ago)
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap();
    u.main_pid = 4242;
    Fixed(Ok(EtcdLive {
        unit: u,
        health,
        version: version.map(String::from),
    }))
}

fn eval_now(s: State, live: &dyn LiveView) -> Answer {
    evaluate_at(&loaded(s), Path::new(LIVE), live, &|_| false, now())
}

#[test]
fn the_answer_names_the_member_and_the_running_version() {
    let live = active(0, Duration::from_secs(3600), Health::Healthy, Some("3.5.1"));
    let a = eval_now(confirmed(Some(0)), &live);
    assert_eq!(a.verdict, Verdict::Running);
    assert_eq!(a.member_name.as_deref(), Some("etcd-1"));
    let e = a.etcd.as_ref().unwrap();
    assert_eq!(e.version.as_deref(), Some("3.5.1"));
    assert_eq!(e.restarts_since_confirmed, Some(0));
    assert_eq!(
        text_line(&a),
        "running: member etcd-1, etcd 3.5.1 active, healthy (0 restarts)"
    );
    let long = text_long(&a);
    assert!(long.contains("member:   etcd-1\n"), "{long}");
    assert!(
        long.contains("etcd:     installed 3.5.1 (sha256 -), running 3.5.1\n"),
        "{long}"
    );
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["member_name"], "etcd-1");
    assert_eq!(json["etcd"]["version"], "3.5.1");
    assert_eq!(json["etcd"]["restarts_since_confirmed"], 0);
}

#[test]
fn a_running_version_other_than_the_installed_one_is_said_in_long() {
    let live = active(
        0,
        Duration::from_secs(3600),
        Health::Healthy,
        Some("3.4.23"),
    );
    let a = eval_now(confirmed(Some(0)), &live);
    assert_eq!(a.verdict, Verdict::Running);
    assert_eq!(
        text_line(&a),
        "running: member etcd-1, etcd 3.4.23 active, healthy (0 restarts)"
    );
    let long = text_long(&a);
    assert!(
        long.contains("running 3.4.23 (not the installed 3.5.1: "),
        "{long}"
    );
    // Unknown running version: the installed one in the line, `unknown` in --long.
    let live = active(0, Duration::from_secs(3600), Health::Healthy, None);
    let a = eval_now(confirmed(Some(0)), &live);
    assert_eq!(
        text_line(&a),
        "running: member etcd-1, etcd 3.5.1 active, healthy (0 restarts)"
    );
    assert!(text_long(&a).contains("running unknown\n"));
    assert!(!text_long(&a).contains("role:"), "no role said, none shown");
    let mut learner = a.clone();
    learner.role = Some(Role::Learner);
    assert!(text_long(&learner).contains("\nrole:     learner\n"));
    let json = serde_json::to_value(&learner).unwrap();
    assert_eq!(json["role"], "learner");
}

#[test]
fn a_poll_between_two_crashes_sees_the_crash_loop() {
    let live = active(3, Duration::from_secs(4), Health::Healthy, Some("3.5.1"));
    let a = eval_now(confirmed(Some(0)), &live);
    assert_eq!((a.verdict, a.exit_code), (Verdict::Failed, 1));
    let r = a.reason.unwrap();
    assert_eq!(r.code.as_str(), "etcd-unhealthy");
    assert_eq!(
        r.message,
        "etcd.service restarted 3 times since etcd-setup confirmed it running at 2026-05-31T23:00:00Z; last start 4 s ago; see `journalctl -u etcd`"
    );
    assert_eq!(a.etcd.unwrap().restarts_since_confirmed, Some(3));
}

#[test]
fn restarts_count_from_the_confirmed_baseline_and_name_unhealth() {
    // 2 restarts at confirmation, 3 now: 1 since.
    let live = active(
        3,
        Duration::from_secs(300),
        Health::Unhealthy("HTTP 503: no leader".into()),
        None,
    );
    let a = eval_now(confirmed(Some(2)), &live);
    assert_eq!(
        a.reason.unwrap().message,
        "etcd.service restarted 1 time since etcd-setup confirmed it running at 2026-05-31T23:00:00Z; last start 5 min ago; its health check says unhealthy: HTTP 503: no leader; see `journalctl -u etcd`"
    );
    // The same count as at confirmation, just started: no restart since, running.
    let live = active(2, Duration::from_secs(4), Health::Healthy, None);
    let a = eval_now(confirmed(Some(2)), &live);
    assert_eq!(a.verdict, Verdict::Running);
    assert_eq!(a.etcd.unwrap().restarts_since_confirmed, Some(0));
}

#[test]
fn a_stable_etcd_after_an_old_restart_is_running_again() {
    let window = CRASH_WINDOW + Duration::from_secs(1);
    let live = active(3, window, Health::Healthy, None);
    let a = eval_now(confirmed(Some(0)), &live);
    assert_eq!(a.verdict, Verdict::Running);
    assert_eq!(
        text_line(&a),
        "running: member etcd-1, etcd 3.5.1 active, healthy (3 restarts)"
    );
    assert!(text_long(&a).contains("3 restart(s) (3 since etcd-setup confirmed it)"));
    // Just inside the window it is not.
    let live = active(
        3,
        CRASH_WINDOW - Duration::from_secs(1),
        Health::Healthy,
        None,
    );
    assert_eq!(eval_now(confirmed(Some(0)), &live).verdict, Verdict::Failed);
}

#[test]
fn a_manual_restart_resets_the_baseline() {
    // Confirmed at 4 restarts; a manual restart reset NRestarts to 0: no crash.
    let live = active(0, Duration::from_secs(4), Health::Healthy, None);
    let a = eval_now(confirmed(Some(4)), &live);
    assert_eq!(a.verdict, Verdict::Running);
    assert_eq!(a.etcd.unwrap().restarts_since_confirmed, Some(0));
    // ... and 2 automatic restarts after it count from 0.
    let live = active(2, Duration::from_secs(4), Health::Healthy, None);
    let a = eval_now(confirmed(Some(4)), &live);
    assert_eq!(
        a.reason.unwrap().message,
        "etcd.service restarted 2 times since it was last started by hand; last start 4 s ago; see `journalctl -u etcd`"
    );
}

#[test]
fn a_state_without_a_baseline_counts_from_the_last_start_job() {
    let live = active(1, Duration::from_secs(90), Health::Healthy, None);
    let a = eval_now(confirmed(None), &live);
    assert_eq!(
        a.reason.unwrap().message,
        "etcd.service restarted 1 time since its last start job; last start 90 s ago; see `journalctl -u etcd`"
    );
    assert_eq!(a.etcd.unwrap().restarts_since_confirmed, None);
}

#[test]
fn a_stopped_etcd_after_restarts_since_confirmation_says_how_many() {
    let mut u = unit("loaded", "activating", "auto-restart", 7);
    u.exec_main_code = 1;
    u.exec_main_status = 2;
    u.active_enter_timestamp_us = (NOW_S - 30) * 1_000_000;
    let live = Fixed(Ok(EtcdLive {
        unit: u,
        health: Health::Unreachable("etcd.service is activating".into()),
        version: None,
    }));
    let a = eval_now(confirmed(Some(2)), &live);
    assert_eq!(
        a.reason.unwrap().message,
        "etcd.service is activating/auto-restart after 7 restarts (5 since etcd-setup confirmed it running at 2026-05-31T23:00:00Z); its process exited with status 2; last start 30 s ago; see `journalctl -u etcd`"
    );
    // A stopped etcd is failed whenever it last started.
    let mut u = unit("loaded", "failed", "failed", 0);
    u.active_enter_timestamp_us = (NOW_S - 86_400 * 3) * 1_000_000;
    let live = Fixed(Ok(EtcdLive {
        unit: u,
        health: Health::Unreachable("etcd.service is failed".into()),
        version: None,
    }));
    let a = eval_now(confirmed(Some(0)), &live);
    assert_eq!(
        a.reason.unwrap().message,
        "etcd.service is failed/failed after 0 restarts (etcd-setup confirmed it running at 2026-05-31T23:00:00Z); last start 3 d ago; see `journalctl -u etcd`"
    );
}

#[test]
fn ago_reads_like_a_person() {
    let at = |s: u64| (NOW_S - s) * 1_000_000;
    assert_eq!(ago(at(0), now()), "0 s");
    assert_eq!(ago(at(119), now()), "119 s");
    assert_eq!(ago(at(600), now()), "10 min");
    assert_eq!(ago(at(3 * 3600), now()), "3 h");
    assert_eq!(ago(at(5 * 86_400), now()), "5 d");
    assert_eq!(ago((NOW_S + 60) * 1_000_000, now()), "0 s");
}

#[test]
fn an_answer_without_the_new_fields_still_parses() {
    let a = eval_now(
        confirmed(Some(0)),
        &active(0, Duration::from_secs(3600), Health::Healthy, None),
    );
    let mut json = serde_json::to_value(&a).unwrap();
    json.as_object_mut().unwrap().remove("member_name");
    let etcd = json["etcd"].as_object_mut().unwrap();
    etcd.remove("version");
    etcd.remove("restarts_since_confirmed");
    let back: Answer = serde_json::from_value(json).unwrap();
    assert_eq!(back.member_name, None);
    assert_eq!(back.etcd.unwrap().version, None);
}

#[test]
fn the_running_version_is_read_once_per_etcd_process() {
    use std::io::{Read as _, Write as _};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { break };
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let body = format!("etcd_server_version{{server_version=\"3.5.{n}\"}} 1\n");
            let _ = c.write_all(format!("HTTP/1.1 200 OK\r\n\r\n{body}").as_bytes());
        }
    });
    let live = SystemLive::new(port);
    let mut u = unit("loaded", "active", "running", 0);
    u.main_pid = 100;
    u.active_enter_timestamp_us = 1;
    for _ in 0..5 {
        assert_eq!(live.live_version(&u).as_deref(), Some("3.5.0"));
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    // A restart: another process, read again.
    u.main_pid = 101;
    u.active_enter_timestamp_us = 2;
    assert_eq!(live.live_version(&u).as_deref(), Some("3.5.1"));
    assert_eq!(live.live_version(&u).as_deref(), Some("3.5.1"));
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // Nothing listening: no version, and no second try within the retry period.
    let closed = SystemLive::new(port_without_listener());
    assert_eq!(closed.live_version(&u), None);
    assert!(closed
        .version
        .lock()
        .unwrap()
        .as_ref()
        .unwrap()
        .retry_at
        .is_some());
}

/// A voter's role is asked once per etcd process; a learner's again after the retry
/// period, so its promotion shows.
#[test]
fn the_role_is_read_once_per_voting_process() {
    use crate::status::live::RoleSource;
    use std::io::{Read as _, Write as _};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { break };
            // The first answer says learner, every later one voter.
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let learner = if n == 0 { ",\"isLearner\":true" } else { "" };
            let body = format!("{{\"header\":{{\"member_id\":\"1\"}}{learner}}}");
            let _ = c.write_all(format!("HTTP/1.0 200 OK\r\n\r\n{body}").as_bytes());
        }
    });
    let live = SystemLive::new(1).with_role(RoleSource::Gateway(addr));
    let mut u = unit("loaded", "active", "running", 0);
    u.main_pid = 100;
    u.active_enter_timestamp_us = 1;
    assert_eq!(live.role(&u), Some(Role::Learner));
    assert_eq!(
        live.role(&u),
        Some(Role::Learner),
        "kept within the retry period"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    // Past the retry period (moved back instead of waited for): asked again.
    live.role.lock().unwrap().as_mut().unwrap().retry_at = Some(std::time::Instant::now());
    assert_eq!(live.role(&u), Some(Role::Voter));
    for _ in 0..5 {
        assert_eq!(live.role(&u), Some(Role::Voter));
    }
    assert_eq!(asked.load(Ordering::SeqCst), 2, "a voter is asked once");
    // Nothing listening: no role.
    let closed = SystemLive::new(1).with_role(RoleSource::Gateway(std::net::SocketAddr::from((
        [127, 0, 0, 1],
        port_without_listener(),
    ))));
    assert_eq!(closed.role(&u), None);
}

fn port_without_listener() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The JSON of an answer is a contract: a fixture state and a fixture live view give
/// exactly the line recorded from the agent before `phase` became optional and `notes`
/// were added (both leave an ordinary answer unchanged), followed only by the fields day 2
/// added at the end (schema 1: fields are only ever added), each with its empty value.
#[test]
fn the_json_of_an_answer_is_byte_for_byte_the_recorded_one() {
    let t0 = UNIX_EPOCH + std::time::Duration::from_secs(1_780_000_000);
    let mut s = State::begin_at(Phase::WaitingForIso, t0);
    s.pid = Some(4242);
    s.agent_version = "0.1.0 (test)".into();
    s.device = Some("/dev/sr0".into());
    s.label = Some("CDROM".into());
    s.enter(Phase::Validating, t0 + std::time::Duration::from_secs(3));
    s.sha256 = Some("ab".repeat(32));
    s.etcd_version = Some("3.5.16".into());
    s.member_name = Some("etcd-1".into());
    s.enter(Phase::Running, t0 + std::time::Duration::from_secs(9));
    s.progress = Some("etcd is running and healthy".into());
    s.confirmed_n_restarts = Some(1);
    let mut u = unit("loaded", "active", "running", 1);
    u.active_enter_timestamp_us = 1_780_000_008_000_000;
    let live = Fixed(Ok(EtcdLive {
        unit: u,
        health: Health::Healthy,
        version: Some("3.5.16".into()),
    }));
    let l = Loaded {
        state: Some(s),
        from: Some(PathBuf::from(LIVE)),
        ..Loaded::default()
    };
    let now = t0 + std::time::Duration::from_secs(3600);
    let a = evaluate_at(&l, Path::new(LIVE), &live, &|_| false, now);
    let line = String::from_utf8(Reply::Answer(Box::new(a)).to_line()).unwrap();
    let recorded = r#"{"schema_version":1,"phase":"running","progress":"etcd is running and healthy","reason":null,"device":"/dev/sr0","label":"CDROM","sha256":"abababababababababababababababababababababababababababababababab","etcd_version":"3.5.16","member_name":"etcd-1","phases":[{"phase":"waiting-for-iso","at":"2026-05-28T20:26:40Z","unix_ms":1780000000000},{"phase":"validating","at":"2026-05-28T20:26:43Z","unix_ms":1780000003000},{"phase":"running","at":"2026-05-28T20:26:49Z","unix_ms":1780000009000}],"run":{"pid":4242,"alive":false},"etcd":{"active_state":"active","sub_state":"running","n_restarts":1,"active_enter_timestamp_us":1780000008000000,"health":"healthy","version":"3.5.16","restarts_since_confirmed":0},"verdict":"running","exit_code":0,"updated_at":"2026-05-28T20:26:49Z","state_file":"/run/etcd-setup/state.json"}"#;
    let added = r#","space":null,"alarms":[],"snapshot":null,"warnings":[]}"#;
    let expected = format!("{}{added}", recorded.strip_suffix('}').unwrap());
    assert_eq!(line.trim_end(), expected, "\n{line}");
}

#[test]
fn an_advisory_and_an_upgrade_under_way_show_in_json_and_text() {
    let mut s = confirmed(Some(0));
    s.advisories = crate::shared::advisory::lines("3.5.1");
    s.upgrade = Some(crate::shared::report::UpgradeRecord {
        phase: crate::shared::report::UpgradePhase::WaitingForLock,
        from: "3.5.1".into(),
        to: "3.5.16".into(),
        progress: "waiting for the cluster lock etcd-setup/upgrade".into(),
        members: vec!["etcd-1=3.5.1".into(), "etcd-2=3.5.16".into()],
        cluster_version: Some("3.5.0".into()),
        updated_at: "2026-05-28T20:26:49Z".into(),
        process: Some(crate::shared::report::Process::current()),
    });
    let live = active(0, Duration::from_secs(3600), Health::Healthy, Some("3.5.1"));
    let a = eval_now(s, &live);
    let json: serde_json::Value =
        serde_json::from_slice(&Reply::Answer(Box::new(a.clone())).to_line()).unwrap();
    assert!(json["advisories"][0]
        .as_str()
        .unwrap()
        .starts_with("etcd 3.5.1: not recommended for production"));
    assert_eq!(json["upgrade"]["phase"], "waiting-for-lock");
    assert_eq!(json["upgrade"]["members"][1], "etcd-2=3.5.16");
    let line = text_line(&a);
    assert!(
        line.contains("; upgrading 3.5.1 -> 3.5.16: waiting-for-lock; advisory: etcd 3.5.1:"),
        "{line}"
    );
    // One in full on the line, the others counted there and given in --long.
    let n = json["advisories"].as_array().unwrap().len();
    assert!(n >= 2, "{json}");
    assert!(
        line.ends_with(&format!(
            " (and {} more advisories: etcd-setup status --long)",
            n - 1
        )),
        "{line}"
    );
    let long = text_long(&a);
    assert!(
        long.contains("\nadvisory: etcd 3.5.1: not recommended"),
        "{long}"
    );
    assert_eq!(
        long.matches("\nadvisory: etcd 3.5.1: ").count(),
        n,
        "{long}"
    );
    assert!(
        long.contains("\nupgrade:  waiting-for-lock 3.5.1 -> 3.5.16 (waiting for the cluster lock"),
        "{long}"
    );
    assert!(
        long.contains("\ncluster:  version 3.5.0; members etcd-1=3.5.1, etcd-2=3.5.16\n"),
        "{long}"
    );
    // A finished upgrade is history: the one line does not say "upgrading".
    let mut done = a.clone();
    done.upgrade.as_mut().unwrap().phase = crate::shared::report::UpgradePhase::Done;
    assert!(!text_line(&done).contains("upgrading"));
}

#[test]
fn an_advisory_shows_as_its_line_and_as_the_object_check_shows() {
    let mut s = confirmed(Some(0));
    s.etcd_version = Some("3.5.1".into());
    s.advisories = crate::shared::advisory::lines("3.5.1");
    let live = active(0, Duration::from_secs(3600), Health::Healthy, Some("3.5.1"));
    let a = eval_now(s, &live);
    let json: serde_json::Value =
        serde_json::from_slice(&Reply::Answer(Box::new(a)).to_line()).unwrap();
    // Schema 1 keeps the strings; the objects come beside them.
    assert!(json["advisories"][0]
        .as_str()
        .unwrap()
        .starts_with("etcd 3.5.1: not recommended for production"));
    let record = &json["advisory_details"][0];
    assert_eq!(record["id"], "etcd-3.5-data-inconsistency");
    assert_eq!(
        record,
        &serde_json::to_value(&crate::shared::advisory::records("3.5.1")[0]).unwrap()
    );
    assert!(record["summary"]
        .as_str()
        .unwrap()
        .contains("fixed in 3.5.3"));
}

/// Issue 38 (low): a store's error text with CR/LF split a `--long` warning line in two,
/// the second looking like a line of its own.
#[test]
fn a_warning_with_a_line_break_stays_one_line() {
    let live = active(
        0,
        Duration::from_secs(3600),
        Health::Healthy,
        Some("3.5.16"),
    );
    let mut a = eval_now(confirmed(Some(0)), &live);
    a.warnings = vec!["last upload failed: HTTP 500 Internal\r\nupdated:  forged".into()];
    let long = text_long(&a);
    let warnings: Vec<&str> = long.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{long}");
    assert!(warnings[0].contains("forged"), "{long}");
    assert_eq!(
        long.lines().filter(|l| l.starts_with("updated:")).count(),
        1,
        "{long}"
    );
}

/// Issue 38 (low): an answer over the client's 1 MiB (thousands of CAs in a bundle) broke
/// every query (`status_up 0`). It is cut to fit, the certificates that say something
/// kept first, and a warning says what was left out.
#[test]
fn an_answer_too_long_for_the_protocol_is_cut_to_fit_and_says_so() {
    let mut a = eval(&loaded(running()), &healthy(), true);
    let ca = |i: usize, expiring: bool| crate::shared::config::certs::CertView {
        key: "tls.client_trusted_ca".into(),
        path: "/etc/etcd/pki/ca.crt".into(),
        kind: crate::shared::config::certs::CertKind::Ca,
        subject: Some(format!(
            "CN=ca number {i} of a very long bundle, O=somewhere"
        )),
        issuer: Some(format!(
            "CN=ca number {i} of a very long bundle, O=somewhere"
        )),
        serial: Some(format!("{i:040X}")),
        not_before: Some("2026-01-01T00:00:00Z".into()),
        not_after: Some("2036-01-01T00:00:00Z".into()),
        not_after_unix: Some(2_082_758_400),
        days_left: Some(3000),
        key_matches: None,
        covers_ip: None,
        covers_name: None,
        names: vec![],
        problem: None,
        expiring,
    };
    a.certificates = (0..6000).map(|i| ca(i, i == 5999)).collect();
    let whole = serde_json::to_vec(&a).unwrap().len();
    assert!(whole > super::protocol::MAX_REPLY as usize, "{whole}");
    let line = Reply::Answer(Box::new(a)).to_line();
    assert!(
        line.len() <= super::protocol::MAX_REPLY as usize,
        "{}",
        line.len()
    );
    let Reply::Answer(cut) = Reply::parse(&line).unwrap() else {
        panic!("not an answer")
    };
    assert!(!cut.certificates.is_empty() && cut.certificates.len() < 6000);
    assert!(cut.certificates[0].expiring, "the expiring one first");
    let said = cut.warnings.last().unwrap();
    assert!(
        said.starts_with("this answer was cut to fit the status protocol's 1024 KiB: ")
            && said.contains(" of 6000 certificates"),
        "{said}"
    );
    assert_eq!(cut.verdict, Verdict::Running);
}
