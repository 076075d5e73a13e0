//! The read side of the bucket, for `backups`, `backups verify` and `restore
//! --from-backup`: a cluster's backups with what their metadata says ([`list`]), one of
//! them chosen ([`choose`]: `latest` or by name), and one fetched into a root-only
//! scratch file and proven ([`fetch`]):
//!
//! 1. downloaded and, when sealed, decrypted on the way (`seal::open` reads the download
//!    through a pipe, so neither side is held in memory beyond a chunk) into
//!    `<snapshot.dir>/.backup-scratch/<pid>-<start time>-<n>/<snapshot name>` (folders
//!    0700, the file 0600: the plaintext holds every secret of the Kubernetes cluster);
//!    the name is the one `snapshot` gives, cluster ID included, so `restore` reads the
//!    cluster from it;
//! 2. what came down is what was uploaded: the object's SHA-256 against
//!    `etcd-setup-object-sha256`, the plaintext's against `etcd-setup-plain-sha256`, every
//!    age chunk authenticated, etcd's SHA-256 trailer (`backup-corrupt`); the object not
//!    cut short (`backup-truncated`); encrypted to the identity given
//!    (`backup-decrypt-failed`);
//! 3. it restores ([`super::trial`]: `snapshot status` at the recorded revision, a trial
//!    restore in the same scratch folder, key revisions compared): `backup-verify-failed`.
//!
//! The scratch folder is removed when the [`Proven`] drops, on every failure, and on a
//! signal (a registered cleanup); what a killed process left is removed by the next
//! fetch (its folder names a process that is gone).

use super::bucket::{self, key, Backup};
use super::s3::{Client, Digest256, ErrorKind, Head, S3Error};
use super::seal::{self, Identity, OpenErrorKind};
use super::sigv4::hex;
use super::trial::{self, Expect, Trial};
use crate::member::folder::Folder;
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::BackupSettings;
use crate::shared::report::Process;
use crate::shared::signals::Cleanup;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// The private folder of scratch copies inside `snapshot.dir`.
pub const SCRATCH: &str = ".backup-scratch";

/// `s3://BUCKET/KEY at ENDPOINT`, as the S3 client names an object.
pub fn shown(settings: &BackupSettings, key: &str) -> String {
    format!("s3://{}/{key} at {}", settings.bucket, settings.endpoint)
}

/// What an object's metadata says, read leniently: a value missing or not of its form is
/// `None` (the listing shows what there is; [`fetch`] refuses what it needs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// `etcd-setup-cluster-id`.
    pub cluster: Option<u64>,
    /// `etcd-setup-member`.
    pub member: Option<String>,
    /// `etcd-setup-revision`.
    pub revision: Option<i64>,
    /// `etcd-setup-etcd-version`.
    pub etcd_version: Option<String>,
    /// `etcd-setup-total-keys` (objects of agents before it was recorded have none).
    pub total_keys: Option<u64>,
    /// `etcd-setup-plain-sha256`.
    pub plain_sha256: Option<[u8; 32]>,
    /// `etcd-setup-object-sha256` (set once the upload was read back).
    pub object_sha256: Option<[u8; 32]>,
    /// `etcd-setup-verified` (`read-back` after the upload's read-back).
    pub verified: Option<String>,
    /// `etcd-setup-seal`: `age` or `none`.
    pub seal: Option<String>,
    /// `etcd-setup-agent`: the agent that uploaded it.
    pub agent: Option<String>,
    /// `etcd-setup-time`: when the snapshot was taken (RFC 3339).
    pub time: Option<String>,
}

