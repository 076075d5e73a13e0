use super::*;
use crate::shared::config;
use std::cell::RefCell;

fn settings() -> Settings {
    config::parse(
        "[node]\nname = \"a\"\nip = \"10.1.1.11\"\n[etcd]\ninitial_cluster = \"a=http://10.1.1.11:2380\"\ncluster_token = \"t\"\n",
        Path::new("/c.toml"),
    )
    .unwrap()
}

fn files(dir: &Path) -> EnvFiles {
    EnvFiles {
        env: dir.join("etc/etcd.env"),
        once: dir.join("run/etcd-once.env"),
        link: dir.join("var/etcd"),
    }
}

/// A start that looks at the files as etcd.service would when it starts.
struct Seen<'a> {
    files: &'a EnvFiles,
    once: RefCell<Vec<Option<String>>>,
    fail: bool,
}

impl Seen<'_> {
    fn start(&self) -> Result<(), Failure> {
        self.once
            .borrow_mut()
            .push(std::fs::read_to_string(&self.files.once).ok());
        if self.fail {
            return Err(Failure::new(ReasonCode::SystemdFailed, "no bus"));
        }
        Ok(())
    }
}

fn start(s: &Settings, f: &EnvFiles, seen: &Seen<'_>, flags: &[OneShot]) -> Result<(), Failure> {
    let once = prepare(s, f, &Members::Keep, flags)?;
    let r = seen.start();
    drop(once);
    r
}

#[test]
fn a_one_shot_flag_is_seen_by_its_start_only_whatever_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let s = settings();
    for (flag, line, name) in [
        (
            OneShot::ForceNewCluster,
            "\nETCD_FORCE_NEW_CLUSTER=\"true\"\n",
            "FORCE",
        ),
        (
            OneShot::SnapshotEachEntry,
            "\nETCD_SNAPSHOT_COUNT=\"1\"\n",
            "SNAPSHOT_COUNT",
        ),
    ] {
        for fail in [false, true] {
            let seen = Seen {
                files: &f,
                once: RefCell::new(vec![]),
                fail,
            };
            let r = start(&s, &f, &seen, &[flag]);
            assert_eq!(r.is_err(), fail);
            assert!(!f.once.exists(), "the flag outlived its start");
            start(&s, &f, &seen, &[]).ok();
            let once = seen.once.borrow();
            assert!(
                once[0].as_deref().is_some_and(|t| t.contains(line)),
                "{once:?}"
            );
            assert_eq!(once[1], None);
            // The persistent file never holds it.
            let env = std::fs::read_to_string(&f.env).unwrap();
            assert!(!env.contains(name), "{env}");
        }
    }
}

#[test]
fn every_start_renders_the_env_file_and_keeps_a_joins_membership() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let s = settings();
    let joined = Membership {
        initial_cluster: "b=http://10.1.1.12:2380,a=http://10.1.1.11:2380".into(),
        state: crate::shared::config::ClusterState::Existing,
    };
    // An env file of an older agent, with the flag that was never taken out again.
    std::fs::create_dir_all(f.env.parent().unwrap()).unwrap();
    std::fs::write(
        &f.env,
        format!(
            "{}# One start only, by etcd-setup restore:\nETCD_FORCE_NEW_CLUSTER=\"true\"\n",
            unit::render_env(&s, &joined)
        ),
    )
    .unwrap();
    drop(prepare(&s, &f, &Members::Keep, &[]).unwrap());
    let env = std::fs::read_to_string(&f.env).unwrap();
    assert_eq!(env, unit::render_env(&s, &joined));
    // Given a membership, that one.
    drop(prepare(&s, &f, &Members::Set(Membership::configured(&s)), &[]).unwrap());
    let env = std::fs::read_to_string(&f.env).unwrap();
    assert_eq!(env, unit::render_env(&s, &Membership::configured(&s)));
}

/// The child of [`a_crash_after_the_flag_was_written_leaves_it_for_no_later_start`]:
/// writes the flag and dies there (`ETCD_SETUP_TEST_CRASH_AT=once-written`).
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os("ETCD_SETUP_TEST_CRASH_DIR") else {
        return;
    };
    let f = files(Path::new(&dir));
    let _ = prepare(&settings(), &f, &Members::Keep, &[OneShot::ForceNewCluster]);
    unreachable!("the crash point did not fire");
}

