//! `etcd-setup run` on booted etcd nodes: each scenario of the run issue from a clean
//! overlay, the node configured by the packaged cloud-config template, the ISO attached as
//! a real IDE CD-ROM at boot or hot-inserted over QMP. Prints scenario → verdict → seconds.

mod support;

use std::time::{Duration, Instant};
use support::vm::{report, Image, Vm, VmSpec};

const FAILED_FILE: &str = "/home/cloud/etcd-setup-failed";

fn boot(name: &str, iso: Option<&str>, overrides: &[(&str, &str)]) -> Vm {
    let image = Image::from_env();
    let mut spec = VmSpec::new(name);
    spec.cdrom = iso.map(|n| support::inputs::isos().join(n));
    spec.user_data = support::inputs::cloud_config(name, overrides);
    let mut vm = Vm::boot(&image, spec);
    let to_ssh = vm.wait_ssh(Duration::from_secs(300));
    report(&format!("{name}: SSH after {:.1} s", to_ssh.as_secs_f64()));
    vm
}

/// Runs a shell snippet in the guest as root and returns its stdout.
fn root(vm: &Vm, script: &str) -> String {
    let quoted = script.replace('\'', "'\\''");
    vm.ssh_ok(&format!("sudo sh -c '{quoted}'"))
}

/// Waits (in the guest, bounded) until `etcd-setup.service` has run and exited; returns
/// (exit status, seconds from its start to its exit).
fn wait_unit_exit(vm: &Vm, limit: Duration) -> (i32, f64) {
    let script = format!(
        "timeout {} sh -c 'until [ \"$(systemctl show -p ExecMainExitTimestampMonotonic --value etcd-setup)\" != 0 ] \
         && [ \"$(systemctl show -p ActiveState --value etcd-setup)\" != activating ]; do sleep 0.2; done' && \
         systemctl show -p ExecMainStatus,ExecMainStartTimestampMonotonic,ExecMainExitTimestampMonotonic etcd-setup",
        limit.as_secs()
    );
    let out = vm.ssh_timeout(limit + Duration::from_secs(30), &script);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "etcd-setup.service did not finish within {limit:?}: {text}\n{}",
        vm.ssh_ok("systemctl status etcd-setup --no-pager -l || true")
    );
    let field = |k: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {text}"))
    };
    let secs = (field("ExecMainExitTimestampMonotonic") - field("ExecMainStartTimestampMonotonic"))
        as f64
        / 1e6;
    (field("ExecMainStatus") as i32, secs)
}

fn failure_line(vm: &Vm) -> String {
    vm.ssh_ok(&format!("head -n1 {FAILED_FILE}"))
        .trim()
        .to_string()
}

/// Waits (in the guest, at most 120 s) until the run reports it is waiting for the ISO.
fn wait_until_waiting_for_iso(vm: &Vm) {
    root(
        vm,
        "timeout 120 sh -c 'until grep -q \"waiting-for-iso\" /run/etcd-setup/state.json 2>/dev/null; do sleep 0.2; done'",
    );
}

/// Inserts `iso` over QMP and returns the seconds until `condition` (a shell test) holds
/// in the guest, an upper bound: a guest-side watcher prints the guest time it first sees
/// the condition, turned into host time with a low clock offset.
fn insert_and_time(vm: &mut Vm, iso: &str, condition: &str) -> f64 {
    insert_and_clock(vm, iso, condition).0
}

/// [`insert_and_time`], also returning the host time of the insert and the guest clock's
/// offset, to place the run's journal `step:` lines on the same time line.
fn insert_and_clock(vm: &mut Vm, iso: &str, condition: &str) -> (f64, f64, f64) {
    let offset = vm.clock_offset();
    let watcher = support::vm::spawn_in_guest(
        vm,
        &format!("timeout 120 sh -c 'until {condition}; do sleep 0.05; done; date +%s.%N'"),
    );
    std::thread::sleep(Duration::from_millis(1500)); // let the watcher start before the insert
    let inserted = support::vm::unix_now();
    vm.insert_cdrom(&support::inputs::isos().join(iso));
    let seen = watcher.join().expect("watcher");
    let at: f64 = seen
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("watcher said {seen:?}"));
    (at - offset - inserted, inserted, offset)
}

