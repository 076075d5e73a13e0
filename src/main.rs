//! Command-line entry point: parses arguments and maps outcomes to exit codes.

use clap::{Parser, Subcommand, ValueEnum};
use etcd_setup::archive::Policy;
use etcd_setup::reason::Failure;
use etcd_setup::run::{self, Paths, SharedReporter};
use etcd_setup::source::{self, Kind, Validated};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

const RUN_EXIT_CODES: &str = "\
Exit codes of `run`:
  0  etcd is installed, enabled, active and healthy
  1  the run failed; the reason is in the failure file (first line `code: sentence`)
  2  the command line is wrong
  3  the configuration file is missing or invalid (config-invalid)
  4  the run was stopped by a signal (interrupted)
  5  another run held the lock past --lock-timeout (locked)";

const EXIT_CODES: &str = "\
Exit codes of `check`:
  0  every PATH holds a valid etcd release for this machine
  1  at least one PATH failed; its reason code and sentence are printed
  2  the command line is wrong";

const STATUS_EXIT_CODES: &str = "\
Exit codes of `status`:
  0  etcd is running and healthy
  1  failed: the run failed, was interrupted, or etcd stopped or is unhealthy since;
     the reason is printed (`code: sentence`)
  2  the command line is wrong
  3  a run is in progress (not finished yet; --wait ended by its --timeout)
  4  not started: no run has begun on this node
  5  the status socket cannot be reached, or the server refused the request";

/// Installs etcd on a dedicated etcd node from the Kubernetes ISO, and reports why not.
#[derive(Parser)]
#[command(name = "etcd-setup", version = etcd_setup::VERSION, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The boot job: wait for the Kubernetes ISO, validate and install etcd, start it only
    /// when all went well, and record the reason when not.
    #[command(after_help = RUN_EXIT_CODES)]
    Run(RunArgs),
    /// Validate Kubernetes ISO images, CD-ROM devices or etcd tarballs offline, as `run`
    /// would, without root and without mounting.
    #[command(after_help = EXIT_CODES)]
    Check(CheckArgs),
    /// Where this node is: the run's phase and reason, and etcd's live state and health,
    /// from the status socket. Only root and the configured group may ask.
    #[command(after_help = STATUS_EXIT_CODES)]
    Status(StatusArgs),
    /// The server behind the status socket, started by etcd-setup-status.socket; takes
    /// the socket from systemd (LISTEN_FDS) or binds --socket, exits when idle.
    #[command(hide = true)]
    ServeStatus(ServeStatusArgs),
}

#[derive(clap::Args)]
struct StatusArgs {
    /// Wait until the verdict is final (running or failed), pushed by the server.
    #[arg(long)]
    wait: bool,
    /// The longest --wait, e.g. "5min".
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10min")]
    timeout: std::time::Duration,
    /// Output format; json is the answer of the socket (schema in the README).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Labelled lines instead of one.
    #[arg(long)]
    long: bool,
    /// The status socket.
    #[arg(long, value_name = "PATH", default_value = etcd_setup::status::SOCKET, hide = true)]
    socket: PathBuf,
}

#[derive(clap::Args)]
struct ServeStatusArgs {
    /// The socket to bind when systemd passes none.
    #[arg(long, value_name = "PATH", default_value = etcd_setup::status::SOCKET)]
    socket: PathBuf,
    /// Exit after this long without a connection ("0" never exits).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    idle_exit: std::time::Duration,
    /// The node's configuration (for [report] status_group and etcd.metrics_port).
    #[arg(long, value_name = "FILE", default_value = etcd_setup::config::DEFAULT_PATH)]
    config: PathBuf,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The node's configuration (TOML).
    #[arg(long, value_name = "FILE", default_value = etcd_setup::config::DEFAULT_PATH)]
    config: PathBuf,
    /// How long to wait for another run holding the lock (default: the ISO wait plus
    /// etcd's start timeout plus 5 minutes), e.g. "30s".
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    lock_timeout: Option<std::time::Duration>,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    etcd_setup::config::parse_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration like 90s, 15min or 1h"))
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
        Command::Run(args) => run_command(args),
        Command::Check(args) => check(args),
        Command::Status(args) => status(args),
        Command::ServeStatus(args) => serve_status(args),
    }
}

