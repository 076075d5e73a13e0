//! The command line: every subcommand, option and help text, as one clap definition.
//!
//! It lives in the library so that the binary (`main.rs`), the man pages and the shell
//! completions are all made from it and cannot drift apart. The exit-code epilogues come
//! from [`crate::exit`].

use crate::shared::paths::STATUS_SOCKET;
use crate::{exit, shared::config};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Installs etcd on a dedicated etcd node from the Kubernetes ISO, and reports why not.
#[derive(Parser, Debug)]
#[command(name = "etcd-setup", version = crate::VERSION, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// The boot job: wait for the Kubernetes ISO, validate and install etcd, start it only
    /// when all went well, and record the reason when not.
    #[command(after_help = exit::RUN.help())]
    Run(RunArgs),
    /// Validate Kubernetes ISO images, CD-ROM devices or etcd tarballs offline, as `run`
    /// would, without root and without mounting.
    #[command(after_help = exit::CHECK.help())]
    Check(CheckArgs),
    /// Where this node is: the run's phase and reason, and etcd's live state and health,
    /// from the status socket. Only root and the configured group may ask.
    #[command(after_help = exit::STATUS.help())]
    Status(StatusArgs),
    /// Remove this member from its cluster through another member, then stop and
    /// disable etcd and move its data dir aside. Refuses to break quorum or to remove the
    /// last member; --force passes the quorum guard.
    #[command(after_help = exit::LEAVE.help())]
    Leave(LeaveArgs),
    /// Take a consistent snapshot of this member, verify it, keep the newest
    /// snapshot.retain, and record the result for status.
    #[command(after_help = exit::SNAPSHOT.help())]
    Snapshot(SnapshotArgs),
    /// Make a snapshot this node's new one-member cluster (etcd stopped, the old data dir
    /// moved aside, etcd started); the other nodes then join it.
    #[command(after_help = exit::RESTORE.help())]
    Restore(RestoreArgs),
    /// Defragment the members that need it, one at a time and the leader last, under a
    /// lock in etcd; recover from the NOSPACE alarm.
    #[command(after_help = exit::MAINTAIN.help())]
    Maintain(MaintainArgs),
    /// Move this member to the etcd release of the newer Kubernetes ISO attached: one minor
    /// version up at most, never down, every member healthy, a snapshot first, one member
    /// at a time through a lock in etcd (the leader last), rolled back when the new etcd
    /// does not come up. Safe to start on every node at once.
    #[command(after_help = exit::UPGRADE.help())]
    Upgrade(UpgradeArgs),
    /// Restart etcd so it loads the trust bundles on disk (a CA rotation step), once they
    /// trust this member's and its peers' certificates; one member at a time, leader last.
    #[command(after_help = exit::ROTATE_CA.help())]
    RotateCa(RotateCaArgs),
    /// The backups of this cluster in the `[backup]` bucket: list them (newest first), or
    /// verify one: fetch it, decrypt it, check it against its metadata and restore it on
    /// trial in a scratch folder.
    #[command(after_help = exit::BACKUPS.help())]
    Backups(BackupsArgs),
    /// The server behind the status socket, started by etcd-setup-status.socket; takes
    /// the socket from systemd (LISTEN_FDS) or binds --socket, exits when idle.
    #[command(hide = true)]
    ServeStatus(ServeStatusArgs),
}

/// The state folders every command takes (`--run-dir`, `--state-dir`); they live with the
/// paths.
pub use crate::shared::paths::StateDirs;

/// `etcd-setup run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The node's configuration (TOML).
    #[arg(long, value_name = "FILE", default_value = config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// How long to wait for another run holding the lock (default: the ISO wait plus
    /// etcd's start timeout plus 5 minutes), e.g. "30s".
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lock_timeout: Option<Duration>,
    /// Join the cluster again on a node that left it with `etcd-setup leave` (without
    /// it, such a node does nothing: exit 6).
    #[arg(long)]
    pub rejoin: bool,
    /// State folders.
    #[command(flatten)]
    pub dirs: StateDirs,
}

/// `etcd-setup leave`.
#[derive(clap::Args, Debug)]
pub struct LeaveArgs {
    /// The node's configuration (TOML).
    #[arg(long, value_name = "FILE", default_value = config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Leave even when the members left would have no quorum, or one member would be
    /// left of two.
    #[arg(long)]
    pub force: bool,
    /// How long to wait for a run of etcd-setup holding the lock, e.g. "30s".
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub lock_timeout: Duration,
    /// State folders.
    #[command(flatten)]
    pub dirs: StateDirs,
}

/// `etcd-setup snapshot`.
#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    /// The node's configuration (TOML).
    #[arg(long, value_name = "FILE", default_value = config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// State folders (the result is recorded in the persistent one).
    #[command(flatten)]
    pub dirs: StateDirs,
}

