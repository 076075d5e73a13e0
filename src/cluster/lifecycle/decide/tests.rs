//! The decision table, row by row.
use super::*;
use crate::cluster::etcd::{ErrorKind, EtcdError, Header, MemberList};
use crate::cluster::lifecycle::survey::{MemberHealth, Survey};

const TOKEN: &str = "tok";

/// What the data dir holds: etcd's data of a revision not read, or nothing.
fn data(has_data: bool) -> Data {
    if has_data {
        Data::Held(None)
    } else {
        Data::Empty
    }
}

fn node() -> Node {
    Node {
        name: "etcd-3".into(),
        peer_urls: vec!["http://10.0.0.3:2380".into()],
        initial_cluster: (1..=3)
            .map(|i| (format!("etcd-{i}"), format!("http://10.0.0.{i}:2380")))
            .collect(),
        token: TOKEN.into(),
        client_port: 2379,
        client_tls: None,
        data_dir: "/var/lib/etcd".into(),
        etcdctl: "/opt/bin/etcdctl".into(),
    }
}

fn member(id: u64, name: &str, ip: u8, learner: bool) -> Member {
    Member {
        id: Id(id),
        name: name.into(),
        peer_urls: vec![format!("http://10.0.0.{ip}:2380")],
        client_urls: if name.is_empty() {
            vec![]
        } else {
            vec![format!("http://10.0.0.{ip}:2379")]
        },
        is_learner: learner,
    }
}

fn list(cluster: Id, members: Vec<Member>) -> MemberList {
    MemberList {
        header: Header {
            cluster_id: cluster,
            member_id: members[0].id,
            ..Header::default()
        },
        members,
    }
}

/// Peers 1 and 2 answer `members`; every member in `healthy` is healthy, the rest not.
fn survey(cluster: Id, members: Vec<Member>, healthy: &[u64]) -> Survey {
    let l = list(cluster, members.clone());
    Survey {
        peers: vec![
            ("http://10.0.0.1:2379".into(), Ok(l.clone())),
            ("http://10.0.0.2:2379".into(), Ok(l)),
        ],
        health: members
            .iter()
            .map(|m| {
                let h = if healthy.contains(&m.id.0) {
                    MemberHealth::Healthy
                } else {
                    MemberHealth::Unhealthy("context deadline exceeded".into())
                };
                (m.id, h)
            })
            .collect(),
        statuses: vec![],
        answers: vec![],
    }
}

fn ours() -> Id {
    node().expected_cluster_id()
}

fn three(third: Member) -> Vec<Member> {
    vec![
        member(1, "etcd-1", 1, false),
        member(2, "etcd-2", 2, false),
        third,
    ]
}

fn unreachable(url: &str) -> (String, Result<MemberList, EtcdError>) {
    (
        url.into(),
        Err(EtcdError::new(
            ErrorKind::Unreachable,
            "member list",
            &[url.into()],
            "context deadline exceeded",
        )),
    )
}

#[test]
fn no_peer_answering_starts_as_configured() {
    let s = Survey {
        peers: vec![
            unreachable("http://10.0.0.1:2379"),
            unreachable("http://10.0.0.2:2379"),
        ],
        health: vec![],
        statuses: vec![],
        answers: vec![],
    };
    for has in [false, true] {
        match decide(&node(), data(has), &s) {
            Decision::StartAsConfigured { why } => assert!(why.contains("10.0.0.1:2379"), "{why}"),
            d => panic!("{d:?}"),
        }
    }
}

#[test]
fn an_empty_node_whose_old_self_is_a_dead_member_removes_it_and_joins_through_the_healthy_voters() {
    let s = survey(ours(), three(member(3, "etcd-3", 3, false)), &[1, 2]);
    match decide(&node(), data(false), &s) {
        Decision::Join {
            remove,
            move_aside,
            via,
            cluster_id,
        } => {
            assert_eq!(remove.iter().map(|m| m.id).collect::<Vec<_>>(), [Id(3)]);
            assert!(!move_aside);
            assert_eq!(via, ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]);
            assert_eq!(cluster_id, ours());
        }
        d => panic!("{d:?}"),
    }
}

/// The platform attaches the ISOs one node after another: two members formed the cluster
/// while the third still waited. That third one is a member as bootstrapped, never
/// started: it starts as configured, nothing is removed or added.
#[test]
fn a_late_bootstrap_member_never_started_starts_as_configured() {
    let n = node();
    let bootstrap = crate::cluster::etcd::member_id(&n.peer_urls, TOKEN);
    let unstarted = Member {
        id: bootstrap,
        ..member(0, "", 3, false)
    };
    let s = survey(ours(), three(unstarted.clone()), &[1, 2]);
    assert!(
        matches!(
            decide(&n, data(false), &s),
            Decision::StartAsConfigured { .. }
        ),
        "{:?}",
        decide(&n, data(false), &s)
    );
    // Not started but with another ID (added by a later `member add`): not our bootstrap
    // self, so it is removed and this node joins.
    let added = Member {
        id: Id(bootstrap.0 ^ 1),
        ..unstarted
    };
    let s = survey(ours(), three(added), &[1, 2]);
    assert!(matches!(decide(&n, data(false), &s), Decision::Join { .. }));
}