/// `etcd-setup status`: one request to the socket, the answer printed, its exit code.
fn status(args: StatusArgs) -> ExitCode {
    use etcd_setup::status::{self, ClientError, Request};
    let request = Request {
        version: status::PROTOCOL_VERSION,
        wait: args.wait,
        timeout_ms: u64::try_from(args.timeout.as_millis()).unwrap_or(u64::MAX),
    };
    match status::query(&args.socket, &request, std::time::Duration::from_secs(10)) {
        Ok(answer) => {
            match (args.format, args.long) {
                (Format::Json, _) => match serde_json::to_string_pretty(&answer) {
                    Ok(json) => println!("{json}"),
                    Err(e) => {
                        eprintln!("etcd-setup status: cannot encode the answer: {e}");
                        return ExitCode::from(status::exit::UNREACHABLE);
                    }
                },
                (Format::Text, true) => print!("{}", status::text_long(&answer)),
                (Format::Text, false) => println!("{}", status::text_line(&answer)),
            }
            ExitCode::from(answer.exit_code)
        }
        Err(e) => {
            match &e {
                ClientError::Refused(body) if args.format == Format::Json => {
                    println!("{}", serde_json::json!({ "error": body }));
                }
                _ => {}
            }
            let what = match e {
                ClientError::Refused(_) => "refused",
                ClientError::Unreachable(_) => "unreachable",
            };
            eprintln!("etcd-setup status: {what}: {e}");
            ExitCode::from(status::exit::UNREACHABLE)
        }
    }
}

/// `etcd-setup serve-status`: the server behind the socket. Test hooks: the state folders
/// from ETCD_SETUP_RUN_DIR / ETCD_SETUP_STATE_DIR, etcd's live view from the JSON file
/// named by ETCD_SETUP_FAKE_ETCD (the host has no system bus).
fn serve_status(args: ServeStatusArgs) -> ExitCode {
    use etcd_setup::status::{self, server};
    let (group, metrics_port) = match etcd_setup::config::load(&args.config) {
        Ok(s) => (s.status_group, s.metrics_port),
        Err(f) => {
            if args.config.exists() {
                eprintln!(
                    "etcd-setup serve-status: {}; only root and group {} may query",
                    f.headline(),
                    etcd_setup::config::DEFAULT_STATUS_GROUP
                );
            }
            (etcd_setup::config::DEFAULT_STATUS_GROUP.to_string(), 2381)
        }
    };
    let mut paths = Paths::system();
    if let Some(dir) = std::env::var_os("ETCD_SETUP_RUN_DIR") {
        paths.run_dir = dir.into();
    }
    if let Some(dir) = std::env::var_os("ETCD_SETUP_STATE_DIR") {
        paths.state_dir = dir.into();
    }
    let live: Arc<dyn status::LiveView> = match std::env::var_os("ETCD_SETUP_FAKE_ETCD") {
        Some(file) => Arc::new(status::FileLive(file.into())),
        None => Arc::new(status::SystemLive::new(metrics_port)),
    };
    let listener = match server::socket_from_systemd() {
        Ok(Some(l)) => l,
        Ok(None) => match server::bind(&args.socket) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("etcd-setup serve-status: {e:#}");
                return ExitCode::from(1);
            }
        },
        Err(e) => {
            eprintln!("etcd-setup serve-status: {e:#}");
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "etcd-setup serve-status: serving {} for root and group {group}",
        args.socket.display()
    );
    let options = server::Options {
        store: etcd_setup::report::StateStore::new(paths.run_dir, paths.state_dir),
        group,
        idle_exit: (!args.idle_exit.is_zero()).then_some(args.idle_exit),
    };
    match server::serve(listener, options, live) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("etcd-setup serve-status: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `etcd-setup run`. Signals are blocked before any thread exists and taken by a thread
/// of their own, which records `interrupted` and exits; a panic is caught and recorded as
/// `internal-error`. Either way the reason reaches the failure file.
fn run_command(args: RunArgs) -> ExitCode {
    use nix::sys::signal::{SigSet, Signal};
    let shared: SharedReporter = Arc::new(Mutex::new(None));
    let mut signals = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(sig);
    }
    if let Err(e) = signals.thread_block() {
        eprintln!("etcd-setup: cannot block signals: {e}");
    }
    let on_signal = Arc::clone(&shared);
    std::thread::spawn(move || {
        if let Ok(sig) = signals.wait() {
            let code = run::interrupted(&on_signal, sig.as_str());
            std::process::exit(i32::from(code));
        }
    });
    let mut paths = Paths::system();
    // Test hooks: the host tests point the state folders into a temporary folder.
    if let Some(dir) = std::env::var_os("ETCD_SETUP_RUN_DIR") {
        paths.run_dir = dir.into();
    }
    if let Some(dir) = std::env::var_os("ETCD_SETUP_STATE_DIR") {
        paths.state_dir = dir.into();
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run::run(&args.config, &paths, args.lock_timeout, &shared)
    }));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            ExitCode::from(run::panicked(&shared, &message))
        }
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
