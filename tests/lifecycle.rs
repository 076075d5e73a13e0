//! Joining and leaving (`etcd_setup::cluster::lifecycle`) against real three-member etcd clusters on
//! loopback: a wiped member rejoins as a learner and is promoted, a removed member's data
//! is moved aside before it joins again, another token is refused with the cluster
//! untouched, a learner that never catches up is removed again, and leave keeps quorum.
mod support;

use etcd_setup::cluster::lifecycle::join::{self, Progress};
use etcd_setup::cluster::lifecycle::{leave, Decision, Node};
use etcd_setup::reason::ReasonCode;
use std::time::{Duration, Instant};
use support::etcd::Cluster;

const WAIT: Duration = Duration::from_secs(30);
const PROMOTE: Duration = Duration::from_secs(60);

/// This node as member `i` of `c` sees itself.
fn node(c: &Cluster, i: usize) -> Node {
    Node {
        name: c.members[i].name.clone(),
        peer_urls: vec![c.peer_url(i)],
        initial_cluster: c.initial_cluster(),
        token: c.token.clone(),
        client_port: c.client_port,
        client_tls: c.tls.clone(),
        data_dir: c.members[i].data_dir.clone(),
        etcdctl: c.etcdctl(),
    }
}

fn log(steps: &mut Vec<String>, t: Instant) -> impl FnMut(Progress) + '_ {
    move |p| steps.push(format!("+{:.1} s {p}", t.elapsed().as_secs_f32()))
}

fn write_keys(c: &Cluster) {
    let client = c.client();
    for k in 0..20 {
        client
            .put(&format!("/keys/{k}"), &format!("value {k}"))
            .unwrap();
    }
}

/// Through member `i` alone, the keys written before are there.
fn assert_keys_through(c: &Cluster, i: usize) {
    let one = c.client().with_endpoints(vec![c.client_url(i)]);
    for k in 0..20 {
        assert_eq!(
            one.get(&format!("/keys/{k}")).unwrap().as_deref(),
            Some(format!("value {k}").as_bytes()),
            "key /keys/{k} through {}",
            c.client_url(i)
        );
    }
}

/// Three started voting members, every one healthy.
fn assert_three_healthy_voters(c: &Cluster) -> Vec<etcd_setup::cluster::etcd::Member> {
    let list = c.client().member_list().unwrap();
    assert_eq!(list.members.len(), 3, "{list:?}");
    assert!(
        list.members.iter().all(|m| m.is_started() && !m.is_learner),
        "{list:?}"
    );
    let health = c.client().endpoint_health().unwrap();
    assert!(health.iter().all(|h| h.healthy), "{health:?}");
    list.members
}

/// decide → prepare → start etcd with the plan → promote, for member `i`.
fn join_member(c: &mut Cluster, i: usize, expect_move_aside: bool) -> (join::Plan, Vec<String>) {
    let n = node(c, i);
    let t = Instant::now();
    let mut steps = Vec::new();
    let decision = join::decide(&n, WAIT, &mut log(&mut steps, t)).unwrap();
    let Decision::Join { move_aside, .. } = &decision else {
        panic!("decided {decision:?}")
    };
    assert_eq!(*move_aside, expect_move_aside);
    let plan = join::prepare(&n, &decision, &mut log(&mut steps, t)).unwrap();
    assert_eq!(plan.state.as_str(), "existing");
    // The promotion goes through voting members, never through the learner itself.
    assert!(
        !plan.via.is_empty() && !plan.via.contains(&c.client_url(i)),
        "{plan:?}"
    );
    let listed = c
        .client()
        .with_endpoints(vec![c.client_url(0)])
        .member_list()
        .unwrap();
    let learner = listed.get(plan.member_id).expect("the learner is listed");
    assert!(learner.is_learner && !learner.is_started());
    c.launch(i, &plan.initial_cluster, plan.state.as_str());
    c.await_ready(i);
    join::promote(&n, &plan, PROMOTE, &mut log(&mut steps, t)).unwrap();
    steps.push(format!("+{:.1} s done", t.elapsed().as_secs_f32()));
    (plan, steps)
}

fn wiped_member_rejoins(version: &str, tls: bool) {
    let mut c = if tls {
        Cluster::start_tls(version, 3, "tok-rejoin")
    } else {
        Cluster::start(version, 3, "tok-rejoin")
    };
    write_keys(&c);
    let old = c.client().member_list().unwrap();
    let old3 = old.by_peer_url(&c.peer_url(2)).unwrap().id;
    c.wipe(2);

    let (plan, steps) = join_member(&mut c, 2, false);
    println!(
        "etcd {version}: rejoin of a wiped member:\n  {}",
        steps.join("\n  ")
    );
    assert!(
        steps
            .iter()
            .any(|s| s.contains(&format!("stale member {old3}"))),
        "{steps:?}"
    );
    assert_ne!(plan.member_id, old3);
    let members = assert_three_healthy_voters(&c);
    assert!(members
        .iter()
        .any(|m| m.id == plan.member_id && m.name == "m3"));
    assert!(!members.iter().any(|m| m.id == old3));
    assert_keys_through(&c, 2);
}

