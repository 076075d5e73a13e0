//! `etcd-setup restore FILE`: after the cluster lost quorum or its data, a snapshot
//! becomes a new one-member cluster on this node; the other nodes then join it. The
//! steps, from the file's checks to the one forced start, are the one restore,
//! [`crate::member::restore`], which `run` runs too (`backup.restore_when_empty`).
//!
//! `etcd-setup restore --from-backup latest|NAME` (every etcd VM lost): the backup of
//! this configuration's cluster (or `--cluster ID`'s) in the `[backup]` bucket is first
//! fetched, decrypted and proven into a root-only scratch copy in `snapshot.dir`
//! ([`crate::backup::fetch`], as `backups verify` does: digests, trailer, status, a
//! trial restore), before etcd is touched; that copy is then the FILE of the restore,
//! named with the cluster ID of its metadata, and removed afterwards whatever happened.
//!
//! `restore FILE` restores what it checked (issue 38: a FILE another user could swap
//! between the checks and `etcdutl snapshot restore` was): FILE is refused when a folder
//! above it is not root's or may be written by group or others, opened once without
//! following a link, and copied into the same kind of root-only scratch folder; the copy
//! is checked, restored and removed.
//!
//! The command runs in the day-2 frame ([`super::frame`]): under the node lock (no `run`,
//! upgrade, leave or second restore beside it), with its operation record, and with
//! signals held from etcd's stop until its start.

use super::backups;
use super::frame::{self, Spec};
use crate::member::restore::{refuse_while_peers_run, restore, warn};
use crate::member::service::{self, ByCaller, HeldBetween, Service};
use crate::reason::{Failure, ReasonCode};
use crate::shared::report::Command;
use std::time::SystemTime;

pub use crate::member::restore::{serving_peers, Restored};

/// `etcd-setup restore`: the exit code.
pub fn command(args: &crate::cli::RestoreArgs) -> u8 {
    // clap makes FILE and --from-backup exclusive and one of them required.
    let what = match (&args.from_backup, &args.file) {
        (Some(which), _) => format!("the backup {which}"),
        (None, Some(file)) => file.display().to_string(),
        (None, None) => "nothing".into(),
    };
    frame::run(
        Spec {
            command: Command::Restore,
            config: &args.config,
            dirs: &args.dirs,
            lock: Some(args.lock_timeout),
            record: Some(&format!("checking {what}")),
            json: false,
        },
        |f| {
            let s = &f.settings;
            let systemd;
            let service: &dyn Service = if args.no_systemd {
                &ByCaller
            } else {
                systemd = service::Etcd::connect(s)?;
                &systemd
            };
            // A backup is fetched and proven (a trial restore) before etcd is touched; its
            // scratch copy goes when `proven` drops, whatever the restore did.
            let proven = match &args.from_backup {
                Some(which) => {
                    refuse_while_peers_run(s)?;
                    Some(from_backup(f, args, which)?)
                }
                None => None,
            };
            let copied = match (&proven, &args.file) {
                (None, Some(file)) => {
                    f.step(
                        &format!("copying {} to check and restore it", file.display()),
                        false,
                    );
                    Some(private_copy(file, &s.data.snapshot.dir)?)
                }
                _ => None,
            };
            let (file, shown) = match (&proven, &args.file) {
                (Some(p), _) => (
                    p.file(),
                    crate::backup::fetch::shown(
                        backups::settings(s, &args.config)?,
                        &p.backup.backup.key,
                    ),
                ),
                (None, Some(file)) => (
                    copied.as_ref().map_or(file.as_path(), |c| c.file()),
                    file.display().to_string(),
                ),
                (None, None) => {
                    return Err(Failure::new(
                        ReasonCode::ConfigInvalid,
                        "name the snapshot FILE or --from-backup latest|NAME",
                    ))
                }
            };
            // etcd is stopped and started again: status says so rather than `failed`.
            f.step(
                &format!("restoring {shown} (etcd is stopped and started again)"),
                true,
            );
            let held = HeldBetween::new(service, frame::hold);
            let r = restore(
                s,
                file,
                args.skip_hash_check,
                args.cluster_check,
                &held,
                SystemTime::now(),
            )
            .map_err(|mut f| {
                // The operator named FILE, not its copy.
                if let (Some(c), Some(given)) = (&copied, &args.file) {
                    f.message = f.message.replace(
                        &c.file().display().to_string(),
                        &given.display().to_string(),
                    );
                }
                f
            })?;
            let mut lines = vec![format!(
                "restored {shown} (revision {}, {} keys) into {} as a one-member cluster of {}",
                r.revision,
                r.total_keys,
                r.data_dir.display(),
                s.node_name
            )];
            lines.push(r.aside_line());
            if let Some(c) = copied {
                let scratch = c.file().display().to_string();
                drop(c);
                lines.push(format!("its copy {scratch} is removed"));
            }
            if let Some(p) = proven {
                let scratch = p.file().display().to_string();
                drop(p);
                lines.push(format!("the backup's scratch copy {scratch} is removed"));
            }
            if args.no_systemd {
                lines.push(
                    "start etcd now, once with --force-new-cluster: it was not started (--no-systemd)"
                        .into(),
                );
            }
            Ok(lines)
        },
    )
}

