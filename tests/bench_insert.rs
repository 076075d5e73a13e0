//! The insert benchmark (issue 24 item 4): a measurement, not a timed test. It asserts only
//! that every run succeeded; the figures are printed. Run by hand (docs/testing.md):
//!
//! ```text
//! ETCD_SETUP_VM_IMAGE=$(vm-images/build | tail -n1) ETCD_SETUP_BENCH_N=5 \
//!   nice cargo test --features vm-tests --test bench_insert -- --ignored --nocapture
//! ```
//!
//! One boot of the node image; then N times: the node put back as before etcd-setup's
//! first run (etcd stopped and disabled, its unit of an older agent, environment, link,
//! binaries, data and every state file removed; not timed), the boot job started and
//! waiting for the disc, the ISO inserted over QMP. Each run's times come from the
//! agent's own `step: NAME at UNIX_MS` journal lines on the host's clock (the guest's
//! moved by a low offset: upper bounds), counted from the insert: noticed (`disc-seen`),
//! active (`start-job-done`: a `Type=notify` start job ends at READY=1), healthy
//! (`healthy`), and every step between. Medians over the N runs are printed last.

mod support;

use std::time::Duration;
use support::vm::{report, Image, Vm, VmSpec};

fn root(vm: &Vm, script: &str) -> String {
    let quoted = script.replace('\'', "'\\''");
    vm.ssh_ok(&format!("sudo sh -c '{quoted}'"))
}

fn wait_until_waiting_for_iso(vm: &Vm) {
    root(
        vm,
        "timeout 120 sh -c 'until grep -q \"waiting-for-iso\" /run/etcd-setup/state.json 2>/dev/null; do sleep 0.1; done'",
    );
}

/// Waits until etcd-setup.service has exited after `since` (its start's monotonic usec).
fn wait_run_done(vm: &Vm) -> i32 {
    let out = root(
        vm,
        "timeout 300 sh -c 'until [ \"$(systemctl show -p ActiveState --value etcd-setup)\" != activating ]; do sleep 0.1; done'; \
         systemctl show -p ExecMainStatus --value etcd-setup",
    );
    out.trim().parse().unwrap_or(-1)
}

/// The node as before the first run (what each measured run starts from).
fn reset(vm: &Vm) {
    root(
        vm,
        "systemctl disable --now etcd.service >/dev/null 2>&1; \
         rm -f /etc/etcd-setup/etcd.env /var/lib/etcd-setup/etcd /home/cloud/etcd-setup-failed \
               /var/lib/etcd-setup/state.json /run/etcd-setup/state.json; \
         if [ -e /etc/systemd/system/etcd.service ]; then rm -f /etc/systemd/system/etcd.service; systemctl daemon-reload; fi; \
         find /opt/bin -mindepth 1 -delete 2>/dev/null; rm -rf /var/lib/etcd; \
         systemctl reset-failed etcd-setup etcd 2>/dev/null; true",
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[test]
#[ignore = "a benchmark: run by hand with --ignored (docs/testing.md)"]
fn insert_to_healthy_medians_and_the_step_breakdown() {
    let n: usize = std::env::var("ETCD_SETUP_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let image = Image::from_env();
    let iso = support::inputs::isos().join("k8s-etcd-3.5.1.iso");
    let mut spec = VmSpec::new("bench");
    spec.user_data = support::inputs::cloud_config("bench", &[]);
    let mut vm = Vm::boot(&image, spec);
    vm.wait_ssh(Duration::from_secs(300));
    report(&format!(
        "bench: image {} ({}), {n} runs, {:?}",
        image.dir.display(),
        image.build_info("deb_file"),
        vm.accel
    ));
    // cloud-init's runcmd also runs `etcd-setup run`, behind the boot's own run: once,
    // before anything is measured.
    vm.ssh_timeout(Duration::from_secs(300), "cloud-init status --wait");
    let mut runs: Vec<Vec<(String, f64)>> = Vec::new();
    for i in 0..n {
        vm.eject_cdrom();
        reset(&vm);
        root(&vm, "systemctl start --no-block etcd-setup");
        wait_until_waiting_for_iso(&vm);
        let offset = vm.clock_offset();
        let cursor = root(
            &vm,
            "journalctl -u etcd-setup -n1 --show-cursor -o cat | sed -n 's/^-- cursor: //p'",
        );
        let inserted = support::vm::unix_now();
        vm.insert_cdrom(&iso);
        let status = wait_run_done(&vm);
        assert_eq!(
            status,
            0,
            "run {i} failed: {}",
            root(&vm, "cat /home/cloud/etcd-setup-failed 2>&1")
        );
        let log = root(
            &vm,
            &format!(
                "journalctl -u etcd-setup -o cat --after-cursor='{}' | grep '^step: ' || true",
                cursor.trim()
            ),
        );
        let steps: Vec<(String, f64)> = log
            .lines()
            .filter_map(|l| {
                let (name, ms) = l.strip_prefix("step: ")?.split_once(" at ")?;
                let ms: f64 = ms.trim().parse().ok()?;
                Some((name.to_string(), ms / 1000.0 - offset - inserted))
            })
            .collect();
        let mut previous = 0.0;
        let text: Vec<String> = steps
            .iter()
            .map(|(name, at)| {
                let s = format!("{name} {at:.2} s (+{:.2})", at - previous);
                previous = *at;
                s
            })
            .collect();
        report(&format!(
            "bench run {}: insert → {}",
            i + 1,
            text.join(", ")
        ));
        runs.push(steps);
    }
    let at =
        |run: &Vec<(String, f64)>, name: &str| run.iter().find(|(n, _)| n == name).map(|(_, t)| *t);
    let of = |name: &str| median(runs.iter().filter_map(|r| at(r, name)).collect());
    report(&format!(
        "bench medians over {n}: insert → noticed {:.2} s, active {:.2} s, healthy {:.2} s",
        of("disc-seen"),
        of("start-job-done"),
        of("healthy")
    ));
    // Each step's own share, median, in the order of the first run.
    let names: Vec<String> = runs
        .first()
        .map(|r| r.iter().map(|(n, _)| n.clone()).collect())
        .unwrap_or_default();
    let mut shares = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let share = median(
            runs.iter()
                .filter_map(|r| {
                    let this = at(r, name)?;
                    let before = if k == 0 { 0.0 } else { at(r, &names[k - 1])? };
                    Some(this - before)
                })
                .collect(),
        );
        shares.push(format!("{name} +{share:.2}"));
    }
    report(&format!("bench median step shares: {}", shares.join(", ")));
}
