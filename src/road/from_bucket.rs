//! `backup.restore_when_empty`: a brand-new cluster comes back from its bucket.
//!
//! The platform deletes every etcd VM and creates new ones from the same template: each
//! boots with an empty data dir, finds no member serving, and would bootstrap an empty
//! cluster of the same ID. With `restore_when_empty = true` that is decided against the
//! bucket first, in the road between the join decision and etcd's start:
//!
//! | this node | the cluster's folder in the bucket | what happens |
//! | --- | --- | --- |
//! | any | a backup verified at upload, but a member serves | start as configured (the cluster exists; the join decision already ran) |
//! | first of `initial_cluster` | a backup verified at upload | prove the newest ([`crate::backup::fetch`]: digests, decryption, trailer, trial restore), restore it as `restore --from-backup` does, start once with `--force-new-cluster` |
//! | another member | a backup verified at upload | wait (bounded by `etcd.start_timeout`) for the first member's restored cluster to answer, then join it |
//! | any | no backup of ours verified at upload | start as configured: a new cluster |
//! | any | out of reach, denied, … | fail with the bucket's reason, etcd off: an empty cluster started beside a backup that could not be read would be a silent loss |
//!
//! Only the first member restores, so two members can never make two one-member clusters
//! of the same ID; the others never bootstrap `new` while the bucket holds a backup, so
//! the restored member never meets a leader of an empty cluster (which crashes it, as c1
//! showed: "tocommit out of range").

use crate::backup::fetch::{self, Which};
use crate::cluster::lifecycle::{self, join::Plan, Node};
use crate::member::service::Service;
use crate::member::{identity, restore};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::{BackupSettings, Settings};
use std::time::{Duration, Instant, SystemTime};

/// How often a member waiting for the first one asks the cluster again.
const POLL: Duration = Duration::from_secs(5);

/// How etcd starts after [`decide`].
#[derive(Debug)]
pub enum Start {
    /// As the join decision said: a new cluster (nothing to restore), or `plan`'s join.
    AsDecided(Option<Plan>),
    /// The backup named was restored into the data dir: etcd starts once with
    /// `--force-new-cluster`.
    Restored(String),
}

/// Whether the bucket is asked at all: `restore_when_empty` set, this node's data dir
/// empty, and the join decision was to start as configured (no cluster answered).
pub fn applies(settings: &Settings, node: &Node, plan: &Option<Plan>) -> bool {
    plan.is_none()
        && !node.has_data()
        && settings
            .backup
            .as_ref()
            .is_some_and(|b| b.restore_when_empty)
}

/// Decides from the bucket, when [`applies`]; `progress` gets a line for each step and
/// wait. `stop` is called before the data dir is replaced.
pub fn decide(
    settings: &Settings,
    node: &Node,
    stop: &dyn Service,
    progress: &mut dyn FnMut(&str),
) -> Result<Start, Failure> {
    let Some(b) = settings.backup.as_ref() else {
        return Ok(Start::AsDecided(None));
    };
    let cluster = node.expected_cluster_id().0;
    let client = crate::backup::s3::Client::new(b, b.credentials()?)?;
    let folder = fetch::shown(b, &crate::backup::bucket::cluster_prefix(b, cluster));
    progress(&format!(
        "restore_when_empty: this member's data dir is empty and no member serves; \
         looking for a backup of cluster {cluster:016x} in {folder}"
    ));
    let chosen = match fetch::choose(b, &client, cluster, &Which::Latest) {
        Ok(c) => c,
        Err(f) if f.code == ReasonCode::BackupNotFound => {
            progress(&format!(
                "restore_when_empty: no backup of cluster {cluster:016x} verified at upload \
                 in {folder}; starting a new cluster"
            ));
            return Ok(Start::AsDecided(None));
        }
        Err(f) => {
            return Err(Failure::new(
                f.code,
                format!(
                    "restore_when_empty: cannot tell whether {folder} holds a backup of this \
                     cluster, so etcd stays off rather than start an empty one: {}",
                    f.message
                ),
            ))
        }
    };
    let shown = fetch::shown(b, &chosen.backup.key);
    let first = settings.initial_cluster.first().map(|(n, _)| n.as_str());
    if first != Some(settings.node_name.as_str()) {
        let first = first.unwrap_or("?");
        return await_first(settings, node, first, &shown, progress).map(Start::AsDecided);
    }
    let running = restore::serving_peers(settings);
    if !running.is_empty() {
        progress(&format!(
            "restore_when_empty: {} serve(s) already: the cluster exists, nothing is \
             restored",
            running.join(", ")
        ));
        return Ok(Start::AsDecided(None));
    }
    restore_first(settings, b, &client, chosen, &shown, stop, progress)
}

