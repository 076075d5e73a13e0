//! The ISO 9660 reader against images built by xorriso and genisoimage at run time, and
//! against corrupted copies of them: good discs yield the tarball's exact bytes, bad ones an
//! error that says what is wrong, never a panic or a hang.

#[path = "common/iso.rs"]
mod iso;

use etcd_setup::reason::ReasonCode;
use etcd_setup::road::archive::Policy;
use etcd_setup::road::iso9660::{is_iso9660, IsoError, IsoFile, IsoImage, Naming};
use etcd_setup::road::source;
use iso::{build_iso, patterned, Tool};
use std::fs;
use std::io::{Cursor, Read};
use std::os::unix::fs::symlink;
use std::process::Command;
use std::sync::OnceLock;
use tempfile::TempDir;

const TARBALL: &str = "etcd/etcd-linux-amd64.tar.gz";
const LONG_NAME: &str = "k8s/1.28/A-Very-Long-File-Name-Exceeding-31-Characters.txt";

/// The tarball stand-in: a few MiB that do not end on a sector boundary.
fn tarball() -> &'static [u8] {
    static DATA: OnceLock<Vec<u8>> = OnceLock::new();
    DATA.get_or_init(|| patterned(3 * 1024 * 1024 + 1234, 7))
}

/// A tree like a Kubernetes ISO: the etcd tarball, Kubernetes binaries, an EFI folder,
/// names longer than 31 characters, mixed case, an empty file.
fn k8s_tree() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (TARBALL, tarball().to_vec()),
        (
            "etcd/etcd-linux-amd64.tar.gz.sha256",
            b"0123 etcd\n".to_vec(),
        ),
        ("k8s/1.28/kubeadm", patterned(5000, 3)),
        (LONG_NAME, b"long\n".to_vec()),
        ("EFI/BOOT/BOOTX64.EFI", patterned(700, 5)),
        ("MixedCase/ReadMe.TXT", b"hello\n".to_vec()),
        ("empty", Vec::new()),
    ]
}

