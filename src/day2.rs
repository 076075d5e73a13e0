//! Day 2 on the node: leaving the cluster ([`leave`]), guarded rolling upgrades
//! ([`upgrade`]), verified snapshots ([`snapshot`]), restore of a snapshot as a new
//! one-member cluster ([`restore`]), defragmentation and NOSPACE recovery one member at a
//! time ([`maintain`]), a restart on new trust bundles one member at a time
//! ([`rotate_ca`]), and the backups off the node: listed and proven ([`backups`]),
//! restored (`restore --from-backup`). Each command acts on the etcd that `--config`
//! describes, through the installed release's own tools: `etcdctl` via
//! [`crate::cluster::etcd::Client`], and for snapshot files `etcdutl` (3.5) or `etcdctl`
//! (3.4, which has no etcdutl) via [`crate::member::tools`].
//!
//! Each runs in one frame ([`frame`]: configuration, this member, the node lock, the
//! operation record, signals, output and exit code), and stops and starts etcd through
//! one controller ([`crate::member::service`]).
//!
//! The member is asked at its own client URL on the node IP
//! ([`crate::member::ThisMember`], through
//! [`crate::cluster::lifecycle::Node::own_client`]), the URL its TLS certificate is issued
//! for; etcd also listens on 127.0.0.1, but a certificate need not name it.

pub mod backups;
pub mod frame;
pub mod leave;
pub mod maintain;
pub mod restore;
pub mod rotate_ca;
pub mod snapshot;
pub mod upgrade;

/// `t` as a file-name timestamp in UTC: `20261201T094500Z`.
pub use crate::shared::report::file_stamp as stamp;
