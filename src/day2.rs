//! Day 2 on the node: leaving the cluster ([`leave`]), guarded rolling upgrades
//! ([`upgrade`]), verified snapshots ([`snapshot`]), restore of a snapshot as a new
//! one-member cluster ([`restore`]), defragmentation and NOSPACE recovery one member at a
//! time ([`maintain`]), and the backups off the node: listed and proven ([`backups`]),
//! restored (`restore --from-backup`). Each command acts on the etcd that `--config`
//! describes, through the installed release's own tools: `etcdctl` via
//! [`crate::cluster::etcd::Client`], and for snapshot files `etcdutl` (3.5) or `etcdctl`
//! (3.4, which has no etcdutl) via [`tools`].
//!
//! Each runs in one frame ([`frame`]: configuration, this member, the node lock, the
//! operation record, signals, output and exit code), and stops and starts etcd through
//! one controller ([`crate::shared::service`]).
//!
//! The member is asked at its own client URL on the node IP
//! ([`crate::shared::member::ThisMember`], through
//! [`crate::cluster::lifecycle::Node::own_client`]), the URL its TLS certificate is issued
//! for; etcd also listens on 127.0.0.1, but a certificate need not name it.

pub mod backups;
pub mod frame;
pub mod leave;
pub mod maintain;
pub mod restore;
pub mod rotate_ca;
pub mod snapshot;
pub mod tools;
pub mod upgrade;

use crate::reason::Failure;
use std::path::Path;

/// `path`'s parent folder, fsynced so a rename inside it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Failure> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Failure::io(dir, "cannot sync", e))
}

/// `t` as a file-name timestamp in UTC: `20261201T094500Z`.
pub use crate::shared::report::file_stamp as stamp;

/// `t` as a sortable file-name timestamp in UTC to the millisecond:
/// `20261201T094500.123Z`.
pub fn stamp_ms(t: std::time::SystemTime) -> String {
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_millis());
    let s = stamp(t);
    format!("{}.{ms:03}Z", s.trim_end_matches('Z'))
}
