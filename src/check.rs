//! `etcd-setup check`: the archive pass run offline on ISO images, CD-ROM devices and
//! tarballs, for operators vetting an ISO before they register it. Each path is staged in
//! a private temporary folder that is removed again; the result is printed as text or as
//! one JSON document.

use crate::archive::Policy;
use crate::cli::{CheckArgs, Format};
use crate::exit;
use crate::reason::Failure;
use crate::source::{self, Kind, Validated};

/// `etcd-setup check`: the archive pass on each PATH, staged in a private temporary folder
/// that is removed again.
pub fn command(args: &CheckArgs) -> u8 {
    let policy = Policy {
        sha256: args.sha256,
        ..Policy::default()
    };
    let tmp = std::env::temp_dir();
    let mut results = Vec::new();
    let mut all_ok = true;
    for path in &args.paths {
        let outcome = source::validate_path(path, &args.archive_path, &tmp, &policy);
        all_ok &= outcome.is_ok();
        match args.format {
            Format::Text => print!("{}", check_text(path, &outcome)),
            Format::Json => results.push(check_json(path, &outcome)),
        }
    }
    if args.format == Format::Json {
        let doc = serde_json::json!({ "schema_version": 1, "results": results });
        println!("{doc:#}");
    }
    if all_ok {
        exit::check::OK
    } else {
        exit::check::FAILED
    }
}

fn check_text(path: &std::path::Path, outcome: &Result<Validated, Failure>) -> String {
    match outcome {
        Ok(v) => {
            let x = &v.extracted;
            let from = match &v.kind {
                Kind::Iso { label } => format!("ISO label {label}"),
                Kind::Tarball => "tarball".to_string(),
            };
            format!(
                "{}: ok: etcd {} linux-{}{} from {from}; sha256 {}; {} bytes compressed, {} \
                 unpacked, {} entries\n",
                path.display(),
                x.version,
                x.arch,
                if x.has_etcdutl { " with etcdutl" } else { "" },
                x.sha256_hex(),
                x.compressed_bytes,
                x.unpacked_bytes,
                x.entries
            )
        }
        Err(f) => {
            let mut text = format!("{}: FAILED: {}\n", path.display(), f.headline());
            if let Some(source) = &f.source {
                let detail = format!("{source:#}");
                if !f.message.contains(&detail) {
                    text.push_str(&format!("    {detail}\n"));
                }
            }
            text
        }
    }
}

fn check_json(path: &std::path::Path, outcome: &Result<Validated, Failure>) -> serde_json::Value {
    match outcome {
        Ok(v) => {
            let x = &v.extracted;
            let (kind, label) = match &v.kind {
                Kind::Iso { label } => ("iso", Some(label.as_str())),
                Kind::Tarball => ("tarball", None),
            };
            serde_json::json!({
                "path": path.display().to_string(),
                "verdict": "ok",
                "kind": kind,
                "label": label,
                "etcd_version": x.version,
                "arch": x.arch,
                "has_etcdutl": x.has_etcdutl,
                "sha256": x.sha256_hex(),
                "compressed_bytes": x.compressed_bytes,
                "unpacked_bytes": x.unpacked_bytes,
                "entries": x.entries,
                "reason": null,
            })
        }
        Err(f) => serde_json::json!({
            "path": path.display().to_string(),
            "verdict": "failed",
            "reason": {
                "code": f.code,
                "message": f.message,
                "detail": f.source.as_ref().map(|s| format!("{s:#}")),
            },
        }),
    }
}
