//! `[backup]`: the S3 bucket snapshots are uploaded to, checked into [`BackupSettings`];
//! and the one reader of its files (the access key and secret, the age recipients), with
//! their rules: root's regular files, closed to others, no link followed, never printed.

use super::raw::RawBackup;
use super::values::{Checked, Checker};
use crate::reason::{Failure, ReasonCode};
pub use crate::shared::age_key::Recipient;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `backup.prefix` when not given; each cluster's objects lie under
/// `<prefix><cluster ID, 16 hex>/`.
pub const DEFAULT_PREFIX: &str = "etcd-setup/";
/// `backup.region` when not given (what MinIO and Ceph RGW answer to).
pub const DEFAULT_REGION: &str = "us-east-1";
/// `backup.retain` when not given.
pub const DEFAULT_BACKUP_RETAIN: u64 = 7;
/// `backup.period` when not given: at most one upload per cluster per period.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(3600);
/// The largest key or recipients file read.
const MAX_KEY_FILE: u64 = 64 << 10;

/// The object store's address: scheme, host and port, nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `https` (or `http` with `allow_http = true`).
    pub tls: bool,
    /// The host as written (a DNS name or an IP address; IPv6 without brackets).
    pub host: String,
    /// The port (443 or 80 when the URL names none).
    pub port: u16,
    /// Whether the URL named the port (the `Host` header then names it too).
    pub explicit_port: bool,
}

impl Endpoint {
    /// `Host` as a request names it: the host, with the port when the URL had one.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.explicit_port {
            format!("{host}:{}", self.port)
        } else {
            host
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.authority())
    }
}

/// `[backup]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSettings {
    /// `backup.endpoint`.
    pub endpoint: Endpoint,
    /// `backup.bucket`.
    pub bucket: String,
    /// `backup.prefix`: ends with `/` (or is empty); objects go under
    /// `<prefix><cluster ID>/`.
    pub prefix: String,
    /// `backup.region`: the SigV4 signing region.
    pub region: String,
    /// `backup.path_style`: `https://host/bucket/key` instead of `https://bucket.host/key`.
    pub path_style: bool,
    /// `backup.ca_file`: the only trust roots when given; else the system bundle.
    pub ca_file: Option<PathBuf>,
    /// `backup.access_key_file`.
    pub access_key_file: PathBuf,
    /// `backup.secret_key_file`.
    pub secret_key_file: PathBuf,
    /// `backup.recipients_file`: age recipients, one `age1…` a line; `None` only with
    /// `encrypt = false`.
    pub recipients_file: Option<PathBuf>,
    /// `backup.encrypt`: false only when written.
    pub encrypt: bool,
    /// `backup.identity_file`: the age identity, to verify by trial restore and restore.
    pub identity_file: Option<PathBuf>,
    /// `backup.retain`: the newest N objects of the cluster kept in the bucket.
    pub retain: u64,
    /// `backup.period`: at most one upload per cluster per period.
    pub period: Duration,
    /// `backup.restore_when_empty`: a brand-new cluster whose bucket folder holds a backup
    /// verified at upload restores itself from it (the first member of `initial_cluster`;
    /// the others wait for it and join) instead of starting empty.
    pub restore_when_empty: bool,
    /// The configuration file, to name in the problems of the files above.
    pub config: PathBuf,
}

/// A secret string whose `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the signer only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The bucket's credentials, read from their files.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Credentials {
    /// The access key ID (not secret, but not printed either).
    pub access_key: Secret,
    /// The secret access key.
    pub secret_key: Secret,
}

