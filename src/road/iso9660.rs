//! A small userspace ISO 9660 reader: finds one file on a disc image or CD-ROM block device
//! and streams its bytes, without mounting and without trusting the disc.
//!
//! (Why this file is long: the descriptor set, the tree choice and the directory walk with
//! its Rock Ridge decoding share one image, one read budget and one error type, and read
//! best top to bottom as the kernel's isofs does; the names (`names.rs`), the checked
//! reads and the file reader with zisofs (`reader.rs`) and the tests are split out.)
//!
//! It reads the volume descriptor set (ECMA-119 §8), walks directories (§9.1) and resolves
//! names the way the Linux kernel's isofs presents them after a plain `mount` (no options).
//! It reads through a one-sector buffer and never loads the image or a whole directory.
//!
//! # One tree per disc, as Linux chooses it
//!
//! Linux (`fs/isofs/inode.c`, `isofs_fill_super`; `rock` and `joliet` are on by default)
//! reads the root directory's "." record of the primary volume; a SUSP `ER` entry there
//! (after `CE` continuations) marks the disc as Rock Ridge. Then it uses **one** tree:
//! 1. Rock Ridge when `ER` was seen (unless the primary root holds fewer than three
//!    records while a Joliet tree exists: then Joliet, the kernel's fix for broken discs);
//! 2. else the Joliet tree, when a supplementary descriptor has a Joliet escape sequence;
//! 3. else the primary tree, still with Rock Ridge names where records carry them (the
//!    kernel keeps parsing RR without `ER` when there is no Joliet), else plain names.
//!
//! The primary root's "." record is read first, Joliet or not. When it cannot be read, the
//! Joliet tree is used if its root lies elsewhere (the kernel's fallback since upstream
//! 4243bf80, carried by Debian 12's 6.1 kernels), else the disc is refused naming the
//! primary descriptor, as the mount fails ("get root inode failed").
//!
//! There is no fallback from one tree to another: a path absent from the chosen tree is
//! absent, as on a mount. [`IsoImage::naming`] says which tree was chosen.
//!
//! Names compare as the kernel's dentry operations do: exactly (case-sensitive) in the Rock
//! Ridge and plain trees; in the Joliet tree ignoring ASCII case and trailing dots. Plain
//! ISO 9660 identifiers are shown as `map=normal` does: lower case, `;1` and a `.` before
//! it removed, other `;` turned into `.`. Records without an `NM` name in a Rock Ridge tree
//! get that plain name too. A Rock Ridge name stops growing before 254 bytes, as in Linux.
//! Within a directory the first record with the wanted name counts, directory or not.
//!
//! Deliberate differences from Linux, each refusing rather than guessing: Rock Ridge is only
//! parsed when the root's "." record starts with a SUSP `SP` entry (SUSP §5.3 requires it;
//! no mastering tool omits it); a Rock Ridge symbolic link (`SL`, or a `PX` mode saying
//! link) at the path or on a directory along it is [`IsoError::Link`], and a device, FIFO or
//! socket is [`IsoError::NotRegular`] (a mount would show those, not a file; the tar policy
//! refuses the same inside the archive); zisofs files other than Linux's own format are
//! [`IsoError::Unsupported`] where the kernel would hand out the compressed bytes, and a
//! zisofs file whose data lacks the zisofs magic is a read error (Linux does not look);
//! an SUSP entry that overruns its system use area, where the kernel stops reading Rock
//! Ridge for that record, is [`IsoError::Corrupt`].
//!
//! # zisofs
//!
//! Files with a Rock Ridge `ZF` entry of algorithm `pz` (made by `mkzftree`, xorriso's
//! `--zisofs` filter or `-as mkisofs -z`) are inflated while they are read, as Linux does
//! (`fs/isofs/compress.c`): a header, a table of little-endian block pointers, one zlib
//! stream per block of 2^15-2^17 bytes, an empty block meaning zeros. [`IsoFile::size`] is
//! the uncompressed size. One block is held at a time (at most 128 KiB out and its
//! compressed bytes in).
//!
//! # Other extensions
//!
//! Of Rock Ridge, `NM` (names), `CL`/`RE` (directories that genisoimage relocates when a
//! tree is deeper than eight levels), `SL` and `PX` (links and file types), `ZF` (zisofs)
//! are read, plus SUSP's `SP`, `ER`, `CE` and `ST`; modes, owners and times are ignored.
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
//! An image shorter than the volume its primary descriptor declares is refused at
//! [`IsoImage::open`] as [`IsoError::Truncated`], even when the wanted file lies in the part
//! that survived: a cut upload is not a disc. This holds for block devices too: Linux `sr`
//! sizes a CD-ROM from READ CAPACITY (last block + 1, in 2048-byte blocks) and qemu's
//! CD-ROM from the image file rounded down to 2048 bytes, while xorriso and genisoimage
//! write whole sectors and declare exactly those; so an intact disc never reads shorter than
//! its volume. (`sr` lowers its size after a medium error within the last 75 blocks; such a
//! disc has lost sectors of its volume and is refused with both sizes named.)
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

