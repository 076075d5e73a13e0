//! The system locations every command uses: the state folders the command line names
//! (`--run-dir`, `--state-dir`), the status socket, and the kernel's device folders the
//! disc search reads.

use crate::shared::report::StateStore;
use std::path::PathBuf;

/// The status socket (`etcd-setup-status.socket` listens on it).
pub const STATUS_SOCKET: &str = "/run/etcd-setup/status.sock";

/// Where the agent keeps its state; moved only by tests and by hand.
#[derive(clap::Args, Debug, Clone)]
pub struct StateDirs {
    /// The live state and the lock (gone at reboot).
    #[arg(long, value_name = "DIR", default_value = crate::shared::report::RUN_DIR, hide = true)]
    pub run_dir: PathBuf,
    /// The persistent copy of the state.
    #[arg(long, value_name = "DIR", default_value = crate::shared::report::PERSIST_DIR, hide = true)]
    pub state_dir: PathBuf,
}

/// The system locations a command uses; tests point them elsewhere.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Live state and the lock: `/run/etcd-setup`.
    pub run_dir: PathBuf,
    /// Persistent state: `/var/lib/etcd-setup`.
    pub state_dir: PathBuf,
    /// `/sys/block`.
    pub sys_block: PathBuf,
    /// `/dev`.
    pub dev: PathBuf,
}

impl Paths {
    /// The state store in these folders.
    pub fn store(&self) -> StateStore {
        StateStore::new(&self.run_dir, &self.state_dir)
    }

    /// The system's locations, with the state folders the command line names.
    pub fn new(dirs: &StateDirs) -> Paths {
        Paths {
            run_dir: dirs.run_dir.clone(),
            state_dir: dirs.state_dir.clone(),
            sys_block: PathBuf::from("/sys/block"),
            dev: PathBuf::from("/dev"),
        }
    }
}
