//! The state files `status` answers from: the live copy and the persistent one.

use super::atomic::atomic_write;
use super::record::{read_record, RecordError};
use super::time::{rfc3339, unix_ms};
use super::{DIR_MODE, FILE_MODE, MAX_STATE, SCHEMA_VERSION, STATE_FILE};
use crate::reason::{Failure, ReasonCode};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Where a run is, in order; `Failed` ends a run that did not reach `Running`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// No run has begun.
    NotStarted,
    /// Looking for the Kubernetes ISO.
    WaitingForIso,
    /// Checking the etcd archive.
    Validating,
    /// Putting the binaries and the unit in place.
    Installing,
    /// Starting etcd and confirming it is up.
    Starting,
    /// etcd is installed, enabled and was confirmed up.
    Running,
    /// The run ended without etcd running; the reason says why.
    Failed,
    /// This member left its cluster (`etcd-setup leave`): etcd is stopped and disabled,
    /// its data moved aside; `run` does not join it again unless told `--rejoin`.
    Left,
}

impl Phase {
    /// The phase as `status` and the JSON show it, e.g. `waiting-for-iso`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::NotStarted => "not-started",
            Phase::WaitingForIso => "waiting-for-iso",
            Phase::Validating => "validating",
            Phase::Installing => "installing",
            Phase::Starting => "starting",
            Phase::Running => "running",
            Phase::Failed => "failed",
            Phase::Left => "left",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run failed, as the state records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// The stable reason code.
    pub code: ReasonCode,
    /// The sentence of the failure file's first line.
    pub message: String,
}

impl From<&Failure> for Reason {
    fn from(failure: &Failure) -> Self {
        Reason {
            code: failure.code,
            message: failure.message.clone(),
        }
    }
}

/// When a phase was entered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseStamp {
    /// The phase.
    pub phase: Phase,
    /// RFC 3339, UTC, to the second.
    pub at: String,
    /// Milliseconds since the UNIX epoch.
    pub unix_ms: u64,
}

/// What a run did and where it is: the JSON of `state.json` (schema version 1).
///
/// Field names are snake_case, phases kebab-case; absent values are `null`. Readers ignore
/// fields they do not know, so later versions may add some without a new schema version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The current phase.
    pub phase: Phase,
    /// Why the run failed, in phase `failed`.
    pub reason: Option<Reason>,
    /// The device holding the ISO used, e.g. `/dev/sr0`.
    pub device: Option<String>,
    /// Its volume label.
    pub label: Option<String>,
    /// The etcd archive's SHA-256, lowercase hex.
    pub sha256: Option<String>,
    /// The etcd version installed, e.g. `3.5.16`.
    pub etcd_version: Option<String>,
    /// A human line on the current phase, e.g. `waiting for the Kubernetes ISO, 12 s of
    /// 600 s`.
    pub progress: Option<String>,
    /// Every phase entered, in order.
    pub phases: Vec<PhaseStamp>,
    /// The process that wrote the state.
    pub pid: Option<u32>,
    /// The agent that wrote it: [`crate::VERSION`].
    pub agent_version: String,
    /// When it was last changed, RFC 3339, UTC.
    pub updated_at: String,
    /// The same, in milliseconds since the UNIX epoch.
    #[serde(default)]
    pub updated_unix_ms: u64,
    /// This member's etcd name (`node.name`), recorded when the run starts, so `status`
    /// names it without reading the configuration. `null` in states of older agents.
    #[serde(default)]
    pub member_name: Option<String>,
    /// etcd.service's `NRestarts` when this run confirmed it running: `status` counts the
    /// restarts since from it. `null` before `running`, and in states of older agents.
    #[serde(default)]
    pub confirmed_n_restarts: Option<u32>,
    /// The data-safety advisories of the installed release ([`crate::shared::advisory`]), one
    /// operator line each; empty for a release without any, and in older agents' states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advisories: Vec<String>,
    /// The last or current `etcd-setup upgrade` on this node; `null` when none ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeRecord>,
}

/// Where an `etcd-setup upgrade` is or ended, and the cluster's versions it saw last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeRecord {
    /// Where the upgrade is.
    pub phase: UpgradePhase,
    /// The release the member ran before.
    pub from: String,
    /// The release it moves to.
    pub to: String,
    /// A human line, e.g. why it was refused.
    pub progress: String,
    /// Each member's etcd version as `endpoint status` reported it, `name=version`.
    #[serde(default)]
    pub members: Vec<String>,
    /// The cluster version from etcd's `/metrics` (`etcd_cluster_version`), e.g. `3.5.0`.
    #[serde(default)]
    pub cluster_version: Option<String>,
    /// When this record last changed, RFC 3339.
    pub updated_at: String,
    /// The `etcd-setup upgrade` process writing it (pid and start time): `status` shows a
    /// record whose phase is not final only while that process lives, and reads it as
    /// `interrupted` once it is gone (killed, or the node rebooted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<super::Process>,
}

