//! The day-2 keys: etcd's space quota and Prometheus listener (`[etcd]`), snapshots
//! (`[snapshot]`) and defragmentation (`[maintain]`), checked into [`DataSettings`].

use super::raw::{RawMaintain, RawSnapshot};
use super::values::{Checked, Checker};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Value;

/// etcd's own default quota (2 GiB), written out so the node states what it runs with.
pub const DEFAULT_QUOTA: u64 = 2 << 30;
/// etcd's recommended maximum quota (8 GiB); more is refused here.
pub const MAX_QUOTA: u64 = 8 << 30;
/// The smallest quota taken (16 MiB). etcd documents no minimum, but a request may be
/// 1.5 MiB (`--max-request-bytes`); below about ten of them a few writes raise NOSPACE,
/// and compaction and defragmentation have no room left to bring space back.
pub const MIN_QUOTA: u64 = 16 << 20;
/// The shortest `snapshot.timeout` and `maintain.defrag_timeout` (10 s): less fails a
/// healthy member's save or defragmentation on its first slow disk write.
pub const MIN_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest `maintain.lock_wait` (1 s).
pub const MIN_LOCK_WAIT: Duration = Duration::from_secs(1);
/// Folders no snapshot goes into, nor under: the system's own, the ones gone at reboot,
/// and the ones anyone may write.
pub const SYSTEM_DIRS: &[&str] = &[
    "/etc", "/proc", "/sys", "/dev", "/run", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib32",
    "/lib64", "/tmp", "/var/tmp",
];
/// Folders that are no snapshot folder themselves (a folder of its own inside is fine).
pub const SHARED_DIRS: &[&str] = &[
    "/var", "/var/lib", "/opt", "/home", "/root", "/srv", "/mnt", "/media",
];
/// `snapshot.dir` when not given.
pub const DEFAULT_SNAPSHOT_DIR: &str = "/var/lib/etcd-setup/snapshots";
/// `snapshot.retain` when not given (k3s keeps 5 as well).
pub const DEFAULT_RETAIN: u64 = 5;
/// `snapshot.pruned_retain` when not given: `pruned/` holds at most as many of this
/// member's snapshots as the folder keeps, so it never holds more than the kept ones do.
pub const DEFAULT_PRUNED_RETAIN: u64 = DEFAULT_RETAIN;
/// `snapshot.pruned_max_age` when not given: a week.
pub const DEFAULT_PRUNED_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// `[snapshot]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSettings {
    /// `snapshot.dir`: where snapshots are written.
    pub dir: PathBuf,
    /// `snapshot.copy_dir`: a second folder that gets the same file (e.g. a mount).
    pub copy_dir: Option<PathBuf>,
    /// `snapshot.retain`: how many snapshots are kept in each folder.
    pub retain: u64,
    /// `snapshot.pruned_retain`: how many of the snapshots moved into `pruned/` stay there.
    pub pruned_retain: u64,
    /// `snapshot.pruned_max_age`: a snapshot in `pruned/` older than this is deleted.
    pub pruned_max_age: Duration,
    /// `snapshot.timeout`: the longest snapshot save.
    pub timeout: Duration,
    /// `snapshot.stale_after`: a last snapshot older than this is a warning in status.
    pub stale_after: Duration,
}

/// `[maintain]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintainSettings {
    /// `maintain.min_db_size`: a smaller database is never defragmented.
    pub min_db_size: u64,
    /// `maintain.min_fragmented_percent`: the share of the file not in use, in percent,
    /// from which a member is defragmented.
    pub min_fragmented_percent: u64,
    /// `maintain.defrag_timeout`: the longest defragmentation of one member.
    pub defrag_timeout: Duration,
    /// `maintain.lock_wait`: how long to wait for another node's maintenance.
    pub lock_wait: Duration,
}

/// Everything that keeps etcd well after its first start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataSettings {
    /// `etcd.quota_backend_bytes`: etcd's space quota (NOSPACE beyond it).
    pub quota_backend_bytes: u64,
    /// `etcd.prometheus_port`: `/metrics` on the node IP for Prometheus; off when `None`.
    pub prometheus_port: Option<u16>,
    /// `[snapshot]`.
    pub snapshot: SnapshotSettings,
    /// `[maintain]`.
    pub maintain: MaintainSettings,
}

