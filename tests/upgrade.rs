//! `etcd_setup::day2::upgrade` against real etcd on loopback: three members of Debian's 3.4.23
//! upgraded to 3.5.16 by three threads at once go one at a time through the lock in etcd,
//! the leader last, and end on cluster version 3.5 with their keys; three of 3.5.33 go the
//! same way to 3.6.16, and to 3.7.3, each turn taking a 3.6 raft snapshot first (real
//! builds of etcd's Go modules; without it 3.7.3 panics on 3.5's WAL entries and is rolled
//! back); a release whose `etcd`
//! exits at once is rolled back to the old binaries, which run healthy; a two-member
//! cluster is refused. etcd is a child process here (the [`Service`] the node's systemd
//! is on a VM); everything else is the code `etcd-setup upgrade` runs.
mod support;

use etcd_setup::cluster::health;
use etcd_setup::cluster::lifecycle::Node;
use etcd_setup::day2::upgrade::{self, beside, rules, Service};
use etcd_setup::member::service::OneShot;
use etcd_setup::reason::{Failure, ReasonCode};
use etcd_setup::road::archive::{Extracted, Policy};
use etcd_setup::shared::advisory::Version;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use support::etcd::Cluster;

const WAIT: Duration = Duration::from_secs(60);

/// One member run from its own install folder, as etcd.service runs `install.dir/etcd`.
struct ChildEtcd {
    install: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Mutex<Option<Child>>,
}

impl ChildEtcd {
    fn new(c: &Cluster, i: usize, install: &Path) -> ChildEtcd {
        let (client, peer) = (c.client_url(i), c.peer_url(i));
        let m = &c.members[i];
        let args = vec![
            "--logger=zap".to_string(),
            format!("--name={}", m.name),
            format!("--data-dir={}", m.data_dir.display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster={}", c.initial_cluster_arg()),
            "--initial-cluster-state=new".into(),
            format!("--initial-cluster-token={}", c.token),
            "--heartbeat-interval=50".into(),
            "--election-timeout=500".into(),
        ];
        ChildEtcd {
            install: install.to_path_buf(),
            args,
            log: install.with_extension("log"),
            child: Mutex::new(None),
        }
    }
}

impl Service for ChildEtcd {
    fn stop(&self) -> Result<(), Failure> {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
        Ok(())
    }

    fn start(&self) -> Result<(), Failure> {
        self.start_once(&[])
    }

    /// The one-shot flags as etcd's own (etcd.service gets them from a runtime
    /// environment file).
    fn start_once(&self, flags: &[OneShot]) -> Result<(), Failure> {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = Command::new(self.install.join("etcd"));
        cmd.env_clear()
            .args(&self.args)
            .args(flags.iter().map(|f| match f {
                OneShot::ForceNewCluster => "--force-new-cluster",
                OneShot::SnapshotEachEntry => "--snapshot-count=1",
            }))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        // SAFETY: only the async-signal-safe prctl between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Some(nix::sys::signal::Signal::SIGKILL))
                    .map_err(std::io::Error::from)
            });
        }
        let child = spawn(cmd)
            .map_err(|e| Failure::new(ReasonCode::EtcdStartFailed, format!("spawn: {e}")))?;
        *self.child.lock().unwrap() = Some(child);
        Ok(())
    }
}

/// Spawns `cmd` from one thread that lives as long as the test process: the child's
/// parent-death signal belongs to the spawning thread, and the upgrade threads end before
/// the test looks at the cluster they left.
fn spawn(cmd: Command) -> std::io::Result<Child> {
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
        });
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    tx.lock().unwrap().send((cmd, reply)).unwrap();
    answer.recv().unwrap()
}

