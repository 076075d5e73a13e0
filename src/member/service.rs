//! etcd.service, controlled: the one home of stopping, starting and confirming etcd, for
//! `run`, `upgrade`, `restore`, `rotate-ca` and `leave`.
//!
//! - **Stop** waits [`STOP_TIMEOUT`] for the stop job: systemd's own `TimeoutStopSec=`
//!   default (90 s; the unit sets none) kills a stuck etcd before that, so the job ends
//!   and the answer is systemd's, not ours. There is no configuration key for it.
//! - **Start** renders etcd's environment file from the settings at every start
//!   ([`Etcd::start`]) and points the unit's `ExecStart=` link ([`unit::ETCD_LINK`]) at
//!   `install.dir/etcd`, clears the unit's failed state and start-limit count (a unit that
//!   failed earlier would be refused at once), and waits for the start job for
//!   `etcd.start_timeout` (the packaged unit has no start timeout of its own; a job still
//!   pending then is stopped by the caller's way out). The unit is the package's, loaded
//!   by systemd since boot: no start reloads systemd, except once on a node whose older
//!   agent rendered its own unit into `/etc/systemd/system` ([`Etcd::retire_legacy_unit`]).
//!   One failure mapping for everyone: a job
//!   that ends in anything but `done` is [`systemd::start_failure`]'s (`etcd-start-failed`
//!   when etcd itself failed or timed out: the operator reads etcd's journal;
//!   `systemd-failed` when systemd refused or canceled the job); a job still running at
//!   the deadline is `etcd-start-failed`. With peer TLS, etcd's journal is followed
//!   during the wait ([`refusal`]): a peer refusing the handshake for 5 s stops the start
//!   at once as `etcd-tls-refused`, naming the peer and etcd's words.
//! - **Confirm** ([`confirm`]): `/health` healthy and, when asked, `/metrics` naming the
//!   expected version, over the loopback metrics listener.
//!
//! **One-shot start flags** ([`OneShot`]: `--force-new-cluster` for `restore`,
//! `--snapshot-count=1` for `upgrade`'s 3.6 -> 3.7 step)
//! never go into the persistent environment file ([`unit::ENV_FILE`]), which every start
//! rewrites from the settings anyway. They go into a runtime file, [`unit::ONCE_ENV_FILE`]
//! in `/run/etcd-setup` (tmpfs: gone at reboot), which etcd.service reads with
//! `EnvironmentFile=-` and removes itself once the start it was for is over
//! (`ExecStartPost=` after READY, `ExecStopPost=` when that start failed), so neither a
//! `Restart=` after a crash nor a later `systemctl start` sees it. Besides, the controller
//! removes it when the start returns whatever its outcome, on a signal before the process
//! exits ([`crate::shared::signals`]), and before every start that has no flag of its
//! own. A crash cannot leave the flag for a later start through etcd-setup; a `kill -9`
//! between writing it and queueing the start job leaves it for the next manual `systemctl
//! start` of that boot only, on the data the restore had just put in place.
//!
//! [`Service`] is what swaps, restores and tests need of etcd: a stop and a start. On a node
//! it is [`Etcd`]; `restore --no-systemd` is [`ByCaller`]; host tests run etcd as a child.

use crate::cluster::health::{self, Health};
use crate::member::unit::{self, Membership, ETCD_UNIT};
use crate::reason::{Failure, ReasonCode};
use crate::shared::advisory::Version;
use crate::shared::config::Settings;
use crate::shared::report::atomic_write;
use crate::shared::systemd::{self, JobResult, Systemd};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long a stop job may take: systemd's default `TimeoutStopSec=` (90 s) plus a margin.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(120);

/// How often a start's wait reports its progress (`tick`).
const TICK: Duration = Duration::from_secs(5);

/// What the wait for a start hears: the start job's end, or a line etcd logged.
enum Waited {
    Job(Result<JobResult, Failure>),
    Line(String),
}

/// A flag for one start of etcd only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneShot {
    /// `--force-new-cluster`: the restored data becomes a one-member cluster.
    ForceNewCluster,
    /// `--snapshot-count=1`: a raft snapshot at the next applied entry (`upgrade`'s step
    /// from 3.6 to 3.7, whose etcd cannot replay the WAL entries 3.5 wrote).
    SnapshotEachEntry,
}