/// `--from-backup`: the backup of this configuration's cluster (or of `--cluster ID`,
/// the operator's word that another cluster's backup is meant) fetched, decrypted and
/// proven into a scratch copy, as `backups verify` does.
fn from_backup(
    f: &frame::Frame,
    args: &crate::cli::RestoreArgs,
    which: &crate::backup::fetch::Which,
) -> Result<crate::backup::fetch::Proven, Failure> {
    let s = &f.settings;
    let b = backups::settings(s, &args.config)?;
    let client = backups::client(b)?;
    let configured = f.member.node.expected_cluster_id().0;
    let cluster = args.cluster.unwrap_or(configured);
    f.step(
        &format!("fetching and proving the backup {which} of cluster {cluster:016x}"),
        false,
    );
    let proven = backups::prove(s, b, &client, cluster, which, args.identity.as_deref())?;
    if cluster != configured {
        warn(&format!(
            "{} is a backup of cluster {cluster:016x} (--cluster), not of this \
             configuration's cluster {configured:016x}; it is restored as this \
             configuration's cluster",
            crate::backup::fetch::shown(b, &proven.backup.backup.key)
        ));
    }
    Ok(proven)
}

/// FILE copied into a root-only scratch folder of `snapshot_dir`, after refusing a FILE
/// another user could have put another file at: a folder above it (as written, and as its
/// links resolve) not root's, or one that group or others may write (a sticky /tmp too:
/// anyone may create the name first), a symbolic link, anything but a regular file. The
/// copy keeps FILE's name.
fn private_copy(
    file: &std::path::Path,
    snapshot_dir: &std::path::Path,
) -> Result<crate::backup::fetch::Scratch, Failure> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refused = |why: String| {
        Failure::new(
            ReasonCode::RestoreFailed,
            format!(
                "{}: {why}; another user could have put another file at its name. Nothing was \
                 changed: copy it into a folder of root's (`install -m 0600 FILE /root/`) and \
                 restore that",
                file.display()
            ),
        )
    };
    let given = std::path::absolute(file).map_err(|e| Failure::io(file, "cannot resolve", e))?;
    // The folders as written and as they resolve (a link among them leads elsewhere):
    // both chains must be root's.
    let folder = given.parent().unwrap_or(std::path::Path::new("/"));
    let real = std::fs::canonicalize(folder).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Failure::new(
            ReasonCode::RestoreFailed,
            format!(
                "{}: no such folder {}; nothing was changed",
                file.display(),
                folder.display()
            ),
        ),
        _ => Failure::io(folder, "cannot resolve", e),
    })?;
    let absolute = real.join(given.file_name().unwrap_or_default());
    let me = nix::unistd::geteuid().as_raw();
    for up in given
        .ancestors()
        .skip(1)
        .chain(absolute.ancestors().skip(1))
    {
        let meta = std::fs::metadata(up).map_err(|e| Failure::io(up, "cannot inspect", e))?;
        let mode = meta.mode() & 0o7777;
        if meta.uid() != me && meta.uid() != 0 {
            return Err(refused(format!(
                "the folder {} is owned by uid {}",
                up.display(),
                meta.uid()
            )));
        }
        if mode & 0o022 != 0 {
            return Err(refused(format!(
                "the folder {} may be written by {} (mode {mode:04o})",
                up.display(),
                if mode & 0o002 != 0 {
                    "others"
                } else {
                    "its group"
                }
            )));
        }
    }
    let mut src = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(&absolute)
        .map_err(|e| match e.raw_os_error() {
            Some(nix::libc::ELOOP) => refused("it is a symbolic link".into()),
            Some(nix::libc::ENOENT) => Failure::new(
                ReasonCode::RestoreFailed,
                format!("{}: no such file; nothing was changed", file.display()),
            ),
            _ => Failure::io(file, "cannot open", e),
        })?;
    let meta = src
        .metadata()
        .map_err(|e| Failure::io(file, "cannot inspect", e))?;
    if !meta.is_file() {
        return Err(Failure::new(
            ReasonCode::RestoreFailed,
            format!(
                "{}: not a regular file; name a snapshot file",
                file.display()
            ),
        ));
    }
    let name = absolute
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.starts_with('.') && n.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("snapshot.db");
    let (scratch, mut out) = crate::backup::fetch::scratch(snapshot_dir, name)?;
    std::io::copy(&mut src, &mut out)
        .and_then(|_| out.sync_all())
        .map_err(|e| {
            Failure::io(
                scratch.file(),
                &format!("cannot copy {} to", file.display()),
                e,
            )
        })?;
    Ok(scratch)
}
