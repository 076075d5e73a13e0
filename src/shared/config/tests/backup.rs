//! `[backup]`: its keys, and the rules of the files it names.

use super::*;
use std::os::unix::fs::PermissionsExt;

const SECRET: &str = "s3cr3t-d0-not-print-me-42";

/// BASE with `[backup]` holding `lines`.
fn backup(lines: &str) -> Result<Settings, Failure> {
    parse_text(&table("backup", lines))
}

const MINIMAL: &str = r#"
endpoint = "https://s3.example.org:8443"
bucket = "etcd-backups"
access_key_file = "/etc/etcd-setup/ak"
secret_key_file = "/etc/etcd-setup/sk"
recipients_file = "/etc/etcd-setup/recipients"
"#;

fn refused(lines: &str, key: &str) -> String {
    let f = backup(lines).expect_err(lines);
    assert_eq!(f.code, ReasonCode::ConfigInvalid, "{}", f.message);
    assert!(f.message.contains(PATH), "{}", f.message);
    assert!(f.message.contains(key), "{key} not in {}", f.message);
    f.message
}

#[test]
fn a_minimal_backup_table_takes_the_defaults() {
    let s = backup(MINIMAL).unwrap();
    let b = s.backup.unwrap();
    assert_eq!(b.endpoint.to_string(), "https://s3.example.org:8443");
    assert_eq!(b.endpoint.authority(), "s3.example.org:8443");
    assert_eq!(b.prefix, DEFAULT_PREFIX);
    assert_eq!(b.region, "us-east-1");
    assert!(!b.path_style);
    assert!(b.encrypt);
    assert_eq!(b.retain, 7);
    assert_eq!(b.period, Duration::from_secs(3600));
    assert_eq!(parse_text(BASE).unwrap().backup, None);
}

#[test]
fn plain_http_needs_allow_http_written() {
    let http = MINIMAL.replace("https://", "http://");
    let msg = refused(&http, "backup.endpoint");
    assert!(msg.contains("allow_http"), "{msg}");
    let b = backup(&format!("{http}allow_http = true\n"))
        .unwrap()
        .backup
        .unwrap();
    assert!(!b.endpoint.tls);
    assert_eq!(b.endpoint.port, 8443);
}

#[test]
fn without_recipients_encrypt_false_must_be_written() {
    let clear = MINIMAL.replace("recipients_file = \"/etc/etcd-setup/recipients\"\n", "");
    let msg = refused(&clear, "backup.recipients_file");
    assert!(msg.contains("encrypt = false"), "{msg}");
    refused(
        &format!("{clear}encrypt = true\n"),
        "backup.recipients_file",
    );
    let b = backup(&format!("{clear}encrypt = false\n"))
        .unwrap()
        .backup
        .unwrap();
    assert!(!b.encrypt);
}

#[test]
fn restore_when_empty_is_opt_in_and_needs_the_identity_to_decrypt() {
    assert!(!backup(MINIMAL).unwrap().backup.unwrap().restore_when_empty);
    let msg = refused(
        &format!("{MINIMAL}restore_when_empty = true\n"),
        "backup.identity_file",
    );
    assert!(msg.contains("restore_when_empty"), "{msg}");
    let b = backup(&format!(
        "{MINIMAL}restore_when_empty = true\nidentity_file = \"/etc/etcd-setup/id\"\n"
    ))
    .unwrap()
    .backup
    .unwrap();
    assert!(b.restore_when_empty);
    // In the clear, nothing is to decrypt.
    let clear = MINIMAL.replace("recipients_file = \"/etc/etcd-setup/recipients\"\n", "");
    let b = backup(&format!(
        "{clear}encrypt = false\nrestore_when_empty = true\n"
    ))
    .unwrap()
    .backup
    .unwrap();
    assert!(b.restore_when_empty && !b.encrypt);
    refused(
        &format!("{MINIMAL}restore_when_empty = \"yes\"\n"),
        "backup.restore_when_empty",
    );
}

/// Issue 38 (low): a secret written as the endpoint's userinfo was echoed by the refusal.
#[test]
fn a_secret_in_the_endpoints_userinfo_is_refused_without_being_echoed() {
    for endpoint in [
        format!("https://AKIAEXAMPLE:{SECRET}@s3.example.org:8443"),
        format!("https://AKIAEXAMPLE:{SECRET}@s3.example.org/bucket"),
        format!("http://AKIAEXAMPLE:{SECRET}@s3.example.org"),
    ] {
        let msg = refused(
            &MINIMAL.replace("https://s3.example.org:8443", &endpoint),
            "backup.endpoint",
        );
        assert!(
            !msg.contains(SECRET)
                && !msg.contains("AKIAEXAMPLE")
                && msg.contains("…@s3.example.org"),
            "{msg}"
        );
    }
}

#[test]
fn bad_backup_values_are_refused_naming_the_key() {
    for (old, new, key) in [
        (
            "https://s3.example.org:8443",
            "s3.example.org",
            "backup.endpoint",
        ),
        (
            "https://s3.example.org:8443",
            "https://s3.example.org/bucket",
            "backup.endpoint",
        ),
        (
            "https://s3.example.org:8443",
            "https://user@s3.example.org",
            "backup.endpoint",
        ),
        (
            "https://s3.example.org:8443",
            "https://s3.example.org:0",
            "backup.endpoint",
        ),
        ("\"etcd-backups\"", "\"Etcd_Backups\"", "backup.bucket"),
        ("\"etcd-backups\"", "\"ab\"", "backup.bucket"),
        ("\"/etc/etcd-setup/ak\"", "\"ak\"", "backup.access_key_file"),
        (
            "\"/etc/etcd-setup/sk\"",
            "\"/etc/etcd-setup/ak\"",
            "backup.secret_key_file",
        ),
    ] {
        refused(&MINIMAL.replace(old, new), key);
    }
    for (line, key) in [
        ("prefix = \"/abs/\"", "backup.prefix"),
        ("prefix = \"no-slash\"", "backup.prefix"),
        ("prefix = \"a/../b/\"", "backup.prefix"),
        ("region = \"us east\"", "backup.region"),
        ("retain = 0", "backup.retain"),
        ("period = \"10s\"", "backup.period"),
        ("encrypt = \"yes\"", "backup.encrypt"),
        ("path_style = 1", "backup.path_style"),
    ] {
        refused(&format!("{MINIMAL}{line}\n"), key);
    }
    let f = backup(&format!("{MINIMAL}secret = \"x\"\n")).unwrap_err();
    assert!(
        f.message.contains("backup.secret: unknown key"),
        "{}",
        f.message
    );
}