impl Drop for ChildEtcd {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Member `i` as its node sees itself, with the etcdctl of its install folder.
fn node(c: &Cluster, i: usize, install: &Path) -> Node {
    Node {
        name: c.members[i].name.clone(),
        peer_urls: vec![c.peer_url(i)],
        initial_cluster: c.initial_cluster(),
        token: c.token.clone(),
        client_port: c.client_port,
        client_tls: None,
        data_dir: c.members[i].data_dir.clone(),
        etcdctl: install.join("etcdctl"),
    }
}

/// An install folder holding the binaries of `release_dir`, as `run` left it.
fn install_from(release_dir: &Path, install: &Path) {
    std::fs::create_dir_all(install).unwrap();
    for b in ["etcd", "etcdctl", "etcdutl"] {
        let from = release_dir.join(b);
        if from.is_file() {
            std::fs::copy(&from, install.join(b)).unwrap();
        }
    }
}

/// `tarball` validated and staged inside `install`, as `upgrade` stages the ISO's.
fn staged(tarball: &Path, install: &Path) -> Extracted {
    etcd_setup::road::source::validate_path(
        tarball,
        etcd_setup::shared::config::DEFAULT_ARCHIVE_PATH,
        install,
        &Policy::default(),
    )
    .unwrap_or_else(|f| panic!("{}: {f}", tarball.display()))
    .extracted
}

/// The cluster `c`'s members moved onto child processes run from install folders of
/// release `version` under `c.dir()`.
fn adopt(c: &mut Cluster, version: &str) -> Vec<(PathBuf, ChildEtcd)> {
    let rel = support::etcd::release(version);
    let mut out = Vec::new();
    for i in 0..c.members.len() {
        c.kill(i);
        let install = c.dir().join(format!("opt-{}", c.members[i].name));
        install_from(&rel, &install);
        let svc = ChildEtcd::new(c, i, &install);
        out.push((install, svc));
    }
    for (_, svc) in &out {
        svc.start().unwrap();
    }
    let old = Version::parse(version).unwrap();
    for i in 0..c.members.len() {
        upgrade::confirm(c.client_addr(i), old, WAIT).unwrap();
    }
    out
}

fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

#[test]
fn three_members_started_at_once_upgrade_one_at_a_time_the_leader_last_to_3_5() {
    let mut c = Cluster::start("3.4.23", 3, "upg-roll");
    let nodes = adopt(&mut c, "3.4.23");
    let client = c.client();
    for k in 0..20 {
        client.put(&format!("/k{k}"), &format!("v{k}")).unwrap();
    }
    let tarball = support::inputs::isos().join("etcd-v3.5.16-linux-amd64.tar.gz");
    let t0 = Instant::now();
    roll(&c, &nodes, &tarball, v("3.4.23"), v("3.5.16"));
    let cluster = cluster_version_reaches(&c, "3.5");
    keys_and_voters(&nodes, &c, 20);
    println!(
        "[upgrade] rolling upgrade of 3 members: {:.1} s, cluster version {cluster}",
        t0.elapsed().as_secs_f64()
    );
}

/// Real releases built from etcd's Go modules, the road etcd's guides give: every
/// member on the newest 3.5 patch (3.5.33, over the 3.5.32 floor), then 3.6.16 (over
/// 3.7's 3.6.11 floor), one member at a time, the leader last; the cluster version
/// follows and the keys are read back through the new etcdctl.
///
/// Then what the guides do not say: etcd 3.7.3 panics ("unmarshal should never fail")
/// replaying a WAL entry written by 3.5, and a member upgraded from 3.5 keeps such
/// entries until 3.6 takes its first raft snapshot (every 10,000 applied entries by
/// default). The swap alone rolls that member back: 3.6.16 runs healthy again, nothing
/// lost. The member's turn therefore restarts 3.6 once with `--snapshot-count=1` (the
/// remedy etcd's 3.6 guide gives for old v2store data) until it has a raft snapshot
/// (`upgrade::raft_snapshot`; a restart without the flag fails the step with
/// `upgrade-snapshot-failed`, nothing installed), and 3.7.3 comes up on all three.
#[test]
fn three_members_go_3_5_33_to_3_6_16_and_to_3_7_3_each_3_6_snapshotting_in_its_turn() {
    let mut c = Cluster::start("3.5.33", 3, "upg-road");
    let nodes = adopt(&mut c, "3.5.33");
    let client = c.client();
    for k in 0..20 {
        client.put(&format!("/k{k}"), &format!("v{k}")).unwrap();
    }
    let (v35, v36, v37) = (v("3.5.33"), v("3.6.16"), v("3.7.3"));
    let step = Instant::now();
    roll(
        &c,
        &nodes,
        &support::inputs::isos().join("etcd-v3.6.16-linux-amd64.tar.gz"),
        v35,
        v36,
    );
    let cluster = cluster_version_reaches(&c, "3.6");
    keys_and_voters(&nodes, &c, 20);
    println!(
        "[upgrade] 3.5.33 -> 3.6.16 on 3 members: {:.1} s, cluster version {cluster}",
        step.elapsed().as_secs_f64()
    );

    // 3.7.3 over a follower whose WAL still holds 3.5's entries: rolled back.
    let tarball = support::inputs::isos().join("etcd-v3.7.3-linux-amd64.tar.gz");
    let i = (0..3)
        .find(|&i| {
            let n = node(&c, i, &nodes[i].0);
            let view = upgrade::survey(&n.client(c.client_urls()), &n).unwrap();
            !view.iter().any(|m| m.is_self && m.is_leader)
        })
        .unwrap();
    let (install, svc) = &nodes[i];
    let f = upgrade::swap(
        svc,
        &staged(&tarball, install),
        install,
        c.client_addr(i),
        v37,
        v36,
        Duration::from_secs(20),
        &mut |_| {},
    )
    .unwrap_err();
    assert_eq!(f.code, ReasonCode::UpgradeRolledBack, "{f}");
    let log = std::fs::read_to_string(&svc.log).unwrap();
    assert!(log.contains("unmarshal should never fail"), "{f}");
    // The failure says what the member needs, naming the file and the variable.
    for said in ["ETCD_SNAPSHOT_COUNT=1", "/etc/etcd-setup/etcd.env", "WAL"] {
        assert!(f.message.contains(said), "{said}: {f}");
    }
    assert_eq!(
        health::server_version(c.client_addr(i), Duration::from_secs(3)).unwrap(),
        "3.6.16"
    );
    keys_and_voters(&nodes, &c, 20);
    println!("[upgrade] 3.7.3 over m{}'s 3.5 entries: {f}", i + 1);

    // The agent's remedy when it cannot take: a 3.6 restarted without the one-shot flag
    // (a service that drops it) takes no raft snapshot; the step fails before anything
    // is installed and etcd 3.6.16 runs healthy again.
    let dropped = DropsFlags(svc);
    let n = node(&c, i, install);
    let f = upgrade::raft_snapshot(
        &dropped,
        &n.client(c.client_urls()),
        &c.members[i].data_dir,
        c.client_addr(i),
        v36,
        Duration::from_secs(5),
    )
    .unwrap_err();
    assert_eq!(f.code, ReasonCode::UpgradeSnapshotFailed, "{f}");
    let snap_dir = c.members[i].data_dir.join("member/snap");
    for said in [
        snap_dir.display().to_string(),
        "3.6.16 runs healthy again".into(),
    ] {
        assert!(f.message.contains(&said), "{said}: {f}");
    }
    assert_eq!(
        health::server_version(c.client_addr(i), Duration::from_secs(3)).unwrap(),
        "3.6.16"
    );
    println!("[upgrade] a 3.6 restart that drops --snapshot-count=1: {f}");

    // The turn itself restarts each 3.6 member once with --snapshot-count=1 before its
    // swap (roll -> upgrade::raft_snapshot): 3.7.3 comes up on all three.
    let step = Instant::now();
    roll(&c, &nodes, &tarball, v36, v37);
    let cluster = cluster_version_reaches(&c, "3.7");
    keys_and_voters(&nodes, &c, 20);
    println!(
        "[upgrade] 3.6.16 -> 3.7.3 on 3 members after a 3.6 snapshot: {:.1} s, cluster version {cluster}",
        step.elapsed().as_secs_f64()
    );
}

/// Every member of `nodes` upgraded from `old` to the release in `tarball` by one thread
/// each, all at once, through `take_turn` and `swap`: the turns never overlap and the
/// leader goes when the others run `new`. Each member then serves `new`, its old
/// binaries kept beside.
fn roll(c: &Cluster, nodes: &[(PathBuf, ChildEtcd)], tarball: &Path, old: Version, new: Version) {
    let t0 = Instant::now();
    // (name, turn began, turn ended, led when it began, others all on new then, downtime)
    let turns = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for (i, (install, svc)) in nodes.iter().enumerate() {
            let turns = Arc::clone(&turns);
            s.spawn(move || {
                let node = node(c, i, install);
                let client = node.client(c.client_urls());
                let release = staged(tarball, install);
                let lock = upgrade::take_turn(
                    &client,
                    &node,
                    old,
                    new,
                    Duration::from_secs(300),
                    Duration::from_secs(300),
                    &mut |_| {},
                )
                .unwrap_or_else(|f| {
                    for n in ["m1", "m2", "m3"] {
                        let log = std::fs::read_to_string(c.dir().join(format!("opt-{n}.log")))
                            .unwrap_or_default();
                        let tail: Vec<&str> = log.lines().rev().take(6).collect();
                        eprintln!("--- {n}:\n{}", tail.join("\n"));
                    }
                    panic!("{} at {:?}: {f}", node.name, t0.elapsed())
                });
                let began = t0.elapsed();
                eprintln!("[upgrade] {} takes its turn at {began:?}", node.name);
                let view = upgrade::survey(&client, &node).unwrap();
                let me = view.iter().find(|m| m.is_self).unwrap();
                let others_new = view
                    .iter()
                    .filter(|m| !m.is_self)
                    .all(|m| m.version == Some(new));
                let led = me.is_leader;
                let down = Instant::now();
                if upgrade::needs_raft_snapshot(old, new) {
                    upgrade::raft_snapshot(
                        svc,
                        &client,
                        &c.members[i].data_dir,
                        c.client_addr(i),
                        old,
                        WAIT,
                    )
                    .unwrap_or_else(|f| panic!("{}: {f}", node.name));
                }
                upgrade::swap(
                    svc,
                    &release,
                    install,
                    c.client_addr(i),
                    new,
                    old,
                    WAIT,
                    &mut |_| {},
                )
                .unwrap_or_else(|f| {
                    let log = std::fs::read_to_string(&svc.log).unwrap_or_default();
                    let tail: Vec<&str> = log
                        .lines()
                        .rev()
                        .filter(|l| {
                            l.contains("\"level\":\"") && !l.contains("\"level\":\"info\"")
                                || l.starts_with("panic")
                        })
                        .take(8)
                        .collect();
                    panic!(
                        "{}: {f}\n--- its etcd's log beyond info, newest first:\n{}",
                        node.name,
                        tail.join("\n")
                    )
                });
                let downtime = down.elapsed();
                eprintln!("[upgrade] {} done at {:?}", node.name, t0.elapsed());
                let ended = t0.elapsed();
                drop(lock);
                turns.lock().unwrap().push((
                    node.name.clone(),
                    began,
                    ended,
                    led,
                    others_new,
                    downtime,
                ));
            });
        }
    });
    let mut turns = turns.lock().unwrap().clone();
    turns.sort_by_key(|t| t.1);
    for (name, began, ended, led, _, downtime) in &turns {
        println!(
            "[upgrade] {name}: turn {:.1}-{:.1} s{}, etcd down {} ms",
            began.as_secs_f64(),
            ended.as_secs_f64(),
            if *led { " (leader)" } else { "" },
            downtime.as_millis()
        );
    }
    assert_eq!(turns.len(), 3);
    for w in turns.windows(2) {
        assert!(w[0].2 <= w[1].1, "turns overlap: {turns:?}");
    }
    for t in &turns {
        assert!(!t.3 || t.4, "the leader went before the others: {turns:?}");
    }
    for (i, (install, _)) in nodes.iter().enumerate() {
        let got = health::server_version(c.client_addr(i), Duration::from_secs(3)).unwrap();
        assert_eq!(got, new.to_string());
        assert!(beside::previous_dir(install).join("etcd").is_file());
    }
}

