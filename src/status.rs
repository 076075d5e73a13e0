//! `etcd-setup status`: one authoritative answer about this node, over a local socket.
//!
//! The protocol (version 1) on the unix stream socket [`SOCKET`]:
//!
//! - The client sends one line of JSON, at most [`MAX_REQUEST`] bytes, within
//!   [`REQUEST_TIMEOUT`] of connecting: `{"version":1,"wait":false,"timeout_ms":0}`.
//! - The server answers with one JSON document and a newline, then closes: an [`Answer`],
//!   or `{"error":{"code":…,"message":…}}` (see [`ErrorBody`]).
//! - With `"wait":true` the server holds the answer until the verdict is terminal
//!   (`running` or `failed`) or `timeout_ms` has passed, watching the state file with
//!   inotify; the client only waits for its reply.
//!
//! The answer is built from the state files ([`crate::report::StateStore`]) and a live
//! view of etcd ([`LiveView`]: systemd over D-Bus and etcd's health endpoint), by
//! [`evaluate`], a pure function the tests drive with fixtures. The server is in
//! [`server`], the client in [`query`].

pub mod server;

use crate::health::{self, Health};
use crate::report::{Loaded, Phase, PhaseStamp, State};
use crate::systemd::{Systemd, UnitState};
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The status socket.
pub const SOCKET: &str = "/run/etcd-setup/status.sock";
/// The protocol version a request names.
pub const PROTOCOL_VERSION: u32 = 1;
/// The version of the answer's JSON.
pub const SCHEMA_VERSION: u32 = 1;
/// The largest request, newline included.
pub const MAX_REQUEST: usize = 4096;
/// How long a client may take to send its request after connecting.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest `--wait` the server grants.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);
/// The largest reply the client reads.
const MAX_REPLY: u64 = 1 << 20;
/// etcd's unit.
const ETCD_UNIT: &str = "etcd.service";
/// How recent etcd.service's last start must be for restarts since the run confirmed it
/// to count as a crash loop while it is active: the unit's own `StartLimitIntervalSec=`,
/// over which systemd counts starts. An etcd active for longer is stable again.
pub const CRASH_WINDOW: Duration = Duration::from_secs(600);

/// Exit codes of `status` (a contract: README and `--help` list them).
pub mod exit {
    /// etcd runs and is healthy.
    pub const RUNNING: u8 = 0;
    /// The run failed, or etcd stopped or is unhealthy since; the reason is printed.
    pub const FAILED: u8 = 1;
    /// The command line is wrong (clap's code).
    pub const USAGE: u8 = 2;
    /// A run is in progress (not finished yet).
    pub const IN_PROGRESS: u8 = 3;
    /// No run has started on this node yet.
    pub const NOT_STARTED: u8 = 4;
    /// The status socket cannot be reached, or the server refused the request.
    pub const UNREACHABLE: u8 = 5;
}

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
}

impl Verdict {
    /// The verdict as JSON and text show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Running => "running",
            Verdict::Failed => "failed",
            Verdict::InProgress => "in-progress",
            Verdict::NotStarted => "not-started",
        }
    }

    /// The exit code of `status` for this verdict.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Running => exit::RUNNING,
            Verdict::Failed => exit::FAILED,
            Verdict::InProgress => exit::IN_PROGRESS,
            Verdict::NotStarted => exit::NOT_STARTED,
        }
    }

    /// Whether `--wait` ends on this verdict.
    pub fn is_terminal(self) -> bool {
        matches!(self, Verdict::Running | Verdict::Failed)
    }
}

/// A reason: stable code and one sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonView {
    /// The reason code, e.g. `archive-missing`.
    pub code: String,
    /// The sentence an operator acts on.
    pub message: String,
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
    /// The run's phase, e.g. `waiting-for-iso`; `not-started` when no state exists.
    pub phase: String,
    /// A human line on the current phase.
    pub progress: Option<String>,
    /// Why the verdict is `failed`.
    pub reason: Option<ReasonView>,
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
    /// The state file the answer comes from.
    pub state_file: Option<String>,
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

