//! A small userspace ISO 9660 reader: finds one file on a disc image or CD-ROM block device
//! and streams its bytes, without mounting and without trusting the disc.
//!
//! It reads the volume descriptor set (ECMA-119 §8), walks directories (§9.1) and resolves
//! names the way Linux presents them after a mount: Rock Ridge `NM` names (SUSP/RRIP, IEEE
//! P1281/P1282) first, then the Joliet tree (UCS-2 names), then plain ISO 9660 identifiers.
//! It reads through a one-sector buffer and never loads the image or a whole directory.
//!
//! # Name matching
//!
//! [`IsoImage::find`] tries, in order, stopping at the first hit:
//! 1. the primary tree with Rock Ridge names (where the disc has SUSP), else ISO 9660
//!    identifiers, compared **exactly** (xorriso and genisoimage store RR names byte for byte);
//! 2. the Joliet tree, compared exactly (its `;1` version suffix removed);
//! 3. both trees again, ignoring ASCII case. This is how a plain ISO 9660 disc (upper-case
//!    d-characters, `;1` versions and a trailing `.` removed) is read, and how a disc whose
//!    names differ only in case from the expected path is still accepted.
//!
//! Of Rock Ridge, only `NM` (names) and `CL`/`RE` (directories that genisoimage relocates
//! when a tree is deeper than eight levels) are read, plus SUSP's `SP`, `CE` and `ST`; the
//! other entries (modes, owners, times, symlinks) are ignored.
//! Multi-extent files (flag bit 7) are read across all their extents; interleaved files
//! (file unit size ≠ 0) and logical blocks other than 2048 bytes are rejected as
//! [`IsoError::Unsupported`]. Both-endian fields are read from their little-endian half, as
//! Linux does.
//!
//! # Hostile input
//!
//! Every failure is an [`IsoError`], never a panic or a hang: all offsets are checked
//! against the image size (from `seek(End)`, which also works on block devices) before a
//! read; volume descriptors, path depth, directory bytes read per call, continuation areas
//! per record and name lengths are bounded (see the `MAX_*` constants). A directory that
//! points at its ancestor cannot loop, because a lookup only descends once per path component.
//!
//! # Why not an existing crate (evaluated 2026-11)
//!
//! - **hadris-iso** 3.0.0-rc.2: the most complete (RR, Joliet, El Torito, writing) and
//!   careful (bounded CE chains), but a release candidate of a 9 000-line crate plus six
//!   sibling crates and a proc-macro, MSRV 1.88 (ours is 1.80), and mostly writer code we
//!   would ship unused. Its last stable, 0.2.1, has no Rock Ridge.
//! - **iso9660_simple** 0.2.7: small, but panics on hostile input (unchecked slicing of
//!   SUSP entries, `expect` on UCS-2 names, `unwrap` on UTF-8), no `CE` continuation, reads
//!   through its own `Read` trait rather than `std::io::Read + Seek`.
//! - **cdfs** 0.2.3: RR and Joliet over `Read + Seek`, but follows `CE` chains without a
//!   bound (a self-pointing `CE` hangs), asserts on short reads by default, slices by an
//!   on-disc length, and pulls `fuser`, `clap`, `simple_logger` and `nom` as hard dependencies.
//! - **iso9660** 0.1.1: the unmaintained predecessor of cdfs; no Rock Ridge, no Joliet.
//!
//! The subset needed here (find one path, stream one file) is a few hundred lines, so it is
//! written here with no new dependency.

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom};

/// Size of an ISO 9660 logical sector and the only logical block size accepted (ECMA-119 §6.1.2).
pub const SECTOR: u64 = 2048;
const SECTOR_BYTES: usize = 2048;

/// First sector of the volume descriptor set; sectors 0-15 are the system area (ECMA-119 §6.2.1).
const VDS_START: u64 = 16;
/// Volume descriptors read before the set must have ended with its terminator. Real discs
/// have three to six (primary, boot record, Joliet, ISO 9660:1999, terminator).
const MAX_DESCRIPTORS: u64 = 64;
/// Directory and continuation-area bytes one `find` or `list_root` call may read. A
/// Kubernetes ISO needs a few KiB; 16 MiB is about half a million records.
const MAX_DIR_BYTES: u64 = 16 << 20;
/// Path components `find` accepts.
const MAX_DEPTH: usize = 32;
/// SUSP continuation areas followed for one record (Linux isofs follows 31 at most).
const MAX_CONTINUATIONS: usize = 32;
/// Bytes of one SUSP continuation area.
const MAX_CE_BYTES: u32 = 64 << 10;
/// Bytes of one Rock Ridge name assembled from `NM` entries (Linux names are ≤ 255).
const MAX_NAME_BYTES: usize = 1024;
/// Extents of one multi-extent file (xorriso splits at 4 GiB, so this is ~256 GiB).
const MAX_EXTENTS: usize = 64;

/// File flags of a directory record (ECMA-119 §9.1.6).
const FLAG_DIRECTORY: u8 = 1 << 1;
const FLAG_ASSOCIATED: u8 = 1 << 2;
const FLAG_MULTI_EXTENT: u8 = 1 << 7;

/// Rock Ridge `NM` flags (RRIP §4.1.4): the entry names "." or "..", not the file.
const NM_CURRENT: u8 = 1 << 1;
const NM_PARENT: u8 = 1 << 2;

/// Why an image could not be read. `Display` names what is wrong and where.
#[derive(Debug)]
pub enum IsoError {
    /// Reading the image or device failed; the message names the sector.
    Io(io::Error),
    /// No ISO 9660 volume descriptor (`CD001`) at sector 16: not an ISO 9660 image.
    NotIso9660,
    /// The image contradicts ECMA-119/SUSP/RRIP, is truncated, or exceeds a safety bound;
    /// the message names the sector and offset.
    Corrupt(String),
    /// Valid ISO 9660 that this reader deliberately does not handle (interleaved files,
    /// logical blocks other than 2048 bytes, over-long lookup paths).
    Unsupported(String),
}

