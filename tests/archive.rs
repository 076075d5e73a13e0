//! The archive pass against archives built here: every hostile shape rejected with its reason
//! code and a sentence naming the entry or limit, nothing left behind; good GNU, ustar and
//! PAX archives and the real etcd releases extracted.

use etcd_setup::reason::{Failure, ReasonCode};
use etcd_setup::road::archive::{
    extract, fsync_tree, remove_stale_staging, Extracted, Limits, Policy, Staging,
};
use etcd_setup::road::elf::Machine;
use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const TOP: &str = "etcd-v3.5.1-linux-amd64";
const NAME: &str = "test:etcd/etcd-linux-amd64.tar.gz";

// ---------------------------------------------------------------------------------------
// Building archives by hand, including the shapes no well-behaved writer produces.

/// A minimal ELF header prefix for a 64-bit little-endian executable.
fn elf(e_machine: u16) -> Vec<u8> {
    elf_with(2, 1, e_machine)
}

fn elf_with(class: u8, data: u8, e_machine: u16) -> Vec<u8> {
    let mut h = vec![0x7f, b'E', b'L', b'F', class, data, 1, 0];
    h.resize(16, 0);
    let (t, m) = if data == 2 {
        (2u16.to_be_bytes(), e_machine.to_be_bytes())
    } else {
        (2u16.to_le_bytes(), e_machine.to_le_bytes())
    };
    h.extend_from_slice(&t);
    h.extend_from_slice(&m);
    h.resize(64, 0);
    h.extend_from_slice(b"the rest of a fake etcd binary");
    h
}

fn amd64() -> Vec<u8> {
    elf(62)
}

fn write_octal(field: &mut [u8], value: u64) {
    let text = format!("{value:0width$o}\0", width = field.len() - 1);
    field.copy_from_slice(text.as_bytes());
}

/// A ustar header with any name, type, size field and link name.
fn header(name: &[u8], kind: u8, size: u64, mode: u64, link: &[u8]) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    write_octal(&mut h[100..108], mode);
    write_octal(&mut h[108..116], 0);
    write_octal(&mut h[116..124], 0);
    write_octal(&mut h[124..136], size);
    write_octal(&mut h[136..148], 1_700_000_000);
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    seal(&mut h);
    h
}

