//! A backup's plaintext snapshot proven restorable (issue 21): a real snapshot of etcd
//! 3.5.16 and 3.4.23 passes with its revision and key revisions; a flipped byte, a file
//! cut short and metadata of another revision or key count each fail as `backup-verify-failed`,
//! saying which; the scratch data dir is gone afterwards in every case.
mod support;

use etcd_setup::backup::trial::{self, Expect};
use etcd_setup::reason::ReasonCode;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::etcd::Cluster;

/// 20 keys put, one of them again: 21 key revisions, the last at revision 22.
const PUTS: u64 = 21;

/// A snapshot of a one-member cluster of `version` holding [`PUTS`] key revisions, saved
/// with etcdctl into `dir`; its revision.
fn snapshot(c: &Cluster, dir: &Path) -> (PathBuf, i64) {
    let ctl = |args: &[&str]| {
        let out = Command::new(c.etcdctl())
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", c.client_url(0)))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "etcdctl {args:?}: {out:?}");
        out.stdout
    };
    for i in 0..20 {
        ctl(&["put", &format!("/registry/k{i:02}"), &format!("value {i}")]);
    }
    ctl(&["put", "/registry/k00", "again"]);
    let got: serde_json::Value =
        serde_json::from_slice(&ctl(&["get", "/registry/k00", "-w", "json"])).unwrap();
    let revision = got["header"]["revision"].as_i64().unwrap();
    let file = dir.join("backup.db");
    ctl(&["snapshot", "save", &file.display().to_string()]);
    (file, revision)
}

fn sha(file: &Path) -> [u8; 32] {
    Sha256::digest(std::fs::read(file).unwrap()).into()
}

/// The scratch parent holds nothing once a trial returned.
fn assert_empty(scratch: &Path, case: &str) {
    let left: Vec<_> = std::fs::read_dir(scratch).unwrap().collect();
    assert!(left.is_empty(), "{case}: the trial left {left:?}");
}

fn a_snapshot_is_proven_and_bad_ones_refused(version: &str) {
    let c = Cluster::start(version, 1, &format!("trial-{version}"));
    let dir = support::scratch::dir("trial");
    let (file, revision) = snapshot(&c, dir.path());
    assert_eq!(revision, 1 + PUTS as i64);
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    // What etcd's own `snapshot status` counts, as `snapshot` records it for the upload.
    let tool = trial::tool_for(&c.bin, version).unwrap();
    let total_keys = etcd_setup::member::tools::file_status(&tool, &file)
        .unwrap()
        .total_keys;
    let good = Expect {
        sha256: sha(&file),
        revision,
        total_keys: Some(total_keys),
        etcd_version: version,
    };

    let t = trial::trial(&file, &good, &c.bin, &scratch).unwrap();
    assert_eq!(t.revision, revision);
    assert_eq!(t.keys, PUTS);
    assert_eq!(t.etcd_version, version);
    assert_empty(&scratch, "a good snapshot");

    // Metadata of another revision.
    let other = Expect {
        revision: revision + 5,
        ..good.clone()
    };
    let e = trial::trial(&file, &other, &c.bin, &scratch).unwrap_err();
    assert_eq!(e.code, ReasonCode::BackupVerifyFailed, "{}", e.message);
    assert!(
        e.message.contains(&format!(
            "holds revision {revision}, its backup's metadata says {}",
            revision + 5
        )),
        "{}",
        e.message
    );
    assert_empty(&scratch, "another revision");

    // Metadata of another key count; none recorded (an older agent's object) is no check.
    let more = Expect {
        total_keys: Some(total_keys + 1),
        ..good.clone()
    };
    let e = trial::trial(&file, &more, &c.bin, &scratch).unwrap_err();
    assert_eq!(e.code, ReasonCode::BackupVerifyFailed, "{}", e.message);
    assert!(
        e.message.contains(&format!(
            "etcd counts {total_keys} keys in it, its backup's metadata says {}",
            total_keys + 1
        )),
        "{}",
        e.message
    );
    assert_empty(&scratch, "another key count");
    let unrecorded = Expect {
        total_keys: None,
        ..good.clone()
    };
    assert_eq!(
        trial::trial(&file, &unrecorded, &c.bin, &scratch)
            .unwrap()
            .revision,
        revision
    );

    // A flipped byte inside the database: its SHA-256 differs from the metadata's; with
    // metadata of the damaged file (damaged before it was backed up), etcd's trailer.
    let bytes = std::fs::read(&file).unwrap();
    let flipped = dir.path().join("flipped.db");
    let mut b = bytes.clone();
    b[bytes.len() / 2] ^= 0x40;
    std::fs::write(&flipped, &b).unwrap();
    let e = trial::trial(&flipped, &good, &c.bin, &scratch).unwrap_err();
    assert_eq!(e.code, ReasonCode::BackupVerifyFailed, "{}", e.message);
    assert!(e.message.contains("its SHA-256 is"), "{}", e.message);
    assert!(
        e.message.contains(&flipped.display().to_string()),
        "{}",
        e.message
    );
    let e = trial::trial(
        &flipped,
        &Expect {
            sha256: sha(&flipped),
            ..good.clone()
        },
        &c.bin,
        &scratch,
    )
    .unwrap_err();
    assert_eq!(e.code, ReasonCode::BackupVerifyFailed, "{}", e.message);
    assert!(
        e.message.contains("SHA-256 trailer does not match"),
        "{}",
        e.message
    );
    assert_empty(&scratch, "a flipped byte");

    // Cut by one byte, with metadata of the cut file.
    let cut = dir.path().join("cut.db");
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
    let e = trial::trial(
        &cut,
        &Expect {
            sha256: sha(&cut),
            ..good.clone()
        },
        &c.bin,
        &scratch,
    )
    .unwrap_err();
    assert_eq!(e.code, ReasonCode::BackupVerifyFailed, "{}", e.message);
    assert!(e.message.contains("truncated"), "{}", e.message);
    assert_empty(&scratch, "a cut file");

    // A scratch parent others may write into is refused before anything is restored.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = trial::trial(&file, &good, &c.bin, &scratch).unwrap_err();
    assert_eq!(e.code, ReasonCode::BackupVerifyFailed, "{}", e.message);
    assert!(e.message.contains("closed to others"), "{}", e.message);
    assert_empty(&scratch, "an open scratch");
}

#[test]
fn etcd_3_5_16_snapshot_is_proven_and_bad_ones_refused() {
    a_snapshot_is_proven_and_bad_ones_refused("3.5.16");
}

#[test]
fn etcd_3_4_23_snapshot_is_proven_and_bad_ones_refused() {
    a_snapshot_is_proven_and_bad_ones_refused("3.4.23");
}