impl fmt::Display for IsoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IsoError::Io(e) => write!(f, "I/O error: {e}"),
            IsoError::NotIso9660 => {
                f.write_str("not an ISO 9660 image: no CD001 volume descriptor at sector 16")
            }
            IsoError::Corrupt(m) => write!(f, "corrupt ISO 9660 image: {m}"),
            IsoError::Unsupported(m) => write!(f, "unsupported ISO 9660 image: {m}"),
        }
    }
}

impl std::error::Error for IsoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IsoError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for IsoError {
    fn from(e: io::Error) -> Self {
        IsoError::Io(e)
    }
}

fn corrupt(msg: impl Into<String>) -> IsoError {
    IsoError::Corrupt(msg.into())
}

/// Tells whether `r` holds an ISO 9660 volume: `CD001` at byte 1 of sector 16
/// (ECMA-119 §8.1). A source too short to hold sector 16 is not one. Moves the position of `r`.
pub fn is_iso9660(r: &mut (impl Read + Seek)) -> io::Result<bool> {
    let mut head = [0u8; 6];
    r.seek(SeekFrom::Start(VDS_START * SECTOR))?;
    match r.read_exact(&mut head) {
        Ok(()) => Ok(&head[1..6] == b"CD001"),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Which name a file was found under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// Rock Ridge `NM` names in the primary tree.
    RockRidge,
    /// The Joliet tree's UCS-2 names.
    Joliet,
    /// Plain ISO 9660 identifiers (version and trailing dot removed).
    Iso9660,
}

/// A contiguous run of a file's bytes on the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extent {
    /// First sector of the data (the extent location plus its extended attribute record).
    sector: u64,
    /// Bytes in this extent.
    len: u64,
}

impl Extent {
    /// Byte range `[start, end)` of the extent, or `None` if it cannot be represented.
    fn byte_range(&self) -> Option<(u64, u64)> {
        let start = self.sector.checked_mul(SECTOR)?;
        Some((start, start.checked_add(self.len)?))
    }
}

/// A regular file found on the image by [`IsoImage::find`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsoFile {
    /// The path as recorded on the disc, components joined by `/`.
    pub path: String,
    /// Size in bytes (the sum over all extents).
    pub size: u64,
    /// Which name space matched.
    pub naming: Naming,
    extents: Vec<Extent>,
}

impl IsoFile {
    /// The sector the file's data starts at, for messages.
    pub fn first_sector(&self) -> Option<u64> {
        self.extents.first().map(|e| e.sector)
    }
}

/// A directory's data: where it starts and how many bytes of records it holds.
#[derive(Debug, Clone, Copy)]
struct Dir {
    sector: u64,
    len: u64,
}

/// One volume descriptor's facts we use.
#[derive(Debug)]
struct Volume {
    label: String,
    root: Dir,
    /// Declared volume size in sectors (ECMA-119 §8.4.8), for truncation messages.
    blocks: u64,
}

/// Which directory hierarchy a walk uses, and so how its names are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tree {
    /// The primary volume's tree; with `Some(skip)` the disc uses SUSP and records carry
    /// Rock Ridge names after `skip` bytes of their system use area.
    Primary(Option<u8>),
    /// The Joliet supplementary volume's tree.
    Joliet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Match {
    Exact,
    IgnoreAsciiCase,
}

/// A directory entry after name resolution (all records of a multi-extent file merged).
#[derive(Debug)]
struct Entry {
    name: String,
    naming: Naming,
    /// The raw identifier, to pair up the records of a multi-extent file.
    id: Vec<u8>,
    is_dir: bool,
    interleaved: bool,
    extents: Vec<Extent>,
    size: u64,
    /// Byte offset of the (first) record, for messages.
    at: u64,
    /// A directory Rock Ridge moved here from a deeper place (`RE`); its real place holds
    /// a `CL` link to it, so it is not listed here (RRIP §4.1.5.3).
    relocated: bool,
}

/// What a record's Rock Ridge entries say.
#[derive(Debug, Default)]
struct RockRidge {
    /// The concatenated contents of the `NM` entries (RRIP §4.1.4; the CONTINUE flag only
    /// says more follows), `None` without any.
    name: Option<String>,
    /// `CL`: the record stands for the directory at this sector (RRIP §4.1.5.1).
    child_link: Option<u32>,
    /// `RE`: the record is a relocated directory (RRIP §4.1.5.3).
    relocated: bool,
}

/// The fixed part of a directory record (ECMA-119 §9.1), borrowed from a sector buffer.
struct Record<'a> {
    xar_len: u8,
    extent: u32,
    data_len: u32,
    flags: u8,
    unit_size: u8,
    gap: u8,
    id: &'a [u8],
    system_use: &'a [u8],
}

/// Parses one directory record that occupies exactly `rec` (its length byte included).
fn parse_record(rec: &[u8]) -> Result<Record<'_>, String> {
    let head: &[u8; 33] = rec
        .get(..33)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| format!("record of {} bytes is shorter than 34", rec.len()))?;
    let id_len = usize::from(head[32]);
    if id_len == 0 {
        return Err("record has an empty file identifier".into());
    }
    let id_end = 33 + id_len;
    let id = rec.get(33..id_end).ok_or_else(|| {
        format!(
            "identifier of {id_len} bytes overruns the {}-byte record",
            rec.len()
        )
    })?;
    // A padding byte follows an identifier of even length (§9.1.12); the rest is the
    // system use area (§9.1.13).
    let su_start = id_end + usize::from(id_len % 2 == 0);
    let system_use = rec.get(su_start..).unwrap_or(&[]);
    Ok(Record {
        xar_len: head[1],
        extent: u32::from_le_bytes([head[2], head[3], head[4], head[5]]),
        data_len: u32::from_le_bytes([head[10], head[11], head[12], head[13]]),
        flags: head[25],
        unit_size: head[26],
        gap: head[27],
        id,
        system_use,
    })
}

impl Record<'_> {
    fn extent(&self) -> Extent {
        Extent {
            sector: u64::from(self.extent) + u64::from(self.xar_len),
            len: u64::from(self.data_len),
        }
    }
}