impl OneShot {
    fn line(self) -> &'static str {
        match self {
            OneShot::ForceNewCluster => "ETCD_FORCE_NEW_CLUSTER=\"true\"",
            OneShot::SnapshotEachEntry => "ETCD_SNAPSHOT_COUNT=\"1\"",
        }
    }
}

/// What stops and starts etcd.
pub trait Service {
    /// Stops etcd; returns once it is stopped.
    fn stop(&self) -> Result<(), Failure>;
    /// Starts etcd and waits for the start to end (not for health).
    fn start(&self) -> Result<(), Failure>;
    /// Starts etcd once with `flags`. A double that starts etcd by other means (a child
    /// process, the caller) gives the flags itself; the default ignores them.
    fn start_once(&self, flags: &[OneShot]) -> Result<(), Failure> {
        let _ = flags;
        self.start()
    }
    /// The etcd release the next start runs (`upgrade` before starting the new binaries
    /// and again before starting the old ones put back): its environment is rendered for
    /// that release ([`unit::FLAGS_BY_RELEASE`]). The default ignores it.
    fn set_release(&self, release: Version) {
        let _ = release;
    }
}

/// The caller stops and starts etcd itself (`restore --no-systemd`).
pub struct ByCaller;

impl Service for ByCaller {
    fn stop(&self) -> Result<(), Failure> {
        Ok(())
    }
    fn start(&self) -> Result<(), Failure> {
        Ok(())
    }
}

/// A [`Service`] whose stop holds signals until etcd is started again (or the value
/// drops): what lies between (a swap of binaries or data) is not cut by a signal. `hold`
/// is the frame's (`crate::day2::frame::hold`).
pub struct HeldBetween<'a, H> {
    inner: &'a dyn Service,
    hold: fn() -> H,
    held: std::cell::RefCell<Option<H>>,
}

impl<'a, H> HeldBetween<'a, H> {
    /// `inner`, with `hold` taken at its stop.
    pub fn new(inner: &'a dyn Service, hold: fn() -> H) -> Self {
        HeldBetween {
            inner,
            hold,
            held: std::cell::RefCell::new(None),
        }
    }
}

impl<H> Service for HeldBetween<'_, H> {
    fn stop(&self) -> Result<(), Failure> {
        self.held.borrow_mut().get_or_insert_with(self.hold);
        self.inner.stop()
    }
    fn start(&self) -> Result<(), Failure> {
        self.start_once(&[])
    }
    fn start_once(&self, flags: &[OneShot]) -> Result<(), Failure> {
        let r = self.inner.start_once(flags);
        self.held.borrow_mut().take();
        r
    }
    fn set_release(&self, release: Version) {
        self.inner.set_release(release);
    }
}

/// What a start writes for the unit: the persistent environment file every start
/// rewrites, the runtime file of one start's flags, and the link the unit starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvFiles {
    /// [`unit::ENV_FILE`] on a node.
    pub env: PathBuf,
    /// [`unit::ONCE_ENV_FILE`] on a node.
    pub once: PathBuf,
    /// [`unit::ETCD_LINK`] on a node: made to point at `install.dir/etcd`.
    pub link: PathBuf,
}

impl EnvFiles {
    /// The node's.
    pub fn system() -> EnvFiles {
        EnvFiles {
            env: PathBuf::from(unit::ENV_FILE),
            once: PathBuf::from(unit::ONCE_ENV_FILE),
            link: PathBuf::from(unit::ETCD_LINK),
        }
    }
}

/// The membership a start writes into etcd's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Members {
    /// As given (the configuration's, or the one a join prepared).
    Set(Membership),
    /// As the environment file says now (a member with its data, whose start ignores
    /// them; a join's membership is kept), else the configuration's.
    Keep,
}

/// The one-shot file of a start, removed when dropped, and on a signal before exit.
#[must_use]
pub struct OnceFile {
    path: Option<PathBuf>,
    _cleanup: Option<crate::shared::signals::Cleanup>,
}

