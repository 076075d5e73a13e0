//! The day-2 part of an answer: etcd's space (database size, size in use, quota) from
//! `/metrics` on the loopback metrics listener, its active alarms from `/health`, the
//! last snapshot from `snapshot.json`, and the off-node backups from `backup.json`.
//!
//! Bounded cost: `/metrics` is one local HTTP read (about 150 KiB) per
//! [`super::SystemLive::TTL`] at most, never an etcdctl process; `/health` is asked
//! anyway and names the alarms (`{"health":"false","reason":"ALARM NOSPACE"}` in 3.5;
//! 3.4 says only `false`, see [`alarms_in`]).

use super::protocol::{Answer, BackupView, SnapshotView, SpaceView, Verdict};
use crate::cluster::health::Health;
use crate::reason::ReasonCode;
use crate::shared::report::{read_backup_record, read_snapshot_record, Reason};
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The metric of the database file's size.
pub const DB_SIZE: &str = "etcd_mvcc_db_total_size_in_bytes";
/// The metric of the part of it in use.
pub const DB_IN_USE: &str = "etcd_mvcc_db_total_size_in_use_in_bytes";
/// The metric of the quota.
pub const QUOTA: &str = "etcd_server_quota_backend_bytes";

/// The value of an unlabelled gauge line `NAME VALUE` (Go writes `1.6384e+07`).
fn gauge(line: &str, name: &str) -> Option<u64> {
    let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
    let v: f64 = rest.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v as u64)
}

/// Reads the three space metrics from an HTTP reply to `GET /metrics`.
pub fn parse_space(reader: impl BufRead) -> Result<SpaceView, String> {
    let (mut size, mut in_use, mut quota) = (None, None, None);
    for line in reader.split(b'\n') {
        let line = line.map_err(|e| e.to_string())?;
        let line = String::from_utf8_lossy(&line);
        size = size.or_else(|| gauge(&line, DB_SIZE));
        in_use = in_use.or_else(|| gauge(&line, DB_IN_USE));
        quota = quota.or_else(|| gauge(&line, QUOTA));
        if size.is_some() && in_use.is_some() && quota.is_some() {
            break;
        }
    }
    let db_size = size.ok_or_else(|| format!("no {DB_SIZE} in /metrics"))?;
    let quota = quota.ok_or_else(|| format!("no {QUOTA} in /metrics"))?;
    Ok(SpaceView {
        db_size,
        db_size_in_use: in_use,
        quota,
        quota_used_percent: db_size.saturating_mul(100) / quota.max(1),
    })
}

/// etcd's space from `GET /metrics` at `addr`, within `deadline` in all.
pub fn read_space(addr: SocketAddr, deadline: Duration) -> Result<SpaceView, String> {
    let reader = crate::cluster::health::get_metrics(addr, deadline)?;
    parse_space(reader).map_err(|e| format!("{addr}/metrics: {e}"))
}

/// The alarms `/health` names (3.5: `"reason":"ALARM NOSPACE"`). etcd 3.4 says only
/// `{"health":"false"}`: then NOSPACE is inferred when the database is within
/// [`NOSPACE_NEAR`] percent of its quota (3.4 raises the alarm when a write would pass it,
/// so the file may stay just below); 3.4's CORRUPT stays a plain `etcd-unhealthy`.
pub fn alarms_in(health: &Health, space: Option<&SpaceView>) -> Vec<String> {
    let Health::Unhealthy(body) = health else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for kind in ["NOSPACE", "CORRUPT"] {
        if body.contains(kind) {
            v.push(kind.to_string());
        }
    }
    let names_none = !body.contains("reason");
    if v.is_empty() && names_none && space.is_some_and(|s| s.quota_used_percent >= NOSPACE_NEAR) {
        v.push("NOSPACE".to_string());
    }
    v
}

/// How full, in percent of the quota, an unhealthy 3.4 member's database must be for
/// its unnamed alarm to be read as NOSPACE.
pub const NOSPACE_NEAR: u64 = 95;

/// The failed verdict's reason for active `alarms`, if one of them is NOSPACE or CORRUPT.
pub fn alarm_reason(alarms: &[String], space: Option<&SpaceView>) -> Option<Reason> {
    if alarms.iter().any(|a| a == "CORRUPT") {
        return Some(Reason {
            code: ReasonCode::EtcdCorrupt,
            message: "etcd raised the CORRUPT alarm: a member's data differ from the \
                      others'; replace that member (see `etcdctl alarm list`)"
                .into(),
        });
    }
    if alarms.iter().any(|a| a == "NOSPACE") {
        let size = space.map_or(String::new(), |s| {
            format!(" ({} of {} bytes)", s.db_size, s.quota)
        });
        return Some(Reason {
            code: ReasonCode::EtcdNospace,
            message: format!(
                "etcd raised the NOSPACE alarm: its database reached the quota{size} and it \
                 takes no writes; delete keys, then run `etcd-setup maintain`"
            ),
        });
    }
    None
}

