//! etcd's systemd unit and environment file, rendered from the node's settings.
//!
//! Pure text in, text out: the caller writes the results atomically to [`UNIT_FILE`] and
//! [`ENV_FILE`]. etcd reads its whole configuration from `ETCD_*` variables, so the unit
//! carries no per-node flags and only the environment file changes between nodes.
//! Everything that would make either file mean something else than intended (a newline
//! that starts a new setting, a `%` that systemd expands, a path the sandbox hides) is
//! refused with `config-invalid` naming the setting.

use crate::reason::{Failure, ReasonCode};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// etcd's unit.
pub const ETCD_UNIT: &str = "etcd.service";

/// Where the rendered unit goes.
pub const UNIT_FILE: &str = "/etc/systemd/system/etcd.service";

/// Where the rendered environment file goes; the unit's `EnvironmentFile=`. systemd reads
/// it as root before dropping to the etcd user, so it can be 0600 root (it holds the
/// cluster token).
pub const ENV_FILE: &str = "/etc/etcd-setup/etcd.env";

/// The system user and group etcd runs as. The image (or the caller) creates them.
pub const ETCD_USER: &str = "etcd";

/// What the unit and environment file are rendered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUnitParams {
    /// Folder holding the `etcd` binary, e.g. `/opt/bin`.
    pub install_dir: PathBuf,
    /// etcd's data dir, created 0700 and owned by the etcd user, e.g. `/var/lib/etcd`.
    pub data_dir: PathBuf,
    /// This member's name, e.g. `etcd-1`.
    pub name: String,
    /// Every member as `name=peer-url`, comma separated.
    pub initial_cluster: String,
    /// The cluster token shared by all members.
    pub cluster_token: String,
    /// `new` or `existing`.
    pub cluster_state: String,
    /// URLs etcd listens on for clients.
    pub listen_client_urls: Vec<String>,
    /// URLs etcd advertises to clients.
    pub advertise_client_urls: Vec<String>,
    /// URLs etcd listens on for peers.
    pub listen_peer_urls: Vec<String>,
    /// URLs etcd advertises to peers.
    pub initial_advertise_peer_urls: Vec<String>,
    /// Where etcd serves `/metrics` and `/health` without client TLS, e.g.
    /// `http://127.0.0.1:2381`.
    pub metrics_url: String,
    /// Client TLS as (certificate, key, trusted CA); mutual TLS when set.
    pub client_tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// Peer TLS as (certificate, key, trusted CA); mutual TLS when set.
    pub peer_tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// How long systemd waits for etcd's READY=1 before it kills the start.
    pub start_timeout: Duration,
    /// How many members the initial cluster has.
    pub members: usize,
}

