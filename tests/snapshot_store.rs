//! The snapshot store on real disks (issue 20): retention that never moves the snapshot
//! just taken nor another member's, folders another user can write refused, two
//! snapshots at once, a failed copy recorded apart from the kept snapshot, a full disk
//! named `disk-full`. Real etcd 3.5.16 (and 3.4.23) on loopback, the binary with
//! `--config`.
mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::etcd::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-setup");

fn scratch() -> tempfile::TempDir {
    support::scratch::dir("store")
}

/// A configuration for member `i` of `c`, its files under `dir`, `snapshot` the lines of
/// its `[snapshot]` table.
fn config(c: &Cluster, i: usize, dir: &Path, snapshot: &str) -> PathBuf {
    c.config_file(i, dir, "", &format!("[snapshot]\n{snapshot}"))
}

fn snapshot_cmd(cfg: &Path, state: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "snapshot",
        "--config",
        cfg.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--run-dir",
        state.to_str().unwrap(),
    ]);
    cmd
}

fn snapshot(cfg: &Path, state: &Path) -> (Option<i32>, String, String) {
    let out: Output = snapshot_cmd(cfg, state).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn record(state: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(state.join("snapshot.json")).unwrap()).unwrap()
}

/// The cluster ID as the snapshot names write it.
fn cluster_hex(c: &Cluster) -> String {
    format!(
        "{:016x}",
        c.client().endpoint_status().unwrap()[0].cluster_id.0
    )
}

/// Issue 20, 1: future-dated names (a node once booted with its clock ahead) sorted
/// after the new snapshot, and retention deleted the snapshot it had just written while
/// snapshot.json named it. Now: the new one is kept and recorded, the future ones are
/// neither counted nor moved and are warned about, older ones move into pruned/ by the
/// time in their names, and nothing else in the folder is touched.
fn retention_keeps_the_snapshot_just_taken(version: &str) {
    let c = Cluster::start(version, 1, "tok-future");
    let dir = scratch();
    let snaps = dir.path().join("snaps");
    std::fs::create_dir(&snaps).unwrap();
    let future: Vec<String> = (1..=3)
        .map(|r| format!("etcd-snapshot-20991231T000000.000Z-rev{r}.db"))
        .collect();
    let past = [
        "etcd-snapshot-20200101T000000.000Z-rev7.db",
        "etcd-snapshot-20200102T000000.000Z-rev8.db",
    ];
    let others = ["etcd-snapshot-zzz.db", "notes.txt"];
    for n in future.iter().map(String::as_str).chain(past).chain(others) {
        std::fs::write(snaps.join(n), n).unwrap();
    }
    let cfg = config(
        &c,
        0,
        dir.path(),
        // pruned/'s own bounds are another test's: the 2020 names stay there.
        &format!(
            "dir = \"{}\"\nretain = 2\npruned_max_age = \"87600h\"",
            snaps.display()
        ),
    );
    let state = dir.path().join("state");
    c.client().put("k", "v").unwrap();
    let (code, so, se) = snapshot(&cfg, &state);
    assert_eq!(code, Some(0), "{so}{se}");
    assert!(!so.contains("(deleted)"), "{so}");
    let r = record(&state);
    let file = PathBuf::from(r["last"]["file"].as_str().unwrap());
    assert!(
        file.is_file(),
        "snapshot.json names {file:?}, which is not there: {r}"
    );
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("etcd-snapshot-{}-m1-", cluster_hex(&c))),
        "{name}"
    );
    assert!(se.contains("named after the time now"), "{se}");
    assert!(se.contains(&future[0]), "{se}");
    assert!(
        r["warnings"][0]
            .as_str()
            .unwrap()
            .contains("named after the time now"),
        "{r}"
    );
    // Kept: the new one, the newest older one (retain = 2), the future ones, the others.
    let mut expected: Vec<String> = future.clone();
    expected.extend([past[1].to_string(), name.clone()]);
    expected.extend(others.iter().map(|s| s.to_string()));
    expected.extend([".staging".to_string(), "pruned".to_string()]);
    expected.sort();
    assert_eq!(names_in(&snaps), expected);
    assert_eq!(names_in(&snaps.join("pruned")), [past[0]]);
    assert_eq!(names_in(&snaps.join(".staging")), Vec::<String>::new());
    assert!(
        so.contains(&format!(
            "pruned {} (moved to {})",
            snaps.join(past[0]).display(),
            snaps.join("pruned").join(past[0]).display()
        )),
        "{so}"
    );

    // Again: the first one is now the newest older one; the 2020 one moves aside.
    c.client().put("k2", "v").unwrap();
    let (code, so, se) = snapshot(&cfg, &state);
    assert_eq!(code, Some(0), "{so}{se}");
    let second = PathBuf::from(record(&state)["last"]["file"].as_str().unwrap());
    assert!(second.is_file());
    assert!(file.is_file(), "the first snapshot is one of the two kept");
    assert_eq!(names_in(&snaps.join("pruned")), [past[0], past[1]]);
    for n in &future {
        assert!(snaps.join(n).is_file(), "{n}");
    }
}

