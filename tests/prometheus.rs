//! The shipped alert rules (packaging/prometheus/etcd-setup.rules.yml): `promtool check
//! rules` accepts them and `promtool test rules` fires each alert on its input series
//! (tests/prometheus/etcd-setup.rules.test.yml). promtool is Debian's `prometheus`
//! package, which vm-images/host-setup installs; without it the tests say so and pass.

use std::path::Path;
use std::process::Command;

/// promtool, or `None` (and why, printed) when it is not installed.
fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool").arg("--version").output().is_ok();
    if !found {
        println!("skipped: promtool is not installed (apt-get install prometheus; vm-images/host-setup does)");
    }
    found.then_some("promtool")
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn promtool_checks_the_shipped_rules() {
    let Some(promtool) = promtool() else { return };
    let out = Command::new(promtool)
        .args(["check", "rules"])
        .arg(root().join("packaging/prometheus/etcd-setup.rules.yml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("SUCCESS: 16 rules found"), "{text}");
}

#[test]
fn every_alert_fires_on_its_input_series() {
    let Some(promtool) = promtool() else { return };
    let out = Command::new(promtool)
        .args(["test", "rules", "etcd-setup.rules.test.yml"])
        .current_dir(root().join("tests/prometheus"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("SUCCESS"),
        "{out:?}"
    );
}

/// Each alert of the rules has a case in the test file, so none is shipped untested.
#[test]
fn the_test_file_covers_every_alert() {
    let rules =
        std::fs::read_to_string(root().join("packaging/prometheus/etcd-setup.rules.yml")).unwrap();
    let tests =
        std::fs::read_to_string(root().join("tests/prometheus/etcd-setup.rules.test.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(alerts.len(), 16, "{alerts:?}");
    for a in alerts {
        assert!(
            tests.contains(&format!("alertname: {a}\n")),
            "{a} has no case in the test file"
        );
    }
}
