//! `etcd-setup run`: the boot job. One straight road, each step a module:
//! configuration → lock → wait for the ISO (discover) → validate and extract (source,
//! archive) → install (install, unit) → start and confirm (systemd, health) → report.
//!
//! Every failure ends in a reason code written to the failure file and the state files,
//! and leaves etcd disabled and stopped. A run after a success only verifies etcd.

use crate::cli::RunArgs;
use crate::cluster::lifecycle::{self, join::Plan, Node};
use crate::exit::run as exit;
use crate::member::service::{self, Etcd, Members, OneShot};
use crate::member::unit::{self, ETCD_UNIT};
use crate::reason::{Failure, ReasonCode};
use crate::road::discover::{self, Wait};
use crate::road::install;
use crate::road::source;
use crate::shared::config::{self, Settings};
use crate::shared::lock::RunLock;
use crate::shared::paths::Paths;
use crate::shared::report::{self, Phase, Reporter, SharedReporter, State};
use crate::shared::systemd::{self, Systemd, Watched};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// `etcd-setup run`. Signals are blocked before any thread exists and taken by a thread
/// of their own ([`crate::shared::signals`]), which records `interrupted` and exits; a panic is caught and recorded as
/// `internal-error`. Either way the reason reaches the failure file.
pub fn command(args: &RunArgs) -> u8 {
    let shared: SharedReporter = Arc::new(Mutex::new(None));
    let on_signal = Arc::clone(&shared);
    crate::shared::signals::spawn(move |sig| Some(interrupted(&on_signal, sig)));
    let paths = Paths::new(&args.dirs);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(
            &args.config,
            &paths,
            args.lock_timeout,
            args.rejoin,
            &shared,
        )
    }));
    match outcome {
        Ok(code) => code,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            panicked(&shared, &message)
        }
    }
}

/// Runs the boot job with the configuration at `config_path`. Returns the exit code. A
/// node whose record says it left its cluster does nothing unless `rejoin`.
/// `lock_timeout` bounds the wait for another run (default: ISO wait + start timeout +
/// 5 minutes).
pub fn run(
    config_path: &Path,
    paths: &Paths,
    lock_timeout: Option<Duration>,
    rejoin: bool,
    shared: &SharedReporter,
) -> u8 {
    // The TLS files are judged with the rest of the configuration: an expired or
    // mismatched one fails now, not when etcd's peers refuse it after the ISO wait.
    let loaded = config::load(config_path)
        .and_then(|s| config::certs::refuse(&s, config_path, SystemTime::now()).map(|()| s));
    let settings = match loaded {
        Ok(s) => s,
        Err(failure) => {
            let (file, owner) = config::failure_target(config_path);
            let mut reporter = Reporter::new(paths.store(), file, owner);
            reporter.fail(&failure);
            return exit::CONFIG;
        }
    };
    let mut reporter = Reporter::new(
        paths.store(),
        settings.failure_file.clone(),
        settings.failure_owner.clone(),
    );
    // status names the member from the state, without reading the configuration.
    reporter.state.member_name = Some(settings.node_name.clone());
    *lock(shared) = Some(reporter);
    let started = SystemTime::now();

    // One run at a time. A run that had to wait adopts the outcome of the one it waited
    // for when that one failed, instead of waiting for the ISO all over again.
    let lock_path = paths.run_dir.join(crate::shared::lock::LOCK_FILE);
    let _lock = match RunLock::acquire(&lock_path, Duration::ZERO) {
        Ok(l) => l,
        Err(_) => {
            with(shared, |r| {
                r.log(6, "another etcd-setup run is in progress; waiting for it")
            });
            let wait = lock_timeout
                .unwrap_or(settings.iso_wait + settings.start_timeout + Duration::from_secs(300));
            match RunLock::acquire(&lock_path, wait) {
                Ok(l) => {
                    let store = paths.store();
                    // Its outcome stands either way: a failure is not retried at once,
                    // and a success just confirmed is not verified again (which would
                    // show the node as "starting" again to whoever polls status).
                    match store.load() {
                        Ok(Some(prev)) if prev.updated_after(started) => match prev.phase {
                            Phase::Failed => {
                                with(shared, |r| {
                                    r.log(6, "the run we waited for failed; its reason stands")
                                });
                                return exit::FAILED;
                            }
                            Phase::Running => {
                                with(shared, |r| {
                                    r.log(6, "the run we waited for confirmed etcd running")
                                });
                                return exit::OK;
                            }
                            _ => {}
                        },
                        _ => {}
                    }
                    l
                }
                // The run holding the lock reports for the node; this one only says why
                // it gave up.
                Err(failure) => {
                    with(shared, |r| r.log(3, &failure.headline()));
                    return exit::LOCKED;
                }
            }
        }
    };

    // A node that left its cluster stays out of it, at every boot, until told otherwise.
    if !rejoin {
        if let Ok(Some(prev)) = paths.store().load() {
            if prev.phase == Phase::Left {
                with(shared, |r| {
                    r.log(
                        5,
                        "this node left its cluster (etcd-setup leave); etcd stays off. `etcd-setup run --rejoin` joins it again",
                    )
                });
                return exit::LEFT;
            }
        }
    }
    with(shared, |r| r.holds_lock = true);
    match steps(&settings, paths, shared) {
        Ok(()) => exit::OK,
        Err(failure) => {
            with(shared, |r| r.fail(&failure));
            // etcd stays off after any failure: never enabled when something before it
            // failed, and not left crash-looping when it failed to come up.
            etcd_off(shared);
            exit::FAILED
        }
    }
}