/// Writes the header checksum.
fn seal(h: &mut [u8; 512]) {
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// A tar stream written block by block.
#[derive(Default)]
struct Tar(Vec<u8>);

impl Tar {
    fn new() -> Tar {
        Tar::default()
    }

    /// A header whose size field says `size`, followed by `data` padded to a block.
    fn raw(mut self, name: &[u8], kind: u8, size: u64, mode: u64, link: &[u8], data: &[u8]) -> Tar {
        self.0
            .extend_from_slice(&header(name, kind, size, mode, link));
        self.data(data)
    }

    fn data(mut self, data: &[u8]) -> Tar {
        self.0.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.0.resize(self.0.len() + pad, 0);
        self
    }

    fn dir(self, name: &str) -> Tar {
        self.raw(name.as_bytes(), b'5', 0, 0o755, b"", b"")
    }

    fn file(self, name: &str, data: &[u8]) -> Tar {
        self.raw(name.as_bytes(), b'0', data.len() as u64, 0o644, b"", data)
    }

    fn exec(self, name: &str, data: &[u8]) -> Tar {
        self.raw(name.as_bytes(), b'0', data.len() as u64, 0o755, b"", data)
    }

    fn pax(self, records: &[(&str, &[u8])]) -> Tar {
        let mut body = Vec::new();
        for (key, value) in records {
            let rest = key.len() + value.len() + 3; // space, '=', newline
            let mut len = rest + 1;
            while len != rest + len.to_string().len() {
                len = rest + len.to_string().len();
            }
            body.extend_from_slice(format!("{len} {key}=").as_bytes());
            body.extend_from_slice(value);
            body.push(b'\n');
        }
        self.raw(
            b"PaxHeaders/entry",
            b'x',
            body.len() as u64,
            0o644,
            b"",
            &body,
        )
    }

    fn long_name(self, name: &[u8]) -> Tar {
        let mut data = name.to_vec();
        data.push(0);
        self.raw(b"././@LongLink", b'L', data.len() as u64, 0o644, b"", &data)
    }

    /// The top folder with etcd, etcdctl and a README.
    fn release(self) -> Tar {
        self.dir(&format!("{TOP}/"))
            .file(&format!("{TOP}/README.md"), b"# etcd\n")
            .exec(&format!("{TOP}/etcd"), &amd64())
            .exec(&format!("{TOP}/etcdctl"), &amd64())
    }

    /// The end-of-archive marker and GNU tar's padding to a 10 KiB record.
    fn finish(mut self) -> Vec<u8> {
        let len = (self.0.len() + 1024).div_ceil(10240) * 10240;
        self.0.resize(len, 0);
        self.0
    }

    fn gz(self) -> Vec<u8> {
        gzip(&self.finish())
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

// ---------------------------------------------------------------------------------------
// Running the pass.

fn extract_bytes(parent: &Path, bytes: &[u8], policy: &Policy) -> Result<Extracted, Failure> {
    extract(bytes, NAME, parent, policy)
}

fn accepts(bytes: &[u8]) -> (tempfile::TempDir, Extracted) {
    accepts_with(bytes, &Policy::default())
}

fn accepts_with(bytes: &[u8], policy: &Policy) -> (tempfile::TempDir, Extracted) {
    let parent = tempfile::tempdir().unwrap();
    match extract_bytes(parent.path(), bytes, policy) {
        Ok(x) => (parent, x),
        Err(f) => panic!("rejected a good archive: {f}"),
    }
}

#[track_caller]
fn rejects(bytes: &[u8], code: ReasonCode, needle: &str) -> Failure {
    rejects_with(bytes, &Policy::default(), code, needle)
}

#[track_caller]
fn rejects_with(bytes: &[u8], policy: &Policy, code: ReasonCode, needle: &str) -> Failure {
    let parent = tempfile::tempdir().unwrap();
    let failure = match extract_bytes(parent.path(), bytes, policy) {
        Ok(x) => panic!("accepted a bad archive: {}", x.top),
        Err(f) => f,
    };
    assert_eq!(failure.code, code, "{failure}");
    assert!(
        failure.message.contains(needle),
        "message {:?} does not name {needle:?}",
        failure.message
    );
    assert!(failure.message.contains(NAME), "{failure}");
    assert_empty(parent.path());
    failure
}

#[track_caller]
fn assert_empty(dir: &Path) {
    let left: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn top(rest: &str) -> String {
    format!("{TOP}/{rest}")
}

// ---------------------------------------------------------------------------------------
// Good archives.

#[test]
fn extracts_a_release_into_a_private_staging_folder_with_our_own_modes() {
    let bytes = Tar::new()
        .release()
        .dir(&top("Documentation/"))
        .raw(
            top("Documentation/setuid").as_bytes(),
            b'0',
            2,
            0o6755,
            b"",
            b"hi",
        )
        .raw(
            top("Documentation/sticky").as_bytes(),
            b'0',
            2,
            0o1600,
            b"",
            b"hi",
        )
        .exec(&top("etcdutl"), &amd64())
        .gz();
    let (parent, x) = accepts(&bytes);
    assert_eq!(
        (x.top.as_str(), x.version.as_str(), x.arch.as_str()),
        (TOP, "3.5.1", "amd64")
    );
    assert_eq!(x.sha256_hex(), format!("{:x}", Sha256::digest(&bytes)));
    assert_eq!(x.compressed_bytes, bytes.len() as u64);
    assert_eq!(x.entries, 8);
    assert_eq!(x.unpacked_bytes, 7 + 3 * amd64().len() as u64 + 4);
    assert!(x.has_etcdutl);
    assert_eq!(x.staging.path().parent(), Some(parent.path()));
    let name = x.staging.path().file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with(".etcd-setup-staging-"), "{name}");
    assert_eq!(mode(x.staging.path()), 0o700);
    let bin = x.bin_dir();
    assert_eq!(bin, x.staging.path().join(TOP));
    assert_eq!(mode(&bin), 0o755);
    assert_eq!(mode(&bin.join("Documentation")), 0o755);
    assert_eq!(mode(&bin.join("etcd")), 0o755);
    assert_eq!(mode(&bin.join("README.md")), 0o644);
    assert_eq!(mode(&bin.join("Documentation/setuid")), 0o755);
    assert_eq!(mode(&bin.join("Documentation/sticky")), 0o644);
    assert_eq!(fs::read(bin.join("etcd")).unwrap(), amd64());
    assert_eq!(fs::read(bin.join("README.md")).unwrap(), b"# etcd\n");
    let listed: Vec<_> = fs::read_dir(x.staging.path()).unwrap().collect();
    assert_eq!(
        listed.len(),
        1,
        "the staging folder holds only the top folder"
    );
    let staging = x.staging.path().to_path_buf();
    drop(x);
    assert!(
        !staging.exists(),
        "dropping the result removes the staging folder"
    );
}

#[test]
fn creates_missing_parent_folders_when_the_archive_lists_no_folders() {
    let bytes = Tar::new()
        .file(&top("Documentation/dev-guide/api.md"), b"api")
        .exec(&top("etcd"), &amd64())
        .exec(&top("etcdctl"), &amd64())
        .gz();
    let (_parent, x) = accepts(&bytes);
    let doc = x.bin_dir().join("Documentation/dev-guide");
    assert_eq!(mode(&doc), 0o755);
    assert_eq!(fs::read(doc.join("api.md")).unwrap(), b"api");
    assert!(!x.has_etcdutl);
    assert_eq!(x.entries, 6, "three files and three folders");
}

/// A path past ustar's 100-byte name field, under `Documentation/`.
fn long_doc_path(len: usize) -> String {
    let mut path = top("Documentation/");
    while path.len() < len - 3 {
        path.push_str("deep-folder/");
    }
    path.truncate(len - 3);
    path.push_str(".md");
    path
}

/// Appends the release's files with the `tar` crate, `header` giving the format.
fn tar_crate_release(builder: &mut tar::Builder<Vec<u8>>, header: fn() -> tar::Header) {
    let mut append = |path: &str, kind: tar::EntryType, mode: u32, data: &[u8]| {
        let mut h = header();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        builder.append_data(&mut h, path, data).unwrap();
    };
    append(TOP, tar::EntryType::Directory, 0o755, b"");
    append(&top("etcd"), tar::EntryType::Regular, 0o755, &amd64());
    append(&top("etcdctl"), tar::EntryType::Regular, 0o755, &amd64());
}

#[test]
fn accepts_gnu_archives_with_long_names() {
    let long = long_doc_path(300);
    let mut b = tar::Builder::new(Vec::new());
    tar_crate_release(&mut b, tar::Header::new_gnu);
    let mut h = tar::Header::new_gnu();
    h.set_size(4);
    h.set_mode(0o644);
    b.append_data(&mut h, &long, &b"long"[..]).unwrap();
    let data = b.into_inner().unwrap();
    assert!(
        data.windows(13).any(|w| w == b"././@LongLink"),
        "a GNU long-name header"
    );
    let (_parent, x) = accepts(&gzip(&data));
    assert_eq!(fs::read(x.staging.path().join(&long)).unwrap(), b"long");
}

#[test]
fn accepts_ustar_archives_with_names_split_into_prefix_and_name() {
    let long = long_doc_path(180);
    let mut b = tar::Builder::new(Vec::new());
    tar_crate_release(&mut b, tar::Header::new_ustar);
    let mut h = tar::Header::new_ustar();
    h.set_size(5);
    h.set_mode(0o644);
    b.append_data(&mut h, &long, &b"ustar"[..]).unwrap();
    let data = b.into_inner().unwrap();
    assert!(!data.windows(13).any(|w| w == b"././@LongLink"));
    let (_parent, x) = accepts(&gzip(&data));
    assert_eq!(fs::read(x.staging.path().join(&long)).unwrap(), b"ustar");
}

#[test]
fn accepts_pax_archives_with_long_paths_in_extended_headers() {
    let long = long_doc_path(400);
    let mut b = tar::Builder::new(Vec::new());
    tar_crate_release(&mut b, tar::Header::new_ustar);
    let records = Tar::new().pax(&[("path", long.as_bytes()), ("mtime", b"1700000000.5")]);
    // The tar crate writes the framing; the records come from the helper above.
    let body_len = u64::from_str_radix(
        std::str::from_utf8(&records.0[124..135])
            .unwrap()
            .trim_end_matches('\0'),
        8,
    )
    .unwrap();
    let body = &records.0[512..512 + body_len as usize];
    let mut x = tar::Header::new_ustar();
    x.set_entry_type(tar::EntryType::XHeader);
    x.set_size(body.len() as u64);
    x.set_path("PaxHeaders/doc").unwrap();
    x.set_cksum();
    b.append(&x, body).unwrap();
    let mut h = tar::Header::new_ustar();
    h.set_size(3);
    h.set_mode(0o644);
    h.set_path(top("Documentation/truncated-name")).unwrap();
    h.set_cksum();
    b.append(&h, &b"pax"[..]).unwrap();
    let (_parent, x) = accepts(&gzip(&b.into_inner().unwrap()));
    assert_eq!(fs::read(x.staging.path().join(&long)).unwrap(), b"pax");
    assert!(!x.bin_dir().join("Documentation/truncated-name").exists());
}

#[test]
fn honours_a_pax_size_over_the_header_size_field() {
    // The header says 0 bytes, PAX says 600: the 600 bytes, shaped like a symlink header,
    // are the file's content, as GNU tar and tar >= 0.4.45 read it.
    let hidden = header(top("evil").as_bytes(), b'2', 0, 0o777, b"/etc");
    let mut content = hidden.to_vec();
    content.resize(600, b'x');
    let bytes = Tar::new()
        .release()
        .pax(&[("size", b"600")])
        .raw(top("notes").as_bytes(), b'0', 0, 0o644, b"", &content)
        .gz();
    let (_parent, x) = accepts(&bytes);
    assert_eq!(fs::read(x.bin_dir().join("notes")).unwrap(), content);
}

#[test]
fn extracts_for_the_machine_the_policy_names() {
    let arm = "etcd-v3.6.0-rc.0-linux-arm64";
    let bytes = Tar::new()
        .exec(&format!("{arm}/etcd"), &elf(183))
        .exec(&format!("{arm}/etcdctl"), &elf(183))
        .gz();
    let policy = Policy {
        machine: Machine::Aarch64,
        ..Policy::default()
    };
    let (_parent, x) = accepts_with(&bytes, &policy);
    assert_eq!(
        (x.version.as_str(), x.arch.as_str()),
        ("3.6.0-rc.0", "arm64")
    );
}

#[test]
fn accepts_a_matching_pinned_digest_and_a_gzip_header_with_name_and_comment() {
    let tar = Tar::new().release().finish();
    let mut enc = flate2::GzBuilder::new()
        .filename("etcd.tar")
        .comment("built for a test")
        .extra(vec![1, 2, 3])
        .write(Vec::new(), Compression::best());
    enc.write_all(&tar).unwrap();
    let bytes = enc.finish().unwrap();
    let policy = Policy {
        sha256: Some(Sha256::digest(&bytes).into()),
        ..Policy::default()
    };
    accepts_with(&bytes, &policy);
}

// ---------------------------------------------------------------------------------------
// The real releases.

/// The folder holding the real etcd releases, fetched by tests/inputs/fetch-etcd if absent.
fn real_releases() -> PathBuf {
    let cache = std::env::var("ETCD_SETUP_CACHE").unwrap_or("/var/cache/etcd-setup-ci".into());
    let dir = Path::new(&cache).join("etcd");
    let ready = [
        "etcd-v3.5.1-linux-amd64/etcdutl",
        "etcd-v3.4.23-linux-amd64/etcdctl",
    ]
    .iter()
    .all(|f| dir.join(f).is_file());
    if ready {
        return dir;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inputs/fetch-etcd");
    let out = Command::new(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed; run it by hand to fetch the real etcd releases:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn extracts_real_release(folder: &str, version: &str, etcdutl: bool) {
    let releases = real_releases();
    let work = tempfile::tempdir().unwrap();
    let tarball = work.path().join("etcd-linux-amd64.tar.gz");
    let status = Command::new("tar")
        .arg("-C")
        .arg(&releases)
        .arg("-czf")
        .arg(&tarball)
        .arg(folder)
        .status()
        .unwrap();
    assert!(status.success());
    let parent = work.path().join("staging");
    fs::create_dir(&parent).unwrap();
    let input = fs::File::open(&tarball).unwrap();
    let x = extract(input, "real.tar.gz", &parent, &Policy::default())
        .unwrap_or_else(|f| panic!("{f}"));
    // Runnable at once, as `run` starts it: no descriptor of the pass (the writer's, the
    // page-cache warmer's) holds it open for writing, which would fail the exec with
    // ETXTBSY.
    let ran = Command::new(x.bin_dir().join("etcd"))
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("etcd just extracted does not run: {e}"));
    assert!(
        ran.status.success() && String::from_utf8_lossy(&ran.stdout).contains(version),
        "{ran:?}"
    );
    assert_eq!((x.top.as_str(), x.version.as_str()), (folder, version));
    assert_eq!(x.has_etcdutl, etcdutl);
    let sum = Command::new("sha256sum").arg(&tarball).output().unwrap();
    assert!(String::from_utf8_lossy(&sum.stdout).starts_with(&x.sha256_hex()));
    let mut unpacked = 0;
    for entry in fs::read_dir(releases.join(folder)).unwrap() {
        let entry = entry.unwrap();
        let ours = x.bin_dir().join(entry.file_name());
        let theirs = fs::read(entry.path()).unwrap();
        unpacked += theirs.len() as u64;
        assert!(
            fs::read(&ours).unwrap() == theirs,
            "{} differs",
            ours.display()
        );
    }
    assert_eq!(x.unpacked_bytes, unpacked);
    fsync_tree(x.staging.path()).unwrap();
}

#[test]
fn extracts_the_real_etcd_3_5_1_release() {
    extracts_real_release("etcd-v3.5.1-linux-amd64", "3.5.1", true);
}

#[test]
fn extracts_the_real_etcd_3_4_23_release_without_etcdutl() {
    extracts_real_release("etcd-v3.4.23-linux-amd64", "3.4.23", false);
}

// ---------------------------------------------------------------------------------------
// Gzip faults: archive-corrupt, each with its own sentence.

#[test]
fn rejects_empty_input() {
    rejects(b"", ReasonCode::ArchiveCorrupt, "is empty");
}

#[test]
fn rejects_input_that_is_not_gzip() {
    rejects(
        b"PK\x03\x04zipzipzip",
        ReasonCode::ArchiveCorrupt,
        "not a gzip file (it starts with 50 4b 03 04)",
    );
    rejects(
        &Tar::new().release().finish(),
        ReasonCode::ArchiveCorrupt,
        "not a gzip file",
    );
    rejects(
        b"\x1f",
        ReasonCode::ArchiveCorrupt,
        "inside its gzip header",
    );
}

#[test]
fn rejects_gzip_truncated_anywhere() {
    let bytes = Tar::new().release().gz();
    for (cut, needle) in [
        (5, "inside its gzip header"),
        (10, "inside the compressed data"),
        (bytes.len() / 2, "inside the compressed data"),
        (bytes.len() - 9, "inside the compressed data"),
        (bytes.len() - 8, "inside the gzip trailer (0 of 8 bytes)"),
        (bytes.len() - 1, "inside the gzip trailer (7 of 8 bytes)"),
    ] {
        let f = rejects(&bytes[..cut], ReasonCode::ArchiveCorrupt, needle);
        assert!(f.message.contains(&format!("after {cut} bytes")), "{f}");
    }
}

#[test]
fn rejects_a_bad_crc() {
    let mut bytes = Tar::new().release().gz();
    let at = bytes.len() - 8;
    bytes[at] ^= 1;
    rejects(&bytes, ReasonCode::ArchiveCorrupt, "CRC-32 check fails");
}

#[test]
fn rejects_a_bad_length_trailer() {
    let mut bytes = Tar::new().release().gz();
    let at = bytes.len() - 4;
    bytes[at] ^= 1;
    rejects(&bytes, ReasonCode::ArchiveCorrupt, "length check fails");
}

#[test]
fn rejects_corrupt_compressed_data() {
    let mut bytes = Tar::new().release().gz();
    bytes[10] = 0xff; // block type 3 is reserved
    rejects(
        &bytes,
        ReasonCode::ArchiveCorrupt,
        "compressed data is corrupt",
    );
}

#[test]
fn rejects_trailing_garbage() {
    let mut bytes = Tar::new().release().gz();
    let end = bytes.len();
    bytes.extend_from_slice(b"garbage");
    rejects(
        &bytes,
        ReasonCode::ArchiveCorrupt,
        &format!("unexpected data follows the gzip trailer at byte {end}"),
    );
}

#[test]
fn rejects_trailing_zeros() {
    let mut bytes = Tar::new().release().gz();
    bytes.extend_from_slice(&[0; 2048]);
    rejects(
        &bytes,
        ReasonCode::ArchiveCorrupt,
        "zero bytes follow the gzip trailer",
    );
}

#[test]
fn rejects_two_gzip_members() {
    let tar = Tar::new().release().finish();
    let (a, b) = tar.split_at(1024);
    let mut bytes = gzip(a);
    let second = bytes.len();
    bytes.extend_from_slice(&gzip(b));
    let f = rejects(&bytes, ReasonCode::ArchiveCorrupt, "second gzip member");
    assert!(f.message.contains(&format!("byte {second}")), "{f}");
}

#[test]
fn rejects_reserved_gzip_flags_and_a_bad_header_checksum() {
    let good = Tar::new().release().gz();
    let mut reserved = good.clone();
    reserved[3] |= 0x80;
    rejects(
        &reserved,
        ReasonCode::ArchiveCorrupt,
        "reserved gzip header flags",
    );
    let mut hcrc = good[..10].to_vec();
    hcrc[3] |= 0x02;
    hcrc.extend_from_slice(&[0xde, 0xad]);
    hcrc.extend_from_slice(&good[10..]);
    rejects(
        &hcrc,
        ReasonCode::ArchiveCorrupt,
        "gzip header checksum does not match",
    );
}

// ---------------------------------------------------------------------------------------
// Tar structure.

#[test]
fn rejects_a_bad_tar_header_checksum() {
    let mut tar = Tar::new().release().finish();
    tar[0] = b'X';
    rejects(
        &gzip(&tar),
        ReasonCode::ArchiveCorrupt,
        "tar header at byte 0 of the unpacked stream has a bad checksum",
    );
}

#[test]
fn rejects_a_tar_stream_without_its_end_marker() {
    let tar = Tar::new().release().0;
    rejects(
        &gzip(&tar),
        ReasonCode::ArchiveCorrupt,
        "without its end-of-archive marker",
    );
    let mut lone = tar.clone();
    lone.resize(tar.len() + 512, 0);
    rejects(
        &gzip(&lone),
        ReasonCode::ArchiveCorrupt,
        "single zero block",
    );
    rejects(
        &gzip(&tar[..tar.len() - 500]),
        ReasonCode::ArchiveCorrupt,
        "ends inside entry",
    );
}

#[test]
fn rejects_data_hidden_after_the_end_of_archive_marker() {
    let mut tar = Tar::new().release().finish();
    let hidden = Tar::new()
        .raw(top("evil").as_bytes(), b'2', 0, 0o777, b"/etc", b"")
        .0;
    let at = tar.len();
    tar.extend_from_slice(&hidden);
    rejects(
        &gzip(&tar),
        ReasonCode::ArchiveUnsafe,
        &format!("data at byte {at} follows the tar end-of-archive marker"),
    );
}

#[test]
fn rejects_a_metadata_header_with_no_entry_after_it() {
    let bytes = Tar::new().release().pax(&[("path", b"x")]).gz();
    rejects(&bytes, ReasonCode::ArchiveCorrupt, "has no entry after it");
}

#[test]
fn rejects_malformed_pax_records() {
    let bytes = Tar::new()
        .raw(b"PaxHeaders/x", b'x', 12, 0o644, b"", b"99 path=abc\n")
        .release()
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveCorrupt,
        "PAX header at byte 0 has a record with a bad length",
    );
}

// ---------------------------------------------------------------------------------------
// Names.

#[test]
fn rejects_a_dot_dot_component_leaving_the_top_folder() {
    let bytes = Tar::new().release().file(&top("../x"), b"x").gz();
    let f = rejects(&bytes, ReasonCode::ArchiveUnsafe, "leaves the top folder");
    assert!(
        f.message
            .contains(r#"entry "etcd-v3.5.1-linux-amd64/../x""#),
        "{f}"
    );
}

#[test]
fn rejects_absolute_paths() {
    let bytes = Tar::new().release().file("/etc/cron.d/evil", b"x").gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        r#"entry "/etc/cron.d/evil" is an absolute path"#,
    );
}

#[test]
fn rejects_dot_components_including_a_leading_dot_slash() {
    let bytes = Tar::new()
        .dir("./")
        .file(&format!("./{TOP}/etcd"), b"x")
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        "pack the folder by its name",
    );
    let bytes = Tar::new().release().file(&top("./README2.md"), b"x").gz();
    rejects(&bytes, ReasonCode::ArchiveUnsafe, "\".\" component");
}

#[test]
fn rejects_empty_names_and_empty_components() {
    let bytes = Tar::new()
        .release()
        .raw(b"", b'0', 1, 0o644, b"", b"x")
        .gz();
    rejects(&bytes, ReasonCode::ArchiveUnsafe, "has an empty name");
    let bytes = Tar::new().release().file(&top("a//b"), b"x").gz();
    rejects(&bytes, ReasonCode::ArchiveUnsafe, "empty path component");
}

#[test]
fn rejects_a_nul_byte_inside_a_long_name() {
    let mut name = top("README.md").into_bytes();
    name.extend_from_slice(b"\0/../../evil");
    let bytes = Tar::new()
        .release()
        .long_name(&name)
        .file("ignored", b"x")
        .gz();
    rejects(&bytes, ReasonCode::ArchiveUnsafe, "NUL byte");
}

#[test]
fn rejects_a_name_smuggled_after_a_nul_in_the_header_name_field() {
    let mut name = top("README2.md").into_bytes();
    name.extend_from_slice(b"\0../../evil");
    let bytes = Tar::new()
        .release()
        .raw(&name, b'0', 1, 0o644, b"", b"x")
        .gz();
    rejects(&bytes, ReasonCode::ArchiveUnsafe, "NUL byte in its name");
}

#[test]
fn rejects_backslashes_control_characters_and_bad_utf8_in_names() {
    for (name, needle) in [
        (top("..\\..\\evil").into_bytes(), "backslash"),
        (top("evil\nname").into_bytes(), "control character"),
        (top("\u{1b}[31m").into_bytes(), "control character"),
        ([TOP.as_bytes(), b"/\xff\xfe"].concat(), "not UTF-8"),
    ] {
        let bytes = Tar::new()
            .release()
            .raw(&name, b'0', 1, 0o644, b"", b"x")
            .gz();
        rejects(&bytes, ReasonCode::ArchiveUnsafe, needle);
    }
}

#[test]
fn rejects_a_gnu_long_name_together_with_a_pax_path() {
    let bytes = Tar::new()
        .release()
        .long_name(top("one").as_bytes())
        .pax(&[("path", top("two").as_bytes())])
        .file("x", b"x")
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        "both a GNU long name and a PAX path",
    );
}

#[test]
fn rejects_a_gnu_long_name_after_a_pax_header() {
    let bytes = Tar::new()
        .release()
        .pax(&[("size", b"1")])
        .long_name(top("one").as_bytes())
        .file("x", b"x")
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        "GNU long-name header after a PAX header",
    );
}

#[test]
fn rejects_two_pax_headers_for_one_entry() {
    let bytes = Tar::new()
        .release()
        .pax(&[("path", top("one").as_bytes())])
        .pax(&[("path", top("two").as_bytes())])
        .file("x", b"x")
        .gz();
    rejects(&bytes, ReasonCode::ArchiveUnsafe, "second metadata header");
}

// ---------------------------------------------------------------------------------------
// Layout.

#[test]
fn rejects_a_second_top_folder() {
    let bytes = Tar::new()
        .release()
        .file("etcd-v3.5.2-linux-amd64/etcd", b"x")
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        "lies outside the top folder etcd-v3.5.1-linux-amd64/",
    );
}

