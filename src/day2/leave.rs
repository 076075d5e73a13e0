//! `etcd-setup leave`: this member leaves its cluster. The order, each step only after
//! the one before succeeded: the preconditions, all before the cluster is touched (the
//! system bus answers, etcd.service is installed, the quorum guard
//! [`lifecycle::leave::plan`] passes, and the node's record says `left`, "leaving the
//! cluster", so that a `run` at the next boot does not join the cluster again whatever
//! happens next); the removal through another member; etcd stopped and disabled, its data
//! dir moved aside (never deleted), and the record finished, which `status` answers and
//! which keeps `run` from joining the cluster again unless told `--rejoin`.
//!
//! A refusal or a failed removal changes nothing (the record is put back as it was). From
//! the removal to the end a signal waits ([`frame::critical`]). Idempotent: a node that is
//! no member any more only finishes the local steps.

use super::frame::{self, Frame, Spec};
use crate::cli::LeaveArgs;
use crate::cluster::lifecycle::{self, aside, leave::Outcome};
use crate::member::service::Etcd;
use crate::reason::{Failure, ReasonCode};
use crate::shared::report::{self, Command, Phase, State};
use std::time::SystemTime;

/// Runs `etcd-setup leave`; returns the exit code.
pub fn command(args: &LeaveArgs) -> u8 {
    frame::run(
        Spec {
            command: Command::Leave,
            config: &args.config,
            dirs: &args.dirs,
            lock: Some(args.lock_timeout),
            record: Some("checking the preconditions"),
            json: false,
        },
        |f| leave(f, args.force).map(|done| vec![done]),
    )
}

/// The steps; returns the sentence saying what was done.
fn leave(f: &Frame, force: bool) -> Result<String, Failure> {
    let settings = &f.settings;
    // Every precondition before the cluster is touched: systemd first, which stops etcd
    // once the member is gone.
    let etcd = Etcd::connect(settings)?;
    if !etcd.unit_present()? {
        return Err(Failure::new(
            ReasonCode::LeaveFailed,
            format!(
                "{} is not installed on this node ({} is missing), so etcd could not be stopped once the member is removed; nothing was changed",
                crate::member::unit::ETCD_UNIT,
                crate::member::unit::PACKAGED_UNIT_FILE
            ),
        ));
    }
    let plan = lifecycle::leave::plan(&f.member.node, force)?;
    frame::checkpoint()?;

    // The record says `left` (leaving) before the removal: a `run` at the next boot does
    // not join the cluster again, whatever happens from here on.
    let store = f.paths.store();
    let before = store.load().ok().flatten();
    let now = SystemTime::now();
    let mut state = before
        .clone()
        .unwrap_or_else(|| State::begin_at(Phase::NotStarted, now));
    state.reason = None;
    state.pid = Some(std::process::id());
    state.member_name = Some(settings.node_name.clone());
    state.enter(Phase::Left, now);
    state.progress = Some(format!(
        "leaving the cluster: removing member {} and stopping etcd",
        settings.node_name
    ));
    store
        .save(&state)
        .map_err(|e| Failure::io(&store.run_path(), "cannot record `leaving` in", e))?;
    f.step("removing this member, then stopping etcd", true);
    let done = frame::critical(|| {
        let outcome = match lifecycle::leave::execute(&f.member.node, &plan) {
            Ok(o) => o,
            Err(e) => {
                // Nothing was changed: the record is put back as it was.
                let back = before.unwrap_or_else(|| State::begin_at(Phase::NotStarted, now));
                if let Err(io) = store.save(&back) {
                    eprintln!(
                        "etcd-setup leave: cannot put back the record in {}: {io}",
                        store.run_path().display()
                    );
                }
                return Err(e);
            }
        };
        finish(f, &etcd, outcome, state)
    })?;
    Ok(done)
}

/// The member is gone: etcd off, its data aside, the record `left`.
fn finish(f: &Frame, etcd: &Etcd, outcome: Outcome, mut state: State) -> Result<String, Failure> {
    let settings = &f.settings;
    etcd.off()?;
    let now = SystemTime::now();
    let moved = if settings.data_dir.exists() {
        let to = aside::move_aside(&settings.data_dir, "left", now).map_err(|e| {
            Failure::new(
                ReasonCode::LeaveFailed,
                format!(
                    "the member left the cluster and etcd is stopped, but its data dir {} cannot be moved aside",
                    settings.data_dir.display()
                ),
            )
            .with_source(e)
        })?;
        format!("; its data dir was moved aside to {}", to.display())
    } else {
        String::new()
    };
    let done = match outcome {
        Outcome::Removed { id, remaining } => format!(
            "member {id} ({}) left the cluster, {} member(s) remain; etcd.service is stopped and disabled{moved}",
            settings.node_name,
            remaining.len()
        ),
        Outcome::NotAMember => format!(
            "{} is no member of the cluster any more; etcd.service is stopped and disabled{moved}",
            settings.node_name
        ),
    };
    let store = f.paths.store();
    state.touch(now);
    state.progress = Some(done.clone());
    store
        .save(&state)
        .map_err(|e| Failure::io(&store.run_path(), "cannot record `left` in", e))?;
    // Not a failure: whatever the failure file said is history now.
    report::clear_failure(&settings.failure_file)
        .map_err(|e| Failure::io(&settings.failure_file, "cannot remove", e))?;
    Ok(done)
}
