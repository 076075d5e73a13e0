//! systemd over D-Bus: reload, enable, start and stop units, follow their jobs and state.
//!
//! Talks to `org.freedesktop.systemd1` on the system bus with zbus; no `systemctl`
//! subprocess. The API is blocking; inside, each call is an async zbus call driven by
//! `async_io::block_on`, because every wait here is bounded (a start job, a stop job, a
//! watch on the unit's properties) and zbus' blocking signal iterators cannot time out.
//!
//! How systemd behaves, which the code relies on:
//! - `Reload` replies only once the reload has finished (systemd keeps the call pending
//!   until then, so the caller knows when it is done); no wait for a signal is needed.
//! - systemd sends `JobRemoved` and `PropertiesChanged` only to clients that called
//!   `Subscribe`, which [`Systemd::connect`] does.
//! - A start job of a `Type=notify` service ends when the service sends READY=1 (`done`),
//!   exits or times out (`failed`, with the service's `Result` saying why). `done` does not
//!   mean etcd stays up: watch the unit with [`Systemd::watch_until`] after it.

use crate::reason::{Failure, ReasonCode};
use futures_lite::StreamExt;
use std::collections::HashMap;
use std::future::Future;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zbus::zvariant::{ObjectPath, OwnedObjectPath, OwnedValue};

/// How long any single D-Bus call may take before it counts as systemd not answering.
/// A reload on a slow, emulated VM can take seconds; this bounds a hung systemd.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_blocking = false
)]
trait Manager {
    fn subscribe(&self) -> zbus::Result<()>;
    fn reload(&self) -> zbus::Result<()>;
    fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;
    fn enable_unit_files(
        &self,
        files: &[&str],
        runtime: bool,
        force: bool,
    ) -> zbus::Result<(bool, Vec<(String, String, String)>)>;
    fn disable_unit_files(
        &self,
        files: &[&str],
        runtime: bool,
    ) -> zbus::Result<Vec<(String, String, String)>>;
    fn get_unit_file_state(&self, file: &str) -> zbus::Result<String>;
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

/// A connection to systemd on the system bus, subscribed to its job and unit signals.
pub struct Systemd {
    conn: zbus::Connection,
    manager: ManagerProxy<'static>,
}

/// How a systemd job ended, from the `JobRemoved` signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobResult {
    /// The job succeeded; for a start job of a notify service, READY=1 arrived.
    Done,
    /// The unit failed (it exited, was killed, or its own start timeout ran out).
    Failed,
    /// The job's own timeout (`JobTimeoutSec=`) ran out.
    Timeout,
    /// Another job replaced it, e.g. a stop or a shutdown.
    Canceled,
    /// A unit it requires failed.
    Dependency,
    /// The job did not apply to the unit's state.
    Skipped,
    /// A result this code does not know, as systemd named it.
    Other(String),
    /// The caller's wait ended while the job was still queued or running; not a systemd
    /// result. For a notify service: no READY=1 yet (a new cluster waiting for quorum).
    StillRunning,
}

impl JobResult {
    /// The result named in a `JobRemoved` signal.
    pub fn parse(result: &str) -> JobResult {
        match result {
            "done" => JobResult::Done,
            "failed" => JobResult::Failed,
            "timeout" => JobResult::Timeout,
            "canceled" => JobResult::Canceled,
            "dependency" => JobResult::Dependency,
            "skipped" => JobResult::Skipped,
            other => JobResult::Other(other.to_string()),
        }
    }
}

/// A unit's state, read from its `Unit` and `Service` properties.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnitState {
    /// `loaded`, `not-found`, `bad-setting`, `error`, `masked`.
    pub load_state: String,
    /// `active`, `activating`, `deactivating`, `inactive`, `failed`, `reloading`.
    pub active_state: String,
    /// The unit type's own state, e.g. `running`, `start`, `auto-restart`, `failed`.
    pub sub_state: String,
    /// How often systemd restarted the service automatically (Restart=) since it was
    /// last started by a job.
    pub n_restarts: u32,
    /// When the unit last became active, in µs since the epoch; 0 if never.
    pub active_enter_timestamp_us: u64,
    /// The main process' exit status, or the signal that killed it.
    pub exec_main_status: i32,
    /// How the main process ended, as a `siginfo` code: 1 exited, 2 killed, 3 dumped
    /// core; 0 if it has not ended.
    pub exec_main_code: i32,
    /// The service's result: `success`, `exit-code`, `signal`, `core-dump`, `timeout`,
    /// `start-limit-hit`, `resources`, `protocol`, `watchdog`, `oom-kill` ...
    pub result: String,
    /// The main process' PID; 0 if none runs.
    pub main_pid: u32,
}

