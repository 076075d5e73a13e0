//! The tar walk: reads ustar, GNU and PAX headers from the unpacked stream, enforces the
//! entry policy and hands regular files and folders to the [`Tree`].
//!
//! Written here rather than on the `tar` crate so that every byte is accounted for: metadata
//! headers (PAX `x`, GNU `L`/`K`) are bounded before they are buffered, a PAX `size` governs
//! where the next header starts exactly as it governs what is written, and the stream after
//! the end-of-archive marker is read to its end so the gzip trailer gets checked.

use super::tree::Tree;
use super::unpacked::Unpacked;
use super::{corrupt, names, too_large, unsafe_entry, Failure, Limits};
use crate::reason::ReasonCode;

const BLOCK: usize = 512;
/// Largest PAX or GNU long-name header accepted: names are at most 1 KiB, and an etcd
/// release carries no other metadata worth more.
const MAX_META: u64 = 64 * 1024;

/// Overrides gathered from a PAX extended header for the entry that follows.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    size: Option<u64>,
    linkpath: Option<Vec<u8>>,
    sparse: bool,
}

/// Metadata headers seen since the last entry.
#[derive(Default)]
struct Pending {
    pax: Option<Pax>,
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.pax.is_none() && self.long_name.is_none() && self.long_link.is_none()
    }
}

/// Walks the tar stream in `gz` to its end, writing into `tree` what the policy allows;
/// returns the bytes of regular files written.
pub(super) fn walk(
    gz: &mut Unpacked,
    tree: &mut Tree<'_>,
    limits: &Limits,
    archive: &str,
) -> Result<u64, Failure> {
    let mut unpacked = 0u64;
    let mut pending = Pending::default();
    loop {
        let at = gz.position();
        let mut block = [0u8; BLOCK];
        match read_full(gz, &mut block)? {
            BLOCK => {}
            0 => {
                return Err(corrupt(format!(
                    "{archive}: the tar stream ends at byte {at} without its end-of-archive marker"
                )))
            }
            n => {
                return Err(corrupt(format!(
                    "{archive}: the tar stream ends inside a header, {n} bytes after byte {at}"
                )))
            }
        }
        if block.iter().all(|&b| b == 0) {
            if !pending.is_empty() {
                return Err(corrupt(format!(
                    "{archive}: a PAX or GNU long-name header before byte {at} has no entry \
                     after it"
                )));
            }
            end_of_archive(gz, archive)?;
            return Ok(unpacked);
        }
        let header = Header(&block);
        if !header.checksum_ok() {
            return Err(corrupt(format!(
                "{archive}: the tar header at byte {at} of the unpacked stream has a bad checksum"
            )));
        }
        let typeflag = block[156];
        if let b'x' | b'L' | b'K' = typeflag {
            let size = header.size(archive, at)?;
            if size > MAX_META {
                return Err(too_large(format!(
                    "{archive}: the metadata header at byte {at} is {size} bytes; the limit for \
                     PAX and GNU long-name headers is {MAX_META} bytes"
                )));
            }
            let mut data = vec![0; size as usize];
            if read_full(gz, &mut data)? != data.len() {
                return Err(truncated_in(archive, "a metadata header", at));
            }
            skip_padding(gz, size, archive, at)?;
            if typeflag != b'x' && pending.pax.is_some() {
                return Err(unsafe_entry(
                    archive,
                    &format!("at byte {at}"),
                    "is a GNU long-name header after a PAX header, which extractors read \
                     differently",
                ));
            }
            let twice = match typeflag {
                b'x' => pending
                    .pax
                    .replace(parse_pax(&data, archive, at)?)
                    .is_some(),
                b'L' => pending.long_name.replace(trim_nuls(data)).is_some(),
                _ => pending.long_link.replace(trim_nuls(data)).is_some(),
            };
            if twice {
                return Err(unsafe_entry(
                    archive,
                    &format!("at byte {at}"),
                    "is a second metadata header of the same kind for one entry",
                ));
            }
            continue;
        }
        let pending = std::mem::take(&mut pending);
        let pax = pending.pax.unwrap_or_default();
        let raw_name = match (&pax.path, pending.long_name) {
            (Some(_), Some(_)) => {
                let shown = shown(&header.name().unwrap_or_default());
                return Err(unsafe_entry(
                    archive,
                    &shown,
                    "has both a GNU long name and a PAX path, which extractors read differently",
                ));
            }
            (Some(path), None) => path.clone(),
            (None, Some(long)) => long,
            (None, None) => header
                .name()
                .map_err(|why| unsafe_entry(archive, &format!("at byte {at}"), why))?,
        };
        let shown = shown(&raw_name);
        let is_dir = match typeflag {
            b'0' | 0 if !pax.sparse => false,
            b'5' => true,
            _ => {
                let link = pax
                    .linkpath
                    .or(pending.long_link)
                    .unwrap_or_else(|| until_nul(&block[157..257]).to_vec());
                let what = refused_type(typeflag, pax.sparse, &String::from_utf8_lossy(&link));
                return Err(unsafe_entry(
                    archive,
                    &shown,
                    &format!("{what}; only regular files and folders are allowed"),
                ));
            }
        };
        let parts = names::components(&raw_name, is_dir)
            .map_err(|why| unsafe_entry(archive, &shown, why))?;
        let size = match pax.size {
            Some(size) => size,
            None => header.size(archive, at)?,
        };
        if is_dir {
            if size != 0 {
                return Err(unsafe_entry(
                    archive,
                    &shown,
                    &format!("is a folder that carries {size} bytes of data"),
                ));
            }
            tree.dir(&parts, &shown)?;
            continue;
        }
        if size > limits.max_file_size {
            return Err(too_large(format!(
                "{archive}: entry {shown} is {size} bytes, above the {}-byte limit per file \
                 (max_file_size)",
                limits.max_file_size
            )));
        }
        unpacked = unpacked.saturating_add(size);
        if unpacked > limits.max_total_size {
            return Err(too_large(format!(
                "{archive} unpacks to more than {} bytes (max_total_size), reached at entry {shown}",
                limits.max_total_size
            )));
        }
        let exec = header.mode(archive, at)? & 0o111 != 0;
        let mut sink = tree.file(&parts, &shown, exec, size)?;
        let mut left = size;
        while left > 0 {
            let buf = gz.fill_buf()?;
            if buf.is_empty() {
                return Err(corrupt(format!(
                    "{archive}: the tar stream ends inside entry {shown} ({} of {size} bytes)",
                    size - left
                )));
            }
            let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            sink.write(&buf[..n])?;
            gz.consume(n);
            left -= n as u64;
        }
        tree.close(sink, &shown)?;
        skip_padding(gz, size, archive, at)?;
    }
}

