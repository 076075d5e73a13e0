//! Joining an existing cluster: decide (bounded wait), act before etcd starts (move aside,
//! remove the stale member, add this node as a learner), and promote after it started.

use super::aside;
use super::decide::{self, Decision};
use super::node::Node;
use super::survey;
use crate::cluster::etcd::{Client, ErrorKind, EtcdError, Id, MemberList};
use crate::reason::{Failure, ReasonCode};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// How often a waiting decision asks the cluster again, and a promotion retries. Neither
/// condition can be awaited: etcd does not push membership or learner progress.
pub const POLL: Duration = Duration::from_millis(500);
/// How long a membership change is retried while etcd refuses it in passing or its answer
/// is lost: etcd refuses while its leader has not been connected to a quorum for 5 s
/// (after a leader change or a member start), and a loaded member may commit the change
/// after etcdctl's command timeout.
pub const RECONFIG_RETRY: Duration = Duration::from_secs(30);

/// How the join is going, for status and the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The decision waits: why.
    Waiting(String),
    /// The stale member was removed.
    RemovedStale(Id),
    /// The data dir was moved aside to this path.
    MovedAside(PathBuf),
    /// This node was added as a learner.
    AddedLearner(Id),
    /// The learner catches up: its raft index and the leader's.
    CatchingUp {
        /// The learner's raft index (`None` while it does not answer).
        learner: Option<u64>,
        /// The leader's raft index.
        leader: Option<u64>,
    },
    /// Promoted to voting member.
    Promoted(Id),
}

impl std::fmt::Display for Progress {
    /// The line for status and the timeline.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::Waiting(why) => write!(f, "waiting to join the existing cluster: {why}"),
            Progress::RemovedStale(id) => write!(f, "removed this node's stale member {id}"),
            Progress::MovedAside(p) => {
                write!(
                    f,
                    "moved the removed member's data dir aside to {}",
                    p.display()
                )
            }
            Progress::AddedLearner(id) => {
                write!(f, "joining the existing cluster as a learner (member {id})")
            }
            Progress::CatchingUp { learner, leader } => {
                let show = |i: &Option<u64>| i.map_or("?".to_string(), |i| i.to_string());
                write!(
                    f,
                    "learner catching up: raft index {} of the leader's {}",
                    show(learner),
                    show(leader)
                )
            }
            Progress::Promoted(id) => write!(f, "promoted to voting member (member {id})"),
        }
    }
}

/// What etcd must start with after [`prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// This node's new member ID (a learner until promoted).
    pub member_id: Id,
    /// `--initial-cluster` as the cluster returned it.
    pub initial_cluster: String,
    /// `--initial-cluster-state`: always `existing`.
    pub state: crate::shared::config::ClusterState,
    /// Client URLs of the voting members the promotion goes through.
    pub via: Vec<String>,
    /// Where the old data dir went, when it was moved aside.
    pub moved_aside: Option<PathBuf>,
}

/// Surveys the cluster and decides, asking again every [`POLL`] while the decision is to
/// wait, for at most `wait` (plus the survey under way, at most about 10 s: a member list
/// and a status call, each bounded); a wait that does not end is `join-blocked`.
pub fn decide(
    node: &Node,
    wait: Duration,
    progress: &mut dyn FnMut(Progress),
) -> Result<Decision, Failure> {
    let t = Instant::now();
    loop {
        let s = survey::survey(node, node.peer_client_urls(), &[]);
        match decide::decide(node, node.data(), &s) {
            Decision::Wait { why } => {
                if t.elapsed() >= wait {
                    return Err(Failure::new(
                        ReasonCode::JoinBlocked,
                        format!(
                            "this node cannot join its cluster after {} s: {why}",
                            wait.as_secs()
                        ),
                    ));
                }
                progress(Progress::Waiting(why));
                std::thread::sleep(POLL);
            }
            d => return Ok(d),
        }
    }
}

fn join_failed(what: &str, e: EtcdError) -> Failure {
    Failure::new(ReasonCode::JoinFailed, format!("{what}: {e}")).with_source(e)
}

