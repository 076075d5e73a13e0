//! The README's first command (`vm-images/demo` runs it): boots a demo etcd node the way
//! the platform does (cloud-config rendered from packaging/cloud-config.yaml.tmpl, empty
//! CD-ROM), attaches a generated Kubernetes ISO over QMP, and shows what the node did.
//!
//! `cargo run --example demo -- [--iso PATH] [--keep]`; needs ETCD_SETUP_VM_IMAGE.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::vm::{Image, Vm, VmSpec};

fn main() {
    let mut iso = None;
    let mut keep = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--iso" => iso = args.next().map(PathBuf::from),
            "--keep" => keep = true,
            other => {
                eprintln!("usage: demo [--iso PATH] [--keep]  (unknown argument {other})");
                std::process::exit(2);
            }
        }
    }
    let iso = iso.unwrap_or_else(|| support::inputs::isos().join("k8s-etcd-3.5.1.iso"));
    let image = Image::from_env();

    step(&format!(
        "booting an etcd node VM from {}",
        image.dir.display()
    ));
    let mut spec = VmSpec::new("demo-node");
    spec.user_data = support::inputs::cloud_config("demo-node", &[]);
    let mut vm = Vm::boot(&image, spec);
    let to_ssh = vm.wait_ssh(Duration::from_secs(300));
    step(&format!(
        "{:?}: SSH login as cloud after {:.1} s",
        vm.accel,
        to_ssh.as_secs_f64()
    ));
    show(&vm, "cat /etc/etcd-setup/config.toml");
    show(&vm, "etcd-setup --version");
    // The unit starts after cloud-init wrote the configuration, and waits for the ISO.
    vm.ssh_timeout(
        Duration::from_secs(120),
        "sudo timeout 100 sh -c 'until grep -q waiting-for-iso /run/etcd-setup/state.json 2>/dev/null; do sleep 0.2; done'",
    );
    show(&vm, "systemctl status etcd-setup --no-pager | head -n 12");
    // What the management server sees when it polls over SSH.
    show(&vm, "etcd-setup status; echo \"(exit $?)\"");

    step(&format!(
        "attaching {} to the CD-ROM over QMP, as the platform does",
        iso.display()
    ));
    let inserted = Instant::now();
    vm.insert_cdrom(&iso);
    let done = vm.ssh_timeout(
        Duration::from_secs(600),
        "timeout 550 sh -c 'until [ \"$(systemctl show -p ExecMainExitTimestampMonotonic --value etcd-setup)\" != 0 ]; do sleep 0.2; done'; systemctl show -p ExecMainStatus --value etcd-setup",
    );
    let status = String::from_utf8_lossy(&done.stdout).trim().to_string();
    step(&format!(
        "etcd-setup run ended with exit status {status}, {:.1} s after the insert",
        inserted.elapsed().as_secs_f64()
    ));
    show(&vm, "sudo journalctl -b -u etcd-setup -o cat --no-pager");
    if status == "0" {
        show(&vm, "systemctl status etcd --no-pager | head -n 12");
        show(
            &vm,
            "/opt/bin/etcdctl --endpoints=http://127.0.0.1:2379 endpoint health; /opt/bin/etcdctl --endpoints=http://127.0.0.1:2379 member list -w table",
        );
    } else {
        show(&vm, "cat /home/cloud/etcd-setup-failed");
    }
    // cloud-init's runcmd ran the same job; once it is done the state is final.
    vm.ssh_timeout(Duration::from_secs(300), "cloud-init status --wait");
    show(&vm, "etcd-setup status; echo \"(exit $?)\"");
    show(&vm, "etcd-setup status --long");
    show(&vm, "etcd-setup status --format json");

    if keep {
        step(&format!(
            "the node stays up until you press Enter; log in with:\n  ssh -i {} -p {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null cloud@127.0.0.1",
            support::vm::ssh_key().private.display(),
            vm.ssh_port
        ));
        let _ = std::io::stdin().read_line(&mut String::new());
    }
    step(&format!(
        "stopping the node (console log kept in {})",
        vm.dir.join("console.log").display()
    ));
}

fn step(text: &str) {
    println!("==> {text}");
}

fn show(vm: &Vm, cmd: &str) {
    let out = vm.ssh(cmd);
    println!(
        "$ {cmd}\n{}{}",
        indent(&String::from_utf8_lossy(&out.stdout)),
        indent(&String::from_utf8_lossy(&out.stderr))
    );
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}
