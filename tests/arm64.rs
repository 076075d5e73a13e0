//! The arm64 build: the static `aarch64-unknown-linux-musl` binary CI makes (tests/run and
//! .ci/run build it before the host tests), read with our own ELF reader, and run under
//! qemu's user-mode emulator (`qemu-aarch64`, from vm-images/host-setup) on the platform's
//! amd64 ISO, as an arm64 node would see it.

mod support;

use etcd_setup::road::elf::{self, Machine};
use std::path::PathBuf;
use std::process::{Command, Output};

/// The arm64 binary: `ETCD_SETUP_ARM64_BINARY`, or cargo's release output in the target
/// folder this test was built in (`CARGO_TARGET_DIR` when set, not always `target/`).
fn arm64_binary() -> PathBuf {
    let path = std::env::var_os("ETCD_SETUP_ARM64_BINARY").map_or_else(
        || {
            // CARGO_TARGET_TMPDIR is `<target folder>/tmp`.
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .parent()
                .unwrap_or(std::path::Path::new("target"))
                .join("aarch64-unknown-linux-musl/release/etcd-setup")
        },
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build --release --target aarch64-unknown-linux-musl` \
         (vm-images/host-setup adds the target)",
        path.display()
    );
    path
}

/// `etcd-setup ARGS` as an arm64 node runs it.
fn on_arm64(args: &[&str]) -> Output {
    Command::new("qemu-aarch64")
        .arg(arm64_binary())
        .args(args)
        .output()
        .expect("run qemu-aarch64 (vm-images/host-setup installs qemu-user)")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_arm64_binary_is_a_static_aarch64_executable_within_6_mib() {
    let path = arm64_binary();
    let bytes = std::fs::read(&path).expect("read the arm64 binary");
    assert_eq!(
        elf::check(&bytes, Machine::Aarch64),
        Ok(()),
        "{}",
        path.display()
    );
    assert_eq!(
        elf::is_static(&bytes),
        Ok(true),
        "{} is dynamic",
        path.display()
    );
    assert!(
        bytes.len() <= 6 << 20,
        "{} is {} bytes",
        path.display(),
        bytes.len()
    );
}

#[test]
fn an_arm64_node_looks_for_the_arm64_archive_and_refuses_the_amd64_release() {
    // The default archive path follows the architecture.
    let help = on_arm64(&["check", "--help"]);
    assert!(
        text(&help).contains("etcd/etcd-linux-arm64.tar.gz"),
        "{}",
        text(&help)
    );
    // The platform's ISO holds only the amd64 tarball: on arm64 the archive is missing.
    let iso = support::inputs::isos().join("k8s-etcd-3.5.1.iso");
    let out = on_arm64(&["check", iso.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("archive-missing: the Kubernetes ISO on")
            && text(&out).contains("has no etcd/etcd-linux-arm64.tar.gz"),
        "{}",
        text(&out)
    );
    // The amd64 tarball itself, or that ISO read at the amd64 path: wrong architecture.
    let tarball = support::inputs::isos().join("etcd-v3.5.1-linux-amd64.tar.gz");
    for args in [
        vec!["check", tarball.to_str().unwrap()],
        vec![
            "check",
            "--archive-path",
            "etcd/etcd-linux-amd64.tar.gz",
            iso.to_str().unwrap(),
        ],
    ] {
        let out = on_arm64(&args);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            text(&out).contains(
                "is the linux-amd64 release (etcd-v3.5.1-linux-amd64/); this machine needs linux-arm64"
            ) && text(&out).contains(": FAILED: wrong-architecture: "),
            "{}",
            text(&out)
        );
    }
}
