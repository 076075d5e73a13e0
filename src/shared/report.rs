//! What the node says about itself: the failure file the platform reads over SSH, and the
//! state files `status` answers from. Everything here is written atomically (temp file in
//! the same folder, fsync, rename, fsync the folder), so a reader or a power cut sees the
//! old content or the new one, never half of either.
//!
//! The failure file (SPEC, "The failure file"):
//!
//! ```text
//! archive-missing: the Kubernetes ISO on /dev/sr0 (label CDROM) has no etcd/etcd-linux-amd64.tar.gz; …
//! cause: …                       (one line per error in the chain, outermost first; a
//!                                 cause of several lines gives one `cause:` line each)
//! agent: etcd-setup 0.1.0 (3f2a9c1d0e4b)
//! time: 2026-05-01T12:34:56Z
//! host: etcd-1
//! note: …                        (only when the owner could not be applied)
//! ```
//!
//! The state is `state.json` in `/run/etcd-setup` (live, gone at reboot) and in
//! `/var/lib/etcd-setup` (survives the reboot); see [`State`].

mod atomic;
mod backup;
mod failure;
mod operation;
mod record;
mod reporter;
mod snapshot;
mod state;
mod time;

pub use atomic::atomic_write;
pub use backup::{
    backup_record_path, read_backup_record, record_upload, record_upload_failure,
    record_verification, BackupFailure, BackupRecord, BackupSeen, BackupUpload, BackupVerification,
    Stamp, UploadChecked, BACKUP_RECORD,
};
pub use failure::{clear_failure, write_failure};
pub use operation::{
    read_operation, remove_own_operation, start_time, Command, Operation, OperationGuard, Process,
    OPERATION_FILE,
};
pub(crate) use record::open_flags as record_open_flags;
pub use record::{read_json_record, read_record, RecordError};
pub use reporter::{Reporter, SharedReporter};
pub use snapshot::{
    read_snapshot_record, record_snapshot, record_snapshot_failure, record_snapshot_kept,
    snapshot_record_path, SnapshotFailure, SnapshotRecord, SnapshotTaken, SNAPSHOT_RECORD,
};
pub use state::{
    Loaded, Phase, PhaseStamp, Reason, State, StateStore, Unreadable, UpgradePhase, UpgradeRecord,
};
pub use time::{file_stamp, file_stamp_ms, rfc3339};

/// The live state folder, emptied at every boot.
pub const RUN_DIR: &str = "/run/etcd-setup";
/// The persistent state folder, kept across reboots.
pub const PERSIST_DIR: &str = "/var/lib/etcd-setup";
/// The state file's name in both folders.
pub const STATE_FILE: &str = "state.json";
/// The version of [`State`]'s JSON this agent writes and reads.
pub const SCHEMA_VERSION: u32 = 1;
/// Mode of the failure file and the state files: the `cloud` user and `status` read them.
pub(crate) const FILE_MODE: u32 = 0o644;
/// Mode of folders this module creates.
pub(crate) const DIR_MODE: u32 = 0o755;
/// The largest state file read; real ones are about 1 KiB.
pub(crate) const MAX_STATE: u64 = 1 << 20;

#[cfg(test)]
mod tests;
