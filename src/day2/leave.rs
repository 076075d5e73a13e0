//! `etcd-setup leave`: this member leaves its cluster. The order, each step only after
//! the one before succeeded: the quorum guard ([`lifecycle::leave::plan`]), the removal
//! through another member, etcd stopped and disabled, its data dir moved aside (never
//! deleted), and the node's record set to `left`, which `status` answers and which keeps
//! `run` from joining the cluster again unless told `--rejoin`.
//!
//! A refusal or a failed removal changes nothing. Idempotent: a node that is no member
//! any more only finishes the local steps.

use crate::cli::LeaveArgs;
use crate::cluster::lifecycle::{self, aside, leave::Outcome, Node};
use crate::exit::leave as exit;
use crate::reason::{Failure, ReasonCode};
use crate::road::run::Paths;
use crate::shared::config::{self, Settings};
use crate::shared::lock::{RunLock, LOCK_FILE};
use crate::shared::report::{self, Phase, State};
use crate::shared::systemd::Systemd;
use crate::shared::unit::ETCD_UNIT;
use crate::{shared::output, shared::printable};
use std::time::{Duration, SystemTime};

/// Runs `etcd-setup leave`; returns the exit code.
pub fn command(args: &LeaveArgs) -> u8 {
    let settings = match config::load(&args.config) {
        Ok(s) => s,
        Err(f) => {
            eprintln!("etcd-setup leave: {}", printable::line(&f.headline()));
            return exit::CONFIG;
        }
    };
    let paths = Paths::new(&args.dirs);
    let _lock = match RunLock::acquire(&paths.run_dir.join(LOCK_FILE), args.lock_timeout) {
        Ok(l) => l,
        Err(f) => {
            eprintln!("etcd-setup leave: {}", f.headline());
            return exit::LOCKED;
        }
    };
    match leave(&settings, &paths, args.force) {
        Ok(done) => {
            output::print(&format!("{}\n", printable::line(&done)));
            exit::OK
        }
        Err(f) => {
            eprintln!("etcd-setup leave: {}", printable::line(&f.headline()));
            if let Some(detail) = &f.source {
                eprintln!("    {}", printable::line(&format!("{detail:#}")));
            }
            exit::FAILED
        }
    }
}

/// The steps; returns the sentence saying what was done.
fn leave(settings: &Settings, paths: &Paths, force: bool) -> Result<String, Failure> {
    let node = Node::from_settings(settings);
    let mut op = report::OperationGuard::begin(&paths.run_dir, "leave", "checking the quorum");
    let plan = lifecycle::leave::plan(&node, force)?;
    // From the removal on, this member's etcd stops being healthy on purpose.
    op.step("removing this member, then stopping etcd", true);
    let outcome = lifecycle::leave::execute(&node, &plan)?;
    let sd = Systemd::connect()?;
    sd.disable(ETCD_UNIT)?;
    sd.stop(ETCD_UNIT, Duration::from_secs(60))?;
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
    let store = paths.store();
    let mut state = store
        .load()
        .ok()
        .flatten()
        .unwrap_or_else(|| State::begin_at(Phase::NotStarted, now));
    state.reason = None;
    state.pid = Some(std::process::id());
    state.member_name = Some(settings.node_name.clone());
    state.enter(Phase::Left, now);
    state.progress = Some(done.clone());
    store
        .save(&state)
        .map_err(|e| Failure::io(&store.run_path(), "cannot record `left` in", e))?;
    // Not a failure: whatever the failure file said is history now.
    report::clear_failure(&settings.failure_file)
        .map_err(|e| Failure::io(&settings.failure_file, "cannot remove", e))?;
    Ok(done)
}
