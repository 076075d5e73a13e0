//! The run's reporter: every phase to the state files, systemd (`STATUS=`) and the
//! journal; every failure to the failure file first. The only writer of the node's
//! record, shared with the signal thread that records `interrupted`.

use super::failure::{clear_failure, write_failure};
use super::state::{Phase, State, StateStore};
use crate::reason::Failure;
use crate::shared::printable;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Writes phases to the state files, systemd (STATUS=) and the journal, and failures to
/// the failure file. Shared with the signal thread, which records `interrupted`.
pub struct Reporter {
    store: StateStore,
    /// The state as written last; the run adds what it learns (device, digest, …).
    pub state: State,
    failure_file: PathBuf,
    owner: String,
    journal: bool,
    /// Whether this run holds the run lock, i.e. reports for the node. A run still
    /// waiting for another must not write over that one's state or stop its etcd.
    pub holds_lock: bool,
}

impl Reporter {
    /// A reporter for a run whose state goes to `store` and whose failures go to
    /// `failure_file`, owned by the user `owner`.
    pub fn new(store: StateStore, failure_file: PathBuf, owner: String) -> Reporter {
        let mut state = State::begin(Phase::NotStarted);
        state.pid = Some(std::process::id());
        Reporter {
            store,
            state,
            failure_file,
            owner,
            journal: std::env::var_os("JOURNAL_STREAM").is_some(),
            holds_lock: false,
        }
    }

    /// A journal line at syslog `priority` (stderr under systemd, with `<N>`).
    /// The text is [`printable::line`]: one journal entry, whatever a label holds.
    pub fn log(&self, priority: u8, text: &str) {
        eprintln!("{}", self.journal_line(priority, text));
    }

    /// The line [`log`](Self::log) writes. Under systemd, stderr goes to the journal,
    /// which reads a `<N>` priority prefix.
    fn journal_line(&self, priority: u8, text: &str) -> String {
        let text = printable::line(text);
        if self.journal {
            format!("<{priority}>{text}")
        } else {
            format!("etcd-setup: {text}")
        }
    }

    fn save(&self) {
        if let Err(e) = self.store.save(&self.state) {
            self.log(4, &format!("cannot save the state files: {e}"));
        }
    }

    fn notify(&self, status: &str) {
        // A newline would end the STATUS= assignment and start another.
        let status = printable::line(status);
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Status(&status)]);
    }

    /// Enters a phase: state files, STATUS= and a journal line.
    pub fn enter(&mut self, phase: Phase, text: &str) {
        self.state.enter(phase, SystemTime::now());
        self.state.progress = Some(text.to_string());
        self.save();
        self.notify(text);
        self.log(6, text);
    }

    /// Marks the end of a step of the road in the journal, at debug priority, as
    /// `step: NAME at UNIX_MS` (the wall clock): the VM tests read these lines to show
    /// where the seconds between an ISO insert and a healthy etcd go.
    pub fn step(&self, name: &str) {
        self.step_at(name, SystemTime::now());
    }

    /// [`Reporter::step`] for a step that ended at `at`.
    pub fn step_at(&self, name: &str, at: SystemTime) {
        let ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        self.log(7, &format!("step: {name} at {ms}"));
    }

    /// Reports progress within the current phase.
    pub fn progress(&mut self, text: &str) {
        self.state.progress = Some(text.to_string());
        self.save();
        self.notify(text);
        self.log(6, text);
    }

    /// Records a failure: failure file first (the platform reads it), then the state.
    pub fn fail(&mut self, failure: &Failure) {
        if let Err(e) = write_failure(&self.failure_file, &self.owner, failure, SystemTime::now()) {
            self.log(
                3,
                &format!("cannot write {}: {e}", self.failure_file.display()),
            );
        }
        self.state.fail(failure, SystemTime::now());
        self.state.progress = None;
        self.save();
        self.notify(&failure.headline());
        self.log(3, &failure.headline());
        if let Some(source) = &failure.source {
            self.log(3, &format!("detail: {source:#}"));
        }
    }

    /// Keeps what an earlier successful run installed (device, label, digest, version)
    /// in this run's state, which verifies it.
    pub fn carry_over(&mut self, previous: State) {
        // The timeline goes on from the install, so status shows when etcd came up.
        self.state.phases = previous.phases;
        self.state.device = previous.device;
        self.state.label = previous.label;
        self.state.sha256 = previous.sha256;
        self.state.etcd_version = previous.etcd_version;
    }

    /// Records success with etcd.service's `NRestarts` at that moment (status counts
    /// later restarts from it): the failure file goes, the state says running.
    pub fn succeed(&mut self, text: &str, n_restarts: u32) {
        if let Err(e) = clear_failure(&self.failure_file) {
            self.log(
                4,
                &format!("cannot remove {}: {e}", self.failure_file.display()),
            );
        }
        self.state.reason = None;
        self.state.confirmed_n_restarts = Some(n_restarts);
        self.enter(Phase::Running, text);
    }

    /// The phase the run is in.
    pub fn phase(&self) -> Phase {
        self.state.phase
    }
}

/// The reporter the signal thread reaches; `None` until the run has one.
pub type SharedReporter = Arc<Mutex<Option<Reporter>>>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A label with a newline would start a second journal entry, with a priority of
    /// its own choosing: it stays in its entry, escaped.
    #[test]
    fn a_journal_line_cannot_be_split_by_text_from_the_disc() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Reporter::new(
            StateStore::new(dir.path().join("run"), dir.path().join("lib")),
            dir.path().join("failed"),
            "root".into(),
        );
        r.journal = true;
        assert_eq!(
            r.journal_line(6, "found the ISO (label X\n<0>etcd-setup: ok\x1b[31m)"),
            "<6>found the ISO (label X\\n<0>etcd-setup: ok\\x1b[31m)"
        );
    }
}
