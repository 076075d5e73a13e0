//! Proving that a plaintext snapshot file restores (`backups verify`, `restore
//! --from-backup`), before anyone relies on it:
//! 1. its SHA-256 is the one its backup's metadata recorded;
//! 2. etcd's SHA-256 trailer matches, and `snapshot status` (etcdutl on 3.5+, etcdctl on
//!    3.4) reads it ([`crate::day2::snapshot::verify`]'s two checks), at the recorded
//!    revision;
//! 3. `snapshot restore` makes a data dir of it, in a root-only scratch folder removed
//!    afterwards whatever happens (a guard), and the restored database holds the same
//!    key revisions up to the same revision as the snapshot (both read as
//!    `member/bolt.rs` reads a database, without etcd running). No revision bump:
//!    the trial restores the data as it is.
//!
//! Every failure is `backup-verify-failed`, naming the file and what did not hold.

use crate::member::tools;
use crate::reason::{Failure, ReasonCode};
use crate::shared::bolt::Db;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// etcd's bucket of key revisions (`main_sub` revision → KeyValue).
const KEY_BUCKET: &[u8] = b"key";
/// Pages a count may read: 2^24 pages of 4 KiB are 64 GiB, past any etcd quota.
const MAX_PAGES: usize = 1 << 24;
/// How long a trial `snapshot restore` may take.
const RESTORE_DEADLINE: Duration = Duration::from_secs(1800);

/// What the backup's metadata says the snapshot is.
#[derive(Debug, Clone)]
pub struct Expect<'a> {
    /// SHA-256 of the plaintext snapshot file.
    pub sha256: [u8; 32],
    /// The revision it holds.
    pub revision: i64,
    /// How many keys etcd's `snapshot status` counted when it was taken (`None`: not
    /// recorded, nothing to compare).
    pub total_keys: Option<u64>,
    /// The etcd release that took it, e.g. `3.5.16`.
    pub etcd_version: &'a str,
}

/// A snapshot that restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trial {
    /// The revision the snapshot and the restored data hold.
    pub revision: i64,
    /// Key revisions (etcd's `key` bucket: every version of every key not compacted
    /// away), the same in the snapshot and the restored data.
    pub keys: u64,
    /// The etcd release it was recorded with.
    pub etcd_version: String,
    /// How long the proof took.
    pub took: Duration,
}

fn failed(message: String) -> Failure {
    Failure::new(ReasonCode::BackupVerifyFailed, message)
}

/// The tool that reads and restores a snapshot of `version` among `bin_dir`'s binaries:
/// etcdutl from 3.5, etcdctl on 3.4 (which has no etcdutl).
pub fn tool_for(bin_dir: &Path, version: &str) -> Result<PathBuf, Failure> {
    let mut parts = version.trim_start_matches('v').split('.');
    let (major, minor) = (
        parts.next().and_then(|p| p.parse::<u32>().ok()),
        parts.next().and_then(|p| p.parse::<u32>().ok()),
    );
    let name = match (major, minor) {
        (Some(3), Some(m)) if m <= 4 => "etcdctl",
        (Some(3), Some(_)) => "etcdutl",
        _ => {
            return Err(failed(format!(
                "the backup records etcd version {version:?}, which is no 3.x release"
            )))
        }
    };
    let tool = bin_dir.join(name);
    if !tool.is_file() {
        return Err(failed(format!(
            "{} is missing: a snapshot of etcd {version} is read with {name}",
            tool.display()
        )));
    }
    Ok(tool)
}

/// Proves `file` (a plaintext snapshot) is what `expect` says and restores, with the
/// tools in `bin_dir`, restoring into a new folder inside `scratch` (root's, not
/// writable by others) that is removed again.
pub fn trial(
    file: &Path,
    expect: &Expect,
    bin_dir: &Path,
    scratch: &Path,
) -> Result<Trial, Failure> {
    let started = Instant::now();
    let tool = tool_for(bin_dir, expect.etcd_version)?;
    let as_verify = |f: Failure| match f.code {
        ReasonCode::DiskFull => f,
        _ => failed(f.message),
    };

    // 1. The bytes are the ones backed up.
    let sha = sha256(file).map_err(as_verify)?;
    if sha != expect.sha256 {
        return Err(failed(format!(
            "{}: its SHA-256 is {}, its backup's metadata says {} (damaged in storage or \
             transit, or another file)",
            file.display(),
            hex(&sha),
            hex(&expect.sha256)
        )));
    }
    // 2. etcd's trailer and its own status, at the recorded revision.
    tools::check_trailer(file).map_err(as_verify)?;
    let status = tools::file_status(&tool, file).map_err(as_verify)?;
    if status.revision != expect.revision {
        return Err(failed(format!(
            "{}: it holds revision {}, its backup's metadata says {} (the metadata is of \
             another snapshot)",
            file.display(),
            status.revision,
            expect.revision
        )));
    }
    if let Some(want) = expect.total_keys.filter(|&n| n != status.total_keys) {
        return Err(failed(format!(
            "{}: etcd counts {} keys in it, its backup's metadata says {want} (the metadata \
             is of another snapshot)",
            file.display(),
            status.total_keys
        )));
    }
    let (keys, last) = key_revisions(file)?;
    check_revision(file, "the snapshot", last.as_deref(), status.revision)?;

    // 3. A trial restore into a scratch data dir of root's alone.
    let dir = Scratch::create(scratch)?;
    let data = dir.path.join("data");
    let args = vec![
        "snapshot".to_string(),
        "restore".into(),
        file.display().to_string(),
        "--name=trial".into(),
        "--initial-cluster=trial=http://127.0.0.1:2380".into(),
        "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
        "--initial-cluster-token=etcd-setup-trial".into(),
        format!("--data-dir={}", data.display()),
    ];
    tools::run(&tool, &args, RESTORE_DEADLINE).map_err(|e| {
        if crate::member::tools::says_disk_full(&e) {
            Failure::new(
                ReasonCode::DiskFull,
                format!(
                    "the disk holding {} is full (trial restore of {}: {e}); free space there",
                    scratch.display(),
                    file.display()
                ),
            )
        } else {
            failed(format!(
                "{}: the trial restore into {} failed: {e}",
                file.display(),
                data.display()
            ))
        }
    })?;
    let db = data.join("member").join("snap").join("db");
    let (restored, restored_last) = key_revisions(&db)?;
    if restored != keys {
        return Err(failed(format!(
            "{}: the restored data holds {restored} key revisions, the snapshot {keys}",
            file.display()
        )));
    }
    check_revision(
        file,
        "the restored data",
        restored_last.as_deref(),
        status.revision,
    )?;
    drop(dir);
    Ok(Trial {
        revision: status.revision,
        keys,
        etcd_version: expect.etcd_version.to_string(),
        took: started.elapsed(),
    })
}

