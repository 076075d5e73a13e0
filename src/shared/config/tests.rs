use super::*;
use crate::reason::ReasonCode;
use std::net::{Ipv4Addr, Ipv6Addr};

const PATH: &str = "/etc/etcd-setup/config.toml";

/// The smallest valid file: only the required keys.
const BASE: &str = r#"
[node]
name = "etcd-1"
ip = "10.1.1.11"

[etcd]
initial_cluster = "etcd-1=http://10.1.1.11:2380,etcd-2=http://10.1.1.12:2380"
cluster_token = "tok"
"#;

fn parse_text(text: &str) -> Result<Settings, Failure> {
    parse(text, Path::new(PATH))
}

/// BASE with `old` replaced by `new`; panics when `old` is not in BASE (a broken test).
fn with(old: &str, new: &str) -> String {
    assert!(BASE.contains(old), "{old:?} is not in BASE");
    BASE.replacen(old, new, 1)
}

/// BASE with `lines` added to its `[etcd]` table.
fn etcd(lines: &str) -> String {
    format!("{BASE}{lines}\n")
}

/// BASE with `[table]` and `lines` appended.
fn table(table: &str, lines: &str) -> String {
    format!("{BASE}\n[{table}]\n{lines}\n")
}

fn cluster(value: &str) -> String {
    with(
        "\"etcd-1=http://10.1.1.11:2380,etcd-2=http://10.1.1.12:2380\"",
        &format!("{value:?}"),
    )
}