/// A scratch folder with the key files, root's and 0600, and a `[backup]` naming them.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let f = Files { dir };
        f.write("ak", "AKIDTEST0001\n", 0o600);
        f.write("sk", &format!("{SECRET}\n"), 0o600);
        f.write(
            "recipients",
            "# the operators' key\nage1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p\n\n",
            0o644,
        );
        f
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn write(&self, name: &str, text: &str, mode: u32) {
        let p = self.path(name);
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    fn settings(&self) -> BackupSettings {
        let lines = MINIMAL
            .replace("/etc/etcd-setup/ak", &self.path("ak").to_string_lossy())
            .replace("/etc/etcd-setup/sk", &self.path("sk").to_string_lossy())
            .replace(
                "/etc/etcd-setup/recipients",
                &self.path("recipients").to_string_lossy(),
            );
        backup(&lines).unwrap().backup.unwrap()
    }
}

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn key_files_are_read_when_root_owned_private_and_no_link() {
    if !root() {
        eprintln!("skipped: the key files' owner rule needs root");
        return;
    }
    let f = Files::new();
    let b = f.settings();
    b.check_files().unwrap();
    let c = b.credentials().unwrap();
    assert_eq!(c.access_key.expose(), "AKIDTEST0001");
    assert_eq!(c.secret_key.expose(), SECRET);
    assert_eq!(b.recipients().unwrap().len(), 1);
    let shown = format!("{b:?} {c:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(!shown.contains("AKIDTEST0001"), "{shown}");
}

#[test]
fn a_readable_linked_or_foreign_key_file_is_refused_naming_key_and_file_not_contents() {
    if !root() {
        eprintln!("skipped: the key files' owner rule needs root");
        return;
    }
    let f = Files::new();
    let b = f.settings();
    let sk = f.path("sk");
    let expect = |what: &str| {
        let e = b.check_files().unwrap_err();
        assert_eq!(e.code, ReasonCode::ConfigInvalid);
        assert!(
            e.message.contains("backup.secret_key_file"),
            "{}",
            e.message
        );
        assert!(e.message.contains(&*sk.to_string_lossy()), "{}", e.message);
        assert!(e.message.contains(what), "{what} not in {}", e.message);
        assert!(!format!("{e:?}").contains(SECRET), "{e:?}");
    };
    f.write("sk", SECRET, 0o640);
    expect("0640");
    f.write("sk", SECRET, 0o600);
    std::os::unix::fs::chown(&sk, Some(65534), None).unwrap();
    expect("not root");
    f.write("real-sk", SECRET, 0o600);
    std::fs::remove_file(&sk).unwrap();
    std::os::unix::fs::symlink(f.path("real-sk"), &sk).unwrap();
    expect("symbolic link");
    std::fs::remove_file(&sk).unwrap();
    expect("cannot open");
    f.write("sk", "two words", 0o600);
    expect("printable ASCII");
}

#[test]
fn recipients_are_age1_bech32_lines_and_never_an_identity() {
    if !root() {
        eprintln!("skipped: the files' owner rule needs root");
        return;
    }
    let f = Files::new();
    let b = f.settings();
    f.write(
        "recipients",
        "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ\n",
        0o600,
    );
    let e = b.recipients().unwrap_err();
    assert!(e.message.contains("line 1"), "{}", e.message);
    assert!(!e.message.contains("QQQQQQQQQQQQQQ"), "{}", e.message);
    f.write(
        "recipients",
        "age1bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n",
        0o644,
    );
    let e = b.recipients().unwrap_err();
    assert!(e.message.contains("not an age recipient"), "{}", e.message);
    f.write("recipients", "# nobody\n", 0o644);
    let e = b.recipients().unwrap_err();
    assert!(e.message.contains("no age1"), "{}", e.message);
    f.write("recipients", "age1qqqqqqqqqq\n", 0o666);
    let e = b.recipients().unwrap_err();
    assert!(e.message.contains("others may write"), "{}", e.message);
}

#[test]
fn load_checks_the_backup_files_at_once() {
    if !root() {
        eprintln!("skipped: the files' owner rule needs root");
        return;
    }
    let f = Files::new();
    f.write("sk", SECRET, 0o644);
    let lines = MINIMAL
        .replace("/etc/etcd-setup/ak", &f.path("ak").to_string_lossy())
        .replace("/etc/etcd-setup/sk", &f.path("sk").to_string_lossy())
        .replace(
            "/etc/etcd-setup/recipients",
            &f.path("recipients").to_string_lossy(),
        );
    let config = f.path("config.toml");
    std::fs::write(&config, table("backup", &lines)).unwrap();
    let e = load(&config).unwrap_err();
    assert!(
        e.message.contains("backup.secret_key_file"),
        "{}",
        e.message
    );
    f.write("sk", SECRET, 0o600);
    assert!(load(&config).unwrap().backup.is_some());
}