#[test]
fn rejects_files_at_the_top_level() {
    let bytes = Tar::new().file(TOP, b"x").gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        "is a file at the top level",
    );
}

#[test]
fn rejects_a_top_folder_not_named_like_a_release() {
    let bytes = Tar::new().file("bin/etcd", &amd64()).gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        r#"entry "bin/etcd" is not inside a top folder named etcd-v<version>-linux-<arch>"#,
    );
}

#[test]
fn rejects_duplicate_file_entries() {
    let bytes = Tar::new().release().exec(&top("etcd"), &amd64()).gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        r#"entry "etcd-v3.5.1-linux-amd64/etcd" appears twice"#,
    );
}

#[test]
fn rejects_a_file_and_a_folder_of_the_same_name() {
    let bytes = Tar::new().release().dir(&top("etcd/")).gz();
    rejects(&bytes, ReasonCode::ArchiveUnsafe, "appears twice");
    let bytes = Tar::new()
        .release()
        .dir(&top("docs"))
        .file(&top("docs"), b"x")
        .gz();
    rejects(&bytes, ReasonCode::ArchiveUnsafe, "appears twice");
    let bytes = Tar::new().release().dir(&format!("{TOP}/")).gz();
    rejects(&bytes, ReasonCode::ArchiveUnsafe, "appears twice");
}