#[test]
fn the_documented_example_parses_to_its_typed_values() {
    let s = parse_text(EXAMPLE).expect("the example is valid");
    let pki = |f: &str| PathBuf::from(format!("/etc/etcd/pki/{f}"));
    let mut digest = [0u8; 32];
    let hex = "b5ad7e5f6a5d2b4c0bda2b7d7d1ac53b24ea6c1a29a0a3b6e3bfc8dcbdbc0f12";
    for (i, d) in digest.iter_mut().enumerate() {
        *d = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let expected = Settings {
        node_name: "etcd-1".into(),
        node_ip: IpAddr::V4(Ipv4Addr::new(10, 1, 1, 11)),
        initial_cluster: vec![
            ("etcd-1".into(), "https://10.1.1.11:2380".into()),
            ("etcd-2".into(), "https://10.1.1.12:2380".into()),
            ("etcd-3".into(), "https://10.1.1.13:2380".into()),
        ],
        cluster_token: "k8s-etcd-abc".into(),
        cluster_state: ClusterState::New,
        data_dir: "/var/lib/etcd".into(),
        client_port: 2379,
        peer_port: 2380,
        metrics_port: 2381,
        start_timeout: Duration::from_secs(900),
        settle: Duration::from_secs(10),
        archive_path: "etcd/etcd-linux-amd64.tar.gz".into(),
        sha256: Some(digest),
        iso_wait: Duration::from_secs(600),
        eject: false,
        refuse_known_bad: true,
        install_dir: "/opt/bin".into(),
        failure_file: "/home/cloud/etcd-setup-failed".into(),
        failure_owner: "cloud".into(),
        status_group: "cloud".into(),
        tls: Tls {
            client: Some(TlsFiles {
                cert: pki("server.crt"),
                key: pki("server.key"),
                trusted_ca: pki("ca.crt"),
            }),
            peer: Some(TlsFiles {
                cert: pki("peer.crt"),
                key: pki("peer.key"),
                trusted_ca: pki("ca.crt"),
            }),
            warn_days: 21,
        },
        limits: Limits::default(),
        data: DataSettings {
            quota_backend_bytes: 2 << 30,
            prometheus_port: Some(2382),
            snapshot: SnapshotSettings {
                dir: "/var/lib/etcd-setup/snapshots".into(),
                copy_dir: Some("/mnt/etcd-backup".into()),
                retain: 5,
                pruned_retain: 5,
                pruned_max_age: Duration::from_secs(7 * 24 * 3600),
                timeout: Duration::from_secs(600),
                stale_after: Duration::from_secs(13 * 3600),
            },
            maintain: MaintainSettings {
                min_db_size: 100 << 20,
                min_fragmented_percent: 50,
                defrag_timeout: Duration::from_secs(600),
                lock_wait: Duration::from_secs(1800),
            },
        },
        backup: Some(BackupSettings {
            endpoint: Endpoint {
                tls: true,
                host: "s3.example.org".into(),
                port: 443,
                explicit_port: false,
            },
            bucket: "etcd-backups".into(),
            prefix: "etcd-setup/".into(),
            region: "us-east-1".into(),
            path_style: true,
            ca_file: Some("/etc/etcd-setup/s3-ca.pem".into()),
            access_key_file: "/etc/etcd-setup/s3-access-key".into(),
            secret_key_file: "/etc/etcd-setup/s3-secret-key".into(),
            recipients_file: Some("/etc/etcd-setup/backup-recipients".into()),
            encrypt: true,
            identity_file: Some("/etc/etcd-setup/backup-identity".into()),
            retain: 10,
            period: Duration::from_secs(6 * 3600),
            restore_when_empty: false,
            config: PATH.into(),
        }),
    };
    assert_eq!(s, expected);
}

#[test]
fn defaults_fill_every_optional_key() {
    let s = parse_text(BASE).expect("BASE is valid");
    assert_eq!(s.cluster_state, ClusterState::New);
    assert_eq!(s.data_dir, Path::new("/var/lib/etcd"));
    assert_eq!(
        (s.client_port, s.peer_port, s.metrics_port),
        (2379, 2380, 2381)
    );
    assert_eq!(s.start_timeout, Duration::from_secs(15 * 60));
    assert_eq!(s.settle, Duration::from_secs(10));
    assert_eq!(s.archive_path, DEFAULT_ARCHIVE_PATH);
    assert_eq!(s.sha256, None);
    assert_eq!(s.iso_wait, Duration::from_secs(10 * 60));
    assert!(!s.eject);
    assert_eq!(s.install_dir, Path::new("/opt/bin"));
    assert_eq!(s.failure_file, Path::new(DEFAULT_FAILURE_FILE));
    assert_eq!(s.failure_owner, "cloud");
    assert_eq!(s.status_group, "cloud");
    assert_eq!(s.tls, Tls::default());
    assert_eq!(s.limits, Limits::default());
}

#[test]
fn ipv6_node_gets_bracketed_urls() {
    let text = r#"
[node]
name = "etcd-1"
ip = "fd00::11"
[etcd]
initial_cluster = "etcd-1=http://[fd00::11]:2380,etcd-2=http://[fd00::12]:2380"
cluster_token = "tok"
client_port = 12379
"#;
    let s = parse_text(text).expect("valid IPv6 configuration");
    assert_eq!(
        s.node_ip,
        IpAddr::V6("fd00::11".parse::<Ipv6Addr>().unwrap())
    );
}

#[test]
fn durations_sizes_and_cluster_spacing_are_read_leniently() {
    let text = with(
        "\"etcd-1=http://10.1.1.11:2380,etcd-2=http://10.1.1.12:2380\"",
        "\" etcd-1 = http://10.1.1.11:2380/ , etcd-2=http://etcd-2.example:2380\"",
    ) + "start_timeout = 90\nsettle = \"1min 30s\"\n\n[iso]\nwait = \"1h30m\"\n\
         sha256 = \"B5AD7E5F6A5D2B4C0BDA2B7D7D1AC53B24EA6C1A29A0A3B6E3BFC8DCBDBC0F12\"\n\
         [limits]\nmax_file_size = \"64M\"\nmax_total_size = 1073741824\n";
    let s = parse_text(&text).expect("valid");
    assert_eq!(s.start_timeout, Duration::from_secs(90));
    assert_eq!(s.settle, Duration::from_secs(90));
    assert_eq!(s.iso_wait, Duration::from_secs(5400));
    assert_eq!(s.limits.max_file_size, 64 << 20);
    assert_eq!(s.limits.max_total_size, 1 << 30);
    assert_eq!(s.sha256.map(|d| d[0]), Some(0xb5));
    assert_eq!(
        s.initial_cluster,
        [
            ("etcd-1".to_string(), "http://10.1.1.11:2380/".to_string()),
            (
                "etcd-2".to_string(),
                "http://etcd-2.example:2380".to_string()
            ),
        ]
    );
}

#[test]
fn each_bad_value_is_config_invalid_naming_its_key_and_the_file() {
    let partial_tls = table("tls", "client_cert = \"/etc/etcd/c.crt\"");
    let cases: Vec<(&str, String, &str, &str)> = vec![
        // (what, file text, key named, words of the problem)
        (
            "bad IPv4",
            with("10.1.1.11\"\n", "10.1.1.300\"\n"),
            "node.ip",
            "is not an IPv4 or IPv6 address",
        ),
        (
            "bracketed IPv6",
            with("ip = \"10.1.1.11\"", "ip = \"[fd00::1]\""),
            "node.ip",
            "without brackets",
        ),
        (
            "unspecified IP",
            with("ip = \"10.1.1.11\"", "ip = \"0.0.0.0\""),
            "node.ip",
            "not a unicast address",
        ),
        (
            "no node name",
            with("name = \"etcd-1\"\n", ""),
            "node.name",
            "missing; required",
        ),
        (
            "bad node name",
            with("name = \"etcd-1\"", "name = \"etcd 1\""),
            "node.name",
            "only A-Z a-z 0-9 . _ -",
        ),
        (
            "no initial cluster",
            with(
                "initial_cluster = \"etcd-1=http://10.1.1.11:2380,etcd-2=http://10.1.1.12:2380\"\n",
                "",
            ),
            "etcd.initial_cluster",
            "missing; required",
        ),
        (
            "name not in cluster",
            with("name = \"etcd-1\"", "name = \"etcd-9\""),
            "etcd.initial_cluster",
            "does not list this node, node.name = \"etcd-9\"; add etcd-9=http://10.1.1.11:2380",
        ),
        (
            "entry not NAME=URL",
            cluster("etcd-1=http://10.1.1.11:2380,etcd-2"),
            "etcd.initial_cluster",
            "\"etcd-2\" is not NAME=URL (http or https)",
        ),
        (
            "URL without scheme",
            cluster("etcd-1=10.1.1.11:2380"),
            "etcd.initial_cluster",
            "has no http:// or https:// scheme",
        ),
        (
            "URL without port",
            cluster("etcd-1=http://10.1.1.11"),
            "etcd.initial_cluster",
            "has no port",
        ),
        (
            "URL with path",
            cluster("etcd-1=http://10.1.1.11:2380/x"),
            "etcd.initial_cluster",
            "without path",
        ),
        (
            "empty member",
            cluster("etcd-1=http://10.1.1.11:2380,,"),
            "etcd.initial_cluster",
            "empty member entry",
        ),
        (
            "duplicate member",
            cluster("etcd-1=http://10.1.1.11:2380,etcd-1=http://10.1.1.12:2380"),
            "etcd.initial_cluster",
            "member \"etcd-1\" is listed twice",
        ),
        (
            "duplicate URL",
            cluster("etcd-1=http://10.1.1.11:2380,etcd-2=http://10.1.1.11:2380"),
            "etcd.initial_cluster",
            "another member's URL too",
        ),
        (
            "own member elsewhere",
            cluster("etcd-1=http://10.1.1.99:2380"),
            "etcd.initial_cluster",
            "at host 10.1.1.99, but node.ip is 10.1.1.11",
        ),
        (
            "own member other port",
            cluster("etcd-1=http://10.1.1.11:2390"),
            "etcd.initial_cluster",
            "has port 2390, but etcd.peer_port is 2380",
        ),
        (
            "https without peer TLS",
            cluster("etcd-1=https://10.1.1.11:2380"),
            "etcd.initial_cluster",
            "[tls] has no peer files",
        ),
        (
            "bad token",
            with("\"tok\"", "\"tok en\""),
            "etcd.cluster_token",
            "only A-Z a-z 0-9 . _ -",
        ),
        (
            "bad cluster state",
            etcd("cluster_state = \"old\""),
            "etcd.cluster_state",
            "neither \"new\" nor \"existing\"",
        ),
        (
            "zero port",
            etcd("client_port = 0"),
            "etcd.client_port",
            "0 is not a port",
        ),
        (
            "port too large",
            etcd("peer_port = 70000"),
            "etcd.peer_port",
            "70000 is not a port",
        ),
        (
            "port as string",
            etcd("client_port = \"2379\""),
            "etcd.client_port",
            "expected a port number, found the string \"2379\"",
        ),
        (
            "same ports",
            etcd("metrics_port = 2379"),
            "etcd.metrics_port",
            "2379 is also etcd.client_port",
        ),
        (
            "bad duration",
            etcd("start_timeout = \"15 minutes\""),
            "etcd.start_timeout",
            "is not a duration",
        ),
        (
            "negative duration",
            etcd("start_timeout = -5"),
            "etcd.start_timeout",
            "is not a duration",
        ),
        (
            "zero duration",
            etcd("settle = \"0s\""),
            "etcd.settle",
            "is zero",
        ),
        (
            "duration too long",
            table("iso", "wait = \"48h\""),
            "iso.wait",
            "longer than the 24h allowed",
        ),
        (
            "relative path",
            etcd("data_dir = \"var/lib/etcd\""),
            "etcd.data_dir",
            "is not an absolute path",
        ),
        (
            "root as data dir",
            etcd("data_dir = \"/\""),
            "etcd.data_dir",
            "cannot be used",
        ),
        (
            "dot-dot path",
            table("install", "dir = \"/opt/../bin\""),
            "install.dir",
            "a . or .. component",
        ),
        (
            "space in path",
            etcd("data_dir = \"/var/lib/my etcd\""),
            "etcd.data_dir",
            "holds ' '",
        ),
        (
            "data inside install",
            table("install", "dir = \"/var/lib\""),
            "etcd.data_dir",
            "overlaps install.dir /var/lib",
        ),
        (
            "unknown key",
            with("name = \"etcd-1\"", "name = \"etcd-1\"\nnmae = \"x\""),
            "node.nmae",
            "unknown key (line 4); expected name or ip",
        ),
        (
            "unknown table",
            table("nodes", "name = \"x\""),
            "nodes",
            "unknown key",
        ),
        (
            "partial TLS",
            partial_tls,
            "tls.client_key",
            "missing while tls.client_cert is set",
        ),
        (
            "relative TLS file",
            table("tls", "peer_cert = \"peer.crt\""),
            "tls.peer_cert",
            "not an absolute path",
        ),
        (
            "sha256 too short",
            table("iso", "sha256 = \"abc123\""),
            "iso.sha256",
            "not a SHA-256 digest of 64 hex digits: it has 6 characters",
        ),
        (
            "sha256 not hex",
            table("iso", &format!("sha256 = \"{}\"", "z".repeat(64))),
            "iso.sha256",
            "holds a character that is not a hex digit",
        ),
        (
            "absolute archive path",
            table("iso", "archive_path = \"/etcd/e.tar.gz\""),
            "iso.archive_path",
            "starts with /",
        ),
        (
            "dot-dot archive path",
            table("iso", "archive_path = \"etcd/../e.tar.gz\""),
            "iso.archive_path",
            "no . or ..",
        ),
        (
            "eject not a boolean",
            table("iso", "eject = \"yes\""),
            "iso.eject",
            "expected true or false",
        ),
        (
            "relative failure file",
            table("report", "failure_file = \"failed\""),
            "report.failure_file",
            "not an absolute path",
        ),
        (
            "bad owner",
            table("report", "owner = \"-cloud\""),
            "report.owner",
            "not a user or group name",
        ),
        (
            "numeric group",
            table("report", "status_group = \"1000\""),
            "report.status_group",
            "not all digits",
        ),
        (
            "bad size",
            table("limits", "max_file_size = \"12 parsecs\""),
            "limits.max_file_size",
            "is not a size",
        ),
        (
            "file above total",
            table("limits", "max_file_size = \"1GiB\""),
            "limits.max_file_size",
            "more than limits.max_total_size",
        ),
        (
            "sub-second start timeout",
            etcd("start_timeout = \"500ms\""),
            "etcd.start_timeout",
            "shorter than 1s",
        ),
        (
            "percent in the install path",
            table("install", "dir = \"/opt/100%\""),
            "install.dir",
            "holds '%'",
        ),
        (
            "relative install path",
            table("install", "dir = \"opt/bin\""),
            "install.dir",
            "is not an absolute path",
        ),
        (
            "newline in the token",
            with("\"tok\"", "\"tok\\nETCD_DATA_DIR=/\""),
            "etcd.cluster_token",
            "only A-Z a-z 0-9 . _ -",
        ),
        (
            "TLS file under /home, hidden by ProtectHome=",
            cluster("etcd-1=https://10.1.1.11:2380")
                + "[tls]\nclient_cert = \"/etc/etcd/pki/c.crt\"\nclient_key = \"/etc/etcd/pki/c.key\"\nclient_trusted_ca = \"/etc/etcd/pki/ca.crt\"\npeer_cert = \"/home/cloud/pki/peer.crt\"\npeer_key = \"/etc/etcd/pki/p.key\"\npeer_trusted_ca = \"/etc/etcd/pki/ca.crt\"\n",
            "tls.peer_cert",
            "/home/cloud/pki/peer.crt lies under /home, which etcd's sandbox",
        ),
        (
            "data dir in /tmp, private to etcd under PrivateTmp=",
            etcd("data_dir = \"/tmp/etcd\""),
            "etcd.data_dir",
            "lies under /tmp",
        ),
        (
            "binaries under /root",
            table("install", "dir = \"/root/bin\""),
            "install.dir",
            "lies under /root",
        ),
        (
            "zero entries",
            table("limits", "max_entries = 0"),
            "limits.max_entries",
            "0 is not positive",
        ),
    ];
    assert!(cases.len() >= 25);
    for (what, text, key, problem) in cases {
        let f = parse_text(&text).expect_err(what);
        assert_eq!(f.code, ReasonCode::ConfigInvalid, "{what}");
        let prefix = format!("{PATH}: {key}: ");
        assert!(
            f.message.starts_with(&prefix),
            "{what}: {:?} does not start with {prefix:?}",
            f.message
        );
        assert!(
            f.message.contains(problem),
            "{what}: {:?} does not say {problem:?}",
            f.message
        );
        assert!(!f.headline().contains('\n'), "{what}: {:?}", f.headline());
    }
}

#[test]
fn toml_syntax_error_names_line_and_column() {
    let text = format!("{BASE}\n[iso]\nwait = \"10min\nmore = 1\n");
    let f = parse_text(&text).expect_err("unterminated string");
    assert_eq!(f.code, ReasonCode::ConfigInvalid);
    let line = text.lines().position(|l| l.starts_with("wait")).unwrap() + 1;
    let prefix = format!("{PATH}: line {line}, column ");
    assert!(f.message.starts_with(&prefix), "{:?}", f.message);
    assert!(!f.headline().contains('\n'), "{:?}", f.headline());

    let f = parse_text("node = 5\n").expect_err("a table given as a number");
    assert_eq!(
        f.message,
        format!(
            "{PATH}: line 1, column 8: not valid here: invalid type: integer `5`, expected a table"
        )
    );
}

#[test]
fn missing_file_asks_whether_write_files_ran() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let f = load(&path).expect_err("no file");
    assert_eq!(f.code, ReasonCode::ConfigInvalid);
    assert_eq!(
        f.headline(),
        format!(
            "config-invalid: {}: no such file; the node's configuration must be written there \
             before the run (was cloud-init's write_files applied?)",
            path.display()
        )
    );
}

