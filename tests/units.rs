//! The agent's own systemd units as the package ships them: `packaging/units` (the one
//! list packaging/build-deb installs and the maintainer scripts enable) names every unit
//! file in `packaging/` and nothing else, `systemd-analyze verify` has nothing to say
//! about them, every timer is enabled by the package and starts a unit of the list, and
//! every `ExecStart` is a command line the binary accepts. etcd's own unit (`keep`) has
//! its test beside its text (`src/shared/unit.rs`).

use clap::Parser;
use etcd_setup::cli::Cli;
use std::path::{Path, PathBuf};
use std::process::Command;

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging")
}

/// `packaging/units`: each unit's name and its word (`enable`, `keep` or `-`).
fn listed() -> Vec<(String, String)> {
    std::fs::read_to_string(packaging().join("units"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut w = l.split_whitespace();
            let (name, word) = (w.next().unwrap(), w.next().unwrap());
            assert_eq!(w.next(), None, "{l}");
            (name.to_string(), word.to_string())
        })
        .collect()
}

/// The agent's units: every listed one but the `keep` ones.
fn agents_units() -> Vec<String> {
    listed()
        .into_iter()
        .filter(|(_, w)| w != "keep")
        .map(|(n, _)| n)
        .collect()
}

fn text(unit: &str) -> String {
    std::fs::read_to_string(packaging().join(unit)).unwrap()
}

#[test]
fn the_list_names_every_unit_file_and_only_those() {
    let mut files: Vec<String> = std::fs::read_dir(packaging())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            [".service", ".timer", ".socket"]
                .iter()
                .any(|x| n.ends_with(x))
        })
        .collect();
    files.sort();
    let mut names: Vec<String> = listed().into_iter().map(|(n, _)| n).collect();
    names.sort();
    assert_eq!(names, files);
    for (name, word) in listed() {
        assert!(
            ["enable", "keep", "-"].contains(&word.as_str()),
            "{name}: {word}"
        );
    }
}

#[test]
fn every_timer_is_enabled_and_starts_a_listed_service() {
    let units = agents_units();
    let timers: Vec<(String, String)> = listed()
        .into_iter()
        .filter(|(n, _)| n.ends_with(".timer"))
        .collect();
    assert!(timers
        .iter()
        .any(|(n, _)| n == "etcd-setup-backup-verify.timer"));
    for (timer, word) in timers {
        assert_eq!(word, "enable", "{timer}: a timer nobody enables never runs");
        let t = text(&timer);
        let service = t
            .lines()
            .find_map(|l| l.strip_prefix("Unit="))
            .unwrap_or_else(|| panic!("{timer}: no Unit="));
        assert!(units.iter().any(|u| u == service), "{timer}: {service}");
        assert!(t.contains("\nWantedBy=timers.target\n"), "{timer}");
    }
}

#[test]
fn every_exec_start_is_a_command_line_the_binary_accepts() {
    let mut seen = 0;
    for unit in agents_units().iter().filter(|u| u.ends_with(".service")) {
        for line in text(unit).lines() {
            let Some(cmd) = line.strip_prefix("ExecStart=") else {
                continue;
            };
            let args: Vec<&str> = cmd.split_whitespace().collect();
            assert_eq!(args[0], "/usr/bin/etcd-setup", "{unit}: {cmd}");
            if let Err(e) = Cli::try_parse_from(&args) {
                panic!("{unit}: {cmd}: {e}");
            }
            seen += 1;
        }
    }
    assert!(seen >= 6, "{seen} ExecStart lines");
}

/// `systemd-analyze verify` on the units, where the host has it. It runs without systemd
/// as PID 1 and needs ExecStart's binary to exist, so the copies it reads name a stand-in
/// for /usr/bin/etcd-setup; it exits 0 on unknown keys, so the test reads what it says.
#[test]
fn systemd_analyze_verify_accepts_the_agents_units() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze not installed; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let stand_in = dir.path().join("etcd-setup");
    std::fs::write(&stand_in, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let units = agents_units();
    let verify = |units: &[String]| -> String {
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .args(units.iter().map(|u| dir.path().join(u)))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        // Lines about this host (no systemd running) name none of the units.
        said.lines()
            .filter(|l| units.iter().any(|u| l.contains(u.as_str())))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    for u in &units {
        let copy = text(u).replace(
            "ExecStart=/usr/bin/etcd-setup ",
            &format!("ExecStart={} ", stand_in.display()),
        );
        std::fs::write(dir.path().join(u), copy).unwrap();
    }
    let said = verify(&units);
    assert!(said.is_empty(), "{said}");

    // The check is live on this host: a typo in a timer is reported.
    let broken = "broken.timer".to_string();
    std::fs::write(
        dir.path().join(&broken),
        text("etcd-setup-backup-verify.timer").replace("OnCalendar=", "OnCalendr="),
    )
    .unwrap();
    let said = verify(&[broken]);
    assert!(said.contains("OnCalendr"), "{said}");
}