/// Adds the last snapshot from `snapshot.json` in `persist_dir` to `answer`, and a
/// warning when it is stale or failed; a record that cannot be read is a warning too.
pub fn annotate(answer: &mut Answer, persist_dir: &Path, now: SystemTime) {
    let record = match read_snapshot_record(persist_dir) {
        Ok(Some(r)) => r,
        Ok(None) => {
            if answer.verdict == Verdict::Running {
                answer
                    .warnings
                    .push("no snapshot recorded yet (etcd-setup-snapshot.timer)".into());
            }
            return;
        }
        Err(e) => {
            answer.warnings.push(format!(
                "{}: unreadable: {e}",
                crate::shared::report::snapshot_record_path(persist_dir).display()
            ));
            return;
        }
    };
    let stale_after = Duration::from_secs(record.stale_after_s.unwrap_or(13 * 3600));
    let age = record.last.as_ref().and_then(|l| {
        let t = std::time::UNIX_EPOCH + Duration::from_secs(l.unix_time);
        now.duration_since(t).ok()
    });
    let stale = match age {
        Some(a) => a > stale_after,
        None => true,
    };
    if let Some(f) = &record.failure {
        answer.warnings.push(format!(
            "the last snapshot failed at {}: {}: {}",
            f.time, f.code, f.message
        ));
    }
    if let Some(f) = &record.copy_failure {
        answer.warnings.push(format!(
            "the last snapshot is kept, but its copy failed at {}: {}: {}",
            f.time, f.code, f.message
        ));
    }
    answer.warnings.extend(record.warnings.iter().cloned());
    if stale {
        answer.warnings.push(match (&record.last, age) {
            (Some(l), Some(a)) => format!(
                "the last good snapshot is {} h old (taken {}; stale after {} h)",
                a.as_secs() / 3600,
                l.time,
                stale_after.as_secs() / 3600
            ),
            _ => "no good snapshot recorded".into(),
        });
    }
    answer.snapshot = Some(SnapshotView {
        last: record.last,
        failure: record.failure,
        copy_failure: record.copy_failure,
        stale,
    });
}