/// The first member: `chosen` proven, checked to be of this cluster, restored.
fn restore_first(
    settings: &Settings,
    b: &BackupSettings,
    client: &crate::backup::s3::Client,
    chosen: fetch::Listed,
    shown: &str,
    stop: &dyn Service,
    progress: &mut dyn FnMut(&str),
) -> Result<Start, Failure> {
    progress(&format!(
        "restore_when_empty: fetching and proving {shown} (revision {}) before restoring it",
        chosen
            .recorded
            .revision
            .map_or("?".to_string(), |r| r.to_string())
    ));
    let t = Instant::now();
    let proven = fetch::fetch(
        b,
        client,
        chosen,
        b.identity_file.as_deref(),
        &settings.install_dir,
        &settings.data.snapshot.dir,
    )?;
    progress(&format!(
        "restore_when_empty: {shown} proven in {:.1} s (trial restore: revision {}, {} key \
         revisions)",
        t.elapsed().as_secs_f64(),
        proven.trial.revision,
        proven.trial.keys
    ));
    // The bucket's folder and metadata name this cluster; the file's own members must not
    // name another (members all added by joins cannot tell, and pass).
    if let identity::Verdict::Other(why) = identity::of_snapshot(proven.file(), settings) {
        return Err(Failure::new(
            ReasonCode::ClusterMismatch,
            format!("restore_when_empty: {shown}: {why}; not restored, etcd stays off"),
        ));
    }
    let r = restore::restore(
        settings,
        proven.file(),
        false,
        false,
        stop,
        SystemTime::now(),
    )?;
    progress(&format!(
        "restore_when_empty: restored {shown} (revision {}, {} keys) into {}; etcd starts \
         once with --force-new-cluster, the other members join it",
        r.revision,
        r.total_keys,
        r.data_dir.display()
    ));
    Ok(Start::Restored(shown.to_string()))
}

/// Another member: waits for the first member's restored cluster to answer, then the join
/// decision as usual; bounded by `etcd.start_timeout` (`join-blocked`).
fn await_first(
    settings: &Settings,
    node: &Node,
    first: &str,
    shown: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<Plan>, Failure> {
    let limit = settings.start_timeout;
    let t = Instant::now();
    loop {
        let waited = t.elapsed();
        if !restore::serving_peers(settings).is_empty() {
            let plan =
                lifecycle::start::before_start(node, limit.saturating_sub(waited), &mut |p| {
                    progress(&p.to_string())
                })?;
            if plan.is_some() {
                return Ok(plan);
            }
        }
        if waited >= limit {
            return Err(Failure::new(
                ReasonCode::JoinBlocked,
                format!(
                    "restore_when_empty: {first}, the first member of initial_cluster, \
                     restores {shown}; no cluster answered within {} s for this member to \
                     join. Check {first}'s status; this member does not start an empty \
                     cluster while the bucket holds a backup",
                    limit.as_secs()
                ),
            ));
        }
        progress(&format!(
            "restore_when_empty: waiting for {first} to restore {shown} and serve, {} s of {} s",
            waited.as_secs(),
            limit.as_secs()
        ));
        std::thread::sleep(POLL);
    }
}