/// What [`Systemd::watch_until`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watched {
    /// The predicate held for this state before the deadline.
    Matched(UnitState),
    /// The deadline came first; the state read at the deadline.
    DeadlineReached(UnitState),
}

impl UnitState {
    /// Reads the state from the property maps of the unit's `org.freedesktop.systemd1.Unit`
    /// and (for a service) `org.freedesktop.systemd1.Service` interfaces. Missing
    /// properties keep their zero value.
    pub fn from_properties(
        unit: &HashMap<String, OwnedValue>,
        service: &HashMap<String, OwnedValue>,
    ) -> UnitState {
        fn get<T: TryFrom<OwnedValue>>(map: &HashMap<String, OwnedValue>, key: &str) -> Option<T> {
            map.get(key)
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| T::try_from(v).ok())
        }
        UnitState {
            load_state: get(unit, "LoadState").unwrap_or_default(),
            active_state: get(unit, "ActiveState").unwrap_or_default(),
            sub_state: get(unit, "SubState").unwrap_or_default(),
            active_enter_timestamp_us: get(unit, "ActiveEnterTimestamp").unwrap_or_default(),
            n_restarts: get(service, "NRestarts").unwrap_or_default(),
            exec_main_status: get(service, "ExecMainStatus").unwrap_or_default(),
            exec_main_code: get(service, "ExecMainCode").unwrap_or_default(),
            result: get(service, "Result").unwrap_or_default(),
            main_pid: get(service, "MainPID").unwrap_or_default(),
        }
    }

    /// `ActiveState` is `active`.
    pub fn is_active(&self) -> bool {
        self.active_state == "active"
    }

    /// How the main process last ended, e.g. `exited with status 1`, `was killed by
    /// signal SIGKILL`; empty if it has not ended.
    pub fn exit(&self) -> String {
        let signal = || {
            nix::sys::signal::Signal::try_from(self.exec_main_status)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {}", self.exec_main_status))
        };
        match self.exec_main_code {
            1 => format!("exited with status {}", self.exec_main_status),
            2 => format!("was killed by signal {}", signal()),
            3 => format!("dumped core on signal {}", signal()),
            _ => String::new(),
        }
    }

    /// What the service's `Result` means, as a clause after the unit's name.
    pub fn result_sentence(&self) -> String {
        let exit = self.exit();
        let or_exit = |fallback: &str| {
            if exit.is_empty() {
                fallback.to_string()
            } else {
                exit.clone()
            }
        };
        match self.result.as_str() {
            "exit-code" => or_exit("exited with a failure status"),
            "signal" => or_exit("was killed by a signal"),
            "core-dump" => or_exit("crashed and dumped core"),
            "timeout" => "did not report ready (READY=1) within its start timeout (TimeoutStartSec=), so systemd stopped it".into(),
            "start-limit-hit" => "failed and was restarted too often, so systemd gave up (StartLimitBurst=); `systemctl reset-failed` clears it".into(),
            "resources" => "could not be started: systemd failed to prepare its process (a missing binary, user, EnvironmentFile or directory)".into(),
            "protocol" => "broke the service protocol (it exited or forked without sending READY=1)".into(),
            "watchdog" => "stopped answering its watchdog".into(),
            "oom-kill" => "was killed by the kernel's out-of-memory killer".into(),
            "success" | "" => or_exit("stopped"),
            other => {
                let exit = or_exit("stopped");
                format!("{exit} (result {other})")
            }
        }
    }

    /// One line for logs and status, e.g. `failed/failed, exited with status 1, 5 restarts`.
    pub fn summary(&self) -> String {
        let mut s = format!("{}/{}", self.active_state, self.sub_state);
        if self.load_state != "loaded" && !self.load_state.is_empty() {
            s = format!("{s} ({})", self.load_state);
        }
        if !self.is_active() && !self.exit().is_empty() {
            s.push_str(&format!(", {}", self.exit()));
        }
        s.push_str(&format!(
            ", {} restart{}",
            self.n_restarts,
            if self.n_restarts == 1 { "" } else { "s" }
        ));
        s
    }
}

