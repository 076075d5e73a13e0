//! `etcd-setup snapshot`: a consistent snapshot of this member, verified, kept N deep.
//!
//! 0. One snapshot at a time on the node: `snapshot.lock` in the live folder (`flock`,
//!    waited for at most `snapshot.timeout` plus 5 minutes). It is not the run lock, which
//!    `upgrade` holds while it takes its snapshot through here.
//! 1. `snapshot.dir` opened and checked ([`folder`]: root's, not writable by others, no
//!    link); `etcdctl snapshot save` from this member into a partial of a unique name in
//!    its private staging folder `.staging/` (created `O_EXCL|O_NOFOLLOW` first; etcdctl
//!    writes `….part` and renames it when the stream ended).
//! 2. Verified: the SHA-256 trailer etcd appends (hashed while etcdctl writes the
//!    partial, finished on the final file: [`tools::Growing`]), and `snapshot status` of
//!    the file (hash, revision, total keys) with the release's etcdutl (etcdctl on 3.4):
//!    read by the follower as soon as the stream is complete (while etcdctl syncs and
//!    renames), counted when the final file is that inode with those bytes, else read
//!    beside the hash's end; a bad trailer is the failure told.
//! 3. Renamed to its name ([`names`]: cluster ID, member, UTC time to the ms, revision),
//!    fsynced, folder fsynced; a file already of that name is moved aside
//!    (`.replaced-<time>`), never overwritten.
//! 4. Copied the same way into `snapshot.copy_dir` when configured. A failed copy is its
//!    own failure: the verified snapshot in `snapshot.dir` is still kept and recorded.
//! 5. Retention: each folder keeps the newest `snapshot.retain` of this member's
//!    snapshots, by the time in their names, the one just written always among them;
//!    older ones are moved into `pruned/` beside them. `pruned/` is the way back from a
//!    retention that went too far, not an archive: it keeps the newest
//!    `snapshot.pruned_retain` of this member's snapshots, none older than
//!    `snapshot.pruned_max_age`, and deletes the rest (the one place a day-2 command
//!    deletes a snapshot; its size is in status and the metrics). Names from the future
//!    (a clock that was ahead) are neither counted, moved nor deleted, and are warned
//!    about. Only strict names of this member are touched.
//! 6. Off the node with `[backup]` ([`offsite`]): uploaded to the bucket when this cluster
//!    has no verified object of the current `backup.period`, under the cluster lock
//!    `etcd-setup/backup`, encrypted, read back, then the bucket's retention. A failed
//!    upload is its own failure, as a failed copy is: the snapshot is still kept and
//!    recorded.
//! 7. The result, or the failure, recorded in `snapshot.json` (and the upload's in
//!    `backup.json`) for `status`.
//!
//! Every partial is removed on every exit path (a guard), and what a killed run left is
//! removed by the next (only its own, by pid and member). Snapshots hold every secret of
//! the Kubernetes cluster: the folders are 0700 and the files 0600, owned by root.

pub mod offsite;

use crate::member::folder::{Folder, Staged, STAGING};
use crate::member::names;
use crate::member::tools::{self, FileStatus};
use crate::member::{Member, ThisMember};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::{Settings, SnapshotSettings};
use crate::shared::digest::Digest256;
use crate::shared::report::{self, SnapshotTaken};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub use crate::member::names::{PREFIX, SUFFIX};

/// The snapshot lock's name in the live state folder.
pub const LOCK_FILE: &str = "snapshot.lock";
/// The folder inside each snapshot folder that retention moves old snapshots into.
pub const PRUNED: &str = "pruned";