impl Reply {
    /// The reply's JSON, one line with a newline.
    pub fn to_line(&self) -> Vec<u8> {
        let mut bytes = match self {
            Reply::Answer(a) => serde_json::to_vec(a),
            Reply::Error(e) => serde_json::to_vec(&serde_json::json!({ "error": e })),
        }
        .unwrap_or_else(|_| {
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

/// What the live view of etcd found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdLive {
    /// etcd.service's properties.
    pub unit: UnitState,
    /// Its health endpoint.
    pub health: Health,
    /// The version the running etcd reports on `/metrics`; `None` when it is not active
    /// or could not be read.
    pub version: Option<String>,
}

/// Where the answer's live view of etcd comes from: systemd and the health endpoint on a
/// node ([`SystemLive`]), a fixture in tests.
pub trait LiveView: Send + Sync {
    /// etcd's state now, or why it cannot be read.
    fn etcd(&self) -> Result<EtcdLive, String>;
}

/// The live view on a node: `etcd.service` over D-Bus (one connection, kept) and
/// `GET /health` on the metrics port. Results are kept for [`SystemLive::TTL`], so a
/// burst of clients costs one round trip, not one each.
pub struct SystemLive {
    metrics: SocketAddr,
    systemd: Mutex<Option<Systemd>>,
    cache: Mutex<Option<(Instant, Result<EtcdLive, String>)>>,
    version: Mutex<Option<VersionSeen>>,
}

/// The running etcd's version, read once per etcd process: it cannot change without a
/// restart, which changes `MainPID` and `ActiveEnterTimestamp`.
struct VersionSeen {
    /// `(MainPID, ActiveEnterTimestamp)` of the process read.
    process: (u32, u64),
    /// What it said.
    version: Option<String>,
    /// After a failed read: when to try again.
    retry_at: Option<Instant>,
}

impl SystemLive {
    /// How long one look is reused.
    pub const TTL: Duration = Duration::from_millis(500);
    /// The longest read of `/metrics` for the version.
    pub const VERSION_DEADLINE: Duration = Duration::from_secs(2);
    /// How long a failed version read stands before the same process is asked again.
    pub const VERSION_RETRY: Duration = Duration::from_secs(10);

    /// A live view asking etcd's health on 127.0.0.1:`metrics_port`.
    pub fn new(metrics_port: u16) -> SystemLive {
        SystemLive {
            metrics: SocketAddr::from(([127, 0, 0, 1], metrics_port)),
            systemd: Mutex::new(None),
            cache: Mutex::new(None),
            version: Mutex::new(None),
        }
    }

    /// The running etcd's version: from the cache while the process is the same, else
    /// from `/metrics` (a streaming read that stops at the version line).
    fn live_version(&self, unit: &UnitState) -> Option<String> {
        let process = (unit.main_pid, unit.active_enter_timestamp_us);
        let mut seen = self.version.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = seen.as_ref().filter(|v| v.process == process) {
            if v.retry_at.is_none_or(|at| Instant::now() < at) {
                return v.version.clone();
            }
        }
        let read = health::server_version(self.metrics, Self::VERSION_DEADLINE).ok();
        *seen = Some(VersionSeen {
            process,
            retry_at: read.is_none().then(|| Instant::now() + Self::VERSION_RETRY),
            version: read.clone(),
        });
        read
    }

    fn look(&self) -> Result<EtcdLive, String> {
        let unit = {
            let mut sd = self.systemd.lock().unwrap_or_else(|e| e.into_inner());
            if sd.is_none() {
                *sd = Some(Systemd::connect().map_err(|f| f.message)?);
            }
            let Some(conn) = sd.as_ref() else {
                return Err("no systemd connection".into());
            };
            match conn.unit_state(ETCD_UNIT) {
                Ok(u) => u,
                Err(f) => {
                    // A broken connection is made again on the next look.
                    *sd = None;
                    return Err(f.message);
                }
            }
        };
        let (health, version) = if unit.is_active() {
            (
                health::check(self.metrics, Duration::from_secs(1)),
                self.live_version(&unit),
            )
        } else {
            (
                Health::Unreachable(format!("etcd.service is {}", unit.active_state)),
                None,
            )
        };
        Ok(EtcdLive {
            unit,
            health,
            version,
        })
    }
}

impl LiveView for SystemLive {
    fn etcd(&self) -> Result<EtcdLive, String> {
        // One look at a time; the others reuse it.
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, seen)) = cache.as_ref() {
            if at.elapsed() < Self::TTL {
                return seen.clone();
            }
        }
        let seen = self.look();
        *cache = Some((Instant::now(), seen.clone()));
        seen
    }
}

/// A live view read from a JSON file on every look (a test fixture, named by the
/// `ETCD_SETUP_FAKE_ETCD` variable of `serve-status`): `{"unit":{UnitState fields},
/// "health":"healthy"|"unhealthy: …"|"unreachable: …", "version":"3.5.1"}` (version
/// optional), or `{"error":"…"}`.
pub struct FileLive(pub PathBuf);

impl LiveView for FileLive {
    fn etcd(&self) -> Result<EtcdLive, String> {
        #[derive(Deserialize)]
        struct Fixture {
            #[serde(default)]
            unit: UnitState,
            #[serde(default)]
            health: String,
            #[serde(default)]
            version: Option<String>,
            error: Option<String>,
        }
        let bytes = std::fs::read(&self.0).map_err(|e| format!("{}: {e}", self.0.display()))?;
        let f: Fixture =
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", self.0.display()))?;
        if let Some(e) = f.error {
            return Err(e);
        }
        let health = match f.health.split_once(": ") {
            _ if f.health == "healthy" => Health::Healthy,
            Some(("unhealthy", why)) => Health::Unhealthy(why.into()),
            Some((_, why)) => Health::Unreachable(why.into()),
            None => Health::Unreachable(f.health),
        };
        Ok(EtcdLive {
            unit: f.unit,
            health,
            version: f.version,
        })
    }
}

/// `health` as the answer shows it.
pub fn health_text(health: &Health) -> String {
    match health {
        Health::Healthy => "healthy".into(),
        Health::Unhealthy(why) => format!("unhealthy: {why}"),
        Health::Unreachable(why) => format!("unreachable: {why}"),
    }
}

/// Whether process `pid` exists (a zombie counts; EPERM means it exists).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Builds the answer from the loaded state and the live view.
///
/// - No state, or phase `not-started`: verdict `not-started`.
/// - A phase before `running` whose run process is gone (or whose state comes from the
///   persistent copy, i.e. from an earlier boot): `failed`, reason `interrupted`.
/// - `running`: `running` only while etcd.service is active, its health endpoint says
///   healthy, and it is not crash-looping; otherwise `failed`, reason `etcd-unhealthy`.
///   Crash-looping: it restarted since the run confirmed it running (`NRestarts` above
///   the count the state recorded then; below it, a manual start reset the count, which
///   then counts from 0) and its last start is within [`CRASH_WINDOW`]. A poll between
///   two crashes thus sees the loop; an etcd up for longer than the window after a
///   restart counts as running again.
/// - `failed`: the recorded reason.
///
/// `live_copy` names the live state file; a state read from another file is from an
/// earlier boot. `alive` says whether a PID lives ([`pid_alive`] on a node).
pub fn evaluate(
    loaded: &Loaded,
    live_copy: &Path,
    live: &dyn LiveView,
    alive: &dyn Fn(u32) -> bool,
) -> Answer {
    evaluate_at(loaded, live_copy, live, alive, SystemTime::now())
}

/// [`evaluate`] at the time `now` (which the crash-loop window is measured from).
pub fn evaluate_at(
    loaded: &Loaded,
    live_copy: &Path,
    live: &dyn LiveView,
    alive: &dyn Fn(u32) -> bool,
    now: SystemTime,
) -> Answer {
    let Some(state) = &loaded.state else {
        return Answer {
            schema_version: SCHEMA_VERSION,
            phase: Phase::NotStarted.as_str().into(),
            progress: Some("etcd-setup run has not started on this node".into()),
            reason: None,
            device: None,
            label: None,
            sha256: None,
            etcd_version: None,
            member_name: None,
            phases: Vec::new(),
            run: RunView {
                pid: None,
                alive: false,
            },
            etcd: None,
            verdict: Verdict::NotStarted,
            exit_code: exit::NOT_STARTED,
            updated_at: None,
            state_file: None,
        };
    };
    let this_boot = loaded.from.as_deref() == Some(live_copy);
    let run_alive = this_boot && state.pid.is_some_and(alive);
    let mut reason = state.reason.as_ref().map(|r| ReasonView {
        code: r.code.as_str().to_string(),
        message: r.message.clone(),
    });
    let wants_etcd = matches!(
        state.phase,
        Phase::Starting | Phase::Running | Phase::Failed
    );
    let etcd = wants_etcd.then(|| live.etcd());
    let etcd_view = match &etcd {
        Some(Ok(e)) => Some(EtcdView {
            active_state: e.unit.active_state.clone(),
            sub_state: e.unit.sub_state.clone(),
            n_restarts: e.unit.n_restarts,
            active_enter_timestamp_us: e.unit.active_enter_timestamp_us,
            health: health_text(&e.health),
            version: e.version.clone(),
            restarts_since_confirmed: state
                .confirmed_n_restarts
                .map(|_| Restarts::of(state, e.unit.n_restarts).count),
        })
        .filter(|_| e.unit.load_state != "not-found"),
        _ => None,
    };
    let verdict = match state.phase {
        Phase::NotStarted => Verdict::NotStarted,
        Phase::Failed => Verdict::Failed,
        Phase::Running => match &etcd {
            Some(Ok(e)) => match etcd_trouble(e, state, now) {
                None => Verdict::Running,
                Some(message) => {
                    reason = Some(ReasonView {
                        code: "etcd-unhealthy".into(),
                        message,
                    });
                    Verdict::Failed
                }
            },
            Some(Err(why)) => {
                reason = Some(ReasonView {
                    code: "etcd-unhealthy".into(),
                    message: format!("cannot confirm that etcd.service runs: {why}"),
                });
                Verdict::Failed
            }
            None => Verdict::Failed,
        },
        _ if run_alive => Verdict::InProgress,
        phase => {
            let pid = state
                .pid
                .map_or_else(|| "unknown".to_string(), |p| p.to_string());
            let when = if this_boot {
                String::new()
            } else {
                " (before the last reboot)".to_string()
            };
            reason = Some(ReasonView {
                code: "interrupted".into(),
                message: format!(
                    "the run (pid {pid}) ended without finishing, while {}{when}; run it again with `systemctl start etcd-setup`",
                    phase.as_str()
                ),
            });
            Verdict::Failed
        }
    };
    Answer {
        schema_version: SCHEMA_VERSION,
        phase: state.phase.as_str().into(),
        progress: state.progress.clone(),
        reason: reason.filter(|_| verdict == Verdict::Failed),
        device: state.device.clone(),
        label: state.label.clone(),
        sha256: state.sha256.clone(),
        etcd_version: state.etcd_version.clone(),
        member_name: state.member_name.clone(),
        phases: state.phases.clone(),
        run: RunView {
            pid: state.pid,
            alive: run_alive,
        },
        etcd: etcd_view,
        verdict,
        exit_code: verdict.exit_code(),
        updated_at: Some(state.updated_at.clone()),
        state_file: loaded.from.as_ref().map(|p| p.display().to_string()),
    }
}

/// etcd.service's automatic restarts since a known point.
struct Restarts {
    /// How many.
    count: u32,
    /// Since when, as a clause: `since etcd-setup confirmed it running at …`.
    since: String,
}

impl Restarts {
    /// The restarts in `n_restarts` (etcd.service's `NRestarts` now) that came after the
    /// run confirmed etcd running. systemd resets `NRestarts` on a manual start: a count
    /// below the recorded one means one happened, and the count runs from it.
    fn of(state: &State, n_restarts: u32) -> Restarts {
        match state.confirmed_n_restarts {
            Some(base) if n_restarts >= base => Restarts {
                count: n_restarts - base,
                since: match confirmed_at(state) {
                    Some(at) => format!("since etcd-setup confirmed it running at {at}"),
                    None => "since etcd-setup confirmed it running".into(),
                },
            },
            Some(_) => Restarts {
                count: n_restarts,
                since: "since it was last started by hand".into(),
            },
            // An older agent's state: NRestarts counts from the last start job.
            None => Restarts {
                count: n_restarts,
                since: "since its last start job".into(),
            },
        }
    }
}

/// When the run last confirmed etcd running (its `running` stamp).
fn confirmed_at(state: &State) -> Option<&str> {
    state
        .phases
        .iter()
        .rev()
        .find(|p| p.phase == Phase::Running)
        .map(|p| p.at.as_str())
}

/// How long ago `us` (µs since the epoch) was, e.g. `4 s`, `12 min`; a time ahead of
/// `now` (a clock set back) is `0 s`.
fn ago(us: u64, now: SystemTime) -> String {
    let then = UNIX_EPOCH + Duration::from_micros(us);
    let secs = now.duration_since(then).map_or(0, |d| d.as_secs());
    match secs {
        0..120 => format!("{secs} s"),
        120..7200 => format!("{} min", secs / 60),
        7200..172_800 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// Whether etcd.service last became active within [`CRASH_WINDOW`] of `now` (a time
/// ahead of `now` counts as recent).
fn started_recently(e: &EtcdLive, now: SystemTime) -> bool {
    let us = e.unit.active_enter_timestamp_us;
    us != 0
        && now
            .duration_since(UNIX_EPOCH + Duration::from_micros(us))
            .map_or(true, |d| d < CRASH_WINDOW)
}

/// Why a run that reached `running` does not count as running now, or `None` when it
/// does: etcd.service active, healthy, and no restart since the run confirmed it that is
/// recent (see [`evaluate`]).
fn etcd_trouble(e: &EtcdLive, state: &State, now: SystemTime) -> Option<String> {
    let restarts = Restarts::of(state, e.unit.n_restarts);
    let last_start = if e.unit.active_enter_timestamp_us == 0 {
        String::new()
    } else {
        format!(
            "; last start {} ago",
            ago(e.unit.active_enter_timestamp_us, now)
        )
    };
    if !e.unit.is_active() {
        let exit = e.unit.exit();
        let exit = if exit.is_empty() {
            String::new()
        } else {
            format!("; its process {exit}")
        };
        let total = match e.unit.n_restarts {
            1 => "1 restart".to_string(),
            n => format!("{n} restarts"),
        };
        let recent = if restarts.count != e.unit.n_restarts {
            format!(" ({} {})", restarts.count, restarts.since)
        } else {
            String::new()
        };
        let confirmed = confirmed_at(state)
            .filter(|_| recent.is_empty())
            .map(|at| format!(" (etcd-setup confirmed it running at {at})"))
            .unwrap_or_default();
        return Some(format!(
            "etcd.service is {}/{} after {total}{recent}{exit}{confirmed}{last_start}; see `journalctl -u etcd`",
            e.unit.active_state, e.unit.sub_state
        ));
    }
    let healthy = e.health == Health::Healthy;
    if restarts.count > 0 && started_recently(e, now) {
        let health = if healthy {
            String::new()
        } else {
            format!("; its health check says {}", health_text(&e.health))
        };
        return Some(format!(
            "etcd.service restarted {} time{} {}{last_start}{health}; see `journalctl -u etcd`",
            restarts.count,
            if restarts.count == 1 { "" } else { "s" },
            restarts.since
        ));
    }
    if healthy {
        return None;
    }
    let since = confirmed_at(state)
        .map(|at| format!(" (etcd-setup confirmed it running at {at})"))
        .unwrap_or_default();
    Some(format!(
        "etcd.service is active but its health check says {}{since}",
        health_text(&e.health)
    ))
}

/// What the client could not do.
#[derive(Debug)]
pub enum ClientError {
    /// Connecting, writing or reading failed, or the reply is malformed.
    Unreachable(String),
    /// The server answered with an error.
    Refused(ErrorBody),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable(why) => f.write_str(why),
            ClientError::Refused(e) => write!(f, "{}: {}", e.code, e.message),
        }
    }
}

/// Sends `request` to the server at `socket` and reads its answer. The reply may take
/// up to the request's wait plus `slack`.
pub fn query(socket: &Path, request: &Request, slack: Duration) -> Result<Answer, ClientError> {
    let shown = socket.display();
    let unreachable = |what: &str, e: &dyn std::fmt::Display| {
        ClientError::Unreachable(format!("cannot {what} the status socket {shown}: {e}"))
    };
    let mut stream = UnixStream::connect(socket).map_err(|e| unreachable("connect to", &e))?;
    let wait = if request.wait {
        Duration::from_millis(request.timeout_ms).min(MAX_WAIT)
    } else {
        Duration::ZERO
    };
    let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_read_timeout(Some(wait + slack));
    let mut line = serde_json::to_vec(request).map_err(|e| unreachable("encode for", &e))?;
    line.push(b'\n');
    stream
        .write_all(&line)
        .map_err(|e| unreachable("write to", &e))?;
    let reply = read_reply(&mut stream).map_err(|e| unreachable("read from", &e))?;
    match Reply::parse(&reply) {
        Ok(Reply::Answer(a)) => Ok(*a),
        Ok(Reply::Error(e)) => Err(ClientError::Refused(e)),
        Err(why) => Err(ClientError::Unreachable(format!("{shown}: {why}"))),
    }
}

/// Reads one reply line. A reset after the line counts as its end: the server closes
/// without reading what a client sent beyond its request.
fn read_reply(stream: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut reply = Vec::new();
    let mut limited = stream.take(MAX_REPLY);
    let mut buf = [0u8; 8192];
    loop {
        match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                reply.extend_from_slice(&buf[..n]);
                if reply.ends_with(b"\n") {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset && !reply.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    if reply.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the connection without a reply",
        ));
    }
    Ok(reply)
}