fn lock(shared: &SharedReporter) -> std::sync::MutexGuard<'_, Option<Reporter>> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` on the reporter (always present once `run` set it).
fn with<T: Default>(shared: &SharedReporter, f: impl FnOnce(&mut Reporter) -> T) -> T {
    lock(shared).as_mut().map(f).unwrap_or_default()
}

fn steps(settings: &Settings, paths: &Paths, shared: &SharedReporter) -> Result<(), Failure> {
    let install_dir = &settings.install_dir;
    if let Some(previous) = already_installed(settings, paths) {
        with(shared, |r| {
            r.carry_over(previous);
            r.enter(
                Phase::Starting,
                "etcd was installed by an earlier run; verifying it",
            )
        });
        let etcd = Etcd::connect(settings)?;
        // Its data gone (a wiped disk, or moved aside by the restore runbook), the node
        // is new to its cluster again: the cluster decides, as for a first start.
        let node = Node::from_settings(settings);
        let plan = if node.has_data() {
            // etcd's environment is rendered again at this start, the membership it holds
            // kept: a line nobody wrote from the settings (a one-shot flag of an older
            // agent) is gone.
            return start_member(settings, &etcd, shared, Members::Keep, None, &[]);
        } else {
            with(shared, |r| {
                r.progress(&format!(
                    "{} holds no etcd data; asking the other members whether the cluster exists",
                    settings.data_dir.display()
                ))
            });
            lifecycle::start::before_start(&node, join_wait(settings), &mut |p| {
                with(shared, |r| r.progress(&p.to_string()))
            })?
        };
        let (plan, once) = from_bucket(settings, &node, &etcd, shared, plan)?;
        return start_member(
            settings,
            &etcd,
            shared,
            members(settings, plan.as_ref()),
            plan,
            &once,
        );
    }

    install::ensure_dir(install_dir)?;
    // A run killed mid-extraction leaves its staging folder: nobody else owns it.
    if let Ok(n) = crate::road::archive::remove_stale_staging(install_dir) {
        if n > 0 {
            with(shared, |r| {
                r.log(
                    5,
                    &format!("removed {n} staging folder(s) left by an interrupted run"),
                )
            });
        }
    }

    let limit = settings.iso_wait;
    with(shared, |r| {
        r.enter(
            Phase::WaitingForIso,
            &format!(
                "waiting for the Kubernetes ISO, 0 s of {} s",
                limit.as_secs()
            ),
        )
    });
    let wait = Wait {
        archive_path: &settings.archive_path,
        limit,
        sys_block: &paths.sys_block,
        dev: &paths.dev,
    };
    let found = discover::wait_for_iso(&wait, |waited| {
        with(shared, |r| {
            r.progress(&format!(
                "waiting for the Kubernetes ISO, {} s of {} s",
                waited.as_secs(),
                limit.as_secs()
            ))
        })
    })?;
    let device = found.device.clone();
    let shown = device.display().to_string();
    let label = found.label.clone();
    with(shared, |r| {
        r.state.device = Some(shown.clone());
        r.state.label = Some(label.clone());
        r.enter(
            Phase::Validating,
            &format!(
                "validating {} on {shown} (label {label})",
                settings.archive_path
            ),
        )
    });

    let seen_at = found.seen_at;
    with(shared, |r| {
        r.step_at("disc-seen", seen_at);
        r.step("disc-read");
    });
    let validated = source::validate_found(
        found,
        &settings.archive_path,
        install_dir,
        &crate::road::archive::Policy::of(settings),
    )
    .map_err(|f| crate::road::discover::removed_while_read(&device, f))?;
    let release = validated.extracted;
    with(shared, |r| r.step("archive-pass-done"));
    // A known-bad release is refused before anything is installed, or recorded.
    let advisories = crate::shared::advisory::gate(&release.version, settings.refuse_known_bad)?;
    for line in &advisories {
        with(shared, |r| r.log(4, line));
    }
    with(shared, |r| {
        r.state.sha256 = Some(release.sha256_hex());
        r.state.etcd_version = Some(release.version.clone());
        r.state.advisories = advisories.clone();
        r.enter(
            Phase::Installing,
            &format!(
                "installing etcd {} into {}",
                release.version,
                install_dir.display()
            ),
        )
    });

    let etcd = Etcd::connect(settings)?;
    // etcd's environment is rendered for the release installed here.
    if let Some(v) = crate::shared::advisory::Version::parse(&release.version) {
        crate::member::service::Service::set_release(&etcd, v);
    }
    // A previous run may have left an etcd from another release running: stop it before
    // its binary is replaced (a fresh node never started etcd, so nothing happens).
    if unit::may_have_started() {
        etcd.stop_unit()?;
    }
    install::install_binaries(&release, install_dir)?;
    with(shared, |r| r.step("installed"));
    drop(release);

    // A new cluster, a member with its data, or a join of the cluster that exists.
    with(shared, |r| {
        r.enter(
            Phase::Starting,
            "asking the other members whether the cluster exists",
        )
    });
    let node = Node::from_settings(settings);
    let plan = lifecycle::start::before_start(&node, join_wait(settings), &mut |p| {
        with(shared, |r| r.progress(&p.to_string()))
    })?;
    let (plan, once) = from_bucket(settings, &node, &etcd, shared, plan)?;

    start_member(
        settings,
        &etcd,
        shared,
        members(settings, plan.as_ref()),
        plan,
        &once,
    )?;
    if settings.eject {
        eject(&device, shared);
    }
    Ok(())
}