/// Removes an ISO 9660 version suffix (`;1`, ECMA-119 §7.5.1).
fn strip_version(name: &str) -> &str {
    match name.rfind(';') {
        Some(i) if name[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &name[..i],
        _ => name,
    }
}

/// A plain ISO 9660 identifier as Linux shows it: version and a trailing dot removed.
fn iso_name(id: &[u8]) -> String {
    let raw = String::from_utf8_lossy(id);
    let name = strip_version(&raw);
    name.strip_suffix('.').unwrap_or(name).to_owned()
}

/// Decodes UCS-2 big-endian (Joliet; surrogate pairs accepted, an odd last byte dropped).
fn ucs2_be(bytes: &[u8]) -> String {
    let units = bytes
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]));
    char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// Trims the space and NUL padding of a descriptor string field.
fn trim_field(s: &str) -> String {
    s.trim_end_matches([' ', '\0']).trim_start().to_owned()
}

/// An image file or block device, with every read checked against its size.
struct Device<R> {
    inner: R,
    size: u64,
}

impl<R: Read + Seek> Device<R> {
    fn new(mut inner: R) -> Result<Self, IsoError> {
        let size = inner.seek(SeekFrom::End(0)).map_err(|e| {
            IsoError::Io(io::Error::new(
                e.kind(),
                format!("finding the image size: {e}"),
            ))
        })?;
        Ok(Device { inner, size })
    }

    /// Fills `buf` from byte `at`; `what` names the structure for error messages.
    fn read_at(&mut self, at: u64, buf: &mut [u8], what: &str) -> Result<(), IsoError> {
        let end = at.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.size) {
            return Err(corrupt(format!(
                "{what} at sector {} (byte {at}, {} bytes) lies past the end of the image ({} bytes)",
                at / SECTOR,
                buf.len(),
                self.size
            )));
        }
        let res = self
            .inner
            .seek(SeekFrom::Start(at))
            .and_then(|_| self.inner.read_exact(buf));
        res.map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                corrupt(format!(
                    "{what} at sector {}: the image ended early (it shrank while being read?)",
                    at / SECTOR
                ))
            } else {
                IsoError::Io(io::Error::new(
                    e.kind(),
                    format!("reading {what} at sector {}: {e}", at / SECTOR),
                ))
            }
        })
    }

    fn read_sector(&mut self, sector: u64, what: &str) -> Result<[u8; SECTOR_BYTES], IsoError> {
        let at = sector
            .checked_mul(SECTOR)
            .ok_or_else(|| corrupt(format!("{what} at sector {sector} is out of range")))?;
        let mut buf = [0u8; SECTOR_BYTES];
        self.read_at(at, &mut buf, what)?;
        Ok(buf)
    }
}

/// An ISO 9660 image opened for lookups: the volume descriptor set has been read.
pub struct IsoImage<R> {
    dev: Device<R>,
    primary: Volume,
    joliet: Option<Volume>,
    /// SUSP skip length when the primary tree uses SUSP (SUSP §5.3), else `None`.
    susp_skip: Option<u8>,
    /// Directory bytes the current public call may still read.
    budget: u64,
}

impl<R: Read + Seek> IsoImage<R> {
    /// Reads the volume descriptor set (primary, Joliet supplementary, terminator) and
    /// detects SUSP/Rock Ridge from the root directory's "." record.
    pub fn open(r: R) -> Result<Self, IsoError> {
        let mut dev = Device::new(r)?;
        if dev.size < (VDS_START + 1) * SECTOR {
            return Err(IsoError::NotIso9660);
        }
        let mut primary = None;
        let mut joliet = None;
        let mut terminated = false;
        for sector in VDS_START..VDS_START + MAX_DESCRIPTORS {
            if sector.saturating_add(1).saturating_mul(SECTOR) > dev.size {
                return Err(corrupt(format!(
                    "the volume descriptor set reaches the end of the image at sector {sector} without a terminator"
                )));
            }
            let vd = dev.read_sector(sector, "volume descriptor")?;
            // ECMA-119 §8.1: type, "CD001", version.
            if &vd[1..6] != b"CD001" {
                if sector == VDS_START {
                    return Err(IsoError::NotIso9660);
                }
                return Err(corrupt(format!(
                    "sector {sector} in the volume descriptor set lacks the CD001 identifier (no terminator before it)"
                )));
            }
            match vd[0] {
                // §8.4 primary volume descriptor; the first one counts.
                1 if primary.is_none() => primary = Some(parse_volume(&vd, sector, false)?),
                // §8.5 supplementary volume descriptor, version 1, with a Joliet escape
                // sequence (UCS-2 level 1, 2 or 3) in the escape sequences field.
                2 if vd[6] == 1 && joliet.is_none() && is_joliet_escape(&vd[88..91]) => {
                    joliet = Some(parse_volume(&vd, sector, true)?)
                }
                // §8.3 volume descriptor set terminator.
                255 => {
                    terminated = true;
                    break;
                }
                // Boot records, enhanced and other supplementary descriptors, partitions.
                _ => {}
            }
        }
        if !terminated {
            return Err(corrupt(format!(
                "no volume descriptor set terminator in sectors {VDS_START}-{}",
                VDS_START + MAX_DESCRIPTORS - 1
            )));
        }
        let primary = primary.ok_or_else(|| corrupt("no primary volume descriptor"))?;
        let mut image = IsoImage {
            dev,
            primary,
            joliet,
            susp_skip: None,
            budget: MAX_DIR_BYTES,
        };
        image.susp_skip = image.detect_susp()?;
        Ok(image)
    }

    /// The volume label: the primary volume identifier, trimmed; the Joliet one if empty.
    pub fn volume_label(&self) -> &str {
        match &self.joliet {
            Some(j) if self.primary.label.is_empty() => &j.label,
            _ => &self.primary.label,
        }
    }

    /// Whether the primary tree carries Rock Ridge (SUSP `SP` entry in the root's "." record).
    pub fn has_rock_ridge(&self) -> bool {
        self.susp_skip.is_some()
    }

