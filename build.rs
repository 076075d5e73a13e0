//! Stamps the git commit into `--version`.
use std::process::Command;

fn main() {
    let commit = std::env::var("ETCD_SETUP_GIT_COMMIT").ok().or_else(|| {
        let out = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    });
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| o.status.success() && !o.stdout.is_empty())
        .unwrap_or(false);
    let mut commit = commit.unwrap_or_else(|| "unknown".into());
    if dirty && commit != "unknown" {
        commit.push_str("-dirty");
    }
    println!("cargo:rustc-env=ETCD_SETUP_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-env-changed=ETCD_SETUP_GIT_COMMIT");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
}
