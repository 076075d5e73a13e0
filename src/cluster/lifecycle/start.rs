//! The join step of `etcd-setup run`, between installing etcd and starting it: ask the
//! cluster, and either start as configured or prepare a join (the learner added, the
//! membership etcd must start with). What status shows on the way is [`Progress`]'s
//! `Display`.

use super::decide::Decision;
use super::join::{self, Plan, Progress};
use super::node::Node;
use crate::reason::{Failure, ReasonCode};
use std::time::{Duration, Instant};

/// Decides how this node's etcd starts. `None`: as configured (a new cluster, or a member
/// that has its data); `Some(plan)`: join the existing cluster as the learner of `plan`,
/// to be promoted by [`join::promote`] once etcd is up. A cluster of another ID is refused
/// with its reason code before anything changed; a wait for the cluster to allow a join
/// is bounded by `wait` (`join-blocked`).
pub fn before_start(
    node: &Node,
    wait: Duration,
    progress: &mut dyn FnMut(Progress),
) -> Result<Option<Plan>, Failure> {
    let t = Instant::now();
    loop {
        let left = wait.saturating_sub(t.elapsed());
        return match join::decide(node, left, progress)? {
            Decision::StartAsConfigured { .. } => Ok(None),
            Decision::Refuse { code, why } => Err(Failure::new(code, why)),
            d @ Decision::Join { .. } => match join::prepare(node, &d, progress) {
                // Another node added its learner between this one's survey and its add
                // (etcd takes one at a time): asked again, the decision waits for that
                // learner's promotion.
                Err(f) if f.code == ReasonCode::JoinBlocked && t.elapsed() < wait => {
                    progress(Progress::Waiting(f.message));
                    std::thread::sleep(join::POLL);
                    continue;
                }
                r => r.map(Some),
            },
            Decision::Wait { why } => Err(Failure::new(
                ReasonCode::InternalError,
                format!("the join decision returned a wait: {why}"),
            )),
        };
    }
}
