//! The archive pass: validates the etcd release tarball and extracts it into a private
//! staging folder, in one streaming pass over the compressed bytes.
//!
//! The road of every byte, read once: input → SHA-256 → strict gunzip (one member, CRC-32
//! and length trailer, nothing after it, ratio watched) → tar walk (ustar, GNU, PAX) →
//! policy → files in the staging folder, the etcd binaries' ELF headers checked on the way.
//! Three threads share the road, a few buffers apart: the reader and its SHA-256 (`feed`),
//! the inflate and its CRC-32 (`unpacked`), and the walk and its writes (the caller's; a
//! pipe is read on the inflate's thread, [`extract_from_pipe`]). On a two-CPU node under
//! TCG that took the pass from 1.16–1.20 s to 0.71–0.75 s (docs/measurements.md, "The
//! archive pass on the node").
//!
//! When several things are wrong, the verdict is the one an operator should act on first:
//! 1. `archive-corrupt` for a damaged gzip stream (and `iso-unreadable` when the input cannot
//!    be read): whatever else the garbage seemed to say cannot be trusted. So after the walk
//!    refuses an entry, the rest of the stream is still inflated (not written) to learn this.
//! 2. `digest-mismatch`: it is not the file the operator pinned.
//! 3. the first rule the walk found broken, in stream order.
//!
//! On any failure the staging folder is removed (a drop guard, so a panic removes it too)
//! and nothing was written anywhere else.

mod direct;
mod feed;
mod gzip;
mod names;
mod staging;
mod tar;
mod tree;
mod unpacked;

pub use staging::{fsync_tree, remove_stale_staging, Staging, STAGING_PREFIX};

/// The caps are `[limits]` of the configuration, which owns their defaults.
pub use crate::shared::config::Limits;

use crate::reason::{Failure, ReasonCode};
use crate::road::elf::Machine;
use crate::shared::config::Settings;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// What an archive must satisfy beyond being a well-formed etcd release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Size caps.
    pub limits: Limits,
    /// The SHA-256 the compressed archive must have, when pinned.
    pub sha256: Option<[u8; 32]>,
    /// The machine the binaries must run on; by default this host.
    pub machine: Machine,
}

impl Policy {
    /// What the archive pass must enforce for `s`: the configured caps and pinned digest,
    /// for this machine's architecture.
    pub fn of(s: &Settings) -> Policy {
        Policy {
            limits: s.limits,
            sha256: s.sha256,
            ..Policy::default()
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            limits: Limits::default(),
            sha256: None,
            machine: Machine::host(),
        }
    }
}

/// A release that passed every check, extracted into its staging folder.
#[derive(Debug)]
pub struct Extracted {
    /// The staging folder; holds exactly the top folder. Removed when dropped.
    pub staging: Staging,
    /// The top folder's name, e.g. `etcd-v3.5.1-linux-amd64`.
    pub top: String,
    /// The etcd version the top folder names, e.g. `3.5.1`.
    pub version: String,
    /// The architecture the top folder names, e.g. `amd64`.
    pub arch: String,
    /// SHA-256 of the compressed archive.
    pub sha256: [u8; 32],
    /// Size of the compressed archive.
    pub compressed_bytes: u64,
    /// Bytes of regular files extracted.
    pub unpacked_bytes: u64,
    /// Folders and regular files created, parent folders the archive did not list included.
    pub entries: u64,
    /// Whether the release carries `etcdutl` (3.5 and later do).
    pub has_etcdutl: bool,
}

impl Extracted {
    /// The archive's SHA-256 in lowercase hex, as `sha256sum` prints it.
    pub fn sha256_hex(&self) -> String {
        hex(&self.sha256)
    }

    /// The folder holding `etcd`, `etcdctl` and `etcdutl`: the staging folder's top folder.
    pub fn bin_dir(&self) -> PathBuf {
        self.staging.path().join(&self.top)
    }
}

/// Validates the gzip-compressed etcd release read from `input` and extracts it into a new
/// staging folder under `staging_parent`, in one pass. `source_name` is what messages call
/// the archive, e.g. `/dev/sr0:etcd/etcd-linux-amd64.tar.gz`.
///
/// Every failure carries its reason code and one sentence naming the entry or limit.
pub fn extract(
    input: impl Read + Send,
    source_name: &str,
    staging_parent: &Path,
    policy: &Policy,
) -> Result<Extracted, Failure> {
    pass(input, true, source_name, staging_parent, policy)
}