#[test]
fn rejects_an_entry_under_a_file() {
    let bytes = Tar::new().release().file(&top("README.md/x"), b"x").gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        r#"lies inside "etcd-v3.5.1-linux-amd64/README.md", which is a file"#,
    );
}

#[test]
fn rejects_a_folder_entry_that_carries_data() {
    let bytes = Tar::new()
        .release()
        .raw(top("docs/").as_bytes(), b'5', 3, 0o755, b"", b"abc")
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        "is a folder that carries 3 bytes of data",
    );
}

// ---------------------------------------------------------------------------------------
// Entry types.

#[test]
fn rejects_symlink_escaping_the_staging_dir() {
    let work = tempfile::tempdir().unwrap();
    let outside = work.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let parent = work.path().join("parent");
    fs::create_dir(&parent).unwrap();
    // A symlink out of the staging folder, then a file written through it.
    let bytes = Tar::new()
        .release()
        .raw(
            top("evil").as_bytes(),
            b'2',
            0,
            0o777,
            b"../../../outside",
            b"",
        )
        .file(&top("evil/planted"), b"owned")
        .gz();
    let f = extract_bytes(&parent, &bytes, &Policy::default()).unwrap_err();
    assert_eq!(f.code, ReasonCode::ArchiveUnsafe);
    assert!(
        f.message.contains(
            r#"entry "etcd-v3.5.1-linux-amd64/evil" is a symbolic link to "../../../outside""#
        ),
        "{f}"
    );
    assert_empty(&parent);
    assert_empty(&outside);
}

