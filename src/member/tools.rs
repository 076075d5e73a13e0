//! The release's snapshot-file tools: `etcdutl snapshot status|restore` on 3.5,
//! `etcdctl snapshot status|restore` on 3.4 (which has no etcdutl); and the SHA-256
//! trailer etcd appends to every snapshot it streams, checked here without them.

use crate::reason::{Failure, ReasonCode};
use crate::shared::digest::Digest256;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// What `snapshot status` says of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct FileStatus {
    /// etcd's hash of the key space.
    pub hash: u64,
    /// The revision it holds.
    pub revision: i64,
    /// How many keys.
    #[serde(rename = "totalKey")]
    pub total_keys: u64,
    /// The bolt database's size.
    #[serde(rename = "totalSize")]
    pub total_size: u64,
}

/// Runs `program ARGS` through the one child runner ([`crate::cluster::etcd::command`]: a
/// clean environment, killed after `deadline` and when we die, stdout and stderr capped
/// but read to their end); its stdout, or its last stderr line as the error.
pub fn run(program: &Path, args: &[String], deadline: Duration) -> Result<Vec<u8>, String> {
    use crate::cluster::etcd::{command, ErrorKind};
    let shown = format!("{} {}", program.display(), args.join(" "));
    let mut cmd = command::command(program, nix::sys::signal::Signal::SIGKILL);
    cmd.args(args);
    let out = command::run(cmd, deadline, &shown, &[]).map_err(|e| match e.kind {
        ErrorKind::Timeout => format!(
            "{shown} {} {} s and was killed",
            command::NOT_IN_TIME,
            deadline.as_secs()
        ),
        _ => e.line,
    })?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        let line = crate::cluster::etcd::error_line(&out.stderr);
        Err(format!("{shown} failed ({}): {line}", out.status))
    }
}

/// `snapshot status` of `file`, read with `tool`.
pub fn file_status(tool: &Path, file: &Path) -> Result<FileStatus, Failure> {
    let args = vec![
        "--write-out=json".to_string(),
        "snapshot".into(),
        "status".into(),
        file.display().to_string(),
    ];
    let out = run(tool, &args, Duration::from_secs(300)).map_err(|e| {
        Failure::new(
            ReasonCode::SnapshotCorrupt,
            format!("{} is not a readable etcd snapshot: {e}", file.display()),
        )
    })?;
    serde_json::from_slice(&out).map_err(|e| {
        Failure::new(
            ReasonCode::SnapshotCorrupt,
            format!(
                "{}: unreadable snapshot status ({e}): {}",
                file.display(),
                String::from_utf8_lossy(&out).trim()
            ),
        )
    })
}

/// Opens `file` to read without blocking (a FIFO planted at its name must not hang the
/// command) and only if it is a regular file.
pub fn open_regular(file: &Path) -> Result<std::fs::File, Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(file)
        .map_err(|e| Failure::io(file, "cannot open", e))?;
    let m = f
        .metadata()
        .map_err(|e| Failure::io(file, "cannot stat", e))?;
    if !m.is_file() {
        return Err(Failure::new(
            ReasonCode::SnapshotCorrupt,
            format!("{} is not a regular file", file.display()),
        ));
    }
    Ok(f)
}

/// Whether a file of `size` bytes ends in etcd's SHA-256 trailer: a bbolt database is a
/// whole number of pages (512-byte multiples at least), so a streamed snapshot is 32
/// bytes past one, and a copied `member/snap/db` never is.
pub fn has_trailer(size: u64) -> bool {
    size >= 512 + 32 && size % 512 == 32
}

/// Checks the SHA-256 etcd appends to a streamed snapshot (the database, then 32 bytes
/// of its digest; see [`has_trailer`]): the length and SHA-256 of the whole file as it
/// was read (the trailer included), which an upload compares with what it streams. A
/// file without it (a copied `member/snap/db`) is refused: restore it with
/// `--skip-hash-check`.
pub fn check_trailer(file: &Path) -> Result<Digest256, Failure> {
    // Without leave to lack one, a file without a trailer is an error.
    trailer_digest(file, false)?.ok_or_else(|| {
        Failure::new(
            ReasonCode::SnapshotCorrupt,
            format!("{}: no trailer", file.display()),
        )
    })
}