/// The one-line summary, e.g. `running: member etcd-1, etcd 3.5.16 active, healthy (0
/// restarts)`. The version is the running etcd's, else the installed one.
pub fn text_line(a: &Answer) -> String {
    match a.verdict {
        Verdict::Running => {
            let (state, health, restarts) = a.etcd.as_ref().map_or_else(
                || ("unknown".to_string(), "unknown".to_string(), 0),
                |e| (e.active_state.clone(), e.health.clone(), e.n_restarts),
            );
            let member = a
                .member_name
                .as_ref()
                .map(|m| format!("member {m}, "))
                .unwrap_or_default();
            let version = a
                .etcd
                .as_ref()
                .and_then(|e| e.version.as_deref())
                .or(a.etcd_version.as_deref())
                .unwrap_or("(version unknown)");
            format!(
                "running: {member}etcd {version} {state}, {health} ({restarts} restart{})",
                if restarts == 1 { "" } else { "s" }
            )
        }
        Verdict::Failed => match &a.reason {
            Some(r) => format!("failed: {}: {}", r.code, r.message),
            None => "failed: (no reason recorded)".into(),
        },
        Verdict::InProgress | Verdict::NotStarted => format!(
            "{}: {}",
            a.phase,
            a.progress.as_deref().unwrap_or(a.phase.as_str())
        ),
    }
}

