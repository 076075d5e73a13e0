//! `backup.restore_when_empty`: a brand-new cluster comes back from its bucket.
//!
//! The platform deletes every etcd VM and creates new ones from the same template: each
//! boots with an empty data dir, finds no member serving, and would bootstrap an empty
//! cluster of the same ID. With `restore_when_empty = true` that is decided against the
//! bucket first, in the road between the join decision and etcd's start:
//!
//! Nobody answering is no evidence that nobody holds data: members booting with their data
//! dirs answer only once their etcd runs, and a member that restored the last backup then
//! would roll the cluster back (issue 38: the members with data were removed, or moved
//! their newer data aside to join the rollback). So a backup is restored only on
//! **positive evidence**: every member of `initial_cluster` says, through a marker in the
//! bucket ([`crate::backup::evidence`]), that its data dir is empty.
//!
//! | this node | what it finds | what happens |
//! | --- | --- | --- |
//! | any | no backup of ours verified at upload | start as configured: a new cluster |
//! | any | a backup; a member's etcd listens (now or while this one waits) | join that member's cluster (the join decision), marker taken away: it holds data, or restored |
//! | any | a backup; not yet every member's fresh marker | write its own marker (again every minute) and wait, bounded by `etcd.start_timeout` (`join-blocked` naming the members that said nothing); never restore |
//! | the first member **by name** | a backup; every member's marker | prove the newest ([`crate::backup::fetch`]: digests, decryption, trailer, trial restore), restore it as `restore --from-backup` does, start once with `--force-new-cluster`; the markers taken away |
//! | another member | a backup; every member's marker | wait (bounded by `etcd.start_timeout`) for the first member's restored cluster to answer, then join it |
//! | any | out of reach, denied, … | fail with the bucket's reason, etcd off: an empty cluster started beside a backup that could not be read would be a silent loss |
//!
//! The restorer is the first of the members' names sorted, not the first line of this
//! node's file: nodes whose files list the members in different orders still pick the
//! same one, so two members never make two one-member clusters of the same ID (issue 38:
//! they did, both taking writes). The others never bootstrap `new` while the bucket holds
//! a backup, so the restored member never meets a leader of an empty cluster (which
//! crashes it, as c1 showed: "tocommit out of range").

use crate::backup::evidence;
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
    if let Some(w) = &chosen.regression {
        progress(&format!("restore_when_empty: warning: {w}"));
    }
    let me = settings.node_name.as_str();
    let members: Vec<&str> = settings
        .initial_cluster
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    let bucket = Bucket {
        b,
        client: &client,
        cluster,
    };
    if let Some(plan) = await_evidence(settings, node, &bucket, &members, &shown, progress)? {
        bucket.withdraw(&[me]);
        return Ok(Start::AsDecided(plan));
    }
    // Every node picks the same restorer, whatever the order of its initial_cluster.
    let restorer = members.iter().copied().min().unwrap_or(me);
    if restorer != me {
        let plan = await_serving(
            settings,
            node,
            &format!("{restorer}, the first member by name, to restore {shown} and serve"),
            progress,
        )?;
        bucket.withdraw(&[me]);
        return Ok(Start::AsDecided(plan));
    }
    let running = restore::serving_peers(settings);
    if !running.is_empty() {
        progress(&format!(
            "restore_when_empty: {} serve(s) already: the cluster exists, nothing is \
             restored",
            running.join(", ")
        ));
        bucket.withdraw(&[me]);
        return Ok(Start::AsDecided(None));
    }
    let start = restore_first(settings, b, &client, chosen, &shown, stop, progress)?;
    bucket.withdraw(&members);
    Ok(start)
}

/// The cluster's markers in its bucket.
struct Bucket<'a> {
    b: &'a BackupSettings,
    client: &'a crate::backup::s3::Client,
    cluster: u64,
}

impl Bucket<'_> {
    fn withdraw(&self, members: &[&str]) {
        evidence::withdraw(self.b, self.client, self.cluster, members);
    }

    /// The bucket's failure while asking for evidence: etcd stays off.
    fn failed(&self, e: crate::backup::s3::S3Error) -> Failure {
        let f = Failure::from(e);
        Failure::new(
            f.code,
            format!(
                "restore_when_empty: cannot say or read in {} which members' data dirs are \
                 empty, so etcd stays off rather than restore or start an empty cluster: {}",
                fetch::shown(self.b, &evidence::folder(self.b, self.cluster)),
                f.message
            ),
        )
    }
}

