//! The frame every day-2 command runs in: `leave`, `upgrade`, `restore`, `snapshot`,
//! `maintain`, `rotate-ca`, `backups`. [`run`] does, in this order: signals taken ([`crate::shared::signals`],
//! before any thread exists); the configuration (`--config`) and this member
//! ([`Member`], handed out as `f.member`: no command derives it again); the node lock when the command takes it; the operation record
//! ([`OperationGuard`], pid and start time) when the command keeps one; then the command's
//! body; then its output in one shape (stdout lines through [`printable::line`], a failure
//! as [`printable::failure`] on stderr, and with `--format json` also as one JSON object
//! on stdout, [`failure_json`]) and the exit code from [`exit::of`].
//!
//! **The node lock** (`run.lock` in the run dir, [`RunLock`], the one `run` holds) is
//! taken by every command that stops or starts etcd, changes the membership or swaps the
//! data: `leave`, `upgrade`, `restore`, `rotate-ca`. With it none of them runs beside
//! `run` or beside each other (two restores, a `run` starting etcd between a restore's
//! steps). `snapshot` and `maintain` do not take it: they act on the running etcd through
//! its API only (a snapshot reads, maintain defragments and disarms under etcd's own
//! cluster lock), they run from timers that must not wait behind a `run` waiting for its
//! ISO, and a restore or upgrade stopping etcd under them makes them fail cleanly (etcd
//! does not answer). `backups` reads the bucket and changes nothing on the node.
//!
//! **Signals**: SIGTERM, SIGINT or SIGHUP outside a [`critical`] section stops the command
//! at once with `interrupted` (the operation record and the registered one-shot files are
//! removed, the command's own `on_interrupt` runs, e.g. the upgrade record says so);
//! inside one (etcd stopped and not yet started again, the data dir being swapped, the
//! member removed but not yet recorded) the signal is held and the command stops at its
//! next [`checkpoint`] once the section is over. Waits outside those sections (the node
//! lock, the ISO, the cluster lock, a snapshot) are safe to leave at any moment: the
//! kernel drops the locks, etcdctl children die with us (PDEATHSIG).
//!
//! Every way out removes the operation record: a return drops its guard, a signal removes
//! it in the signal thread, and a `kill -9` leaves a record whose pid and start time name
//! a dead process, which status ignores.

use crate::cli::StateDirs;
use crate::cluster::etcd::{ErrorKind, EtcdError};
use crate::exit;
use crate::member::Member;
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::{self, Settings};
use crate::shared::lock::{RunLock, LOCK_FILE};
use crate::shared::paths::Paths;
use crate::shared::printable;
use crate::shared::report::{Command, OperationGuard};
use crate::shared::signals::{self, Cleanup};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// What a command asks of its frame.
pub struct Spec<'a> {
    /// The command.
    pub command: Command,
    /// `--config`.
    pub config: &'a Path,
    /// The state folders.
    pub dirs: &'a StateDirs,
    /// The node lock and how long to wait for it, when the command takes it.
    pub lock: Option<Duration>,
    /// The operation record's first step, when the command keeps one.
    pub record: Option<&'a str>,
    /// Whether the command speaks JSON (`--format json`): a failure is then also one JSON
    /// object on stdout, as every outcome of `status --format json` is.
    pub json: bool,
}

/// A command's frame, handed to its body.
pub struct Frame {
    /// The command.
    pub command: Command,
    /// The validated configuration.
    pub settings: Settings,
    /// The state folders and system paths.
    pub paths: Paths,
    /// This member, derived once.
    pub member: Member,
    op: Mutex<Option<(OperationGuard, Cleanup)>>,
    _lock: Option<RunLock>,
}

/// The signal thread's view of the command.
struct Signals {
    command: Option<Command>,
    json: bool,
    step: String,
    critical: u32,
    pending: Option<&'static str>,
    on_interrupt: Vec<Box<dyn Fn() + Send>>,
}

static SIGNALS: Mutex<Signals> = Mutex::new(Signals {
    command: None,
    json: false,
    step: String::new(),
    critical: 0,
    pending: None,
    on_interrupt: Vec::new(),
});

fn signals_state() -> std::sync::MutexGuard<'static, Signals> {
    SIGNALS.lock().unwrap_or_else(|p| p.into_inner())
}

fn interrupted_failure(command: Command, signal: &str, step: &str) -> Failure {
    Failure::new(
        ReasonCode::Interrupted,
        format!(
            "etcd-setup {command} was stopped by {signal} while {}; run it again",
            if step.is_empty() { "starting" } else { step }
        ),
    )
}

/// What a signal means now (called in the signal thread): `None` carries on (no command
/// yet, or a critical section holds it); otherwise the command is stopped here, its
/// failure said, its cleanups run, and the process exits.
fn on_signal(signal: &'static str) -> Option<u8> {
    let mut s = signals_state();
    let command = s.command?;
    if s.critical > 0 {
        s.pending = Some(signal);
        eprintln!(
            "etcd-setup {command}: {signal}: stopping once the step under way is over ({})",
            printable::line(&s.step)
        );
        return None;
    }
    let f = interrupted_failure(command, signal, &s.step);
    let code = exit::of(command, ReasonCode::Interrupted);
    for line in printable::failure(&f) {
        eprintln!("{line}");
    }
    if s.json {
        crate::shared::output::print(&format!("{}\n", failure_json(command, &f, code)));
    }
    for f in &s.on_interrupt {
        f();
    }
    // The cleanups and the exit with SIGNALS still held: no critical section begins, and
    // no step record is written after the record's removal ([`Frame::step`] writes under
    // it; a step written between the two would outlive the process, as host test
    // tests/frame.rs saw in a local CI run: the record of an upgrade stopped by SIGTERM
    // while it waited for the ISO, left behind).
    signals::run_cleanups();
    std::process::exit(i32::from(code));
}