/// Issue 38, 9: pruned/ grew without bound (758 MB beside 316 MB kept after 18
/// snapshots). It now keeps the newest `pruned_retain` of this member's snapshots, none
/// older than `pruned_max_age` by the time in their names, deletes the rest, says so,
/// and records what it holds; another member's, a name from the future and a file that is
/// not a snapshot stay.
#[test]
fn pruned_is_bounded_by_count_and_age_and_its_size_recorded() {
    let c = Cluster::start("3.5.16", 1, "tok-pruned");
    let cluster = u64::from_str_radix(&cluster_hex(&c), 16).unwrap();
    let dir = scratch();
    let snaps = dir.path().join("snaps");
    let pruned = snaps.join("pruned");
    std::fs::create_dir_all(&pruned).unwrap();
    let now = std::time::SystemTime::now();
    let ago = |h: u64| now - std::time::Duration::from_secs(h * 3600);
    let name = |member: &str, t, rev| etcd_setup::member::names::name_for(cluster, member, t, rev);
    // In the folder: this member's snapshot of half an hour ago, moved aside (retain 1).
    let moved = name("m1", now - std::time::Duration::from_secs(1800), 9);
    std::fs::write(snaps.join(&moved), vec![1u8; 300]).unwrap();
    let kept_there = name("m1", ago(1), 8);
    let over_count = [name("m1", ago(2), 7), name("m1", ago(3), 6)];
    let over_age = name("m1", ago(72), 5);
    let untouched = [
        name("m2", ago(100), 4),
        name("m1", now + std::time::Duration::from_secs(7200), 3),
        "notes.txt".to_string(),
    ];
    for n in over_count
        .iter()
        .chain([&kept_there, &over_age])
        .chain(&untouched)
    {
        std::fs::write(pruned.join(n), vec![2u8; 100]).unwrap();
    }
    let cfg = config(
        &c,
        0,
        dir.path(),
        &format!(
            "dir = \"{}\"\nretain = 1\npruned_retain = 2\npruned_max_age = \"48h\"",
            snaps.display()
        ),
    );
    let state = dir.path().join("state");
    let (code, so, se) = snapshot(&cfg, &state);
    assert_eq!(code, Some(0), "{so}{se}");
    let mut expected: Vec<String> = untouched.to_vec();
    expected.extend([moved.clone(), kept_there.clone()]);
    expected.sort();
    assert_eq!(names_in(&pruned), expected);
    for gone in over_count.iter().chain([&over_age]) {
        assert!(
            so.contains(&format!(
                "deleted {} (past snapshot.pruned_retain 2 or snapshot.pruned_max_age 48 h)",
                pruned.join(gone).display()
            )),
            "{gone}: {so}"
        );
    }
    let last = &record(&state)["last"];
    assert_eq!(last["pruned_files"], 5, "{last}");
    assert_eq!(last["pruned_bytes"], 300 + 4 * 100, "{last}");
}

