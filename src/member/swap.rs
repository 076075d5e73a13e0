//! Steps 3–4 of a restore: where the restored data is made, and how it takes the data
//! dir's place, always on the data dir's own filesystem.
//!
//! - The data dir is looked at without following it: a symbolic link is refused, naming
//!   its target (following it would make the restore act on another folder than the one
//!   configured, and replacing it would move the data to the link's filesystem); so is
//!   anything but a folder, and a folder others may write in.
//! - On the parent's filesystem (or absent): the restore goes into a private staging folder
//!   beside it, `<data_dir>.restoring-<time>-<pid>`, then the old data dir is renamed to
//!   `<data_dir>.before-restore-<time>-<pid>` and the restored one into its place.
//! - A mount point (its own filesystem, or a bind mount, which `rename(2)` refuses with
//!   EBUSY): everything happens inside it, so the restored data never lands on the parent
//!   disk: staging in `<data_dir>/.restoring-<time>-<pid>`, the old contents (`member/`
//!   and whatever else but `lost+found` and our own folders) moved into
//!   `<data_dir>/.before-restore-<time>-<pid>`, the restored contents moved in.
//! - Staging is our own output, never data: it is removed on every way out ([`Staging`]'s
//!   `Drop`), and what a killed attempt left (the strict names above, and the older
//!   `<data_dir>.restoring-<time>`) is removed by the next one. Moved-aside data is never
//!   removed; when the data dir is missing because a killed attempt had moved it aside
//!   (its staging and its aside share the `<time>-<pid>`), the rerun names where it is.
//! - ENOSPC and EDQUOT, anywhere, are `disk-full`.

use crate::reason::{Failure, ReasonCode};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

const RESTORING: &str = "restoring-";
const BEFORE: &str = "before-restore-";

/// The data dir as restore found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No data dir yet.
    Absent,
    /// A folder on its parent's filesystem: swapped by two renames beside it.
    Beside,
    /// A mount point: restored and swapped inside it.
    Mount,
}

/// Where the data dir is and how it will be swapped.
#[derive(Debug)]
pub struct Place {
    data_dir: PathBuf,
    parent: PathBuf,
    name: String,
    /// What the data dir is.
    pub kind: Kind,
    /// The data dir's owner, if it exists.
    owner: Option<(u32, u32)>,
}

/// What the leftovers of earlier attempts were.
#[derive(Debug, Default)]
pub struct Leftovers {
    /// Staging folders removed (our own partial output).
    pub removed: Vec<PathBuf>,
    /// The old data a killed attempt had moved aside before it could put its own in.
    pub interrupted_aside: Option<PathBuf>,
    /// The newest data dir an earlier restore moved aside.
    pub newest_aside: Option<PathBuf>,
}

fn failed(message: String) -> Failure {
    Failure::new(ReasonCode::RestoreFailed, message)
}

/// `restore-failed` with `message`, or `disk-full` naming `path` when `e` says so.
fn io_failed(path: &Path, e: io::Error, message: String) -> Failure {
    match e.raw_os_error() {
        Some(c)
            if c == nix::errno::Errno::ENOSPC as i32 || c == nix::errno::Errno::EDQUOT as i32 =>
        {
            Failure::io(path, "", e)
        }
        _ => failed(message).with_source(e),
    }
}

/// `YYYYMMDDTHHMMSS.mmmZ-PID` (ours) or `YYYYMMDDTHHMMSSZ` (before unique names).
fn is_token(t: &str) -> bool {
    let b = t.as_bytes();
    let stamp = |b: &[u8]| {
        b.len() >= 15
            && b[..8].iter().all(u8::is_ascii_digit)
            && b[8] == b'T'
            && b[9..15].iter().all(u8::is_ascii_digit)
    };
    if !stamp(b) {
        return false;
    }
    match &t[15..] {
        "Z" => true,
        rest => match rest.strip_prefix('.').and_then(|r| r.split_once("Z-")) {
            Some((ms, pid)) => {
                ms.len() == 3
                    && ms.bytes().all(|c| c.is_ascii_digit())
                    && !pid.is_empty()
                    && pid.len() <= 10
                    && pid.bytes().all(|c| c.is_ascii_digit())
            }
            None => false,
        },
    }
}