#[test]
fn load_reads_the_file_and_refuses_binary_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, BASE).unwrap();
    assert_eq!(load(&path).unwrap().node_name, "etcd-1");
    std::fs::write(&path, b"[node]\nname = \"\xff\"\n").unwrap();
    let f = load(&path).expect_err("not UTF-8");
    assert!(f.message.contains("not UTF-8"), "{}", f.message);
}

#[test]
fn failure_target_reads_report_keys_even_from_a_broken_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let defaults = (PathBuf::from(DEFAULT_FAILURE_FILE), "cloud".to_string());
    assert_eq!(failure_target(&path), defaults, "missing file");

    std::fs::write(
        &path,
        "[node]\nname = \"etcd-1\nip = 5\n\n[report] # where the platform looks\n\
         failure_file = \"/home/ops/failed\"  # comment\nowner = 'ops'\n",
    )
    .unwrap();
    assert!(load(&path).is_err());
    assert_eq!(
        failure_target(&path),
        (PathBuf::from("/home/ops/failed"), "ops".to_string()),
        "syntax error elsewhere"
    );

    std::fs::write(
        &path,
        "[node]\nip = \"x\"\n[report]\nfailure_file = \"/srv/failed\"\nowner = \"0\"\n",
    )
    .unwrap();
    assert_eq!(
        failure_target(&path),
        (PathBuf::from("/srv/failed"), "cloud".to_string()),
        "valid TOML, bad values elsewhere, bad owner"
    );

    std::fs::write(&path, "[report]\nfailure_file = \"relative\"\n").unwrap();
    assert_eq!(failure_target(&path), defaults, "relative path");
}

