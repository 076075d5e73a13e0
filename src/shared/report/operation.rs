//! The day-2 operation in progress on this node: `operation.json` in the live state
//! folder, written by `upgrade`, `restore`, `leave` and `rotate-ca` while they run and removed when
//! they end (`crate::day2::frame` removes it on every way out, a signal included). It
//! names the command, its process (pid and start time), since when it runs, its step,
//! and whether it has etcd down on purpose at the moment. `status` shows it, and a
//! restart the command made on purpose is then `in-progress`, not a failure the platform
//! would act on.
//!
//! Best effort: an operation does not fail because status cannot show it. The file is in
//! the live folder (gone at reboot), and a record counts only while its process lives:
//! the pid *and* the process's start time (`/proc/PID/stat`, field 22, clock ticks since
//! boot) must match ([`Process::is_alive`]), so a record left by a killed command whose
//! pid now belongs to another process counts for nothing.

use super::{atomic_write, rfc3339, FILE_MODE, MAX_STATE};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The record's name in the live state folder.
pub const OPERATION_FILE: &str = "operation.json";

/// The day-2 commands that record an operation, spelled as on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Command {
    /// `etcd-setup upgrade`.
    Upgrade,
    /// `etcd-setup restore`.
    Restore,
    /// `etcd-setup leave`.
    Leave,
    /// `etcd-setup snapshot`.
    Snapshot,
    /// `etcd-setup maintain`.
    Maintain,
    /// `etcd-setup rotate-ca`.
    RotateCa,
    /// `etcd-setup backups` (list, verify).
    Backups,
}

impl Command {
    /// The subcommand's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Upgrade => "upgrade",
            Command::Restore => "restore",
            Command::Leave => "leave",
            Command::Snapshot => "snapshot",
            Command::Maintain => "maintain",
            Command::RotateCa => "rotate-ca",
            Command::Backups => "backups",
        }
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A process as a record names it: its pid and its start time, which together survive
/// pid reuse (a new process with the same pid started later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    /// Its pid.
    pub pid: u32,
    /// Its start time in clock ticks since boot (`/proc/PID/stat` field 22); `None` in a
    /// record of an agent that did not write it, which then counts for nothing.
    #[serde(default)]
    pub start_time: Option<u64>,
}

impl Process {
    /// This process.
    pub fn current() -> Process {
        let pid = std::process::id();
        Process {
            pid,
            start_time: start_time(pid),
        }
    }

    /// Whether this very process still lives: a process with the pid exists and started
    /// when the record says. A zombie counts (it has not been reaped yet).
    pub fn is_alive(&self) -> bool {
        match self.start_time {
            Some(t) => start_time(self.pid) == Some(t),
            None => false,
        }
    }
}

/// Process `pid`'s start time in clock ticks since boot: field 22 of `/proc/PID/stat`.
/// The second field (the command name) is in parentheses and may hold spaces and
/// parentheses itself, so the fields are counted after its last `)`.
pub fn start_time(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    // After ")": field 3 (state) is the first; field 22 is the 20th.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// What a day-2 command is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// The command.
    pub command: Command,
    /// Its process.
    pub pid: u32,
    /// Its process's start time in clock ticks since boot (see [`Process`]).
    #[serde(default)]
    pub start_time: Option<u64>,
    /// When it began, RFC 3339 UTC.
    pub since: String,
    /// Its step now, one line.
    pub step: String,
    /// Whether it has etcd stopped or restarting on purpose now.
    pub etcd_down_expected: bool,
}

impl Operation {
    /// The process the record names.
    pub fn process(&self) -> Process {
        Process {
            pid: self.pid,
            start_time: self.start_time,
        }
    }

    /// Whether the process that wrote the record still runs (pid and start time match).
    pub fn is_live(&self) -> bool {
        self.process().is_alive()
    }
}

/// The record of this process's operation, removed when dropped.
pub struct OperationGuard {
    path: PathBuf,
    op: Operation,
}

impl OperationGuard {
    /// Records that `command` (this process) began, in `run_dir`.
    pub fn begin(run_dir: &Path, command: Command, step: &str) -> OperationGuard {
        let me = Process::current();
        let guard = OperationGuard {
            path: run_dir.join(OPERATION_FILE),
            op: Operation {
                command,
                pid: me.pid,
                start_time: me.start_time,
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

    /// The record's file.
    pub fn path(&self) -> &Path {
        &self.path
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
        remove_own_operation(&self.path);
    }
}

/// Removes the operation record at `path` when this process wrote it: another command's
/// is not ours to remove. Also called from the signal thread before the process exits.
pub fn remove_own_operation(path: &Path) {
    if read_operation(path.parent().unwrap_or(Path::new("/")))
        .is_some_and(|o| o.pid == std::process::id())
    {
        let _ = std::fs::remove_file(path);
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
        let mut g = OperationGuard::begin(dir.path(), Command::Upgrade, "waiting for the lock");
        let o = read_operation(dir.path()).unwrap();
        assert_eq!(
            (o.command, o.pid, o.step.as_str(), o.etcd_down_expected),
            (
                Command::Upgrade,
                std::process::id(),
                "waiting for the lock",
                false
            )
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
        let g = OperationGuard::begin(dir.path(), Command::Restore, "stopping etcd");
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

    #[test]
    fn a_record_lives_only_while_its_pid_and_start_time_match() {
        let me = Process::current();
        assert!(me.start_time.is_some(), "/proc/self/stat has field 22");
        assert!(me.is_alive());
        // Our pid with another start time: the pid was reused by another process.
        let reused = Process {
            start_time: me.start_time.map(|t| t + 1),
            ..me
        };
        assert!(!reused.is_alive());
        // A record without a start time names no process we can tell apart.
        assert!(!Process {
            start_time: None,
            ..me
        }
        .is_alive());
        // A pid above pid_max is gone.
        assert!(!Process {
            pid: 4_194_999,
            ..me
        }
        .is_alive());
        // A command name with spaces and parentheses does not shift the fields.
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join("a) (b c");
        std::fs::copy("/bin/sleep", &odd).unwrap();
        let mut child = std::process::Command::new(&odd).arg("30").spawn().unwrap();
        let t = start_time(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(t.is_some_and(|t| t >= me.start_time.unwrap()), "{t:?}");
    }

    #[test]
    fn the_command_is_spelled_as_on_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let _g = OperationGuard::begin(dir.path(), Command::Leave, "checking");
        let text = std::fs::read_to_string(dir.path().join(OPERATION_FILE)).unwrap();
        assert!(text.contains(r#""command":"leave""#), "{text}");
        assert!(text.contains(r#""start_time":"#), "{text}");
    }
}
