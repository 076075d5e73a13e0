//! A folder root writes snapshots into, held open: every step inside it is relative to
//! the opened folder (`openat`, `renameat`, `fstatat`, `unlinkat`), so no symbolic link in
//! it is followed and a path swapped after the check changes nothing.
//!
//! The folder must be root's and not writable by group or others, and so must every
//! folder above it: another user able to write there could plant a link at a name root
//! is about to write, or swap the folder itself. Checked when it is opened, at every use
//! (config validation checks what can be known without the disk). Partials are created
//! with `O_CREAT|O_EXCL|O_NOFOLLOW` under unique names in a private (0700) staging folder
//! inside it, on the same filesystem, so the rename into place is atomic.

use crate::reason::{Failure, ReasonCode};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The private staging folder's name inside a snapshot folder.
pub const STAGING: &str = ".staging";

/// An opened folder, checked.
#[derive(Debug)]
pub struct Folder {
    /// Its path, for messages and for tools that take a path.
    pub path: PathBuf,
    /// The configuration key it comes from (`snapshot.dir`).
    pub key: &'static str,
    dir: File,
}

fn errno(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Why `meta` is not a folder root may write into, if it is not.
fn unsafe_owner(meta: &std::fs::Metadata) -> Option<String> {
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Some(format!("is owned by uid {}, not root", meta.uid()));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "is writable by {} (mode {mode:04o})",
            if mode & 0o002 != 0 {
                "others"
            } else {
                "its group"
            }
        ));
    }
    None
}

impl Folder {
    /// Opens the folder at `path` (the value of `key`), created 0700 when missing,
    /// refusing it (`config-invalid`, naming the key) when it or a folder above it is not
    /// root's or is writable by group or others, or when it is a symbolic link.
    pub fn open(path: &Path, key: &'static str) -> Result<Folder, Failure> {
        let refuse = |what: &Path, why: String| {
            Failure::new(
                ReasonCode::ConfigInvalid,
                format!(
                    "{key} {}: {} {why}; root writes snapshots only into folders of its \
                     own (owned by root, not writable by group or others, no symbolic \
                     link): fix its owner and mode, or set {key} elsewhere",
                    path.display(),
                    if what == path {
                        "the folder".to_string()
                    } else {
                        format!("the folder above it, {},", what.display())
                    },
                ),
            )
        };
        // Above it first: a folder someone else may write decides what `path` names.
        for up in path.ancestors().skip(1) {
            match std::fs::metadata(up) {
                Ok(meta) => {
                    if let Some(why) = unsafe_owner(&meta) {
                        // Sticky world-writable folders (/tmp) are no exception: anyone
                        // may create the folder's name there first.
                        return Err(refuse(up, why));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Failure::io(up, "cannot inspect", e)),
            }
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(|e| Failure::io(path, &format!("cannot create {key}"), e))?;
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => {
                refuse(path, "is a symbolic link or not a folder".into())
            }
            e => Failure::io(path, &format!("cannot open {key}"), errno(e)),
        })?;
        let dir = File::from(fd);
        let meta = dir
            .metadata()
            .map_err(|e| Failure::io(path, "cannot inspect", e))?;
        if let Some(why) = unsafe_owner(&meta) {
            return Err(refuse(path, why));
        }
        Ok(Folder {
            path: path.to_path_buf(),
            key,
            dir,
        })
    }

