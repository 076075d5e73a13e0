use super::failure::hostname;
use super::*;
use crate::reason::{Failure, ReasonCode};
use nix::unistd::{geteuid, User};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;
use std::time::{SystemTime, UNIX_EPOCH};

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn is_root() -> bool {
    geteuid().is_root()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn atomic_write_replaces_content_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    atomic_write(&path, b"old content, longer", 0o644, None).unwrap();
    atomic_write(&path, b"new", 0o644, None).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"new");
    assert_eq!(entries(dir.path()), ["f"]);
}

#[test]
fn atomic_write_sets_mode_whatever_the_umask_and_owner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    atomic_write(&path, b"x", 0o640, None).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o640);
    atomic_write(&path, b"x", 0o604, None).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o604);
    if is_root() {
        atomic_write(&path, b"y", 0o644, Some((12345, 23456))).unwrap();
        let meta = fs::metadata(&path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (12345, 23456));
    }
}

#[test]
fn atomic_write_into_a_missing_folder_fails_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("f");
    let e = atomic_write(&path, b"x", 0o644, None).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn atomic_write_removes_temps_of_dead_writers_only() {
    let dir = tempfile::tempdir().unwrap();
    // PID 0x7fff_fff0 is above pid_max (at most 2^22): no such process.
    let dead = dir.path().join(".f.2147483632.0.tmp");
    let live = dir
        .path()
        .join(format!(".f.{}.999999.tmp", std::process::id()));
    let other = dir.path().join(".g.2147483632.0.tmp");
    for p in [&dead, &live, &other] {
        fs::write(p, b"partial").unwrap();
    }
    atomic_write(&dir.path().join("f"), b"x", 0o644, None).unwrap();
    assert!(!dead.exists());
    assert!(live.exists(), "a live writer's temp is left alone");
    assert!(other.exists(), "another file's temp is left alone");
}

/// Issue 38 (low): the metrics file was written through a folder its owner could swap
/// for a link, under predictable temp names. A folder that is a link is refused; the temp
/// names differ from one write to the next beyond a counter.
#[test]
fn atomic_write_refuses_a_folder_that_is_a_link_and_names_its_temps_unpredictably() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    fs::create_dir(&real).unwrap();
    let link = dir.path().join("textfile");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let e = atomic_write(&link.join("etcd_setup.prom"), b"x", 0o644, None).unwrap_err();
    assert!(e.to_string().contains("is a symbolic link"), "{e}");
    assert!(entries(&real).is_empty(), "{:?}", entries(&real));
    // A name planted for each of the next counters is no obstacle: the names are random.
    let pid = std::process::id();
    for n in 0..200 {
        std::os::unix::fs::symlink("/nonexistent", real.join(format!(".f.{pid}.{n}.tmp"))).unwrap();
    }
    atomic_write(&real.join("f"), b"written", 0o644, None).unwrap();
    assert_eq!(fs::read(real.join("f")).unwrap(), b"written");
}

#[test]
fn failure_file_has_the_headline_then_detail_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etcd-setup-failed");
    let inner = io::Error::new(io::ErrorKind::UnexpectedEof, "short read\nat sector 17");
    let failure = Failure::new(
        ReasonCode::ArchiveCorrupt,
        "the etcd archive on /dev/sr0\nis truncated;\r\n rebuild the ISO",
    )
    .with_source(anyhow::Error::new(inner).context("reading etcd/etcd-linux-amd64.tar.gz"));
    // Ourselves as the owner: the chown works as root and as anyone else.
    let me = User::from_uid(geteuid()).unwrap().unwrap();
    write_failure(&path, &me.name, &failure, at(1_777_640_096)).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "archive-corrupt: the etcd archive on /dev/sr0\\nis truncated;\\r\\n rebuild the ISO"
    );
    assert_eq!(lines[1], "cause: reading etcd/etcd-linux-amd64.tar.gz");
    // A cause of two lines is two `cause:` lines.
    assert_eq!(lines[2], "cause: short read");
    assert_eq!(lines[3], "cause: at sector 17");
    assert_eq!(lines[4], format!("agent: etcd-setup {}", crate::VERSION));
    assert_eq!(lines[5], "time: 2026-05-01T12:54:56Z");
    assert_eq!(lines[6], format!("host: {}", hostname()));
    assert_eq!(lines.len(), 7, "{text}");
    assert!(text.ends_with('\n'));
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o644);
    assert_eq!((meta.uid(), meta.gid()), (me.uid.as_raw(), me.gid.as_raw()));
}

