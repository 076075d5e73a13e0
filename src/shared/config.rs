//! The node's configuration: a TOML file read into validated, typed [`Settings`].
//!
//! Three stages, as zincati does it: the file is parsed into raw structs whose every field
//! is optional and untyped ([`toml::Value`]), then each key is checked and converted, then
//! the keys are checked against each other. Nothing downstream re-checks a raw string: a
//! [`Settings`] value is valid by construction.
//!
//! Every problem is `config-invalid` with one sentence naming the file and the key, e.g.
//! `config-invalid: /etc/etcd-setup/config.toml: etcd.initial_cluster: "n1=10.0.0.1:2380"
//! is not NAME=URL (http or https)`. A missing file is an error too, not a set of defaults:
//! a node without its configuration cannot know its name or its peers.
//!
//! The failure file's path and owner come from this file as well, yet a reason must be
//! written even when the file is bad: [`failure_target`] reads just those two keys, best
//! effort, and falls back to the defaults.
//!
//! The format, every key set (the unit tests parse this very text, [`EXAMPLE`]):
//!
#![doc = concat!("```toml\n", include_str!("config.example.toml"), "```")]

use crate::reason::Failure;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Value;

mod backup;
pub mod certs;
mod cluster;
mod data;
mod raw;
mod values;

pub use backup::{
    BackupSettings, Credentials, Endpoint, Recipient, Secret, DEFAULT_BACKUP_RETAIN,
    DEFAULT_PERIOD, DEFAULT_PREFIX, DEFAULT_REGION,
};
pub use data::{
    DataSettings, MaintainSettings, SnapshotSettings, DEFAULT_QUOTA, DEFAULT_SNAPSHOT_DIR,
};
use raw::{read_text, scan_report_section, toml_failure, RawFile};
use values::Checker;
pub use values::{parse_duration, parse_sha256, parse_size, scheme, url_host};

/// Where the platform's Kubernetes ISO keeps the etcd release tarball for this machine.
#[cfg(not(target_arch = "aarch64"))]
pub const DEFAULT_ARCHIVE_PATH: &str = "etcd/etcd-linux-amd64.tar.gz";
/// Where the platform's Kubernetes ISO keeps the etcd release tarball for this machine.
#[cfg(target_arch = "aarch64")]
pub const DEFAULT_ARCHIVE_PATH: &str = "etcd/etcd-linux-arm64.tar.gz";

/// Where the configuration lives unless `--config` says otherwise.
pub const DEFAULT_PATH: &str = "/etc/etcd-setup/config.toml";
/// The failure file the platform reads when `[report] failure_file` is not set.
pub const DEFAULT_FAILURE_FILE: &str = "/home/cloud/etcd-setup-failed";
/// The user owning the failure file when `[report] owner` is not set.
pub const DEFAULT_FAILURE_OWNER: &str = "cloud";
/// The group allowed to query status when `[report] status_group` is not set.
pub const DEFAULT_STATUS_GROUP: &str = "cloud";
/// `etcd.metrics_port` when not given: etcd's `/metrics` and `/health` on loopback.
pub const DEFAULT_METRICS_PORT: u16 = 2381;
/// A complete configuration file with every key set, as documented above.
pub const EXAMPLE: &str = include_str!("config.example.toml");
/// The folders etcd's unit's sandbox hides from it (`ProtectHome=`, `PrivateTmp=`): no
/// data dir, binary or TLS file may lie below them. Checked here, at the configuration;
/// `member/unit.rs` holds them to the packaged unit's text.
pub const HIDDEN_FROM_ETCD: [&str; 5] = ["/home", "/root", "/run/user", "/tmp", "/var/tmp"];

/// The longest `iso.wait` and `etcd.start_timeout`.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// The longest `etcd.settle`.
const MAX_SETTLE: Duration = Duration::from_secs(3600);
/// The longest member name, and cluster token.
const MAX_NAME: usize = 63;
const MAX_TOKEN: usize = 128;
/// The longest user or group name.
pub(crate) const MAX_USER: usize = 32;
/// The largest configuration file read; real ones are about 1 KiB.
const MAX_FILE: u64 = 1 << 20;

/// Whether the members bootstrap a new cluster or this one joins a running cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    /// `--initial-cluster-state=new`: all members of `initial_cluster` start together.
    New,
    /// `--initial-cluster-state=existing`: this member joins a cluster that runs already.
    Existing,
}

impl ClusterState {
    /// The value of etcd's `--initial-cluster-state`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        }
    }
}

impl fmt::Display for ClusterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The three files of one side of TLS (client or peer traffic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate etcd presents.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA bundle the other end's certificate must chain to (client-cert auth is on).
    pub trusted_ca: PathBuf,
}

