//! The off-node record: `backup.json` in the persistent state folder, what this node
//! knows of the cluster's backups in the bucket, which `status` reads. Three slots, each
//! written by its own command and left alone by the others:
//!
//! - the upload: `etcd-setup snapshot` after each look at the bucket — the last upload
//!   this node made, the newest verified object of the cluster it saw (another member's,
//!   when that one uploaded in this period), and the failure of the last try (cleared by
//!   the next good one);
//! - the verification: `etcd-setup backups verify` ([`record_verification`]) — the last
//!   full proof of an object (decrypted, trial-restored), good or failed.
//!
//! Writers take turns on `backup.json.lock` beside it (a `flock`, as the snapshot lock),
//! read the record, change their slot and write it back atomically.

use super::{atomic_write, rfc3339, FILE_MODE, MAX_STATE};
use crate::reason::{Failure, ReasonCode};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The record's name in the persistent state folder.
pub const BACKUP_RECORD: &str = "backup.json";
/// The writers' lock beside it.
const LOCK: &str = "backup.json.lock";
/// How long a writer waits for another one (each holds it for one read and one write).
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// A time as the record writes it: RFC 3339 UTC and seconds since the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// RFC 3339 UTC.
    pub time: String,
    /// Seconds since the epoch.
    pub unix_time: u64,
}

impl Stamp {
    /// `t` as a stamp.
    pub fn of(t: SystemTime) -> Stamp {
        Stamp {
            time: rfc3339(t),
            unix_time: t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        }
    }

    /// The time again.
    pub fn at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.unix_time)
    }
}

/// One object this node uploaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupUpload {
    /// When its snapshot was taken (the time in its name).
    #[serde(flatten)]
    pub at: Stamp,
    /// Its key in the bucket.
    pub object: String,
    /// The bucket.
    pub bucket: String,
    /// Its size as stored (sealed), in bytes.
    pub size: u64,
    /// Whether it was read back and matched what was sent (its metadata then says
    /// `verified = read-back`); false when the read-back differed.
    pub verified: bool,
    /// The member that took the snapshot.
    pub member: String,
    /// etcd's revision in it.
    pub revision: i64,
    /// Whether it is age-encrypted.
    pub encrypted: bool,
}

/// The newest verified object of the cluster, as this node last saw the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupSeen {
    /// When its snapshot was taken (the time in its name).
    #[serde(flatten)]
    pub at: Stamp,
    /// Its key.
    pub object: String,
    /// The member that took it.
    pub member: String,
    /// Its size as stored.
    pub size: u64,
}

/// A failure, with its reason code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupFailure {
    /// When.
    #[serde(flatten)]
    pub at: Stamp,
    /// Its reason code (`backup-denied`, `backup-unreachable`, …).
    pub code: ReasonCode,
    /// Its sentence.
    pub message: String,
}

/// The last full verification of an object (`backups verify`): decrypted, its digests,
/// trailer and status checked, restored into a scratch data dir.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupVerification {
    /// When it ended.
    #[serde(flatten)]
    pub at: Stamp,
    /// The object's key.
    pub object: String,
    /// Whether it passed.
    pub ok: bool,
    /// Why not, when it failed: the reason code (`backup-verify-failed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ReasonCode>,
    /// And its sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What `backup.json` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupRecord {
    /// The last object this node uploaded.
    #[serde(default)]
    pub last_upload: Option<BackupUpload>,
    /// The newest verified object of the cluster at the last look (any member's).
    #[serde(default)]
    pub newest: Option<BackupSeen>,
    /// When this node last looked at the bucket successfully.
    #[serde(default)]
    pub checked: Option<Stamp>,
    /// The last try's failure, when it came after the last good one.
    #[serde(default)]
    pub failure: Option<BackupFailure>,
    /// The last full verification.
    #[serde(default)]
    pub last_verification: Option<BackupVerification>,
    /// `backup.period` in seconds when the upload slot was written: status warns when
    /// the newest verified object is older than two periods.
    #[serde(default)]
    pub period_s: Option<u64>,
}

/// The record's path in `state_dir`.
pub fn backup_record_path(state_dir: &Path) -> PathBuf {
    state_dir.join(BACKUP_RECORD)
}