fn as_refs<'a>(files: &'a [(&'static str, Vec<u8>)]) -> Vec<(&'static str, &'a [u8])> {
    files.iter().map(|(p, c)| (*p, c.as_slice())).collect()
}

/// Builds an image from `files` and returns its bytes.
fn image(tool: Tool, args: &[&str], files: &[(&'static str, Vec<u8>)]) -> Vec<u8> {
    let work = TempDir::new().unwrap();
    let path = build_iso(tool, args, &as_refs(files), work.path(), "disc");
    fs::read(path).unwrap()
}

/// The Kubernetes-like tree built by xorriso with Rock Ridge and Joliet, built once.
fn standard() -> &'static [u8] {
    static IMG: OnceLock<Vec<u8>> = OnceLock::new();
    IMG.get_or_init(|| {
        image(
            Tool::Xorriso,
            &["-R", "-J", "-V", "K8S_1_28_4"],
            &k8s_tree(),
        )
    })
}

fn open(img: &[u8]) -> Result<IsoImage<Cursor<&[u8]>>, IsoError> {
    IsoImage::open(Cursor::new(img))
}

fn read_all<R: Read + std::io::Seek>(iso: &mut IsoImage<R>, file: &IsoFile) -> Vec<u8> {
    let mut out = Vec::new();
    iso.open_file(file).unwrap().read_to_end(&mut out).unwrap();
    out
}

/// Opens `img`, finds the tarball and checks its bytes; returns the file for more checks.
fn assert_tarball_intact(img: &[u8]) -> IsoFile {
    let mut iso = open(img).unwrap();
    let file = iso.find(TARBALL).unwrap().expect("tarball found");
    assert_eq!(file.size, tarball().len() as u64);
    assert!(read_all(&mut iso, &file) == tarball(), "content differs");
    file
}

fn corrupt_message(result: Result<impl std::fmt::Debug, IsoError>) -> String {
    match result {
        Err(e @ IsoError::Corrupt(_)) => e.to_string(),
        other => panic!("expected a Corrupt error, got {other:?}"),
    }
}

/// Opens a damaged image and runs every operation; returns the first error, if any. The
/// point is that it returns at all, without panicking.
fn exercise(img: &[u8]) -> Result<(), IsoError> {
    let mut iso = open(img)?;
    let _ = iso.volume_label();
    iso.list_root()?;
    if let Some(file) = iso.find(TARBALL)? {
        let mut out = Vec::new();
        iso.open_file(&file)?.read_to_end(&mut out)?;
    }
    Ok(())
}

// ---- good discs ----

#[test]
fn xorriso_rock_ridge_joliet_disc_yields_the_exact_tarball() {
    let img = standard();
    let file = assert_tarball_intact(img);
    assert_eq!(file.naming, Naming::RockRidge);
    assert_eq!(file.path, TARBALL);
    let iso = open(img).unwrap();
    assert!(iso.has_rock_ridge() && iso.has_joliet());
    assert_eq!(iso.volume_label(), "K8S_1_28_4");
    assert_eq!(iso.image_size(), img.len() as u64);
}

#[test]
fn genisoimage_rock_ridge_joliet_disc_yields_the_exact_tarball() {
    let img = image(
        Tool::Genisoimage,
        &["-R", "-J", "-V", "K8S_1_28_4"],
        &k8s_tree(),
    );
    let file = assert_tarball_intact(&img);
    assert_eq!(file.naming, Naming::RockRidge);
    assert_eq!(open(&img).unwrap().volume_label(), "K8S_1_28_4");
}

#[test]
fn rock_ridge_only_disc_is_read_through_rock_ridge_names() {
    for tool in [Tool::Xorriso, Tool::Genisoimage] {
        let img = image(tool, &["-R", "-V", "RR_ONLY"], &k8s_tree());
        let iso = open(&img).unwrap();
        assert!(iso.has_rock_ridge() && !iso.has_joliet(), "{tool:?}");
        assert_eq!(assert_tarball_intact(&img).naming, Naming::RockRidge);
    }
}

#[test]
fn joliet_only_disc_is_read_through_the_joliet_tree() {
    // xorriso writes Rock Ridge unless told --norock.
    let cases: [(Tool, &[&str]); 2] = [
        (Tool::Xorriso, &["--norock", "-J", "-V", "JOLIET_ONLY"]),
        (Tool::Genisoimage, &["-J", "-V", "JOLIET_ONLY"]),
    ];
    for (tool, args) in cases {
        let img = image(tool, args, &k8s_tree());
        let mut iso = open(&img).unwrap();
        assert!(
            !iso.has_rock_ridge(),
            "{tool:?}: no Rock Ridge was asked for"
        );
        assert!(iso.has_joliet());
        let file = assert_tarball_intact(&img);
        assert_eq!(file.naming, Naming::Joliet, "{tool:?}");
        let root = iso.list_root().unwrap();
        assert!(
            root.contains(&"MixedCase".to_string()),
            "{tool:?}: {root:?}"
        );
    }
}

#[test]
fn plain_iso9660_disc_with_relaxed_names_is_found_under_the_lower_case_names_linux_shows() {
    // No Rock Ridge, no Joliet: the identifiers are upper case with a ";1" version, which
    // a mount shows in lower case without the version (map=normal), compared exactly.
    let args = ["-l", "-allow-multidot", "-relaxed-filenames", "-V", "PLAIN"];
    let img = image(Tool::Genisoimage, &args, &k8s_tree());
    let mut iso = open(&img).unwrap();
    assert!(!iso.has_rock_ridge() && !iso.has_joliet());
    assert_eq!(iso.naming(), Naming::Iso9660);
    assert_eq!(iso.naming().as_str(), "iso9660");
    let file = assert_tarball_intact(&img);
    assert_eq!(file.naming, Naming::Iso9660);
    assert_eq!(file.path, TARBALL);
    // The recorded upper-case spelling is not what a mount shows, so it is not found.
    assert_eq!(iso.find("ETCD/ETCD-LINUX-AMD64.TAR.GZ").unwrap(), None);
    assert_eq!(iso.find("mixedcase/readme.txt").unwrap().unwrap().size, 6);
}

#[test]
fn plain_iso9660_disc_with_8_3_names_does_not_have_the_tarball() {
    // Default mkisofs naming turns the tarball into ETCD_LIN.TGZ: the path is gone, which
    // is the documented behaviour (the operator must build with -R or -J).
    let img = image(Tool::Genisoimage, &["-V", "PLAIN"], &k8s_tree());
    let mut iso = open(&img).unwrap();
    assert_eq!(iso.find(TARBALL).unwrap(), None);
    let root = iso.list_root().unwrap();
    assert!(root.contains(&"etcd".to_string()), "{root:?}");
}

#[test]
fn disc_without_etcd_has_no_tarball_and_lists_its_top_level() {
    let files = vec![
        ("EFI/BOOT/BOOTX64.EFI", patterned(100, 1)),
        ("k8s/1.28/kubeadm", patterned(100, 2)),
        ("docker/images.tar", patterned(100, 4)),
    ];
    for tool in [Tool::Xorriso, Tool::Genisoimage] {
        let img = image(tool, &["-R", "-J", "-V", "K8S_1_28_4"], &files);
        let mut iso = open(&img).unwrap();
        assert_eq!(iso.find(TARBALL).unwrap(), None, "{tool:?}");
        let mut root = iso.list_root().unwrap();
        root.sort();
        assert_eq!(root, ["EFI", "docker", "k8s"], "{tool:?}");
    }
}

#[test]
fn arm64_tarball_is_not_taken_for_the_amd64_one() {
    let files = vec![("etcd/etcd-linux-arm64.tar.gz", patterned(10_000, 9))];
    let img = image(Tool::Xorriso, &["-R", "-J"], &files);
    let mut iso = open(&img).unwrap();
    assert_eq!(iso.find(TARBALL).unwrap(), None);
    assert!(iso.find("etcd/etcd-linux-arm64.tar.gz").unwrap().is_some());
}

#[test]
fn a_directory_is_not_found_as_a_file_and_a_file_is_not_a_directory() {
    let mut iso = open(standard()).unwrap();
    assert_eq!(iso.find("etcd").unwrap(), None);
    assert_eq!(iso.find("empty/etcd-linux-amd64.tar.gz").unwrap(), None);
    assert_eq!(iso.find("").unwrap(), None);
}

#[test]
fn tiny_and_empty_files_read_back_exactly() {
    let files = vec![(TARBALL, b"\x1f\x8b tiny".to_vec()), ("empty", Vec::new())];
    let img = image(Tool::Xorriso, &["-R", "-J"], &files);
    let mut iso = open(&img).unwrap();
    let tiny = iso.find(TARBALL).unwrap().unwrap();
    assert_eq!(read_all(&mut iso, &tiny), b"\x1f\x8b tiny");
    let empty = iso.find("empty").unwrap().unwrap();
    assert_eq!(empty.size, 0);
    assert!(read_all(&mut iso, &empty).is_empty());
}

#[test]
fn file_reads_the_same_in_odd_sized_chunks() {
    let mut iso = open(standard()).unwrap();
    let file = iso.find(TARBALL).unwrap().unwrap();
    let mut reader = iso.open_file(&file).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4099];
    for step in [1usize, 7, 2047, 2048, 2049, 4099].iter().cycle() {
        let n = reader.read(&mut buf[..*step]).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    assert!(out == tarball());
}

#[test]
fn long_and_mixed_case_rock_ridge_names_match_exactly_and_only_exactly() {
    let mut iso = open(standard()).unwrap();
    let long = iso.find(LONG_NAME).unwrap().unwrap();
    assert_eq!(
        (long.path.as_str(), long.naming),
        (LONG_NAME, Naming::RockRidge)
    );
    assert_eq!(read_all(&mut iso, &long), b"long\n");
    let readme = iso.find("MixedCase/ReadMe.TXT").unwrap().unwrap();
    assert_eq!(readme.path, "MixedCase/ReadMe.TXT");
    // A mount of a Rock Ridge disc is case-sensitive, and so is the lookup; nor does it
    // fall back to the Joliet tree (which would match ignoring case).
    assert_eq!(iso.find("mixedcase/README.txt").unwrap(), None);
}

#[test]
fn files_deep_in_the_tree_are_found_with_every_tool_and_name_space() {
    const DEEP: &str = "k8s/1.28/a/b/c/d/e/f/g/h/i/j/deep-file.txt";
    let files = vec![(DEEP, b"deep\n".to_vec()), (TARBALL, b"t".to_vec())];
    let cases: [(Tool, &[&str]); 4] = [
        (Tool::Xorriso, &["-R", "-J"]),
        (Tool::Genisoimage, &["-R", "-J"]),
        // genisoimage relocates directories deeper than 8 levels into rr_moved and leaves
        // a Rock Ridge child link (CL) in their place.
        (Tool::Genisoimage, &["-R"]),
        (Tool::Xorriso, &["--norock", "-J"]),
    ];
    for (tool, args) in cases {
        let img = image(tool, args, &files);
        let mut iso = open(&img).unwrap();
        let file = iso.find(DEEP).unwrap();
        let file = file.unwrap_or_else(|| panic!("{tool:?} {args:?}: deep file not found"));
        assert_eq!(read_all(&mut iso, &file), b"deep\n", "{tool:?} {args:?}");
        if args == ["-R"] {
            assert_eq!(file.naming, Naming::RockRidge);
            // The relocated directory is not listed a second time.
            let moved = iso.find("rr_moved/j/deep-file.txt").unwrap();
            assert_eq!(moved, None, "relocated directory shown in rr_moved");
        }
    }
}

#[test]
fn volume_labels_read_back_as_written() {
    for label in ["K8S_1_28_4", "CKS-k8s-v1.28.4", "config-2", "CIDATA"] {
        for tool in [Tool::Xorriso, Tool::Genisoimage] {
            let img = image(tool, &["-R", "-J", "-V", label], &[("x", vec![1])]);
            assert_eq!(open(&img).unwrap().volume_label(), label, "{tool:?}");
        }
    }
}

#[test]
fn cloudstack_style_disc_without_a_label_has_the_tool_default_label_and_the_tarball() {
    // CloudStack's create-kubernetes-binaries-iso.sh runs `mkisofs -J -R -l` with no -V.
    let cases = [(Tool::Genisoimage, "CDROM"), (Tool::Xorriso, "ISOIMAGE")];
    for (tool, label) in cases {
        let img = image(tool, &["-J", "-R", "-l"], &k8s_tree());
        assert_eq!(open(&img).unwrap().volume_label(), label, "{tool:?}");
        assert_eq!(assert_tarball_intact(&img).naming, Naming::RockRidge);
    }
}

#[test]
fn is_iso9660_tells_discs_from_other_files() {
    assert!(is_iso9660(&mut Cursor::new(standard())).unwrap());
    assert!(!is_iso9660(&mut Cursor::new(tarball())).unwrap());
    assert!(!is_iso9660(&mut Cursor::new(&[0u8; 100][..])).unwrap());
    assert!(!is_iso9660(&mut Cursor::new(Vec::new())).unwrap());
}

#[test]
fn image_file_on_disk_is_read_through_a_file_handle() {
    let work = TempDir::new().unwrap();
    let path = work.path().join("disc.iso");
    fs::write(&path, standard()).unwrap();
    let mut iso = IsoImage::open(fs::File::open(&path).unwrap()).unwrap();
    let file = iso.find(TARBALL).unwrap().unwrap();
    let mut out = Vec::new();
    iso.open_file(&file).unwrap().read_to_end(&mut out).unwrap();
    assert!(out == tarball());
}

// ---- damaged discs ----

fn truncated_message(result: Result<impl std::fmt::Debug, IsoError>, cut: usize) -> String {
    let declared = standard().len() as u64;
    match result {
        Err(
            e @ IsoError::Truncated {
                expected,
                actual,
                declared: true,
            },
        ) => {
            assert_eq!((expected, actual), (declared, cut as u64));
            let msg = e.to_string();
            assert!(msg.contains(&format!("declares {declared} bytes")), "{msg}");
            assert!(msg.contains(&format!("only {cut} bytes")), "{msg}");
            msg
        }
        other => panic!("expected Truncated, got {other:?}"),
    }
}

#[test]
fn disc_truncated_inside_the_tarball_is_refused_as_truncated_naming_both_sizes() {
    let img = standard();
    let file = assert_tarball_intact(img);
    let cut = file.first_sector().unwrap() as usize * iso::SECTOR + tarball().len() / 2;
    truncated_message(open(&img[..cut]).map(|_| ()), cut);
}

#[test]
fn disc_truncated_after_the_tarball_is_refused_although_the_tarball_survived() {
    let img = standard();
    let file = assert_tarball_intact(img);
    let end = file.first_sector().unwrap() as usize * iso::SECTOR + tarball().len();
    assert!(
        end < img.len() - iso::SECTOR,
        "the tarball is not the last file"
    );
    for cut in [end, img.len() - iso::SECTOR, img.len() - 1] {
        truncated_message(open(&img[..cut]).map(|_| ()), cut);
    }
    // The whole image, and one with bytes appended (a hybrid image's partitions), pass.
    assert_tarball_intact(img);
    let mut longer = img.to_vec();
    longer.extend_from_slice(&[0; 4096]);
    assert_tarball_intact(&longer);
}

#[test]
fn disc_truncated_before_the_root_directory_is_refused_as_truncated() {
    let img = standard();
    let cut = iso::pvd_root(img).lba as usize * iso::SECTOR;
    truncated_message(open(&img[..cut]).map(|_| ()), cut);
}

#[test]
fn image_shorter_than_17_sectors_with_a_cd001_is_cut_short_not_foreign() {
    let img = standard();
    for cut in [
        16 * iso::SECTOR + 6,
        16 * iso::SECTOR + 84,
        17 * iso::SECTOR - 1,
    ] {
        let err = open(&img[..cut]).map(|_| ()).unwrap_err();
        assert!(
            matches!(err, IsoError::Truncated { actual, .. } if actual == cut as u64),
            "{cut}: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("truncated") && msg.contains(&cut.to_string()),
            "{msg}"
        );
    }
    // With the volume size readable, the message names it.
    let msg = open(&img[..16 * iso::SECTOR + 84])
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains(&format!("declares {} bytes", img.len())),
        "{msg}"
    );
    // Without a CD001 it is still not an ISO 9660 image.
    assert!(matches!(
        open(&img[..16 * iso::SECTOR + 5]),
        Err(IsoError::NotIso9660)
    ));
    assert!(matches!(
        open(&[0u8; 17 * 2048 - 1]),
        Err(IsoError::NotIso9660)
    ));
}

#[test]
fn disc_truncated_at_every_sector_never_panics() {
    let img = standard();
    // Every sector up to the end of the directories, then a few inside the data.
    let root = iso::pvd_root(img).lba as usize;
    let cuts = (0..root + 40).chain([root + 100, root + 1000, img.len() / iso::SECTOR - 1]);
    for sector in cuts {
        let cut = (sector * iso::SECTOR).min(img.len());
        let _ = exercise(&img[..cut]);
        let _ = exercise(&img[..cut.saturating_sub(1)]);
    }
}

#[test]
fn garbage_and_zeros_are_not_iso9660() {
    let garbage = patterned(1 << 20, 99);
    assert!(matches!(open(&garbage), Err(IsoError::NotIso9660)));
    let zeros = vec![0u8; 1 << 20];
    assert!(matches!(open(&zeros), Err(IsoError::NotIso9660)));
    assert!(matches!(open(&[]), Err(IsoError::NotIso9660)));
    let msg = IsoError::NotIso9660.to_string();
    assert!(msg.contains("CD001") && msg.contains("sector 16"), "{msg}");
}

#[test]
fn garbage_after_the_volume_descriptors_is_an_error_not_a_panic() {
    let mut img = standard().to_vec();
    let start = 18 * iso::SECTOR;
    let noise = patterned(img.len() - start, 1234);
    img[start..].copy_from_slice(&noise);
    assert!(exercise(&img).is_err());
}

#[test]
fn missing_terminator_is_corrupt() {
    let mut img = standard().to_vec();
    // Turn every descriptor after the primary one into a boot record, so the set runs
    // into sectors that are not descriptors.
    let mut sector = 17;
    while &img[sector * iso::SECTOR + 1..sector * iso::SECTOR + 6] == b"CD001" {
        img[sector * iso::SECTOR] = 0;
        sector += 1;
    }
    let msg = corrupt_message(open(&img).map(|_| ()));
    assert!(msg.contains("CD001") || msg.contains("terminator"), "{msg}");
}

#[test]
fn logical_block_size_other_than_2048_is_unsupported() {
    let mut img = standard().to_vec();
    iso::put_both16(&mut img, 16 * iso::SECTOR + 128, 4096);
    match open(&img) {
        Err(e @ IsoError::Unsupported(_)) => assert!(e.to_string().contains("4096"), "{e}"),
        other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
    }
}

/// The Rock Ridge-only disc of the Kubernetes-like tree (no Joliet to turn to).
fn rock_ridge_only() -> &'static [u8] {
    static IMG: OnceLock<Vec<u8>> = OnceLock::new();
    IMG.get_or_init(|| image(Tool::Xorriso, &["-R", "-V", "RR_ONLY"], &k8s_tree()))
}

