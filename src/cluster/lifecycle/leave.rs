//! Leaving the cluster: this member is removed through another member, under a quorum
//! guard that only `force` passes.
//!
//! Refused (`leave-refused`):
//! - the last member: there is no other member to go through, and removing it ends the
//!   cluster (stop etcd instead); `force` does not pass this one;
//! - two voters to one, unless `force`: etcd's own guide calls removing a member from a
//!   two-member cluster unsafe (a failure during the change loses the quorum);
//! - fewer healthy voters left than the quorum of the new size, unless `force`;
//! - no healthy voting member other than this one to make the change through.
//!
//! A learner leaves freely (it does not vote). A node that is no longer a member is done
//! already ([`Outcome::NotAMember`]): leaving is idempotent.

use super::decide::quorum;
use super::node::Node;
use super::survey::{self, Survey};
use crate::cluster::etcd::{ErrorKind, Id, Member};
use crate::reason::{Failure, ReasonCode};

/// What [`plan`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Remove `member` through `via`.
    Remove {
        /// This node's member.
        member: Member,
        /// Client URLs of healthy voting members other than this one.
        via: Vec<String>,
        /// Voting members before the removal.
        voters_before: usize,
        /// Healthy voting members after it.
        healthy_after: usize,
        /// The quorum guard was passed by `force`.
        forced: bool,
    },
    /// This node is not a member (any more): nothing to do.
    NotAMember,
}

/// What [`execute`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The member was removed; the members left.
    Removed {
        /// Its ID.
        id: Id,
        /// The members left, as the cluster listed them after the change.
        remaining: Vec<Member>,
    },
    /// It was not a member.
    NotAMember,
}

fn refused(why: String) -> Failure {
    Failure::new(ReasonCode::LeaveRefused, why)
}

/// The pure check: may this node (peer URLs of `node`) leave the cluster `survey`
/// describes?
pub fn check(node: &Node, survey: &Survey, force: bool) -> Result<Plan, Failure> {
    let Some(list) = survey.list() else {
        let why: Vec<String> = survey
            .peers
            .iter()
            .map(|(u, r)| match r {
                Err(e) => format!("{u}: {}", e.line),
                Ok(_) => u.clone(),
            })
            .collect();
        return Err(Failure::new(
            ReasonCode::LeaveFailed,
            format!(
                "no member answered, so this member cannot be removed: {}",
                why.join("; ")
            ),
        ));
    };
    let Some(me) = node
        .peer_urls
        .iter()
        .find_map(|u| list.by_peer_url(u))
        .cloned()
    else {
        return Ok(Plan::NotAMember);
    };
    if list.members.len() == 1 {
        return Err(refused(format!(
            "member {} ({}) is the last member of its cluster; stop etcd instead of removing it",
            me.id, me.name
        )));
    }
    let others: Vec<&Member> = list.voters().filter(|m| m.id != me.id).collect();
    let healthy: Vec<&Member> = others
        .iter()
        .copied()
        .filter(|m| survey.is_healthy(m.id))
        .collect();
    if healthy.is_empty() {
        return Err(refused(format!(
            "no other voting member is healthy to remove member {} through",
            me.id
        )));
    }
    let voters_before = list.voters().count();
    let mut forced = false;
    if !me.is_learner {
        let after = voters_before - 1;
        if voters_before == 2 {
            if !force {
                return Err(refused(format!(
                    "removing member {} ({}) leaves one voting member of two, which etcd calls unsafe; use --force to remove it anyway",
                    me.id, me.name
                )));
            }
            forced = true;
        }
        if healthy.len() < quorum(after) {
            if !force {
                return Err(refused(format!(
                    "after removing member {} only {} of {} voting members are healthy, fewer than the quorum of {}; use --force to remove it anyway",
                    me.id,
                    healthy.len(),
                    after,
                    quorum(after)
                )));
            }
            forced = true;
        }
    }
    Ok(Plan::Remove {
        via: healthy
            .iter()
            .flat_map(|m| m.client_urls.iter().cloned())
            .collect(),
        member: me,
        voters_before,
        healthy_after: healthy.len(),
        forced,
    })
}

/// Surveys the cluster (every member of `initial_cluster`, this one included) and checks
/// whether this node may leave.
pub fn plan(node: &Node, force: bool) -> Result<Plan, Failure> {
    let mut urls = node.peer_client_urls();
    if let Some(own) = node.own_client_url() {
        urls.push(own);
    }
    let mut s = survey::survey(node, urls, &[]);
    // The member list may come from members that joined after initial_cluster was
    // written: ask the members the cluster lists as well.
    if let Some(list) = s.list() {
        let listed: Vec<String> = list
            .members
            .iter()
            .flat_map(|m| m.client_urls.clone())
            .collect();
        if listed.iter().any(|u| !s.peers.iter().any(|(p, _)| p == u)) {
            s = survey::survey(node, listed, &[]);
        }
    }
    check(node, &s, force)
}

