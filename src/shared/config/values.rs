//! Stage two: each key's value checked and converted, with the wording of every
//! problem (`FILE: KEY: problem`), and the value parsers shared with the command line.

use super::MAX_USER;
use crate::reason::{Failure, ReasonCode};
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Value;

/// A peer URL of `initial_cluster`, taken apart.
pub(super) struct PeerUrl {
    /// `http` or `https`.
    pub(super) scheme: &'static str,
    /// The host as written, IPv6 without brackets.
    pub(super) host: String,
    /// The port.
    pub(super) port: u16,
}

/// Checks keys of the file at `path`, naming it in every problem.
pub(super) struct Checker<'a> {
    /// The file, for messages.
    pub(super) path: &'a Path,
}

/// A checked value, or `config-invalid` naming the file and key.
pub(super) type Checked<T> = Result<T, Failure>;

impl Checker<'_> {
    pub(super) fn err(&self, key: &str, problem: impl fmt::Display) -> Failure {
        Failure::new(
            ReasonCode::ConfigInvalid,
            format!("{}: {key}: {problem}", self.path.display()),
        )
    }

    pub(super) fn missing(&self, key: &str, what: &str) -> Failure {
        self.err(key, format_args!("missing; required: {what}"))
    }

    pub(super) fn wrong_type(&self, key: &str, expected: &str, found: &Value) -> Failure {
        let found = match found {
            Value::String(s) => format!("the string {s:?}"),
            Value::Integer(n) => format!("the integer {n}"),
            Value::Float(x) => format!("the float {x}"),
            Value::Boolean(b) => format!("the boolean {b}"),
            other => format!("a {}", other.type_str()),
        };
        self.err(key, format_args!("expected {expected}, found {found}"))
    }

    pub(super) fn string(&self, key: &str, v: Option<Value>) -> Checked<Option<String>> {
        match v {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong_type(key, "a string", &other)),
        }
    }

    pub(super) fn required_string(
        &self,
        key: &str,
        v: Option<Value>,
        what: &str,
    ) -> Checked<String> {
        self.string(key, v)?.ok_or_else(|| self.missing(key, what))
    }

    pub(super) fn boolean(&self, key: &str, v: Option<Value>, default: bool) -> Checked<bool> {
        match v {
            None => Ok(default),
            Some(Value::Boolean(b)) => Ok(b),
            Some(other) => Err(self.wrong_type(key, "true or false", &other)),
        }
    }

    pub(super) fn port(&self, key: &str, v: Option<Value>, default: u16) -> Checked<u16> {
        match v {
            None => Ok(default),
            Some(Value::Integer(n)) => u16::try_from(n)
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| self.err(key, format_args!("{n} is not a port (1 to 65535)"))),
            Some(other) => Err(self.wrong_type(key, "a port number", &other)),
        }
    }

    pub(super) fn count(&self, key: &str, v: Option<Value>, default: u64) -> Checked<u64> {
        match v {
            None => Ok(default),
            Some(Value::Integer(n)) if n >= 1 => Ok(n as u64),
            Some(Value::Integer(n)) => Err(self.err(key, format_args!("{n} is not positive"))),
            Some(other) => Err(self.wrong_type(key, "a positive integer", &other)),
        }
    }

    pub(super) fn duration(
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

    pub(super) fn size(&self, key: &str, v: Option<Value>, default: u64) -> Checked<u64> {
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
    pub(super) fn name(&self, key: &str, s: &str, max: usize) -> Checked<()> {
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
    pub(super) fn user(&self, key: &str, s: &str) -> Checked<()> {
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
    pub(super) fn abs_path(&self, key: &str, s: &str) -> Checked<PathBuf> {
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
    pub(super) fn dir_path(&self, key: &str, s: &str) -> Checked<PathBuf> {
        let p = self.abs_path(key, s)?;
        if p == Path::new("/") {
            return Err(self.err(key, "\"/\" cannot be used; name a folder of its own"));
        }
        Ok(p)
    }

    /// An absolute path of a file: not `/`, not ending in `/`.
    pub(super) fn file_path(&self, key: &str, s: &str) -> Checked<PathBuf> {
        if s.ends_with('/') {
            return Err(self.err(key, format_args!("{s:?} names a folder, not a file")));
        }
        self.dir_path(key, s)
    }
}

pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

pub(super) fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '@' | ':')
}

/// The URL scheme of a side of etcd's traffic: `https` with TLS, `http` without.
pub fn scheme(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

/// An IP address as the host of a URL: IPv6 in brackets.
pub fn url_host(ip: IpAddr) -> String {
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
pub(super) fn show_duration(d: Duration) -> String {
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