fn sha256_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A metadata value, trimmed, at most 100 characters (text output escapes it, as every
/// line a command prints; JSON keeps it as it is).
fn value(head: &Head, name: &str) -> Option<String> {
    let v = head.get(name)?.trim();
    (!v.is_empty()).then(|| v.chars().take(100).collect())
}

impl Recorded {
    /// What `head`'s metadata says.
    pub fn of(head: &Head) -> Recorded {
        let get = |k: &str| head.get(k).map(str::trim);
        Recorded {
            cluster: get(key::CLUSTER)
                .filter(|c| c.len() == 16)
                .and_then(|c| u64::from_str_radix(c, 16).ok()),
            member: value(head, key::MEMBER),
            revision: get(key::REVISION).and_then(|r| r.parse().ok()),
            etcd_version: value(head, key::ETCD_VERSION),
            total_keys: get(key::TOTAL_KEYS).and_then(|n| n.parse().ok()),
            plain_sha256: get(key::PLAIN_SHA256).and_then(sha256_hex),
            object_sha256: get(key::OBJECT_SHA256).and_then(sha256_hex),
            verified: value(head, key::VERIFIED),
            seal: value(head, key::SEAL),
            agent: value(head, key::AGENT),
            time: value(head, key::TIME),
        }
    }

    /// Whether the upload read the object back and it matched.
    pub fn read_back(&self) -> bool {
        self.verified.as_deref() == Some("read-back") && self.object_sha256.is_some()
    }
}

/// One backup of a cluster: the object, what its name and its metadata say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The object (key, parsed name, size).
    pub backup: Backup,
    /// Its name inside the cluster's folder, as `backups` lists it.
    pub name: String,
    /// Its metadata.
    pub recorded: Recorded,
    /// For `latest`: an older believed backup of the cluster holds a higher revision.
    pub regression: Option<String>,
}

impl Listed {
    /// Whether it is sealed (age): by its metadata, else by its name.
    pub fn sealed(&self) -> bool {
        match self.recorded.seal.as_deref() {
            Some("age") => true,
            Some("none") => false,
            _ => self.backup.name.sealed,
        }
    }

    /// When the snapshot was taken (its name, to the second).
    pub fn time(&self) -> SystemTime {
        self.backup.name.time
    }
}

/// The S3 failure `e` of listing `cluster`'s folder.
fn s3(e: S3Error) -> Failure {
    Failure::from(e)
}

/// `cluster`'s backups in the bucket (objects under its folder whose names are ours),
/// each with its metadata, newest first.
pub fn list(
    settings: &BackupSettings,
    client: &Client,
    cluster: u64,
) -> Result<Vec<Listed>, Failure> {
    let prefix = bucket::cluster_prefix(settings, cluster);
    let mut out = Vec::new();
    for b in bucket::backups(settings, client, cluster).map_err(s3)? {
        // Gone between the listing and the head: a retention elsewhere; not listed.
        let Some(head) = client.head(&b.key).map_err(s3)? else {
            continue;
        };
        out.push(Listed {
            name: b.key.strip_prefix(&prefix).unwrap_or(&b.key).to_string(),
            recorded: Recorded::of(&head),
            regression: None,
            backup: b,
        });
    }
    Ok(out)
}

/// Which backup: the newest verified one, or one by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// `latest`.
    Latest,
    /// A name (`20261201T094500Z-rev4711-etcd-1.db.age`) or the object's whole key.
    Name(String),
}

impl std::str::FromStr for Which {
    type Err = String;

    fn from_str(text: &str) -> Result<Which, String> {
        let t = text.trim();
        if t == "latest" {
            return Ok(Which::Latest);
        }
        let ok = !t.is_empty()
            && t.len() <= 1024
            && t.bytes().all(|b| b.is_ascii_graphic())
            && !t.split('/').any(|p| p == ".." || p == ".");
        if !ok {
            return Err(format!(
                "{:?} is neither `latest` nor a backup's name as `etcd-setup backups` lists it",
                crate::shared::printable::line(t)
            ));
        }
        Ok(Which::Name(t.to_string()))
    }
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Which::Latest => f.write_str("latest"),
            Which::Name(n) => f.write_str(n),
        }
    }
}