/// After the first zero block: a second one, then nothing but zeros to the end of the stream
/// (GNU tar pads to a 10 KiB record). Data hidden there is refused: `tar -i` would extract it.
fn end_of_archive(gz: &mut Unpacked, archive: &str) -> Result<(), Failure> {
    let mut zeros = 0u64;
    loop {
        let at = gz.position();
        let buf = gz.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        if let Some(i) = buf.iter().position(|&b| b != 0) {
            return Err(Failure::new(
                ReasonCode::ArchiveUnsafe,
                format!(
                    "{archive}: data at byte {} follows the tar end-of-archive marker; \
                     tar -i would unpack what this check never saw",
                    at + i as u64
                ),
            ));
        }
        let n = buf.len();
        gz.consume(n);
        zeros += n as u64;
    }
    if zeros < BLOCK as u64 {
        return Err(corrupt(format!(
            "{archive}: the tar stream ends after a single zero block; the end-of-archive \
             marker is two"
        )));
    }
    Ok(())
}

/// Reads until `buf` is full or the stream ends; returns how much was read.
fn read_full(gz: &mut Unpacked, buf: &mut [u8]) -> Result<usize, Failure> {
    let mut got = 0;
    while got < buf.len() {
        let avail = gz.fill_buf()?;
        if avail.is_empty() {
            break;
        }
        let n = avail.len().min(buf.len() - got);
        buf[got..got + n].copy_from_slice(&avail[..n]);
        gz.consume(n);
        got += n;
    }
    Ok(got)
}