#[test]
fn rejects_hardlink_escape() {
    let bytes = Tar::new()
        .release()
        .raw(
            top("shadow").as_bytes(),
            b'1',
            0,
            0o644,
            b"/etc/shadow",
            b"",
        )
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        r#"is a hard link to "/etc/shadow""#,
    );
}

#[test]
fn rejects_device_nodes_fifos_and_other_entry_types() {
    for (kind, needle) in [
        (b'3', "is a character device"),
        (b'4', "is a block device"),
        (b'6', "is a FIFO"),
        (b'7', "is a contiguous file"),
        (b'S', "is a GNU sparse file"),
        (b'g', "is a PAX global header"),
        (b'V', "has the entry type 'V'"),
        (b'D', "has the entry type 'D'"),
    ] {
        let bytes = Tar::new()
            .release()
            .raw(top("odd").as_bytes(), kind, 0, 0o644, b"", b"")
            .gz();
        let f = rejects(&bytes, ReasonCode::ArchiveUnsafe, needle);
        assert!(
            f.message
                .contains("only regular files and folders are allowed"),
            "{f}"
        );
    }
}

#[test]
fn rejects_gnu_sparse_files_in_pax_form() {
    let bytes = Tar::new()
        .release()
        .pax(&[
            ("GNU.sparse.major", b"1"),
            ("GNU.sparse.minor", b"0"),
            ("GNU.sparse.name", top("etcd2").as_bytes()),
            ("GNU.sparse.realsize", b"1073741824"),
        ])
        .file(&top("GNUSparseFile.0/etcd2"), b"x")
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        "GNU sparse file (PAX GNU.sparse records)",
    );
}

