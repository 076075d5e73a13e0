//! The `[tls]` files judged (src/shared/config/certs.rs), against files `openssl` makes
//! here: `run` refuses an expired, not yet valid or mismatched one as `config-invalid`
//! naming the key before any wait, and the inspector status uses tells each case with its
//! reason code, a warning within `tls.warn_days`, and a changed file at once.

mod support;

use etcd_setup::reason::ReasonCode;
use etcd_setup::shared::config::certs::{first_problem, warnings, CertKind, Inspector, Policy};
use etcd_setup::shared::config::TlsFiles;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;
use support::pki::{days_from_now, Pki};

const IP: &str = "10.1.1.11";
const SAN: &str = "IP:10.1.1.11,DNS:etcd-1";

fn policy(cert: &Path, key: &Path, ca: &Path) -> Policy {
    Policy {
        sides: vec![(
            "peer",
            TlsFiles {
                cert: cert.into(),
                key: key.into(),
                trusted_ca: ca.into(),
            },
        )],
        node_ip: IP.parse().unwrap(),
        node_name: "etcd-1".into(),
        warn_days: 30,
    }
}

/// A leaf valid for a year from yesterday, with its key of `kind`.
fn good(pki: &Pki, name: &str, kind: &str) -> (PathBuf, PathBuf) {
    let key = pki.key(name, kind);
    let crt = pki.leaf(name, &key, SAN, &days_from_now(-1), &days_from_now(365));
    (crt, key)
}

/// `etcd-setup run` on a configuration with the `[tls]` files, the ISO wait 1 s: its
/// exit code and the failure file's first line.
fn run(pki: &Pki, tls: &str) -> (Option<i32>, String) {
    let d = pki.dir.path();
    let failed = d.join("failed");
    let _ = std::fs::remove_file(&failed);
    let config = d.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nname = \"etcd-1\"\nip = \"127.0.0.1\"\n\
             [etcd]\ninitial_cluster = \"etcd-1=https://127.0.0.1:2380\"\ncluster_token = \"t\"\n\
             [iso]\nwait = \"1s\"\n\
             [report]\nfailure_file = \"{}\"\nowner = \"root\"\n{tls}",
            failed.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_etcd-setup"))
        .args(["run", "--config"])
        .arg(&config)
        .arg("--run-dir")
        .arg(d.join("run"))
        .arg("--state-dir")
        .arg(d.join("lib"))
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&failed).unwrap_or_default();
    let first = text.lines().next().unwrap_or_default().to_string();
    let state = std::fs::read_to_string(d.join("run/state.json")).unwrap_or_default();
    if first.starts_with("config-invalid") {
        assert!(
            !state.contains("waiting-for-iso"),
            "waited for the ISO: {state}"
        );
    }
    (out.status.code(), first)
}

#[test]
fn run_refuses_an_expired_certificate_naming_the_key_before_any_wait() {
    let pki = Pki::new();
    let key = pki.key("old", "ec");
    let crt = pki.leaf(
        "old",
        &key,
        "IP:127.0.0.1",
        "20200101000000Z",
        "20210101000000Z",
    );
    let (code, first) = run(&pki, &Pki::tls_table(&crt, &key, &pki.path("ca.crt")));
    assert_eq!(code, Some(3), "{first}");
    assert!(first.starts_with("config-invalid: "), "{first}");
    assert!(first.contains("tls.client_cert: "), "{first}");
    assert!(first.contains("expired on 2021-01-01T00:00:00Z"), "{first}");
    assert!(first.ends_with("(cert-expired)"), "{first}");
}

#[test]
fn run_refuses_a_key_of_another_certificate_and_a_certificate_without_the_node_ip() {
    let pki = Pki::new();
    let (crt, _) = good(&pki, "one", "ec");
    let other = pki.key("two", "ec");
    let (code, first) = run(&pki, &Pki::tls_table(&crt, &other, &pki.path("ca.crt")));
    assert_eq!(code, Some(3), "{first}");
    assert!(first.contains("tls.client_key: "), "{first}");
    assert!(
        first.contains("is not the private key of tls.client_cert"),
        "{first}"
    );
    assert!(first.ends_with("(cert-mismatch)"), "{first}");
    // SAN covers 10.1.1.11, the node here is 127.0.0.1.
    let (crt, key) = good(&pki, "three", "rsa");
    let (code, first) = run(&pki, &Pki::tls_table(&crt, &key, &pki.path("ca.crt")));
    assert_eq!(code, Some(3), "{first}");
    assert!(first.contains("does not name node.ip 127.0.0.1"), "{first}");
    assert!(first.contains("IP:10.1.1.11"), "{first}");
}

