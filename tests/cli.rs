//! The command line of `run` itself (its other exit codes need a node: tests/vm_run.rs).

use std::process::Command;

fn etcd_setup(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_etcd-setup"))
        .args(args)
        .output()
        .expect("run etcd-setup")
}

#[test]
fn run_exits_2_on_a_bad_command_line_before_touching_anything() {
    for args in [
        vec!["run", "--no-such-flag"],
        vec!["run", "--lock-timeout", "soon"],
        vec!["run", "extra-argument"],
    ] {
        let out = etcd_setup(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}: no explanation");
    }
    let out = etcd_setup(&["run", "--lock-timeout", "soon"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a duration like 90s"));
}

#[test]
fn run_help_lists_every_exit_code() {
    let out = etcd_setup(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "0  etcd is installed, enabled, active and healthy",
        "1  the run failed; the reason is in the failure file",
        "2  the command line is wrong",
        "3  the configuration file is missing or invalid",
        "4  the run was stopped by a signal",
        "5  another run held the lock",
    ] {
        assert!(text.contains(line), "--help lacks {line:?}:\n{text}");
    }
}

#[test]
fn version_names_the_git_commit() {
    let out = etcd_setup(&["--version"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("etcd-setup 0.1.0 ("), "{text}");
    assert!(
        !text.contains("(unknown)"),
        "built without the git commit: {text}"
    );
}