/// Renders `etcd.service` for [`UNIT_FILE`].
///
/// Fails with `config-invalid` when a path cannot be written into a unit file safely or
/// the start timeout is zero (which systemd would read as "wait forever").
pub fn render_unit(p: &EtcdUnitParams) -> Result<String, Failure> {
    let install_dir = unit_path("install_dir", &p.install_dir)?;
    let data_dir = unit_path("data_dir", &p.data_dir)?;
    let timeout = p.start_timeout.as_secs();
    if timeout == 0 {
        return Err(invalid(
            "the etcd start timeout is zero; systemd would wait for etcd forever, give at least 1s"
                .to_string(),
        ));
    }
    let user = ETCD_USER;
    let version = crate::VERSION;
    let members = p.members;
    let start_comment = if members > 1 && p.cluster_state == "new" {
        format!(
            "\
# This member starts a new cluster of {members}: etcd sends READY=1 only once a quorum
# has joined, so the first member booted waits for the others. The timeout covers
# the slowest of them booting, finding its ISO and starting etcd; if it still runs out,
# systemd kills etcd and Restart= starts it again."
        )
    } else {
        "# etcd sends READY=1 once it serves clients; a lone or joining member is quick.".into()
    };
    let tls = match (&p.client_tls, &p.peer_tls) {
        (None, None) => "off",
        (Some(_), None) => "on for clients",
        (None, Some(_)) => "on for peers",
        (Some(_), Some(_)) => "on for clients and peers",
    };
    let data_dir_setup = match data_dir.strip_prefix("/var/lib/") {
        Some(state_dir) => format!(
            "\
# systemd creates {data_dir} before etcd starts, mode 0700 and owned by {user}
# (an existing one is chowned to {user}), and keeps it writable under ProtectSystem=.
StateDirectory={state_dir}
StateDirectoryMode=0700"
        ),
        None => format!(
            "\
# The data dir lies outside /var/lib, where StateDirectory= cannot manage it: create
# it 0700 and owned by {user}, as root (\"+\": outside the sandbox), before every start.
# Files already inside keep their owner.
ExecStartPre=+/usr/bin/install -d -m 0700 -o {user} -g {user} {data_dir}"
        ),
    };
    Ok(format!(
        "\
# etcd, installed by etcd-setup {version}.
# Rewritten at every run of etcd-setup: edits here are lost. The node's settings are
# in {ENV_FILE}.

[Unit]
Description=etcd key-value store
Documentation=https://etcd.io/docs/
# Pulls in and orders after network-online.target. The node image masks
# systemd-networkd-wait-online.service, so that target is reached as soon as networking
# has started, not once DHCP has given the node its IP: in effect this orders after
# network.target. If etcd starts before its listen IP exists, it exits (\"cannot assign
# requested address\") and Restart= tries again.
Wants=network-online.target
After=network-online.target
# A crash loop must end in \"failed\", where etcd-setup status and the platform see it,
# instead of restarting forever: 5 starts within 10 minutes is a loop (with RestartSec=5s
# a loop gets there in under a minute), while a member that fails once in a while is
# still restarted. `systemctl reset-failed etcd` clears the count.
StartLimitIntervalSec=10min
StartLimitBurst=5

[Service]
# etcd tells systemd (READY=1 on $NOTIFY_SOCKET) when it has joined the cluster and
# serves, so \"active\" means etcd is up, not merely forked. Only etcd itself may say so.
Type=notify
NotifyAccess=main
# All of etcd's settings, as ETCD_* variables; nothing on the command line.
EnvironmentFile={ENV_FILE}
ExecStart={install_dir}/etcd
# Start again after a crash or a start timeout, not after a clean stop.
Restart=on-failure
RestartSec=5s
{start_comment}
TimeoutStartSec={timeout}s
# etcd keeps a file open per client connection, WAL segment and snapshot.
LimitNOFILE=65536

# A dedicated system user, created with the image. Client and peer TLS is {tls};
# the TLS files named in {ENV_FILE} must be readable by user {user}.
User={user}
Group={user}
# Files etcd creates (WAL, snapshots) are private to it.
UMask=0077
{data_dir_setup}

# Sandbox. The whole file system is read-only to etcd, except its data dir.
ProtectSystem=strict
ReadWritePaths={data_dir}
# /home, /root and /run/user are hidden, so TLS files may not live there.
ProtectHome=yes
# A private /tmp and /var/tmp, and only pseudo devices (null, zero, random ...).
PrivateTmp=yes
PrivateDevices=yes
# No privilege gains and no capabilities at all: etcd's ports are above 1024.
NoNewPrivileges=yes
CapabilityBoundingSet=
# The kernel's knobs, modules and logs, the clock, hostname and cgroups are off limits.
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
# IP for clients and peers; unix sockets for the journal and sd_notify; netlink, which
# Go's net package uses to list interfaces and routes (etcd looks up its default host
# that way at start).
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
# Go never maps memory writable and executable at once.
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native

[Install]
# Started at every boot once enabled.
WantedBy=multi-user.target
"
    ))
}

