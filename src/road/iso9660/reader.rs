//! Reading the image: every read checked against its size; a file's bytes across its extents, zisofs inflated block by block.

use super::*;
use std::io::{self, Read, Seek, SeekFrom};

/// The zisofs parameters of a `ZF` entry's data (after the 4-byte SUSP header).
pub(super) fn zisofs_params(data: &[u8]) -> Result<Zisofs, String> {
    let (Some(alg), Some(&header_words), Some(&block_shift), Some(size)) =
        (data.get(..2), data.get(2), data.get(3), le32_at(data, 4))
    else {
        return Err("a ZF entry shorter than 16 bytes".into());
    };
    if alg != b"pz" {
        return Err(format!(
            "zisofs compression with algorithm {:?} (Linux reads only \"pz\", the zisofs of mkzftree and xorriso --zisofs; zisofs2 is not it)",
            String::from_utf8_lossy(alg)
        ));
    }
    if !(15..=17).contains(&block_shift) {
        return Err(format!(
            "zisofs blocks of 2^{block_shift} bytes (zisofs uses 2^15 to 2^17)"
        ));
    }
    if header_words < 4 {
        return Err(format!(
            "a zisofs header of {header_words} words (at least 4: magic, size, shifts)"
        ));
    }
    Ok(Zisofs {
        header_words,
        block_shift,
        size: u64::from(size),
    })
}

/// An image file or block device, with every read checked against its size.
pub(super) struct Device<R> {
    pub(super) inner: R,
    pub(super) size: u64,
}

impl<R: Read + Seek> Device<R> {
    pub(super) fn new(mut inner: R) -> Result<Self, IsoError> {
        let size = inner.seek(SeekFrom::End(0)).map_err(|e| {
            IsoError::Io(io::Error::new(
                e.kind(),
                format!("finding the image size: {e}"),
            ))
        })?;
        Ok(Device { inner, size })
    }

    /// Fills `buf` from byte `at`; `what` names the structure for error messages.
    pub(super) fn read_at(&mut self, at: u64, buf: &mut [u8], what: &str) -> Result<(), IsoError> {
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

    pub(super) fn read_sector(
        &mut self,
        sector: u64,
        what: &str,
    ) -> Result<[u8; SECTOR_BYTES], IsoError> {
        let at = sector
            .checked_mul(SECTOR)
            .ok_or_else(|| corrupt(format!("{what} at sector {sector} is out of range")))?;
        let mut buf = [0u8; SECTOR_BYTES];
        self.read_at(at, &mut buf, what)?;
        Ok(buf)
    }

    /// Why an image shorter than the volume descriptor set is not one: cut short when it
    /// still has `CD001` at sector 16, else not ISO 9660.
    pub(super) fn too_short(&mut self) -> IsoError {
        let vd = VDS_START * SECTOR;
        let mut head = [0u8; 84];
        let have = usize::try_from(self.size.saturating_sub(vd))
            .unwrap_or(0)
            .min(head.len());
        if have < 6 {
            return IsoError::NotIso9660;
        }
        if let Err(e) = self.read_at(vd, &mut head[..have], "volume descriptor") {
            return e;
        }
        if &head[1..6] != b"CD001" {
            return IsoError::NotIso9660;
        }
        let minimum = (VDS_START + 2) * SECTOR;
        match le32_at(&head[..have], 80) {
            Some(blocks) if u64::from(blocks) * SECTOR > self.size => IsoError::Truncated {
                expected: u64::from(blocks) * SECTOR,
                actual: self.size,
                declared: true,
            },
            _ => IsoError::Truncated {
                expected: minimum,
                actual: self.size,
                declared: false,
            },
        }
    }
}

/// Reads `buf.len()` bytes at `offset` of a file's stored data (across its extents).
pub(super) fn read_stored<R: Read + Seek>(
    dev: &mut Device<R>,
    extents: &[Extent],
    offset: u64,
    buf: &mut [u8],
) -> io::Result<()> {
    let mut offset = offset;
    let mut filled = 0;
    let mut base = 0u64;
    for extent in extents {
        if filled == buf.len() {
            break;
        }
        let end = base.saturating_add(extent.len);
        if offset < end {
            let within = offset - base;
            let n = usize::try_from(extent.len - within)
                .unwrap_or(usize::MAX)
                .min(buf.len() - filled);
            let at = extent.sector.saturating_mul(SECTOR).saturating_add(within);
            dev.inner.seek(SeekFrom::Start(at))?;
            dev.inner.read_exact(&mut buf[filled..filled + n])?;
            filled += n;
            offset += n as u64;
        }
        base = end;
    }
    if filled < buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("zisofs data at byte {offset} lies past the {base} bytes stored for the file"),
        ));
    }
    Ok(())
}

