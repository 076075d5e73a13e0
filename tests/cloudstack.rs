//! packaging/cloudstack/etcd-node.yml, the drop-in for CloudStack's conf/etcd-node.yml:
//! rendered as the management server renders it (plain replacement), its configuration
//! step run by sh on the host (into a temporary folder instead of /etc/etcd-setup), and
//! the result read by the agent's own configuration parser. The same file boots the
//! three-node clusters of tests/vm_cluster/, where cloud-init's schema check runs.

mod support;

use etcd_setup::shared::config;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::inputs::{cloudstack_config, cloudstack_token, CloudStackNode};

/// The `content` of the write_files entry for `path`, de-indented as YAML reads it.
fn written_file(user_data: &str, path: &str) -> String {
    let mut lines = user_data
        .lines()
        .skip_while(|l| l.trim() != format!("- path: {path}"));
    assert!(lines.next().is_some(), "no write_files entry for {path}");
    let mut lines = lines.skip_while(|l| l.trim() != "content: |");
    assert!(lines.next().is_some(), "{path} has no block content");
    lines
        .take_while(|l| l.is_empty() || l.starts_with("      "))
        .map(|l| format!("{}\n", l.get(6..).unwrap_or("")))
        .collect()
}

/// Renders the template for `node`, runs its configuration step, parses the result.
fn configure(node: &CloudStackNode, dir: &Path) -> config::Settings {
    let user_data = cloudstack_config(node);
    assert!(user_data.starts_with("#cloud-config\n"));
    let script = written_file(&user_data, "/etc/etcd-setup/cloudstack-config")
        .replace("/etc/etcd-setup/", &format!("{}/", dir.display()));
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "the configuration step failed: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join("config.toml");
    config::load(&path)
        .unwrap_or_else(|f| panic!("{f}\n{}", std::fs::read_to_string(&path).unwrap()))
}

fn members(cluster: &str) -> (Vec<(String, String)>, String) {
    let nodes: Vec<(String, String)> = (1..=3)
        .map(|i| {
            (
                format!("{cluster}-etcd-{i}-18e4c1a{i:x}2f0"),
                format!("10.1.1.{}", 10 + i),
            )
        })
        .collect();
    let initial = nodes
        .iter()
        .map(|(n, ip)| format!("{n}=http://{ip}:2380"))
        .collect::<Vec<_>>()
        .join(",");
    (nodes, initial)
}

#[test]
fn every_member_of_a_cluster_gets_one_token_and_another_cluster_another() {
    let mut tokens = Vec::new();
    for cluster in ["prod", "staging"] {
        let (nodes, initial) = members(cluster);
        let mut seen = Vec::new();
        for (name, ip) in &nodes {
            let dir = tempfile::tempdir().unwrap();
            let s = configure(
                &CloudStackNode {
                    name,
                    ip,
                    initial_cluster: &initial,
                    wait_time: 15,
                    attempts: 100,
                    eject: true,
                },
                dir.path(),
            );
            assert_eq!(s.node_name, *name);
            assert_eq!(s.node_ip.to_string(), *ip);
            assert_eq!(s.initial_cluster.len(), 3);
            seen.push(s.cluster_token);
        }
        assert!(seen.iter().all(|t| *t == seen[0]), "{cluster}: {seen:?}");
        assert_eq!(seen[0], cloudstack_token(&initial));
        tokens.push(seen[0].clone());
    }
    assert_ne!(tokens[0], tokens[1]);
}

#[test]
fn the_iso_wait_is_the_platforms_wait_time_times_its_attempts() {
    let (nodes, initial) = members("c");
    let dir = tempfile::tempdir().unwrap();
    let s = configure(
        &CloudStackNode {
            name: &nodes[0].0,
            ip: &nodes[0].1,
            initial_cluster: &initial,
            wait_time: 15,
            attempts: 100,
            eject: false,
        },
        dir.path(),
    );
    assert_eq!(s.iso_wait, Duration::from_secs(1500));
    // The first member waits as long for its peers, who may get their ISO that late.
    assert_eq!(s.start_timeout, Duration::from_secs(1500));
    assert!(!s.eject);
}

#[test]
fn runcmd_writes_the_configuration_then_runs_etcd_setup() {
    let (nodes, initial) = members("c");
    let text = cloudstack_config(&CloudStackNode {
        name: &nodes[0].0,
        ip: &nodes[0].1,
        initial_cluster: &initial,
        wait_time: 15,
        attempts: 100,
        eject: false,
    });
    let runcmd: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "runcmd:")
        .filter(|l| l.starts_with("  - "))
        .collect();
    assert_eq!(
        runcmd,
        [
            "  - [ /etc/etcd-setup/cloudstack-config ]",
            "  - [ etcd-setup, run ]"
        ]
    );
    // Both of the platform's key lines land in the cloud user's list.
    let key = &support::vm::ssh_key().public;
    assert_eq!(
        text.matches(&format!("      - \"{key}\"")).count(),
        2,
        "{text}"
    );
}
