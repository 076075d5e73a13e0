//! Writes accepted entries into the staging folder and keeps the layout rules: one top folder
//! named after the release, no entry twice, no entry under a file, and the etcd binaries
//! checked as ELF executables for this machine while they stream by.
//!
//! Files are created with `O_CREAT | O_EXCL` (`create_new`), which never follows a symlink in
//! the last component. Every parent folder was created by this writer inside the private 0700
//! staging folder, and the walk never creates a link, so no component of any path can be a
//! link: plain paths are as safe here as `openat` with `O_NOFOLLOW` would be.

use super::direct::{self, DirectWriter};
use super::names;
use super::{binary_missing, too_large, unsafe_entry, Failure};
use crate::reason::ReasonCode;
use crate::road::elf::{self, Machine};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The binaries looked for directly in the top folder; the first two are required.
const BINARIES: [&str; 3] = ["etcd", "etcdctl", "etcdutl"];
/// `etcd`'s index in [`BINARIES`].
const ETCD: usize = 0;

/// What a name already stands for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    File,
    /// A folder the archive listed itself.
    Dir,
    /// A folder created only because an entry below it came first.
    ImplicitDir,
}

/// The release the top folder names.
pub(super) struct Top {
    /// The folder's name, e.g. `etcd-v3.5.1-linux-amd64`.
    pub(super) name: String,
    /// e.g. `3.5.1`.
    pub(super) version: String,
    /// e.g. `amd64`.
    pub(super) arch: String,
    /// Whether `etcdutl` came along.
    pub(super) has_etcdutl: bool,
    /// Folders and files created.
    pub(super) entries: u64,
}

/// The staging folder being filled.
pub(super) struct Tree<'a> {
    root: &'a Path,
    archive: &'a str,
    machine: Machine,
    max_entries: u64,
    created: u64,
    top: Option<Top>,
    seen: HashMap<String, Seen>,
    found: [bool; 3],
}

/// A file being written.
pub(super) struct FileSink {
    out: Out,
    path: PathBuf,
    /// For the etcd binaries: which one, and their first bytes for the ELF check.
    binary: Option<(usize, Vec<u8>)>,
}

impl<'a> Tree<'a> {
    /// A writer into `root` (the staging folder) for the archive called `archive`, creating
    /// at most `max_entries` folders and files: implicit parent folders count too, so a
    /// deep path per entry cannot multiply the work.
    pub(super) fn new(
        root: &'a Path,
        archive: &'a str,
        machine: Machine,
        max_entries: u64,
    ) -> Self {
        Tree {
            root,
            archive,
            machine,
            max_entries,
            created: 0,
            top: None,
            seen: HashMap::new(),
            found: [false; 3],
        }
    }

    /// Creates the folder `parts` (and any missing parent).
    pub(super) fn dir(&mut self, parts: &[&str], shown: &str) -> Result<(), Failure> {
        self.parents(parts, true, shown)?;
        let key = parts.join("/");
        match self.seen.get(&key) {
            None => {
                self.mkdir(&key, shown)?;
                self.seen.insert(key, Seen::Dir);
            }
            Some(Seen::ImplicitDir) => {
                self.seen.insert(key, Seen::Dir);
            }
            Some(_) => return Err(self.duplicate(shown)),
        }
        Ok(())
    }