#[test]
fn failure_file_belongs_to_the_owner_and_its_missing_home_is_made_for_it() {
    let Ok(Some(nobody)) = User::from_name("nobody") else {
        return; // no such user on this machine
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home").join("nobody");
    let path = home.join("etcd-setup-failed");
    let failure = Failure::new(ReasonCode::IsoTimeout, "no ISO within 10min");
    write_failure(&path, "nobody", &failure, at(0)).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("iso-timeout: no ISO within 10min\nagent: "));
    assert!(!text.contains("note:"), "{text}");
    let ids = (nobody.uid.as_raw(), nobody.gid.as_raw());
    let home_meta = fs::metadata(&home).unwrap();
    assert_eq!(home_meta.mode() & 0o7777, 0o755);
    if is_root() {
        let meta = fs::metadata(&path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), ids);
        assert_eq!((home_meta.uid(), home_meta.gid()), ids);
    }
}

#[test]
fn unknown_owner_still_gets_the_reason_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etcd-setup-failed");
    let failure = Failure::new(ReasonCode::ConfigInvalid, "bad");
    write_failure(&path, "no-such-user-here", &failure, at(0)).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("config-invalid: bad\n"), "{text}");
    let note = format!(
        "note: user \"no-such-user-here\" does not exist; this file is owned by uid {}\n",
        geteuid()
    );
    assert!(text.ends_with(&note), "{text}");
    assert_eq!(fs::metadata(&path).unwrap().uid(), geteuid().as_raw());
}

#[test]
fn a_second_failure_replaces_the_first_and_clear_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etcd-setup-failed");
    clear_failure(&path).expect("absent is fine");
    write_failure(
        &path,
        "root",
        &Failure::new(ReasonCode::IsoTimeout, "a"),
        at(0),
    )
    .unwrap();
    write_failure(&path, "root", &Failure::new(ReasonCode::Locked, "b"), at(0)).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("locked: b\n"), "{text}");
    clear_failure(&path).unwrap();
    assert!(!path.exists());
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn a_label_with_a_newline_and_an_escape_cannot_forge_the_failure_files_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("failed");
    let label = "CDROM\nok: etcd 9.9.9\x1b[31m";
    let failure = Failure::new(
        ReasonCode::ArchiveMissing,
        format!("the Kubernetes ISO on /dev/sr0 (label {label}) has no etcd"),
    )
    .with_source(anyhow::anyhow!(
        "the disc's top level holds: a\rb, \u{9b}31m"
    ));
    let owner = User::from_uid(geteuid()).unwrap().unwrap().name;
    write_failure(&path, &owner, &failure, at(0)).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "archive-missing: the Kubernetes ISO on /dev/sr0 (label CDROM\\nok: etcd 9.9.9\\x1b[31m) has no etcd"
    );
    assert_eq!(
        lines[1],
        "cause: the disc's top level holds: a\\rb, \\u{009b}31m"
    );
    assert!(lines[2].starts_with("agent: "), "{text}");
    assert!(!text.contains('\x1b') && !text.contains('\r') && !text.contains('\u{9b}'));
}

#[test]
fn rfc3339_utc_formatter() {
    assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(at(1_709_164_800 + 86_399)), "2024-02-29T23:59:59Z");
    assert_eq!(rfc3339(at(1_735_689_599)), "2024-12-31T23:59:59Z");
    assert_eq!(rfc3339(at(4_107_542_400)), "2100-03-01T00:00:00Z");
    assert_eq!(rfc3339(at(253_402_300_799)), "9999-12-31T23:59:59Z");
    assert_eq!(
        rfc3339(UNIX_EPOCH - Duration::from_secs(5)),
        "1970-01-01T00:00:00Z"
    );
}