/// The token of `name` if it is exactly `PREFIX LABEL TOKEN`.
fn token_of<'a>(name: &'a str, prefix: &str, label: &str) -> Option<&'a str> {
    name.strip_prefix(prefix)?
        .strip_prefix(label)
        .filter(|t| is_token(t))
}

/// Whether `p` is a real folder (not a link to one).
fn is_real_dir(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

/// Refuses a folder restore writes into that is not root's (or, for a mount point, the
/// data dir's owner etcd's) or that others may write in.
fn check_writable_only_by_us(dir: &Path, what: &str, etcd_uid: Option<u32>) -> Result<(), Failure> {
    // The folder itself, where a link to it leads (the data dir is no link by now).
    let m = fs::metadata(dir)
        .map_err(|e| io_failed(dir, e, format!("cannot look at {} ({what})", dir.display())))?;
    let us = nix::unistd::geteuid().as_raw();
    let owner_ok = m.uid() == us || Some(m.uid()) == etcd_uid;
    if !owner_ok || m.mode() & 0o022 != 0 {
        return Err(failed(format!(
            "{} ({what}) is owned by uid {} with mode {:o}: restore writes there only in a \
             folder that is root's and that no one else may write in; chown root and chmod \
             go-w it, and run again",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// The uid and gid of user etcd, if it exists.
fn etcd_user() -> Option<(u32, u32)> {
    nix::unistd::User::from_name(crate::member::unit::ETCD_USER)
        .ok()
        .flatten()
        .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
}

impl Place {
    /// Looks at `data_dir` (without following it) and its parent.
    pub fn of(data_dir: &Path) -> Result<Place, Failure> {
        let name = data_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| failed(format!("{} has no folder name", data_dir.display())))?;
        let parent = match data_dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let place = |kind, owner| Place {
            data_dir: data_dir.to_path_buf(),
            parent: parent.clone(),
            name: name.clone(),
            kind,
            owner,
        };
        let meta = match fs::symlink_metadata(data_dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !is_real_dir(&parent) {
                    fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(&parent)
                        .map_err(|e| {
                            io_failed(&parent, e, format!("cannot create {}", parent.display()))
                        })?;
                }
                check_writable_only_by_us(&parent, "the folder of etcd.data_dir", None)?;
                return Ok(place(Kind::Absent, None));
            }
            Err(e) => {
                return Err(io_failed(
                    data_dir,
                    e,
                    format!("cannot look at {} (etcd.data_dir)", data_dir.display()),
                ))
            }
            Ok(m) => m,
        };
        if meta.file_type().is_symlink() {
            let target = fs::read_link(data_dir).map_or_else(
                |e| format!("an unreadable target ({e})"),
                |t| t.display().to_string(),
            );
            return Err(failed(format!(
                "{} (etcd.data_dir) is a symbolic link to {target}; restore follows no link \
                 (replacing it would move the data off the link's filesystem): set \
                 etcd.data_dir to the folder itself, or mount the volume there, and run again",
                data_dir.display()
            )));
        }
        if !meta.is_dir() {
            return Err(failed(format!(
                "{} (etcd.data_dir) is not a folder; move it away and run again",
                data_dir.display()
            )));
        }
        let owner = Some((meta.uid(), meta.gid()));
        if crate::cluster::lifecycle::aside::is_mount_point(data_dir) {
            check_writable_only_by_us(
                data_dir,
                "etcd.data_dir, a mount point",
                etcd_user().map(|(u, _)| u),
            )?;
            Ok(place(Kind::Mount, owner))
        } else {
            check_writable_only_by_us(&parent, "the folder of etcd.data_dir", None)?;
            Ok(place(Kind::Beside, owner))
        }
    }

    /// The folder staging and asides go in, and the prefix of their names there.
    fn home(&self) -> (&Path, String) {
        match self.kind {
            Kind::Mount => (&self.data_dir, ".".to_string()),
            Kind::Absent | Kind::Beside => (&self.parent, format!("{}.", self.name)),
        }
    }

    /// Removes the staging folders earlier attempts left (by their strict names, real
    /// folders only: beside the data dir, and inside it when it is a folder), and finds
    /// the data they or earlier restores moved aside.
    pub fn clear_leftovers(&self) -> Result<Leftovers, Failure> {
        let mut found = Leftovers::default();
        let mut places = vec![(self.parent.clone(), format!("{}.", self.name))];
        if self.kind != Kind::Absent {
            places.push((self.data_dir.clone(), ".".to_string()));
        }
        let mut newest: Option<(String, PathBuf)> = None;
        for (dir, prefix) in places {
            let entries = fs::read_dir(&dir)
                .map_err(|e| io_failed(&dir, e, format!("cannot list {}", dir.display())))?;
            let mut names: Vec<String> = Vec::new();
            for e in entries {
                let e =
                    e.map_err(|e| io_failed(&dir, e, format!("cannot list {}", dir.display())))?;
                names.push(e.file_name().to_string_lossy().into_owned());
            }
            for n in &names {
                if let Some(t) = token_of(n, &prefix, BEFORE) {
                    let p = dir.join(n);
                    if is_real_dir(&p) && newest.as_ref().is_none_or(|(nt, _)| t > nt.as_str()) {
                        newest = Some((t.to_string(), p));
                    }
                }
            }
            for n in &names {
                let Some(t) = token_of(n, &prefix, RESTORING) else {
                    continue;
                };
                let p = dir.join(n);
                if !is_real_dir(&p) {
                    continue;
                }
                // Our own (partial) restore output of an attempt that did not finish: not
                // data, and the snapshot makes it again.
                fs::remove_dir_all(&p)
                    .map_err(|e| io_failed(&p, e, format!("cannot remove {}", p.display())))?;
                let aside = dir.join(format!("{prefix}{BEFORE}{t}"));
                if is_real_dir(&aside) {
                    found.interrupted_aside = Some(aside);
                }
                found.removed.push(p);
            }
        }
        found.newest_aside = newest.map(|(_, p)| p);
        if !found.removed.is_empty() {
            super::sync_dir(&self.parent)?;
        }
        Ok(found)
    }

    /// A new private staging folder on the data dir's filesystem.
    pub fn stage(&self, now: SystemTime) -> Result<Staging, Failure> {
        let token = format!(
            "{}-{}",
            crate::shared::report::file_stamp_ms(now),
            std::process::id()
        );
        let (home, prefix) = self.home();
        let dir = home.join(format!("{prefix}{RESTORING}{token}"));
        // mkdir is exclusive and follows no link at its name.
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io_failed(&dir, e, format!("cannot create {}", dir.display())))?;
        Ok(Staging { dir, token })
    }

    /// The owner the restored files get: the data dir's, or with none, user etcd's (when
    /// we are root and it exists).
    pub fn owner(&self) -> Option<(u32, u32)> {
        self.owner.or_else(|| {
            if nix::unistd::geteuid().is_root() {
                etcd_user()
            } else {
                None
            }
        })
    }

    /// Puts the restored data of `staging` in the data dir's place; the old data moved
    /// aside (its path), if there was any.
    pub fn swap(&self, staging: &Staging) -> Result<Option<PathBuf>, Failure> {
        let new = staging.data();
        match self.kind {
            Kind::Absent => {
                rename(&new, &self.data_dir, String::new)?;
                super::sync_dir(&self.parent)?;
                Ok(None)
            }
            Kind::Beside => {
                let aside = self
                    .parent
                    .join(format!("{}.{BEFORE}{}", self.name, staging.token));
                rename(&self.data_dir, &aside, String::new)?;
                kill_point("between-renames");
                if let Err(f) = rename(&new, &self.data_dir, String::new) {
                    // Put the old one back; if that fails too, say where it is.
                    let back = fs::rename(&aside, &self.data_dir);
                    return Err(Failure {
                        message: match back {
                            Ok(()) => format!("{}; the old data dir is back in place", f.message),
                            Err(e) => format!(
                                "{}; the old data is in {} (it could not be put back: {e})",
                                f.message,
                                aside.display()
                            ),
                        },
                        ..f
                    });
                }
                super::sync_dir(&self.parent)?;
                Ok(Some(aside))
            }
            Kind::Mount => self.swap_inside(staging),
        }
    }

    /// [`Place::swap`] inside a mount point.
    fn swap_inside(&self, staging: &Staging) -> Result<Option<PathBuf>, Failure> {
        let d = &self.data_dir;
        // lost+found, our staging and earlier asides stay.
        let ours = crate::cluster::lifecycle::aside::stays_in_a_mount;
        let old = names(d)?
            .into_iter()
            .filter(|n| !ours(&n.to_string_lossy()))
            .collect::<Vec<_>>();
        let aside = d.join(format!(".{BEFORE}{}", staging.token));
        let moved_aside = if old.is_empty() {
            None
        } else {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&aside)
                .map_err(|e| io_failed(&aside, e, format!("cannot create {}", aside.display())))?;
            for n in &old {
                rename(&d.join(n), &aside.join(n), || {
                    format!("; what was moved so far is in {}", aside.display())
                })?;
            }
            super::sync_dir(&aside)?;
            Some(aside.clone())
        };
        kill_point("between-renames");
        let new = staging.data();
        for n in names(&new)? {
            let to = d.join(&n);
            if fs::symlink_metadata(&to).is_ok() {
                return Err(failed(format!(
                    "{} is in the way of the restored {}; the restored data is removed again{}",
                    to.display(),
                    n.to_string_lossy(),
                    moved_aside.as_ref().map_or(String::new(), |a| format!(
                        ", the old data is in {}",
                        a.display()
                    ))
                )));
            }
            rename(&new.join(&n), &to, || {
                moved_aside.as_ref().map_or(String::new(), |a| {
                    format!("; the old data is in {}", a.display())
                })
            })?;
        }
        super::sync_dir(d)?;
        Ok(moved_aside)
    }
}

/// The names in `dir`.
fn names(dir: &Path) -> Result<Vec<OsString>, Failure> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)
        .map_err(|e| io_failed(dir, e, format!("cannot list {}", dir.display())))?
    {
        v.push(
            e.map_err(|e| io_failed(dir, e, format!("cannot list {}", dir.display())))?
                .file_name(),
        );
    }
    v.sort();
    Ok(v)
}