#[test]
fn retention_keeps_the_snapshot_just_taken_3_5() {
    retention_keeps_the_snapshot_just_taken("3.5.16");
}

#[test]
fn retention_keeps_the_snapshot_just_taken_3_4() {
    retention_keeps_the_snapshot_just_taken("3.4.23");
}

/// Issue 20, 9: a copy_dir shared by the members held nameless snapshots, and each
/// member's retention pruned the others'. Now the names carry cluster and member, and
/// retention moves only this member's of this cluster.
#[test]
fn a_shared_copy_dir_keeps_every_other_members_snapshots() {
    let c = Cluster::start("3.5.16", 1, "tok-shared");
    let dir = scratch();
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    let id = cluster_hex(&c);
    let theirs = [
        format!("etcd-snapshot-{id}-m2-20200101T000000.000Z-rev1.db"),
        format!("etcd-snapshot-{id}-m3-20200101T000000.000Z-rev1.db"),
        "etcd-snapshot-00000000000000aa-m1-20200101T000000.000Z-rev1.db".to_string(),
    ];
    let mine_before = format!("etcd-snapshot-{id}-m1-20200101T000000.000Z-rev1.db");
    for n in theirs.iter().chain([&mine_before]) {
        std::fs::write(copy.join(n), n).unwrap();
    }
    let cfg = config(
        &c,
        0,
        dir.path(),
        &format!(
            // pruned/'s own bounds aside: the 2020 name stays there.
            "dir = \"{}/snaps\"\ncopy_dir = \"{}\"\nretain = 1\npruned_max_age = \"87600h\"",
            dir.path().display(),
            copy.display()
        ),
    );
    let state = dir.path().join("state");
    let (code, so, se) = snapshot(&cfg, &state);
    assert_eq!(code, Some(0), "{so}{se}");
    for n in &theirs {
        assert!(copy.join(n).is_file(), "{n} was moved: {so}");
    }
    assert_eq!(names_in(&copy.join("pruned")), [mine_before]);
    let r = record(&state);
    let copied = PathBuf::from(r["last"]["copy"].as_str().unwrap());
    assert!(copied.is_file(), "{r}");
    assert_eq!(copied.parent().unwrap(), copy);
}