/// Where the seconds from the insert to a healthy etcd went, from the last run's journal
/// `step: NAME at UNIX_MS` lines (guest clock, moved to the host's by `offset`): each
/// step's end after the insert and its own share. Returns the printed line and the
/// seconds from the insert to each step.
fn step_breakdown(vm: &Vm, inserted: f64, offset: f64) -> (String, Vec<(String, f64)>) {
    let log = root(
        vm,
        "journalctl -b -u etcd-setup -o cat | grep '^step: ' || true",
    );
    // The last run's steps: from its last disc-seen on.
    let lines: Vec<&str> = log.lines().collect();
    let from = lines
        .iter()
        .rposition(|l| l.starts_with("step: disc-seen "))
        .unwrap_or_else(|| panic!("no step lines in the journal:\n{log}"));
    let mut steps = Vec::new();
    for line in &lines[from..] {
        let Some((name, ms)) = line
            .strip_prefix("step: ")
            .and_then(|l| l.split_once(" at "))
        else {
            continue;
        };
        let ms: f64 = ms.trim().parse().unwrap_or_else(|_| panic!("{line}"));
        steps.push((name.to_string(), ms / 1000.0 - offset - inserted));
    }
    let mut text = Vec::new();
    let mut previous = 0.0;
    for (name, at) in &steps {
        text.push(format!("{name} {at:.2} s (+{:.2})", at - previous));
        previous = *at;
    }
    (format!("insert → {}", text.join(", ")), steps)
}

/// etcd neither enabled nor active, and nothing left half-installed.
fn assert_etcd_off(vm: &Vm) {
    let enabled = vm.ssh("systemctl is-enabled etcd.service");
    assert!(
        !enabled.status.success(),
        "etcd.service is enabled: {}",
        String::from_utf8_lossy(&enabled.stdout)
    );
    let active = vm.ssh_ok("systemctl is-active etcd.service || true");
    assert!(
        active.trim() != "active" && active.trim() != "activating",
        "etcd.service is {active}"
    );
    let staging = vm.ssh_ok("ls -a /opt/bin 2>/dev/null | grep -c etcd-setup-staging || true");
    assert_eq!(staging.trim(), "0", "staging folder left in /opt/bin");
}

fn assert_etcd_healthy(vm: &Vm) {
    assert_eq!(
        vm.ssh_ok("systemctl is-active etcd.service").trim(),
        "active"
    );
    assert_eq!(
        vm.ssh_ok("systemctl is-enabled etcd.service").trim(),
        "enabled"
    );
    let health =
        vm.ssh_ok("/opt/bin/etcdctl --endpoints=http://127.0.0.1:2379 endpoint health 2>&1");
    assert!(health.contains("is healthy"), "{health}");
}

/// `etcd-setup status --format json` as `cloud` (in the status group), as the management
/// server asks over SSH: (exit code, answer).
fn status_json(vm: &Vm) -> (i32, serde_json::Value) {
    let out = vm.ssh("etcd-setup status --format json");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "status is not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), doc)
}

fn verdict(scenario: &str, secs: f64, what: &str) {
    report(&format!(
        "run scenario {scenario:<44} | pass | {secs:>6.1} s | {what}"
    ));
}