/// [`check_trailer`], except that with `may_lack_one` (`restore --skip-hash-check`) a
/// file without a trailer passes: `Ok(true)` when a trailer was there and matched,
/// `Ok(false)` when there was none. A trailer that is there is always checked.
pub fn check_trailer_if_present(file: &Path, may_lack_one: bool) -> Result<bool, Failure> {
    trailer_digest(file, may_lack_one).map(|d| d.is_some())
}

/// [`check_trailer_if_present`]: the whole file's digest when a trailer was there and
/// matched, `None` when there was none.
fn trailer_digest(file: &Path, may_lack_one: bool) -> Result<Option<Digest256>, Failure> {
    let corrupt = |why: String| {
        Failure::new(
            ReasonCode::SnapshotCorrupt,
            format!("{}: {why}", file.display()),
        )
    };
    let mut f = open_regular(file)?;
    let size = f
        .metadata()
        .map_err(|e| Failure::io(file, "cannot stat", e))?
        .len();
    if !has_trailer(size) {
        if may_lack_one {
            return Ok(None);
        }
        return Err(corrupt(format!(
            "{size} bytes is no database with etcd's SHA-256 trailer (truncated, or a \
             copied db file: restore that with --skip-hash-check)"
        )));
    }
    let mut h = Sha256::new();
    let mut left = size - 32;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = (left as usize).min(buf.len());
        f.read_exact(&mut buf[..n])
            .map_err(|e| Failure::io(file, "cannot read", e))?;
        h.update(&buf[..n]);
        left -= n as u64;
    }
    let mut trailer = [0u8; 32];
    f.read_exact(&mut trailer)
        .map_err(|e| Failure::io(file, "cannot read", e))?;
    if h.clone().finalize().as_slice() != trailer {
        let skip = if may_lack_one {
            "; --skip-hash-check is for files without a trailer, and this one has one"
        } else {
            ""
        };
        return Err(corrupt(format!(
            "its SHA-256 trailer does not match its content (damaged or truncated){skip}"
        )));
    }
    h.update(trailer);
    Ok(Some(Digest256 {
        len: size,
        sha256: h.finalize().into(),
    }))
}

/// The SHA-256 of a snapshot hashed while etcdctl writes it, so that only the last
/// part is left to hash when it is done: [`Growing::follow`] reads its partial as it
/// grows, [`Growing::finish`] reads the rest and checks the trailer.
///
/// The check covers exactly the final file: `finish` compares the inode it followed
/// with the final file's (etcdctl renames its partial, the same inode, into place), reads
/// it to its end after the writer is gone, and counts the bytes it hashed against the
/// final size. Anything else (another inode, a count that differs, no trailer, a digest
/// that does not match) is handed to [`check_trailer`] of the final file, which reads it
/// whole and says what is wrong in its own words. Measured on 162.7 MiB (the upkeep
/// benchmark): the hash alone 0.18 s, `etcdutl snapshot status` 0.06 s, so after the
/// save the verification cost the hash's time even with the two at once.
///
/// Given the status tool, the follower also runs `snapshot status` as soon as the bytes
/// it read end in a trailer that matches them: the stream is then complete, and etcdctl
/// is only left with its fsync and rename, which the status overlaps instead of following
/// (its time was most of what `snapshot` added to `etcdctl snapshot save`). The status
/// reads the followed inode itself (`/proc/PID/fd/N`), and counts only when
/// [`Growing::finish`] finds that inode at the final name with no byte more than it had
/// then; otherwise the final file's status is read as before.
pub struct Growing {
    file: std::fs::File,
    hasher: Sha256,
    /// The last bytes read, at most 32: the trailer, when no more come.
    held: Vec<u8>,
    /// Bytes read in all.
    read: u64,
    /// `snapshot status` of the followed file once it looked complete, and its length then.
    early: Option<(FileStatus, u64)>,
}

impl Growing {
    /// How long a follower waits before it looks again at a partial that did not grow.
    const PAUSE: Duration = Duration::from_millis(2);