/// Skips the zero fill after `size` bytes of entry data, up to the next 512-byte boundary.
fn skip_padding(gz: &mut Unpacked, size: u64, archive: &str, at: u64) -> Result<(), Failure> {
    let pad = (BLOCK - (size % BLOCK as u64) as usize) % BLOCK;
    let mut scratch = [0u8; BLOCK];
    if read_full(gz, &mut scratch[..pad])? != pad {
        return Err(truncated_in(archive, "the padding of an entry", at));
    }
    Ok(())
}

fn truncated_in(archive: &str, what: &str, at: u64) -> Failure {
    corrupt(format!(
        "{archive}: the tar stream ends inside {what} (header at byte {at})"
    ))
}

/// How a refused entry type reads in a message.
fn refused_type(typeflag: u8, sparse: bool, link: &str) -> String {
    match typeflag {
        _ if sparse => "is a GNU sparse file (PAX GNU.sparse records)".to_string(),
        b'1' => format!("is a hard link to {link:?}"),
        b'2' => format!("is a symbolic link to {link:?}"),
        b'3' => "is a character device".to_string(),
        b'4' => "is a block device".to_string(),
        b'6' => "is a FIFO".to_string(),
        b'7' => "is a contiguous file (type 7)".to_string(),
        b'S' => "is a GNU sparse file".to_string(),
        b'g' => "is a PAX global header".to_string(),
        t if t.is_ascii_graphic() => format!("has the entry type {:?}", t as char),
        t => format!("has the entry type byte 0x{t:02x}"),
    }
}

/// A name as messages show it: quoted, with odd bytes escaped.
fn shown(raw: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(raw))
}

fn until_nul(field: &[u8]) -> &[u8] {
    field.split(|&b| b == 0).next().unwrap_or_default()
}

/// A GNU long name or link is NUL-terminated; NULs inside are left for the name check.
fn trim_nuls(mut data: Vec<u8>) -> Vec<u8> {
    while data.last() == Some(&0) {
        data.pop();
    }
    data
}

/// Parses PAX records, `"<len> <key>=<value>\n"`; an empty value cancels the key.
fn parse_pax(mut data: &[u8], archive: &str, at: u64) -> Result<Pax, Failure> {
    let bad = |what: &str| corrupt(format!("{archive}: the PAX header at byte {at} has {what}"));
    let mut pax = Pax::default();
    while !data.is_empty() {
        let space = data
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| bad("a record without a length"))?;
        let len = decimal(&data[..space])
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > space + 1 && n <= data.len())
            .ok_or_else(|| bad("a record with a bad length"))?;
        let record = data[space + 1..len]
            .strip_suffix(b"\n")
            .ok_or_else(|| bad("a record without its newline"))?;
        let eq = record
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| bad("a record without ="))?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        let value = (!value.is_empty()).then(|| value.to_vec());
        match key {
            b"path" => pax.path = value,
            b"linkpath" => pax.linkpath = value,
            b"size" => {
                pax.size = match value {
                    Some(v) => Some(decimal(&v).ok_or_else(|| bad("a malformed size"))?),
                    None => None,
                }
            }
            k if k.starts_with(b"GNU.sparse.") => pax.sparse = true,
            _ => {}
        }
        data = &data[len..];
    }
    Ok(pax)
}

/// A plain decimal number, digits only.
fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// A 512-byte ustar, GNU or v7 header.
struct Header<'a>(&'a [u8; BLOCK]);