    /// Whether the image has a Joliet tree.
    pub fn has_joliet(&self) -> bool {
        self.joliet.is_some()
    }

    /// Size in bytes of the image or device being read.
    pub fn image_size(&self) -> u64 {
        self.dev.size
    }

    /// Size in bytes the primary volume descriptor declares (may exceed `image_size` when
    /// the image is truncated).
    pub fn volume_size(&self) -> u64 {
        self.primary.blocks.saturating_mul(SECTOR)
    }

    /// Finds the regular file at `path` (components separated by `/`, e.g.
    /// `etcd/etcd-linux-amd64.tar.gz`), see the module doc for the name matching order.
    /// `Ok(None)` when no tree holds it; an error when a directory on the way is corrupt or
    /// the file's data lies outside the image.
    pub fn find(&mut self, path: &str) -> Result<Option<IsoFile>, IsoError> {
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        if components.len() > MAX_DEPTH {
            return Err(IsoError::Unsupported(format!(
                "path {path:?} has more than {MAX_DEPTH} components"
            )));
        }
        if components.is_empty() {
            return Ok(None);
        }
        self.budget = MAX_DIR_BYTES;
        let mut trees = vec![Tree::Primary(self.susp_skip)];
        if self.joliet.is_some() {
            trees.push(Tree::Joliet);
        }
        for mode in [Match::Exact, Match::IgnoreAsciiCase] {
            for &tree in &trees {
                if let Some(file) = self.walk(tree, &components, mode)? {
                    self.check_extents(&file)?;
                    return Ok(Some(file));
                }
            }
        }
        Ok(None)
    }

