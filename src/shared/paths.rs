//! The system locations every command uses: the state folders the command line names
//! (`--run-dir`, `--state-dir`), and the kernel's device folders the disc search reads.

use crate::cli::StateDirs;
use crate::shared::report::StateStore;
use std::path::PathBuf;

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