/// Where an `etcd-setup upgrade` is, as `upgrade.phase` spells it in state.json and in
/// status's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpgradePhase {
    /// Finding the new release and checking the rules.
    Validating,
    /// Waiting for the cluster lock (or, as the leader, for the others to go first).
    WaitingForLock,
    /// Handing leadership to another member before the restart.
    HandingOver,
    /// Taking the snapshot before anything changes.
    Snapshot,
    /// Keeping the old binaries beside and installing the new ones (etcd stopped).
    Installing,
    /// Starting etcd on the new release.
    Restarting,
    /// Confirming the new release healthy.
    Confirming,
    /// Putting the old binaries back.
    RollingBack,
    /// Ended: the new release runs (or there was nothing to do).
    Done,
    /// Ended: the new release did not come up; the old one was put back.
    RolledBack,
    /// Ended: refused before anything changed.
    Refused,
    /// Ended: failed.
    Failed,
    /// Ended: its process was stopped by a signal, or is gone while the record said it ran.
    Interrupted,
    /// A phase this version does not know (written by another version of the agent).
    #[serde(other)]
    Unknown,
}

impl UpgradePhase {
    /// The phase as state.json spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            UpgradePhase::Validating => "validating",
            UpgradePhase::WaitingForLock => "waiting-for-lock",
            UpgradePhase::HandingOver => "handing-over",
            UpgradePhase::Snapshot => "snapshot",
            UpgradePhase::Installing => "installing",
            UpgradePhase::Restarting => "restarting",
            UpgradePhase::Confirming => "confirming",
            UpgradePhase::RollingBack => "rolling-back",
            UpgradePhase::Done => "done",
            UpgradePhase::RolledBack => "rolled-back",
            UpgradePhase::Refused => "refused",
            UpgradePhase::Failed => "failed",
            UpgradePhase::Interrupted => "interrupted",
            UpgradePhase::Unknown => "unknown",
        }
    }

    /// Whether the upgrade ended (nothing under way).
    pub fn ended(self) -> bool {
        matches!(
            self,
            UpgradePhase::Done
                | UpgradePhase::RolledBack
                | UpgradePhase::Refused
                | UpgradePhase::Failed
                | UpgradePhase::Interrupted
        )
    }

    /// Whether etcd is down on purpose in this phase (stopped, restarting or without a
    /// leader for a moment), or strained by the upgrade's own work on it: the snapshot
    /// before the restart, in this member's turn, made a loaded 3.4 member's `/health`
    /// (a linearizable read) time out on c4's emulated nodes, and the platform should
    /// not act on that either.
    pub fn etcd_down_on_purpose(self) -> bool {
        matches!(
            self,
            UpgradePhase::Snapshot
                | UpgradePhase::HandingOver
                | UpgradePhase::Installing
                | UpgradePhase::Restarting
                | UpgradePhase::Confirming
                | UpgradePhase::RollingBack
        )
    }
}

impl fmt::Display for UpgradePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl State {
    /// A new run's state, in `phase` since now, written by this process.
    pub fn begin(phase: Phase) -> State {
        State::begin_at(phase, SystemTime::now())
    }

    /// A new run's state, in `phase` since `now`, written by this process.
    pub fn begin_at(phase: Phase, now: SystemTime) -> State {
        State {
            schema_version: SCHEMA_VERSION,
            phase,
            reason: None,
            device: None,
            label: None,
            sha256: None,
            etcd_version: None,
            progress: None,
            phases: vec![PhaseStamp {
                phase,
                at: rfc3339(now),
                unix_ms: unix_ms(now),
            }],
            pid: Some(std::process::id()),
            agent_version: crate::VERSION.to_string(),
            updated_at: rfc3339(now),
            updated_unix_ms: unix_ms(now),
            member_name: None,
            confirmed_n_restarts: None,
            advisories: Vec::new(),
            upgrade: None,
        }
    }

    /// Moves to `phase` at `now`, stamping it; the progress line is cleared, and so is
    /// the reason unless the phase is `failed`.
    pub fn enter(&mut self, phase: Phase, now: SystemTime) {
        self.phase = phase;
        self.progress = None;
        if phase != Phase::Failed {
            self.reason = None;
        }
        self.phases.push(PhaseStamp {
            phase,
            at: rfc3339(now),
            unix_ms: unix_ms(now),
        });
        self.touch(now);
    }

    /// Records `failure` as the reason and enters `failed` at `now`.
    pub fn fail(&mut self, failure: &Failure, now: SystemTime) {
        self.enter(Phase::Failed, now);
        self.reason = Some(Reason::from(failure));
    }

    /// Marks the state changed at `now` (after a progress line, say).
    pub fn touch(&mut self, now: SystemTime) {
        self.updated_at = rfc3339(now);
        self.updated_unix_ms = unix_ms(now);
    }

    /// Whether the state was last changed at or after `t` (to the millisecond).
    pub fn updated_after(&self, t: SystemTime) -> bool {
        self.updated_unix_ms >= unix_ms(t)
    }
}