/// Reads the record in `state_dir` (through [`super::read_record`]: no link, no FIFO, no
/// huge file); `None` when nothing was recorded yet.
pub fn read_backup_record(state_dir: &Path) -> io::Result<Option<BackupRecord>> {
    let path = backup_record_path(state_dir);
    super::read_json_record(&path, "a backup record", MAX_STATE)
}

/// Changes the record in `state_dir` with `change`, under the writers' lock. A record
/// that cannot be read is replaced (status has shown why; the slots are rewritten).
fn update(state_dir: &Path, change: impl FnOnce(&mut BackupRecord)) -> Result<(), Failure> {
    std::fs::create_dir_all(state_dir).map_err(|e| Failure::io(state_dir, "cannot create", e))?;
    let _lock = crate::shared::lock::RunLock::acquire(&state_dir.join(LOCK), LOCK_WAIT)?;
    let mut record = read_backup_record(state_dir)
        .ok()
        .flatten()
        .unwrap_or_default();
    change(&mut record);
    let path = backup_record_path(state_dir);
    let mut bytes = serde_json::to_vec_pretty(&record).unwrap_or_default();
    bytes.push(b'\n');
    atomic_write(&path, &bytes, FILE_MODE, None).map_err(|e| Failure::io(&path, "cannot write", e))
}

/// What one look at the bucket by `snapshot` found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadChecked {
    /// When the bucket was looked at.
    pub at: SystemTime,
    /// The object this run uploaded, if it did (none when another member's was recent).
    pub uploaded: Option<BackupUpload>,
    /// The newest verified object of the cluster after this run.
    pub newest: Option<BackupSeen>,
    /// `backup.period`.
    pub period: Duration,
}

/// Records a good look at the bucket: the upload made, if any, and the newest verified
/// object; the failure before it is cleared. The verification slot is left as it was.
pub fn record_upload(state_dir: &Path, done: UploadChecked) -> Result<(), Failure> {
    update(state_dir, |r| {
        if let Some(u) = done.uploaded {
            r.last_upload = Some(u);
        }
        r.newest = done.newest.or(r.newest.take());
        r.checked = Some(Stamp::of(done.at));
        r.failure = None;
        r.period_s = Some(done.period.as_secs());
    })
}

/// Records a failed upload (or look at the bucket) at `now`: `failure`, and `attempt`
/// when an object was written but not verified (its read-back differed). The last good
/// upload and the newest object seen are kept; the verification slot is left as it was.
pub fn record_upload_failure(
    state_dir: &Path,
    failure: &Failure,
    attempt: Option<BackupUpload>,
    now: SystemTime,
    period: Duration,
) -> Result<(), Failure> {
    update(state_dir, |r| {
        if let Some(a) = attempt {
            r.last_upload = Some(a);
        }
        r.failure = Some(BackupFailure {
            at: Stamp::of(now),
            code: failure.code,
            message: failure.message.clone(),
        });
        r.period_s = Some(period.as_secs());
    })
}

