//! etcd-setup: the boot agent of dedicated etcd node VMs.
//!
//! The data takes one road: find the Kubernetes ISO → validate and extract the etcd
//! archive → install → start etcd → report. Each step is a module; `main.rs` only parses
//! arguments and maps outcomes to exit codes and reasons.
#![deny(missing_docs)]

// The contract: the command line, exit codes, reason codes.
pub mod cli;
pub mod exit;
pub mod reason;

// The parts of the agent (ARCHITECTURE.md maps them).
pub mod backup;
pub mod cluster;
pub mod day2;
pub mod member;
pub mod road;
pub mod shared;
pub mod status;

/// The agent's version with the git commit it was built from, e.g. `0.1.0 (3f2a9c1d0e4b)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("ETCD_SETUP_GIT_COMMIT"),
    ")"
);