/// The state of an earlier run that succeeded, when what it installed is still there.
fn already_installed(settings: &Settings, paths: &Paths) -> Option<State> {
    let store = paths.store();
    let previous = store.load().ok().flatten()?;
    let intact = settings.install_dir.join("etcd").is_file();
    (previous.phase == Phase::Running && intact).then_some(previous)
}

/// The membership etcd's environment gets: the configured one, or the one a join prepared.
fn members(settings: &Settings, join: Option<&Plan>) -> Members {
    Members::Set(match join {
        Some(plan) => unit::Membership {
            initial_cluster: plan.initial_cluster.clone(),
            state: plan.state,
        },
        None => unit::Membership::configured(settings),
    })
}

/// With `backup.restore_when_empty`, an empty member of a cluster nobody serves asks the
/// bucket ([`from_bucket`](crate::road::from_bucket)): the plan may become a join of the
/// cluster the first member restores, or etcd's start a one-shot `--force-new-cluster`
/// on the data restored here. Otherwise `plan` as it is.
fn from_bucket(
    settings: &Settings,
    node: &Node,
    etcd: &Etcd,
    shared: &SharedReporter,
    plan: Option<Plan>,
) -> Result<(Option<Plan>, Vec<OneShot>), Failure> {
    if !crate::road::from_bucket::applies(settings, node, &plan) {
        return Ok((plan, Vec::new()));
    }
    // The data dir is replaced only with etcd stopped; it is started by the road.
    struct StopOnly<'a>(&'a Etcd);
    impl service::Service for StopOnly<'_> {
        fn stop(&self) -> Result<(), Failure> {
            self.0.stop_unit()
        }
        fn start(&self) -> Result<(), Failure> {
            Ok(())
        }
    }
    let start = crate::road::from_bucket::decide(settings, node, &StopOnly(etcd), &mut |p| {
        with(shared, |r| r.progress(p))
    })?;
    Ok(match start {
        crate::road::from_bucket::Start::AsDecided(plan) => (plan, Vec::new()),
        crate::road::from_bucket::Start::Restored(_) => (None, vec![OneShot::ForceNewCluster]),
    })
}

/// How long a joining node waits for the cluster to allow it (a quorum of healthy voters,
/// no other learner): the start timeout, which covers the other members booting too.
fn join_wait(settings: &Settings) -> Duration {
    settings.start_timeout
}