/// The backup `which` names among `cluster`'s: `latest` is the newest whose metadata names
/// the cluster and says the upload read it back; a name is looked up in the cluster's
/// folder (or given as the whole key, which must lie in it). `backup-not-found` when
/// there is none; `cluster-mismatch` when the name lies in another cluster's folder or
/// the object's metadata names another cluster.
pub fn choose(
    settings: &BackupSettings,
    client: &Client,
    cluster: u64,
    which: &Which,
) -> Result<Listed, Failure> {
    let prefix = bucket::cluster_prefix(settings, cluster);
    let folder = shown(settings, &prefix);
    match which {
        Which::Latest => {
            let all = list(settings, client, cluster)?;
            let count = all.len();
            let now = SystemTime::now();
            let believed: Vec<Listed> = all
                .into_iter()
                .filter(|l| {
                    l.recorded.cluster == Some(cluster)
                        && l.recorded.read_back()
                        && bucket::distrusted(&l.backup, l.recorded.time.as_deref(), now).is_none()
                })
                .collect();
            let higher = believed
                .iter()
                .skip(1)
                .max_by_key(|l| l.backup.name.revision)
                .map(|l| (l.name.clone(), l.backup.name.revision));
            believed
                .into_iter()
                .next()
                .map(|mut l| {
                    l.regression = higher
                        .filter(|(_, r)| *r > l.backup.name.revision)
                        .map(|(older, r)| regression(settings, &l, &older, r));
                    l
                })
                .ok_or_else(|| {
                    Failure::new(
                        ReasonCode::BackupNotFound,
                        format!(
                            "no backup of cluster {cluster:016x} verified at upload in {folder} \
                             ({count} object(s) of ours there); check backup.prefix and the \
                             cluster (--cluster ID), or take one with etcd-setup snapshot"
                        ),
                    )
                })
        }
        Which::Name(n) => {
            let key = if n.contains('/') {
                n.clone()
            } else {
                format!("{prefix}{n}")
            };
            let Some(name) = key.strip_prefix(&prefix) else {
                return Err(Failure::new(
                    ReasonCode::ClusterMismatch,
                    format!(
                        "{} is not in the folder of cluster {cluster:016x} ({folder}); name \
                         the cluster whose backup it is with --cluster ID",
                        shown(settings, &key)
                    ),
                ));
            };
            let Some(parsed) = bucket::parse_name(name) else {
                return Err(Failure::new(
                    ReasonCode::BackupNotFound,
                    format!(
                        "{name:?} is no backup name etcd-setup writes \
                         (<time>-rev<revision>-<member>.db[.age], as `etcd-setup backups` \
                         lists them) in {folder}"
                    ),
                ));
            };
            let head = client.head(&key).map_err(s3)?.ok_or_else(|| {
                Failure::new(
                    ReasonCode::BackupNotFound,
                    format!(
                        "there is no {}; `etcd-setup backups` lists what there is",
                        shown(settings, &key)
                    ),
                )
            })?;
            let recorded = Recorded::of(&head);
            match recorded.cluster {
                Some(c) if c == cluster => {}
                Some(c) => {
                    return Err(Failure::new(
                        ReasonCode::ClusterMismatch,
                        format!(
                            "{}: its metadata names cluster {c:016x}, not {cluster:016x} whose \
                             folder it is in; not used",
                            shown(settings, &key)
                        ),
                    ))
                }
                None => {
                    return Err(Failure::new(
                        ReasonCode::BackupVerifyFailed,
                        format!(
                            "{} has no {} metadata: not an object etcd-setup uploaded",
                            shown(settings, &key),
                            key::CLUSTER
                        ),
                    ))
                }
            }
            Ok(Listed {
                name: name.to_string(),
                backup: Backup {
                    key: key.clone(),
                    name: parsed,
                    size: head.size,
                },
                recorded,
                regression: None,
            })
        }
    }
}

/// What is said of `latest` (`l`) when the older believed backup `older` holds the higher
/// revision `revision`: a cluster restored from an older backup since goes on from that
/// backup's revision (etcd's restore keeps it), so this is no proof of tampering, but a
/// writer of the bucket could also have put an older snapshot under a newer name.
fn regression(settings: &BackupSettings, l: &Listed, older: &str, revision: i64) -> String {
    format!(
        "{} (revision {}) is the newest backup, but the older {older} holds revision \
         {revision}: expected when the cluster was restored from an older backup since; \
         otherwise someone who can write the bucket put an older snapshot under a newer \
         name. Check `etcd-setup backups` and name the backup to use",
        shown(settings, &l.backup.key),
        l.backup.name.revision
    )
}

