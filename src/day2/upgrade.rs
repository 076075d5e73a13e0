//! `etcd-setup upgrade`: this member moves to the etcd release on the newer Kubernetes ISO.
//!
//! One straight road, each step only after the one before succeeded:
//! 1. the running version (etcd's `/metrics`) and the new tarball, found and validated as
//!    `run` does (`discover` + `source`: the platform swaps the ISO in the node's one
//!    CD-ROM drive, so the disc found is the new one);
//! 2. the version rules ([`rules::versions`]: one minor up at most, never down; the same
//!    release is nothing to do) and the known-bad table ([`crate::shared::advisory`]);
//! 3. the cluster rules ([`rules::cluster`]: more than two members, all healthy, none on a
//!    third release), asked again once the cluster-wide lock is held;
//! 4. the lock `etcd-setup/upgrade`, held in etcd itself ([`crate::cluster::etcd::ClusterLock`]):
//!    one member at a time. The leader goes last: holding the lock while other members
//!    still run the old release, it lets the lock go and waits for them (at most
//!    `--leader-wait`), and at its turn hands leadership to another healthy member
//!    first, so that its restart costs the others no election;
//! 5. a snapshot of this member, before anything changes: the verified one of `etcd-setup
//!    snapshot` ([`crate::day2::snapshot::take`]), kept with the others and recorded;
//! 6. from 3.6 to 3.7 only, [`raft_snapshot`]: etcd 3.6 restarted once with
//!    `--snapshot-count=1` until it has taken a raft snapshot, since etcd 3.7 cannot replay
//!    the WAL entries a member upgraded from 3.5 may still hold;
//! 7. [`swap`]: etcd stopped, the old binaries kept beside the new ones
//!    ([`beside::keep_previous`]), the new ones installed by renames, etcd started and
//!    confirmed healthy on the new version; if it is not, the old binaries are put back
//!    ([`beside::rollback`]), etcd started again and the upgrade fails with
//!    `upgrade-rolled-back`.
//!
//! The node's state records the upgrade's phase, the members' versions and the cluster
//! version, which `status` shows, and the upgrade's process (pid and start time): a
//! record left by a killed upgrade reads `interrupted` in `status`. The command runs in
//! the day-2 frame ([`super::frame`]: the node lock, the operation record); a signal
//! stops it at once outside the swap, and after it inside.

pub mod beside;
pub mod rules;

use super::frame::{self, Frame, Spec};
use crate::cli::UpgradeArgs;
use crate::cluster::etcd::{self, Client};
use crate::cluster::health;
use crate::cluster::lifecycle::survey::MemberView;
use crate::cluster::lifecycle::Node;
use crate::exit::upgrade as exit;
use crate::member::service::{self, Etcd, OneShot};
use crate::member::Member;
use crate::reason::{Failure, ReasonCode};
use crate::road::discover::{self, Wait};
use crate::road::install;
use crate::road::source;
use crate::shared::advisory::{self, Version};
use crate::shared::config::Settings;
use crate::shared::paths::Paths;
use crate::shared::report::{rfc3339, Command, Phase, Process, State, UpgradePhase, UpgradeRecord};
use rules::Step;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// The lock's name in etcd.
pub const LOCK_NAME: &str = "etcd-setup/upgrade";
/// How often a turn whose lock was lost before etcd was touched is taken again.
const LOCK_TRIES: u32 = 3;

/// Runs `etcd-setup upgrade`; returns the exit code.
pub fn command(args: &UpgradeArgs) -> u8 {
    frame::run(
        Spec {
            command: Command::Upgrade,
            config: &args.config,
            dirs: &args.dirs,
            lock: Some(args.lock_timeout),
            record: Some("validating"),
            json: false,
        },
        |f| {
            let mut record = Recorder::new(f);
            // A signal outside the swap ends the upgrade at once: the record says so.
            let store = record.store.clone();
            f.on_interrupt(move || interrupted(&store));
            match upgrade(&f.settings, &f.member, &f.paths, args, &mut record) {
                Ok(done) => Ok(vec![done]),
                Err(e) => {
                    let refused = crate::exit::of(Command::Upgrade, e.code) == exit::REFUSED;
                    record.set(
                        if refused {
                            UpgradePhase::Refused
                        } else {
                            UpgradePhase::Failed
                        },
                        &e.headline(),
                    );
                    Err(e)
                }
            }
        },
    )
}