#[test]
fn honours_a_pax_size_so_an_entry_hidden_by_the_header_size_is_seen() {
    // PAX says 0 bytes, the header 1024: the symlink right after is an entry, not content
    // a reader of the header size alone would skip.
    let bytes = Tar::new()
        .release()
        .pax(&[("size", b"0")])
        .raw(top("notes").as_bytes(), b'0', 1024, 0o644, b"", b"")
        .raw(top("evil").as_bytes(), b'2', 0, 0o777, b"/etc", b"")
        .data(&[0; 512])
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveUnsafe,
        r#"entry "etcd-v3.5.1-linux-amd64/evil" is a symbolic link"#,
    );
}

// ---------------------------------------------------------------------------------------
// Caps.

fn limits(f: impl FnOnce(&mut Limits)) -> Policy {
    let mut policy = Policy::default();
    f(&mut policy.limits);
    policy
}

#[test]
fn rejects_a_decompression_bomb_early() {
    let zeros = vec![0u8; 8 << 20];
    let bytes = Tar::new().release().file(&top("bomb"), &zeros).gz();
    let f = rejects(
        &bytes,
        ReasonCode::ArchiveTooLarge,
        "20:1 limit on the compression ratio (max_ratio)",
    );
    let unpacked: u64 = f
        .message
        .split("unpacked to ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(unpacked < 2 << 20, "stopped only after {unpacked} bytes");
}

#[test]
fn rejects_more_entries_than_max_entries() {
    let mut tar = Tar::new().release();
    for i in 0..10 {
        tar = tar.file(&top(&format!("doc{i}")), b"x");
    }
    let policy = limits(|l| l.max_entries = 10);
    rejects_with(
        &tar.gz(),
        &policy,
        ReasonCode::ArchiveTooLarge,
        "has more than 10 entries (max_entries)",
    );
}

#[test]
fn counts_parent_folders_the_archive_did_not_list_against_max_entries() {
    let deep = top(&"d/".repeat(20)) + "file";
    let bytes = Tar::new().release().file(&deep, b"x").gz();
    let policy = limits(|l| l.max_entries = 10);
    rejects_with(
        &bytes,
        &policy,
        ReasonCode::ArchiveTooLarge,
        &format!("has more than 10 entries (max_entries), reached at entry {deep:?}"),
    );
}

#[test]
fn rejects_a_file_above_max_file_size() {
    let bytes = Tar::new().release().file(&top("big"), &[7; 3000]).gz();
    let policy = limits(|l| l.max_file_size = 2048);
    rejects_with(
        &bytes,
        &policy,
        ReasonCode::ArchiveTooLarge,
        r#"entry "etcd-v3.5.1-linux-amd64/big" is 3000 bytes, above the 2048-byte limit per file (max_file_size)"#,
    );
}

#[test]
fn rejects_a_header_claiming_a_huge_file_before_reading_it() {
    let mut h = header(top("huge").as_bytes(), b'0', 0, 0o644, b"");
    h[124..136].copy_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]); // 2^32 base-256
    seal(&mut h);
    let mut tar = Tar::new().release();
    tar.0.extend_from_slice(&h);
    rejects(
        &tar.gz(),
        ReasonCode::ArchiveTooLarge,
        "is 4294967296 bytes",
    );
}

