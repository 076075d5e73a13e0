//! Moving a data dir aside instead of deleting it: renamed beside itself with a label and
//! the UTC time, e.g. `/var/lib/etcd` → `/var/lib/etcd.removed-20261201T101500Z`.
//!
//! One rename within the parent folder (atomic: a power cut leaves the old name or the
//! new one), then the parent is fsynced so the new name is durable. A name already taken
//! gets `-2`, `-3`, ... appended; `rename(2)` onto an existing non-empty folder fails, so
//! nothing is ever overwritten. Used by joining (a removed member's data), and meant for
//! restore and upgrade as well.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use crate::shared::report::file_stamp as stamp;

/// Renames `path` to `PATH.LABEL-STAMP` (first free name) beside itself and fsyncs the
/// parent; returns the new path.
pub fn move_aside(path: &Path, label: &str, now: SystemTime) -> Result<PathBuf> {
    let name = path
        .file_name()
        .with_context(|| format!("{} has no file name to move aside", path.display()))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::symlink_metadata(path)
        .with_context(|| format!("cannot move {} aside", path.display()))?;
    let base = format!("{}.{label}-{}", name.to_string_lossy(), stamp(now));
    let mut target = parent.join(&base);
    let mut n = 1;
    while std::fs::symlink_metadata(&target).is_ok() {
        n += 1;
        if n > 1000 {
            bail!("no free name to move {} aside as {base}", path.display());
        }
        target = parent.join(format!("{base}-{n}"));
    }
    std::fs::rename(path, &target)
        .with_context(|| format!("cannot rename {} to {}", path.display(), target.display()))?;
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .with_context(|| {
            format!(
                "cannot fsync {} after moving {} aside",
                parent.display(),
                path.display()
            )
        })?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    #[test]
    fn stamp_is_basic_iso_utc() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_119_300); // 2026-12-01T10:01:40Z
        assert_eq!(stamp(t), "20261201T100140Z");
        assert_eq!(stamp(UNIX_EPOCH), "19700101T000000Z");
    }

    #[test]
    fn moves_a_data_dir_beside_itself_keeping_its_files_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("etcd");
        std::fs::create_dir_all(data.join("member/wal")).unwrap();
        std::fs::write(data.join("member/wal/0.wal"), b"wal").unwrap();
        let t = UNIX_EPOCH + Duration::from_secs(1_796_119_300);
        let moved = move_aside(&data, "removed", t).unwrap();
        assert_eq!(moved, dir.path().join("etcd.removed-20261201T100140Z"));
        assert!(!data.exists());
        assert_eq!(
            std::fs::read(moved.join("member/wal/0.wal")).unwrap(),
            b"wal"
        );
        // The same second again: a second name, the first one untouched.
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("x"), b"second").unwrap();
        let again = move_aside(&data, "removed", t).unwrap();
        assert_eq!(again, dir.path().join("etcd.removed-20261201T100140Z-2"));
        assert_eq!(std::fs::read(again.join("x")).unwrap(), b"second");
        assert!(moved.join("member/wal/0.wal").exists());
    }

    #[test]
    fn a_missing_data_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = move_aside(&dir.path().join("nope"), "removed", SystemTime::now()).unwrap_err();
        assert!(format!("{e:#}").contains("nope"), "{e:#}");
    }
}