impl Drop for OnceFile {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Prepares a start: etcd's environment file rendered from `settings` (with `members`),
/// the unit's link pointed at `install.dir/etcd`, any one-shot file left by an earlier
/// start removed, and `flags`, if any, written to the one-shot file. Everything is written
/// atomically, root's, not writable by others.
pub fn prepare(
    settings: &Settings,
    files: &EnvFiles,
    members: &Members,
    flags: &[OneShot],
) -> Result<OnceFile, Failure> {
    prepare_for(settings, files, members, flags, None)
}

/// [`prepare`] for the etcd release about to start: the environment's release-dependent
/// flags are that release's; `None` keeps the release the current environment file names
/// (the same binaries starting again), else the flags every release before 3.6 takes.
pub fn prepare_for(
    settings: &Settings,
    files: &EnvFiles,
    members: &Members,
    flags: &[OneShot],
    release: Option<Version>,
) -> Result<OnceFile, Failure> {
    // A flag nobody removed is not this start's.
    match std::fs::remove_file(&files.once) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Failure::io(&files.once, "cannot remove", e)),
    }
    let current = std::fs::read_to_string(&files.env).ok();
    let membership = match members {
        Members::Set(m) => m.clone(),
        Members::Keep => current
            .as_deref()
            .and_then(Membership::from_env)
            .unwrap_or_else(|| Membership::configured(settings)),
    };
    let release = release
        .or_else(|| current.as_deref().and_then(unit::release_of_env))
        .or_else(|| installed_release(&settings.install_dir.join("etcd")));
    write_root_file(
        &files.env,
        &unit::render_env_for(settings, &membership, release),
        0o644,
    )?;
    point_link(&files.link, &settings.install_dir.join("etcd"))?;
    if flags.is_empty() {
        return Ok(OnceFile {
            path: None,
            _cleanup: None,
        });
    }
    let cleanup = crate::shared::signals::Cleanup::remove_file(&files.once);
    let mut text = String::from(
        "# One start of etcd only, written by etcd-setup; etcd.service removes it after\n\
         # that start (ExecStartPost=, ExecStopPost=), etcd-setup when the start returns.\n",
    );
    for f in flags {
        text.push_str(f.line());
        text.push('\n');
    }
    let once = OnceFile {
        path: Some(files.once.clone()),
        _cleanup: Some(cleanup),
    };
    write_root_file(&files.once, &text, 0o600)?;
    crate::shared::signals::test_crash_point("once-written");
    Ok(once)
}

fn write_root_file(path: &Path, text: &str, mode: u32) -> Result<(), Failure> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(|e| Failure::io(parent, "cannot create", e))?;
    }
    let owner = nix::unistd::geteuid().is_root().then_some((0, 0));
    atomic_write(path, text.as_bytes(), mode, owner)
        .map_err(|e| Failure::io(path, "cannot write", e))
}

/// Makes `link` a symbolic link to `target` unless it is one already: a new link beside
/// it, renamed over it (never a half-made link), the folder synced. Whatever was at
/// `link` is replaced, not followed.
pub fn point_link(link: &Path, target: &Path) -> Result<(), Failure> {
    if std::fs::read_link(link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    let parent = link
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Failure::io(parent, "cannot create", e))?;
    let name = link
        .file_name()
        .map_or_else(|| "etcd".into(), |n| n.to_string_lossy().into_owned());
    let staged = parent.join(format!(".{name}.new-{}", std::process::id()));
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(target, &staged)
        .map_err(|e| Failure::io(&staged, "cannot create", e))?;
    if let Err(e) = std::fs::rename(&staged, link) {
        let _ = std::fs::remove_file(&staged);
        return Err(Failure::io(link, "cannot replace", e));
    }
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| Failure::io(parent, "cannot sync", e))
}

/// etcd.service through systemd.
pub struct Etcd {
    sd: Arc<Systemd>,
    settings: Settings,
    files: EnvFiles,
    /// The release the next start runs, when the caller knows it ([`Service::set_release`]).
    release: std::sync::Mutex<Option<Version>>,
}

impl Etcd {
    /// Connects to systemd on the system bus.
    pub fn connect(settings: &Settings) -> Result<Etcd, Failure> {
        Ok(Etcd::with(
            Arc::new(Systemd::connect()?),
            settings,
            EnvFiles::system(),
        ))
    }

