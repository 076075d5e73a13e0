//! The node's configuration: a TOML file read into validated, typed [`Settings`].
//!
//! Three stages, as zincati does it: the file is parsed into raw structs whose every field
//! is optional and untyped ([`toml::Value`]), then each key is checked and converted, then
//! the keys are checked against each other. Nothing downstream re-checks a raw string: a
//! [`Settings`] value is valid by construction.
//!
//! Every problem is `config-invalid` with one sentence naming the file and the key, e.g.
//! `config-invalid: /etc/etcd-setup/config.toml: etcd.initial_cluster: "n1=10.0.0.1:2380"
//! is not NAME=URL (http or https)`. A missing file is an error too, not a set of defaults:
//! a node without its configuration cannot know its name or its peers.
//!
//! The failure file's path and owner come from this file as well, yet a reason must be
//! written even when the file is bad: [`failure_target`] reads just those two keys, best
//! effort, and falls back to the defaults.
//!
//! The format, every key set (the unit tests parse this very text, [`EXAMPLE`]):
//!
#![doc = concat!("```toml\n", include_str!("config.example.toml"), "```")]

use crate::archive;
use crate::reason::{Failure, ReasonCode};
use crate::source::DEFAULT_ARCHIVE_PATH;
use serde::Deserialize;
use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Value;

/// Where the configuration lives unless `--config` says otherwise.
pub const DEFAULT_PATH: &str = "/etc/etcd-setup/config.toml";
/// The failure file the platform reads when `[report] failure_file` is not set.
pub const DEFAULT_FAILURE_FILE: &str = "/home/cloud/etcd-setup-failed";
/// The user owning the failure file when `[report] owner` is not set.
pub const DEFAULT_FAILURE_OWNER: &str = "cloud";
/// The group allowed to query status when `[report] status_group` is not set.
pub const DEFAULT_STATUS_GROUP: &str = "cloud";
/// `etcd.metrics_port` when not given: etcd's `/metrics` and `/health` on loopback.
pub const DEFAULT_METRICS_PORT: u16 = 2381;
/// A complete configuration file with every key set, as documented above.
pub const EXAMPLE: &str = include_str!("config.example.toml");

/// The longest `iso.wait` and `etcd.start_timeout`.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// The longest `etcd.settle`.
const MAX_SETTLE: Duration = Duration::from_secs(3600);
/// The longest member name, and cluster token.
const MAX_NAME: usize = 63;
const MAX_TOKEN: usize = 128;
/// The longest user or group name.
const MAX_USER: usize = 32;
/// The largest configuration file read; real ones are about 1 KiB.
const MAX_FILE: u64 = 1 << 20;

/// Whether the members bootstrap a new cluster or this one joins a running cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    /// `--initial-cluster-state=new`: all members of `initial_cluster` start together.
    New,
    /// `--initial-cluster-state=existing`: this member joins a cluster that runs already.
    Existing,
}

impl ClusterState {
    /// The value of etcd's `--initial-cluster-state`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        }
    }
}

impl fmt::Display for ClusterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The three files of one side of TLS (client or peer traffic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate etcd presents.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA bundle the other end's certificate must chain to (client-cert auth is on).
    pub trusted_ca: PathBuf,
}

/// TLS for etcd's client and peer traffic; a side that is `None` is plain http.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// `--cert-file`, `--key-file`, `--trusted-ca-file` (and `--client-cert-auth`).
    pub client: Option<TlsFiles>,
    /// `--peer-cert-file`, `--peer-key-file`, `--peer-trusted-ca-file` (and
    /// `--peer-client-cert-auth`).
    pub peer: Option<TlsFiles>,
}