/// The `etcd:` line of `--long`: the installed version and the running one, and whether
/// they differ.
fn versions_text(a: &Answer) -> String {
    let installed = a.etcd_version.as_deref().unwrap_or("-");
    let sha = a.sha256.as_deref().unwrap_or("-");
    let running = match a.etcd.as_ref().and_then(|e| e.version.as_deref()) {
        None => "unknown".to_string(),
        Some(v) if a.etcd_version.as_deref().is_some_and(|i| i != v) => {
            format!("{v} (not the installed {installed}: etcd.service runs another binary, or was not restarted since the install)")
        }
        Some(v) => v.to_string(),
    };
    format!("installed {installed} (sha256 {sha}), running {running}")
}

/// `--long`: labelled lines.
pub fn text_long(a: &Answer) -> String {
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let mut out = format!("verdict:  {}\n", a.verdict.as_str());
    out.push_str(&format!("phase:    {}\n", a.phase));
    if let Some(r) = &a.reason {
        out.push_str(&format!("reason:   {}: {}\n", r.code, r.message));
    }
    out.push_str(&format!("progress: {}\n", or_dash(&a.progress)));
    out.push_str(&format!(
        "iso:      {} (label {})\n",
        or_dash(&a.device),
        or_dash(&a.label)
    ));
    out.push_str(&format!("member:   {}\n", or_dash(&a.member_name)));
    out.push_str(&format!("etcd:     {}\n", versions_text(a)));
    match &a.etcd {
        Some(e) => out.push_str(&format!(
            "unit:     etcd.service {}/{}, {} restart(s){}, active since {}; {}\n",
            e.active_state,
            e.sub_state,
            e.n_restarts,
            e.restarts_since_confirmed
                .map(|n| format!(" ({n} since etcd-setup confirmed it)"))
                .unwrap_or_default(),
            micros_text(e.active_enter_timestamp_us),
            e.health
        )),
        None => out.push_str("unit:     -\n"),
    }
    let pid = a.run.pid.map_or_else(|| "-".into(), |p| p.to_string());
    out.push_str(&format!(
        "run:      pid {pid} ({})\n",
        if a.run.alive { "alive" } else { "not running" }
    ));
    let phases: Vec<String> = a
        .phases
        .iter()
        .map(|p| format!("{} {}", p.phase, p.at))
        .collect();
    out.push_str(&format!(
        "phases:   {}\n",
        if phases.is_empty() {
            "-".into()
        } else {
            phases.join(", ")
        }
    ));
    out.push_str(&format!("updated:  {}\n", or_dash(&a.updated_at)));
    out
}

