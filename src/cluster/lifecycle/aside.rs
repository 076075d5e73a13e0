//! Moving a data dir aside instead of deleting it: renamed beside itself with a label and
//! the UTC time, e.g. `/var/lib/etcd` → `/var/lib/etcd.removed-20261201T101500Z`.
//!
//! One rename within the parent folder (atomic: a power cut leaves the old name or the
//! new one), then the parent is fsynced so the new name is durable. A name already taken
//! gets `-2`, `-3`, ... appended; `rename(2)` onto an existing non-empty folder fails, so
//! nothing is ever overwritten. Used by joining (a removed member's data) and leaving.
//!
//! A data dir that is a mount point (etcd on its own volume) cannot be renamed (`EBUSY`),
//! and moving it to the parent disk would copy the data off its volume: its contents are
//! moved into `PATH/.LABEL-STAMP` inside it instead (all but `lost+found` and earlier
//! asides of ours), and that is returned. A data dir that is a symbolic link to a folder
//! (an operator's link to the data's volume) keeps its link: what it points at is emptied
//! the same way, inside it.

use anyhow::{bail, Context, Result};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
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
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("cannot move {} aside", path.display()))?;
    if meta.is_dir() && is_mount_point(path) {
        return move_contents_aside(path, label, now);
    }
    if meta.file_type().is_symlink() {
        // An operator's link to the data's own volume: renaming the link would leave the
        // data where it is and have etcd make a fresh data dir on the parent's disk. The
        // link stays, and what it points at is emptied into an aside inside it, as a
        // mount point's is.
        return match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => move_contents_aside(path, label, now),
            _ => bail!(
                "cannot move {} aside: it is a symbolic link to something that is not a folder",
                path.display()
            ),
        };
    }
    let base = format!("{}.{label}-{}", name.to_string_lossy(), stamp(now));
    let target = free_name(parent, &base, path)?;
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

/// `dir/base`, or `dir/base-2`, `-3`, ...: the first name nothing has.
fn free_name(dir: &Path, base: &str, moving: &Path) -> Result<PathBuf> {
    let mut target = dir.join(base);
    let mut n = 1;
    while std::fs::symlink_metadata(&target).is_ok() {
        n += 1;
        if n > 1000 {
            bail!("no free name to move {} aside as {base}", moving.display());
        }
        target = dir.join(format!("{base}-{n}"));
    }
    Ok(target)
}

/// Whether the folder `dir` is a mount point: on another device than its parent, or a
/// mount point in this process's mount table (a bind mount from the same filesystem).
/// A link is not followed: it is no mount point.
pub fn is_mount_point(dir: &Path) -> bool {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let (Ok(m), Ok(p)) = (
        std::fs::symlink_metadata(dir),
        std::fs::symlink_metadata(parent),
    ) else {
        return false;
    };
    if !m.is_dir() {
        return false;
    }
    if m.dev() != p.dev() {
        return true;
    }
    let (Ok(real), Ok(table)) = (
        std::fs::canonicalize(dir),
        std::fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return false;
    };
    table.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|at| Path::new(&unescape_mountinfo(at)) == real)
    })
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = |c: &u8| (b'0'..=b'7').contains(c);
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(octal) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `name` is one of the hidden folders this agent makes inside a mounted data dir
/// (`.LABEL-STAMP...`), or the filesystem's `lost+found`: those stay where they are.
pub fn stays_in_a_mount(name: &str) -> bool {
    if name == "lost+found" {
        return true;
    }
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    rest.match_indices('-').any(|(i, _)| {
        let s = rest.as_bytes().get(i + 1..i + 16);
        s.is_some_and(|s| {
            s[..8].iter().all(u8::is_ascii_digit)
                && s[8] == b'T'
                && s[9..15].iter().all(u8::is_ascii_digit)
        })
    })
}