/// The validated configuration of one etcd node.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `node.name`: this member's etcd name.
    pub node_name: String,
    /// `node.ip`: the address etcd listens on and advertises.
    pub node_ip: IpAddr,
    /// `etcd.initial_cluster`: every member as (name, peer URL), in the file's order.
    pub initial_cluster: Vec<(String, String)>,
    /// `etcd.cluster_token`.
    pub cluster_token: String,
    /// `etcd.cluster_state`.
    pub cluster_state: ClusterState,
    /// `etcd.data_dir`.
    pub data_dir: PathBuf,
    /// `etcd.client_port`.
    pub client_port: u16,
    /// `etcd.peer_port`.
    pub peer_port: u16,
    /// `etcd.metrics_port`: `/metrics` and `/health` on 127.0.0.1, for the health check.
    pub metrics_port: u16,
    /// `etcd.start_timeout`: systemd's `TimeoutStartSec` for etcd.
    pub start_timeout: Duration,
    /// `etcd.settle`: how long etcd's restart count must stay steady after the start.
    pub settle: Duration,
    /// `iso.archive_path`: the tarball's path inside the ISO, `/`-separated, relative.
    pub archive_path: String,
    /// `iso.sha256`: the pinned digest of the tarball.
    pub sha256: Option<[u8; 32]>,
    /// `iso.wait`: how long to wait for the ISO.
    pub iso_wait: Duration,
    /// `iso.eject`: eject the disc when done.
    pub eject: bool,
    /// `install.dir`: where the etcd binaries go.
    pub install_dir: PathBuf,
    /// `report.failure_file`.
    pub failure_file: PathBuf,
    /// `report.owner`: the user owning the failure file (resolved when it is written).
    pub failure_owner: String,
    /// `report.status_group`: the group allowed to query status (resolved by the server).
    pub status_group: String,
    /// `[tls]`.
    pub tls: Tls,
    /// `[limits]`: caps on the tarball.
    pub limits: archive::Limits,
}

impl Settings {
    /// The node IP as a URL host: IPv6 in brackets.
    fn host(&self) -> String {
        url_host(self.node_ip)
    }

