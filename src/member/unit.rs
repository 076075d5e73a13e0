//! etcd's systemd unit and its environment file.
//!
//! The unit is the package's (`packaging/etcd.service`, installed as [`PACKAGED_UNIT_FILE`]):
//! one file for every node, never rendered, so systemd has it loaded from boot and no
//! start needs a daemon-reload. Everything that differs between nodes and releases is in
//! the environment file, pure text rendered here from [`Settings`] ([`render_env_for`]);
//! the controller (`crate::member::service`) writes it atomically before every start, and
//! points [`ETCD_LINK`], the unit's fixed `ExecStart=`, at `install.dir/etcd`.
//!
//! Rendering cannot fail: [`Settings`] is valid by construction, and every rule that
//! keeps these files meaning what was intended (characters systemd takes literally in a
//! path, no newline inside a value, no file where the sandbox hides it) is checked by
//! `config`, before the run waits for anything.

use crate::member::ThisMember;
use crate::shared::advisory::Version;
use crate::shared::config::{ClusterState, Settings, TlsFiles};

/// etcd's unit.
pub const ETCD_UNIT: &str = "etcd.service";

/// Where the package installs etcd's unit.
pub const PACKAGED_UNIT_FILE: &str = "/lib/systemd/system/etcd.service";

/// Where agents before the packaged unit rendered etcd.service. One found there (it
/// overrides the package's) is moved aside once, with the one daemon-reload of that
/// migration (`crate::member::service`).
pub const LEGACY_UNIT_FILE: &str = "/etc/systemd/system/etcd.service";

/// The first line of a unit an older agent rendered at [`LEGACY_UNIT_FILE`]: only such a
/// file is moved aside; an operator's own unit there is left alone.
pub const LEGACY_UNIT_HEADER: &str = "# etcd, installed by etcd-setup ";

/// The unit's `ExecStart=`: a link to `install.dir/etcd`, made before every start.
pub const ETCD_LINK: &str = "/var/lib/etcd-setup/etcd";

/// Where the environment file goes; the unit's `EnvironmentFile=`. systemd reads
/// it as root before dropping to the etcd user, so it can be 0600 root (it holds the
/// cluster token).
pub const ENV_FILE: &str = "/etc/etcd-setup/etcd.env";

/// One start's flags (`--force-new-cluster` for `restore`), in the live state folder
/// (tmpfs, gone at reboot): the unit reads it with `EnvironmentFile=-` and removes it
/// after that start (`crate::member::service` explains the design).
pub const ONCE_ENV_FILE: &str = "/run/etcd-setup/etcd-once.env";

/// The system user and group etcd runs as. The package creates them (sysusers.d).
pub const ETCD_USER: &str = "etcd";

/// The folders the unit's sandbox hides from etcd; `config` enforces them, so they live
/// there (a test below holds them to the unit's text).
pub use crate::shared::config::HIDDEN_FROM_ETCD;

/// The packaged unit, as the package installs it.
pub const UNIT_TEXT: &str = include_str!("../../packaging/etcd.service");

/// Whether etcd may ever have been started here: every start through etcd-setup makes
/// [`ETCD_LINK`] first, and an older agent's node has its own [`LEGACY_UNIT_FILE`]. On a
/// node with neither, etcd was never started: nothing to stop or disable.
pub fn may_have_started() -> bool {
    std::path::Path::new(ETCD_LINK).symlink_metadata().is_ok()
        || std::path::Path::new(LEGACY_UNIT_FILE).exists()
}

/// How this member starts: the members it knows of and whether it bootstraps a new
/// cluster or joins a running one. From the configuration, unless a join decided
/// otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// etcd's `--initial-cluster`: `name=url` pairs joined by commas.
    pub initial_cluster: String,
    /// etcd's `--initial-cluster-state`.
    pub state: ClusterState,
}