#[test]
fn unreadable_primary_root_is_corrupt_without_joliet_and_read_through_joliet_with_it() {
    // Linux: "root inode is unusable. Disabling Rock Ridge and switching to Joliet."
    for (lba, sector) in [(0xFFFF_FFF0u32, "sector 4294967280"), (16, "sector 16")] {
        let mut img = rock_ridge_only().to_vec();
        iso::put_both32(&mut img, iso::PVD_ROOT_RECORD + 2, lba);
        let msg = corrupt_message(open(&img).map(|_| ()));
        assert!(msg.contains(sector), "{msg}");

        let mut img = standard().to_vec();
        iso::put_both32(&mut img, iso::PVD_ROOT_RECORD + 2, lba);
        let mut iso = open(&img).unwrap();
        assert_eq!(iso.naming(), Naming::Joliet);
        assert_eq!(iso.find(TARBALL).unwrap().unwrap().naming, Naming::Joliet);
    }
}

/// Issue 20 item 11, as the node's kernel does it (Debian 12's 6.1.192 carries upstream
/// 4243bf80, "isofs: handle CDs with bad root inode but good Joliet root directory"):
/// `isofs_fill_super` reads the root inode from the primary descriptor's root first; when
/// that fails it turns to Joliet only if the Joliet root lies elsewhere, and otherwise
/// fails the mount ("get root inode failed"). Refused at open, naming the descriptor.
#[test]
fn primary_root_past_the_end_is_refused_naming_the_descriptor_unless_joliet_lies_elsewhere() {
    let past = 0xFFFF_FFF0u32;
    // No Joliet: refused, and the sentence names the primary volume descriptor.
    let mut img = rock_ridge_only().to_vec();
    iso::put_both32(&mut img, iso::PVD_ROOT_RECORD + 2, past);
    let msg = corrupt_message(open(&img).map(|_| ()));
    assert!(
        msg.contains("primary volume descriptor (sector 16)"),
        "{msg}"
    );
    assert!(msg.contains("sector 4294967280"), "{msg}");
    assert!(msg.contains("get root inode failed"), "{msg}");

    // Joliet whose root is the same unreadable extent: the kernel has nothing to turn to.
    let mut img = standard().to_vec();
    let joliet = iso::joliet_root(&img);
    iso::put_both32(&mut img, iso::PVD_ROOT_RECORD + 2, past);
    iso::put_both32(&mut img, joliet.off + 2, past);
    let msg = corrupt_message(open(&img).map(|_| ()));
    assert!(
        msg.contains("primary volume descriptor (sector 16)"),
        "{msg}"
    );
    assert!(msg.contains("the Joliet root lies there too"), "{msg}");

    // Joliet intact, elsewhere: the kernel mounts it through Joliet, and so does the reader.
    let mut img = standard().to_vec();
    iso::put_both32(&mut img, iso::PVD_ROOT_RECORD + 2, past);
    let mut iso = open(&img).unwrap();
    assert_eq!(iso.naming(), Naming::Joliet);
    assert!(iso.find(TARBALL).unwrap().is_some());
}

