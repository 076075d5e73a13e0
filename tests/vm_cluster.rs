//! The management server's view of three-node etcd clusters, on booted node VMs.
//!
//! Three VMs share a private layer-2 network of their own (support::net::Hub: unix
//! datagram sockets, no host interface, no other address), each configured by the
//! packaged cloud-config as one member of one new three-member cluster. The platform
//! attaches the Kubernetes ISO to one node after another; a driver polls every node over
//! SSH with `etcd-setup status --format json`, as the management server does, and prints
//! each node's timeline. Then: etcdctl sees three started members and a healthy cluster;
//! `status` against `systemctl is-active etcd` in the guest; etcd made to crash
//! repeatedly on one node. A second cluster has one node whose ISO lacks etcd.

mod support;

use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use support::net::Hub;
use support::vm::{report, unix_now, Image, Remote, Vm, VmSpec, NAT_MAC};

/// Between two ISO inserts, as the platform attaches them one node after another: long
/// enough that the first member is seen waiting for its peers (it reaches etcd's start
/// about 20 s after its insert on three TCG guests sharing two cores).
const INSERT_GAP: Duration = Duration::from_secs(25);
/// How often the driver polls each node (after the previous answer came back).
const POLL_EVERY: Duration = Duration::from_secs(1);

/// One poll's answer, as the management server keeps it.
#[derive(Clone, Debug)]
struct Sample {
    /// Host time the poll's answer arrived.
    at: f64,
    /// `status`'s exit code.
    exit: i32,
    verdict: String,
    phase: String,
    progress: String,
    reason: String,
    message: String,
    restarts: u64,
}

impl Sample {
    fn from_json(at: f64, exit: i32, v: &Value) -> Sample {
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Sample {
            at,
            exit,
            verdict: s("/verdict"),
            phase: s("/phase"),
            progress: s("/progress"),
            reason: s("/reason/code"),
            message: s("/reason/message"),
            restarts: v
                .pointer("/etcd/n_restarts")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        }
    }

    /// Whether the node answered (the poll reached `status` and got its JSON).
    fn answered(&self) -> bool {
        self.verdict != "unreachable"
    }

    fn waiting_for_quorum(&self) -> bool {
        self.phase == "starting" && self.progress.contains("waiting for quorum")
    }

    /// What the timeline shows for this answer; a new entry when it changes.
    fn label(&self) -> String {
        let mut label = format!("{}/{}", self.verdict, self.phase);
        if self.waiting_for_quorum() {
            label.push_str(" (waiting for quorum)");
        }
        if !self.reason.is_empty() {
            label.push_str(&format!(" [{}]", self.reason));
        }
        label
    }
}

/// Every answer of one node, in order; the poller signals each new one.
#[derive(Default)]
struct Samples {
    list: Mutex<Vec<Sample>>,
    added: Condvar,
}

impl Samples {
    fn push(&self, sample: Sample) {
        self.list.lock().unwrap().push(sample);
        self.added.notify_all();
    }
}

/// A node and what the driver saw of it.
struct Node {
    vm: Vm,
    name: String,
    ip: String,
    samples: Arc<Samples>,
}

impl Node {
    fn remote(&self) -> Remote {
        self.vm.remote()
    }

    /// The first answer at or after host time `since` that satisfies `want`, waiting for
    /// the poller at most `limit`.
    fn await_sample(&self, since: f64, limit: Duration, want: impl Fn(&Sample) -> bool) -> Sample {
        let deadline = Instant::now() + limit;
        let mut list = self.samples.list.lock().unwrap();
        loop {
            if let Some(s) = list.iter().find(|s| s.at >= since && want(s)) {
                return s.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let last = &list[list.len().saturating_sub(5)..];
                panic!(
                    "{}: no such status within {} s; last answers: {last:?}",
                    self.name,
                    limit.as_secs()
                );
            }
            // Woken by the poller's next answer.
            list = self.samples.added.wait_timeout(list, left).unwrap().0;
        }
    }

    /// Once a node answered `running`, it must not go back to "in progress": the
    /// management server would take that for a node starting over.
    fn assert_no_step_back(&self) {
        let samples = self.samples.list.lock().unwrap();
        if let Some(first) = samples.iter().position(|s| s.verdict == "running") {
            if let Some(back) = samples[first..].iter().find(|s| s.verdict == "in-progress") {
                panic!("{}: in progress again after running: {back:?}", self.name);
            }
        }
    }