#[test]
fn an_empty_node_not_in_the_cluster_joins_without_removing_anyone() {
    let s = survey(
        ours(),
        vec![member(1, "etcd-1", 1, false), member(2, "etcd-2", 2, false)],
        &[1, 2],
    );
    assert!(
        matches!(decide(&node(), data(false), &s), Decision::Join { remove, .. } if remove.is_empty())
    );
}

#[test]
fn a_node_with_data_that_is_a_member_starts_as_configured() {
    let s = survey(ours(), three(member(3, "etcd-3", 3, false)), &[1, 2]);
    assert!(matches!(
        decide(&node(), data(true), &s),
        Decision::StartAsConfigured { .. }
    ));
}

#[test]
fn a_node_with_data_whose_member_was_removed_moves_it_aside_and_joins() {
    let s = survey(
        ours(),
        vec![member(1, "etcd-1", 1, false), member(2, "etcd-2", 2, false)],
        &[1, 2],
    );
    assert!(matches!(
        decide(&node(), data(true), &s),
        Decision::Join {
            move_aside: true,
            ..
        }
    ));
}

/// Issue 38, item 1: a removed member's data are never moved aside to join a cluster
/// that went back to an older revision (a restore from an older backup while this node
/// was off); a cluster that went on past them is joined as before.
#[test]
fn data_newer_than_the_cluster_are_not_moved_aside_to_join_it() {
    use crate::cluster::lifecycle::survey::Answer;
    let mut s = survey(
        ours(),
        vec![member(1, "etcd-1", 1, false), member(2, "etcd-2", 2, false)],
        &[1, 2],
    );
    // Nobody gave a revision: no move aside on a guess.
    match decide(&node(), Data::Held(Some(120)), &s) {
        Decision::Wait { why } => assert!(why.contains("revision 120"), "{why}"),
        d => panic!("{d:?}"),
    }
    let status = |id: u64, revision: i64| crate::cluster::etcd::EndpointStatus {
        endpoint: format!("http://10.0.0.{id}:2379"),
        cluster_id: ours(),
        member_id: Id(id),
        revision,
        version: "3.5.16".into(),
        db_size: 20480,
        db_size_in_use: Some(16384),
        leader: Id(1),
        raft_index: 7,
        raft_term: 2,
        raft_applied_index: Some(7),
        is_learner: false,
        errors: vec![],
    };
    s.answers = [(1, 92), (2, 90)]
        .map(|(id, rev)| {
            (
                Id(id),
                Answer {
                    health: None,
                    status: Ok(vec![status(id, rev)]),
                },
            )
        })
        .to_vec();
    match decide(&node(), Data::Held(Some(120)), &s) {
        Decision::Refuse { code, why } => {
            assert_eq!(code, ReasonCode::JoinBlocked);
            assert!(
                why.contains("/var/lib/etcd holds revision 120, newer than cluster")
                    && why.contains("'s 92: the cluster went back"),
                "{why}"
            );
        }
        d => panic!("{d:?}"),
    }
    for ours_rev in [92, 50] {
        assert!(
            matches!(
                decide(&node(), Data::Held(Some(ours_rev)), &s),
                Decision::Join {
                    move_aside: true,
                    ..
                }
            ),
            "{ours_rev}"
        );
    }
}

