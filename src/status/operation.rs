//! The day-2 operation in progress, in an answer: shown while its process lives (SPEC:
//! "the day-2 operation in progress"). A failure the operation causes on purpose — etcd
//! restarted by `upgrade`, stopped by `restore` — is `in-progress`, not `failed`: the
//! platform should not act on a restart that was asked for.

use super::protocol::{Answer, Verdict};
use crate::reason::ReasonCode;
use crate::shared::report::{read_operation, Phase};
use std::path::Path;

/// Adds the operation recorded in `run_dir` to `answer` when its pid is `alive`, and
/// turns a failed verdict into `in-progress` while the operation has etcd down on
/// purpose.
pub fn annotate(answer: &mut Answer, run_dir: &Path, alive: &dyn Fn(u32) -> bool) {
    let Some(op) = read_operation(run_dir).filter(|o| alive(o.pid)) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::report::{OperationGuard, Reason};

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
        let mut op = OperationGuard::begin(dir.path(), "upgrade", "waiting for the lock");
        let alive = |_: u32| true;

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

        drop(op);
        let mut a = etcd_down();
        annotate(&mut a, dir.path(), &alive);
        assert_eq!((a.verdict, a.operation), (Verdict::Failed, None));
    }
}
