//! The old binaries kept beside the new ones, for the rollback: `install.dir/.previous/`
//! holds hard links to the release that ran before the upgrade.
//!
//! Every step is a rename or a link of one name, so a kill at any line leaves a state
//! [`recover`] finishes: `.previous.new` (a keep being made) is removed, `.previous.old`
//! (the keep being replaced) is renamed back when `.previous` is missing, else removed.
//! The binaries themselves are replaced by [`crate::road::install::install_binaries`] (one
//! rename each), and put back by [`rollback`] the same way, so `install.dir/etcd` is at
//! every instant a complete binary of one release or the other. No symlinks: systemd's
//! `ExecStart` names `install.dir/etcd` itself.

use crate::reason::Failure;
use crate::road::install::BINARIES;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

/// The folder inside `install.dir` holding the release before the upgrade.
pub const PREVIOUS: &str = ".previous";
const MAKING: &str = ".previous.new";
const REPLACED: &str = ".previous.old";

/// Where the kept release of `install_dir` lives.
pub fn previous_dir(install_dir: &Path) -> PathBuf {
    install_dir.join(PREVIOUS)
}

/// Finishes what a killed [`keep_previous`] or [`rollback`] left.
pub fn recover(install_dir: &Path) -> Result<(), Failure> {
    let making = install_dir.join(MAKING);
    let replaced = install_dir.join(REPLACED);
    let previous = previous_dir(install_dir);
    remove_all(&making)?;
    if replaced.exists() {
        if previous.exists() {
            remove_all(&replaced)?;
        } else {
            fs::rename(&replaced, &previous)
                .map_err(|e| Failure::io(&replaced, "cannot rename back", e))?;
        }
    }
    for name in BINARIES {
        remove_file(&install_dir.join(rollback_name(name)))?;
    }
    sync_dir(install_dir)
}

/// Keeps the installed binaries in `install.dir/.previous/` (hard links, so nothing is
/// copied), replacing an older keep. Returns the folder.
pub fn keep_previous(install_dir: &Path) -> Result<PathBuf, Failure> {
    recover(install_dir)?;
    let making = install_dir.join(MAKING);
    fs::create_dir(&making).map_err(|e| Failure::io(&making, "cannot create", e))?;
    for name in BINARIES {
        let from = install_dir.join(name);
        if from.is_file() {
            let to = making.join(name);
            fs::hard_link(&from, &to).map_err(|e| Failure::io(&to, "cannot link", e))?;
        }
    }
    sync_dir(&making)?;
    let previous = previous_dir(install_dir);
    let replaced = install_dir.join(REPLACED);
    if previous.exists() {
        fs::rename(&previous, &replaced).map_err(|e| Failure::io(&previous, "cannot rename", e))?;
    }
    fs::rename(&making, &previous).map_err(|e| Failure::io(&making, "cannot rename", e))?;
    sync_dir(install_dir)?;
    remove_all(&replaced)?;
    Ok(previous)
}

fn rollback_name(name: &str) -> String {
    format!(".{name}.rollback")
}

/// Puts the kept release back: each binary of `.previous/` linked under a temporary name
/// and renamed over the installed one (`etcd` last); a tool the kept release lacks
/// (`etcdutl` of a 3.5 over a 3.4) is removed. `.previous/` stays as it is.
pub fn rollback(install_dir: &Path) -> Result<(), Failure> {
    recover(install_dir)?;
    let previous = previous_dir(install_dir);
    if !previous.join("etcd").is_file() {
        return Err(Failure::new(
            crate::reason::ReasonCode::InternalError,
            format!("{} holds no etcd to roll back to", previous.display()),
        ));
    }
    for name in BINARIES {
        let kept = previous.join(name);
        let dest = install_dir.join(name);
        if kept.is_file() {
            let tmp = install_dir.join(rollback_name(name));
            fs::hard_link(&kept, &tmp).map_err(|e| Failure::io(&tmp, "cannot link", e))?;
            fs::rename(&tmp, &dest).map_err(|e| Failure::io(&dest, "cannot restore", e))?;
        } else {
            remove_file(&dest)?;
        }
    }
    sync_dir(install_dir)
}

fn remove_all(path: &Path) -> Result<(), Failure> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Failure::io(path, "cannot remove", e)),
        _ => Ok(()),
    }
}

fn remove_file(path: &Path) -> Result<(), Failure> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Failure::io(path, "cannot remove", e)),
        _ => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> Result<(), Failure> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Failure::io(dir, "cannot sync", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(dir: &Path, name: &str, body: &str) {
        fs::write(dir.join(name), body).unwrap();
    }

    fn read(dir: &Path, name: &str) -> String {
        fs::read_to_string(dir.join(name)).unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    /// 3.4 (no etcdutl) kept, 3.5 installed by renames as install_binaries does, then
    /// rolled back: the 3.4 pair is back, 3.5's etcdutl gone, the keep intact.
    #[test]
    fn keeps_the_old_release_beside_the_new_and_rolls_back_to_it() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        put(dir, "etcd", "etcd 3.4");
        put(dir, "etcdctl", "etcdctl 3.4");
        let prev = keep_previous(dir).unwrap();
        assert_eq!(names(&prev), ["etcd", "etcdctl"]);
        for (n, b) in [
            ("etcd", "etcd 3.5"),
            ("etcdctl", "etcdctl 3.5"),
            ("etcdutl", "etcdutl 3.5"),
        ] {
            put(dir, &format!("{n}.new"), b);
            fs::rename(dir.join(format!("{n}.new")), dir.join(n)).unwrap();
        }
        assert_eq!(
            read(&prev, "etcd"),
            "etcd 3.4",
            "the keep follows the old inode"
        );
        rollback(dir).unwrap();
        assert_eq!(read(dir, "etcd"), "etcd 3.4");
        assert_eq!(read(dir, "etcdctl"), "etcdctl 3.4");
        assert_eq!(names(dir), [".previous", "etcd", "etcdctl"]);
        assert_eq!(read(&prev, "etcd"), "etcd 3.4");
    }

    #[test]
    fn a_second_keep_replaces_the_first() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        put(dir, "etcd", "one");
        keep_previous(dir).unwrap();
        put(dir, "etcd.n", "two");
        fs::rename(dir.join("etcd.n"), dir.join("etcd")).unwrap();
        keep_previous(dir).unwrap();
        assert_eq!(read(&previous_dir(dir), "etcd"), "two");
        assert_eq!(names(dir), [".previous", "etcd"]);
    }

    /// Killed between the two renames of keep_previous: the old keep is back.
    #[test]
    fn a_keep_killed_between_its_renames_is_recovered() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        put(dir, "etcd", "old");
        keep_previous(dir).unwrap();
        fs::rename(previous_dir(dir), dir.join(REPLACED)).unwrap();
        fs::create_dir(dir.join(MAKING)).unwrap();
        put(&dir.join(MAKING), "etcd", "half");
        put(dir, ".etcd.rollback", "half");
        recover(dir).unwrap();
        assert_eq!(names(dir), [".previous", "etcd"]);
        assert_eq!(read(&previous_dir(dir), "etcd"), "old");
    }

    #[test]
    fn rollback_without_a_keep_is_refused_and_touches_nothing() {
        let d = tempfile::tempdir().unwrap();
        put(d.path(), "etcd", "new");
        let f = rollback(d.path()).unwrap_err();
        assert!(f.message.contains(".previous"), "{f}");
        assert_eq!(read(d.path(), "etcd"), "new");
    }
}
