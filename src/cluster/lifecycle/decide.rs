//! The join decision: a pure function over what the peers answered, before etcd starts.
//!
//! | what the peers answered | data dir | decision |
//! | --- | --- | --- |
//! | no peer answers (none up, or a new cluster still bootstrapping: etcd serves clients only once it has a quorum) | any | start as configured |
//! | peers answer `endpoint status` but give no member list (a cluster that lost its quorum) | any | wait (another ID: refuse) |
//! | peers report different cluster IDs | any | refuse: `cluster-mismatch` |
//! | the cluster ID is not the one `initial_cluster` + `cluster_token` give | any | refuse: `cluster-mismatch` |
//! | this node's peer URL is a member | has data | start as configured (it is a member) |
//! | this node's peer URL is an initial voter that never started, with the ID our peer URL and token give (first boot, this node late) | empty | start as configured: etcd bootstraps it with `new` |
//! | this node's peer URL is not a member | has data | the member was removed: move the data aside, then join |
//! | this node's peer URL is not a member | has data of a higher revision than the cluster's | refuse: `join-blocked` (the cluster went back to an older state while this node was away; its newer data are not moved aside to join it) |
//! | this node's peer URL is not a member | empty | join |
//! | this node's peer URL is a member that started once (the VM was recreated empty), or a learner of an earlier attempt | empty | remove that stale member, then join |
//! | another member has this node's name at another peer URL | any | wait: it may be a second node misnamed, never removed by us |
//! | the member with this node's peer URL answers health checks | empty | refuse: `cluster-mismatch` (another etcd has this address) |
//! | another learner is in the cluster (etcd allows one) | — | wait for it to be promoted or removed |
//! | fewer healthy voters than the quorum of the voters left after the removal | — | wait: no quorum to change membership |
//!
//! A member that never started has no name in etcd's list (the name is only published
//! when it starts), so "this node's old self" is recognised by its peer URL; a member
//! with this node's name at another address did start once and is left to the operator.
//!
//! "Wait" is decided again on the next survey, for a bounded time ([`super::join::decide`]);
//! when the time is up it becomes `join-blocked`. Waiting, not refusing at once: the usual
//! cause is a peer rebooting or another replaced node joining first, which passes on its
//! own; an operator gets the reason when it does not.
//!
//! **For restore** (issue 12): the ID check means a restored cluster must keep the ID the
//! configuration gives, or the other nodes refuse to join it. `etcdutl snapshot restore`
//! with the *full* `initial_cluster` and `cluster_token`, then one start with
//! `--force-new-cluster`, does: a one-member cluster with the configuration's ID (host test
//! `after_a_restore_that_keeps_the_cluster_id_the_other_nodes_join_through_the_decision`).
//! A restore with a one-member initial cluster (as Talos does) gets another ID.
//!
//! Why the quorum rule is enough: a learner does not vote, so adding it changes no quorum;
//! removing the stale member lowers the voter count to V, and the change is only made
//! when at least quorum(V) = V/2+1 voters answer; promoting then makes V+1 voters of
//! which at least quorum(V)+1 ≥ quorum(V+1) answer. Requiring *every* other member
//! healthy would deadlock two nodes of a five-member cluster replaced at once, each
//! waiting for the other.

use super::node::{Data, Node};
use super::survey::{MemberHealth, Survey};
use crate::cluster::etcd::{Id, Member};
use crate::reason::ReasonCode;

/// What to do before etcd starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start etcd with the configuration as it is (bootstrap `new`, or a member's data).
    StartAsConfigured {
        /// Why, for the timeline.
        why: String,
    },
    /// Join the existing cluster as a learner.
    Join {
        /// Stale members to remove first (this node's old self).
        remove: Vec<Member>,
        /// Move the data dir aside first (it belongs to a removed member).
        move_aside: bool,
        /// Client URLs of healthy voting members to make the changes through.
        via: Vec<String>,
        /// The cluster's ID.
        cluster_id: Id,
    },
    /// Not now; ask again.
    Wait {
        /// Why, for progress and, when the wait is over, the failure.
        why: String,
    },
    /// Never: touch nothing, etcd stays off.
    Refuse {
        /// The reason code.
        code: ReasonCode,
        /// The sentence for the operator.
        why: String,
    },
}