/// `etcd-setup upgrade`.
#[derive(clap::Args, Debug)]
pub struct UpgradeArgs {
    /// The node's configuration (TOML).
    #[arg(long, value_name = "FILE", default_value = config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// How long to wait for the newer ISO to appear, e.g. "30s".
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub iso_wait: Duration,
    /// How long to wait for a run of etcd-setup holding the node's lock.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub lock_timeout: Duration,
    /// How long to wait for the cluster lock (other members upgrading), e.g. "30min".
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30min")]
    pub lock_wait: Duration,
    /// How long the leader lets the other members go first before it hands leadership
    /// away and upgrades anyway.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10min")]
    pub leader_wait: Duration,
    /// State folders.
    #[command(flatten)]
    pub dirs: StateDirs,
}

/// `etcd-setup rotate-ca`.
#[derive(clap::Args, Debug)]
pub struct RotateCaArgs {
    /// The node's configuration (TOML).
    #[arg(long, value_name = "FILE", default_value = config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Restart even when members are unhealthy or fewer than three.
    #[arg(long)]
    pub force: bool,
    /// How long to wait for a run of etcd-setup holding the node's lock.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub lock_timeout: Duration,
    /// How long to wait for the cluster lock.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30min")]
    pub lock_wait: Duration,
    /// How long the leader lets waiting members go first.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10min")]
    pub leader_wait: Duration,
    /// How long members found unhealthy are asked again (every 5 s) before rotate-ca
    /// refuses with cluster-unhealthy.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub health_wait: Duration,
    /// State folders.
    #[command(flatten)]
    pub dirs: StateDirs,
}

/// `etcd-setup restore`.
#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// The snapshot file (written by `etcd-setup snapshot` or `etcdctl snapshot save`).
    #[arg(value_name = "FILE", required_unless_present = "from_backup")]
    pub file: Option<PathBuf>,
    /// Restore a backup of the `[backup]` bucket instead of a file: `latest` (the newest
    /// one verified at upload) or its name as `backups` lists it. It is fetched,
    /// decrypted and proven as `backups verify` does before etcd is stopped.
    #[arg(long, value_name = "latest|NAME", conflicts_with_all = ["file", "skip_hash_check"])]
    pub from_backup: Option<BackupRef>,
    /// With --from-backup: the age identity file that decrypts it (default:
    /// backup.identity_file).
    #[arg(long, value_name = "FILE", requires = "from_backup")]
    pub identity: Option<PathBuf>,
    /// With --from-backup: take the backup from this cluster's folder (16 hex digits)
    /// instead of this configuration's cluster: the way to restore another cluster's
    /// backup here.
    #[arg(long, value_name = "ID", value_parser = parse_cluster_id, requires = "from_backup")]
    pub cluster: Option<u64>,
    /// The node's configuration (TOML).
    #[arg(long, value_name = "FILE", default_value = config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Let a file without etcd's SHA-256 trailer pass (a copied member/snap/db); a file
    /// that has the trailer is still checked against it, and refused if it does not match.
    #[arg(long)]
    pub skip_hash_check: bool,
    /// Refuse (cluster-mismatch) a snapshot not shown to be of this configuration's
    /// cluster (by its name, or the members it holds); without it, one of another cluster
    /// is restored with a warning.
    #[arg(long)]
    pub cluster_check: bool,
    /// Do not stop and start etcd.service: the caller does (tests, manual recovery).
    #[arg(long, hide = true)]
    pub no_systemd: bool,
    /// How long to wait for a run of etcd-setup (or another restore, leave, upgrade)
    /// holding the node's lock, e.g. "30s".
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub lock_timeout: Duration,
    /// State folders (the operation status shows goes into the live one).
    #[command(flatten)]
    pub dirs: StateDirs,
}

/// `etcd-setup backups`.
#[derive(clap::Args, Debug)]
pub struct BackupsArgs {
    /// What to do (default: list).
    #[command(subcommand)]
    pub action: Option<BackupsAction>,
    /// The node's configuration (TOML), with its `[backup]` table.
    #[arg(long, value_name = "FILE", default_value = config::DEFAULT_PATH, global = true)]
    pub config: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text, global = true)]
    pub format: Format,
    /// The cluster whose backups to use (16 hex digits; default: the one this
    /// configuration's etcd.initial_cluster and etcd.cluster_token make).
    #[arg(long, value_name = "ID", value_parser = parse_cluster_id, global = true)]
    pub cluster: Option<u64>,
    /// State folders.
    #[command(flatten)]
    pub dirs: StateDirs,
}

/// `etcd-setup backups` subcommands.
#[derive(Subcommand, Debug)]
pub enum BackupsAction {
    /// This cluster's backups, newest first: time, member, revision, size, age, and how
    /// each was verified.
    List,
    /// Fetch a backup, decrypt it into a root-only scratch file, check its SHA-256,
    /// etcd's trailer and `snapshot status` against its metadata, restore it on trial and
    /// compare; the scratch is removed on every way out.
    Verify(BackupsVerifyArgs),
}

