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
//! - `EnableUnitFiles` and `DisableUnitFiles` only make or remove the `[Install]`
//!   symlinks. A unit systemd has loaded starts and stops as before without a reload;
//!   the symlinks count from the next boot (which reads them afresh), and
//!   `GetUnitFileState` (`systemctl is-enabled`) reads them from disk at once. So neither
//!   is followed by a reload here: only a changed unit file needs one. The loaded unit's
//!   `UnitFileState` property (what `systemctl status` shows) is another matter: read when
//!   the unit was loaded and at reloads only ([`Systemd::loaded_enablement`]); `run`
//!   reloads once for it, after etcd is proven, never on the way there.

mod journal;
mod state;

pub use journal::{follow, journal_tail, Follow};
pub use state::{readable, start_failure, JobResult, UnitState, Watched};

use crate::reason::{Failure, ReasonCode};
use futures_lite::StreamExt;
use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};
use zbus::zvariant::{ObjectPath, OwnedObjectPath};

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

    /// Enables `unit` (its `[Install]` symlinks, replacing conflicting ones), for the next
    /// boot; no reload (above).
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
        Ok(())
    }

    /// Disables `unit`, for the next boot; no reload (above). A unit that is not enabled,
    /// or has no unit file, is fine.
    pub fn disable(&self, unit: &str) -> Result<(), Failure> {
        match block_on(self.manager.disable_unit_files(&[unit], false)) {
            Ok(_) => Ok(()),
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

    /// The enablement state systemd holds for the loaded `unit` (its `UnitFileState`
    /// property, what `systemctl status` shows): read from disk when the unit was loaded,
    /// and again only at a reload, so it can lag [`Systemd::is_enabled`].
    pub fn loaded_enablement(&self, unit: &str) -> Result<String, Failure> {
        block_on(async {
            let path = self.manager.load_unit(unit).await?;
            let props = zbus::fdo::PropertiesProxy::builder(&self.conn)
                .destination("org.freedesktop.systemd1")?
                .path(path)?
                .build()
                .await?;
            let v = props
                .get("org.freedesktop.systemd1.Unit".try_into()?, "UnitFileState")
                .await?;
            String::try_from(v).map_err(zbus::Error::from)
        })
        .map_err(|e| refused("report the enablement state of", unit, e))
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

#[cfg(test)]
mod tests;
