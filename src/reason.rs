//! Reason codes: the stable, operator-facing names of every way a run can fail.
//!
//! Each code is part of the product contract (SPEC, "The failure file"): one per cause an
//! operator would fix differently. The first line of the failure file is `code: sentence`.

use std::fmt;
use std::io;
use std::path::Path;

/// Why `etcd-setup` did not get etcd running, as written to the failure file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonCode {
    /// No disc holding the etcd archive appeared before the wait ran out.
    IsoTimeout,
    /// An ISO image or device could not be read as iso9660 (truncated, corrupt, I/O error).
    IsoUnreadable,
    /// The disc was taken out of the drive while it was read.
    IsoRemoved,
    /// The Kubernetes ISO has no etcd archive at the expected path.
    ArchiveMissing,
    /// The archive is not an intact gzip-compressed tar (truncated, bad CRC, garbage).
    ArchiveCorrupt,
    /// The archive holds something unsafe: links, devices, absolute or `..` paths, odd layout.
    ArchiveUnsafe,
    /// The archive exceeds a configured cap (entries, file size, total size, ratio).
    ArchiveTooLarge,
    /// The archive's SHA-256 differs from the pinned one.
    DigestMismatch,
    /// `etcd` or `etcdctl` is absent from the archive, or not an ELF executable.
    BinaryMissing,
    /// The binaries are ELF for another machine (architecture, class or byte order).
    WrongArchitecture,
    /// The disk holding the staging or install folder is full.
    DiskFull,
    /// The configuration file is missing, malformed, or holds a bad value.
    ConfigInvalid,
    /// systemd refused a reload, enable or start request.
    SystemdFailed,
    /// etcd's unit failed to start.
    EtcdStartFailed,
    /// While etcd started, a peer refused the TLS handshake again and again (a certificate
    /// of another CA, a key or SAN that does not fit): the start was stopped at once.
    EtcdTlsRefused,
    /// etcd started but is unhealthy or crash-looping.
    EtcdUnhealthy,
    /// Another `etcd-setup run` holds the lock for too long.
    Locked,
    /// The running cluster is another one than this node's configuration describes
    /// (another cluster ID, so another token or initial member list).
    ClusterMismatch,
    /// Joining the existing cluster waited too long (no quorum, another learner, a
    /// member with this node's name).
    JoinBlocked,
    /// etcd refused a step of joining (remove the stale member, add the learner).
    JoinFailed,
    /// The learner did not catch up in time; it was removed again.
    LearnerStalled,
    /// Leaving was refused: the last member, or the quorum would break (without --force).
    LeaveRefused,
    /// Removing this member failed.
    LeaveFailed,
    /// The release has a published data-safety advisory and `iso.refuse_known_bad` is on.
    KnownBadRelease,
    /// `upgrade`: the attached release is older than the one running.
    UpgradeDowngrade,
    /// `upgrade`: the attached release is more than one minor version up, or another major.
    UpgradeTooFar,
    /// `upgrade`: a member runs a patch below the minimum etcd's guide names for the next
    /// minor (3.5 → 3.6 needs every member on 3.5.32 or later first, 3.6 → 3.7 on 3.6.11).
    UpgradeBelowMinimum,
    /// `upgrade`: a two-member cluster loses its quorum while one member restarts.
    UpgradeTwoMembers,
    /// `upgrade`: a member (this one or another) is not healthy, or did not answer.
    UpgradeUnhealthy,
    /// `upgrade`: a member runs a third release: another upgrade is half done.
    UpgradeInProgress,
    /// `upgrade`: the snapshot before the upgrade failed; nothing was changed.
    UpgradeSnapshotFailed,
    /// `upgrade`: the new etcd did not come up; the old binaries were put back and run.
    UpgradeRolledBack,
    /// `upgrade`: the new etcd did not come up, and the old one put back did not either.
    UpgradeRollbackFailed,
    /// The run was stopped by a signal before it finished.
    Interrupted,
    /// A bug or an unexpected condition in etcd-setup itself.
    InternalError,
    /// `status` found a state file it cannot read (corrupt, a link, a FIFO, a later
    /// schema): what the run did is unknown. Never written by `run`.
    StateUnreadable,
    /// `snapshot`: etcd could not be snapshotted, or the file not written or kept.
    SnapshotFailed,
    /// A snapshot file fails its check: its SHA-256 trailer or etcd's own status of it.
    SnapshotCorrupt,
    /// `restore`: the snapshot could not become this node's new one-member cluster.
    RestoreFailed,
    /// `maintain`: a defragmentation, compaction or disarm failed.
    MaintainFailed,
    /// A day-2 command found a member unhealthy or unreachable and did nothing.
    ClusterUnhealthy,
    /// etcd's NOSPACE alarm is active: the database reached its quota, writes fail.
    EtcdNospace,
    /// etcd's CORRUPT alarm is active: members' data differ.
    EtcdCorrupt,
    /// A certificate of `[tls]` (a leaf or a CA of its bundle) expired or is not yet valid.
    CertExpired,
    /// A TLS file does not fit: the key is not the certificate's, the certificate does not
    /// name this node's IP, or a file (a CA bundle, say) cannot be read as PEM.
    CertMismatch,
    /// `rotate-ca`: a trust bundle on disk does not hold the CA of this member's own
    /// certificate or of one a peer serves; a restart would cut the member off.
    CertUntrusted,
    /// The backup bucket's endpoint could not be reached (DNS, refused, timed out, cut).
    BackupUnreachable,
    /// The TLS handshake with the backup endpoint failed (unknown CA, wrong name, not TLS).
    BackupTlsRefused,
    /// The object store refused the backup keys (`SignatureDoesNotMatch`, `InvalidAccessKeyId`,
    /// `AccessDenied`).
    BackupDenied,
    /// The backup bucket does not exist (`NoSuchBucket`).
    BackupBucketMissing,
    /// The backup bucket's quota is full (`QuotaExceeded`).
    BackupQuotaExceeded,
    /// The object store refused the request's time (`RequestTimeTooSkewed`): the node's clock is off.
    BackupClockSkew,
    /// Another error of the object store, or an answer it should not give.
    BackupFailed,
    /// A backup fails its proof: the object read back differs from what was sent, or
    /// (`backups verify`, `restore --from-backup`) its SHA-256, etcd's trailer or status,
    /// its revision, or the trial restore.
    BackupVerifyFailed,
    /// `backups verify`, `restore --from-backup`: the object is not what was uploaded: its
    /// digest differs from its metadata, an age chunk fails its authentication, or the
    /// snapshot inside fails etcd's SHA-256 trailer (damaged in the store or in transit).
    BackupCorrupt,
    /// `backups verify`, `restore --from-backup`: the object ends before its last age
    /// chunk (an upload or a copy cut short).
    BackupTruncated,
    /// `backups verify`, `restore --from-backup`: the object is not encrypted to the
    /// identity given (a wrong identity file); the object itself may be sound.
    BackupDecryptFailed,
    /// `backups verify`, `restore --from-backup`: no such backup of the cluster in the
    /// bucket (the name given, or no verified one for `latest`).
    BackupNotFound,
}

