//! The release's snapshot-file tools: `etcdutl snapshot status|restore` on 3.5,
//! `etcdctl snapshot status|restore` on 3.4 (which has no etcdutl); and the SHA-256
//! trailer etcd appends to every snapshot it streams, checked here without them.

use crate::reason::{Failure, ReasonCode};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The tool for snapshot files in `install_dir`: etcdutl when installed, else etcdctl.
pub fn snapshot_tool(install_dir: &Path) -> PathBuf {
    let etcdutl = install_dir.join("etcdutl");
    if etcdutl.is_file() {
        etcdutl
    } else {
        install_dir.join("etcdctl")
    }
}

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

/// Runs `program ARGS` with a clean environment, killed after `deadline`; its stdout,
/// or its last stderr line as the error.
pub fn run(program: &Path, args: &[String], deadline: Duration) -> Result<Vec<u8>, String> {
    let shown = format!("{} {}", program.display(), args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("ETCDCTL_API", "3")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take();
    let err = child.stderr.take();
    std::thread::spawn(move || {
        let read = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                if let Some(r) = r {
                    let _ = r.take(4 << 20).read_to_end(&mut v);
                }
                v
            })
        };
        let o = read(out.map(|o| Box::new(o) as Box<dyn Read + Send>));
        let e = read(err.map(|e| Box::new(e) as Box<dyn Read + Send>));
        let status = child.wait();
        let _ = tx.send((
            status,
            o.join().unwrap_or_default(),
            e.join().unwrap_or_default(),
        ));
    });
    let (status, stdout, stderr) = match rx.recv_timeout(deadline) {
        Ok(r) => r,
        Err(_) => {
            // Not reaped yet (the waiter reaps only after it exits): the PID is its own.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            return Err(format!(
                "{shown} did not finish within {} s and was killed",
                deadline.as_secs()
            ));
        }
    };
    let status = status.map_err(|e| format!("waiting for {shown}: {e}"))?;
    if status.success() {
        Ok(stdout)
    } else {
        let line = crate::cluster::etcd::error_line(&stderr);
        Err(format!("{shown} failed ({status}): {line}"))
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
/// of its digest; see [`has_trailer`]). A file without it (a copied `member/snap/db`) is
/// refused: restore it with `--skip-hash-check`.
pub fn check_trailer(file: &Path) -> Result<(), Failure> {
    // Without leave to lack one, a file without a trailer is an error.
    check_trailer_if_present(file, false).map(drop)
}

/// [`check_trailer`], except that with `may_lack_one` (`restore --skip-hash-check`) a
/// file without a trailer passes: `Ok(true)` when a trailer was there and matched,
/// `Ok(false)` when there was none. A trailer that is there is always checked.
pub fn check_trailer_if_present(file: &Path, may_lack_one: bool) -> Result<bool, Failure> {
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
            return Ok(false);
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
    if h.finalize().as_slice() != trailer {
        let skip = if may_lack_one {
            "; --skip-hash-check is for files without a trailer, and this one has one"
        } else {
            ""
        };
        return Err(corrupt(format!(
            "its SHA-256 trailer does not match its content (damaged or truncated){skip}"
        )));
    }
    Ok(true)
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

#[cfg(test)]
mod tests {
    use super::*;

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