fn micros_text(us: u64) -> String {
    if us == 0 {
        return "never".into();
    }
    crate::report::rfc3339(UNIX_EPOCH + Duration::from_micros(us))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reason::{Failure, ReasonCode};
    use std::time::SystemTime;

    struct Fixed(Result<EtcdLive, String>);

    impl LiveView for Fixed {
        fn etcd(&self) -> Result<EtcdLive, String> {
            self.0.clone()
        }
    }

    fn unit(load: &str, active: &str, sub: &str, restarts: u32) -> UnitState {
        UnitState {
            load_state: load.into(),
            active_state: active.into(),
            sub_state: sub.into(),
            n_restarts: restarts,
            ..UnitState::default()
        }
    }

    fn healthy() -> Fixed {
        Fixed(Ok(EtcdLive {
            unit: unit("loaded", "active", "running", 0),
            health: Health::Healthy,
            version: None,
        }))
    }

    const LIVE: &str = "/run/etcd-setup/state.json";

    fn loaded(state: State) -> Loaded {
        Loaded {
            state: Some(state),
            from: Some(PathBuf::from(LIVE)),
            notes: Vec::new(),
        }
    }

    fn running() -> State {
        let mut s = State::begin(Phase::WaitingForIso);
        s.etcd_version = Some("3.5.16".into());
        s.enter(Phase::Running, SystemTime::now());
        s
    }

    fn eval(l: &Loaded, live: &dyn LiveView, alive: bool) -> Answer {
        evaluate(l, Path::new(LIVE), live, &move |_| alive)
    }

    #[test]
    fn running_and_healthy_is_running_with_exit_0() {
        let a = eval(&loaded(running()), &healthy(), false);
        assert_eq!((a.verdict, a.exit_code), (Verdict::Running, 0));
        assert_eq!(
            text_line(&a),
            "running: etcd 3.5.16 active, healthy (0 restarts)"
        );
        assert_eq!(a.reason, None);
    }

    #[test]
    fn systemd_unreachable_while_running_is_failed_not_running() {
        let a = eval(&loaded(running()), &Fixed(Err("no bus".into())), false);
        assert_eq!(a.verdict, Verdict::Failed);
        let r = a.reason.unwrap();
        assert_eq!(r.code, "etcd-unhealthy");
        assert!(r.message.contains("no bus"), "{}", r.message);
        assert_eq!(a.etcd, None);
    }

    #[test]
    fn a_stopped_etcd_names_its_exit_and_the_time_it_was_confirmed() {
        let mut u = unit("loaded", "failed", "failed", 5);
        u.exec_main_code = 1;
        u.exec_main_status = 1;
        let live = Fixed(Ok(EtcdLive {
            unit: u,
            health: Health::Unreachable("etcd.service is failed".into()),
            version: None,
        }));
        let a = eval(&loaded(running()), &live, false);
        let m = a.reason.unwrap().message;
        assert!(
            m.starts_with("etcd.service is failed/failed after 5 restarts; its process exited with status 1 (etcd-setup confirmed it running at "),
            "{m}"
        );
    }

    #[test]
    fn a_failed_run_keeps_its_reason_and_shows_an_absent_unit_as_null() {
        let mut s = State::begin(Phase::WaitingForIso);
        s.fail(
            &Failure::new(ReasonCode::ArchiveMissing, "no etcd on the ISO"),
            SystemTime::now(),
        );
        let live = Fixed(Ok(EtcdLive {
            unit: unit("not-found", "inactive", "dead", 0),
            health: Health::Unreachable("etcd.service is inactive".into()),
            version: None,
        }));
        let a = eval(&loaded(s), &live, false);
        assert_eq!((a.verdict, a.exit_code), (Verdict::Failed, 1));
        assert_eq!(text_line(&a), "failed: archive-missing: no etcd on the ISO");
        assert_eq!(a.etcd, None);
    }

    #[test]
    fn an_unfinished_phase_is_in_progress_only_while_its_run_lives() {
        let s = State::begin(Phase::WaitingForIso);
        let a = eval(&loaded(s.clone()), &healthy(), true);
        assert_eq!((a.verdict, a.exit_code), (Verdict::InProgress, 3));
        assert!(a.run.alive && a.reason.is_none() && a.etcd.is_none());
        let a = eval(&loaded(s), &healthy(), false);
        assert_eq!(a.verdict, Verdict::Failed);
        assert_eq!(a.reason.unwrap().code, "interrupted");
    }

    #[test]
    fn no_state_is_not_started_with_exit_4() {
        let a = eval(&Loaded::default(), &healthy(), true);
        assert_eq!((a.verdict, a.exit_code), (Verdict::NotStarted, 4));
        assert_eq!(a.phase, "not-started");
    }

    #[test]
    fn replies_survive_a_round_trip() {
        let a = eval(&loaded(running()), &healthy(), true);
        let line = Reply::Answer(Box::new(a.clone())).to_line();
        assert!(line.ends_with(b"\n") && !line[..line.len() - 1].contains(&b'\n'));
        assert_eq!(Reply::parse(&line).unwrap(), Reply::Answer(Box::new(a)));
        let e = Reply::Error(ErrorBody::new("busy", "try again"));
        assert_eq!(Reply::parse(&e.to_line()).unwrap(), e);
    }

    /// 2026-06-01T00:00:00Z, the tests' "now".
    const NOW_S: u64 = 1_780_272_000;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW_S)
    }

    /// A state that reached `running` at NOW - 1 h, as member etcd-1, with etcd.service
    /// at `confirmed` restarts then.
    fn confirmed(confirmed: Option<u32>) -> State {
        let at = now() - Duration::from_secs(3600);
        let mut s = State::begin_at(Phase::WaitingForIso, at);
        s.etcd_version = Some("3.5.1".into());
        s.member_name = Some("etcd-1".into());
        s.confirmed_n_restarts = confirmed;
        s.enter(Phase::Running, at);
        s
    }

    /// etcd.service active with `restarts`, last started `ago` before NOW.
    fn active(restarts: u32, ago: Duration, health: Health, version: Option<&str>) -> Fixed {
        let mut u = unit("loaded", "active", "running", restarts);
        u.active_enter_timestamp_us = u64::try_from(
            (now() - ago)
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_micros(),
        )
        .unwrap();
        u.main_pid = 4242;
        Fixed(Ok(EtcdLive {
            unit: u,
            health,
            version: version.map(String::from),
        }))
    }

    fn eval_now(s: State, live: &dyn LiveView) -> Answer {
        evaluate_at(&loaded(s), Path::new(LIVE), live, &|_| false, now())
    }

    #[test]
    fn the_answer_names_the_member_and_the_running_version() {
        let live = active(0, Duration::from_secs(3600), Health::Healthy, Some("3.5.1"));
        let a = eval_now(confirmed(Some(0)), &live);
        assert_eq!(a.verdict, Verdict::Running);
        assert_eq!(a.member_name.as_deref(), Some("etcd-1"));
        let e = a.etcd.as_ref().unwrap();
        assert_eq!(e.version.as_deref(), Some("3.5.1"));
        assert_eq!(e.restarts_since_confirmed, Some(0));
        assert_eq!(
            text_line(&a),
            "running: member etcd-1, etcd 3.5.1 active, healthy (0 restarts)"
        );
        let long = text_long(&a);
        assert!(long.contains("member:   etcd-1\n"), "{long}");
        assert!(
            long.contains("etcd:     installed 3.5.1 (sha256 -), running 3.5.1\n"),
            "{long}"
        );
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["member_name"], "etcd-1");
        assert_eq!(json["etcd"]["version"], "3.5.1");
        assert_eq!(json["etcd"]["restarts_since_confirmed"], 0);
    }

    #[test]
    fn a_running_version_other_than_the_installed_one_is_said_in_long() {
        let live = active(
            0,
            Duration::from_secs(3600),
            Health::Healthy,
            Some("3.4.23"),
        );
        let a = eval_now(confirmed(Some(0)), &live);
        assert_eq!(a.verdict, Verdict::Running);
        assert_eq!(
            text_line(&a),
            "running: member etcd-1, etcd 3.4.23 active, healthy (0 restarts)"
        );
        let long = text_long(&a);
        assert!(
            long.contains("running 3.4.23 (not the installed 3.5.1: "),
            "{long}"
        );
        // Unknown running version: the installed one in the line, `unknown` in --long.
        let live = active(0, Duration::from_secs(3600), Health::Healthy, None);
        let a = eval_now(confirmed(Some(0)), &live);
        assert_eq!(
            text_line(&a),
            "running: member etcd-1, etcd 3.5.1 active, healthy (0 restarts)"
        );
        assert!(text_long(&a).contains("running unknown\n"));
    }

    #[test]
    fn a_poll_between_two_crashes_sees_the_crash_loop() {
        let live = active(3, Duration::from_secs(4), Health::Healthy, Some("3.5.1"));
        let a = eval_now(confirmed(Some(0)), &live);
        assert_eq!((a.verdict, a.exit_code), (Verdict::Failed, 1));
        let r = a.reason.unwrap();
        assert_eq!(r.code, "etcd-unhealthy");
        assert_eq!(
            r.message,
            "etcd.service restarted 3 times since etcd-setup confirmed it running at 2026-05-31T23:00:00Z; last start 4 s ago; see `journalctl -u etcd`"
        );
        assert_eq!(a.etcd.unwrap().restarts_since_confirmed, Some(3));
    }

    #[test]
    fn restarts_count_from_the_confirmed_baseline_and_name_unhealth() {
        // 2 restarts at confirmation, 3 now: 1 since.
        let live = active(
            3,
            Duration::from_secs(300),
            Health::Unhealthy("HTTP 503: no leader".into()),
            None,
        );
        let a = eval_now(confirmed(Some(2)), &live);
        assert_eq!(
            a.reason.unwrap().message,
            "etcd.service restarted 1 time since etcd-setup confirmed it running at 2026-05-31T23:00:00Z; last start 5 min ago; its health check says unhealthy: HTTP 503: no leader; see `journalctl -u etcd`"
        );
        // The same count as at confirmation, just started: no restart since, running.
        let live = active(2, Duration::from_secs(4), Health::Healthy, None);
        let a = eval_now(confirmed(Some(2)), &live);
        assert_eq!(a.verdict, Verdict::Running);
        assert_eq!(a.etcd.unwrap().restarts_since_confirmed, Some(0));
    }

    #[test]
    fn a_stable_etcd_after_an_old_restart_is_running_again() {
        let window = CRASH_WINDOW + Duration::from_secs(1);
        let live = active(3, window, Health::Healthy, None);
        let a = eval_now(confirmed(Some(0)), &live);
        assert_eq!(a.verdict, Verdict::Running);
        assert_eq!(
            text_line(&a),
            "running: member etcd-1, etcd 3.5.1 active, healthy (3 restarts)"
        );
        assert!(text_long(&a).contains("3 restart(s) (3 since etcd-setup confirmed it)"));
        // Just inside the window it is not.
        let live = active(
            3,
            CRASH_WINDOW - Duration::from_secs(1),
            Health::Healthy,
            None,
        );
        assert_eq!(eval_now(confirmed(Some(0)), &live).verdict, Verdict::Failed);
    }

    #[test]
    fn a_manual_restart_resets_the_baseline() {
        // Confirmed at 4 restarts; a manual restart reset NRestarts to 0: no crash.
        let live = active(0, Duration::from_secs(4), Health::Healthy, None);
        let a = eval_now(confirmed(Some(4)), &live);
        assert_eq!(a.verdict, Verdict::Running);
        assert_eq!(a.etcd.unwrap().restarts_since_confirmed, Some(0));
        // ... and 2 automatic restarts after it count from 0.
        let live = active(2, Duration::from_secs(4), Health::Healthy, None);
        let a = eval_now(confirmed(Some(4)), &live);
        assert_eq!(
            a.reason.unwrap().message,
            "etcd.service restarted 2 times since it was last started by hand; last start 4 s ago; see `journalctl -u etcd`"
        );
    }

    #[test]
    fn a_state_without_a_baseline_counts_from_the_last_start_job() {
        let live = active(1, Duration::from_secs(90), Health::Healthy, None);
        let a = eval_now(confirmed(None), &live);
        assert_eq!(
            a.reason.unwrap().message,
            "etcd.service restarted 1 time since its last start job; last start 90 s ago; see `journalctl -u etcd`"
        );
        assert_eq!(a.etcd.unwrap().restarts_since_confirmed, None);
    }

    #[test]
    fn a_stopped_etcd_after_restarts_since_confirmation_says_how_many() {
        let mut u = unit("loaded", "activating", "auto-restart", 7);
        u.exec_main_code = 1;
        u.exec_main_status = 2;
        u.active_enter_timestamp_us = (NOW_S - 30) * 1_000_000;
        let live = Fixed(Ok(EtcdLive {
            unit: u,
            health: Health::Unreachable("etcd.service is activating".into()),
            version: None,
        }));
        let a = eval_now(confirmed(Some(2)), &live);
        assert_eq!(
            a.reason.unwrap().message,
            "etcd.service is activating/auto-restart after 7 restarts (5 since etcd-setup confirmed it running at 2026-05-31T23:00:00Z); its process exited with status 2; last start 30 s ago; see `journalctl -u etcd`"
        );
        // A stopped etcd is failed whenever it last started.
        let mut u = unit("loaded", "failed", "failed", 0);
        u.active_enter_timestamp_us = (NOW_S - 86_400 * 3) * 1_000_000;
        let live = Fixed(Ok(EtcdLive {
            unit: u,
            health: Health::Unreachable("etcd.service is failed".into()),
            version: None,
        }));
        let a = eval_now(confirmed(Some(0)), &live);
        assert_eq!(
            a.reason.unwrap().message,
            "etcd.service is failed/failed after 0 restarts (etcd-setup confirmed it running at 2026-05-31T23:00:00Z); last start 3 d ago; see `journalctl -u etcd`"
        );
    }

    #[test]
    fn ago_reads_like_a_person() {
        let at = |s: u64| (NOW_S - s) * 1_000_000;
        assert_eq!(ago(at(0), now()), "0 s");
        assert_eq!(ago(at(119), now()), "119 s");
        assert_eq!(ago(at(600), now()), "10 min");
        assert_eq!(ago(at(3 * 3600), now()), "3 h");
        assert_eq!(ago(at(5 * 86_400), now()), "5 d");
        assert_eq!(ago((NOW_S + 60) * 1_000_000, now()), "0 s");
    }

    #[test]
    fn an_answer_without_the_new_fields_still_parses() {
        let a = eval_now(
            confirmed(Some(0)),
            &active(0, Duration::from_secs(3600), Health::Healthy, None),
        );
        let mut json = serde_json::to_value(&a).unwrap();
        json.as_object_mut().unwrap().remove("member_name");
        let etcd = json["etcd"].as_object_mut().unwrap();
        etcd.remove("version");
        etcd.remove("restarts_since_confirmed");
        let back: Answer = serde_json::from_value(json).unwrap();
        assert_eq!(back.member_name, None);
        assert_eq!(back.etcd.unwrap().version, None);
    }

    #[test]
    fn the_running_version_is_read_once_per_etcd_process() {
        use std::io::{Read as _, Write as _};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&asked);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { break };
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 1024];
                let _ = c.read(&mut buf);
                let body = format!("etcd_server_version{{server_version=\"3.5.{n}\"}} 1\n");
                let _ = c.write_all(format!("HTTP/1.1 200 OK\r\n\r\n{body}").as_bytes());
            }
        });
        let live = SystemLive::new(port);
        let mut u = unit("loaded", "active", "running", 0);
        u.main_pid = 100;
        u.active_enter_timestamp_us = 1;
        for _ in 0..5 {
            assert_eq!(live.live_version(&u).as_deref(), Some("3.5.0"));
        }
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // A restart: another process, read again.
        u.main_pid = 101;
        u.active_enter_timestamp_us = 2;
        assert_eq!(live.live_version(&u).as_deref(), Some("3.5.1"));
        assert_eq!(live.live_version(&u).as_deref(), Some("3.5.1"));
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        // Nothing listening: no version, and no second try within the retry period.
        let closed = SystemLive::new(port_without_listener());
        assert_eq!(closed.live_version(&u), None);
        assert!(closed
            .version
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .retry_at
            .is_some());
    }

    fn port_without_listener() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }
}
