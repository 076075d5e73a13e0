//! The day-2 record: `snapshot.json` in the persistent state folder, the last good
//! snapshot and the last failure of `etcd-setup snapshot`, which `status` reads.

use super::{atomic_write, rfc3339, FILE_MODE, MAX_STATE};
use crate::reason::{Failure, ReasonCode};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The record's name in the persistent state folder.
pub const SNAPSHOT_RECORD: &str = "snapshot.json";

/// One verified snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotTaken {
    /// When it was taken, RFC 3339 UTC.
    pub time: String,
    /// The same, in seconds since the epoch.
    #[serde(default)]
    pub unix_time: u64,
    /// etcd's revision it holds.
    pub revision: i64,
    /// Its size in bytes.
    pub size: u64,
    /// Its file.
    pub file: String,
    /// The copy in `snapshot.copy_dir`, when configured.
    #[serde(default)]
    pub copy: Option<String>,
    /// etcd's hash of its content (`snapshot status`).
    pub hash: u64,
    /// The keys of the database file, etcd's own buckets' included (`snapshot status`'s
    /// total keys).
    pub total_keys: u64,
    /// The files in the snapshot folders' `pruned/` after its retention, in all.
    #[serde(default)]
    pub pruned_files: u64,
    /// Their bytes.
    #[serde(default)]
    pub pruned_bytes: u64,
}

/// A snapshot that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFailure {
    /// When, RFC 3339 UTC.
    pub time: String,
    /// Its reason code.
    pub code: ReasonCode,
    /// Its sentence.
    pub message: String,
}

/// What `snapshot.json` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// The last good snapshot.
    #[serde(default)]
    pub last: Option<SnapshotTaken>,
    /// The last failure, when it came after the last good snapshot.
    #[serde(default)]
    pub failure: Option<SnapshotFailure>,
    /// The last good snapshot's copy into `snapshot.copy_dir` failed (the snapshot itself
    /// is kept in `snapshot.dir`, and is `last`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_failure: Option<SnapshotFailure>,
    /// What the last good snapshot's run warned about (names from the future in a
    /// snapshot folder, …); status shows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// `snapshot.stale_after` in seconds when the record was written: status warns when
    /// the last good snapshot is older.
    #[serde(default)]
    pub stale_after_s: Option<u64>,
}

/// The record's path in `state_dir`.
pub fn snapshot_record_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SNAPSHOT_RECORD)
}

/// Reads the record in `state_dir` (through [`super::read_record`]: a FIFO, a link or a
/// huge file there is an error at once, never a wait); `None` when no snapshot ran yet.
pub fn read_snapshot_record(state_dir: &Path) -> io::Result<Option<SnapshotRecord>> {
    let path = snapshot_record_path(state_dir);
    super::read_json_record(&path, "a snapshot record", MAX_STATE)
}

fn write(state_dir: &Path, record: &SnapshotRecord) -> Result<(), Failure> {
    let path = snapshot_record_path(state_dir);
    std::fs::create_dir_all(state_dir).map_err(|e| Failure::io(state_dir, "cannot create", e))?;
    let mut bytes = serde_json::to_vec_pretty(record).unwrap_or_default();
    bytes.push(b'\n');
    atomic_write(&path, &bytes, FILE_MODE, None).map_err(|e| Failure::io(&path, "cannot write", e))
}

/// Records a good snapshot (the failure before it is cleared); `stale_after` is
/// `snapshot.stale_after`.
pub fn record_snapshot(
    state_dir: &Path,
    taken: SnapshotTaken,
    stale_after: Duration,
) -> Result<(), Failure> {
    record_snapshot_kept(state_dir, taken, None, Vec::new(), stale_after)
}

/// Records a good snapshot with what its run also says: the failure of its copy into
/// `snapshot.copy_dir` (at the snapshot's time), and its warnings.
pub fn record_snapshot_kept(
    state_dir: &Path,
    taken: SnapshotTaken,
    copy_failure: Option<&Failure>,
    warnings: Vec<String>,
    stale_after: Duration,
) -> Result<(), Failure> {
    let copy_failure = copy_failure.map(|f| SnapshotFailure {
        time: taken.time.clone(),
        code: f.code,
        message: f.message.clone(),
    });
    write(
        state_dir,
        &SnapshotRecord {
            last: Some(taken),
            failure: None,
            copy_failure,
            warnings,
            stale_after_s: Some(stale_after.as_secs()),
        },
    )
}

/// Records a failed snapshot at `now`, keeping the last good one while its file is still
/// there (the record never names a snapshot that is gone).
pub fn record_snapshot_failure(
    state_dir: &Path,
    failure: &Failure,
    now: SystemTime,
    stale_after: Duration,
) -> Result<(), Failure> {
    let last = read_snapshot_record(state_dir)
        .ok()
        .flatten()
        .and_then(|r| r.last)
        .filter(|l| std::fs::symlink_metadata(&l.file).is_ok_and(|m| m.file_type().is_file()));
    write(
        state_dir,
        &SnapshotRecord {
            last,
            failure: Some(SnapshotFailure {
                time: rfc3339(now),
                code: failure.code,
                message: failure.message.clone(),
            }),
            copy_failure: None,
            warnings: Vec::new(),
            stale_after_s: Some(stale_after.as_secs()),
        },
    )
}