#[test]
fn duration_and_size_syntax() {
    let secs = |s: &str| parse_duration(s).map(|d| d.as_millis());
    assert_eq!(secs("90s"), Some(90_000));
    assert_eq!(secs("15min"), Some(900_000));
    assert_eq!(secs("15m"), Some(900_000));
    assert_eq!(secs("1h"), Some(3_600_000));
    assert_eq!(secs("1h 30min 5s"), Some(5_405_000));
    assert_eq!(secs("500ms"), Some(500));
    assert_eq!(secs("42"), Some(42_000));
    for bad in ["", "s", "1x", "1.5h", "-1s", "1h-", "99999999999999999999h"] {
        assert_eq!(parse_duration(bad), None, "{bad:?}");
    }
    assert_eq!(parse_size("256MiB"), Some(256 << 20));
    assert_eq!(parse_size("1 GiB"), Some(1 << 30));
    assert_eq!(parse_size("64K"), Some(64 << 10));
    assert_eq!(parse_size("4096"), Some(4096));
    for bad in ["", "MiB", "1MB", "1.5GiB", "18446744073709551615GiB"] {
        assert_eq!(parse_size(bad), None, "{bad:?}");
    }
}

#[test]
fn day_two_keys_are_checked_and_named() {
    for (text, key) in [
        (
            etcd("quota_backend_bytes = \"16GiB\""),
            "etcd.quota_backend_bytes",
        ),
        (etcd("prometheus_port = 2379"), "etcd.prometheus_port"),
        (table("snapshot", "prune = \"shred\""), "snapshot.prune"),
        (table("snapshot", "retain = 0"), "snapshot.retain"),
        (
            table("snapshot", "dir = \"/srv/s\"\ncopy_dir = \"/srv/s\""),
            "snapshot.copy_dir",
        ),
        (
            table("maintain", "min_fragmented_percent = 100"),
            "maintain.min_fragmented_percent",
        ),
    ] {
        let f = parse_text(&text).unwrap_err();
        assert_eq!(f.code, ReasonCode::ConfigInvalid);
        assert!(f.message.contains(key), "{key}: {}", f.message);
    }
    let s = parse_text(BASE).unwrap();
    assert_eq!(s.data.quota_backend_bytes, 2 << 30);
    assert_eq!(s.data.prometheus_port, None);
}

