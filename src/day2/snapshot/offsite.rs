//! The snapshot off the node: with `[backup]`, the verified snapshot just placed in
//! `snapshot.dir` goes to the bucket once per cluster per `backup.period`.
//!
//! 1. The bucket is asked for the newest verified object of this cluster
//!    ([`bucket::newest_verified`]); taken in the current `backup.period` (periods are
//!    aligned on the epoch, [`bucket::due_after`]): nothing to do (another member, or
//!    this one, uploaded in this period).
//! 2. Else the cluster lock [`LOCK`] in etcd (as `maintain` and `upgrade` take theirs),
//!    and the bucket asked again under it: a member that held the lock before us has
//!    uploaded meanwhile. Three members on the same timer make one object per period.
//! 3. The snapshot streamed from its file through age ([`seal::seal`], to the recipients
//!    of `backup.recipients_file`; plaintext only with `encrypt = false`) into the
//!    multipart upload, with its metadata (cluster, member, revision, etcd version, the
//!    SHA-256 of plaintext and object, agent, time); no second copy on disk, memory
//!    bounded by one part. Read back and compared, then marked `verified = read-back`
//!    ([`bucket::upload_snapshot`]).
//! 4. Retention ([`bucket::prune`]): the newest `backup.retain` objects of the cluster
//!    kept, never the newest verified one, only our names; our incomplete uploads older
//!    than a day aborted. A failed retention is a warning.
//!
//! A failure is the upload's own (its reason code from the store's answer: `backup-denied`,
//! `backup-unreachable`, …): the local snapshot stays kept and recorded.

use crate::backup::bucket::{self, Meta};
use crate::backup::{s3, seal};
use crate::cluster::etcd::{Client as Etcd, ErrorKind};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::BackupSettings;
use crate::shared::digest::Digest256;
use crate::shared::report::{BackupSeen, BackupUpload, Stamp};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The cluster lock uploads take turns on.
pub const LOCK: &str = "etcd-setup/backup";
/// The lock's lease TTL: how long a holder killed outright keeps the others waiting.
pub const LOCK_TTL: Duration = Duration::from_secs(30);
/// How long a member waits for another member's upload to end.
pub const LOCK_WAIT: Duration = Duration::from_secs(15 * 60);

/// The snapshot to upload, as `snapshot` placed and verified it.
#[derive(Debug, Clone)]
pub struct Placed<'a> {
    /// Its file in `snapshot.dir`.
    pub file: &'a Path,
    /// The file's length and SHA-256 as its verification read them.
    pub digest: Digest256,
    /// The cluster's ID.
    pub cluster: u64,
    /// This member's name.
    pub member: &'a str,
    /// etcd's revision in it.
    pub revision: i64,
    /// The version of the etcd that took it.
    pub etcd_version: &'a str,
    /// How many keys etcd's `snapshot status` counted in it.
    pub total_keys: u64,
    /// When it was taken.
    pub time: SystemTime,
}

/// What the bucket holds after a good run.
#[derive(Debug, Clone)]
pub struct Offsite {
    /// The object this run uploaded; `None` when one of this period was there.
    pub uploaded: Option<BackupUpload>,
    /// The newest verified object of the cluster now.
    pub newest: Option<BackupSeen>,
    /// The objects retention deleted and the incomplete uploads it aborted.
    pub pruned: bucket::Pruned,
    /// What the run warns about (a failed retention).
    pub warnings: Vec<String>,
    /// When the bucket was asked.
    pub at: SystemTime,
}

/// A failed run: the failure, and the object when one was written but its read-back
/// differed (recorded as not verified).
#[derive(Debug)]
pub struct Failed {
    /// Why.
    pub failure: Failure,
    /// The object written but not verified.
    pub attempt: Option<Box<BackupUpload>>,
}

impl From<Failure> for Failed {
    fn from(failure: Failure) -> Failed {
        Failed {
            failure,
            attempt: None,
        }
    }
}

impl From<s3::S3Error> for Failed {
    fn from(e: s3::S3Error) -> Failed {
        Failure::from(e).into()
    }
}

fn seen(b: &bucket::Backup) -> BackupSeen {
    BackupSeen {
        at: Stamp::of(b.name.time),
        object: b.key.clone(),
        member: b.name.member.clone(),
        size: b.size,
    }
}

