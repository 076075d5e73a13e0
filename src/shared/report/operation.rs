//! The day-2 operation in progress on this node: `operation.json` in the live state
//! folder, written by `upgrade`, `restore` and `leave` while they run and removed when
//! they end. It names the command, its pid, since when it runs, its step, and whether it
//! has etcd down on purpose at the moment. `status` shows it, and a restart the command
//! made on purpose is then `in-progress`, not a failure the platform would act on.
//!
//! Best effort: an operation does not fail because status cannot show it. The file is in
//! the live folder (gone at reboot), and a record whose pid is gone counts for nothing.

use super::{atomic_write, rfc3339, FILE_MODE, MAX_STATE};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The record's name in the live state folder.
pub const OPERATION_FILE: &str = "operation.json";

/// What a day-2 command is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// The command: `upgrade`, `restore` or `leave`.
    pub command: String,
    /// Its process.
    pub pid: u32,
    /// When it began, RFC 3339 UTC.
    pub since: String,
    /// Its step now, one line.
    pub step: String,
    /// Whether it has etcd stopped or restarting on purpose now.
    pub etcd_down_expected: bool,
}

/// The record of this process's operation, removed when dropped.
pub struct OperationGuard {
    path: PathBuf,
    op: Operation,
}

impl OperationGuard {
    /// Records that `command` (this process) began, in `run_dir`.
    pub fn begin(run_dir: &Path, command: &str, step: &str) -> OperationGuard {
        let guard = OperationGuard {
            path: run_dir.join(OPERATION_FILE),
            op: Operation {
                command: command.to_string(),
                pid: std::process::id(),
                since: rfc3339(SystemTime::now()),
                step: step.to_string(),
                etcd_down_expected: false,
            },
        };
        guard.write();
        guard
    }

    /// Records the next step, and whether etcd is down on purpose during it.
    pub fn step(&mut self, step: &str, etcd_down_expected: bool) {
        self.op.step = step.to_string();
        self.op.etcd_down_expected = etcd_down_expected;
        self.write();
    }

    fn write(&self) {
        let Ok(bytes) = serde_json::to_vec(&self.op) else {
            return;
        };
        if let Err(e) = atomic_write(&self.path, &bytes, FILE_MODE, None) {
            eprintln!(
                "etcd-setup {}: cannot record the operation in {}: {e}; status will not show it",
                self.op.command,
                self.path.display()
            );
        }
    }
}

impl Drop for OperationGuard {
    fn drop(&mut self) {
        // Only our own record: another command's is not ours to remove.
        if read_operation(self.path.parent().unwrap_or(Path::new("/")))
            .is_some_and(|o| o.pid == self.op.pid)
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The operation recorded in `run_dir`, if any and readable (a broken record counts for
/// nothing: it can only relax a verdict).
pub fn read_operation(run_dir: &Path) -> Option<Operation> {
    let text = super::read_record(
        &run_dir.join(OPERATION_FILE),
        "an operation record",
        MAX_STATE,
    )
    .ok()??;
    serde_json::from_slice(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_follows_its_steps_and_goes_with_its_guard() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = OperationGuard::begin(dir.path(), "upgrade", "waiting for the lock");
        let o = read_operation(dir.path()).unwrap();
        assert_eq!(
            (
                o.command.as_str(),
                o.pid,
                o.step.as_str(),
                o.etcd_down_expected
            ),
            ("upgrade", std::process::id(), "waiting for the lock", false)
        );
        g.step("restarting etcd 3.5.16", true);
        let o = read_operation(dir.path()).unwrap();
        assert_eq!(
            (o.step.as_str(), o.etcd_down_expected),
            ("restarting etcd 3.5.16", true)
        );
        drop(g);
        assert_eq!(read_operation(dir.path()), None);
        assert!(!dir.path().join(OPERATION_FILE).exists());
    }

    #[test]
    fn another_process_record_is_left_and_garbage_counts_for_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let g = OperationGuard::begin(dir.path(), "restore", "stopping etcd");
        let theirs = Operation {
            pid: std::process::id() + 1,
            ..read_operation(dir.path()).unwrap()
        };
        std::fs::write(
            dir.path().join(OPERATION_FILE),
            serde_json::to_vec(&theirs).unwrap(),
        )
        .unwrap();
        drop(g);
        assert_eq!(read_operation(dir.path()), Some(theirs));
        std::fs::write(dir.path().join(OPERATION_FILE), b"{not json").unwrap();
        assert_eq!(read_operation(dir.path()), None);
    }
}