fn sample_state() -> State {
    let mut s = State::begin_at(Phase::NotStarted, at(100));
    s.enter(Phase::WaitingForIso, at(101));
    s.progress = Some("waiting for the Kubernetes ISO, 12 s of 600 s".into());
    s.enter(Phase::Validating, at(113));
    s.device = Some("/dev/sr0".into());
    s.label = Some("CDROM".into());
    s.sha256 = Some("ab".repeat(32));
    s.etcd_version = Some("3.5.16".into());
    s.fail(
        &Failure::new(ReasonCode::DigestMismatch, "digest\nmismatch"),
        at(114),
    );
    s
}

#[test]
fn state_records_phases_and_reason() {
    let s = sample_state();
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(
        s.reason,
        Some(Reason {
            code: ReasonCode::DigestMismatch,
            // JSON keeps the exact text; only output escapes it.
            message: "digest\nmismatch".into()
        })
    );
    let phases: Vec<_> = s.phases.iter().map(|p| (p.phase, p.unix_ms)).collect();
    assert_eq!(
        phases,
        [
            (Phase::NotStarted, 100_000),
            (Phase::WaitingForIso, 101_000),
            (Phase::Validating, 113_000),
            (Phase::Failed, 114_000),
        ]
    );
    assert_eq!(
        s.progress, None,
        "entering a phase clears the progress line"
    );
    assert_eq!(s.updated_at, "1970-01-01T00:01:54Z");
    assert!(s.updated_after(at(114)));
    assert!(!s.updated_after(at(115)));
    assert_eq!(s.pid, Some(std::process::id()));
    assert_eq!(s.agent_version, crate::VERSION);
    assert!(Phase::WaitingForIso < Phase::Starting && Phase::Running < Phase::Failed);
}

#[test]
fn state_json_is_snake_case_with_kebab_case_phases() {
    let s = sample_state();
    let json: serde_json::Value = serde_json::to_value(&s).unwrap();
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["phase"], "failed");
    assert_eq!(json["phases"][1]["phase"], "waiting-for-iso");
    assert_eq!(json["phases"][1]["at"], "1970-01-01T00:01:41Z");
    assert_eq!(json["reason"]["code"], "digest-mismatch");
    assert_eq!(json["etcd_version"], "3.5.16");
    for phase in [
        Phase::NotStarted,
        Phase::WaitingForIso,
        Phase::Validating,
        Phase::Installing,
        Phase::Starting,
        Phase::Running,
        Phase::Failed,
    ] {
        let text = serde_json::to_string(&phase).unwrap();
        assert_eq!(text, format!("\"{}\"", phase.as_str()));
    }
}

fn store(dir: &Path) -> StateStore {
    StateStore::new(dir.join("run"), dir.join("lib"))
}

#[test]
fn state_round_trips_through_both_copies() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    assert_eq!(store.load().unwrap(), None);
    let s = sample_state();
    store.save(&s).unwrap();
    assert_eq!(store.load().unwrap(), Some(s.clone()));
    for p in [store.run_path(), store.persist_path()] {
        let back: State = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        assert_eq!(back, s, "{}", p.display());
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o644);
        assert_eq!(entries(p.parent().unwrap()), [STATE_FILE]);
    }
    let loaded = store.load_detailed();
    assert_eq!(loaded.from, Some(store.run_path()));
    assert!(loaded.notes.is_empty());
}

#[test]
fn after_a_reboot_the_persistent_copy_answers() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let s = sample_state();
    store.save(&s).unwrap();
    fs::remove_dir_all(dir.path().join("run")).unwrap(); // /run is empty after a boot
    assert_eq!(store.load().unwrap(), Some(s));
    assert_eq!(store.load_detailed().from, Some(store.persist_path()));
}

#[test]
fn live_saves_leave_the_persistent_copy_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut s = sample_state();
    store.save(&s).unwrap();
    let persisted = fs::read(store.persist_path()).unwrap();
    s.progress = Some("12 s of 600 s".into());
    store.save_live(&s).unwrap();
    assert_eq!(store.load().unwrap(), Some(s));
    assert_eq!(fs::read(store.persist_path()).unwrap(), persisted);
}