#[test]
fn run_takes_good_files_and_goes_on_to_wait_for_the_iso() {
    let pki = Pki::new();
    let key = pki.key("ok", "ec-sec1");
    let crt = pki.leaf(
        "ok",
        &key,
        "IP:127.0.0.1",
        &days_from_now(-1),
        &days_from_now(90),
    );
    let (code, first) = run(&pki, &Pki::tls_table(&crt, &key, &pki.path("ca.crt")));
    assert!(first.starts_with("iso-timeout: "), "{code:?} {first}");
}

#[test]
fn a_good_leaf_shows_its_facts_and_no_problem() {
    let pki = Pki::new();
    for kind in ["ec", "ec-sec1", "rsa"] {
        let (crt, key) = good(&pki, &format!("good-{kind}"), kind);
        let views =
            Inspector::new().inspect(&policy(&crt, &key, &pki.path("ca.crt")), SystemTime::now());
        assert_eq!(views.len(), 2, "{views:?}");
        let leaf = &views[0];
        assert_eq!(leaf.key, "tls.peer_cert");
        assert_eq!(leaf.kind, CertKind::Leaf);
        assert_eq!(
            leaf.subject.as_deref(),
            Some(format!("CN=good-{kind}").as_str())
        );
        assert_eq!(leaf.issuer.as_deref(), Some("CN=test-ca"));
        assert!(
            leaf.serial.as_deref().is_some_and(|s| s.starts_with("10")),
            "{leaf:?}"
        );
        assert_eq!(leaf.key_matches, Some(true), "{kind}: {leaf:?}");
        assert_eq!(leaf.covers_ip, Some(true));
        assert_eq!(leaf.covers_name, Some(true));
        assert_eq!(leaf.names, ["IP:10.1.1.11", "DNS:etcd-1"]);
        assert!(
            leaf.days_left.is_some_and(|d| (363..=365).contains(&d)),
            "{leaf:?}"
        );
        assert_eq!(leaf.problem, None);
        assert!(!leaf.expiring);
        assert_eq!(views[1].kind, CertKind::Ca);
        assert_eq!(views[1].subject.as_deref(), Some("CN=test-ca"));
        assert!(first_problem(&views).is_none());
        assert!(warnings(&views).is_empty());
    }
}

#[test]
fn each_bad_file_has_its_reason() {
    let pki = Pki::new();
    let ca = pki.path("ca.crt");
    let key = pki.key("k", "ec");
    let expired = pki.leaf("expired", &key, SAN, "20200101000000Z", "20210101000000Z");
    let future = pki.leaf("future", &key, SAN, &days_from_now(10), &days_from_now(400));
    let wrong_san = pki.leaf(
        "wrong-san",
        &key,
        "IP:10.9.9.9,DNS:other",
        &days_from_now(-1),
        &days_from_now(100),
    );
    let (other, _) = good(&pki, "other", "ec");
    let unreadable_ca = pki.path("bundle.crt");
    std::fs::write(
        &unreadable_ca,
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let cases: [(&Path, &Path, &str, ReasonCode, &str); 5] = [
        (
            &expired,
            &ca,
            "tls.peer_cert",
            ReasonCode::CertExpired,
            "expired on 2021-01-01",
        ),
        (
            &future,
            &ca,
            "tls.peer_cert",
            ReasonCode::CertExpired,
            "is not valid before",
        ),
        (
            &wrong_san,
            &ca,
            "tls.peer_cert",
            ReasonCode::CertMismatch,
            "does not name node.ip 10.1.1.11",
        ),
        (
            &other,
            &ca,
            "tls.peer_key",
            ReasonCode::CertMismatch,
            "is not the private key of tls.peer_cert",
        ),
        (
            &pki.path("ok-missing"),
            &unreadable_ca,
            "tls.peer_cert",
            ReasonCode::CertMismatch,
            "cannot be read",
        ),
    ];
    for (cert, bundle, named, code, words) in cases {
        let views = Inspector::new().inspect(&policy(cert, &key, bundle), SystemTime::now());
        let p =
            first_problem(&views).unwrap_or_else(|| panic!("{cert:?}: no problem in {views:?}"));
        assert_eq!(p.code, code, "{cert:?}: {p:?}");
        assert!(p.message.starts_with(&format!("{named}: ")), "{p:?}");
        assert!(p.message.contains(words), "{words}: {p:?}");
    }
    // The unreadable bundle beside a good leaf: its own problem, naming its key.
    let (leaf, leaf_key) = good(&pki, "fine", "ec");
    let views =
        Inspector::new().inspect(&policy(&leaf, &leaf_key, &unreadable_ca), SystemTime::now());
    let p = first_problem(&views).expect("the bundle's problem");
    assert_eq!(p.code, ReasonCode::CertMismatch);
    assert!(p.message.starts_with("tls.peer_trusted_ca: "), "{p:?}");
    assert!(p.message.contains("does not decode"), "{p:?}");
}

#[test]
fn a_leaf_within_warn_days_is_a_warning_not_a_problem() {
    let pki = Pki::new();
    let key = pki.key("soon", "ec");
    let crt = pki.leaf("soon", &key, SAN, &days_from_now(-300), &days_from_now(12));
    let views =
        Inspector::new().inspect(&policy(&crt, &key, &pki.path("ca.crt")), SystemTime::now());
    assert!(first_problem(&views).is_none(), "{views:?}");
    let w = warnings(&views);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with(&format!("tls.peer_cert: {} (serial ", crt.display())),
        "{w:?}"
    );
    assert!(
        w[0].contains("expires in 11 days") || w[0].contains("expires in 12 days"),
        "{w:?}"
    );
}

