//! Reading one top-level bucket of a bbolt database (etcd's backend, which a snapshot
//! file is, with or without its SHA-256 trailer) without etcd's tools: enough to learn
//! which members a snapshot's cluster had (`members`), read-only and bounded.
//!
//! The format (go.etcd.io/bbolt, version 2): pages of `page_size` bytes; pages 0 and 1
//! hold the meta (magic `0xED0CDAED`, version, page size, the root bucket's page, the
//! transaction ID, an FNV-1a checksum), the newer valid one counts; a B+tree of branch
//! pages (elements: key, child page) and leaf pages (elements: flags, key, value); a leaf
//! element flagged as a bucket holds the bucket's root page, or (root 0) the bucket's own
//! leaf page inline in the value. All numbers are little-endian (amd64 and arm64).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

const MAGIC: u32 = 0xED0C_DAED;
const VERSION: u32 = 2;
const PAGE_HEADER: usize = 16;
const ELEMENT: usize = 16;
const BRANCH: u16 = 0x01;
const LEAF: u16 = 0x02;
const BUCKET_FLAG: u32 = 0x01;
/// Deeper than any real tree (a depth of 10 holds more keys than a disk).
const MAX_DEPTH: usize = 32;
/// Pages one lookup may read before it gives up (a bucket of members is one page).
const MAX_PAGES: usize = 100_000;

/// An opened database.
pub struct Db {
    file: File,
    size: u64,
    page_size: u64,
    root: u64,
}

/// One leaf element: flags, key, value.
type Element = (u32, Vec<u8>, Vec<u8>);