mod names;
mod reader;

use names::*;
pub use reader::FileReader;
use reader::*;

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
/// Directory and continuation-area bytes one `find` or `list_root` call may read. Linux has
/// no such bound; it is here so that a disc in the drive cannot make discovery read
/// gigabytes of directories. A Kubernetes ISO needs a few KiB; 16 MiB is about 70,000
/// Rock Ridge names in one directory. Reaching it is [`IsoError::Limit`], not corruption.
pub const MAX_DIR_BYTES: u64 = 16 << 20;
/// Path components `find` accepts.
const MAX_DEPTH: usize = 32;
/// SUSP continuation areas followed for one record (Linux isofs follows 31 at most).
const MAX_CONTINUATIONS: usize = 32;
/// A Rock Ridge name stops growing when the next `NM` piece would make it 254 bytes or
/// more (Linux `get_rock_ridge_filename`).
const RR_NAME_MAX: usize = 254;
/// Bytes of a Rock Ridge symbolic link target kept for messages (PATH_MAX).
const MAX_LINK_BYTES: usize = 4096;
/// Extents of one multi-extent file (xorriso splits at 4 GiB, so this is ~256 GiB).
const MAX_EXTENTS: usize = 64;

/// File flags of a directory record (ECMA-119 §9.1.6).
const FLAG_DIRECTORY: u8 = 1 << 1;
const FLAG_ASSOCIATED: u8 = 1 << 2;
const FLAG_MULTI_EXTENT: u8 = 1 << 7;

/// Rock Ridge `NM` flags (RRIP §4.1.4): the entry names "." or "..", not the file.
const NM_CONTINUE: u8 = 1;
const NM_CURRENT: u8 = 1 << 1;
const NM_PARENT: u8 = 1 << 2;
/// Rock Ridge `RR` (RRIP 1.09) flag saying `NM` entries are recorded.
const RR_HAS_NM: u8 = 1 << 3;

/// The magic at the start of a zisofs file (`mkzftree`, libisofs).
const ZISOFS_MAGIC: [u8; 8] = [0x37, 0xE4, 0x53, 0x96, 0xC9, 0xDB, 0xD6, 0x07];

/// Why an image could not be read. `Display` names what is wrong and where.
#[derive(Debug)]
pub enum IsoError {
    /// Reading the image or device failed; the message names the sector.
    Io(io::Error),
    /// No ISO 9660 volume descriptor (`CD001`) at sector 16: not an ISO 9660 image.
    NotIso9660,
    /// The image or device holds fewer bytes than its primary volume descriptor declares
    /// (or than the descriptor set needs): it was cut short.
    Truncated {
        /// Bytes the volume declares (`declared`), or the least an ISO 9660 image can have.
        expected: u64,
        /// Bytes the image or device holds.
        actual: u64,
        /// Whether `expected` is the volume space size read from the primary descriptor.
        declared: bool,
    },
    /// The image contradicts ECMA-119/SUSP/RRIP or points outside itself; the message names
    /// the sector and offset.
    Corrupt(String),
    /// Valid ISO 9660 that this reader deliberately does not handle (interleaved files,
    /// logical blocks other than 2048 bytes, over-long lookup paths, foreign zisofs).
    Unsupported(String),
    /// A valid image beyond a bound of this reader (see [`MAX_DIR_BYTES`]); the message
    /// names the bound and what to change.
    Limit(String),
    /// A Rock Ridge symbolic link at the looked-up path or on a directory along it.
    Link {
        /// The path of the link on the disc, as far as the lookup got.
        path: String,
        /// The link's target as recorded (`SL`), empty when only `PX` says it is a link.
        target: String,
    },
    /// The looked-up path is a Rock Ridge device, FIFO or socket (`PX` mode), not a file.
    NotRegular {
        /// The path on the disc.
        path: String,
        /// What it is, e.g. `FIFO`.
        kind: &'static str,
    },
}