/// What a snapshot run did.
#[derive(Debug)]
pub struct Outcome {
    /// The snapshot, as recorded.
    pub taken: SnapshotTaken,
    /// Its file's length and SHA-256 as its verification read them (what an upload
    /// compares the stream it seals with).
    pub digest: Digest256,
    /// Snapshots moved aside by retention: where they were, where they are.
    pub pruned: Vec<(PathBuf, PathBuf)>,
    /// Snapshots deleted from `pruned/` by its bounds.
    pub deleted: Vec<PathBuf>,
    /// The copy into `snapshot.copy_dir` failed (the snapshot itself is kept).
    pub copy_failure: Option<Failure>,
    /// The cluster's ID.
    pub cluster: u64,
    /// The version of the etcd that took it.
    pub etcd_version: String,
    /// What the upload to `[backup]` did, or why it failed (the snapshot itself is kept);
    /// `None` without `[backup]`, or before [`upload`] (`upgrade`'s snapshot stays on the
    /// node: its timer's next run uploads).
    pub offsite: Option<Result<offsite::Offsite, offsite::Failed>>,
    /// What the run warns about (names from the future, a retention that failed).
    pub warnings: Vec<String>,
}

fn failed(message: String) -> Failure {
    Failure::new(ReasonCode::SnapshotFailed, message)
}

/// Renames `from` in `staging` to `to` in `dir`, moving a file already at `to` aside
/// first (`.replaced-<time>`); then fsyncs `dir`.
fn put_in_place(
    staging: &Folder,
    from: &str,
    dir: &Folder,
    to: &str,
    now: SystemTime,
) -> Result<(), Failure> {
    if dir.exists(to) {
        let aside = format!("{to}.replaced-{}", super::stamp(now));
        dir.rename(to, dir, &aside)
            .map_err(|e| Failure::io(&dir.join(to), "cannot move aside", e))?;
    }
    staging
        .rename(from, dir, to)
        .map_err(|e| Failure::io(&dir.join(to), "cannot rename into", e))?;
    dir.sync()
}

/// Copies `name` from `from` into the folder `copy_dir` under the same name: a partial
/// in its staging folder, fsynced, renamed; the partial removed on every failure.
fn copy_into(
    from: &Folder,
    name: &str,
    copy_dir: &Path,
    member: &str,
    now: SystemTime,
) -> Result<(Folder, PathBuf), Failure> {
    let to = Folder::open(copy_dir, "snapshot.copy_dir")?;
    let staging = to.private(STAGING)?;
    crate::member::folder::remove_dead_partials(&staging, member);
    let (staged, mut out) = Staged::create(&staging, member)?;
    let partial = staging.join(&staged.part);
    let mut src = from
        .open_file(name)
        .map_err(|e| Failure::io(&from.join(name), "cannot open", e))?;
    io::copy(&mut src, &mut out)
        .map_err(|e| Failure::io(&partial, "cannot copy the snapshot to", e))?;
    out.sync_all()
        .map_err(|e| Failure::io(&partial, "cannot sync", e))?;
    drop(out);
    put_in_place(&staging, &staged.part, &to, name, now)?;
    staged.keep();
    let path = to.join(name);
    Ok((to, path))
}

/// The strict snapshot names in `dir` that retention may move: this member's of this
/// cluster, and old names without either; with their parsed names.
fn own_snapshots(dir: &Folder, cluster: u64, member: &str) -> Vec<(String, names::SnapshotName)> {
    dir.names()
        .into_iter()
        .filter_map(|n| names::parse(&n).map(|p| (n, p)))
        .filter(|(_, p)| match (&p.cluster, &p.member) {
            (Some(c), Some(m)) => *c == cluster && m == member,
            _ => p.cluster.is_none() && p.member.is_none(),
        })
        .filter(|(n, _)| dir.is_file(n))
        .collect()
}

/// The kept snapshots of this member in `dir` (strict names, regular files), newest first
/// by the time in their names.
pub fn list(dir: &Path, cluster: u64, member: &str) -> Vec<PathBuf> {
    let Ok(folder) = Folder::open(dir, "snapshot.dir") else {
        return Vec::new();
    };
    let mut own = own_snapshots(&folder, cluster, member);
    own.sort_by_key(|(_, p)| std::cmp::Reverse((p.time, p.revision)));
    own.into_iter().map(|(n, _)| dir.join(n)).collect()
}