/// a + g: ISO attached at boot → etcd active and healthy, no failure file; the packaged
/// unit and cloud-config pass systemd's and cloud-init's own checks; after a reboot the
/// run is a no-op that verifies etcd, which is active again.
#[test]
fn a_iso_at_boot_installs_etcd_and_g_a_reboot_keeps_it() {
    let mut vm = boot("run-a", Some("k8s-etcd-3.5.1.iso"), &[]);
    let (status, secs) = wait_unit_exit(&vm, Duration::from_secs(400));
    assert_eq!(
        status,
        0,
        "run failed: {}",
        vm.ssh_ok(&format!("cat {FAILED_FILE} 2>&1 || true"))
    );
    assert_etcd_healthy(&vm);
    assert!(
        vm.ssh(&format!("test -e {FAILED_FILE}")).status.code() == Some(1),
        "failure file after success"
    );
    // cloud-init's runcmd ran the same job: it waited or verified, and succeeded.
    let ci = vm.ssh_timeout(Duration::from_secs(300), "cloud-init status --wait");
    assert!(
        ci.status.success(),
        "cloud-init: {}",
        String::from_utf8_lossy(&ci.stdout)
    );
    let state = root(&vm, "cat /var/lib/etcd-setup/state.json");
    let doc: serde_json::Value = serde_json::from_str(&state).expect("state.json");
    assert_eq!(doc["phase"], "running", "{doc}");
    assert_eq!(doc["etcd_version"], "3.5.1");
    assert_eq!(doc["device"], "/dev/sr0");
    assert_eq!(doc["label"], "CDROM");
    let phases: Vec<&str> = doc["phases"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["phase"].as_str()).collect())
        .unwrap_or_default();
    for phase in [
        "waiting-for-iso",
        "validating",
        "installing",
        "starting",
        "running",
    ] {
        assert!(
            phases.contains(&phase),
            "the timeline lost {phase}: {phases:?}"
        );
    }
    let mode = root(&vm, "stat -c '%a %U' /var/lib/etcd");
    assert_eq!(mode.trim(), "700 etcd", "etcd data dir");
    verdict(
        "a: ISO attached at boot",
        secs,
        "etcd active, endpoint healthy, no failure file",
    );

    // status, socket-activated after the run ended: running, with the live view.
    let (code, doc) = status_json(&vm);
    assert_eq!(
        (code, doc["verdict"].as_str()),
        (0, Some("running")),
        "{doc}"
    );
    assert_eq!(doc["member_name"], "run-a", "{doc}");
    assert_eq!(doc["etcd"]["version"], "3.5.1", "{doc}");
    assert_eq!(doc["etcd"]["active_state"], "active", "{doc}");
    assert_eq!(doc["etcd"]["health"], "healthy", "{doc}");
    assert_eq!(doc["run"]["alive"], false, "{doc}");
    let line = vm.ssh_ok("etcd-setup status");
    assert!(
        line.starts_with("running: member run-a, etcd 3.5.1 active, healthy"),
        "{line}"
    );
    // A user outside the status group is refused, by name, with exit 5.
    let refused = root(
        &vm,
        "setpriv --reuid=nobody --regid=nogroup --clear-groups etcd-setup status 2>&1; echo rc=$?",
    );
    assert!(
        refused.contains("forbidden") && refused.trim().ends_with("rc=5"),
        "{refused}"
    );
    verdict(
        "a: status after success (socket activation)",
        0.0,
        "running, member and live version shown; others refused (exit 5)",
    );

    // The packaged files pass the tools that own their formats.
    let schema = root(
        &vm,
        "cloud-init schema --config-file /var/lib/cloud/instance/user-data.txt 2>&1",
    );
    assert!(schema.contains("Valid cloud-config"), "{schema}");
    let verify = root(
        &vm,
        "systemd-analyze verify etcd-setup.service etcd.service 2>&1; echo rc=$?",
    );
    assert!(
        verify.trim().ends_with("rc=0") && !verify.contains("etcd"),
        "systemd-analyze verify: {verify}"
    );

    // Exit code 0 of a second run: a fast no-op that verifies etcd.
    let t = Instant::now();
    let again = vm.ssh("sudo etcd-setup run");
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    verdict(
        "a: second run after success (no-op)",
        t.elapsed().as_secs_f64(),
        "exit 0, etcd verified",
    );

    // Exit code 5: another run holds the lock past --lock-timeout; nothing is recorded.
    let locked = root(&vm, "flock /run/etcd-setup/run.lock sleep 20 & holder=$!; sleep 1; etcd-setup run --lock-timeout 2s; echo rc=$?; kill $holder");
    assert!(locked.trim().ends_with("rc=5"), "{locked}");
    assert!(
        vm.ssh(&format!("test -e {FAILED_FILE}")).status.code() == Some(1),
        "a locked run wrote a failure"
    );

    // g: reboot; the unit runs again and only verifies.
    vm.reboot();
    vm.wait_ssh(Duration::from_secs(300));
    let (status, secs) = wait_unit_exit(&vm, Duration::from_secs(300));
    assert_eq!(status, 0);
    assert_etcd_healthy(&vm);
    let log = root(&vm, "journalctl -b -u etcd-setup -o cat --no-pager");
    assert!(
        log.contains("verifying"),
        "the run after the reboot did more than verify:\n{log}"
    );
    assert!(!log.contains("waiting for the Kubernetes ISO"), "{log}");
    let (code, doc) = status_json(&vm);
    assert_eq!(
        (code, doc["verdict"].as_str()),
        (0, Some("running")),
        "{doc}"
    );
    verdict(
        "g: reboot after success",
        secs,
        "run verified only; etcd active again",
    );
}