#[cfg(feature = "test-fixtures")]
#[test]
fn a_crash_after_the_flag_was_written_leaves_it_for_no_later_start() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "member::service::tests::crash_child",
            "--nocapture",
        ])
        .env("ETCD_SETUP_TEST_CRASH_DIR", dir.path())
        .env("ETCD_SETUP_TEST_CRASH_AT", "once-written")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    // Killed with the flag written: it is there, as a `kill -9` at that line leaves it.
    assert!(
        std::fs::read_to_string(&f.once)
            .unwrap()
            .contains("ETCD_FORCE_NEW_CLUSTER"),
        "{out:?}"
    );
    // The next start through the controller (every start of `run`, `upgrade`, ...) does
    // not see it, and leaves none.
    let seen = Seen {
        files: &f,
        once: RefCell::new(vec![]),
        fail: false,
    };
    start(&settings(), &f, &seen, &[]).unwrap();
    assert_eq!(*seen.once.borrow(), vec![None]);
    assert!(!f.once.exists());
    let env = std::fs::read_to_string(&f.env).unwrap();
    assert!(!env.contains("FORCE"), "{env}");
}

#[test]
fn the_unit_removes_the_one_shot_file_after_its_start_and_reads_it_optionally() {
    let unit = unit::UNIT_TEXT;
    for line in [
        format!("EnvironmentFile=-{}", unit::ONCE_ENV_FILE),
        format!("ExecStartPost=-+/bin/rm -f {}", unit::ONCE_ENV_FILE),
        format!("ExecStopPost=-+/bin/rm -f {}", unit::ONCE_ENV_FILE),
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing in\n{unit}");
    }
    assert_eq!(
        Path::new(unit::ONCE_ENV_FILE).parent(),
        Some(Path::new(crate::shared::report::RUN_DIR))
    );
}

/// Issue 24 item 1: every start points the packaged unit's fixed `ExecStart=` at the
/// configured `install.dir/etcd`, replacing whatever was there (a link elsewhere, a file)
/// without following it, and leaves nothing staged beside it.
#[test]
fn every_start_points_the_units_link_at_the_installed_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let (s, f) = (settings(), files(dir.path()));
    let want = s.install_dir.join("etcd");
    drop(prepare(&s, &f, &Members::Keep, &[]).unwrap());
    assert_eq!(std::fs::read_link(&f.link).unwrap(), want);
    // An older link (another install.dir) and then a plain file are replaced.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, "keep me").unwrap();
    std::fs::remove_file(&f.link).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &f.link).unwrap();
    drop(prepare(&s, &f, &Members::Keep, &[]).unwrap());
    assert_eq!(std::fs::read_link(&f.link).unwrap(), want);
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "keep me");
    std::fs::remove_file(&f.link).unwrap();
    std::fs::write(&f.link, "a file").unwrap();
    drop(prepare(&s, &f, &Members::Keep, &[]).unwrap());
    assert_eq!(std::fs::read_link(&f.link).unwrap(), want);
    let left: Vec<_> = std::fs::read_dir(f.link.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("etcd")]);
}

/// Issue 23 item 3: a start for a known release renders that release's flags and names it;
/// a later start that does not say (a restart of the same binaries) keeps it.
#[test]
fn the_environment_fits_the_release_started_and_a_later_start_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let (s, f) = (settings(), files(dir.path()));
    let v36 = crate::shared::advisory::Version::parse("3.6.5");
    drop(prepare_for(&s, &f, &Members::Keep, &[], v36).unwrap());
    let env = std::fs::read_to_string(&f.env).unwrap();
    assert!(
        env.contains("ETCD_FEATURE_GATES=\"InitialCorruptCheck=true,CompactHashCheck=true\""),
        "{env}"
    );
    assert!(!env.contains("ETCD_EXPERIMENTAL_"), "{env}");
    drop(prepare(&s, &f, &Members::Keep, &[]).unwrap());
    assert_eq!(
        std::fs::read_to_string(&f.env).unwrap(),
        env,
        "kept for the same binaries"
    );
    // Put back to 3.5.30 (an upgrade's rollback): the 3.5 spelling again.
    let v35 = crate::shared::advisory::Version::parse("3.5.30");
    drop(prepare_for(&s, &f, &Members::Keep, &[], v35).unwrap());
    let env = std::fs::read_to_string(&f.env).unwrap();
    assert!(
        env.contains("ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED=\"true\""),
        "{env}"
    );
    assert!(!env.contains("ETCD_FEATURE_GATES"), "{env}");
}
