//! The README's first command (`vm-images/demo` runs it): boots a demo etcd node from the
//! image with an empty CD-ROM, attaches a generated Kubernetes ISO over QMP the way the
//! platform does, and shows what the node saw and did.
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
    let mut vm = Vm::boot(&image, VmSpec::new("demo-node"));
    let to_ssh = vm.wait_ssh(Duration::from_secs(300));
    step(&format!(
        "{:?}: SSH login as cloud after {:.1} s",
        vm.accel,
        to_ssh.as_secs_f64()
    ));
    let status = vm.ssh_timeout(Duration::from_secs(300), "cloud-init status --wait");
    step(&format!(
        "cloud-init: {} ({:.1} s after start)",
        String::from_utf8_lossy(&status.stdout)
            .trim()
            .trim_start_matches("status: "),
        vm.started.elapsed().as_secs_f64()
    ));
    show(&vm, "etcd-setup --version");
    show(
        &vm,
        "lsblk -o NAME,TYPE,SIZE,FSTYPE,LABEL /dev/sr0 /dev/sr1",
    );

    step(&format!(
        "attaching {} to the CD-ROM over QMP",
        iso.display()
    ));
    let inserted = Instant::now();
    vm.insert_cdrom(&iso);
    let seen = vm.ssh_timeout(
        Duration::from_secs(30),
        "udevadm wait --timeout=20 /dev/sr0 && udevadm info --query=property /dev/sr0 | grep -E '^ID_FS_(TYPE|LABEL)='",
    );
    step(&format!(
        "the node saw the disc {:.1} s after the insert:\n{}",
        inserted.elapsed().as_secs_f64(),
        indent(&String::from_utf8_lossy(&seen.stdout))
    ));
    show(&vm, "lsblk -o NAME,TYPE,SIZE,FSTYPE,LABEL /dev/sr0");
    step("validating the etcd release on the disc, in userspace, without mounting");
    show(&vm, "time sudo etcd-setup check /dev/sr0");

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