impl IsoError {
    /// Whether the disc holds a link or special file where the archive belongs: the same
    /// class as a link inside the archive (`archive-unsafe`), not an unreadable disc.
    pub fn is_unsafe(&self) -> bool {
        matches!(self, IsoError::Link { .. } | IsoError::NotRegular { .. })
    }
}

/// Text from the disc as one line: control characters escaped.
fn shown(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escaped = c.is_control().then(|| c.escape_debug().to_string());
            escaped
                .unwrap_or_else(|| c.to_string())
                .chars()
                .collect::<Vec<_>>()
        })
        .collect()
}

impl fmt::Display for IsoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IsoError::Io(e) => write!(f, "I/O error: {e}"),
            IsoError::NotIso9660 => {
                f.write_str("not an ISO 9660 image: no CD001 volume descriptor at sector 16")
            }
            IsoError::Truncated {
                expected,
                actual,
                declared: true,
            } => write!(
                f,
                "truncated ISO 9660 image: its primary volume descriptor declares {expected} bytes, but it holds only {actual} bytes ({} bytes missing); copy the whole image again",
                expected.saturating_sub(*actual)
            ),
            IsoError::Truncated {
                expected, actual, ..
            } => write!(
                f,
                "truncated ISO 9660 image: it holds {actual} bytes, with a CD001 volume descriptor at sector 16, but an ISO 9660 volume needs at least {expected} bytes; copy the whole image again"
            ),
            IsoError::Corrupt(m) => write!(f, "corrupt ISO 9660 image: {m}"),
            IsoError::Unsupported(m) => write!(f, "unsupported ISO 9660 image: {m}"),
            IsoError::Limit(m) => write!(f, "ISO 9660 image beyond a limit of this reader: {m}"),
            IsoError::Link { path, target } if target.is_empty() => write!(
                f,
                "{} is a Rock Ridge symbolic link (no target recorded); a mount shows a link there, not a file, and links are refused",
                shown(path)
            ),
            IsoError::Link { path, target } => write!(
                f,
                "{} is a Rock Ridge symbolic link to {}; a mount shows a link there, not a file, and links are refused",
                shown(path),
                shown(target)
            ),
            IsoError::NotRegular { path, kind } => write!(
                f,
                "{} is a Rock Ridge {kind}, not a regular file",
                shown(path)
            ),
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

/// The directory tree a disc is read through (one per disc, see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// The primary tree with Rock Ridge `NM` names.
    RockRidge,
    /// The Joliet tree's UCS-2 names.
    Joliet,
    /// The primary tree's plain ISO 9660 identifiers, as Linux shows them.
    Iso9660,
}

impl Naming {
    /// The stable text: `rock-ridge`, `joliet` or `iso9660`.
    pub fn as_str(self) -> &'static str {
        match self {
            Naming::RockRidge => "rock-ridge",
            Naming::Joliet => "joliet",
            Naming::Iso9660 => "iso9660",
        }
    }
}

impl fmt::Display for Naming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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

/// A zisofs file's parameters from its `ZF` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Zisofs {
    /// Header size in 4-byte words (where the block pointer table starts).
    header_words: u8,
    /// log2 of the uncompressed block size (15-17).
    block_shift: u8,
    /// Uncompressed size in bytes.
    size: u64,
}