impl Checker<'_> {
    /// `[backup]`, when the table is there.
    pub(super) fn backup(&self, raw: RawBackup) -> Checked<BackupSettings> {
        let url = self.required_string("backup.endpoint", raw.endpoint, "the S3 endpoint URL")?;
        let allow_http = self.boolean("backup.allow_http", raw.allow_http, false)?;
        let endpoint = self.endpoint(&url, allow_http)?;
        let bucket = self.required_string("backup.bucket", raw.bucket, "the bucket's name")?;
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !bucket.starts_with(['-', '.'])
            && !bucket.ends_with(['-', '.']);
        if !bucket_ok {
            return Err(self.err(
                "backup.bucket",
                format_args!(
                    "{bucket:?} is not a bucket name (3 to 63 of a-z 0-9 . -, starting and \
                     ending with a letter or digit)"
                ),
            ));
        }
        let prefix = match self.string("backup.prefix", raw.prefix)? {
            None => DEFAULT_PREFIX.to_string(),
            Some(p) => {
                let ok = p.len() <= 512
                    && p.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.')
                    })
                    && !p.starts_with('/')
                    && (p.is_empty() || p.ends_with('/'))
                    && !p.split('/').any(|c| c == "." || c == "..")
                    && !p.contains("//");
                if !ok {
                    return Err(self.err(
                        "backup.prefix",
                        format_args!(
                            "{p:?} is not a prefix: up to 512 of A-Z a-z 0-9 / - _ ., ending \
                             with / (e.g. \"etcd-setup/\"), not starting with /, no . or .. \
                             or empty part"
                        ),
                    ));
                }
                p
            }
        };
        let region = match self.string("backup.region", raw.region)? {
            None => DEFAULT_REGION.to_string(),
            Some(r) => {
                self.name("backup.region", &r, 63)?;
                r
            }
        };
        let path_style = self.boolean("backup.path_style", raw.path_style, false)?;
        let file = |key: &str, v| -> Checked<Option<PathBuf>> {
            match self.string(key, v)? {
                Some(s) => Ok(Some(self.file_path(key, &s)?)),
                None => Ok(None),
            }
        };
        let ca_file = file("backup.ca_file", raw.ca_file)?;
        let access_key_file =
            file("backup.access_key_file", raw.access_key_file)?.ok_or_else(|| {
                self.missing("backup.access_key_file", "the file holding the access key")
            })?;
        let secret_key_file =
            file("backup.secret_key_file", raw.secret_key_file)?.ok_or_else(|| {
                self.missing("backup.secret_key_file", "the file holding the secret key")
            })?;
        if access_key_file == secret_key_file {
            return Err(self.err(
                "backup.secret_key_file",
                "is backup.access_key_file itself; each key has its own file",
            ));
        }
        let recipients_file = file("backup.recipients_file", raw.recipients_file)?;
        let encrypt = match raw.encrypt {
            None => true,
            v => self.boolean("backup.encrypt", v, true)?,
        };
        if encrypt && recipients_file.is_none() {
            return Err(self.err(
                "backup.recipients_file",
                "missing: backups are encrypted (age) before they leave the node; name the \
                 recipients file, or write encrypt = false to upload snapshots in the clear",
            ));
        }
        let identity_file = file("backup.identity_file", raw.identity_file)?;
        let retain = self.count("backup.retain", raw.retain, DEFAULT_BACKUP_RETAIN)?;
        let period = self.duration(
            "backup.period",
            raw.period,
            DEFAULT_PERIOD,
            Duration::from_secs(31 * 24 * 3600),
        )?;
        if period < Duration::from_secs(60) {
            return Err(self.err(
                "backup.period",
                "is shorter than the 1 min floor; one upload per cluster per period",
            ));
        }
        let restore_when_empty =
            self.boolean("backup.restore_when_empty", raw.restore_when_empty, false)?;
        if restore_when_empty && encrypt && identity_file.is_none() {
            return Err(self.err(
                "backup.identity_file",
                "missing: restore_when_empty = true restores from encrypted backups, which \
                 needs the age identity on the node",
            ));
        }
        Ok(BackupSettings {
            endpoint,
            bucket,
            prefix,
            region,
            path_style,
            ca_file,
            access_key_file,
            secret_key_file,
            recipients_file,
            encrypt,
            identity_file,
            retain,
            period,
            restore_when_empty,
            config: self.path.to_path_buf(),
        })
    }

    fn endpoint(&self, url: &str, allow_http: bool) -> Checked<Endpoint> {
        let key = "backup.endpoint";
        let shown = without_userinfo(url);
        let bad = |why: &str| self.err(key, format_args!("{shown:?} {why}"));
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            if !allow_http {
                return Err(bad(
                    "is plain http: the keys' signatures and the snapshots would cross the \
                     network in the clear; use https, or write allow_http = true",
                ));
            }
            (false, rest)
        } else {
            return Err(bad("has no https:// scheme"));
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@']) || authority.is_empty() {
            return Err(bad(
                "must be https://HOST[:PORT], without path, query or user (the bucket is \
                 backup.bucket)",
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
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| bad("has no valid port (1 to 65535)"))?,
            ),
        };
        let host_ok = !host.is_empty()
            && host.len() <= 253
            && (host.parse::<std::net::IpAddr>().is_ok()
                || host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
        if !host_ok {
            return Err(bad("has no valid host (an IP address or a DNS name)"));
        }
        Ok(Endpoint {
            tls,
            host: host.to_string(),
            port: port.unwrap_or(if tls { 443 } else { 80 }),
            explicit_port: port.is_some(),
        })
    }
}

/// `url` as a message may show it: a `user:password@` before the host (which the endpoint
/// refuses) replaced by `…@`, so that a secret written there is never echoed.
fn without_userinfo(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => {
            let sep = if scheme.is_empty() { "" } else { "://" };
            format!("{scheme}{sep}…@{}", &rest[at + 1..])
        }
        None => url.to_string(),
    }
}