/// What retention did in one folder.
#[derive(Debug, Default)]
struct Retained {
    /// Snapshots moved into `pruned/`: where they were, where they are.
    moved: Vec<(PathBuf, PathBuf)>,
    /// Snapshots deleted from `pruned/` by its bounds.
    deleted: Vec<PathBuf>,
    /// The files in `pruned/` afterwards, and their bytes.
    usage: (u64, u64),
}

/// Keeps in `dir` the newest `snapshot.retain` of this member's snapshots, `just_written`
/// always among them; moves the others into `pruned/`, which keeps the newest
/// `snapshot.pruned_retain` of them, none older than `snapshot.pruned_max_age`. Names
/// from after `now` are neither counted, moved nor deleted: a warning names them.
fn retain(
    dir: &Folder,
    just_written: &str,
    (cluster, member): (u64, &str),
    cfg: &SnapshotSettings,
    now: SystemTime,
    warnings: &mut Vec<String>,
) -> Result<Retained, Failure> {
    let mut own: Vec<_> = own_snapshots(dir, cluster, member)
        .into_iter()
        .filter(|(n, _)| n != just_written)
        .collect();
    let (future, mut past): (Vec<_>, Vec<_>) = own.drain(..).partition(|(_, p)| p.time > now);
    if !future.is_empty() {
        let mut shown: Vec<&str> = future.iter().map(|(n, _)| n.as_str()).collect();
        shown.sort_unstable();
        warnings.push(format!(
            "{} {} holds {} snapshot(s) named after the time now ({}): the clock was ahead \
             when they were taken, or they were copied in; retention neither counts nor \
             moves them: move them away when they are not needed",
            dir.key,
            dir.path.display(),
            future.len(),
            shown.join(", ")
        ));
    }
    past.sort_by_key(|(_, p)| std::cmp::Reverse((p.time, p.revision)));
    let keep = usize::try_from(cfg.retain.saturating_sub(1)).unwrap_or(usize::MAX);
    let old: Vec<_> = past.into_iter().skip(keep).collect();
    let mut done = Retained::default();
    if old.is_empty() && !dir.exists(PRUNED) {
        return Ok(done);
    }
    let aside = dir.private(PRUNED)?;
    for (name, _) in old {
        let mut to = name.clone();
        if aside.exists(&to) {
            to = format!("{name}.{}", super::stamp(now));
        }
        dir.rename(&name, &aside, &to)
            .map_err(|e| Failure::io(&dir.join(&name), "cannot move aside", e))?;
        done.moved.push((dir.join(&name), aside.join(&to)));
    }
    // pruned/'s own bounds: this member's snapshots by the time in their names.
    let mut there: Vec<_> = own_snapshots(&aside, cluster, member)
        .into_iter()
        .filter(|(_, p)| p.time <= now)
        .collect();
    there.sort_by_key(|(_, p)| std::cmp::Reverse((p.time, p.revision)));
    let oldest = now.checked_sub(cfg.pruned_max_age);
    let keep = usize::try_from(cfg.pruned_retain).unwrap_or(usize::MAX);
    for (i, (name, p)) in there.iter().enumerate() {
        if i < keep && oldest.is_none_or(|o| p.time >= o) {
            continue;
        }
        aside
            .remove(name)
            .map_err(|e| Failure::io(&aside.join(name), "cannot delete", e))?;
        done.deleted.push(aside.join(name));
    }
    aside.sync()?;
    dir.sync()?;
    done.usage = aside.usage();
    Ok(done)
}