/// Whether a failed membership change may be tried again: etcd refused it in passing
/// (not connected to a quorum long enough), or its answer did not come in time. A change
/// whose answer was lost may have been made: the retry then meets etcd's own "peer URL
/// exists" (an add) or "member not found" (a remove), which the callers take for done.
pub(super) fn passing(e: &EtcdError) -> bool {
    matches!(
        e.kind,
        ErrorKind::UnhealthyCluster | ErrorKind::Unreachable | ErrorKind::Timeout
    ) || e.line.contains("request timed out")
}

/// Runs `f` until it succeeds, or fails otherwise than [`passing`]ly, for at most
/// [`RECONFIG_RETRY`].
pub(super) fn retry_reconfig<T>(
    mut f: impl FnMut() -> Result<T, EtcdError>,
) -> Result<T, EtcdError> {
    let t = Instant::now();
    loop {
        match f() {
            Err(e) if passing(&e) && t.elapsed() < RECONFIG_RETRY => std::thread::sleep(POLL),
            r => return r,
        }
    }
}

/// Acts on a [`Decision::Join`] before etcd starts: moves the data dir aside when asked,
/// removes the stale members, adds this node as a learner; returns what etcd must start
/// with. Anything else than a join is `internal-error`; another node's learner added since
/// the decision is `join-blocked` (the caller decides again).
pub fn prepare(
    node: &Node,
    decision: &Decision,
    progress: &mut dyn FnMut(Progress),
) -> Result<Plan, Failure> {
    let Decision::Join {
        remove,
        move_aside,
        via,
        ..
    } = decision
    else {
        return Err(Failure::new(
            ReasonCode::InternalError,
            format!("join::prepare called with {decision:?}"),
        ));
    };
    let client = node.client(via.clone());
    let mut moved_aside = None;
    if *move_aside && node.data_dir.exists() {
        let to = aside::move_aside(&node.data_dir, "removed", SystemTime::now()).map_err(|e| {
            Failure::new(
                ReasonCode::JoinFailed,
                format!(
                    "cannot move the removed member's data dir {} aside",
                    node.data_dir.display()
                ),
            )
            .with_source(e)
        })?;
        progress(Progress::MovedAside(to.clone()));
        moved_aside = Some(to);
    }
    for m in remove {
        match retry_reconfig(|| client.member_remove(m.id)) {
            Ok(()) => progress(Progress::RemovedStale(m.id)),
            Err(e) if e.kind == ErrorKind::MemberNotFound => {}
            Err(e) => {
                return Err(join_failed(
                    &format!(
                        "cannot remove the stale member {} ({})",
                        m.id,
                        m.peer_urls.join(",")
                    ),
                    e,
                ))
            }
        }
    }
    let added = match retry_reconfig(|| client.member_add_learner(&node.name, &node.peer_urls)) {
        Ok(a) => (a.member.id, a.list()),
        Err(e) if e.kind == ErrorKind::PeerUrlExists => {
            // An earlier attempt added us and died before etcd started: take that member.
            let list = client
                .member_list()
                .map_err(|e| join_failed("cannot list the members", e))?;
            match node.peer_urls.iter().find_map(|u| list.by_peer_url(u)) {
                Some(m) if m.is_learner && !m.is_started() => (m.id, list.clone()),
                _ => {
                    return Err(join_failed(
                        &format!("cannot add {} as a learner", node.name),
                        e,
                    ))
                }
            }
        }
        // Another node's learner went in between this one's survey and its add.
        Err(e) if e.kind == ErrorKind::TooManyLearners => {
            return Err(Failure::new(
                ReasonCode::JoinBlocked,
                format!(
                    "{} cannot be added as a learner yet: another member joined as one first \
                     ({e})",
                    node.name
                ),
            )
            .with_source(e))
        }
        Err(e) => {
            return Err(join_failed(
                &format!("cannot add {} as a learner", node.name),
                e,
            ))
        }
    };
    let (member_id, list) = added;
    progress(Progress::AddedLearner(member_id));
    Ok(Plan {
        member_id,
        initial_cluster: list.initial_cluster_for(member_id, &node.name),
        state: crate::shared::config::ClusterState::Existing,
        via: via.clone(),
        moved_aside,
    })
}