/// A bucket's key-value pairs, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A bucket's count of key-value pairs and its last key.
pub type Count = (u64, Option<Vec<u8>>);

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// bbolt's meta checksum: FNV-1a 64 over the meta's fields before it.
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The meta at `buf` (a page's bytes from its start): (page size, root page, txid).
fn meta(buf: &[u8]) -> Option<(u64, u64, u64)> {
    let m = buf.get(PAGE_HEADER..PAGE_HEADER + 64)?;
    if u32_at(m, 0)? != MAGIC || u32_at(m, 4)? != VERSION || fnv1a(&m[..56]) != u64_at(m, 56)? {
        return None;
    }
    let page_size = u64::from(u32_at(m, 8)?);
    if !(512..=1 << 16).contains(&page_size) || !page_size.is_power_of_two() {
        return None;
    }
    Some((page_size, u64_at(m, 16)?, u64_at(m, 48)?))
}

impl Db {
    /// Opens `path` (a regular file, opened without blocking) and reads its meta.
    pub fn open(path: &Path) -> Result<Db, String> {
        use std::os::unix::fs::OpenOptionsExt;
        // Without blocking: a FIFO planted at its name must not hang the caller.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let m = file.metadata().map_err(|e| e.to_string())?;
        if !m.is_file() {
            return Err(format!("{} is not a regular file", path.display()));
        }
        let size = m.len();
        let mut first = vec![0u8; 4096.min(size as usize)];
        file.read_exact_at(&mut first, 0)
            .map_err(|e| format!("cannot read its first page: {e}"))?;
        let m0 = meta(&first);
        let m1 = m0
            .map(|(ps, _, _)| ps)
            .or_else(|| {
                // Meta 0 damaged: meta 1 sits one page on, at a page size we must guess.
                [4096u64, 16384, 65536, 8192, 512, 1024, 2048, 32768]
                    .into_iter()
                    .find(|&ps| {
                        let mut b = vec![0u8; PAGE_HEADER + 64];
                        file.read_exact_at(&mut b, ps).is_ok() && meta(&b).is_some()
                    })
            })
            .and_then(|ps| {
                let mut b = vec![0u8; PAGE_HEADER + 64];
                file.read_exact_at(&mut b, ps).ok()?;
                meta(&b)
            });
        let (page_size, root, _) = match (m0, m1) {
            (Some(a), Some(b)) => {
                if b.2 > a.2 {
                    b
                } else {
                    a
                }
            }
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return Err("no valid bbolt meta page".into()),
        };
        Ok(Db {
            file,
            size,
            page_size,
            root,
        })
    }

    /// The bytes of page `id` with its overflow pages.
    fn page(&self, id: u64, budget: &mut usize) -> Result<Vec<u8>, String> {
        if *budget == 0 {
            return Err(format!("more than {MAX_PAGES} pages to read"));
        }
        *budget -= 1;
        let at = id
            .checked_mul(self.page_size)
            .filter(|&at| at + self.page_size <= self.size)
            .ok_or_else(|| format!("page {id} lies past the end of the file"))?;
        let mut head = vec![0u8; self.page_size as usize];
        self.file
            .read_exact_at(&mut head, at)
            .map_err(|e| format!("cannot read page {id}: {e}"))?;
        let overflow = u64::from(u32_at(&head, 12).unwrap_or(0));
        if overflow == 0 {
            return Ok(head);
        }
        let len = (overflow + 1)
            .checked_mul(self.page_size)
            .filter(|&len| at + len <= self.size && len <= 64 << 20)
            .ok_or_else(|| format!("page {id} overflows past the end of the file"))?;
        let mut all = vec![0u8; len as usize];
        self.file
            .read_exact_at(&mut all, at)
            .map_err(|e| format!("cannot read page {id}: {e}"))?;
        Ok(all)
    }

    /// Every leaf element of the tree whose root page is `id`, in key order.
    fn tree(
        &self,
        id: u64,
        depth: usize,
        budget: &mut usize,
        out: &mut dyn FnMut(Element),
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("the tree is deeper than any real one (a loop?)".into());
        }
        let page = self.page(id, budget)?;
        match u16_at(&page, 8) {
            Some(f) if f & BRANCH != 0 => {
                let count = usize::from(u16_at(&page, 10).unwrap_or(0));
                for i in 0..count {
                    let e = PAGE_HEADER + i * ELEMENT;
                    let child = u64_at(&page, e + 8).ok_or("a branch element is cut short")?;
                    self.tree(child, depth + 1, budget, out)?;
                }
                Ok(())
            }
            Some(f) if f & LEAF != 0 => leaf(&page, out),
            _ => Err(format!("page {id} is neither a branch nor a leaf")),
        }
    }

    /// The key-value pairs of the top-level bucket `name` (none if it is absent); nested
    /// buckets are left out.
    pub fn bucket(&self, name: &[u8]) -> Result<Option<Pairs>, String> {
        let mut pairs = Vec::new();
        let found = self.each(name, MAX_PAGES, &mut |(f, k, v)| {
            if f & BUCKET_FLAG == 0 {
                pairs.push((k, v));
            }
        })?;
        Ok(found.then_some(pairs))
    }

    /// How many key-value pairs the top-level bucket `name` holds and its last key (none
    /// if it is absent), reading at most `max_pages` pages and holding one at a time.
    pub fn count(&self, name: &[u8], max_pages: usize) -> Result<Option<Count>, String> {
        let (mut n, mut last) = (0u64, None);
        let found = self.each(name, max_pages, &mut |(f, k, _)| {
            if f & BUCKET_FLAG == 0 {
                n += 1;
                last = Some(k);
            }
        })?;
        Ok(found.then_some((n, last)))
    }

    /// The value of the top-level bucket `name` in the root tree (its header, and its
    /// leaf page when inline), if it is there.
    fn bucket_value(&self, name: &[u8], budget: &mut usize) -> Result<Option<Vec<u8>>, String> {
        let mut value = None;
        self.tree(self.root, 0, budget, &mut |(fl, k, v)| {
            if fl & BUCKET_FLAG != 0 && k == name {
                value = Some(v);
            }
        })?;
        Ok(value)
    }

    /// The last key of the top-level bucket `name` (none if it is absent or empty), read
    /// down the tree's right edge: a few pages, whatever the database's size.
    pub fn last_key(&self, name: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let mut budget = MAX_PAGES;
        let Some(value) = self.bucket_value(name, &mut budget)? else {
            return Ok(None);
        };
        let mut last = None;
        let mut keep = |(f, k, _): Element| {
            if f & BUCKET_FLAG == 0 {
                last = Some(k);
            }
        };
        let mut id = u64_at(&value, 0).ok_or("a bucket header is cut short")?;
        if id == 0 {
            leaf(value.get(16..).unwrap_or_default(), &mut keep)?;
            return Ok(last);
        }
        for _ in 0..=MAX_DEPTH {
            let page = self.page(id, &mut budget)?;
            match u16_at(&page, 8) {
                Some(f) if f & BRANCH != 0 => {
                    let count = usize::from(u16_at(&page, 10).unwrap_or(0));
                    let Some(i) = count.checked_sub(1) else {
                        return Ok(None);
                    };
                    id = u64_at(&page, PAGE_HEADER + i * ELEMENT + 8)
                        .ok_or("a branch element is cut short")?;
                }
                Some(f) if f & LEAF != 0 => {
                    leaf(&page, &mut keep)?;
                    return Ok(last);
                }
                _ => return Err(format!("page {id} is neither a branch nor a leaf")),
            }
        }
        Err("the tree is deeper than any real one (a loop?)".into())
    }

    /// Calls `f` with every element of the top-level bucket `name`, in key order;
    /// whether the bucket is there.
    fn each(
        &self,
        name: &[u8],
        max_pages: usize,
        f: &mut dyn FnMut(Element),
    ) -> Result<bool, String> {
        let mut budget = max_pages;
        let Some(value) = self.bucket_value(name, &mut budget)? else {
            return Ok(false);
        };
        let root = u64_at(&value, 0).ok_or("a bucket header is cut short")?;
        if root == 0 {
            leaf(value.get(16..).unwrap_or_default(), f)?;
        } else {
            self.tree(root, 1, &mut budget, f)?;
        }
        Ok(true)
    }
}

