//! The day-2 keys: etcd's space quota and Prometheus listener (`[etcd]`), snapshots
//! (`[snapshot]`) and defragmentation (`[maintain]`), checked into [`Upkeep`].

use super::raw::{RawMaintain, RawSnapshot};
use super::values::{Checked, Checker};
use std::path::PathBuf;
use std::time::Duration;
use toml::Value;

/// etcd's own default quota (2 GiB), written out so the node states what it runs with.
pub const DEFAULT_QUOTA: u64 = 2 << 30;
/// etcd's recommended maximum quota (8 GiB); more is refused here.
pub const MAX_QUOTA: u64 = 8 << 30;
/// `snapshot.dir` when not given.
pub const DEFAULT_SNAPSHOT_DIR: &str = "/var/lib/etcd-setup/snapshots";
/// `snapshot.retain` when not given (k3s keeps 5 as well).
pub const DEFAULT_RETAIN: u64 = 5;

/// What happens to a snapshot beyond the newest `snapshot.retain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prune {
    /// Deleted (the default: a retention policy operators expect, as k3s prunes).
    Delete,
    /// Moved into the `pruned/` folder beside them, for the operator to remove.
    MoveAside,
}

/// `[snapshot]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSettings {
    /// `snapshot.dir`: where snapshots are written.
    pub dir: PathBuf,
    /// `snapshot.copy_dir`: a second folder that gets the same file (e.g. a mount).
    pub copy_dir: Option<PathBuf>,
    /// `snapshot.retain`: how many snapshots are kept in each folder.
    pub retain: u64,
    /// `snapshot.prune`: `"delete"` or `"move-aside"`.
    pub prune: Prune,
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
pub struct Upkeep {
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
    pub(super) fn upkeep(
        &self,
        (quota, prometheus): (Option<Value>, Option<Value>),
        snapshot: RawSnapshot,
        maintain: RawMaintain,
        ports: &[(&str, u16)],
    ) -> Checked<Upkeep> {
        let quota_backend_bytes = self.size("etcd.quota_backend_bytes", quota, DEFAULT_QUOTA)?;
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
        let prune = match self.string("snapshot.prune", snapshot.prune)? {
            None => Prune::Delete,
            Some(s) if s == "delete" => Prune::Delete,
            Some(s) if s == "move-aside" => Prune::MoveAside,
            Some(s) => {
                return Err(self.err(
                    "snapshot.prune",
                    format_args!("{s:?} is neither \"delete\" nor \"move-aside\""),
                ))
            }
        };
        let day = Duration::from_secs(24 * 3600);
        let timeout = self.duration(
            "snapshot.timeout",
            snapshot.timeout,
            Duration::from_secs(600),
            day,
        )?;
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
        Ok(Upkeep {
            quota_backend_bytes,
            prometheus_port,
            snapshot: SnapshotSettings {
                dir,
                copy_dir,
                retain,
                prune,
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
}
