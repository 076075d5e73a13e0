//! Cluster c4, day 2 from one boot: a node whose ISO lacks etcd, mended; an upgrade from
//! 3.4.23 to 3.5.16 and a bad release rolled back; NOSPACE and its recovery; three
//! maintains at once; a restore after every data dir was lost (the runbook).

use crate::bed::*;
use crate::support;
use crate::support::vm::{report, unix_now, Remote};
use serde_json::Value;
use std::time::{Duration, Instant};

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

    // The third member arrives (the first one was seen waiting, the second failed: no
    // gap more to wait): two of three are a quorum; the node without etcd stays failed
    // and shows as unhealthy in etcd's own view.
    let third = c.insert(2, iso);
    for i in [0, 2] {
        let n = &c.nodes[i];
        n.await_running(third, Duration::from_secs(600), Awaiting::RunEnd, zero);
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
    let (healthy, health) = c.healthy_members(0, 2);
    assert_eq!(healthy, 2, "{health}");
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
    n.await_running(done, Duration::from_secs(60), Awaiting::FirstAnswer, zero);
    assert_eq!(started(c), (3, 3));
    let (healthy, health) = c.healthy_members(0, 3);
    assert_eq!(healthy, 3, "{health}");
    report(&format!(
        "cluster {tag}: the right ISO attached to {} and `systemctl start etcd-setup`: its run took {:.1} s, status running; 3 started, 3 healthy",
        n.name,
        done - again
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

/// A Kubernetes ISO whose etcd tarball has the layout of release `version` (3.5.30's
/// etcdctl and etcdutl) but an `etcd` that exits at once (the guest's `false`, a real
/// x86-64 ELF, passes the archive pass).
fn iso_with_an_etcd_that_exits(dir: &std::path::Path, version: &str) -> std::path::PathBuf {
    let top = dir.join(format!("pack/etcd-v{version}-linux-amd64"));
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
        .arg(format!("etcd-v{version}-linux-amd64"))
        .status()
        .unwrap();
    assert!(st.success());
    let iso = dir.join("k8s-etcd-exits.iso");
    support::inputs::make_iso(&tree, "K8S_BROKEN", &iso);
    iso
}

/// What the operator of cluster c4 adds to the template: the smallest space quota the
/// config takes ([`QUOTA`]), so that NOSPACE comes after a dozen 1 MiB writes (each takes
/// seconds under TCG), and defragmentation thresholds such a database passes.
const UPKEEP: Additions = Additions {
    etcd: "quota_backend_bytes = \"16MiB\"",
    tables: "[maintain]\nmin_db_size = \"4MiB\"\nmin_fragmented_percent = 50",
};

/// Cluster c4, day 2 from one boot: a node whose ISO lacks etcd, mended; an upgrade from
/// 3.4.23 to 3.5.16; NOSPACE and its recovery; three maintains at once; a restore after
/// every data dir was lost; after its learner rejoin, 3.6 refused and a patch upgrade to
/// 3.5.30.
pub fn c4_bad_iso_mended_upgrade_3_4_to_3_5_nospace_maintain_and_restore() {
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
    after_the_learner_rejoin_3_6_is_refused_and_a_patch_upgrade_to_3_5_30_keeps_three_voters(
        &mut c,
    );
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
    upgrade_all_at_once(c, &newer, false);
    assert_eq!(versions(c, 0), ["3.5.16"; 3]);
    let long = c.nodes[0].vm().ssh_ok("etcd-setup status --long");
    report(&format!(
        "cluster c4: status after the upgrade: {}",
        long.lines()
            .filter(|l| l.starts_with("upgrade:") || l.starts_with("cluster:"))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    await_cluster_version(c, "3.5");
    for k in 0..20 {
        let got = c.etcdctl(1, &format!("get --print-value-only /upgrade/k{k}"));
        if got.trim() != format!("v{k}") {
            // CI at 9b4654b read "" here once, from an ssh that never connected or a key
            // gone: say which.
            let keys = c.etcdctl(1, "get --prefix --keys-only /upgrade/");
            let status = c.etcdctl(1, "endpoint status -w table");
            panic!("/upgrade/k{k} read {got:?}; the keys under /upgrade/: {keys}\n{status}");
        }
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
    let iso = iso_with_an_etcd_that_exits(dir.path(), "3.5.30");
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

/// The platform attaches `iso` to every node, and `etcd-setup upgrade` is started on all
/// three at once: every one exits 0, one at a time (the cluster lock orders them); each node's turn (from the previous node's end to its own)
/// printed with its duration, with what the management server's polls saw meanwhile.
/// No poll of a node says `failed` during its own turn (its restart was asked for: one
/// caught mid-restart says `in-progress`, naming the upgrade); outside its turn a node
/// may see a leader change for a moment, which is reported, and with `strict` fails the
/// test too (all but one momentary stall a node, running again at its next poll with no
/// restart), as does a member other than the last that led at its own turn (by its etcd's
/// journal) or handed leadership on. Returns the nodes' names in the order they finished.
fn upgrade_all_at_once(c: &mut Cluster, iso: &std::path::Path, strict: bool) -> Vec<String> {
    let (_, leader) = space(c, 0);
    let ids: Vec<(String, String, bool)> = members(c, 0);
    // Where each etcd's journal stands now: who led when each member's etcd was stopped
    // for its turn is read from there afterwards (etcd's own raft lines), not guessed.
    let cursors: Vec<String> = c
        .nodes
        .iter()
        .map(|n| {
            n.vm().ssh_ok(
                "sudo journalctl -u etcd -n1 --show-cursor -o cat | sed -n 's/^-- cursor: //p'",
            )
        })
        .collect();
    let newer = iso.to_path_buf();
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
        // A poll outside the turn that found the member's quorum read stalled (etcd active,
        // no restart, no alarm: `/health` silent or false through the status's nine seconds
        // of patience) while the next poll found it running again is momentary: under CI's
        // load (eight TCG guests on two cores) a follower once stalled that long while
        // another member restarted. Everything else failing outside the turn is not.
        let window = |s: &Sample| s.at >= t0 && s.at <= ends[2].0 && (s.at <= begin || s.at > *end);
        let mut elsewhere: Vec<String> = Vec::new();
        let mut momentary: Vec<String> = Vec::new();
        for (k, s) in samples.iter().enumerate() {
            if !window(s) || s.verdict != "failed" {
                continue;
            }
            let shown = format!("+{:.1} s {}: {}", s.at - t0, s.reason, s.message);
            let stalled = s.reason == "etcd-unhealthy"
                && s.message.contains("is active but its health check says")
                && !s.message.contains("ALARM");
            let before = k.checked_sub(1).map(|j| &samples[j]);
            let after = samples.get(k + 1);
            let recovered = after.is_some_and(|a| {
                a.verdict == "running" && before.is_some_and(|b| b.restarts == a.restarts)
            });
            if stalled && recovered {
                momentary.push(shown);
            } else {
                elsewhere.push(shown);
            }
        }
        if momentary.len() > 1 {
            elsewhere.append(&mut momentary);
        }
        report(&format!(
            "cluster c4: {name} held the turn +{:.1}..+{:.1} s ({:.1} s): {} polls, {} failed, {} in-progress on purpose{}; failed outside its turn: {elsewhere:?}; a momentary stall outside its turn (at most one allowed): {momentary:?}",
            begin - t0,
            end - t0,
            end - begin,
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
        assert!(
            !strict || elsewhere.is_empty(),
            "{name} failed outside its turn: {elsewhere:?}\n{}",
            n.timeline(c.zero)
        );
        begin = *end;
    }
    let order: Vec<String> = ends.iter().map(|(_, n)| n.clone()).collect();
    report(&format!(
        "cluster c4: {} on all three at once: order {order:?}, leader before {leader}",
        iso.file_name().unwrap_or_default().to_string_lossy()
    ));
    // The leader goes last: no member but the last was stopped for its turn while, by
    // its own etcd's journal, it led, nor did it hand leadership on (the agent says so
    // when it does). Leadership may move by itself meanwhile (an election on a starved
    // guest): then the new leader goes last, which is what the rule asks.
    let id_of = |name: &str| ids.iter().find(|m| m.0 == name).map(|m| m.1.clone());
    let start = id_of(&leader).unwrap_or_default();
    let mut led = Vec::new();
    for (i, n) in c.nodes.iter().enumerate() {
        let own_id = id_of(&n.name).expect("the node is a member");
        let journal = n.vm().ssh_ok(&format!(
            "sudo journalctl -u etcd -o cat --no-pager --after-cursor='{}'",
            cursors[i].trim()
        ));
        let stop = leader_at_first_stop(&journal, &start);
        if strict {
            assert!(
                stop.is_some(),
                "{}: no stop of etcd in its journal since the upgrades began:\n{journal}",
                n.name
            );
        }
        let at_stop = stop.clone().flatten();
        let (_, _, (_, _, err)) = results.iter().find(|r| r.0 == n.name).expect("a result");
        let handed = err.contains("handing leadership");
        report(&format!(
            "cluster c4: {}: leader by its own journal when its etcd was stopped: {}{}",
            n.name,
            match (&stop, at_stop.as_deref()) {
                (None, _) => "(no stop seen)",
                (Some(_), None) => "none (an election under way)",
                (Some(_), Some(l)) => ids.iter().find(|m| m.1 == l).map_or(l, |m| m.0.as_str()),
            },
            if handed {
                "; it handed leadership on first"
            } else {
                ""
            }
        ));
        led.push((
            n.name.clone(),
            at_stop.as_deref() == Some(own_id.as_str()),
            handed,
        ));
    }
    let last = order.last().expect("three turns");
    let broken: Vec<&(String, bool, bool)> = led
        .iter()
        .filter(|(name, leading, handed)| name != last && (*leading || *handed))
        .collect();
    if strict {
        assert!(
            broken.is_empty(),
            "a member led at its turn while another still ran the old release (leader before: {leader}): {broken:?}, order {order:?}"
        );
    } else if !broken.is_empty() {
        report(&format!(
            "cluster c4: led at its turn, not last: {broken:?}"
        ));
    }
    order
}

/// Who led, by this member's etcd journal (`-o cat` lines after a cursor), when its etcd
/// was first stopped (`received signal; shutting down`; 3.4: `received terminated signal,
/// shutting down...`), starting from `leader` (the hex member ID that led at the cursor).
/// raft logs every change of leader a member sees (`raft.node: ID elected leader ID at
/// term N`, `… changed leader from ID to ID at term N`) and a loss (`lost leader`).
/// `None` when no stop is in the journal; `Some(None)` when it stopped without a leader.
fn leader_at_first_stop(journal: &str, leader: &str) -> Option<Option<String>> {
    let mut now = Some(leader.to_string());
    for line in journal.lines() {
        // 3.5's zap line; 3.4's capnslog says `received terminated signal, shutting down...`.
        if line.contains("received signal; shutting down")
            || line.contains(" signal, shutting down")
        {
            return Some(now);
        }
        if let Some(rest) = line.split(" elected leader ").nth(1) {
            now = rest.split_whitespace().next().map(str::to_string);
        } else if let Some(rest) = line.split(" changed leader from ").nth(1) {
            // `A to B at term N`
            now = rest.split_whitespace().nth(2).map(str::to_string);
        } else if line.contains(" lost leader ") {
            now = None;
        }
    }
    None
}

/// etcd's leader moves the cluster version a few seconds after the last member runs the
/// new minor: asked once a second in the guest (no event to await), at most 60 s.
fn await_cluster_version(c: &Cluster, want: &str) {
    let cluster_version = c.nodes[0].vm().ssh_ok(&format!(
        "for i in $(seq 60); do \
           m=$(exec 3<>/dev/tcp/127.0.0.1/2381 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 \
               && grep '^etcd_cluster_version' <&3); \
           case $m in *'cluster_version=\"{want}\"}} 1'*) break ;; esac; sleep 1; \
         done; echo \"$m\""
    ));
    report(&format!(
        "cluster c4: {}",
        cluster_version.trim().replace('\n', " ")
    ));
    assert!(
        cluster_version.contains(&format!("cluster_version=\"{want}\"}} 1")),
        "{cluster_version}"
    );
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
///
/// A put that etcd answers `request timed out` (its own proposal deadline: a 1 MiB entry
/// replicated by three emulated guests beside other tests took longer, local CI-like run
/// at e418c76) is put again, up to four times: the same key and value, so a timed-out put
/// that was applied after all changes nothing. Any other refusal ends the fill.
fn fill(c: &Cluster, via: usize, prefix: &str, count: usize) -> String {
    let out = c.nodes[via].remote().run(
        Duration::from_secs(900),
        &format!(
            "head -c 1048576 /dev/urandom >/tmp/fill.bin; \
             for i in $(seq {count}); do \
               for try in 1 2 3 4 5; do \
                 if err=$(ETCDCTL_API=3 /opt/bin/etcdctl --dial-timeout=3s --command-timeout=30s \
                          --endpoints={} put {prefix}$i </tmp/fill.bin 2>&1); then \
                   err=; break; \
                 fi; \
                 case $err in *'request timed out'*) echo \"timed out at $i, try $try\" >&2; sleep 2;; \
                   *) break;; esac; \
               done; \
               if [ -n \"$err\" ]; then echo \"refused at $i: $err\"; exit 0; fi; \
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

/// c4's `quota_backend_bytes` ([`UPKEEP`]).
const QUOTA: u64 = 16 << 20;

/// Issue 12 on VMs: the cluster filled up to its 16 MiB quota raises NOSPACE, which
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
        assert!(*size < QUOTA / 2, "{name} still holds {size} bytes");
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
    // 6 MiB written and deleted: past min_db_size (4 MiB) with most of it free.
    let said = fill(c, 0, "/frag/", 6);
    assert_eq!(said, "wrote 6");
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
    // On the three nodes at once (one quorum loss either way).
    let remotes: Vec<Remote> = c.nodes.iter().map(Node::remote).collect();
    std::thread::scope(|s| {
        for r in &remotes {
            s.spawn(move || {
                let out = r.run(
                    Duration::from_secs(120),
                    "sudo systemctl stop etcd && sudo rm -rf /var/lib/etcd/member",
                );
                assert!(out.status.success(), "{}: {out:?}", r.name);
            });
        }
    });
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
        // The first answer to a poll sent after `systemctl start` returned.
        n.await_running(done, Duration::from_secs(60), Awaiting::FirstAnswer, c.zero);
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
        n.await_running(now, Duration::from_secs(60), Awaiting::FirstAnswer, c.zero);
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

/// Issue 23 on VMs: after the runbook's rejoin two members were learners promoted on
/// 3.5.16, the trap of etcd #19557 on the way to 3.6. A 3.6 release (a stub: no 3.6 build
/// can be fetched here; its `etcd` never runs) is refused before any member is touched;
/// then unstable's 3.5.30, attached to every node with `upgrade` started on all three at
/// once: one at a time, the leader last, no poll of any node failed, and afterwards three
/// voters, cluster version 3.5, every member on 3.5.30, status naming 3.5.30 as installed
/// with no advisory of 3.5.16 left.
fn after_the_learner_rejoin_3_6_is_refused_and_a_patch_upgrade_to_3_5_30_keeps_three_voters(
    c: &mut Cluster,
) {
    let tag = c.tag.clone();
    let trap = "etcd-3.5-learner-promotion-before-3.6";
    let pid = |c: &Cluster| -> Vec<String> {
        c.nodes
            .iter()
            .map(|n| n.vm().ssh_ok("systemctl show -p MainPID --value etcd"))
            .collect()
    };
    let before = pid(c);
    let t = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let stub = iso_with_an_etcd_that_exits(dir.path(), "3.6.5");
    swap_disc(c, 0, &stub);
    let (code, out, err) = upgrade_on(&c.nodes[0].remote(), Duration::from_secs(300), "0s");
    assert_eq!(code, 6, "{out}\n{err}");
    assert!(err.contains("upgrade-below-minimum"), "{err}");
    assert_eq!(
        pid(c),
        before,
        "a member's etcd was restarted by a refused 3.6"
    );
    assert_eq!(versions(c, 0), ["3.5.16"; 3]);
    report(&format!(
        "cluster {tag}: 3.6.5 (stub) over 3.5.16 refused in {:.1} s, no etcd restarted: {}",
        t.elapsed().as_secs_f64(),
        err.trim().replace('\n', " | ")
    ));

    let t = Instant::now();
    let patch = support::inputs::isos().join("k8s-etcd-3.5.30.iso");
    upgrade_all_at_once(c, &patch, true);
    assert_eq!(versions(c, 0), ["3.5.30"; 3]);
    await_cluster_version(c, "3.5");
    let list: Value =
        serde_json::from_str(&c.etcdctl(1, "member list -w json")).expect("member list JSON");
    let list = list["members"].as_array().expect("members").clone();
    assert_eq!(list.len(), 3, "{list:?}");
    assert!(
        list.iter().all(|m| m.get("isLearner").is_none()),
        "a learner is left: {list:?}"
    );
    let voters = members(c, 2);
    assert!(voters.iter().all(|m| m.2), "not three voters: {voters:?}");
    for k in 0..20 {
        let got = c.etcdctl(1, &format!("get --print-value-only /restore/k{k}"));
        assert_eq!(got.trim(), format!("v{k}"));
    }
    for i in 0..3 {
        let doc = status_doc(c, i);
        assert_eq!(doc["verdict"], "running", "{doc}");
        assert_eq!(doc["etcd_version"], "3.5.30", "{doc}");
        assert!(!doc.to_string().contains(trap), "{doc}");
    }
    let long = c.nodes[0].vm().ssh_ok("etcd-setup status --long");
    assert!(!long.contains(trap), "{long}");
    assert!(!long.contains("not the installed"), "{long}");
    report(&format!(
        "cluster {tag}: 3.5.16 -> 3.5.30 after the learner rejoin, three at once: {:.1} s; 3 voters, no learner; status: {}",
        t.elapsed().as_secs_f64(),
        long.lines()
            .filter(|l| l.starts_with("etcd:") || l.starts_with("upgrade:") || l.starts_with("cluster:"))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
}

/// [`leader_at_first_stop`] on lines as etcd 3.5.16 writes them to the journal (the
/// election and signal lines recorded from a loopback member; the change and loss lines
/// are raft's own formats, node.go).
#[test]
fn the_leader_at_a_members_stop_is_read_from_its_journal() {
    let line = |msg: &str| format!("{{\"level\":\"info\",\"logger\":\"raft\",\"msg\":\"{msg}\"}}");
    let stop =
        "{\"level\":\"info\",\"msg\":\"received signal; shutting down\",\"signal\":\"terminated\"}";
    let journal = [
        line("raft.node: 2e12 elected leader 2e12 at term 2"),
        stop.to_string(),
    ]
    .join("\n");
    assert_eq!(
        leader_at_first_stop(&journal, "aa"),
        Some(Some("2e12".into()))
    );
    let journal = [
        line("raft.node: 2e12 changed leader from aa to bb at term 3"),
        stop.to_string(),
        line("raft.node: 2e12 elected leader 2e12 at term 4"),
    ]
    .join("\n");
    assert_eq!(
        leader_at_first_stop(&journal, "aa"),
        Some(Some("bb".into()))
    );
    let journal = [
        line("raft.node: 2e12 lost leader aa at term 3"),
        stop.to_string(),
    ]
    .join("\n");
    assert_eq!(leader_at_first_stop(&journal, "aa"), Some(None));
    assert_eq!(leader_at_first_stop("", "aa"), None);
    assert_eq!(
        leader_at_first_stop(&line("raft.node: 2e12 elected leader bb at term 3"), "aa"),
        None
    );
    // etcd 3.4's capnslog lines.
    let journal = "raft: raft.node: 2e12 changed leader from aa to 2e12 at term 3\n\
                   osutil: received terminated signal, shutting down...";
    assert_eq!(
        leader_at_first_stop(journal, "aa"),
        Some(Some("2e12".into()))
    );
    // No change seen before the stop: the leader of the cursor.
    assert_eq!(leader_at_first_stop(stop, "aa"), Some(Some("aa".into())));
}
