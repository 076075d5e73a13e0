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
fn iso_names_read_as_linux_shows_them() {
    assert_eq!(iso_name(b"FOO.;1"), "foo");
    assert_eq!(iso_name(b"A.TAR.GZ;1"), "a.tar.gz");
    assert_eq!(iso_name(b"DIR"), "dir");
    assert_eq!(iso_name(b"X;Y"), "x.y");
    assert_eq!(iso_name(b"OLD.;2"), "old..2");
    assert_eq!(ucs2_be(&[0, b'e', 0, b't', 0]), "et");
    assert_eq!(ucs2_be(&[0, b'e', 0, 0, 0, b't']), "e");
    let utf16 = |s: &str| -> Vec<u8> { s.encode_utf16().flat_map(u16::to_be_bytes).collect() };
    assert_eq!(joliet_name(&utf16("Etcd.tar.gz;1")), "Etcd.tar.gz");
    assert_eq!(joliet_name(&utf16("dots...;1")), "dots");
    assert_eq!(joliet_name(&utf16(".")), ".");
    assert!(names_match(Naming::Joliet, "ReadMe.TXT", "readme.txt."));
    assert!(!names_match(Naming::RockRidge, "ReadMe.TXT", "readme.txt"));
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
    assert_eq!((file.path.as_str(), file.size), ("big", 2148));
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
    let file = iso.find("f").unwrap().unwrap();
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
    let file = iso.find("late").unwrap().unwrap();
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
    assert_eq!(img.open().unwrap().list_root().unwrap(), ["plain"]);
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
fn rock_ridge_name_stops_growing_before_254_bytes_as_in_linux() {
    let mut img = Img::new(24);
    let mut su = nm(1, &[b'a'; 100]);
    su.extend(ce(19, 0, 2000));
    img.root(&SP, &[record(b"A.;1", 20, 1, 0, &su)]);
    let area: Vec<u8> = (0..10).flat_map(|_| nm(1, &[b'b'; 100])).collect();
    img.put(19 * S, &area);
    let mut iso = img.open().unwrap();
    let kept = format!("{}{}", "a".repeat(100), "b".repeat(100));
    assert_eq!(iso.list_root().unwrap(), std::slice::from_ref(&kept));
    assert!(iso.find(&kept).unwrap().is_some());
}

/// An image whose root directory holds `bytes` of valid records, the last one
/// `LAST.;1`.
fn root_of(bytes: usize) -> Img {
    let sectors = bytes / S;
    let mut img = Img::new(18 + sectors + 1);
    img.descriptor(16, 1, b"PRIMARY", 18, bytes as u32);
    img.root(&[], &[]);
    let mut n = 0;
    for sector in 18..18 + sectors {
        let mut at = sector * S + if sector == 18 { 68 } else { 0 };
        loop {
            let id = if sector + 1 == 18 + sectors && at + 2 * 42 > (sector + 1) * S {
                b"LAST.;1".to_vec()
            } else {
                format!("F{n:07}.;1").into_bytes()
            };
            let r = record(&id, 0, 0, 0, &[]);
            if at + r.len() > (sector + 1) * S {
                break;
            }
            img.put(at, &r);
            at += r.len();
            n += 1;
        }
    }
    img
}

#[test]
fn root_directory_beyond_the_directory_bound_is_a_limit_not_corruption() {
    let img = root_of(17 << 20);
    let mut iso = img.open().unwrap();
    let err = iso.find("last").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, IsoError::Limit(_)), "{msg}");
    assert!(
        msg.contains("the root directory at sector 18 holds 17825792 bytes of records (17 MiB), more than the 16 MiB"),
        "{msg}"
    );
    assert!(
        msg.contains("MAX_DIR_BYTES") && msg.contains("fewer names"),
        "{msg}"
    );
    assert!(!msg.contains("corrupt"), "{msg}");
    assert!(matches!(iso.list_root(), Err(IsoError::Limit(_))));
    // A root of exactly the bound is read to its last record.
    let img = root_of(MAX_DIR_BYTES as usize);
    let mut iso = img.open().unwrap();
    assert_eq!(iso.find("last").unwrap().unwrap().path, "last");
}

fn px(mode: u32) -> Vec<u8> {
    let mut e = vec![b'P', b'X', 36, 1];
    for v in [mode, 1, 0, 0] {
        e.extend_from_slice(&both32(v));
    }
    e
}

#[test]
fn fifo_device_or_socket_on_the_path_is_not_a_regular_file() {
    let kinds = [
        (0o010644, "FIFO"),
        (0o020644, "character device"),
        (0o060644, "block device"),
        (0o140644, "socket"),
    ];
    for (mode, kind) in kinds {
        for (path, want) in [("f", "f"), ("f/g", "f")] {
            let mut img = Img::new(24);
            let mut su = nm(0, b"f");
            su.extend(px(mode));
            img.root(&SP, &[record(b"F.;1", 20, 1, 0, &su)]);
            let err = img.open().unwrap().find(path).unwrap_err();
            assert!(err.is_unsafe(), "{err}");
            assert_eq!(
                err.to_string(),
                format!("{want} is a Rock Ridge {kind}, not a regular file")
            );
        }
    }
    // A regular PX mode is a file.
    let mut img = Img::new(24);
    let mut su = nm(0, b"f");
    su.extend(px(0o100644));
    img.root(&SP, &[record(b"F.;1", 20, 1, 0, &su)]);
    assert!(img.open().unwrap().find("f").unwrap().is_some());
}

#[test]
fn link_target_with_control_characters_is_shown_on_one_line() {
    let mut img = Img::new(24);
    let mut su = nm(0, b"l");
    // SL: flags 0, then one component "a\nb\x1b[31m".
    let target = b"a\nb\x1b[31m";
    su.extend([
        b'S',
        b'L',
        5 + 2 + target.len() as u8,
        1,
        0,
        0,
        target.len() as u8,
    ]);
    su.extend_from_slice(target);
    img.root(&SP, &[record(b"L.;1", 20, 0, 0, &su)]);
    let msg = img.open().unwrap().find("l").unwrap_err().to_string();
    assert!(!msg.contains('\n') && !msg.contains('\x1b'), "{msg}");
    assert!(msg.contains("link to a\\nb\\u{1b}[31m"), "{msg}");
}