impl ReasonCode {
    /// Every code, in the order the README lists them.
    pub const ALL: &'static [ReasonCode] = &[
        ReasonCode::IsoTimeout,
        ReasonCode::IsoUnreadable,
        ReasonCode::IsoRemoved,
        ReasonCode::ArchiveMissing,
        ReasonCode::ArchiveCorrupt,
        ReasonCode::ArchiveUnsafe,
        ReasonCode::ArchiveTooLarge,
        ReasonCode::DigestMismatch,
        ReasonCode::BinaryMissing,
        ReasonCode::WrongArchitecture,
        ReasonCode::DiskFull,
        ReasonCode::ConfigInvalid,
        ReasonCode::SystemdFailed,
        ReasonCode::EtcdStartFailed,
        ReasonCode::EtcdTlsRefused,
        ReasonCode::EtcdUnhealthy,
        ReasonCode::Locked,
        ReasonCode::ClusterMismatch,
        ReasonCode::JoinBlocked,
        ReasonCode::JoinFailed,
        ReasonCode::LearnerStalled,
        ReasonCode::LeaveRefused,
        ReasonCode::LeaveFailed,
        ReasonCode::KnownBadRelease,
        ReasonCode::UpgradeDowngrade,
        ReasonCode::UpgradeTooFar,
        ReasonCode::UpgradeBelowMinimum,
        ReasonCode::UpgradeTwoMembers,
        ReasonCode::UpgradeUnhealthy,
        ReasonCode::UpgradeInProgress,
        ReasonCode::UpgradeSnapshotFailed,
        ReasonCode::UpgradeRolledBack,
        ReasonCode::UpgradeRollbackFailed,
        ReasonCode::Interrupted,
        ReasonCode::InternalError,
        ReasonCode::StateUnreadable,
        ReasonCode::SnapshotFailed,
        ReasonCode::SnapshotCorrupt,
        ReasonCode::RestoreFailed,
        ReasonCode::MaintainFailed,
        ReasonCode::ClusterUnhealthy,
        ReasonCode::EtcdNospace,
        ReasonCode::EtcdCorrupt,
        ReasonCode::CertExpired,
        ReasonCode::CertMismatch,
        ReasonCode::CertUntrusted,
        ReasonCode::BackupUnreachable,
        ReasonCode::BackupTlsRefused,
        ReasonCode::BackupDenied,
        ReasonCode::BackupBucketMissing,
        ReasonCode::BackupQuotaExceeded,
        ReasonCode::BackupClockSkew,
        ReasonCode::BackupFailed,
        ReasonCode::BackupVerifyFailed,
        ReasonCode::BackupCorrupt,
        ReasonCode::BackupTruncated,
        ReasonCode::BackupDecryptFailed,
        ReasonCode::BackupNotFound,
    ];

    /// The stable text of the code, e.g. `archive-missing`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::IsoTimeout => "iso-timeout",
            ReasonCode::IsoUnreadable => "iso-unreadable",
            ReasonCode::IsoRemoved => "iso-removed",
            ReasonCode::ArchiveMissing => "archive-missing",
            ReasonCode::ArchiveCorrupt => "archive-corrupt",
            ReasonCode::ArchiveUnsafe => "archive-unsafe",
            ReasonCode::ArchiveTooLarge => "archive-too-large",
            ReasonCode::DigestMismatch => "digest-mismatch",
            ReasonCode::BinaryMissing => "binary-missing",
            ReasonCode::WrongArchitecture => "wrong-architecture",
            ReasonCode::DiskFull => "disk-full",
            ReasonCode::ConfigInvalid => "config-invalid",
            ReasonCode::SystemdFailed => "systemd-failed",
            ReasonCode::EtcdStartFailed => "etcd-start-failed",
            ReasonCode::EtcdTlsRefused => "etcd-tls-refused",
            ReasonCode::EtcdUnhealthy => "etcd-unhealthy",
            ReasonCode::Locked => "locked",
            ReasonCode::ClusterMismatch => "cluster-mismatch",
            ReasonCode::JoinBlocked => "join-blocked",
            ReasonCode::JoinFailed => "join-failed",
            ReasonCode::LearnerStalled => "learner-stalled",
            ReasonCode::LeaveRefused => "leave-refused",
            ReasonCode::LeaveFailed => "leave-failed",
            ReasonCode::KnownBadRelease => "known-bad-release",
            ReasonCode::UpgradeDowngrade => "upgrade-downgrade",
            ReasonCode::UpgradeTooFar => "upgrade-too-far",
            ReasonCode::UpgradeBelowMinimum => "upgrade-below-minimum",
            ReasonCode::UpgradeTwoMembers => "upgrade-two-members",
            ReasonCode::UpgradeUnhealthy => "upgrade-unhealthy",
            ReasonCode::UpgradeInProgress => "upgrade-in-progress",
            ReasonCode::UpgradeSnapshotFailed => "upgrade-snapshot-failed",
            ReasonCode::UpgradeRolledBack => "upgrade-rolled-back",
            ReasonCode::UpgradeRollbackFailed => "upgrade-rollback-failed",
            ReasonCode::Interrupted => "interrupted",
            ReasonCode::InternalError => "internal-error",
            ReasonCode::StateUnreadable => "state-unreadable",
            ReasonCode::SnapshotFailed => "snapshot-failed",
            ReasonCode::SnapshotCorrupt => "snapshot-corrupt",
            ReasonCode::RestoreFailed => "restore-failed",
            ReasonCode::MaintainFailed => "maintain-failed",
            ReasonCode::ClusterUnhealthy => "cluster-unhealthy",
            ReasonCode::EtcdNospace => "etcd-nospace",
            ReasonCode::EtcdCorrupt => "etcd-corrupt",
            ReasonCode::CertExpired => "cert-expired",
            ReasonCode::CertMismatch => "cert-mismatch",
            ReasonCode::CertUntrusted => "cert-untrusted",
            ReasonCode::BackupUnreachable => "backup-unreachable",
            ReasonCode::BackupTlsRefused => "backup-tls-refused",
            ReasonCode::BackupDenied => "backup-denied",
            ReasonCode::BackupBucketMissing => "backup-bucket-missing",
            ReasonCode::BackupQuotaExceeded => "backup-quota-exceeded",
            ReasonCode::BackupClockSkew => "backup-clock-skew",
            ReasonCode::BackupFailed => "backup-failed",
            ReasonCode::BackupVerifyFailed => "backup-verify-failed",
            ReasonCode::BackupCorrupt => "backup-corrupt",
            ReasonCode::BackupTruncated => "backup-truncated",
            ReasonCode::BackupDecryptFailed => "backup-decrypt-failed",
            ReasonCode::BackupNotFound => "backup-not-found",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure with its reason code and the one sentence an operator acts on.