    /// The private folder `name` inside this one (0700, root's), created when missing.
    pub fn private(&self, name: &str) -> Result<Folder, Failure> {
        let path = self.path.join(name);
        match nix::sys::stat::mkdirat(self.dir.as_fd(), name, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(Failure::io(&path, "cannot create", errno(e))),
        }
        let fd = nix::fcntl::openat(
            self.dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => Failure::new(
                ReasonCode::ConfigInvalid,
                format!(
                    "{} {}: {} is a symbolic link or not a folder; only root can have put \
                     it there: move it away",
                    self.key,
                    self.path.display(),
                    path.display()
                ),
            ),
            e => Failure::io(&path, "cannot open", errno(e)),
        })?;
        let dir = File::from(fd);
        let meta = dir
            .metadata()
            .map_err(|e| Failure::io(&path, "cannot inspect", e))?;
        if meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(Failure::new(
                ReasonCode::ConfigInvalid,
                format!(
                    "{} {}: {} is owned by uid {}, not root: move it away",
                    self.key,
                    self.path.display(),
                    path.display(),
                    meta.uid()
                ),
            ));
        }
        if meta.permissions().mode() & 0o7777 != 0o700 {
            dir.set_permissions(std::fs::Permissions::from_mode(0o700))
                .map_err(|e| Failure::io(&path, "cannot chmod", e))?;
        }
        Ok(Folder {
            path,
            key: self.key,
            dir,
        })
    }

    /// `name` in this folder, as a path (for messages and for tools).
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Creates `name` (0600) for writing: `O_CREAT|O_EXCL|O_NOFOLLOW`, so nothing already
    /// there (a link above all) is ever opened.
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        nix::fcntl::openat(
            self.dir.as_fd(),
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map(File::from)
        .map_err(errno)
    }

    /// Opens the regular file `name` for reading, never through a link, never blocking.
    pub fn open_file(&self, name: &str) -> io::Result<File> {
        let fd: OwnedFd = nix::fcntl::openat(
            self.dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        let f = File::from(fd);
        if !f.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(f)
    }

    /// Whether `name` is a regular file here (a link is not).
    pub fn is_file(&self, name: &str) -> bool {
        nix::sys::stat::fstatat(self.dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG)
    }

    /// Whether anything is at `name` (a link included).
    pub fn exists(&self, name: &str) -> bool {
        nix::sys::stat::fstatat(self.dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    }

    /// Renames `from` here to `to` in `into` (the same filesystem).
    pub fn rename(&self, from: &str, into: &Folder, to: &str) -> io::Result<()> {
        nix::fcntl::renameat(self.dir.as_fd(), from, into.dir.as_fd(), to).map_err(errno)
    }

    /// Removes the file `name` here (unlink never follows a link). Only for this
    /// agent's own partials; a kept snapshot is never removed.
    pub fn remove_partial(&self, name: &str) {
        let _ = nix::unistd::unlinkat(
            self.dir.as_fd(),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }

    /// Removes the file `name` here (unlink never follows a link): for the bounds of
    /// `pruned/`, whose snapshots were moved there by retention.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        nix::unistd::unlinkat(
            self.dir.as_fd(),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .map_err(errno)
    }

    /// The regular files here and their bytes in all (no link followed).
    pub fn usage(&self) -> (u64, u64) {
        self.names()
            .iter()
            .filter_map(|n| {
                nix::sys::stat::fstatat(self.dir.as_fd(), n.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                    .ok()
            })
            .filter(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG)
            .fold((0, 0), |(n, b), st| (n + 1, b + st.st_size as u64))
    }

    /// The names in this folder.
    pub fn names(&self) -> Vec<String> {
        // Listed by path; whatever is done with a name is done relative to the opened
        // folder, without following links.
        std::fs::read_dir(&self.path)
            .map(|it| {
                it.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// fsyncs the folder, so that renames in it are durable.
    pub fn sync(&self) -> Result<(), Failure> {
        self.dir
            .sync_all()
            .map_err(|e| Failure::io(&self.path, "cannot sync", e))
    }
}

/// A partial in a staging folder under a name no other run uses
/// (`<pid>-<ms>-<n>@<member>.db.part`), removed with the file it became (`….db`) when
/// dropped unless kept.
#[derive(Debug)]
pub struct Staged<'a> {
    folder: &'a Folder,
    /// The final name in the staging folder (`….db`); etcdctl writes `name.part`.
    pub name: String,
    /// The partial's name (`….db.part`).
    pub part: String,
    kept: bool,
}

impl<'a> Staged<'a> {
    /// Creates the partial (`O_EXCL|O_NOFOLLOW`), for `member`; the open file with it.
    pub fn create(folder: &'a Folder, member: &str) -> Result<(Staged<'a>, File), Failure> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let pid = std::process::id();
        let mut tries = 0;
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = format!("{pid}-{ms}-{n}@{member}.db");
            let part = format!("{name}.part");
            match folder.create_new(&part) {
                Ok(f) => {
                    return Ok((
                        Staged {
                            folder,
                            name,
                            part,
                            kept: false,
                        },
                        f,
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
                Err(e) => {
                    return Err(Failure::io(&folder.join(&part), "cannot create", e));
                }
            }
        }
    }

    /// The path of `….db`, for etcdctl and the verifying tools.
    pub fn path(&self) -> PathBuf {
        self.folder.join(&self.name)
    }

    /// Renamed into place: nothing to remove any more.
    pub fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.folder.remove_partial(&self.part);
            self.folder.remove_partial(&self.name);
        }
    }
}

/// Removes from a staging folder what runs of `member` on this node left that are dead
/// (killed mid-snapshot); never another run's files, never another member's (a shared
/// copy folder's staging holds theirs).
pub fn remove_dead_partials(staging: &Folder, member: &str) {
    for name in staging.names() {
        let Some((run, rest)) = name.split_once('@') else {
            continue;
        };
        if rest != format!("{member}.db") && rest != format!("{member}.db.part") {
            continue;
        }
        let Some(pid) = run.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let dead = pid > 0
            && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                == Err(nix::errno::Errno::ESRCH);
        if dead && staging.is_file(&name) {
            staging.remove_partial(&name);
        }
    }
}