/// The upgrade record after a signal (called in the signal thread).
fn interrupted(store: &crate::shared::report::StateStore) {
    let now = SystemTime::now();
    let Ok(Some(mut state)) = store.load() else {
        return;
    };
    if let Some(u) = state.upgrade.as_mut() {
        u.progress = format!("stopped by a signal while {}: {}", u.phase, u.progress);
        u.phase = UpgradePhase::Interrupted;
        u.updated_at = rfc3339(now);
        state.touch(now);
        let _ = store.save(&state);
    }
}

/// Writes the upgrade's record into the node's state, best effort (an upgrade does not
/// fail because status cannot show it; the failure is said on stderr).
struct Recorder<'a> {
    store: crate::shared::report::StateStore,
    record: UpgradeRecord,
    /// The frame, whose operation record status shows while the upgrade runs; etcd is
    /// down on purpose from the leader's hand-over and from the install (the swap stops
    /// etcd first) until it is confirmed or rolled back.
    frame: &'a Frame,
    /// The release confirmed running (version, archive SHA-256), once it is.
    installed: Option<(String, String)>,
}

/// `state` after `version` (its archive's SHA-256 `sha256`) was installed and confirmed
/// by an upgrade: status's installed release, and that release's advisories instead of
/// the old one's, as `run` records them.
pub fn record_installed(state: &mut State, version: &str, sha256: &str) {
    state.etcd_version = Some(version.to_string());
    state.sha256 = Some(sha256.to_string());
    state.advisories = advisory::lines(version);
}

