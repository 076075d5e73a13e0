//! The protocol's messages: the request, the answer (JSON schema 1) and error replies.

use crate::exit::status as exit;
use crate::shared::report::{
    BackupFailure, BackupSeen, BackupUpload, BackupVerification, Phase, PhaseStamp, Reason,
    SnapshotFailure, SnapshotTaken, Stamp, UpgradeRecord,
};
use serde::{Deserialize, Serialize};

/// A request: one line of JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// Hold the answer until the verdict is terminal or `timeout_ms` passed.
    #[serde(default)]
    pub wait: bool,
    /// The longest wait, in milliseconds (capped at [`MAX_WAIT`]).
    #[serde(default)]
    pub timeout_ms: u64,
}

/// The verdict: what the exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// etcd runs and is healthy.
    Running,
    /// The run failed, was interrupted, or etcd is unhealthy since.
    Failed,
    /// A run is under way.
    InProgress,
    /// No run has begun.
    NotStarted,
    /// The state file exists but cannot be read: nobody can say what the run did.
    Unreadable,
    /// This member left its cluster (`etcd-setup leave`).
    Left,
}

impl Verdict {
    /// The verdict as JSON and text show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Running => "running",
            Verdict::Failed => "failed",
            Verdict::InProgress => "in-progress",
            Verdict::NotStarted => "not-started",
            Verdict::Unreadable => "unreadable",
            Verdict::Left => "left",
        }
    }

    /// The exit code of `status` for this verdict.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Running => exit::RUNNING,
            Verdict::Failed => exit::FAILED,
            Verdict::InProgress => exit::IN_PROGRESS,
            Verdict::NotStarted => exit::NOT_STARTED,
            Verdict::Unreadable => exit::UNREADABLE,
            Verdict::Left => exit::LEFT,
        }
    }

    /// Whether `--wait` ends on this verdict. An unreadable state does: the agent writes
    /// its files atomically, so a broken one stays broken until someone repairs it.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Verdict::Running | Verdict::Failed | Verdict::Unreadable | Verdict::Left
        )
    }
}

/// The process of the run that wrote the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunView {
    /// Its PID, when a state exists.
    pub pid: Option<u32>,
    /// Whether it is still alive (in this boot).
    pub alive: bool,
}

/// etcd as systemd and its health endpoint see it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdView {
    /// `ActiveState`, e.g. `active`, `activating`, `failed`.
    pub active_state: String,
    /// `SubState`, e.g. `running`, `auto-restart`.
    pub sub_state: String,
    /// `NRestarts`: automatic restarts since the last start job.
    pub n_restarts: u32,
    /// `ActiveEnterTimestamp`, µs since the epoch; 0 if never active.
    pub active_enter_timestamp_us: u64,
    /// `healthy`, `unhealthy: …` or `unreachable: …`.
    pub health: String,
    /// The version the running etcd reports (`etcd_server_version` on its `/metrics`);
    /// `null` when it is not active or does not say.
    #[serde(default)]
    pub version: Option<String>,
    /// Automatic restarts since `etcd-setup run` confirmed etcd running (`n_restarts`
    /// then subtracted), or since a manual start after that (which resets `n_restarts`);
    /// `null` when the state records no such count (written by an older agent).
    #[serde(default)]
    pub restarts_since_confirmed: Option<u32>,
}