/// Verifies a written snapshot: its SHA-256 trailer and etcd's own status of it. The two
/// run at once (each reads the whole file: the hash here on a thread, `snapshot status`
/// in its child), which costs the longer of the two instead of both; a bad trailer is
/// still the failure told, as when the trailer was checked first.
pub fn verify(member: &ThisMember, file: &Path) -> Result<FileStatus, Failure> {
    verify_followed(member, file, None).map(|(status, _)| status)
}

/// [`verify`], the trailer's hash finished from what `followed` hashed while etcdctl
/// wrote the file ([`tools::Growing`]), when there is that; with the whole file's length
/// and SHA-256 as the trailer's check read it.
fn verify_followed(
    member: &ThisMember,
    file: &Path,
    followed: Option<tools::Growing>,
) -> Result<(FileStatus, Digest256), Failure> {
    // The follower's status, read while etcdctl still synced and renamed, when it holds
    // for this file (tools::Growing): only the rest of the hash is left.
    let followed = match followed {
        Some(g) if g.has_early_status() => match g.finish_with_status(file)? {
            (digest, Some(status)) => return Ok((status, digest)),
            (digest, None) => {
                return Ok((tools::file_status(member.snapshot_tool(), file)?, digest));
            }
        },
        other => other,
    };
    std::thread::scope(|t| {
        let trailer = t.spawn(move || match followed {
            Some(g) => g.finish(file),
            None => tools::check_trailer(file),
        });
        let status = tools::file_status(member.snapshot_tool(), file);
        let digest = trailer.join().unwrap_or_else(|_| {
            Err(Failure::new(
                ReasonCode::SnapshotCorrupt,
                format!(
                    "{}: the thread checking its trailer panicked",
                    file.display()
                ),
            ))
        })?;
        Ok((status?, digest))
    })
}