/// After etcd started as the learner of `plan`: waits until it caught up and promotes it
/// through the voting members (never through the learner itself), retrying etcd's
/// "learner not in sync", for at most `timeout`. A learner that did not make it is
/// removed again and the failure is `learner-stalled`.
pub fn promote(
    node: &Node,
    plan: &Plan,
    timeout: Duration,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), Failure> {
    let voters = node.client(plan.via.clone());
    let learner = node.own_client_url().map(|u| node.client(vec![u]));
    let t = Instant::now();
    let mut last_error: Option<EtcdError> = None;
    while t.elapsed() < timeout {
        match voters.member_promote(plan.member_id) {
            Ok(()) => {
                progress(Progress::Promoted(plan.member_id));
                return Ok(());
            }
            Err(e)
                if e.kind == ErrorKind::LearnerNotInSync
                    || e.kind == ErrorKind::Unreachable
                    || e.kind == ErrorKind::UnhealthyCluster
                    || e.kind == ErrorKind::Timeout =>
            {
                progress(catching_up(&voters, learner.as_ref()));
                last_error = Some(e);
            }
            Err(e) if e.kind == ErrorKind::MemberNotFound => {
                return Err(join_failed(
                    &format!("learner {} was removed while it caught up", plan.member_id),
                    e,
                ));
            }
            Err(e) => {
                // Promoted already (a retry after a lost answer)? etcd then says so.
                if let Ok(list) = voters.member_list() {
                    if is_voter(&list, plan.member_id) {
                        progress(Progress::Promoted(plan.member_id));
                        return Ok(());
                    }
                }
                last_error = Some(e);
            }
        }
        std::thread::sleep(POLL);
    }
    let said = last_error.map(|e| e.to_string()).unwrap_or_default();
    let removed = match retry_reconfig(|| voters.member_remove(plan.member_id)) {
        Ok(()) => "it was removed again".to_string(),
        Err(e) => format!("removing it failed too ({e})"),
    };
    Err(Failure::new(
        ReasonCode::LearnerStalled,
        format!(
            "learner {} did not catch up with the leader within {} s; {removed}; last answer: {said}",
            plan.member_id,
            timeout.as_secs()
        ),
    ))
}

fn is_voter(list: &MemberList, id: Id) -> bool {
    list.get(id).is_some_and(|m| !m.is_learner)
}

fn catching_up(voters: &Client, learner: Option<&Client>) -> Progress {
    let leader = voters.endpoint_status().ok().and_then(|s| {
        s.iter()
            .find(|s| s.leader == s.member_id)
            .map(|s| s.raft_index)
    });
    let learner = learner
        .and_then(|c| c.endpoint_status().ok())
        .and_then(|s| s.first().map(|s| s.raft_index));
    Progress::CatchingUp { learner, leader }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reads_as_status_lines() {
        assert_eq!(
            Progress::AddedLearner(Id(0xab)).to_string(),
            "joining the existing cluster as a learner (member ab)"
        );
        assert_eq!(
            Progress::Promoted(Id(0xab)).to_string(),
            "promoted to voting member (member ab)"
        );
        assert_eq!(
            Progress::CatchingUp {
                learner: None,
                leader: Some(42)
            }
            .to_string(),
            "learner catching up: raft index ? of the leader's 42"
        );
    }

    #[test]
    fn a_membership_change_is_tried_again_only_when_refused_in_passing_or_unanswered() {
        let e = |kind, line: &str| EtcdError::new(kind, "member add", &[], line);
        // The answer was lost under load; the retry meets the add the first try made.
        let mut answers = vec![
            e(
                ErrorKind::PeerUrlExists,
                "etcdserver: Peer URLs already exists",
            ),
            e(ErrorKind::Other, "etcdserver: request timed out"),
            e(ErrorKind::Unreachable, "context deadline exceeded"),
        ];
        let r: Result<(), _> = retry_reconfig(|| Err(answers.pop().unwrap()));
        assert_eq!(r.unwrap_err().kind, ErrorKind::PeerUrlExists);
        assert!(answers.is_empty());
        // Anything else is the answer at once.
        for (kind, line) in [
            (
                ErrorKind::TooManyLearners,
                "etcdserver: too many learner members in cluster",
            ),
            (ErrorKind::Other, "etcdserver: permission denied"),
        ] {
            let mut calls = 0;
            let r: Result<(), _> = retry_reconfig(|| {
                calls += 1;
                Err(e(kind, line))
            });
            assert_eq!((r.unwrap_err().kind, calls), (kind, 1), "{line}");
        }
    }
}
