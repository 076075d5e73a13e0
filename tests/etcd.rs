//! The etcd client (`etcd_setup::cluster::etcd`) against real etcd releases on loopback: every
//! operation the day-2 work needs, on 3.4.23 (Debian bookworm) and 3.5.16 (Debian trixie),
//! the membership round trip on 3.5.30 (Debian unstable) too.
mod support;

use etcd_setup::cluster::etcd::{AlarmKind, Client, ErrorKind, Id};
use std::time::{Duration, Instant};
use support::etcd::Cluster;

/// Promotes `id` through `client`, retrying while etcd says the learner is not in sync.
fn promote(client: &Client, id: Id) {
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

/// member list, add --learner, the learner's start with the returned initial cluster,
/// promote, endpoint status and health, move-leader, remove.
fn membership_round_trip(version: &str) {
    let mut c = Cluster::start(version, 1, "tok-membership");
    let client = c.client();
    let list = client.member_list().unwrap();
    assert_eq!(list.members.len(), 1);
    assert_eq!(
        list.header.cluster_id,
        etcd_setup::cluster::etcd::cluster_id(&c.initial_cluster(), &c.token)
    );
    let first = list.members[0].id;

    let slot = c.add_slot("m2");
    let added = client
        .member_add_learner("m2", &[c.peer_url(slot)])
        .unwrap();
    assert!(added.member.is_learner);
    let initial = added.list().initial_cluster_for(added.member.id, "m2");
    // In etcd's order (by ID), which etcdctl keeps too.
    let mut parts: Vec<String> = initial.split(',').map(String::from).collect();
    parts.sort();
    assert_eq!(
        parts,
        [
            format!("m1={}", c.peer_url(0)),
            format!("m2={}", c.peer_url(slot))
        ]
    );
    let listed = client.member_list().unwrap();
    let learner = listed.get(added.member.id).unwrap();
    assert!(learner.is_learner && !learner.is_started());

    c.launch(slot, &initial, "existing");
    c.await_ready(slot);
    // A learner is asked for its status directly; etcd 3.5 says it is one.
    let status = client
        .with_endpoints(vec![c.client_url(slot)])
        .endpoint_status()
        .unwrap();
    assert_eq!(status[0].member_id, added.member.id);
    if version.starts_with("3.5") {
        assert!(status[0].is_learner, "{status:?}");
    }
    promote(&client, added.member.id);
    let listed = client.member_list().unwrap();
    assert_eq!(listed.voters().count(), 2);
    assert!(listed.members.iter().all(|m| m.is_started()));

    let both = client.with_endpoints(c.client_urls());
    let status = both.endpoint_status().unwrap();
    assert_eq!(status.len(), 2);
    let leader = status[0].leader;
    assert_ne!(leader, Id(0));
    assert!(status
        .iter()
        .all(|s| s.leader == leader && s.version == version));
    assert!(status.iter().all(|s| s.raft_index > 0 && s.db_size > 0));
    let other = if leader == first {
        added.member.id
    } else {
        first
    };
    both.move_leader(other).unwrap();
    let status = both.endpoint_status().unwrap();
    assert!(status.iter().all(|s| s.leader == other), "{status:?}");

    let health = both.endpoint_health().unwrap();
    assert_eq!(health.len(), 2);
    assert!(health.iter().all(|h| h.healthy), "{health:?}");

    // Remove the first member through the second one.
    let second = client.with_endpoints(vec![c.client_url(slot)]);
    // etcd refuses to remove a voter until the leader has been connected to a quorum
    // for 5 s ("unhealthy cluster"), which a leader just moved has not.
    let t = Instant::now();
    loop {
        match second.member_remove(first) {
            Ok(()) => break,
            Err(e)
                if e.kind == ErrorKind::UnhealthyCluster
                    && t.elapsed() < Duration::from_secs(15) =>
            {
                std::thread::sleep(Duration::from_millis(250))
            }
            Err(e) => panic!("{e}"),
        }
    }
    println!(
        "etcd {version}: removal of a voter accepted {:?} after the leader moved",
        t.elapsed()
    );
    assert!(
        c.members[0].await_exit(Duration::from_secs(30)),
        "removed member kept running"
    );
    assert!(
        c.members[0]
            .log()
            .iter()
            .any(|l| etcd_setup::cluster::etcd::says_member_removed(l)),
        "no removal line in etcd {version}'s log"
    );
    assert_eq!(second.member_list().unwrap().members.len(), 1);
    let e = second.member_remove(first).unwrap_err();
    assert_eq!(e.kind, ErrorKind::MemberNotFound, "{e}");
    assert!(e.to_string().contains(&c.client_url(slot)), "{e}");
}

/// put/get, endpoint status sizes, compaction --physical, defrag of one member, snapshot
/// save, alarm list and disarm around a real NOSPACE.
fn maintenance(version: &str) {
    let c = Cluster::start_with(version, 1, "tok-maint", &["--quota-backend-bytes=2097152"]);
    let client = c.client();
    client.put("/k/a", "value a").unwrap();
    assert_eq!(
        client.get("/k/a").unwrap().as_deref(),
        Some(&b"value a"[..])
    );
    assert_eq!(client.get("/k/missing").unwrap(), None);
    assert!(client.alarm_list().unwrap().is_empty());

    // Fill the 2 MiB quota until etcd raises NOSPACE.
    let big = "x".repeat(100_000);
    let mut i = 0;
    let e = loop {
        match client.put(&format!("/fill/{i}"), &big) {
            Ok(()) => i += 1,
            Err(e) => break e,
        }
        assert!(i < 200, "no NOSPACE after {i} puts");
    };
    assert_eq!(e.kind, ErrorKind::NoSpace, "{e}");
    let alarms = client.alarm_list().unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].kind, AlarmKind::NoSpace);
    let status = client.endpoint_status().unwrap();
    let before = status[0].db_size;
    assert!(
        status[0].errors.iter().any(|e| e.contains("NOSPACE")),
        "{status:?}"
    );
    let revision = status[0].revision;

    // The recovery etcd's maintenance guide gives: delete, compact, defragment, disarm.
    for k in 0..i {
        // Deletes are allowed under NOSPACE; our client has no delete, etcdctl does.
        let out = std::process::Command::new(c.etcdctl())
            .args([
                &format!("--endpoints={}", c.client_url(0)),
                "del",
                &format!("/fill/{k}"),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    client
        .compact(revision + i as i64, true, Duration::from_secs(30))
        .unwrap();
    client
        .defrag(&c.client_url(0), Duration::from_secs(30))
        .unwrap();
    let status = client.endpoint_status().unwrap();
    assert!(
        status[0].db_size < before,
        "defrag did not shrink {before} -> {}",
        status[0].db_size
    );
    assert!(status[0].db_size_in_use.is_some());
    let disarmed = client.alarm_disarm().unwrap();
    assert_eq!(disarmed.len(), 1, "{disarmed:?}");
    assert!(client.alarm_list().unwrap().is_empty());
    client.put("/k/after", "writes work again").unwrap();

    let snap = c.dir().join("snap.db");
    client
        .snapshot_save(&c.client_url(0), &snap, Duration::from_secs(30))
        .unwrap();
    let size = std::fs::metadata(&snap).unwrap().len();
    assert!(size > 0);
    assert!(!c.dir().join("snap.db.part").exists());
}

/// The cluster-wide lock: exclusive, released on drop, and after its holder is killed
/// outright, released by etcd once the session's TTL ran out.
fn lock(version: &str) {
    let c = Cluster::start(version, 1, "tok-lock");
    let client = c.client();
    let held = client
        .lock(
            "/etcd-setup/lock/test",
            Duration::from_secs(2),
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(
        held.key().starts_with("/etcd-setup/lock/test/"),
        "{}",
        held.key()
    );
    // The keys under the lock's prefix, as rotate-ca counts those waiting: the holder's.
    assert_eq!(client.count_prefix("/etcd-setup/lock/test/").unwrap(), 1);
    assert_eq!(client.count_prefix("/etcd-setup/lock/none/").unwrap(), 0);
    let e = client
        .lock(
            "/etcd-setup/lock/test",
            Duration::from_secs(2),
            Duration::from_millis(800),
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(e.to_string().contains(&c.client_url(0)), "{e}");
    drop(held);
    // Released by the drop: the next holder gets it at once, well inside the TTL.
    let (second, took) = support::etcd::timed(|| {
        client
            .lock(
                "/etcd-setup/lock/test",
                Duration::from_secs(3),
                Duration::from_secs(10),
            )
            .unwrap()
    });
    assert!(took < Duration::from_secs(2), "took {took:?}");

    // The holder dies by SIGKILL: nobody deletes the key, the lease expires after 3 s.
    let mut second = second;
    assert!(second.ensure_held().is_ok());
    let pid = second.holder_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Its owner notices before it acts on the lock again.
    let t = std::time::Instant::now();
    let lost = loop {
        match second.ensure_held() {
            Err(e) => break e,
            Ok(()) => assert!(
                t.elapsed() < Duration::from_secs(2),
                "the holder's death went unseen"
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(lost.to_string().contains("/etcd-setup/lock/test"), "{lost}");
    let (third, took) = support::etcd::timed(|| {
        client
            .lock(
                "/etcd-setup/lock/test",
                Duration::from_secs(2),
                Duration::from_secs(20),
            )
            .unwrap()
    });
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(15),
        "took {took:?}"
    );
    println!("etcd {version}: lock of a SIGKILLed holder (TTL 3 s) came back after {took:?}");
    third.release();
    drop(second);

    // The member is down when the lock is asked for and back 4 s later: the lock comes
    // (etcdctl keeps dialling; a failure it reports meanwhile is asked again).
    let mut c = c;
    assert!(c.stop(0, Duration::from_secs(10)));
    let asker = std::thread::spawn(move || {
        support::etcd::timed(|| {
            client.lock(
                "/etcd-setup/lock/test",
                Duration::from_secs(2),
                Duration::from_secs(40),
            )
        })
    });
    std::thread::sleep(Duration::from_secs(4));
    let initial = c.initial_cluster_arg();
    c.launch(0, &initial, "existing");
    c.await_ready(0);
    let (fourth, took) = asker.join().unwrap();
    let fourth = fourth.unwrap_or_else(|e| panic!("no lock once the member was back: {e}"));
    assert!(took >= Duration::from_secs(4), "took {took:?}");
    println!("etcd {version}: lock asked while the member was down came {took:?} after");
    fourth.release();

    // Down for good: the wait ends, and the error does not blame a holder alone.
    assert!(c.stop(0, Duration::from_secs(10)));
    let (e, took) = support::etcd::timed(|| {
        c.client()
            .lock(
                "/etcd-setup/lock/test",
                Duration::from_secs(2),
                Duration::from_secs(9),
            )
            .unwrap_err()
    });
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(e.line.contains("or no endpoint answered"), "{e}");
    assert!(took < Duration::from_secs(25), "took {took:?}");
}

#[test]
fn membership_round_trip_on_3_4_23() {
    membership_round_trip("3.4.23");
}

#[test]
fn membership_round_trip_on_3_5_16() {
    membership_round_trip("3.5.16");
}

#[test]
fn membership_round_trip_on_3_5_30() {
    membership_round_trip("3.5.30");
}

#[test]
fn maintenance_and_nospace_recovery_on_3_4_23() {
    maintenance("3.4.23");
}

#[test]
fn maintenance_and_nospace_recovery_on_3_5_16() {
    maintenance("3.5.16");
}

#[test]
fn maintenance_and_nospace_recovery_on_3_6_16() {
    maintenance("3.6.16");
}

#[test]
fn maintenance_and_nospace_recovery_on_3_7_3() {
    maintenance("3.7.3");
}

#[test]
fn cluster_lock_on_3_4_23() {
    lock("3.4.23");
}

#[test]
fn cluster_lock_on_3_5_16() {
    lock("3.5.16");
}

#[test]
fn cluster_lock_on_3_6_16() {
    lock("3.6.16");
}

#[test]
fn cluster_lock_on_3_7_3() {
    lock("3.7.3");
}

#[test]
fn membership_round_trip_on_3_6_16() {
    membership_round_trip("3.6.16");
}

#[test]
fn membership_round_trip_on_3_7_3() {
    membership_round_trip("3.7.3");
}

/// The member list, status and alarms of one member, through the JSON gateway (plain
/// http) and through etcdctl, compared field by field: `label` says when.
fn same_answers(
    gateway: &Client,
    etcdctl: &Client,
    label: &str,
) -> Vec<etcd_setup::cluster::etcd::Alarm> {
    assert_eq!(
        gateway.member_list().unwrap(),
        etcdctl.member_list().unwrap(),
        "member list, {label}"
    );
    same_status(gateway, etcdctl, label);
    let alarms = gateway.alarm_list().unwrap();
    assert_eq!(alarms, etcdctl.alarm_list().unwrap(), "alarm list, {label}");
    alarms
}

/// The endpoint status through the gateway and through etcdctl. The member's identity,
/// version, leader, term, learner flag and errors are the same in both. The database's
/// size, the part in use, the revision and the raft indexes are live (etcd's backend
/// commits and frees pages between two reads, under load more so: CI saw db_size_in_use
/// 2,035,712 against 1,728,512 a read later), so for them the rule is asserted instead: a
/// gateway read, etcdctl's, then the gateway's again; the revision and indexes never go
/// back between them; each read's part in use fits in its file; both report the same
/// fields (3.4 reports no in-use size through either).
fn same_status(gateway: &Client, etcdctl: &Client, label: &str) {
    let before = gateway.endpoint_status().unwrap();
    let middle = etcdctl.endpoint_status().unwrap();
    let after = gateway.endpoint_status().unwrap();
    assert_eq!(before.len(), 1, "endpoint status, {label}: {before:?}");
    assert_eq!(middle.len(), 1, "endpoint status, {label}: {middle:?}");
    let (b, m, a) = (&before[0], &middle[0], &after[0]);
    for (what, x, y) in [
        ("endpoint", &b.endpoint, &m.endpoint),
        ("version", &b.version, &m.version),
    ] {
        assert_eq!(x, y, "endpoint status {what}, {label}");
    }
    for (what, x, y) in [
        ("cluster id", b.cluster_id, m.cluster_id),
        ("member id", b.member_id, m.member_id),
        ("leader", b.leader, m.leader),
    ] {
        assert_eq!(x, y, "endpoint status {what}, {label}");
    }
    assert_eq!(
        b.raft_term, m.raft_term,
        "endpoint status raft term, {label}"
    );
    assert_eq!(
        b.is_learner, m.is_learner,
        "endpoint status learner, {label}"
    );
    assert_eq!(b.errors, m.errors, "endpoint status errors, {label}");
    let ordered = |what: &str, x: u64, y: u64, z: u64| {
        assert!(
            x <= y && y <= z,
            "endpoint status {what}, {label}: gateway {x}, etcdctl {y}, gateway {z}: went back"
        );
    };
    ordered(
        "revision",
        b.revision as u64,
        m.revision as u64,
        a.revision as u64,
    );
    ordered("raft index", b.raft_index, m.raft_index, a.raft_index);
    assert_eq!(
        b.raft_applied_index.is_some(),
        m.raft_applied_index.is_some(),
        "endpoint status applied index reported by one only, {label}: {b:?} {m:?}"
    );
    if let (Some(x), Some(y), Some(z)) = (
        b.raft_applied_index,
        m.raft_applied_index,
        a.raft_applied_index,
    ) {
        ordered("raft applied index", x, y, z);
    }
    assert_eq!(
        b.db_size_in_use.is_some(),
        m.db_size_in_use.is_some(),
        "endpoint status in-use size reported by one only, {label}: {b:?} {m:?}"
    );
    for s in [b, m, a] {
        assert!(s.db_size > 0, "endpoint status db size 0, {label}: {s:?}");
        if let Some(in_use) = s.db_size_in_use {
            assert!(
                in_use <= s.db_size,
                "endpoint status: {in_use} bytes in use of a {}-byte file, {label}",
                s.db_size
            );
        }
    }
}

/// The gateway and etcdctl say the same of the same member: quiet, then under NOSPACE
/// (the alarm, the status's error line, the put refused as `NoSpace`), then after a
/// defragmentation through the gateway; and a learner's status says it is one.
fn gateway_answers_as_etcdctl_does(version: &str) {
    let c = Cluster::start_with(
        version,
        1,
        "tok-gateway",
        &["--quota-backend-bytes=2097152"],
    );
    let gateway = c.client();
    let etcdctl = gateway.without_gateway();
    assert!(same_answers(&gateway, &etcdctl, "quiet").is_empty());
    let big = "x".repeat(100_000);
    let mut i = 0;
    let e = loop {
        match gateway.put(&format!("/fill/{i}"), &big) {
            Ok(()) => i += 1,
            Err(e) => break e,
        }
        assert!(i < 200, "no NOSPACE after {i} puts");
    };
    assert_eq!(e.kind, ErrorKind::NoSpace, "{e}");
    let alarms = same_answers(&gateway, &etcdctl, "under NOSPACE");
    assert_eq!(alarms.len(), 1, "{alarms:?}");
    assert_eq!(alarms[0].kind, AlarmKind::NoSpace);
    let status = gateway.endpoint_status().unwrap();
    assert!(
        status[0].errors.iter().any(|e| e.contains("NOSPACE")),
        "{status:?}"
    );
    gateway
        .defrag(&c.client_url(0), Duration::from_secs(30))
        .unwrap();
    same_answers(&gateway, &etcdctl, "after a defragmentation");
}

#[test]
fn the_gateway_answers_as_etcdctl_does_on_3_4_23() {
    gateway_answers_as_etcdctl_does("3.4.23");
}

#[test]
fn the_gateway_answers_as_etcdctl_does_on_3_5_16() {
    gateway_answers_as_etcdctl_does("3.5.16");
}

#[test]
fn an_unreachable_endpoint_fails_within_the_bound_naming_its_url() {
    let dir = support::etcd::release("3.5.16");
    // A port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut client = Client::new(dir.join("etcdctl"), vec![url.clone()], None);
    client.dial_timeout = Duration::from_millis(500);
    client.command_timeout = Duration::from_secs(1);
    // Through the gateway (plain http) and through etcdctl: the same kind, the URL named.
    for client in [client.clone(), client.without_gateway()] {
        let (r, took) = support::etcd::timed(|| client.member_list());
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
        assert!(e.to_string().contains(&url), "{e}");
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }
}

/// Client TLS with client certificates: the client passes the node's files to etcdctl;
/// without them the same call fails, naming the https URL.
fn tls(version: &str) {
    let c = Cluster::start_tls(version, 1, "tok-tls");
    let url = c.client_url(0);
    assert!(url.starts_with("https://"), "{url}");
    let client = c.client();
    let list = client.member_list().unwrap();
    assert_eq!(list.members[0].client_urls, std::slice::from_ref(&url));
    client.put("/tls", "yes").unwrap();
    assert!(client.endpoint_health().unwrap()[0].healthy);
    let mut bare = Client::new(c.etcdctl(), vec![url.clone()], None);
    bare.dial_timeout = Duration::from_secs(1);
    bare.command_timeout = Duration::from_secs(2);
    let e = bare.member_list().unwrap_err();
    assert!(e.to_string().contains(&url), "{e}");
    println!("etcd {version} without client certificate: {e}");
}

#[test]
fn client_tls_with_certificates_on_3_4_23() {
    tls("3.4.23");
}

#[test]
fn client_tls_with_certificates_on_3_5_16() {
    tls("3.5.16");
}

/// The holder of a lock dies with the process that took it: this test binary runs itself
/// as the holder (TTL 60 s), is SIGKILLed, and the lock is free again at once, because
/// etcdctl got its parent-death SIGTERM and deleted its key (a lease expiry would take
/// 60 s, beyond this test's 40 s wait; the bound is loose for a loaded machine).
#[test]
fn a_lock_holder_dies_with_its_process_and_the_lock_is_free_at_once() {
    const NAME: &str = "/etcd-setup/lock/die";
    if let Ok(spec) = std::env::var("ETCD_SETUP_TEST_LOCK_HOLDER") {
        let (etcdctl, url) = spec.split_once('|').unwrap();
        let client = Client::new(etcdctl, vec![url.to_string()], None);
        let held = client
            .lock(NAME, Duration::from_secs(60), Duration::from_secs(30))
            .unwrap();
        println!("HELD {}", held.key());
        use std::io::Write;
        std::io::stdout().flush().unwrap();
        loop {
            std::thread::park();
        }
    }
    let c = Cluster::start("3.5.16", 1, "tok-die");
    let mut holder = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_lock_holder_dies_with_its_process_and_the_lock_is_free_at_once",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "ETCD_SETUP_TEST_LOCK_HOLDER",
            format!("{}|{}", c.etcdctl().display(), c.client_url(0)),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = holder.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let out = holder.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(out));
    let held = lines
        .by_ref()
        .map_while(Result::ok)
        // libtest prints "test NAME ... " before it, on the same line.
        .find_map(|l| l.split_once("HELD ").map(|(_, key)| key.to_string()));
    let Some(held) = held else {
        let _ = holder.wait();
        panic!("the holder did not take the lock: {}", err.join().unwrap());
    };
    assert!(held.contains(NAME), "{held}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let client = c.client();
    let (lock, took) = support::etcd::timed(|| {
        client
            .lock(NAME, Duration::from_secs(5), Duration::from_secs(40))
            .unwrap()
    });
    println!("lock free {took:?} after its holder's process was SIGKILLed (TTL 60 s)");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    lock.release();
}