    /// The node's timeline: one line per change of answer, seconds from `zero`.
    fn timeline(&self, zero: f64) -> String {
        let mut out = Vec::new();
        let mut last = String::new();
        for s in self.samples.list.lock().unwrap().iter() {
            let label = s.label();
            if label != last {
                out.push(format!("{:+.1} s {label}", s.at - zero));
                last = label;
            }
        }
        format!("{}: {}", self.name, out.join(" → "))
    }
}

/// Polls one node until `stop`, keeping every answer.
fn poll(remote: Remote, samples: Arc<Samples>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let out = remote.run(Duration::from_secs(30), "etcd-setup status --format json");
        let at = unix_now();
        let exit = out.status.code().unwrap_or(-1);
        let sample = match serde_json::from_slice::<Value>(&out.stdout) {
            Ok(v) => Sample::from_json(at, exit, &v),
            // No answer (SSH or the socket failed): the management server sees that too.
            Err(_) => Sample {
                at,
                exit,
                verdict: "unreachable".into(),
                phase: String::new(),
                progress: String::new(),
                reason: String::new(),
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                restarts: 0,
            },
        };
        samples.push(sample);
        std::thread::sleep(POLL_EVERY);
    }
}

/// A cluster of three booted nodes on their own network, each polled by the driver.
struct Cluster {
    tag: String,
    nodes: Vec<Node>,
    stop: Arc<AtomicBool>,
    pollers: Vec<std::thread::JoinHandle<()>>,
    /// Host time the timelines count from (after boot, before the first insert).
    zero: f64,
    _hub: Hub,
}

