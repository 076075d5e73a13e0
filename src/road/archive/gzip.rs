//! Strict gunzip: exactly one gzip member (RFC 1952), its CRC-32 and length checked, nothing
//! after it; the SHA-256 of every compressed byte read (by the [`Feed`]'s reader, on its own
//! thread); the expansion ratio watched as it inflates. Runs on the inflate thread of
//! [`Unpacked`](super::unpacked::Unpacked), into the buffers the tar walk then copies
//! straight into the staged files.

use super::feed::{Feed, Next};
use super::{corrupt, read_failure, too_large};
use crate::reason::Failure;
use flate2::{Decompress, FlushDecompress, Status};

/// Unpacked bytes allowed before the ratio cap applies: the first headers and small text
/// files of a release compress far better than its binaries.
pub(super) const RATIO_ALLOWANCE: u64 = 1 << 20;

const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
const FRESERVED: u8 = 0xe0;

/// Where the member stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Inflating; more unpacked bytes may come.
    Inflating,
    /// Trailer checked and nothing followed: every input byte was read and hashed.
    Done,
    /// An error was returned; nothing more will be read.
    Failed,
}

/// One gzip member being unpacked from what `feed` reads.
pub(super) struct Gunzip<'n> {
    feed: Feed<'n>,
    name: &'n str,
    max_ratio: u64,
    /// The feed's last buffer; `in_len` of it is input, `in_pos` of that used.
    inbuf: Vec<u8>,
    in_pos: usize,
    in_len: usize,
    eof: bool,
    read_total: u64,
    header_len: u64,
    /// The SHA-256 of the whole input, once the feed reached its end.
    sha256: Option<[u8; 32]>,
    inflate: Decompress,
    crc: crc32fast::Hasher,
    state: State,
}

impl<'n> Gunzip<'n> {
    /// Reads and checks the gzip header. `name` is what messages call the archive.
    pub(super) fn new(feed: Feed<'n>, name: &'n str, max_ratio: u64) -> Result<Self, Failure> {
        let mut gz = Gunzip {
            feed,
            name,
            max_ratio,
            inbuf: Vec::new(),
            in_pos: 0,
            in_len: 0,
            eof: false,
            read_total: 0,
            header_len: 0,
            sha256: None,
            inflate: Decompress::new(false),
            crc: crc32fast::Hasher::new(),
            state: State::Inflating,
        };
        gz.header()?;
        Ok(gz)
    }

    /// Inflates the next bytes into `out`; returns how many, 0 once the member ended and
    /// its trailer checked out (and ever after). After an error, returns 0 too: nothing
    /// more is read.
    pub(super) fn inflate_into(&mut self, out: &mut [u8]) -> Result<usize, Failure> {
        if self.state != State::Inflating {
            return Ok(0);
        }
        self.inflate_some(out)
            .inspect_err(|_| self.state = State::Failed)
    }

    /// The SHA-256 of the whole input, and its length, once it was read to the end.
    pub(super) fn digest(&self) -> Option<([u8; 32], u64)> {
        match (self.state, self.sha256) {
            (State::Done, Some(sha256)) => Some((sha256, self.read_total)),
            _ => None,
        }
    }

    /// Takes the feed's next buffer once the last one is used up.
    fn fill_input(&mut self) -> Result<(), Failure> {
        if self.in_pos < self.in_len || self.eof {
            return Ok(());
        }
        self.in_pos = 0;
        match self.feed.next() {
            Ok(Next::Data(buf, n)) => {
                self.in_len = n;
                self.read_total += n as u64;
                self.feed.recycle(std::mem::replace(&mut self.inbuf, buf));
            }
            Ok(Next::End(sha256)) => {
                self.in_len = 0;
                self.eof = true;
                self.sha256 = Some(sha256);
            }
            Err(e) => return Err(read_failure(self.name, e)),
        }
        Ok(())
    }

    /// One byte of the gzip framing (header or trailer), or `None` at the end of input.
    fn framing_byte(&mut self) -> Result<Option<u8>, Failure> {
        self.fill_input()?;
        if self.in_pos == self.in_len {
            return Ok(None);
        }
        let b = self.inbuf[self.in_pos];
        self.in_pos += 1;
        Ok(Some(b))
    }

    /// One header byte, counted and added to the header checksum.
    fn header_byte(&mut self, hcrc: &mut crc32fast::Hasher) -> Result<Option<u8>, Failure> {
        let b = self.framing_byte()?;
        if let Some(b) = b {
            hcrc.update(&[b]);
            self.header_len += 1;
        }
        Ok(b)
    }

    /// A header byte that must be there.
    fn need(&mut self, hcrc: &mut crc32fast::Hasher) -> Result<u8, Failure> {
        self.header_byte(hcrc)?.ok_or_else(|| {
            corrupt(format!(
                "{} ends inside its gzip header, after {} bytes",
                self.name, self.read_total
            ))
        })
    }

