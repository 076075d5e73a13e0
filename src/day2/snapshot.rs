//! `etcd-setup snapshot`: a consistent snapshot of this member, verified, kept N deep.
//!
//! 1. `etcdctl snapshot save` from this member into `snapshot.dir/.partial-…` (etcdctl
//!    writes `….part` and renames it when the stream ended).
//! 2. Verified: the SHA-256 trailer etcd appends, then `snapshot status` of the file
//!    (hash, revision, total keys) with the release's etcdutl (etcdctl on 3.4).
//! 3. Renamed to `etcd-snapshot-<UTC time to the ms>-rev<revision>.db`, fsynced, folder fsynced; a
//!    file already of that name is moved aside (`.replaced-<time>`), never overwritten.
//! 4. Copied the same way into `snapshot.copy_dir` when configured.
//! 5. Each folder keeps the newest `snapshot.retain`; older ones are deleted, or moved
//!    into `pruned/` (`snapshot.prune = "move-aside"`). Retention is the one place a
//!    day-2 command deletes: pruning old backups is what operators expect (k3s prunes
//!    too), and `move-aside` keeps SPEC's "nothing is ever deleted" for those who want it.
//! 6. The result, or the failure, recorded in `snapshot.json` for `status`.
//!
//! Snapshots hold every secret of the Kubernetes cluster: the folders are 0700 and the
//! files 0600, owned by root.

use super::tools::{self, FileStatus};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::{Prune, Settings};
use crate::shared::report::{self, SnapshotTaken};
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The name every kept snapshot starts with.
pub const PREFIX: &str = "etcd-snapshot-";
/// And ends with.
pub const SUFFIX: &str = ".db";

/// What a snapshot run did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The snapshot, as recorded.
    pub taken: SnapshotTaken,
    /// Snapshots pruned (deleted or moved aside), with their new place if moved.
    pub pruned: Vec<(PathBuf, Option<PathBuf>)>,
}

fn failed(message: String) -> Failure {
    Failure::new(ReasonCode::SnapshotFailed, message)
}

/// Creates `dir` (0700) when missing.
fn ensure_dir(dir: &Path) -> Result<(), Failure> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Failure::io(dir, "cannot create the snapshot folder", e))
}

/// Removes what an earlier, interrupted run left (`.partial-*`), never a kept snapshot.
fn remove_partials(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".partial-") {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// Renames `from` to `to`, moving a file already at `to` aside first; then fsyncs the
/// folder.
fn put_in_place(from: &Path, to: &Path, now: SystemTime) -> Result<(), Failure> {
    if to.exists() {
        let aside = PathBuf::from(format!("{}.replaced-{}", to.display(), super::stamp(now)));
        fs::rename(to, &aside).map_err(|e| Failure::io(to, "cannot move aside", e))?;
    }
    fs::rename(from, to).map_err(|e| Failure::io(to, "cannot rename into", e))?;
    super::sync_dir(to.parent().unwrap_or(Path::new("/")))
}

/// Copies `file` into `dir` under the same name: a partial file, fsynced, renamed.
fn copy_into(file: &Path, dir: &Path, now: SystemTime) -> Result<PathBuf, Failure> {
    ensure_dir(dir)?;
    remove_partials(dir);
    let name = file.file_name().unwrap_or_default();
    let partial = dir.join(format!(".partial-{}", name.to_string_lossy()));
    let to = dir.join(name);
    fs::copy(file, &partial)
        .map_err(|e| Failure::io(&partial, "cannot copy the snapshot to", e))?;
    fs::File::open(&partial)
        .and_then(|f| {
            f.set_permissions(fs::Permissions::from_mode(0o600))?;
            f.sync_all()
        })
        .map_err(|e| Failure::io(&partial, "cannot sync", e))?;
    put_in_place(&partial, &to, now)?;
    Ok(to)
}

/// The kept snapshots in `dir`, newest first (the names sort by time).
pub fn list(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(PREFIX) && n.ends_with(SUFFIX))
                .collect()
        })
        .unwrap_or_default();
    names.sort_unstable_by(|a, b| b.cmp(a));
    names.into_iter().map(|n| dir.join(n)).collect()
}

/// Prunes `dir` to its newest `retain` snapshots.
fn prune(dir: &Path, retain: u64, how: Prune) -> Result<Vec<(PathBuf, Option<PathBuf>)>, Failure> {
    let mut done = Vec::new();
    for old in list(dir).into_iter().skip(retain as usize) {
        match how {
            Prune::Delete => {
                fs::remove_file(&old).map_err(|e| Failure::io(&old, "cannot prune", e))?;
                done.push((old, None));
            }
            Prune::MoveAside => {
                let aside = dir.join("pruned");
                ensure_dir(&aside)?;
                let to = aside.join(old.file_name().unwrap_or_default());
                fs::rename(&old, &to).map_err(|e| Failure::io(&old, "cannot move aside", e))?;
                done.push((old, Some(to)));
            }
        }
    }
    if !done.is_empty() {
        super::sync_dir(dir)?;
    }
    Ok(done)
}