impl Checker<'_> {
    /// The day-2 keys: `etcd.quota_backend_bytes` and `etcd.prometheus_port` (`etcd`),
    /// `snapshot` and `maintain`; `ports` are the other ports
    /// (name, value), which the Prometheus port must differ from.
    pub(super) fn data(
        &self,
        (quota, prometheus): (Option<Value>, Option<Value>),
        snapshot: RawSnapshot,
        maintain: RawMaintain,
        ports: &[(&str, u16)],
    ) -> Checked<DataSettings> {
        let quota_backend_bytes = self.size("etcd.quota_backend_bytes", quota, DEFAULT_QUOTA)?;
        if quota_backend_bytes < MIN_QUOTA {
            return Err(self.err(
                "etcd.quota_backend_bytes",
                format_args!(
                    "{quota_backend_bytes} bytes is less than the 16 MiB floor: etcd takes \
                     requests of up to 1.5 MiB, and a smaller quota raises NOSPACE after a \
                     few writes with no room left to recover"
                ),
            ));
        }
        if quota_backend_bytes > MAX_QUOTA {
            return Err(self.err(
                "etcd.quota_backend_bytes",
                format_args!(
                    "{quota_backend_bytes} bytes is more than the 8 GiB etcd recommends at most"
                ),
            ));
        }
        let prometheus_port = match prometheus {
            None => None,
            v => Some(self.port("etcd.prometheus_port", v, 0)?),
        };
        if let Some(p) = prometheus_port {
            if let Some((other, _)) = ports.iter().find(|(_, q)| *q == p) {
                return Err(self.err(
                    "etcd.prometheus_port",
                    format_args!("{p} is also {other}; each port is distinct"),
                ));
            }
        }

        let dir = match self.string("snapshot.dir", snapshot.dir)? {
            Some(s) => self.dir_path("snapshot.dir", &s)?,
            None => PathBuf::from(DEFAULT_SNAPSHOT_DIR),
        };
        let copy_dir = match self.string("snapshot.copy_dir", snapshot.copy_dir)? {
            Some(s) => Some(self.dir_path("snapshot.copy_dir", &s)?),
            None => None,
        };
        if copy_dir.as_ref() == Some(&dir) {
            return Err(self.err(
                "snapshot.copy_dir",
                "is snapshot.dir itself; a copy belongs elsewhere (another disk or mount)",
            ));
        }
        let retain = self.count("snapshot.retain", snapshot.retain, DEFAULT_RETAIN)?;
        // Older configurations said "delete" or "move-aside"; retention only ever moves
        // aside now (nothing is deleted by a day-2 command), and both still load.
        match self.string("snapshot.prune", snapshot.prune)? {
            None => {}
            Some(s) if s == "delete" || s == "move-aside" => {}
            Some(s) => {
                return Err(self.err(
                    "snapshot.prune",
                    format_args!(
                        "{s:?} is not \"move-aside\" (older snapshots are always moved into \
                         pruned/; the key may be left out)"
                    ),
                ))
            }
        }
        let day = Duration::from_secs(24 * 3600);
        let timeout = self.duration(
            "snapshot.timeout",
            snapshot.timeout,
            Duration::from_secs(600),
            day,
        )?;
        let pruned_retain = self.count(
            "snapshot.pruned_retain",
            snapshot.pruned_retain,
            DEFAULT_PRUNED_RETAIN,
        )?;
        let pruned_max_age = self.duration(
            "snapshot.pruned_max_age",
            snapshot.pruned_max_age,
            DEFAULT_PRUNED_MAX_AGE,
            3650 * day,
        )?;
        if pruned_max_age < Duration::from_secs(3600) {
            return Err(self.err(
                "snapshot.pruned_max_age",
                format_args!(
                    "{} s is under an hour; pruned/ is the way back from a bad retention, \
                     give it time",
                    pruned_max_age.as_secs()
                ),
            ));
        }
        let stale_after = self.duration(
            "snapshot.stale_after",
            snapshot.stale_after,
            Duration::from_secs(13 * 3600),
            30 * day,
        )?;

        let min_db_size = self.size("maintain.min_db_size", maintain.min_db_size, 100 << 20)?;
        let min_fragmented_percent = self.count(
            "maintain.min_fragmented_percent",
            maintain.min_fragmented_percent,
            50,
        )?;
        if min_fragmented_percent > 99 {
            return Err(self.err(
                "maintain.min_fragmented_percent",
                format_args!("{min_fragmented_percent} is not a percentage from 1 to 99"),
            ));
        }
        let defrag_timeout = self.duration(
            "maintain.defrag_timeout",
            maintain.defrag_timeout,
            Duration::from_secs(600),
            day,
        )?;
        let lock_wait = self.duration(
            "maintain.lock_wait",
            maintain.lock_wait,
            Duration::from_secs(1800),
            day,
        )?;
        for (key, value, floor) in [
            ("snapshot.timeout", timeout, MIN_OPERATION_TIMEOUT),
            (
                "maintain.defrag_timeout",
                defrag_timeout,
                MIN_OPERATION_TIMEOUT,
            ),
            ("maintain.lock_wait", lock_wait, MIN_LOCK_WAIT),
        ] {
            if value < floor {
                return Err(self.err(
                    key,
                    format_args!(
                        "{} ms is shorter than the {} s floor; a healthy member could not \
                         finish in that time",
                        value.as_millis(),
                        floor.as_secs()
                    ),
                ));
            }
        }
        Ok(DataSettings {
            quota_backend_bytes,
            prometheus_port,
            snapshot: SnapshotSettings {
                dir,
                copy_dir,
                retain,
                pruned_retain,
                pruned_max_age,
                timeout,
                stale_after,
            },
            maintain: MaintainSettings {
                min_db_size,
                min_fragmented_percent,
                defrag_timeout,
                lock_wait,
            },
        })
    }

    /// Where snapshots may go, given the data dir and install.dir: not into etcd's data
    /// or binaries, not into or under a system folder (nor one gone at reboot or anyone
    /// may write), not a shared folder itself, and the copy apart from the snapshots.
    /// Whether the folder is root's and closed to others is checked where it is used.
    pub(super) fn snapshot_places(
        &self,
        snapshot: &SnapshotSettings,
        data_dir: &Path,
        install_dir: &Path,
    ) -> Checked<()> {
        let mut places = vec![("snapshot.dir", &snapshot.dir)];
        if let Some(c) = &snapshot.copy_dir {
            places.push(("snapshot.copy_dir", c));
        }
        let overlap = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
        for (key, dir) in places {
            let shown = dir.display();
            if overlap(dir, data_dir) {
                return Err(self.err(
                    key,
                    format_args!(
                        "{shown} overlaps etcd.data_dir {}; snapshots belong apart from the \
                         data they restore",
                        data_dir.display()
                    ),
                ));
            }
            if overlap(dir, install_dir) {
                return Err(self.err(
                    key,
                    format_args!(
                        "{shown} overlaps install.dir {}; snapshots belong apart from the \
                         binaries",
                        install_dir.display()
                    ),
                ));
            }
            if let Some(sys) = SYSTEM_DIRS.iter().find(|d| dir.starts_with(d)) {
                return Err(self.err(
                    key,
                    format_args!(
                        "{shown} lies in {sys}, a system folder (or one gone at reboot, or \
                         one anyone may write); keep snapshots under e.g. {DEFAULT_SNAPSHOT_DIR}"
                    ),
                ));
            }
            if SHARED_DIRS.iter().any(|d| dir == Path::new(d)) {
                return Err(self.err(
                    key,
                    format_args!(
                        "{shown} is a shared system folder; name a folder of its own in it, \
                         e.g. {shown}/etcd-snapshots"
                    ),
                ));
            }
        }
        if let Some(c) = &snapshot.copy_dir {
            if c.starts_with(&snapshot.dir) || snapshot.dir.starts_with(c) {
                return Err(self.err(
                    "snapshot.copy_dir",
                    format_args!(
                        "{} overlaps snapshot.dir {}; a copy belongs elsewhere (another disk \
                         or mount)",
                        c.display(),
                        snapshot.dir.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}
