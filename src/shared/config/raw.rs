//! Stage one: the file read and parsed as TOML into raw structs whose every key is
//! optional and untyped, and TOML's errors worded as one line naming file, line and key.

use super::MAX_FILE;
use crate::reason::{Failure, ReasonCode};
use serde::Deserialize;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use toml::Value;

/// Finds `failure_file = "…"` and `owner = "…"` under `[report]` line by line, for a file
/// that is not valid TOML elsewhere. Only plain double- or single-quoted values.
pub(super) fn scan_report_section(text: &str) -> (Option<String>, Option<String>) {
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

pub(super) fn read_text(path: &Path) -> Result<String, Failure> {
    use std::io::Read;
    let shown = path.display();
    let fail = |msg: String, e: std::io::Error| {
        Failure::new(ReasonCode::ConfigInvalid, msg).with_source(e)
    };
    // Non-blocking, so that a FIFO put at the path cannot hold the run (or the status
    // server) forever; then only a regular file is read.
    // Not through a symbolic link: root acts on what the file says (runs the binaries
    // of install.dir, writes where it names), so the file is held to the key files' rule.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::ELOOP) {
                let msg = format!(
                    "{shown}: is a symbolic link; name the configuration file itself \
                     (root acts on what it says, so it is read only where it is)"
                );
                fail(msg, e)
            } else if e.kind() == std::io::ErrorKind::NotFound {
                let msg = format!(
                    "{shown}: no such file; the node's configuration must be written there \
                 before the run (was cloud-init's write_files applied?)"
                );
                fail(msg, e)
            } else {
                fail(format!("{shown}: cannot open: {e}"), e)
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("{shown}: cannot read: {e}"), e))?;
    let kind = meta.file_type();
    if !kind.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_block_device() || kind.is_char_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(Failure::new(
            ReasonCode::ConfigInvalid,
            format!("{shown}: is {what}, not the node's configuration file"),
        ));
    }
    if let Some(why) = not_ours(&meta) {
        return Err(Failure::new(
            ReasonCode::ConfigInvalid,
            format!(
                "{shown}: {why}; root acts on what the node's configuration says (runs the \
                 binaries of install.dir, writes where it names), so it must be root's and \
                 not writable by group or others: chown root:root and chmod 0644 it"
            ),
        ));
    }
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

/// Why a file or folder with `meta` is not one root may act on, if it is not: owned by
/// another user than root or the one running (a test's or an operator's own run), or
/// writable by group or others.
pub(crate) fn not_ours(meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        return Some(format!("is owned by uid {}, not root", meta.uid()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 {
            "others"
        } else {
            "its group"
        };
        return Some(format!("is writable by {who} (mode {mode:04o})"));
    }
    None
}

/// Turns a TOML syntax or structure error into one line naming the file, the position and,
/// for an unknown or mistyped key, the key with its table.
pub(super) fn toml_failure(e: &toml::de::Error, text: &str, path: &Path) -> Failure {
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
pub(super) fn line_column(text: &str, at: usize) -> (usize, usize) {
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
pub(super) fn unknown_field(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let expected = rest
        .split_once("expected ")
        .map_or("a known key", |(_, e)| e);
    Some((field, expected))
}

/// `field` prefixed with the table whose header comes last before byte `at`, e.g.
/// `node.nmae`; best effort (inline tables are not followed).
pub(super) fn qualified_key(text: &str, at: usize, field: &str) -> String {
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) node: Option<RawNode>,
    pub(super) etcd: Option<RawEtcd>,
    pub(super) iso: Option<RawIso>,
    pub(super) install: Option<RawInstall>,
    pub(super) report: Option<RawReport>,
    pub(super) tls: Option<RawTls>,
    pub(super) limits: Option<RawLimits>,
    pub(super) snapshot: Option<RawSnapshot>,
    pub(super) maintain: Option<RawMaintain>,
    pub(super) backup: Option<RawBackup>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNode {
    pub(super) name: Option<Value>,
    pub(super) ip: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEtcd {
    pub(super) initial_cluster: Option<Value>,
    pub(super) cluster_token: Option<Value>,
    pub(super) cluster_state: Option<Value>,
    pub(super) data_dir: Option<Value>,
    pub(super) client_port: Option<Value>,
    pub(super) peer_port: Option<Value>,
    pub(super) metrics_port: Option<Value>,
    pub(super) start_timeout: Option<Value>,
    pub(super) settle: Option<Value>,
    pub(super) quota_backend_bytes: Option<Value>,
    pub(super) prometheus_port: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIso {
    pub(super) archive_path: Option<Value>,
    pub(super) sha256: Option<Value>,
    pub(super) wait: Option<Value>,
    pub(super) eject: Option<Value>,
    pub(super) refuse_known_bad: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInstall {
    pub(super) dir: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReport {
    pub(super) failure_file: Option<Value>,
    pub(super) owner: Option<Value>,
    pub(super) status_group: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) client_cert: Option<Value>,
    pub(super) client_key: Option<Value>,
    pub(super) client_trusted_ca: Option<Value>,
    pub(super) peer_cert: Option<Value>,
    pub(super) peer_key: Option<Value>,
    pub(super) peer_trusted_ca: Option<Value>,
    pub(super) warn_days: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub(super) max_entries: Option<Value>,
    pub(super) max_file_size: Option<Value>,
    pub(super) max_total_size: Option<Value>,
    pub(super) max_ratio: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSnapshot {
    pub(super) dir: Option<Value>,
    pub(super) copy_dir: Option<Value>,
    pub(super) retain: Option<Value>,
    pub(super) pruned_retain: Option<Value>,
    pub(super) pruned_max_age: Option<Value>,
    pub(super) prune: Option<Value>,
    pub(super) timeout: Option<Value>,
    pub(super) stale_after: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMaintain {
    pub(super) min_db_size: Option<Value>,
    pub(super) min_fragmented_percent: Option<Value>,
    pub(super) defrag_timeout: Option<Value>,
    pub(super) lock_wait: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackup {
    pub(super) endpoint: Option<Value>,
    pub(super) allow_http: Option<Value>,
    pub(super) bucket: Option<Value>,
    pub(super) prefix: Option<Value>,
    pub(super) region: Option<Value>,
    pub(super) path_style: Option<Value>,
    pub(super) ca_file: Option<Value>,
    pub(super) access_key_file: Option<Value>,
    pub(super) secret_key_file: Option<Value>,
    pub(super) recipients_file: Option<Value>,
    pub(super) encrypt: Option<Value>,
    pub(super) identity_file: Option<Value>,
    pub(super) retain: Option<Value>,
    pub(super) period: Option<Value>,
    pub(super) restore_when_empty: Option<Value>,
}
