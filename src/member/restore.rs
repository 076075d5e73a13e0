//! The one restore of a snapshot file as this node's new one-member cluster: what
//! `etcd-setup restore FILE` and `restore --from-backup` run (`crate::day2::restore`), and
//! what `run` runs with `backup.restore_when_empty` (`crate::road::from_bucket`).
//!
//! 1. The file is checked: etcd's SHA-256 trailer (`--skip-hash-check` lets a file without
//!    one pass, a trailer that is there is always checked), then `snapshot status`
//!    (revision, keys), then which cluster it is of ([`super::identity`]): another
//!    cluster's is warned about, and refused as `cluster-mismatch` with `--cluster-check`.
//! 2. No other member of the configured cluster may run ([`serving_peers`]): the restored
//!    one-member cluster keeps the cluster ID and member IDs, and a leader among them
//!    would send it heartbeats for a log it does not have, which etcd panics on. Then
//!    etcd is stopped ([`Service::stop`]: systemd on a node; with `--no-systemd` the
//!    caller has stopped it, and the client port must not answer any more).
//! 3. `snapshot restore` into a private staging folder on the data dir's own filesystem
//!    ([`super::swap`]: beside it, or inside it when it is a mount point; a symlinked data
//!    dir is refused), with the configuration's `initial_cluster` and `cluster_token`: the
//!    restored cluster has the cluster ID the configuration gives, which the other nodes'
//!    join checks before they join (a restore with this node as the only initial member
//!    would get another ID, and they would refuse it as `cluster-mismatch`).
//! 4. The new dir gets the old data dir's owner (or user etcd's, without one); the old
//!    data is moved aside to `<data_dir>.before-restore-<time>-<pid>` (inside a mount
//!    point: `<data_dir>/.before-restore-<time>-<pid>`; never deleted); the new one takes
//!    its place; the folders are fsynced. The staging folder is removed on every way out,
//!    and what killed attempts left is removed by the next one.
//! 5. etcd is started once with `--force-new-cluster` ([`Service::start_once`]), which
//!    makes the restored data a one-member cluster of that ID, and must come up. The flag
//!    is a one-shot file that exists for that start only ([`super::service`]), never
//!    a line of etcd's persistent environment, so no later start can force the members
//!    that joined meanwhile out again, whether the restore ended, failed or was killed.
//!
//! Any step failing leaves the old data dir in place or beside, named in the message.

use super::identity;
use super::service::{OneShot, Service};
use super::swap;
use super::this::ThisMember;
use super::tools::{self, RestoreTo};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::Settings;
use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What a restore did.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The revision the new cluster starts from.
    pub revision: i64,
    /// The keys it holds.
    pub total_keys: u64,
    /// The data dir, now holding the restored member.
    pub data_dir: PathBuf,
    /// Where the old data dir went, if there was one.
    pub moved_aside: Option<PathBuf>,
    /// Without old data: where the data of an earlier restore went (the one a killed
    /// attempt had moved aside, else the newest).
    pub earlier_aside: Option<PathBuf>,
    /// Whether that earlier restore was killed between moving the old data aside and
    /// putting its own in place.
    pub interrupted: bool,
}

impl Restored {
    /// The line saying where the old data is.
    pub fn aside_line(&self) -> String {
        match (&self.moved_aside, &self.earlier_aside) {
            (Some(a), _) => format!("old data dir moved to {}", a.display()),
            (None, Some(e)) if self.interrupted => format!(
                "there was no old data dir: an earlier restore, stopped before it finished, \
                 had moved it to {}",
                e.display()
            ),
            (None, Some(e)) => format!(
                "there was no old data dir; the newest one an earlier restore moved aside is {}",
                e.display()
            ),
            (None, None) => "there was no old data dir".into(),
        }
    }
}

/// A warning of `restore` on stderr, on one line.
pub(crate) fn warn(text: &str) {
    eprintln!(
        "etcd-setup restore: warning: {}",
        crate::shared::printable::line(text)
    );
}

fn failed(message: String) -> Failure {
    Failure::new(ReasonCode::RestoreFailed, message)
}

