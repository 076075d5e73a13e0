//! Day 2 against real etcd releases on loopback: `etcd-setup snapshot`, `restore` and
//! `maintain` run as the binary, with `--config` describing a member the harness started
//! (tests/support/etcd.rs), on 3.5.16 and 3.4.23 where they differ; and the corruption
//! check variables of etcd's environment file on 3.4.23 and 3.5.1.
mod support;

use etcd_setup::cluster::etcd::{AlarmKind, ErrorKind};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use support::etcd::Cluster;
use support::upkeep::defrags;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-setup");

/// A scratch folder outside the paths etcd's sandbox hides (which config refuses),
/// wherever the checkout lies.
fn scratch() -> tempfile::TempDir {
    support::scratch::dir("upkeep")
}

/// A configuration for member `i` of `c`, its files under `dir`, with `extra` TOML
/// appended (whole tables).
fn config(c: &Cluster, i: usize, dir: &Path, extra: &str) -> PathBuf {
    config_with(c, i, dir, "", extra)
}

/// [`config`] with `etcd_lines` added to its `[etcd]` table.
fn config_with(c: &Cluster, i: usize, dir: &Path, etcd_lines: &str, extra: &str) -> PathBuf {
    c.config_file(i, dir, etcd_lines, extra)
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn snapshot(cfg: &Path, state: &Path) -> Output {
    run(&[
        "snapshot",
        "--config",
        cfg.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--run-dir",
        state.to_str().unwrap(),
    ])
}

fn snapshots_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("etcd-snapshot-") && n.ends_with(".db"))
        .collect();
    v.sort();
    v
}

fn record(state: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(state.join("snapshot.json")).unwrap()).unwrap()
}

/// Snapshots of a live member: verified (revision, keys), named with time and revision,
/// copied, the newest 2 kept in each folder, the last recorded; then with etcd gone, a
/// failure recorded beside the last good one.
fn snapshots_are_verified_retained_copied_and_recorded(version: &str) {
    let mut c = Cluster::start(version, 1, "tok-snap");
    let dir = scratch();
    let cfg = config(
        &c,
        0,
        dir.path(),
        &format!(
            "[snapshot]\ndir = \"{0}/snaps\"\ncopy_dir = \"{0}/copy\"\nretain = 2\n",
            dir.path().display()
        ),
    );
    let state = dir.path().join("state");
    let client = c.client();
    // snapshot status counts the keys of all of etcd's buckets (members, meta, ...):
    // each round adds one of ours.
    let mut first_total = None;
    for round in 0..3 {
        client.put(&format!("k{round}"), "v").unwrap();
        let out = snapshot(&cfg, &state);
        let (so, se) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{so}{se}");
        let rev = client.endpoint_status().unwrap()[0].revision;
        assert!(
            so.contains(&format!("-rev{rev}.db revision {rev} ")),
            "{so}"
        );
        let r = record(&state);
        assert_eq!(r["last"]["revision"], rev, "{r}");
        let total = r["last"]["total_keys"].as_u64().unwrap();
        assert_eq!(total, *first_total.get_or_insert(total) + round, "{r}");
        assert!(r["failure"].is_null(), "{r}");
        println!("{version} round {round}: {}", so.trim());
    }
    let kept = snapshots_in(&dir.path().join("snaps"));
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept, snapshots_in(&dir.path().join("copy")));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("snaps").join(&kept[1]))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    c.kill(0);
    let out = snapshot(&cfg, &state);
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{se}");
    assert!(se.starts_with("snapshot-failed: "), "{se}");
    assert!(se.contains(&c.client_url(0)), "{se}");
    let r = record(&state);
    assert_eq!(r["failure"]["code"], "snapshot-failed", "{r}");
    assert!(
        r["last"]["file"].as_str().unwrap().ends_with(&kept[1]),
        "{r}"
    );
    assert_eq!(snapshots_in(&dir.path().join("snaps")), kept);
}

#[test]
fn snapshots_are_verified_retained_copied_and_recorded_3_5() {
    snapshots_are_verified_retained_copied_and_recorded("3.5.16");
}

#[test]
fn snapshots_are_verified_retained_copied_and_recorded_3_4() {
    snapshots_are_verified_retained_copied_and_recorded("3.4.23");
}

#[test]
fn snapshots_are_verified_retained_copied_and_recorded_3_6() {
    snapshots_are_verified_retained_copied_and_recorded("3.6.16");
}

#[test]
fn snapshots_are_verified_retained_copied_and_recorded_3_7() {
    snapshots_are_verified_retained_copied_and_recorded("3.7.3");
}