    /// Streams exactly the bytes of `file`, across all its extents.
    pub fn open_file(&mut self, file: &IsoFile) -> Result<FileReader<'_, R>, IsoError> {
        self.check_extents(file)?;
        Ok(FileReader {
            dev: &mut self.dev,
            extents: file.extents.clone(),
            index: 0,
            done: 0,
            positioned: false,
        })
    }

    /// The names at the top level (Rock Ridge, else Joliet, else ISO 9660 names), in disc
    /// order, for error messages such as "the disc holds: EFI, k8s".
    pub fn list_root(&mut self) -> Result<Vec<String>, IsoError> {
        self.budget = MAX_DIR_BYTES;
        let tree = match (self.susp_skip, &self.joliet) {
            (None, Some(_)) => Tree::Joliet,
            (skip, _) => Tree::Primary(skip),
        };
        let mut names = Vec::new();
        self.scan_dir(self.root(tree), tree, |entry| {
            names.push(entry.name);
            None::<()>
        })?;
        Ok(names)
    }

    fn root(&self, tree: Tree) -> Dir {
        match (tree, &self.joliet) {
            (Tree::Joliet, Some(j)) => j.root,
            _ => self.primary.root,
        }
    }

    /// SUSP is in use when the first record of the root directory (".") starts its system
    /// use area with an `SP` entry: "SP", length 7, version 1, check bytes BE EF, skip
    /// length (SUSP §5.3).
    fn detect_susp(&mut self) -> Result<Option<u8>, IsoError> {
        let root = self.primary.root;
        let buf = self.dev.read_sector(root.sector, "root directory")?;
        let len = usize::from(buf[0]);
        let rec = buf
            .get(..len)
            .filter(|_| len > 0)
            .ok_or_else(|| corrupt(format!("root directory at sector {} is empty", root.sector)))?;
        let rec = parse_record(rec)
            .map_err(|m| corrupt(format!("root directory at sector {}: {m}", root.sector)))?;
        if rec.id != [0] {
            return Err(corrupt(format!(
                "root directory at sector {} does not start with its \".\" record",
                root.sector
            )));
        }
        Ok(match rec.system_use {
            [b'S', b'P', 7, 1, 0xBE, 0xEF, skip, ..] => Some(*skip),
            _ => None,
        })
    }

    /// Follows `components` down `tree`; the last one must be a regular file.
    fn walk(
        &mut self,
        tree: Tree,
        components: &[&str],
        mode: Match,
    ) -> Result<Option<IsoFile>, IsoError> {
        let mut dir = self.root(tree);
        let mut path = String::new();
        for (i, want) in components.iter().enumerate() {
            let last = i + 1 == components.len();
            let found = self.scan_dir(dir, tree, |entry| {
                let hit = match mode {
                    Match::Exact => entry.name == *want,
                    Match::IgnoreAsciiCase => entry.name.eq_ignore_ascii_case(want),
                };
                (hit && entry.is_dir != last).then_some(entry)
            })?;
            let Some(entry) = found else {
                return Ok(None);
            };
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(&entry.name);
            if entry.interleaved {
                return Err(IsoError::Unsupported(format!(
                    "{path} (record at sector {}, offset {}) is recorded in interleaved mode",
                    entry.at / SECTOR,
                    entry.at % SECTOR
                )));
            }
            if last {
                return Ok(Some(IsoFile {
                    path,
                    size: entry.size,
                    naming: entry.naming,
                    extents: entry.extents,
                }));
            }
            dir = match entry.extents.as_slice() {
                [extent] => Dir {
                    sector: extent.sector,
                    len: extent.len,
                },
                _ => {
                    return Err(corrupt(format!(
                        "directory {path} (record at sector {}, offset {}) has {} extents",
                        entry.at / SECTOR,
                        entry.at % SECTOR,
                        entry.extents.len()
                    )))
                }
            };
        }
        Ok(None)
    }

    /// Checks that every extent of `file` lies inside the image.
    fn check_extents(&self, file: &IsoFile) -> Result<(), IsoError> {
        for extent in file.extents.iter().filter(|e| e.len > 0) {
            let inside = extent
                .byte_range()
                .is_some_and(|(_, end)| end <= self.dev.size);
            if !inside {
                let declared = self.volume_size();
                let hint = if declared > self.dev.size {
                    format!("; the volume declares {declared} bytes, so the image is truncated")
                } else {
                    String::new()
                };
                return Err(corrupt(format!(
                    "{} ({} bytes from sector {}) extends past the end of the image ({} bytes){hint}",
                    file.path, extent.len, extent.sector, self.dev.size
                )));
            }
        }
        Ok(())
    }

    /// Reads the records of `dir` one sector at a time and hands each entry (except "."
    /// and "..", and associated files) to `visit` until it returns `Some`.
    fn scan_dir<T>(
        &mut self,
        dir: Dir,
        tree: Tree,
        mut visit: impl FnMut(Entry) -> Option<T>,
    ) -> Result<Option<T>, IsoError> {
        let sectors = dir.len.div_ceil(SECTOR);
        self.spend(sectors.saturating_mul(SECTOR), dir.sector)?;
        let mut pending: Option<Entry> = None;
        for i in 0..sectors {
            let sector = dir
                .sector
                .checked_add(i)
                .ok_or_else(|| corrupt(format!("directory at sector {} overflows", dir.sector)))?;
            let buf = self.dev.read_sector(sector, "directory")?;
            // Bytes of this sector that belong to the directory.
            let used = dir.len.saturating_sub(i * SECTOR).min(SECTOR) as usize;
            let mut off = 0;
            while off < used {
                let len = usize::from(buf.get(off).copied().unwrap_or(0));
                // A zero length byte pads the rest of the sector: records never cross a
                // sector boundary (ECMA-119 §6.8.1.1).
                if len == 0 {
                    break;
                }
                let at = sector.saturating_mul(SECTOR).saturating_add(off as u64);
                let rec_off = off;
                let where_ =
                    move || format!("directory record at sector {sector}, offset {rec_off}");
                let rec = buf
                    .get(off..off + len)
                    .filter(|_| off + len <= used)
                    .ok_or_else(|| {
                        corrupt(format!(
                            "{}: length {len} runs past the end of the sector or directory",
                            where_()
                        ))
                    })?;
                let rec = parse_record(rec).map_err(|m| corrupt(format!("{}: {m}", where_())))?;
                off += len;
                // "." and ".." (§6.8.2.2), and associated files, which share the name of
                // the file they belong to.
                if rec.id == [0] || rec.id == [1] || rec.flags & FLAG_ASSOCIATED != 0 {
                    continue;
                }
                let entry = match pending.take() {
                    Some(mut entry) => {
                        // Later extents of a multi-extent file (§6.5.1): same identifier.
                        if entry.id != rec.id {
                            return Err(corrupt(format!(
                                "{}: multi-extent file {} is cut short by another record",
                                where_(),
                                entry.name
                            )));
                        }
                        if entry.extents.len() >= MAX_EXTENTS {
                            return Err(corrupt(format!(
                                "{}: {} has more than {MAX_EXTENTS} extents",
                                where_(),
                                entry.name
                            )));
                        }
                        entry.extents.push(rec.extent());
                        entry.size = entry
                            .size
                            .checked_add(u64::from(rec.data_len))
                            .ok_or_else(|| corrupt(format!("{}: size overflows", where_())))?;
                        entry.interleaved |= rec.unit_size != 0 || rec.gap != 0;
                        entry
                    }
                    None => self.entry(&rec, tree, at)?,
                };
                if rec.flags & FLAG_MULTI_EXTENT != 0 {
                    pending = Some(entry);
                    continue;
                }
                if entry.relocated {
                    continue;
                }
                if let Some(found) = visit(entry) {
                    return Ok(Some(found));
                }
            }
        }
        match pending {
            Some(entry) => Err(corrupt(format!(
                "directory at sector {}: multi-extent file {} has no final extent",
                dir.sector, entry.name
            ))),
            None => Ok(None),
        }
    }

    /// Resolves a record's name for `tree` and builds its entry.
    fn entry(&mut self, rec: &Record<'_>, tree: Tree, at: u64) -> Result<Entry, IsoError> {
        let rr = match tree {
            Tree::Primary(Some(skip)) => self.rock_ridge(rec.system_use, skip, at)?,
            _ => RockRidge::default(),
        };
        let (name, naming) = match (tree, rr.name) {
            (Tree::Joliet, _) => (strip_version(&ucs2_be(rec.id)).to_owned(), Naming::Joliet),
            (_, Some(name)) => (name, Naming::RockRidge),
            (_, None) => (iso_name(rec.id), Naming::Iso9660),
        };
        let mut entry = Entry {
            name,
            naming,
            id: rec.id.to_vec(),
            is_dir: rec.flags & FLAG_DIRECTORY != 0,
            interleaved: rec.unit_size != 0 || rec.gap != 0,
            extents: vec![rec.extent()],
            size: u64::from(rec.data_len),
            at,
            relocated: rr.relocated,
        };
        if let Some(sector) = rr.child_link {
            // A placeholder for a directory moved elsewhere (RRIP §4.1.5.1): it stands for
            // the directory whose "." record starts at `sector`.
            let len = self.dot_record_len(u64::from(sector))?;
            entry.is_dir = true;
            entry.extents = vec![Extent {
                sector: u64::from(sector),
                len,
            }];
            entry.size = len;
        }
        Ok(entry)
    }

    /// The data length recorded in the "." record that starts the directory at `sector`.
    fn dot_record_len(&mut self, sector: u64) -> Result<u64, IsoError> {
        self.spend(SECTOR, sector)?;
        let buf = self.dev.read_sector(sector, "relocated directory")?;
        let rec = buf
            .get(..usize::from(buf[0]))
            .ok_or_else(|| corrupt(format!("relocated directory at sector {sector} is empty")))
            .and_then(|rec| {
                parse_record(rec)
                    .map_err(|m| corrupt(format!("relocated directory at sector {sector}: {m}")))
            })?;
        if rec.id != [0] {
            return Err(corrupt(format!(
                "Rock Ridge child link to sector {sector} does not lead to a directory"
            )));
        }
        Ok(u64::from(rec.data_len))
    }

    /// The Rock Ridge facts of a record, from its system use area after `skip` bytes and
    /// its continuation areas (`CE`, SUSP §5.1), up to `ST` (SUSP §5.4).
    fn rock_ridge(&mut self, system_use: &[u8], skip: u8, at: u64) -> Result<RockRidge, IsoError> {
        let where_ = || format!("record at sector {}, offset {}", at / SECTOR, at % SECTOR);
        let mut area: Vec<u8> = system_use.get(usize::from(skip)..).unwrap_or(&[]).to_vec();
        let mut name: Option<Vec<u8>> = None;
        let mut rr = RockRidge::default();
        let mut continuations = 0;
        loop {
            let mut next = None;
            let mut rest = area.as_slice();
            // SUSP §4.1: signature (2), length (1), version (1), data.
            while let [s1, s2, len, _version, ..] = *rest {
                let len = usize::from(len);
                if len < 4 {
                    // Padding or garbage too short to be an entry: the area ends here.
                    break;
                }
                let entry = rest.get(..len).ok_or_else(|| {
                    corrupt(format!(
                        "{}: SUSP entry {}{} of {len} bytes overruns its system use area",
                        where_(),
                        char::from(s1),
                        char::from(s2)
                    ))
                })?;
                rest = &rest[len..];
                match (&[s1, s2], entry) {
                    (b"NM", [_, _, _, _, flags, content @ ..])
                        if flags & (NM_CURRENT | NM_PARENT) == 0 =>
                    {
                        let name = name.get_or_insert_with(Vec::new);
                        name.extend_from_slice(content);
                        if name.len() > MAX_NAME_BYTES {
                            return Err(corrupt(format!(
                                "{}: Rock Ridge name longer than {MAX_NAME_BYTES} bytes",
                                where_()
                            )));
                        }
                    }
                    (b"CE", [_, _, _, _, b @ ..]) if b.len() >= 24 => {
                        let le =
                            |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                        next = Some((le(0), le(8), le(16)));
                    }
                    (b"CL", [_, _, _, _, a, b, c, d, ..]) => {
                        rr.child_link = Some(u32::from_le_bytes([*a, *b, *c, *d]));
                    }
                    (b"RE", _) => rr.relocated = true,
                    (b"ST", _) => break,
                    _ => {}
                }
            }
            let Some((block, offset, len)) = next else {
                break;
            };
            continuations += 1;
            if continuations > MAX_CONTINUATIONS {
                return Err(corrupt(format!(
                    "{}: more than {MAX_CONTINUATIONS} SUSP continuation areas (a CE loop?)",
                    where_()
                )));
            }
            if len > MAX_CE_BYTES {
                return Err(corrupt(format!(
                    "{}: SUSP continuation area of {len} bytes at sector {block} exceeds {MAX_CE_BYTES}",
                    where_()
                )));
            }
            self.spend(u64::from(len), u64::from(block))?;
            area = vec![0; len as usize];
            let pos = u64::from(block) * SECTOR + u64::from(offset);
            self.dev.read_at(pos, &mut area, "SUSP continuation area")?;
        }
        rr.name = name.map(|n| String::from_utf8_lossy(&n).into_owned());
        Ok(rr)
    }

    /// Charges `bytes` of directory data against this call's budget.
    fn spend(&mut self, bytes: u64, sector: u64) -> Result<(), IsoError> {
        self.budget = self.budget.checked_sub(bytes).ok_or_else(|| {
            corrupt(format!(
                "reading the directory data at sector {sector} would exceed {} MiB of directory data for one lookup (a directory loop or an oversized directory)",
                MAX_DIR_BYTES >> 20
            ))
        })?;
        Ok(())
    }
}