/// A regular file found on the image by [`IsoImage::find`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsoFile {
    /// The path as the chosen tree names it, components joined by `/`.
    pub path: String,
    /// Size in bytes as a mount shows it (the sum over all extents, or the uncompressed
    /// size of a zisofs file).
    pub size: u64,
    /// The tree the disc is read through (the same for every file of one disc).
    pub naming: Naming,
    extents: Vec<Extent>,
    zisofs: Option<Zisofs>,
}

impl IsoFile {
    /// The sector the file's data starts at, for messages.
    pub fn first_sector(&self) -> Option<u64> {
        self.extents.first().map(|e| e.sector)
    }

    /// Whether the file is stored zisofs-compressed (and is inflated while read).
    pub fn is_zisofs(&self) -> bool {
        self.zisofs.is_some()
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
    /// The sector of its volume descriptor, for messages.
    descriptor: u64,
    label: String,
    root: Dir,
    /// Declared volume size in sectors (ECMA-119 §8.4.8).
    blocks: u64,
}

/// A directory entry after name resolution (all records of a multi-extent file merged).
#[derive(Debug)]
struct Entry {
    name: String,
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
    /// Rock Ridge says this is a symbolic link: its target (empty when only `PX` says so).
    link: Option<String>,
    /// Rock Ridge says this is a device, FIFO or socket.
    special: Option<&'static str>,
    /// A zisofs file, or why its compression is not one Linux reads.
    zisofs: Option<Result<Zisofs, String>>,
}

/// What a record's Rock Ridge entries say.
#[derive(Debug, Default)]
struct RockRidge {
    /// The concatenated contents of the `NM` entries (RRIP §4.1.4), `None` without any.
    name: Option<String>,
    /// `CL`: the record stands for the directory at this sector (RRIP §4.1.5.1).
    child_link: Option<u32>,
    /// `RE`: the record is a relocated directory (RRIP §4.1.5.3).
    relocated: bool,
    /// `SL`: the symbolic link's target, components joined by `/` (RRIP §4.1.3).
    link: Option<String>,
    /// `PX`: the POSIX file mode (RRIP §4.1.1).
    mode: Option<u32>,
    /// `ZF` (zisofs) or `Z2` (zisofs2): the parameters, or why they are not Linux's format.
    zisofs: Option<Result<Zisofs, String>>,
    /// `ER`: an extension (Rock Ridge) is declared (SUSP §5.5); looked for in the root only.
    extension: bool,
}

impl RockRidge {
    /// What a `PX` mode other than a regular file or directory makes the record.
    fn special(&self) -> Option<&'static str> {
        match self.mode? & 0o170000 {
            0o020000 => Some("character device"),
            0o060000 => Some("block device"),
            0o010000 => Some("FIFO"),
            0o140000 => Some("socket"),
            _ => None,
        }
    }

