//! The `[tls]` files in the answer: each certificate's facts, a warning within
//! `tls.warn_days`, and a running member failed with `cert-expired` or `cert-mismatch`.
//! The rules are [`crate::shared::config::certs`]'; this only puts their outcome in.

use super::protocol::{Answer, Verdict};
use crate::shared::config::certs::{first_problem, warnings, Inspector, Policy};
use std::time::{Duration, SystemTime};

/// How long after a problem the files are read again before it is told
/// ([`Inspector::inspect_settled`]): as long as the first pause of the health re-reads.
pub const RECHECK: Duration = Duration::from_millis(500);

/// Adds the certificates of `policy` as at `now` to `answer`. A member that runs on an
/// expired or mismatched file is `failed` with that reason (its handshakes fail or soon
/// will), when a second read [`RECHECK`] later says so too; any other verdict keeps its
/// own reason. Warnings never change the exit code.
pub fn annotate(answer: &mut Answer, inspector: &mut Inspector, policy: &Policy, now: SystemTime) {
    let views = inspector.inspect_settled(policy, now, || std::thread::sleep(RECHECK));
    answer.warnings.extend(warnings(&views));
    if answer.verdict == Verdict::Running {
        if let Some(problem) = first_problem(&views) {
            answer.verdict = Verdict::Failed;
            answer.exit_code = Verdict::Failed.exit_code();
            answer.reason = Some(problem.clone());
        }
    }
    answer.certificates = views;
}