/// TLS for etcd's client and peer traffic; a side that is `None` is plain http.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// `--cert-file`, `--key-file`, `--trusted-ca-file` (and `--client-cert-auth`).
    pub client: Option<TlsFiles>,
    /// `--peer-cert-file`, `--peer-key-file`, `--peer-trusted-ca-file` (and
    /// `--peer-client-cert-auth`).
    pub peer: Option<TlsFiles>,
    /// `tls.warn_days`: a certificate that expires within this many days is a warning in
    /// status ([`certs`]).
    pub warn_days: u32,
}

/// `tls.warn_days` when not given.
pub const DEFAULT_WARN_DAYS: u32 = 30;

impl Default for Tls {
    fn default() -> Tls {
        Tls {
            client: None,
            peer: None,
            warn_days: DEFAULT_WARN_DAYS,
        }
    }
}

/// The validated configuration of one etcd node.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `node.name`: this member's etcd name.
    pub node_name: String,
    /// `node.ip`: the address etcd listens on and advertises.
    pub node_ip: IpAddr,
    /// `etcd.initial_cluster`: every member as (name, peer URL), in the file's order.
    pub initial_cluster: Vec<(String, String)>,
    /// `etcd.cluster_token`.
    pub cluster_token: String,
    /// `etcd.cluster_state`.
    pub cluster_state: ClusterState,
    /// `etcd.data_dir`.
    pub data_dir: PathBuf,
    /// `etcd.client_port`.
    pub client_port: u16,
    /// `etcd.peer_port`.
    pub peer_port: u16,
    /// `etcd.metrics_port`: `/metrics` and `/health` on 127.0.0.1, for the health check.
    pub metrics_port: u16,
    /// `etcd.start_timeout`: systemd's `TimeoutStartSec` for etcd.
    pub start_timeout: Duration,
    /// `etcd.settle`: how long etcd's restart count must stay steady after the start.
    pub settle: Duration,
    /// `iso.archive_path`: the tarball's path inside the ISO, `/`-separated, relative.
    pub archive_path: String,
    /// `iso.sha256`: the pinned digest of the tarball.
    pub sha256: Option<[u8; 32]>,
    /// `iso.wait`: how long to wait for the ISO.
    pub iso_wait: Duration,
    /// `iso.eject`: eject the disc when done.
    pub eject: bool,
    /// `iso.refuse_known_bad`: refuse a release with a data-safety advisory
    /// ([`crate::shared::advisory`]) instead of installing it with a warning.
    pub refuse_known_bad: bool,
    /// `install.dir`: where the etcd binaries go.
    pub install_dir: PathBuf,
    /// `report.failure_file`.
    pub failure_file: PathBuf,
    /// `report.owner`: the user owning the failure file (resolved when it is written).
    pub failure_owner: String,
    /// `report.status_group`: the group allowed to query status (resolved by the server).
    pub status_group: String,
    /// `[tls]`.
    pub tls: Tls,
    /// `[limits]`: caps on the tarball.
    pub limits: Limits,
    /// Day 2: the quota, the Prometheus listener, `[snapshot]` and `[maintain]`.
    pub data: DataSettings,
    /// `[backup]`: the S3 bucket snapshots go to; off when `None`.
    pub backup: Option<BackupSettings>,
}

/// Caps that stop an oversized or hostile archive early.
///
/// The defaults leave wide headroom over real releases. etcd 3.5.x for linux-amd64 is about
/// 20 MB compressed, 60 MB unpacked (the largest file, `etcd`, about 24 MB) in about 30
/// entries with `Documentation/`, and compresses about 3:1:
/// - 4096 entries: over 100 times a release;
/// - 256 MiB per file: ten times today's largest binary;
/// - 512 MiB in all: eight times a release, still well within a node's disk;
/// - ratio 20:1: over six times what Go binaries reach; a zero-filled bomb goes beyond
///   1000:1. The ratio applies past the first MiB unpacked, where a release's headers and
///   text files sit and compress better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most folders and regular files created (metadata headers not counted, parent folders
    /// the archive did not list counted).
    pub max_entries: u64,
    /// Largest regular file, in bytes.
    pub max_file_size: u64,
    /// Most bytes of regular files in all.
    pub max_total_size: u64,
    /// Most unpacked bytes per compressed byte, checked continuously.
    pub max_ratio: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: 4096,
            max_file_size: 256 << 20,
            max_total_size: 512 << 20,
            max_ratio: 20,
        }
    }
}