/// The answer to a request (schema version 1; fields may be added, never changed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The run's phase, e.g. `waiting-for-iso`; `not-started` when no state exists;
    /// `null` when the state file cannot be read (verdict `unreadable`).
    pub phase: Option<Phase>,
    /// A human line on the current phase.
    pub progress: Option<String>,
    /// Why the verdict is `failed`.
    pub reason: Option<Reason>,
    /// The ISO's device.
    pub device: Option<String>,
    /// The ISO's volume label.
    pub label: Option<String>,
    /// The etcd archive's SHA-256.
    pub sha256: Option<String>,
    /// The etcd version installed.
    pub etcd_version: Option<String>,
    /// This member's etcd name (`node.name`), as the run recorded it; `null` before a
    /// run read the configuration, or from an older agent's state.
    #[serde(default)]
    pub member_name: Option<String>,
    /// Every phase entered, with its time.
    pub phases: Vec<PhaseStamp>,
    /// The run's process.
    pub run: RunView,
    /// etcd's live view; `null` before etcd is installed, or when it cannot be read.
    pub etcd: Option<EtcdView>,
    /// The verdict.
    pub verdict: Verdict,
    /// The exit code `etcd-setup status` gives for it.
    pub exit_code: u8,
    /// When the state last changed, RFC 3339.
    pub updated_at: Option<String>,
    /// The state file the answer comes from; with verdict `unreadable`, the one that
    /// cannot be read.
    pub state_file: Option<String>,
    /// What the server noticed about state files it could not use, one sentence each
    /// naming the file; absent when there is nothing to say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// etcd's database size, size in use and quota (its `/metrics`); `null` when etcd
    /// is not active or does not say.
    #[serde(default)]
    pub space: Option<SpaceView>,
    /// etcd's active alarms as its `/health` names them: `NOSPACE`, `CORRUPT`.
    #[serde(default)]
    pub alarms: Vec<String>,
    /// The last snapshot and the last snapshot failure (`snapshot.json`); `null` before
    /// the first `etcd-setup snapshot`.
    #[serde(default)]
    pub snapshot: Option<SnapshotView>,
    /// What is not a failure but wants attention: a stale or failed snapshot, ...
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The data-safety advisories of the installed release, one line each (etcd
    /// 3.5.0–3.5.2, say); absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advisories: Vec<String>,
    /// The same advisories as objects (`id`, `summary`, `source`), the shape `check`'s
    /// JSON gives them; added beside the strings, which schema 1 keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advisory_details: Vec<crate::shared::advisory::AdvisoryRecord>,
    /// The last or current `etcd-setup upgrade`: its phase, the versions, each member's
    /// version and the cluster version it saw; absent when none ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeRecord>,
    /// The day-2 command working on this node now (`upgrade`, `restore`, `leave`): its
    /// pid, since when, its step, whether etcd is down on purpose; absent when none runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<crate::shared::report::Operation>,
    /// Every certificate of `[tls]` (leaves and the CAs of the trusted bundles): subject,
    /// issuer, serial, validity, days left, key and SAN fit, and its problem; absent
    /// without `[tls]` (added field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<crate::shared::config::certs::CertView>,
    /// This member's role, `voter` or `learner` (etcd's maintenance status, `isLearner`);
    /// absent when etcd is not active or does not say (added field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The off-node backups (`backup.json`): the last upload, the newest verified object
    /// of the cluster, the last failure and verification, the age; absent without
    /// `[backup]` (added field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupView>,
}

/// The off-node backups as this node last saw the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupView {
    /// `[backup]` is configured (the block is absent otherwise).
    pub configured: bool,
    /// The last object this node uploaded (time, object, size, read-back verified,
    /// member).
    pub last_upload: Option<BackupUpload>,
    /// The newest verified object of the cluster, any member's.
    pub newest: Option<BackupSeen>,
    /// When this node last looked at the bucket successfully.
    pub checked: Option<Stamp>,
    /// The last upload's failure, when it came after the last good one.
    pub failure: Option<BackupFailure>,
    /// The last full verification (`etcd-setup backups verify`).
    pub last_verification: Option<BackupVerification>,
    /// Seconds since the newest verified object was taken; `null` when none is known.
    pub age_s: Option<u64>,
    /// `backup.period` in seconds.
    pub period_s: u64,
    /// Whether the newest verified object is older than two periods, or none is known.
    pub stale: bool,
}

/// The member's role in its cluster, from etcd's maintenance status (`isLearner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// A voting member.
    Voter,
    /// A learner: it replicates but does not vote (a joining member before promotion).
    Learner,
}

impl Role {
    /// The role as JSON, text and metrics show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Voter => "voter",
            Role::Learner => "learner",
        }
    }
}

/// etcd's space, from its `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceView {
    /// `etcd_mvcc_db_total_size_in_bytes`: the database file's size.
    pub db_size: u64,
    /// `etcd_mvcc_db_total_size_in_use_in_bytes`: the part of it in use.
    pub db_size_in_use: Option<u64>,
    /// `etcd_server_quota_backend_bytes`: the quota (NOSPACE beyond it).
    pub quota: u64,
    /// `db_size` as a percentage of `quota`.
    pub quota_used_percent: u64,
}

