//! SIGTERM, SIGINT and SIGHUP for the commands that act on etcd (`run` and the day-2
//! frame): one mechanism. The signals are blocked before any other thread exists and
//! taken by one thread of their own ([`spawn`]), which asks the command's handler what a
//! signal means now: exit with a code (after the [`Cleanup`]s registered at that moment
//! ran), or carry on (the command is inside a section that must not be cut, and stops at
//! its next safe point).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Files (and folders) removed before the process exits on a signal, each until its
/// [`Cleanup`] drops.
static FILES: Mutex<Vec<(u64, PathBuf, Kind)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// What a [`Cleanup`] removes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Tree,
}

/// A file that must not outlive this process (a one-shot flag, a record of this process),
/// removed by [`run_cleanups`] on a signal; the owner removes it on the other ways out.
#[must_use]
pub struct Cleanup(u64);

impl Cleanup {
    /// Registers `path`.
    pub fn remove_file(path: &Path) -> Cleanup {
        Cleanup::register(path, Kind::File)
    }

    /// Registers the folder `path`, removed with everything in it (no link followed): a
    /// scratch folder of this process alone.
    pub fn remove_tree(path: &Path) -> Cleanup {
        Cleanup::register(path, Kind::Tree)
    }

    fn register(path: &Path, kind: Kind) -> Cleanup {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        files().push((id, path.to_path_buf(), kind));
        Cleanup(id)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        files().retain(|(id, _, _)| *id != self.0);
    }
}

fn files() -> std::sync::MutexGuard<'static, Vec<(u64, PathBuf, Kind)>> {
    FILES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes every registered file and folder (best effort).
pub fn run_cleanups() {
    for (_, path, kind) in files().iter() {
        remove(path, *kind);
    }
}

fn remove(path: &Path, kind: Kind) {
    let _ = match kind {
        Kind::File => std::fs::remove_file(path),
        Kind::Tree => std::fs::remove_dir_all(path),
    };
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread (and so in every thread spawned after)
/// and takes them in a thread of their own: `handler` gets each signal's name; `Some(code)`
/// runs the cleanups and exits with `code`, `None` carries on. Call it before any thread
/// exists.
pub fn spawn(mut handler: impl FnMut(&'static str) -> Option<u8> + Send + 'static) {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(sig);
    }
    if let Err(e) = signals.thread_block() {
        eprintln!("etcd-setup: cannot block signals: {e}");
        return;
    }
    std::thread::spawn(move || {
        while let Ok(sig) = signals.wait() {
            if let Some(code) = handler(sig.as_str()) {
                run_cleanups();
                std::process::exit(i32::from(code));
            }
        }
    });
}

/// Tests only (`test-fixtures`): dies at once, as `kill -9` would (no unwinding, no
/// cleanup), when `ETCD_SETUP_TEST_CRASH_AT` names `point`.
pub fn test_crash_point(point: &str) {
    #[cfg(feature = "test-fixtures")]
    if std::env::var_os("ETCD_SETUP_TEST_CRASH_AT").is_some_and(|p| p == point) {
        std::process::abort();
    }
    let _ = point;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries registered under `c` (not every one: other tests run beside).
    fn run_one(c: &Cleanup) {
        let entries: Vec<(PathBuf, Kind)> = files()
            .iter()
            .filter(|(id, _, _)| *id == c.0)
            .map(|(_, p, k)| (p.clone(), *k))
            .collect();
        assert_eq!(entries.len(), 1);
        for (p, k) in entries {
            remove(&p, k);
        }
    }

    #[test]
    fn a_registered_folder_goes_with_what_is_in_it_until_its_cleanup_drops() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("scratch");
        std::fs::create_dir_all(tree.join("trial/data")).unwrap();
        std::fs::write(tree.join("trial/data/db"), "plaintext").unwrap();
        let c = Cleanup::remove_tree(&tree);
        run_one(&c);
        assert!(!tree.exists());
        let id = c.0;
        drop(c);
        assert!(files().iter().all(|(i, _, _)| *i != id));
    }
}