impl Header<'_> {
    /// The stored checksum matches the header's bytes (summed unsigned, or signed as some
    /// old tars did), counting the checksum field itself as spaces.
    fn checksum_ok(&self) -> bool {
        let Some(stored) = octal(&self.0[148..156]) else {
            return false;
        };
        let (mut unsigned, mut signed) = (0u64, 0i64);
        for (i, &b) in self.0.iter().enumerate() {
            let b = if (148..156).contains(&i) { b' ' } else { b };
            unsigned += u64::from(b);
            signed += i64::from(b as i8);
        }
        stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed)
    }

    fn size(&self, archive: &str, at: u64) -> Result<u64, Failure> {
        octal(&self.0[124..136]).ok_or_else(|| {
            corrupt(format!(
                "{archive}: the tar header at byte {at} has a malformed size field"
            ))
        })
    }

    fn mode(&self, archive: &str, at: u64) -> Result<u64, Failure> {
        octal(&self.0[100..108]).ok_or_else(|| {
            corrupt(format!(
                "{archive}: the tar header at byte {at} has a malformed mode field"
            ))
        })
    }

    /// The name from the header alone: POSIX ustar's `prefix/name`, else `name`. Bytes after
    /// a field's first NUL must be NULs too: anything else is a name smuggled past a C
    /// reader.
    fn name(&self) -> Result<Vec<u8>, &'static str> {
        let field = |range: std::ops::Range<usize>| {
            let f = &self.0[range];
            let s = until_nul(f);
            if f[s.len()..].iter().all(|&b| b == 0) {
                Ok(s)
            } else {
                Err("has a NUL byte in its name")
            }
        };
        let name = field(0..100)?;
        let ustar = self.0[257..263] == *b"ustar\0";
        let prefix = if ustar { field(345..500)? } else { &[] };
        Ok(if prefix.is_empty() {
            name.to_vec()
        } else {
            [prefix, b"/", name].concat()
        })
    }
}

/// A tar numeric field: octal digits (leading spaces, ended by NUL or space; empty is 0), or
/// GNU's base-256 with the top bit of the first byte set.
fn octal(field: &[u8]) -> Option<u64> {
    if let Some((&first, rest)) = field.split_first() {
        if first & 0x80 != 0 {
            if first & 0x40 != 0 {
                return None; // negative
            }
            return rest.iter().try_fold(u64::from(first & 0x3f), |n, &b| {
                n.checked_mul(256)?.checked_add(u64::from(b))
            });
        }
    }
    let start = field.iter().position(|&b| b != b' ').unwrap_or(field.len());
    let digits = &field[start..];
    let end = digits
        .iter()
        .position(|&b| b == 0 || b == b' ')
        .unwrap_or(digits.len());
    if !digits[end..].iter().all(|&b| b == 0 || b == b' ') {
        return None;
    }
    digits[..end].iter().try_fold(0u64, |n, &b| match b {
        b'0'..=b'7' => n.checked_mul(8)?.checked_add(u64::from(b - b'0')),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_octal_and_base256_numbers() {
        assert_eq!(octal(b"00000001750\0"), Some(1000));
        assert_eq!(octal(b"   644 \0"), Some(0o644));
        assert_eq!(octal(b"\0\0\0\0"), Some(0));
        assert_eq!(octal(b"0009\0"), None);
        assert_eq!(octal(b"07 7\0"), None);
        let mut big = [0u8; 12];
        big[0] = 0x80;
        big[11] = 1;
        big[10] = 2;
        assert_eq!(octal(&big), Some(513));
        big[0] = 0xff;
        assert_eq!(octal(&big), None);
        assert_eq!(octal(&[0xbf; 12]), None);
    }

    #[test]
    fn parses_pax_records() {
        let data = b"32 path=etcd-v3.5.1-linux-amd64\n11 size=42\n9 mtime=\n";
        let pax = parse_pax(data, "a", 0).unwrap();
        assert_eq!(pax.path.as_deref(), Some(&b"etcd-v3.5.1-linux-amd64"[..]));
        assert_eq!(pax.size, Some(42));
        assert!(!pax.sparse);
        for bad in [
            &b"99 path=x\n"[..],
            b"7 path=x",
            b"x path=x\n",
            b"8 pathx\n",
            b"10 size=4x\n",
        ] {
            assert!(parse_pax(bad, "a", 0).is_err(), "{bad:?}");
        }
        let sparse = parse_pax(b"22 GNU.sparse.major=1\n", "a", 0).unwrap();
        assert!(sparse.sparse);
    }
}
