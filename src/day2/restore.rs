//! `etcd-setup restore FILE`: after the cluster lost quorum or its data, a snapshot
//! becomes a new one-member cluster on this node; the other nodes then join it.
//!
//! 1. The file is checked: etcd's SHA-256 trailer (unless `--skip-hash-check`), then
//!    `snapshot status` (revision, keys).
//! 2. etcd is stopped ([`EtcdService::stop`]: systemd on a node; with `--no-systemd` the
//!    caller has stopped it, and the client port must not answer any more).
//! 3. `snapshot restore` into `<data_dir>.restoring-<time>` beside the data dir, with the
//!    configuration's `initial_cluster` and `cluster_token`: the restored cluster has the
//!    cluster ID the configuration gives, which the other nodes' join checks before they
//!    join (a restore with this node as the only initial member would get another ID, and
//!    they would refuse it as `cluster-mismatch`).
//! 4. The new dir gets the old data dir's owner (or user etcd's, without one); the old data dir is moved aside to
//!    `<data_dir>.before-restore-<time>` (never deleted); the new one takes its place;
//!    the parent folder is fsynced.
//! 5. etcd is started once with `--force-new-cluster` ([`EtcdService::start_forced`]),
//!    which makes the restored data a one-member cluster of that ID, and must come up;
//!    the flag is taken out of etcd's environment file as soon as it is up, so a later
//!    restart cannot force the members that joined meanwhile out again.
//!
//! Any step failing leaves the old data dir in place or beside, named in the message.

use super::tools::{self, RestoreTo};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::Settings;
use crate::shared::member::ThisMember;
use std::fs;
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Stops and starts etcd around the data dir's swap: systemd on a node.
pub trait EtcdService {
    /// Stops etcd; returns once it is stopped.
    fn stop(&self) -> Result<(), Failure>;
    /// Starts etcd once with `--force-new-cluster`; returns once it serves, with the flag
    /// gone from what a later start reads.
    fn start_forced(&self, s: &Settings) -> Result<(), Failure>;
}

/// etcd.service through systemd.
pub struct Systemd {
    /// How long its start may take (`etcd.start_timeout`).
    pub start_timeout: Duration,
}

impl EtcdService for Systemd {
    fn stop(&self) -> Result<(), Failure> {
        crate::shared::systemd::Systemd::connect()?
            .stop(crate::shared::unit::ETCD_UNIT, Duration::from_secs(120))
    }

    fn start_forced(&self, s: &Settings) -> Result<(), Failure> {
        use crate::shared::systemd::JobResult;
        let env = |force: bool| {
            let mut text =
                crate::shared::unit::render_env(s, &crate::shared::unit::Membership::configured(s));
            if force {
                text.push_str(
                    "# One start only, by etcd-setup restore:\nETCD_FORCE_NEW_CLUSTER=\"true\"\n",
                );
            }
            let path = Path::new(crate::shared::unit::ENV_FILE);
            crate::shared::report::atomic_write(path, text.as_bytes(), 0o644, Some((0, 0)))
                .map_err(|e| Failure::io(path, "cannot write", e))
        };
        env(true)?;
        let sd = crate::shared::systemd::Systemd::connect()?;
        let started = sd.start(crate::shared::unit::ETCD_UNIT, self.start_timeout);
        // Whatever the start did, the next one must not force a new cluster.
        env(false)?;
        match started? {
            JobResult::Done => Ok(()),
            other => Err(Failure::new(
                ReasonCode::SystemdFailed,
                format!(
                    "etcd.service did not start on the restored data ({other:?}); see \
                     `journalctl -u etcd`"
                ),
            )),
        }
    }
}

/// The caller stops and starts etcd itself (`--no-systemd`).
pub struct ByCaller;

impl EtcdService for ByCaller {
    fn stop(&self) -> Result<(), Failure> {
        Ok(())
    }
    fn start_forced(&self, _: &Settings) -> Result<(), Failure> {
        Ok(())
    }
}

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
    etcd: &dyn EtcdService,
    now: SystemTime,
) -> Result<Restored, Failure> {
    if !skip_hash_check {
        tools::check_trailer(file)?;
    }
    let member = ThisMember::of(s);
    let tool = member.snapshot_tool();
    let status = tools::file_status(tool, file)?;

    etcd.stop()?;
    let client = member.client_addr;
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
    let initial_cluster = crate::shared::unit::Membership::configured(s).initial_cluster;
    tools::restore(
        tool,
        file,
        &RestoreTo {
            name: &s.node_name,
            peer_url: &member.peer_url,
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
    etcd.start_forced(s)?;
    Ok(Restored {
        revision: status.revision,
        total_keys: status.total_keys,
        data_dir: s.data_dir.clone(),
        moved_aside,
    })
}

/// `etcd-setup restore`: the exit code.
pub fn command(args: &crate::cli::RestoreArgs) -> u8 {
    let s = match crate::shared::config::load(&args.config) {
        Ok(s) => s,
        Err(f) => return super::report_failure(&f),
    };
    let service: Box<dyn EtcdService> = if args.no_systemd {
        Box::new(ByCaller)
    } else {
        Box::new(Systemd {
            start_timeout: s.start_timeout,
        })
    };
    // etcd is stopped and started again: status says so rather than `failed`.
    let mut op =
        crate::shared::report::OperationGuard::begin(&args.dirs.run_dir, "restore", "checking");
    op.step(
        &format!(
            "restoring {} (etcd is stopped and started again)",
            args.file.display()
        ),
        true,
    );
    match restore(
        &s,
        &args.file,
        args.skip_hash_check,
        service.as_ref(),
        SystemTime::now(),
    ) {
        Ok(r) => {
            crate::shared::output::print(&format!(
                "{}\n",
                crate::shared::printable::line(&format!(
                    "restored {} (revision {}, {} keys) into {} as a one-member cluster of {}",
                    args.file.display(),
                    r.revision,
                    r.total_keys,
                    r.data_dir.display(),
                    s.node_name
                ))
            ));
            match &r.moved_aside {
                Some(a) => crate::shared::output::print(&format!(
                    "{}\n",
                    crate::shared::printable::line(&format!(
                        "old data dir moved to {}",
                        a.display()
                    ))
                )),
                None => crate::shared::output::print("there was no old data dir\n"),
            }
            if args.no_systemd {
                crate::shared::output::print(
                    "start etcd now, once with --force-new-cluster: it was not started (--no-systemd)\n",
                );
            }
            crate::exit::upkeep::OK
        }
        Err(f) => super::report_failure(&f),
    }
}