/// Waits for positive evidence: `None` once every one of `members` has said through the
/// bucket that its data dir is empty (this one's marker written first, and again every
/// [`evidence::REFRESH`]); the join decision's plan as soon as another member's etcd
/// listens (it holds data, or restored: never roll it back). Bounded by
/// `etcd.start_timeout` (`join-blocked`, naming the members that said nothing).
fn await_evidence(
    settings: &Settings,
    node: &Node,
    bucket: &Bucket<'_>,
    members: &[&str],
    shown: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<Option<Plan>>, Failure> {
    let me = settings.node_name.as_str();
    let limit = settings.start_timeout;
    let t = Instant::now();
    let mut said: Option<Instant> = None;
    loop {
        let running = restore::serving_peers(settings);
        if !running.is_empty() {
            progress(&format!(
                "restore_when_empty: etcd runs on {} (with its data, or restored): this \
                 member joins and restores nothing",
                running.join(", ")
            ));
            let waiting = format!("{} to serve", running.join(", "));
            let left = limit.saturating_sub(t.elapsed());
            return await_serving_within(settings, node, &waiting, left, progress).map(Some);
        }
        if said.is_none_or(|s| s.elapsed() >= evidence::REFRESH) {
            evidence::say_empty(bucket.b, bucket.client, bucket.cluster, me)
                .map_err(|e| bucket.failed(e))?;
            said = Some(Instant::now());
        }
        let empty = evidence::empty_members(bucket.b, bucket.client, bucket.cluster)
            .map_err(|e| bucket.failed(e))?;
        let silent: Vec<&str> = members
            .iter()
            .copied()
            .filter(|m| !empty.iter().any(|e| e == m))
            .collect();
        if silent.is_empty() {
            progress(&format!(
                "restore_when_empty: every member ({}) says its data dir is empty; {shown} is \
                 the cluster's newest backup",
                members.join(", ")
            ));
            return Ok(None);
        }
        let waited = t.elapsed();
        if waited >= limit {
            return Err(Failure::new(
                ReasonCode::JoinBlocked,
                format!(
                    "restore_when_empty: within {} s neither did {} say that their data dirs \
                     are empty (each empty member writes {}<name> while it waits) nor did \
                     their etcd answer; this member restores only when every member is empty, \
                     and starts no empty cluster while the bucket holds {shown}. Start \
                     those members (their etcd starts with their data, and this one joins \
                     them on its next run), or, if they are gone for good, restore by hand \
                     (README, \"Total loss\")",
                    limit.as_secs(),
                    silent.join(", "),
                    fetch::shown(bucket.b, &evidence::folder(bucket.b, bucket.cluster))
                ),
            ));
        }
        progress(&format!(
            "restore_when_empty: waiting for {} to say that their data dirs are empty \
             too, or to run etcd, {} s of {} s",
            silent.join(", "),
            waited.as_secs(),
            limit.as_secs()
        ));
        std::thread::sleep(POLL);
    }
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

/// Waits for `waiting` (a member or members' etcd to serve, as a phrase), then the join
/// decision as usual; bounded by `etcd.start_timeout` (`join-blocked`).
fn await_serving(
    settings: &Settings,
    node: &Node,
    waiting: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<Plan>, Failure> {
    await_serving_within(settings, node, waiting, settings.start_timeout, progress)
}

/// [`await_serving`] within `limit`.
fn await_serving_within(
    settings: &Settings,
    node: &Node,
    waiting: &str,
    limit: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<Plan>, Failure> {
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
                    "restore_when_empty: waited {} s for {waiting}, for this member to join; \
                     check their status. This member does not start an empty cluster while \
                     the bucket holds a backup",
                    limit.as_secs()
                ),
            ));
        }
        progress(&format!(
            "restore_when_empty: waiting for {waiting}, {} s of {} s",
            waited.as_secs(),
            limit.as_secs()
        ));
        std::thread::sleep(POLL);
    }
}
