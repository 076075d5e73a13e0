//! Feeds arbitrary bytes to the ISO 9660 reader as an image: every call must return,
//! without panicking, in bounded time and memory, and a file (zisofs ones included) never
//! yields more bytes than its size.
//!
//! The input is the image from sector 16 on: the target puts 16 zero sectors (the system
//! area, which the reader never interprets) in front, so the fuzzer spends its mutations on
//! descriptors and directories rather than on 32 KiB of padding. `seed-iso` strips them
//! from its seeds accordingly.
#![no_main]

use etcd_setup::road::iso9660::{IsoImage, SECTOR};
use libfuzzer_sys::fuzz_target;
use std::io::{Cursor, Read};

const SYSTEM_AREA: usize = 16 * SECTOR as usize;

fuzz_target!(|data: &[u8]| {
    let mut image = vec![0u8; SYSTEM_AREA + data.len()];
    image[SYSTEM_AREA..].copy_from_slice(data);
    let Ok(mut iso) = IsoImage::open(Cursor::new(image.as_slice())) else {
        return;
    };
    let _ = iso.volume_label();
    let _ = iso.naming().as_str();
    let _ = iso.list_root();
    for path in [
        "etcd/etcd-linux-amd64.tar.gz",
        "ETCD/ETCD_LIN.GZ",
        "a/b/c/d",
    ] {
        let Ok(Some(file)) = iso.find(path) else {
            continue;
        };
        let Ok(mut reader) = iso.open_file(&file) else {
            continue;
        };
        let mut buf = [0u8; 4096];
        let mut total = 0u64;
        // A zisofs file may declare 4 GiB of empty blocks in a few sectors (Linux reads it
        // too; the archive pass's caps bound it in the product): read the first 16 MiB.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || total >= 16 << 20 {
                break;
            }
            total += n as u64;
        }
        assert!(total <= file.size, "read more than the file's size");
    }
});