    /// Over the connection `sd`, with etcd's environment in `files`.
    pub fn with(sd: Arc<Systemd>, settings: &Settings, files: EnvFiles) -> Etcd {
        Etcd {
            sd,
            settings: settings.clone(),
            files,
            release: std::sync::Mutex::new(None),
        }
    }

    /// The connection, for what only `run` asks (the unit's state, the settle watch).
    pub fn systemd(&self) -> &Arc<Systemd> {
        &self.sd
    }

    /// Whether systemd knows etcd.service (its unit file is loaded or loadable).
    pub fn unit_present(&self) -> Result<bool, Failure> {
        Ok(self.sd.unit_state(ETCD_UNIT)?.load_state != "not-found")
    }

    /// Enables etcd.service for the next boot, without a reload (the unit is loaded).
    pub fn enable(&self) -> Result<(), Failure> {
        self.sd.enable(ETCD_UNIT)
    }

    /// Disables etcd.service; one not enabled is fine.
    pub fn disable(&self) -> Result<(), Failure> {
        self.sd.disable(ETCD_UNIT)
    }

    /// Stops etcd and waits up to [`STOP_TIMEOUT`].
    pub fn stop_unit(&self) -> Result<(), Failure> {
        self.sd.stop(ETCD_UNIT, STOP_TIMEOUT)
    }

    /// Disables and stops etcd ([`off`]).
    pub fn off(&self) -> Result<(), Failure> {
        off(&self.sd)
    }