/// A FIFO (or a folder) at the configuration's path is refused at once, naming it: a
/// blocking open would hold the run, and the status server, for good.
#[test]
fn a_fifo_or_a_folder_at_the_path_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let started = std::time::Instant::now();
    let f = load(&fifo).expect_err("a FIFO is no configuration");
    assert_eq!(f.code, ReasonCode::ConfigInvalid);
    assert!(
        f.message
            .ends_with("is a FIFO, not the node's configuration file"),
        "{}",
        f.message
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let f = load(dir.path()).expect_err("a folder is no configuration");
    assert!(f.message.contains("is a directory"), "{}", f.message);
}

/// Values the issue's probe found accepted, each refused naming its key: a quota etcd
/// runs out of at the first put, snapshots in or beside etcd's data and binaries or in
/// system folders, timeouts no healthy member meets.
#[test]
fn doubtful_day_two_values_are_refused_naming_the_key() {
    for (text, key, says) in [
        (
            etcd("quota_backend_bytes = 1"),
            "etcd.quota_backend_bytes",
            "16 MiB",
        ),
        (
            etcd("quota_backend_bytes = \"15MiB\""),
            "etcd.quota_backend_bytes",
            "16 MiB",
        ),
        (
            etcd("data_dir = \"/var/lib/etcd\"\n\n[snapshot]\ndir = \"/var/lib/etcd\""),
            "snapshot.dir",
            "etcd.data_dir",
        ),
        (
            etcd("data_dir = \"/var/lib/etcd\"\n\n[snapshot]\ndir = \"/var/lib/etcd/snaps\""),
            "snapshot.dir",
            "etcd.data_dir",
        ),
        (
            etcd("data_dir = \"/srv/etcd/data\"\n\n[snapshot]\ndir = \"/srv/etcd\""),
            "snapshot.dir",
            "etcd.data_dir",
        ),
        (
            table("snapshot", "dir = \"/opt/bin\""),
            "snapshot.dir",
            "install.dir",
        ),
        (
            table("snapshot", "dir = \"/etc\""),
            "snapshot.dir",
            "system folder",
        ),
        (
            table("snapshot", "dir = \"/etc/snaps\""),
            "snapshot.dir",
            "system folder",
        ),
        (
            table("snapshot", "dir = \"/tmp/snaps\""),
            "snapshot.dir",
            "system folder",
        ),
        (
            table("snapshot", "dir = \"/srv\""),
            "snapshot.dir",
            "shared",
        ),
        (
            table("snapshot", "copy_dir = \"/dev/shm/x\""),
            "snapshot.copy_dir",
            "system folder",
        ),
        (
            table("snapshot", "dir = \"/srv/s\"\ncopy_dir = \"/srv/s/copy\""),
            "snapshot.copy_dir",
            "overlaps snapshot.dir",
        ),
        (
            table("snapshot", "timeout = \"1ms\""),
            "snapshot.timeout",
            "10 s floor",
        ),
        (
            table("maintain", "lock_wait = \"1ms\""),
            "maintain.lock_wait",
            "1 s floor",
        ),
        (
            table("maintain", "defrag_timeout = \"2s\""),
            "maintain.defrag_timeout",
            "10 s floor",
        ),
    ] {
        let f = parse_text(&text).unwrap_err();
        assert_eq!(f.code, ReasonCode::ConfigInvalid, "{text}");
        assert!(f.message.contains(key), "{key}: {}", f.message);
        assert!(f.message.contains(says), "{says}: {}", f.message);
    }
    // What the tests and the VMs use still loads: a 16 MiB and a 32 MiB quota, a folder
    // of its own under /mnt, and an older configuration's prune = "delete".
    for ok in [
        etcd("quota_backend_bytes = \"16MiB\""),
        etcd("quota_backend_bytes = \"32MiB\""),
        table(
            "snapshot",
            "copy_dir = \"/mnt/etcd-backup\"\nprune = \"delete\"",
        ),
        table("maintain", "lock_wait = \"1s\""),
    ] {
        parse_text(&ok).unwrap_or_else(|f| panic!("{ok}: {}", f.message));
    }
}