/// Whether a supplementary descriptor's escape sequences name Joliet UCS-2 level 1, 2 or 3
/// (`%/@`, `%/C`, `%/E`).
fn is_joliet_escape(esc: &[u8]) -> bool {
    matches!(esc, [b'%', b'/', b'@' | b'C' | b'E'])
}

/// Reads the label, root directory and size of a primary or supplementary descriptor
/// (ECMA-119 §8.4, §8.5).
fn parse_volume(vd: &[u8; SECTOR_BYTES], sector: u64, joliet: bool) -> Result<Volume, IsoError> {
    let block_size = u16::from_le_bytes([vd[128], vd[129]]);
    if u64::from(block_size) != SECTOR {
        return Err(IsoError::Unsupported(format!(
            "volume descriptor at sector {sector} declares a logical block size of {block_size} bytes; only 2048 is supported"
        )));
    }
    let id = &vd[40..72];
    let label = if joliet {
        ucs2_be(id)
    } else {
        String::from_utf8_lossy(id).into_owned()
    };
    // §8.4.18: the root directory record, 34 bytes at offset 156.
    let root = parse_record(&vd[156..190]).map_err(|m| {
        corrupt(format!(
            "root directory record in the volume descriptor at sector {sector}: {m}"
        ))
    })?;
    if root.flags & FLAG_DIRECTORY == 0 {
        return Err(corrupt(format!(
            "root directory record in the volume descriptor at sector {sector} is not flagged as a directory"
        )));
    }
    let extent = root.extent();
    Ok(Volume {
        label: trim_field(&label),
        root: Dir {
            sector: extent.sector,
            len: extent.len,
        },
        blocks: u64::from(u32::from_le_bytes([vd[80], vd[81], vd[82], vd[83]])),
    })
}

/// Streams one file's bytes from the image, extent after extent. Returned by
/// [`IsoImage::open_file`].
pub struct FileReader<'a, R> {
    dev: &'a mut Device<R>,
    extents: Vec<Extent>,
    /// Current extent.
    index: usize,
    /// Bytes already read from the current extent.
    done: u64,
    /// Whether the device is positioned at `done` in the current extent.
    positioned: bool,
}