    fn is_link(&self) -> bool {
        self.link.is_some() || self.mode.is_some_and(|m| m & 0o170000 == 0o120000)
    }
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

/// An ISO 9660 image opened for lookups: the volume descriptor set has been read and the
/// tree to read it through chosen.
pub struct IsoImage<R> {
    dev: Device<R>,
    primary: Volume,
    joliet: Option<Volume>,
    /// SUSP skip length when the primary root's "." record starts with `SP` (SUSP §5.3).
    susp_skip: Option<u8>,
    /// The tree every lookup uses.
    naming: Naming,
    /// Directory bytes the current public call may still read.
    budget: u64,
}

impl<R: Read + Seek> IsoImage<R> {
    /// Reads the volume descriptor set (primary, Joliet supplementary, terminator), refuses
    /// an image shorter than its volume, and chooses the tree as Linux does (module doc).
    pub fn open(r: R) -> Result<Self, IsoError> {
        let mut dev = Device::new(r)?;
        if dev.size < (VDS_START + 1) * SECTOR {
            return Err(dev.too_short());
        }
        let mut primary: Option<Volume> = None;
        let mut joliet = None;
        let mut terminated = false;
        for sector in VDS_START..VDS_START + MAX_DESCRIPTORS {
            if sector.saturating_add(1).saturating_mul(SECTOR) > dev.size {
                if let Some(p) = &primary {
                    let expected = p.blocks.saturating_mul(SECTOR);
                    if expected > dev.size {
                        return Err(IsoError::Truncated {
                            expected,
                            actual: dev.size,
                            declared: true,
                        });
                    }
                }
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
        let expected = primary.blocks.saturating_mul(SECTOR);
        if expected > dev.size {
            return Err(IsoError::Truncated {
                expected,
                actual: dev.size,
                declared: true,
            });
        }
        let mut image = IsoImage {
            dev,
            primary,
            joliet,
            susp_skip: None,
            naming: Naming::Iso9660,
            budget: MAX_DIR_BYTES,
        };
        image.choose_tree()?;
        Ok(image)
    }

    /// Chooses the tree as `isofs_fill_super` does: Rock Ridge when the primary root's "."
    /// record declares it (`ER`), else Joliet, else the primary tree (with Rock Ridge
    /// names where records have them, when the root carries SUSP).
    ///
    /// The kernel reads the root inode from the primary descriptor's root first, Joliet or
    /// not. When it cannot (the root's sector lies past the end of the device, its "."
    /// record is shorter than a record), it turns to Joliet only when a Joliet root lies
    /// elsewhere (upstream 4243bf80, in Debian 12's 6.1 kernels: "root inode is unusable.
    /// Disabling Rock Ridge and switching to Joliet."); otherwise the mount fails with
    /// "get root inode failed", and so does this, naming the descriptor.
    fn choose_tree(&mut self) -> Result<(), IsoError> {
        let has_joliet = self.joliet.is_some();
        let probe = self.budgeted(|image| image.probe_root());
        let (skip, extension) = match probe {
            Ok(found) => found,
            Err(e) => match &self.joliet {
                Some(j) if j.root.sector != self.primary.root.sector => (None, false),
                // Errors of another kind (a read error, a removed disc) keep their kind.
                joliet => {
                    let IsoError::Corrupt(m) = e else {
                        return Err(e);
                    };
                    let too = if joliet.is_some() {
                        "; the Joliet root lies there too"
                    } else {
                        ""
                    };
                    return Err(corrupt(format!(
                        "the primary volume descriptor (sector {}) gives a root directory Linux cannot read ({m}){too}, so the kernel refuses to mount the disc (isofs: get root inode failed)",
                        self.primary.descriptor
                    )));
                }
            },
        };
        self.susp_skip = skip;
        self.naming = if extension && has_joliet && self.primary_root_nearly_empty() {
            // Linux: "primary root directory is empty. Disabling Rock Ridge and switching
            // to Joliet."
            Naming::Joliet
        } else if extension {
            Naming::RockRidge
        } else if has_joliet {
            Naming::Joliet
        } else if skip.is_some() {
            Naming::RockRidge
        } else {
            Naming::Iso9660
        };
        Ok(())
    }

    /// The volume label: the primary volume identifier, trimmed; the Joliet one if empty.
    pub fn volume_label(&self) -> &str {
        match &self.joliet {
            Some(j) if self.primary.label.is_empty() => &j.label,
            _ => &self.primary.label,
        }
    }

    /// The tree every lookup reads the disc through, chosen as Linux does.
    pub fn naming(&self) -> Naming {
        self.naming
    }

    /// Whether the primary tree carries SUSP (an `SP` entry in the root's "." record), the
    /// carrier of Rock Ridge. Whether Rock Ridge names are used is [`IsoImage::naming`].
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

    /// Size in bytes the primary volume descriptor declares (never more than
    /// `image_size`: a shorter image is refused by [`IsoImage::open`]).
    pub fn volume_size(&self) -> u64 {
        self.primary.blocks.saturating_mul(SECTOR)
    }

    /// Finds the regular file at `path` (components separated by `/`, e.g.
    /// `etcd/etcd-linux-amd64.tar.gz`) in the chosen tree, see the module doc for how names
    /// match. `Ok(None)` when a mount would show nothing or a directory there; an error
    /// when a directory on the way is corrupt, a link or special file is met, or the file's
    /// data lies outside the image.
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
        let found = self.budgeted(|image| image.walk(&components))?;
        if let Some(file) = &found {
            self.check_extents(file)?;
        }
        Ok(found)
    }

    /// Streams exactly the bytes of `file` as a mount shows them, across all its extents,
    /// inflating a zisofs file block by block.
    pub fn open_file(&mut self, file: &IsoFile) -> Result<FileReader<'_, R>, IsoError> {
        self.check_extents(file)?;
        let inflating = file.zisofs.map(|z| Inflating {
            zisofs: z,
            path: file.path.clone(),
            next_block: 0,
            blocks: z.size.div_ceil(1u64 << z.block_shift),
            out: Vec::new(),
            pos: 0,
            compressed: Vec::new(),
        });
        Ok(FileReader {
            dev: &mut self.dev,
            extents: file.extents.clone(),
            index: 0,
            done: 0,
            positioned: false,
            inflating,
        })
    }