mod backup;

/// The configuration is read only where it is, and only when no other user could have
/// written it: root runs the binaries of the install.dir it names (the probe's
/// `uid=0` from another user's `etcdctl`).
#[test]
fn a_configuration_through_a_link_or_writable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, BASE).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(load(&path).is_ok());
    let link = dir.path().join("link.toml");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let f = load(&link).expect_err("a link");
    assert_eq!(f.code, ReasonCode::ConfigInvalid);
    assert!(
        f.message
            .starts_with(&format!("{}: is a symbolic link", link.display())),
        "{}",
        f.message
    );
    for (mode, who) in [(0o664, "its group"), (0o646, "others")] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let f = load(&path).expect_err("writable by others");
        assert!(
            f.message.starts_with(&format!(
                "{}: is writable by {who} (mode {mode:04o}); root acts on",
                path.display()
            )),
            "{}",
            f.message
        );
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let f = load(&path).expect_err("another user's");
        assert!(
            f.message
                .contains("is owned by uid 65534, not root; root acts on"),
            "{}",
            f.message
        );
    }
}

/// install.dir, or where it will be made, and every folder above it must be root's and
/// closed to others (a sticky folder above, as /tmp, keeps ours ours); never a link.
#[test]
fn an_install_dir_another_user_can_change_is_refused_naming_the_folder() {
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    // Not under /tmp or /var/tmp, which etcd's sandbox hides (a rule of its own): where
    // the host tests keep their scratch folders (tests/support/scratch.rs).
    let root = Path::new("/var/lib/etcd-setup-tests");
    std::fs::create_dir_all(root).unwrap();
    let dir = tempfile::tempdir_in(root).unwrap();
    let top = dir.path().join("top");
    let bin = top.join("bin");
    std::fs::create_dir(&top).unwrap();
    mode(&top, 0o755);
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        table("install", &format!("dir = \"{}\"", bin.display())),
    )
    .unwrap();
    let refused = |what: &str| {
        let f = load(&path).expect_err(what);
        assert_eq!(f.code, ReasonCode::ConfigInvalid, "{what}");
        f.message
    };
    // Not made yet, under a folder of root's: fine; under one others may write: not.
    if let Err(f) = load(&path) {
        panic!("{}", f.message)
    }
    mode(&top, 0o777);
    let m = refused("to be made in a folder others write");
    assert!(
        m.contains(&format!(
            "install.dir {}: the folder above it, {}, is writable by others (mode 0777)",
            bin.display(),
            top.display()
        )),
        "{m}"
    );
    // Made, in a folder others may write: they could rename it away and put theirs.
    std::fs::create_dir(&bin).unwrap();
    mode(&bin, 0o755);
    let m = refused("in a folder others write");
    assert!(m.contains("the folder above it"), "{m}");
    // Sticky and root's, as /tmp: what is ours there stays ours.
    if nix::unistd::geteuid().is_root() {
        mode(&top, 0o1777);
        assert!(load(&path).is_ok());
    }
    mode(&top, 0o755);
    assert!(load(&path).is_ok());
    mode(&bin, 0o775);
    let m = refused("writable by its group");
    assert!(
        m.contains(&format!(
            "install.dir {}: the folder is writable by its group (mode 0775); root runs",
            bin.display()
        )),
        "{m}"
    );
    std::fs::remove_dir(&bin).unwrap();
    std::os::unix::fs::symlink(dir.path(), &bin).unwrap();
    let m = refused("a link");
    assert!(m.contains("the folder is a symbolic link"), "{m}");
}