    /// Creates the file `parts` (and any missing parent), mode 0755 if `exec` else 0644,
    /// for the `size` bytes the archive says it holds: from [`direct::MIN_SIZE`] on they
    /// are written around the page cache ([`direct`]).
    pub(super) fn file(
        &mut self,
        parts: &[&str],
        shown: &str,
        exec: bool,
        size: u64,
    ) -> Result<FileSink, Failure> {
        self.parents(parts, false, shown)?;
        let key = parts.join("/");
        if self.seen.contains_key(&key) {
            return Err(self.duplicate(shown));
        }
        let binary = match parts {
            [_, leaf] => BINARIES.iter().position(|b| b == leaf),
            _ => None,
        };
        if let (Some(_), false) = (binary, exec) {
            return Err(binary_missing(format!(
                "{}: {shown} is not marked executable in the archive",
                self.archive
            )));
        }
        self.count(shown)?;
        let path = self.root.join(&key);
        let mode = if exec { 0o755 } else { 0o644 };
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| Failure::io(&path, "cannot create", e))?;
        // The umask may have narrowed the mode: set it exactly.
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| Failure::io(&path, "cannot set the mode of", e))?;
        self.seen.insert(key, Seen::File);
        let out = if size >= direct::MIN_SIZE {
            Out::Direct(DirectWriter::new(file))
        } else {
            Out::Buffered(file)
        };
        Ok(FileSink {
            out,
            path,
            binary: binary.map(|i| (i, Vec::with_capacity(elf::HEADER_LEN))),
        })
    }

    /// Ends a file: its last bytes written, and an etcd binary checked as an ELF
    /// executable for this machine.
    pub(super) fn close(&mut self, sink: FileSink, shown: &str) -> Result<(), Failure> {
        // The writer's descriptor is closed here, before anything can execute the file.
        let direct = match sink.out {
            Out::Direct(w) => {
                drop(
                    w.finish()
                        .map_err(|e| Failure::io(&sink.path, "cannot write", e))?,
                );
                true
            }
            Out::Buffered(file) => {
                drop(file);
                false
            }
        };
        let Some((index, header)) = sink.binary else {
            return Ok(());
        };
        if let Err(e) = elf::check(&header, self.machine) {
            let code = if e.is_wrong_architecture() {
                ReasonCode::WrongArchitecture
            } else {
                ReasonCode::BinaryMissing
            };
            return Err(Failure::new(code, format!("{}: {shown} {e}", self.archive)));
        }
        self.found[index] = true;
        // etcd, written around the page cache, is started next: its pages are loaded back.
        if direct && index == ETCD {
            direct::warm_page_cache(&sink.path);
        }
        Ok(())
    }

    /// The release found, once `etcd` and `etcdctl` are known to be there.
    pub(super) fn finish(self) -> Result<Top, Failure> {
        let Some(mut top) = self.top else {
            return Err(binary_missing(format!(
                "{} holds no files; an etcd release holds etcd-vX.Y.Z-linux-ARCH/etcd and etcdctl",
                self.archive
            )));
        };
        for (name, found) in BINARIES.iter().zip(self.found).take(2) {
            if !found {
                return Err(binary_missing(format!(
                    "{} has no file {}/{name}",
                    self.archive, top.name
                )));
            }
        }
        top.has_etcdutl = self.found[2];
        top.entries = self.created;
        Ok(top)
    }

    /// Applies the top-folder rule and creates the missing parents of `parts`.
    fn parents(&mut self, parts: &[&str], is_dir: bool, shown: &str) -> Result<(), Failure> {
        let Some((&first, rest)) = parts.split_first() else {
            return Err(unsafe_entry(self.archive, shown, "has an empty name"));
        };
        match &self.top {
            Some(top) if top.name != first => {
                return Err(unsafe_entry(
                    self.archive,
                    shown,
                    &format!(
                        "lies outside the top folder {}/; the archive must hold one top folder",
                        top.name
                    ),
                ));
            }
            Some(_) => {}
            None => self.open_top(first, shown)?,
        }
        if rest.is_empty() && !is_dir {
            return Err(unsafe_entry(
                self.archive,
                shown,
                "is a file at the top level; the archive must hold one top folder",
            ));
        }
        for depth in 1..parts.len().saturating_sub(1) {
            let key = parts[..=depth].join("/");
            match self.seen.get(&key) {
                Some(Seen::File) => {
                    return Err(unsafe_entry(
                        self.archive,
                        shown,
                        &format!("lies inside {key:?}, which is a file"),
                    ));
                }
                Some(_) => {}
                None => {
                    self.mkdir(&key, shown)?;
                    self.seen.insert(key, Seen::ImplicitDir);
                }
            }
        }
        Ok(())
    }

    /// Takes the first entry's first component as the top folder, if its name is a release.
    fn open_top(&mut self, first: &str, shown: &str) -> Result<(), Failure> {
        let Some((version, arch)) = names::release(first) else {
            return Err(unsafe_entry(
                self.archive,
                shown,
                "is not inside a top folder named etcd-v<version>-linux-<arch>",
            ));
        };
        if Machine::from_goarch(arch) != Some(self.machine) {
            return Err(Failure::new(
                ReasonCode::WrongArchitecture,
                format!(
                    "{} is the linux-{arch} release ({first}/); this machine needs linux-{}",
                    self.archive,
                    self.machine.goarch()
                ),
            ));
        }
        self.top = Some(Top {
            name: first.to_string(),
            version: version.to_string(),
            arch: arch.to_string(),
            has_etcdutl: false,
            entries: 0,
        });
        self.mkdir(first, shown)?;
        self.seen.insert(first.to_string(), Seen::ImplicitDir);
        Ok(())
    }

    /// Counts one more folder or file against `max_entries`.
    fn count(&mut self, shown: &str) -> Result<(), Failure> {
        self.created += 1;
        if self.created > self.max_entries {
            return Err(too_large(format!(
                "{} has more than {} entries (max_entries), reached at entry {shown}",
                self.archive, self.max_entries
            )));
        }
        Ok(())
    }

    fn mkdir(&mut self, key: &str, shown: &str) -> Result<(), Failure> {
        self.count(shown)?;
        let path = self.root.join(key);
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&path)
            .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o755)))
            .map_err(|e| Failure::io(&path, "cannot create", e))
    }

    fn duplicate(&self, shown: &str) -> Failure {
        unsafe_entry(self.archive, shown, "appears twice in the archive")
    }
}

impl FileSink {
    /// Appends `data`, keeping an etcd binary's first bytes for the ELF check.
    pub(super) fn write(&mut self, data: &[u8]) -> Result<(), Failure> {
        if let Some((_, header)) = &mut self.binary {
            let want = elf::HEADER_LEN.saturating_sub(header.len()).min(data.len());
            header.extend_from_slice(&data[..want]);
        }
        match &mut self.out {
            Out::Buffered(file) => file.write_all(data),
            Out::Direct(w) => w.write(data),
        }
        .map_err(|e| Failure::io(&self.path, "cannot write", e))
    }
}

/// Where a file's bytes go.
enum Out {
    Buffered(File),
    Direct(DirectWriter),
}
