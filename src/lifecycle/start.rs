//! The join step of `etcd-setup run`, between installing etcd and starting it: ask the
//! cluster, and either start as configured or prepare a join (the learner added, the
//! membership etcd must start with). What status shows on the way is [`Progress`]'s text.

use super::decide::Decision;
use super::join::{self, Plan, Progress};
use super::node::Node;
use crate::reason::{Failure, ReasonCode};
use std::fmt;
use std::time::Duration;

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
    match join::decide(node, wait, progress)? {
        Decision::StartAsConfigured { .. } => Ok(None),
        Decision::Refuse { code, why } => Err(Failure::new(code, why)),
        d @ Decision::Join { .. } => join::prepare(node, &d, progress).map(Some),
        Decision::Wait { why } => Err(Failure::new(
            ReasonCode::InternalError,
            format!("the join decision returned a wait: {why}"),
        )),
    }
}

impl fmt::Display for Progress {
    /// The progress line status shows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Progress::Waiting(why) => write!(f, "waiting before joining the cluster: {why}"),
            Progress::RemovedStale(id) => {
                write!(f, "removed this node's stale member {id} from the cluster")
            }
            Progress::MovedAside(to) => write!(
                f,
                "this node's member was removed from the cluster; its data was moved aside to {}",
                to.display()
            ),
            Progress::AddedLearner(id) => {
                write!(f, "joining the existing cluster as a learner (member {id})")
            }
            Progress::CatchingUp { learner, leader } => {
                let show = |v: &Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
                write!(
                    f,
                    "joining the existing cluster as a learner: raft index {} of the leader's {}",
                    show(learner),
                    show(leader)
                )
            }
            Progress::Promoted(id) => write!(f, "promoted to voting member {id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::Id;

    #[test]
    fn progress_lines_say_what_status_shows() {
        assert_eq!(
            Progress::AddedLearner(Id(0xabc)).to_string(),
            format!(
                "joining the existing cluster as a learner (member {})",
                Id(0xabc)
            )
        );
        assert_eq!(
            Progress::CatchingUp {
                learner: None,
                leader: Some(42)
            }
            .to_string(),
            "joining the existing cluster as a learner: raft index ? of the leader's 42"
        );
        assert!(Progress::Promoted(Id(1))
            .to_string()
            .starts_with("promoted to voting member "));
    }
}