/// Records the end of a full verification of `object` at `at` (`backups verify`): `Ok`
/// when it passed, the failure when not. The upload slot is left as it was.
pub fn record_verification(
    state_dir: &Path,
    object: &str,
    outcome: Result<(), &Failure>,
    at: SystemTime,
) -> Result<(), Failure> {
    let (ok, code, message) = match outcome {
        Ok(()) => (true, None, None),
        Err(f) => (false, Some(f.code), Some(f.message.clone())),
    };
    update(state_dir, |r| {
        r.last_verification = Some(BackupVerification {
            at: Stamp::of(at),
            object: object.to_string(),
            ok,
            code,
            message,
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(s)
    }

    fn upload(object: &str) -> BackupUpload {
        BackupUpload {
            at: Stamp::of(t(1_796_118_300)),
            object: object.into(),
            bucket: "etcd-backups".into(),
            size: 4242,
            verified: true,
            member: "etcd-1".into(),
            revision: 4711,
            encrypted: true,
        }
    }

    #[test]
    fn each_slot_is_written_by_its_own_call_and_kept_by_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        assert_eq!(read_backup_record(state).unwrap(), None);
        let key = "etcd-setup/8e9e05c52164694d/20261201T094500Z-rev4711-etcd-1.db.age";
        record_verification(state, key, Ok(()), t(1_796_120_000)).unwrap();
        let seen = BackupSeen {
            at: Stamp::of(t(1_796_118_300)),
            object: key.into(),
            member: "etcd-1".into(),
            size: 4242,
        };
        record_upload(
            state,
            UploadChecked {
                at: t(1_796_118_400),
                uploaded: Some(upload(key)),
                newest: Some(seen.clone()),
                period: Duration::from_secs(3600),
            },
        )
        .unwrap();
        let r = read_backup_record(state).unwrap().unwrap();
        assert_eq!(r.last_upload, Some(upload(key)));
        assert_eq!(r.newest, Some(seen.clone()));
        assert_eq!(r.period_s, Some(3600));
        let v = r.last_verification.as_ref().unwrap();
        assert!(v.ok);
        assert_eq!((v.object.as_str(), v.at.unix_time), (key, 1_796_120_000));
        assert_eq!(v.at.time, "2026-12-01T10:13:20Z");

        // A failed verification replaces the good one and keeps the upload.
        let f = Failure::new(ReasonCode::BackupVerifyFailed, "the trial restore failed");
        record_verification(state, key, Err(&f), t(1_796_130_000)).unwrap();
        let r = read_backup_record(state).unwrap().unwrap();
        let v = r.last_verification.unwrap();
        assert!(!v.ok);
        assert_eq!(v.code, Some(ReasonCode::BackupVerifyFailed));
        assert_eq!(v.message.as_deref(), Some("the trial restore failed"));
        assert_eq!(r.last_upload, Some(upload(key)));

        // A failed upload keeps the last good one and what was seen; a good look after it
        // (another member's object was recent: no upload) clears it and keeps the upload.
        let denied = Failure::new(ReasonCode::BackupDenied, "SignatureDoesNotMatch");
        record_upload_failure(
            state,
            &denied,
            None,
            t(1_796_140_000),
            Duration::from_secs(60),
        )
        .unwrap();
        let r = read_backup_record(state).unwrap().unwrap();
        assert_eq!(r.failure.as_ref().unwrap().code, ReasonCode::BackupDenied);
        assert_eq!(r.last_upload, Some(upload(key)));
        assert_eq!(r.newest, Some(seen));
        assert_eq!(r.period_s, Some(60));
        assert!(r.last_verification.is_some());
        record_upload(
            state,
            UploadChecked {
                at: t(1_796_150_000),
                uploaded: None,
                newest: None,
                period: Duration::from_secs(3600),
            },
        )
        .unwrap();
        let r = read_backup_record(state).unwrap().unwrap();
        assert_eq!(r.failure, None);
        assert_eq!(r.last_upload, Some(upload(key)));
        assert_eq!(r.checked.unwrap().unix_time, 1_796_150_000);
        assert!(
            r.newest.is_some(),
            "a look that saw nothing new keeps the last seen"
        );
    }

    #[test]
    fn the_json_spells_codes_and_times_as_the_other_records() {
        let dir = tempfile::tempdir().unwrap();
        let f = Failure::new(ReasonCode::BackupDenied, "denied");
        record_upload_failure(
            dir.path(),
            &f,
            None,
            t(1_796_118_300),
            Duration::from_secs(3600),
        )
        .unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(BACKUP_RECORD)).unwrap())
                .unwrap();
        assert_eq!(v["failure"]["code"], "backup-denied");
        assert_eq!(v["failure"]["time"], "2026-12-01T09:45:00Z");
        assert_eq!(v["failure"]["unix_time"], 1_796_118_300);
        assert_eq!(v["period_s"], 3600);
        assert!(v["last_verification"].is_null());
    }

    #[test]
    fn a_record_that_is_not_json_is_an_error_to_read_and_replaced_by_a_write() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(BACKUP_RECORD), "{not json").unwrap();
        assert!(read_backup_record(dir.path()).is_err());
        record_verification(dir.path(), "k", Ok(()), t(1)).unwrap();
        let r = read_backup_record(dir.path()).unwrap().unwrap();
        assert_eq!(r.last_verification.unwrap().object, "k");
    }
}