#[test]
fn root_directory_of_four_gib_is_refused_without_reading_it() {
    let mut img = standard().to_vec();
    iso::put_both32(&mut img, iso::PVD_ROOT_RECORD + 10, u32::MAX);
    let mut iso = open(&img).unwrap();
    let msg = corrupt_message(iso.find(TARBALL));
    assert!(msg.contains("extends past the end of the image"), "{msg}");
    assert!(matches!(iso.list_root(), Err(IsoError::Corrupt(_))));
}

#[test]
fn directory_pointing_at_its_parent_or_itself_does_not_loop() {
    let img = standard();
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    for target in [root.lba, etcd.lba] {
        let mut img = img.to_vec();
        iso::put_both32(&mut img, etcd.off + 2, target);
        let mut iso = open(&img).unwrap();
        // Whatever the answer, it comes back: a lookup descends once per component.
        let _ = iso.find(TARBALL).unwrap();
        let looping = ["etcd"; 32].join("/");
        assert!(iso.find(&looping).is_ok());
        let too_deep = ["etcd"; 33].join("/");
        assert!(matches!(iso.find(&too_deep), Err(IsoError::Unsupported(_))));
    }
}

#[test]
fn tarball_extent_outside_the_image_is_corrupt() {
    let img = standard();
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    let tar = iso::child(img, &etcd, "ETCD_LIN");
    for lba in [u32::MAX, (img.len() / iso::SECTOR) as u32 - 2] {
        let mut img = img.to_vec();
        iso::put_both32(&mut img, tar.off + 2, lba);
        let mut iso = open(&img).unwrap();
        let msg = corrupt_message(iso.find(TARBALL));
        assert!(msg.contains("extends past the end of the image"), "{msg}");
    }
}