/// Runs `body` in the frame `spec` describes; the exit code. `body` returns the lines to
/// print on stdout.
pub fn run(spec: Spec<'_>, body: impl FnOnce(&Frame) -> Result<Vec<String>, Failure>) -> u8 {
    {
        let mut s = signals_state();
        s.command = Some(spec.command);
        s.json = spec.json;
    }
    signals::spawn(on_signal);
    let (command, json) = (spec.command, spec.json);
    let outcome = begin(&spec).and_then(|frame| {
        let out = body(&frame);
        // Held at the end of a critical section with nothing left to stop: what was done
        // stands, and is said.
        if let (Ok(_), Some(sig)) = (&out, signals_state().pending) {
            eprintln!("etcd-setup {command}: {sig} came while it finished; it did");
        }
        drop(frame);
        out
    });
    match outcome {
        Ok(lines) => {
            for l in lines {
                crate::shared::output::line(&l);
            }
            exit::data::OK // 0 for every command
        }
        Err(f) => {
            let code = report(command, &f);
            if json {
                crate::shared::output::print(&format!("{}\n", failure_json(command, &f, code)));
            }
            code
        }
    }
}

/// A failure as one JSON object, for programs that read stdout only: the command, its
/// reason (code and message, as status gives it, and the causes under it) and the exit
/// code.
pub fn failure_json(command: Command, f: &Failure, exit_code: u8) -> String {
    let causes: Vec<String> = f
        .source
        .iter()
        .flat_map(|s| s.chain().map(|c| c.to_string()))
        .collect();
    serde_json::json!({
        "command": command.to_string(),
        "ok": false,
        "reason": { "code": f.code.as_str(), "message": f.message, "causes": causes },
        "exit_code": exit_code,
    })
    .to_string()
}

/// Prints `f` in the one shape ([`printable::failure`]); its exit code ([`exit::of`]).
pub fn report(command: Command, f: &Failure) -> u8 {
    for line in printable::failure(f) {
        eprintln!("{line}");
    }
    exit::of(command, f.code)
}

fn begin(spec: &Spec<'_>) -> Result<Frame, Failure> {
    let settings = config::load(spec.config)?;
    let paths = Paths::new(spec.dirs);
    let lock = match spec.lock {
        Some(wait) => Some(RunLock::acquire(&paths.run_dir.join(LOCK_FILE), wait)?),
        None => None,
    };
    let op = spec.record.map(|step| {
        let guard = OperationGuard::begin(&paths.run_dir, spec.command, step);
        let cleanup = Cleanup::remove_file(guard.path());
        signals_state().step = step.to_string();
        (guard, cleanup)
    });
    Ok(Frame {
        command: spec.command,
        member: Member::of(&settings),
        settings,
        paths,
        op: Mutex::new(op),
        _lock: lock,
    })
}

impl Frame {
    /// Records the next step, and whether etcd is down on purpose during it.
    /// Written under the signal state's lock, which a signal's way out holds from the
    /// record's removal to the exit: a step is either written before the removal or never.
    pub fn step(&self, step: &str, etcd_down_expected: bool) {
        let mut signals = signals_state();
        let mut op = self.op.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((op, _)) = op.as_mut() {
            op.step(step, etcd_down_expected);
        }
        signals.step = step.to_string();
    }

    /// Runs `f` on a signal, in the signal thread, before the process exits.
    pub fn on_interrupt(&self, f: impl Fn() + Send + 'static) {
        signals_state().on_interrupt.push(Box::new(f));
    }
}

/// Signals held while it lives: one that comes meanwhile stops the command at the next
/// [`checkpoint`] after it.
#[must_use]
pub struct Held(());

/// Holds signals until the [`Held`] drops.
pub fn hold() -> Held {
    signals_state().critical += 1;
    Held(())
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut s = signals_state();
        s.critical = s.critical.saturating_sub(1);
    }
}

/// Runs `f` with signals held ([`hold`]).
pub fn critical<T>(f: impl FnOnce() -> T) -> T {
    let _held = hold();
    f()
}

/// A safe point: `interrupted` when a signal came during a critical section before it.
pub fn checkpoint() -> Result<(), Failure> {
    let s = signals_state();
    match (s.pending, s.command) {
        (Some(sig), Some(command)) if s.critical == 0 => {
            Err(interrupted_failure(command, sig, &s.step))
        }
        _ => Ok(()),
    }
}

/// `locked` for a cluster lock `name` not taken within `wait`: another holder kept it,
/// or etcd did not serve the request (each said as it was; etcd's error beside it).
pub fn cluster_lock_failure(name: &str, wait: Duration, e: EtcdError) -> Failure {
    let what = if e.kind == ErrorKind::Timeout {
        format!(
            "the cluster lock {name} was not ours within {} s",
            wait.as_secs()
        )
    } else {
        format!("etcd did not grant the cluster lock {name}")
    };
    Failure::new(ReasonCode::Locked, what).with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_in_a_critical_section_waits_for_the_next_checkpoint() {
        signals_state().command = Some(Command::Restore);
        signals_state().step = "swapping the data dir".into();
        let held = critical(|| {
            assert_eq!(on_signal("SIGTERM"), None);
            // Inside, no checkpoint stops it.
            checkpoint()
        });
        assert!(held.is_ok());
        let f = checkpoint().unwrap_err();
        assert_eq!(f.code, ReasonCode::Interrupted);
        assert_eq!(
            f.message,
            "etcd-setup restore was stopped by SIGTERM while swapping the data dir; run it again"
        );
        let mut s = signals_state();
        s.pending = None;
        s.command = None;
    }
}
