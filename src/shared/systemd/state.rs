//! What systemd says about a unit and its jobs, and the sentences a failed start becomes.

use crate::reason::{Failure, ReasonCode};
use std::collections::HashMap;
use zbus::zvariant::OwnedValue;

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
