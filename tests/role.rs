//! The member's role in status (`role`: voter or learner) against real etcd on loopback,
//! 3.4.23 and 3.5.16: a voter reads voter; a learner added with `member add --learner` and
//! started reads learner; after `member promote` it reads voter. Plain http asks etcd's
//! JSON gateway (`POST /v3/maintenance/status`); client TLS asks etcdctl's `member list`.
mod support;

use etcd_setup::cluster::etcd::{ErrorKind, Id};
use etcd_setup::shared::systemd::UnitState;
use etcd_setup::status::{LiveView, Role, RoleSource, SystemLive};
use std::time::{Duration, Instant};
use support::etcd::Cluster;

/// An active etcd process as systemd would show it (the role is kept per process).
fn process(pid: u32) -> UnitState {
    UnitState {
        load_state: "loaded".into(),
        active_state: "active".into(),
        sub_state: "running".into(),
        main_pid: pid,
        active_enter_timestamp_us: u64::from(pid),
        ..Default::default()
    }
}

/// The role `live` reads for process `pid`, asked until it is `want` (a learner's role
/// is asked again after [`SystemLive::ROLE_RETRY`]) or 30 s passed; the last one read.
fn role_until(live: &SystemLive, pid: u32, want: Role) -> Option<Role> {
    let t = Instant::now();
    loop {
        let r = live.role(&process(pid));
        if r == Some(want) || t.elapsed() > Duration::from_secs(30) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn source(c: &Cluster, i: usize) -> RoleSource {
    match &c.tls {
        None => RoleSource::Gateway(c.client_addr(i)),
        Some(_) => RoleSource::Etcdctl(c.client().with_endpoints(vec![c.client_url(i)])),
    }
}

fn voter_learner_voter(version: &str, tls: bool) {
    let mut c = if tls {
        Cluster::start_tls(version, 1, "tok-role")
    } else {
        Cluster::start(version, 1, "tok-role")
    };
    let first = SystemLive::new(1).with_role(source(&c, 0));
    assert_eq!(first.role(&process(10)), Some(Role::Voter));

    let client = c.client();
    let slot = c.add_slot("m2");
    let added = client
        .member_add_learner("m2", &[c.peer_url(slot)])
        .unwrap();
    let initial = added.list().initial_cluster_for(added.member.id, "m2");
    c.launch(slot, &initial, "existing");
    c.await_ready(slot);
    let second = SystemLive::new(1).with_role(source(&c, slot));
    assert_eq!(second.role(&process(20)), Some(Role::Learner));

    promote(&client, added.member.id);
    assert_eq!(role_until(&second, 20, Role::Voter), Some(Role::Voter));
    // The first member never changed.
    assert_eq!(first.role(&process(10)), Some(Role::Voter));
    // A member that does not answer has no role.
    c.kill(slot);
    let gone = SystemLive::new(1).with_role(source(&c, slot));
    assert_eq!(gone.role(&process(30)), None);
}

/// Promotes `id` through `client`, retrying while etcd says the learner is not in sync.
fn promote(client: &etcd_setup::cluster::etcd::Client, id: Id) {
    let t = Instant::now();
    loop {
        match client.member_promote(id) {
            Ok(()) => return,
            Err(e)
                if e.kind == ErrorKind::LearnerNotInSync
                    && t.elapsed() < Duration::from_secs(30) =>
            {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn role_through_the_gateway_on_3_4_23() {
    voter_learner_voter("3.4.23", false);
}

#[test]
fn role_through_the_gateway_on_3_5_16() {
    voter_learner_voter("3.5.16", false);
}

#[test]
fn role_through_etcdctl_with_client_tls_on_3_4_23() {
    voter_learner_voter("3.4.23", true);
}

#[test]
fn role_through_etcdctl_with_client_tls_on_3_5_16() {
    voter_learner_voter("3.5.16", true);
}
