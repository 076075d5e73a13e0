//! `etcd-setup restore FILE`: after the cluster lost quorum or its data, a snapshot
//! becomes a new one-member cluster on this node; the other nodes then join it.
//!
//! 1. The file is checked: etcd's SHA-256 trailer (unless `--skip-hash-check`), then
//!    `snapshot status` (revision, keys).
//! 2. etcd is stopped ([`Service::stop`]: systemd on a node; with `--no-systemd` the
//!    caller has stopped it, and the client port must not answer any more).
//! 3. `snapshot restore` into `<data_dir>.restoring-<time>` beside the data dir, with the
//!    configuration's `initial_cluster` and `cluster_token`: the restored cluster has the
//!    cluster ID the configuration gives, which the other nodes' join checks before they
//!    join (a restore with this node as the only initial member would get another ID, and
//!    they would refuse it as `cluster-mismatch`).
//! 4. The new dir gets the old data dir's owner (or user etcd's, without one); the old data dir is moved aside to
//!    `<data_dir>.before-restore-<time>` (never deleted); the new one takes its place;
//!    the parent folder is fsynced.
//! 5. etcd is started once with `--force-new-cluster` ([`Service::start_once`]), which
//!    makes the restored data a one-member cluster of that ID, and must come up. The flag
//!    is a one-shot file that exists for that start only (`crate::shared::service`), never
//!    a line of etcd's persistent environment, so no later start can force the members
//!    that joined meanwhile out again, whether the restore ended, failed or was killed.
//!
//! Any step failing leaves the old data dir in place or beside, named in the message.
//!
//! The command runs in the day-2 frame ([`super::frame`]): under the node lock (no `run`,
//! upgrade, leave or second restore beside it), with its operation record, and with
//! signals held from etcd's stop until its start.

use super::frame::{self, Spec};
use super::tools::{self, RestoreTo};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::{scheme, url_host, Settings};
use crate::shared::report::Command;
use crate::shared::service::{self, ByCaller, HeldBetween, OneShot, Service};
use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
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
}

fn failed(message: String) -> Failure {
    Failure::new(ReasonCode::RestoreFailed, message)
}

/// `path` with `suffix` appended to its last component.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", path.display()))
}

/// Gives every file under `dir` the owner `(uid, gid)`.
fn chown_tree(dir: &Path, uid: u32, gid: u32) -> Result<(), Failure> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))
        .map_err(|e| Failure::io(dir, "cannot chown", e))?;
    if fs::symlink_metadata(dir)
        .map(|m| m.is_dir())
        .unwrap_or(false)
    {
        for e in fs::read_dir(dir).map_err(|e| Failure::io(dir, "cannot list", e))? {
            let e = e.map_err(|e| Failure::io(dir, "cannot list", e))?;
            chown_tree(&e.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// Restores `file` as this node's new one-member cluster.
pub fn restore(
    s: &Settings,
    file: &Path,
    skip_hash_check: bool,
    etcd: &dyn Service,
    now: SystemTime,
) -> Result<Restored, Failure> {
    if !skip_hash_check {
        tools::check_trailer(file)?;
    }
    let tool = tools::snapshot_tool(&s.install_dir);
    let status = tools::file_status(&tool, file)?;

    etcd.stop()?;
    let client = SocketAddr::new(s.node_ip, s.client_port);
    if TcpStream::connect_timeout(&client, Duration::from_millis(500)).is_ok() {
        return Err(failed(format!(
            "etcd still serves at {client} on {}; stop it before its data dir is replaced",
            s.data_dir.display()
        )));
    }

    let ts = super::stamp(now);
    let new = beside(&s.data_dir, &format!(".restoring-{ts}"));
    if new.exists() {
        // Our own output of an earlier attempt this very second: not data.
        fs::remove_dir_all(&new).map_err(|e| Failure::io(&new, "cannot remove", e))?;
    }
    let peer_url = format!(
        "{}://{}:{}",
        scheme(s.tls.peer.is_some()),
        url_host(s.node_ip),
        s.peer_port
    );
    let initial_cluster = crate::shared::unit::Membership::configured(s).initial_cluster;
    tools::restore(
        &tool,
        file,
        &RestoreTo {
            name: &s.node_name,
            peer_url: &peer_url,
            initial_cluster: &initial_cluster,
            token: &s.cluster_token,
            data_dir: &new,
            skip_hash_check,
        },
        Duration::from_secs(1800),
    )?;
    fs::set_permissions(&new, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(|e| Failure::io(&new, "cannot chmod", e))?;

    let old = fs::metadata(&s.data_dir).ok();
    // etcd runs as its own user: the restored files get the old data dir's owner, or,
    // with no old data dir, that user's (when we are root and it exists).
    let owner = match &old {
        Some(m) => Some((m.uid(), m.gid())),
        None if nix::unistd::geteuid().is_root() => {
            nix::unistd::User::from_name(crate::shared::unit::ETCD_USER)
                .ok()
                .flatten()
                .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
        }
        None => None,
    };
    if let Some((uid, gid)) = owner {
        if uid != nix::unistd::geteuid().as_raw() || gid != nix::unistd::getegid().as_raw() {
            chown_tree(&new, uid, gid)?;
        }
    }
    let moved_aside = match old {
        Some(_) => {
            let aside = beside(&s.data_dir, &format!(".before-restore-{ts}"));
            fs::rename(&s.data_dir, &aside).map_err(|e| {
                failed(format!(
                    "cannot move {} aside to {}: {e}; the restored data waits in {}",
                    s.data_dir.display(),
                    aside.display(),
                    new.display()
                ))
            })?;
            Some(aside)
        }
        None => None,
    };
    fs::rename(&new, &s.data_dir).map_err(|e| {
        failed(format!(
            "cannot move {} into place at {}: {e}{}",
            new.display(),
            s.data_dir.display(),
            moved_aside.as_ref().map_or(String::new(), |a| format!(
                "; the old data is in {}",
                a.display()
            ))
        ))
    })?;
    super::sync_dir(s.data_dir.parent().unwrap_or(Path::new("/")))?;
    etcd.start_once(&[OneShot::ForceNewCluster])?;
    Ok(Restored {
        revision: status.revision,
        total_keys: status.total_keys,
        data_dir: s.data_dir.clone(),
        moved_aside,
    })
}

/// `etcd-setup restore`: the exit code.
pub fn command(args: &crate::cli::RestoreArgs) -> u8 {
    frame::run(
        Spec {
            command: Command::Restore,
            config: &args.config,
            dirs: &args.dirs,
            lock: Some(args.lock_timeout),
            record: Some(&format!("checking {}", args.file.display())),
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
            // etcd is stopped and started again: status says so rather than `failed`.
            f.step(
                &format!(
                    "restoring {} (etcd is stopped and started again)",
                    args.file.display()
                ),
                true,
            );
            let held = HeldBetween::new(service, frame::hold);
            let r = restore(
                s,
                &args.file,
                args.skip_hash_check,
                &held,
                SystemTime::now(),
            )?;
            let mut lines = vec![format!(
                "restored {} (revision {}, {} keys) into {} as a one-member cluster of {}",
                args.file.display(),
                r.revision,
                r.total_keys,
                r.data_dir.display(),
                s.node_name
            )];
            lines.push(match &r.moved_aside {
                Some(a) => format!("old data dir moved to {}", a.display()),
                None => "there was no old data dir".into(),
            });
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