/// Verifies a written snapshot: its SHA-256 trailer and etcd's own status of it.
pub fn verify(s: &Settings, file: &Path) -> Result<FileStatus, Failure> {
    tools::check_trailer(file)?;
    tools::file_status(&tools::snapshot_tool(&s.install_dir), file)
}

/// Takes, verifies, places, copies and prunes a snapshot at `now`.
pub fn take(s: &Settings, now: SystemTime) -> Result<Outcome, Failure> {
    let cfg = &s.upkeep.snapshot;
    ensure_dir(&cfg.dir)?;
    remove_partials(&cfg.dir);
    let ts = super::stamp_ms(now);
    let partial = cfg.dir.join(format!(".partial-{ts}{SUFFIX}"));
    let endpoint = super::own_endpoint(s);
    let client = super::own_client(s);
    // Asked first, within etcdctl's short timeouts: a save to a member that is down would
    // wait out all of snapshot.timeout redialling it.
    client.endpoint_status().map_err(|e| {
        failed(format!(
            "etcd at {endpoint} does not answer, no snapshot taken: {e}"
        ))
    })?;
    client
        .snapshot_save(&endpoint, &partial, cfg.timeout)
        .map_err(|e| {
            let _ = fs::remove_file(&partial);
            failed(format!(
                "cannot snapshot etcd at {endpoint} into {}: {e}",
                cfg.dir.display()
            ))
        })?;
    let status = match verify(s, &partial) {
        Ok(st) => st,
        Err(f) => {
            let _ = fs::remove_file(&partial);
            return Err(f);
        }
    };
    let size = fs::File::open(&partial)
        .and_then(|f| {
            f.set_permissions(fs::Permissions::from_mode(0o600))?;
            f.sync_all()?;
            Ok(f.metadata()?.len())
        })
        .map_err(|e| Failure::io(&partial, "cannot sync", e))?;
    let file = cfg
        .dir
        .join(format!("{PREFIX}{ts}-rev{}{SUFFIX}", status.revision));
    put_in_place(&partial, &file, now)?;
    let copy = match &cfg.copy_dir {
        Some(dir) => Some(copy_into(&file, dir, now)?),
        None => None,
    };
    let mut pruned = prune(&cfg.dir, cfg.retain, cfg.prune)?;
    if let Some(dir) = &cfg.copy_dir {
        pruned.extend(prune(dir, cfg.retain, cfg.prune)?);
    }
    Ok(Outcome {
        taken: SnapshotTaken {
            time: report::rfc3339(now),
            unix_time: now
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            revision: status.revision,
            size,
            file: file.display().to_string(),
            copy: copy.map(|c| c.display().to_string()),
            hash: status.hash,
            total_keys: status.total_keys,
        },
        pruned,
    })
}

/// `etcd-setup snapshot`: the exit code. No node lock and no operation record: a
/// snapshot only reads the running etcd (see `super::frame`).
pub fn command(args: &crate::cli::SnapshotArgs) -> u8 {
    super::frame::run(
        super::frame::Spec {
            command: crate::shared::report::Command::Snapshot,
            config: &args.config,
            dirs: &args.dirs,
            lock: None,
            record: None,
        },
        |f| {
            let s = &f.settings;
            let now = SystemTime::now();
            let out = take(s, now).inspect_err(|e| {
                if let Err(g) = report::record_snapshot_failure(
                    &args.dirs.state_dir,
                    e,
                    now,
                    s.upkeep.snapshot.stale_after,
                ) {
                    eprintln!("{}", crate::shared::printable::line(&g.headline()));
                }
            })?;
            report::record_snapshot(
                &args.dirs.state_dir,
                out.taken.clone(),
                s.upkeep.snapshot.stale_after,
            )?;
            let t = &out.taken;
            let mut lines = vec![format!(
                "snapshot {} revision {} size {} keys {} hash {:08x}{}",
                t.file,
                t.revision,
                t.size,
                t.total_keys,
                t.hash,
                t.copy
                    .as_ref()
                    .map_or(String::new(), |c| format!(" copy {c}"))
            )];
            for (old, to) in &out.pruned {
                lines.push(match to {
                    Some(to) => format!("pruned {} (moved to {})", old.display(), to.display()),
                    None => format!("pruned {} (deleted)", old.display()),
                });
            }
            Ok(lines)
        },
    )
}