///
/// `message` names the device, file, version or limit involved. The error chain that led
/// here, if any, travels in `source` and becomes the detail lines of the failure file.
#[derive(Debug)]
pub struct Failure {
    /// The stable reason code.
    pub code: ReasonCode,
    /// One actionable sentence.
    pub message: String,
    /// What lay underneath, for the detail lines.
    pub source: Option<anyhow::Error>,
}

impl Failure {
    /// A failure with no underlying error.
    pub fn new(code: ReasonCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying error for the detail lines.
    pub fn with_source(mut self, source: impl Into<anyhow::Error>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The failure file's first line: `code: sentence`.
    pub fn headline(&self) -> String {
        format!("{}: {}", self.code, self.message)
    }
}

/// Constructors for the causes that recur across steps, so each sentence is written once.
impl Failure {
    /// A filesystem error on `path` during `what` (e.g. "cannot write"): `disk-full` for
    /// ENOSPC and EDQUOT, wherever it happens, else `internal-error`.
    pub fn io(path: &Path, what: &str, err: io::Error) -> Failure {
        match err.raw_os_error() {
            Some(ENOSPC | EDQUOT) => Failure::new(
                ReasonCode::DiskFull,
                format!(
                    "the disk holding {} is full ({err}); free space there and run again",
                    path.display()
                ),
            ),
            _ => Failure::new(
                ReasonCode::InternalError,
                format!("{what} {}: {err}", path.display()),
            ),
        }
        .with_source(err)
    }

    /// The disc or image `what` (a device, an image file, a path on the disc) could not
    /// be read: `iso-unreadable`, naming it.
    pub fn iso_unreadable(what: impl fmt::Display, err: impl Into<anyhow::Error>) -> Failure {
        let err = err.into();
        Failure::new(
            ReasonCode::IsoUnreadable,
            format!("cannot read {what}: {err}"),
        )
        .with_source(err)
    }

    /// The Kubernetes ISO on `device` (label `label`) lacks the archive at
    /// `archive_path`: `archive-missing`, with what its top level holds as the detail.
    pub fn archive_missing(
        device: impl fmt::Display,
        label: &str,
        archive_path: &str,
        top_level: &[String],
    ) -> Failure {
        Failure::new(
            ReasonCode::ArchiveMissing,
            format!(
                "the Kubernetes ISO on {device} (label {label}) has no {archive_path}; \
                 rebuild it with an etcd version"
            ),
        )
        .with_source(anyhow::anyhow!(
            "the disc's top level holds: {}",
            top_level.join(", ")
        ))
    }
}

/// Linux `ENOSPC`: no space left on the device.
const ENOSPC: i32 = nix::errno::Errno::ENOSPC as i32;
/// Linux `EDQUOT`: disk quota exceeded.
const EDQUOT: i32 = nix::errno::Errno::EDQUOT as i32;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.headline())
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e.as_ref() as _)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_kebab_case_and_round_trip_through_json() {
        let mut seen = std::collections::HashSet::new();
        for code in ReasonCode::ALL {
            let s = code.as_str();
            assert!(seen.insert(s), "duplicate code {s}");
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{s}");
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            let back: ReasonCode = serde_json::from_str(&json).unwrap();
            assert_eq!(back, *code);
        }
    }

    #[test]
    fn no_space_and_quota_errors_are_disk_full_everywhere() {
        for errno in [ENOSPC, EDQUOT] {
            let f = Failure::io(
                Path::new("/var/lib/x"),
                "cannot write",
                io::Error::from_raw_os_error(errno),
            );
            assert_eq!(f.code, ReasonCode::DiskFull);
            assert!(f.message.contains("/var/lib/x"), "{}", f.message);
        }
        let f = Failure::io(Path::new("/x"), "cannot write", io::Error::other("boom"));
        assert_eq!(f.code, ReasonCode::InternalError);
        assert_eq!(f.message, "cannot write /x: boom");
    }

    #[test]
    fn every_code_is_in_the_readmes_reason_table() {
        let readme = include_str!("../README.md");
        for code in ReasonCode::ALL {
            let row = format!("| `{}` |", code.as_str());
            assert!(readme.contains(&row), "README.md has no row {row}");
        }
    }

    #[test]
    fn headline_is_code_colon_sentence() {
        let f = Failure::new(ReasonCode::ArchiveMissing, "no etcd on /dev/sr0");
        assert_eq!(f.headline(), "archive-missing: no etcd on /dev/sr0");
    }
}