/// Takes, verifies, places, copies and keeps `snapshot.retain` deep a snapshot at `now`,
/// one at a time on the node (the snapshot lock in `run_dir`).
pub fn take(
    s: &Settings,
    member: &Member,
    run_dir: &Path,
    now: SystemTime,
) -> Result<Outcome, Failure> {
    let cfg = &s.data.snapshot;
    let _lock = crate::shared::lock::RunLock::acquire(
        &run_dir.join(LOCK_FILE),
        cfg.timeout + Duration::from_secs(300),
    )?;
    let dir = Folder::open(&cfg.dir, "snapshot.dir")?;
    let staging = dir.private(STAGING)?;
    crate::member::folder::remove_dead_partials(&staging, &s.node_name);
    remove_old_partials(&dir);
    let endpoint = member.own.client_url.clone();
    let client = member.node.own_client();
    // Asked first, within etcdctl's short timeouts: a save to a member that is down would
    // wait out all of snapshot.timeout redialling it. It names the cluster too.
    let (cluster, etcd_version) = client
        .endpoint_status()
        .map_err(|e| {
            failed(format!(
                "etcd at {endpoint} does not answer, no snapshot taken: {e}"
            ))
        })?
        .first()
        .map(|st| (st.cluster_id.0, st.version.clone()))
        .ok_or_else(|| failed(format!("etcd at {endpoint} gave no status")))?;
    let (staged, part) = Staged::create(&staging, &s.node_name)?;
    drop(part);
    let partial = staged.path();
    // etcdctl writes the partial we created (the same inode, renamed into place when
    // complete); opened first, it is hashed while it grows, so that only its end is left
    // to hash after the save. Without it the whole file is hashed after.
    let growing = staging.open_file(&staged.part).ok();
    let saved = std::sync::atomic::AtomicBool::new(false);
    let (save, followed) = std::thread::scope(|t| {
        let tool = member.own.snapshot_tool();
        let follower = growing.map(|f| t.spawn(|| tools::Growing::follow(f, &saved, Some(tool))));
        let save = client.snapshot_save(&endpoint, &partial, cfg.timeout);
        saved.store(true, std::sync::atomic::Ordering::Release);
        (save, follower.and_then(|h| h.join().ok().flatten()))
    });
    save.map_err(|e| {
        let text = e.to_string();
        if tools::says_disk_full(&text) {
            Failure::new(
                ReasonCode::DiskFull,
                format!(
                    "the disk holding snapshot.dir {} is full (etcdctl: {text}); free \
                         space there (snapshots moved aside are in its {PRUNED}/) and run \
                         again",
                    cfg.dir.display()
                ),
            )
        } else {
            failed(format!(
                "cannot snapshot etcd at {endpoint} into {}: {text}",
                cfg.dir.display()
            ))
        }
    })?;
    let file = staging
        .open_file(&staged.name)
        .map_err(|e| Failure::io(&partial, "cannot open", e))?;
    let (status, digest) = verify_followed(&member.own, &partial, followed)?;
    // Created 0600 and truncated by etcdctl, it is that already: a chmod all the same
    // would dirty the inode etcdctl just synced, and cost this sync a journal commit.
    let meta = file
        .metadata()
        .map_err(|e| Failure::io(&partial, "cannot stat", e))?;
    if meta.permissions().mode() & 0o7777 != 0o600 {
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| Failure::io(&partial, "cannot restrict", e))?;
    }
    file.sync_all()
        .map_err(|e| Failure::io(&partial, "cannot sync", e))?;
    let size = meta.len();
    drop(file);
    let name = names::name_for(cluster, &s.node_name, now, status.revision);
    put_in_place(&staging, &staged.name, &dir, &name, now)?;
    staged.keep();
    let kept = dir.join(&name);

    let mut warnings = Vec::new();
    let (copy, copy_failure) = match &cfg.copy_dir {
        Some(copy_dir) => match copy_into(&dir, &name, copy_dir, &s.node_name, now) {
            Ok(c) => (Some(c), None),
            Err(f) => (None, Some(f)),
        },
        None => (None, None),
    };
    let me = (cluster, s.node_name.as_str());
    let (mut pruned, mut deleted, mut usage) = (Vec::new(), Vec::new(), (0, 0));
    let mut folders = vec![&dir];
    if let Some((c, _)) = &copy {
        folders.push(c);
    }
    for f in folders {
        match retain(f, &name, me, cfg, now, &mut warnings) {
            Ok(done) => {
                pruned.extend(done.moved);
                deleted.extend(done.deleted);
                usage = (usage.0 + done.usage.0, usage.1 + done.usage.1);
            }
            Err(e) => warnings.push(format!(
                "retention in {} {} failed, nothing more moved aside: {}",
                f.key,
                f.path.display(),
                e.headline()
            )),
        }
    }
    Ok(Outcome {
        offsite: None,
        digest,
        cluster,
        etcd_version,
        taken: SnapshotTaken {
            time: report::rfc3339(now),
            unix_time: now
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            revision: status.revision,
            size,
            file: kept.display().to_string(),
            copy: copy.map(|(_, c)| c.display().to_string()),
            hash: status.hash,
            total_keys: status.total_keys,
            pruned_files: usage.0,
            pruned_bytes: usage.1,
        },
        pruned,
        deleted,
        copy_failure,
        warnings,
    })
}

/// Uploads the snapshot `out` kept to `[backup]` when configured ([`offsite`]), and notes
/// in `out` what that did.
pub fn upload(s: &Settings, member: &Member, out: &mut Outcome, now: SystemTime) {
    let Some(b) = &s.backup else {
        return;
    };
    let file = PathBuf::from(&out.taken.file);
    let placed = offsite::Placed {
        file: &file,
        digest: out.digest,
        cluster: out.cluster,
        member: &s.node_name,
        revision: out.taken.revision,
        etcd_version: &out.etcd_version,
        total_keys: out.taken.total_keys,
        time: now,
    };
    out.offsite = Some(offsite::upload(b, &member.node.own_client(), &placed));
}