#[test]
fn interleaved_tarball_is_unsupported() {
    let img = standard();
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    let tar = iso::child(img, &etcd, "ETCD_LIN");
    let mut img = img.to_vec();
    img[tar.off + 26] = 1; // file unit size
    img[tar.off + 27] = 1; // interleave gap size
    let mut iso = open(&img).unwrap();
    match iso.find(TARBALL) {
        Err(e @ IsoError::Unsupported(_)) => assert!(e.to_string().contains("interleaved")),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn record_whose_name_overruns_it_is_corrupt_with_its_location() {
    let img = standard();
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    let mut img = img.to_vec();
    img[etcd.off + 32] = 250; // identifier length beyond the record
    let mut iso = open(&img).unwrap();
    let msg = corrupt_message(iso.find(TARBALL));
    let sector = etcd.off / iso::SECTOR;
    let offset = etcd.off % iso::SECTOR;
    assert!(
        msg.contains(&format!("sector {sector}, offset {offset}")),
        "{msg}"
    );
    assert!(msg.contains("overruns"), "{msg}");
}

#[test]
fn record_length_shorter_than_a_record_is_corrupt() {
    let img = standard();
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    for len in [1u8, 20, 33] {
        let mut img = img.to_vec();
        img[etcd.off] = len;
        assert!(exercise(&img).is_err(), "record length {len}");
    }
}

#[test]
fn rock_ridge_continuation_loop_is_corrupt_not_a_hang() {
    let img = standard();
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    let (px, px_len) = iso::susp_entry(img, &etcd, b"PX").expect("xorriso writes PX");
    let mut img = img.to_vec();
    // Replace the PX entry with a CE to sector 1 (system area, unused), padded with an
    // unknown entry, and make sector 1 hold a CE that points at itself.
    img[px..px + 28].copy_from_slice(&iso::ce_entry(1, 0, 28));
    let mut filler = vec![0u8; px_len - 28];
    filler[..4].copy_from_slice(&[b'Z', b'Z', (px_len - 28) as u8, 1]);
    img[px + 28..px + px_len].copy_from_slice(&filler);
    img[iso::SECTOR..iso::SECTOR + 28].copy_from_slice(&iso::ce_entry(1, 0, 28));
    let mut iso = open(&img).unwrap();
    let msg = corrupt_message(iso.find(TARBALL));
    assert!(
        msg.contains("more than 32 SUSP continuation areas"),
        "{msg}"
    );
}

#[test]
fn rock_ridge_continuation_outside_the_image_or_oversized_is_corrupt() {
    let img = standard();
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    let (px, _) = iso::susp_entry(img, &etcd, b"PX").unwrap();
    for ce in [
        iso::ce_entry(u32::MAX, 0, 28),
        iso::ce_entry(1, 0, u32::MAX),
    ] {
        let mut img = img.to_vec();
        img[px..px + 28].copy_from_slice(&ce);
        // The rest of the old PX entry becomes an entry of length 0: the area ends there.
        img[px + 28..px + 32].fill(0);
        let mut iso = open(&img).unwrap();
        assert!(matches!(iso.find(TARBALL), Err(IsoError::Corrupt(_))));
    }
}

#[test]
fn susp_entry_overrunning_its_area_is_corrupt() {
    let img = standard();
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    let (nm, _) = iso::susp_entry(img, &etcd, b"NM").expect("xorriso writes NM");
    let mut img = img.to_vec();
    img[nm + 2] = 255;
    let msg = corrupt_message(open(&img).unwrap().find(TARBALL));
    assert!(msg.contains("SUSP entry NM"), "{msg}");
}

// ---- one tree per disc, chosen as Linux does ----

#[test]
fn each_disc_reports_the_tree_linux_would_read() {
    assert_eq!(open(standard()).unwrap().naming(), Naming::RockRidge);
    assert_eq!(open(standard()).unwrap().naming().as_str(), "rock-ridge");
    assert_eq!(open(rock_ridge_only()).unwrap().naming(), Naming::RockRidge);
    let joliet = image(Tool::Genisoimage, &["-J"], &k8s_tree());
    assert_eq!(open(&joliet).unwrap().naming().as_str(), "joliet");
    let plain = image(Tool::Genisoimage, &[], &k8s_tree());
    assert_eq!(open(&plain).unwrap().naming().as_str(), "iso9660");
}

/// Rewrites the Rock Ridge name of the tarball's record in `img` with `name` (same length).
fn rename_rock_ridge_tarball(img: &mut [u8], name: &str) {
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    let tar = iso::child(img, &etcd, "ETCD_LIN");
    let (nm, len) = iso::susp_entry(img, &tar, b"NM").expect("xorriso writes NM");
    assert_eq!(
        len - 5,
        name.len(),
        "the new name must be as long as the old one"
    );
    img[nm + 5..nm + len].copy_from_slice(name.as_bytes());
}

#[test]
fn path_missing_from_the_rock_ridge_tree_is_missing_although_joliet_has_it() {
    // A mount of this disc shows the Rock Ridge names only: the tarball is not there.
    for other in ["etcd-linux-amd64.tar.gX", "ETCD-LINUX-AMD64.TAR.GZ"] {
        let mut img = standard().to_vec();
        rename_rock_ridge_tarball(&mut img, other);
        let mut iso = open(&img).unwrap();
        assert_eq!(iso.find(TARBALL).unwrap(), None, "{other}");
        let found = iso.find(&format!("etcd/{other}")).unwrap().unwrap();
        assert_eq!(found.naming, Naming::RockRidge);
    }
}

#[test]
fn directory_in_another_case_is_missing_on_a_rock_ridge_disc() {
    let files = vec![("ETCD/etcd-linux-amd64.tar.gz", tarball().to_vec())];
    for tool in [Tool::Xorriso, Tool::Genisoimage] {
        let img = image(tool, &["-R", "-J"], &files);
        let mut iso = open(&img).unwrap();
        assert_eq!(iso.find(TARBALL).unwrap(), None, "{tool:?}");
        assert!(iso.find("ETCD/etcd-linux-amd64.tar.gz").unwrap().is_some());
        assert_eq!(iso.list_root().unwrap(), ["ETCD"], "{tool:?}");
    }
}

#[test]
fn relocated_directory_is_reached_through_its_link_only() {
    const DEEP: &str = "k8s/a/b/c/d/e/f/g/h/i/deep-file.txt";
    let files = vec![(DEEP, b"deep\n".to_vec())];
    let img = image(Tool::Genisoimage, &["-R", "-J"], &files);
    let mut iso = open(&img).unwrap();
    assert_eq!(iso.naming(), Naming::RockRidge);
    assert!(iso.find(DEEP).unwrap().is_some());
    assert_eq!(iso.find("rr_moved/i/deep-file.txt").unwrap(), None);
}

#[test]
fn joliet_tree_is_preferred_over_plain_names_without_rock_ridge() {
    // Plain names that match the path (relaxed, lower-cased by the kernel) and a Joliet
    // tree whose name for the tarball differs: Linux reads the Joliet tree only.
    let args = ["-J", "-l", "-allow-multidot", "-relaxed-filenames"];
    let mut img = image(Tool::Genisoimage, &args, &k8s_tree());
    let root = iso::joliet_root(&img);
    let etcd = iso::child_raw(&img, &root, &iso::ucs2("etcd"));
    let tar = iso::child_raw(&img, &etcd, &iso::ucs2("etcd-linux-amd64.tar.gz"));
    let last = tar.off + 33 + iso::ucs2("etcd-linux-amd64.tar.g").len() + 1;
    img[last] = b'X';
    let mut iso = open(&img).unwrap();
    assert_eq!(iso.naming(), Naming::Joliet);
    assert_eq!(iso.find(TARBALL).unwrap(), None);
    let found = iso.find("etcd/etcd-linux-amd64.tar.gX").unwrap().unwrap();
    assert_eq!(found.naming, Naming::Joliet);
}

#[test]
fn joliet_names_match_ignoring_case_and_trailing_dots_as_linux_does() {
    let img = image(Tool::Genisoimage, &["-J"], &k8s_tree());
    let mut iso = open(&img).unwrap();
    let file = iso.find("ETCD/ETCD-LINUX-AMD64.TAR.GZ.").unwrap().unwrap();
    assert_eq!(file.path, TARBALL);
    assert!(read_all(&mut iso, &file) == tarball());
}

// ---- links on the disc ----

/// Builds an image from a tree holding `files` and the `links` (path, target).
fn image_with_links(tool: Tool, files: &[(&str, &[u8])], links: &[(&str, &str)]) -> Vec<u8> {
    let work = TempDir::new().unwrap();
    let tree = work.path().join("tree");
    iso::write_tree(&tree, files);
    for (path, target) in links {
        let path = tree.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }
    let out = iso::build_iso_from(tool, &["-R", "-J"], &tree, work.path(), "links");
    fs::read(out).unwrap()
}

fn link_error(result: Result<Option<IsoFile>, IsoError>) -> (String, String, String) {
    match result {
        Err(e @ IsoError::Link { .. }) => {
            let msg = e.to_string();
            let IsoError::Link { path, target } = e else {
                unreachable!()
            };
            (path, target, msg)
        }
        other => panic!("expected a Link error, got {other:?}"),
    }
}

#[test]
fn rock_ridge_symlink_at_the_archive_path_is_refused_naming_link_and_target() {
    let files = [("etcd/real.tar.gz", tarball())];
    let cases = [
        ("real.tar.gz", "real.tar.gz"),
        ("../etcd/./real.tar.gz", "../etcd/./real.tar.gz"),
        ("/mnt/cdrom/etcd/real.tar.gz", "/mnt/cdrom/etcd/real.tar.gz"),
    ];
    for tool in [Tool::Xorriso, Tool::Genisoimage] {
        for (target, shown) in cases {
            let img = image_with_links(tool, &files, &[(TARBALL, target)]);
            let mut iso = open(&img).unwrap();
            let (path, got, msg) = link_error(iso.find(TARBALL));
            assert_eq!((path.as_str(), got.as_str()), (TARBALL, shown), "{tool:?}");
            assert!(
                msg.contains(&format!(
                    "{TARBALL} is a Rock Ridge symbolic link to {shown}"
                )),
                "{msg}"
            );
            assert!(iso.find("etcd/real.tar.gz").unwrap().is_some());
        }
    }
}

#[test]
fn rock_ridge_symlink_on_a_directory_along_the_path_is_refused() {
    let files = [("store/etcd-linux-amd64.tar.gz", tarball())];
    for tool in [Tool::Xorriso, Tool::Genisoimage] {
        let img = image_with_links(tool, &files, &[("etcd", "store")]);
        let (path, target, _) = link_error(open(&img).unwrap().find(TARBALL));
        assert_eq!(
            (path.as_str(), target.as_str()),
            ("etcd", "store"),
            "{tool:?}"
        );
    }
}

#[test]
fn symlink_record_whose_extent_holds_a_real_tarball_is_still_a_link() {
    let files = [("etcd/real.tar.gz", tarball())];
    let mut img = image_with_links(Tool::Xorriso, &files, &[(TARBALL, "real.tar.gz")]);
    let root = iso::pvd_root(&img);
    let etcd = iso::child(&img, &root, "ETCD");
    let real = iso::child(&img, &etcd, "REAL_TAR");
    let link = iso::child(&img, &etcd, "ETCD_LIN");
    iso::put_both32(&mut img, link.off + 2, real.lba);
    iso::put_both32(&mut img, link.off + 10, real.size);
    let (path, target, _) = link_error(open(&img).unwrap().find(TARBALL));
    assert_eq!((path.as_str(), target.as_str()), (TARBALL, "real.tar.gz"));
    // Without its SL entry (its PX mode still says link) it is refused too.
    let (sl, len) = iso::susp_entry(&img, &link, b"SL").expect("xorriso writes SL");
    img[sl..sl + 2].copy_from_slice(b"ZZ");
    let _ = len;
    let (_, target, msg) = link_error(open(&img).unwrap().find(TARBALL));
    assert_eq!(target, "");
    assert!(msg.contains("no target recorded"), "{msg}");
}

/// Writes `img` to a file and validates it as `etcd-setup check` does.
fn validate(img: &[u8]) -> Result<source::Validated, etcd_setup::reason::Failure> {
    let work = TempDir::new().unwrap();
    let path = work.path().join("disc.iso");
    fs::write(&path, img).unwrap();
    source::validate_path(&path, TARBALL, work.path(), &Policy::default())
}

#[test]
fn check_refuses_a_link_on_the_disc_as_archive_unsafe() {
    let files = [("etcd/real.tar.gz", tarball())];
    let img = image_with_links(Tool::Xorriso, &files, &[(TARBALL, "real.tar.gz")]);
    let failure = validate(&img).unwrap_err();
    assert_eq!(
        failure.code,
        ReasonCode::ArchiveUnsafe,
        "{}",
        failure.message
    );
    assert!(
        failure.message.contains("symbolic link to real.tar.gz"),
        "{}",
        failure.message
    );
}

#[test]
fn check_refuses_an_image_cut_short_naming_both_sizes() {
    let img = standard();
    let file = assert_tarball_intact(img);
    let cut = file.first_sector().unwrap() as usize * iso::SECTOR + tarball().len() + 1;
    let failure = validate(&img[..cut]).unwrap_err();
    assert_eq!(
        failure.code,
        ReasonCode::IsoUnreadable,
        "{}",
        failure.message
    );
    let msg = &failure.message;
    assert!(
        msg.contains(&format!("declares {} bytes", img.len())),
        "{msg}"
    );
    assert!(msg.contains(&format!("only {cut} bytes")), "{msg}");
    assert!(msg.contains("truncated"), "{msg}");
}

// ---- zisofs ----

/// A compressible stand-in for the tarball that spans several zisofs blocks, holds an
/// all-zero block (stored as an empty block) and ends inside a block.
fn compressible() -> &'static [u8] {
    static DATA: OnceLock<Vec<u8>> = OnceLock::new();
    DATA.get_or_init(|| {
        let mut data = Vec::new();
        for i in 0..40_000u32 {
            data.extend_from_slice(format!("etcd member {i} ready\n").as_bytes());
        }
        data.extend_from_slice(&[0; 200_000]);
        data.extend_from_slice(&patterned(50_000, 11));
        data.extend_from_slice(&[b'e'; 1234]);
        data
    })
}

/// zisofs images of `compressible()` at the tarball path: mkzftree + xorriso -as mkisofs
/// -z, mkzftree + genisoimage -z, and xorriso's own --zisofs filter.
fn zisofs_images() -> Vec<(&'static str, Vec<u8>)> {
    let work = TempDir::new().unwrap();
    let tree = work.path().join("tree");
    iso::write_tree(&tree, &[(TARBALL, compressible()), ("small", b"tiny\n")]);
    let zipped = work.path().join("zipped");
    iso::mkzftree(&tree, &zipped);
    let mut out = Vec::new();
    for (name, tool) in [
        ("xorriso -z", Tool::Xorriso),
        ("genisoimage -z", Tool::Genisoimage),
    ] {
        let path = iso::build_iso_from(tool, &["-R", "-J", "-z"], &zipped, work.path(), "z");
        out.push((name, fs::read(&path).unwrap()));
        fs::remove_file(path).unwrap();
    }
    let native = work.path().join("native.iso");
    let mut cmd = Command::new("xorriso");
    cmd.arg("-outdev")
        .arg(&native)
        .args(["-joliet", "on", "-map"])
        .arg(&tree)
        .args(["/", "-set_filter_r", "--zisofs", "/", "--", "-commit"]);
    iso::run(cmd, "xorriso");
    out.push(("xorriso --zisofs", fs::read(native).unwrap()));
    out
}

#[test]
fn zisofs_file_reads_back_as_its_uncompressed_bytes() {
    for (how, img) in zisofs_images() {
        assert!(
            img.len() < compressible().len(),
            "{how}: nothing was compressed"
        );
        let mut iso = open(&img).unwrap();
        let file = iso.find(TARBALL).unwrap().expect(how);
        assert!(file.is_zisofs(), "{how}");
        assert_eq!(file.size, compressible().len() as u64, "{how}");
        assert!(
            read_all(&mut iso, &file) == compressible(),
            "{how}: content differs"
        );
        // Odd-sized reads give the same bytes.
        let mut reader = iso.open_file(&file).unwrap();
        let (mut out, mut buf) = (Vec::new(), vec![0u8; 70_001]);
        for step in [1usize, 4095, 70_001, 32_768].iter().cycle() {
            let n = reader.read(&mut buf[..*step]).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        assert!(out == compressible(), "{how}: chunked content differs");
        let small = iso.find("small").unwrap().unwrap();
        assert_eq!(read_all(&mut iso, &small), b"tiny\n", "{how}");
    }
}

/// The stored (compressed) data of the tarball in a zisofs image: its first byte.
fn zisofs_data(img: &[u8]) -> usize {
    let root = iso::pvd_root(img);
    let etcd = iso::child(img, &root, "ETCD");
    let tar = iso::child(img, &etcd, "ETCD_LIN");
    tar.lba as usize * iso::SECTOR
}

fn read_error(img: &[u8]) -> String {
    let mut iso = open(img).unwrap();
    let file = iso.find(TARBALL).unwrap().unwrap();
    let mut out = Vec::new();
    let err = iso
        .open_file(&file)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap_err();
    assert!(out.len() < compressible().len());
    err.to_string()
}

#[test]
fn damaged_zisofs_data_is_a_read_error_naming_the_block() {
    let (_, img) = zisofs_images().remove(0);
    let data = zisofs_data(&img);
    // Block pointer table at byte 16: block 1 ends before it starts.
    let mut bad = img.clone();
    let start1 = iso::le32(&bad, data + 20);
    bad[data + 24..data + 28].copy_from_slice(&(start1 - 1).to_le_bytes());
    let msg = read_error(&bad);
    assert!(
        msg.contains("zisofs file etcd/etcd-linux-amd64.tar.gz: block 1 ends"),
        "{msg}"
    );
    // Garbage inside block 0's zlib stream.
    let mut bad = img.clone();
    let start0 = iso::le32(&bad, data + 16) as usize;
    bad[data + start0 + 2..data + start0 + 40].fill(0xFF);
    let msg = read_error(&bad);
    assert!(msg.contains("block 0"), "{msg}");
    // A block claiming far more compressed bytes than zlib makes of 32 KiB.
    let mut bad = img.clone();
    bad[data + 20..data + 24].copy_from_slice(&(start0 as u32 + 1_000_000).to_le_bytes());
    let msg = read_error(&bad);
    assert!(msg.contains("more than zlib can make"), "{msg}");
    // No zisofs magic.
    let mut bad = img;
    bad[data] ^= 0xFF;
    let msg = read_error(&bad);
    assert!(msg.contains("zisofs magic"), "{msg}");
}

#[test]
fn zisofs_of_another_algorithm_or_block_size_is_unsupported_naming_zisofs() {
    let (_, img) = zisofs_images().remove(0);
    let root = iso::pvd_root(&img);
    let etcd = iso::child(&img, &root, "ETCD");
    let tar = iso::child(&img, &etcd, "ETCD_LIN");
    let (zf, _) = iso::susp_entry(&img, &tar, b"ZF").expect("mkzftree files get ZF");
    for (at, value, needle) in [(4, b'P', "algorithm \"Pz\""), (7, 20, "2^20")] {
        let mut bad = img.clone();
        bad[zf + at] = value;
        match open(&bad).unwrap().find(TARBALL) {
            Err(e @ IsoError::Unsupported(_)) => {
                let msg = e.to_string();
                assert!(msg.contains("zisofs") && msg.contains(needle), "{msg}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}

#[test]
fn check_passes_the_bytes_of_a_zisofs_tarball_to_the_archive_pass() {
    // The stand-in is no gzip file: the archive pass must see its first real bytes (the
    // text), not the zisofs magic, so it fails on the gzip header of the inflated data.
    let (_, img) = zisofs_images().remove(0);
    let failure = validate(&img).unwrap_err();
    assert_eq!(
        failure.code,
        ReasonCode::ArchiveCorrupt,
        "{}",
        failure.message
    );
    let detail = format!("{} {:?}", failure.message, failure.source);
    assert!(!detail.contains("zisofs"), "{detail}");
}
