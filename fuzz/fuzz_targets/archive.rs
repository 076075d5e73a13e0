//! Feeds arbitrary bytes to the archive pass: as a tar stream wrapped in a valid gzip member
//! when the first byte is even (to reach the tar walk and the policy), as the compressed
//! bytes themselves when it is odd. Every call must return without panicking and leave
//! nothing behind in the staging parent, whatever it decided.
#![no_main]

use etcd_setup::road::archive::{extract, Limits, Policy};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn staging_parent() -> &'static PathBuf {
    static PARENT: OnceLock<PathBuf> = OnceLock::new();
    PARENT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("etcd-setup-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the staging parent");
        dir
    })
}

/// `data` as one gzip member of stored (uncompressed) deflate blocks.
fn stored_gzip(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    let mut chunks = data.chunks(0xffff).peekable();
    if data.is_empty() {
        out.extend([1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        out.push(u8::from(chunks.peek().is_none()));
        let len = chunk.len() as u16;
        out.extend(len.to_le_bytes());
        out.extend((!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend(crc32(data).to_le_bytes());
    out.extend((data.len() as u32).to_le_bytes());
    out
}

/// CRC-32 (IEEE), bit by bit: slow, but the target stays free of extra dependencies.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let input = if mode & 1 == 0 {
        stored_gzip(rest)
    } else {
        rest.to_vec()
    };
    let policy = Policy {
        limits: Limits {
            max_entries: 64,
            max_file_size: 1 << 20,
            max_total_size: 4 << 20,
            max_ratio: 20,
        },
        ..Policy::default()
    };
    drop(extract(&input[..], "fuzz.tar.gz", staging_parent(), &policy));
    let left = std::fs::read_dir(staging_parent())
        .expect("list the staging parent")
        .count();
    assert_eq!(left, 0, "the archive pass left something behind");
});