/// Renders the environment file for [`ENV_FILE`]: one `ETCD_*=value` line per setting
/// etcd reads, every value double-quoted for systemd's `EnvironmentFile=` syntax (which a
/// POSIX shell reads the same way).
///
/// Fails with `config-invalid` when a value holds a newline, carriage return or NUL (it
/// would end the setting early or be cut), a URL in a list holds a comma (etcd splits
/// lists on commas), or a TLS file lies where the unit's sandbox hides it.
pub fn render_env(p: &EtcdUnitParams) -> Result<String, Failure> {
    let mut vars: Vec<(&str, String)> = vec![
        ("ETCD_NAME", p.name.clone()),
        ("ETCD_DATA_DIR", path_value("data_dir", &p.data_dir)?),
        ("ETCD_INITIAL_CLUSTER", p.initial_cluster.clone()),
        ("ETCD_INITIAL_CLUSTER_TOKEN", p.cluster_token.clone()),
        ("ETCD_INITIAL_CLUSTER_STATE", p.cluster_state.clone()),
    ];
    let lists = [
        ("ETCD_LISTEN_CLIENT_URLS", &p.listen_client_urls),
        ("ETCD_ADVERTISE_CLIENT_URLS", &p.advertise_client_urls),
        ("ETCD_LISTEN_PEER_URLS", &p.listen_peer_urls),
        (
            "ETCD_INITIAL_ADVERTISE_PEER_URLS",
            &p.initial_advertise_peer_urls,
        ),
    ];
    for (key, urls) in lists {
        if let Some(url) = urls.iter().find(|u| u.contains(',')) {
            return Err(invalid(format!(
                "{key} would hold the URL {url:?}, which has a comma; etcd splits URL lists on commas"
            )));
        }
        // An empty list leaves etcd's default in place rather than an empty value.
        if !urls.is_empty() {
            vars.push((key, urls.join(",")));
        }
    }
    if !p.metrics_url.is_empty() {
        vars.push(("ETCD_LISTEN_METRICS_URLS", p.metrics_url.clone()));
    }
    let tls = [
        (
            &p.client_tls,
            [
                "ETCD_CERT_FILE",
                "ETCD_KEY_FILE",
                "ETCD_TRUSTED_CA_FILE",
                "ETCD_CLIENT_CERT_AUTH",
            ],
        ),
        (
            &p.peer_tls,
            [
                "ETCD_PEER_CERT_FILE",
                "ETCD_PEER_KEY_FILE",
                "ETCD_PEER_TRUSTED_CA_FILE",
                "ETCD_PEER_CLIENT_CERT_AUTH",
            ],
        ),
    ];
    for (files, [cert, key, ca, auth]) in tls {
        if let Some((cert_path, key_path, ca_path)) = files {
            vars.push((cert, tls_path(cert, cert_path)?));
            vars.push((key, tls_path(key, key_path)?));
            vars.push((ca, tls_path(ca, ca_path)?));
            vars.push((auth, "true".to_string()));
        }
    }

    let mut out = format!(
        "# etcd's settings, written by etcd-setup {}; read by {UNIT_FILE}.\n\
         # Rewritten at every run of etcd-setup from its configuration.\n",
        crate::VERSION
    );
    for (key, value) in &vars {
        out.push_str(&format!("{key}={}\n", quote_env(key, value)?));
    }
    Ok(out)
}

/// Quotes `value` for a systemd `EnvironmentFile=`: inside double quotes, `\`, `"`, `$`
/// and `` ` `` are escaped with a backslash and everything else is literal. Refuses the
/// characters that file format cannot hold inside a value.
fn quote_env(key: &str, value: &str) -> Result<String, Failure> {
    if let Some(bad) = value.chars().find(|c| matches!(c, '\n' | '\r' | '\0')) {
        return Err(invalid(format!(
            "{key} would hold a {} character, which an environment file cannot carry: {value:?}",
            match bad {
                '\n' => "newline",
                '\r' => "carriage return",
                _ => "NUL",
            }
        )));
    }
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    Ok(quoted)
}

/// A path as written into the unit file: a [`path_value`] made only of characters systemd
/// takes literally there (no spaces, quotes, backslashes or `%` specifiers).
fn unit_path(what: &str, path: &Path) -> Result<String, Failure> {
    let text = path_value(what, path)?;
    let literal = |c: char| c.is_ascii_alphanumeric() || "/._-+@:".contains(c);
    if let Some(bad) = text.chars().find(|c| !literal(*c)) {
        return Err(invalid(format!(
            "{what} {text} holds {bad:?}; the etcd unit takes paths of letters, digits and / . _ - + @ : only"
        )));
    }
    Ok(text)
}

/// A path as an environment value: absolute, normal (no `.`, `..` or `//`), UTF-8,
/// without a trailing `/`.
fn path_value(what: &str, path: &Path) -> Result<String, Failure> {
    let Some(text) = path.to_str() else {
        return Err(invalid(format!("{what} {} is not UTF-8", path.display())));
    };
    let normal = path.is_absolute()
        && !text.contains("//")
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !normal {
        return Err(invalid(format!(
            "{what} {text:?} must be an absolute path without '.', '..' or '//'"
        )));
    }
    let trimmed = text.strip_suffix('/').filter(|t| !t.is_empty());
    Ok(trimmed.unwrap_or(text).to_string())
}

/// A TLS file path: a [`path_value`] outside the folders the unit's sandbox hides from
/// etcd (ProtectHome=, PrivateTmp=).
fn tls_path(key: &str, path: &Path) -> Result<String, Failure> {
    let text = path_value(key, path)?;
    for hidden in ["/home", "/root", "/run/user", "/tmp", "/var/tmp"] {
        if path.starts_with(hidden) {
            return Err(invalid(format!(
                "{key} {text} lies under {hidden}, which etcd's sandbox hides from it; keep TLS files under /etc, e.g. /etc/etcd/pki"
            )));
        }
    }
    Ok(text)
}

