//! Command-line entry point: parses arguments and maps outcomes to exit codes.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Installs etcd on a dedicated etcd node from the Kubernetes ISO, and reports why not.
#[derive(Parser)]
#[command(name = "etcd-setup", version = etcd_setup::VERSION, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the agent's version and build facts.
    Version,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("etcd-setup {}", etcd_setup::VERSION);
            ExitCode::SUCCESS
        }
    }
}