#[test]
fn a_wiped_member_rejoins_as_a_learner_and_is_promoted_on_3_5_16() {
    wiped_member_rejoins("3.5.16", false);
}

#[test]
fn a_wiped_member_rejoins_over_client_tls_on_3_5_16() {
    wiped_member_rejoins("3.5.16", true);
}

#[test]
fn a_wiped_member_rejoins_as_a_learner_and_is_promoted_on_3_4_23() {
    wiped_member_rejoins("3.4.23", false);
}

#[test]
fn a_removed_members_data_is_moved_aside_and_it_joins_again() {
    let mut c = Cluster::start("3.5.16", 3, "tok-removed");
    write_keys(&c);
    let list = c.client().member_list().unwrap();
    let id3 = list.by_peer_url(&c.peer_url(2)).unwrap().id;
    // Removed behind its back, e.g. by an operator; etcd exits and says why.
    let via = c.client().with_endpoints(vec![c.client_url(0)]);
    let t = Instant::now();
    loop {
        match via.member_remove(id3) {
            Ok(()) => break,
            Err(e) if t.elapsed() < Duration::from_secs(15) => {
                assert_eq!(
                    e.kind,
                    etcd_setup::cluster::etcd::ErrorKind::UnhealthyCluster,
                    "{e}"
                );
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(c.members[2].await_exit(Duration::from_secs(30)));
    assert!(c.members[2]
        .log()
        .iter()
        .any(|l| etcd_setup::cluster::etcd::says_member_removed(l)));
    c.kill(2);
    let data = c.members[2].data_dir.clone();
    assert!(data.join("member").exists());

    let (plan, steps) = join_member(&mut c, 2, true);
    println!(
        "etcd 3.5.16: rejoin of a removed member:\n  {}",
        steps.join("\n  ")
    );
    let aside = plan.moved_aside.clone().unwrap();
    let name = aside.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("m3.removed-") && name.ends_with('Z'),
        "{name}"
    );
    assert!(aside.join("member/wal").is_dir(), "the old data is kept");
    assert_ne!(plan.member_id, id3);
    assert_three_healthy_voters(&c);
    assert_keys_through(&c, 2);
}

#[test]
fn a_node_configured_with_another_token_is_refused_and_the_cluster_untouched() {
    let mut c = Cluster::start("3.5.16", 3, "tok-right");
    let before = c.client().member_list().unwrap();
    c.wipe(2);
    let mut n = node(&c, 2);
    n.token = "tok-wrong".into();
    let decision = join::decide(&n, WAIT, &mut |_| {}).unwrap();
    match decision {
        Decision::Refuse { code, why } => {
            assert_eq!(code, ReasonCode::ClusterMismatch);
            assert!(why.contains(&before.header.cluster_id.to_string()), "{why}");
            println!("refused: {code}: {why}");
        }
        d => panic!("{d:?}"),
    }
    let after = c
        .client()
        .with_endpoints(vec![c.client_url(0)])
        .member_list()
        .unwrap();
    assert_eq!(after.members, before.members);
}

#[test]
fn a_learner_that_never_catches_up_is_removed_again_with_its_reason() {
    let mut c = Cluster::start("3.5.16", 3, "tok-stall");
    c.wipe(2);
    let n = node(&c, 2);
    let decision = join::decide(&n, WAIT, &mut |_| {}).unwrap();
    let plan = join::prepare(&n, &decision, &mut |_| {}).unwrap();
    // etcd is never started for it.
    let f = join::promote(&n, &plan, Duration::from_secs(3), &mut |_| {}).unwrap_err();
    assert_eq!(f.code, ReasonCode::LearnerStalled, "{f}");
    assert!(f.message.contains("removed again"), "{f}");
    let list = c
        .client()
        .with_endpoints(vec![c.client_url(0)])
        .member_list()
        .unwrap();
    assert!(list.get(plan.member_id).is_none(), "{list:?}");
    assert_eq!(list.members.len(), 2);
}

#[test]
fn leave_one_of_three_then_one_of_two_is_refused_without_force_on_3_5_16() {
    leave_keeps_quorum("3.5.16");
}

#[test]
fn leave_one_of_three_then_one_of_two_is_refused_without_force_on_3_4_23() {
    leave_keeps_quorum("3.4.23");
}

fn leave_keeps_quorum(version: &str) {
    let mut c = Cluster::start(version, 3, "tok-leave");
    write_keys(&c);
    let first = node(&c, 0);
    let plan = leave::plan(&first, false).unwrap();
    let outcome = leave::execute(&first, &plan).unwrap();
    let leave::Outcome::Removed { id, remaining } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(remaining.len(), 2);
    assert!(!remaining.iter().any(|m| m.id == id));
    assert!(
        c.members[0].await_exit(Duration::from_secs(30)),
        "the removed member kept running"
    );
    c.kill(0);
    let two = c
        .client()
        .with_endpoints(vec![c.client_url(1), c.client_url(2)]);
    let health = two.endpoint_health().unwrap();
    assert_eq!(health.len(), 2);
    assert!(health.iter().all(|h| h.healthy), "{health:?}");
    // Leaving again is done already.
    assert_eq!(leave::plan(&first, false).unwrap(), leave::Plan::NotAMember);

    let second = node(&c, 1);
    let f = leave::plan(&second, false).unwrap_err();
    assert_eq!(f.code, ReasonCode::LeaveRefused, "{f}");
    assert!(f.message.contains("--force"), "{f}");
    println!("refused: {f}");
    assert!(matches!(
        leave::plan(&second, true).unwrap(),
        leave::Plan::Remove { forced: true, .. }
    ));
    assert_eq!(
        two.member_list().unwrap().members.len(),
        2,
        "a refused leave touched nothing"
    );
}

#[test]
fn a_late_first_boot_of_a_new_cluster_bootstraps_as_configured_without_a_membership_change() {
    // Two of three started together and have a quorum; the third comes late, as with an
    // ISO attached later. It must start `new` as configured, not replace its own member.
    let mut c = Cluster::start_some("3.5.16", 3, 2, "tok-late");
    let before = c
        .client()
        .with_endpoints(vec![c.client_url(0)])
        .member_list()
        .unwrap();
    let unstarted = before.by_peer_url(&c.peer_url(2)).unwrap();
    assert!(!unstarted.is_started());
    let decision = join::decide(&node(&c, 2), WAIT, &mut |_| {}).unwrap();
    assert!(
        matches!(decision, Decision::StartAsConfigured { .. }),
        "{decision:?}"
    );
    let initial = c.initial_cluster_arg();
    c.launch(2, &initial, "new");
    c.await_ready(2);
    let members = assert_three_healthy_voters(&c);
    assert_eq!(
        members.iter().map(|m| m.id).collect::<Vec<_>>(),
        before.members.iter().map(|m| m.id).collect::<Vec<_>>()
    );
}

#[test]
fn nobody_answering_bootstraps_as_configured_within_the_bound() {
    // A new cluster's first node: its peers have not started.
    let c = Cluster::start_some("3.5.16", 3, 0, "tok-first");
    let (decision, took) =
        support::etcd::timed(|| join::decide(&node(&c, 0), WAIT, &mut |_| {}).unwrap());
    assert!(
        matches!(decision, Decision::StartAsConfigured { .. }),
        "{decision:?}"
    );
    assert!(took < Duration::from_secs(12), "took {took:?}");
}

#[test]
fn a_cluster_that_lost_its_quorum_makes_joining_wait_then_join_blocked_touching_nothing() {
    // Member 3 wiped and member 2 down: member 1 alone serves status but has no leader.
    // Bootstrapping `new` beside it would be wrong, changing membership impossible.
    let mut c = Cluster::start("3.5.16", 3, "tok-blocked");
    let before = c
        .client()
        .with_endpoints(vec![c.client_url(0)])
        .member_list()
        .unwrap();
    c.wipe(2);
    c.kill(1);
    let mut waits = 0;
    let (r, took) = support::etcd::timed(|| {
        join::decide(&node(&c, 2), Duration::from_secs(12), &mut |p| {
            if matches!(p, Progress::Waiting(_)) {
                waits += 1
            }
        })
    });
    let f = r.unwrap_err();
    assert_eq!(f.code, ReasonCode::JoinBlocked, "{f}");
    assert!(f.message.contains("has no quorum"), "{f}");
    assert!(f.message.contains("etcdserver: no leader"), "{f}");
    println!("after {took:?} and {waits} waits: {f}");
    assert!(waits >= 1);
    // Nothing was changed: member 2 comes back and the member list is as it was.
    let initial = c.initial_cluster_arg();
    c.launch(1, &initial, "new");
    c.await_ready(1);
    let after = c
        .client()
        .with_endpoints(vec![c.client_url(0)])
        .member_list()
        .unwrap();
    assert_eq!(after.members, before.members);
}

/// Member 1's data dir made from `snap` as a restore does (`etcdutl snapshot restore` with
/// the full initial cluster and token, which keep the cluster ID), then one start with
/// `--force-new-cluster`: a one-member cluster of the configuration's ID.
fn restore_first_forced(c: &mut Cluster, snap: &std::path::Path) {
    let out = std::process::Command::new(c.bin.join("etcdutl"))
        .arg("snapshot")
        .arg("restore")
        .arg(snap)
        .arg(format!("--name={}", c.members[0].name))
        .arg(format!("--data-dir={}", c.members[0].data_dir.display()))
        .arg(format!("--initial-cluster={}", c.initial_cluster_arg()))
        .arg(format!("--initial-cluster-token={}", c.token))
        .arg(format!("--initial-advertise-peer-urls={}", c.peer_url(0)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.extra = vec!["--force-new-cluster".into()];
    let initial = c.initial_cluster_arg();
    c.launch(0, &initial, "new");
    c.await_ready(0);
    c.extra.clear();
}

/// How a restore (issue 12) must make its one-member cluster so that the others can join
/// it: `etcdutl snapshot restore` with the *full* initial_cluster and token keeps the
/// cluster ID the configuration gives, and one start with `--force-new-cluster` makes it a
/// one-member cluster. The other two then join through the ordinary decision.
#[test]
fn after_a_restore_that_keeps_the_cluster_id_the_other_nodes_join_through_the_decision() {
    let mut c = Cluster::start("3.5.16", 3, "tok-restore");
    write_keys(&c);
    let snap = c.dir().join("snap.db");
    c.client()
        .snapshot_save(&c.client_url(0), &snap, Duration::from_secs(30))
        .unwrap();
    for i in 0..3 {
        c.wipe(i);
    }
    restore_first_forced(&mut c, &snap);
    let one = c.client().with_endpoints(vec![c.client_url(0)]);
    let list = one.member_list().unwrap();
    assert_eq!(list.members.len(), 1);
    assert_eq!(list.header.cluster_id, node(&c, 0).expected_cluster_id());

    for i in 1..3 {
        let (_, steps) = join_member(&mut c, i, false);
        println!(
            "after the restore, {} joined:\n  {}",
            c.members[i].name,
            steps.join("\n  ")
        );
    }
    assert_three_healthy_voters(&c);
    assert_keys_through(&c, 2);
}

/// Issue 38, item 1 (B1, the other order): the cluster went back to an older backup while
/// two members were off with newer data; their join decision refuses (`join-blocked`),
/// their data dirs left where they are, instead of moving the newer data aside to join
/// the older cluster. The revision is read from the stopped member's own database.
#[test]
fn a_member_with_data_newer_than_the_cluster_it_would_join_refuses_and_keeps_them() {
    let mut c = Cluster::start("3.5.16", 3, "tok-newer");
    let snap = c.dir().join("snap.db");
    c.client()
        .snapshot_save(&c.client_url(0), &snap, Duration::from_secs(30))
        .unwrap();
    write_keys(&c);
    let newer = c.client().endpoint_status().unwrap()[0].revision;
    for i in 1..3 {
        assert!(
            c.stop(i, Duration::from_secs(30)),
            "{} did not stop",
            c.members[i].name
        );
    }
    c.wipe(0);
    restore_first_forced(&mut c, &snap);
    let older = c
        .client()
        .with_endpoints(vec![c.client_url(0)])
        .endpoint_status()
        .unwrap()[0]
        .revision;
    assert!(older < newer, "the backup's {older}, the members' {newer}");
    for i in 1..3 {
        let n = node(&c, i);
        // The stopped member's database says the revision etcd served before its stop.
        assert_eq!(
            n.data(),
            etcd_setup::cluster::lifecycle::Data::Held(Some(newer))
        );
        let decision = join::decide(&n, WAIT, &mut |_| {}).unwrap();
        let Decision::Refuse { code, why } = &decision else {
            panic!("{} decided {decision:?}", n.name)
        };
        assert_eq!(*code, ReasonCode::JoinBlocked);
        assert!(
            why.contains(&format!("holds revision {newer}, newer than cluster"))
                && why.contains(&format!("'s {older}: the cluster went back")),
            "{why}"
        );
        assert!(n.data_dir.join("member/snap/db").is_file(), "moved: {why}");
        println!("{}: {why}", n.name);
    }
    // Nothing changed in the cluster: one member, the backup's.
    let list = c
        .client()
        .with_endpoints(vec![c.client_url(0)])
        .member_list()
        .unwrap();
    assert_eq!(list.members.len(), 1);
}
