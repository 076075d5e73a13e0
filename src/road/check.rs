//! `etcd-setup check`: the archive pass run offline on ISO images, CD-ROM devices and
//! tarballs, for operators vetting an ISO before they register it. Each path is staged in
//! a private temporary folder that is removed again, also when the check is stopped by
//! SIGINT, SIGTERM or SIGHUP (a thread of its own takes them, removes the folder and ends
//! the process by the same signal); the result is printed as text or as one JSON
//! document. Text from the disc (its label, the names on it) is printed through
//! [`printable::line`]: it cannot forge a second line; JSON keeps the exact values.

use crate::cli::{CheckArgs, Format};
use crate::reason::Failure;
use crate::road::archive::{Policy, Staging};
use crate::road::source::{self, Kind, Validated};
use crate::shared::advisory::AdvisoryRecord;
use crate::{exit, shared::advisory, shared::output, shared::printable};
use serde::Serialize;
use std::path::Path;

/// `etcd-setup check`: the archive pass on each PATH, staged in a private temporary folder
/// that is removed again.
pub fn command(args: &CheckArgs) -> u8 {
    let policy = Policy {
        sha256: args.sha256,
        ..Policy::default()
    };
    if let Err(e) = crate::shared::advisory::load_operator_file(&args.advisories) {
        output::line(&format!("config-invalid: {e}"));
        return exit::check::FAILED;
    }
    let tmp = std::env::temp_dir();
    let signals = stop_signals();
    if let Err(e) = signals.thread_block() {
        eprintln!("etcd-setup check: cannot block signals: {e}");
    }
    // The private folder every path is staged in; one folder to remove on a signal.
    let private = match Staging::create(&tmp) {
        Ok(s) => s,
        Err(f) => {
            output::line(&f.headline());
            return exit::check::FAILED;
        }
    };
    remove_on_signal(signals, private.path().to_path_buf());
    let mut results = Vec::new();
    let mut all_ok = true;
    for path in &args.paths {
        let outcome = source::validate_path(path, &args.archive_path, private.path(), &policy);
        all_ok &= outcome.is_ok();
        match args.format {
            Format::Text => output::print(&check_text(path, &outcome)),
            Format::Json => results.push(check_json(path, &outcome)),
        }
    }
    if args.format == Format::Json {
        let doc = CheckReport {
            schema_version: 1,
            results,
        };
        match serde_json::to_string_pretty(&doc) {
            Ok(text) => output::print(&format!("{text}\n")),
            Err(e) => eprintln!("etcd-setup check: cannot write the JSON: {e}"),
        }
    }
    drop(private);
    if all_ok {
        exit::check::OK
    } else {
        exit::check::FAILED
    }
}

fn stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(sig);
    }
    signals
}

/// A thread that waits for one of `signals` (blocked in every thread), removes `folder`
/// and ends the process by that signal, as if it had not been caught.
fn remove_on_signal(signals: nix::sys::signal::SigSet, folder: std::path::PathBuf) {
    use nix::sys::signal::{raise, signal, SigHandler};
    let spawned = std::thread::Builder::new()
        .name("check-signals".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let Ok(sig) = signals.wait() else { return };
            // The main thread may still be writing into it: try until it is gone.
            for _ in 0..20 {
                match std::fs::remove_dir_all(&folder) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => continue,
                    _ => break,
                }
            }
            // SAFETY: restores the default action; no handler of ours is replaced.
            let _ = unsafe { signal(sig, SigHandler::SigDfl) };
            let mut only = nix::sys::signal::SigSet::empty();
            only.add(sig);
            let _ = only.thread_unblock();
            let _ = raise(sig);
            std::process::exit(128 + sig as i32);
        });
    if let Err(e) = spawned {
        eprintln!("etcd-setup check: cannot start the signal thread: {e}");
    }
}

