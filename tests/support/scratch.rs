//! Scratch folders for files a test's etcd-setup configuration names (data dirs, TLS
//! files, snapshot folders): under `/var/lib/etcd-setup-tests`, not the checkout's
//! `target/` nor the system's temporary folder. Configuration (rightly) refuses an etcd
//! path under `/tmp`, `/home`, `/root`, `/run/user` or `/var/tmp`, which etcd's sandbox
//! hides, and a clone may lie under any of them; this folder lies under none, wherever
//! the checkout is.
//!
//! Each folder is named after the test, the process and a random suffix (created
//! exclusively, mode 0700), so parallel tests and parallel clones never share one, and is
//! removed when its guard drops.
#![allow(dead_code)] // each test binary uses its own part of the support

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

/// The parent of every scratch folder: root's, mode 0711 (others may pass through to a
/// folder a test opens to them, e.g. a second uid planting links; they cannot list it).
pub const ROOT: &str = "/var/lib/etcd-setup-tests";

/// A new, empty scratch folder for `what` (a short word: `upkeep`, `etcd-cluster`),
/// removed with everything in it when the returned guard drops.
pub fn dir(what: &str) -> tempfile::TempDir {
    let root = Path::new(ROOT);
    match std::fs::DirBuilder::new().mode(0o711).create(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("cannot create {ROOT} for the tests' scratch folders: {e}"),
    }
    // A folder someone else made or may write into, or a link, is not ours to use.
    let meta = std::fs::symlink_metadata(root).unwrap_or_else(|e| panic!("{ROOT}: {e}"));
    assert!(
        meta.file_type().is_dir()
            && meta.uid() == nix::unistd::geteuid().as_raw()
            && meta.mode() & 0o022 == 0,
        "{ROOT} must be a folder of this user, not writable by others \
         (uid {}, mode {:o}); remove it and run again",
        meta.uid(),
        meta.mode() & 0o7777
    );
    if meta.mode() & 0o7777 != 0o711 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))
            .unwrap_or_else(|e| panic!("{ROOT}: cannot set mode 0711: {e}"));
    }
    // The test's name (the thread's, as the harness names it), trimmed to a safe length.
    let test: String = std::thread::current()
        .name()
        .unwrap_or("test")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '.'
            }
        })
        .take(100)
        .collect();
    tempfile::Builder::new()
        .prefix(&format!("{what}-{test}-{}-", std::process::id()))
        .tempdir_in(root)
        .unwrap_or_else(|e| panic!("cannot create a scratch folder in {ROOT}: {e}"))
}