/// b: empty CD-ROM at boot, ISO inserted over QMP once the node is up → etcd active.
/// Also exit code 4: the run stopped by SIGTERM while waiting records `interrupted`.
#[test]
fn b_iso_inserted_after_boot_is_picked_up_from_the_uevent() {
    let mut vm = boot("run-b", None, &[]);
    wait_until_waiting_for_iso(&vm);

    // SIGTERM while waiting: exit 4, reason recorded, etcd off.
    root(&vm, "systemctl stop etcd-setup");
    let (status, _) = wait_unit_exit(&vm, Duration::from_secs(60));
    assert_eq!(status, 4);
    let line = failure_line(&vm);
    assert!(
        line.starts_with("interrupted: ") && line.contains("SIGTERM"),
        "{line}"
    );
    assert_etcd_off(&vm);
    verdict("exit 4: SIGTERM while waiting for the ISO", 0.0, &line);

    root(&vm, "systemctl start --no-block etcd-setup");
    wait_until_waiting_for_iso(&vm);
    let (secs, inserted, offset) = insert_and_clock(
        &mut vm,
        "k8s-etcd-3.5.1.iso",
        "[ \"$(systemctl is-active etcd.service)\" = active ]",
    );
    let (status, _) = wait_unit_exit(&vm, Duration::from_secs(300));
    assert_eq!(status, 0);
    let (breakdown, steps) = step_breakdown(&vm, inserted, offset);
    report(&format!("run scenario b steps: {breakdown}"));
    let names: Vec<&str> = steps.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "disc-seen",
            "disc-read",
            "archive-pass-done",
            "installed",
            "unit-written",
            "enabled-and-reloaded",
            "start-job-done",
            "healthy"
        ],
        "{breakdown}"
    );
    assert_etcd_healthy(&vm);
    assert!(
        vm.ssh(&format!("test -e {FAILED_FILE}")).status.code() == Some(1),
        "the interrupted reason was not removed on success"
    );
    verdict(
        "b: ISO hot-inserted after boot",
        secs,
        "QMP insert to etcd active (upper bound)",
    );
}

/// c: only the seed ISO, wait 20 s → iso-timeout within 25 s, non-zero exit, etcd off.
/// Also exit code 3: a missing configuration is reported as config-invalid.
#[test]
fn c_no_iso_times_out_with_a_reason_listing_the_discs() {
    let vm = boot("run-c", None, &[("ISO_WAIT", "20s")]);
    let (status, secs) = wait_unit_exit(&vm, Duration::from_secs(120));
    assert_eq!(status, 1);
    assert!(secs <= 25.0, "iso-timeout after {secs:.1} s, beyond 25 s");
    let line = failure_line(&vm);
    assert!(line.starts_with("iso-timeout: "), "{line}");
    assert!(line.contains("within 20 s"), "{line}");
    assert!(
        line.contains("/dev/sr1 (iso9660, label CIDATA, cloud-init seed)"),
        "{line}"
    );
    assert!(line.contains("/dev/sr0 (no medium)"), "{line}");
    let (code, doc) = status_json(&vm);
    assert_eq!(
        (code, doc["reason"]["code"].as_str()),
        (1, Some("iso-timeout")),
        "{doc}"
    );
    assert_eq!(
        vm.ssh_ok(&format!("stat -c %U {FAILED_FILE}")).trim(),
        "cloud"
    );
    assert_etcd_off(&vm);
    verdict(
        "c: no ISO, wait 20 s",
        secs,
        "iso-timeout, exit 1, etcd off",
    );

    let out = root(
        &vm,
        "etcd-setup run --config /etc/etcd-setup/absent.toml; echo rc=$?",
    );
    assert!(out.trim().ends_with("rc=3"), "{out}");
    let line = failure_line(&vm);
    assert!(
        line.starts_with("config-invalid: ") && line.contains("/etc/etcd-setup/absent.toml"),
        "{line}"
    );
    verdict("exit 3: configuration missing", 0.0, &line);
}

