//! Installing an extracted release: its binaries go into the install folder atomically.
//!
//! The staging folder lives inside the install folder (same filesystem), so each binary
//! is made durable (fsync) in staging and then renamed over the old one: at every instant
//! each path holds either the complete old binary or the complete new one. The install
//! folder is fsynced after the renames, so a power cut cannot undo them.

use crate::reason::Failure;
use crate::road::archive::{fsync_tree, Extracted};
use std::fs::{self, File};
use std::path::{Path, PathBuf};

/// The binaries a release may carry, in install order; `etcd` goes last so a reader that
/// sees the new `etcd` also sees the new tools.
pub const BINARIES: [&str; 3] = ["etcdctl", "etcdutl", "etcd"];

/// Moves the release's binaries from staging into `install_dir`. A binary the new release
/// lacks (`etcdutl` before 3.5) is removed, so no tool of another version stays beside it.
/// Returns the installed paths.
pub fn install_binaries(release: &Extracted, install_dir: &Path) -> Result<Vec<PathBuf>, Failure> {
    let from = release.bin_dir();
    fsync_tree(&from)?;
    let mut installed = Vec::new();
    for name in BINARIES {
        let src = from.join(name);
        let dest = install_dir.join(name);
        if src.exists() {
            fs::rename(&src, &dest).map_err(|e| Failure::io(&dest, "cannot install", e))?;
            installed.push(dest);
        } else if name != "etcd" && dest.exists() {
            fs::remove_file(&dest).map_err(|e| Failure::io(&dest, "cannot remove the old", e))?;
        }
    }
    File::open(install_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Failure::io(install_dir, "cannot sync", e))?;
    Ok(installed)
}

/// Creates the install folder (0755) if it is missing.
pub fn ensure_dir(dir: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| Failure::io(dir, "cannot create", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::road::archive::{extract, Policy};
    use std::io::{self, Write};

    /// A release tarball with small stand-in ELF binaries for this machine.
    fn release(version: &str, tools: &[&str]) -> Vec<u8> {
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2; // 64-bit
        elf[5] = 1; // little-endian
        elf[6] = 1;
        elf[16] = 2; // ET_EXEC
        elf[18] = 62; // EM_X86_64
        elf[20] = 1;
        let top = format!("etcd-v{version}-linux-amd64");
        let mut builder = tar::Builder::new(Vec::new());
        let mut dir = tar::Header::new_gnu();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_mode(0o755);
        dir.set_size(0);
        builder
            .append_data(&mut dir, format!("{top}/"), io::empty())
            .unwrap();
        for tool in tools {
            let mut body = elf.clone();
            body.extend_from_slice(format!("{tool} {version}").as_bytes());
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o755);
            h.set_size(body.len() as u64);
            builder
                .append_data(&mut h, format!("{top}/{tool}"), body.as_slice())
                .unwrap();
        }
        let tar = builder.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&tar).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn replaces_binaries_and_drops_a_tool_the_new_release_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let install = dir.path().join("opt/bin");
        ensure_dir(&install).unwrap();
        let new = release("3.5.1", &["etcd", "etcdctl", "etcdutl"]);
        let x = extract(new.as_slice(), "t", &install, &Policy::default()).unwrap();
        let got = install_binaries(&x, &install).unwrap();
        assert_eq!(got.len(), 3);
        assert!(fs::read(install.join("etcd"))
            .unwrap()
            .ends_with(b"etcd 3.5.1"));
        drop(x);

        let old = release("3.4.23", &["etcd", "etcdctl"]);
        let x = extract(old.as_slice(), "t", &install, &Policy::default()).unwrap();
        install_binaries(&x, &install).unwrap();
        drop(x);
        assert!(fs::read(install.join("etcd"))
            .unwrap()
            .ends_with(b"etcd 3.4.23"));
        assert!(fs::read(install.join("etcdctl"))
            .unwrap()
            .ends_with(b"etcdctl 3.4.23"));
        assert!(
            !install.join("etcdutl").exists(),
            "a 3.5 etcdutl beside 3.4 etcd"
        );
        let left: Vec<_> = fs::read_dir(&install)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let mut left = left;
        left.sort();
        assert_eq!(left, ["etcd", "etcdctl"], "staging folder left behind");
    }
}
