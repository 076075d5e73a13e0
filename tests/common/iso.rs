//! Test helper: builds ISO 9660 images with xorriso or genisoimage at run time (no binary
//! images are committed), and reads and patches their raw bytes to make corrupt ones.
//!
//! Include it with `#[path = "common/iso.rs"] mod iso;`.
#![allow(dead_code)]

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bytes in an ISO 9660 sector.
pub const SECTOR: usize = 2048;

/// The image builders installed by `vm-images/host-setup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `xorriso -as mkisofs` (libisofs), what most distributions ship today.
    Xorriso,
    /// `genisoimage` (cdrkit), the classic `mkisofs`.
    Genisoimage,
}

impl Tool {
    fn program(self) -> &'static str {
        match self {
            Tool::Xorriso => "xorriso",
            Tool::Genisoimage => "genisoimage",
        }
    }
}

/// Deterministic, incompressible-looking bytes (xorshift32), so every sector differs.
pub fn patterned(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// Writes `files` (relative path, content) under `work/tree` and builds `work/<name>.iso`
/// from it with `tool` and `args` (mkisofs-style options such as `-R -J -V LABEL`).
///
/// Fails the test, never skips it, when the tool is missing.
pub fn build_iso(
    tool: Tool,
    args: &[&str],
    files: &[(&str, &[u8])],
    work: &Path,
    name: &str,
) -> PathBuf {
    let tree = work.join(format!("{name}-tree"));
    write_tree(&tree, files);
    build_iso_from(tool, args, &tree, work, name)
}

/// Writes `files` (relative path, content) under `tree`.
pub fn write_tree(tree: &Path, files: &[(&str, &[u8])]) {
    for (path, content) in files {
        let path = tree.join(path);
        fs::create_dir_all(path.parent().expect("test paths have a parent")).expect("mkdir");
        fs::write(&path, content).expect("write tree file");
    }
    fs::create_dir_all(tree).expect("mkdir tree");
}

/// Builds `work/<name>.iso` from the folder `tree` (which may hold symlinks or files made
/// by `mkzftree`) with `tool` and `args`.
pub fn build_iso_from(tool: Tool, args: &[&str], tree: &Path, work: &Path, name: &str) -> PathBuf {
    let out = work.join(format!("{name}.iso"));
    let mut cmd = Command::new(tool.program());
    if tool == Tool::Xorriso {
        cmd.args(["-as", "mkisofs"]);
    }
    cmd.arg("-quiet").args(args).arg("-o").arg(&out).arg(tree);
    run(cmd, tool.program());
    out
}

/// Runs `cmd`, failing the test with its stderr when it fails or is not installed.
pub fn run(mut cmd: Command, program: &str) {
    let output = match cmd.output() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "{program} is not installed; the ISO tests need xorriso, genisoimage and mkzftree: run vm-images/host-setup"
        ),
        Err(e) => panic!("running {program}: {e}"),
    };
    assert!(
        output.status.success(),
        "{program} {:?} failed: {}",
        cmd.get_args().collect::<Vec<_>>(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Compresses every file of `tree` into `out` with `mkzftree` (zisofs, as genisoimage -z
/// and xorriso -as mkisofs -z expect).
pub fn mkzftree(tree: &Path, out: &Path) {
    let mut cmd = Command::new("mkzftree");
    cmd.arg(tree).arg(out);
    run(cmd, "mkzftree");
}

/// Little-endian u32 at `off`.
pub fn le32(img: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(img[off..off + 4].try_into().unwrap())
}

/// Writes a both-endian u32 (ECMA-119 §7.3.3) at `off`.
pub fn put_both32(img: &mut [u8], off: usize, v: u32) {
    img[off..off + 4].copy_from_slice(&v.to_le_bytes());
    img[off + 4..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// Writes a both-endian u16 (ECMA-119 §7.2.3) at `off`.
pub fn put_both16(img: &mut [u8], off: usize, v: u16) {
    img[off..off + 2].copy_from_slice(&v.to_le_bytes());
    img[off + 2..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Byte offset of the root directory record inside the primary volume descriptor.
pub const PVD_ROOT_RECORD: usize = 16 * SECTOR + 156;

/// One directory record as found in the raw image.
#[derive(Debug, Clone)]
pub struct RawRecord {
    /// Byte offset of the record in the image.
    pub off: usize,
    /// The record's length byte.
    pub len: usize,
    /// The ISO 9660 identifier, e.g. `ETCD` or `ETCD_LIN.GZ;1`.
    pub id: Vec<u8>,
    /// Extent location.
    pub lba: u32,
    /// Data length.
    pub size: u32,
}

impl RawRecord {
    /// Byte range of the system use area.
    pub fn system_use(&self) -> std::ops::Range<usize> {
        let start = 33 + self.id.len() + usize::from(self.id.len().is_multiple_of(2));
        self.off + start..self.off + self.len
    }
}

fn raw_record(img: &[u8], off: usize) -> RawRecord {
    let len = usize::from(img[off]);
    let id_len = usize::from(img[off + 32]);
    RawRecord {
        off,
        len,
        id: img[off + 33..off + 33 + id_len].to_vec(),
        lba: le32(img, off + 2),
        size: le32(img, off + 10),
    }
}

/// The root directory record of the primary volume.
pub fn pvd_root(img: &[u8]) -> RawRecord {
    raw_record(img, PVD_ROOT_RECORD)
}

/// The root directory record of the Joliet volume (a supplementary descriptor with a
/// `%/` escape sequence).
pub fn joliet_root(img: &[u8]) -> RawRecord {
    let mut sector = 17;
    loop {
        let vd = &img[sector * SECTOR..(sector + 1) * SECTOR];
        assert_eq!(
            &vd[1..6],
            b"CD001",
            "no Joliet descriptor before sector {sector}"
        );
        if vd[0] == 2 && &vd[88..90] == b"%/" {
            return raw_record(img, sector * SECTOR + 156);
        }
        sector += 1;
    }
}

/// A name as Joliet records it (UCS-2 big-endian), for [`child_raw`].
pub fn ucs2(name: &str) -> Vec<u8> {
    name.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

/// All records of the directory described by `dir` ("." and ".." included).
pub fn records(img: &[u8], dir: &RawRecord) -> Vec<RawRecord> {
    let start = dir.lba as usize * SECTOR;
    let mut out = Vec::new();
    for sector in (start..start + dir.size as usize).step_by(SECTOR) {
        let mut off = sector;
        while off < sector + SECTOR && img[off] != 0 {
            let rec = raw_record(img, off);
            off += rec.len;
            out.push(rec);
        }
    }
    out
}

/// The record in `dir` whose ISO 9660 identifier starts with `prefix`.
pub fn child(img: &[u8], dir: &RawRecord, prefix: &str) -> RawRecord {
    child_raw(img, dir, prefix.as_bytes())
}

/// The record in `dir` whose raw identifier starts with `prefix` (e.g. [`ucs2`] bytes).
pub fn child_raw(img: &[u8], dir: &RawRecord, prefix: &[u8]) -> RawRecord {
    records(img, dir)
        .into_iter()
        .find(|r| r.id.starts_with(prefix))
        .unwrap_or_else(|| {
            panic!(
                "no record starting with {:?} in directory at {}",
                String::from_utf8_lossy(prefix),
                dir.lba
            )
        })
}

/// Offset (within the image) of the first SUSP entry with signature `sig` in `rec`'s
/// system use area.
pub fn susp_entry(img: &[u8], rec: &RawRecord, sig: &[u8; 2]) -> Option<(usize, usize)> {
    let area = rec.system_use();
    let mut off = area.start;
    while off + 4 <= area.end {
        let len = usize::from(img[off + 2]);
        if len < 4 {
            return None;
        }
        if &img[off..off + 2] == sig {
            return Some((off, len));
        }
        off += len;
    }
    None
}

/// A SUSP `CE` entry (SUSP §5.1) pointing at `block`/`offset` for `len` bytes.
pub fn ce_entry(block: u32, offset: u32, len: u32) -> [u8; 28] {
    let mut ce = [0u8; 28];
    ce[..4].copy_from_slice(&[b'C', b'E', 28, 1]);
    put_both32(&mut ce, 4, block);
    put_both32(&mut ce, 12, offset);
    put_both32(&mut ce, 20, len);
    ce
}