#[test]
fn rejects_archives_above_max_total_size() {
    let bytes = Tar::new()
        .release()
        .file(&top("a"), &[1; 600])
        .file(&top("b"), &[2; 600])
        .gz();
    let policy = limits(|l| l.max_total_size = 1000);
    rejects_with(
        &bytes,
        &policy,
        ReasonCode::ArchiveTooLarge,
        r#"more than 1000 bytes (max_total_size), reached at entry "etcd-v3.5.1-linux-amd64/b""#,
    );
}

#[test]
fn rejects_oversized_metadata_headers() {
    let bytes = Tar::new()
        .pax(&[("comment", &[b'x'; 70_000])])
        .release()
        .gz();
    rejects(
        &bytes,
        ReasonCode::ArchiveTooLarge,
        "limit for PAX and GNU long-name headers is 65536 bytes",
    );
}

// ---------------------------------------------------------------------------------------
// Binaries.

#[test]
fn rejects_a_release_without_etcdctl() {
    let bytes = Tar::new()
        .dir(&format!("{TOP}/"))
        .exec(&top("etcd"), &amd64())
        .gz();
    rejects(
        &bytes,
        ReasonCode::BinaryMissing,
        "has no file etcd-v3.5.1-linux-amd64/etcdctl",
    );
    let bytes = Tar::new().finish();
    rejects(&gzip(&bytes), ReasonCode::BinaryMissing, "holds no files");
}

#[test]
fn rejects_etcd_that_is_not_an_elf_executable() {
    let bytes = Tar::new()
        .exec(&top("etcdctl"), &amd64())
        .exec(&top("etcd"), b"#!/bin/sh\nexec evil\n")
        .gz();
    rejects(
        &bytes,
        ReasonCode::BinaryMissing,
        r#""etcd-v3.5.1-linux-amd64/etcd" is not an ELF executable"#,
    );
    let mut object = amd64();
    object[16] = 1; // ET_REL
    let bytes = Tar::new()
        .exec(&top("etcdctl"), &amd64())
        .exec(&top("etcd"), &object)
        .gz();
    rejects(&bytes, ReasonCode::BinaryMissing, "not an executable");
}

#[test]
fn rejects_etcd_not_marked_executable() {
    let bytes = Tar::new()
        .file(&top("etcd"), &amd64())
        .exec(&top("etcdctl"), &amd64())
        .gz();
    rejects(
        &bytes,
        ReasonCode::BinaryMissing,
        r#""etcd-v3.5.1-linux-amd64/etcd" is not marked executable"#,
    );
}

#[test]
fn rejects_binaries_for_another_machine_class_or_byte_order() {
    for (binary, needle) in [
        (elf(183), "aarch64, 64-bit, little-endian"),
        (elf_with(1, 1, 3), "x86, 32-bit"),
        (elf_with(2, 2, 62), "x86-64, 64-bit, big-endian"),
    ] {
        let bytes = Tar::new()
            .exec(&top("etcd"), &amd64())
            .exec(&top("etcdctl"), &binary)
            .gz();
        let f = rejects(&bytes, ReasonCode::WrongArchitecture, needle);
        assert!(f.message.contains("etcdctl"), "{f}");
    }
}

#[test]
fn rejects_a_release_folder_for_another_architecture() {
    let bytes = Tar::new()
        .exec("etcd-v3.5.1-linux-arm64/etcd", &elf(183))
        .gz();
    rejects(
        &bytes,
        ReasonCode::WrongArchitecture,
        "is the linux-arm64 release (etcd-v3.5.1-linux-arm64/); this machine needs linux-amd64",
    );
}

