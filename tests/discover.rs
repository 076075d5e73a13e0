//! Telling the Kubernetes ISO from other discs by content, and the wait's outcomes, on
//! ISO image files standing in for /dev (the live uevent path is proven in the VM tests).

mod support;

use etcd_setup::reason::ReasonCode;
use etcd_setup::road::discover::{classify, wait_for_iso, Disc, Wait};
use etcd_setup::shared::config::DEFAULT_ARCHIVE_PATH;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn input(name: &str) -> PathBuf {
    support::inputs::isos().join(name)
}

/// A NoCloud seed like the platform's, built with xorriso.
fn seed_iso(dir: &Path, label: &str) -> PathBuf {
    let src = dir.join(format!("seed-{label}"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("user-data"), "#cloud-config\n").unwrap();
    std::fs::write(src.join("meta-data"), "instance-id: x\n").unwrap();
    let iso = dir.join(format!("{label}.iso"));
    support::inputs::make_iso(&src, label, &iso);
    iso
}

/// A fake /dev and /sys/block holding the given "devices" (image files).
struct FakeNode {
    _dir: tempfile::TempDir,
    dev: PathBuf,
    sys: PathBuf,
}

fn node(devices: &[(&str, &Path)]) -> FakeNode {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("dev");
    let sys = dir.path().join("sys-block");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::create_dir_all(&sys).unwrap();
    for (name, image) in devices {
        std::os::unix::fs::symlink(image, dev.join(name)).unwrap();
        std::fs::create_dir(sys.join(name)).unwrap();
    }
    FakeNode {
        _dir: dir,
        dev,
        sys,
    }
}

#[test]
fn classifies_kubernetes_isos_seeds_and_other_discs_by_content() {
    let tmp = tempfile::tempdir().unwrap();
    let cidata = seed_iso(tmp.path(), "CIDATA");
    let config2 = seed_iso(tmp.path(), "config-2");
    let root_disk = tmp.path().join("ext4.img");
    std::fs::write(&root_disk, vec![0u8; 1 << 20]).unwrap();
    let a = DEFAULT_ARCHIVE_PATH;
    assert!(matches!(
        classify(&input("k8s-etcd-3.5.1.iso"), a),
        Disc::Kubernetes { has_archive: true, ref label, .. } if label == "CDROM"
    ));
    assert!(matches!(
        classify(&input("k8s-no-etcd.iso"), a),
        Disc::Kubernetes {
            has_archive: false,
            ..
        }
    ));
    assert_eq!(
        classify(&cidata, a),
        Disc::Seed {
            label: "CIDATA".into()
        }
    );
    assert_eq!(
        classify(&config2, a),
        Disc::Seed {
            label: "config-2".into()
        }
    );
    assert_eq!(classify(&root_disk, a), Disc::NotIso);
    assert!(matches!(
        classify(&tmp.path().join("absent"), a),
        Disc::Unreadable(_)
    ));
}

#[test]
fn finds_the_iso_that_was_there_from_the_start_among_other_discs() {
    let tmp = tempfile::tempdir().unwrap();
    let cidata = seed_iso(tmp.path(), "CIDATA");
    let iso = input("k8s-etcd-3.4.23.iso");
    let n = node(&[("sr0", &cidata), ("sr1", &iso)]);
    let wait = Wait {
        archive_path: DEFAULT_ARCHIVE_PATH,
        limit: Duration::from_secs(30),
        sys_block: &n.sys,
        dev: &n.dev,
    };
    let started = Instant::now();
    let found = wait_for_iso(&wait, |_| {}).expect("found");
    assert_eq!(found.device, n.dev.join("sr1"));
    assert_eq!(found.label, "K8S_1_28_4");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the first scan should find it"
    );
}

#[test]
fn fails_at_once_with_archive_missing_on_a_kubernetes_iso_without_etcd() {
    let iso = input("k8s-no-etcd.iso");
    let n = node(&[("sr0", &iso)]);
    let wait = Wait {
        archive_path: DEFAULT_ARCHIVE_PATH,
        limit: Duration::from_secs(30),
        sys_block: &n.sys,
        dev: &n.dev,
    };
    let err = wait_for_iso(&wait, |_| {}).expect_err("no etcd");
    assert_eq!(err.code, ReasonCode::ArchiveMissing);
    assert!(
        err.message
            .contains("/sr0 (label CDROM) has no etcd/etcd-linux-amd64.tar.gz"),
        "{}",
        err.message
    );
}

#[test]
fn times_out_with_iso_timeout_listing_every_device_and_label_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let cidata = seed_iso(tmp.path(), "CIDATA");
    let disk = tmp.path().join("disk.img");
    std::fs::write(&disk, vec![0u8; 1 << 20]).unwrap();
    let n = node(&[("sr1", &cidata), ("vda", &disk)]);
    let wait = Wait {
        archive_path: DEFAULT_ARCHIVE_PATH,
        limit: Duration::from_secs(2),
        sys_block: &n.sys,
        dev: &n.dev,
    };
    let started = Instant::now();
    let err = wait_for_iso(&wait, |_| {}).expect_err("nothing to find");
    let waited = started.elapsed();
    assert_eq!(err.code, ReasonCode::IsoTimeout);
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    assert!(err.message.contains("within 2 s"), "{}", err.message);
    assert!(
        err.message
            .contains("/dev/sr1 (iso9660, label CIDATA, cloud-init seed)"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("/dev/vda (not iso9660)"),
        "{}",
        err.message
    );
}

/// A Kubernetes ISO whose archive path is a Rock Ridge symlink (a mount would show a
/// link, not the tarball): refused at once with archive-unsafe naming the link, not
/// waited on until iso-timeout.
#[test]
fn a_symlink_at_the_archive_path_fails_at_once_with_archive_unsafe() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("tree");
    std::fs::create_dir_all(src.join("etcd")).unwrap();
    std::fs::create_dir_all(src.join("k8s")).unwrap();
    std::fs::write(src.join("etcd/real.tar.gz"), b"\x1f\x8b not really").unwrap();
    std::os::unix::fs::symlink("real.tar.gz", src.join("etcd/etcd-linux-amd64.tar.gz")).unwrap();
    let iso = tmp.path().join("linked.iso");
    support::inputs::make_iso(&src, "CDROM", &iso);
    let n = node(&[("sr0", &iso)]);
    let wait = Wait {
        archive_path: DEFAULT_ARCHIVE_PATH,
        limit: Duration::from_secs(30),
        sys_block: &n.sys,
        dev: &n.dev,
    };
    let started = Instant::now();
    let err = wait_for_iso(&wait, |_| {}).expect_err("a link is refused");
    assert_eq!(err.code, ReasonCode::ArchiveUnsafe, "{}", err.message);
    assert!(
        err.message.contains("etcd/etcd-linux-amd64.tar.gz")
            && err.message.contains("link")
            && err.message.contains("real.tar.gz"),
        "{}",
        err.message
    );
    assert!(started.elapsed() < Duration::from_secs(5), "it waited");
}