#[test]
fn a_corrupt_live_copy_is_unreadable_and_not_replaced_by_the_persistent_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let s = sample_state();
    store.save(&s).unwrap();
    fs::write(
        store.run_path(),
        b"{\"schema_version\": 1, \"phase\": \"runn",
    )
    .unwrap();
    // `run` only wants an earlier install to carry over: a corrupt copy counts as absent.
    assert_eq!(store.load().unwrap(), Some(s.clone()));
    // `status` must not answer from the older copy as if the node had rebooted.
    let loaded = store.load_detailed();
    assert_eq!(loaded.state, None);
    let unreadable = loaded.unreadable.unwrap();
    assert_eq!(unreadable.file, store.run_path());
    assert!(
        unreadable
            .why
            .starts_with("is not a state file: corrupt JSON ("),
        "{}",
        unreadable.why
    );
    assert_eq!(
        loaded.notes,
        [format!("{} {}", store.run_path().display(), unreadable.why)]
    );
}

/// Every way the file at the state path can be wrong is named, none blocks the reader,
/// and none reads as "no state".
#[test]
fn a_state_path_holding_anything_but_a_state_file_is_unreadable_and_says_what_it_holds() {
    type Make<'a> = &'a dyn Fn(&Path);
    let cases: [(&str, Make, &str); 7] = [
        (
            "truncated",
            &|p| fs::write(p, b"{\"schema_version\":1,\"pha").unwrap(),
            "corrupt JSON",
        ),
        (
            "100 MB",
            &|p| fs::File::create(p).unwrap().set_len(100 << 20).unwrap(),
            "is 104857600 bytes, larger than the 1048576 a state file may be",
        ),
        (
            "invalid UTF-8",
            &|p| fs::write(p, b"{\"schema_version\":1,\"phase\":\"\xff\xfe\"}").unwrap(),
            "corrupt JSON",
        ),
        (
            "a symlink",
            &|p| std::os::unix::fs::symlink("/etc/hostname", p).unwrap(),
            "is a symbolic link to /etc/hostname",
        ),
        (
            "a directory",
            &|p| fs::create_dir(p).unwrap(),
            "is a directory",
        ),
        (
            "a FIFO",
            &|p| nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap(),
            "is a FIFO",
        ),
        (
            "a later schema",
            &|p| fs::write(p, b"{\"schema_version\": 2, \"phase\": \"levitating\"}").unwrap(),
            "has schema version 2 (this agent reads 1)",
        ),
    ];
    for (what, make, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        fs::create_dir_all(dir.path().join("run")).unwrap();
        make(&store.run_path());
        let started = std::time::Instant::now();
        let loaded = store.load_detailed();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: blocked"
        );
        assert_eq!(loaded.state, None, "{what}");
        let unreadable = loaded
            .unreadable
            .unwrap_or_else(|| panic!("{what}: not unreadable"));
        assert_eq!(unreadable.file, store.run_path(), "{what}");
        assert!(
            unreadable.why.contains(expected),
            "{what}: {}",
            unreadable.why
        );
        assert_eq!(store.load().unwrap(), None, "{what}");
    }
}

#[test]
fn unknown_fields_from_a_newer_agent_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let s = sample_state();
    let mut json = serde_json::to_value(&s).unwrap();
    json["etcd_health"] = "healthy".into();
    fs::create_dir_all(dir.path().join("lib")).unwrap();
    fs::write(store.persist_path(), json.to_string()).unwrap();
    assert_eq!(store.load().unwrap(), Some(s));
}

#[test]
fn a_state_of_an_older_agent_loads_without_member_name_or_restart_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut s = sample_state();
    s.member_name = Some("etcd-1".into());
    s.confirmed_n_restarts = Some(2);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["member_name"], "etcd-1");
    assert_eq!(json["confirmed_n_restarts"], 2);
    let mut old = json.clone();
    let fields = old.as_object_mut().unwrap();
    fields.remove("member_name");
    fields.remove("confirmed_n_restarts");
    fs::create_dir_all(dir.path().join("lib")).unwrap();
    fs::write(store.persist_path(), old.to_string()).unwrap();
    let loaded = store.load().unwrap().unwrap();
    assert_eq!(
        (loaded.member_name, loaded.confirmed_n_restarts),
        (None, None)
    );
}