/// The elements of the leaf page `page` (positions count from each element's header).
fn leaf(page: &[u8], out: &mut dyn FnMut(Element)) -> Result<(), String> {
    let count = usize::from(u16_at(page, 10).ok_or("a leaf page is cut short")?);
    for i in 0..count {
        let e = PAGE_HEADER + i * ELEMENT;
        let short = || "a leaf element is cut short".to_string();
        let flags = u32_at(page, e).ok_or_else(short)?;
        let pos = u32_at(page, e + 4).ok_or_else(short)? as usize;
        let ksize = u32_at(page, e + 8).ok_or_else(short)? as usize;
        let vsize = u32_at(page, e + 12).ok_or_else(short)? as usize;
        let k0 = e.checked_add(pos).ok_or_else(short)?;
        let v0 = k0.checked_add(ksize).ok_or_else(short)?;
        let end = v0.checked_add(vsize).ok_or_else(short)?;
        let key = page.get(k0..v0).ok_or_else(short)?.to_vec();
        let value = page.get(v0..end).ok_or_else(short)?.to_vec();
        out((flags, key, value));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database of two pages of meta and one leaf page holding bucket `members`
    /// inline with one key, as bbolt lays it out.
    fn tiny(ps: usize) -> Vec<u8> {
        let mut db = vec![0u8; ps * 4];
        for (i, txid) in [(0usize, 7u64), (1, 8)] {
            let p = &mut db[i * ps..];
            p[8..10].copy_from_slice(&0x04u16.to_le_bytes());
            let m = &mut p[PAGE_HEADER..PAGE_HEADER + 64];
            m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            m[4..8].copy_from_slice(&VERSION.to_le_bytes());
            m[8..12].copy_from_slice(&(ps as u32).to_le_bytes());
            m[16..24].copy_from_slice(&3u64.to_le_bytes()); // root bucket at page 3
            m[48..56].copy_from_slice(&txid.to_le_bytes());
            let sum = fnv1a(&m[..56]);
            m[56..64].copy_from_slice(&sum.to_le_bytes());
        }
        // The inline bucket: header (root 0, sequence 0), then a leaf page with one pair.
        let mut inline = vec![0u8; 16 + PAGE_HEADER + ELEMENT];
        inline[16 + 8..16 + 10].copy_from_slice(&LEAF.to_le_bytes());
        inline[16 + 10..16 + 12].copy_from_slice(&1u16.to_le_bytes());
        let e = 16 + PAGE_HEADER;
        inline[e + 4..e + 8].copy_from_slice(&(ELEMENT as u32).to_le_bytes());
        inline[e + 8..e + 12].copy_from_slice(&2u32.to_le_bytes());
        inline[e + 12..e + 16].copy_from_slice(&3u32.to_le_bytes());
        inline.extend_from_slice(b"k1abc");
        // Page 3: the root leaf, one element: bucket `members`.
        let p = &mut db[3 * ps..];
        p[8..10].copy_from_slice(&LEAF.to_le_bytes());
        p[10..12].copy_from_slice(&1u16.to_le_bytes());
        let e = PAGE_HEADER;
        p[e..e + 4].copy_from_slice(&BUCKET_FLAG.to_le_bytes());
        p[e + 4..e + 8].copy_from_slice(&(ELEMENT as u32).to_le_bytes());
        p[e + 8..e + 12].copy_from_slice(&7u32.to_le_bytes());
        p[e + 12..e + 16].copy_from_slice(&(inline.len() as u32).to_le_bytes());
        let k = e + ELEMENT;
        p[k..k + 7].copy_from_slice(b"members");
        p[k + 7..k + 7 + inline.len()].copy_from_slice(&inline);
        db
    }

    fn open(bytes: &[u8]) -> (tempfile::TempDir, Result<Db, String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        std::fs::write(&path, bytes).unwrap();
        let db = Db::open(&path);
        (dir, db)
    }

    #[test]
    fn reads_an_inline_bucket_and_misses_an_absent_one() {
        let (_d, db) = open(&tiny(4096));
        let db = db.unwrap();
        assert_eq!(
            db.bucket(b"members").unwrap(),
            Some(vec![(b"k1".to_vec(), b"abc".to_vec())])
        );
        assert_eq!(db.bucket(b"meta").unwrap(), None);
    }

    #[test]
    fn the_last_key_of_an_inline_bucket() {
        let (_d, db) = open(&tiny(4096));
        let db = db.unwrap();
        assert_eq!(db.last_key(b"members").unwrap(), Some(b"k1".to_vec()));
        assert_eq!(db.last_key(b"key").unwrap(), None);
    }

    #[test]
    fn a_damaged_first_meta_falls_back_to_the_second() {
        let mut b = tiny(4096);
        b[PAGE_HEADER] ^= 0xff;
        let (_d, db) = open(&b);
        assert!(db.unwrap().bucket(b"members").unwrap().is_some());
        b[4096 + PAGE_HEADER] ^= 0xff;
        let (_d, db) = open(&b);
        assert!(db.err().unwrap().contains("no valid bbolt meta"));
    }

    #[test]
    fn elements_pointing_outside_their_page_are_errors_not_panics() {
        let mut b = tiny(4096);
        // The bucket element's value size made huge.
        let e = 3 * 4096 + PAGE_HEADER;
        b[e + 12..e + 16].copy_from_slice(&u32::MAX.to_le_bytes());
        let (_d, db) = open(&b);
        assert!(db.unwrap().bucket(b"members").is_err());
        // The root page past the end of the file.
        let mut b = tiny(4096);
        for i in 0..2 {
            let m = i * 4096 + PAGE_HEADER;
            b[m + 16..m + 24].copy_from_slice(&99u64.to_le_bytes());
            let sum = fnv1a(&b[m..m + 56]);
            b[m + 56..m + 64].copy_from_slice(&sum.to_le_bytes());
        }
        let (_d, db) = open(&b);
        let e = db.unwrap().bucket(b"members").unwrap_err();
        assert!(e.contains("past the end"), "{e}");
    }
}