impl Membership {
    /// The configuration's `initial_cluster` and `cluster_state`.
    pub fn configured(s: &Settings) -> Membership {
        Membership {
            initial_cluster: s
                .initial_cluster
                .iter()
                .map(|(name, url)| format!("{name}={url}"))
                .collect::<Vec<_>>()
                .join(","),
            state: s.cluster_state,
        }
    }

    /// The membership an environment file of [`render_env`] holds, or `None` when it
    /// lacks either line or holds another state.
    pub fn from_env(text: &str) -> Option<Membership> {
        let value = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(unquote_env)
        };
        let state = match value("ETCD_INITIAL_CLUSTER_STATE")?.as_str() {
            "new" => ClusterState::New,
            "existing" => ClusterState::Existing,
            _ => return None,
        };
        Some(Membership {
            initial_cluster: value("ETCD_INITIAL_CLUSTER")?,
            state,
        })
    }
}

/// The value [`quote_env`] quoted.
fn unquote_env(quoted: &str) -> String {
    let inner = quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or(quoted);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// The flags that differ between etcd releases, as `ETCD_*` variables: the first row whose
/// release is at most the one started applies. One table, newest first.
///
/// The corruption checks: before serving (`--experimental-initial-corrupt-check`, 3.4 and
/// 3.5) and after every compaction (`--experimental-compact-hash-check-enabled`, 3.5.5 and
/// later; 3.5.1 logs "unrecognized environment variable" and starts as usual). 3.6 turns
/// both into feature gates (`--feature-gates=InitialCorruptCheck=true,CompactHashCheck=true`;
/// etcd.io/docs/v3.6/feature-gates: the experimental fields are "Deprecated: Use
/// InitialCorruptCheck Feature Gate instead. Will be decommissioned in v3.7").
pub const FLAGS_BY_RELEASE: &[(Version, &[(&str, &str)])] = &[
    (
        Version::new(3, 6, 0),
        &[(
            "ETCD_FEATURE_GATES",
            "InitialCorruptCheck=true,CompactHashCheck=true",
        )],
    ),
    (
        Version::new(3, 5, 0),
        &[
            ("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "true"),
            ("ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED", "true"),
        ],
    ),
    (
        Version::new(3, 4, 0),
        &[("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "true")],
    ),
];

/// The release-dependent variables for `release`; an unknown release (`None`) gets the
/// 3.5 row plus nothing newer, which 3.4 and 3.5 both start with.
pub fn release_flags(release: Option<Version>) -> &'static [(&'static str, &'static str)] {
    let v = release.unwrap_or(Version::new(3, 5, 0));
    FLAGS_BY_RELEASE
        .iter()
        .find(|(from, _)| *from <= v)
        .or_else(|| FLAGS_BY_RELEASE.last())
        .map_or(&[], |(_, flags)| *flags)
}

/// The header line of an environment file naming the release it was rendered for.
const RELEASE_LINE: &str = "# release: ";

/// The release an environment file was rendered for, from its header.
pub fn release_of_env(text: &str) -> Option<Version> {
    text.lines()
        .find_map(|l| l.strip_prefix(RELEASE_LINE))
        .and_then(Version::parse)
}

/// Renders the environment file for [`ENV_FILE`]: one `ETCD_*=value` line per setting
/// etcd reads, every value double-quoted for systemd's `EnvironmentFile=` syntax (which a
/// POSIX shell reads the same way). The release is not known: see [`render_env_for`].
pub fn render_env(s: &Settings, membership: &Membership) -> String {
    render_env_for(s, membership, None)
}

/// [`render_env`] for the etcd release about to start ([`FLAGS_BY_RELEASE`]); the file
/// names that release in its header, so a later start of the same binaries renders alike.
pub fn render_env_for(s: &Settings, membership: &Membership, release: Option<Version>) -> String {
    let member = ThisMember::of(s);
    let mut vars: Vec<(&str, String)> = vec![
        ("ETCD_NAME", s.node_name.clone()),
        ("ETCD_DATA_DIR", s.data_dir.display().to_string()),
        ("ETCD_INITIAL_CLUSTER", membership.initial_cluster.clone()),
        ("ETCD_INITIAL_CLUSTER_TOKEN", s.cluster_token.clone()),
        (
            "ETCD_INITIAL_CLUSTER_STATE",
            membership.state.as_str().to_string(),
        ),
        // Loopback beside the node IP, with the client side's scheme.
        ("ETCD_LISTEN_CLIENT_URLS", member.listen_client_urls()),
        ("ETCD_ADVERTISE_CLIENT_URLS", member.client_url.clone()),
        ("ETCD_LISTEN_PEER_URLS", member.peer_url.clone()),
        ("ETCD_INITIAL_ADVERTISE_PEER_URLS", member.peer_url.clone()),
        // Always plain http on loopback: the health check asks `/health` there without
        // certificates (Prometheus, when configured, scrapes the node IP; still http).
        ("ETCD_LISTEN_METRICS_URLS", member.listen_metrics_urls()),
        // The quota written out, etcd's default included: NOSPACE comes at a known size.
        (
            "ETCD_QUOTA_BACKEND_BYTES",
            s.data.quota_backend_bytes.to_string(),
        ),
    ];
    // Corruption checks, as the release started spells them (tests/upkeep.rs starts 3.4.23
    // and 3.5.1 with the 3.5 lines; the unknown release gets those).
    for (key, value) in release_flags(release) {
        vars.push((key, (*value).to_string()));
    }
    let tls = [
        (
            &s.tls.client,
            [
                "ETCD_CERT_FILE",
                "ETCD_KEY_FILE",
                "ETCD_TRUSTED_CA_FILE",
                "ETCD_CLIENT_CERT_AUTH",
            ],
        ),
        (
            &s.tls.peer,
            [
                "ETCD_PEER_CERT_FILE",
                "ETCD_PEER_KEY_FILE",
                "ETCD_PEER_TRUSTED_CA_FILE",
                "ETCD_PEER_CLIENT_CERT_AUTH",
            ],
        ),
    ];
    for (files, [cert, key, ca, auth]) in tls {
        if let Some(TlsFiles {
            cert: c,
            key: k,
            trusted_ca: a,
        }) = files
        {
            vars.push((cert, c.display().to_string()));
            vars.push((key, k.display().to_string()));
            vars.push((ca, a.display().to_string()));
            vars.push((auth, "true".to_string()));
        }
    }

    let mut out = format!(
        "# etcd's settings, written by etcd-setup {}; read by {ETCD_UNIT}.\n\
         # Rewritten at every run of etcd-setup from its configuration.\n",
        crate::VERSION
    );
    if let Some(v) = release {
        out.push_str(&format!("{RELEASE_LINE}{v}\n"));
    }
    for (key, value) in &vars {
        out.push_str(&format!("{key}={}\n", quote_env(value)));
    }
    out
}

/// Quotes `value` for a systemd `EnvironmentFile=`: inside double quotes, `\`, `"`, `$`
/// and `` ` `` are escaped with a backslash and everything else is literal. (`config`
/// admits no newline, carriage return or NUL into a setting, which that format cannot
/// hold inside a value.)
fn quote_env(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::config;
    use std::path::Path;
    use std::process::Command;

    /// The value etcd reads for `key` from the environment file rendered from `s`.
    fn env(s: &Settings, key: &str) -> String {
        let text = render_env(s, &Membership::configured(s));
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in\n{text}"));
        line.trim_matches('"').to_string()
    }

    /// The smallest valid configuration file: only the required keys.
    const BASE: &str = r#"
[node]
name = "etcd-1"
ip = "10.1.1.11"

[etcd]
initial_cluster = "etcd-1=http://10.1.1.11:2380,etcd-2=http://10.1.1.12:2380"
cluster_token = "tok"
"#;

    fn parse_text(text: &str) -> Settings {
        config::parse(text, Path::new("/etc/etcd-setup/config.toml")).expect("a valid file")
    }

    #[test]
    fn the_documented_example_renders_its_urls() {
        let s = parse_text(config::EXAMPLE);
        assert_eq!(
            env(&s, "ETCD_LISTEN_CLIENT_URLS"),
            "https://10.1.1.11:2379,https://127.0.0.1:2379"
        );
        assert_eq!(
            env(&s, "ETCD_ADVERTISE_CLIENT_URLS"),
            "https://10.1.1.11:2379"
        );
        assert_eq!(env(&s, "ETCD_LISTEN_PEER_URLS"), "https://10.1.1.11:2380");
        assert_eq!(
            env(&s, "ETCD_INITIAL_ADVERTISE_PEER_URLS"),
            "https://10.1.1.11:2380"
        );
        assert_eq!(
            env(&s, "ETCD_LISTEN_METRICS_URLS"),
            "http://127.0.0.1:2381,http://10.1.1.11:2382"
        );
        assert_eq!(
        env(&s, "ETCD_INITIAL_CLUSTER"),
        "etcd-1=https://10.1.1.11:2380,etcd-2=https://10.1.1.12:2380,etcd-3=https://10.1.1.13:2380"
    );
    }

    #[test]
    fn the_defaults_render_plain_http_urls_and_the_default_quota() {
        let s = parse_text(BASE);
        assert_eq!(
            env(&s, "ETCD_LISTEN_CLIENT_URLS"),
            "http://10.1.1.11:2379,http://127.0.0.1:2379"
        );
        assert_eq!(
            env(&s, "ETCD_ADVERTISE_CLIENT_URLS"),
            "http://10.1.1.11:2379"
        );
        assert_eq!(
            env(&s, "ETCD_INITIAL_ADVERTISE_PEER_URLS"),
            "http://10.1.1.11:2380"
        );
        assert_eq!(env(&s, "ETCD_QUOTA_BACKEND_BYTES"), "2147483648");
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
        let s = parse_text(text);
        assert_eq!(
            env(&s, "ETCD_LISTEN_CLIENT_URLS"),
            "http://[fd00::11]:12379,http://127.0.0.1:12379"
        );
        assert_eq!(env(&s, "ETCD_LISTEN_PEER_URLS"), "http://[fd00::11]:2380");
    }

    #[test]
    fn loopback_node_listens_once() {
        let text = BASE
            .replace("10.1.1.11", "127.0.0.1")
            .replace(",etcd-2=http://10.1.1.12:2380", "");
        let s = parse_text(&text);
        assert_eq!(env(&s, "ETCD_LISTEN_CLIENT_URLS"), "http://127.0.0.1:2379");
    }

    /// Three members, plain http, the defaults; `extra` is TOML merged in by table.
    fn parse_with(cluster: &str, extra: &str) -> Settings {
        let mut tables: Vec<(String, String)> = vec![
            (
                "node".into(),
                "name = \"etcd-1\"\nip = \"10.1.1.11\"\n".into(),
            ),
            (
                "etcd".into(),
                format!("initial_cluster = \"{cluster}\"\ncluster_token = \"cks-cluster-7\"\n"),
            ),
        ];
        let mut current = None;
        for line in extra.lines() {
            if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                if !tables.iter().any(|(n, _)| n == t) {
                    tables.push((t.to_string(), String::new()));
                }
                current = Some(t.to_string());
            } else if let Some(t) = &current {
                let body = &mut tables.iter_mut().find(|(n, _)| n == t).unwrap().1;
                body.push_str(line);
                body.push('\n');
            }
        }
        let text: String = tables
            .iter()
            .map(|(n, b)| format!("[{n}]\n{b}\n"))
            .collect();
        config::parse(&text, Path::new("/etc/etcd-setup/config.toml"))
            .unwrap_or_else(|f| panic!("{f}\n{text}"))
    }

    const HTTP: &str =
        "etcd-1=http://10.1.1.11:2380,etcd-2=http://10.1.1.12:2380,etcd-3=http://10.1.1.13:2380";
    const HTTPS: &str =
        "etcd-1=https://10.1.1.11:2380,etcd-2=https://10.1.1.12:2380,etcd-3=https://10.1.1.13:2380";
    const TLS: &str = "[tls]
client_cert = \"/etc/etcd/pki/server.crt\"
client_key = \"/etc/etcd/pki/server.key\"
client_trusted_ca = \"/etc/etcd/pki/ca.crt\"
peer_cert = \"/etc/etcd/pki/peer.crt\"
peer_key = \"/etc/etcd/pki/peer.key\"
peer_trusted_ca = \"/etc/etcd/pki/ca.crt\"
";

    fn params() -> Settings {
        parse_with(HTTP, "")
    }

    fn params_and(extra: &str) -> Settings {
        parse_with(HTTP, extra)
    }

    fn with_tls() -> Settings {
        parse_with(HTTPS, TLS)
    }

    fn env_of(s: &Settings) -> String {
        render_env(s, &Membership::configured(s))
    }

    /// The setting lines of a unit (no comments, no blanks).
    fn settings(unit: &str) -> Vec<&str> {
        unit.lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect()
    }

    /// What a POSIX shell reads from the env file, as `KEY=value` lines.
    fn shell_reads(env: &str, keys: &[&str]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("etcd.env");
        std::fs::write(&file, env).unwrap();
        let script = keys
            .iter()
            .map(|k| format!("printf '%s\\0' \"{k}=${k}\";"))
            .collect::<String>();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(". \"$0\"; {script}"))
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .split_terminator('\0')
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_packaged_unit_is_a_hardened_notify_service_reading_everything_from_its_env() {
        let unit = UNIT_TEXT;
        let s = settings(unit);
        for line in [
            "[Unit]",
            "Wants=network-online.target",
            "After=network-online.target",
            "StartLimitIntervalSec=10min",
            "StartLimitBurst=5",
            "[Service]",
            "Type=notify",
            "NotifyAccess=main",
            "EnvironmentFile=/etc/etcd-setup/etcd.env",
            "EnvironmentFile=-/run/etcd-setup/etcd-once.env",
            "ExecStartPre=+/usr/bin/install -d -m 0700 -o etcd -g etcd ${ETCD_DATA_DIR}",
            "ExecStart=/var/lib/etcd-setup/etcd",
            "Restart=on-failure",
            "RestartSec=5s",
            "TimeoutStartSec=infinity",
            "LimitNOFILE=65536",
            "User=etcd",
            "Group=etcd",
            "UMask=0077",
            "ProtectSystem=full",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "PrivateDevices=yes",
            "NoNewPrivileges=yes",
            "CapabilityBoundingSet=",
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectControlGroups=yes",
            "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
            "RestrictNamespaces=yes",
            "LockPersonality=yes",
            "MemoryDenyWriteExecute=yes",
            "SystemCallArchitectures=native",
            "[Install]",
            "WantedBy=multi-user.target",
        ] {
            assert!(s.contains(&line), "missing {line:?} in\n{unit}");
        }
        // The constants the agent writes by are the ones the unit reads.
        for (what, path) in [
            ("EnvironmentFile=", ENV_FILE.to_string()),
            ("EnvironmentFile=-", ONCE_ENV_FILE.to_string()),
            ("ExecStart=", ETCD_LINK.to_string()),
            ("User=", ETCD_USER.to_string()),
        ] {
            assert!(
                s.contains(&format!("{what}{path}").as_str()),
                "{what}{path}"
            );
        }
        // Nothing of one node or one release: no path but the fixed ones, no name, no URL.
        assert!(!unit.contains("{{"), "{unit}");
        for node_specific in [
            "/var/lib/etcd",
            "/opt/bin",
            "ReadWritePaths",
            "StateDirectory",
        ] {
            assert!(
                !s.iter()
                    .any(|l| l.contains(node_specific) && !l.contains(ETCD_LINK)),
                "{node_specific:?} in\n{unit}"
            );
        }
        // Every setting is explained: a comment line comes before each group of settings.
        let lines: Vec<&str> = unit.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let starts_group = i > 0 && lines[i - 1].is_empty();
            if starts_group && !l.is_empty() && !l.starts_with('[') {
                assert!(
                    l.starts_with('#'),
                    "uncommented group at line {}: {l}",
                    i + 1
                );
            }
        }
    }

    /// The environment holds what the unit used to carry for one node: the data dir its
    /// `ExecStartPre=` creates comes from `ETCD_DATA_DIR`.
    #[test]
    fn env_names_the_data_dir_the_unit_creates() {
        let env = env_of(&params_and("[etcd]\ndata_dir = \"/srv/etcd/data\""));
        assert!(
            env.lines().any(|l| l == "ETCD_DATA_DIR=\"/srv/etcd/data\""),
            "{env}"
        );
        let with = env_of(&with_tls());
        let without = env_of(&params());
        assert!(with.contains("ETCD_CERT_FILE="), "{with}");
        assert!(!without.contains("ETCD_CERT_FILE="), "{without}");
    }

    #[test]
    fn env_without_tls_sets_the_cluster_and_no_tls_variables() {
        let env = env_of(&params());
        let lines: Vec<&str> = env.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "ETCD_NAME=\"etcd-1\"",
                "ETCD_DATA_DIR=\"/var/lib/etcd\"",
                "ETCD_INITIAL_CLUSTER=\"etcd-1=http://10.1.1.11:2380,etcd-2=http://10.1.1.12:2380,etcd-3=http://10.1.1.13:2380\"",
                "ETCD_INITIAL_CLUSTER_TOKEN=\"cks-cluster-7\"",
                "ETCD_INITIAL_CLUSTER_STATE=\"new\"",
                "ETCD_LISTEN_CLIENT_URLS=\"http://10.1.1.11:2379,http://127.0.0.1:2379\"",
                "ETCD_ADVERTISE_CLIENT_URLS=\"http://10.1.1.11:2379\"",
                "ETCD_LISTEN_PEER_URLS=\"http://10.1.1.11:2380\"",
                "ETCD_INITIAL_ADVERTISE_PEER_URLS=\"http://10.1.1.11:2380\"",
                "ETCD_LISTEN_METRICS_URLS=\"http://127.0.0.1:2381\"",
                "ETCD_QUOTA_BACKEND_BYTES=\"2147483648\"",
                "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=\"true\"",
                "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED=\"true\"",
            ]
        );
    }

    /// Issue 23 item 3: the corruption checks as each release spells them, from the one
    /// table. No etcd 3.6 build can be fetched here: 3.6.5 is a version number only.
    #[test]
    fn env_renders_the_corruption_checks_for_the_release_it_starts() {
        let s = params();
        let m = Membership::configured(&s);
        let flags = |v: &str| -> Vec<String> {
            render_env_for(&s, &m, Version::parse(v))
                .lines()
                .filter(|l| l.starts_with("ETCD_EXPERIMENTAL_") || l.starts_with("ETCD_FEATURE"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            flags("3.4.23"),
            ["ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=\"true\""]
        );
        let v35 = [
            "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=\"true\"",
            "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED=\"true\"",
        ];
        assert_eq!(flags("3.5.16"), v35);
        assert_eq!(flags("3.5.30"), v35);
        let v36 = ["ETCD_FEATURE_GATES=\"InitialCorruptCheck=true,CompactHashCheck=true\""];
        assert_eq!(flags("3.6.5"), v36);
        assert_eq!(
            flags("3.7.0"),
            v36,
            "the newest row holds for later releases"
        );
        // The file names its release, read back for a later start of the same binaries.
        let text = render_env_for(&s, &m, Version::parse("3.6.5"));
        assert!(text.contains("\n# release: 3.6.5\n"), "{text}");
        assert_eq!(release_of_env(&text), Version::parse("3.6.5"));
        // Everything else is the same whatever the release.
        let rest = |t: String| -> Vec<String> {
            t.lines()
                .filter(|l| {
                    !l.starts_with('#')
                        && !l.contains("CORRUPT")
                        && !l.contains("HASH")
                        && !l.starts_with("ETCD_FEATURE")
                })
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            rest(render_env_for(&s, &m, Version::parse("3.4.23"))),
            rest(render_env_for(&s, &m, Version::parse("3.6.5")))
        );
        // Unknown: the lines 3.4 and 3.5 both start with, no release header.
        assert_eq!(render_env(&s, &m), render_env_for(&s, &m, None));
        assert_eq!(release_of_env(&render_env(&s, &m)), None);
    }

    #[test]
    fn env_sets_the_configured_quota_and_a_prometheus_listener_on_the_node_ip() {
        let s = params_and("[etcd]\nquota_backend_bytes = \"32MiB\"\nprometheus_port = 9379\n");
        let env = env_of(&s);
        assert!(
            env.lines()
                .any(|l| l == "ETCD_QUOTA_BACKEND_BYTES=\"33554432\""),
            "{env}"
        );
        assert!(
            env.lines()
                .any(|l| l
                    == "ETCD_LISTEN_METRICS_URLS=\"http://127.0.0.1:2381,http://10.1.1.11:9379\""),
            "{env}"
        );
    }

    #[test]
    fn env_with_tls_turns_on_mutual_tls_for_clients_and_peers() {
        let env = env_of(&with_tls());
        for line in [
            "ETCD_CERT_FILE=\"/etc/etcd/pki/server.crt\"",
            "ETCD_KEY_FILE=\"/etc/etcd/pki/server.key\"",
            "ETCD_TRUSTED_CA_FILE=\"/etc/etcd/pki/ca.crt\"",
            "ETCD_CLIENT_CERT_AUTH=\"true\"",
            "ETCD_PEER_CERT_FILE=\"/etc/etcd/pki/peer.crt\"",
            "ETCD_PEER_KEY_FILE=\"/etc/etcd/pki/peer.key\"",
            "ETCD_PEER_TRUSTED_CA_FILE=\"/etc/etcd/pki/ca.crt\"",
            "ETCD_PEER_CLIENT_CERT_AUTH=\"true\"",
        ] {
            assert!(env.lines().any(|l| l == line), "missing {line} in\n{env}");
        }
        let mut client_only = with_tls();
        client_only.tls.peer = None;
        let env = env_of(&client_only);
        assert!(env.contains("ETCD_CERT_FILE="), "{env}");
        assert!(!env.contains("ETCD_PEER_"), "{env}");
    }

    #[test]
    fn env_values_with_spaces_quotes_dollars_and_backslashes_read_back_unchanged() {
        let tricky = [
            "two words",
            "say \"hi\"",
            "it's",
            "$HOME and ${PATH}",
            "back\\slash\\",
            "`uname`",
            " leading and trailing ",
            "# not a comment",
            "",
        ];
        for value in tricky {
            // config admits none of these; the quoting still carries them unchanged.
            let env = format!(
                "ETCD_NAME={}\nETCD_INITIAL_CLUSTER_TOKEN={}\n",
                quote_env(value),
                quote_env(&format!("{value}!"))
            );
            let read = shell_reads(&env, &["ETCD_NAME", "ETCD_INITIAL_CLUSTER_TOKEN"]);
            assert_eq!(
                read,
                [
                    format!("ETCD_NAME={value}"),
                    format!("ETCD_INITIAL_CLUSTER_TOKEN={value}!")
                ],
                "{env}"
            );
        }
    }

    #[test]
    fn env_of_a_joining_member_carries_the_membership_it_was_given() {
        let s = params();
        let joining = Membership {
            initial_cluster: "etcd-2=http://10.1.1.12:2380,etcd-1=http://10.1.1.11:2380".into(),
            state: ClusterState::Existing,
        };
        let env = render_env(&s, &joining);
        assert!(env.contains("ETCD_INITIAL_CLUSTER=\"etcd-2=http://10.1.1.12:2380,etcd-1=http://10.1.1.11:2380\"\n"), "{env}");
        assert!(
            env.contains("ETCD_INITIAL_CLUSTER_STATE=\"existing\"\n"),
            "{env}"
        );
    }

    #[test]
    fn the_membership_reads_back_from_the_env_file_and_nothing_else_does() {
        let s = params();
        let joining = Membership {
            initial_cluster: "etcd-2=http://10.1.1.12:2380,etcd-1=http://10.1.1.11:2380".into(),
            state: ClusterState::Existing,
        };
        let env = render_env(&s, &joining);
        assert_eq!(Membership::from_env(&env), Some(joining));
        assert_eq!(
            Membership::from_env(&render_env(&s, &Membership::configured(&s))),
            Some(Membership::configured(&s))
        );
        assert_eq!(Membership::from_env("ETCD_NAME=\"a\"\n"), None);
        assert_eq!(
            Membership::from_env(
                "ETCD_INITIAL_CLUSTER=\"a=x\"\nETCD_INITIAL_CLUSTER_STATE=\"odd\"\n"
            ),
            None
        );
    }

    #[test]
    fn ipv6_node_urls_are_bracketed() {
        let s = config::parse(
            "[node]\nname = \"a\"\nip = \"fd00::11\"\n[etcd]\ninitial_cluster = \"a=http://[fd00::11]:2380\"\ncluster_token = \"t\"\n",
            Path::new("/c.toml"),
        )
        .unwrap();
        let env = env_of(&s);
        assert!(
            env.contains("ETCD_ADVERTISE_CLIENT_URLS=\"http://[fd00::11]:2379\"\n"),
            "{env}"
        );
        assert!(
            env.contains("ETCD_LISTEN_PEER_URLS=\"http://[fd00::11]:2380\"\n"),
            "{env}"
        );
    }

    /// `systemd-analyze verify` on the packaged unit, where the host has it. It runs
    /// without systemd as PID 1 and needs ExecStart's binary to exist, so the copy it reads
    /// names a stand-in for the link; it exits 0 even on unknown keys or bad values, so the
    /// test reads what it says about the file.
    #[test]
    fn systemd_analyze_verify_accepts_the_packaged_unit() {
        if Command::new("systemd-analyze")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("systemd-analyze not installed; skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let etcd = dir.path().join("etcd-bin");
        std::fs::write(&etcd, "#!/bin/sh\nexit 0\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&etcd, std::fs::Permissions::from_mode(0o755)).unwrap();
        let complaints = |name: &str, text: &str| -> Vec<String> {
            let unit = dir.path().join(name);
            std::fs::write(&unit, text).unwrap();
            let out = Command::new("systemd-analyze")
                .args(["verify", "--man=no"])
                .arg(&unit)
                .output()
                .unwrap();
            // Lines about this host (no systemd running) do not name the unit file.
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| l.contains(name))
                .map(str::to_string)
                .collect()
        };
        let text = UNIT_TEXT.replace(
            &format!("ExecStart={ETCD_LINK}"),
            &format!("ExecStart={}", etcd.display()),
        );
        assert_ne!(text, UNIT_TEXT);
        let said = complaints("etcd.service", &text);
        assert!(said.is_empty(), "{said:#?}\n{text}");

        // The check is live on this host: a typo in a copy is reported.
        let broken = text.replace("Restart=on-failure", "Restrat=on-failure");
        let said = complaints("broken.service", &broken);
        assert!(said.iter().any(|l| l.contains("Restrat")), "{said:#?}");
    }
}