/// Restores `file` as this node's new one-member cluster.
pub fn restore(
    s: &Settings,
    file: &Path,
    skip_hash_check: bool,
    cluster_check: bool,
    etcd: &dyn Service,
    now: SystemTime,
) -> Result<Restored, Failure> {
    // A trailer that is there is checked, --skip-hash-check or not.
    let has_trailer = tools::check_trailer_if_present(file, skip_hash_check)?;
    let member = ThisMember::of(s);
    let tool = member.snapshot_tool();
    let status = tools::file_status(tool, file)?;
    match identity::of_snapshot(file, s) {
        identity::Verdict::Same(_) => {}
        identity::Verdict::Other(why) if cluster_check => {
            return Err(Failure::new(
                ReasonCode::ClusterMismatch,
                format!("{why}; not restored (--cluster-check)"),
            ))
        }
        identity::Verdict::Other(why) => warn(&format!(
            "{why}; restoring it anyway as this configuration's cluster \
             (--cluster-check refuses it)"
        )),
        identity::Verdict::Unknown(why) if cluster_check => {
            return Err(Failure::new(
                ReasonCode::ClusterMismatch,
                format!(
                    "{why}; --cluster-check restores only a snapshot shown to be of this \
                     configuration's cluster"
                ),
            ))
        }
        identity::Verdict::Unknown(why) => warn(&format!(
            "{why}; restoring it as this configuration's cluster (--cluster-check refuses \
             what it cannot show to be of it)"
        )),
    }
    // Refusals (a link, a folder others may write in, members still running) before
    // etcd is stopped.
    let place = swap::Place::of(&s.data_dir)?;
    refuse_while_peers_run(s)?;

    etcd.stop()?;
    let client = member.client_addr;
    if TcpStream::connect_timeout(&client, Duration::from_millis(500)).is_ok() {
        return Err(failed(format!(
            "etcd still serves at {client} on {}; stop it before its data dir is replaced",
            s.data_dir.display()
        )));
    }

    let leftovers = place.clear_leftovers()?;
    for p in &leftovers.removed {
        warn(&format!(
            "removed {}, the staging folder of an earlier restore that did not finish (our \
             own output, not data)",
            p.display()
        ));
    }
    let staging = place.stage(now)?;
    let initial_cluster = super::unit::Membership::configured(s).initial_cluster;
    let new = staging.data();
    tools::restore(
        tool,
        file,
        &RestoreTo {
            name: &s.node_name,
            peer_url: &member.peer_url,
            initial_cluster: &initial_cluster,
            token: &s.cluster_token,
            data_dir: &new,
            skip_hash_check: !has_trailer,
        },
        Duration::from_secs(1800),
    )?;
    swap::kill_point("staged");
    fs::set_permissions(&new, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(|e| Failure::io(&new, "cannot chmod", e))?;
    // etcd runs as its own user: the restored files get the old data dir's owner, or,
    // with no old data dir, that user's (when we are root and it exists).
    if let Some((uid, gid)) = place.owner() {
        if uid != nix::unistd::geteuid().as_raw() || gid != nix::unistd::getegid().as_raw() {
            swap::chown_tree(&new, uid, gid)?;
        }
    }
    let moved_aside = place.swap(&staging)?;
    drop(staging);
    etcd.start_once(&[OneShot::ForceNewCluster])?;
    let (earlier_aside, interrupted) = match (&moved_aside, leftovers.interrupted_aside) {
        (Some(_), _) => (None, false),
        (None, Some(a)) => (Some(a), true),
        (None, None) => (leftovers.newest_aside, false),
    };
    Ok(Restored {
        revision: status.revision,
        total_keys: status.total_keys,
        data_dir: s.data_dir.clone(),
        moved_aside,
        earlier_aside,
        interrupted,
    })
}

/// Refused, naming them, while [`serving_peers`] finds any: checked by `restore` itself
/// and, with `--from-backup`, before the backup is fetched (minutes for a large one).
pub fn refuse_while_peers_run(s: &Settings) -> Result<(), Failure> {
    let running = serving_peers(s);
    if running.is_empty() {
        return Ok(());
    }
    Err(failed(format!(
        "etcd runs on other members of this cluster: {} (their peer URLs accept \
         connections); the restore would make {} a one-member cluster with the same \
         cluster ID, and their leader would crash it (raft: tocommit out of range). \
         Nothing was changed: stop etcd on each of them first (`systemctl stop etcd`), \
         restore here, then let each join (move its data dir aside, `systemctl start \
         etcd-setup`)",
        running.join(", "),
        s.node_name
    )))
}

/// The other members of the configured `initial_cluster` whose peer URL accepts TCP
/// connections (their etcd runs), as `name (url)`. c1's total-loss recovery on VMs showed
/// why: the fresh VMs had formed an empty cluster of the same ID, its two other members
/// kept a quorum, and the restored member panicked on their leader's first heartbeat
/// ("tocommit(N) is out of range [lastIndex(M)]").
pub fn serving_peers(s: &Settings) -> Vec<String> {
    s.initial_cluster
        .iter()
        .filter(|(name, _)| *name != s.node_name)
        .filter(|(_, url)| crate::cluster::health::listens(url))
        .map(|(name, url)| format!("{name} ({url})"))
        .collect()
}