    /// Hashes `file` (the partial, opened before the writer starts) as it grows, until
    /// `done` is set and its end is reached. `None` when reading it failed: the caller
    /// checks the final file whole.
    /// With `status_tool`, its `snapshot status` of the file is read once the file looks
    /// complete (see [`Growing`]).
    pub fn follow(
        file: std::fs::File,
        done: &std::sync::atomic::AtomicBool,
        status_tool: Option<&Path>,
    ) -> Option<Growing> {
        let mut g = Growing {
            file,
            hasher: Sha256::new(),
            held: Vec::with_capacity(64),
            read: 0,
            early: None,
        };
        let mut tool = status_tool;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            // Read before looking at `done`: what was written before it was set is read.
            let finished = done.load(std::sync::atomic::Ordering::Acquire);
            match g.file.read(&mut buf) {
                Ok(0) if finished => return Some(g),
                Ok(0) if tool.is_some() && g.looks_complete() => {
                    if let Some(t) = tool.take() {
                        g.early = g.status_now(t);
                    }
                }
                Ok(0) => std::thread::sleep(Self::PAUSE),
                Ok(n) => g.feed(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    /// Whether `snapshot status` was read while the writer finished.
    pub fn has_early_status(&self) -> bool {
        self.early.is_some()
    }

    /// Whether what was read so far is a whole snapshot: a bbolt file's length plus 32,
    /// ending in the SHA-256 of all before.
    fn looks_complete(&self) -> bool {
        has_trailer(self.read)
            && self.held.len() == 32
            && self.hasher.clone().finalize().as_slice() == self.held
    }

    /// `snapshot status` of the followed inode as it is now, and its length then; `None`
    /// when it failed (the final file is then read by name, whose errors say which).
    fn status_now(&self, tool: &Path) -> Option<(FileStatus, u64)> {
        use std::os::fd::AsRawFd;
        let path = format!("/proc/{}/fd/{}", std::process::id(), self.file.as_raw_fd());
        file_status(tool, Path::new(&path))
            .ok()
            .map(|status| (status, self.read))
    }

    /// Hashes `data` but its last 32 bytes of all read so far, which are held back.
    fn feed(&mut self, data: &[u8]) {
        self.read += data.len() as u64;
        if data.len() >= 32 {
            self.hasher.update(&self.held);
            self.hasher.update(&data[..data.len() - 32]);
            self.held.clear();
            self.held.extend_from_slice(&data[data.len() - 32..]);
        } else {
            self.held.extend_from_slice(data);
            let over = self.held.len().saturating_sub(32);
            self.hasher.update(&self.held[..over]);
            self.held.drain(..over);
        }
    }

    /// Checks the trailer of `file`, the final snapshot (the writer gone): what was
    /// followed when it is the same file, else (or on any doubt) [`check_trailer`]. The
    /// whole file's length and SHA-256, as [`check_trailer`] gives them.
    pub fn finish(self, file: &Path) -> Result<Digest256, Failure> {
        self.finish_with_status(file).map(|(digest, _)| digest)
    }

    /// [`finish`](Self::finish), and the `snapshot status` read while the writer finished,
    /// when it holds for the final file: the same inode, no byte more than it read.
    pub fn finish_with_status(
        mut self,
        file: &Path,
    ) -> Result<(Digest256, Option<FileStatus>), Failure> {
        let early = self.early.take();
        let (digest, followed) = self.finish_followed(file);
        let digest = digest?;
        let status = early
            .filter(|&(_, len)| followed && len == digest.len)
            .map(|(status, _)| status);
        Ok((digest, status))
    }

    /// The digest, and whether it is of the followed inode (not a whole read of another).
    fn finish_followed(mut self, file: &Path) -> (Result<Digest256, Failure>, bool) {
        use std::os::unix::fs::MetadataExt;
        let whole = || (check_trailer(file), false);
        let f = match open_regular(file) {
            Ok(f) => f,
            Err(e) => return (Err(e), false),
        };
        let (Ok(final_meta), Ok(ours)) = (f.metadata(), self.file.metadata()) else {
            return whole();
        };
        if (final_meta.dev(), final_meta.ino()) != (ours.dev(), ours.ino()) {
            return whole();
        }
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match self.file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.feed(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return whole(),
            }
        }
        let size = match f.metadata() {
            Ok(m) => m.len(),
            Err(_) => return whole(),
        };
        if self.read != size
            || !has_trailer(size)
            || self.hasher.clone().finalize().as_slice() != self.held
        {
            return whole();
        }
        self.hasher.update(&self.held);
        let digest = Digest256 {
            len: size,
            sha256: self.hasher.finalize().into(),
        };
        (Ok(digest), true)
    }
}

/// How far a restore moves the revision on (etcdutl 3.5.x that has `--bump-revision`):
/// past every revision the lost cluster may have reached after the snapshot, so that
/// Kubernetes' watchers and caches, which remember revisions, see the restored data as
/// newer, and the revisions in between as compacted (etcd's own guidance for restoring
/// a Kubernetes cluster's etcd).
pub const BUMP_REVISION: u64 = 1_000_000_000;

/// Whether `tool`'s `snapshot restore` has `--bump-revision` (etcdutl from 3.5.?; not
/// 3.5.1's, not 3.4's etcdctl).
pub fn supports_bump_revision(tool: &Path) -> bool {
    let args = vec!["snapshot".to_string(), "restore".into(), "--help".into()];
    run(tool, &args, Duration::from_secs(10))
        .map(|out| String::from_utf8_lossy(&out).contains("--bump-revision"))
        .unwrap_or(false)
}

/// What a restore needs to make the new member.
#[derive(Debug, Clone)]
pub struct RestoreTo<'a> {
    /// The member's name.
    pub name: &'a str,
    /// Its peer URL.
    pub peer_url: &'a str,
    /// Every member of the configuration as `name=url,…`: the restored cluster then has
    /// the ID the configuration gives, which the other nodes' join checks.
    pub initial_cluster: &'a str,
    /// The cluster token.
    pub token: &'a str,
    /// The data dir to create (must not exist).
    pub data_dir: &'a Path,
    /// Skip etcd's own hash check (a copied db file has no trailer).
    pub skip_hash_check: bool,
}

/// `snapshot restore FILE` into a new data dir, with the configuration's members (the
/// first start, with `--force-new-cluster`, makes it a one-member cluster of the same ID).
pub fn restore(
    tool: &Path,
    file: &Path,
    to: &RestoreTo,
    deadline: Duration,
) -> Result<(), Failure> {
    let mut args = vec![
        "snapshot".to_string(),
        "restore".into(),
        file.display().to_string(),
        format!("--name={}", to.name),
        format!("--initial-cluster={}", to.initial_cluster),
        format!("--initial-advertise-peer-urls={}", to.peer_url),
        format!("--initial-cluster-token={}", to.token),
        format!("--data-dir={}", to.data_dir.display()),
    ];
    if to.skip_hash_check {
        args.push("--skip-hash-check".into());
    }
    if supports_bump_revision(tool) {
        args.push(format!("--bump-revision={BUMP_REVISION}"));
        args.push("--mark-compacted".into());
    }
    run(tool, &args, deadline)
        .map(drop)
        .map_err(|e| restore_error(file, to.data_dir, &e))
}

/// What a failed `snapshot restore` means: `disk-full` when the tool ran out of space or
/// quota (its error line says so: `no space left on device`, `disk quota exceeded`),
/// else `restore-failed`.
fn restore_error(file: &Path, data_dir: &Path, said: &str) -> Failure {
    let lower = said.to_ascii_lowercase();
    if lower.contains("no space left on device") || lower.contains("disk quota exceeded") {
        Failure::new(
            ReasonCode::DiskFull,
            format!(
                "the disk holding {} is full (restoring {}: {said}); free space there and run \
                 again",
                data_dir.display(),
                file.display()
            ),
        )
    } else {
        Failure::new(
            ReasonCode::RestoreFailed,
            format!(
                "cannot restore {} into {}: {said}",
                file.display(),
                data_dir.display()
            ),
        )
    }
}

/// Whether a tool's error text says the disk is full (ENOSPC, EDQUOT as Go prints them).
pub fn says_disk_full(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("no space left on device") || t.contains("disk quota exceeded")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::etcd::command::MAX_STDOUT;

    fn sh(script: &str, deadline: Duration) -> Result<Vec<u8>, String> {
        run(
            Path::new("/bin/sh"),
            &["-c".to_string(), script.to_string()],
            deadline,
        )
    }

    /// A snapshot-like file: `pages` of 512 bytes, then etcd's SHA-256 trailer (wrong
    /// when `damaged`).
    fn snapshot_bytes(pages: usize, damaged: bool) -> Vec<u8> {
        let mut db: Vec<u8> = (0..pages * 512).map(|i| (i * 7 % 251) as u8).collect();
        let mut digest = Sha256::digest(&db).to_vec();
        if damaged {
            digest[0] ^= 1;
        }
        db.extend_from_slice(&digest);
        db
    }

    /// Writes `bytes` to `partial` in uneven pieces from another thread while a follower
    /// hashes it, renames it to `done_name` as etcdctl does, and finishes the check there.
    fn follow_a_writer(bytes: &[u8], dir: &Path) -> Result<Digest256, Failure> {
        use std::io::Write;
        use std::sync::atomic::{AtomicBool, Ordering};
        let partial = dir.join("s.db.part");
        let mut w = std::fs::File::create(&partial).unwrap();
        let r = std::fs::File::open(&partial).unwrap();
        let done = AtomicBool::new(false);
        let followed = std::thread::scope(|t| {
            let follower = t.spawn(|| Growing::follow(r, &done, None));
            for piece in bytes.chunks(4099) {
                w.write_all(piece).unwrap();
            }
            w.sync_all().unwrap();
            drop(w);
            std::fs::rename(&partial, dir.join("s.db")).unwrap();
            done.store(true, Ordering::Release);
            follower.join().unwrap()
        });
        followed
            .expect("the partial was read")
            .finish(&dir.join("s.db"))
    }

    #[test]
    fn a_snapshot_hashed_while_written_passes_or_fails_as_a_whole_check_would() {
        let dir = tempfile::tempdir().unwrap();
        let good = snapshot_bytes(700, false);
        let whole = Digest256 {
            len: good.len() as u64,
            sha256: Sha256::digest(&good).into(),
        };
        let got = follow_a_writer(&good, dir.path()).expect("a good snapshot");
        assert_eq!(got, whole, "the whole file's digest, trailer included");
        assert_eq!(check_trailer(&dir.path().join("s.db")).unwrap(), whole);
        let e = follow_a_writer(&snapshot_bytes(700, true), dir.path()).unwrap_err();
        assert_eq!(e.code, ReasonCode::SnapshotCorrupt);
        assert!(e.message.contains("does not match its content"), "{e:?}");
        // Cut short, no trailer where a snapshot has one: check_trailer's own words.
        let cut = &snapshot_bytes(700, false)[..700 * 512];
        let e = follow_a_writer(cut, dir.path()).unwrap_err();
        assert!(
            e.message
                .contains("no database with etcd's SHA-256 trailer"),
            "{e:?}"
        );
    }

    #[test]
    fn a_followed_file_that_is_not_the_final_one_is_checked_whole() {
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().unwrap();
        // What was followed is damaged; the file at the final name is another, good one.
        std::fs::write(dir.path().join("old"), snapshot_bytes(8, true)).unwrap();
        let done = AtomicBool::new(true);
        let r = std::fs::File::open(dir.path().join("old")).unwrap();
        let followed = Growing::follow(r, &done, None).unwrap();
        let good = snapshot_bytes(9, false);
        std::fs::write(dir.path().join("s.db"), &good).unwrap();
        let got = followed
            .finish(&dir.path().join("s.db"))
            .expect("the final file is good");
        assert_eq!(
            (got.len, got.sha256),
            (good.len() as u64, Sha256::digest(&good).into()),
            "the digest of the final file, not of the one followed"
        );
        // And the other way round: followed good, final damaged.
        std::fs::write(dir.path().join("good"), snapshot_bytes(8, false)).unwrap();
        let r = std::fs::File::open(dir.path().join("good")).unwrap();
        let followed = Growing::follow(r, &done, None).unwrap();
        std::fs::write(dir.path().join("bad.db"), snapshot_bytes(8, true)).unwrap();
        assert!(followed.finish(&dir.path().join("bad.db")).is_err());
    }

    /// A stand-in `snapshot status` tool in `dir`: logs the path it was given, and
    /// answers with that file's size as the revision (so an answer tells which bytes it
    /// read).
    fn status_stand_in(dir: &Path) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let tool = dir.join("etcdutl");
        let log = dir.join("status.log");
        std::fs::write(
            &tool,
            format!(
                "#!/bin/sh\nsize=$(stat -L -c %s \"$4\")\necho \"$4\" >> {}\n\
                 echo \"{{\\\"hash\\\":1,\\\"revision\\\":$size,\\\"totalKey\\\":3,\\\"totalSize\\\":$size}}\"\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        tool
    }

    /// Writes `first` (a whole snapshot) to a partial a follower with the status tool
    /// reads, waits until the tool was run, writes `then`, renames the partial as
    /// etcdctl does and finishes there: the digest and the status that still counts.
    fn follow_with_status(
        dir: &Path,
        first: &[u8],
        then: &[u8],
    ) -> (Digest256, Option<FileStatus>, String) {
        use std::io::Write;
        use std::sync::atomic::{AtomicBool, Ordering};
        let tool = status_stand_in(dir);
        let log = dir.join("status.log");
        let partial = dir.join("s.db.part");
        let mut w = std::fs::File::create(&partial).unwrap();
        let r = std::fs::File::open(&partial).unwrap();
        let done = AtomicBool::new(false);
        let followed = std::thread::scope(|t| {
            let follower = t.spawn(|| Growing::follow(r, &done, Some(&tool)));
            for piece in first.chunks(4099) {
                w.write_all(piece).unwrap();
            }
            let start = std::time::Instant::now();
            while !log.exists() {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "the status never ran"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            w.write_all(then).unwrap();
            w.sync_all().unwrap();
            drop(w);
            std::fs::rename(&partial, dir.join("s.db")).unwrap();
            done.store(true, Ordering::Release);
            follower.join().unwrap()
        });
        let (digest, status) = followed
            .expect("the partial was read")
            .finish_with_status(&dir.join("s.db"))
            .expect("a good snapshot");
        (digest, status, std::fs::read_to_string(&log).unwrap())
    }

    #[test]
    fn the_status_read_while_the_writer_finishes_counts_only_for_the_final_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let good = snapshot_bytes(300, false);
        let (digest, status, log) = follow_with_status(dir.path(), &good, &[]);
        assert_eq!(digest.sha256, <[u8; 32]>::from(Sha256::digest(&good)));
        let status = status.expect("the status read before the rename counts");
        assert_eq!(status.revision, good.len() as i64, "it read the whole file");
        assert_eq!(log.lines().count(), 1, "read once: {log}");
        assert!(
            log.starts_with("/proc/"),
            "the followed inode, not a name: {log}"
        );

        // More came after the status ran (a stream that only looked complete): the final
        // file is still a snapshot whose trailer matches, but that status is not its own.
        let dir = tempfile::tempdir().unwrap();
        let mut rest = vec![9u8; 480];
        let mut all = good.clone();
        all.extend_from_slice(&rest);
        let trailer = Sha256::digest(&all);
        rest.extend_from_slice(&trailer);
        all.extend_from_slice(&trailer);
        let (digest, status, _) = follow_with_status(dir.path(), &good, &rest);
        assert_eq!(digest.len, all.len() as u64, "the final file's digest");
        assert_eq!(status, None, "a status of fewer bytes does not count");
    }

    /// 8 MiB on stdout and on stderr, twice each cap: a runner that stops reading at
    /// its cap leaves the child blocked on a full pipe until the deadline kills it.
    #[test]
    fn a_chatty_child_runs_to_its_end_and_its_output_is_capped() {
        let out = sh(
            "head -c 8388608 /dev/zero; head -c 8388608 /dev/zero >&2",
            Duration::from_secs(120),
        )
        .expect("the child ran to its end");
        assert_eq!(out.len(), MAX_STDOUT);

        let e = sh(
            "head -c 8388608 /dev/zero | tr '\\0' x >&2; echo >&2; \
             echo 'Error: the last line counts' >&2; exit 3",
            Duration::from_secs(120),
        )
        .expect_err("the child failed");
        assert!(
            e.ends_with("failed (exit status: 3): the last line counts"),
            "{e}"
        );
    }

    #[test]
    fn a_child_past_its_deadline_is_killed() {
        let e = sh("exec sleep 1000", Duration::from_millis(200)).expect_err("killed");
        assert!(
            e.contains("did not finish within 0 s and was killed"),
            "{e}"
        );
    }

    const FIFO_ENV: &str = "ETCD_SETUP_TEST_TOOLS_FIFO";
    const THIS_TEST: &str = "member::tools::tests::the_child_dies_with_the_process_that_ran_it";

    /// This test binary, run again as the parent, runs a child through [`run`] that
    /// tells its pid through a FIFO and sleeps; the parent is killed outright, and the
    /// child must die with it (`PR_SET_PDEATHSIG`) rather than sleep on.
    #[test]
    fn the_child_dies_with_the_process_that_ran_it() {
        if let Some(fifo) = std::env::var_os(FIFO_ENV) {
            let fifo = std::path::PathBuf::from(fifo);
            let _ = sh(
                &format!("echo $$ > '{}'; exec sleep 1000", fifo.display()),
                Duration::from_secs(1000),
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pid");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let mut parent = std::process::Command::new(std::env::current_exe().unwrap())
            .args([THIS_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(FIFO_ENV, &fifo)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Opening the FIFO waits for the child's write: an event, bounded here in case
        // the parent never gets that far.
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read_to_string(reader));
        });
        let said = rx.recv_timeout(Duration::from_secs(60));
        let pid: i32 = match said {
            Ok(Ok(text)) => text.trim().parse().unwrap(),
            other => {
                let _ = parent.kill();
                panic!("the child never told its pid: {other:?}");
            }
        };
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let pidfd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) } as i32;
        assert!(
            pidfd >= 0,
            "pidfd_open({pid}): {}",
            std::io::Error::last_os_error()
        );
        parent.kill().unwrap();
        parent.wait().unwrap();
        // A pidfd turns readable when its process exited.
        let mut poll = nix::libc::pollfd {
            fd: pidfd,
            events: nix::libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the descriptor is ours and closed right after.
        let ready = unsafe { nix::libc::poll(&mut poll, 1, 60_000) };
        // SAFETY: closing the descriptor pidfd_open gave us.
        unsafe { nix::libc::close(pidfd) };
        if ready != 1 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        assert_eq!(ready, 1, "the child {pid} outlived the process that ran it");
    }

    #[test]
    fn the_tools_enospc_and_edquot_are_disk_full() {
        let f = Path::new("/s/x.db");
        let d = Path::new("/var/lib/etcd/.restoring-x/data");
        for said in [
            "etcdutl snapshot restore failed (exit status: 1): write /var/lib/etcd/member/snap/db: no space left on device",
            "Error: open x: disk quota exceeded",
        ] {
            let e = restore_error(f, d, said);
            assert_eq!(e.code, ReasonCode::DiskFull, "{said}");
            assert!(e.message.contains("/var/lib/etcd/.restoring-x/data"), "{}", e.message);
        }
        assert_eq!(
            restore_error(f, d, "Error: snapshot file has wrong size").code,
            ReasonCode::RestoreFailed
        );
    }

    #[test]
    fn a_fifo_or_a_folder_as_the_snapshot_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("snap.db");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (path, skip) in [
            (&fifo, false),
            (&fifo, true),
            (&dir.path().to_path_buf(), true),
        ] {
            let e = check_trailer_if_present(path, skip).unwrap_err();
            assert_eq!(e.code, ReasonCode::SnapshotCorrupt);
            assert!(e.message.contains("is not a regular file"), "{}", e.message);
        }
    }

    #[test]
    fn the_trailer_is_there_exactly_32_bytes_past_a_page_multiple() {
        assert!(has_trailer(24576 + 32));
        assert!(!has_trailer(24576));
        assert!(!has_trailer(32));
        assert!(!has_trailer(24576 + 33));
    }
}