/// d: a Kubernetes ISO without etcd inserted → archive-missing within 2 s of insertion.
#[test]
fn d_iso_without_etcd_fails_archive_missing_within_seconds() {
    let mut vm = boot("run-d", None, &[]);
    wait_until_waiting_for_iso(&vm);
    let secs = insert_and_time(&mut vm, "k8s-no-etcd.iso", &format!("[ -s {FAILED_FILE} ]"));
    let (status, _) = wait_unit_exit(&vm, Duration::from_secs(60));
    assert_eq!(status, 1);
    let line = failure_line(&vm);
    assert!(line.starts_with("archive-missing: the Kubernetes ISO on /dev/sr0 (label CDROM) has no etcd/etcd-linux-amd64.tar.gz"), "{line}");
    assert_etcd_off(&vm);
    verdict(
        "d: ISO without etcd inserted",
        secs,
        "QMP insert to archive-missing in the file (upper bound)",
    );
}

/// e: a corrupt tarball, and one whose binaries are for another machine: each its own
/// code, nothing installed, etcd off.
#[test]
fn e_corrupt_and_foreign_archives_each_fail_with_their_own_code() {
    for (iso, code) in [
        ("k8s-corrupt-etcd.iso", "archive-corrupt"),
        ("k8s-wrong-arch.iso", "wrong-architecture"),
    ] {
        let vm = boot(&format!("run-e-{code}"), Some(iso), &[]);
        let (status, secs) = wait_unit_exit(&vm, Duration::from_secs(300));
        assert_eq!(status, 1);
        let line = failure_line(&vm);
        assert!(line.starts_with(&format!("{code}: ")), "{line}");
        assert!(line.contains("/dev/sr0"), "names no device: {line}");
        assert_etcd_off(&vm);
        assert!(
            vm.ssh("test -e /opt/bin/etcd").status.code() == Some(1),
            "etcd installed from a bad archive"
        );
        verdict(&format!("e: {iso}"), secs, code);
    }
}

/// f: etcd cannot start (its listen IP is not on the node) → etcd-start-failed with its
/// exit status and log lines; etcd stopped and disabled, not crash-looping.
#[test]
fn f_etcd_that_cannot_start_is_reported_and_not_left_crash_looping() {
    let vm = boot(
        "run-f",
        Some("k8s-etcd-3.5.1.iso"),
        &[("NODE_IP", "10.0.2.99")],
    );
    let (status, secs) = wait_unit_exit(&vm, Duration::from_secs(400));
    assert_eq!(status, 1);
    let text = vm.ssh_ok(&format!("cat {FAILED_FILE}"));
    let line = text.lines().next().unwrap_or_default();
    assert!(line.starts_with("etcd-start-failed: "), "{text}");
    assert!(line.contains("exited with status 1"), "{line}");
    assert!(
        line.contains("10.0.2.99:2380: bind: cannot assign requested address"),
        "etcd's own error (cannot bind 10.0.2.99) is not in the reason:\n{text}"
    );
    assert_etcd_off(&vm);
    let restarts = |vm: &Vm| vm.ssh_ok("systemctl show -p NRestarts --value etcd.service");
    let before = restarts(&vm);
    std::thread::sleep(Duration::from_secs(8)); // longer than RestartSec: a loop would show
    assert_eq!(restarts(&vm), before, "etcd.service keeps restarting");
    verdict(
        "f: etcd cannot bind its IP",
        secs,
        "etcd-start-failed, etcd stopped and disabled",
    );
}