/// Adds the off-node backups from `backup.json` in `persist_dir` to `answer` when
/// `[backup]` is configured (`period` is `backup.period`, `None` without it): the block,
/// and a warning for a failed upload, a failed verification, or a newest verified object
/// older than two periods (or none); the exit code stays as it is, as for snapshots.
pub fn annotate_backup(
    answer: &mut Answer,
    persist_dir: &Path,
    period: Option<Duration>,
    now: SystemTime,
) {
    let Some(period) = period else {
        return;
    };
    let record = match read_backup_record(persist_dir) {
        Ok(r) => r.unwrap_or_default(),
        Err(e) => {
            answer.warnings.push(format!(
                "{}: unreadable: {e}",
                crate::shared::report::backup_record_path(persist_dir).display()
            ));
            return;
        }
    };
    let newest = record.newest.clone().or_else(|| {
        record.last_upload.as_ref().filter(|u| u.verified).map(|u| {
            crate::shared::report::BackupSeen {
                at: u.at.clone(),
                object: u.object.clone(),
                member: u.member.clone(),
                size: u.size,
            }
        })
    });
    let age = newest
        .as_ref()
        .map(|n| now.duration_since(n.at.at()).map_or(0, |d| d.as_secs()));
    let stale = age.is_none_or(|a| a > 2 * period.as_secs());
    if let Some(f) = &record.failure {
        answer.warnings.push(format!(
            "the last backup upload failed at {}: {}: {}",
            f.at.time, f.code, f.message
        ));
    }
    if let Some(v) = record.last_verification.as_ref().filter(|v| !v.ok) {
        answer.warnings.push(format!(
            "the last backup verification of {} failed at {}: {}: {}",
            v.object,
            v.at.time,
            v.code.map_or("backup-verify-failed", |c| c.as_str()),
            v.message.as_deref().unwrap_or("(no message recorded)")
        ));
    }
    if stale {
        let p = period.as_secs();
        answer.warnings.push(match (&newest, age) {
            (Some(n), Some(a)) => format!(
                "the newest backup in the bucket is {} h old ({}, taken {}; more than two \
                 backup.period of {} s)",
                a / 3600,
                n.object,
                n.at.time,
                p
            ),
            _ => "no verified backup in the bucket recorded yet (etcd-setup snapshot \
                  uploads one per backup.period)"
                .into(),
        });
    }
    // Issue 21's rule: a failed upload or verification fails a running member, with its
    // reason (the cluster's off-node copy is what the platform relies on once every VM is
    // gone); a stale backup is a warning only. The verification's failure comes first: it
    // says the bucket holds no object that restores.
    if answer.verdict == Verdict::Running {
        let failed = record
            .last_verification
            .as_ref()
            .filter(|v| !v.ok)
            .map(|v| Reason {
                code: v.code.unwrap_or(ReasonCode::BackupVerifyFailed),
                message: format!(
                    "the backup {} did not verify: {}",
                    v.object,
                    v.message.as_deref().unwrap_or("(no message recorded)")
                ),
            })
            .or_else(|| {
                record.failure.as_ref().map(|f| Reason {
                    code: f.code,
                    message: format!("the backup upload failed at {}: {}", f.at.time, f.message),
                })
            });
        if let Some(reason) = failed {
            answer.verdict = Verdict::Failed;
            answer.exit_code = Verdict::Failed.exit_code();
            answer.reason = Some(reason);
        }
    }
    answer.backup = Some(BackupView {
        configured: true,
        last_upload: record.last_upload,
        newest,
        checked: record.checked,
        failure: record.failure,
        last_verification: record.last_verification,
        age_s: age,
        period_s: period.as_secs(),
        stale,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::report::{record_snapshot, SnapshotTaken};

    #[test]
    fn reads_the_three_space_gauges_from_metrics() {
        let reply = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n\
            # HELP etcd_mvcc_db_total_size_in_bytes Total size\n\
            etcd_mvcc_db_total_size_in_bytes 1.6973824e+07\n\
            etcd_mvcc_db_total_size_in_use_in_bytes 1.3766656e+07\n\
            etcd_server_quota_backend_bytes 1.6777216e+07\n";
        let s = parse_space(reply.as_bytes()).unwrap();
        assert_eq!(
            s,
            SpaceView {
                db_size: 16_973_824,
                db_size_in_use: Some(13_766_656),
                quota: 16_777_216,
                quota_used_percent: 101,
            }
        );
        let e = parse_space("HTTP/1.0 200 OK\r\n\r\nfoo 1\n".as_bytes()).unwrap_err();
        assert!(e.contains(DB_SIZE), "{e}");
    }

    #[test]
    fn alarms_come_from_health_named_or_inferred_on_3_4() {
        let full = SpaceView {
            db_size: 16_695_296,
            db_size_in_use: None,
            quota: 16_777_216,
            quota_used_percent: 99,
        };
        let named =
            Health::Unhealthy(r#"HTTP 503: {"health":"false","reason":"ALARM NOSPACE"}"#.into());
        assert_eq!(alarms_in(&named, None), ["NOSPACE"]);
        let bare = Health::Unhealthy(r#"HTTP 503: {"health":"false"}"#.into());
        assert_eq!(alarms_in(&bare, Some(&full)), ["NOSPACE"]);
        let roomy = SpaceView {
            quota_used_percent: 40,
            ..full.clone()
        };
        assert!(alarms_in(&bare, Some(&roomy)).is_empty());
        assert!(alarms_in(&Health::Healthy, Some(&full)).is_empty());
        let r = alarm_reason(&["NOSPACE".into()], Some(&full)).unwrap();
        assert_eq!(r.code, ReasonCode::EtcdNospace);
        assert!(r.message.contains("etcd-setup maintain"), "{}", r.message);
        let r = alarm_reason(&["NOSPACE".into(), "CORRUPT".into()], None).unwrap();
        assert_eq!(r.code, ReasonCode::EtcdCorrupt);
    }

    fn answer() -> Answer {
        let live = crate::status::FileLive("/nonexistent".into());
        let loaded = crate::shared::report::Loaded::default();
        crate::status::evaluate(&loaded, Path::new("/run/x"), &live, &|_| false)
    }

    #[test]
    fn a_stale_snapshot_is_a_warning_with_its_age() {
        let dir = tempfile::tempdir().unwrap();
        let taken_at = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let taken = SnapshotTaken {
            time: crate::shared::report::rfc3339(taken_at),
            unix_time: 1_800_000_000,
            revision: 42,
            size: 20512,
            file: "/var/lib/etcd-setup/snapshots/x.db".into(),
            copy: None,
            hash: 1,
            total_keys: 7,
            pruned_files: 2,
            pruned_bytes: 500,
        };
        record_snapshot(dir.path(), taken, Duration::from_secs(13 * 3600)).unwrap();
        let mut fresh = answer();
        annotate(&mut fresh, dir.path(), taken_at + Duration::from_secs(3600));
        assert!(!fresh.snapshot.as_ref().unwrap().stale);
        assert!(fresh.warnings.is_empty(), "{:?}", fresh.warnings);
        let long = crate::status::text_long(&fresh);
        assert!(
            long.contains(
                " size 20512 /var/lib/etcd-setup/snapshots/x.db; pruned/: 2 file(s), 500 bytes\n"
            ),
            "{long}"
        );
        let mut old = answer();
        annotate(
            &mut old,
            dir.path(),
            taken_at + Duration::from_secs(20 * 3600),
        );
        let v = old.snapshot.as_ref().unwrap();
        assert!(v.stale);
        assert_eq!(v.last.as_ref().unwrap().revision, 42);
        assert_eq!(
            old.verdict,
            answer().verdict,
            "a warning changes no verdict"
        );
        assert!(old.warnings[0].contains("20 h old"), "{:?}", old.warnings);
    }

    /// A FIFO at `snapshot.json` is a warning at once (a blocking open waited for a writer
    /// forever, and every later query with it); a copy failure and the run's warnings
    /// are shown beside a kept snapshot.
    #[test]
    fn a_fifo_at_the_snapshot_record_is_a_warning_not_a_wait() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("snapshot.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let at = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let mut a = answer();
            annotate(&mut a, &at, SystemTime::now());
            let _ = tx.send(a.warnings);
        });
        let warnings = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("annotate blocked on a FIFO");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0]
                .ends_with("snapshot.json: unreadable: is a FIFO, not a file the agent wrote"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_failed_copy_and_the_run_s_warnings_show_beside_the_kept_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let taken = SnapshotTaken {
            time: crate::shared::report::rfc3339(now),
            unix_time: now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
            revision: 42,
            size: 20512,
            file: "/var/lib/etcd-setup/snapshots/x.db".into(),
            copy: None,
            hash: 1,
            total_keys: 7,
            pruned_files: 0,
            pruned_bytes: 0,
        };
        let f = crate::reason::Failure::new(ReasonCode::DiskFull, "the copy disk is full");
        crate::shared::report::record_snapshot_kept(
            dir.path(),
            taken,
            Some(&f),
            vec!["a name from the future".into()],
            Duration::from_secs(3600),
        )
        .unwrap();
        let mut a = answer();
        annotate(&mut a, dir.path(), now);
        let v = a.snapshot.as_ref().unwrap();
        assert_eq!(v.last.as_ref().unwrap().revision, 42);
        assert!(!v.stale);
        assert_eq!(v.copy_failure.as_ref().unwrap().code, ReasonCode::DiskFull);
        assert_eq!(a.warnings.len(), 2, "{:?}", a.warnings);
        assert!(
            a.warnings[0].contains("its copy failed"),
            "{:?}",
            a.warnings
        );
        assert_eq!(a.warnings[1], "a name from the future");
    }

    #[test]
    fn backups_show_only_when_configured_with_their_age_and_a_failure_fails_a_running_member() {
        use crate::reason::Failure;
        use crate::shared::report::{
            record_upload, record_upload_failure, record_verification, BackupSeen, Stamp,
            UploadChecked,
        };
        let dir = tempfile::tempdir().unwrap();
        let hour = Duration::from_secs(3600);
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_796_118_300);
        let mut a = answer();
        annotate_backup(&mut a, dir.path(), None, t);
        assert_eq!(a.backup, None, "no [backup], no block");

        let mut a = answer();
        annotate_backup(&mut a, dir.path(), Some(hour), t);
        let v = a.backup.as_ref().unwrap();
        assert!(v.configured && v.stale && v.newest.is_none(), "{v:?}");
        assert!(
            a.warnings[0].contains("no verified backup"),
            "{:?}",
            a.warnings
        );

        let key = "etcd-setup/00000000000000aa/20261201T094500Z-rev7-etcd-2.db.age";
        record_upload(
            dir.path(),
            UploadChecked {
                at: t,
                uploaded: None,
                newest: Some(BackupSeen {
                    at: Stamp::of(t),
                    object: key.into(),
                    member: "etcd-2".into(),
                    size: 99,
                }),
                period: hour,
            },
        )
        .unwrap();
        let mut a = answer();
        annotate_backup(&mut a, dir.path(), Some(hour), t + 2 * hour);
        let v = a.backup.as_ref().unwrap();
        assert_eq!(
            (v.age_s, v.stale),
            (Some(7200), false),
            "two periods: not yet"
        );
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);

        let mut a = answer();
        annotate_backup(
            &mut a,
            dir.path(),
            Some(hour),
            t + 2 * hour + Duration::from_secs(1),
        );
        assert!(a.backup.as_ref().unwrap().stale);
        assert!(a.warnings[0].contains("2 h old"), "{:?}", a.warnings);
        assert!(a.warnings[0].contains(key), "{:?}", a.warnings);

        let denied = Failure::new(ReasonCode::BackupDenied, "the store refused the keys");
        record_upload_failure(dir.path(), &denied, None, t + hour, hour).unwrap();
        let bad = Failure::new(ReasonCode::BackupVerifyFailed, "the trial restore failed");
        record_verification(dir.path(), key, Err(&bad), t + hour).unwrap();
        let mut a = answer();
        annotate_backup(&mut a, dir.path(), Some(hour), t + hour);
        let v = a.backup.as_ref().unwrap();
        assert_eq!(v.failure.as_ref().unwrap().code, ReasonCode::BackupDenied);
        assert!(!v.last_verification.as_ref().unwrap().ok);
        assert_eq!(a.warnings.len(), 2, "{:?}", a.warnings);
        assert!(
            a.warnings[0].contains("upload failed") && a.warnings[0].contains("backup-denied"),
            "{:?}",
            a.warnings
        );
        assert!(
            a.warnings[1].contains("verification") && a.warnings[1].contains("trial restore"),
            "{:?}",
            a.warnings
        );
        // Warnings, and on a running member a failure with the verification's reason
        // (this answer's member is not running: its verdict stays as it was).
        let before = answer();
        assert_eq!((a.verdict, a.exit_code), (before.verdict, before.exit_code));
        let mut running = answer();
        running.verdict = Verdict::Running;
        running.exit_code = Verdict::Running.exit_code();
        running.reason = None;
        annotate_backup(&mut running, dir.path(), Some(hour), t + hour);
        assert_eq!((running.verdict, running.exit_code), (Verdict::Failed, 1));
        let why = running.reason.as_ref().unwrap();
        assert_eq!(why.code, ReasonCode::BackupVerifyFailed, "{why:?}");
        assert!(why.message.contains(key), "{why:?}");
        let long = crate::status::text_long(&a);
        assert!(long.contains("backup:   newest"), "{long}");
        assert!(long.contains("last upload failed"), "{long}");
    }

    /// A running member whose /health names NOSPACE, with its space.
    struct Full;

    impl crate::status::LiveView for Full {
        fn etcd(&self) -> Result<crate::status::EtcdLive, String> {
            Ok(crate::status::EtcdLive {
                unit: crate::shared::systemd::UnitState {
                    load_state: "loaded".into(),
                    active_state: "active".into(),
                    sub_state: "running".into(),
                    ..Default::default()
                },
                health: Health::Unhealthy(
                    r#"HTTP 503: {"health":"false","reason":"ALARM NOSPACE"}"#.into(),
                ),
                version: None,
            })
        }

        fn space(&self) -> Option<SpaceView> {
            Some(SpaceView {
                db_size: 17_000_000,
                db_size_in_use: Some(14_000_000),
                quota: 16_777_216,
                quota_used_percent: 101,
            })
        }
    }

    #[test]
    fn a_nospace_alarm_fails_the_verdict_with_its_own_code_and_shows_the_space() {
        use crate::shared::report::{Phase, State};
        let mut state = State::begin(Phase::WaitingForIso);
        state.enter(Phase::Running, SystemTime::now());
        let loaded = crate::shared::report::Loaded {
            state: Some(state),
            from: Some("/run/etcd-setup/state.json".into()),
            notes: Vec::new(),
            unreadable: None,
        };
        let a = crate::status::evaluate(
            &loaded,
            Path::new("/run/etcd-setup/state.json"),
            &Full,
            &|_| false,
        );
        assert_eq!(a.verdict, Verdict::Failed);
        assert_eq!(a.reason.as_ref().unwrap().code, ReasonCode::EtcdNospace);
        assert_eq!(a.alarms, ["NOSPACE"]);
        assert_eq!(a.space.as_ref().unwrap().quota, 16_777_216);
        assert_eq!(a.exit_code, crate::exit::status::FAILED);
    }
}
