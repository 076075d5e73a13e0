//! Test inputs made at run time: the Kubernetes ISOs (tests/inputs/make-isos) and
//! facts about the binary under test.
#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The folder of ISOs and tarballs made by tests/inputs/make-isos (built once per
/// process; the script itself skips the work when its inputs did not change).
pub fn isos() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = super::vm::repo().join("target/test-inputs");
        let out = Command::new(super::vm::repo().join("tests/inputs/make-isos"))
            .arg(&dir)
            .output()
            .expect("run tests/inputs/make-isos");
        assert!(
            out.status.success(),
            "tests/inputs/make-isos failed (run vm-images/host-setup first?): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .clone()
}

/// SHA-256 of a file, hex.
pub fn sha256_file(path: &std::path::Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Builds an ISO 9660 image with Rock Ridge and Joliet from the folder `src`, as the
/// platform's tools do (xorriso in mkisofs mode).
pub fn make_iso(src: &Path, label: &str, out: &Path) {
    let result = Command::new("xorriso")
        .args(["-as", "mkisofs", "-quiet", "-R", "-J", "-V", label, "-o"])
        .arg(out)
        .arg(src)
        .output()
        .expect("run xorriso (install it with vm-images/host-setup)");
    assert!(
        result.status.success(),
        "xorriso: {}",
        String::from_utf8_lossy(&result.stderr)
    );
}

/// Renders packaging/cloud-config.yaml.tmpl for a one-member cluster on the guest's
/// user-mode address, with `overrides` of the defaults (`SHA256` also uncomments the
/// template's `iso.sha256` line).
pub fn cloud_config(name: &str, overrides: &[(&str, &str)]) -> String {
    let template =
        std::fs::read_to_string(super::vm::repo().join("packaging/cloud-config.yaml.tmpl"))
            .expect("packaging/cloud-config.yaml.tmpl");
    let ip = overrides
        .iter()
        .find(|(k, _)| *k == "NODE_IP")
        .map(|(_, v)| *v)
        .unwrap_or("10.0.2.15");
    let cluster = format!("{name}=http://{ip}:2380");
    let mut values = vec![
        ("NODE_NAME", name.to_string()),
        ("NODE_IP", ip.to_string()),
        ("INITIAL_CLUSTER", cluster),
        ("CLUSTER_TOKEN", format!("token-{name}")),
        ("CLUSTER_STATE", "new".into()),
        ("START_TIMEOUT", "5min".into()),
        ("SETTLE", "3s".into()),
        ("ISO_WAIT", "10min".into()),
        ("EJECT", "false".into()),
        ("SHA256", String::new()),
    ];
    for (k, v) in overrides {
        if let Some(slot) = values.iter_mut().find(|(key, _)| key == k) {
            slot.1 = v.to_string();
        }
    }
    let mut text = template;
    // A pinned digest turns the template's commented `sha256` line on.
    if overrides.iter().any(|(k, _)| *k == "SHA256") {
        text = text.replace("# sha256 = \"{{SHA256}}\"", "sha256 = \"{{SHA256}}\"");
    }
    for (k, v) in values {
        text = text.replace(&format!("{{{{{k}}}}}"), &v);
    }
    assert!(!text.contains("{{"), "unrendered placeholder in:\n{text}");
    text
}

/// One etcd node's values, as CloudStack's management server fills them in.
pub struct CloudStackNode<'a> {
    /// `{{ etcd.node_name }}`, shaped `<cluster>-etcd-<n>-<hex millis>`.
    pub name: &'a str,
    /// `{{ etcd.node_ip }}`.
    pub ip: &'a str,
    /// `{{ etcd.initial_cluster_nodes }}`: `name=http://ip:2380`, joined by commas.
    pub initial_cluster: &'a str,
    /// `{{ k8s.install.wait.time }}`: seconds per attempt.
    pub wait_time: u32,
    /// `{{ k8s.install.reattempts.count }}`.
    pub attempts: u32,
    /// `{{ k8s.eject.iso }}`.
    pub eject: bool,
}

/// Renders packaging/cloudstack/etcd-node.yml exactly as the platform does: plain string
/// replacement of its placeholders. The SSH keys are the platform's own key line first,
/// then a user's key on a line of its own (`\n      - "key"`), here both this run's key.
pub fn cloudstack_config(node: &CloudStackNode) -> String {
    let template =
        std::fs::read_to_string(super::vm::repo().join("packaging/cloudstack/etcd-node.yml"))
            .expect("packaging/cloudstack/etcd-node.yml");
    let key = &super::vm::ssh_key().public;
    let keys = format!("- \"{key}\"\n      - \"{key}\"");
    let values = [
        ("{{ k8s.ssh.pub.key }}", keys),
        ("{{ k8s.install.wait.time }}", node.wait_time.to_string()),
        (
            "{{ k8s.install.reattempts.count }}",
            node.attempts.to_string(),
        ),
        ("{{ k8s.eject.iso }}", node.eject.to_string()),
        ("{{ etcd.node_name }}", node.name.to_string()),
        ("{{ etcd.node_ip }}", node.ip.to_string()),
        (
            "{{ etcd.initial_cluster_nodes }}",
            node.initial_cluster.to_string(),
        ),
    ];
    let mut text = template;
    for (placeholder, value) in values {
        assert!(
            text.contains(placeholder),
            "etcd-node.yml lacks {placeholder}"
        );
        text = text.replace(placeholder, &value);
    }
    assert!(
        !text.contains("{{"),
        "a placeholder the platform does not fill:\n{text}"
    );
    text
}

/// The cluster token packaging/cloudstack/etcd-node.yml derives from the initial cluster.
pub fn cloudstack_token(initial_cluster: &str) -> String {
    let hex: String = Sha256::digest(initial_cluster.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("cks-etcd-{}", &hex[..32])
}
