//! The bed every cluster test stands on: three node VMs on a network of their own, each
//! polled over SSH by a driver thread as the management server polls it, the answers
//! kept per node (with when each poll was sent and when its answer came), and the waits
//! on them.

use crate::pki::{with_tls, Pki};
use crate::support;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use support::net::Hub;
use support::vm::{report, unix_now, Image, Remote, Vm, VmSpec, NAT_MAC};

/// Between two ISO inserts, as the platform attaches them one node after another: long
/// enough that the first member is seen waiting for its peers (it reaches etcd's start
/// about 20 s after its insert on three TCG guests sharing two cores).
pub const INSERT_GAP: Duration = Duration::from_secs(25);
/// How often the driver polls each node (after the previous answer came back).
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// An operator's additions to the configuration the template writes: lines for
/// config.toml's `[etcd]` table, and further tables after it.
#[derive(Clone, Copy, Default)]
pub struct Additions {
    pub etcd: &'static str,
    pub tables: &'static str,
}

/// No additions: the template as the platform renders it.
pub const AS_RENDERED: Additions = Additions {
    etcd: "",
    tables: "",
};

/// One poll's answer, as the management server keeps it.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Host time the poll was sent: the answer was built after it, in the guest.
    pub asked: f64,
    /// Host time the poll's answer arrived (it may have been built seconds before: a
    /// poll's SSH round trip is that slow on a loaded host).
    pub at: f64,
    /// `status`'s exit code.
    pub exit: i32,
    pub verdict: String,
    pub phase: String,
    pub progress: String,
    pub reason: String,
    pub message: String,
    pub restarts: u64,
}