    /// The names at the top level of the chosen tree, in disc order, for error messages
    /// such as "the disc holds: EFI, k8s".
    pub fn list_root(&mut self) -> Result<Vec<String>, IsoError> {
        let root = self.root();
        self.budgeted(|image| {
            let mut names = Vec::new();
            image.scan_dir(root, "the root directory", |entry| {
                names.push(entry.name);
                None::<()>
            })?;
            Ok(names)
        })
    }

    /// Runs `f` with a fresh directory budget.
    fn budgeted<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, IsoError>,
    ) -> Result<T, IsoError> {
        self.budget = MAX_DIR_BYTES;
        f(self)
    }

    fn root(&self) -> Dir {
        match (self.naming, &self.joliet) {
            (Naming::Joliet, Some(j)) => j.root,
            _ => self.primary.root,
        }
    }

    /// Reads the primary root's "." record: the SUSP skip length when its system use area
    /// starts with `SP` (SUSP §5.3: "SP", length 7, version 1, check bytes BE EF), and
    /// whether an `ER` entry (there or in its continuation areas) declares an extension.
    fn probe_root(&mut self) -> Result<(Option<u8>, bool), IsoError> {
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
        let skip = match rec.system_use {
            [b'S', b'P', 7, 1, 0xBE, 0xEF, skip, ..] => *skip,
            _ => return Ok((None, false)),
        };
        let at = root.sector * SECTOR;
        let rr = self.rock_ridge(rec.system_use, 0, at)?;
        Ok((Some(skip), rr.extension))
    }

    /// Whether the primary root's first sector holds fewer than three records (Linux
    /// `rootdir_empty`: "." and ".." only, or less).
    fn primary_root_nearly_empty(&mut self) -> bool {
        let Ok(buf) = self
            .dev
            .read_sector(self.primary.root.sector, "root directory")
        else {
            return true;
        };
        let mut off = 0;
        let mut records = 0;
        while records < 3 {
            let len = usize::from(buf.get(off).copied().unwrap_or(0));
            if len == 0 {
                break;
            }
            records += 1;
            off += len;
        }
        records < 3
    }