/// A log line fit for one sentence: etcd logs JSON (zap) with a stack trace, of which
/// `msg: error` is what an operator needs; other lines are kept as they are.
pub fn readable(line: &str) -> String {
    let line = line.trim();
    let field = |key: &str| {
        let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
        let rest = &line[start..];
        let mut end = 0;
        let mut escaped = false;
        for (i, c) in rest.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = i;
                    break;
                }
                _ => escaped = false,
            }
            end = i + c.len_utf8();
        }
        Some(rest[..end].to_string())
    };
    match (line.starts_with('{'), field("msg")) {
        (true, Some(msg)) => match field("error") {
            Some(error) => format!("{msg}: {error}"),
            None => msg,
        },
        _ => line.to_string(),
    }
}

/// The failure for a start job that did not end in `done`, or `None` for `done` and
/// [`JobResult::StillRunning`] (the caller decides what waiting longer means).
///
/// `state` is the unit's state read after the job ended and `journal` the unit's last log
/// lines ([`journal_tail`]): the sentence names the exit status and the last line, the
/// failure's detail carries all lines.
pub fn start_failure(
    unit: &str,
    result: &JobResult,
    state: &UnitState,
    journal: &[String],
) -> Option<Failure> {
    let (code, sentence) = match result {
        JobResult::Done | JobResult::StillRunning => return None,
        JobResult::Failed => (
            ReasonCode::EtcdStartFailed,
            format!("{unit} failed to start: it {}", state.result_sentence()),
        ),
        JobResult::Timeout => (
            ReasonCode::EtcdStartFailed,
            format!("the start job of {unit} timed out (JobTimeoutSec=) before it was ready"),
        ),
        JobResult::Dependency => (
            ReasonCode::SystemdFailed,
            format!("systemd did not start {unit}: a unit it requires failed; see `systemctl list-units --failed`"),
        ),
        JobResult::Canceled => (
            ReasonCode::SystemdFailed,
            format!("the start of {unit} was canceled by another job (a stop, or the system shutting down)"),
        ),
        JobResult::Skipped => (
            ReasonCode::SystemdFailed,
            format!("systemd skipped the start of {unit}"),
        ),
        JobResult::Other(other) => (
            ReasonCode::SystemdFailed,
            format!("the start job of {unit} ended with result {other:?}"),
        ),
    };
    let sentence = match journal.iter().rev().find(|l| !l.trim().is_empty()) {
        Some(last) => format!("{sentence}; its last log line: {}", readable(last)),
        None => format!("{sentence}; see `journalctl -u {unit}`"),
    };
    let failure = Failure::new(code, sentence);
    Some(if journal.is_empty() {
        failure.with_source(anyhow::anyhow!("unit state: {}", state.summary()))
    } else {
        failure.with_source(anyhow::anyhow!(
            "unit state: {}\nlast journal lines of {unit}:\n{}",
            state.summary(),
            journal.join("\n")
        ))
    })
}

impl Systemd {
    /// Connects to systemd on the system bus and subscribes to its signals.
    pub fn connect() -> Result<Systemd, Failure> {
        block_on(async {
            let builder = zbus::connection::Builder::system()?;
            Self::subscribe(builder).await
        })
        .map_err(|e| {
            Failure::new(
                ReasonCode::SystemdFailed,
                format!("cannot reach systemd on the system bus: {e}"),
            )
            .with_source(e)
        })
    }

    /// Connects to a systemd (or a stand-in) on the bus at `address`, e.g. a private
    /// `dbus-daemon` in tests.
    pub fn connect_address(address: &str) -> Result<Systemd, Failure> {
        block_on(async {
            let builder = zbus::connection::Builder::address(address)?;
            Self::subscribe(builder).await
        })
        .map_err(|e| {
            Failure::new(
                ReasonCode::SystemdFailed,
                format!("cannot reach systemd on the bus {address}: {e}"),
            )
            .with_source(e)
        })
    }