/// A scratch folder of this process in `<snapshot.dir>/.backup-scratch/`, removed with
/// what is in it when dropped.
pub struct Scratch {
    dir: PathBuf,
    file: PathBuf,
    _cleanup: Cleanup,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Ours alone, made exclusively below; remove_dir_all follows no link.
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!(
                "warning: cannot remove the backup's scratch copy {}: {e}",
                self.dir.display()
            );
        }
    }
}

impl Scratch {
    /// The scratch file.
    pub fn file(&self) -> &Path {
        &self.file
    }
}

/// `<pid>-<start time>-<n>` of this process.
fn scratch_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let me = Process::current();
    format!(
        "{}-{}-{}",
        me.pid,
        me.start_time.unwrap_or(0),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether scratch folder `name` belongs to a process that still lives.
fn alive(name: &str) -> bool {
    let mut parts = name.splitn(3, '-');
    let (Some(pid), Some(start)) = (
        parts.next().and_then(|p| p.parse::<u32>().ok()),
        parts.next().and_then(|p| p.parse::<u64>().ok()),
    ) else {
        // Not a name of ours: only root could have put it there; left alone.
        return true;
    };
    if start == 0 {
        // Written without a start time (no /proc entry then): alive while the pid is.
        return Path::new(&format!("/proc/{pid}")).exists();
    }
    Process {
        pid,
        start_time: Some(start),
    }
    .is_alive()
}

/// A new scratch folder in `snapshot_dir`'s private `.backup-scratch/`, and the file
/// `file_name` created in it (0600, exclusive); what dead processes left there removed.
/// Also where `restore FILE` copies FILE before checking it.
pub fn scratch(snapshot_dir: &Path, file_name: &str) -> Result<(Scratch, File), Failure> {
    let top = Folder::open(snapshot_dir, "snapshot.dir")?.private(SCRATCH)?;
    for old in top.names() {
        if !alive(&old) {
            let p = top.join(&old);
            match std::fs::remove_dir_all(&p) {
                Ok(()) => eprintln!(
                    "etcd-setup: removed {}, the scratch copy of a fetch that did not finish",
                    p.display()
                ),
                Err(e) => eprintln!("warning: cannot remove {}: {e}", p.display()),
            }
        }
    }
    let dir = top.join(&scratch_name());
    // `create`, not `create_all`: exclusive, inside a folder of root's alone.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Failure::io(&dir, "cannot create", e))?;
    let path = dir.join(file_name);
    let scratch = Scratch {
        _cleanup: Cleanup::remove_tree(&dir),
        file: path.clone(),
        dir,
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Failure::io(&path, "cannot create", e))?;
    Ok((scratch, file))
}

/// A backup fetched into its scratch file and proven; the scratch goes when it drops.
#[derive(Debug)]
pub struct Proven {
    /// The backup.
    pub backup: Listed,
    /// What the trial restore showed.
    pub trial: Trial,
    /// The object as it came down.
    pub object: Digest256,
    /// The plaintext snapshot.
    pub plain: Digest256,
    scratch: Scratch,
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch").field("file", &self.file).finish()
    }
}

impl Proven {
    /// The plaintext snapshot file (the restore reads it; gone when this drops).
    pub fn file(&self) -> &Path {
        &self.scratch.file
    }
}

/// A writer that keeps the first error it met (the pipe's reader gone, the disk full).
struct Noting<W> {
    inner: W,
    error: Option<io::Error>,
}