fn invalid(message: String) -> Failure {
    Failure::new(ReasonCode::ConfigInvalid, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn params() -> EtcdUnitParams {
        EtcdUnitParams {
            install_dir: "/opt/bin".into(),
            data_dir: "/var/lib/etcd".into(),
            name: "etcd-1".into(),
            initial_cluster: "etcd-1=http://10.1.1.11:2380,etcd-2=http://10.1.1.12:2380,etcd-3=http://10.1.1.13:2380".into(),
            cluster_token: "cks-cluster-7".into(),
            cluster_state: "new".into(),
            listen_client_urls: vec!["http://10.1.1.11:2379".into(), "http://127.0.0.1:2379".into()],
            advertise_client_urls: vec!["http://10.1.1.11:2379".into()],
            listen_peer_urls: vec!["http://10.1.1.11:2380".into()],
            initial_advertise_peer_urls: vec!["http://10.1.1.11:2380".into()],
            metrics_url: "http://127.0.0.1:2381".into(),
            client_tls: None,
            peer_tls: None,
            start_timeout: Duration::from_secs(15 * 60),
            members: 3,
        }
    }

    fn with_tls() -> EtcdUnitParams {
        let pki = |f: &str| PathBuf::from(format!("/etc/etcd/pki/{f}"));
        EtcdUnitParams {
            client_tls: Some((pki("server.crt"), pki("server.key"), pki("ca.crt"))),
            peer_tls: Some((pki("peer.crt"), pki("peer.key"), pki("ca.crt"))),
            ..params()
        }
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
    fn unit_is_a_hardened_notify_service_with_the_given_start_timeout() {
        let unit = render_unit(&params()).unwrap();
        let s = settings(&unit);
        for line in [
            "[Unit]",
            "Wants=network-online.target",
            "After=network-online.target",
            "StartLimitIntervalSec=10min",
            "StartLimitBurst=5",
            "[Service]",
            "Type=notify",
            "EnvironmentFile=/etc/etcd-setup/etcd.env",
            "ExecStart=/opt/bin/etcd",
            "Restart=on-failure",
            "RestartSec=5s",
            "TimeoutStartSec=900s",
            "LimitNOFILE=65536",
            "User=etcd",
            "Group=etcd",
            "StateDirectory=etcd",
            "StateDirectoryMode=0700",
            "ProtectSystem=strict",
            "ReadWritePaths=/var/lib/etcd",
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
        assert!(!unit.contains("ExecStartPre"), "{unit}");
        // Every setting is explained: no two setting lines follow a blank line uncommented
        // at the start of a group.
        assert!(unit.contains("waits for the others"), "{unit}");
    }

    #[test]
    fn unit_for_a_data_dir_outside_var_lib_creates_it_0700_before_start() {
        let p = EtcdUnitParams {
            data_dir: "/srv/etcd/data".into(),
            ..params()
        };
        let unit = render_unit(&p).unwrap();
        let s = settings(&unit);
        assert!(
            s.contains(&"ExecStartPre=+/usr/bin/install -d -m 0700 -o etcd -g etcd /srv/etcd/data")
        );
        assert!(s.contains(&"ReadWritePaths=/srv/etcd/data"));
        assert!(!s.iter().any(|l| l.starts_with("StateDirectory")), "{unit}");
    }

    #[test]
    fn unit_for_a_data_dir_below_var_lib_uses_a_nested_state_directory() {
        let p = EtcdUnitParams {
            data_dir: "/var/lib/etcd/member-data/".into(),
            install_dir: "/usr/local/bin/".into(),
            ..params()
        };
        let s = render_unit(&p).unwrap();
        assert!(
            settings(&s).contains(&"StateDirectory=etcd/member-data"),
            "{s}"
        );
        assert!(
            settings(&s).contains(&"ExecStart=/usr/local/bin/etcd"),
            "{s}"
        );
    }

    #[test]
    fn unit_for_a_lone_member_does_not_talk_about_quorum() {
        let p = EtcdUnitParams {
            members: 1,
            start_timeout: Duration::from_secs(120),
            ..params()
        };
        let unit = render_unit(&p).unwrap();
        assert!(!unit.contains("quorum"), "{unit}");
        assert!(settings(&unit).contains(&"TimeoutStartSec=120s"));
    }

    #[test]
    fn unit_with_tls_says_the_files_must_be_readable_by_etcd() {
        let unit = render_unit(&with_tls()).unwrap();
        assert!(unit.contains("TLS is on for clients and peers"), "{unit}");
        assert!(unit.contains("must be readable by user etcd"), "{unit}");
        // TLS changes no setting of the unit: the paths travel in the environment file.
        assert_eq!(settings(&unit), settings(&render_unit(&params()).unwrap()));
    }

    #[test]
    fn unit_refuses_zero_timeout_and_unsafe_paths() {
        let zero = EtcdUnitParams {
            start_timeout: Duration::from_millis(500),
            ..params()
        };
        let err = render_unit(&zero).unwrap_err();
        assert_eq!(err.code, ReasonCode::ConfigInvalid);
        assert!(err.message.contains("start timeout is zero"), "{err}");

        for (dir, why) in [
            ("/opt/my bin", "' '"),
            ("/opt/100%", "'%'"),
            ("opt/bin", "absolute"),
            ("/opt/../bin", "absolute"),
            ("/opt//bin", "absolute"),
        ] {
            let p = EtcdUnitParams {
                install_dir: dir.into(),
                ..params()
            };
            let err = render_unit(&p).unwrap_err();
            assert_eq!(err.code, ReasonCode::ConfigInvalid);
            assert!(err.message.starts_with("install_dir "), "{err}");
            assert!(err.message.contains(why), "{dir}: {err}");
        }
    }

    #[test]
    fn env_without_tls_sets_the_cluster_and_no_tls_variables() {
        let env = render_env(&params()).unwrap();
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
            ]
        );
    }

    #[test]
    fn env_with_tls_turns_on_mutual_tls_for_clients_and_peers() {
        let env = render_env(&with_tls()).unwrap();
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
        let client_only = EtcdUnitParams {
            peer_tls: None,
            ..with_tls()
        };
        let env = render_env(&client_only).unwrap();
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
            let p = EtcdUnitParams {
                name: value.into(),
                cluster_token: format!("{value}!"),
                ..params()
            };
            let env = render_env(&p).unwrap();
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
    fn env_refuses_newline_carriage_return_and_nul() {
        for (value, what) in [
            ("etcd-1\nETCD_DATA_DIR=/", "newline"),
            ("a\rb", "carriage return"),
            ("a\0b", "NUL"),
        ] {
            let p = EtcdUnitParams {
                cluster_token: value.into(),
                ..params()
            };
            let err = render_env(&p).unwrap_err();
            assert_eq!(err.code, ReasonCode::ConfigInvalid);
            assert!(
                err.message
                    .starts_with("ETCD_INITIAL_CLUSTER_TOKEN would hold a ")
                    && err.message.contains(what),
                "{err}"
            );
        }
    }

    #[test]
    fn env_refuses_comma_in_a_url_and_tls_files_the_sandbox_hides() {
        let p = EtcdUnitParams {
            listen_peer_urls: vec!["http://10.0.0.1:2380,http://evil:1".into()],
            ..params()
        };
        let err = render_env(&p).unwrap_err();
        assert!(err.message.starts_with("ETCD_LISTEN_PEER_URLS "), "{err}");

        let p = EtcdUnitParams {
            client_tls: Some((
                "/home/cloud/server.crt".into(),
                "/etc/etcd/server.key".into(),
                "/etc/etcd/ca.crt".into(),
            )),
            ..params()
        };
        let err = render_env(&p).unwrap_err();
        assert_eq!(err.code, ReasonCode::ConfigInvalid);
        assert_eq!(
            err.message,
            "ETCD_CERT_FILE /home/cloud/server.crt lies under /home, which etcd's sandbox hides from it; keep TLS files under /etc, e.g. /etc/etcd/pki"
        );
    }

    /// `systemd-analyze verify` on the rendered units, where the host has it. It runs
    /// without systemd as PID 1 and needs ExecStart's binary to exist; it exits 0 even
    /// on unknown keys or bad values, so the test reads what it says about the file.
    #[test]
    fn systemd_analyze_verify_accepts_the_rendered_units() {
        if Command::new("systemd-analyze")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("systemd-analyze not installed; skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let etcd = bin.join("etcd");
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

        let outside = EtcdUnitParams {
            data_dir: "/srv/etcd".into(),
            ..with_tls()
        };
        for (i, p) in [params(), outside].into_iter().enumerate() {
            let p = EtcdUnitParams {
                install_dir: bin.clone(),
                ..p
            };
            let text = render_unit(&p).unwrap();
            let said = complaints(&format!("etcd{i}.service"), &text);
            assert!(said.is_empty(), "{said:#?}\n{text}");
        }

        // The check is live on this host: a typo in a copy is reported.
        let p = EtcdUnitParams {
            install_dir: bin.clone(),
            ..params()
        };
        let broken = render_unit(&p)
            .unwrap()
            .replace("Restart=on-failure", "Restrat=on-failure");
        let said = complaints("broken.service", &broken);
        assert!(said.iter().any(|l| l.contains("Restrat")), "{said:#?}");
    }
}