    async fn subscribe(builder: zbus::connection::Builder<'_>) -> zbus::Result<Systemd> {
        let conn = builder.method_timeout(CALL_TIMEOUT).build().await?;
        let manager = ManagerProxy::new(&conn).await?;
        manager.subscribe().await?;
        Ok(Systemd { conn, manager })
    }

    /// Reloads systemd's unit files (`systemctl daemon-reload`); returns once the reload
    /// has finished.
    pub fn reload(&self) -> Result<(), Failure> {
        block_on(self.manager.reload()).map_err(|e| refused("reload its unit files", "", e))
    }

    /// Enables `unit` (its `[Install]` symlinks, replacing conflicting ones), then reloads.
    pub fn enable(&self, unit: &str) -> Result<(), Failure> {
        let (has_install, _changes) =
            block_on(self.manager.enable_unit_files(&[unit], false, true))
                .map_err(|e| refused("enable", unit, e))?;
        if !has_install {
            return Err(Failure::new(
                ReasonCode::SystemdFailed,
                format!("{unit} has no [Install] section, so enabling it does nothing"),
            ));
        }
        self.reload()
    }

    /// Disables `unit`, then reloads; a unit that is not enabled, or has no unit file, is
    /// fine.
    pub fn disable(&self, unit: &str) -> Result<(), Failure> {
        match block_on(self.manager.disable_unit_files(&[unit], false)) {
            Ok(changes) if changes.is_empty() => Ok(()),
            Ok(_) => self.reload(),
            Err(e) if is_no_such_unit(&e) => Ok(()),
            Err(e) => Err(refused("disable", unit, e)),
        }
    }

    /// Clears `unit`'s failed state and start-limit count, so a new start is not refused
    /// for earlier failures; a unit systemd has not loaded is fine.
    pub fn reset_failed(&self, unit: &str) -> Result<(), Failure> {
        match block_on(self.manager.reset_failed_unit(unit)) {
            Ok(()) => Ok(()),
            Err(e) if is_no_such_unit(&e) => Ok(()),
            Err(e) => Err(refused("reset the failed state of", unit, e)),
        }
    }

    /// Stops `unit` and waits up to `timeout` for the stop job to end; a unit that is not
    /// loaded is already stopped.
    pub fn stop(&self, unit: &str, timeout: Duration) -> Result<(), Failure> {
        let deadline = Instant::now() + timeout;
        let result = block_on(async {
            let mut removed = self.manager.receive_job_removed().await?;
            let job = match self.manager.stop_unit(unit, "replace").await {
                Ok(job) => job,
                Err(e) if is_no_such_unit(&e) => return Ok(JobResult::Done),
                Err(e) => return Err(e),
            };
            wait_job(&mut removed, &job, deadline).await
        })
        .map_err(|e| refused("stop", unit, e))?;
        match result {
            JobResult::Done => Ok(()),
            JobResult::StillRunning => Err(Failure::new(
                ReasonCode::SystemdFailed,
                format!("{unit} did not stop within {timeout:?}"),
            )),
            other => Err(Failure::new(
                ReasonCode::SystemdFailed,
                format!("stopping {unit} ended with result {other:?}"),
            )),
        }
    }

    /// Starts `unit` and waits up to `timeout` for the start job to end. Returns the job's
    /// result, or [`JobResult::StillRunning`] if it had not ended by then; `Err` only when
    /// systemd refused the request or the bus failed. See [`start_failure`] for the reason.
    pub fn start(&self, unit: &str, timeout: Duration) -> Result<JobResult, Failure> {
        let deadline = Instant::now() + timeout;
        block_on(async {
            // Listen before asking: a job can end before StartUnit's reply arrives.
            let mut removed = self.manager.receive_job_removed().await?;
            let job = self.manager.start_unit(unit, "replace").await?;
            wait_job(&mut removed, &job, deadline).await
        })
        .map_err(|e| refused("start", unit, e))
    }