    /// Starts etcd: an older agent's unit retired ([`Etcd::retire_legacy_unit`]), its
    /// environment rendered with `members`, `flags` for this start only, the failed state
    /// cleared, the start job followed up to `etcd.start_timeout`; `tick` is called every
    /// 5 s of the wait with the time waited.
    pub fn start_with(
        &self,
        members: &Members,
        flags: &[OneShot],
        tick: &mut dyn FnMut(Duration),
    ) -> Result<(), Failure> {
        self.retire_legacy_unit()?;
        let release = self.release.lock().map_or(None, |r| *r);
        let once = prepare_for(&self.settings, &self.files, members, flags, release)?;
        // A unit that hit its start limit in an earlier run would refuse to start at once.
        self.sd.reset_failed(ETCD_UNIT)?;
        let limit = self.settings.start_timeout;
        let (tx, rx) = mpsc::channel();
        // With peer TLS, etcd's own log is followed while the start waits: a peer that
        // refuses the handshake again and again fails the start now (refusal.rs), not
        // after the start timeout.
        let mut watch = self.settings.tls.peer.is_some().then(|| {
            let peers: Vec<(String, String)> = self
                .settings
                .initial_cluster
                .iter()
                .filter(|(name, _)| *name != self.settings.node_name)
                .cloned()
                .collect();
            refusal::Watch::new(&peers, &self.settings.cluster_token)
        });
        let journal = watch.as_ref().and_then(|_| {
            let lines = tx.clone();
            systemd::follow(ETCD_UNIT, std::time::SystemTime::now(), move |line| {
                lines.send(Waited::Line(line)).is_ok()
            })
        });
        let starter = Arc::clone(&self.sd);
        std::thread::spawn(move || {
            let _ = tx.send(Waited::Job(starter.start(ETCD_UNIT, limit)));
        });
        let started = Instant::now();
        let mut next_tick = started + TICK;
        let job = loop {
            match rx.recv_timeout(next_tick.saturating_duration_since(Instant::now())) {
                Ok(Waited::Job(result)) => break result,
                Ok(Waited::Line(line)) => {
                    let refused = watch
                        .as_mut()
                        .and_then(|w| w.observe(&line, Instant::now()));
                    if let Some(failure) = refused {
                        drop(journal);
                        drop(once);
                        return Err(self.stop_refused(failure));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    next_tick += TICK;
                    tick(started.elapsed());
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(Failure::new(
                        ReasonCode::InternalError,
                        "the thread waiting for etcd's start job ended without an answer",
                    ))
                }
            }
        };
        drop(journal);
        // Whatever the start did, the next one must not see this one's flags.
        drop(once);
        self.job_outcome(job?, limit)
    }

    /// A start a peer's TLS refusals failed: its job is canceled by stopping the unit
    /// (the caller disables it, as after any failed start); `failure` with the journal.
    fn stop_refused(&self, failure: Failure) -> Failure {
        let stopped = self.sd.stop(ETCD_UNIT, STOP_TIMEOUT);
        let journal = systemd::journal_tail(ETCD_UNIT, 15);
        let mut detail = format!(
            "last journal lines of etcd.service:\n{}",
            journal.join("\n")
        );
        if let Err(f) = stopped {
            detail = format!("stopping etcd.service failed: {}\n{detail}", f.message);
        }
        failure.with_source(anyhow::anyhow!(detail))
    }

    /// A node set up by an agent that rendered its own etcd.service into
    /// [`unit::LEGACY_UNIT_FILE`] (which overrides the package's): that file is moved
    /// aside once (`etcd.service.replaced-<unix time>` beside it, which systemd does not
    /// load) and systemd reloaded, the one reload a start may cost, so the package's unit
    /// is the one that starts. Its enablement, a link to the file moved aside, is made
    /// again for the package's unit (also on the start after one killed in between). A
    /// unit there that no agent wrote is the operator's and left alone.
    pub fn retire_legacy_unit(&self) -> Result<(), Failure> {
        let legacy = Path::new(unit::LEGACY_UNIT_FILE);
        let wants = legacy.with_file_name("multi-user.target.wants/etcd.service");
        let ours = std::fs::symlink_metadata(legacy).is_ok_and(|m| m.is_file())
            && std::fs::read_to_string(legacy)
                .is_ok_and(|t| t.starts_with(unit::LEGACY_UNIT_HEADER));
        let mut moved = None;
        if ours {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let aside = legacy.with_file_name(format!("etcd.service.replaced-{now}"));
            std::fs::rename(legacy, &aside).map_err(|e| Failure::io(legacy, "cannot move", e))?;
            if let Some(dir) = legacy.parent() {
                let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
            }
            moved = Some(aside);
        }
        // Enabled, but for a unit file that is gone: enabled again for the package's.
        // systemd's enable keeps a link of the unit's name that points elsewhere (seen on
        // bookworm's 252, force or not), so the dangling link goes first. Before the
        // reload, which then reads the unit and its enablement as they stay.
        let dangling = std::fs::symlink_metadata(&wants).is_ok_and(|m| m.file_type().is_symlink())
            && std::fs::metadata(&wants).is_err();
        if dangling {
            match std::fs::remove_file(&wants) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Failure::io(&wants, "cannot remove", e)),
            }
            self.sd.enable(ETCD_UNIT)?;
        }
        if let Some(aside) = moved {
            self.sd.reload()?;
            eprintln!(
                "<5>moved {} (written by an older etcd-setup) aside to {} and reloaded systemd once: etcd runs from the package's {}",
                legacy.display(),
                aside.display(),
                unit::PACKAGED_UNIT_FILE
            );
        }
        Ok(())
    }

    fn job_outcome(&self, job: JobResult, limit: Duration) -> Result<(), Failure> {
        match job {
            JobResult::Done => Ok(()),
            JobResult::StillRunning => {
                let peers = self.settings.initial_cluster.len().saturating_sub(1);
                let journal = systemd::journal_tail(ETCD_UNIT, 15);
                Err(Failure::new(
                    ReasonCode::EtcdStartFailed,
                    format!(
                        "etcd.service was not ready {} s after its start (no quorum with its {peers} peer(s)?); check that the other members booted and can reach this node",
                        limit.as_secs()
                    ),
                )
                .with_source(anyhow::anyhow!(
                    "last journal lines of etcd.service:\n{}",
                    journal.join("\n")
                )))
            }
            other => {
                let state = self.sd.unit_state(ETCD_UNIT).unwrap_or_default();
                let journal = systemd::journal_tail(ETCD_UNIT, 15);
                Err(
                    systemd::start_failure(ETCD_UNIT, &other, &state, &journal).unwrap_or_else(
                        || {
                            Failure::new(
                                ReasonCode::EtcdStartFailed,
                                format!("etcd.service start ended with {other:?}"),
                            )
                        },
                    ),
                )
            }
        }
    }
}

impl Service for Etcd {
    fn stop(&self) -> Result<(), Failure> {
        self.stop_unit()
    }

