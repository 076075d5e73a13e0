//! This etcd on this node: what the agent acts on when it acts on its own member.
//!
//! - Its identity and URLs ([`this`]: peer, client and metrics addresses, etcdctl and
//!   etcdutl, derived from `Settings` once; the cluster's [`crate::cluster::lifecycle::Node`]
//!   is built from it).
//! - Its unit and environment ([`unit`]: the package's etcd.service, `etcd.env` rendered
//!   from the settings) and the one etcd.service controller ([`service`]: stop, start,
//!   confirm, one-shot flags).
//! - Its data dir: swapped for a restored one ([`swap`]), the cluster a snapshot or data
//!   dir belongs to ([`identity`], read by [`crate::shared::bolt`]). Moving a data dir aside stays in
//!   `cluster/lifecycle/aside.rs`: the join moves a removed member's data dir aside
//!   (`join::prepare`), and `cluster/` sits below this part.
//! - Snapshot files: etcd's tools on them ([`tools`]: status, restore, the SHA-256
//!   trailer), the checked folder they live in ([`folder`]) and their names ([`names`]).
//! - The one restore ([`restore`]), which `restore` and `run`'s
//!   `backup.restore_when_empty` both run.
//!
//! It sits above the cluster client (`cluster/`) and below `road/`, `backup/` and `day2/`.

pub mod folder;
pub mod identity;
pub mod names;
pub mod restore;
pub mod service;
pub mod swap;
pub mod this;
pub mod tools;
pub mod unit;

pub use this::ThisMember;

use crate::cluster::lifecycle::Node;
use crate::reason::Failure;
use crate::shared::config::Settings;
use std::path::Path;

/// This member as the commands ask it, derived from the settings once (the day-2 frame
/// hands it out as `f.member`; no command derives it again).
#[derive(Debug, Clone)]
pub struct Member {
    /// Its URLs, metrics address and tools.
    pub own: ThisMember,
    /// The cluster client's view of it: name, peers, data dir, the clients that ask it
    /// and its peers.
    pub node: Node,
}

impl Member {
    /// The member `s` describes.
    pub fn of(s: &Settings) -> Member {
        Member {
            own: ThisMember::of(s),
            node: Node::from_settings(s),
        }
    }
}

/// `dir` fsynced, so a rename inside it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Failure> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Failure::io(dir, "cannot sync", e))
}