    /// `unit`'s current state; loads the unit if systemd has not yet (a unit without a file
    /// reads `load_state` `not-found`).
    pub fn unit_state(&self, unit: &str) -> Result<UnitState, Failure> {
        block_on(async {
            let path = self.manager.load_unit(unit).await?;
            self.read_state(unit, &path).await
        })
        .map_err(|e| refused("report the state of", unit, e))
    }

    /// Whether `unit` is enabled: `enabled`, `disabled`, `static`, `masked` ... as
    /// `systemctl is-enabled` says, or `not-found` when it has no unit file.
    pub fn is_enabled(&self, unit: &str) -> Result<String, Failure> {
        match block_on(self.manager.get_unit_file_state(unit)) {
            Ok(state) => Ok(state),
            Err(e) if is_no_such_unit(&e) => Ok("not-found".to_string()),
            Err(e) => Err(refused("read the enablement state of", unit, e)),
        }
    }

    /// Follows `unit` until `pred` holds for its state or `deadline` passes. Event driven:
    /// the state is read at the start, again at each `PropertiesChanged` signal of the
    /// unit, and once more at the deadline (so a missed signal costs latency, never a
    /// wrong answer).
    pub fn watch_until(
        &self,
        unit: &str,
        deadline: Instant,
        pred: impl Fn(&UnitState) -> bool,
    ) -> Result<Watched, Failure> {
        block_on(async {
            let path = self.manager.load_unit(unit).await?;
            let props = zbus::fdo::PropertiesProxy::builder(&self.conn)
                .destination("org.freedesktop.systemd1")?
                .path(path.clone())?
                .build()
                .await?;
            let mut changes = props.receive_properties_changed().await?;
            loop {
                let state = self.read_state(unit, &path).await?;
                if pred(&state) {
                    return Ok(Watched::Matched(state));
                }
                if Instant::now() >= deadline {
                    return Ok(Watched::DeadlineReached(state));
                }
                // A signal or the deadline; either way read the state again.
                if matches!(before(deadline, changes.next()).await, Some(None)) {
                    return Err(zbus::Error::Failure(
                        "the bus connection closed".to_string(),
                    ));
                }
            }
        })
        .map_err(|e| refused("report the state of", unit, e))
    }

    async fn read_state(&self, unit: &str, path: &ObjectPath<'_>) -> zbus::Result<UnitState> {
        let props = zbus::fdo::PropertiesProxy::builder(&self.conn)
            .destination("org.freedesktop.systemd1")?
            .path(path.to_owned())?
            .build()
            .await?;
        let unit_iface = "org.freedesktop.systemd1.Unit".try_into()?;
        let unit_props = props.get_all(unit_iface).await?;
        let service_props = if unit.ends_with(".service") {
            let service_iface = "org.freedesktop.systemd1.Service".try_into()?;
            props.get_all(service_iface).await?
        } else {
            HashMap::new()
        };
        Ok(UnitState::from_properties(&unit_props, &service_props))
    }
}

/// Waits for `JobRemoved` of `job` until `deadline`.
async fn wait_job(
    removed: &mut JobRemovedStream,
    job: &ObjectPath<'_>,
    deadline: Instant,
) -> zbus::Result<JobResult> {
    loop {
        match before(deadline, removed.next()).await {
            None => return Ok(JobResult::StillRunning),
            Some(None) => {
                return Err(zbus::Error::Failure(
                    "the bus connection closed while waiting for the job".to_string(),
                ))
            }
            Some(Some(signal)) => {
                let args = signal.args()?;
                if args.job.as_str() == job.as_str() {
                    return Ok(JobResult::parse(args.result));
                }
            }
        }
    }
}

/// `fut`'s output, or `None` if `deadline` comes first.
async fn before<T>(deadline: Instant, fut: impl Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(fut.await) }, async {
        async_io::Timer::at(deadline).await;
        None
    })
    .await
}

fn block_on<T>(fut: impl Future<Output = T>) -> T {
    async_io::block_on(fut)
}