#[test]
fn a_replaced_file_is_read_again_and_a_fifo_is_not_waited_on() {
    let pki = Pki::new();
    let (first, key) = good(&pki, "v1", "ec");
    let live = pki.path("live.crt");
    std::fs::copy(&first, &live).unwrap();
    let p = policy(&live, &key, &pki.path("ca.crt"));
    let mut inspector = Inspector::new();
    let before = inspector.inspect(&p, SystemTime::now())[0].serial.clone();
    // Replaced as write_files or an operator's copy does: a new file renamed over it.
    let second = pki.leaf("v2", &key, SAN, &days_from_now(-1), &days_from_now(700));
    let tmp = pki.path("live.crt.new");
    std::fs::copy(&second, &tmp).unwrap();
    std::fs::rename(&tmp, &live).unwrap();
    let after = inspector.inspect(&p, SystemTime::now());
    assert_ne!(after[0].serial, before, "the old certificate was kept");
    assert!(after[0].days_left.is_some_and(|d| d >= 698), "{after:?}");
    // A FIFO where the certificate should be: an answer at once, not a blocked reader.
    std::fs::remove_file(&live).unwrap();
    nix::unistd::mkfifo(&live, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let views = inspector.inspect(&p, SystemTime::now());
    let problem = first_problem(&views).expect("a problem");
    assert!(
        problem.message.contains("is not a regular file"),
        "{problem:?}"
    );
}

#[test]
fn a_mismatch_mid_rotation_is_read_again_and_only_one_that_holds_is_told() {
    let pki = Pki::new();
    let (old_crt, old_key) = good(&pki, "old", "ec");
    let (new_crt, new_key) = good(&pki, "new", "ec");
    let (crt, key) = (pki.path("live.crt"), pki.path("live.key"));
    std::fs::copy(&old_crt, &crt).unwrap();
    std::fs::copy(&old_key, &key).unwrap();
    let p = policy(&crt, &key, &pki.path("ca.crt"));
    let mut inspector = Inspector::new();
    // A good pair is not read twice.
    let views = inspector.inspect_settled(&p, SystemTime::now(), || panic!("read again"));
    assert!(first_problem(&views).is_none(), "{views:?}");
    // The first of a rotation's two renames: the new certificate beside the old key.
    let swap = |from: &Path, to: &Path| {
        let tmp = pki.path("swap.tmp");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    };
    swap(&new_crt, &crt);
    let between = inspector.inspect(&p, SystemTime::now());
    let problem = first_problem(&between).expect("a mismatch between the renames");
    assert_eq!(problem.code, ReasonCode::CertMismatch, "{problem:?}");
    // The second rename lands during the pause: the pair read again is good.
    let views = inspector.inspect_settled(&p, SystemTime::now(), || swap(&old_key, &key));
    assert!(
        first_problem(&views).is_some(),
        "the old key is back: still a mismatch"
    );
    let views = inspector.inspect_settled(&p, SystemTime::now(), || swap(&new_key, &key));
    assert!(first_problem(&views).is_none(), "{views:?}");
    assert_eq!(views[0].key_matches, Some(true), "{views:?}");
    // A mismatch that holds through the pause is told.
    swap(&old_key, &key);
    let mut paused = false;
    let views = inspector.inspect_settled(&p, SystemTime::now(), || paused = true);
    assert!(paused);
    let problem = first_problem(&views).expect("a mismatch that holds");
    assert_eq!(problem.code, ReasonCode::CertMismatch, "{problem:?}");
    assert!(
        problem
            .message
            .contains("is not the private key of tls.peer_cert"),
        "{problem:?}"
    );
}
