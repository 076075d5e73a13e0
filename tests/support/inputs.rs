//! Test inputs made at run time: the Kubernetes ISOs (tests/inputs/make-isos) and
//! facts about the binary under test.
#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The folder of ISOs and tarballs made by tests/inputs/make-isos (built once per
/// process; the script itself skips the work when its inputs did not change).
pub fn isos() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = super::vm::repo().join("target/test-inputs");
        let out = Command::new(super::vm::repo().join("tests/inputs/make-isos"))
            .arg(&dir)
            .output()
            .expect("run tests/inputs/make-isos");
        assert!(
            out.status.success(),
            "tests/inputs/make-isos failed (run vm-images/host-setup first?): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .clone()
}

/// SHA-256 of a file, hex.
pub fn sha256_file(path: &std::path::Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Builds an ISO 9660 image with Rock Ridge and Joliet from the folder `src`, as the
/// platform's tools do (xorriso in mkisofs mode).
pub fn make_iso(src: &Path, label: &str, out: &Path) {
    let result = Command::new("xorriso")
        .args(["-as", "mkisofs", "-quiet", "-R", "-J", "-V", label, "-o"])
        .arg(out)
        .arg(src)
        .output()
        .expect("run xorriso (install it with vm-images/host-setup)");
    assert!(
        result.status.success(),
        "xorriso: {}",
        String::from_utf8_lossy(&result.stderr)
    );
}