impl<R: Read + Seek> Read for FileReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let Some(extent) = self.extents.get(self.index).copied() else {
                return Ok(0);
            };
            let left = extent.len - self.done;
            if left == 0 {
                self.index += 1;
                self.done = 0;
                self.positioned = false;
                continue;
            }
            let start = (extent.sector.saturating_mul(SECTOR)).saturating_add(self.done);
            if !self.positioned {
                self.dev.inner.seek(SeekFrom::Start(start))?;
                self.positioned = true;
            }
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let got = self.dev.inner.read(&mut buf[..want])?;
            if got == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "the image ended at sector {} inside a file extent of {} bytes",
                        start / SECTOR,
                        extent.len
                    ),
                ));
            }
            self.done += got as u64;
            return Ok(got);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Hand-built images for what xorriso and genisoimage never write (multi-extent files,
    //! odd descriptor sets, SUSP corner cases); `tests/iso9660.rs` covers real images.
    use super::*;
    use std::io::Cursor;

    const S: usize = SECTOR_BYTES;

    fn both32(v: u32) -> [u8; 8] {
        let (l, b) = (v.to_le_bytes(), v.to_be_bytes());
        [l[0], l[1], l[2], l[3], b[0], b[1], b[2], b[3]]
    }

    /// A directory record (ECMA-119 §9.1) with system use bytes `su`.
    fn record(id: &[u8], lba: u32, len: u32, flags: u8, su: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; 33];
        r[2..10].copy_from_slice(&both32(lba));
        r[10..18].copy_from_slice(&both32(len));
        r[25] = flags;
        r[28..32].copy_from_slice(&[1, 0, 0, 1]);
        r[32] = id.len() as u8;
        r.extend_from_slice(id);
        if id.len().is_multiple_of(2) {
            r.push(0);
        }
        r.extend_from_slice(su);
        if r.len() % 2 == 1 {
            r.push(0);
        }
        r[0] = r.len() as u8;
        r
    }

    /// An image of `sectors` sectors: primary descriptor at 16 with its root directory at
    /// sector 18 (one sector), terminator at 17.
    struct Img(Vec<u8>);

    impl Img {
        fn new(sectors: usize) -> Img {
            let mut img = Img(vec![0; sectors * S]);
            img.descriptor(16, 1, b"PRIMARY", 18, 2048);
            img.descriptor(17, 255, b"", 0, 0);
            img
        }

        fn put(&mut self, at: usize, bytes: &[u8]) {
            self.0[at..at + bytes.len()].copy_from_slice(bytes);
        }

        fn descriptor(&mut self, sector: usize, ty: u8, label: &[u8], root: u32, len: u32) {
            let at = sector * S;
            self.put(at, &[ty, b'C', b'D', b'0', b'0', b'1', 1]);
            self.put(at + 40, &[b' '; 32]);
            self.put(at + 40, label);
            self.put(at + 80, &both32(self.0.len() as u32 / 2048));
            self.put(at + 128, &[0, 8, 8, 0]);
            self.put(at + 156, &record(&[0], root, len, FLAG_DIRECTORY, &[]));
        }

        /// Writes records one after the other from `at`.
        fn records(&mut self, mut at: usize, records: &[Vec<u8>]) {
            for r in records {
                self.put(at, r);
                at += r.len();
            }
        }

        /// Root directory at sector 18 holding "." (with system use `dot_su`), ".." and `rest`.
        fn root(&mut self, dot_su: &[u8], rest: &[Vec<u8>]) {
            let mut all = vec![
                record(&[0], 18, 2048, FLAG_DIRECTORY, dot_su),
                record(&[1], 18, 2048, FLAG_DIRECTORY, &[]),
            ];
            all.extend_from_slice(rest);
            self.records(18 * S, &all);
        }

        fn open(&self) -> Result<IsoImage<Cursor<&[u8]>>, IsoError> {
            IsoImage::open(Cursor::new(&self.0[..]))
        }
    }

    fn read(iso: &mut IsoImage<Cursor<&[u8]>>, file: &IsoFile) -> Vec<u8> {
        let mut out = Vec::new();
        iso.open_file(file).unwrap().read_to_end(&mut out).unwrap();
        out
    }

    const SP: [u8; 7] = [b'S', b'P', 7, 1, 0xBE, 0xEF, 0];

    fn nm(flags: u8, name: &[u8]) -> Vec<u8> {
        let mut e = vec![b'N', b'M', 5 + name.len() as u8, 1, flags];
        e.extend_from_slice(name);
        e
    }

    fn ce(block: u32, offset: u32, len: u32) -> Vec<u8> {
        let mut e = vec![b'C', b'E', 28, 1];
        for v in [block, offset, len] {
            e.extend_from_slice(&both32(v));
        }
        e
    }

    #[test]
    fn iso_names_lose_version_and_trailing_dot() {
        assert_eq!(iso_name(b"FOO.;1"), "FOO");
        assert_eq!(iso_name(b"A.TAR.GZ;1"), "A.TAR.GZ");
        assert_eq!(iso_name(b"DIR"), "DIR");
        assert_eq!(strip_version("x;y"), "x;y");
        assert_eq!(ucs2_be(&[0, b'e', 0, b't', 0]), "et");
    }

    #[test]
    fn multi_extent_file_is_read_across_all_extents() {
        let mut img = Img::new(24);
        img.root(
            &[],
            &[
                record(b"BIG.;1", 20, 2048, FLAG_MULTI_EXTENT, &[]),
                record(b"BIG.;1", 22, 100, 0, &[]),
            ],
        );
        img.put(20 * S, &[0xAA; S]);
        img.put(22 * S, &[0xBB; 100]);
        let mut iso = img.open().unwrap();
        let file = iso.find("big").unwrap().unwrap();
        assert_eq!((file.path.as_str(), file.size), ("BIG", 2148));
        let data = read(&mut iso, &file);
        assert_eq!(data.len(), 2148);
        assert!(data[..S].iter().all(|&b| b == 0xAA) && data[S..].iter().all(|&b| b == 0xBB));
    }

    #[test]
    fn multi_extent_file_without_its_last_record_is_corrupt() {
        let mut img = Img::new(24);
        img.root(&[], &[record(b"BIG.;1", 20, 2048, FLAG_MULTI_EXTENT, &[])]);
        let msg = img.open().unwrap().find("BIG").unwrap_err().to_string();
        assert!(msg.contains("no final extent"), "{msg}");

        let mut img = Img::new(24);
        let records = [
            record(b"BIG.;1", 20, 2048, FLAG_MULTI_EXTENT, &[]),
            record(b"OTHER.;1", 22, 100, 0, &[]),
        ];
        img.root(&[], &records);
        let msg = img.open().unwrap().find("OTHER").unwrap_err().to_string();
        assert!(msg.contains("cut short"), "{msg}");
    }

    #[test]
    fn associated_file_does_not_shadow_the_file() {
        let mut img = Img::new(24);
        let records = [
            record(b"F.;1", 20, 5, FLAG_ASSOCIATED, &[]),
            record(b"F.;1", 21, 3, 0, &[]),
        ];
        img.root(&[], &records);
        img.put(21 * S, b"abc");
        let mut iso = img.open().unwrap();
        let file = iso.find("F").unwrap().unwrap();
        assert_eq!(read(&mut iso, &file), b"abc");
    }

    #[test]
    fn zero_length_byte_pads_the_rest_of_a_directory_sector() {
        let mut img = Img::new(24);
        img.descriptor(16, 1, b"PRIMARY", 18, 2 * 2048);
        img.root(&[], &[]);
        img.records(19 * S, &[record(b"LATE.;1", 20, 4, 0, &[])]);
        img.put(20 * S, b"late");
        let mut iso = img.open().unwrap();
        let file = iso.find("LATE").unwrap().unwrap();
        assert_eq!(read(&mut iso, &file), b"late");
    }

    #[test]
    fn record_running_past_the_directory_end_is_corrupt() {
        let mut img = Img::new(24);
        // "." and ".." take 68 bytes; the directory claims 80, the next record needs 38.
        img.descriptor(16, 1, b"PRIMARY", 18, 80);
        img.root(&[], &[record(b"X.;1", 20, 4, 0, &[])]);
        let msg = img.open().unwrap().find("X").unwrap_err().to_string();
        assert!(
            msg.contains("offset 68") && msg.contains("runs past"),
            "{msg}"
        );
    }

    #[test]
    fn rock_ridge_name_continues_through_a_continuation_area() {
        let mut img = Img::new(24);
        let mut su = nm(1, b"etcd-linux-");
        su.extend(ce(19, 100, 64));
        let file = record(b"ETCD_LIN.GZ;1", 20, 3, 0, &su);
        img.root(&SP, &[file]);
        let mut area = nm(1, b"amd64");
        area.extend(nm(0, b".tar.gz"));
        area.extend([b'S', b'T', 4, 1]);
        area.extend(nm(0, b"ignored-after-ST"));
        img.put(19 * S + 100, &area);
        img.put(20 * S, b"tgz");
        let mut iso = img.open().unwrap();
        assert!(iso.has_rock_ridge());
        let file = iso.find("etcd-linux-amd64.tar.gz").unwrap().unwrap();
        assert_eq!(file.naming, Naming::RockRidge);
        assert_eq!(read(&mut iso, &file), b"tgz");
    }

    #[test]
    fn susp_skip_length_is_honoured() {
        let mut img = Img::new(24);
        let mut sp = SP;
        sp[6] = 4;
        let mut su = vec![0xEE; 4];
        su.extend(nm(0, b"real-name"));
        img.root(&sp, &[record(b"ISO.;1", 20, 1, 0, &su)]);
        let mut iso = img.open().unwrap();
        assert!(iso.find("real-name").unwrap().is_some());
        assert_eq!(iso.list_root().unwrap(), ["real-name"]);
    }

    #[test]
    fn nm_entries_for_dot_and_dotdot_do_not_name_a_file() {
        let mut img = Img::new(24);
        let mut su = nm(NM_CURRENT, b"");
        su.extend(nm(NM_PARENT, b""));
        img.root(&SP, &[record(b"PLAIN.;1", 20, 1, 0, &su)]);
        assert_eq!(img.open().unwrap().list_root().unwrap(), ["PLAIN"]);
    }

    #[test]
    fn label_falls_back_to_joliet_when_the_primary_one_is_blank() {
        // Descriptors: primary (blank label) 16, Joliet 17, terminator 18; roots at 21, 22.
        let mut img = Img::new(24);
        img.descriptor(16, 1, b"", 21, 2048);
        // A Joliet label is UCS-2, padded with UCS-2 spaces.
        let label: Vec<u8> = format!("{:16}", "joliet-label")
            .encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect();
        img.descriptor(17, 2, &label, 22, 2048);
        img.put(17 * S + 88, b"%/E");
        img.descriptor(18, 255, b"", 0, 0);
        img.records(21 * S, &[record(&[0], 21, 2048, FLAG_DIRECTORY, &[])]);
        img.records(22 * S, &[record(&[0], 22, 2048, FLAG_DIRECTORY, &[])]);
        let iso = img.open().unwrap();
        assert!(iso.has_joliet());
        assert_eq!(iso.volume_label(), "joliet-label");
    }

    #[test]
    fn descriptor_set_without_terminator_is_corrupt() {
        let mut img = Img::new(16 + 70);
        for sector in 17..16 + 70 {
            img.descriptor(sector, 0, b"", 0, 0);
        }
        let msg = img.open().err().unwrap().to_string();
        assert!(
            msg.contains("no volume descriptor set terminator in sectors 16-79"),
            "{msg}"
        );
    }

    #[test]
    fn descriptor_set_without_primary_is_corrupt() {
        let mut img = Img::new(24);
        img.descriptor(16, 0, b"", 0, 0);
        let msg = img.open().err().unwrap().to_string();
        assert!(msg.contains("no primary volume descriptor"), "{msg}");
    }

    #[test]
    fn rock_ridge_name_longer_than_the_limit_is_corrupt() {
        let mut img = Img::new(24);
        let mut su = nm(1, &[b'a'; 100]);
        su.extend(ce(19, 0, 2000));
        img.root(&SP, &[record(b"A.;1", 20, 1, 0, &su)]);
        let area: Vec<u8> = (0..10).flat_map(|_| nm(1, &[b'b'; 100])).collect();
        img.put(19 * S, &area);
        let msg = img.open().unwrap().find("a").unwrap_err().to_string();
        assert!(msg.contains("longer than 1024"), "{msg}");
    }
}