    fn start(&self) -> Result<(), Failure> {
        self.start_once(&[])
    }

    fn start_once(&self, flags: &[OneShot]) -> Result<(), Failure> {
        let members = if flags.contains(&OneShot::ForceNewCluster) {
            // The restored data carries the configured cluster's ID.
            Members::Set(Membership::configured(&self.settings))
        } else {
            Members::Keep
        };
        self.start_with(&members, flags, &mut |_| {})
    }

    fn set_release(&self, release: Version) {
        if let Ok(mut r) = self.release.lock() {
            *r = Some(release);
        }
    }
}

/// Disables and stops etcd over `sd`, waiting up to [`STOP_TIMEOUT`] (for what needs no
/// settings: `run`'s way out after a failure, a signal or a panic).
pub fn off(sd: &Systemd) -> Result<(), Failure> {
    sd.disable(ETCD_UNIT)?;
    sd.stop(ETCD_UNIT, STOP_TIMEOUT)
}

/// Waits up to `wait` until `/health` at `metrics` answers healthy and, with `version`,
/// `/metrics` names that version: `etcd-unhealthy` naming the last answer when not.
pub fn confirm(
    metrics: SocketAddr,
    version: Option<Version>,
    wait: Duration,
) -> Result<(), Failure> {
    let end = Instant::now() + wait;
    loop {
        let health = health::check(metrics, Duration::from_secs(2));
        let last = match (&health, version) {
            (Health::Healthy, None) => return Ok(()),
            (Health::Healthy, Some(version)) => {
                match health::server_version(metrics, Duration::from_secs(2)) {
                    Ok(v) if Version::parse(&v) == Some(version) => return Ok(()),
                    Ok(v) => format!("it runs {v}, not {version}"),
                    Err(e) => e,
                }
            }
            _ => format!("{health:?}"),
        };
        if Instant::now() >= end {
            return Err(Failure::new(
                ReasonCode::EtcdUnhealthy,
                match version {
                    Some(version) => format!(
                        "etcd {version} was not healthy at http://{metrics} within {} s: {last}",
                        wait.as_secs()
                    ),
                    None => format!(
                        "etcd.service is active but http://{metrics}/health did not answer healthy within {} s: {last}",
                        wait.as_secs()
                    ),
                },
            ));
        }
        // etcd's health has no event to await: ask again shortly.
        std::thread::sleep(Duration::from_millis(if version.is_some() {
            200
        } else {
            100
        }));
    }
}

pub mod refusal;

#[cfg(test)]
mod tests;

/// The release of the etcd binary at `etcd` (`etcd --version`, bounded), for a start whose
/// caller does not know it and whose environment file does not say (one written before
/// the file named its release). Unknown, the environment would be rendered with 3.5's
/// `ETCD_EXPERIMENTAL_*` corruption checks, which 3.7 only logs as unrecognized and then
/// runs without either check.
pub fn installed_release(etcd: &Path) -> Option<Version> {
    let mut cmd = std::process::Command::new(etcd);
    cmd.arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out =
        crate::cluster::etcd::command::run(cmd, Duration::from_secs(10), "etcd --version", &[])
            .ok()?;
    if !out.status.success() {
        return None;
    }
    release_in_version_output(&String::from_utf8_lossy(&out.stdout))
}

/// The release `etcd --version` names (`etcd Version: 3.6.16`).
fn release_in_version_output(text: &str) -> Option<Version> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("etcd Version:"))
        .and_then(|v| Version::parse(v.trim()))
}

#[cfg(test)]
mod release_tests {
    use super::*;

    #[test]
    fn the_release_is_read_from_etcd_version_output() {
        let out = "etcd Version: 3.7.3\nGit SHA: module-build\nGo Version: go1.26.8\nGo OS/Arch: linux/amd64\n";
        assert_eq!(release_in_version_output(out), Some(Version::new(3, 7, 3)));
        assert_eq!(release_in_version_output("etcdctl version: 3.5.1\n"), None);
        assert_eq!(release_in_version_output(""), None);
    }

    #[test]
    fn an_etcd_that_cannot_run_has_no_release() {
        assert_eq!(installed_release(Path::new("/nonexistent/etcd")), None);
    }
}