/// The D-Bus error name of a method error, e.g. `org.freedesktop.systemd1.NoSuchUnit`.
fn error_name(e: &zbus::Error) -> Option<String> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str().to_string()),
        zbus::Error::FDO(fdo) => Some(zbus::DBusError::name(fdo.as_ref()).as_str().to_string()),
        _ => None,
    }
}

/// systemd's answer for a unit (file) it does not know.
fn is_no_such_unit(e: &zbus::Error) -> bool {
    matches!(
        error_name(e).as_deref(),
        Some("org.freedesktop.systemd1.NoSuchUnit" | "org.freedesktop.DBus.Error.FileNotFound")
    )
}

/// `systemd-failed`: systemd refused to `action` `unit`, or could not be asked.
fn refused(action: &str, unit: &str, e: zbus::Error) -> Failure {
    let what = if unit.is_empty() {
        action.to_string()
    } else {
        format!("{action} {unit}")
    };
    let detail = match &e {
        zbus::Error::MethodError(name, Some(text), _) => format!("{text} ({})", name.as_str()),
        other => other.to_string(),
    };
    let hint = match error_name(&e).as_deref() {
        Some(
            "org.freedesktop.DBus.Error.AccessDenied"
            | "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
        ) => "; etcd-setup must run as root",
        Some("org.freedesktop.DBus.Error.NoReply") => "; systemd did not answer in time",
        _ => "",
    };
    Failure::new(
        ReasonCode::SystemdFailed,
        format!("systemd could not {what}: {detail}{hint}"),
    )
    .with_source(e)
}

/// The last `lines` lines etcd (or `unit`) logged in this boot, for a failure's detail;
/// empty if the journal cannot be read.
///
/// Runs `journalctl`, the one subprocess of this module: the journal's file format is
/// not a stable interface to parse natively and no small crate reads it. Bounded: lines
/// longer than 500 bytes are cut, and journalctl is killed after 5 seconds.
pub fn journal_tail(unit: &str, lines: usize) -> Vec<String> {
    let child = Command::new("journalctl")
        // The unit's processes' own output (etcd's log), not systemd's messages about the
        // unit, which the unit state already sums up.
        .arg("--boot")
        .arg(format!("_SYSTEMD_UNIT={unit}"))
        .arg("--lines")
        .arg(lines.to_string())
        .args(["--output", "cat", "--no-pager", "--quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return Vec::new();
    };
    let Some(mut stdout) = child.stdout.take() else {
        return Vec::new();
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.by_ref().take(1 << 20).read_to_end(&mut out);
        let _ = tx.send(out);
    });
    let out = rx.recv_timeout(Duration::from_secs(5));
    if out.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    out.map(|bytes| tail_lines(&bytes, lines))
        .unwrap_or_default()
}

