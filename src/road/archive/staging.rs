//! The private staging folder the archive is extracted into, and its clean-up.

use crate::reason::Failure;
use std::fs::{self, File};
use std::io;
use std::mem::ManuallyDrop;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Names of staging folders start with this, so a later run can find leftovers.
pub const STAGING_PREFIX: &str = ".etcd-setup-staging-";

/// A private (0700) folder, removed with everything in it when dropped, on every failure
/// path and during a panic's unwinding, unless [`into_path`](Staging::into_path) took it.
#[derive(Debug)]
pub struct Staging {
    path: PathBuf,
}

impl Staging {
    /// Creates a new staging folder under `parent`, named `.etcd-setup-staging-…`. `parent`
    /// should be on the filesystem of the install target, so the installer can rename.
    pub fn create(parent: &Path) -> Result<Staging, Failure> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut attempts = 0;
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = parent.join(format!(
                "{STAGING_PREFIX}{}-{nanos:08x}-{n}",
                std::process::id()
            ));
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    // Owned from here on: dropping it removes it.
                    let staging = Staging { path };
                    fs::set_permissions(&staging.path, fs::Permissions::from_mode(0o700))
                        .map_err(|e| Failure::io(&staging.path, "cannot restrict", e))?;
                    return Ok(staging);
                }
                // A leftover of an earlier boot that had the same pid: take the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 100 => {
                    attempts += 1;
                }
                Err(e) => {
                    return Err(Failure::io(&path, "cannot create the staging folder", e));
                }
            }
        }
    }

    /// The staging folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the folder: it is no longer removed on drop.
    pub fn into_path(self) -> PathBuf {
        let mut this = ManuallyDrop::new(self);
        std::mem::take(&mut this.path)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // std's remove_dir_all does not follow symlinks; nothing to report to anyone here.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Removes the staging folders a killed run left under `parent`; returns how many. Only
/// directories named `.etcd-setup-staging-*` are touched. Call it under the run lock, or it
/// may remove the folder of a run in progress.
pub fn remove_stale_staging(parent: &Path) -> io::Result<usize> {
    let mut removed = 0;
    for entry in fs::read_dir(parent)? {
        let entry = entry?;
        let is_staging = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(STAGING_PREFIX));
        if is_staging && entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Flushes every file and folder under `path` (and `path` itself) to disk, children before
/// their folder, so that a rename of `path` after it cannot expose a partial tree after a
/// power cut. The extraction does not sync as it writes: the installer calls this once,
/// before its rename. Symlinks are not followed (extraction never creates any).
pub fn fsync_tree(path: &Path) -> Result<(), Failure> {
    let meta = fs::symlink_metadata(path).map_err(|e| Failure::io(path, "cannot inspect", e))?;
    if meta.is_dir() {
        let entries = fs::read_dir(path).map_err(|e| Failure::io(path, "cannot list", e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Failure::io(path, "cannot list", e))?;
            fsync_tree(&entry.path())?;
        }
    } else if !meta.is_file() {
        return Ok(());
    }
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Failure::io(path, "cannot flush to disk", e))
}
