//! What the node says about itself: the failure file the platform reads over SSH, and the
//! state files `status` answers from. Everything here is written atomically (temp file in
//! the same folder, fsync, rename, fsync the folder), so a reader or a power cut sees the
//! old content or the new one, never half of either.
//!
//! The failure file (SPEC, "The failure file"):
//!
//! ```text
//! archive-missing: the Kubernetes ISO on /dev/sr0 (label CDROM) has no etcd/etcd-linux-amd64.tar.gz; …
//! cause: …                       (one line per error in the chain, outermost first)
//! agent: etcd-setup 0.1.0 (3f2a9c1d0e4b)
//! time: 2026-05-01T12:34:56Z
//! host: etcd-1
//! note: …                        (only when the owner could not be applied)
//! ```
//!
//! The state is `state.json` in `/run/etcd-setup` (live, gone at reboot) and in
//! `/var/lib/etcd-setup` (survives the reboot); see [`State`].

use crate::reason::{Failure, ReasonCode};
use nix::sys::signal::kill;
use nix::unistd::{geteuid, gethostname, Pid, User};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{fchown, DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The live state folder, emptied at every boot.
pub const RUN_DIR: &str = "/run/etcd-setup";
/// The persistent state folder, kept across reboots.
pub const PERSIST_DIR: &str = "/var/lib/etcd-setup";
/// The state file's name in both folders.
pub const STATE_FILE: &str = "state.json";
/// The version of [`State`]'s JSON this agent writes and reads.
pub const SCHEMA_VERSION: u32 = 1;
/// Mode of the failure file and the state files: the `cloud` user and `status` read them.
const FILE_MODE: u32 = 0o644;
/// Mode of folders this module creates.
const DIR_MODE: u32 = 0o755;
/// The largest state file read; real ones are about 1 KiB.
const MAX_STATE: u64 = 1 << 20;

/// Writes `bytes` to `path` atomically: a temp file in the same folder (created with
/// `O_EXCL` under a unique name), written, `fchmod` to `mode`, `fchown` to `owner`
/// (uid, gid) when given, fsynced, renamed over `path`, and the folder fsynced.
///
/// The folder must exist. On error `path` is untouched and the temp file removed; temp
/// files that an earlier process left behind (it died mid-write) are removed first.
/// Errors are the plain system error; the caller names the file.
pub fn atomic_write(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let name = name.to_string_lossy();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    remove_dead_temps(dir, &name);

    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let mut tries = 0;
    let (mut file, temp) = loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".{name}.{pid}.{n}.tmp"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
        {
            Ok(f) => break (f, TempFile(Some(temp))),
            // A name left by an earlier process with our PID; the counter moves on.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    file.write_all(bytes)?;
    file.set_permissions(Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        fchown(&file, Some(uid), Some(gid))?;
    }
    file.sync_all()?;
    drop(file);
    let from = temp.path();
    fs::rename(from, path)?;
    temp.keep();
    File::open(dir)?.sync_all()
}

/// Removes a temp file unless kept (renamed into place).
struct TempFile(Option<PathBuf>);

impl TempFile {
    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new(""))
    }

    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// Removes `.NAME.PID.N.tmp` files in `dir` whose PID is no live process: what a writer
/// killed between create and rename left behind. Best effort.
fn remove_dead_temps(dir: &Path, name: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.");
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(rest) = file_name
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|f| f.strip_suffix(".tmp"))
        else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let dead = pid > 0 && kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH);
        if dead {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Writes the failure file at `path`, owned by the user `owner`, mode 0644: the headline
/// `code: sentence` on the first line (newlines in the message become spaces), then
/// the error chain, the agent version, the time and the host, one detail a line.
///
/// The reason is always written, whatever happens to the owner: an unknown user, or a
/// `chown` the system refuses, leaves the file owned by the writer with a `note:` line
/// saying so. A missing parent folder (the user's home not made yet) is created, owned by
/// the user when known, mode 0755.
pub fn write_failure(
    path: &Path,
    owner: &str,
    failure: &Failure,
    now: SystemTime,
) -> io::Result<()> {
    let mut notes = Vec::new();
    let ids = match User::from_name(owner) {
        Ok(Some(user)) => Some((user.uid.as_raw(), user.gid.as_raw())),
        Ok(None) => {
            notes.push(format!(
                "user {owner:?} does not exist; this file is owned by uid {}",
                geteuid()
            ));
            None
        }
        Err(e) => {
            notes.push(format!(
                "cannot look up user {owner:?} ({e}); this file is owned by uid {}",
                geteuid()
            ));
            None
        }
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(parent)?;
            if let Some((uid, gid)) = ids {
                // Only the last folder is the user's; any above it stay root's.
                let _ = std::os::unix::fs::chown(parent, Some(uid), Some(gid));
            }
        }
    }
    let text = failure_text(failure, now, &notes);
    match atomic_write(path, text.as_bytes(), FILE_MODE, ids) {
        Err(e) if ids.is_some() && e.kind() == io::ErrorKind::PermissionDenied => {
            notes.push(format!(
                "cannot give this file to user {owner:?} ({e}); it is owned by uid {}",
                geteuid()
            ));
            let text = failure_text(failure, now, &notes);
            atomic_write(path, text.as_bytes(), FILE_MODE, None)
        }
        other => other,
    }
}