impl<W: Write> Write for Noting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).inspect_err(|e| {
            if self.error.is_none() {
                self.error = Some(io::Error::new(e.kind(), e.to_string()));
            }
        })
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Downloads `key`, of `size` bytes as listed, into `out` (the scratch file at `path`),
/// decrypting it with `identity` when given; the object's digest and the plaintext's.
fn download(
    settings: &BackupSettings,
    client: &Client,
    (key, size): (&str, u64),
    identity: Option<&Identity>,
    out: File,
    path: &Path,
) -> Result<(Digest256, Digest256), Failure> {
    let about = shown(settings, key);
    let mut out = Noting {
        inner: out,
        error: None,
    };
    let write_failure = |out: &mut Noting<File>| {
        out.error
            .take()
            .map(|e| Failure::io(path, "cannot write the backup's scratch copy", e))
    };
    let Some(identity) = identity else {
        return match client.get(key, size, &mut out) {
            Ok(got) => Ok((got, got)),
            Err(e) => Err(write_failure(&mut out).unwrap_or_else(|| e.into())),
        };
    };
    let (mut reader, writer) =
        io::pipe().map_err(|e| Failure::io(path, "cannot make a pipe for", e))?;
    let (opened, got, pipe_broke) = std::thread::scope(|scope| {
        let getter = scope.spawn(move || {
            let mut w = Noting {
                inner: writer,
                error: None,
            };
            let got = client.get(key, size, &mut w);
            // Dropping the writer ends the reader's input.
            (got, w.error.is_some())
        });
        let opened = seal::open(&mut reader, identity, &mut out);
        // A reader that stopped early (a wrong identity) lets the download end too.
        drop(reader);
        let (got, broke) = getter.join().unwrap_or_else(|_| {
            (
                Err(S3Error {
                    kind: ErrorKind::Other,
                    code: None,
                    message: format!("download {about}: the download thread panicked"),
                }),
                false,
            )
        });
        (opened, got, broke)
    });
    // The store's failure is the cause unless it failed because the decryption stopped
    // reading.
    let got = match got {
        Err(e) if !pipe_broke => return Err(e.into()),
        other => other,
    };
    match opened {
        Ok(o) => {
            let got = got.map_err(Failure::from)?;
            Ok((
                got,
                Digest256 {
                    len: o.plain_len,
                    sha256: o.plain_sha256,
                },
            ))
        }
        Err(e) => Err(match e.kind {
            OpenErrorKind::Io => write_failure(&mut out).unwrap_or_else(|| {
                Failure::new(ReasonCode::BackupFailed, format!("{about}: {}", e.message))
            }),
            OpenErrorKind::WrongIdentity => Failure::new(
                ReasonCode::BackupDecryptFailed,
                format!(
                    "{about} cannot be decrypted: {}; give the identity it was encrypted to \
                     (--identity FILE or backup.identity_file)",
                    e.message
                ),
            ),
            OpenErrorKind::Truncated => Failure::new(
                ReasonCode::BackupTruncated,
                format!("{about} is cut short: {}", e.message),
            ),
            OpenErrorKind::Damaged => Failure::new(
                ReasonCode::BackupCorrupt,
                format!("{about} is damaged: {}", e.message),
            ),
            OpenErrorKind::NotAge => Failure::new(
                ReasonCode::BackupCorrupt,
                format!(
                    "{about} is named and recorded as age-encrypted, but {}",
                    e.message
                ),
            ),
        }),
    }
}

fn verify_failed(about: &str, what: impl std::fmt::Display) -> Failure {
    Failure::new(
        ReasonCode::BackupVerifyFailed,
        format!("{about}: {what}; not proven"),
    )
}