/// SHA-256 of `file`, streamed.
fn sha256(file: &Path) -> Result<[u8; 32], Failure> {
    let mut f = tools::open_regular(file)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Failure::io(file, "cannot read", e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// How many entries etcd's `key` bucket of the database `db` holds, and its last key.
fn key_revisions(db: &Path) -> Result<(u64, Option<Vec<u8>>), Failure> {
    let unreadable = |e: String| {
        failed(format!(
            "{}: unreadable as etcd's database: {e}",
            db.display()
        ))
    };
    Db::open(db)
        .map_err(unreadable)?
        .count(KEY_BUCKET, MAX_PAGES)
        .map_err(unreadable)?
        .ok_or_else(|| {
            failed(format!(
                "{} has no `key` bucket: no etcd data",
                db.display()
            ))
        })
}

/// The newest key revision `last` (8 bytes of main revision, big-endian, `_`, 8 of sub
/// revision) is `revision`; an empty key space has nothing to compare.
fn check_revision(
    file: &Path,
    what: &str,
    last: Option<&[u8]>,
    revision: i64,
) -> Result<(), Failure> {
    let Some(last) = last else {
        return Ok(());
    };
    let main = last
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(i64::from_be_bytes)
        .ok_or_else(|| {
            failed(format!(
                "{}: {what} holds a key revision of {} bytes",
                file.display(),
                last.len()
            ))
        })?;
    if main != revision {
        return Err(failed(format!(
            "{}: {what} holds key revisions up to {main}, `snapshot status` says {revision}",
            file.display()
        )));
    }
    Ok(())
}

/// A new folder of root's alone (0700) in a parent of root's not writable by others;
/// removed with everything in it when dropped, whatever happened.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn create(parent: &Path) -> Result<Scratch, Failure> {
        let m =
            std::fs::symlink_metadata(parent).map_err(|e| Failure::io(parent, "cannot stat", e))?;
        if !m.is_dir() || m.uid() != nix::unistd::geteuid().as_raw() || m.mode() & 0o022 != 0 {
            return Err(failed(format!(
                "{} is no folder of root's closed to others (uid {}, mode {:04o}, a link or \
                 folder): the trial restore needs one",
                parent.display(),
                m.uid(),
                m.mode() & 0o7777
            )));
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = parent.join(format!(".trial-{}-{nanos:09}", std::process::id()));
        // `create`, not `create_all`: exclusive, so nothing planted there is used.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| Failure::io(&path, "cannot create", e))?;
        Ok(Scratch { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Ours alone, made above; remove_dir_all follows no link.
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!(
                "warning: cannot remove the trial restore's {}: {e}",
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_follows_the_release() {
        let d = tempfile::tempdir().unwrap();
        for t in ["etcdctl", "etcdutl"] {
            std::fs::write(d.path().join(t), "").unwrap();
        }
        assert!(tool_for(d.path(), "3.4.23").unwrap().ends_with("etcdctl"));
        assert!(tool_for(d.path(), "3.5.16").unwrap().ends_with("etcdutl"));
        assert!(tool_for(d.path(), "v3.6.0").unwrap().ends_with("etcdutl"));
        let e = tool_for(d.path(), "banana").unwrap_err();
        assert_eq!(e.code, ReasonCode::BackupVerifyFailed);
        std::fs::remove_file(d.path().join("etcdutl")).unwrap();
        let e = tool_for(d.path(), "3.5.16").unwrap_err();
        assert!(e.message.contains("etcdutl is missing"), "{}", e.message);
    }

    #[test]
    fn a_scratch_parent_open_to_others_is_refused_and_a_scratch_is_removed() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Scratch::create(d.path()).err().unwrap();
        assert_eq!(e.code, ReasonCode::BackupVerifyFailed);
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let s = Scratch::create(d.path()).unwrap();
        assert_eq!(std::fs::metadata(&s.path).unwrap().mode() & 0o7777, 0o700);
        std::fs::write(s.path.join("x"), "y").unwrap();
        let p = s.path.clone();
        drop(s);
        assert!(!p.exists());
    }
}
