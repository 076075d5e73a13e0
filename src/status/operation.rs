//! The day-2 operation in progress, in an answer: shown while its process lives (SPEC:
//! "the day-2 operation in progress"), that is while a process with its pid *and* its
//! start time runs ([`Process::is_alive`]): a record left by a killed command whose pid
//! another process took since counts for nothing. A failure the operation causes on purpose — etcd
//! restarted by `upgrade`, stopped by `restore` — is `in-progress`, not `failed`: the
//! platform should not act on a restart that was asked for.

use super::protocol::{Answer, Verdict};
use crate::reason::ReasonCode;
use crate::shared::report::{read_operation, Phase, Process};
use std::path::Path;

/// Adds the operation recorded in `run_dir` to `answer` when its process is `alive`
/// ([`Process::is_alive`] on a node), and
/// turns a failed verdict into `in-progress` while the operation has etcd down on
/// purpose.
pub fn annotate(answer: &mut Answer, run_dir: &Path, alive: &dyn Fn(&Process) -> bool) {
    let Some(op) = read_operation(run_dir).filter(|o| alive(&o.process())) else {
        return;
    };
    let on_purpose = op.etcd_down_expected
        && answer.verdict == Verdict::Failed
        && answer.phase == Some(Phase::Running)
        && answer
            .reason
            .as_ref()
            .is_some_and(|r| r.code == ReasonCode::EtcdUnhealthy);
    if on_purpose {
        let seen = answer.reason.take().map(|r| r.message).unwrap_or_default();
        answer.verdict = Verdict::InProgress;
        answer.exit_code = answer.verdict.exit_code();
        answer.progress = Some(format!(
            "etcd-setup {} (pid {}) has etcd down on purpose: {}; {seen}",
            op.command, op.pid, op.step
        ));
    }
    answer.operation = Some(op);
}

/// Reads an upgrade record that is not final as `interrupted` once the process that
/// wrote it is not `alive` ([`Process::is_alive`] on a node): a killed upgrade would
/// otherwise say "upgrading a -> b: installing" for good. A record naming no process
/// (written by an agent before records carried one) cannot be told alive either.
pub fn annotate_upgrade(answer: &mut Answer, alive: &dyn Fn(&Process) -> bool) {
    let Some(u) = answer.upgrade.as_mut() else {
        return;
    };
    if u.phase.ended() || u.process.as_ref().is_some_and(alive) {
        return;
    }
    let who = u
        .process
        .map_or_else(|| "its process".to_string(), |p| format!("pid {}", p.pid));
    u.progress = format!(
        "etcd-setup upgrade ({who}) is gone; it stopped while {}: {}",
        u.phase, u.progress
    );
    u.phase = crate::shared::report::UpgradePhase::Interrupted;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::report::{Command, OperationGuard, Reason, UpgradePhase};

    /// A running node whose etcd the live view found down.
    fn etcd_down() -> Answer {
        let live = crate::status::live::FileLive("/nonexistent".into());
        let loaded = crate::shared::report::Loaded::default();
        let mut a = crate::status::evaluate(&loaded, Path::new("/run/x"), &live, &|_| false);
        a.phase = Some(Phase::Running);
        a.verdict = Verdict::Failed;
        a.exit_code = a.verdict.exit_code();
        a.reason = Some(Reason {
            code: ReasonCode::EtcdUnhealthy,
            message: "etcd.service is deactivating".into(),
        });
        a
    }

    #[test]
    fn a_restart_on_purpose_is_in_progress_and_nothing_else_is() {
        let dir = tempfile::tempdir().unwrap();
        let mut op = OperationGuard::begin(dir.path(), Command::Upgrade, "waiting for the lock");
        let alive = |_: &Process| true;

        // Recorded, but etcd is not down on purpose: the failure stands.
        let mut a = etcd_down();
        annotate(&mut a, dir.path(), &alive);
        assert_eq!((a.verdict, a.exit_code), (Verdict::Failed, 1));
        assert_eq!(a.operation.as_ref().unwrap().step, "waiting for the lock");

        op.step("restarting etcd 3.5.16", true);
        let mut a = etcd_down();
        annotate(&mut a, dir.path(), &alive);
        assert_eq!(
            (a.verdict, a.exit_code, a.reason.as_ref()),
            (Verdict::InProgress, 3, None)
        );
        let p = a.progress.unwrap();
        assert!(
            p.starts_with("etcd-setup upgrade (pid ")
                && p.contains("restarting etcd 3.5.16; etcd.service is deactivating"),
            "{p}"
        );

        // Another cause (NOSPACE) is not excused by a restart.
        let mut a = etcd_down();
        a.reason.as_mut().unwrap().code = ReasonCode::EtcdNospace;
        annotate(&mut a, dir.path(), &alive);
        assert_eq!(a.verdict, Verdict::Failed);

        // A record whose process is gone counts for nothing.
        let mut a = etcd_down();
        annotate(&mut a, dir.path(), &|_| false);
        assert_eq!((a.verdict, a.operation), (Verdict::Failed, None));

        // What a node asks: the pid and the start time. Ours, recorded by the guard, lives.
        let mut a = etcd_down();
        annotate(&mut a, dir.path(), &Process::is_alive);
        assert_eq!(a.verdict, Verdict::InProgress);

        drop(op);
        let mut a = etcd_down();
        annotate(&mut a, dir.path(), &alive);
        assert_eq!((a.verdict, a.operation), (Verdict::Failed, None));
    }

    #[test]
    fn an_upgrade_record_of_a_gone_process_reads_interrupted() {
        let live = crate::status::live::FileLive("/nonexistent".into());
        let loaded = crate::shared::report::Loaded::default();
        let mut a = crate::status::evaluate(&loaded, Path::new("/run/x"), &live, &|_| false);
        let me = Process::current();
        let record = |process| crate::shared::report::UpgradeRecord {
            phase: UpgradePhase::Installing,
            from: "3.5.1".into(),
            to: "3.5.16".into(),
            progress: "installing etcd 3.5.16 beside 3.5.1".into(),
            members: vec![],
            cluster_version: None,
            updated_at: "2026-05-28T20:26:49Z".into(),
            process,
        };
        a.upgrade = Some(record(Some(me)));
        annotate_upgrade(&mut a, &Process::is_alive);
        assert_eq!(a.upgrade.as_ref().unwrap().phase, UpgradePhase::Installing);

        let reused = Process {
            start_time: me.start_time.map(|t| t + 1),
            ..me
        };
        for gone in [Some(reused), None] {
            a.upgrade = Some(record(gone));
            annotate_upgrade(&mut a, &Process::is_alive);
            let u = a.upgrade.as_ref().unwrap();
            assert_eq!(u.phase, UpgradePhase::Interrupted);
            assert!(
                u.progress.ends_with(
                    "is gone; it stopped while installing: installing etcd 3.5.16 beside 3.5.1"
                ),
                "{}",
                u.progress
            );
        }
        // A final record stays as it is.
        a.upgrade = Some(crate::shared::report::UpgradeRecord {
            phase: UpgradePhase::Done,
            ..record(None)
        });
        annotate_upgrade(&mut a, &Process::is_alive);
        assert_eq!(a.upgrade.as_ref().unwrap().phase, UpgradePhase::Done);
    }
}