    /// Follows `components` down the chosen tree; the last one must be a regular file.
    fn walk(&mut self, components: &[&str]) -> Result<Option<IsoFile>, IsoError> {
        let naming = self.naming;
        let mut dir = self.root();
        let mut path = String::new();
        for (i, want) in components.iter().enumerate() {
            let last = i + 1 == components.len();
            let what = if path.is_empty() {
                "the root directory".to_owned()
            } else {
                format!("directory {}", shown(&path))
            };
            // Linux takes the first record with the name, whatever it is.
            let found = self.scan_dir(dir, &what, |entry| {
                names_match(naming, &entry.name, want).then_some(entry)
            })?;
            let Some(entry) = found else {
                return Ok(None);
            };
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(&entry.name);
            if let Some(target) = entry.link {
                return Err(IsoError::Link { path, target });
            }
            if let Some(kind) = entry.special {
                return Err(IsoError::NotRegular { path, kind });
            }
            if entry.interleaved {
                return Err(IsoError::Unsupported(format!(
                    "{} (record at sector {}, offset {}) is recorded in interleaved mode",
                    shown(&path),
                    entry.at / SECTOR,
                    entry.at % SECTOR
                )));
            }
            if last {
                if entry.is_dir {
                    return Ok(None);
                }
                let zisofs = match entry.zisofs {
                    Some(Err(why)) => {
                        return Err(IsoError::Unsupported(format!(
                            "{} (record at sector {}, offset {}) is stored with {why}",
                            shown(&path),
                            entry.at / SECTOR,
                            entry.at % SECTOR
                        )))
                    }
                    Some(Ok(z)) => Some(z),
                    None => None,
                };
                return Ok(Some(IsoFile {
                    path,
                    size: zisofs.map_or(entry.size, |z| z.size),
                    naming,
                    extents: entry.extents,
                    zisofs,
                }));
            }
            if !entry.is_dir {
                return Ok(None);
            }
            dir = match entry.extents.as_slice() {
                [extent] => Dir {
                    sector: extent.sector,
                    len: extent.len,
                },
                _ => {
                    return Err(corrupt(format!(
                        "directory {} (record at sector {}, offset {}) has {} extents",
                        shown(&path),
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
                return Err(corrupt(format!(
                    "{} ({} bytes from sector {}) extends past the end of the image ({} bytes) and of its volume",
                    shown(&file.path),
                    extent.len,
                    extent.sector,
                    self.dev.size
                )));
            }
        }
        Ok(())
    }

    /// Reads the records of `dir` (`what` names it for messages) one sector at a time and
    /// hands each entry (except "." and "..", associated files and relocated directories)
    /// to `visit` until it returns `Some`.
    fn scan_dir<T>(
        &mut self,
        dir: Dir,
        what: &str,
        mut visit: impl FnMut(Entry) -> Option<T>,
    ) -> Result<Option<T>, IsoError> {
        let sectors = dir.len.div_ceil(SECTOR);
        let end = dir
            .sector
            .checked_add(sectors)
            .and_then(|s| s.checked_mul(SECTOR));
        if end.is_none_or(|end| end > self.dev.size) {
            return Err(corrupt(format!(
                "{what} at sector {} ({} bytes) extends past the end of the image ({} bytes)",
                dir.sector, dir.len, self.dev.size
            )));
        }
        if dir.len > MAX_DIR_BYTES {
            return Err(IsoError::Limit(format!(
                "{what} at sector {} holds {} bytes of records ({} MiB), more than the {} MiB of directory data this reader reads for one lookup (MAX_DIR_BYTES in src/iso9660.rs; Linux itself has no such bound); keep fewer names in one directory, e.g. move them into subdirectories",
                dir.sector,
                dir.len,
                dir.len >> 20,
                MAX_DIR_BYTES >> 20
            )));
        }
        self.spend(sectors.saturating_mul(SECTOR), dir.sector)?;
        let mut pending: Option<Entry> = None;
        for i in 0..sectors {
            let sector = dir.sector + i;
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
                // the file they belong to (Linux hides them unless `showassoc`).
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
                                shown(&entry.name)
                            )));
                        }
                        if entry.extents.len() >= MAX_EXTENTS {
                            return Err(corrupt(format!(
                                "{}: {} has more than {MAX_EXTENTS} extents",
                                where_(),
                                shown(&entry.name)
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
                    None => self.entry(&rec, at)?,
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
                dir.sector,
                shown(&entry.name)
            ))),
            None => Ok(None),
        }
    }

    /// Resolves a record's name in the chosen tree and builds its entry.
    fn entry(&mut self, rec: &Record<'_>, at: u64) -> Result<Entry, IsoError> {
        let rr = match (self.naming, self.susp_skip) {
            (Naming::RockRidge, Some(skip)) => self.rock_ridge(rec.system_use, skip, at)?,
            _ => RockRidge::default(),
        };
        let name = match (self.naming, &rr.name) {
            (Naming::Joliet, _) => joliet_name(rec.id),
            (_, Some(name)) if !name.is_empty() => name.clone(),
            _ => iso_name(rec.id),
        };
        let link = rr.is_link().then(|| rr.link.clone().unwrap_or_default());
        let mut entry = Entry {
            name,
            id: rec.id.to_vec(),
            is_dir: rec.flags & FLAG_DIRECTORY != 0,
            interleaved: rec.unit_size != 0 || rec.gap != 0,
            extents: vec![rec.extent()],
            size: u64::from(rec.data_len),
            at,
            relocated: rr.relocated,
            link,
            special: rr.special(),
            zisofs: rr.zisofs.clone(),
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
        let mut name_full = false;
        let mut names_recorded = true;
        let mut link: Option<String> = None;
        let mut link_slash = false;
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
                let data = &entry[4..];
                match &[s1, s2] {
                    // RRIP 1.09 `RR`: Linux takes no names when it says none are recorded.
                    b"RR" => {
                        names_recorded = data.first().is_some_and(|f| f & RR_HAS_NM != 0);
                    }
                    b"NM" => {
                        let [flags, content @ ..] = data else {
                            continue;
                        };
                        // "." and ".." entries, and flags Linux does not support (HOST).
                        if flags & (NM_CURRENT | NM_PARENT) != 0 || flags & !NM_CONTINUE != 0 {
                            continue;
                        }
                        let piece = content.split(|&b| b == 0).next().unwrap_or(&[]);
                        let name = name.get_or_insert_with(Vec::new);
                        if name_full || name.len() + piece.len() >= RR_NAME_MAX {
                            name_full = true;
                        } else {
                            name.extend_from_slice(piece);
                        }
                    }
                    b"SL" => {
                        let target = link.get_or_insert_with(String::new);
                        if let [_flags, components @ ..] = data {
                            append_link(target, components, &mut link_slash);
                        }
                    }
                    b"PX" => rr.mode = le32_at(data, 0),
                    b"ZF" => rr.zisofs = Some(zisofs_params(data)),
                    b"Z2" => {
                        rr.zisofs = Some(Err(
                            "zisofs2 compression (a Z2 entry), which Linux does not read".into(),
                        ))
                    }
                    // Linux ignores an ER whose identifier overruns it.
                    b"ER" if data.first().is_some_and(|&n| 8 + usize::from(n) <= len) => {
                        rr.extension = true;
                    }
                    b"CE" if data.len() >= 24 => {
                        next = Some((le32_at(data, 0), le32_at(data, 8), le32_at(data, 16)));
                    }
                    b"CL" => rr.child_link = le32_at(data, 0),
                    b"RE" => rr.relocated = true,
                    b"ST" => break,
                    _ => {}
                }
            }
            let Some((Some(block), Some(offset), Some(len))) = next else {
                break;
            };
            // Linux reads no continuation from block 0 (the system area).
            if block == 0 {
                break;
            }
            continuations += 1;
            if continuations > MAX_CONTINUATIONS {
                return Err(corrupt(format!(
                    "{}: more than {MAX_CONTINUATIONS} SUSP continuation areas (a CE loop?)",
                    where_()
                )));
            }
            // Linux requires a continuation area to lie within one logical block.
            if u64::from(offset) + u64::from(len) > SECTOR {
                return Err(corrupt(format!(
                    "{}: SUSP continuation area of {len} bytes at sector {block}, offset {offset} crosses its sector",
                    where_()
                )));
            }
            self.spend(u64::from(len), u64::from(block))?;
            area = vec![0; len as usize];
            let pos = u64::from(block) * SECTOR + u64::from(offset);
            self.dev.read_at(pos, &mut area, "SUSP continuation area")?;
        }
        if names_recorded {
            rr.name = name.map(|n| String::from_utf8_lossy(&n).into_owned());
        }
        rr.link = link;
        Ok(rr)
    }

    /// Charges `bytes` of directory data against this call's budget.
    fn spend(&mut self, bytes: u64, sector: u64) -> Result<(), IsoError> {
        self.budget = self.budget.checked_sub(bytes).ok_or_else(|| {
            IsoError::Limit(format!(
                "reading the directory data at sector {sector} would pass {} MiB of directory data for one lookup (MAX_DIR_BYTES in src/iso9660.rs; Linux itself has no such bound): the directories on the path hold too many names, or their records point back at each other",
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
        descriptor: sector,
        label: trim_field(&label),
        root: Dir {
            sector: extent.sector,
            len: extent.len,
        },
        blocks: u64::from(u32::from_le_bytes([vd[80], vd[81], vd[82], vd[83]])),
    })
}

#[cfg(test)]
mod tests;