impl Sample {
    pub fn from_json(asked: f64, at: f64, exit: i32, v: &Value) -> Sample {
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Sample {
            asked,
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
    pub fn answered(&self) -> bool {
        self.verdict != "unreachable"
    }

    pub fn waiting_for_quorum(&self) -> bool {
        self.phase == "starting" && self.progress.contains("waiting for quorum")
    }

    /// What the timeline shows for this answer; a new entry when it changes.
    pub fn label(&self) -> String {
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
pub struct Samples {
    pub list: Mutex<Vec<Sample>>,
    pub added: Condvar,
}

impl Samples {
    pub fn push(&self, sample: Sample) {
        self.list
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(sample);
        self.added.notify_all();
    }
}

/// Which answers [`Node::await_running`] weighs.
#[derive(Clone, Copy, Debug)]
pub enum Awaiting {
    /// A run is under way (its ISO just inserted): `in-progress` answers are passed over
    /// until the run ends, and the first other answer must be `running`.
    RunEnd,
    /// Nothing is under way (`systemctl start etcd-setup`, a oneshot, returned: its run
    /// ended): the very first answer must be `running`.
    FirstAnswer,
}

/// A node and what the driver saw of it.
pub struct Node {
    /// `None` only while the node's VM is being recreated.
    pub vm: Option<Vm>,
    pub name: String,
    pub ip: String,
    pub samples: Arc<Samples>,
    /// Ends this node's poller.
    pub stop: Arc<AtomicBool>,
    pub poller: Option<std::thread::JoinHandle<()>>,
}

impl Node {
    pub fn vm(&self) -> &Vm {
        self.vm.as_ref().expect("the node has a VM")
    }

    pub fn remote(&self) -> Remote {
        self.vm().remote()
    }

    /// Starts polling this node's status, as the management server does.
    pub fn start_polling(&mut self) {
        let (remote, samples, stop) = (self.remote(), self.samples.clone(), self.stop.clone());
        self.poller = Some(std::thread::spawn(move || poll(remote, samples, stop)));
    }

    /// Stops the poller (before the VM goes away).
    pub fn stop_polling(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(p) = self.poller.take() {
            let _ = p.join();
        }
        self.stop = Arc::new(AtomicBool::new(false));
    }

    /// The first answer to a poll sent at or after host time `since` that satisfies
    /// `want`, waiting for the poller at most `limit`. Counted from when the poll was sent,
    /// not when its answer came: an answer arriving after `since` may describe the node
    /// before it (a run still confirming etcd after `systemctl start` had returned).
    pub fn await_sample(
        &self,
        since: f64,
        limit: Duration,
        want: impl Fn(&Sample) -> bool,
    ) -> Sample {
        let deadline = Instant::now() + limit;
        let mut list = self.samples.list.lock().unwrap();
        loop {
            if let Some(s) = list.iter().find(|s| s.asked >= since && want(s)) {
                return s.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let last = format!("{:?}", &list[list.len().saturating_sub(5)..]);
                // Not while holding the list: a poisoned lock would take the poller and
                // the node's timeline down with this panic.
                drop(list);
                panic!(
                    "{}: no such status within {} s; last answers: {last}",
                    self.name,
                    limit.as_secs()
                );
            }
            // Woken by the poller's next answer.
            list = self.samples.added.wait_timeout(list, left).unwrap().0;
        }
    }

    /// This node's `running` (exit 0), in the answers to polls sent at or after host time
    /// `since`, awaited at most `limit`; any other answer that counts fails the test with
    /// the node's timeline (from `zero`). Which answers count is `awaiting`'s.
    pub fn await_running(
        &self,
        since: f64,
        limit: Duration,
        awaiting: Awaiting,
        zero: f64,
    ) -> Sample {
        let s = self.await_sample(since, limit, |s| match awaiting {
            Awaiting::RunEnd => s.answered() && s.verdict != "in-progress",
            Awaiting::FirstAnswer => s.answered(),
        });
        assert_eq!(
            (s.verdict.as_str(), s.exit),
            ("running", 0),
            "{}: {s:?}\n{}",
            self.name,
            self.timeline(zero)
        );
        s
    }

    /// Once a node answered `running`, it must not go back to "in progress": the
    /// management server would take that for a node starting over.
    pub fn assert_no_step_back(&self) {
        let samples = self.samples.list.lock().unwrap();
        if let Some(first) = samples.iter().position(|s| s.verdict == "running") {
            if let Some(back) = samples[first..].iter().find(|s| s.verdict == "in-progress") {
                panic!("{}: in progress again after running: {back:?}", self.name);
            }
        }
    }

    /// The node's timeline: one line per change of answer, seconds from `zero`.
    pub fn timeline(&self, zero: f64) -> String {
        let mut out = Vec::new();
        let mut last = String::new();
        let list = self.samples.list.lock();
        for s in list
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
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
pub fn poll(remote: Remote, samples: Arc<Samples>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let asked = unix_now();
        let out = remote.run(Duration::from_secs(30), "etcd-setup status --format json");
        let at = unix_now();
        let exit = out.status.code().unwrap_or(-1);
        let sample = match serde_json::from_slice::<Value>(&out.stdout) {
            Ok(v) => Sample::from_json(asked, at, exit, &v),
            // No answer (SSH or the socket failed): the management server sees that too.
            Err(_) => Sample {
                asked,
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
pub struct Cluster {
    pub tag: String,
    pub nodes: Vec<Node>,
    /// Host time the timelines count from (after boot, before the first insert).
    pub zero: f64,
    pub hub: Hub,
    /// `etcd.initial_cluster` of every node.
    pub initial_cluster: String,
    /// The cluster token every node is configured with.
    pub token: String,
    /// What the operator added to every node's configuration.
    pub additions: Additions,
    /// Host services every node may reach (`VmSpec::guest_forwards`), on every boot.
    pub forwards: Vec<(u16, u16)>,
}

impl Cluster {
    /// Boots the three nodes; with `tls`, every node gets its certificate from it and
    /// the cluster speaks https on peer and client URLs; every node's configuration gets
    /// `additions`.
    pub fn boot(tag: &str, tls: Option<&Pki>, additions: Additions) -> Cluster {
        Cluster::boot_with_forwards(tag, tls, additions, Vec::new())
    }

    /// [`Cluster::boot`], every node also reaching the host services of `forwards`
    /// (as `VmSpec::guest_forwards`; kept for every recreated node).
    pub fn boot_with_forwards(
        tag: &str,
        tls: Option<&Pki>,
        additions: Additions,
        forwards: Vec<(u16, u16)>,
    ) -> Cluster {
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
            spec.guest_forwards = forwards.clone();
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
            forwards,
        }
    }

    /// Node `i` made a fresh node again in its own VM, for scenarios about what a first
    /// run decides (a rejoin, another token, another CA) rather than about the platform's
    /// boot of a new VM, which c1's total loss shows ([`Cluster::recreate_all`]): a boot
    /// under TCG costs 100–260 s beside load, in the cluster stream, CI's longest. etcd is stopped and
    /// disabled, and what a recreated VM's first run would not find is
    /// removed: etcd's binaries, environment and data, every etcd-setup state and failure
    /// file (the package's folders and the status socket stay, as on a new disk).
    /// cloud-init's files stay for the caller to change as the new cloud-config would
    /// write them; then [`Cluster::start_first_run`]. The ISO stays in the drive, as on a
    /// VM booted with it attached: these scenarios are about the run's decision, the
    /// insert path is each cluster's formation's, and detaching while a run waits is
    /// vm_run j's last step (an eject here once met a run that pulled the open tray in).
    pub fn make_fresh_in_place(&mut self, i: usize) {
        let vm = self.nodes[i].vm.as_mut().expect("the node has a VM");
        vm.ssh_ok(
            "sudo sh -c 'systemctl stop etcd-setup.service etcd.service; \
             systemctl disable etcd.service 2>/dev/null; \
             rm -f /etc/etcd-setup/etcd.env /home/cloud/etcd-setup-failed; \
             find /opt/bin /var/lib/etcd-setup -mindepth 1 -delete; rm -rf /var/lib/etcd; \
             find /run/etcd-setup -mindepth 1 ! -name status.sock -delete; \
             systemctl reset-failed etcd-setup.service etcd.service 2>/dev/null; true'",
        );
        // A recreated VM starts with the host's clock (qemu's RTC); this guest's has fallen
        // behind under TCG over the cluster's life (c3 in CI's quiet phase: a certificate
        // issued on the host a moment before was "not valid before" for the guest). Set
        // it as a new boot would have it.
        let lag = vm.clock_offset();
        vm.ssh_ok(&format!("sudo date -u -s @{:.3} >/dev/null", unix_now()));
        let left = vm.ssh_ok(
            "sudo sh -c 'systemctl is-active etcd.service; systemctl is-enabled etcd.service; \
             ls -A /opt/bin /var/lib/etcd-setup; ls -d /var/lib/etcd'; true",
        );
        assert_eq!(
            left.split_whitespace().collect::<Vec<_>>(),
            ["inactive", "disabled", "/opt/bin:", "/var/lib/etcd-setup:"],
            "{}: not fresh after the reset:\n{left}",
            self.nodes[i].name
        );
        report(&format!(
            "cluster {}: {} made a fresh node in place (etcd stopped and disabled, its binaries, data and \
             etcd-setup's state removed, the ISO left in its drive; its clock, {lag:+.1} s off the host's, set to it)",
            self.tag, self.nodes[i].name
        ));
    }

    /// Starts etcd-setup.service on node `i`, as its boot does with the ISO attached: the
    /// run finds the disc left in the drive at once. Returns the host time before the start.
    pub fn start_first_run(&self, i: usize) -> f64 {
        let at = unix_now();
        self.nodes[i]
            .vm()
            .ssh_ok("sudo systemctl start --no-block etcd-setup.service");
        at
    }

    /// Every node's VM destroyed with its disk, then three new ones booted at once from
    /// fresh overlays of the template with the same names, addresses and cloud-config
    /// (and host services), as the platform recreates a cluster whose VMs are all gone.
    /// Their answers go on in the same timelines. Returns the host time the old VMs were
    /// gone.
    pub fn recreate_all(&mut self) -> f64 {
        let image = Image::from_env();
        for n in &mut self.nodes {
            n.stop_polling();
            drop(n.vm.take());
        }
        let gone = unix_now();
        let mut vms = Vec::new();
        for i in 0..self.nodes.len() {
            self.hub.free_port(i);
            let mut spec = node_spec(
                &self.hub,
                i,
                &self.nodes[i].name,
                &self.nodes[i].ip,
                &self.initial_cluster,
                &self.token,
                self.additions,
            );
            spec.guest_forwards = self.forwards.clone();
            vms.push(Vm::boot(&image, spec));
        }
        for (i, mut vm) in vms.into_iter().enumerate() {
            let to_ssh = vm.wait_ssh(Duration::from_secs(400)).as_secs_f64();
            report(&format!(
                "cluster {}: {} booted anew from the template (three at once), SSH after {to_ssh:.1} s",
                self.tag, self.nodes[i].name
            ));
            self.nodes[i].vm = Some(vm);
            self.nodes[i].start_polling();
        }
        gone
    }

    /// Inserts `iso` into node `i`'s Kubernetes CD-ROM drive; returns the host time.
    pub fn insert(&mut self, i: usize, iso: &str) -> f64 {
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
    pub fn insert_all_and_await_running(&mut self, iso: &str) {
        let mut inserted = Vec::new();
        for i in 0..self.nodes.len() {
            if i > 0 {
                std::thread::sleep(INSERT_GAP);
            }
            inserted.push(self.insert(i, iso));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let s = n.await_running(
                inserted[i],
                Duration::from_secs(600),
                Awaiting::RunEnd,
                self.zero,
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
    pub fn etcdctl(&self, i: usize, args: &str) -> String {
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

impl Cluster {
    /// How many members `etcdctl endpoint health --cluster` through node `i` calls
    /// healthy, asked again every 5 s for up to 60 s until `want` are, and its last
    /// output. Its probe is a quorum read bounded by `--command-timeout`; under a loaded
    /// bed it timed out on members whose status said running (c4, local CI-like run at
    /// ccdf0c4: 0 of 2), and a member stays unhealthy to it only when it is.
    pub fn healthy_members(&self, i: usize, want: usize) -> (usize, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut tries = 0;
        loop {
            let health = self.etcdctl(i, "endpoint health --cluster");
            let healthy = health.matches("is healthy").count();
            tries += 1;
            if healthy >= want || Instant::now() >= deadline {
                if tries > 1 {
                    report(&format!(
                        "cluster {}: endpoint health --cluster: {healthy} healthy after {tries} asks",
                        self.tag
                    ));
                }
                return (healthy, health);
            }
            std::thread::sleep(Duration::from_secs(5));
        }
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
pub fn node_spec(
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
pub fn with_additions(rendered: &str, additions: Additions) -> String {
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
pub fn await_all_waiting_for_iso(c: &Cluster, since: f64) {
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

/// The member IDs etcd lists, by name, and whether each is a started voter.
pub fn members(c: &Cluster, via: usize) -> Vec<(String, String, bool)> {
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

/// Node `i` answers `waiting-for-iso` after host time `since` (a freshly booted node).
pub fn await_node_waiting_for_iso(c: &Cluster, i: usize, since: f64) {
    let s = c.nodes[i].await_sample(since, Duration::from_secs(300), |s| {
        s.phase == "waiting-for-iso"
    });
    assert_eq!(s.verdict, "in-progress", "{s:?}");
}

/// Lines of what `script` printed on node `i`, whatever its exit status.
pub fn lines_of(c: &Cluster, i: usize, script: &str) -> Vec<String> {
    let out = c.nodes[i].vm().ssh(script);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}