#[test]
fn another_cluster_id_is_refused_naming_both_ids() {
    let other = Id(0x1234);
    let s = survey(other, three(member(3, "etcd-3", 3, false)), &[1, 2]);
    match decide(&node(), data(false), &s) {
        Decision::Refuse { code, why } => {
            assert_eq!(code, ReasonCode::ClusterMismatch);
            assert!(
                why.contains("1234") && why.contains(&ours().to_string()),
                "{why}"
            );
            assert!(why.contains("http://10.0.0.1:2379"), "{why}");
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn peers_that_disagree_on_the_cluster_are_refused() {
    let mut s = survey(ours(), three(member(3, "etcd-3", 3, false)), &[1, 2]);
    s.peers[1].1 = Ok(list(Id(99), vec![member(2, "etcd-2", 2, false)]));
    assert!(matches!(
        decide(&node(), data(false), &s),
        Decision::Refuse {
            code: ReasonCode::ClusterMismatch,
            ..
        }
    ));
}

#[test]
fn a_healthy_member_at_this_nodes_peer_url_is_refused_not_removed() {
    let s = survey(ours(), three(member(3, "etcd-3", 3, false)), &[1, 2, 3]);
    assert!(matches!(
        decide(&node(), data(false), &s),
        Decision::Refuse {
            code: ReasonCode::ClusterMismatch,
            ..
        }
    ));
}

#[test]
fn a_never_started_learner_at_this_nodes_peer_url_is_an_earlier_attempt_and_removed() {
    // An earlier join added the learner and died before etcd started: etcd lists it with
    // no name and no client URL. It is this node's, not "another learner joining".
    let s = survey(ours(), three(member(7, "", 3, true)), &[1, 2]);
    match decide(&node(), data(false), &s) {
        Decision::Join { remove, .. } => assert_eq!(remove[0].id, Id(7)),
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_started_member_with_this_nodes_name_elsewhere_makes_it_wait() {
    let s = survey(ours(), three(member(3, "etcd-3", 9, false)), &[1, 2]);
    match decide(&node(), data(false), &s) {
        Decision::Wait { why } => assert!(why.contains("etcdctl member remove 3"), "{why}"),
        d => panic!("{d:?}"),
    }
}

#[test]
fn another_learner_makes_it_wait() {
    let mut members = three(member(3, "etcd-3", 3, false));
    members.push(member(4, "etcd-4", 4, true));
    let s = survey(ours(), members, &[1, 2, 4]);
    match decide(&node(), data(false), &s) {
        Decision::Wait { why } => assert!(why.contains("learner 4"), "{why}"),
        d => panic!("{d:?}"),
    }
}

#[test]
fn without_a_quorum_of_healthy_voters_it_waits_naming_the_unhealthy() {
    // Three voters: this node's stale self and one more dead: one of two left is healthy.
    let s = survey(ours(), three(member(3, "etcd-3", 3, false)), &[1]);
    match decide(&node(), data(false), &s) {
        Decision::Wait { why } => {
            assert!(
                why.starts_with("1 of 2 voting members are healthy, 2 are needed"),
                "{why}"
            );
            assert!(
                why.contains("2 (etcd-2): context deadline exceeded"),
                "{why}"
            );
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn five_members_with_two_replaced_at_once_can_both_join() {
    // Quorum of the voters left, not all of them: no deadlock between the two new nodes.
    let mut five: Vec<Member> = (1..=5)
        .map(|i| member(i, &format!("etcd-{i}"), i as u8, false))
        .collect();
    five[3].name = "etcd-4".into();
    let mut n = node();
    n.initial_cluster = (1..=5)
        .map(|i| (format!("etcd-{i}"), format!("http://10.0.0.{i}:2380")))
        .collect();
    let s = survey(n.expected_cluster_id(), five, &[1, 2, 5]);
    match decide(&n, data(false), &s) {
        Decision::Join { remove, via, .. } => {
            assert_eq!(remove[0].id, Id(3));
            assert_eq!(via.len(), 3);
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn quorum_of_voter_counts() {
    assert_eq!([1, 2, 3, 4, 5].map(quorum), [1, 2, 2, 3, 3]);
}

#[test]
fn a_late_first_boot_whose_initial_member_never_started_bootstraps_as_configured() {
    // The other two formed a quorum; etcd lists this node's initial member, unnamed.
    let n = node();
    let id = crate::cluster::etcd::member_id(&n.peer_urls, TOKEN);
    let s = survey(ours(), three(member(id.0, "", 3, false)), &[1, 2]);
    match decide(&n, data(false), &s) {
        Decision::StartAsConfigured { why } => assert!(why.contains("not started yet"), "{why}"),
        d => panic!("{d:?}"),
    }
    // The same unstarted voter with an ID our configuration does not give: not ours to
    // bootstrap, so it is replaced.
    let s = survey(ours(), three(member(12345, "", 3, false)), &[1, 2]);
    assert!(
        matches!(decide(&n, data(false), &s), Decision::Join { remove, .. } if remove[0].id == Id(12345))
    );
}

#[test]
fn a_cluster_without_quorum_that_still_answers_status_makes_it_wait_not_bootstrap() {
    let status = |cluster: Id| crate::cluster::etcd::EndpointStatus {
        endpoint: "http://10.0.0.1:2379".into(),
        cluster_id: cluster,
        member_id: Id(1),
        revision: 1,
        version: "3.5.16".into(),
        db_size: 20480,
        db_size_in_use: Some(16384),
        leader: Id(0),
        raft_index: 7,
        raft_term: 2,
        raft_applied_index: Some(7),
        is_learner: false,
        errors: vec!["etcdserver: no leader".into()],
    };
    let mut s = Survey {
        peers: vec![
            unreachable("http://10.0.0.1:2379"),
            unreachable("http://10.0.0.2:2379"),
        ],
        health: vec![],
        statuses: vec![status(ours())],
        answers: vec![],
    };
    match decide(&node(), data(false), &s) {
        Decision::Wait { why } => assert!(why.contains("etcdserver: no leader"), "{why}"),
        d => panic!("{d:?}"),
    }
    s.statuses = vec![status(Id(77))];
    assert!(matches!(
        decide(&node(), data(false), &s),
        Decision::Refuse {
            code: ReasonCode::ClusterMismatch,
            ..
        }
    ));
}