impl<'a> Recorder<'a> {
    fn new(frame: &'a Frame) -> Recorder<'a> {
        Recorder {
            frame,
            installed: None,
            store: frame.paths.store(),
            record: UpgradeRecord {
                phase: UpgradePhase::Validating,
                from: "-".into(),
                to: "-".into(),
                progress: String::new(),
                members: Vec::new(),
                cluster_version: None,
                updated_at: rfc3339(SystemTime::now()),
                // status reads the record as interrupted once this process is gone.
                process: Some(Process::current()),
            },
        }
    }

    fn set(&mut self, phase: UpgradePhase, progress: &str) {
        self.record.phase = phase;
        self.record.progress = progress.into();
        self.frame.step(
            &format!("{phase}: {progress}"),
            phase.etcd_down_on_purpose(),
        );
        self.save();
    }

    /// The new release runs: the node's state names it as installed from now on.
    fn installed(&mut self, version: &str, sha256: String) {
        self.installed = Some((version.to_string(), sha256));
    }

    fn save(&mut self) {
        let now = SystemTime::now();
        self.record.updated_at = rfc3339(now);
        let mut state = self
            .store
            .load()
            .ok()
            .flatten()
            .unwrap_or_else(|| State::begin_at(Phase::NotStarted, now));
        if let Some((version, sha256)) = &self.installed {
            record_installed(&mut state, version, sha256);
        }
        state.upgrade = Some(self.record.clone());
        state.touch(now);
        if let Err(e) = self.store.save(&state) {
            eprintln!(
                "etcd-setup upgrade: cannot record the upgrade in {}: {e}",
                self.store.run_path().display()
            );
        }
    }
}

fn upgrade(
    settings: &Settings,
    member: &Member,
    paths: &Paths,
    args: &UpgradeArgs,
    record: &mut Recorder<'_>,
) -> Result<String, Failure> {
    let metrics = member.own.metrics;
    let installed = running_version(metrics)?;
    record.record.from = installed.to_string();

    // The new release, exactly as `run` finds and validates one.
    let install_dir = &settings.install_dir;
    beside::recover(install_dir)?;
    if let Ok(n) = crate::road::archive::remove_stale_staging(install_dir) {
        if n > 0 {
            eprintln!(
                "etcd-setup upgrade: removed {n} staging folder(s) left by an interrupted run"
            );
        }
    }
    let wait = Wait {
        archive_path: &settings.archive_path,
        limit: args.iso_wait,
        sys_block: &paths.sys_block,
        dev: &paths.dev,
    };
    let found = discover::wait_for_iso(&wait, |_| {})?;
    let device = found.device.display().to_string();
    let release = source::validate_found(
        found,
        &settings.archive_path,
        install_dir,
        &crate::road::archive::Policy::of(settings),
    )?
    .extracted;
    let new = Version::parse(&release.version).ok_or_else(|| {
        Failure::new(
            ReasonCode::BinaryMissing,
            format!(
                "the release on {device} names no version MAJOR.MINOR.PATCH: {:?}",
                release.version
            ),
        )
    })?;
    record.record.to = new.to_string();
    for line in advisory::gate(&release.version, settings.refuse_known_bad)? {
        eprintln!("etcd-setup upgrade: warning: {line}");
    }
    // What the running release's advisories say about this step (the refusal, if any,
    // is the rule table's).
    for line in advisory::before_step(installed, new) {
        eprintln!("etcd-setup upgrade: note: {line}");
    }
    if rules::versions(installed, new)? == Step::Nothing {
        record.set(
            UpgradePhase::Done,
            &format!("etcd {installed} runs already; nothing to do"),
        );
        return Ok(format!(
            "etcd {installed} is the release on {device}; nothing to do"
        ));
    }

    let node = &member.node;
    let client = node.client(all_client_urls(node));
    let view = surveyed_within_rules(&client, node, installed, new, rules::cluster_before_lock)?;
    record.record.members = versions_of(&view);

    // One member at a time; the leader last. A turn whose lock is lost before etcd is
    // touched (its session ended while the snapshot was taken: a starved member, a
    // lease not kept alive) changed nothing and is taken again, up to LOCK_TRIES times.
    let mut tries = 0;
    let (lock, taken, service) = loop {
        tries += 1;
        record.set(
            UpgradePhase::WaitingForLock,
            &format!("waiting for the cluster lock {LOCK_NAME}"),
        );
        let lock = take_turn(
            &client,
            node,
            installed,
            new,
            args.lock_wait,
            args.leader_wait,
            &mut |turn| match turn {
                Turn::Waiting(view) => {
                    record.record.members = versions_of(view);
                    record.set(
                        UpgradePhase::WaitingForLock,
                        "this member leads; waiting for the other members to upgrade first",
                    );
                }
                Turn::HandingOver => {
                    let what = "handing leadership to another member before the restart";
                    // Said, not only recorded: whoever reads the output (an operator, the
                    // VM test's leader-last check) sees which member led at its own turn.
                    eprintln!("etcd-setup upgrade: {} leads; {what}", node.name);
                    record.set(UpgradePhase::HandingOver, what);
                }
            },
        )?;
        eprintln!(
            "etcd-setup upgrade: {} holds {LOCK_NAME}; upgrading {installed} -> {new}",
            node.name
        );

        record.set(
            UpgradePhase::Snapshot,
            "taking a snapshot before the upgrade",
        );
        // The same verified snapshot as `etcd-setup snapshot`, kept with the others and
        // recorded for status.
        let taken =
            crate::day2::snapshot::take(settings, member, &paths.run_dir, SystemTime::now())
                .map_err(|f| {
                    Failure::new(
                        ReasonCode::UpgradeSnapshotFailed,
                        format!("the snapshot before the upgrade failed: {}", f.message),
                    )
                    .with_source(f)
                })?;
        if let Err(f) = crate::day2::snapshot::record(&paths.state_dir, &taken, settings) {
            eprintln!("etcd-setup upgrade: {}", f.headline());
        }
        let service = Etcd::connect(settings)?;
        // The snapshot took a while: the lock must still be ours before etcd is touched.
        let mut lock = lock;
        match lock.ensure_held() {
            Ok(()) => break (lock, taken, service),
            Err(e) if tries < LOCK_TRIES => eprintln!(
                "etcd-setup upgrade: {e}; nothing was changed: taking the turn again \
                 ({tries} of {LOCK_TRIES})"
            ),
            Err(e) => {
                return Err(Failure::new(
                    ReasonCode::Locked,
                    format!("{e} ({LOCK_TRIES} times); nothing was changed: run the upgrade again"),
                ))
            }
        }
    };
    let snap = PathBuf::from(&taken.taken.file);
    frame::checkpoint()?;
    record.set(
        UpgradePhase::Installing,
        &format!("installing etcd {new} beside {installed}"),
    );
    // From the stop to etcd confirmed (or rolled back) a signal waits.
    let outcome = frame::critical(|| {
        if needs_raft_snapshot(installed, new) {
            record.set(UpgradePhase::Snapshot, RAFT_SNAPSHOT_PROGRESS);
            raft_snapshot(
                &service,
                &client,
                &settings.data_dir,
                metrics,
                installed,
                settings.start_timeout,
            )?;
            record.set(
                UpgradePhase::Installing,
                &format!("installing etcd {new} beside {installed}"),
            );
        }
        swap(
            &service,
            &release,
            install_dir,
            metrics,
            new,
            installed,
            settings.start_timeout,
            &mut |p| record.set(p, p.as_str()),
        )
    });
    let (version, sha256) = (release.version.clone(), release.sha256_hex());
    drop(release);
    if outcome.is_ok() {
        record.installed(&version, sha256);
    }
    let view = survey(&client, node).unwrap_or_default();
    record.record.members = versions_of(&view);
    record.record.cluster_version = health::cluster_version(metrics, health::DAY2_DEADLINE).ok();
    drop(lock);
    outcome?;
    record.set(
        UpgradePhase::Done,
        &format!("etcd {installed} -> {new}; snapshot {}", snap.display()),
    );
    Ok(format!(
        "{} runs etcd {new} (was {installed}); snapshot {}; the old binaries are in {}",
        node.name,
        snap.display(),
        beside::previous_dir(install_dir).display()
    ))
}

/// What [`take_turn`] reports on the way.
pub enum Turn<'a> {
    /// This member leads and lets the lock go while the others (in `view`) upgrade.
    Waiting(&'a [MemberView]),
    /// This member leads and hands leadership on now: its etcd's `/health` may say "no
    /// leader" for a moment, on purpose.
    HandingOver,
}

/// Takes this member's turn: the cluster lock, with the cluster rules asked again under
/// it. The leader goes last: while another member runs the old release it lets the lock
/// go, reports [`Turn::Waiting`] and asks again after 2 s, until `leader_wait` passed. A
/// leader hands leadership to another healthy member before its turn
/// ([`Turn::HandingOver`]).
pub fn take_turn(
    client: &Client,
    node: &Node,
    installed: Version,
    new: Version,
    lock_wait: Duration,
    leader_wait: Duration,
    turn: &mut dyn FnMut(Turn<'_>),
) -> Result<etcd::ClusterLock, Failure> {
    let started = Instant::now();
    // The lock's session lives on the other members: this member's etcd restarts while
    // the lock is held, and a session on it could end with it (then the lease is revoked
    // and the next member would take the lock while this one is still down).
    let others = node.peer_client_urls();
    let locker = if others.is_empty() {
        client.clone()
    } else {
        client.with_endpoints(others)
    };
    loop {
        let lock = locker
            .lock(LOCK_NAME, Duration::from_secs(60), lock_wait)
            .map_err(|e| frame::cluster_lock_failure(LOCK_NAME, lock_wait, e))?;
        let view = surveyed_within_rules(client, node, installed, new, rules::cluster)?;
        if !rules::leader_must_wait(&view, new) {
            // A leader restarting makes the others elect one, and their /health says
            // "no leader" meanwhile: hand leadership on first, as a planned restart should.
            if view.iter().any(|m| m.is_self && m.is_leader) {
                turn(Turn::HandingOver);
                hand_leadership_away(client, &view)?;
            }
            return Ok(lock);
        }
        if started.elapsed() >= leader_wait {
            turn(Turn::HandingOver);
            hand_leadership_away(client, &view)?;
            return Ok(lock);
        }
        lock.release();
        turn(Turn::Waiting(&view));
        // The others' progress is in etcd, which offers no event to await here: ask
        // again shortly.
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The version this member's etcd runs, from `/metrics`: `upgrade-unhealthy` when it
/// does not answer.
fn running_version(metrics: SocketAddr) -> Result<Version, Failure> {
    let text = health::server_version(metrics, health::DAY2_DEADLINE).map_err(|e| {
        Failure::new(
            ReasonCode::UpgradeUnhealthy,
            format!("this member's etcd does not tell its version ({e}); it must run and be healthy before an upgrade"),
        )
    })?;
    Version::parse(&text).ok_or_else(|| {
        Failure::new(
            ReasonCode::UpgradeUnhealthy,
            format!("this member's etcd reports the version {text:?}, not MAJOR.MINOR.PATCH"),
        )
    })
}

/// Every member's client URL from the configuration, this node's first.
fn all_client_urls(node: &Node) -> Vec<String> {
    let mut urls: Vec<String> = node.own_client_url().into_iter().collect();
    urls.extend(node.peer_client_urls());
    urls
}

/// The members, each with its version, health and role, asked all at once: the one
/// survey ([`crate::cluster::lifecycle::survey`]) of the endpoints `client` names.
pub fn survey(client: &Client, node: &Node) -> Result<Vec<MemberView>, Failure> {
    let seen = crate::cluster::lifecycle::survey::survey(node, client.endpoints().to_vec(), &[]);
    if seen.list().is_none() {
        return Err(Failure::new(
            ReasonCode::UpgradeUnhealthy,
            format!(
                "no member answered the member list: {}",
                seen.list_error()
                    .map_or_else(|| "no client URL to ask".to_string(), |e| e.to_string())
            ),
        ));
    }
    Ok(seen.view(node))
}

/// How long a member that accepts connections but answers late is asked again, counted
/// from the end of the first survey that found it late (a survey can itself take 17 s
/// and more: CI's c4 saw the first one pass 30 s, and the refusal came with no second
/// ask).
const LATE_PATIENCE: Duration = Duration::from_secs(60);

/// [`survey`] checked by `rules` ([`rules::cluster`], or before the lock
/// [`rules::cluster_before_lock`]): a member that fails the rules only because
/// it answered late (no status, or a health check that ran out of time, while it
/// accepts connections: a guest starved of CPU while three nodes survey and snapshot at
/// once, as maintain sees too; c4 under TCG saw both others' health time out) is asked
/// again for up to [`LATE_PATIENCE`]; one that refuses connections, or any other rule,
/// fails at once, as before.
fn surveyed_within_rules(
    client: &Client,
    node: &Node,
    installed: Version,
    new: Version,
    rules: fn(&[MemberView], Version, Version) -> Result<(), Failure>,
) -> Result<Vec<MemberView>, Failure> {
    let mut late_since: Option<Instant> = None;
    loop {
        let view = survey(client, node)?;
        let Err(f) = rules(&view, installed, new) else {
            return Ok(view);
        };
        let silent: Vec<&MemberView> = view.iter().filter(|m| m.answered_late()).collect();
        let late = !silent.is_empty()
            && silent
                .iter()
                .all(|m| crate::cluster::health::listens(&m.endpoint));
        let started = *late_since.get_or_insert_with(Instant::now);
        if !late || started.elapsed() >= LATE_PATIENCE {
            return Err(f);
        }
        crate::shared::output::line(&format!(
            "{}; it accepts connections, so it is late, not down: asking again ({:.0} s of {} s)",
            f.message,
            started.elapsed().as_secs_f64(),
            LATE_PATIENCE.as_secs()
        ));
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn versions_of(view: &[MemberView]) -> Vec<String> {
    view.iter()
        .map(|m| {
            format!(
                "{}={}",
                m.name,
                m.version.map_or_else(|| "?".to_string(), |v| v.to_string())
            )
        })
        .collect()
}

/// `move-leader` to another healthy member.
fn hand_leadership_away(client: &Client, view: &[MemberView]) -> Result<(), Failure> {
    let Some(to) = view.iter().find(|m| !m.is_self && m.healthy) else {
        return Ok(());
    };
    client.move_leader(to.id).map_err(|e| {
        Failure::new(
            ReasonCode::UpgradeUnhealthy,
            format!(
                "cannot hand leadership to {} before the upgrade: {e}",
                to.name
            ),
        )
    })
}

/// How etcd is stopped and started: systemd on a node, a child process in host tests.
pub use crate::member::service::Service;

/// The swap itself: stop, keep the old binaries, install the new ones, start, confirm
/// `new` healthy within `wait`; else put `old` back, start and confirm it, and fail with
/// `upgrade-rolled-back` (or `upgrade-rollback-failed` when the old one does not come up
/// either). `phase` is told each step's name.
#[allow(clippy::too_many_arguments)]
pub fn swap(
    service: &dyn Service,
    release: &crate::road::archive::Extracted,
    install_dir: &Path,
    metrics: SocketAddr,
    new: Version,
    old: Version,
    wait: Duration,
    phase: &mut dyn FnMut(UpgradePhase),
) -> Result<(), Failure> {
    service.stop()?;
    // etcd is down from here: every way out starts it again.
    if let Err(f) = beside::keep_previous(install_dir) {
        // Nothing was replaced yet (an older keep, if any, is not this release).
        service.set_release(old);
        let _ = service.start();
        return Err(f);
    }
    if let Err(f) = install::install_binaries(release, install_dir) {
        // Some binaries may be new already: the kept ones go back first.
        let back = beside::rollback(install_dir);
        service.set_release(old);
        let _ = service.start();
        return Err(match back {
            Ok(()) => f,
            Err(b) => Failure::new(
                ReasonCode::UpgradeRollbackFailed,
                format!(
                    "{}; and putting the old binaries back failed: {}",
                    f.headline(),
                    b.headline()
                ),
            ),
        });
    }
    phase(UpgradePhase::Restarting);
    let stopped_at = Instant::now();
    // etcd's environment is rendered for the release started: the new one here, the old
    // one again if it is put back.
    service.set_release(new);
    let up = service.start().and_then(|()| {
        phase(UpgradePhase::Confirming);
        confirm(metrics, new, wait)
    });
    let why = match up {
        Ok(()) => {
            eprintln!(
                "etcd-setup upgrade: etcd {new} healthy {} ms after its start",
                stopped_at.elapsed().as_millis()
            );
            return Ok(());
        }
        Err(f) => f,
    };
    phase(UpgradePhase::RollingBack);
    let _ = service.stop();
    beside::rollback(install_dir)?;
    service.set_release(old);
    let back = service.start().and_then(|()| confirm(metrics, old, wait));
    phase(UpgradePhase::RolledBack);
    match back {
        Ok(()) => Err(Failure::new(
            ReasonCode::UpgradeRolledBack,
            format!(
                "etcd {new} did not come up ({}); etcd {old} was put back and runs healthy{}",
                why.headline(),
                hint_after_rollback(old, new)
            ),
        )),
        Err(again) => Err(Failure::new(
            ReasonCode::UpgradeRollbackFailed,
            format!(
                "etcd {new} did not come up ({}), and etcd {old} put back did not either: {}",
                why.headline(),
                again.headline()
            ),
        )),
    }
}

/// What [`raft_snapshot`] is said to do while it does it.
pub const RAFT_SNAPSHOT_PROGRESS: &str =
    "etcd restarted once with --snapshot-count=1: a raft snapshot before 3.7";

/// Whether the step from `old` to `new` asks [`raft_snapshot`] first: 3.6 -> 3.7.
pub fn needs_raft_snapshot(old: Version, new: Version) -> bool {
    (old.major, old.minor, new.major, new.minor) == (3, 6, 3, 7)
}

/// What 3.7 needs of a 3.6 member before its swap. etcd 3.7.3 panics ("unmarshal should
/// never fail") replaying a WAL entry 3.5 wrote, and a member upgraded from 3.5 keeps such
/// entries after its last raft snapshot until 3.6 takes the next one (every 10,000 applied
/// entries by default; tests/upgrade.rs shows the panic and the remedy). Whether the WAL
/// still holds one is not cheap to tell, and the remedy is a restart: etcd `old` (3.6)
/// is restarted once with `--snapshot-count=1` ([`OneShot::SnapshotEachEntry`], a flag of
/// that start only), confirmed healthy, the cluster applies two entries (a lease granted
/// and revoked through `client`: nothing in the key space), and the step goes on once a
/// new `.snap` file is in `data_dir/member/snap` (within `wait`). On any failure etcd is
/// restarted as before and the upgrade fails with `upgrade-snapshot-failed`, nothing
/// installed.
pub fn raft_snapshot(
    service: &dyn Service,
    client: &Client,
    data_dir: &Path,
    metrics: SocketAddr,
    old: Version,
    wait: Duration,
) -> Result<(), Failure> {
    let snap_dir = data_dir.join("member/snap");
    let snaps = || -> std::collections::BTreeSet<std::ffi::OsString> {
        std::fs::read_dir(&snap_dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name())
                    .filter(|n| n.to_string_lossy().ends_with(".snap"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = snaps();
    let started = Instant::now();
    service.stop()?;
    let taken = service
        .start_once(&[OneShot::SnapshotEachEntry])
        .and_then(|()| confirm(metrics, old, wait))
        .and_then(|()| {
            client
                .lease_grant_and_revoke(Duration::from_secs(10))
                .map_err(|e| Failure::new(ReasonCode::UpgradeSnapshotFailed, e.to_string()))
        })
        .and_then(|()| {
            let end = Instant::now() + wait;
            loop {
                if let Some(new) = snaps().difference(&before).next() {
                    return Ok(new.clone());
                }
                if Instant::now() >= end {
                    return Err(Failure::new(
                        ReasonCode::UpgradeSnapshotFailed,
                        format!(
                            "no new .snap file in {} after {} s",
                            snap_dir.display(),
                            wait.as_secs()
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
    match taken {
        Ok(name) => {
            eprintln!(
                "etcd-setup upgrade: etcd {old} took a raft snapshot ({}) {} ms after its restart with --snapshot-count=1",
                snap_dir.join(name).display(),
                started.elapsed().as_millis()
            );
            Ok(())
        }
        Err(why) => {
            // Started again as before: the once-only flag is gone with that start.
            let again = service
                .stop()
                .and_then(|()| service.start())
                .and_then(|()| confirm(metrics, old, wait));
            Err(Failure::new(
                ReasonCode::UpgradeSnapshotFailed,
                format!(
                    "etcd {old} restarted with --snapshot-count=1 took no raft snapshot, which \
                     etcd 3.7 needs of a member whose WAL may hold entries etcd 3.5 wrote: {}; \
                     nothing was installed, {}",
                    why.message,
                    match again {
                        Ok(()) => format!("etcd {old} runs healthy again"),
                        Err(e) => format!(
                            "and etcd {old} started again is not healthy: {}",
                            e.headline()
                        ),
                    }
                ),
            ))
        }
    }
}

/// What a rolled-back step is known to need. 3.6 -> 3.7: etcd 3.7.3 panics ("unmarshal
/// should never fail") replaying a WAL entry written by 3.5, which a member upgraded from
/// 3.5 keeps until 3.6 takes a raft snapshot (shown in tests/upgrade.rs).
fn hint_after_rollback(old: Version, new: Version) -> &'static str {
    if (old.major, old.minor, new.major, new.minor) == (3, 6, 3, 7) {
        "; if etcd's journal shows \"unmarshal should never fail\", this member's WAL still \
         holds entries etcd 3.5 wrote: start it once with ETCD_SNAPSHOT_COUNT=1 in \
         /etc/etcd-setup/etcd.env, let it apply a write (its member/snap folder gets a \
         .snap file), remove the line, restart etcd, and run the upgrade again"
    } else {
        ""
    }
}

/// Waits up to `wait` until `/health` answers healthy and `/metrics` names `version`
/// ([`service::confirm`]).
pub fn confirm(metrics: SocketAddr, version: Version, wait: Duration) -> Result<(), Failure> {
    service::confirm(metrics, Some(version), wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After an upgrade status names the new release as installed and shows its
    /// advisories, not the old one's (3.5.1's data-safety warning does not linger over
    /// 3.5.33).
    #[test]
    fn an_upgrade_records_the_new_release_and_its_advisories() {
        let mut state = State::begin_at(Phase::Running, SystemTime::now());
        state.etcd_version = Some("3.5.1".into());
        state.sha256 = Some("aa".into());
        state.advisories = advisory::lines("3.5.1");
        assert!(!state.advisories.is_empty());
        record_installed(&mut state, "3.5.33", "bb");
        assert_eq!(state.etcd_version.as_deref(), Some("3.5.33"));
        assert_eq!(state.sha256.as_deref(), Some("bb"));
        assert_eq!(state.advisories, advisory::lines("3.5.33"));
        assert!(state.advisories.is_empty(), "{:?}", state.advisories);
    }
}