/// h: `kill -9` of the run during extraction, then a new run → healthy etcd, no staging
/// folder left.
#[test]
fn h_a_run_killed_during_extraction_is_recovered_by_the_next_run() {
    let mut vm = boot("run-h", None, &[]);
    wait_until_waiting_for_iso(&vm);
    // In the guest: as soon as the state says "validating", SIGKILL the run and say in
    // which phase it was (the first "phase" key is the current one, read just before).
    let killer = support::vm::spawn_in_guest(
        &vm,
        r#"sudo timeout 120 sh -c 'until grep -q "\"phase\": *\"validating\"" /run/etcd-setup/state.json; do sleep 0.02; done; p=$(grep -o "\"phase\": *\"[a-z-]*\"" /run/etcd-setup/state.json | head -n1); pid=$(systemctl show -p MainPID --value etcd-setup); [ "${pid:-0}" -gt 0 ] && kill -9 $pid; echo $p'"#,
    );
    std::thread::sleep(Duration::from_millis(1500));
    vm.insert_cdrom(&support::inputs::isos().join("k8s-etcd-3.5.1.iso"));
    let killed_in = killer.join().expect("killer");
    let exit = vm.ssh_ok("systemctl show -p ExecMainCode,ExecMainStatus etcd-setup");
    assert!(
        exit.contains("ExecMainStatus=9"),
        "the run was not killed by SIGKILL: {exit}"
    );
    assert!(
        killed_in.contains("validating"),
        "the kill did not land during extraction: {killed_in}"
    );
    let enabled = vm.ssh("systemctl is-enabled etcd.service");
    assert!(
        !enabled.status.success(),
        "etcd enabled by a run killed before the start"
    );
    let t = Instant::now();
    let out = vm.ssh_timeout(Duration::from_secs(400), "sudo etcd-setup run; echo rc=$?");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.trim().ends_with("rc=0"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_etcd_healthy(&vm);
    let staging = vm.ssh_ok("ls -a /opt/bin | grep -c etcd-setup-staging || true");
    assert_eq!(staging.trim(), "0");
    verdict(
        "h: kill -9 during extraction, run again",
        t.elapsed().as_secs_f64(),
        "healthy etcd, no staging left",
    );
}

/// The etcd-setup package the image was built from, repacked by the test with a higher
/// version: the second .deb of an upgrade.
fn upgraded_deb(image: &Image, dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let deb = std::path::PathBuf::from(image.build_info("deb"));
    let tree = dir.join("deb-tree");
    let _ = std::fs::remove_dir_all(&tree);
    let run = |cmd: &mut std::process::Command| {
        let out = cmd.output().expect("run dpkg-deb");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(std::process::Command::new("dpkg-deb")
        .arg("-R")
        .arg(&deb)
        .arg(&tree));
    let version = format!("{}+upgrade1", image.build_info("deb_version"));
    let control = tree.join("DEBIAN/control");
    let text = std::fs::read_to_string(&control).expect("DEBIAN/control");
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("Version: ") {
                format!("Version: {version}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&control, text).expect("write DEBIAN/control");
    let out = dir.join(format!("etcd-setup_{version}_amd64.deb"));
    run(std::process::Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&tree)
        .arg(&out));
    (out, version)
}

/// etcd's process as systemd sees it: (MainPID, ActiveEnterTimestamp, NRestarts).
fn etcd_process(vm: &Vm) -> String {
    vm.ssh_ok("systemctl show -p MainPID,ActiveEnterTimestamp,NRestarts,ActiveState etcd.service")
}

/// i: the package upgraded on a running node (a second .deb with a higher version,
/// `dpkg -i` as an image update or an operator would) leaves etcd running untouched
/// and the node's state as it was; then `dpkg -r` and `dpkg --purge` remove every file of
/// the package and of etcd-setup's state, and leave etcd and its data alone.
#[test]
fn i_upgrading_the_package_on_a_running_node_leaves_etcd_and_its_state_alone() {
    let image = Image::from_env();
    let vm = boot("run-i", Some("k8s-etcd-3.5.1.iso"), &[]);
    let (status, _) = wait_unit_exit(&vm, Duration::from_secs(400));
    assert_eq!(
        status,
        0,
        "run failed: {}",
        vm.ssh_ok(&format!("cat {FAILED_FILE} 2>&1 || true"))
    );
    assert_etcd_healthy(&vm);
    // cloud-init's runcmd runs the same job after the unit; let it finish verifying.
    let ci = vm.ssh_timeout(Duration::from_secs(300), "cloud-init status --wait");
    assert!(
        ci.status.success(),
        "cloud-init: {}",
        String::from_utf8_lossy(&ci.stdout)
    );
    let (code, doc) = status_json(&vm);
    assert_eq!(code, 0, "{doc}");

    let (deb, version) = upgraded_deb(&image, &vm.dir);
    vm.copy_in(&deb, "/tmp/upgrade.deb");
    let state_sums = "sha256sum /var/lib/etcd-setup/state.json /run/etcd-setup/state.json";
    let before = (etcd_process(&vm), root(&vm, state_sums));
    let socket_before =
        vm.ssh_ok("systemctl show -p ActiveEnterTimestamp etcd-setup-status.socket");
    let t = Instant::now();
    let dpkg = root(&vm, "dpkg -i /tmp/upgrade.deb 2>&1");
    let upgrade_secs = t.elapsed().as_secs_f64();
    assert_eq!(
        vm.ssh_ok("dpkg-query -W -f '${Version} ${Status}' etcd-setup"),
        format!("{version} install ok installed"),
        "{dpkg}"
    );
    let after = (etcd_process(&vm), root(&vm, state_sums));
    assert_eq!(
        after, before,
        "the upgrade touched etcd or the state:\n{dpkg}"
    );
    assert!(before.0.contains("ActiveState=active"), "{}", before.0);
    assert_eq!(
        vm.ssh_ok("systemctl show -p ActiveEnterTimestamp etcd-setup-status.socket"),
        socket_before,
        "the status socket was restarted"
    );
    assert_eq!(
        vm.ssh_ok("systemctl is-enabled etcd-setup.service etcd-setup-status.socket"),
        "enabled\nenabled\n"
    );
    let (code, doc) = status_json(&vm);
    assert_eq!(
        (code, doc["verdict"].as_str()),
        (0, Some("running")),
        "{doc}"
    );
    assert_eq!(doc["etcd"]["restarts_since_confirmed"], 0, "{doc}");
    verdict(
        "i: package upgraded on a running node",
        upgrade_secs,
        "etcd MainPID and ActiveEnterTimestamp unchanged, state files identical, status running",
    );

    // remove: no file of the package, no unit link or helper state left; etcd runs on.
    let files = vm.ssh_ok("dpkg-query -L etcd-setup");
    assert!(files.contains("/usr/bin/etcd-setup\n"), "{files}");
    root(&vm, "dpkg -r etcd-setup >/dev/null 2>&1");
    // Every file the package listed is gone, and its own folders (shared ones such as
    // /usr/share/man/man8 stay).
    let left = root(
        &vm,
        &format!(
            "for f in {}; do if [ -d \"$f\" ]; then case $f in *etcd-setup*) echo $f;; esac; \
             elif [ -e \"$f\" ] || [ -L \"$f\" ]; then echo $f; fi; done",
            files.split_whitespace().collect::<Vec<_>>().join(" ")
        ),
    );
    assert_eq!(left, "", "dpkg -r left files of the package");
    let links = root(
        &vm,
        "find /etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled \
         /var/lib/systemd/deb-systemd-helper-masked -name '*etcd-setup*' 2>/dev/null; \
         ls /run/etcd-setup/status.sock 2>/dev/null || true",
    );
    assert_eq!(
        links, "",
        "dpkg -r left unit links, helper state or the socket"
    );
    assert_eq!(etcd_process(&vm), before.0, "dpkg -r touched etcd");

    // purge: etcd-setup's state goes too; etcd's data dir, unit and binaries stay.
    root(&vm, "dpkg --purge etcd-setup >/dev/null 2>&1");
    assert_eq!(
        root(&vm, "ls -d /var/lib/etcd-setup /run/etcd-setup /home/cloud/etcd-setup-failed 2>/dev/null || true"),
        ""
    );
    assert_eq!(
        root(&vm, "test -d /var/lib/etcd/member && test -x /opt/bin/etcd && test -f /etc/systemd/system/etcd.service && echo kept"),
        "kept\n"
    );
    assert_eq!(etcd_process(&vm), before.0, "dpkg --purge touched etcd");
    assert_etcd_healthy(&vm);
    verdict(
        "i: dpkg -r, then --purge",
        0.0,
        "no file of the package or its state left; etcd and its data dir untouched",
    );
}