/// A snapshot restored on member 1 of a lost three-member cluster: the old data dir
/// moved aside with its content, a one-member cluster with every key, which a second
/// node then joins as the runbook says (learner, promote).
fn restore_makes_a_one_member_cluster_and_keeps_the_old_data(version: &str) {
    let mut c = Cluster::start(version, 3, "tok-restore");
    let dir = scratch();
    let cfg = config(
        &c,
        0,
        dir.path(),
        &format!("[snapshot]\ndir = \"{}/snaps\"\n", dir.path().display()),
    );
    let state = dir.path().join("state");
    let client = c.client();
    for i in 0..20 {
        client
            .put(&format!("key/{i}"), &format!("value {i}"))
            .unwrap();
    }
    let out = snapshot(&cfg, &state);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let file = record(&state)["last"]["file"].as_str().unwrap().to_string();
    let restore_args = [
        "restore",
        &file,
        "--config",
        cfg.to_str().unwrap(),
        "--no-systemd",
        "--run-dir",
        state.to_str().unwrap(),
    ];
    // While the other members run, nothing is touched: their leader would crash the
    // restored one-member cluster of the same ID. Both are named.
    std::fs::create_dir_all(dir.path().join("data/member")).unwrap();
    std::fs::write(dir.path().join("data/member/old-marker"), "old").unwrap();
    let out = run(&restore_args);
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{se}");
    assert!(
        se.starts_with("restore-failed: etcd runs on other members of this cluster: "),
        "{se}"
    );
    for i in 1..3 {
        let m = format!("{} ({})", c.members[i].name, c.peer_url(i));
        assert!(se.contains(&m), "{m}: {se}");
    }
    assert!(!se.contains(&format!("{} (", c.members[0].name)), "{se}");
    assert!(dir.path().join("data/member/old-marker").exists());
    // The others stopped: while this member's etcd still serves, its data dir is not
    // replaced either.
    for i in 1..3 {
        c.kill(i);
    }
    let out = run(&restore_args);
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{se}");
    assert!(
        se.starts_with("restore-failed: etcd still serves at "),
        "{se}"
    );
    std::fs::remove_dir_all(dir.path().join("data")).unwrap();
    // The cluster is lost.
    c.kill(0);
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("member")).unwrap();
    std::fs::write(data.join("member/old-marker"), "old").unwrap();

    // A damaged copy is refused before anything changes.
    let bad = dir.path().join("bad.db");
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    std::fs::write(&bad, bytes).unwrap();
    let out = run(&[
        "restore",
        bad.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--no-systemd",
        "--run-dir",
        state.to_str().unwrap(),
    ]);
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{se}");
    assert!(se.starts_with("snapshot-corrupt: "), "{se}");
    assert!(data.join("member/old-marker").exists());

    let out = run(&[
        "restore",
        &file,
        "--config",
        cfg.to_str().unwrap(),
        "--no-systemd",
        "--run-dir",
        state.to_str().unwrap(),
    ]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    println!("{version}: {so}");
    // The operation status showed while it ran is gone with it.
    assert!(!state.join("operation.json").exists());
    let aside: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains("data.before-restore-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read_to_string(aside[0].join("member/old-marker")).unwrap(),
        "old"
    );
    assert!(so.contains(&aside[0].display().to_string()), "{so}");

    // etcd on the restored data dir, once with --force-new-cluster (systemd's part on a
    // node, as the command says with --no-systemd).
    assert!(so.contains("once with --force-new-cluster"), "{so}");
    c.members[0].data_dir = data.clone();
    let initial = c.initial_cluster_arg();
    c.extra = vec!["--force-new-cluster".into()];
    c.launch(0, &initial, "new");
    c.await_ready(0);
    c.extra.clear();
    let one = etcd_setup::cluster::etcd::Client::new(c.etcdctl(), vec![c.client_url(0)], None);
    let list = one.member_list().unwrap();
    assert_eq!(list.members.len(), 1, "{list:?}");
    // The cluster ID the configuration gives: the other nodes' join accepts it.
    let configured: Vec<(String, String)> = (0..3)
        .map(|i| (c.members[i].name.clone(), c.peer_url(i)))
        .collect();
    assert_eq!(
        list.header.cluster_id,
        etcd_setup::cluster::etcd::cluster_id(&configured, "tok-restore"),
        "{list:?}"
    );
    // etcdutl (3.5.16, 3.6, 3.7) bumps the revision for Kubernetes' watchers; 3.4's
    // etcdctl cannot.
    let rev = one.endpoint_status().unwrap()[0].revision;
    if version.starts_with("3.4.") {
        assert!(rev < 1000, "{rev}");
    } else {
        assert!(rev > 1_000_000_000, "{rev}");
    }
    assert_eq!(list.members[0].name, "m1");
    for i in 0..20 {
        assert_eq!(
            one.get(&format!("key/{i}")).unwrap(),
            Some(format!("value {i}").into_bytes())
        );
    }

    // Runbook, on the second node: its old data moved aside, it joins as a learner and
    // is promoted.
    let old2 = c.members[1].data_dir.clone();
    std::fs::rename(&old2, dir.path().join("m2.lost")).unwrap();
    let added = one.member_add_learner("m2", &[c.peer_url(1)]).unwrap();
    let initial = added.list().initial_cluster_for(added.member.id, "m2");
    c.launch(1, &initial, "existing");
    c.await_ready(1);
    let t = Instant::now();
    loop {
        match one.member_promote(added.member.id) {
            Ok(()) => break,
            Err(e)
                if e.kind == ErrorKind::LearnerNotInSync
                    && t.elapsed() < Duration::from_secs(30) =>
            {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("{e}"),
        }
    }
    let two = one.with_endpoints(vec![c.client_url(0), c.client_url(1)]);
    assert_eq!(two.member_list().unwrap().voters().count(), 2);
    let m2 = one.with_endpoints(vec![c.client_url(1)]);
    assert_eq!(m2.get("key/7").unwrap(), Some(b"value 7".to_vec()));
}

#[test]
fn restore_makes_a_one_member_cluster_and_keeps_the_old_data_3_5() {
    restore_makes_a_one_member_cluster_and_keeps_the_old_data("3.5.16");
}

#[test]
fn restore_makes_a_one_member_cluster_and_keeps_the_old_data_3_4() {
    restore_makes_a_one_member_cluster_and_keeps_the_old_data("3.4.23");
}

#[test]
fn restore_makes_a_one_member_cluster_and_keeps_the_old_data_3_6() {
    restore_makes_a_one_member_cluster_and_keeps_the_old_data("3.6.16");
}

#[test]
fn restore_makes_a_one_member_cluster_and_keeps_the_old_data_3_7() {
    restore_makes_a_one_member_cluster_and_keeps_the_old_data("3.7.3");
}

/// Writes `n` revisions of `value_kib` KiB under one key, then compacts them away: the
/// database file keeps its size while little of it is in use.
fn fragment(c: &Cluster, n: usize, value_kib: usize) {
    let client = c.client();
    let value = "x".repeat(value_kib << 10);
    for _ in 0..n {
        client.put("bulk", &value).unwrap();
    }
    let rev = client.endpoint_status().unwrap()[0].revision;
    client.compact(rev, true, Duration::from_secs(60)).unwrap();
    // Followers apply the compaction on their own time: await every member's free
    // pages, so that all of them pass the threshold when the maintains start.
    let t = Instant::now();
    loop {
        let all = etcd_setup::cluster::etcd::each_endpoint(&client, |one| one.endpoint_status());
        let fragmented = all.iter().all(|(_, r)| {
            r.as_ref()
                .is_ok_and(|v| v[0].db_size_in_use.is_some_and(|u| u * 2 < v[0].db_size))
        });
        if fragmented {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{all:?}");
        // A member recounts the pages in use when it commits: give each a write.
        client.put("tick", "t").unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `[maintain]` thresholds that the clusters [`fragment`] makes pass.
const MAINTAIN_LIMITS: &str = "[maintain]\nmin_db_size = \"4MiB\"\nmin_fragmented_percent = 50\n";

/// `etcd-setup maintain --config cfg` started, its output piped.
fn spawn_maintain(cfg: &Path) -> std::process::Child {
    Command::new(BIN)
        .args(["maintain", "--config", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Three `maintain` started at once on a fragmented three-member cluster: each member
/// defragmented exactly once, never two at a time, the leader last.
#[test]
fn three_maintains_at_once_defragment_one_member_at_a_time_the_leader_last() {
    let c = Cluster::start("3.5.16", 3, "tok-maintain");
    let dir = scratch();
    fragment(&c, 120, 100);
    let cfgs: Vec<PathBuf> = (0..3)
        .map(|i| config(&c, i, dir.path(), MAINTAIN_LIMITS))
        .collect();
    let leader = {
        let s = c.client().endpoint_status().unwrap();
        let id = s[0].leader;
        s.iter()
            .position(|x| x.member_id == id)
            .map(|i| c.members[i].name.clone())
            .unwrap()
    };
    let children: Vec<_> = cfgs.iter().map(|cfg| spawn_maintain(cfg)).collect();
    let mut all = Vec::new();
    for (i, ch) in children.into_iter().enumerate() {
        let out = ch.wait_with_output().unwrap();
        let (so, se) = text(&out);
        println!(
            "maintain on m{}: exit {:?}\n{so}{se}",
            i + 1,
            out.status.code()
        );
        assert_eq!(out.status.code(), Some(0), "{so}{se}");
        all.extend(defrags(&so));
    }
    all.sort_by_key(|d| d.start);
    let order: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
    println!("order: {order:?}, leader {leader}");
    let mut names = order.clone();
    names.sort();
    assert_eq!(names, ["m1", "m2", "m3"], "{all:?}");
    for w in all.windows(2) {
        assert!(w[0].end <= w[1].start, "overlap: {all:?}");
    }
    assert_eq!(all[2].name, leader, "{all:?}");
    assert_eq!(all[2].role, "leader");
    // Nothing is left to do.
    let out = run(&["maintain", "--config", cfgs[0].to_str().unwrap()]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{se}");
    assert!(so.starts_with("nothing to defragment"), "{so}");
    // A follower down (not the leader: without it the cluster only elects anew): nothing
    // is done, with its own exit code.
    let mut c = c;
    let down = (1..3).rev().find(|&i| c.members[i].name != leader).unwrap();
    let name = c.members[down].name.clone();
    c.kill(down);
    let out = run(&["maintain", "--config", cfgs[0].to_str().unwrap()]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{so}{se}");
    assert!(
        se.starts_with(&format!("cluster-unhealthy: member {name} at ")),
        "{se}"
    );
}

/// Under the cluster lock, a member that stalls (it keeps its sockets but does not answer
/// within etcdctl's bounds: a guest starved of CPU while three maintains survey at once,
/// as c4 saw under TCG) is asked again rather than taken for a cluster-unhealthy one: the
/// maintenance says it is late, and once it answers again every member is defragmented,
/// the leader last. A stopped follower is still refused at once (the test above).
#[test]
fn a_member_that_answers_late_under_the_lock_is_asked_again() {
    use std::io::BufRead;
    let c = Cluster::start("3.5.16", 3, "tok-late");
    let dir = scratch();
    fragment(&c, 120, 100);
    let cfg = config(&c, 0, dir.path(), MAINTAIN_LIMITS);
    let s = c.client().endpoint_status().unwrap();
    let leader = s[0].leader;
    // A follower that is not the node running maintain (m1), nor the leader.
    let ids: Vec<_> = (0..3)
        .map(|i| {
            let one = c.client().with_endpoints(vec![c.client_url(i)]);
            one.endpoint_status().unwrap()[0].member_id
        })
        .collect();
    let late = (1..3).find(|&i| ids[i] != leader).unwrap();
    let late_name = c.members[late].name.clone();
    c.signal(late, nix::sys::signal::Signal::SIGSTOP);
    let mut child = spawn_maintain(&cfg);
    // Resumed when maintain says it is asking again: the event, not a sleep.
    let stdout = child.stdout.take().unwrap();
    let mut said = Vec::new();
    let mut resumed = false;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if !resumed && line.contains("late, not down: asking again") {
            assert!(line.contains(&format!("member {late_name} at ")), "{line}");
            c.signal(late, nix::sys::signal::Signal::SIGCONT);
            resumed = true;
        }
        said.push(line);
    }
    if !resumed {
        c.signal(late, nix::sys::signal::Signal::SIGCONT);
    }
    let out = child.wait_with_output().unwrap();
    let so = said.join("\n");
    let (_, se) = text(&out);
    println!("maintain: exit {:?}\n{so}\n{se}", out.status.code());
    assert_eq!(out.status.code(), Some(0), "{so}\n{se}");
    assert!(resumed, "{so}");
    let all = defrags(&so);
    let mut names: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        all.last().map(|d| d.role.as_str()),
        Some("leader"),
        "{all:?}"
    );
    names.sort();
    assert_eq!(names, ["m1", "m2", "m3"], "{all:?}");
}

/// A member that has lost its leader between two defragmentations (CI's c4: the leader's
/// defragmentation on a starved guest missed heartbeats and a follower started an
/// election) is waited for, up to `ELECTION_WAIT`, not reported as a cluster-unhealthy
/// one at once. After the first defragmentation the maintenance is frozen, the two
/// other members are stopped until its own member reports no leader, and it resumes:
/// its next survey cannot list the members (etcd lists them through raft) and its own
/// member, asked locally, has no leader. The two are resumed when it says an election
/// is under way; every member is then defragmented.
#[test]
fn a_member_without_a_leader_between_defragmentations_is_waited_for() {
    use nix::sys::signal::Signal;
    use std::io::BufRead;
    let c = Cluster::start("3.5.16", 3, "tok-elect");
    let dir = scratch();
    fragment(&c, 120, 100);
    let first = 0;
    let others: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    let cfg = config(&c, first, dir.path(), MAINTAIN_LIMITS);
    let mut child = spawn_maintain(&cfg);
    let maintain = nix::unistd::Pid::from_raw(child.id() as i32);
    let own = c.client().with_endpoints(vec![c.client_url(first)]);
    let stdout = child.stdout.take().unwrap();
    let mut said = Vec::new();
    let (mut frozen, mut resumed) = (false, false);
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if !frozen && line.starts_with("defragmented ") {
            frozen = true;
            nix::sys::signal::kill(maintain, Signal::SIGSTOP).unwrap();
            for &i in &others {
                c.signal(i, Signal::SIGSTOP);
            }
            let t = Instant::now();
            while own.endpoint_status().map_or(true, |s| s[0].leader.0 != 0) {
                assert!(t.elapsed() < Duration::from_secs(30), "still led");
                std::thread::sleep(Duration::from_millis(100));
            }
            nix::sys::signal::kill(maintain, Signal::SIGCONT).unwrap();
        }
        if frozen && !resumed && line.contains("asking again") {
            resumed = true;
            for &i in &others {
                c.signal(i, Signal::SIGCONT);
            }
        }
        said.push(line);
    }
    if frozen && !resumed {
        for &i in &others {
            c.signal(i, Signal::SIGCONT);
        }
    }
    let out = child.wait_with_output().unwrap();
    let so = said.join("\n");
    let (_, se) = text(&out);
    println!("maintain: exit {:?}\n{so}\n{se}", out.status.code());
    assert!(frozen, "{so}");
    assert_eq!(out.status.code(), Some(0), "{so}\n{se}");
    // Whichever read meets the election first (the member list, which etcd serves
    // through raft, or the member's own status when the list was answered just before
    // the freeze took hold), it is waited for with the reason said, not reported.
    assert!(
        so.lines()
            .any(|l| l.contains("no leader; an election is under way: asking again")),
        "{so}"
    );
    assert!(!so.contains("cluster-unhealthy"), "{so}");
    let mut names: Vec<String> = defrags(&so).into_iter().map(|d| d.name).collect();
    names.sort();
    assert_eq!(names, ["m1", "m2", "m3"], "{so}");
}

/// A small quota filled until NOSPACE: the status side reads the alarm from `/health`
/// and the space from `/metrics`; `maintain` keeps the alarm while space does not come
/// back (the live data alone above the share of the quota it disarms below); after keys
/// are deleted it compacts, defragments, disarms, and writes work.
fn nospace_is_recovered_only_when_space_came_back(version: &str) {
    let quota = 16u64 << 20;
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = Cluster::start_with(
        version,
        1,
        "tok-nospace",
        &[
            &format!("--quota-backend-bytes={quota}"),
            &format!("--listen-metrics-urls=http://{metrics}"),
        ],
    );
    let dir = scratch();
    let cfg = config_with(
        &c,
        0,
        dir.path(),
        &format!("quota_backend_bytes = {quota}\n"),
        "",
    );
    let client = c.client();
    // One argument of etcdctl may hold at most 128 KiB.
    let value_len = 96usize << 10;
    let value = "y".repeat(value_len);
    // The database file reaches the quota with some of it free pages, as many as the
    // writes happened to leave (a loaded machine leaves more), which a defragmentation
    // gives back. So that "space did not come back" is certain, not luck, the distinct
    // keys written (live data no compaction or defragmentation can remove) must alone
    // exceed the share of the quota `maintain` disarms below, with 1 MiB to spare: at a
    // NOSPACE reached with less, this test defragments, disarms and writes on.
    let limit = quota / 100 * etcd_setup::day2::maintain::RECOVERED_PERCENT;
    let live_needed = limit + (1 << 20);
    let mut written = 0usize;
    let mut refills = 0;
    loop {
        match client.put(&format!("fill/{written:04}"), &value) {
            Ok(()) => written += 1,
            Err(e) if e.kind == ErrorKind::NoSpace => {
                if (written * value_len) as u64 >= live_needed {
                    break;
                }
                refills += 1;
                assert!(
                    refills < 20,
                    "{written} puts, still NOSPACE below {live_needed}"
                );
                client
                    .defrag(&c.client_url(0), Duration::from_secs(60))
                    .unwrap();
                client.alarm_disarm().unwrap();
            }
            Err(e) => panic!("{e}"),
        }
        assert!(written < 1000, "no NOSPACE after {written} puts");
    }
    println!(
        "{version}: NOSPACE with {:.1} MiB of live values after {refills} refills \
         ({:.1} MiB needed to stay above {:.1} MiB)",
        (written * value_len) as f64 / 1048576.0,
        live_needed as f64 / 1048576.0,
        limit as f64 / 1048576.0
    );
    let alarms = client.alarm_list().unwrap();
    assert!(
        alarms.iter().any(|a| a.kind == AlarmKind::NoSpace),
        "{alarms:?}"
    );
    let before = client.endpoint_status().unwrap()[0].db_size;
    let health = etcd_setup::cluster::health::check(metrics, Duration::from_secs(2));
    let space = etcd_setup::status::data::read_space(metrics, Duration::from_secs(2)).unwrap();
    println!("{version} at NOSPACE: /health {health:?}; /metrics {space:?}");
    assert_eq!(space.quota, quota);
    assert!(space.quota_used_percent >= 95, "{space:?}");
    assert_eq!(
        etcd_setup::status::data::alarms_in(&health, Some(&space)),
        ["NOSPACE"],
        "{health:?}"
    );

    let out = run(&["maintain", "--config", cfg.to_str().unwrap()]);
    let (so, se) = text(&out);
    println!("full: exit {:?}\n{so}{se}", out.status.code());
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(
        se.starts_with("etcd-nospace: space did not come back"),
        "{se}"
    );
    assert!(client
        .alarm_list()
        .unwrap()
        .iter()
        .any(|a| a.kind == AlarmKind::NoSpace));

    let del = Command::new(c.etcdctl())
        .env_clear()
        .env("ETCDCTL_API", "3")
        .args([
            &format!("--endpoints={}", c.client_url(0)),
            "del",
            "--prefix",
            "fill/",
        ])
        .output()
        .unwrap();
    assert!(
        del.status.success(),
        "{}",
        String::from_utf8_lossy(&del.stderr)
    );
    let out = run(&["maintain", "--config", cfg.to_str().unwrap()]);
    let (so, se) = text(&out);
    println!("after deleting: exit {:?}\n{so}{se}", out.status.code());
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    assert!(so.contains("disarmed NOSPACE"), "{so}");
    assert!(client.alarm_list().unwrap().is_empty());
    client.put("after", "works").unwrap();
    let after = client.endpoint_status().unwrap()[0].db_size;
    println!(
        "{version}: NOSPACE after {written} puts of 96 KiB into a 16 MiB quota: db {} -> {} bytes",
        before, after
    );
    assert!(after < before / 2, "{before} -> {after}");
    let health = etcd_setup::cluster::health::check(metrics, Duration::from_secs(2));
    assert_eq!(health, etcd_setup::cluster::health::Health::Healthy);
}

#[test]
fn nospace_is_recovered_only_when_space_came_back_3_5() {
    nospace_is_recovered_only_when_space_came_back("3.5.16");
}

#[test]
fn nospace_is_recovered_only_when_space_came_back_3_4() {
    nospace_is_recovered_only_when_space_came_back("3.4.23");
}

/// The corruption-check lines of etcd's environment file: 3.4.23 and 3.5.1, which lack
/// the compaction hash check, warn about that variable and start; 3.5.16 takes both.
#[test]
fn corruption_check_variables_start_every_release() {
    for (version, knows_hash_check) in [("3.4.23", false), ("3.5.1", false), ("3.5.16", true)] {
        let bin = support::etcd::release(version).join("etcd");
        let dir = scratch();
        // Two free ports, both listeners held until both are known: one released before
        // the other is bound may come back as the same port (seen once under load: etcd
        // then fails to bind its second listener).
        let bound = [(); 2].map(|()| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        let [cp, pp] = bound.each_ref().map(|l| l.local_addr().unwrap().port());
        drop(bound);
        let mut child = Command::new(&bin)
            .env_clear()
            .env("ETCD_DATA_DIR", dir.path().join("d"))
            .env("ETCD_LISTEN_CLIENT_URLS", format!("http://127.0.0.1:{cp}"))
            .env(
                "ETCD_ADVERTISE_CLIENT_URLS",
                format!("http://127.0.0.1:{cp}"),
            )
            .env("ETCD_LISTEN_PEER_URLS", format!("http://127.0.0.1:{pp}"))
            .env(
                "ETCD_INITIAL_ADVERTISE_PEER_URLS",
                format!("http://127.0.0.1:{pp}"),
            )
            .env(
                "ETCD_INITIAL_CLUSTER",
                format!("default=http://127.0.0.1:{pp}"),
            )
            .env("ETCD_QUOTA_BACKEND_BYTES", "2147483648")
            .env("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "true")
            .env("ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED", "true")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut lines = Vec::new();
            for l in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let ready = l.contains("serving client") || l.contains("ready to serve client");
                lines.push(l);
                if ready {
                    let _ = tx.send(lines.clone());
                }
            }
            let _ = tx.send(lines);
        });
        let lines = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let log = lines.join("\n");
        assert!(
            log.contains("serving client") || log.contains("ready to serve client"),
            "{version} did not start:\n{log}"
        );
        let warned = log.contains("unrecognized environment variable")
            && log.contains("ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED");
        assert_eq!(warned, !knows_hash_check, "{version}:\n{log}");
        assert!(
            log.contains("initial-corrupt-check")
                || log.contains("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK"),
            "{version}:\n{log}"
        );
    }
}

/// The releases a Kubernetes ISO carries today, built from etcd's own modules: the
/// release read from the installed binary (`etcd --version`, what a start whose caller
/// does not know it asks), the variables rendered for it, and etcd started with them has
/// both corruption checks on and calls no variable unrecognized. 3.7 only logs the 3.5
/// spelling (`ETCD_EXPERIMENTAL_*`) as unrecognized and runs without either check, and 3.6
/// refuses both spellings at once, so each release must get its own.
#[test]
fn each_release_gets_corruption_checks_it_honours_3_5_33_3_6_16_3_7_3() {
    for version in ["3.5.33", "3.6.16", "3.7.3"] {
        let bin = support::etcd::release(version).join("etcd");
        let release = etcd_setup::member::service::installed_release(&bin);
        assert_eq!(
            release.map(|v| v.to_string()).as_deref(),
            Some(version),
            "{}",
            bin.display()
        );
        let flags = etcd_setup::member::unit::release_flags(release);
        let dir = scratch();
        let bound = [(); 2].map(|()| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        let [cp, pp] = bound.each_ref().map(|l| l.local_addr().unwrap().port());
        drop(bound);
        let client = format!("http://127.0.0.1:{cp}");
        let mut cmd = Command::new(&bin);
        cmd.env_clear()
            .env("ETCD_DATA_DIR", dir.path().join("d"))
            .env("ETCD_LISTEN_CLIENT_URLS", &client)
            .env("ETCD_ADVERTISE_CLIENT_URLS", &client)
            .env("ETCD_LISTEN_PEER_URLS", format!("http://127.0.0.1:{pp}"))
            .env(
                "ETCD_INITIAL_ADVERTISE_PEER_URLS",
                format!("http://127.0.0.1:{pp}"),
            )
            .env(
                "ETCD_INITIAL_CLUSTER",
                format!("default=http://127.0.0.1:{pp}"),
            );
        for (key, value) in flags {
            cmd.env(key, value);
        }
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut lines = Vec::new();
            for l in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let ready = l.contains("serving client") || l.contains("ready to serve client");
                lines.push(l);
                if ready {
                    let _ = tx.send(lines.clone());
                }
            }
            let _ = tx.send(lines);
        });
        let lines = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let log = lines.join("\n");
        let metrics = if log.contains("serving client") || log.contains("ready to serve client") {
            let addr: std::net::SocketAddr = format!("127.0.0.1:{cp}").parse().unwrap();
            let reader = etcd_setup::cluster::health::get_metrics(addr, Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("{version}: /metrics: {e}"));
            use std::io::BufRead;
            reader
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            String::new()
        };
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            !metrics.is_empty(),
            "{version} did not start with {flags:?}:\n{log}"
        );
        assert!(
            !log.contains("unrecognized environment variable"),
            "{version} with {flags:?}:\n{log}"
        );
        if version.starts_with("3.5.") {
            for field in [
                "\"initial-corrupt-check\":true",
                "\"compact-check-time-enabled\":true",
            ] {
                assert!(
                    log.contains(field),
                    "{version}: no {field} with {flags:?}:\n{log}"
                );
            }
        } else {
            for gate in ["InitialCorruptCheck", "CompactHashCheck"] {
                let on = metrics.lines().any(|l| {
                    l.starts_with("etcd_server_feature_enabled{")
                        && l.contains(&format!("name=\"{gate}\""))
                        && l.ends_with(" 1")
                });
                assert!(on, "{version}: feature gate {gate} not on with {flags:?}");
            }
        }
        println!("etcd {version} (read from the binary): {flags:?}: both corruption checks on, no variable unrecognized");
    }
}

/// `snapshot.prune = "move-aside"` keeps the pruned snapshot in `pruned/`; a copied
/// `member/snap/db` (no SHA-256 trailer) is refused by restore, and restored with
/// `--skip-hash-check`.
#[test]
fn pruned_snapshots_move_aside_and_a_copied_db_restores_with_skip_hash_check() {
    let mut c = Cluster::start("3.5.16", 1, "tok-prune");
    let dir = scratch();
    let cfg = config(
        &c,
        0,
        dir.path(),
        &format!(
            "[snapshot]\ndir = \"{}/snaps\"\nretain = 1\nprune = \"move-aside\"\n",
            dir.path().display()
        ),
    );
    let state = dir.path().join("state");
    let client = c.client();
    client.put("kept", "yes").unwrap();
    assert_eq!(snapshot(&cfg, &state).status.code(), Some(0));
    client.put("more", "yes").unwrap();
    let out = snapshot(&cfg, &state);
    let (so, _) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}");
    assert!(so.contains("(moved to "), "{so}");
    let snaps = dir.path().join("snaps");
    assert_eq!(snapshots_in(&snaps).len(), 1);
    assert_eq!(snapshots_in(&snaps.join("pruned")).len(), 1);

    c.kill(0);
    let db = dir.path().join("copied.db");
    std::fs::copy(c.members[0].data_dir.join("member/snap/db"), &db).unwrap();
    let restore = |extra: &[&str]| {
        let mut args = vec![
            "restore",
            db.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "--no-systemd",
            "--run-dir",
            dir.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let out = restore(&[]);
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{se}");
    assert!(se.starts_with("snapshot-corrupt: "), "{se}");
    assert!(se.contains("--skip-hash-check"), "{se}");
    let out = restore(&["--skip-hash-check"]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    assert!(so.contains("there was no old data dir"), "{so}");
    c.members[0].data_dir = dir.path().join("data");
    let initial = c.initial_cluster_arg();
    c.launch(0, &initial, "new");
    c.await_ready(0);
    assert_eq!(c.client().get("more").unwrap(), Some(b"yes".to_vec()));
}

// ---- restore on real disks: mount points, links, kills, full disks, trailers, clusters

/// A tmpfs mounted at a path for one test, unmounted when dropped (also when the test
/// fails: the unwinding drops it), lazily so a process still inside cannot keep it.
struct Mounted(PathBuf);

impl Mounted {
    fn tmpfs(at: &Path, size: &str) -> Mounted {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755")])
            .arg("tmpfs")
            .arg(at)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount tmpfs at {}: {:?}",
            at.display(),
            out
        );
        Mounted(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Whether `path` is a mount point in this process's mount table.
fn is_mount_point(path: &Path) -> bool {
    let real = std::fs::canonicalize(path).unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(real.to_str().unwrap()))
}

/// `etcd-setup restore FILE --config CFG --no-systemd` with `extra` arguments and
/// `env` variables.
fn restore_with(
    file: &Path,
    cfg: &Path,
    run_dir: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Output {
    Command::new(BIN)
        .arg("restore")
        .arg(file)
        .arg("--config")
        .arg(cfg)
        .arg("--no-systemd")
        .arg("--run-dir")
        .arg(run_dir)
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Names in `dir` that contain `part`.
fn names_with(dir: &Path, part: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(part))
        .collect();
    v.sort();
    v
}

/// A one-member cluster with `keys` keys, a snapshot of it by `etcd-setup snapshot`, and
/// the member killed (the cluster is lost); the config and the snapshot file.
fn lost_cluster_with_a_snapshot(
    version: &str,
    token: &str,
    dir: &Path,
    keys: usize,
) -> (Cluster, PathBuf, PathBuf) {
    let mut c = Cluster::start(version, 1, token);
    let cfg = config(
        &c,
        0,
        dir,
        &format!("[snapshot]\ndir = \"{}/snaps\"\n", dir.display()),
    );
    let client = c.client();
    for i in 0..keys {
        client
            .put(&format!("key/{i}"), &format!("value {i}"))
            .unwrap();
    }
    let state = dir.join("state");
    let out = snapshot(&cfg, &state);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let file = PathBuf::from(record(&state)["last"]["file"].as_str().unwrap());
    c.kill(0);
    (c, cfg, file)
}

/// etcd started once with --force-new-cluster on `data` (systemd's part on a node) has
/// key/0..keys.
fn assert_restored(c: &mut Cluster, data: &Path, keys: usize) {
    c.members[0].data_dir = data.to_path_buf();
    let initial = c.initial_cluster_arg();
    c.extra = vec!["--force-new-cluster".into()];
    c.launch(0, &initial, "new");
    c.await_ready(0);
    c.extra.clear();
    let client = c.client();
    for i in 0..keys {
        assert_eq!(
            client.get(&format!("key/{i}")).unwrap(),
            Some(format!("value {i}").into_bytes())
        );
    }
}

/// The data dir is its own volume (a tmpfs mounted there): the restore happens inside
/// it — staging there, the old `member/` moved to `.before-restore-*` there, the
/// restored one in place — the mount stays, nothing lands on the parent disk; a
/// symlinked data dir is refused naming its target, and nothing changes.
#[test]
fn restore_onto_a_mounted_data_dir_stays_inside_it_and_a_linked_one_is_refused() {
    let dir = scratch();
    let (mut c, cfg, file) = lost_cluster_with_a_snapshot("3.5.16", "tok-mount", dir.path(), 20);
    let data = dir.path().join("data");

    // A link to the real folder: refused, both untouched.
    let real = dir.path().join("real-data");
    std::fs::create_dir_all(real.join("member")).unwrap();
    std::fs::write(real.join("member/old-marker"), "old").unwrap();
    std::os::unix::fs::symlink(&real, &data).unwrap();
    let out = restore_with(&file, &cfg, dir.path(), &[], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(se.starts_with("restore-failed: "), "{se}");
    assert!(
        se.contains(&format!(
            "{} (etcd.data_dir) is a symbolic link to {}",
            data.display(),
            real.display()
        )),
        "{se}"
    );
    assert!(std::fs::symlink_metadata(&data)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read_to_string(real.join("member/old-marker")).unwrap(),
        "old"
    );
    assert_eq!(names_with(dir.path(), ".restoring-"), Vec::<String>::new());
    std::fs::remove_file(&data).unwrap();

    // The data dir a mount point, with old data.
    let _mount = Mounted::tmpfs(&data, "512m");
    std::fs::create_dir_all(data.join("member")).unwrap();
    std::fs::write(data.join("member/old-marker"), "old").unwrap();
    let out = restore_with(&file, &cfg, dir.path(), &[], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    assert!(
        is_mount_point(&data),
        "the mount at {} is gone",
        data.display()
    );
    let aside = names_with(&data, ".before-restore-");
    assert_eq!(aside.len(), 1, "{aside:?}");
    let aside = data.join(&aside[0]);
    assert_eq!(
        std::fs::read_to_string(aside.join("member/old-marker")).unwrap(),
        "old"
    );
    assert!(
        so.contains(&format!("old data dir moved to {}", aside.display())),
        "{so}"
    );
    assert!(!data.join("member/old-marker").exists());
    assert_eq!(names_with(&data, "restoring"), Vec::<String>::new());
    // Nothing beside the mount on the parent disk.
    assert_eq!(names_with(dir.path(), "data."), Vec::<String>::new());
    assert_restored(&mut c, &data, 20);
}

/// A restore killed (SIGKILL, the test fixtures' kill point) after its restore into the
/// staging folder, and another between its two renames; a staging folder of the old
/// unsuffixed name beside them: the rerun removes every staging folder (ours, not data),
/// says where the old data went (the `.before-restore-*` of the killed attempt), and
/// leaves no staging behind. On 3.4.23, whose etcdctl restores.
#[cfg(feature = "test-fixtures")]
#[test]
fn a_killed_restore_leaves_nothing_and_the_rerun_says_where_the_old_data_is() {
    let dir = scratch();
    let (mut c, cfg, file) = lost_cluster_with_a_snapshot("3.4.23", "tok-kill", dir.path(), 10);
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("member")).unwrap();
    std::fs::write(data.join("member/old-marker"), "old").unwrap();
    // What an earlier version's killed attempt left.
    let old_style = dir.path().join("data.restoring-20261201T101500Z");
    std::fs::create_dir_all(old_style.join("member/snap")).unwrap();
    std::fs::write(old_style.join("member/snap/db"), vec![0u8; 4096]).unwrap();

    let killed = restore_with(
        &file,
        &cfg,
        dir.path(),
        &[],
        &[("ETCD_SETUP_KILL_AT", "restore-staged")],
    );
    assert_eq!(
        killed.status.code(),
        None,
        "not killed: {:?}",
        text(&killed)
    );
    // The old name removed; the killed attempt's staging, with its restored member, left.
    assert!(!old_style.exists());
    let staged = names_with(dir.path(), "data.restoring-");
    assert_eq!(staged.len(), 1, "{staged:?}");
    assert!(dir.path().join(&staged[0]).join("data/member").is_dir());
    assert_eq!(
        std::fs::read_to_string(data.join("member/old-marker")).unwrap(),
        "old"
    );

    let killed = restore_with(
        &file,
        &cfg,
        dir.path(),
        &[],
        &[("ETCD_SETUP_KILL_AT", "restore-between-renames")],
    );
    assert_eq!(
        killed.status.code(),
        None,
        "not killed: {:?}",
        text(&killed)
    );
    assert!(!data.exists());
    assert!(!dir.path().join(&staged[0]).exists());
    assert_eq!(names_with(dir.path(), "data.restoring-").len(), 1);
    let aside = names_with(dir.path(), "data.before-restore-");
    assert_eq!(aside.len(), 1, "{aside:?}");
    let aside = dir.path().join(&aside[0]);
    assert_eq!(
        std::fs::read_to_string(aside.join("member/old-marker")).unwrap(),
        "old"
    );
    std::fs::create_dir_all(old_style.join("member/snap")).unwrap();

    let out = restore_with(&file, &cfg, dir.path(), &[], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    assert!(
        so.contains(&format!("had moved it to {}", aside.display())),
        "{so}"
    );
    assert!(
        se.contains("removed ") && se.contains("data.restoring-20261201T101500Z"),
        "{se}"
    );
    assert_eq!(names_with(dir.path(), "restoring"), Vec::<String>::new());
    assert_eq!(names_with(dir.path(), "data.before-restore-").len(), 1);
    // 3.4's snapshot is read as this cluster's: its members hold this member's ID.
    assert!(
        !se.contains("another cluster") && !se.contains("cannot tell"),
        "{se}"
    );
    assert_restored(&mut c, &data, 10);
}

/// A disk too small for the restored member (etcd preallocates a 64 MiB WAL): `disk-full`
/// naming the data dir's disk, not `restore-failed`, and no staging left to fill it
/// further, run after run; beside the data dir and inside a mounted one alike.
#[test]
fn a_full_disk_is_disk_full_and_every_attempt_cleans_its_staging() {
    let dir = scratch();
    let (_c, cfg, file) = lost_cluster_with_a_snapshot("3.5.16", "tok-full", dir.path(), 5);
    let data = dir.path().join("data");
    // The data dir's parent is a small disk: the restore stages beside the data dir there.
    let small = dir.path().join("small");
    let _small = Mounted::tmpfs(&small, "40m");
    let text_cfg = std::fs::read_to_string(&cfg).unwrap().replace(
        &format!("data_dir = \"{}\"", data.display()),
        &format!("data_dir = \"{}/data\"", small.display()),
    );
    let small_cfg = dir.path().join("small.toml");
    std::fs::write(&small_cfg, text_cfg).unwrap();
    std::fs::create_dir_all(small.join("data/member")).unwrap();
    for _ in 0..3 {
        let out = restore_with(&file, &small_cfg, dir.path(), &[], &[]);
        let (so, se) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{so}{se}");
        assert!(se.starts_with("disk-full: the disk holding "), "{se}");
        assert!(se.contains(&small.display().to_string()), "{se}");
        assert_eq!(names_with(&small, "restoring"), Vec::<String>::new());
        assert!(small.join("data/member").is_dir());
    }
    // The data dir itself a small volume: the same inside it.
    let _data = Mounted::tmpfs(&data, "40m");
    std::fs::create_dir_all(data.join("member")).unwrap();
    let out = restore_with(&file, &cfg, dir.path(), &[], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(se.starts_with("disk-full: the disk holding "), "{se}");
    assert!(se.contains(&data.display().to_string()), "{se}");
    assert_eq!(names_with(&data, "restoring"), Vec::<String>::new());
    assert_eq!(names_with(&data, "before-restore"), Vec::<String>::new());
    assert!(data.join("member").is_dir());
}

/// `--skip-hash-check` lets a file without a trailer pass, not a damaged one with it: a
/// bit-flipped `etcdctl snapshot save` file is `snapshot-corrupt` with it too, and the
/// data dir is untouched.
#[test]
fn skip_hash_check_still_checks_a_trailer_that_is_there() {
    let dir = scratch();
    let (_c, cfg, file) = lost_cluster_with_a_snapshot("3.5.16", "tok-trailer", dir.path(), 5);
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("member")).unwrap();
    std::fs::write(data.join("member/old-marker"), "old").unwrap();
    let bad = dir.path().join("bad.db");
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x01;
    std::fs::write(&bad, bytes).unwrap();
    let out = restore_with(&bad, &cfg, dir.path(), &["--skip-hash-check"], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(se.starts_with("snapshot-corrupt: "), "{se}");
    assert!(se.contains("trailer does not match"), "{se}");
    assert_eq!(
        std::fs::read_to_string(data.join("member/old-marker")).unwrap(),
        "old"
    );
    assert_eq!(names_with(dir.path(), "data."), Vec::<String>::new());
}

/// `restore FILE` restores what it checked (issue 38: FILE swapped by another user
/// between the checks and `etcdutl snapshot restore` was restored unchecked): a FILE in a
/// folder group or others may write (also when a link leads there), or a symbolic link,
/// is refused before anything changes; otherwise FILE is copied once into a root-only scratch folder of
/// snapshot.dir, which is checked, restored and removed (the copy is said, and gone).
#[test]
fn restore_file_checks_and_restores_a_private_copy_and_refuses_a_file_others_could_swap() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch();
    let mut c = Cluster::start("3.5.16", 1, "tok-copy");
    c.client().put("key/0", "value 0").unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    let file = open.join("snap.db");
    c.client()
        .snapshot_save(&c.client_url(0), &file, Duration::from_secs(30))
        .unwrap();
    c.kill(0);
    let cfg = config(&c, 0, dir.path(), "");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o775)).unwrap();
    // The configured data dir (under `dir`), with old data to be moved aside.
    let data = dir.path().join("data");
    let marker = data.join("member/marker");
    std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(&marker, "old").unwrap();
    let out = restore_with(&file, &cfg, dir.path(), &[], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(
        se.starts_with(&format!(
            "restore-failed: {}: the folder {} may be written by its group (mode 0775); \
             another user could have put another file at its name",
            file.display(),
            open.display()
        )),
        "{se}"
    );
    // Reached through a link to a folder that is fine, inside one that is not.
    let inner = open.join("inner");
    std::fs::create_dir(&inner).unwrap();
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(&file, inner.join("snap.db")).unwrap();
    let via = dir.path().join("via");
    std::os::unix::fs::symlink(&inner, &via).unwrap();
    let out = restore_with(&via.join("snap.db"), &cfg, dir.path(), &[], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(
        se.contains(&format!(
            "the folder {} may be written by its group (mode 0775)",
            open.display()
        )),
        "{se}"
    );
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = restore_with(&open.join("absent.db"), &cfg, dir.path(), &[], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(
        se.starts_with(&format!(
            "restore-failed: {}: no such file; nothing was changed",
            open.join("absent.db").display()
        )),
        "{se}"
    );
    let out = restore_with(&link, &cfg, dir.path(), &[], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(se.contains("it is a symbolic link"), "{se}");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "old",
        "data changed"
    );

    let out = restore_with(&file, &cfg, dir.path(), &["--cluster-check"], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    let copy = so
        .lines()
        .find_map(|l| l.strip_prefix("its copy ")?.strip_suffix(" is removed"))
        .unwrap_or_else(|| panic!("no copy said: {so}"));
    assert!(
        copy.contains("/.backup-scratch/") && copy.ends_with("/snap.db"),
        "{so}"
    );
    assert!(!Path::new(copy).exists(), "{copy} left behind");
    assert!(!marker.exists(), "not restored: {so}");
    assert!(so.contains("old data dir moved to"), "{so}");
}

/// A snapshot of another cluster: restored with a warning naming both clusters; refused
/// as `cluster-mismatch` with `--cluster-check` — by the members it holds (other
/// addresses: another cluster; the same addresses with other member IDs, as another
/// token gives: not shown to be this one), and by a name carrying its cluster ID; a
/// snapshot of this cluster passes `--cluster-check` without a word.
#[test]
fn a_snapshot_of_another_cluster_is_warned_about_and_refused_with_cluster_check() {
    let dir = scratch();
    let mut c = Cluster::start("3.5.16", 1, "tok-theirs");
    let theirs = c.client().member_list().unwrap().header.cluster_id;
    c.client().put("key/0", "value 0").unwrap();
    let file = dir.path().join("theirs.db");
    let out = Command::new(c.etcdctl())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", c.client_url(0)))
        .args(["snapshot", "save"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    c.kill(0);
    let own_cfg = config(&c, 0, dir.path(), "");
    let own_text = std::fs::read_to_string(&own_cfg).unwrap();
    let variant = |name: &str, from: &str, to: &str| {
        let path = dir.path().join(name);
        assert!(own_text.contains(from), "{own_text}");
        std::fs::write(&path, own_text.replace(from, to)).unwrap();
        path
    };
    let ip = c.members[0].ip.to_string();
    let other_ip = {
        let mut o = c.members[0].ip.octets();
        o[3] = 9;
        std::net::Ipv4Addr::from(o).to_string()
    };
    let cases = [
        // The same addresses, another token: every member ID differs.
        (
            variant("token.toml", "\"tok-theirs\"", "\"tok-ours\""),
            "tok-ours",
            ip.clone(),
            "may be of another cluster",
        ),
        // Other addresses: nothing in common.
        (
            variant("addresses.toml", &ip, &other_ip),
            "tok-theirs",
            other_ip.clone(),
            "is a snapshot of another cluster",
        ),
    ];
    let peer_port = c.peer_port;
    for (cfg, token, ip, says) in &cases {
        let configured = vec![(
            c.members[0].name.clone(),
            format!("http://{ip}:{peer_port}"),
        )];
        let ours = etcd_setup::cluster::etcd::cluster_id(&configured, token);
        let out = restore_with(&file, cfg, dir.path(), &["--cluster-check"], &[]);
        let (so, se) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{so}{se}");
        assert!(se.starts_with("cluster-mismatch: "), "{se}");
        assert!(se.contains(says), "{se}");
        assert!(
            se.contains(&format!("cluster {theirs} by those members")),
            "{se}"
        );
        assert!(
            se.contains(&format!("this configuration's cluster {ours} ")),
            "{se}"
        );
        assert!(!dir.path().join("data").exists());
    }
    // Named for a cluster as `etcd-setup snapshot` names it: the name is a hint, the
    // members decide (issue 38: another cluster's snapshot under this cluster's name was
    // restored). Named for its own cluster, and named for this configuration's.
    let ours = etcd_setup::cluster::etcd::cluster_id(
        &[(
            c.members[0].name.clone(),
            format!("http://{other_ip}:{peer_port}"),
        )],
        "tok-theirs",
    );
    for (id, says) in [
        (
            theirs,
            format!("its name says cluster {theirs}, which is not proof"),
        ),
        (
            ours,
            format!("its name says cluster {ours}, this configuration's, which is not proof"),
        ),
    ] {
        let named = dir.path().join(format!(
            "etcd-snapshot-{:016x}-m1-20261201T101500.000Z-rev2.db",
            id.0
        ));
        std::fs::copy(&file, &named).unwrap();
        let out = restore_with(&named, &cases[1].0, dir.path(), &["--cluster-check"], &[]);
        let (so, se) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{so}{se}");
        assert!(se.starts_with("cluster-mismatch: "), "{se}");
        assert!(se.contains("is a snapshot of another cluster"), "{se}");
        assert!(se.contains(&says), "{se}");
        assert!(!dir.path().join("data").exists());
        std::fs::remove_file(&named).unwrap();
    }

    // Without the check: restored, with the warning.
    let out = restore_with(&file, &cases[1].0, dir.path(), &[], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    assert!(
        se.contains("warning: ") && se.contains(&format!("cluster {theirs} by those members")),
        "{se}"
    );

    // Its own cluster's snapshot passes the check, without a word.
    std::fs::rename(dir.path().join("data"), dir.path().join("restored-once")).unwrap();
    let out = restore_with(&file, &own_cfg, dir.path(), &["--cluster-check"], &[]);
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    assert!(!se.contains("warning"), "{se}");
}