/// Renames `from` to `to` (never onto something: `to` must not exist), with `more` added
/// to the message when it fails.
fn rename(from: &Path, to: &Path, more: impl Fn() -> String) -> Result<(), Failure> {
    if fs::symlink_metadata(to).is_ok() {
        return Err(failed(format!(
            "cannot move {} to {}: it exists{}",
            from.display(),
            to.display(),
            more()
        )));
    }
    fs::rename(from, to).map_err(|e| {
        let m = format!(
            "cannot move {} to {}: {e}{}",
            from.display(),
            to.display(),
            more()
        );
        io_failed(to, e, m)
    })
}

/// A private staging folder on the data dir's filesystem, removed when dropped, on every
/// way out: it only ever holds our own restore output.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    /// `<time>-<pid>`, shared with the aside of the same attempt.
    token: String,
}

impl Staging {
    /// The folder the restore creates (inside the staging folder: it must not exist yet).
    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The staging folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if is_real_dir(&self.dir) {
            if let Err(e) = fs::remove_dir_all(&self.dir) {
                eprintln!(
                    "etcd-setup restore: warning: cannot remove the staging folder {}: {e}; \
                     the next restore removes it",
                    self.dir.display()
                );
            }
        }
    }
}

/// Gives every file under `dir` the owner `(uid, gid)`, following no link.
pub fn chown_tree(dir: &Path, uid: u32, gid: u32) -> Result<(), Failure> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))
        .map_err(|e| Failure::io(dir, "cannot chown", e))?;
    if is_real_dir(dir) {
        for e in fs::read_dir(dir).map_err(|e| Failure::io(dir, "cannot list", e))? {
            let e = e.map_err(|e| Failure::io(dir, "cannot list", e))?;
            chown_tree(&e.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// With the test fixtures: the process kills itself here when `ETCD_SETUP_KILL_AT` names
/// this point (`restore-POINT`), as a power cut or `kill -9` would; the host tests prove
/// the rerun recovers. Nothing in a shipped binary.
pub fn kill_point(point: &str) {
    #[cfg(feature = "test-fixtures")]
    if std::env::var("ETCD_SETUP_KILL_AT").is_ok_and(|v| v == format!("restore-{point}")) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    #[cfg(not(feature = "test-fixtures"))]
    let _ = point;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_strict_names_are_staging_or_asides() {
        assert_eq!(
            token_of(
                "etcd.restoring-20261201T101500.123Z-4242",
                "etcd.",
                RESTORING
            ),
            Some("20261201T101500.123Z-4242")
        );
        assert!(token_of("etcd.restoring-20261201T101500Z", "etcd.", RESTORING).is_some());
        assert!(token_of(".before-restore-20261201T101500.123Z-1", ".", BEFORE).is_some());
        for not in [
            "etcd.restoring-",
            "etcd.restoring-20261201T101500",
            "etcd.restoring-20261201T101500Z-old",
            "etcd.restoring-20261201T101500.12Z-1",
            "etcd.restoring-20261201T101500.123Z-",
            "etcd.restoring-20261201T101500.123Z-12a",
            "etcdx.restoring-20261201T101500Z",
            "etcd.restoring-2026120XT101500Z",
        ] {
            assert!(token_of(not, "etcd.", RESTORING).is_none(), "{not}");
        }
    }

    #[test]
    fn a_symlinked_data_dir_is_refused_naming_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = dir.path().join("etcd");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let f = Place::of(&link).unwrap_err();
        assert_eq!(f.code, ReasonCode::RestoreFailed);
        assert!(
            f.message.contains(&link.display().to_string()),
            "{}",
            f.message
        );
        assert!(
            f.message
                .contains(&format!("symbolic link to {}", real.display())),
            "{}",
            f.message
        );
        assert!(real.exists() && link.exists());
    }

    #[test]
    fn a_folder_others_may_write_in_is_refused_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let data = open.join("etcd");
        for exists in [false, true] {
            if exists {
                fs::create_dir(&data).unwrap();
            }
            let f = Place::of(&data).unwrap_err();
            assert_eq!(f.code, ReasonCode::RestoreFailed);
            assert!(
                f.message
                    .contains(&format!("{} (the folder of etcd.data_dir)", open.display())),
                "{}",
                f.message
            );
            assert!(f.message.contains("mode 777"), "{}", f.message);
        }
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(Place::of(&data).unwrap().kind, Kind::Beside);
    }

    #[test]
    fn staging_is_removed_on_drop_and_leftovers_by_strict_name_only() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("etcd");
        fs::create_dir(&data).unwrap();
        let place = Place::of(&data).unwrap();
        assert_eq!(place.kind, Kind::Beside);
        let s = place.stage(SystemTime::now()).unwrap();
        fs::create_dir_all(s.data().join("member")).unwrap();
        let kept = s.dir().to_path_buf();
        drop(s);
        assert!(!kept.exists());
        // Leftovers: ours (old and new names) go; look-alikes and links stay.
        let old = dir.path().join("etcd.restoring-20261201T101500Z");
        let new = dir.path().join("etcd.restoring-20261201T101500.123Z-77");
        let other = dir.path().join("etcd.restoring-mine");
        for d in [&old, &new, &other] {
            fs::create_dir_all(d.join("member")).unwrap();
        }
        let link = dir.path().join("etcd.restoring-20261201T101501Z");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        let aside = dir
            .path()
            .join("etcd.before-restore-20261201T101500.123Z-77");
        fs::create_dir(&aside).unwrap();
        let found = place.clear_leftovers().unwrap();
        assert!(!old.exists() && !new.exists());
        assert!(other.join("member").exists() && fs::symlink_metadata(&link).is_ok());
        assert_eq!(found.removed.len(), 2, "{found:?}");
        assert_eq!(found.interrupted_aside.as_ref(), Some(&aside));
        assert_eq!(found.newest_aside.as_ref(), Some(&aside));
    }
}