/// [`move_aside`] of a mount point: its contents into `dir/.LABEL-STAMP`.
fn move_contents_aside(dir: &Path, label: &str, now: SystemTime) -> Result<PathBuf> {
    let target = free_name(dir, &format!(".{label}-{}", stamp(now)), dir)?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&target)
        .with_context(|| format!("cannot create {}", target.display()))?;
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let name = e
            .with_context(|| format!("cannot list {}", dir.display()))?
            .file_name();
        if !stays_in_a_mount(&name.to_string_lossy()) && dir.join(&name) != target {
            names.push(name);
        }
    }
    for name in names {
        let (from, to) = (dir.join(&name), target.join(&name));
        std::fs::rename(&from, &to).with_context(|| {
            format!(
                "cannot rename {} to {} (what was moved so far is in {})",
                from.display(),
                to.display(),
                target.display()
            )
        })?;
    }
    for d in [&target, &dir.to_path_buf()] {
        std::fs::File::open(d)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("cannot fsync {}", d.display()))?;
    }
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
    fn a_linked_data_dir_keeps_its_link_and_its_contents_move_inside_what_it_points_at() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume");
        std::fs::create_dir_all(volume.join("member/wal")).unwrap();
        std::fs::write(volume.join("member/wal/0.wal"), b"wal").unwrap();
        let data = dir.path().join("etcd");
        std::os::unix::fs::symlink(&volume, &data).unwrap();
        let t = UNIX_EPOCH + Duration::from_secs(1_796_119_300);
        let moved = move_aside(&data, "removed", t).unwrap();
        assert_eq!(moved, data.join(".removed-20261201T100140Z"));
        assert!(std::fs::symlink_metadata(&data)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::read(volume.join(".removed-20261201T100140Z/member/wal/0.wal")).unwrap(),
            b"wal"
        );
        assert!(!volume.join("member").exists());
        // A link to a file is no data dir: refused, naming it, nothing moved.
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let odd = dir.path().join("odd");
        std::os::unix::fs::symlink(&file, &odd).unwrap();
        let err = move_aside(&odd, "removed", t).unwrap_err().to_string();
        assert!(err.contains(&odd.display().to_string()), "{err}");
        assert!(std::fs::symlink_metadata(&odd).is_ok() && file.exists());
    }

    #[test]
    fn a_missing_data_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = move_aside(&dir.path().join("nope"), "removed", SystemTime::now()).unwrap_err();
        assert!(format!("{e:#}").contains("nope"), "{e:#}");
    }

    #[test]
    fn our_hidden_asides_and_lost_found_stay_in_a_mount() {
        for stays in [
            "lost+found",
            ".removed-20261201T100140Z",
            ".removed-20261201T100140Z-2",
            ".before-restore-20261201T100140.123Z-77",
            ".restoring-20261201T100140.123Z-77",
        ] {
            assert!(stays_in_a_mount(stays), "{stays}");
        }
        for moves in ["member", ".hidden", ".removed-2026", "x-20261201T100140Z"] {
            assert!(!stays_in_a_mount(moves), "{moves}");
        }
        assert_eq!(
            unescape_mountinfo("/var/lib/my\\040etcd"),
            "/var/lib/my etcd"
        );
        assert_eq!(unescape_mountinfo("/cut\\04"), "/cut\\04");
    }

    /// A tmpfs at the data dir (the tests run as root): its contents move into a hidden
    /// aside inside it, the mount stays; a second time, the first aside stays put.
    #[test]
    fn a_mounted_data_dir_keeps_its_mount_and_its_contents_move_inside_it() {
        struct Mounted(PathBuf);
        impl Drop for Mounted {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&self.0)
                    .status();
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("etcd");
        std::fs::create_dir(&data).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(&data)
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs at {}", data.display());
        let _m = Mounted(data.clone());
        assert!(is_mount_point(&data));
        assert!(!is_mount_point(dir.path()));
        std::fs::create_dir_all(data.join("member/wal")).unwrap();
        std::fs::write(data.join("member/wal/0.wal"), b"wal").unwrap();
        std::fs::create_dir(data.join("lost+found")).unwrap();
        let t = UNIX_EPOCH + Duration::from_secs(1_796_119_300);
        let moved = move_aside(&data, "removed", t).unwrap();
        assert_eq!(moved, data.join(".removed-20261201T100140Z"));
        assert!(is_mount_point(&data));
        assert_eq!(
            std::fs::read(moved.join("member/wal/0.wal")).unwrap(),
            b"wal"
        );
        assert!(!data.join("member").exists() && data.join("lost+found").is_dir());
        std::fs::create_dir(data.join("member")).unwrap();
        let again = move_aside(&data, "removed", t).unwrap();
        assert_eq!(again, data.join(".removed-20261201T100140Z-2"));
        assert!(again.join("member").is_dir() && moved.join("member/wal/0.wal").exists());
    }
}