/// Waits, bounded, for the cluster version etcd decides once every member runs the new
/// release (a member just restarted publishes no etcd_cluster_version line until it has
/// one), and says it.
fn cluster_version_reaches(c: &Cluster, minor: &str) -> String {
    let end = Instant::now() + WAIT;
    let cluster = loop {
        let cv = health::cluster_version(c.client_addr(0), Duration::from_secs(3));
        match cv {
            Ok(cv) if cv.starts_with(minor) => break cv,
            Ok(cv) if Instant::now() > end => break cv,
            Err(e) if Instant::now() > end => panic!("no cluster version within {WAIT:?}: {e}"),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(cluster.starts_with(minor), "cluster version {cluster}");
    cluster
}

/// The `n` keys written before the upgrade read back through the first member's new
/// etcdctl, and three voters.
fn keys_and_voters(nodes: &[(PathBuf, ChildEtcd)], c: &Cluster, n: usize) {
    let new_client =
        etcd_setup::cluster::etcd::Client::new(nodes[0].0.join("etcdctl"), c.client_urls(), None);
    for k in 0..n {
        assert_eq!(
            new_client.get(&format!("/k{k}")).unwrap().as_deref(),
            Some(format!("v{k}").as_bytes())
        );
    }
    let list = new_client.member_list().unwrap();
    assert_eq!(list.voters().count(), 3);
}

/// A 3.5.30 layout whose `etcd` is a real ELF that exits at once (`false`).
fn broken_release(dir: &Path) -> PathBuf {
    stub_release(dir, "3.5.30")
}

/// A release layout named for `version` whose `etcd` is a real ELF that exits at once
/// (`false`): the archive pass takes the version from the top folder's name, so this
/// stands in for a release no build of which can be fetched here (3.6).
fn stub_release(dir: &Path, version: &str) -> PathBuf {
    let top = dir.join(format!("pack/etcd-v{version}-linux-amd64"));
    std::fs::create_dir_all(top.join("Documentation")).unwrap();
    let real = support::etcd::release("3.5.30");
    for b in ["etcdctl", "etcdutl"] {
        std::fs::copy(real.join(b), top.join(b)).unwrap();
    }
    let falsy = ["/usr/bin/false", "/bin/false"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .expect("false");
    std::fs::copy(falsy, top.join("etcd")).unwrap();
    std::fs::write(top.join("README.md"), "# etcd that exits\n").unwrap();
    std::fs::write(top.join("Documentation/README.md"), "# docs\n").unwrap();
    let out = dir.join(format!("etcd-v{version}-stub.tar.gz"));
    let st = Command::new("tar")
        .arg("-C")
        .arg(dir.join("pack"))
        .args(["--owner=0", "--group=0", "--numeric-owner", "-czf"])
        .arg(&out)
        .arg(format!("etcd-v{version}-linux-amd64"))
        .status()
        .unwrap();
    assert!(st.success());
    out
}

#[test]
fn a_new_etcd_that_exits_at_once_is_rolled_back_and_the_old_one_runs_healthy() {
    let mut c = Cluster::start("3.5.16", 1, "upg-back");
    let nodes = adopt(&mut c, "3.5.16");
    let (install, svc) = &nodes[0];
    c.client().put("/kept", "yes").unwrap();
    let old_etcd = std::fs::read(install.join("etcd")).unwrap();
    let tarball = broken_release(c.dir());
    let release = staged(&tarball, install);
    let t = Instant::now();
    let f = upgrade::swap(
        svc,
        &release,
        install,
        c.client_addr(0),
        v("3.5.30"),
        v("3.5.16"),
        Duration::from_secs(10),
        &mut |p| println!("[upgrade] {:.1} s: {p}", t.elapsed().as_secs_f64()),
    )
    .unwrap_err();
    assert_eq!(f.code, ReasonCode::UpgradeRolledBack, "{f}");
    assert!(f.message.contains("etcd 3.5.16 was put back"), "{f}");
    assert_eq!(std::fs::read(install.join("etcd")).unwrap(), old_etcd);
    assert_eq!(
        health::server_version(c.client_addr(0), Duration::from_secs(3)).unwrap(),
        "3.5.16"
    );
    assert_eq!(
        health::check(c.client_addr(0), Duration::from_secs(3)),
        health::Health::Healthy
    );
    let client =
        etcd_setup::cluster::etcd::Client::new(install.join("etcdctl"), c.client_urls(), None);
    assert_eq!(client.get("/kept").unwrap().as_deref(), Some(&b"yes"[..]));
    println!("[upgrade] rollback took {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn a_two_member_cluster_is_refused_and_a_downgrade_before_it() {
    let c = Cluster::start("3.4.23", 2, "upg-two");
    let n = node(&c, 0, &c.bin);
    let view = upgrade::survey(&n.client(c.client_urls()), &n).unwrap();
    assert_eq!(view.len(), 2);
    assert!(view
        .iter()
        .all(|m| m.healthy && m.version == Some(v("3.4.23"))));
    let f = rules::cluster(&view, v("3.4.23"), v("3.5.16")).unwrap_err();
    assert_eq!(f.code, ReasonCode::UpgradeTwoMembers, "{f}");
    let f = rules::versions(v("3.4.23"), v("3.4.22")).unwrap_err();
    assert_eq!(f.code, ReasonCode::UpgradeDowngrade);
}

#[test]
fn a_leader_alone_hands_leadership_on_when_its_wait_is_over() {
    let c = Cluster::start("3.5.16", 3, "upg-lead");
    let client = c.client();
    let status = client.endpoint_status().unwrap();
    let leader = status[0].leader;
    let i = status
        .iter()
        .position(|s| s.member_id == leader)
        .expect("the leader answered");
    let n = node(&c, i, &c.bin);
    let t = Instant::now();
    let lock = upgrade::take_turn(
        &n.client(c.client_urls()),
        &n,
        v("3.5.16"),
        v("3.5.30"),
        WAIT,
        Duration::ZERO,
        &mut |turn| {
            if let upgrade::Turn::Waiting(_) = turn {
                panic!("a leader with no wait left waited")
            }
        },
    )
    .unwrap();
    let view = upgrade::survey(&n.client(c.client_urls()), &n).unwrap();
    let me = view.iter().find(|m| m.is_self).unwrap();
    assert!(!me.is_leader, "{} still leads: {view:?}", n.name);
    assert!(view.iter().any(|m| m.is_leader), "no leader: {view:?}");
    drop(lock);
    println!(
        "[upgrade] leadership handed on by {} in {:.1} s",
        n.name,
        t.elapsed().as_secs_f64()
    );
}

/// The release a stub 3.6 tarball names, as `upgrade` reads it from the staged release.
fn stub_3_6(dir: &Path, install: &Path) -> (Extracted, Version) {
    let release = staged(&stub_release(dir, "3.6.5"), install);
    let new = v(&release.version);
    assert_eq!(new, v("3.6.5"));
    (release, new)
}

#[test]
fn a_3_6_release_over_a_3_5_16_cluster_is_refused_naming_every_member_and_the_minimum() {
    // The 3.6 release is a stub whose `etcd` never runs: the refusal comes before anything
    // is stopped.
    let c = Cluster::start("3.5.16", 3, "upg-min");
    let n = node(&c, 0, &c.bin);
    let install = c.dir().join("opt-stub");
    std::fs::create_dir_all(&install).unwrap();
    let (_release, new) = stub_3_6(c.dir(), &install);
    let installed = v("3.5.16");
    assert_eq!(
        rules::versions(installed, new).unwrap(),
        rules::Step::Upgrade
    );
    let client = n.client(c.client_urls());
    let view = upgrade::survey(&client, &n).unwrap();
    let f = rules::cluster(&view, installed, new).unwrap_err();
    assert_eq!(f.code, ReasonCode::UpgradeBelowMinimum, "{f}");
    for name in [
        "m1 runs 3.5.16",
        "m2 runs 3.5.16",
        "m3 runs 3.5.16",
        "3.5.32 or later",
    ] {
        assert!(f.message.contains(name), "{name}: {f}");
    }
    assert!(f.message.contains("newest 3.5 patch first"), "{f}");
    assert_eq!(
        etcd_setup::exit::of(
            etcd_setup::shared::report::Command::Upgrade,
            ReasonCode::UpgradeBelowMinimum
        ),
        etcd_setup::exit::upgrade::REFUSED
    );
    // Asked again under the cluster lock: refused there too, and the lock let go.
    let f = upgrade::take_turn(&client, &n, installed, new, WAIT, WAIT, &mut |_| {})
        .map(drop)
        .unwrap_err();
    assert_eq!(f.code, ReasonCode::UpgradeBelowMinimum, "{f}");
    // Nothing changed: every member still runs 3.5.16, healthy.
    for i in 0..3 {
        assert_eq!(
            health::server_version(c.client_addr(i), Duration::from_secs(3)).unwrap(),
            "3.5.16"
        );
        assert_eq!(
            health::check(c.client_addr(i), Duration::from_secs(3)),
            health::Health::Healthy
        );
    }
    println!("[upgrade] refused: {f}");
}

#[test]
fn a_3_6_stub_over_a_3_5_33_member_passes_the_minimum_and_is_rolled_back() {
    // 3.5.33 is over the 3.5.32 floor: the rules let it through, the road runs to the
    // swap, and the stub 3.6 `etcd`, which cannot run, is rolled back to the real 3.5.33.
    // (That a real 3.6 comes up: three_members_go_3_5_33_to_3_6_16_to_3_7_3_….)
    let mut c = Cluster::start("3.5.33", 1, "upg-min-ok");
    let nodes = adopt(&mut c, "3.5.33");
    let (install, svc) = &nodes[0];
    let n = node(&c, 0, install);
    let (release, new) = stub_3_6(c.dir(), install);
    let installed = v("3.5.33");
    let client = n.client(c.client_urls());
    let view = upgrade::survey(&client, &n).unwrap();
    rules::cluster(&view, installed, new).unwrap();
    let lock = upgrade::take_turn(&client, &n, installed, new, WAIT, WAIT, &mut |_| {}).unwrap();
    let told = Told {
        inner: svc,
        seen: Mutex::new(Vec::new()),
    };
    let f = upgrade::swap(
        &told,
        &release,
        install,
        c.client_addr(0),
        new,
        installed,
        Duration::from_secs(10),
        &mut |_| {},
    )
    .unwrap_err();
    drop(lock);
    assert_eq!(f.code, ReasonCode::UpgradeRolledBack, "{f}");
    assert!(f.message.contains("etcd 3.6.5 did not come up"), "{f}");
    assert_eq!(
        health::server_version(c.client_addr(0), Duration::from_secs(3)).unwrap(),
        "3.5.33"
    );
    // Each start was told the release it runs, so etcd's environment fits it: the stub
    // 3.6 with 3.6's feature gates, the 3.5.33 put back with 3.5's flags.
    let seen = told.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "stop",
            "release 3.6.5",
            "start",
            "stop",
            "release 3.5.33",
            "start"
        ],
        "{seen:?}"
    );
}

/// A [`Service`] that starts etcd without the one-shot flags it is given (the default
/// `start_once`).
struct DropsFlags<'a>(&'a ChildEtcd);

impl Service for DropsFlags<'_> {
    fn stop(&self) -> Result<(), Failure> {
        self.0.stop()
    }
    fn start(&self) -> Result<(), Failure> {
        self.0.start()
    }
}

/// A [`Service`] that says what it was asked, in order.
struct Told<'a> {
    inner: &'a ChildEtcd,
    seen: Mutex<Vec<String>>,
}

impl Service for Told<'_> {
    fn stop(&self) -> Result<(), Failure> {
        self.seen.lock().unwrap().push("stop".into());
        self.inner.stop()
    }
    fn start(&self) -> Result<(), Failure> {
        self.seen.lock().unwrap().push("start".into());
        self.inner.start()
    }
    fn set_release(&self, release: Version) {
        self.seen.lock().unwrap().push(format!("release {release}"));
    }
}