/// [`extract`] with the input read on the inflate's thread when it needs bytes, not ahead
/// on a thread of its own: for a pipe, whose writer may stall without closing it, so that
/// a corrupt stream's verdict never waits for a read in flight.
pub fn extract_from_pipe(
    input: impl Read + Send,
    source_name: &str,
    staging_parent: &Path,
    policy: &Policy,
) -> Result<Extracted, Failure> {
    pass(input, false, source_name, staging_parent, policy)
}

fn pass(
    input: impl Read + Send,
    read_ahead: bool,
    source_name: &str,
    staging_parent: &Path,
    policy: &Policy,
) -> Result<Extracted, Failure> {
    std::thread::scope(|scope| {
        let feed = if read_ahead {
            feed::Feed::start(scope, input).map_err(|e| {
                Failure::new(
                    ReasonCode::InternalError,
                    format!("{source_name}: cannot start the thread that reads the archive: {e}"),
                )
            })?
        } else {
            feed::Feed::inline(input)
        };
        let gz = gzip::Gunzip::new(feed, source_name, policy.limits.max_ratio)?;
        // Before the inflate starts: a folder that cannot be made fails the pass while no
        // thread waits on a read.
        let staging = Staging::create(staging_parent)?;
        let unpacked = unpacked::Unpacked::start(scope, gz, source_name)?;
        walk_unpacked(unpacked, staging, source_name, policy)
    })
}

/// The tar walk over the unpacked stream into `staging`, and the verdict. Returning drops
/// `gz`, which ends the inflate thread and with it the reader.
fn walk_unpacked(
    mut gz: unpacked::Unpacked,
    staging: Staging,
    source_name: &str,
    policy: &Policy,
) -> Result<Extracted, Failure> {
    let limits = &policy.limits;
    let mut tree = tree::Tree::new(
        staging.path(),
        source_name,
        policy.machine,
        limits.max_entries,
    );
    let walked = tar::walk(&mut gz, &mut tree, limits, source_name)
        .and_then(|unpacked| Ok((unpacked, tree.finish()?)))
        .map_err(|found| match gz.drain() {
            Err(damaged) if damaged.code != ReasonCode::ArchiveTooLarge => {
                damaged.with_source(found)
            }
            _ => found,
        });
    if let (Some((digest, _)), Some(pinned)) = (gz.digest(), policy.sha256) {
        if digest != pinned {
            return Err(Failure::new(
                ReasonCode::DigestMismatch,
                format!(
                    "{source_name} has SHA-256 {}, not the pinned {}; the ISO holds another \
                     etcd release or a damaged copy",
                    hex(&digest),
                    hex(&pinned)
                ),
            ));
        }
    }
    let (unpacked_bytes, top) = walked?;
    let Some((sha256, compressed_bytes)) = gz.digest() else {
        return Err(Failure::new(
            ReasonCode::InternalError,
            format!("{source_name}: the tar walk ended before the gzip stream did"),
        ));
    };
    Ok(Extracted {
        staging,
        top: top.name,
        version: top.version,
        arch: top.arch,
        sha256,
        compressed_bytes,
        unpacked_bytes,
        entries: top.entries,
        has_etcdutl: top.has_etcdutl,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn corrupt(message: String) -> Failure {
    Failure::new(ReasonCode::ArchiveCorrupt, message)
}

fn too_large(message: String) -> Failure {
    Failure::new(ReasonCode::ArchiveTooLarge, message)
}

fn binary_missing(message: String) -> Failure {
    Failure::new(ReasonCode::BinaryMissing, message)
}

/// `archive-unsafe: <archive>: entry "<name>" <why>`.
fn unsafe_entry(archive: &str, shown: &str, why: &str) -> Failure {
    Failure::new(
        ReasonCode::ArchiveUnsafe,
        format!("{archive}: entry {shown} {why}"),
    )
}

/// The input could not be read: the disc or image, not the archive, is at fault.
fn read_failure(archive: &str, err: io::Error) -> Failure {
    Failure::iso_unreadable(archive, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_the_configured_caps_and_digest_for_this_machine() {
        let s = crate::shared::config::parse(
            crate::shared::config::EXAMPLE,
            Path::new("/etc/etcd-setup/config.toml"),
        )
        .expect("the example is valid");
        let p = Policy::of(&s);
        assert!(s.sha256.is_some());
        assert_eq!(p.sha256, s.sha256);
        assert_eq!(p.limits, s.limits);
        assert_eq!(p.machine, Machine::host());
    }
}
