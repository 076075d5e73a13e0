//! The evaluator thread: builds the answers the loop hands out, one evaluation for every request waiting.

use super::Watch;
use super::{evaluate, pid_alive, ErrorBody, LiveView, Reply};
use crate::shared::report::{Loaded, StateStore};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};

/// One finished evaluation: the reply every request it serves gets.
#[derive(Clone)]
pub(super) struct Evaluated {
    /// Its number: evaluations are numbered from 1 in the order they begin.
    pub(super) ticket: u64,
    pub(super) line: Arc<[u8]>,
    /// Whether a `--wait` ends on it.
    pub(super) terminal: bool,
    /// The watch generation it read the state under.
    pub(super) generation: u64,
}

/// What the loop and the evaluator share.
#[derive(Default)]
pub(super) struct Evaluations {
    pub(super) slot: Mutex<Slot>,
    pub(super) wanted: Condvar,
}

#[derive(Default)]
pub(super) struct Slot {
    /// An evaluation is asked for.
    pub(super) want: bool,
    /// The number of the last evaluation begun.
    pub(super) begun: u64,
    /// The last one finished.
    pub(super) done: Option<Evaluated>,
    /// The server is ending.
    pub(super) stop: bool,
}

impl Evaluations {
    /// Asks for an evaluation that begins from now on; returns the ticket it will have
    /// (or a later one, which serves as well).
    pub(super) fn ask(&self) -> u64 {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.want = true;
        let ticket = slot.begun + 1;
        drop(slot);
        self.wanted.notify_one();
        ticket
    }

    pub(super) fn take_done(&self) -> Option<Evaluated> {
        self.slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .done
            .clone()
    }

    pub(super) fn stop(&self) {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        self.wanted.notify_one();
    }
}

/// Stops the evaluator when the loop ends, however it ends.
pub(super) struct StopOnDrop(pub(super) Arc<Evaluations>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The evaluator: waits to be asked, evaluates, publishes, pokes the loop.
pub(super) fn evaluator(
    evaluations: Arc<Evaluations>,
    store: StateStore,
    (tls, backup_period): (
        Option<crate::shared::config::certs::Policy>,
        Option<std::time::Duration>,
    ),
    live: Arc<dyn LiveView>,
    watch: Arc<Watch>,
    wake: UnixStream,
) {
    let live_copy = store.run_path();
    let persist_dir = store
        .persist_path()
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    // The parsed state, and the watch generation it was read under.
    let mut parsed: Option<(u64, Loaded)> = None;
    // The TLS files as parsed, kept until one changes on disk.
    let mut inspector = crate::shared::config::certs::Inspector::new();
    loop {
        let ticket = {
            let mut slot = evaluations.slot.lock().unwrap_or_else(|e| e.into_inner());
            while !slot.want && !slot.stop {
                slot = evaluations
                    .wanted
                    .wait(slot)
                    .unwrap_or_else(|e| e.into_inner());
            }
            if slot.stop {
                return;
            }
            slot.want = false;
            slot.begun += 1;
            slot.begun
        };
        let once = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (generation, reliable) = watch.current();
            let fresh = match parsed.take() {
                Some((seen, loaded)) if reliable && seen == generation => loaded,
                _ => store.load_detailed(),
            };
            let mut answer = evaluate(&fresh, &live_copy, live.as_ref(), &pid_alive);
            crate::status::data::annotate(&mut answer, &persist_dir, std::time::SystemTime::now());
            crate::status::data::annotate_backup(
                &mut answer,
                &persist_dir,
                backup_period,
                std::time::SystemTime::now(),
            );
            if let Some(policy) = &tls {
                crate::status::certs::annotate(
                    &mut answer,
                    &mut inspector,
                    policy,
                    std::time::SystemTime::now(),
                );
            }
            if let Some(run_dir) = live_copy.parent() {
                crate::status::operation::annotate(
                    &mut answer,
                    run_dir,
                    &crate::shared::report::Process::is_alive,
                );
                crate::status::operation::annotate_upgrade(
                    &mut answer,
                    &crate::shared::report::Process::is_alive,
                );
            }
            // Reused only when it came from the live copy, the one file the watch sees;
            // the persistent copy (read when the live one is missing) and a copy that
            // cannot be read are read again each time.
            if fresh.from.as_deref() == Some(live_copy.as_path()) && fresh.notes.is_empty() {
                parsed = Some((generation, fresh));
            }
            let terminal = answer.verdict.is_terminal();
            (
                Reply::Answer(Box::new(answer)).to_line(),
                terminal,
                generation,
            )
        }));
        let (line, terminal, generation) = once.unwrap_or_else(|_| {
            parsed = None;
            let e = ErrorBody::new("internal-error", "building the answer failed");
            // Terminal, so waiters get the error instead of waiting on it.
            (Reply::Error(e).to_line(), true, 0)
        });
        evaluations
            .slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .done = Some(Evaluated {
            ticket,
            line: line.into(),
            terminal,
            generation,
        });
        // The socket is non-blocking: when full, a wake-up is pending anyway.
        let _ = (&wake).write(&[1]);
    }
}