/// Removes the `.partial-*` files an agent before the staging folder left in `dir`
/// (regular files only; under the snapshot lock, no run of this agent writes them).
fn remove_old_partials(dir: &Folder) {
    for n in dir.names() {
        if n.starts_with(".partial-") && dir.is_file(&n) {
            dir.remove_partial(&n);
        }
    }
}

/// Records `out` in `snapshot.json` in `state_dir`, and its upload in `backup.json`.
pub fn record(state_dir: &Path, out: &Outcome, s: &Settings) -> Result<(), Failure> {
    report::record_snapshot_kept(
        state_dir,
        out.taken.clone(),
        out.copy_failure.as_ref(),
        out.warnings.clone(),
        s.data.snapshot.stale_after,
    )?;
    let (Some(b), Some(done)) = (&s.backup, &out.offsite) else {
        return Ok(());
    };
    match done {
        Ok(o) => report::record_upload(
            state_dir,
            report::UploadChecked {
                at: o.at,
                uploaded: o.uploaded.clone(),
                newest: o.newest.clone(),
                period: b.period,
            },
        ),
        Err(f) => report::record_upload_failure(
            state_dir,
            &f.failure,
            f.attempt.as_deref().cloned(),
            SystemTime::now(),
            b.period,
        ),
    }
}

/// `etcd-setup snapshot`: the exit code. No node lock and no operation record: a
/// snapshot only reads the running etcd (see `super::frame`); snapshots take turns on
/// their own lock ([`LOCK_FILE`]).
pub fn command(args: &crate::cli::SnapshotArgs) -> u8 {
    super::frame::run(
        super::frame::Spec {
            command: crate::shared::report::Command::Snapshot,
            config: &args.config,
            dirs: &args.dirs,
            lock: None,
            record: None,
            json: false,
        },
        |f| {
            let s = &f.settings;
            let now = SystemTime::now();
            let out = take(s, &f.member, &f.paths.run_dir, now).inspect_err(|e| {
                if let Err(g) = report::record_snapshot_failure(
                    &f.paths.state_dir,
                    e,
                    now,
                    s.data.snapshot.stale_after,
                ) {
                    eprintln!("{}", crate::shared::printable::line(&g.headline()));
                }
            })?;
            let mut out = out;
            upload(s, &f.member, &mut out, now);
            record(&f.paths.state_dir, &out, s)?;
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
                lines.push(format!(
                    "pruned {} (moved to {})",
                    old.display(),
                    to.display()
                ));
            }
            for gone in &out.deleted {
                lines.push(format!(
                    "deleted {} (past snapshot.pruned_retain {} or snapshot.pruned_max_age {} h)",
                    gone.display(),
                    s.data.snapshot.pruned_retain,
                    s.data.snapshot.pruned_max_age.as_secs() / 3600
                ));
            }
            let mut warnings = out.warnings.clone();
            let mut upload_failure = None;
            match (&s.backup, out.offsite) {
                (Some(b), Some(Ok(done))) => {
                    lines.extend(offsite::lines(b, &done));
                    warnings.extend(done.warnings);
                }
                (_, Some(Err(f))) => upload_failure = Some(f.failure),
                _ => {}
            }
            for w in &warnings {
                eprintln!("warning: {}", crate::shared::printable::line(w));
            }
            let failure = match (out.copy_failure, upload_failure) {
                (Some(copy), Some(upload)) => {
                    // Both are recorded; the copy's is the command's, the upload's is said.
                    eprintln!(
                        "warning: the upload failed too: {}",
                        crate::shared::printable::line(&upload.headline())
                    );
                    Some(copy)
                }
                (copy, upload) => copy.or(upload),
            };
            match failure {
                // The snapshot is kept and recorded; its copy or its upload failed: say
                // what was done, then fail with that reason.
                Some(copy_failed) => {
                    for l in &lines {
                        crate::shared::output::line(l);
                    }
                    Err(copy_failed)
                }
                None => Ok(lines),
            }
        },
    )
}
