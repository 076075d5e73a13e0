//! The management server's view of three-node etcd clusters, on booted node VMs.
//!
//! Three VMs share a private layer-2 network of their own (support::net::Hub: unix
//! datagram sockets, no host interface, no other address), each configured by the
//! packaged cloud-config as one member of one new three-member cluster. The platform
//! attaches the Kubernetes ISO to one node after another; a driver polls every node over
//! SSH with `etcd-setup status --format json`, as the management server does, and prints
//! each node's timeline. Then: etcdctl sees three started members and a healthy cluster;
//! `status` against `systemctl is-active etcd` in the guest; etcd made to crash
//! repeatedly on one node. Then day 2 on the same cluster: that node's VM is destroyed and
//! recreated from a fresh overlay with the same cloud-config and rejoins by itself, leaves
//! again, a second leave is refused by the quorum guard, and a node configured with
//! another cluster token is refused. A TLS cluster refuses a node with a foreign CA. A
//! third cluster has one node whose ISO lacks etcd (then mended), is upgraded from 3.4 to
//! 3.5, and goes through NOSPACE, maintenance and a restore (issue 12).

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

/// An operator's additions to the configuration the template writes: lines for
/// config.toml's `[etcd]` table, and further tables after it.
#[derive(Clone, Copy, Default)]
struct Additions {
    etcd: &'static str,
    tables: &'static str,
}

/// No additions: the template as the platform renders it.
const AS_RENDERED: Additions = Additions {
    etcd: "",
    tables: "",
};

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
        for (says, shown) in [
            ("asking the other members", " (asking the cluster)"),
            ("stale member", " (stale member removed)"),
            ("as a learner", " (joining as a learner)"),
            ("promoted to voting member", " (promoted)"),
        ] {
            if self.phase == "starting" && self.progress.contains(says) {
                label.push_str(shown);
            }
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
    /// `None` only while the node's VM is being recreated.
    vm: Option<Vm>,
    name: String,
    ip: String,
    samples: Arc<Samples>,
    /// Ends this node's poller.
    stop: Arc<AtomicBool>,
    poller: Option<std::thread::JoinHandle<()>>,
}

impl Node {
    fn vm(&self) -> &Vm {
        self.vm.as_ref().expect("the node has a VM")
    }

    fn remote(&self) -> Remote {
        self.vm().remote()
    }

    /// Starts polling this node's status, as the management server does.
    fn start_polling(&mut self) {
        let (remote, samples, stop) = (self.remote(), self.samples.clone(), self.stop.clone());
        self.poller = Some(std::thread::spawn(move || poll(remote, samples, stop)));
    }

