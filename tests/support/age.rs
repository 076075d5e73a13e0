//! age identities for the backup tests, made by Debian's `age-keygen` (the stock tool an
//! operator uses), never committed.
#![allow(dead_code)] // each test binary uses its own part of the support

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A new identity file `name` in `dir` made by `age-keygen` (mode 0600), and its
/// recipient (`age1…`).
pub fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    let out = Command::new("age-keygen")
        .arg("-o")
        .arg(&path)
        .output()
        .expect("age-keygen (apt install age)");
    assert!(out.status.success(), "age-keygen: {out:?}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new("age-keygen")
        .arg("-y")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "age-keygen -y: {out:?}");
    let recipient = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(recipient.starts_with("age1"), "{recipient}");
    (path, recipient)
}