fn check_text(path: &Path, outcome: &Result<Validated, Failure>) -> String {
    let shown = printable::path(path);
    match outcome {
        Ok(v) => {
            let x = &v.extracted;
            let from = match &v.kind {
                Kind::Iso { label, naming } => {
                    format!("ISO label {} ({naming} names)", printable::line(label))
                }
                Kind::Tarball => "tarball".to_string(),
            };
            let mut text = format!(
                "{shown}: ok: etcd {} linux-{}{} from {from}; sha256 {}; {} bytes compressed, {} \
                 unpacked, {} entries\n",
                printable::line(&x.version),
                printable::line(&x.arch),
                if x.has_etcdutl { " with etcdutl" } else { "" },
                x.sha256_hex(),
                x.compressed_bytes,
                x.unpacked_bytes,
                x.entries
            );
            // A known-bad release is still a valid one: a warning, the exit code stays.
            for line in advisory::lines(&x.version) {
                text.push_str(&format!("{shown}: warning: {}\n", printable::line(&line)));
            }
            // Notes (src/shared/advisories.toml): below etcd's production minimum, only
            // with etcd's authentication on, or on the way to the next minor release.
            for line in advisory::note_lines(&x.version) {
                text.push_str(&format!("{shown}: note: {}\n", printable::line(&line)));
            }
            text
        }
        Err(f) => {
            let mut text = format!("{shown}: FAILED: {}\n", printable::line(&f.headline()));
            if let Some(source) = &f.source {
                let detail = format!("{source:#}");
                if !f.message.contains(&detail) {
                    text.push_str(&format!("    {}\n", printable::line(&detail)));
                }
            }
            text
        }
    }
}

/// `check --format json`: schema 1, one result per path.
#[derive(Debug, Serialize)]
struct CheckReport {
    schema_version: u32,
    results: Vec<CheckResult>,
}

/// Whether a path passed.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "lowercase")]
enum CheckVerdict {
    Ok,
    Failed,
}

/// One path's result: the release found (when it passed) or the reason (when not).
#[derive(Debug, Serialize)]
struct CheckResult {
    path: String,
    verdict: CheckVerdict,
    #[serde(flatten)]
    release: Option<CheckedRelease>,
    reason: Option<CheckReason>,
}

/// What a path that passed holds.
#[derive(Debug, Serialize)]
struct CheckedRelease {
    /// `iso` or `tarball`.
    kind: &'static str,
    label: Option<String>,
    naming: Option<String>,
    etcd_version: String,
    arch: String,
    has_etcdutl: bool,
    sha256: String,
    compressed_bytes: u64,
    unpacked_bytes: u64,
    entries: u64,
    advisories: Vec<AdvisoryRecord>,
    /// The notes of the same data file (`advisory::note_records`).
    notes: Vec<AdvisoryRecord>,
}

/// Why a path failed.
#[derive(Debug, Serialize)]
struct CheckReason {
    code: crate::reason::ReasonCode,
    message: String,
    detail: Option<String>,
}

fn check_json(path: &Path, outcome: &Result<Validated, Failure>) -> CheckResult {
    let path = path.display().to_string();
    match outcome {
        Ok(v) => {
            let x = &v.extracted;
            let (kind, label, naming) = match &v.kind {
                Kind::Iso { label, naming } => (
                    "iso",
                    Some(label.clone()),
                    Some(naming.as_str().to_string()),
                ),
                Kind::Tarball => ("tarball", None, None),
            };
            CheckResult {
                path,
                verdict: CheckVerdict::Ok,
                release: Some(CheckedRelease {
                    kind,
                    label,
                    naming,
                    etcd_version: x.version.clone(),
                    arch: x.arch.clone(),
                    has_etcdutl: x.has_etcdutl,
                    sha256: x.sha256_hex(),
                    compressed_bytes: x.compressed_bytes,
                    unpacked_bytes: x.unpacked_bytes,
                    entries: x.entries,
                    advisories: advisory::records(&x.version),
                    notes: advisory::note_records(&x.version),
                }),
                reason: None,
            }
        }
        Err(f) => CheckResult {
            path,
            verdict: CheckVerdict::Failed,
            release: None,
            reason: Some(CheckReason {
                code: f.code,
                message: f.message.clone(),
                detail: f.source.as_ref().map(|s| format!("{s:#}")),
            }),
        },
    }
}
