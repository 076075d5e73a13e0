//! Stage three: the keys together — the cluster (every member, this node among them,
//! one scheme), TLS sides, and the rules that tie keys to each other and to the unit's
//! sandbox — assembled into [`Settings`].

use super::raw::RawFile;
use super::values::{is_name_char, scheme, url_host, Checked, Checker, PeerUrl};
use super::*;
use std::collections::HashSet;

impl Checker<'_> {
    /// A path etcd itself must reach, checked against the unit's sandbox: a data dir,
    /// binary folder or TLS file under a folder it hides would make etcd fail at its
    /// start, long after the run waited for the ISO and replaced the binaries.
    pub(super) fn etcd_path(&self, key: &str, path: PathBuf) -> Checked<PathBuf> {
        match HIDDEN_FROM_ETCD
            .iter()
            .find(|hidden| path.starts_with(hidden))
        {
            Some(hidden) => Err(self.err(
                key,
                format_args!(
                    "{} lies under {hidden}, which etcd's sandbox (ProtectHome=, PrivateTmp=) \
                     hides from it; keep etcd's files elsewhere, TLS files e.g. under /etc/etcd/pki",
                    path.display()
                ),
            )),
            None => Ok(path),
        }
    }

    pub(super) fn peer_url(&self, key: &str, member: &str, url: &str) -> Checked<PeerUrl> {
        let bad = |why: &str| self.err(key, format_args!("member {member:?}: {url:?} {why}"));
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("http://") {
            ("http", rest)
        } else if let Some(rest) = url.strip_prefix("https://") {
            ("https", rest)
        } else {
            return Err(bad("has no http:// or https:// scheme"));
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@']) {
            return Err(bad(
                "must be SCHEME://HOST:PORT, without path, query or user",
            ));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("has an IPv6 host without its closing ]"))?;
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("has a bracketed host that is not an IPv6 address"));
            }
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = port.ok_or_else(|| bad("has no port"))?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| bad("has no valid port (1 to 65535)"))?;
        let host_ok = !host.is_empty()
            && host.len() <= 253
            && (host.parse::<IpAddr>().is_ok()
                || host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
        if !host_ok {
            return Err(bad("has no valid host (an IP address or a DNS name)"));
        }
        Ok(PeerUrl {
            scheme,
            host: host.to_string(),
            port,
        })
    }

    pub(super) fn tls_side(
        &self,
        side: &str,
        cert: Option<Value>,
        key: Option<Value>,
        ca: Option<Value>,
    ) -> Checked<Option<TlsFiles>> {
        let names = [
            format!("tls.{side}_cert"),
            format!("tls.{side}_key"),
            format!("tls.{side}_trusted_ca"),
        ];
        let values = [cert, key, ca];
        let mut paths = Vec::with_capacity(3);
        for (name, v) in names.iter().zip(values) {
            let p = self.string(name, v)?;
            paths.push(match p {
                Some(s) => Some(self.etcd_path(name, self.file_path(name, &s)?)?),
                None => None,
            });
        }
        match (paths[0].take(), paths[1].take(), paths[2].take()) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(trusted_ca)) => Ok(Some(TlsFiles {
                cert,
                key,
                trusted_ca,
            })),
            (c, k, a) => {
                let given: Vec<&str> = [&c, &k, &a]
                    .iter()
                    .zip(&names)
                    .filter(|(p, _)| p.is_some())
                    .map(|(_, n)| n.as_str())
                    .collect();
                let missing = [&c, &k, &a]
                    .iter()
                    .zip(&names)
                    .find(|(p, _)| p.is_none())
                    .map_or("", |(_, n)| n.as_str());
                Err(self.err(
                    missing,
                    format_args!(
                        "missing while {} is set; {side} TLS needs its cert, key and \
                         trusted_ca, or none of them",
                        given.join(" and ")
                    ),
                ))
            }
        }
    }

    pub(super) fn settings(&self, raw: RawFile) -> Checked<Settings> {
        let node = raw.node.unwrap_or_default();
        let etcd = raw.etcd.unwrap_or_default();
        let iso = raw.iso.unwrap_or_default();
        let install = raw.install.unwrap_or_default();
        let report = raw.report.unwrap_or_default();
        let tls = raw.tls.unwrap_or_default();
        let limits = raw.limits.unwrap_or_default();

        // [node]
        let node_name = self.required_string("node.name", node.name, "this member's etcd name")?;
        self.name("node.name", &node_name, MAX_NAME)?;
        let ip = self.required_string("node.ip", node.ip, "this node's IP address")?;
        let node_ip: IpAddr = ip.parse().map_err(|_| {
            let hint = if ip.starts_with('[') {
                " (write IPv6 without brackets)"
            } else {
                ""
            };
            self.err(
                "node.ip",
                format_args!("{ip:?} is not an IPv4 or IPv6 address{hint}"),
            )
        })?;
        if node_ip.is_unspecified() || node_ip.is_multicast() {
            return Err(self.err(
                "node.ip",
                format_args!("{ip:?} is not a unicast address of this node"),
            ));
        }

        // [tls], early: it decides the schemes.
        let tls = Tls {
            client: self.tls_side(
                "client",
                tls.client_cert,
                tls.client_key,
                tls.client_trusted_ca,
            )?,
            peer: self.tls_side("peer", tls.peer_cert, tls.peer_key, tls.peer_trusted_ca)?,
            warn_days: {
                let days = self.count("tls.warn_days", tls.warn_days, DEFAULT_WARN_DAYS.into())?;
                u32::try_from(days)
                    .ok()
                    .filter(|&d| d <= 3650)
                    .ok_or_else(|| {
                        self.err(
                            "tls.warn_days",
                            format_args!("{days} is more than 3650 days"),
                        )
                    })?
            },
        };

        // [etcd]
        let cluster_token = self.required_string(
            "etcd.cluster_token",
            etcd.cluster_token,
            "the cluster's token, shared by its members",
        )?;
        self.name("etcd.cluster_token", &cluster_token, MAX_TOKEN)?;
        let cluster_state = match self.string("etcd.cluster_state", etcd.cluster_state)? {
            None => ClusterState::New,
            Some(s) if s == "new" => ClusterState::New,
            Some(s) if s == "existing" => ClusterState::Existing,
            Some(s) => {
                return Err(self.err(
                    "etcd.cluster_state",
                    format_args!("{s:?} is neither \"new\" nor \"existing\""),
                ))
            }
        };
        let data_dir = match self.string("etcd.data_dir", etcd.data_dir)? {
            Some(s) => self.etcd_path("etcd.data_dir", self.dir_path("etcd.data_dir", &s)?)?,
            None => PathBuf::from("/var/lib/etcd"),
        };
        let client_port = self.port("etcd.client_port", etcd.client_port, 2379)?;
        let peer_port = self.port("etcd.peer_port", etcd.peer_port, 2380)?;
        let metrics_port =
            self.port("etcd.metrics_port", etcd.metrics_port, DEFAULT_METRICS_PORT)?;
        let ports = [
            ("etcd.client_port", client_port),
            ("etcd.peer_port", peer_port),
            ("etcd.metrics_port", metrics_port),
        ];
        for (i, (a, pa)) in ports.iter().enumerate() {
            if let Some((b, _)) = ports[i + 1..].iter().find(|(_, pb)| pb == pa) {
                return Err(self.err(b, format_args!("{pa} is also {a}; each port is distinct")));
            }
        }
        let data = self.data(
            (etcd.quota_backend_bytes, etcd.prometheus_port),
            raw.snapshot.unwrap_or_default(),
            raw.maintain.unwrap_or_default(),
            &ports,
        )?;
        let backup = match raw.backup {
            Some(b) => Some(self.backup(b)?),
            None => None,
        };
        let start_timeout = self.duration(
            "etcd.start_timeout",
            etcd.start_timeout,
            Duration::from_secs(15 * 60),
            MAX_WAIT,
        )?;
        if start_timeout < Duration::from_secs(1) {
            return Err(self.err(
                "etcd.start_timeout",
                "is shorter than 1s; systemd counts TimeoutStartSec= in seconds and would read 0 \
                 as \"wait for etcd forever\"",
            ));
        }
        let settle = self.duration(
            "etcd.settle",
            etcd.settle,
            Duration::from_secs(10),
            MAX_SETTLE,
        )?;
        let initial_cluster = self.initial_cluster(
            etcd.initial_cluster,
            &node_name,
            node_ip,
            peer_port,
            scheme(tls.peer.is_some()),
        )?;

        // [iso]
        let archive_path = match self.string("iso.archive_path", iso.archive_path)? {
            Some(s) => {
                self.archive_path(&s)?;
                s
            }
            None => DEFAULT_ARCHIVE_PATH.to_string(),
        };
        let sha256 = match self.string("iso.sha256", iso.sha256)? {
            Some(s) => Some(parse_sha256(&s).ok_or_else(|| {
                let why = if s.len() == 64 {
                    "holds a character that is not a hex digit".to_string()
                } else {
                    format!("has {} characters", s.len())
                };
                self.err(
                    "iso.sha256",
                    format_args!("{s:?} is not a SHA-256 digest of 64 hex digits: it {why}"),
                )
            })?),
            None => None,
        };
        let iso_wait =
            self.duration("iso.wait", iso.wait, Duration::from_secs(10 * 60), MAX_WAIT)?;
        let eject = self.boolean("iso.eject", iso.eject, false)?;
        let refuse_known_bad = self.boolean("iso.refuse_known_bad", iso.refuse_known_bad, false)?;

        // [install]
        let install_dir = match self.string("install.dir", install.dir)? {
            Some(s) => self.etcd_path("install.dir", self.dir_path("install.dir", &s)?)?,
            None => PathBuf::from("/opt/bin"),
        };
        if data_dir.starts_with(&install_dir) || install_dir.starts_with(&data_dir) {
            return Err(self.err(
                "etcd.data_dir",
                format_args!(
                    "{} overlaps install.dir {}; etcd's data and its binaries need folders \
                     of their own",
                    data_dir.display(),
                    install_dir.display()
                ),
            ));
        }

        self.snapshot_places(&data.snapshot, &data_dir, &install_dir)?;

        // [report]
        let failure_file = match self.string("report.failure_file", report.failure_file)? {
            Some(s) => self.file_path("report.failure_file", &s)?,
            None => PathBuf::from(DEFAULT_FAILURE_FILE),
        };
        let failure_owner = match self.string("report.owner", report.owner)? {
            Some(s) => {
                self.user("report.owner", &s)?;
                s
            }
            None => DEFAULT_FAILURE_OWNER.to_string(),
        };
        let status_group = match self.string("report.status_group", report.status_group)? {
            Some(s) => {
                self.user("report.status_group", &s)?;
                s
            }
            None => DEFAULT_STATUS_GROUP.to_string(),
        };

        // [limits]
        let d = Limits::default();
        let limits = Limits {
            max_entries: self.count("limits.max_entries", limits.max_entries, d.max_entries)?,
            max_file_size: self.size(
                "limits.max_file_size",
                limits.max_file_size,
                d.max_file_size,
            )?,
            max_total_size: self.size(
                "limits.max_total_size",
                limits.max_total_size,
                d.max_total_size,
            )?,
            max_ratio: self.count("limits.max_ratio", limits.max_ratio, d.max_ratio)?,
        };
        if limits.max_file_size > limits.max_total_size {
            return Err(self.err(
                "limits.max_file_size",
                format_args!(
                    "{} bytes is more than limits.max_total_size, {} bytes",
                    limits.max_file_size, limits.max_total_size
                ),
            ));
        }

        Ok(Settings {
            node_name,
            node_ip,
            initial_cluster,
            cluster_token,
            cluster_state,
            data_dir,
            client_port,
            peer_port,
            metrics_port,
            start_timeout,
            settle,
            archive_path,
            sha256,
            iso_wait,
            eject,
            refuse_known_bad,
            install_dir,
            failure_file,
            failure_owner,
            status_group,
            tls,
            limits,
            data,
            backup,
        })
    }

    pub(super) fn initial_cluster(
        &self,
        v: Option<Value>,
        node_name: &str,
        node_ip: IpAddr,
        peer_port: u16,
        peer_scheme: &str,
    ) -> Checked<Vec<(String, String)>> {
        const KEY: &str = "etcd.initial_cluster";
        let text = self.required_string(
            KEY,
            v,
            "every member as NAME=URL, comma separated, this node included",
        )?;
        let own_url = format!("{peer_scheme}://{}:{peer_port}", url_host(node_ip));
        let mut members = Vec::new();
        let mut names = HashSet::new();
        let mut urls = HashSet::new();
        let mut own = None;
        for entry in text.split(',').map(str::trim) {
            if entry.is_empty() {
                return Err(self.err(KEY, format_args!("{text:?} has an empty member entry")));
            }
            let Some((name, url)) = entry.split_once('=') else {
                return Err(self.err(
                    KEY,
                    format_args!("{entry:?} is not NAME=URL (http or https)"),
                ));
            };
            let (name, url) = (name.trim(), url.trim());
            if name.is_empty() || !name.chars().all(is_name_char) || name.len() > MAX_NAME {
                return Err(self.err(
                    KEY,
                    format_args!(
                        "{entry:?}: member name {name:?} is not 1 to {MAX_NAME} of A-Z a-z 0-9 \
                         . _ -"
                    ),
                ));
            }
            let peer = self.peer_url(KEY, name, url)?;
            if !names.insert(name.to_string()) {
                return Err(self.err(KEY, format_args!("member {name:?} is listed twice")));
            }
            let canonical = format!("{}://{}:{}", peer.scheme, peer.host, peer.port);
            if !urls.insert(canonical.to_ascii_lowercase()) {
                return Err(self.err(
                    KEY,
                    format_args!("member {name:?}: {url:?} is another member's URL too"),
                ));
            }
            if peer.scheme != peer_scheme {
                let why = if peer_scheme == "https" {
                    "[tls] has the peer files, so every member's URL is https"
                } else {
                    "[tls] has no peer files, so every member's URL is http"
                };
                return Err(self.err(KEY, format_args!("member {name:?}: {url:?}: {why}")));
            }
            if name == node_name {
                own = Some(peer);
            }
            members.push((name.to_string(), url.to_string()));
        }
        let Some(own) = own else {
            return Err(self.err(
                KEY,
                format_args!(
                    "does not list this node, node.name = {node_name:?}; add \
                     {node_name}={own_url}"
                ),
            ));
        };
        if own.host.parse::<IpAddr>().ok() != Some(node_ip) {
            return Err(self.err(
                KEY,
                format_args!(
                    "this node's member {node_name:?} is at host {}, but node.ip is {node_ip}; \
                     its URL must be {own_url}",
                    own.host
                ),
            ));
        }
        if own.port != peer_port {
            return Err(self.err(
                KEY,
                format_args!(
                    "this node's member {node_name:?} has port {}, but etcd.peer_port is \
                     {peer_port}; its URL must be {own_url}",
                    own.port
                ),
            ));
        }
        Ok(members)
    }

    pub(super) fn archive_path(&self, s: &str) -> Checked<()> {
        const KEY: &str = "iso.archive_path";
        if s.starts_with('/') {
            return Err(self.err(
                KEY,
                format_args!("{s:?} starts with /; write it relative to the disc's root"),
            ));
        }
        if s.is_empty() || s.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
            return Err(self.err(
                KEY,
                format_args!("{s:?} is not a path inside the disc (NAME/NAME…, no . or ..)"),
            ));
        }
        if s.split('/').count() > 8 || s.len() > 255 {
            return Err(self.err(KEY, format_args!("{s:?} is too deep or too long")));
        }
        if s.chars().any(char::is_control) {
            return Err(self.err(KEY, format_args!("{s:?} holds a control character")));
        }
        Ok(())
    }
}