    /// Stops the poller (before the VM goes away).
    fn stop_polling(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(p) = self.poller.take() {
            let _ = p.join();
        }
        self.stop = Arc::new(AtomicBool::new(false));
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
    /// Host time the timelines count from (after boot, before the first insert).
    zero: f64,
    hub: Hub,
    /// `etcd.initial_cluster` of every node.
    initial_cluster: String,
    /// The cluster token every node is configured with.
    token: String,
    /// What the operator added to every node's configuration.
    additions: Additions,
}

impl Cluster {
    /// Boots the three nodes; with `tls`, every node gets its certificate from it and
    /// the cluster speaks https on peer and client URLs; every node's configuration gets
    /// `additions`.
    fn boot(tag: &str, tls: Option<&Pki>, additions: Additions) -> Cluster {
        let image = Image::from_env();
        let scheme = if tls.is_some() { "https" } else { "http" };
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
            .map(|(n, ip)| format!("{n}={scheme}://{ip}:2380"))
            .collect::<Vec<_>>()
            .join(",");
        // The token packaging/cloudstack/etcd-node.yml derives from the initial cluster.
        let token = support::inputs::cloudstack_token(&initial_cluster);
        let started = Instant::now();
        let mut vms = Vec::new();
        for (i, (name, ip)) in members.iter().enumerate() {
            let mut spec = node_spec(&hub, i, name, ip, &initial_cluster, &token, additions);
            if let Some(pki) = tls {
                with_tls(&mut spec, &pki.issue(name, ip));
            }
            vms.push(Vm::boot(&image, spec));
        }
        let mut nodes = Vec::new();
        for (mut vm, (name, ip)) in vms.into_iter().zip(members.clone()) {
            let to_ssh = vm.wait_ssh(Duration::from_secs(400));
            report(&format!(
                "{name}: SSH after {:.1} s (three booting at once)",
                to_ssh.as_secs_f64()
            ));
            nodes.push(Node {
                vm: Some(vm),
                name,
                ip,
                samples: Arc::new(Samples::default()),
                stop: Arc::new(AtomicBool::new(false)),
                poller: None,
            });
        }
        report(&format!(
            "cluster {tag}: three nodes answer SSH {:.1} s after the first qemu started",
            started.elapsed().as_secs_f64()
        ));
        // What the template wrote: one token for the whole cluster, derived from its
        // initial cluster (so another cluster gets another one), and the ISO wait.
        for n in &nodes {
            let config = n.vm.as_ref().expect("booted").ssh_ok(
                "timeout 300 sh -c 'until [ -e /etc/etcd-setup/config.toml ]; do sleep 0.5; done'; \
                 cat /etc/etcd-setup/config.toml",
            );
            // The platform's template derives the ISO wait (15 s x 80 attempts); the
            // generic template a TLS cluster uses writes its own.
            let wait = if tls.is_some() { "20min" } else { "1200s" };
            let mut want = vec![
                format!("name = \"{}\"", n.name),
                format!("cluster_token = \"{token}\""),
                format!("initial_cluster = \"{initial_cluster}\""),
                format!("wait = \"{wait}\""),
            ];
            want.extend(
                (additions.etcd.lines().chain(additions.tables.lines())).map(str::to_string),
            );
            for line in want {
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
        for n in &mut nodes {
            n.start_polling();
        }
        Cluster {
            tag: tag.to_string(),
            nodes,
            zero: unix_now(),
            hub,
            initial_cluster,
            token,
            additions,
        }
    }

    /// Destroys node `i`'s VM and boots a new one from a fresh overlay, with the same
    /// name, address and cloud-config (but `token`), as the platform recreates a node
    /// whose host died. Its answers go on in the same timeline. Returns the host time the
    /// old VM went away.
    fn recreate(&mut self, i: usize, token: &str) -> f64 {
        self.recreate_with(i, token, |_| {})
    }

    /// [`Cluster::recreate`], the new VM's spec changed by `edit` first (other
    /// write_files, say).
    fn recreate_with(&mut self, i: usize, token: &str, edit: impl FnOnce(&mut VmSpec)) -> f64 {
        let began = unix_now();
        let image = Image::from_env();
        let (name, ip) = (self.nodes[i].name.clone(), self.nodes[i].ip.clone());
        self.nodes[i].stop_polling();
        let mut spec = node_spec(
            &self.hub,
            i,
            &name,
            &ip,
            &self.initial_cluster,
            token,
            self.additions,
        );
        edit(&mut spec);
        // The old qemu must be gone before the new one takes its hub port and folder.
        drop(self.nodes[i].vm.take());
        self.hub.free_port(i);
        let mut vm = Vm::boot(&image, spec);
        let to_ssh = vm.wait_ssh(Duration::from_secs(400)).as_secs_f64();
        self.nodes[i].vm = Some(vm);
        self.nodes[i].start_polling();
        report(&format!(
            "cluster {}: {name} recreated from a fresh overlay (token {token}), SSH after {to_ssh:.1} s",
            self.tag
        ));
        began
    }

    /// Inserts `iso` into node `i`'s Kubernetes CD-ROM drive; returns the host time.
    fn insert(&mut self, i: usize, iso: &str) -> f64 {
        let at = unix_now();
        self.nodes[i]
            .vm
            .as_mut()
            .expect("the node has a VM")
            .insert_cdrom(&support::inputs::isos().join(iso));
        report(&format!(
            "cluster {}: {iso} inserted into {}",
            self.tag, self.nodes[i].name
        ));
        at
    }

    /// Attaches `iso` to one node after another, [`INSERT_GAP`] apart as the platform
    /// does, and awaits each node's `running` (exit 0), printing how long each took.
    fn insert_all_and_await_running(&mut self, iso: &str) {
        let mut inserted = Vec::new();
        for i in 0..self.nodes.len() {
            if i > 0 {
                std::thread::sleep(INSERT_GAP);
            }
            inserted.push(self.insert(i, iso));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let s = n.await_sample(inserted[i], Duration::from_secs(600), |s| {
                s.answered() && s.verdict != "in-progress"
            });
            assert_eq!(
                (s.verdict.as_str(), s.exit),
                ("running", 0),
                "{}: {s:?}\n{}",
                n.name,
                n.timeline(self.zero)
            );
            report(&format!(
                "cluster {}: {} running {:.1} s after its ISO was inserted (poll every {} s)",
                self.tag,
                n.name,
                s.at - inserted[i],
                POLL_EVERY.as_secs()
            ));
        }
    }

    /// `etcdctl` on node `i` against every member's client URL.
    fn etcdctl(&self, i: usize, args: &str) -> String {
        let endpoints: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("http://{}:2379", n.ip))
            .collect();
        let out = self.nodes[i].vm().ssh(&format!(
            "ETCDCTL_API=3 /opt/bin/etcdctl --dial-timeout=3s --command-timeout=10s --endpoints={} {args} 2>&1",
            endpoints.join(",")
        ));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Cluster {
    /// Stops the pollers and prints every node's timeline, also when the test failed.
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.stop_polling();
        }
        for n in &self.nodes {
            report(&format!("timeline {}", n.timeline(self.zero)));
        }
    }
}

/// The VM of member `i` of a cluster on `hub`: one vCPU (three guests on two host cores),
/// the packaged cloud-config with the operator's `additions`, a static address on the
/// cluster's own network.
fn node_spec(
    hub: &Hub,
    i: usize,
    name: &str,
    ip: &str,
    initial_cluster: &str,
    token: &str,
    additions: Additions,
) -> VmSpec {
    let mac = format!("52:54:00:88:00:{:02x}", i + 1);
    let mut spec = VmSpec::new(name);
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
    // The platform's template renders plain-http members only (CloudStack runs etcd
    // without TLS): a TLS cluster, like a foreign token, uses the generic template.
    let platform = token == support::inputs::cloudstack_token(initial_cluster)
        && !initial_cluster.contains("https://");
    if platform {
        // The platform's template, rendered as the management server renders it:
        // 15 s x 80 attempts = a 20 min ISO wait (and peer wait).
        spec.user_data = support::inputs::cloudstack_config(&support::inputs::CloudStackNode {
            name,
            ip,
            initial_cluster,
            wait_time: 15,
            attempts: 80,
            eject: false,
        });
        spec.user_data = with_additions(&spec.user_data, additions);
        spec.user_data_as_is = true;
    } else {
        // A node deliberately configured with another cluster's token, which the
        // platform's template cannot produce for this initial cluster, or a TLS node.
        assert!(
            additions.etcd.is_empty() && additions.tables.is_empty(),
            "additions are written into the platform's template only"
        );
        spec.user_data = support::inputs::cloud_config(
            name,
            &[
                ("NODE_IP", ip),
                ("INITIAL_CLUSTER", initial_cluster),
                ("CLUSTER_TOKEN", token),
                ("START_TIMEOUT", "15min"),
                ("SETTLE", "5s"),
                ("ISO_WAIT", "20min"),
            ],
        );
    }
    spec
}

/// The platform's rendered template with the operator's additions written by its shell
/// step into config.toml: after the `[etcd]` table's last line, and before the heredoc's
/// end (the block scalar's lines are indented by six spaces).
fn with_additions(rendered: &str, additions: Additions) -> String {
    let indent =
        |lines: &str| -> String { lines.lines().map(|l| format!("      {l}\n")).collect() };
    let (etcd_end, heredoc_end) = ("      cluster_state = \"new\"\n", "      EOF\n");
    assert_eq!(rendered.matches(etcd_end).count(), 1, "{rendered}");
    assert_eq!(rendered.matches(heredoc_end).count(), 1, "{rendered}");
    rendered
        .replace(etcd_end, &format!("{etcd_end}{}", indent(additions.etcd)))
        .replace(
            heredoc_end,
            &format!("{}{heredoc_end}", indent(additions.tables)),
        )
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
    let out = node.vm().ssh_ok(
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
    let mut c = Cluster::boot("c1", None, AS_RENDERED);
    let zero = c.zero;
    await_all_waiting_for_iso(&c, 0.0);

    c.insert_all_and_await_running("k8s-etcd-3.5.1.iso");
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
        .vm()
        .ssh_ok("sudo cat /var/lib/cloud/instance/user-data.txt");
    assert!(got.contains(&format!("name = \"{}\"", node.name)), "{got}");
    let schema = node
        .vm()
        .ssh_ok("sudo cloud-init schema --config-file /var/lib/cloud/instance/user-data.txt 2>&1");
    assert!(schema.contains("Valid cloud-config"), "{schema}");
    let ci = node
        .vm()
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
            .vm()
            .ssh_ok("systemctl show -p MainPID --value etcd")
            .trim()
            .to_string();
        assert_ne!(pid, "0", "etcd has no main process");
        let killed = unix_now();
        node.vm().ssh_ok(&format!("sudo kill -SEGV {pid}"));
        let s = node.await_sample(killed, Duration::from_secs(60), |s| s.verdict == "failed");
        assert_eq!((s.reason.as_str(), s.exit), ("etcd-unhealthy", 1), "{s:?}");
        report(&format!(
            "cluster c1: crash {k} of etcd on {}: status says etcd-unhealthy {:.1} s later: {}",
            node.name,
            s.at - killed,
            s.message
        ));
        // systemd brings it back (RestartSec=5s) before the next crash.
        node.vm().ssh_ok(
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

    rejoin_leave_and_a_foreign_token(&mut c);
}

/// The member IDs etcd lists, by name, and whether each is a started voter.
fn members(c: &Cluster, via: usize) -> Vec<(String, String, bool)> {
    let list: Value =
        serde_json::from_str(&c.etcdctl(via, "member list -w json")).expect("member list JSON");
    let mut out: Vec<(String, String, bool)> = list["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| {
            let started = m["clientURLs"].as_array().is_some_and(|u| !u.is_empty());
            let learner = m["isLearner"].as_bool().unwrap_or(false);
            (
                m["name"].as_str().unwrap_or("").to_string(),
                format!("{:x}", m["ID"].as_u64().unwrap_or(0)),
                started && !learner,
            )
        })
        .collect();
    out.sort();
    out
}

/// Day 2 on cluster c1 (issue 11): node 3's VM is recreated with the same cloud-config
/// (state `new`, as the platform renders it) and rejoins on its own; it leaves; a leave of
/// one of the two left is refused; a node configured with another token is refused.
fn rejoin_leave_and_a_foreign_token(c: &mut Cluster) {
    let zero = c.zero;
    for k in 1..=3 {
        c.etcdctl(0, &format!("put day2/key{k} value{k}"));
    }
    let before = members(c, 0);
    let third = c.nodes[2].name.clone();
    let old_id = before
        .iter()
        .find(|(n, _, _)| *n == third)
        .map(|(_, id, _)| id.clone())
        .expect("node 3 is a member");

    // The host died: a new VM, a fresh disk, the same cloud-config.
    let token = c.token.clone();
    let gone = c.recreate(2, &token);
    await_node_waiting_for_iso(c, 2, gone);
    let inserted = c.insert(2, "k8s-etcd-3.5.1.iso");
    let node = &c.nodes[2];
    let s = node.await_sample(inserted, Duration::from_secs(600), |s| {
        s.answered() && s.verdict != "in-progress"
    });
    assert_eq!(
        (s.verdict.as_str(), s.exit),
        ("running", 0),
        "{s:?}\n{}",
        node.timeline(zero)
    );
    report(&format!(
        "cluster c1: recreated {} rejoined and runs {:.1} s after its ISO was inserted",
        node.name,
        s.at - inserted
    ));
    // The join's steps, as the run logged them (a poll every second may miss a step
    // that lasts less than that; the journal keeps every one).
    let journal = node
        .vm()
        .ssh_ok("sudo journalctl -b -o cat | grep -E 'as a learner|promoted to voting member|stale member' || true");
    for step in ["as a learner", "promoted to voting member"] {
        assert!(
            journal.contains(step),
            "{} never logged {step:?}:\n{journal}\n{}",
            node.name,
            node.timeline(zero)
        );
    }
    report(&format!(
        "cluster c1: {}'s run logged: {}",
        node.name,
        journal.lines().collect::<Vec<_>>().join(" | ")
    ));
    let after = members(c, 0);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(after.iter().all(|(_, _, voter)| *voter), "{after:?}");
    let new_id = after
        .iter()
        .find(|(n, _, _)| *n == third)
        .map(|(_, id, _)| id.clone())
        .expect("node 3 is a member again");
    assert_ne!(new_id, old_id, "the rejoined member has a new ID");
    // The keys, read through the rejoined member alone.
    let ip = c.nodes[2].ip.clone();
    let got = c.nodes[2].vm().ssh_ok(&format!(
        "ETCDCTL_API=3 /opt/bin/etcdctl --endpoints=http://{ip}:2379 get day2/ --prefix --print-value-only"
    ));
    assert_eq!(
        got.split_whitespace().collect::<Vec<_>>(),
        ["value1", "value2", "value3"]
    );
    report(&format!(
        "cluster c1: member list after the rejoin: {after:?} ({third} was {old_id}, is {new_id}); keys read through it"
    ));

    // Node 3 leaves: two healthy members remain; its status says left.
    let out = c.nodes[2].vm().ssh("sudo etcd-setup leave");
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let left = members(c, 0);
    assert_eq!(
        left.iter().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>(),
        [c.nodes[0].name.as_str(), c.nodes[1].name.as_str()],
        "{left:?}"
    );
    let health = c.etcdctl(0, "endpoint health --cluster");
    assert_eq!(health.matches("is healthy").count(), 2, "{health}");
    let left_at = unix_now();
    let s = c.nodes[2].await_sample(left_at, Duration::from_secs(30), Sample::answered);
    assert_eq!((s.verdict.as_str(), s.exit), ("left", 7), "{s:?}");
    let state = lines_of(
        c,
        2,
        "systemctl is-enabled etcd; systemctl is-active etcd; ls -d /var/lib/etcd.left-*; \
         test -e /var/lib/etcd && echo data-dir-still-there",
    );
    assert_eq!(state[..2], ["disabled", "inactive"], "{state:?}");
    assert!(state[2].starts_with("/var/lib/etcd.left-"), "{state:?}");
    assert_eq!(state.len(), 3, "{state:?}");
    report(&format!(
        "cluster c1: leave on {third}: {said}; status says left (exit 7); two healthy members"
    ));

    // One of the two left may not leave without --force: etcd calls 2 → 1 unsafe.
    let out = c.nodes[1].vm().ssh("sudo etcd-setup leave");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(err.contains("leave-refused"), "{err}");
    assert_eq!(members(c, 0).len(), 2);
    assert_eq!(
        c.nodes[1].vm().ssh_ok("systemctl is-active etcd").trim(),
        "active"
    );
    report(&format!(
        "cluster c1: leave on {} refused without --force: {}",
        c.nodes[1].name,
        err.lines().next().unwrap_or_default()
    ));

    // A node configured with another cluster's token: refused, etcd off, cluster as it was.
    let gone = c.recreate(2, "another-cluster");
    await_node_waiting_for_iso(c, 2, gone);
    let inserted = c.insert(2, "k8s-etcd-3.5.1.iso");
    let node = &c.nodes[2];
    let s = node.await_sample(inserted, Duration::from_secs(300), |s| {
        s.answered() && s.verdict != "in-progress"
    });
    assert_eq!(
        (s.verdict.as_str(), s.reason.as_str(), s.exit),
        ("failed", "cluster-mismatch", 1),
        "{s:?}"
    );
    // etcd never started here: not enabled, not active (its unit may not even exist).
    let off = lines_of(
        c,
        2,
        "test -e /etc/systemd/system/multi-user.target.wants/etcd.service && echo enabled || echo not-enabled; \
         systemctl is-active etcd",
    );
    assert_eq!(off, ["not-enabled", "inactive"], "{off:?}");
    assert_eq!(members(c, 0), left, "the cluster was touched");
    report(&format!(
        "cluster c1: a node with another token is refused {:.1} s after its insert: {}; member list unchanged",
        s.at - inserted,
        s.message
    ));
}

/// Node `i` answers `waiting-for-iso` after host time `since` (a freshly booted node).
fn await_node_waiting_for_iso(c: &Cluster, i: usize, since: f64) {
    let s = c.nodes[i].await_sample(since, Duration::from_secs(300), |s| {
        s.phase == "waiting-for-iso"
    });
    assert_eq!(s.verdict, "in-progress", "{s:?}");
}

/// Lines of what `script` printed on node `i`, whatever its exit status.
fn lines_of(c: &Cluster, i: usize, script: &str) -> Vec<String> {
    let out = c.nodes[i].vm().ssh(script);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// One node's ISO lacks etcd: that node fails with archive-missing within seconds of its
/// insert, while the node inserted before it waits for quorum; once a third member
/// arrives, two of three make a quorum. Then the operator attaches the right ISO to it
/// and starts the boot job again: the member that never started joins as configured and
/// the cluster has three started members.
fn a_node_whose_iso_lacks_etcd_fails_fast_while_its_peer_waits_for_quorum(
    c: &mut Cluster,
    iso: &str,
) {
    let (zero, tag) = (c.zero, c.tag.clone());
    let first = c.insert(0, iso);
    let s = c.nodes[0].await_sample(first, Duration::from_secs(300), Sample::waiting_for_quorum);
    report(&format!(
        "cluster {tag}: {} waits for quorum {:.1} s after its insert: {}",
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
        "cluster {tag}: {} reports archive-missing {:.1} s after its insert (poll every {} s): {}",
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
        "cluster {tag}: meanwhile {} says \"{}\"",
        c.nodes[0].name, s0.progress
    ));

    // The third member arrives: two of three are a quorum; the node without etcd stays
    // failed and shows as unhealthy in etcd's own view.
    std::thread::sleep(INSERT_GAP);
    let third = c.insert(2, iso);
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
    let started = |c: &Cluster| {
        let members: Value =
            serde_json::from_str(&c.etcdctl(0, "member list -w json")).expect("member list JSON");
        let members = members["members"].as_array().expect("members").clone();
        let started = members
            .iter()
            .filter(|m| m["clientURLs"].as_array().is_some_and(|u| !u.is_empty()))
            .count();
        (members.len(), started)
    };
    assert_eq!(started(c), (3, 2));
    let health = c.etcdctl(0, "endpoint health --cluster");
    assert_eq!(health.matches("is healthy").count(), 2, "{health}");
    report(&format!(
        "cluster {tag}: two of three running (quorum), the node without etcd failed/archive-missing"
    ));

    // The operator attaches the right ISO and starts the boot job again.
    swap_disc(c, 1, &support::inputs::isos().join(iso));
    let again = unix_now();
    let out = c.nodes[1]
        .remote()
        .run(Duration::from_secs(600), "sudo systemctl start etcd-setup");
    assert!(out.status.success(), "{out:?}");
    // The job is a oneshot: it returned when the run had ended.
    let done = unix_now();
    let n = &c.nodes[1];
    let s = n.await_sample(done, Duration::from_secs(60), |s| {
        s.answered() && s.verdict != "in-progress"
    });
    assert_eq!(
        (s.verdict.as_str(), s.exit),
        ("running", 0),
        "{s:?}\n{}",
        n.timeline(zero)
    );
    assert_eq!(started(c), (3, 3));
    let health = c.etcdctl(0, "endpoint health --cluster");
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
    report(&format!(
        "cluster {tag}: the right ISO attached to {} and `systemctl start etcd-setup`: its run took {:.1} s, status running; 3 started, 3 healthy",
        n.name,
        done - again
    ));
}

/// Where a TLS node keeps its CA, certificate and key: outside /home and /tmp, which
/// etcd.service's sandbox hides (and config validation refuses).
const PKI_DIR: &str = "/etc/etcd/pki";

/// A test CA made with openssl in a temporary folder (never committed), issuing node
/// certificates.
struct Pki {
    dir: tempfile::TempDir,
}

/// One node's PEM files.
struct NodeCert {
    ca: String,
    cert: String,
    key: String,
}

/// Runs openssl in `dir`; panics with its stderr when it fails.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    /// A new self-signed CA named `name` (EC P-256, valid two days).
    fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        openssl(
            dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        Pki { dir }
    }

    /// A certificate for node `name` at `ip`: SANs the node IP and 127.0.0.1, usable as
    /// server and client (etcd's peers are both).
    fn issue(&self, name: &str, ip: &str) -> NodeCert {
        let d = self.dir.path();
        std::fs::write(
            d.join(format!("{name}.ext")),
            format!(
                "subjectAltName=IP:{ip},IP:127.0.0.1\n\
                 extendedKeyUsage=serverAuth,clientAuth\n\
                 keyUsage=critical,digitalSignature,keyEncipherment\n"
            ),
        )
        .expect("ext file");
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &format!("{name}.crt"),
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
        let read = |f: &str| std::fs::read_to_string(d.join(f)).expect("PEM file");
        NodeCert {
            ca: read("ca.crt"),
            cert: read(&format!("{name}.crt")),
            key: read(&format!("{name}.key")),
        }
    }
}

/// Delivers `cert` through the spec's cloud-config `write_files` (owner root:etcd, the key
/// 0640) and turns on `[tls]`, client and peer sides, in the node's config.toml.
fn with_tls(spec: &mut VmSpec, cert: &NodeCert) {
    let file = |name: &str, mode: &str, pem: &str| {
        let body: String = pem.lines().map(|l| format!("      {l}\n")).collect();
        format!(
            "  - path: {PKI_DIR}/{name}\n    owner: root:etcd\n    permissions: '{mode}'\n    content: |\n{body}"
        )
    };
    let files = [
        file("ca.crt", "0644", &cert.ca),
        file("node.crt", "0644", &cert.cert),
        file("node.key", "0640", &cert.key),
    ]
    .concat();
    let tls = format!(
        "\n      [tls]\n\
         \x20     client_cert = \"{PKI_DIR}/node.crt\"\n\
         \x20     client_key = \"{PKI_DIR}/node.key\"\n\
         \x20     client_trusted_ca = \"{PKI_DIR}/ca.crt\"\n\
         \x20     peer_cert = \"{PKI_DIR}/node.crt\"\n\
         \x20     peer_key = \"{PKI_DIR}/node.key\"\n\
         \x20     peer_trusted_ca = \"{PKI_DIR}/ca.crt\"\n"
    );
    let text = &spec.user_data;
    assert!(
        text.contains("\nwrite_files:\n") && text.contains("\nruncmd:"),
        "the cloud-config has no write_files or runcmd to extend:\n{text}"
    );
    // After config.toml's content (the last write_files entry, runcmd next): the [tls]
    // table inside that content, then the PEM files as further write_files entries.
    spec.user_data = text.replacen("\nruncmd:", &format!("{tls}{files}runcmd:"), 1);
}

/// `etcdctl` on node `i` over TLS with that node's certificate (root: the key is
/// root:etcd 0640), against every member's https client URL.
fn etcdctl_tls(c: &Cluster, i: usize, args: &str) -> String {
    let endpoints: Vec<String> = c
        .nodes
        .iter()
        .map(|n| format!("https://{}:2379", n.ip))
        .collect();
    let out = c.nodes[i].vm().ssh(&format!(
        "sudo ETCDCTL_API=3 /opt/bin/etcdctl --dial-timeout=3s --command-timeout=10s \
         --cacert={PKI_DIR}/ca.crt --cert={PKI_DIR}/node.crt --key={PKI_DIR}/node.key \
         --endpoints={} {args} 2>&1",
        endpoints.join(",")
    ));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Issue 10 item 1: a three-node cluster "c3" with mutual TLS for peers and clients, the
/// certificates made by the test and delivered by cloud-init's write_files. etcdctl over
/// TLS lists three started members and the cluster is healthy; `etcd-setup status` says
/// running/healthy (it asks etcd's plain-http loopback metrics listener, 127.0.0.1:2381,
/// not the TLS client URL). Then node 3 is recreated with a certificate from another CA
/// and a 90 s start timeout → etcd-start-failed carrying etcd's own TLS error, etcd not
/// enabled there, the other two running.
#[test]
fn a_tls_cluster_forms_and_a_node_with_a_foreign_ca_is_refused_by_its_peers() {
    let t_all = Instant::now();
    let pki = Pki::new("c3-ca");
    let mut c = Cluster::boot("c3", Some(&pki), AS_RENDERED);
    let zero = c.zero;
    await_all_waiting_for_iso(&c, 0.0);
    c.insert_all_and_await_running("k8s-etcd-3.5.1.iso");
    // What cloud-init wrote, as etcd's sandbox sees it.
    let files = lines_of(
        &c,
        0,
        &format!(
            "sudo stat -c '%n %U:%G %a' {PKI_DIR}/ca.crt {PKI_DIR}/node.crt {PKI_DIR}/node.key"
        ),
    );
    assert_eq!(
        files,
        [
            format!("{PKI_DIR}/ca.crt root:etcd 644"),
            format!("{PKI_DIR}/node.crt root:etcd 644"),
            format!("{PKI_DIR}/node.key root:etcd 640"),
        ],
        "{files:?}"
    );
    let env = lines_of(&c, 0, "sudo grep -E '^ETCD_(PEER_)?(CLIENT_CERT_AUTH|CERT_FILE|LISTEN_CLIENT_URLS|ADVERTISE_CLIENT_URLS|INITIAL_ADVERTISE_PEER_URLS)=' /etc/etcd-setup/etcd.env");
    report(&format!(
        "cluster c3: etcd.env on {}: {env:?}",
        c.nodes[0].name
    ));
    // etcd's own view over TLS: three started members, all healthy.
    let list = etcdctl_tls(&c, 0, "member list -w json");
    let members: Value = serde_json::from_str(&list).unwrap_or_else(|e| panic!("{e}: {list}"));
    let members = members["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{members:?}");
    for m in members {
        assert!(
            m["clientURLs"].as_array().is_some_and(|u| !u.is_empty()
                && u.iter()
                    .all(|u| u.as_str().is_some_and(|u| u.starts_with("https://")))),
            "member not started on https: {m}"
        );
        assert!(
            m["peerURLs"].as_array().is_some_and(|u| u
                .iter()
                .all(|u| u.as_str().is_some_and(|u| u.starts_with("https://")))),
            "member peers not on https: {m}"
        );
    }
    let health = etcdctl_tls(&c, 0, "endpoint health --cluster");
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
    // A client without a certificate is turned away by etcd itself.
    let bare = c.nodes[0].vm().ssh(&format!(
        "sudo /opt/bin/etcdctl --dial-timeout=3s --command-timeout=5s --cacert={PKI_DIR}/ca.crt \
         --endpoints=https://{}:2379 endpoint health 2>&1",
        c.nodes[1].ip
    ));
    assert!(
        !bare.status.success(),
        "etcd answered a client without a certificate"
    );
    let status = c.nodes[0].vm().ssh_ok("etcd-setup status");
    let running = format!(
        "running: member {}, etcd 3.5.1 active, healthy",
        c.nodes[0].name
    );
    assert!(status.starts_with(&running), "{status}");
    report(&format!(
        "cluster c3: etcdctl over TLS: 3 started members on https, endpoint health --cluster: 3 healthy; \
         no client certificate: refused; etcd-setup status (via the http loopback metrics listener 127.0.0.1:2381): {}",
        status.trim()
    ));

    // Node 3 recreated with a certificate from another CA and a short start timeout.
    let foreign = Pki::new("another-ca");
    let (name, ip) = (c.nodes[2].name.clone(), c.nodes[2].ip.clone());
    let cert = foreign.issue(&name, &ip);
    let token = c.token.clone();
    let gone = c.recreate_with(2, &token, |spec| {
        with_tls(spec, &cert);
        spec.user_data = spec
            .user_data
            .replace("start_timeout = \"15min\"", "start_timeout = \"90s\"");
        assert!(spec.user_data.contains("start_timeout = \"90s\""));
    });
    await_node_waiting_for_iso(&c, 2, gone);
    let bad = c.insert(2, "k8s-etcd-3.5.1.iso");
    let node = &c.nodes[2];
    let s = node.await_sample(bad, Duration::from_secs(400), |s| {
        s.answered() && s.verdict != "in-progress"
    });
    assert_eq!(
        (s.verdict.as_str(), s.reason.as_str(), s.exit),
        ("failed", "etcd-start-failed", 1),
        "{s:?}\n{}",
        node.timeline(zero)
    );
    let failed = node.vm().ssh_ok("cat /home/cloud/etcd-setup-failed");
    let tls_line = failed
        .lines()
        .find(|l| {
            [
                "bad certificate",
                "unknown authority",
                "certificate required",
                "tls:",
            ]
            .iter()
            .any(|w| l.contains(w))
        })
        .unwrap_or_else(|| panic!("no TLS error of etcd's in the failure file:\n{failed}"));
    let off = lines_of(
        &c,
        2,
        "systemctl is-enabled etcd 2>&1; systemctl is-active etcd",
    );
    assert_ne!(off.first().map(String::as_str), Some("enabled"), "{off:?}");
    assert_ne!(off.last().map(String::as_str), Some("active"), "{off:?}");
    for n in &c.nodes[..2] {
        let s = n.await_sample(unix_now(), Duration::from_secs(30), Sample::answered);
        assert_eq!(s.verdict, "running", "{}: {s:?}", n.name);
    }
    report(&format!(
        "cluster c3: {name} with a certificate of another CA: etcd-start-failed {:.1} s after its insert \
         (start timeout 90 s), etcd {off:?}; etcd's line: {}",
        s.at - bad,
        tls_line.trim()
    ));
    report(&format!(
        "cluster c3 (TLS) test: {:.1} s",
        t_all.elapsed().as_secs_f64()
    ));
}

/// `etcd-setup upgrade` through `remote`, the leader waiting at most `leader_wait` for
/// the others; its exit code, stdout and stderr.
fn upgrade_on(remote: &Remote, limit: Duration, leader_wait: &str) -> (i32, String, String) {
    let out = remote.run(
        limit,
        &format!("sudo etcd-setup upgrade --lock-wait 20min --leader-wait {leader_wait}"),
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The platform detaches the ISO node `i` has (forced: the guest holds the tray locked)
/// and attaches `iso`, as CloudStack swaps the one ISO of a VM.
fn swap_disc(c: &mut Cluster, i: usize, iso: &std::path::Path) {
    let vm = c.nodes[i].vm.as_mut().expect("the node has a VM");
    vm.eject_cdrom();
    vm.insert_cdrom(iso);
    report(&format!(
        "cluster {}: {} attached to {}",
        c.tag,
        iso.file_name().unwrap_or_default().to_string_lossy(),
        c.nodes[i].name
    ));
}

/// Each member's version as `etcdctl endpoint status` on node `via` sees it.
fn versions(c: &Cluster, via: usize) -> Vec<String> {
    let v: Value = serde_json::from_str(&c.etcdctl(via, "endpoint status -w json"))
        .expect("endpoint status JSON");
    v.as_array()
        .expect("endpoints")
        .iter()
        .map(|e| e["Status"]["version"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// A Kubernetes ISO whose etcd tarball has 3.5.30's layout but an `etcd` that exits at
/// once (the guest's `false`, a real x86-64 ELF, passes the archive pass).
fn iso_with_an_etcd_that_exits(dir: &std::path::Path) -> std::path::PathBuf {
    let top = dir.join("pack/etcd-v3.5.30-linux-amd64");
    std::fs::create_dir_all(top.join("Documentation")).unwrap();
    let real = support::etcd::release("3.5.30");
    for b in ["etcdctl", "etcdutl"] {
        std::fs::copy(real.join(b), top.join(b)).unwrap();
    }
    std::fs::copy("/bin/false", top.join("etcd")).unwrap();
    std::fs::write(top.join("README.md"), "# an etcd that exits at once\n").unwrap();
    std::fs::write(top.join("Documentation/README.md"), "# docs\n").unwrap();
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("etcd")).unwrap();
    std::fs::create_dir_all(tree.join("k8s")).unwrap();
    std::fs::write(tree.join("k8s/version"), "v1.33.0\n").unwrap();
    let st = std::process::Command::new("tar")
        .arg("-C")
        .arg(dir.join("pack"))
        .args(["--owner=0", "--group=0", "--numeric-owner", "-czf"])
        .arg(tree.join("etcd/etcd-linux-amd64.tar.gz"))
        .arg("etcd-v3.5.30-linux-amd64")
        .status()
        .unwrap();
    assert!(st.success());
    let iso = dir.join("k8s-etcd-exits.iso");
    support::inputs::make_iso(&tree, "K8S_BROKEN", &iso);
    iso
}

/// What the operator of cluster c4 adds to the template: a small space quota, so that
/// NOSPACE comes after a few dozen MiB, and defragmentation thresholds such a database
/// passes.
const UPKEEP: Additions = Additions {
    etcd: "quota_backend_bytes = \"32MiB\"",
    tables: "[maintain]\nmin_db_size = \"4MiB\"\nmin_fragmented_percent = 50",
};

/// Cluster c4, day 2 from one boot: a node whose ISO lacks etcd, mended; an upgrade from
/// 3.4.23 to 3.5.16; NOSPACE and its recovery; three maintains at once; a restore after
/// every data dir was lost.
#[test]
fn c4_bad_iso_mended_upgrade_3_4_to_3_5_nospace_maintain_and_restore() {
    let t_all = Instant::now();
    let mut c = Cluster::boot("c4", None, UPKEEP);
    await_all_waiting_for_iso(&c, 0.0);
    a_node_whose_iso_lacks_etcd_fails_fast_while_its_peer_waits_for_quorum(
        &mut c,
        "k8s-etcd-3.4.23.iso",
    );
    three_nodes_upgrade_from_3_4_to_3_5_one_at_a_time_and_a_bad_release_is_rolled_back(&mut c);
    nospace_is_reported_everywhere_and_maintain_recovers_it(&mut c);
    three_maintains_at_once_defragment_one_member_at_a_time_the_leader_last(&mut c);
    a_snapshot_from_the_timer_restores_a_cluster_that_lost_every_data_dir(&mut c);
    report(&format!(
        "cluster c4 test: {:.1} s",
        t_all.elapsed().as_secs_f64()
    ));
}

/// Day 2 upgrade: three members on Debian's 3.4.23 with keys; the 3.5.16 ISO attached to
/// every node and `etcd-setup upgrade` started on all three at once: they go one at a
/// time, the leader last, and the cluster ends on 3.5 with its keys and three voters.
/// Then a downgrade (the 3.4.23 ISO again) is refused with etcd untouched, and an etcd
/// that exits at once is rolled back, the member healthy on 3.5.16.
fn three_nodes_upgrade_from_3_4_to_3_5_one_at_a_time_and_a_bad_release_is_rolled_back(
    c: &mut Cluster,
) {
    for k in 0..20 {
        let out = c.etcdctl(0, &format!("put /upgrade/k{k} v{k}"));
        assert!(out.contains("OK"), "{out}");
    }
    assert_eq!(versions(c, 0), ["3.4.23"; 3]);

    let t_add = Instant::now();
    let newer = support::inputs::isos().join("k8s-etcd-3.5.16.iso");
    for i in 0..3 {
        swap_disc(c, i, &newer);
    }
    let t0 = unix_now();
    let remotes: Vec<Remote> = c.nodes.iter().map(Node::remote).collect();
    let results: Vec<(String, f64, (i32, String, String))> = std::thread::scope(|s| {
        let handles: Vec<_> = remotes
            .iter()
            .map(|r| {
                s.spawn(move || {
                    let out = upgrade_on(r, Duration::from_secs(1500), "10min");
                    (r.name.clone(), unix_now() - t0, out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (name, took, (code, out, err)) in &results {
        report(&format!(
            "cluster c4: upgrade on {name}: exit {code} after {took:.1} s: {} | {}",
            out.trim(),
            err.trim().replace('\n', " | ")
        ));
        assert_eq!(*code, 0, "{name}: {out}\n{err}");
    }
    // The rolling order and each member's downtime, from what each node printed.
    let mut order: Vec<(f64, String, String)> = results
        .iter()
        .map(|(name, took, (_, _, err))| {
            let down = err
                .lines()
                .find(|l| l.contains("healthy") && l.contains("after its start"))
                .unwrap_or("?")
                .to_string();
            (*took, name.clone(), down)
        })
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (took, name, down) in &order {
        report(&format!(
            "cluster c4: rolling order: {name} done at +{took:.1} s ({down})"
        ));
    }
    // What the management server saw meanwhile. A node's turn runs from the previous
    // node's end to its own: its restart was asked for, so no poll of it then says
    // `failed` (one caught mid-restart says `in-progress`, naming the upgrade). Outside
    // its turn a node may see a leader change for a moment, which is reported, not excused.
    let mut ends: Vec<(f64, String)> = results
        .iter()
        .map(|(name, took, _)| (t0 + took, name.clone()))
        .collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut begin = t0;
    for (end, name) in &ends {
        let n = c.nodes.iter().find(|n| &n.name == name).expect("a node");
        let samples: Vec<Sample> = n.samples.list.lock().unwrap().clone();
        let own: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.at > begin && s.at <= *end)
            .collect();
        let failed: Vec<&&Sample> = own.iter().filter(|s| s.verdict == "failed").collect();
        let on_purpose: Vec<&&Sample> = own
            .iter()
            .filter(|s| {
                s.verdict == "in-progress" && s.progress.starts_with("etcd-setup upgrade (pid ")
            })
            .collect();
        let elsewhere: Vec<String> = samples
            .iter()
            .filter(|s| s.at >= t0 && s.at <= ends[2].0 && (s.at <= begin || s.at > *end))
            .filter(|s| s.verdict == "failed")
            .map(|s| format!("+{:.1} s {}: {}", s.at - t0, s.reason, s.message))
            .collect();
        report(&format!(
            "cluster c4: {name} during its turn (+{:.1}..+{:.1} s): {} polls, {} failed, {} in-progress on purpose{}; failed outside its turn: {elsewhere:?}",
            begin - t0,
            end - t0,
            own.len(),
            failed.len(),
            on_purpose.len(),
            on_purpose
                .first()
                .map(|s| format!(" ({})", s.progress))
                .unwrap_or_default()
        ));
        assert!(
            failed.is_empty(),
            "{name}: {failed:?}\n{}",
            n.timeline(c.zero)
        );
        begin = *end;
    }
    assert_eq!(versions(c, 0), ["3.5.16"; 3]);
    let long = c.nodes[0].vm().ssh_ok("etcd-setup status --long");
    report(&format!(
        "cluster c4: status after the upgrade: {}",
        long.lines()
            .filter(|l| l.starts_with("upgrade:") || l.starts_with("cluster:"))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    // etcd's leader moves the cluster version a few seconds after the last member runs
    // 3.5: asked once a second in the guest (no event to await), at most 60 s.
    let cluster_version = c.nodes[0].vm().ssh_ok(
        "for i in $(seq 60); do \
           m=$(exec 3<>/dev/tcp/127.0.0.1/2381 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 \
               && grep '^etcd_cluster_version' <&3); \
           case $m in *'cluster_version=\"3.5\"} 1'*) break ;; esac; sleep 1; \
         done; echo \"$m\"",
    );
    report(&format!(
        "cluster c4: {}",
        cluster_version.trim().replace('\n', " ")
    ));
    assert!(
        cluster_version.contains("cluster_version=\"3.5\"} 1"),
        "{cluster_version}"
    );
    for k in 0..20 {
        let got = c.etcdctl(1, &format!("get --print-value-only /upgrade/k{k}"));
        assert_eq!(got.trim(), format!("v{k}"));
    }
    let members = members(c, 2);
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(members.iter().all(|m| m.2), "not three voters: {members:?}");
    let health = c.etcdctl(0, "endpoint health");
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
    report(&format!(
        "cluster c4: 3.4.23 -> 3.5.16 on three nodes started at once: {:.1} s",
        t_add.elapsed().as_secs_f64()
    ));

    // A downgrade: refused, etcd untouched.
    let t = Instant::now();
    swap_disc(c, 0, &support::inputs::isos().join("k8s-etcd-3.4.23.iso"));
    let pid = c.nodes[0]
        .vm()
        .ssh_ok("systemctl show -p MainPID --value etcd");
    // Alone, the node does not wait for others as a leader would: it hands leadership on.
    let (code, out, err) = upgrade_on(&c.nodes[0].remote(), Duration::from_secs(300), "0s");
    assert_eq!(code, 6, "{out}\n{err}");
    assert!(err.contains("upgrade-downgrade"), "{err}");
    assert_eq!(
        c.nodes[0]
            .vm()
            .ssh_ok("systemctl show -p MainPID --value etcd"),
        pid,
        "etcd was restarted by a refused downgrade"
    );
    report(&format!(
        "cluster c4: downgrade refused in {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        err.trim()
    ));

    // A release whose etcd exits at once: rolled back, healthy on 3.5.16.
    let t = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let iso = iso_with_an_etcd_that_exits(dir.path());
    swap_disc(c, 0, &iso);
    let (code, out, err) = upgrade_on(&c.nodes[0].remote(), Duration::from_secs(900), "0s");
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("upgrade-rolled-back"), "{err}");
    assert_eq!(versions(c, 0), ["3.5.16"; 3]);
    let health = c.etcdctl(0, "endpoint health");
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
    report(&format!(
        "cluster c4: an etcd that exits rolled back in {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        err.trim().replace('\n', " | ")
    ));
}

/// Every member's client URL, comma separated, as etcdctl's `--endpoints` takes them.
fn endpoints(c: &Cluster) -> String {
    c.nodes
        .iter()
        .map(|n| format!("http://{}:2379", n.ip))
        .collect::<Vec<_>>()
        .join(",")
}

/// Each member's database file size and size in use, in bytes, by name, as `etcdctl
/// endpoint status` on node `via` sees them; and the leader's name.
fn space(c: &Cluster, via: usize) -> (Vec<(String, u64, u64)>, String) {
    let ids: std::collections::HashMap<String, String> = members(c, via)
        .into_iter()
        .map(|(name, id, _)| (id, name))
        .collect();
    let v: Value = serde_json::from_str(&c.etcdctl(via, "endpoint status -w json"))
        .expect("endpoint status JSON");
    let mut leader = String::new();
    let mut out = Vec::new();
    for e in v.as_array().expect("endpoints") {
        let st = &e["Status"];
        let id = format!("{:x}", st["header"]["member_id"].as_u64().unwrap_or(0));
        let name = ids.get(&id).cloned().unwrap_or(id.clone());
        if st["leader"].as_u64() == st["header"]["member_id"].as_u64() {
            leader = name.clone();
        }
        out.push((
            name,
            st["dbSize"].as_u64().unwrap_or(0),
            st["dbSizeInUse"].as_u64().unwrap_or(0),
        ));
    }
    out.sort();
    (out, leader)
}

/// [`space`] as one line: `name 12.3 MiB (4.5 MiB in use), …`.
fn space_line(space: &[(String, u64, u64)]) -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    space
        .iter()
        .map(|(n, size, used)| format!("{n} {:.1} MiB ({:.1} MiB in use)", mib(*size), mib(*used)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Puts 1 MiB values under `prefix` through node `via`, `count` of them or until etcd
/// refuses one; what the guest printed last (`refused at N: etcdctl's error` or
/// `wrote N`).
fn fill(c: &Cluster, via: usize, prefix: &str, count: usize) -> String {
    let out = c.nodes[via].remote().run(
        Duration::from_secs(900),
        &format!(
            "head -c 1048576 /dev/urandom >/tmp/fill.bin; \
             for i in $(seq {count}); do \
               if ! err=$(ETCDCTL_API=3 /opt/bin/etcdctl --dial-timeout=3s --command-timeout=30s \
                          --endpoints={} put {prefix}$i </tmp/fill.bin 2>&1); then \
                 echo \"refused at $i: $err\"; exit 0; \
               fi; \
             done; echo \"wrote {count}\"",
            endpoints(c)
        ),
    );
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The cluster ID, as etcd on node `via`'s first endpoint answers it.
fn cluster_id(c: &Cluster, via: usize) -> u64 {
    let v: Value = serde_json::from_str(&c.etcdctl(via, "endpoint status -w json"))
        .expect("endpoint status JSON");
    v[0]["Status"]["header"]["cluster_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no cluster ID in {v}"))
}

/// The `status --format json` answer of node `i`.
fn status_doc(c: &Cluster, i: usize) -> Value {
    let out = c.nodes[i].vm().ssh("etcd-setup status --format json");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Issue 12 on VMs: the cluster filled up to its 32 MiB quota raises NOSPACE, which
/// every node's status reports within seconds; keys deleted and `maintain` run on one
/// node: compacted, defragmented, disarmed, writes work, every node running again.
fn nospace_is_reported_everywhere_and_maintain_recovers_it(c: &mut Cluster) {
    let tag = c.tag.clone();
    let (before, _) = space(c, 0);
    let t = Instant::now();
    let said = fill(c, 0, "/fill/", 100);
    let refused = unix_now();
    assert!(
        said.starts_with("refused at ") && said.contains("database space exceeded"),
        "{said}"
    );
    report(&format!(
        "cluster {tag}: 1 MiB values written until NOSPACE in {:.1} s: {said}",
        t.elapsed().as_secs_f64()
    ));
    for n in &c.nodes {
        let s = n.await_sample(refused, Duration::from_secs(60), |s| {
            s.answered() && s.verdict != "running"
        });
        assert_eq!(
            (s.verdict.as_str(), s.reason.as_str(), s.exit),
            ("failed", "etcd-nospace", 1),
            "{}: {s:?}",
            n.name
        );
        report(&format!(
            "cluster {tag}: {} reports etcd-nospace {:.1} s after the refused write (poll every {} s): {}",
            n.name,
            s.at - refused,
            POLL_EVERY.as_secs(),
            s.message
        ));
    }
    let doc = status_doc(c, 2);
    report(&format!(
        "cluster {tag}: status JSON on {}: space {}, alarms {}",
        c.nodes[2].name, doc["space"], doc["alarms"]
    ));
    assert!(doc["alarms"].to_string().contains("NOSPACE"), "{doc}");
    let (full, _) = space(c, 0);
    report(&format!(
        "cluster {tag}: databases before the fill: {}; at NOSPACE: {}",
        space_line(&before),
        space_line(&full)
    ));

    // Reads and deletes still work under NOSPACE; one node's maintain recovers.
    let deleted = c.etcdctl(1, "del /fill/ --prefix");
    assert!(
        deleted.trim().parse::<u32>().is_ok_and(|n| n > 0),
        "{deleted}"
    );
    let t = Instant::now();
    let out = c.nodes[1]
        .remote()
        .run(Duration::from_secs(900), "sudo etcd-setup maintain");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    report(&format!(
        "cluster {tag}: {} keys deleted; maintain on {} in {:.1} s: {}",
        deleted.trim(),
        c.nodes[1].name,
        t.elapsed().as_secs_f64(),
        so.trim().replace('\n', " | ")
    ));
    let done = unix_now();
    assert_eq!(c.etcdctl(0, "alarm list").trim(), "", "an alarm is left");
    let put = c.etcdctl(2, "put /after-nospace ok");
    assert!(put.contains("OK"), "{put}");
    for n in &c.nodes {
        let s = n.await_sample(done, Duration::from_secs(60), |s| {
            s.answered() && s.verdict == "running"
        });
        assert_eq!(s.exit, 0, "{s:?}");
    }
    let (after, _) = space(c, 0);
    for (name, size, _) in &after {
        assert!(*size < 32 << 20 >> 1, "{name} still holds {size} bytes");
    }
    report(&format!(
        "cluster {tag}: alarm list empty, a write works, every node running; databases after maintain: {}",
        space_line(&after)
    ));
}

/// Issue 12 on VMs: the cluster fragmented (keys written, deleted and compacted as
/// Kubernetes' API server compacts), then the maintain service its timer runs started on
/// the three nodes at once: each member defragmented exactly once, one at a time, the
/// leader last.
fn three_maintains_at_once_defragment_one_member_at_a_time_the_leader_last(c: &mut Cluster) {
    let tag = c.tag.clone();
    let said = fill(c, 0, "/frag/", 12);
    assert_eq!(said, "wrote 12");
    c.etcdctl(0, "del /frag/ --prefix");
    let rev: Value = serde_json::from_str(&c.etcdctl(0, "endpoint status -w json"))
        .expect("endpoint status JSON");
    let rev = rev[0]["Status"]["header"]["revision"]
        .as_u64()
        .expect("revision");
    let out = c.etcdctl(0, &format!("compact {rev} --physical"));
    assert!(out.contains("compacted revision"), "{out}");
    // Members recount their pages in use when they commit: a write now and then, until
    // every member's database is more than half free.
    let t = Instant::now();
    let (fragmented, leader) = loop {
        let (s, leader) = space(c, 0);
        if s.len() == 3
            && s.iter()
                .all(|(_, size, used)| *size > 4 << 20 && used * 2 < *size)
        {
            break (s, leader);
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{s:?}");
        c.etcdctl(0, "put /tick t");
        std::thread::sleep(Duration::from_millis(500));
    };
    report(&format!(
        "cluster {tag}: fragmented: {}; leader {leader}",
        space_line(&fragmented)
    ));

    // What the three timers do when they fire together.
    let since = c.nodes[0]
        .vm()
        .ssh_ok("date -u '+%Y-%m-%d %H:%M:%S'")
        .trim()
        .to_string();
    let t = Instant::now();
    let remotes: Vec<Remote> = c.nodes.iter().map(Node::remote).collect();
    let codes: Vec<Option<i32>> = std::thread::scope(|s| {
        let handles: Vec<_> = remotes
            .iter()
            .map(|r| {
                s.spawn(move || {
                    r.run(
                        Duration::from_secs(900),
                        "sudo systemctl start etcd-setup-maintain.service",
                    )
                    .status
                    .code()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = t.elapsed().as_secs_f64();
    let mut all = Vec::new();
    for (i, code) in codes.iter().enumerate() {
        let journal = c.nodes[i].vm().ssh_ok(&format!(
            "sudo journalctl -u etcd-setup-maintain.service -o cat --since '{since}' --no-pager"
        ));
        report(&format!(
            "cluster {tag}: maintain service on {}: exit {code:?}: {}",
            c.nodes[i].name,
            journal
                .lines()
                .filter(|l| !l.starts_with("Start") && !l.starts_with("Finish"))
                .collect::<Vec<_>>()
                .join(" | ")
        ));
        assert_eq!(*code, Some(0), "{journal}");
        all.extend(support::upkeep::defrags(&journal));
    }
    all.sort_by_key(|d| d.start);
    let mut names: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
    report(&format!(
        "cluster {tag}: three maintains at once, {took:.1} s: defragmented in order {}",
        all.iter()
            .map(|d| format!("{} ({}, {} ms)", d.name, d.role, d.end - d.start))
            .collect::<Vec<_>>()
            .join(" -> ")
    ));
    names.sort();
    let mut want: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
    want.sort();
    assert_eq!(names, want, "{all:?}");
    for w in all.windows(2) {
        assert!(w[0].end <= w[1].start, "two at a time: {all:?}");
    }
    assert_eq!(
        (all[2].name.as_str(), all[2].role.as_str()),
        (leader.as_str(), "leader")
    );
    let (after, _) = space(c, 0);
    report(&format!(
        "cluster {tag}: databases after: {}",
        space_line(&after)
    ));
}

/// Issue 12 on VMs, and the README's runbook as written: keys written; the snapshot
/// service its timer runs started on one node; every member's data dir lost; the
/// snapshot restored on that node; the other two nodes, one at a time, move their data
/// dir aside and start the boot job, which joins them; the keys are back on three
/// voting members.
fn a_snapshot_from_the_timer_restores_a_cluster_that_lost_every_data_dir(c: &mut Cluster) {
    let tag = c.tag.clone();
    for k in 0..20 {
        let out = c.etcdctl(0, &format!("put /restore/k{k} v{k}"));
        assert!(out.contains("OK"), "{out}");
    }
    for n in &c.nodes {
        let timer = n
            .vm()
            .ssh("systemctl is-active etcd-setup-snapshot.timer; systemctl show -p NextElapseUSecRealtime --value etcd-setup-snapshot.timer");
        let timer = String::from_utf8_lossy(&timer.stdout).to_string();
        assert!(timer.starts_with("active\n"), "{}: {timer}", n.name);
    }
    let node = &c.nodes[0];
    let t = Instant::now();
    node.vm()
        .ssh_ok("sudo systemctl start etcd-setup-snapshot.service");
    let took = t.elapsed().as_secs_f64();
    let record: Value = serde_json::from_str(
        &node
            .vm()
            .ssh_ok("sudo cat /var/lib/etcd-setup/snapshot.json"),
    )
    .expect("snapshot.json");
    let file = record
        .pointer("/last/file")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no snapshot path in {record}"))
        .to_string();
    let doc = status_doc(c, 0);
    assert!(
        doc["snapshot"].to_string().contains(&file),
        "status does not show {file}: {doc}"
    );
    report(&format!(
        "cluster {tag}: the snapshot timer's service on {} in {took:.1} s: {file}; status: {}",
        node.name, doc["snapshot"]
    ));

    let id_before = cluster_id(c, 0);
    // Every member's data is lost (the disks wiped under a stopped etcd).
    for n in &c.nodes {
        n.vm()
            .ssh_ok("sudo systemctl stop etcd && sudo rm -rf /var/lib/etcd/member");
    }
    let lost = unix_now();
    for n in &c.nodes {
        let s = n.await_sample(lost, Duration::from_secs(60), |s| {
            s.answered() && s.verdict == "failed"
        });
        report(&format!(
            "cluster {tag}: {} with its data lost: {} {}",
            n.name, s.verdict, s.reason
        ));
    }

    // The runbook, step 1, on one node.
    let t = Instant::now();
    let out = c.nodes[0].remote().run(
        Duration::from_secs(600),
        &format!("sudo etcd-setup restore {file}"),
    );
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    report(&format!(
        "cluster {tag}: restore on {} in {:.1} s: {}",
        c.nodes[0].name,
        t.elapsed().as_secs_f64(),
        so.trim().replace('\n', " | ")
    ));
    let restored = members(c, 0);
    assert_eq!(restored.len(), 1, "{restored:?}");

    // Step 2, on each other node, one at a time.
    for i in 1..3 {
        let t = Instant::now();
        let out = c.nodes[i].remote().run(
            Duration::from_secs(900),
            "sudo systemctl stop etcd && \
             sudo mv /var/lib/etcd /var/lib/etcd.lost-$(date -u +%Y%m%dT%H%M%SZ) && \
             sudo systemctl start etcd-setup",
        );
        assert!(out.status.success(), "{out:?}");
        let done = unix_now();
        let n = &c.nodes[i];
        let s = n.await_sample(done, Duration::from_secs(60), Sample::answered);
        assert_eq!(
            (s.verdict.as_str(), s.exit),
            ("running", 0),
            "{s:?}\n{}",
            n.timeline(c.zero)
        );
        let journal = n.vm().ssh_ok(
            "sudo journalctl -u etcd-setup -o cat | grep -E 'as a learner|promoted to voting member|data dir' | tail -n 3",
        );
        report(&format!(
            "cluster {tag}: {} rejoined in {:.1} s: {}",
            n.name,
            t.elapsed().as_secs_f64(),
            journal.trim().replace('\n', " | ")
        ));
    }

    // Step 3: every node running, the keys back, three voters; a fresh snapshot.
    let now = unix_now();
    for n in &c.nodes {
        let s = n.await_sample(now, Duration::from_secs(60), Sample::answered);
        assert_eq!(
            (s.verdict.as_str(), s.exit),
            ("running", 0),
            "{}: {s:?}",
            n.name
        );
    }
    let after = members(c, 0);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(after.iter().all(|m| m.2), "not three voters: {after:?}");
    for k in 0..20 {
        let got = c.etcdctl(2, &format!("get --print-value-only /restore/k{k}"));
        assert_eq!(got.trim(), format!("v{k}"));
    }
    // The restored cluster kept its ID: the configuration's, which the joins checked.
    assert_eq!(cluster_id(c, 2), id_before);
    let snap = c.nodes[0].vm().ssh_ok("sudo etcd-setup snapshot");
    report(&format!(
        "cluster {tag}: after the runbook: 3 voters {after:?}, 20 keys read through {}; cluster ID {id_before:x} as before the loss; snapshot: {}",
        c.nodes[2].name,
        snap.trim()
    ));
}
