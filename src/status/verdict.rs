//! The verdict: the answer built from the state files and the live view, a pure function.

use super::live::{health_text, EtcdLive, LiveView};
use super::protocol::{Answer, EtcdView, RunView, Verdict};
use super::{CRASH_WINDOW, SCHEMA_VERSION};
use crate::cluster::health::Health;
use crate::reason::ReasonCode;
use crate::shared::report::{Loaded, Phase, Reason, State};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
/// - A state file that exists but cannot be read ([`Loaded::unreadable`]): verdict
///   `unreadable`, reason `state-unreadable` naming the file; no phase is made up.
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
    if let (None, Some(bad)) = (&loaded.state, &loaded.unreadable) {
        let reason = Reason {
            code: ReasonCode::StateUnreadable,
            message: format!(
                "the state file {} {}; what the run did is unknown: move it aside and run `systemctl start etcd-setup` again",
                bad.file.display(),
                bad.why
            ),
        };
        let mut a = without_state(loaded, Verdict::Unreadable, None, None);
        a.reason = Some(reason);
        a.state_file = Some(bad.file.display().to_string());
        return a;
    }
    let Some(state) = &loaded.state else {
        return without_state(
            loaded,
            Verdict::NotStarted,
            Some(Phase::NotStarted),
            Some("etcd-setup run has not started on this node".into()),
        );
    };
    let this_boot = loaded.from.as_deref() == Some(live_copy);
    let run_alive = this_boot && state.pid.is_some_and(alive);
    let mut reason = state.reason.clone();
    let wants_etcd = matches!(
        state.phase,
        Phase::Starting | Phase::Running | Phase::Failed | Phase::Left
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
    let (space, alarms, role) = match &etcd {
        Some(Ok(e)) if e.unit.is_active() => {
            let space = live.space();
            let alarms = super::data::alarms_in(&e.health, space.as_ref());
            (space, alarms, live.role(&e.unit))
        }
        _ => (None, Vec::new(), None),
    };
    let verdict = match state.phase {
        Phase::NotStarted => Verdict::NotStarted,
        Phase::Failed => Verdict::Failed,
        Phase::Left => Verdict::Left,
        Phase::Running => match &etcd {
            Some(Ok(e)) => match etcd_trouble(e, state, now) {
                None => Verdict::Running,
                Some(message) => {
                    // An alarm is the cause an operator acts on, with its own code.
                    reason = Some(
                        super::data::alarm_reason(&alarms, space.as_ref()).unwrap_or(Reason {
                            code: ReasonCode::EtcdUnhealthy,
                            message,
                        }),
                    );
                    Verdict::Failed
                }
            },
            Some(Err(why)) => {
                reason = Some(Reason {
                    code: ReasonCode::EtcdUnhealthy,
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
            reason = Some(Reason {
                code: ReasonCode::Interrupted,
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
        phase: Some(state.phase),
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
        notes: loaded.notes.clone(),
        space,
        alarms,
        snapshot: None,
        warnings: Vec::new(),
        advisories: state.advisories.clone(),
        // The advisories run recorded are those of the installed release.
        advisory_details: if state.advisories.is_empty() {
            Vec::new()
        } else {
            state
                .etcd_version
                .as_deref()
                .map_or_else(Vec::new, crate::shared::advisory::records)
        },
        upgrade: state.upgrade.clone(),
        operation: None,
        certificates: Vec::new(),
        role,
        backup: None,
    }
}

/// The answer when there is no state to read: nothing known but the verdict.
fn without_state(
    loaded: &Loaded,
    verdict: Verdict,
    phase: Option<Phase>,
    progress: Option<String>,
) -> Answer {
    Answer {
        schema_version: SCHEMA_VERSION,
        phase,
        progress,
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
        verdict,
        exit_code: verdict.exit_code(),
        updated_at: None,
        state_file: None,
        notes: loaded.notes.clone(),
        space: None,
        alarms: Vec::new(),
        snapshot: None,
        warnings: Vec::new(),
        advisories: Vec::new(),
        advisory_details: Vec::new(),
        upgrade: None,
        operation: None,
        certificates: Vec::new(),
        role: None,
        backup: None,
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
pub(super) fn ago(us: u64, now: SystemTime) -> String {
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
