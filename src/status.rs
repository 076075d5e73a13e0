//! `etcd-setup status`: one authoritative answer about this node, over a local socket.
//!
//! The protocol (version 1) on the unix stream socket [`SOCKET`]:
//!
//! - The client sends one line of JSON, at most [`MAX_REQUEST`] bytes, within
//!   [`REQUEST_TIMEOUT`] of connecting: `{"version":1,"wait":false,"timeout_ms":0}`.
//! - The server answers with one JSON document and a newline, then closes: an [`Answer`],
//!   or `{"error":{"code":…,"message":…}}` (see [`ErrorBody`]).
//! - With `"wait":true` the server holds the answer until the verdict is terminal
//!   (`running` or `failed`) or `timeout_ms` has passed, watching the state file with
//!   inotify; the client only waits for its reply.
//!
//! The answer is built from the state files ([`crate::shared::report::StateStore`]) and a live
//! view of etcd ([`LiveView`]: systemd over D-Bus and etcd's health endpoint), by
//! [`evaluate`], a pure function the tests drive with fixtures. The server is in
//! [`server`], the client in [`query`].

pub mod certs;
mod client;
pub mod data;
mod live;
pub mod operation;
pub mod prometheus;
mod protocol;
pub mod server;
mod text;
mod verdict;

pub use client::{command, query, ClientError};
#[cfg(any(test, feature = "test-fixtures"))]
pub use live::FileLive;
pub use live::{health_text, EtcdLive, LiveView, RoleSource, SystemLive};
pub use protocol::{
    Answer, BackupView, ErrorBody, EtcdView, Reply, Request, Role, RunView, SnapshotView,
    SpaceView, Verdict,
};
pub use text::{text_line, text_long};
pub use verdict::{evaluate, evaluate_at, pid_alive};

use std::time::Duration;

/// The status socket.
pub use crate::shared::paths::STATUS_SOCKET as SOCKET;
/// The protocol version a request names.
pub const PROTOCOL_VERSION: u32 = 1;
/// The version of the answer's JSON.
pub const SCHEMA_VERSION: u32 = 1;
/// The largest request, newline included.
pub const MAX_REQUEST: usize = 4096;
/// How long a client may take to send its request after connecting.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest `--wait` the server grants.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);
/// How recent etcd.service's last start must be for restarts since the run confirmed it
/// to count as a crash loop while it is active: the unit's own `StartLimitIntervalSec=`,
/// over which systemd counts starts. An etcd active for longer is stable again.
pub const CRASH_WINDOW: Duration = Duration::from_secs(600);

#[cfg(test)]
mod tests;