/// Fetches `backup` into a scratch file in `snapshot_dir`, decrypted with the identity
/// file `identity` when it is sealed, and proves it (see the module's steps) with the
/// tools in `bin_dir`. The identity file is read only when needed; without one, a sealed
/// backup is `config-invalid`.
pub fn fetch(
    settings: &BackupSettings,
    client: &Client,
    backup: Listed,
    identity: Option<&Path>,
    bin_dir: &Path,
    snapshot_dir: &Path,
) -> Result<Proven, Failure> {
    let about = shown(settings, &backup.backup.key);
    let r = &backup.recorded;
    // What the proof needs from the metadata, before anything is downloaded.
    let cluster = r
        .cluster
        .ok_or_else(|| verify_failed(&about, format_args!("it has no {}", key::CLUSTER)))?;
    let plain_sha256 = r
        .plain_sha256
        .ok_or_else(|| verify_failed(&about, format_args!("it has no {}", key::PLAIN_SHA256)))?;
    let revision = r
        .revision
        .ok_or_else(|| verify_failed(&about, format_args!("it has no {}", key::REVISION)))?;
    let etcd_version = r
        .etcd_version
        .clone()
        .ok_or_else(|| verify_failed(&about, format_args!("it has no {}", key::ETCD_VERSION)))?;
    if revision != backup.backup.name.revision {
        return Err(verify_failed(
            &about,
            format_args!(
                "its name says revision {}, its metadata {revision}",
                backup.backup.name.revision
            ),
        ));
    }
    let identity = if backup.sealed() {
        let file = identity.ok_or_else(|| {
            Failure::new(
                ReasonCode::ConfigInvalid,
                format!(
                    "{about} is encrypted (age): name the identity that decrypts it with \
                     --identity FILE, or backup.identity_file in {}",
                    settings.config.display()
                ),
            )
        })?;
        Some(Identity::read(file)?)
    } else {
        None
    };

    // The member of the object's name, which its grammar keeps to [A-Za-z0-9._-]: the
    // metadata's could hold a `/`.
    let name = crate::member::names::name_for(
        cluster,
        &backup.backup.name.member,
        backup.time(),
        revision,
    );
    let (scratch, file) = scratch(snapshot_dir, &name)?;
    let (object, plain) = download(
        settings,
        client,
        (&backup.backup.key, backup.backup.size),
        identity.as_ref(),
        file,
        &scratch.file,
    )?;
    let corrupt = |what: String| {
        Failure::new(
            ReasonCode::BackupCorrupt,
            format!("{about}: {what}; changed in the store or in transit since its upload"),
        )
    };
    if let Some(want) = r.object_sha256 {
        if want != object.sha256 {
            return Err(corrupt(format!(
                "{} bytes with SHA-256 {} came down, its metadata says the object uploaded had \
                 SHA-256 {}",
                object.len,
                hex(&object.sha256),
                hex(&want)
            )));
        }
    }
    if plain.sha256 != plain_sha256 {
        return Err(corrupt(format!(
            "the snapshot inside ({} bytes) has SHA-256 {}, its metadata says {}",
            plain.len,
            hex(&plain.sha256),
            hex(&plain_sha256)
        )));
    }
    crate::member::tools::check_trailer(&scratch.file).map_err(|f| match f.code {
        ReasonCode::SnapshotCorrupt => corrupt(format!("etcd's trailer: {}", f.message)),
        _ => f,
    })?;
    let expect = Expect {
        sha256: plain_sha256,
        revision,
        total_keys: r.total_keys,
        etcd_version: &etcd_version,
    };
    let trial = trial::trial(&scratch.file, &expect, bin_dir, &scratch.dir).map_err(|f| {
        let message = format!("{about}: {}", f.message);
        Failure::new(f.code, message)
    })?;
    Ok(Proven {
        backup,
        trial,
        object,
        plain,
        scratch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_read_leniently() {
        let head = Head {
            size: 10,
            meta: vec![
                (key::CLUSTER.into(), "8e9e05c52164694d".into()),
                (key::REVISION.into(), "4711".into()),
                (key::MEMBER.into(), "etcd-1\u{1b}[2J".into()),
                (key::PLAIN_SHA256.into(), "ab".repeat(32)),
                (key::OBJECT_SHA256.into(), "zz".repeat(32)),
                (key::VERIFIED.into(), "read-back".into()),
            ],
        };
        let r = Recorded::of(&head);
        assert_eq!(r.cluster, Some(0x8e9e_05c5_2164_694d));
        assert_eq!(r.revision, Some(4711));
        assert_eq!(r.member.as_deref(), Some("etcd-1\u{1b}[2J"));
        assert_eq!(r.plain_sha256, Some([0xab; 32]));
        assert_eq!(r.object_sha256, None);
        // Read back, but without the object's digest it does not count.
        assert!(!r.read_back());
        assert_eq!(
            Recorded::of(&Head {
                size: 0,
                meta: vec![]
            }),
            Recorded::default()
        );
    }

    #[test]
    fn a_scratch_folder_of_a_process_gone_is_not_alive() {
        let me = Process::current();
        assert!(alive(&format!("{}-{}-0", me.pid, me.start_time.unwrap())));
        assert!(!alive(&format!(
            "{}-{}-0",
            me.pid,
            me.start_time.unwrap() + 1
        )));
        assert!(!alive("999999999-1-0"));
        assert!(alive("notes"));
        let n = scratch_name();
        assert!(alive(&n), "{n}");
    }
}
