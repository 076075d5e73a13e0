//! etcd-setup: the boot agent of dedicated etcd node VMs.
//!
//! The data takes one road: find the Kubernetes ISO → validate and extract the etcd
//! archive → install → start etcd → report. Each step is a module; `main.rs` only parses
//! arguments and maps outcomes to exit codes and reasons.
#![deny(missing_docs)]

pub mod advisory;
pub mod archive;
pub mod check;
pub mod cli;
pub mod config;
pub mod discover;
pub mod elf;
pub mod etcd;
pub mod exit;
pub mod health;
pub mod install;
pub mod iso9660;
pub mod leave;
pub mod lifecycle;
pub mod lock;
pub mod output;
pub mod printable;
pub mod reason;
pub mod report;
pub mod run;
pub mod source;
pub mod status;
pub mod systemd;
pub mod unit;
pub mod upgrade;
pub mod upkeep;

/// The agent's version with the git commit it was built from, e.g. `0.1.0 (3f2a9c1d0e4b)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("ETCD_SETUP_GIT_COMMIT"),
    ")"
);