/// Starts etcd and confirms it ([`start_and_confirm`]), promoting a joining learner on the
/// way. When etcd exits because this member was removed from the cluster while its data
/// survived (a reboot after `etcdctl member remove`, say), the data dir is moved aside and
/// the node joins the cluster anew, once.
fn start_member(
    settings: &Settings,
    etcd: &Etcd,
    shared: &SharedReporter,
    members: Members,
    join: Option<Plan>,
    once: &[OneShot],
) -> Result<(), Failure> {
    let node = Node::from_settings(settings);
    let failure = match start_and_confirm(
        settings,
        etcd,
        shared,
        &members,
        join.as_ref().map(|p| (&node, p)),
        once,
    ) {
        Ok(()) => return Ok(()),
        Err(f) => f,
    };
    let removed = failure.code == ReasonCode::EtcdStartFailed
        && systemd::journal_tail(ETCD_UNIT, 30)
            .iter()
            .any(|l| crate::cluster::etcd::says_member_removed(l));
    if !removed || join.is_some() {
        return Err(failure);
    }
    with(shared, |r| {
        r.progress("etcd says this member was removed from the cluster; joining it anew")
    });
    etcd.stop_unit()?;
    let plan = lifecycle::start::before_start(&node, join_wait(settings), &mut |p| {
        with(shared, |r| r.progress(&p.to_string()))
    })?;
    let Some(plan) = plan else {
        return Err(failure);
    };
    let members = self::members(settings, Some(&plan));
    start_and_confirm(settings, etcd, shared, &members, Some((&node, &plan)), &[])
}

/// Starts etcd, waits for the start job (a first member of a new cluster waits here for
/// its peers, with progress), confirms etcd answers its health endpoint and stays up
/// (NRestarts steady over the settle period), and only then enables it for the next boot:
/// a run killed at any line before leaves etcd disabled. No step reloads systemd: the
/// unit is the package's, loaded since boot, and its environment is read at each start.
fn start_and_confirm(
    settings: &Settings,
    etcd: &Etcd,
    shared: &SharedReporter,
    members: &Members,
    join: Option<(&Node, &Plan)>,
    once: &[OneShot],
) -> Result<(), Failure> {
    with(shared, |r| {
        if r.phase() == Phase::Starting {
            r.progress("starting etcd.service")
        } else {
            r.enter(Phase::Starting, "starting etcd.service")
        }
    });
    // The controller renders etcd's environment, clears a failed state (a unit that hit
    // its start limit in an earlier run would refuse to start at once) and follows the
    // start job; a first member of a new cluster waits here for its peers, with progress.
    let peers = settings.initial_cluster.len().saturating_sub(1);
    etcd.start_with(members, once, &mut |waited| {
        with(shared, |r| {
            let waiting = if once.contains(&OneShot::ForceNewCluster) {
                "etcd started once with --force-new-cluster on the restored data, waiting for \
                 it to report ready"
                    .to_string()
            } else if peers == 0 {
                "etcd started, waiting for it to report ready".to_string()
            } else {
                format!("etcd started, waiting for quorum with its {peers} peer(s)")
            };
            r.progress(&format!(
                "{waiting}, {} s of {} s",
                waited.as_secs(),
                settings.start_timeout.as_secs()
            ))
        })
    })?;

    // Up: it must answer its health endpoint, and stay up (no restart, still active) over
    // the settle period counted from now, followed from systemd's PropertiesChanged
    // signals. Health first: it is what clients wait for, and it does not need to wait
    // for the settle period to end.
    with(shared, |r| r.step("start-job-done"));
    // A learner serves no linearizable read, which /health makes: promote it first,
    // through the voting members.
    if let Some((node, plan)) = join {
        lifecycle::join::promote(node, plan, settings.start_timeout, &mut |p| {
            with(shared, |r| r.progress(&p.to_string()))
        })?;
        with(shared, |r| r.step("promoted"));
    }
    let settle_end = Instant::now() + settings.settle;
    let sd = etcd.systemd();
    let base = sd.unit_state(ETCD_UNIT)?;
    service::confirm(
        crate::member::ThisMember::of(settings).metrics,
        None,
        Duration::from_secs(30),
    )?;
    with(shared, |r| {
        r.step("healthy");
        r.progress(&format!(
            "etcd is active and healthy; confirming it stays up for {} s",
            settings.settle.as_secs()
        ))
    });
    let watched = sd.watch_until(ETCD_UNIT, settle_end, |s| {
        s.n_restarts > base.n_restarts || !s.is_active()
    })?;
    if let Watched::Matched(s) = watched {
        let journal = systemd::journal_tail(ETCD_UNIT, 15);
        return Err(Failure::new(
            ReasonCode::EtcdUnhealthy,
            format!(
                "etcd.service did not stay up within {} s of starting: {} (restarted {} time(s)); it was stopped and disabled",
                settings.settle.as_secs(),
                s.summary(),
                s.n_restarts.saturating_sub(base.n_restarts)
            ),
        )
        .with_source(anyhow::anyhow!("last journal lines of etcd.service:\n{}", journal.join("\n"))));
    }
    // Proven: enabled for the next boot (the symlinks only; systemd needs no reload to
    // start it at the next boot).
    etcd.enable()?;
    with(shared, |r| r.step("enabled"));
    // The baseline for status's crash-loop rule: restarts after this one are news. The
    // settle watch saw none beyond `base`; a read that fails keeps that.
    let confirmed = sd
        .unit_state(ETCD_UNIT)
        .map_or(base.n_restarts, |s| s.n_restarts);
    with(shared, |r| {
        r.succeed("etcd is running and healthy", confirmed)
    });
    // Off the road to healthy, which is over: systemd's unit-file state of the loaded
    // unit, which `systemctl status etcd` shows, is read afresh only by a reload, and
    // said "disabled" after a first run.
    if sd
        .loaded_enablement(ETCD_UNIT)
        .is_ok_and(|s| s != "enabled")
    {
        match sd.reload() {
            Ok(()) => with(shared, |r| {
                r.log(
                    6,
                    "etcd.service enabled: systemd reloaded, so that `systemctl status etcd` \
                     says so",
                )
            }),
            Err(e) => with(shared, |r| {
                r.log(
                    4,
                    &format!(
                        "etcd.service is enabled, but `systemctl status etcd` may say \
                         disabled until systemd reloads: {}",
                        e.headline()
                    ),
                )
            }),
        }
    }
    Ok(())
}