/// The failure file's content.
fn failure_text(failure: &Failure, now: SystemTime, notes: &[String]) -> String {
    let mut text = format!("{}: {}\n", failure.code, one_line(&failure.message));
    if let Some(source) = &failure.source {
        for cause in source.chain() {
            text.push_str(&format!("cause: {}\n", one_line(&cause.to_string())));
        }
    }
    text.push_str(&format!("agent: etcd-setup {}\n", crate::VERSION));
    text.push_str(&format!("time: {}\n", rfc3339(now)));
    text.push_str(&format!("host: {}\n", one_line(&hostname())));
    for note in notes {
        text.push_str(&format!("note: {}\n", one_line(note)));
    }
    text
}

/// Removes the failure file; one that is absent already is fine.
pub fn clear_failure(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// `text` with every run of line breaks and other control characters made one space, so
/// a message stays on its line.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut gap = false;
    for c in text.chars() {
        if c.is_control() {
            gap = true;
        } else {
            if gap && !out.is_empty() && !out.ends_with(' ') && c != ' ' {
                out.push(' ');
            }
            gap = false;
            out.push(c);
        }
    }
    out
}

fn hostname() -> String {
    gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// `t` as RFC 3339 in UTC to the second, e.g. `2026-05-01T12:34:56Z`. Times before 1970
/// (a clock not set yet) print as the epoch.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Year, month, day of the `days`-th day after 1970-01-01 (proleptic Gregorian), after
/// Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

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
            message: one_line(&failure.message),
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

    /// The store at [`RUN_DIR`] and [`PERSIST_DIR`].
    pub fn system() -> StateStore {
        StateStore::new(RUN_DIR, PERSIST_DIR)
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

    /// Like [`load`](Self::load), and says which copy answered and what was skipped.
    pub fn load_detailed(&self) -> Loaded {
        let mut loaded = Loaded::default();
        for path in [self.run_path(), self.persist_path()] {
            match read_state(&path) {
                Ok(Some(s)) => {
                    loaded.state = Some(s);
                    loaded.from = Some(path);
                    break;
                }
                Ok(None) => {}
                Err(ReadError::Invalid(why)) => loaded
                    .notes
                    .push(format!("{}: {why}; ignored", path.display())),
                Err(ReadError::Io(e)) => loaded
                    .notes
                    .push(format!("{}: cannot read: {e}; ignored", path.display())),
            }
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

fn read_state(path: &Path) -> Result<Option<State>, ReadError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReadError::Io(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_STATE + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_STATE {
        return Err(ReadError::Invalid(format!("larger than {MAX_STATE} bytes")));
    }
    // The version first, so a later schema is told apart from a corrupt file.
    #[derive(Deserialize)]
    struct Version {
        schema_version: u32,
    }
    let version: Version = serde_json::from_slice(&bytes)
        .map_err(|e| ReadError::Invalid(format!("corrupt state ({e})")))?;
    if version.schema_version != SCHEMA_VERSION {
        return Err(ReadError::Invalid(format!(
            "schema version {} (this agent reads {SCHEMA_VERSION})",
            version.schema_version
        )));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| ReadError::Invalid(format!("corrupt state ({e})")))
}

#[cfg(test)]
mod tests;