/// Removes this node's member as `plan` says.
pub fn execute(node: &Node, plan: &Plan) -> Result<Outcome, Failure> {
    let Plan::Remove { member, via, .. } = plan else {
        return Ok(Outcome::NotAMember);
    };
    let client = node.client(via.clone());
    // A try whose answer was lost may have removed it: "not found" after one is ours.
    let mut tries = 0;
    match super::join::retry_reconfig(|| {
        tries += 1;
        client.member_remove(member.id)
    }) {
        Ok(()) => {}
        Err(e) if e.kind == ErrorKind::MemberNotFound && tries == 1 => {
            return Ok(Outcome::NotAMember)
        }
        Err(e) if e.kind == ErrorKind::MemberNotFound => {}
        Err(e) => {
            return Err(Failure::new(
                ReasonCode::LeaveFailed,
                format!("cannot remove member {} ({}): {e}", member.id, member.name),
            )
            .with_source(e))
        }
    }
    let remaining = client.member_list().map(|l| l.members).unwrap_or_default();
    Ok(Outcome::Removed {
        id: member.id,
        remaining,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::etcd::{Header, MemberList};
    use crate::cluster::lifecycle::survey::MemberHealth;

    fn node() -> Node {
        Node {
            name: "etcd-1".into(),
            peer_urls: vec!["http://10.0.0.1:2380".into()],
            initial_cluster: vec![],
            token: "tok".into(),
            client_port: 2379,
            client_tls: None,
            data_dir: "/var/lib/etcd".into(),
            etcdctl: "/opt/bin/etcdctl".into(),
        }
    }

    /// Members 1..=n (member 1 is this node), voters unless in `learners`, healthy when
    /// in `healthy`.
    fn survey(n: u64, learners: &[u64], healthy: &[u64]) -> Survey {
        let members: Vec<Member> = (1..=n)
            .map(|i| Member {
                id: Id(i),
                name: format!("etcd-{i}"),
                peer_urls: vec![format!("http://10.0.0.{i}:2380")],
                client_urls: vec![format!("http://10.0.0.{i}:2379")],
                is_learner: learners.contains(&i),
            })
            .collect();
        let health = members
            .iter()
            .map(|m| {
                let h = if healthy.contains(&m.id.0) {
                    MemberHealth::Healthy
                } else {
                    MemberHealth::Unhealthy("down".into())
                };
                (m.id, h)
            })
            .collect();
        Survey {
            peers: vec![(
                "http://10.0.0.2:2379".into(),
                Ok(MemberList {
                    header: Header::default(),
                    members,
                }),
            )],
            health,
            statuses: vec![],
            answers: vec![],
        }
    }

    fn refusal(r: Result<Plan, Failure>) -> String {
        match r {
            Err(f) => {
                assert_eq!(f.code, ReasonCode::LeaveRefused, "{f}");
                f.message
            }
            Ok(p) => panic!("not refused: {p:?}"),
        }
    }

    #[test]
    fn one_of_three_healthy_leaves_through_the_other_two() {
        match check(&node(), &survey(3, &[], &[1, 2, 3]), false).unwrap() {
            Plan::Remove {
                member,
                via,
                voters_before,
                healthy_after,
                forced,
            } => {
                assert_eq!(member.id, Id(1));
                assert_eq!(via, ["http://10.0.0.2:2379", "http://10.0.0.3:2379"]);
                assert_eq!((voters_before, healthy_after, forced), (3, 2, false));
            }
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn the_last_member_is_refused_even_with_force() {
        let why = refusal(check(&node(), &survey(1, &[], &[1]), true));
        assert!(why.contains("last member"), "{why}");
    }

    #[test]
    fn two_voters_to_one_is_refused_unless_forced() {
        let why = refusal(check(&node(), &survey(2, &[], &[1, 2]), false));
        assert!(why.contains("--force"), "{why}");
        assert!(matches!(
            check(&node(), &survey(2, &[], &[1, 2]), true).unwrap(),
            Plan::Remove { forced: true, .. }
        ));
    }

    #[test]
    fn leaving_fewer_healthy_voters_than_the_new_quorum_is_refused_unless_forced() {
        // Four voters, one other down: three left, two healthy, quorum two: fine.
        assert!(matches!(
            check(&node(), &survey(4, &[], &[1, 2, 3]), false),
            Ok(Plan::Remove { .. })
        ));
        // Three voters, one other down: two left, one healthy, quorum two: refused.
        let why = refusal(check(&node(), &survey(3, &[], &[1, 2]), false));
        assert!(why.contains("only 1 of 2"), "{why}");
        assert!(matches!(
            check(&node(), &survey(3, &[], &[1, 2]), true),
            Ok(Plan::Remove { forced: true, .. })
        ));
    }

    #[test]
    fn a_learner_leaves_without_a_quorum_question() {
        assert!(matches!(
            check(&node(), &survey(2, &[1], &[2]), false),
            Ok(Plan::Remove { forced: false, .. })
        ));
    }

    #[test]
    fn a_node_that_is_no_member_has_nothing_to_do() {
        let mut n = node();
        n.peer_urls = vec!["http://10.0.0.9:2380".into()];
        assert_eq!(
            check(&n, &survey(3, &[], &[1, 2, 3]), false).unwrap(),
            Plan::NotAMember
        );
    }

    #[test]
    fn without_another_healthy_voter_it_is_refused_even_with_force() {
        let why = refusal(check(&node(), &survey(3, &[], &[1]), true));
        assert!(why.contains("no other voting member is healthy"), "{why}");
    }
}
