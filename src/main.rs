//! Command-line entry point: parses arguments and maps outcomes to exit codes.

use clap::{Parser, Subcommand, ValueEnum};
use etcd_setup::archive::Policy;
use etcd_setup::reason::Failure;
use etcd_setup::source::{self, Kind, Validated};
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_CODES: &str = "\
Exit codes of `check`:
  0  every PATH holds a valid etcd release for this machine
  1  at least one PATH failed; its reason code and sentence are printed
  2  the command line is wrong";

/// Installs etcd on a dedicated etcd node from the Kubernetes ISO, and reports why not.
#[derive(Parser)]
#[command(name = "etcd-setup", version = etcd_setup::VERSION, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate Kubernetes ISO images, CD-ROM devices or etcd tarballs offline, as `run`
    /// would, without root and without mounting.
    #[command(after_help = EXIT_CODES)]
    Check(CheckArgs),
}

#[derive(clap::Args)]
struct CheckArgs {
    /// ISO image files, CD-ROM devices (e.g. /dev/sr0) or etcd release tarballs.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Require this SHA-256 (hex) of the compressed tarball.
    #[arg(long, value_name = "HEX", value_parser = parse_sha256)]
    sha256: Option<[u8; 32]>,
    /// Where the tarball sits inside an ISO.
    #[arg(long, value_name = "PATH", default_value = source::DEFAULT_ARCHIVE_PATH)]
    archive_path: String,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

fn parse_sha256(text: &str) -> Result<[u8; 32], String> {
    let text = text.trim();
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "a SHA-256 is 64 hex digits, got {} characters",
            text.len()
        ));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(args) => check(args),
    }
}

/// `etcd-setup check`: the archive pass on each PATH, staged in a private temporary folder
/// that is removed again.
fn check(args: CheckArgs) -> ExitCode {
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
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
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