/// A loaded state with what was noticed on the way.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The state, or `None` when neither copy exists or is readable.
    pub state: Option<State>,
    /// The file it came from.
    pub from: Option<PathBuf>,
    /// Copies that were skipped and why (corrupt, unknown schema, unreadable).
    pub notes: Vec<String>,
    /// The copy that exists but cannot be read as a state, and why: then `state` is
    /// `None`, and nobody may conclude that no run began.
    pub unreadable: Option<Unreadable>,
}

/// A state file that exists but is not a state this agent can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The file.
    pub file: PathBuf,
    /// Why, e.g. `is a FIFO, not a file the agent wrote`.
    pub why: String,
}

/// The two copies of `state.json`: live under `/run`, persistent under `/var/lib`.
#[derive(Debug, Clone)]
pub struct StateStore {
    run_dir: PathBuf,
    persist_dir: PathBuf,
}

impl StateStore {
    /// A store in `run_dir` (live) and `persist_dir` (kept across reboots).
    pub fn new(run_dir: impl Into<PathBuf>, persist_dir: impl Into<PathBuf>) -> StateStore {
        StateStore {
            run_dir: run_dir.into(),
            persist_dir: persist_dir.into(),
        }
    }

    /// The live copy's path.
    pub fn run_path(&self) -> PathBuf {
        self.run_dir.join(STATE_FILE)
    }

    /// The persistent copy's path.
    pub fn persist_path(&self) -> PathBuf {
        self.persist_dir.join(STATE_FILE)
    }

    /// Writes both copies atomically, creating the folders (root's, 0755) when missing.
    /// Tries both even when one fails; returns the first error, naming its file.
    pub fn save(&self, state: &State) -> io::Result<()> {
        let live = self.save_live(state);
        let kept = write_state(&self.persist_path(), state);
        live.and(kept)
    }

    /// Writes only the live copy: for progress lines between phases, which need not
    /// survive a reboot nor cost a disk flush.
    pub fn save_live(&self, state: &State) -> io::Result<()> {
        write_state(&self.run_path(), state)
    }

    /// The latest state: the live copy, or after a reboot (which empties `/run`) the
    /// persistent one. A corrupt copy counts as absent. Fails only when a copy exists but
    /// cannot be read and no other copy can.
    pub fn load(&self) -> io::Result<Option<State>> {
        let mut first_error = None;
        for path in [self.run_path(), self.persist_path()] {
            match read_state(&path) {
                Ok(Some(s)) => return Ok(Some(s)),
                Ok(None) | Err(ReadError::Invalid(_)) => {}
                Err(ReadError::Io(e)) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(None), Err)
    }

    /// Like [`load`](Self::load), and says which copy answered and what was skipped. The
    /// first copy that exists decides: the live one in this boot, the persistent one
    /// after a reboot. One that exists but cannot be read is [`Loaded::unreadable`],
    /// never taken for "no run yet", nor replaced by the older persistent copy.
    pub fn load_detailed(&self) -> Loaded {
        let mut loaded = Loaded::default();
        for path in [self.run_path(), self.persist_path()] {
            let why = match read_state(&path) {
                Ok(Some(s)) => {
                    loaded.state = Some(s);
                    loaded.from = Some(path);
                    break;
                }
                Ok(None) => continue,
                Err(ReadError::Invalid(why)) => why,
                Err(ReadError::Io(e)) => format!("cannot be read: {e}"),
            };
            loaded.notes.push(format!("{} {why}", path.display()));
            loaded.unreadable = Some(Unreadable { file: path, why });
            break;
        }
        loaded
    }
}

enum ReadError {
    Io(io::Error),
    Invalid(String),
}

/// Writes one copy, naming the file in the error.
fn write_state(path: &Path, state: &State) -> io::Result<()> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(named)?;
    }
    let mut json = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
    json.push(b'\n');
    atomic_write(path, &json, FILE_MODE, None).map_err(named)
}

/// Reads one copy, through [`read_record`] (no link followed, no blocking, a regular file
/// of at most [`MAX_STATE`] bytes): anything else is [`ReadError::Invalid`], saying what
/// it is.
fn read_state(path: &Path) -> Result<Option<State>, ReadError> {
    let bytes = match read_record(path, "a state file", MAX_STATE) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(RecordError::Io(e)) => return Err(ReadError::Io(e)),
        Err(RecordError::Invalid(why)) => return Err(ReadError::Invalid(why)),
    };
    // The version first, so a later schema is told apart from a corrupt file.
    #[derive(Deserialize)]
    struct Version {
        schema_version: u32,
    }
    let version: Version = serde_json::from_slice(&bytes)
        .map_err(|e| ReadError::Invalid(format!("is not a state file: corrupt JSON ({e})")))?;
    if version.schema_version != SCHEMA_VERSION {
        return Err(ReadError::Invalid(format!(
            "has schema version {} (this agent reads {SCHEMA_VERSION})",
            version.schema_version
        )));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| ReadError::Invalid(format!("is not a state file: corrupt JSON ({e})")))
}