/// Uploads `placed` unless the bucket holds a verified object of this period, under the
/// cluster lock taken through `etcd`; then retention.
pub fn upload(b: &BackupSettings, etcd: &Etcd, placed: &Placed<'_>) -> Result<Offsite, Failed> {
    let at = SystemTime::now();
    let recipients = b.recipients()?;
    let client = s3::Client::new(b, b.credentials()?)?;
    let newest = bucket::newest_verified(b, &client, placed.cluster, at)?;
    if !bucket::due_after(b, newest.as_ref(), at) {
        return Ok(nothing_due(newest.as_ref(), at));
    }
    let mut lock = etcd
        .lock(LOCK, LOCK_TTL, LOCK_WAIT)
        .map_err(|e| match e.kind {
            ErrorKind::Timeout => Failure::new(
                ReasonCode::BackupFailed,
                format!(
                    "another member's upload held the cluster lock {LOCK} for more than {} \
                     min: {e}; the snapshot is kept here, the next run uploads it",
                    LOCK_WAIT.as_secs() / 60
                ),
            ),
            _ => Failure::new(
                ReasonCode::BackupFailed,
                format!("cannot take the cluster lock {LOCK}: {e}; nothing was uploaded"),
            ),
        })?;
    // Another member may have uploaded while we waited for the lock.
    let at = SystemTime::now();
    let newest = bucket::newest_verified(b, &client, placed.cluster, at)?;
    if !bucket::due_after(b, newest.as_ref(), at) {
        return Ok(nothing_due(newest.as_ref(), at));
    }
    lock.ensure_held().map_err(|e| {
        Failure::new(
            ReasonCode::BackupFailed,
            format!("{e}; nothing was uploaded"),
        )
    })?;
    let meta = Meta {
        cluster: placed.cluster,
        member: placed.member.to_string(),
        revision: placed.revision,
        etcd_version: placed.etcd_version.to_string(),
        total_keys: placed.total_keys,
        time: placed.time,
    };
    let file = placed.file;
    let mut sealer = |plain: &mut dyn std::io::Read, out: &mut dyn std::io::Write| {
        // The upload hashes both sides itself.
        seal::seal_stream(plain, &recipients, out).map_err(|e| bucket::stream_failure(file, e))
    };
    let record = |size: u64, verified: bool| BackupUpload {
        at: Stamp::of(placed.time),
        object: bucket::object_name(b, &meta),
        bucket: b.bucket.clone(),
        size,
        verified,
        member: placed.member.to_string(),
        revision: placed.revision,
        encrypted: b.encrypt,
    };
    let up = match bucket::upload_snapshot(b, &client, file, &placed.digest, &meta, &mut sealer) {
        Ok(up) => up,
        Err(failure) => {
            // Written but not matched on read-back: the object stays (retention sees it
            // is not verified), and the record says so.
            let attempt = (failure.code == ReasonCode::BackupVerifyFailed)
                .then(|| Box::new(record(0, false)));
            return Err(Failed { failure, attempt });
        }
    };
    let uploaded = record(up.object.len, true);
    let mut warnings = Vec::new();
    let pruned = match bucket::prune(b, &client, placed.cluster, SystemTime::now()) {
        Ok(p) => p,
        Err(e) => {
            warnings.push(format!(
                "retention in the bucket failed, nothing more deleted: {}",
                Failure::from(e).headline()
            ));
            bucket::Pruned::default()
        }
    };
    drop(lock);
    let newest = BackupSeen {
        at: uploaded.at.clone(),
        object: uploaded.object.clone(),
        member: uploaded.member.clone(),
        size: uploaded.size,
    };
    Ok(Offsite {
        uploaded: Some(uploaded),
        newest: Some(newest),
        pruned,
        warnings,
        at,
    })
}

fn nothing_due(newest: Option<&bucket::Backup>, at: SystemTime) -> Offsite {
    Offsite {
        uploaded: None,
        newest: newest.map(seen),
        pruned: bucket::Pruned::default(),
        warnings: Vec::new(),
        at,
    }
}

/// The lines `snapshot` prints for a good run.
pub fn lines(b: &BackupSettings, done: &Offsite) -> Vec<String> {
    let mut out = Vec::new();
    match (&done.uploaded, &done.newest) {
        (Some(u), _) => out.push(format!(
            "backup {} in bucket {} size {} {} verified read-back",
            u.object,
            u.bucket,
            u.size,
            if u.encrypted {
                "age-encrypted"
            } else {
                "unencrypted"
            }
        )),
        (None, Some(n)) => out.push(format!(
            "backup not due: {} (member {}, taken {}) is of this backup.period ({} s)",
            n.object,
            n.member,
            n.at.time,
            b.period.as_secs()
        )),
        (None, None) => {}
    }
    for k in &done.pruned.deleted {
        out.push(format!(
            "backup pruned {k} (deleted from bucket {})",
            b.bucket
        ));
    }
    for k in &done.pruned.aborted {
        out.push(format!("backup aborted the incomplete upload {k}"));
    }
    out
}