/// The last snapshot, as `etcd-setup snapshot` recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotView {
    /// The last good snapshot (time, revision, size, file, ...).
    pub last: Option<SnapshotTaken>,
    /// The last failure, when it came after the last good snapshot.
    pub failure: Option<SnapshotFailure>,
    /// The last good snapshot's copy into `snapshot.copy_dir` failed (added field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_failure: Option<SnapshotFailure>,
    /// Whether the last good snapshot is older than `snapshot.stale_after` (or missing).
    pub stale: bool,
}

/// An error reply's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// `forbidden`, `bad-request`, `request-too-large`, `request-timeout`,
    /// `unsupported-version`, `busy` or `internal-error`.
    pub code: String,
    /// One sentence.
    pub message: String,
}

impl ErrorBody {
    /// An error with `code` and `message`.
    pub fn new(code: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            code: code.to_string(),
            message: message.into(),
        }
    }
}

/// A reply: an answer or an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The status.
    Answer(Box<Answer>),
    /// The request was refused.
    Error(ErrorBody),
}

/// The largest reply a client reads (the line with its newline).
pub const MAX_REPLY: u64 = 1 << 20;

impl Reply {
    /// The reply's JSON, one line with a newline, at most [`MAX_REPLY`] bytes: an answer
    /// that would be longer (thousands of CAs in a bundle, say) keeps the certificates
    /// with a problem or expiring first and as many of the rest and of the warnings as
    /// fit, and says in a warning how many it left out.
    pub fn to_line(&self) -> Vec<u8> {
        let encoded = match self {
            Reply::Answer(a) => fitted(a),
            Reply::Error(e) => serde_json::to_vec(&serde_json::json!({ "error": e })).ok(),
        };
        let mut bytes = encoded.unwrap_or_else(|| {
            br#"{"error":{"code":"internal-error","message":"cannot encode the reply"}}"#.to_vec()
        });
        bytes.push(b'\n');
        bytes
    }

    /// Reads a reply's JSON.
    pub fn parse(bytes: &[u8]) -> Result<Reply, String> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("the reply is not JSON: {e}"))?;
        if let Some(error) = value.get("error") {
            return serde_json::from_value(error.clone())
                .map(Reply::Error)
                .map_err(|e| format!("the error reply is malformed: {e}"));
        }
        serde_json::from_value(value)
            .map(|a| Reply::Answer(Box::new(a)))
            .map_err(|e| format!("the answer is malformed: {e}"))
    }
}

/// `a` encoded within [`MAX_REPLY`] (its newline counted), cut as [`Reply::to_line`] says;
/// `None` when even the cut answer does not fit.
fn fitted(a: &Answer) -> Option<Vec<u8>> {
    let limit = MAX_REPLY as usize - 1;
    let bytes = serde_json::to_vec(a).ok()?;
    if bytes.len() <= limit {
        return Some(bytes);
    }
    let mut cut = a.clone();
    // Those that say something first.
    cut.certificates
        .sort_by_key(|c| !(c.problem.is_some() || c.expiring));
    let (certs, warnings) = (cut.certificates.clone(), cut.warnings.clone());
    let (mut keep_certs, mut keep_warnings) = (certs.len(), warnings.len());
    for _ in 0..64 {
        // The certificates go first, a warning says more than a CA in the list.
        if keep_certs > 0 {
            keep_certs /= 2;
        } else {
            keep_warnings /= 2;
        }
        cut.certificates = certs[..keep_certs].to_vec();
        cut.warnings = warnings[..keep_warnings].to_vec();
        cut.warnings.push(format!(
            "this answer was cut to fit the status protocol's {} KiB: {} of {} certificates \
             and {} of {} warnings left out (those with a problem or expiring come first)",
            MAX_REPLY >> 10,
            certs.len() - keep_certs,
            certs.len(),
            warnings.len() - keep_warnings,
            warnings.len()
        ));
        let bytes = serde_json::to_vec(&cut).ok()?;
        if bytes.len() <= limit {
            return Some(bytes);
        }
        if keep_certs == 0 && keep_warnings == 0 {
            return None;
        }
    }
    None
}