/// The quorum of `voters` voting members.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// Decides from `survey` for `node`, whose data dir holds `data`.
pub fn decide(node: &Node, data: Data, survey: &Survey) -> Decision {
    let has_data = data != Data::Empty;
    let answered: Vec<(&String, &crate::cluster::etcd::MemberList)> = survey
        .peers
        .iter()
        .filter_map(|(u, r)| r.as_ref().ok().map(|l| (u, l)))
        .collect();
    let Some(&(first_url, list)) = answered.first() else {
        if let Some(st) = survey.statuses.first() {
            // Members that serve clients but cannot list the members: a cluster exists
            // and has no leader. Starting `new` beside it would be wrong; so is a change.
            let expected = node.expected_cluster_id();
            if st.cluster_id != expected {
                return Decision::Refuse {
                    code: ReasonCode::ClusterMismatch,
                    why: format!(
                        "the cluster at {} has ID {}, but initial_cluster and cluster_token {:?} give {expected}: another cluster or another token; etcd stays off",
                        st.endpoint, st.cluster_id, node.token
                    ),
                };
            }
            let said: Vec<String> = survey
                .statuses
                .iter()
                .map(|s| {
                    format!(
                        "{}: {}",
                        s.endpoint,
                        if s.errors.is_empty() {
                            "no leader".into()
                        } else {
                            s.errors.join(", ")
                        }
                    )
                })
                .collect();
            return Decision::Wait {
                why: format!(
                    "cluster {} answers but has no quorum to list or change its members ({})",
                    st.cluster_id,
                    said.join("; ")
                ),
            };
        }
        let asked: Vec<&str> = survey.peers.iter().map(|(u, _)| u.as_str()).collect();
        return Decision::StartAsConfigured {
            why: if asked.is_empty() {
                "no other member in initial_cluster".into()
            } else {
                format!("no cluster answered at {}", asked.join(", "))
            },
        };
    };
    let id = list.header.cluster_id;
    if let Some((url, other)) = answered.iter().find(|(_, l)| l.header.cluster_id != id) {
        return Decision::Refuse {
            code: ReasonCode::ClusterMismatch,
            why: format!(
                "the peers belong to different clusters: {first_url} to {id}, {url} to {}; fix the peers before this node joins",
                other.header.cluster_id
            ),
        };
    }
    let expected = node.expected_cluster_id();
    if id != expected {
        return Decision::Refuse {
            code: ReasonCode::ClusterMismatch,
            why: format!(
                "the cluster at {first_url} has ID {id}, but initial_cluster and cluster_token {:?} give {expected}: another cluster or another token; etcd stays off",
                node.token
            ),
        };
    }

    let ours = node.peer_urls.iter().find_map(|u| list.by_peer_url(u));
    if has_data {
        if let Some(m) = ours {
            return Decision::StartAsConfigured {
                why: format!("this node is member {} of cluster {id}", m.id),
            };
        }
    }

    let mut remove: Vec<Member> = Vec::new();
    if let Some(m) = ours {
        // The first boot of a new cluster where this node comes late: the others formed a
        // quorum and list this node as the initial member that never started, with the
        // very ID our peer URLs and token give. etcd bootstraps it with `new` as it is.
        if !m.is_started()
            && !m.is_learner
            && m.id == crate::cluster::etcd::member_id(&node.peer_urls, &node.token)
        {
            return Decision::StartAsConfigured {
                why: format!(
                    "this node is initial member {} of cluster {id}, not started yet: it bootstraps with the others",
                    m.id
                ),
            };
        }
        // Our own peer URL: our old self, its data gone with the old disk.
        if survey.is_healthy(m.id) {
            return Decision::Refuse {
                code: ReasonCode::ClusterMismatch,
                why: format!(
                    "member {} ({}) with this node's peer URL {} answers on {}: another etcd uses this node's address",
                    m.id,
                    m.name,
                    m.peer_urls.join(","),
                    m.client_urls.join(",")
                ),
            };
        }
        remove.push(m.clone());
    }
    let named: Vec<&Member> = list
        .members
        .iter()
        .filter(|m| m.name == node.name && !remove.contains(m))
        .collect();
    for m in named {
        if m.is_started() {
            return Decision::Wait {
                why: format!(
                    "member {} is named {:?} like this node but has peer URL {}; remove it (etcdctl member remove {}) if it is this node's old self",
                    m.id,
                    node.name,
                    m.peer_urls.join(","),
                    m.id
                ),
            };
        }
        remove.push(m.clone());
    }
    if let Some(l) = list
        .members
        .iter()
        .find(|m| m.is_learner && !remove.contains(m))
    {
        return Decision::Wait {
            why: format!(
                "learner {} ({}) is joining; etcd allows one learner at a time",
                l.id,
                l.peer_urls.join(",")
            ),
        };
    }
    let voters: Vec<&Member> = list.voters().filter(|m| !remove.contains(m)).collect();
    let healthy: Vec<&Member> = voters
        .iter()
        .copied()
        .filter(|m| survey.is_healthy(m.id))
        .collect();
    if healthy.len() < quorum(voters.len()) {
        let sick: Vec<String> = voters
            .iter()
            .filter(|m| !survey.is_healthy(m.id))
            .map(|m| {
                let why = match survey.health_of(m.id) {
                    Some(MemberHealth::Unhealthy(w)) => w.as_str(),
                    _ => "not asked",
                };
                format!("{} ({}): {why}", m.id, m.name)
            })
            .collect();
        return Decision::Wait {
            why: format!(
                "{} of {} voting members are healthy, {} are needed to change membership; unhealthy: {}",
                healthy.len(),
                voters.len(),
                quorum(voters.len()),
                sick.join("; ")
            ),
        };
    }
    if let Data::Held(Some(ours)) = data {
        // A removed member's data are moved aside to join, unless they are newer than
        // the cluster's: then the cluster went back (a restore from an older backup while
        // this node was off), and joining would leave the newer data aside and serve the
        // older ones. Revisions of two histories compare only roughly: a cluster that went
        // on past this revision is joined as before.
        let theirs = survey
            .answers
            .iter()
            .filter_map(|(_, a)| a.status.as_ref().ok())
            .flatten()
            .map(|s| s.revision)
            .max();
        match theirs {
            None => {
                return Decision::Wait {
                    why: format!(
                        "this node's data dir holds revision {ours}; no member gave the \
                         cluster's revision to compare it with before moving it aside"
                    ),
                }
            }
            Some(theirs) if ours > theirs => {
                return Decision::Refuse {
                    code: ReasonCode::JoinBlocked,
                    why: format!(
                        "this node's data dir {} holds revision {ours}, newer than cluster \
                         {id}'s {theirs}: the cluster went back to an older state (a restore \
                         from an older backup?) while this node was away, and joining would \
                         move the newer data aside. etcd stays off; compare the two, then \
                         either bring these data back (etcd-setup snapshot here, restore on \
                         the cluster) or move the data dir aside yourself to join",
                        node.data_dir.display()
                    ),
                }
            }
            Some(_) => {}
        }
    }
    let via = healthy
        .iter()
        .flat_map(|m| m.client_urls.iter().cloned())
        .collect();
    Decision::Join {
        remove,
        move_aside: has_data,
        via,
        cluster_id: id,
    }
}

#[cfg(test)]
mod tests;