/// Issue 20, 2: a snapshot folder another user may write let that user plant a link at
/// the predictable partial's name, and root overwrote the link's target. Now such a
/// folder is refused before anything is written, naming the key; a link planted in its
/// place, or at the staging folder's name, is refused too and its target is untouched.
#[test]
fn a_folder_another_user_can_write_is_refused_naming_the_key() {
    let c = Cluster::start("3.5.16", 1, "tok-owner");
    let dir = scratch();
    // The other user must reach the folders below to plant anything.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "root's file").unwrap();
    let snaps = dir.path().join("snaps");
    let cfg = config(&c, 0, dir.path(), &format!("dir = \"{}\"", snaps.display()));
    let state = dir.path().join("state");
    let nobody = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    let refused = |what: &str| {
        let (code, so, se) = snapshot(&cfg, &state);
        assert_eq!(code, Some(3), "{what}: {so}{se}");
        assert!(
            se.starts_with("config-invalid: snapshot.dir "),
            "{what}: {se}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file");
        se
    };

    // Owned by another user, mode 0755: that user plants links in it.
    std::fs::create_dir(&snaps).unwrap();
    std::os::unix::fs::chown(&snaps, Some(65534), Some(65534)).unwrap();
    nobody(&[
        "ln",
        "-s",
        victim.to_str().unwrap(),
        snaps.join(".staging").to_str().unwrap(),
    ]);
    let se = refused("owned by nobody");
    assert!(se.contains("owned by uid 65534"), "{se}");
    std::fs::remove_dir_all(&snaps).unwrap();

    // Root's but world-writable, sticky or not.
    for mode in [0o1777, 0o777, 0o775] {
        std::fs::create_dir(&snaps).unwrap();
        std::fs::set_permissions(&snaps, std::fs::Permissions::from_mode(mode)).unwrap();
        let se = refused(&format!("mode {mode:o}"));
        assert!(se.contains("writable by"), "{se}");
        std::fs::remove_dir(&snaps).unwrap();
    }

    // A folder above it another user may write.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let cfg_under = config(
        &c,
        0,
        dir.path(),
        &format!("dir = \"{}/snaps\"", open.display()),
    );
    let (code, _, se) = snapshot(&cfg_under, &state);
    assert_eq!(code, Some(3), "{se}");
    assert!(
        se.contains(&format!("the folder above it, {}", open.display())),
        "{se}"
    );
    let cfg = config(&c, 0, dir.path(), &format!("dir = \"{}\"", snaps.display()));

    // The folder itself a link (to a folder root owns).
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, &snaps).unwrap();
    let se = refused("a link");
    assert!(se.contains("symbolic link"), "{se}");
    assert_eq!(names_in(&real), Vec::<String>::new());
    std::fs::remove_file(&snaps).unwrap();

    // Root's and closed, but a link at the staging folder's name.
    std::fs::create_dir(&snaps).unwrap();
    std::os::unix::fs::symlink(&real, snaps.join(".staging")).unwrap();
    let (code, _, se) = snapshot(&cfg, &state);
    assert_eq!(code, Some(3), "{se}");
    assert!(se.contains(".staging is a symbolic link"), "{se}");
    assert_eq!(names_in(&real), Vec::<String>::new());
    std::fs::remove_file(snaps.join(".staging")).unwrap();

    // And then it works, the staging folder private.
    let (code, so, se) = snapshot(&cfg, &state);
    assert_eq!(code, Some(0), "{so}{se}");
    let st = std::fs::metadata(snaps.join(".staging")).unwrap();
    assert_eq!((st.uid(), st.mode() & 0o7777), (0, 0o700));

    // A copy_dir another user owns: the snapshot is kept and recorded, the copy refused.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::os::unix::fs::chown(&copy, Some(65534), Some(65534)).unwrap();
    let cfg_copy = config(
        &c,
        0,
        dir.path(),
        &format!(
            "dir = \"{}\"\ncopy_dir = \"{}\"",
            snaps.display(),
            copy.display()
        ),
    );
    let (code, so, se) = snapshot(&cfg_copy, &state);
    assert_eq!(code, Some(3), "{so}{se}");
    assert!(se.starts_with("config-invalid: snapshot.copy_dir "), "{se}");
    let r = record(&state);
    assert!(
        PathBuf::from(r["last"]["file"].as_str().unwrap()).is_file(),
        "{r}"
    );
    assert_eq!(r["copy_failure"]["code"], "config-invalid", "{r}");
    assert!(names_in(&copy).is_empty());
}