/// A zisofs file being inflated: one block at a time.
pub(super) struct Inflating {
    pub(super) zisofs: Zisofs,
    /// The file's path, for messages.
    pub(super) path: String,
    pub(super) next_block: u64,
    pub(super) blocks: u64,
    /// The current block's uncompressed bytes, handed out from `pos`.
    pub(super) out: Vec<u8>,
    pub(super) pos: usize,
    /// The current block's compressed bytes.
    pub(super) compressed: Vec<u8>,
}

/// Streams one file's bytes from the image, extent after extent. Returned by
/// [`IsoImage::open_file`].
pub struct FileReader<'a, R> {
    pub(super) dev: &'a mut Device<R>,
    pub(super) extents: Vec<Extent>,
    /// Current extent.
    pub(super) index: usize,
    /// Bytes already read from the current extent.
    pub(super) done: u64,
    /// Whether the device is positioned at `done` in the current extent.
    pub(super) positioned: bool,
    /// Set for a zisofs file.
    pub(super) inflating: Option<Inflating>,
}

impl<R: Read + Seek> FileReader<'_, R> {
    /// Inflates the next zisofs block into `z.out` (`fs/isofs/compress.c`): its bounds are
    /// pointers `header_words + i` and `+ 1` of the table; an empty block is zeros.
    pub(super) fn inflate_next(
        dev: &mut Device<R>,
        extents: &[Extent],
        z: &mut Inflating,
    ) -> io::Result<()> {
        let bad = |what: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("zisofs file {}: {what}", shown(&z.path)),
            )
        };
        let i = z.next_block;
        let block_size = 1u64 << z.zisofs.block_shift;
        let expected = block_size.min(z.zisofs.size - i * block_size) as usize;
        if i == 0 {
            let mut magic = [0u8; 8];
            read_stored(dev, extents, 0, &mut magic)?;
            if magic != ZISOFS_MAGIC {
                return Err(bad("its data does not start with the zisofs magic".into()));
            }
        }
        let mut pointers = [0u8; 8];
        let table = (u64::from(z.zisofs.header_words) + i) * 4;
        read_stored(dev, extents, table, &mut pointers)?;
        let start = u64::from(u32::from_le_bytes([
            pointers[0],
            pointers[1],
            pointers[2],
            pointers[3],
        ]));
        let end = u64::from(u32::from_le_bytes([
            pointers[4],
            pointers[5],
            pointers[6],
            pointers[7],
        ]));
        let Some(len) = end.checked_sub(start) else {
            return Err(bad(format!(
                "block {i} ends (byte {end}) before it starts (byte {start})"
            )));
        };
        // zlib's deflateBound for one block, with room to spare.
        let bound = block_size + (block_size >> 3) + (block_size >> 6) + 64;
        if len > bound {
            return Err(bad(format!(
                "block {i} holds {len} compressed bytes, more than zlib can make of {block_size}"
            )));
        }
        z.out.clear();
        z.pos = 0;
        if len == 0 {
            z.out.resize(expected, 0);
        } else {
            z.compressed.resize(len as usize, 0);
            read_stored(dev, extents, start, &mut z.compressed)?;
            let mut inflater =
                flate2::read::ZlibDecoder::new(z.compressed.as_slice()).take(expected as u64 + 1);
            inflater
                .read_to_end(&mut z.out)
                .map_err(|e| bad(format!("block {i} (byte {start}) does not inflate: {e}")))?;
            if z.out.len() != expected {
                return Err(bad(format!(
                    "block {i} (byte {start}) inflates to {} bytes, not {expected}",
                    z.out.len()
                )));
            }
        }
        z.next_block += 1;
        Ok(())
    }
}

impl<R: Read + Seek> Read for FileReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if let Some(z) = &mut self.inflating {
            if z.pos == z.out.len() {
                if z.next_block == z.blocks {
                    return Ok(0);
                }
                Self::inflate_next(self.dev, &self.extents, z)?;
            }
            let n = buf.len().min(z.out.len() - z.pos);
            buf[..n].copy_from_slice(&z.out[z.pos..z.pos + n]);
            z.pos += n;
            return Ok(n);
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