impl BackupSettings {
    /// The problem `problem` with `key`'s file, worded as every config problem.
    fn file_err(&self, key: &str, file: &Path, problem: impl fmt::Display) -> Failure {
        Failure::new(
            ReasonCode::ConfigInvalid,
            format!(
                "{}: {key}: {}: {problem}",
                self.config.display(),
                file.display()
            ),
        )
    }

    /// Reads `key`'s file at `file`: a regular file (no link followed), root's, closed to
    /// group and others when `private`, at most 64 KiB of UTF-8. The contents never go
    /// into a message.
    fn read_file(&self, key: &str, file: &Path, private: bool) -> Result<String, Failure> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
            .open(file)
            .map_err(|e| {
                let why = match e.raw_os_error() {
                    Some(nix::libc::ELOOP) => {
                        "is a symbolic link; name the file itself".to_string()
                    }
                    _ => format!("cannot open: {e}"),
                };
                self.file_err(key, file, why)
            })?;
        let meta = f
            .metadata()
            .map_err(|e| self.file_err(key, file, format_args!("cannot read: {e}")))?;
        if !meta.file_type().is_file() {
            return Err(self.file_err(key, file, "is not a regular file"));
        }
        if meta.uid() != 0 {
            return Err(self.file_err(
                key,
                file,
                format_args!(
                    "is owned by uid {}, not root; chown root:root it",
                    meta.uid()
                ),
            ));
        }
        let mode = meta.mode() & 0o7777;
        if private && mode & 0o077 != 0 {
            return Err(self.file_err(
                key,
                file,
                format_args!(
                    "has mode {mode:04o}; a key file must be 0600 or stricter (chmod 0600 it)"
                ),
            ));
        }
        if !private && mode & 0o022 != 0 {
            return Err(self.file_err(
                key,
                file,
                format_args!("has mode {mode:04o}; others may write it (chmod 0644 it)"),
            ));
        }
        let mut bytes = Vec::new();
        f.take(MAX_KEY_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| self.file_err(key, file, format_args!("cannot read: {e}")))?;
        if bytes.len() as u64 > MAX_KEY_FILE {
            return Err(self.file_err(key, file, "is larger than 64 KiB"));
        }
        String::from_utf8(bytes).map_err(|_| self.file_err(key, file, "is not UTF-8 text"))
    }

    /// One key from its file: the text trimmed, one line of printable ASCII, no space.
    fn read_key(&self, key: &str, file: &Path) -> Result<Secret, Failure> {
        let text = self.read_file(key, file, true)?;
        let k = text.trim();
        if k.is_empty() {
            return Err(self.file_err(key, file, "is empty"));
        }
        if !k.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(self.file_err(
                key,
                file,
                "holds more than one line of printable ASCII without spaces (the key alone)",
            ));
        }
        Ok(Secret(k.to_string()))
    }

    /// The access key and secret, read from their files under their rules.
    pub fn credentials(&self) -> Result<Credentials, Failure> {
        Ok(Credentials {
            access_key: self.read_key("backup.access_key_file", &self.access_key_file)?,
            secret_key: self.read_key("backup.secret_key_file", &self.secret_key_file)?,
        })
    }

    /// The age recipients of `recipients_file` (one `age1…` a line, `#` comments, blank
    /// lines), parsed by `shared/age_key.rs`, the one home of the rule; empty
    /// when not encrypting. At least one when encrypting.
    pub fn recipients(&self) -> Result<Vec<Recipient>, Failure> {
        let Some(file) = self.recipients_file.as_deref().filter(|_| self.encrypt) else {
            return Ok(Vec::new());
        };
        let key = "backup.recipients_file";
        let text = self.read_file(key, file, false)?;
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // What a recipient is has one home: the age module that encrypts to it.
            let r: Recipient = line.parse().map_err(|why| {
                self.file_err(
                    key,
                    file,
                    format_args!(
                        "line {}: is not an age recipient: the line {why} (one age1… public \
                         key a line, never the AGE-SECRET-KEY identity)",
                        n + 1
                    ),
                )
            })?;
            out.push(r);
        }
        if out.is_empty() {
            return Err(self.file_err(key, file, "holds no age1… recipient"));
        }
        Ok(out)
    }

    /// Every file of `[backup]` read once under its rules, at load: a bad one fails the
    /// configuration at once, not the first upload an hour later.
    pub fn check_files(&self) -> Result<(), Failure> {
        self.credentials()?;
        self.recipients()?;
        if let Some(ca) = &self.ca_file {
            self.read_file("backup.ca_file", ca, false)?;
        }
        if let Some(id) = &self.identity_file {
            self.read_file("backup.identity_file", id, true)?;
        }
        Ok(())
    }
}