/// Issue 20, 6: two snapshots 70-140 ms apart broke each other (the second's cleanup
/// deleted the first's partial). Now they take turns (snapshot.lock) under unique
/// partial names: both succeed, each with its own file.
#[test]
fn two_snapshots_at_once_both_succeed() {
    let c = Cluster::start("3.5.16", 1, "tok-twice");
    let dir = scratch();
    let snaps = dir.path().join("snaps");
    let cfg = config(
        &c,
        0,
        dir.path(),
        &format!("dir = \"{}\"\nretain = 10", snaps.display()),
    );
    let state = dir.path().join("state");
    // A database of some MiB, so that a save lasts long enough for the second run to
    // start in the middle of it.
    let value = "w".repeat(96 << 10);
    for i in 0..100 {
        c.client().put(&format!("fill/{i}"), &value).unwrap();
    }
    let spawn = || {
        snapshot_cmd(&cfg, &state)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // A partial of the first run: in the staging folder (or, before it, `.partial-*`
    // in the folder itself).
    let partial_exists = || {
        names_in(&snaps.join(".staging"))
            .iter()
            .any(|n| n.ends_with(".part"))
            || names_in(&snaps).iter().any(|n| n.starts_with(".partial-"))
    };
    for round in 0..3 {
        c.client().put(&format!("k{round}"), "v").unwrap();
        let first = spawn();
        let t = std::time::Instant::now();
        while !partial_exists() {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(30),
                "no partial"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let children = [first, spawn()];
        for ch in children {
            let out = ch.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let kept: Vec<String> = names_in(&snaps)
        .into_iter()
        .filter(|n| n.starts_with("etcd-snapshot-"))
        .collect();
    assert_eq!(kept.len(), 6, "{kept:?}");
    assert_eq!(names_in(&snaps.join(".staging")), Vec::<String>::new());
    assert!(record(&state)["failure"].is_null());
}

/// A small tmpfs (mode 0700), unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: &Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        SmallDisk(at.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Issue 20, 7: a copy_dir on a full disk recorded `last: null` although a verified
/// snapshot was in snapshot.dir, and left its partial on the copy disk; etcdctl's ENOSPC
/// in snapshot.dir was `snapshot-failed`. Now the kept snapshot and the copy's failure
/// are recorded apart, the copy disk holds nothing of the attempt, and a full
/// snapshot.dir is `disk-full`.
#[test]
fn a_full_disk_is_disk_full_and_a_failed_copy_keeps_the_snapshot() {
    let c = Cluster::start("3.5.16", 1, "tok-full");
    let dir = scratch();
    let client = c.client();
    // A database of a few hundred KiB: larger than the small disks.
    let value = "z".repeat(64 << 10);
    for i in 0..8 {
        client.put(&format!("big/{i}"), &value).unwrap();
    }
    let snaps = dir.path().join("snaps");
    let copy = dir.path().join("copy");
    let _copy_disk = SmallDisk::mount(&copy, "64k");
    let cfg = config(
        &c,
        0,
        dir.path(),
        &format!(
            "dir = \"{}\"\ncopy_dir = \"{}\"",
            snaps.display(),
            copy.display()
        ),
    );
    let state = dir.path().join("state");
    let (code, so, se) = snapshot(&cfg, &state);
    println!("copy onto a full disk: {code:?}\n{so}{se}");
    assert_eq!(code, Some(1), "{so}{se}");
    assert!(se.starts_with("disk-full: the disk holding "), "{se}");
    assert!(se.contains(&copy.display().to_string()), "{se}");
    let r = record(&state);
    let kept = PathBuf::from(r["last"]["file"].as_str().unwrap());
    assert!(kept.is_file(), "{r}");
    assert!(r["last"]["copy"].is_null(), "{r}");
    assert!(r["failure"].is_null(), "{r}");
    assert_eq!(r["copy_failure"]["code"], "disk-full", "{r}");
    assert_eq!(names_in(&copy), [".staging"]);
    assert_eq!(names_in(&copy.join(".staging")), Vec::<String>::new());

    // snapshot.dir itself on a full disk: etcdctl's ENOSPC.
    let small = dir.path().join("small");
    let _disk = SmallDisk::mount(&small, "64k");
    let cfg = config(&c, 0, dir.path(), &format!("dir = \"{}\"", small.display()));
    let (code, so, se) = snapshot(&cfg, &state);
    println!("snapshot onto a full disk: {code:?}\n{so}{se}");
    assert_eq!(code, Some(1), "{so}{se}");
    assert!(
        se.starts_with(&format!(
            "disk-full: the disk holding snapshot.dir {}",
            small.display()
        )),
        "{se}"
    );
    let r = record(&state);
    assert_eq!(r["failure"]["code"], "disk-full", "{r}");
    assert_eq!(
        PathBuf::from(r["last"]["file"].as_str().unwrap()),
        kept,
        "{r}"
    );
    assert_eq!(names_in(&small.join(".staging")), Vec::<String>::new());
}