/// `etcd-setup backups verify`.
#[derive(clap::Args, Debug)]
pub struct BackupsVerifyArgs {
    /// `latest` (the newest verified at upload) or a backup's name as `backups` lists it.
    #[arg(value_name = "latest|NAME", default_value = "latest")]
    pub backup: BackupRef,
    /// The age identity file that decrypts it (default: backup.identity_file).
    #[arg(long, value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// Verify only where this node can (etcd-setup-backup-verify.timer runs it so on
    /// every node): a configuration without [backup], or whose backups are encrypted and
    /// which names no identity (backup.identity_file or --identity), prints why nothing
    /// was verified and exits 0; any other verification runs and fails as without it.
    #[arg(long)]
    pub if_configured: bool,
}

/// Which backup: `latest` or a name (the type lives with the fetch).
pub use crate::backup::fetch::Which as BackupRef;

/// `etcd-setup maintain`.
#[derive(clap::Args, Debug)]
pub struct MaintainArgs {
    /// The node's configuration (TOML).
    #[arg(long, value_name = "FILE", default_value = config::DEFAULT_PATH)]
    pub config: PathBuf,
}

/// `etcd-setup check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// ISO image files, CD-ROM devices (e.g. /dev/sr0) or etcd release tarballs.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Require this SHA-256 (hex) of the compressed tarball.
    #[arg(long, value_name = "HEX", value_parser = parse_sha256)]
    pub sha256: Option<[u8; 32]>,
    /// Where the tarball sits inside an ISO.
    #[arg(long, value_name = "PATH", default_value = config::DEFAULT_ARCHIVE_PATH,
          value_parser = parse_archive_path)]
    pub archive_path: String,
    /// The operator's advisories, beside the compiled ones (a missing file adds none).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/etcd-setup/advisories.toml"
    )]
    pub advisories: PathBuf,
}

/// `etcd-setup status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Wait until the verdict is final (running or failed), pushed by the server.
    #[arg(long)]
    pub wait: bool,
    /// The longest --wait, e.g. "5min".
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10min")]
    pub timeout: Duration,
    /// Output format; json is the answer of the socket (schema in the README),
    /// prometheus the text exposition format 0.0.4 (metric names in the README).
    #[arg(long, value_enum, default_value_t = StatusFormat::Text)]
    pub format: StatusFormat,
    /// Labelled lines instead of one.
    #[arg(long)]
    pub long: bool,
    /// Write the output to FILE atomically (a temp file in its folder, renamed over it;
    /// mode 0644) instead of stdout: the metrics timer's textfile for node-exporter.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The status socket.
    #[arg(long, value_name = "PATH", default_value = STATUS_SOCKET, hide = true)]
    pub socket: PathBuf,
}

/// `etcd-setup serve-status`.
#[derive(clap::Args, Debug)]
pub struct ServeStatusArgs {
    /// The socket to bind when systemd passes none.
    #[arg(long, value_name = "PATH", default_value = STATUS_SOCKET)]
    pub socket: PathBuf,
    /// Exit after this long without a connection ("0" never exits).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub idle_exit: Duration,
    /// The node's configuration (for [report] status_group and etcd.metrics_port).
    #[arg(long, value_name = "FILE", default_value = config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// State folders.
    #[command(flatten)]
    pub dirs: StateDirs,
    /// Tests only: etcd's live view from this JSON file instead of systemd and etcd.
    #[cfg(feature = "test-fixtures")]
    #[arg(long, value_name = "FILE", hide = true)]
    pub live_fixture: Option<PathBuf>,
}

/// `status`'s formats: text for people, JSON for programs, Prometheus for scrapers.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
pub enum StatusFormat {
    /// One line (`--long`: labelled lines).
    Text,
    /// One JSON document on stdout.
    Json,
    /// Prometheus' text exposition format 0.0.4, every metric `etcd_setup_…`.
    Prometheus,
}

/// Text for people, JSON for programs.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
pub enum Format {
    /// One line per result (`--long`: labelled lines).
    Text,
    /// One JSON document on stdout.
    Json,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    config::parse_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration like 90s, 15min or 1h"))
}

fn parse_cluster_id(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.len() != 16 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "a cluster ID is 16 hex digits (as in a backup's folder, e.g. 8e9e05c52164694d), got {} characters",
            t.chars().count()
        ));
    }
    u64::from_str_radix(t, 16).map_err(|e| e.to_string())
}

fn parse_archive_path(text: &str) -> Result<String, String> {
    if text.trim_matches('/').trim().is_empty() {
        return Err(format!(
            "the path of the tarball inside the ISO cannot be empty, e.g. {}",
            config::DEFAULT_ARCHIVE_PATH
        ));
    }
    Ok(text.to_string())
}

fn parse_sha256(text: &str) -> Result<[u8; 32], String> {
    let text = text.trim();
    config::parse_sha256(text).ok_or_else(|| {
        format!(
            "a SHA-256 is 64 hex digits, got {} characters",
            text.chars().count()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
