//! `etcd_setup::shared::systemd` against a stand-in for systemd on a private `dbus-daemon`: job
//! and signal handling (JobRemoved before the reply, other jobs' signals, bounded waits,
//! PropertiesChanged) and systemd's errors. The stand-in speaks only the subset of
//! `org.freedesktop.systemd1` the module uses; the real systemd is proven by the VM
//! tests. `vm-images/host-setup` installs `dbus-daemon`; without it these tests fail.

use async_io::Timer;
use etcd_setup::reason::ReasonCode;
use etcd_setup::shared::systemd::{JobResult, Systemd, Watched};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use zbus::object_server::SignalEmitter;
use zbus::zvariant::{ObjectPath, OwnedObjectPath};

const UNIT_PATH: &str = "/org/freedesktop/systemd1/unit/etcd_2eservice";
type Changes = Vec<(String, String, String)>;

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
enum SdError {
    #[zbus(error)]
    ZBus(zbus::Error),
    NoSuchUnit(String),
}

/// Start (and stop) jobs: `etcd` done after 100 ms, after another job's signal; `early`
/// done before the reply; `fails` failed; `slow` never ends; other units do not exist.
struct Manager;

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl Manager {
    fn subscribe(&self) {}
    fn reload(&self) {}
    fn load_unit(&self, name: &str) -> Result<OwnedObjectPath, SdError> {
        match name {
            "etcd.service" => Ok(ObjectPath::from_static_str_unchecked(UNIT_PATH).into()),
            _ => Err(SdError::NoSuchUnit(format!("Unit {name} not found."))),
        }
    }
    async fn start_unit(
        &self,
        name: &str,
        _mode: &str,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SdError> {
        let (id, result, after_ms) = match name {
            "etcd.service" => (1, "done", 100),
            "early.service" => (2, "done", 0),
            "fails.service" => (3, "failed", 50),
            "slow.service" => return Ok(ObjectPath::from_static_str_unchecked("/job/4").into()),
            _ => return Err(SdError::NoSuchUnit(format!("Unit {name} not found."))),
        };
        let job: OwnedObjectPath = ObjectPath::try_from(format!("/job/{id}"))
            .map_err(zbus::Error::from)?
            .into();
        if after_ms == 0 {
            Manager::job_removed(&emitter, id, job.as_ref(), name, result).await?;
            return Ok(job);
        }
        let (conn, unit, path) = (emitter.connection().clone(), name.to_string(), job.clone());
        std::thread::spawn(move || {
            async_io::block_on(async {
                Timer::after(Duration::from_millis(after_ms)).await;
                let e = SignalEmitter::new(&conn, "/org/freedesktop/systemd1")?;
                let other = ObjectPath::from_static_str_unchecked("/job/99");
                Manager::job_removed(&e, 99, other, "other.service", "failed").await?;
                Manager::job_removed(&e, id, path.as_ref(), &unit, result).await
            })
        });
        Ok(job)
    }
    async fn stop_unit(
        &self,
        name: &str,
        mode: &str,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SdError> {
        self.start_unit(name, mode, emitter).await
    }
    fn enable_unit_files(&self, files: Vec<String>, _rt: bool, _force: bool) -> (bool, Changes) {
        (files != ["noinstall.service"], vec![])
    }
    fn disable_unit_files(&self, files: Vec<String>, _rt: bool) -> Result<Changes, SdError> {
        Err(SdError::NoSuchUnit(format!(
            "Unit file {} does not exist.",
            files[0]
        )))
    }
    fn get_unit_file_state(&self, file: &str) -> Result<String, SdError> {
        match file {
            "etcd.service" => Ok("enabled".into()),
            _ => Err(SdError::NoSuchUnit(format!(
                "Unit file {file} does not exist."
            ))),
        }
    }
    #[zbus(signal)]
    async fn job_removed(
        e: &SignalEmitter<'_>,
        id: u32,
        job: ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

struct Unit;

#[zbus::interface(name = "org.freedesktop.systemd1.Unit")]
impl Unit {
    #[zbus(property)]
    fn active_state(&self) -> &str {
        "active"
    }
}

struct Service {
    restarts: u32,
}

#[zbus::interface(name = "org.freedesktop.systemd1.Service")]
impl Service {
    #[zbus(property, name = "NRestarts")]
    fn n_restarts(&self) -> u32 {
        self.restarts
    }
}

/// One socket, no service activation: a name nobody owns is `ServiceUnknown`, as on a
/// system bus without systemd.
const BUS_CONFIG: &str = "<busconfig><listen>unix:dir=DIR</listen><auth>EXTERNAL</auth>\
    <policy context=\"default\"><allow send_destination=\"*\"/><allow receive_sender=\"*\"/>\
    <allow own=\"*\"/></policy></busconfig>";

/// A private dbus-daemon, with the stand-in on it if asked; the daemon is killed on drop.
struct Bus {
    daemon: Child,
    _dir: tempfile::TempDir,
    address: String,
    server: zbus::Connection,
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

fn bus(with_systemd: bool) -> Option<Bus> {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bus.conf");
    std::fs::write(&config, BUS_CONFIG.replace("DIR", dir.path().to_str()?)).unwrap();
    let mut daemon = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--nopidfile", "--print-address=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start dbus-daemon ({e}): run vm-images/host-setup"));
    let mut address = String::new();
    let stdout = daemon.stdout.take().unwrap();
    BufReader::new(stdout).read_line(&mut address).unwrap();
    let address = address.trim().to_string();
    let mut builder = zbus::connection::Builder::address(address.as_str()).unwrap();
    if with_systemd {
        builder = builder.name("org.freedesktop.systemd1").unwrap();
        builder = builder
            .serve_at("/org/freedesktop/systemd1", Manager)
            .unwrap();
        builder = builder.serve_at(UNIT_PATH, Unit).unwrap();
        builder = builder
            .serve_at(UNIT_PATH, Service { restarts: 0 })
            .unwrap();
    }
    let server = async_io::block_on(builder.build()).unwrap();
    Some(Bus {
        daemon,
        _dir: dir,
        address,
        server,
    })
}

#[test]
fn start_waits_for_its_own_job_even_when_it_ends_before_the_reply() {
    let Some(bus) = bus(true) else { return };
    let sd = Systemd::connect_address(&bus.address).unwrap();
    let started = Instant::now();
    let r = sd.start("etcd.service", Duration::from_secs(10)).unwrap();
    assert_eq!(r, JobResult::Done);
    assert!(started.elapsed() >= Duration::from_millis(100));
    for (unit, want) in [("early", JobResult::Done), ("fails", JobResult::Failed)] {
        let r = sd.start(&format!("{unit}.service"), Duration::from_secs(10));
        assert_eq!(r.unwrap(), want, "{unit}");
    }
    sd.stop("etcd.service", Duration::from_secs(10)).unwrap();
}

#[test]
fn waits_end_at_the_timeout_with_the_job_still_running() {
    let Some(bus) = bus(true) else { return };
    let sd = Systemd::connect_address(&bus.address).unwrap();
    let started = Instant::now();
    let r = sd.start("slow.service", Duration::from_millis(300));
    assert_eq!(r.unwrap(), JobResult::StillRunning);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(5));
    let err = sd
        .stop("slow.service", Duration::from_millis(200))
        .unwrap_err();
    let want = "systemd-failed: slow.service did not stop within 200ms";
    assert_eq!(err.headline(), want);
}

#[test]
fn unknown_units_fail_to_start_but_need_no_stop_or_disable() {
    let Some(bus) = bus(true) else { return };
    let sd = Systemd::connect_address(&bus.address).unwrap();
    let err = sd
        .start("nope.service", Duration::from_secs(5))
        .unwrap_err();
    assert_eq!(err.code, ReasonCode::SystemdFailed);
    let want = "systemd could not start nope.service: Unit nope.service not found. \
                (org.freedesktop.systemd1.NoSuchUnit)";
    assert_eq!(err.message, want);
    sd.stop("nope.service", Duration::from_secs(5)).unwrap();
    sd.disable("nope.service").unwrap();
    assert_eq!(sd.is_enabled("nope.service").unwrap(), "not-found");
    assert_eq!(sd.is_enabled("etcd.service").unwrap(), "enabled");
    sd.enable("etcd.service").unwrap();
    let err = sd.enable("noinstall.service").unwrap_err();
    assert!(err.message.contains("no [Install] section"), "{err}");
}

#[test]
fn watch_follows_property_changes_and_reads_again_at_the_deadline() {
    let Some(bus) = bus(true) else { return };
    let sd = Systemd::connect_address(&bus.address).unwrap();
    let state = sd.unit_state("etcd.service").unwrap();
    assert_eq!(
        (state.active_state.as_str(), state.n_restarts),
        ("active", 0)
    );

    let server = bus.server.clone();
    let crash_loop = std::thread::spawn(move || {
        async_io::block_on(async {
            let iface = server.object_server().interface::<_, Service>(UNIT_PATH);
            let iface = iface.await?;
            for _ in 0..2 {
                Timer::after(Duration::from_millis(100)).await;
                iface.get_mut().await.restarts += 1;
                let emitter = iface.signal_emitter();
                iface.get().await.n_restarts_changed(emitter).await?;
            }
            zbus::Result::Ok(())
        })
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = sd.watch_until("etcd.service", deadline, |s| s.n_restarts >= 2);
    let early = Instant::now() < deadline - Duration::from_secs(5);
    assert!(early, "woke at the deadline, not at the signal");
    crash_loop.join().unwrap().unwrap();
    assert!(matches!(seen, Ok(Watched::Matched(s)) if s.n_restarts == 2 && s.is_active()));

    let deadline = Instant::now() + Duration::from_millis(200);
    let steady = sd.watch_until("etcd.service", deadline, |s| s.n_restarts > 2);
    assert!(matches!(steady, Ok(Watched::DeadlineReached(s)) if s.n_restarts == 2));
}

#[test]
fn connect_without_systemd_on_the_bus_says_it_cannot_reach_it() {
    let Some(bus) = bus(false) else { return };
    let Err(err) = Systemd::connect_address(&bus.address) else {
        panic!("connected to a bus without systemd")
    };
    assert_eq!(err.code, ReasonCode::SystemdFailed);
    let want = format!("cannot reach systemd on the bus {}: ", bus.address);
    assert!(err.message.starts_with(&want), "{err}");
    assert!(err.message.contains("ServiceUnknown"), "{err}");
}
