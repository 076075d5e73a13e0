//! End-to-end tests on a booted etcd node VM (feature `vm-tests`; run by `tests/run`,
//! which builds the image and sets ETCD_SETUP_VM_IMAGE).

mod support;

use std::time::{Duration, Instant};
use support::vm::{report, Image, Vm, VmSpec};

/// The Kubernetes ISOs built by tests/inputs/make-isos.
fn isos() -> std::path::PathBuf {
    support::inputs::isos()
}

/// One boot proves the bed itself: SSH as `cloud`, cloud-init done without errors, the
/// CD-ROM empty at boot, an ISO hot-inserted over QMP seen by udev with its label, and
/// the static `etcd-setup` running in the guest, installed from its Debian package.
#[test]
fn test_bed_boots_a_node_and_hot_inserts_the_kubernetes_iso() {
    let image = Image::from_env();
    let iso = isos().join("k8s-etcd-3.5.1.iso");
    let mut vm = Vm::boot(&image, VmSpec::new("bed"));

    let limit = match vm.accel {
        support::vm::Accel::Kvm => Duration::from_secs(60),
        // As vm_run's boots: tests/run boots this node beside a three-node cluster, and
        // four guests booting at once on two cores took 217 s to SSH (a local CI run).
        support::vm::Accel::Tcg => Duration::from_secs(300),
    };
    let to_ssh = vm.wait_ssh(limit);
    report(&format!(
        "boot to SSH login: {:.1} s ({:?})",
        to_ssh.as_secs_f64(),
        vm.accel
    ));

    // cloud-init: done, no errors, and it made the `cloud` user we logged in as.
    let status = vm.ssh_timeout(Duration::from_secs(180), "cloud-init status --wait --long");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && text.contains("status: done"),
        "cloud-init: {text}"
    );
    report(&format!(
        "boot to cloud-init done: {:.1} s",
        vm.started.elapsed().as_secs_f64()
    ));
    let log =
        vm.ssh_ok("sudo grep -cE 'Traceback|\\[ERROR\\]|WARNING' /var/log/cloud-init.log || true");
    assert_eq!(
        log.trim(),
        "0",
        "cloud-init logged errors or warnings:\n{}",
        vm.ssh_ok("sudo grep -E 'Traceback|ERROR|WARNING' /var/log/cloud-init.log")
    );
    assert_eq!(vm.ssh_ok("id -un").trim(), "cloud");
    vm.ssh_ok("sudo -n true");

    // Empty drive at boot: udev sees no medium and no filesystem on sr0.
    let props = vm.ssh_ok("udevadm info --query=property /dev/sr0");
    assert!(
        !props.contains("ID_CDROM_MEDIA=1") && !props.contains("ID_FS_LABEL="),
        "sr0 has a medium at boot:\n{props}"
    );

    // Hot insert over QMP; udev must label the disc within seconds.
    let inserted = Instant::now();
    vm.insert_cdrom(&iso);
    let seen = vm.ssh_timeout(Duration::from_secs(30), "udevadm wait --timeout=20 /dev/disk/by-label/CDROM && readlink -f /dev/disk/by-label/CDROM");
    let secs = inserted.elapsed().as_secs_f64();
    assert!(
        seen.status.success(),
        "the guest did not see label CDROM within 20 s of the QMP insert"
    );
    assert_eq!(String::from_utf8_lossy(&seen.stdout).trim(), "/dev/sr0");
    report(&format!("QMP insert to /dev/disk/by-label/CDROM in the guest: {secs:.1} s (upper bound, includes an SSH round trip)"));
    let events = &vm.qmp().events;
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "DEVICE_TRAY_MOVED" && e["data"]["tray-open"] == false),
        "no DEVICE_TRAY_MOVED(closed) event from QMP: {events:?}"
    );
    // The content is the ISO we inserted: the guest reads the same bytes.
    let want = support::inputs::sha256_file(&iso);
    let got = vm.ssh_ok(&format!(
        "sudo head -c {} /dev/sr0 | sha256sum",
        std::fs::metadata(&iso).unwrap().len()
    ));
    assert_eq!(
        got.split_whitespace().next(),
        Some(want.as_str()),
        "sr0 does not hold the inserted ISO"
    );

    // The archive pass reads the real CD-ROM device in userspace, without mounting.
    let checked = Instant::now();
    let out = vm.ssh("sudo etcd-setup check --format json /dev/sr0");
    report(&format!(
        "etcd-setup check /dev/sr0 in the guest (19 MB tarball, via SSH): {:.1} s",
        checked.elapsed().as_secs_f64()
    ));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check /dev/sr0 printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(out.status.code(), Some(0), "check /dev/sr0: {doc}");
    let r = &doc["results"][0];
    assert_eq!(
        (r["label"].as_str(), r["etcd_version"].as_str()),
        (Some("CDROM"), Some("3.5.1")),
        "{r}"
    );
    let tarball = support::inputs::isos().join("etcd-v3.5.1-linux-amd64.tar.gz");
    assert_eq!(
        r["sha256"].as_str(),
        Some(support::inputs::sha256_file(&tarball).as_str())
    );
    assert_eq!(
        vm.ssh_ok("findmnt -rn -S /dev/sr0 | wc -l").trim(),
        "0",
        "check mounted the disc"
    );

    // The baked binary: runs, is the one vm-images/build put in, is static.
    let version = vm.ssh_ok("etcd-setup --version");
    assert!(version.starts_with("etcd-setup 0."), "{version}");
    let baked = image.build_info("binary_sha256");
    let got = vm.ssh_ok("sha256sum /usr/bin/etcd-setup");
    assert_eq!(
        got.split_whitespace().next(),
        Some(baked.as_str()),
        "the image holds another binary"
    );
    let ldd = vm.ssh("ldd /usr/bin/etcd-setup");
    let ldd_text = format!(
        "{}{}",
        String::from_utf8_lossy(&ldd.stdout),
        String::from_utf8_lossy(&ldd.stderr)
    );
    assert!(
        ldd_text.contains("statically linked") || ldd_text.contains("not a dynamic executable"),
        "etcd-setup in the image is not static: {ldd_text}"
    );

    // It came from the package, which dpkg installed in the image build: registered,
    // its units enabled by the postinst, the socket listening, the man pages readable.
    let installed = vm.ssh_ok("dpkg-query -W -f '${Status} ${Version}' etcd-setup");
    assert_eq!(
        installed,
        format!("install ok installed {}", image.build_info("deb_version"))
    );
    assert!(
        vm.ssh_ok("dpkg-query -S /usr/bin/etcd-setup")
            .starts_with("etcd-setup: "),
        "/usr/bin/etcd-setup is not the package's"
    );
    assert_eq!(
        vm.ssh_ok("systemctl is-enabled etcd-setup.service etcd-setup-status.socket"),
        "enabled\nenabled\n"
    );
    assert_eq!(
        vm.ssh_ok("systemctl is-active etcd-setup-status.socket"),
        "active\n"
    );
    // etcd's unit is the package's, loaded since boot (vm-images/build checks that the
    // package leaves it disabled; by now the run may have proven etcd and enabled it).
    assert!(
        vm.ssh_ok("dpkg-query -S /lib/systemd/system/etcd.service")
            .starts_with("etcd-setup: "),
        "/lib/systemd/system/etcd.service is not the package's"
    );
    assert_eq!(
        vm.ssh_ok("systemctl show -p LoadState,FragmentPath --value etcd.service"),
        "loaded\n/lib/systemd/system/etcd.service\n"
    );
    let man = vm.ssh_ok("MANWIDTH=100 man -P cat etcd-setup 2>&1");
    for needle in [
        "EXIT STATUS",
        "REASON CODES",
        "wrong-architecture",
        "etcd-setup-run(8)",
    ] {
        assert!(
            man.contains(needle),
            "`man etcd-setup` lacks {needle}:\n{man}"
        );
    }
    let man_run = vm.ssh_ok("MANWIDTH=100 man -P cat 8 etcd-setup-run 2>&1");
    assert!(man_run.contains("--lock-timeout"), "{man_run}");
    let completion = vm.ssh_ok(
        "bash -c 'source /usr/share/bash-completion/completions/etcd-setup && complete -p etcd-setup'",
    );
    assert!(completion.contains("etcd-setup"), "{completion}");
    report(&format!(
        "package {} ({} bytes) installed by dpkg in the image: units enabled, socket active, man etcd-setup works",
        image.build_info("deb_file"),
        image.build_info("deb_bytes")
    ));
}