    fn header(&mut self) -> Result<(), Failure> {
        let name = self.name;
        let mut hcrc = crc32fast::Hasher::new();
        let mut fixed = [0u8; 10];
        let mut got = 0;
        while got < fixed.len() {
            match self.header_byte(&mut hcrc)? {
                Some(b) => fixed[got] = b,
                None => break,
            }
            got += 1;
        }
        if got == 0 {
            return Err(corrupt(format!("{name} is empty")));
        }
        let magic_ok = fixed[0] == 0x1f && (got < 2 || fixed[1] == 0x8b);
        if !magic_ok {
            let hex: Vec<String> = fixed[..got.min(4)]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            return Err(corrupt(format!(
                "{name} is not a gzip file (it starts with {})",
                hex.join(" ")
            )));
        }
        if got < fixed.len() {
            return Err(corrupt(format!(
                "{name} ends inside its gzip header, after {got} bytes"
            )));
        }
        if fixed[2] != 8 {
            return Err(corrupt(format!(
                "{name} uses gzip compression method {}, not deflate",
                fixed[2]
            )));
        }
        let flags = fixed[3];
        if flags & FRESERVED != 0 {
            return Err(corrupt(format!(
                "{name} has reserved gzip header flags set (0x{flags:02x})"
            )));
        }
        if flags & FEXTRA != 0 {
            let len = u16::from_le_bytes([self.need(&mut hcrc)?, self.need(&mut hcrc)?]);
            for _ in 0..len {
                self.need(&mut hcrc)?;
            }
        }
        for flag in [FNAME, FCOMMENT] {
            if flags & flag != 0 {
                while self.need(&mut hcrc)? != 0 {}
            }
        }
        if flags & FHCRC != 0 {
            let computed = hcrc.clone().finalize() as u16;
            let mut ignore = crc32fast::Hasher::new();
            let stored = u16::from_le_bytes([self.need(&mut ignore)?, self.need(&mut ignore)?]);
            if stored != computed {
                return Err(corrupt(format!(
                    "{name}: the gzip header checksum does not match (0x{stored:04x} stored, \
                     0x{computed:04x} computed)"
                )));
            }
        }
        Ok(())
    }

    /// Inflates into `out`; returns how many bytes came out, 0 at the end.
    fn inflate_some(&mut self, out: &mut [u8]) -> Result<usize, Failure> {
        let name = self.name;
        loop {
            self.fill_input()?;
            let (in0, out0) = (self.inflate.total_in(), self.inflate.total_out());
            let status = self
                .inflate
                .decompress(
                    &self.inbuf[self.in_pos..self.in_len],
                    out,
                    FlushDecompress::None,
                )
                .map_err(|e| {
                    corrupt(format!(
                        "{name}: the compressed data is corrupt near byte {}",
                        self.header_len + in0
                    ))
                    .with_source(e)
                })?;
            let used = (self.inflate.total_in() - in0) as usize;
            let made = (self.inflate.total_out() - out0) as usize;
            self.in_pos += used;
            if made > 0 {
                self.crc.update(&out[..made]);
                self.check_ratio()?;
            }
            if status == Status::StreamEnd {
                self.trailer()?;
                self.state = State::Done;
                return Ok(made);
            }
            if made > 0 {
                return Ok(made);
            }
            if used == 0 && self.in_pos == self.in_len && self.eof {
                return Err(corrupt(format!(
                    "{name} is truncated: it ends after {} bytes, inside the compressed data",
                    self.read_total
                )));
            }
            if used == 0 && self.in_pos < self.in_len {
                return Err(corrupt(format!(
                    "{name}: the compressed data is corrupt near byte {} (inflate made no progress)",
                    self.header_len + in0
                )));
            }
        }
    }

    /// Stops a decompression bomb early: unpacked bytes may not outgrow the compressed bytes
    /// used for them by more than `max_ratio`, past a small allowance.
    fn check_ratio(&self) -> Result<(), Failure> {
        let (out, used) = (
            self.inflate.total_out(),
            self.header_len + self.inflate.total_in(),
        );
        if out > RATIO_ALLOWANCE && out / self.max_ratio.max(1) > used {
            return Err(too_large(format!(
                "{}: {} compressed bytes unpacked to {out} bytes, more than the {}:1 limit on the \
                 compression ratio (max_ratio); a decompression bomb?",
                self.name, used, self.max_ratio
            )));
        }
        Ok(())
    }

    /// Checks the CRC-32 and length trailer, then that nothing at all follows it.
    fn trailer(&mut self) -> Result<(), Failure> {
        let name = self.name;
        let mut t = [0u8; 8];
        for (i, b) in t.iter_mut().enumerate() {
            *b = self.framing_byte()?.ok_or_else(|| {
                corrupt(format!(
                    "{name} is truncated: it ends after {} bytes, inside the gzip trailer \
                     ({i} of 8 bytes)",
                    self.read_total
                ))
            })?;
        }
        let stored_crc = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        let stored_len = u32::from_le_bytes([t[4], t[5], t[6], t[7]]);
        let crc = self.crc.clone().finalize();
        if stored_crc != crc {
            return Err(corrupt(format!(
                "{name}: the gzip CRC-32 check fails (trailer says 0x{stored_crc:08x}, the data \
                 gives 0x{crc:08x}); the copy is damaged"
            )));
        }
        let len = self.inflate.total_out();
        if u64::from(stored_len) != len & 0xffff_ffff {
            return Err(corrupt(format!(
                "{name}: the gzip length check fails (trailer says {stored_len} bytes, the data \
                 is {len} bytes); the copy is damaged"
            )));
        }
        self.fill_input()?;
        let rest = &self.inbuf[self.in_pos..self.in_len];
        if rest.is_empty() {
            return Ok(());
        }
        let at = self.read_total - rest.len() as u64;
        Err(corrupt(if rest.starts_with(&[0x1f, 0x8b]) {
            format!(
                "{name}: a second gzip member starts at byte {at}; the archive must be a single \
                 gzip member"
            )
        } else if rest.iter().all(|&b| b == 0) {
            format!(
                "{name}: zero bytes follow the gzip trailer at byte {at}; the file was padded \
                 or copied onto a larger extent"
            )
        } else {
            format!("{name}: unexpected data follows the gzip trailer at byte {at}")
        }))
    }
}
