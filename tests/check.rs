//! `etcd-setup check` as an operator runs it: real ISOs built by genisoimage and xorriso
//! around real etcd releases, every exit code, text and JSON, the digest pin, no root.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn input(name: &str) -> PathBuf {
    support::inputs::isos().join(name)
}

fn check(args: &[&str], paths: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_etcd-setup"))
        .arg("check")
        .args(args)
        .args(paths)
        .output()
        .expect("run etcd-setup check")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

#[test]
fn passes_the_platform_iso_with_etcd_3_5_1_and_reports_version_label_and_digest() {
    let iso = input("k8s-etcd-3.5.1.iso");
    let out = check(&[], &[&iso]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    let digest = support::inputs::sha256_file(&input("etcd-v3.5.1-linux-amd64.tar.gz"));
    assert!(
        text.contains(": ok: etcd 3.5.1 linux-amd64 with etcdutl from ISO label CDROM"),
        "{text}"
    );
    assert!(text.contains(&digest), "{text}");
}

#[test]
fn passes_a_debian_3_4_23_release_without_etcdutl_in_json() {
    let iso = input("k8s-etcd-3.4.23.iso");
    let out = check(&["--format", "json"], &[&iso]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = json(&out);
    assert_eq!(doc["schema_version"], 1);
    let r = &doc["results"][0];
    assert_eq!(r["verdict"], "ok");
    assert_eq!(r["kind"], "iso");
    assert_eq!(r["label"], "K8S_1_28_4");
    assert_eq!(r["etcd_version"], "3.4.23");
    assert_eq!(r["arch"], "amd64");
    assert_eq!(r["has_etcdutl"], false);
    let tarball = input("etcd-v3.4.23-linux-amd64.tar.gz");
    assert_eq!(
        r["compressed_bytes"],
        std::fs::metadata(&tarball).unwrap().len()
    );
    assert_eq!(r["sha256"], support::inputs::sha256_file(&tarball));
    assert!(r["unpacked_bytes"].as_u64().unwrap() > 30_000_000);
}

#[test]
fn passes_a_bare_tarball() {
    let out = check(&[], &[&input("etcd-v3.5.1-linux-amd64.tar.gz")]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("etcd 3.5.1 linux-amd64 with etcdutl from tarball"));
}

/// Each faulty ISO fails with its own reason code, and exit 1 as soon as one PATH fails.
#[test]
fn fails_each_faulty_iso_with_its_own_reason_code_and_exit_1() {
    let cases = [
        (
            "k8s-no-etcd.iso",
            "archive-missing",
            "has no etcd/etcd-linux-amd64.tar.gz",
        ),
        ("k8s-corrupt-etcd.iso", "archive-corrupt", "truncated"),
        ("k8s-wrong-arch.iso", "wrong-architecture", "linux-arm64"),
    ];
    for (name, code, words) in cases {
        let iso = input(name);
        let out = check(&["--format", "json"], &[&input("k8s-etcd-3.5.1.iso"), &iso]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stdout(&out));
        let doc = json(&out);
        assert_eq!(doc["results"][0]["verdict"], "ok");
        let r = &doc["results"][1];
        assert_eq!(r["verdict"], "failed", "{name}");
        assert_eq!(r["reason"]["code"], code, "{name}: {r}");
        let message = r["reason"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{name}: {message}");
        assert!(
            message.contains(iso.to_str().unwrap()),
            "{name}: message names no file: {message}"
        );
    }
}

#[test]
fn names_what_the_disc_holds_when_etcd_is_missing() {
    let out = check(&[], &[&input("k8s-no-etcd.iso")]);
    let text = stdout(&out);
    assert!(
        text.contains("FAILED: archive-missing: the Kubernetes ISO on"),
        "{text}"
    );
    assert!(text.contains("(label CDROM)"), "{text}");
    assert!(
        text.contains("top level holds: cni, conformance, cri-tools, docker, k8s, provider.yaml"),
        "{text}"
    );
}

#[test]
fn pinned_digest_passes_when_equal_and_fails_with_digest_mismatch_otherwise() {
    let iso = input("k8s-etcd-3.5.1.iso");
    let digest = support::inputs::sha256_file(&input("etcd-v3.5.1-linux-amd64.tar.gz"));
    let out = check(&["--sha256", &digest], &[&iso]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let other = support::inputs::sha256_file(&input("etcd-v3.4.23-linux-amd64.tar.gz"));
    let out = check(&["--sha256", &other], &[&iso]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("FAILED: digest-mismatch:"), "{text}");
    assert!(
        text.contains(&digest) && text.contains(&other),
        "names both digests: {text}"
    );
}

#[test]
fn rejects_files_that_are_neither_iso_nor_tarball_and_missing_paths() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.iso");
    std::fs::write(&junk, vec![0u8; 64 * 1024]).unwrap();
    let missing = dir.path().join("missing.iso");
    let out = check(&[], &[&junk, &missing]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("junk.iso: FAILED: iso-unreadable:"), "{text}");
    assert!(
        text.contains("missing.iso: FAILED: iso-unreadable: cannot open"),
        "{text}"
    );
}

#[test]
fn exits_2_on_a_bad_command_line() {
    for args in [vec!["--sha256", "abc"], vec![], vec!["--format", "yaml"]] {
        let mut all = args.clone();
        if !args.is_empty() {
            all.push("/dev/null");
        }
        let out = check(&all, &[]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = check(&["--sha256", "abc"], &[Path::new("x")]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("64 hex digits"));
}

#[test]
fn help_lists_the_exit_codes() {
    let out = check(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains("Exit codes of `check`") && text.contains("2  the command line is wrong"),
        "{text}"
    );
}

/// Operators vet ISOs as themselves: `check` needs no root and leaves nothing behind.
#[test]
fn runs_without_root_and_leaves_no_staging_folder() {
    let iso = input("k8s-etcd-3.5.1.iso");
    let tmp = tempfile::tempdir().unwrap();
    let mut perms = std::fs::metadata(tmp.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o1777);
    std::fs::set_permissions(tmp.path(), perms).unwrap();
    let mut cmd = if running_as_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg(env!("CARGO_BIN_EXE_etcd-setup"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_etcd-setup"))
    };
    let out = cmd
        .args(["check", "--format", "json"])
        .arg(&iso)
        .env("TMPDIR", tmp.path())
        .output()
        .expect("run check as nobody");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out)["results"][0]["verdict"], "ok");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "check left {left:?} in TMPDIR");
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