/// The last `n` non-empty lines of `bytes`, each cut to 500 bytes (on a char boundary).
fn tail_lines(bytes: &[u8], n: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut end = l.len().min(500);
            while !l.is_char_boundary(end) {
                end -= 1;
            }
            l[..end].to_string()
        })
        .collect();
    let skip = lines.len().saturating_sub(n);
    lines.drain(..skip);
    lines
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_etcd_json_log_lines_as_msg_and_error() {
        let line = r#"{"level":"fatal","ts":"2026-11-30T03:11:55.557Z","caller":"etcdmain/etcd.go:203","msg":"discovery failed","error":"listen tcp 10.0.2.99:2380: bind: cannot assign requested address","stacktrace":"go.etcd.io/etcd/server/v3/etcdmain.startEtcdOrProxyV2\n\t/tmp/etcd"#;
        assert_eq!(
            readable(line),
            "discovery failed: listen tcp 10.0.2.99:2380: bind: cannot assign requested address"
        );
        assert_eq!(
            readable(r#"{"level":"info","msg":"say \"hi\""}"#),
            r#"say \"hi\""#
        );
        assert_eq!(readable("  plain text line "), "plain text line");
    }

    use super::*;
    use zbus::zvariant::Value;

    fn failed_exit_1() -> UnitState {
        UnitState {
            load_state: "loaded".into(),
            active_state: "failed".into(),
            sub_state: "failed".into(),
            n_restarts: 5,
            exec_main_code: 1,
            exec_main_status: 1,
            result: "exit-code".into(),
            ..UnitState::default()
        }
    }

    fn owned(v: Value<'static>) -> OwnedValue {
        v.try_to_owned().unwrap()
    }

    #[test]
    fn unit_state_reads_the_unit_and_service_properties() {
        let unit: HashMap<String, OwnedValue> = [
            ("LoadState", owned("loaded".into())),
            ("ActiveState", owned("active".into())),
            ("SubState", owned("running".into())),
            (
                "ActiveEnterTimestamp",
                owned(1_700_000_000_123_456u64.into()),
            ),
            ("Id", owned("etcd.service".into())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let service: HashMap<String, OwnedValue> = [
            ("NRestarts", owned(3u32.into())),
            ("ExecMainStatus", owned(0i32.into())),
            ("ExecMainCode", owned(0i32.into())),
            ("Result", owned("success".into())),
            ("MainPID", owned(4242u32.into())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let s = UnitState::from_properties(&unit, &service);
        assert_eq!(
            s,
            UnitState {
                load_state: "loaded".into(),
                active_state: "active".into(),
                sub_state: "running".into(),
                n_restarts: 3,
                active_enter_timestamp_us: 1_700_000_000_123_456,
                exec_main_status: 0,
                exec_main_code: 0,
                result: "success".into(),
                main_pid: 4242,
            }
        );
        assert!(s.is_active());
        assert_eq!(s.summary(), "active/running, 3 restarts");
    }

    #[test]
    fn unit_state_of_an_unknown_unit_is_zero_and_wrong_types_are_ignored() {
        let unit: HashMap<String, OwnedValue> = [
            ("LoadState".to_string(), owned("not-found".into())),
            ("ActiveState".to_string(), owned(7u32.into())),
        ]
        .into_iter()
        .collect();
        let s = UnitState::from_properties(&unit, &HashMap::new());
        assert_eq!(s.load_state, "not-found");
        assert_eq!(s.active_state, "");
        assert_eq!(s.n_restarts, 0);
        assert!(!s.is_active());
    }

    #[test]
    fn job_results_parse_from_systemd_names() {
        for (name, want) in [
            ("done", JobResult::Done),
            ("failed", JobResult::Failed),
            ("timeout", JobResult::Timeout),
            ("canceled", JobResult::Canceled),
            ("dependency", JobResult::Dependency),
            ("skipped", JobResult::Skipped),
            ("invalid", JobResult::Other("invalid".into())),
        ] {
            assert_eq!(JobResult::parse(name), want);
        }
    }

    #[test]
    fn exit_names_the_status_or_the_signal() {
        let mut s = failed_exit_1();
        assert_eq!(s.exit(), "exited with status 1");
        s.exec_main_code = 2;
        s.exec_main_status = 9;
        assert_eq!(s.exit(), "was killed by signal SIGKILL");
        s.exec_main_code = 3;
        s.exec_main_status = 11;
        assert_eq!(s.exit(), "dumped core on signal SIGSEGV");
        s.exec_main_status = 99;
        assert_eq!(s.exit(), "dumped core on signal signal 99");
        s.exec_main_code = 0;
        assert_eq!(s.exit(), "");
    }

    #[test]
    fn failed_start_names_exit_status_and_last_log_line() {
        let journal = vec![
            "{\"level\":\"info\",\"msg\":\"configuring peer listeners\"}".to_string(),
            "{\"level\":\"fatal\",\"msg\":\"listen tcp 10.9.9.9:2380: bind: cannot assign requested address\"}".to_string(),
            "".to_string(),
        ];
        let f = start_failure(
            "etcd.service",
            &JobResult::Failed,
            &failed_exit_1(),
            &journal,
        )
        .unwrap();
        assert_eq!(f.code, ReasonCode::EtcdStartFailed);
        assert_eq!(
            f.headline(),
            "etcd-start-failed: etcd.service failed to start: it exited with status 1; its last log line: listen tcp 10.9.9.9:2380: bind: cannot assign requested address"
        );
        let detail = format!("{:#}", f.source.unwrap());
        assert!(
            detail.contains("unit state: failed/failed, exited with status 1, 5 restarts"),
            "{detail}"
        );
        assert!(detail.contains("configuring peer listeners"), "{detail}");
    }

    #[test]
    fn failed_start_explains_each_service_result() {
        for (result, code, status, want) in [
            (
                "timeout",
                2,
                15,
                "did not report ready (READY=1) within its start timeout",
            ),
            (
                "start-limit-hit",
                1,
                1,
                "restarted too often, so systemd gave up",
            ),
            (
                "resources",
                0,
                0,
                "a missing binary, user, EnvironmentFile or directory",
            ),
            ("signal", 2, 6, "was killed by signal SIGABRT"),
            ("core-dump", 3, 11, "dumped core on signal SIGSEGV"),
            ("oom-kill", 2, 9, "out-of-memory killer"),
            ("protocol", 1, 0, "without sending READY=1"),
            ("exit-code", 0, 0, "exited with a failure status"),
            (
                "frobnicated",
                1,
                2,
                "exited with status 2 (result frobnicated)",
            ),
        ] {
            let state = UnitState {
                result: result.into(),
                exec_main_code: code,
                exec_main_status: status,
                ..failed_exit_1()
            };
            let f = start_failure("etcd.service", &JobResult::Failed, &state, &[]).unwrap();
            assert!(f.message.contains(want), "{result}: {}", f.message);
            assert!(
                f.message.ends_with("; see `journalctl -u etcd.service`"),
                "{}",
                f.message
            );
        }
    }

    #[test]
    fn other_job_results_blame_systemd_and_done_or_pending_are_not_failures() {
        let s = failed_exit_1();
        for (r, code, want) in [
            (
                JobResult::Dependency,
                ReasonCode::SystemdFailed,
                "a unit it requires failed",
            ),
            (
                JobResult::Canceled,
                ReasonCode::SystemdFailed,
                "canceled by another job",
            ),
            (JobResult::Skipped, ReasonCode::SystemdFailed, "skipped"),
            (JobResult::Timeout, ReasonCode::EtcdStartFailed, "timed out"),
            (
                JobResult::Other("once".into()),
                ReasonCode::SystemdFailed,
                "result \"once\"",
            ),
        ] {
            let f = start_failure("etcd.service", &r, &s, &[]).unwrap();
            assert_eq!(f.code, code, "{r:?}");
            assert!(f.message.contains(want), "{r:?}: {}", f.message);
        }
        assert!(start_failure("etcd.service", &JobResult::Done, &s, &[]).is_none());
        assert!(start_failure("etcd.service", &JobResult::StillRunning, &s, &[]).is_none());
    }

    #[test]
    fn refusals_name_the_action_the_unit_and_systemds_words() {
        let msg = zbus::message::Message::method_call("/", "Reload")
            .unwrap()
            .build(&())
            .unwrap();
        let e = zbus::Error::MethodError(
            "org.freedesktop.DBus.Error.AccessDenied"
                .try_into()
                .unwrap(),
            Some("Access denied".into()),
            msg,
        );
        let f = refused("start", "etcd.service", e);
        assert_eq!(
            f.headline(),
            "systemd-failed: systemd could not start etcd.service: Access denied (org.freedesktop.DBus.Error.AccessDenied); etcd-setup must run as root"
        );
        let f = refused("reload its unit files", "", zbus::Error::InvalidReply);
        assert_eq!(
            f.message,
            "systemd could not reload its unit files: Invalid D-Bus method reply"
        );
    }

    #[test]
    fn tail_keeps_the_last_non_empty_lines_cut_on_char_boundaries() {
        let long = "é".repeat(400);
        let text = format!("one\n\ntwo\nthree\n{long}\n");
        let got = tail_lines(text.as_bytes(), 3);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], "two");
        assert_eq!(got[1], "three");
        assert_eq!(got[2], "é".repeat(250));
        assert!(tail_lines(b"", 5).is_empty());
    }

    #[test]
    fn journal_tail_of_an_unknown_unit_is_empty_not_an_error() {
        // Without a journal (this build host) or with one, a unit that never ran has no
        // lines; the call must not fail or hang either way.
        assert!(journal_tail("etcd-setup-test-no-such-unit.service", 5).is_empty());
    }
}