/// What an arm64 node says of the amd64 release the platform's ISO script ships to every
/// node: the folder's name is refused, and so are amd64 binaries inside an arm64 folder.
#[test]
fn an_arm64_node_refuses_the_amd64_release_as_wrong_architecture() {
    let arm64 = Policy {
        machine: Machine::Aarch64,
        ..Policy::default()
    };
    rejects_with(
        &Tar::new().release().gz(),
        &arm64,
        ReasonCode::WrongArchitecture,
        "is the linux-amd64 release (etcd-v3.5.1-linux-amd64/); this machine needs linux-arm64",
    );
    let bytes = Tar::new()
        .exec("etcd-v3.5.1-linux-arm64/etcd", &amd64())
        .exec("etcd-v3.5.1-linux-arm64/etcdctl", &amd64())
        .gz();
    let f = rejects_with(
        &bytes,
        &arm64,
        ReasonCode::WrongArchitecture,
        "x86-64, 64-bit, little-endian",
    );
    assert!(f.message.contains("aarch64"), "{f}");
}

// ---------------------------------------------------------------------------------------
// Verdict precedence, digest, clean-up.

#[test]
fn rejects_a_digest_other_than_the_pinned_one() {
    let bytes = Tar::new().release().gz();
    let policy = Policy {
        sha256: Some([0xab; 32]),
        ..Policy::default()
    };
    let f = rejects_with(
        &bytes,
        &policy,
        ReasonCode::DigestMismatch,
        &"ab".repeat(32),
    );
    assert!(
        f.message.contains(&format!("{:x}", Sha256::digest(&bytes))),
        "{f}"
    );
}

#[test]
fn reports_a_digest_mismatch_before_what_the_walk_found() {
    let bytes = Tar::new()
        .release()
        .raw(top("evil").as_bytes(), b'2', 0, 0o777, b"/", b"")
        .gz();
    let policy = Policy {
        sha256: Some([0; 32]),
        ..Policy::default()
    };
    rejects_with(
        &bytes,
        &policy,
        ReasonCode::DigestMismatch,
        "not the pinned",
    );
}

#[test]
fn reports_a_damaged_stream_rather_than_the_entry_its_garbage_tripped() {
    // The refused symlink comes long before the damage, which only the trailer reveals.
    let mut bytes = Tar::new()
        .release()
        .raw(top("evil").as_bytes(), b'2', 0, 0o777, b"/", b"")
        .file(&top("noise"), &noise())
        .gz();
    let at = bytes.len() - 8;
    bytes[at] ^= 1;
    let f = rejects(&bytes, ReasonCode::ArchiveCorrupt, "CRC-32 check fails");
    let underneath = f
        .source
        .expect("the refused entry travels as the source")
        .to_string();
    assert!(underneath.contains("symbolic link"), "{underneath}");
}

/// Serves `data`, then fails (or panics) instead of returning the rest.
struct Faulty {
    data: Vec<u8>,
    pos: usize,
    stop: usize,
    panic: bool,
}

impl Read for Faulty {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.stop {
            if self.panic {
                panic!("reader blew up");
            }
            return Err(std::io::Error::other("medium error"));
        }
        let n = buf.len().min(self.stop - self.pos).min(4096);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// 200 kB that deflate cannot shrink much.
fn noise() -> Vec<u8> {
    (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn big_release() -> Vec<u8> {
    Tar::new().release().file(&top("noise"), &noise()).gz()
}

#[test]
fn reports_a_read_error_as_an_unreadable_medium_and_cleans_up() {
    let data = big_release();
    let parent = tempfile::tempdir().unwrap();
    let stop = data.len() / 2;
    let input = Faulty {
        data,
        pos: 0,
        stop,
        panic: false,
    };
    let f = extract(input, NAME, parent.path(), &Policy::default()).unwrap_err();
    assert_eq!(f.code, ReasonCode::IsoUnreadable, "{f}");
    assert!(
        f.message
            .contains(&format!("cannot read {NAME}: medium error")),
        "{f}"
    );
    assert_empty(parent.path());
}

#[test]
fn removes_the_staging_folder_when_a_panic_unwinds_through_the_pass() {
    let data = big_release();
    let parent = tempfile::tempdir().unwrap();
    let stop = data.len() / 2;
    let input = Faulty {
        data,
        pos: 0,
        stop,
        panic: true,
    };
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        extract(input, NAME, parent.path(), &Policy::default())
    }));
    assert!(caught.is_err());
    assert_empty(parent.path());
}

#[test]
fn keeps_the_staging_folder_only_when_asked() {
    let parent = tempfile::tempdir().unwrap();
    let staging = Staging::create(parent.path()).unwrap();
    fs::write(staging.path().join("f"), b"x").unwrap();
    let kept = staging.into_path();
    assert!(kept.join("f").is_file());
}

#[test]
fn removes_only_stale_staging_folders() {
    let parent = tempfile::tempdir().unwrap();
    let a = Staging::create(parent.path()).unwrap().into_path();
    let b = Staging::create(parent.path()).unwrap().into_path();
    fs::create_dir_all(a.join("etcd-v3.5.1-linux-amd64/Documentation")).unwrap();
    fs::write(b.join("etcd"), b"x").unwrap();
    fs::create_dir(parent.path().join("etcd-v3.4.23")).unwrap();
    fs::write(parent.path().join(".etcd-setup-staging-not-a-dir"), b"x").unwrap();
    assert_eq!(remove_stale_staging(parent.path()).unwrap(), 2);
    let mut left: Vec<_> = fs::read_dir(parent.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, [".etcd-setup-staging-not-a-dir", "etcd-v3.4.23"]);
}

#[test]
fn reports_a_missing_staging_parent_as_an_internal_error_naming_it() {
    let parent = tempfile::tempdir().unwrap();
    let missing = parent.path().join("nope");
    let f = extract_bytes(&missing, &Tar::new().release().gz(), &Policy::default()).unwrap_err();
    assert_eq!(f.code, ReasonCode::InternalError);
    assert!(f.message.contains("nope/.etcd-setup-staging-"), "{f}");
}