/// Stops and disables etcd, best effort (a failure here is logged, the original reason
/// stands).
fn etcd_off(shared: &SharedReporter) {
    if !unit::may_have_started() {
        return;
    }
    let result = Systemd::connect().and_then(|sd| service::off(&sd));
    if let Err(e) = result {
        with(shared, |r| {
            r.log(
                4,
                &format!("could not stop and disable etcd.service: {}", e.headline()),
            )
        });
    }
}

/// Ejects the disc once etcd runs (best effort: the platform may hold the tray locked).
fn eject(device: &Path, shared: &SharedReporter) {
    match crate::road::discover::eject(device) {
        Ok(()) => with(shared, |r| {
            r.log(6, &format!("ejected {}", device.display()))
        }),
        Err(e) => with(shared, |r| {
            r.log(4, &format!("could not eject {}: {e}", device.display()))
        }),
    }
}

/// Records `interrupted` for a signal (called from the signal thread), stops and
/// disables etcd if the run had not reached it yet.
pub fn interrupted(shared: &SharedReporter, signal: &str) -> u8 {
    // Stopped while waiting for another run (or before it knew its configuration): the
    // other run reports for the node; this one leaves the files and etcd alone.
    if !with(shared, |r| r.holds_lock) {
        with(shared, |r| {
            r.log(
                4,
                &format!("stopped by {signal} while waiting for another run; that run reports for the node"),
            )
        });
        return exit::INTERRUPTED;
    }
    let phase = with(shared, |r| {
        let phase = r.phase();
        let failure = Failure::new(
            ReasonCode::Interrupted,
            format!(
                "etcd-setup run was stopped by {signal} while {}; run it again with `systemctl start etcd-setup`",
                phase.as_str()
            ),
        );
        r.fail(&failure);
        Some(phase)
    });
    if matches!(phase, Some(p) if p < Phase::Running) {
        etcd_off(shared);
    }
    exit::INTERRUPTED
}

/// Records `internal-error` for a panic that reached the top of the run.
pub fn panicked(shared: &SharedReporter, message: &str) -> u8 {
    let failure = Failure::new(
        ReasonCode::InternalError,
        format!("etcd-setup hit a bug and stopped: {message}; report it with this file"),
    );
    let had = with(shared, |r| {
        r.fail(&failure);
        true
    });
    if !had {
        let (file, owner) = config::failure_target(Path::new(config::DEFAULT_PATH));
        let _ = report::write_failure(&file, &owner, &failure, SystemTime::now());
    }
    etcd_off(shared);
    exit::FAILED
}