/// Reads and validates the configuration file at `path`, the files `[backup]` names
/// (keys, recipients: [`BackupSettings::check_files`]), and the operator's advisories
/// beside it ([`crate::shared::advisory::load_operator_file`]; none when it is missing).
pub fn load(path: &Path) -> Result<Settings, Failure> {
    let settings = load_settings(path)?;
    load_advisories_beside(path)?;
    Ok(settings)
}

/// [`load`] without the operator's advisories: for the status server, which must answer
/// with the configured group and ports whatever that file holds.
pub fn load_settings(path: &Path) -> Result<Settings, Failure> {
    let text = read_text(path)?;
    let settings = parse(&text, path)?;
    if let Some(backup) = &settings.backup {
        backup.check_files()?;
    }
    check_install_dir(path, &settings.install_dir)?;
    Ok(settings)
}

/// `install.dir` as root may run binaries from (etcd's unit, every etcdctl the agent
/// runs): the folder, or where it will be made, root's and not writable by group or
/// others, not a symbolic link; every folder above it root's too, or sticky (`/tmp`:
/// others may not rename what is ours there). What a folder above the configuration may
/// hold is not asked: the configuration itself is root's ([`read_text`]).
fn check_install_dir(config: &Path, dir: &Path) -> Result<(), Failure> {
    let refuse = |what: &Path, why: String| {
        Failure::new(
            crate::reason::ReasonCode::ConfigInvalid,
            format!(
                "{}: install.dir {}: {} {why}; root runs the etcd binaries installed there, \
                 so it and every folder above it must be root's and not writable by group \
                 or others: fix its owner and mode, or set install.dir elsewhere",
                config.display(),
                dir.display(),
                if what == dir {
                    "the folder".to_string()
                } else {
                    format!("the folder above it, {},", what.display())
                },
            ),
        )
    };
    let mut nearest = true;
    for p in dir.ancestors() {
        let meta = match std::fs::symlink_metadata(p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Failure::io(p, "cannot inspect install.dir", e)),
        };
        if p == dir && meta.file_type().is_symlink() {
            return Err(refuse(p, "is a symbolic link".into()));
        }
        // A link above it is judged by where it leads.
        let meta = if meta.file_type().is_symlink() {
            std::fs::metadata(p).map_err(|e| Failure::io(p, "cannot inspect install.dir", e))?
        } else {
            meta
        };
        if !meta.is_dir() {
            return Err(refuse(p, "is not a folder".into()));
        }
        if let Some(why) = raw::not_ours(&meta) {
            use std::os::unix::fs::MetadataExt;
            // Past the nearest existing folder, a root-owned sticky one keeps what is
            // ours in it ours.
            let sticky = meta.mode() & 0o1000 != 0 && meta.uid() == 0;
            if nearest || !sticky {
                return Err(refuse(p, why));
            }
        }
        nearest = false;
    }
    Ok(())
}

/// The operator's advisories beside the configuration file at `path`
/// ([`crate::shared::advisory::load_operator_file`]): `config-invalid` naming the file.
pub fn load_advisories_beside(path: &Path) -> Result<(), Failure> {
    let advisories = path.with_file_name(crate::shared::advisory::OPERATOR_FILE);
    crate::shared::advisory::load_operator_file(&advisories)
        .map(drop)
        .map_err(|e| Failure::new(crate::reason::ReasonCode::ConfigInvalid, e))
}

/// Validates configuration `text`; `path` names the file in messages.
pub fn parse(text: &str, path: &Path) -> Result<Settings, Failure> {
    let raw: RawFile = toml::from_str(text).map_err(|e| toml_failure(&e, text, path))?;
    Checker { path }.settings(raw)
}

/// Where to write the failure file and who owns it, read best effort from the file at
/// `path` even when the rest of it is invalid; the defaults for whatever cannot be read.
pub fn failure_target(path: &Path) -> (PathBuf, String) {
    let mut file = PathBuf::from(DEFAULT_FAILURE_FILE);
    let mut owner = DEFAULT_FAILURE_OWNER.to_string();
    let Ok(text) = read_text(path) else {
        return (file, owner);
    };
    let (raw_file, raw_owner) = match text.parse::<toml::Table>() {
        Ok(table) => {
            let report = table.get("report").and_then(Value::as_table);
            let get = |key: &str| {
                report
                    .and_then(|r| r.get(key))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            (get("failure_file"), get("owner"))
        }
        Err(_) => scan_report_section(&text),
    };
    let check = Checker { path };
    if let Some(p) = raw_file.and_then(|s| check.file_path("report.failure_file", &s).ok()) {
        file = p;
    }
    if let Some(o) = raw_owner.filter(|o| check.user("report.owner", o).is_ok()) {
        owner = o;
    }
    (file, owner)
}

#[cfg(test)]
mod tests;
