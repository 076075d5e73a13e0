//! Command-line entry point: parses arguments and maps each command's outcome to the
//! process's exit code. Everything else lives in the library.

use clap::Parser;
use etcd_setup::cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    let code = match Cli::parse().command {
        Command::Run(args) => etcd_setup::road::run::command(&args),
        Command::Check(args) => etcd_setup::road::check::command(&args),
        Command::Status(args) => etcd_setup::status::command(&args),
        Command::Leave(args) => etcd_setup::day2::leave::command(&args),
        Command::Snapshot(args) => etcd_setup::day2::snapshot::command(&args),
        Command::Restore(args) => etcd_setup::day2::restore::command(&args),
        Command::Maintain(args) => etcd_setup::day2::maintain::command(&args),
        Command::RotateCa(args) => etcd_setup::day2::rotate_ca::command(&args),
        Command::Upgrade(args) => etcd_setup::day2::upgrade::command(&args),
        Command::Backups(args) => etcd_setup::day2::backups::command(&args),
        Command::ServeStatus(args) => etcd_setup::status::server::command(&args),
    };
    ExitCode::from(code)
}