impl Cluster {
    fn boot(tag: &str) -> Cluster {
        let image = Image::from_env();
        let hub_dir = std::env::temp_dir().join(format!("etcd-setup-{tag}-{}", std::process::id()));
        let hub = Hub::start(&hub_dir, 3);
        // Named as CloudStack names etcd nodes: cluster, "etcd", index, hex milliseconds.
        let members: Vec<(String, String)> = (1..=3)
            .map(|i| {
                let millis = (unix_now() * 1000.0) as u64 + i;
                (
                    format!("{tag}-etcd-{i}-{millis:x}"),
                    format!("10.88.0.{}", 10 + i),
                )
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|(n, ip)| format!("{n}={}", peer_url(ip)))
            .collect::<Vec<_>>()
            .join(",");
        let started = Instant::now();
        let mut vms = Vec::new();
        for (i, (name, ip)) in members.iter().enumerate() {
            let mac = format!("52:54:00:88:00:{:02x}", i + 1);
            let mut spec = VmSpec::new(name);
            // Three guests on two host cores: one vCPU each.
            spec.cpus = 1;
            spec.memory_mb = 1536;
            spec.network_config = Some(format!(
                "version: 2\n\
                 ethernets:\n\
                 \x20 nat:\n\
                 \x20   match: {{macaddress: \"{NAT_MAC}\"}}\n\
                 \x20   dhcp4: true\n\
                 \x20 lan:\n\
                 \x20   match: {{macaddress: \"{mac}\"}}\n\
                 \x20   addresses: [\"{ip}/24\"]\n"
            ));
            spec.extra_args = hub.nic_args(i, &mac);
            // The platform's template, rendered as the management server renders it:
            // 15 s x 80 attempts = a 20 min ISO wait (and peer wait).
            spec.user_data = support::inputs::cloudstack_config(&support::inputs::CloudStackNode {
                name,
                ip,
                initial_cluster: &initial_cluster,
                wait_time: 15,
                attempts: 80,
                eject: false,
            });
            spec.user_data_as_is = true;
            vms.push(Vm::boot(&image, spec));
        }
        let mut nodes = Vec::new();
        for (mut vm, (name, ip)) in vms.into_iter().zip(members) {
            let to_ssh = vm.wait_ssh(Duration::from_secs(400));
            report(&format!(
                "{name}: SSH after {:.1} s (three booting at once)",
                to_ssh.as_secs_f64()
            ));
            nodes.push(Node {
                vm,
                name,
                ip,
                samples: Arc::new(Samples::default()),
            });
        }
        report(&format!(
            "cluster {tag}: three nodes answer SSH {:.1} s after the first qemu started",
            started.elapsed().as_secs_f64()
        ));
        // What the template wrote: one token for the whole cluster, derived from its
        // initial cluster (so another cluster gets another one), and the ISO wait.
        let token = support::inputs::cloudstack_token(&initial_cluster);
        for n in &nodes {
            let config = n.vm.ssh_ok(
                "timeout 300 sh -c 'until [ -e /etc/etcd-setup/config.toml ]; do sleep 0.5; done'; \
                 cat /etc/etcd-setup/config.toml",
            );
            for line in [
                format!("name = \"{}\"", n.name),
                format!("cluster_token = \"{token}\""),
                format!("initial_cluster = \"{initial_cluster}\""),
                "wait = \"1200s\"".to_string(),
            ] {
                assert!(
                    config.contains(&line),
                    "{}: no `{line}` in:\n{config}",
                    n.name
                );
            }
        }
        report(&format!(
            "cluster {tag}: every member's config.toml (from packaging/cloudstack/etcd-node.yml) has cluster_token {token}"
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let pollers = nodes
            .iter()
            .map(|n| {
                let (remote, samples, stop) = (n.remote(), n.samples.clone(), stop.clone());
                std::thread::spawn(move || poll(remote, samples, stop))
            })
            .collect();
        Cluster {
            tag: tag.to_string(),
            nodes,
            stop,
            pollers,
            zero: unix_now(),
            _hub: hub,
        }
    }

    /// Inserts `iso` into node `i`'s Kubernetes CD-ROM drive; returns the host time.
    fn insert(&mut self, i: usize, iso: &str) -> f64 {
        let at = unix_now();
        self.nodes[i]
            .vm
            .insert_cdrom(&support::inputs::isos().join(iso));
        report(&format!(
            "cluster {}: {iso} inserted into {}",
            self.tag, self.nodes[i].name
        ));
        at
    }

    /// `etcdctl` on node `i` against every member's client URL.
    fn etcdctl(&self, i: usize, args: &str) -> String {
        let endpoints: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("http://{}:2379", n.ip))
            .collect();
        let out = self.nodes[i].vm.ssh(&format!(
            "ETCDCTL_API=3 /opt/bin/etcdctl --dial-timeout=3s --command-timeout=10s --endpoints={} {args} 2>&1",
            endpoints.join(",")
        ));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Cluster {
    /// Stops the pollers and prints every node's timeline, also when the test failed.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for p in self.pollers.drain(..) {
            let _ = p.join();
        }
        for n in &self.nodes {
            report(&format!("timeline {}", n.timeline(self.zero)));
        }
    }
}

fn peer_url(ip: &str) -> String {
    format!("http://{ip}:2380")
}

/// Every node answers `waiting-for-iso` (in progress, exit 3) before any ISO is attached.
fn await_all_waiting_for_iso(c: &Cluster, since: f64) {
    for n in &c.nodes {
        let s = n.await_sample(since, Duration::from_secs(180), |s| {
            s.phase == "waiting-for-iso"
        });
        assert_eq!((s.verdict.as_str(), s.exit), ("in-progress", 3), "{s:?}");
        assert!(
            s.progress.starts_with("waiting for the Kubernetes ISO, "),
            "{}: {s:?}",
            n.name
        );
    }
}

/// Median of `xs` (sorted in place).
fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// `etcd-setup status` against `systemctl is-active etcd`, alternating, timed in the
/// guest; returns the medians in ms.
fn status_against_is_active(node: &Node) -> (f64, f64) {
    let out = node.vm.ssh_ok(
        "for i in $(seq 40); do \
           a=$(date +%s%N); etcd-setup status >/dev/null; b=$(date +%s%N); \
           systemctl is-active etcd >/dev/null; c=$(date +%s%N); \
           echo $((b-a)) $((c-b)); \
         done",
    );
    let (mut ours, mut systemctl) = (Vec::new(), Vec::new());
    for line in out.lines() {
        let mut it = line
            .split_whitespace()
            .map(|x| x.parse::<f64>().unwrap() / 1e6);
        ours.push(it.next().unwrap());
        systemctl.push(it.next().unwrap());
    }
    assert_eq!(ours.len(), 40, "{out}");
    (median(&mut ours), median(&mut systemctl))
}

/// One new three-member cluster: ISOs inserted one after another, every node followed
/// from waiting-for-iso to running; etcdctl's view; status against systemctl; a crash
/// loop on one node.
#[test]
fn three_nodes_form_a_cluster_and_a_crash_loop_is_reported() {
    let mut c = Cluster::boot("c1");
    let zero = c.zero;
    await_all_waiting_for_iso(&c, 0.0);

    let mut inserted = Vec::new();
    for i in 0..3 {
        if i > 0 {
            std::thread::sleep(INSERT_GAP);
        }
        inserted.push(c.insert(i, "k8s-etcd-3.5.1.iso"));
    }
    for (i, n) in c.nodes.iter().enumerate() {
        let s = n.await_sample(inserted[i], Duration::from_secs(600), |s| {
            s.answered() && s.verdict != "in-progress"
        });
        assert_eq!(
            (s.verdict.as_str(), s.exit),
            ("running", 0),
            "{}: {s:?}\n{}",
            n.name,
            n.timeline(zero)
        );
        report(&format!(
            "cluster c1: {} running {:.1} s after its ISO was inserted (poll every {} s)",
            n.name,
            s.at - inserted[i],
            POLL_EVERY.as_secs()
        ));
    }
    for n in &c.nodes {
        n.assert_no_step_back();
    }
    // The first member to start waits for a peer before etcd is ready.
    let first = &c.nodes[0];
    assert!(
        first
            .samples
            .list
            .lock()
            .unwrap()
            .iter()
            .any(Sample::waiting_for_quorum),
        "{} never reported waiting for quorum:\n{}",
        first.name,
        first.timeline(zero)
    );

    // etcd's own view: three started members, all healthy.
    let members: Value =
        serde_json::from_str(&c.etcdctl(0, "member list -w json")).expect("member list JSON");
    let members = members["members"].as_array().expect("members");
    let mut names: Vec<&str> = members
        .iter()
        .map(|m| m["name"].as_str().unwrap_or(""))
        .collect();
    names.sort();
    let want: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, want, "{members:?}");
    for m in members {
        assert!(
            m["clientURLs"].as_array().is_some_and(|u| !u.is_empty()),
            "member not started: {m}"
        );
    }
    let health = c.etcdctl(0, "endpoint health --cluster");
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
    report("cluster c1: etcdctl member list: 3 started; endpoint health --cluster: 3 healthy");

    // The user-data the node got is the rendered template, verbatim, and cloud-init's
    // own schema check accepts it; runcmd (which ran etcd-setup) finished without error.
    let node = &c.nodes[0];
    let got = node
        .vm
        .ssh_ok("sudo cat /var/lib/cloud/instance/user-data.txt");
    assert!(got.contains(&format!("name = \"{}\"", node.name)), "{got}");
    let schema = node
        .vm
        .ssh_ok("sudo cloud-init schema --config-file /var/lib/cloud/instance/user-data.txt 2>&1");
    assert!(schema.contains("Valid cloud-config"), "{schema}");
    let ci = node
        .vm
        .ssh_timeout(Duration::from_secs(120), "cloud-init status --wait --long");
    assert!(
        ci.status.success(),
        "cloud-init: {}",
        String::from_utf8_lossy(&ci.stdout)
    );
    report("cluster c1: packaging/cloudstack/etcd-node.yml as rendered: cloud-init schema valid, cloud-init done");

    // What the management server pays for a poll, in the guest: ours against systemctl.
    let (ours, systemctl) = status_against_is_active(&c.nodes[0]);
    report(&format!(
        "in-guest median over 40: etcd-setup status {ours:.1} ms, systemctl is-active etcd {systemctl:.1} ms (ratio {:.2})",
        ours / systemctl
    ));

    // etcd crashes repeatedly on node 3; each crash shows on the next poll.
    let node = &c.nodes[2];
    for k in 1..=3 {
        let pid = node
            .vm
            .ssh_ok("systemctl show -p MainPID --value etcd")
            .trim()
            .to_string();
        assert_ne!(pid, "0", "etcd has no main process");
        let killed = unix_now();
        node.vm.ssh_ok(&format!("sudo kill -SEGV {pid}"));
        let s = node.await_sample(killed, Duration::from_secs(60), |s| s.verdict == "failed");
        assert_eq!((s.reason.as_str(), s.exit), ("etcd-unhealthy", 1), "{s:?}");
        report(&format!(
            "cluster c1: crash {k} of etcd on {}: status says etcd-unhealthy {:.1} s later: {}",
            node.name,
            s.at - killed,
            s.message
        ));
        // systemd brings it back (RestartSec=5s) before the next crash.
        node.vm.ssh_ok(
            "timeout 120 sh -c 'until [ \"$(systemctl is-active etcd)\" = active ]; do sleep 0.5; done'",
        );
    }
    // Active again, but three crashes since setup: still a crash loop, not "running".
    let after = unix_now();
    let s = node.await_sample(after, Duration::from_secs(30), Sample::answered);
    assert_eq!(
        (s.verdict.as_str(), s.reason.as_str()),
        ("failed", "etcd-unhealthy"),
        "{s:?}"
    );
    assert!(s.restarts >= 3, "{s:?}");
    assert!(s.message.contains("restart"), "{s:?}");
    // The other members stay running meanwhile.
    for n in &c.nodes[..2] {
        let s = n.await_sample(after, Duration::from_secs(30), Sample::answered);
        assert_eq!(s.verdict, "running", "{}: {s:?}", n.name);
    }
    report(&format!(
        "cluster c1: after 3 crashes {} is reported failed/etcd-unhealthy with {} restarts while active; the other two running",
        node.name, s.restarts
    ));
}

/// A second cluster where one node's ISO lacks etcd: that node fails with
/// archive-missing within seconds of its insert, while the node inserted before it
/// waits for quorum; once a third member arrives, two of three make a quorum.
#[test]
fn a_node_whose_iso_lacks_etcd_fails_fast_while_its_peer_waits_for_quorum() {
    let mut c = Cluster::boot("c2");
    let zero = c.zero;
    await_all_waiting_for_iso(&c, 0.0);

    let first = c.insert(0, "k8s-etcd-3.5.1.iso");
    let s = c.nodes[0].await_sample(first, Duration::from_secs(300), Sample::waiting_for_quorum);
    report(&format!(
        "cluster c2: {} waits for quorum {:.1} s after its insert: {}",
        c.nodes[0].name,
        s.at - first,
        s.progress
    ));

    let bad = c.insert(1, "k8s-no-etcd.iso");
    let s = c.nodes[1].await_sample(bad, Duration::from_secs(120), |s| {
        s.answered() && s.verdict != "in-progress"
    });
    assert_eq!(
        (s.verdict.as_str(), s.reason.as_str(), s.exit),
        ("failed", "archive-missing", 1),
        "{s:?}"
    );
    report(&format!(
        "cluster c2: {} reports archive-missing {:.1} s after its insert (poll every {} s): {}",
        c.nodes[1].name,
        s.at - bad,
        POLL_EVERY.as_secs(),
        s.message
    ));
    // Meanwhile the first node still waits for quorum, the third for its ISO.
    let seen = s.at;
    let s0 = c.nodes[0].await_sample(seen, Duration::from_secs(30), Sample::answered);
    assert!(s0.waiting_for_quorum(), "{s0:?}");
    assert_eq!((s0.verdict.as_str(), s0.exit), ("in-progress", 3), "{s0:?}");
    let s2 = c.nodes[2].await_sample(seen, Duration::from_secs(30), Sample::answered);
    assert_eq!(s2.phase, "waiting-for-iso", "{s2:?}");
    report(&format!(
        "cluster c2: meanwhile {} says \"{}\"",
        c.nodes[0].name, s0.progress
    ));

    // The third member arrives: two of three are a quorum; the node without etcd stays
    // failed and shows as unhealthy in etcd's own view.
    std::thread::sleep(INSERT_GAP);
    let third = c.insert(2, "k8s-etcd-3.5.1.iso");
    for i in [0, 2] {
        let n = &c.nodes[i];
        let s = n.await_sample(third, Duration::from_secs(600), |s| {
            s.answered() && s.verdict != "in-progress"
        });
        assert_eq!(
            s.verdict,
            "running",
            "{}: {s:?}\n{}",
            n.name,
            n.timeline(zero)
        );
    }
    for i in [0, 2] {
        c.nodes[i].assert_no_step_back();
    }
    let s1 = c.nodes[1].await_sample(unix_now(), Duration::from_secs(30), Sample::answered);
    assert_eq!(s1.reason, "archive-missing", "{s1:?}");
    // etcd lists the member without etcd as never started (no client URL).
    let members: Value =
        serde_json::from_str(&c.etcdctl(0, "member list -w json")).expect("member list JSON");
    let members = members["members"].as_array().expect("members");
    let started = members
        .iter()
        .filter(|m| m["clientURLs"].as_array().is_some_and(|u| !u.is_empty()))
        .count();
    assert_eq!((members.len(), started), (3, 2), "{members:?}");
    let health = c.etcdctl(0, "endpoint health --cluster");
    assert_eq!(health.matches("is healthy").count(), 2, "{health}");
    report(
        "cluster c2: two of three running (quorum), the node without etcd failed/archive-missing",
    );
}