    fn client_scheme(&self) -> &'static str {
        scheme(self.tls.client.is_some())
    }

    fn peer_scheme(&self) -> &'static str {
        scheme(self.tls.peer.is_some())
    }

    /// etcd's `--listen-client-urls`: the node IP, and loopback for local tools.
    ///
    /// Loopback takes the client side's scheme too: a plain http listener beside a TLS one
    /// would let any local process past client-certificate authentication.
    pub fn listen_client_urls(&self) -> Vec<String> {
        let mut urls = self.advertise_client_urls();
        let loopback = format!("{}://127.0.0.1:{}", self.client_scheme(), self.client_port);
        if !urls.contains(&loopback) {
            urls.push(loopback);
        }
        urls
    }

    /// etcd's `--advertise-client-urls`: the node IP only.
    pub fn advertise_client_urls(&self) -> Vec<String> {
        vec![format!(
            "{}://{}:{}",
            self.client_scheme(),
            self.host(),
            self.client_port
        )]
    }

    /// etcd's `--listen-peer-urls`.
    pub fn listen_peer_urls(&self) -> Vec<String> {
        self.initial_advertise_peer_urls()
    }

    /// etcd's `--initial-advertise-peer-urls`; matches this node's `initial_cluster` entry.
    pub fn initial_advertise_peer_urls(&self) -> Vec<String> {
        vec![format!(
            "{}://{}:{}",
            self.peer_scheme(),
            self.host(),
            self.peer_port
        )]
    }

    /// etcd's `--listen-metrics-urls`, always plain http on loopback: the health check asks
    /// its `/health` without certificates.
    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.metrics_port)
    }

    /// etcd's `--initial-cluster`: `name=url` pairs joined by commas.
    pub fn initial_cluster_arg(&self) -> String {
        self.initial_cluster
            .iter()
            .map(|(name, url)| format!("{name}={url}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What the archive pass must enforce: the configured caps and pinned digest, for this
    /// machine's architecture.
    pub fn policy(&self) -> archive::Policy {
        archive::Policy {
            limits: self.limits,
            sha256: self.sha256,
            ..archive::Policy::default()
        }
    }
}

/// Reads and validates the configuration file at `path`.
pub fn load(path: &Path) -> Result<Settings, Failure> {
    let text = read_text(path)?;
    parse(&text, path)
}

/// Validates configuration `text`; `path` names the file in messages.
pub fn parse(text: &str, path: &Path) -> Result<Settings, Failure> {
    let raw: RawFile = toml::from_str(text).map_err(|e| toml_failure(&e, text, path))?;
    Checker { path }.settings(raw)
}

/// Where to write the failure file and who owns it, read best effort from the file at
/// `path` even when the rest of it is invalid; the defaults for whatever cannot be read.
pub fn failure_target(path: &Path) -> (PathBuf, String) {
    let mut file = PathBuf::from(DEFAULT_FAILURE_FILE);
    let mut owner = DEFAULT_FAILURE_OWNER.to_string();
    let Ok(text) = read_text(path) else {
        return (file, owner);
    };
    let (raw_file, raw_owner) = match text.parse::<toml::Table>() {
        Ok(table) => {
            let report = table.get("report").and_then(Value::as_table);
            let get = |key: &str| {
                report
                    .and_then(|r| r.get(key))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            (get("failure_file"), get("owner"))
        }
        Err(_) => scan_report_section(&text),
    };
    let check = Checker { path };
    if let Some(p) = raw_file.and_then(|s| check.file_path("report.failure_file", &s).ok()) {
        file = p;
    }
    if let Some(o) = raw_owner.filter(|o| check.user("report.owner", o).is_ok()) {
        owner = o;
    }
    (file, owner)
}

/// Finds `failure_file = "…"` and `owner = "…"` under `[report]` line by line, for a file
/// that is not valid TOML elsewhere. Only plain double- or single-quoted values.
fn scan_report_section(text: &str) -> (Option<String>, Option<String>) {
    let (mut file, mut owner) = (None, None);
    let mut in_report = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            in_report = header.split(']').next().map(str::trim) == Some("report");
            continue;
        }
        if !in_report {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        let quoted = ['"', '\''].iter().find_map(|&q| {
            let inner = value.strip_prefix(q)?;
            let end = inner.find(q)?;
            let rest = inner[end + 1..].trim();
            (rest.is_empty() || rest.starts_with('#')).then(|| inner[..end].to_string())
        });
        match key.trim() {
            "failure_file" => file = quoted,
            "owner" => owner = quoted,
            _ => {}
        }
    }
    (file, owner)
}

fn read_text(path: &Path) -> Result<String, Failure> {
    use std::io::Read;
    let shown = path.display();
    let fail = |msg: String, e: std::io::Error| {
        Failure::new(ReasonCode::ConfigInvalid, msg).with_source(e)
    };
    let file = std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            let msg = format!(
                "{shown}: no such file; the node's configuration must be written there \
                 before the run (was cloud-init's write_files applied?)"
            );
            fail(msg, e)
        } else {
            fail(format!("{shown}: cannot open: {e}"), e)
        }
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("{shown}: cannot read: {e}"), e))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(Failure::new(
            ReasonCode::ConfigInvalid,
            format!("{shown}: larger than {MAX_FILE} bytes; this is not a configuration file"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        Failure::new(
            ReasonCode::ConfigInvalid,
            format!(
                "{shown}: not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Turns a TOML syntax or structure error into one line naming the file, the position and,
/// for an unknown or mistyped key, the key with its table.
fn toml_failure(e: &toml::de::Error, text: &str, path: &Path) -> Failure {
    let shown = path.display();
    // The library's message may span lines; the reason is one line.
    let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    let msg = match e.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            match unknown_field(&message) {
                Some((field, expected)) => {
                    let key = qualified_key(text, span.start, field);
                    let expected = expected.replace('`', "");
                    format!("{shown}: {key}: unknown key (line {line}); expected {expected}")
                }
                None => {
                    // A table given as a value (`node = 5`) names the raw struct.
                    let message = match message.find("expected struct Raw") {
                        Some(i) => format!("{}expected a table", &message[..i]),
                        None => message,
                    };
                    format!("{shown}: line {line}, column {column}: not valid here: {message}")
                }
            }
        }
        None => format!("{shown}: {message}"),
    };
    Failure::new(ReasonCode::ConfigInvalid, msg).with_source(e.clone())
}

/// 1-based line and column (in characters) of byte offset `at`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// From serde's "unknown field `x`, expected one of `a`, `b`": the field and what follows
/// "expected".
fn unknown_field(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let expected = rest
        .split_once("expected ")
        .map_or("a known key", |(_, e)| e);
    Some((field, expected))
}

/// `field` prefixed with the table whose header comes last before byte `at`, e.g.
/// `node.nmae`; best effort (inline tables are not followed).
fn qualified_key(text: &str, at: usize, field: &str) -> String {
    let at = at.min(text.len());
    let mut at = at;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let header = text[..at]
        .lines()
        .map(str::trim)
        .rfind(|l| l.starts_with('['))
        .map(|l| {
            let l = l.split('#').next().unwrap_or(l).trim();
            l.trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .to_string()
        });
    match header {
        Some(h) if !h.is_empty() => format!("{h}.{field}"),
        _ => field.to_string(),
    }
}

// ---- Stage one: the raw file, every key optional and untyped. ----

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFile {
    node: Option<RawNode>,
    etcd: Option<RawEtcd>,
    iso: Option<RawIso>,
    install: Option<RawInstall>,
    report: Option<RawReport>,
    tls: Option<RawTls>,
    limits: Option<RawLimits>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: Option<Value>,
    ip: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEtcd {
    initial_cluster: Option<Value>,
    cluster_token: Option<Value>,
    cluster_state: Option<Value>,
    data_dir: Option<Value>,
    client_port: Option<Value>,
    peer_port: Option<Value>,
    metrics_port: Option<Value>,
    start_timeout: Option<Value>,
    settle: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawIso {
    archive_path: Option<Value>,
    sha256: Option<Value>,
    wait: Option<Value>,
    eject: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawInstall {
    dir: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawReport {
    failure_file: Option<Value>,
    owner: Option<Value>,
    status_group: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTls {
    client_cert: Option<Value>,
    client_key: Option<Value>,
    client_trusted_ca: Option<Value>,
    peer_cert: Option<Value>,
    peer_key: Option<Value>,
    peer_trusted_ca: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_entries: Option<Value>,
    max_file_size: Option<Value>,
    max_total_size: Option<Value>,
    max_ratio: Option<Value>,
}

// ---- Stages two and three: each key, then the keys together. ----

/// A peer URL of `initial_cluster`, taken apart.
struct PeerUrl {
    scheme: &'static str,
    /// The host as written, IPv6 without brackets.
    host: String,
    port: u16,
}

struct Checker<'a> {
    path: &'a Path,
}

type Checked<T> = Result<T, Failure>;

impl Checker<'_> {
    fn err(&self, key: &str, problem: impl fmt::Display) -> Failure {
        Failure::new(
            ReasonCode::ConfigInvalid,
            format!("{}: {key}: {problem}", self.path.display()),
        )
    }

    fn missing(&self, key: &str, what: &str) -> Failure {
        self.err(key, format_args!("missing; required: {what}"))
    }

    fn wrong_type(&self, key: &str, expected: &str, found: &Value) -> Failure {
        let found = match found {
            Value::String(s) => format!("the string {s:?}"),
            Value::Integer(n) => format!("the integer {n}"),
            Value::Float(x) => format!("the float {x}"),
            Value::Boolean(b) => format!("the boolean {b}"),
            other => format!("a {}", other.type_str()),
        };
        self.err(key, format_args!("expected {expected}, found {found}"))
    }

    fn string(&self, key: &str, v: Option<Value>) -> Checked<Option<String>> {
        match v {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong_type(key, "a string", &other)),
        }
    }

    fn required_string(&self, key: &str, v: Option<Value>, what: &str) -> Checked<String> {
        self.string(key, v)?.ok_or_else(|| self.missing(key, what))
    }

    fn boolean(&self, key: &str, v: Option<Value>, default: bool) -> Checked<bool> {
        match v {
            None => Ok(default),
            Some(Value::Boolean(b)) => Ok(b),
            Some(other) => Err(self.wrong_type(key, "true or false", &other)),
        }
    }

    fn port(&self, key: &str, v: Option<Value>, default: u16) -> Checked<u16> {
        match v {
            None => Ok(default),
            Some(Value::Integer(n)) => u16::try_from(n)
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| self.err(key, format_args!("{n} is not a port (1 to 65535)"))),
            Some(other) => Err(self.wrong_type(key, "a port number", &other)),
        }
    }

    fn count(&self, key: &str, v: Option<Value>, default: u64) -> Checked<u64> {
        match v {
            None => Ok(default),
            Some(Value::Integer(n)) if n >= 1 => Ok(n as u64),
            Some(Value::Integer(n)) => Err(self.err(key, format_args!("{n} is not positive"))),
            Some(other) => Err(self.wrong_type(key, "a positive integer", &other)),
        }
    }

    fn duration(
        &self,
        key: &str,
        v: Option<Value>,
        default: Duration,
        max: Duration,
    ) -> Checked<Duration> {
        let (d, shown) = match v {
            None => return Ok(default),
            Some(Value::Integer(n)) => (
                u64::try_from(n).ok().map(Duration::from_secs),
                n.to_string(),
            ),
            Some(Value::String(s)) => (parse_duration(&s), format!("{s:?}")),
            Some(other) => return Err(self.wrong_type(key, "a duration", &other)),
        };
        let d = d.ok_or_else(|| {
            self.err(
                key,
                format_args!(
                    "{shown} is not a duration; write e.g. \"90s\", \"15min\", \"1h\" or an \
                     integer number of seconds"
                ),
            )
        })?;
        if d.is_zero() {
            return Err(self.err(key, format_args!("{shown} is zero; it must be positive")));
        }
        if d > max {
            return Err(self.err(
                key,
                format_args!("{shown} is longer than the {} allowed", show_duration(max)),
            ));
        }
        Ok(d)
    }

    fn size(&self, key: &str, v: Option<Value>, default: u64) -> Checked<u64> {
        let (n, shown) = match v {
            None => return Ok(default),
            Some(Value::Integer(n)) => (u64::try_from(n).ok(), n.to_string()),
            Some(Value::String(s)) => (parse_size(&s), format!("{s:?}")),
            Some(other) => return Err(self.wrong_type(key, "a size", &other)),
        };
        match n {
            Some(0) => Err(self.err(key, format_args!("{shown} is zero; it must be positive"))),
            Some(n) => Ok(n),
            None => Err(self.err(
                key,
                format_args!(
                    "{shown} is not a size; write e.g. \"256MiB\", \"1GiB\" or an integer \
                     number of bytes"
                ),
            )),
        }
    }

    /// A name of `[A-Za-z0-9._-]{1,max}`.
    fn name(&self, key: &str, s: &str, max: usize) -> Checked<()> {
        if s.is_empty() || s.len() > max {
            return Err(self.err(
                key,
                format_args!("{s:?} must be 1 to {max} characters long"),
            ));
        }
        if let Some(c) = s.chars().find(|&c| !is_name_char(c)) {
            return Err(self.err(
                key,
                format_args!("{s:?} holds {c:?}; only A-Z a-z 0-9 . _ - are allowed"),
            ));
        }
        Ok(())
    }

    /// A user or group name: portable characters, not starting with `-`, not all digits.
    fn user(&self, key: &str, s: &str) -> Checked<()> {
        let ok = !s.is_empty()
            && s.len() <= MAX_USER
            && !s.starts_with('-')
            && !s.chars().all(|c| c.is_ascii_digit())
            && s.chars().all(is_name_char);
        if ok {
            Ok(())
        } else {
            Err(self.err(
                key,
                format_args!(
                    "{s:?} is not a user or group name (1 to {MAX_USER} of A-Z a-z 0-9 . _ -, \
                     not starting with -, not all digits)"
                ),
            ))
        }
    }

    /// An absolute, normalised path without `.` or `..`, of characters safe in a unit file.
    fn abs_path(&self, key: &str, s: &str) -> Checked<PathBuf> {
        if !s.starts_with('/') {
            return Err(self.err(key, format_args!("{s:?} is not an absolute path")));
        }
        if let Some(c) = s.chars().find(|&c| !is_path_char(c)) {
            return Err(self.err(
                key,
                format_args!(
                    "{s:?} holds {c:?}; paths are written into etcd.service as they are, so \
                     only A-Z a-z 0-9 and / . _ - + @ : are allowed"
                ),
            ));
        }
        if s.split('/').any(|c| c == "." || c == "..") {
            return Err(self.err(key, format_args!("{s:?} holds a . or .. component")));
        }
        Ok(Path::new(s).components().collect())
    }

    /// An absolute path of a folder other than `/`.
    fn dir_path(&self, key: &str, s: &str) -> Checked<PathBuf> {
        let p = self.abs_path(key, s)?;
        if p == Path::new("/") {
            return Err(self.err(key, "\"/\" cannot be used; name a folder of its own"));
        }
        Ok(p)
    }

    /// An absolute path of a file: not `/`, not ending in `/`.
    fn file_path(&self, key: &str, s: &str) -> Checked<PathBuf> {
        if s.ends_with('/') {
            return Err(self.err(key, format_args!("{s:?} names a folder, not a file")));
        }
        self.dir_path(key, s)
    }

    fn peer_url(&self, key: &str, member: &str, url: &str) -> Checked<PeerUrl> {
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

    fn tls_side(
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
                Some(s) => Some(self.file_path(name, &s)?),
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

    fn settings(&self, raw: RawFile) -> Checked<Settings> {
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
            Some(s) => self.dir_path("etcd.data_dir", &s)?,
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
        let start_timeout = self.duration(
            "etcd.start_timeout",
            etcd.start_timeout,
            Duration::from_secs(15 * 60),
            MAX_WAIT,
        )?;
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

        // [install]
        let install_dir = match self.string("install.dir", install.dir)? {
            Some(s) => self.dir_path("install.dir", &s)?,
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
        let d = archive::Limits::default();
        let limits = archive::Limits {
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
            install_dir,
            failure_file,
            failure_owner,
            status_group,
            tls,
            limits,
        })
    }

    fn initial_cluster(
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

    fn archive_path(&self, s: &str) -> Checked<()> {
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

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '@' | ':')
}

fn scheme(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

fn url_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// A SHA-256 written as 64 hex digits.
pub fn parse_sha256(s: &str) -> Option<[u8; 32]> {
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        *o = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// `"90s"`, `"15min"`, `"15m"`, `"1h30min"`, `"500ms"`, `"2 h"`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Ok(n) = s.parse::<u64>() {
        return Some(Duration::from_secs(n));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let millis_per = match &rest[..unit_len] {
            "ms" => 1,
            "s" | "sec" => 1_000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            _ => return None,
        };
        total = total.checked_add(Duration::from_millis(n.checked_mul(millis_per)?))?;
        rest = rest[unit_len..].trim_start();
    }
    Some(total)
}

/// `"256MiB"`, `"1GiB"`, `"64K"`, `"4096"`: binary units, bare numbers are bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits == 0 {
        return None;
    }
    let n: u64 = s[..digits].parse().ok()?;
    let shift = match s[digits..].trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// A duration as the config file would write it: `24h`, `15min`, `90s`, `500ms`.
fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}min", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests;
