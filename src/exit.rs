//! Exit codes of every command: a contract once released (SPEC, "Commands").
//!
//! This module is their one home. The code uses the constants; `--help` prints
//! [`Table::help`]; the README's tables are [`Table::markdown`], and a test keeps the
//! README in step with them.

/// The command line is wrong: clap's own exit code, the same for every command.
pub const USAGE: u8 = 2;

/// Exit codes of `etcd-setup run`.
pub mod run {
    /// etcd is installed, enabled, active and healthy.
    pub const OK: u8 = 0;
    /// The run failed; the reason is in the failure file.
    pub const FAILED: u8 = 1;
    /// The configuration file is missing or invalid (`config-invalid`).
    pub const CONFIG: u8 = 3;
    /// Stopped by a signal (`interrupted`).
    pub const INTERRUPTED: u8 = 4;
    /// Another run held the lock past the wait (`locked`).
    pub const LOCKED: u8 = 5;
    /// The node left its cluster (`etcd-setup leave`); nothing was done.
    pub const LEFT: u8 = 6;
}

/// Exit codes of `etcd-setup leave`.
pub mod leave {
    /// The member was removed (or was no member already); etcd is stopped and disabled,
    /// its data dir moved aside.
    pub const OK: u8 = 0;
    /// Refused or failed; the reason is printed and the cluster is as it was.
    pub const FAILED: u8 = 1;
    /// The configuration file is missing or invalid.
    pub const CONFIG: u8 = 3;
    /// Stopped by a signal before it touched the cluster (`interrupted`).
    pub const INTERRUPTED: u8 = 4;
    /// A run or another leave held the lock past --lock-timeout.
    pub const LOCKED: u8 = 5;
}

/// Exit codes of `etcd-setup upgrade`.
pub mod upgrade {
    /// This member runs the new release (or ran it already: nothing to do).
    pub const OK: u8 = 0;
    /// The upgrade failed (rolled back, or the rollback failed); the reason is printed.
    pub const FAILED: u8 = 1;
    /// The configuration file is missing or invalid.
    pub const CONFIG: u8 = 3;
    /// Stopped by a signal at a safe point (`interrupted`): before etcd was stopped, or
    /// after it ran again.
    pub const INTERRUPTED: u8 = 4;
    /// A run of etcd-setup, or the cluster lock, was not free in time.
    pub const LOCKED: u8 = 5;
    /// Refused by a rule (downgrade, too far, two members, unhealthy, another upgrade
    /// half done, known-bad release); nothing was changed.
    pub const REFUSED: u8 = 6;
}

/// Exit codes of `etcd-setup rotate-ca`.
pub mod rotate_ca {
    /// etcd was restarted on the bundles on disk and is healthy.
    pub const OK: u8 = 0;
    /// The restart failed (etcd did not come up healthy); the reason is printed.
    pub const FAILED: u8 = 1;
    /// The configuration file is missing or invalid, or `[tls]` is off.
    pub const CONFIG: u8 = 3;
    /// Stopped by a signal before etcd was stopped, or once it ran again (`interrupted`).
    pub const INTERRUPTED: u8 = 4;
    /// A run of etcd-setup, or the cluster lock, was not free in time.
    pub const LOCKED: u8 = 5;
    /// Refused: a bundle does not trust a certificate (`cert-untrusted`), or a member is
    /// unhealthy or too few are left (`cluster-unhealthy`); etcd was not touched.
    pub const REFUSED: u8 = 6;
}

/// Exit codes of `etcd-setup check`.
pub mod check {
    /// Every path holds a valid etcd release for this machine.
    pub const OK: u8 = 0;
    /// At least one path failed.
    pub const FAILED: u8 = 1;
}

/// Exit codes of `etcd-setup status`.
pub mod status {
    /// etcd runs and is healthy.
    pub const RUNNING: u8 = 0;
    /// The run failed, or etcd stopped or is unhealthy since; the reason is printed.
    pub const FAILED: u8 = 1;
    /// A run is in progress (not finished yet).
    pub const IN_PROGRESS: u8 = 3;
    /// No run has started on this node yet.
    pub const NOT_STARTED: u8 = 4;
    /// The status socket cannot be reached, or the server refused the request.
    pub const UNREACHABLE: u8 = 5;
    /// The state file exists but cannot be read (`state-unreadable`): the file is named.
    pub const UNREADABLE: u8 = 6;
    /// This member left its cluster (`etcd-setup leave`).
    pub const LEFT: u8 = 7;
}

/// Exit codes of `etcd-setup snapshot`, `restore` and `maintain`, the commands that act on
/// etcd's data.
pub mod data {
    /// Done (or, for `maintain`, nothing needed doing).
    pub const OK: u8 = 0;
    /// Failed; the reason line is printed (`code: sentence`).
    pub const FAILED: u8 = 1;
    /// The configuration file is missing or invalid (`config-invalid`).
    pub const CONFIG: u8 = 3;
    /// A member is unhealthy or unreachable: nothing was done (`cluster-unhealthy`).
    pub const UNHEALTHY: u8 = 4;
    /// Another node's maintenance held the cluster lock past `maintain.lock_wait`, or (for
    /// `restore`) a run of etcd-setup held the node's lock past --lock-timeout.
    pub const LOCKED: u8 = 5;
}

/// Exit codes of `etcd-setup backups` (`list`, `verify`).
pub mod backups {
    /// Listed; or (`verify`) the backup was fetched, decrypted and proven by a trial
    /// restore; or (`verify --if-configured`) this node cannot verify, and said why.
    pub const OK: u8 = 0;
    /// The bucket could not be asked (the store's `backup-*` codes), no such backup, a
    /// backup of another cluster (`cluster-mismatch`), or the node could not do its part
    /// (disk-full); the reason is printed.
    pub const FAILED: u8 = 1;
    /// The configuration file is missing or invalid, has no `[backup]`, or no identity
    /// is named for an encrypted backup.
    pub const CONFIG: u8 = 3;
    /// Stopped by a signal (`interrupted`); the scratch copy is removed.
    pub const INTERRUPTED: u8 = 4;
    /// `verify`: the backup is not proven: corrupt, truncated, not for this identity, or
    /// its trial restore failed.
    pub const UNPROVEN: u8 = 6;
}

/// The exit code of a day-2 command that failed with `reason`: the one mapping from
/// reason codes to exit codes (`run` records its reason and returns its codes itself).
pub fn of(command: crate::shared::report::Command, reason: crate::reason::ReasonCode) -> u8 {
    use crate::reason::ReasonCode as R;
    use crate::shared::report::Command as C;
    match (command, reason) {
        (_, R::ConfigInvalid) => data::CONFIG, // 3 for every command
        (C::Leave, R::Interrupted) => leave::INTERRUPTED,
        (C::Leave, R::Locked) => leave::LOCKED,
        (C::Leave, _) => leave::FAILED,
        (C::Upgrade, R::Interrupted) => upgrade::INTERRUPTED,
        (C::Upgrade, R::Locked) => upgrade::LOCKED,
        (
            C::Upgrade,
            R::UpgradeDowngrade
            | R::UpgradeTooFar
            | R::UpgradeBelowMinimum
            | R::UpgradeTwoMembers
            | R::UpgradeUnhealthy
            | R::UpgradeInProgress
            | R::KnownBadRelease,
        ) => upgrade::REFUSED,
        (C::Upgrade, _) => upgrade::FAILED,
        (C::RotateCa, R::Interrupted) => rotate_ca::INTERRUPTED,
        (C::RotateCa, R::Locked) => rotate_ca::LOCKED,
        (C::RotateCa, R::CertUntrusted | R::ClusterUnhealthy) => rotate_ca::REFUSED,
        (C::RotateCa, _) => rotate_ca::FAILED,
        (C::Maintain, R::ClusterUnhealthy) => data::UNHEALTHY,
        (C::Backups, R::Interrupted) => backups::INTERRUPTED,
        (
            C::Backups,
            R::BackupCorrupt | R::BackupTruncated | R::BackupDecryptFailed | R::BackupVerifyFailed,
        ) => backups::UNPROVEN,
        (C::Backups, _) => backups::FAILED,
        (C::Snapshot | C::Restore | C::Maintain, R::Locked) => data::LOCKED,
        (C::Snapshot | C::Restore | C::Maintain, _) => data::FAILED,
    }
}

/// Exit codes of the hidden `etcd-setup serve-status` (systemd reads them, not people).
pub mod serve {
    /// Served until idle.
    pub const OK: u8 = 0;
    /// Could not take or bind the socket, or the loop failed.
    pub const FAILED: u8 = 1;
}

/// One exit code and what it means.
#[derive(Debug, Clone, Copy)]
pub struct Code {
    /// The process's exit status.
    pub value: u8,
    /// One line: what the caller may conclude.
    pub meaning: &'static str,
}

/// The exit codes of one command.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// The subcommand, e.g. `run`.
    pub command: &'static str,
    /// Its codes, in increasing order.
    pub codes: &'static [Code],
}

const fn code(value: u8, meaning: &'static str) -> Code {
    Code { value, meaning }
}

/// `etcd-setup run`.
pub const RUN: Table = Table {
    command: "run",
    codes: &[
        code(run::OK, "etcd is installed, enabled, active and healthy"),
        code(
            run::FAILED,
            "the run failed; the reason is in the failure file (first line `code: sentence`)",
        ),
        code(USAGE, "the command line is wrong"),
        code(
            run::CONFIG,
            "the configuration file is missing or invalid (config-invalid)",
        ),
        code(
            run::INTERRUPTED,
            "the run was stopped by a signal (interrupted)",
        ),
        code(
            run::LOCKED,
            "another run held the lock past --lock-timeout (locked; nothing recorded: the other run reports)",
        ),
        code(
            run::LEFT,
            "this node left its cluster with `etcd-setup leave`; nothing was done (`--rejoin` joins it again)",
        ),
    ],
};

/// `etcd-setup leave`.
pub const LEAVE: Table = Table {
    command: "leave",
    codes: &[
        code(
            leave::OK,
            "this member was removed from its cluster (or was no member any more); etcd is stopped and disabled, its data dir moved aside",
        ),
        code(
            leave::FAILED,
            "refused (quorum guard, last member) or failed; the reason is printed (`code: sentence`) and the cluster is as it was",
        ),
        code(USAGE, "the command line is wrong"),
        code(leave::CONFIG, "the configuration file is missing or invalid"),
        code(
            leave::INTERRUPTED,
            "stopped by a signal before it touched the cluster (interrupted); the cluster is as it was",
        ),
        code(
            leave::LOCKED,
            "a run of etcd-setup held the lock past --lock-timeout",
        ),
    ],
};

/// `etcd-setup upgrade`.
pub const UPGRADE: Table = Table {
    command: "upgrade",
    codes: &[
        code(
            upgrade::OK,
            "this member runs the release of the attached ISO, confirmed healthy (or ran it already: nothing to do)",
        ),
        code(
            upgrade::FAILED,
            "the upgrade failed: the new etcd did not come up and the old one was put back (upgrade-rolled-back), or worse; the reason is printed",
        ),
        code(USAGE, "the command line is wrong"),
        code(upgrade::CONFIG, "the configuration file is missing or invalid"),
        code(
            upgrade::INTERRUPTED,
            "stopped by a signal (interrupted) before etcd was stopped, or once it ran again (new or rolled back)",
        ),
        code(
            upgrade::LOCKED,
            "a run of etcd-setup held the node's lock past --lock-timeout, or the cluster lock was not ours within --lock-wait (held by another, or not granted by etcd)",
        ),
        code(
            upgrade::REFUSED,
            "refused by a rule (upgrade-downgrade, upgrade-too-far, upgrade-below-minimum, upgrade-two-members, upgrade-unhealthy, upgrade-in-progress, known-bad-release); nothing was changed",
        ),
    ],
};

/// `etcd-setup check`.
pub const CHECK: Table = Table {
    command: "check",
    codes: &[
        code(
            check::OK,
            "every PATH holds a valid etcd release for this machine",
        ),
        code(
            check::FAILED,
            "at least one PATH failed; its reason code and sentence are printed",
        ),
        code(USAGE, "the command line is wrong"),
    ],
};

/// `etcd-setup status`.
pub const STATUS: Table = Table {
    command: "status",
    codes: &[
        code(status::RUNNING, "etcd is running and healthy"),
        code(
            status::FAILED,
            "failed: the run failed, was interrupted, or etcd stopped or is unhealthy since; the reason is printed (`code: sentence`)",
        ),
        code(USAGE, "the command line is wrong"),
        code(
            status::IN_PROGRESS,
            "a run is in progress (not finished yet; also when --wait ran out)",
        ),
        code(status::NOT_STARTED, "not started: no run has begun on this node"),
        code(
            status::UNREACHABLE,
            "the status socket cannot be reached, or the server refused the request (not in the group, busy)",
        ),
        code(
            status::UNREADABLE,
            "unreadable: the state file exists but cannot be read (corrupt, not a regular file, a later schema); the file is named",
        ),
        code(
            status::LEFT,
            "left: this member left its cluster with `etcd-setup leave`",
        ),
    ],
};

/// `etcd-setup snapshot`.
pub const SNAPSHOT: Table = Table {
    command: "snapshot",
    codes: &[
        code(
            data::OK,
            "a snapshot was written, verified and recorded; its file is printed",
        ),
        code(
            data::FAILED,
            "no snapshot was kept (snapshot-failed, snapshot-corrupt, disk-full), or it was kept and recorded but its copy into snapshot.copy_dir or its upload to [backup] failed (backup-denied, backup-unreachable, ...); the reason is printed and recorded for status",
        ),
        code(USAGE, "the command line is wrong"),
        code(
            data::CONFIG,
            "the configuration file is missing or invalid, or a snapshot folder is not root's or is writable by others (config-invalid)",
        ),
        code(
            data::LOCKED,
            "another snapshot on this node held snapshot.lock past snapshot.timeout plus 5 minutes (locked)",
        ),
    ],
};

/// `etcd-setup restore`.
pub const RESTORE: Table = Table {
    command: "restore",
    codes: &[
        code(
            data::OK,
            "this node runs a new one-member cluster from the snapshot; the old data dir is printed",
        ),
        code(
            data::FAILED,
            "not restored (snapshot-corrupt, cluster-mismatch, restore-failed, etcd-start-failed, systemd-failed, disk-full, interrupted before etcd was stopped; with --from-backup also backup-not-found, backup-corrupt, backup-truncated, backup-decrypt-failed, backup-verify-failed and the store's backup-* codes, before etcd was stopped); the reason is printed",
        ),
        code(USAGE, "the command line is wrong"),
        code(
            data::CONFIG,
            "the configuration file is missing or invalid (config-invalid)",
        ),
        code(
            data::LOCKED,
            "a run of etcd-setup (or another restore, leave, upgrade) held the node's lock past --lock-timeout (locked); nothing was done",
        ),
    ],
};

/// `etcd-setup maintain`.
pub const MAINTAIN: Table = Table {
    command: "maintain",
    codes: &[
        code(
            data::OK,
            "every member needing it was defragmented and a NOSPACE alarm recovered, or nothing needed doing",
        ),
        code(
            data::FAILED,
            "a step failed (maintain-failed, or etcd-nospace when space did not come back); the reason is printed",
        ),
        code(USAGE, "the command line is wrong"),
        code(
            data::CONFIG,
            "the configuration file is missing or invalid (config-invalid)",
        ),
        code(
            data::UNHEALTHY,
            "a member is unhealthy or unreachable, so nothing was done (cluster-unhealthy)",
        ),
        code(
            data::LOCKED,
            "another node's maintenance held the lock past maintain.lock_wait (locked)",
        ),
    ],
};

/// `etcd-setup rotate-ca`.
pub const ROTATE_CA: Table = Table {
    command: "rotate-ca",
    codes: &[
        code(
            rotate_ca::OK,
            "this member's etcd was restarted on the trust bundles on disk and is healthy",
        ),
        code(
            rotate_ca::FAILED,
            "etcd did not come up healthy after the restart; the reason is printed",
        ),
        code(USAGE, "the command line is wrong"),
        code(
            rotate_ca::CONFIG,
            "the configuration file is missing or invalid, or [tls] is off (config-invalid)",
        ),
        code(
            rotate_ca::INTERRUPTED,
            "stopped by a signal (interrupted) before etcd was stopped, or once it ran again",
        ),
        code(
            rotate_ca::LOCKED,
            "a run of etcd-setup held the node's lock past --lock-timeout, or the cluster lock was not ours within --lock-wait (held by another, or not granted by etcd)",
        ),
        code(
            rotate_ca::REFUSED,
            "refused (cert-untrusted: a bundle lacks a CA needed; cluster-unhealthy); etcd was not touched",
        ),
    ],
};

/// `etcd-setup backups`.
pub const BACKUPS: Table = Table {
    command: "backups",
    codes: &[
        code(
            backups::OK,
            "listed (`list`), or the backup was fetched, decrypted, checked against its metadata and restored on trial (`verify`), or `verify --if-configured` found no [backup] or no identity for encrypted backups and printed why nothing was verified",
        ),
        code(
            backups::FAILED,
            "the bucket could not be asked (backup-unreachable, backup-tls-refused, backup-denied, backup-bucket-missing, backup-clock-skew, backup-failed), no such backup (backup-not-found), a backup that is another cluster's by its metadata or its content (cluster-mismatch), or disk-full; the reason is printed",
        ),
        code(USAGE, "the command line is wrong"),
        code(
            backups::CONFIG,
            "the configuration file is missing or invalid, has no [backup], or no identity is named for an encrypted backup (config-invalid)",
        ),
        code(
            backups::INTERRUPTED,
            "stopped by a signal (interrupted); the scratch copy is removed",
        ),
        code(
            backups::UNPROVEN,
            "`verify`: the backup is not proven (backup-corrupt, backup-truncated, backup-decrypt-failed, backup-verify-failed)",
        ),
    ],
};

/// Every command's table, in the README's order.
pub const ALL: &[Table] = &[
    RUN, CHECK, STATUS, LEAVE, SNAPSHOT, RESTORE, MAINTAIN, UPGRADE, ROTATE_CA, BACKUPS,
];

impl Table {
    /// The `--help` epilogue: `Exit codes of `run`:` and one line per code.
    pub fn help(&self) -> String {
        let mut out = format!("Exit codes of `{}`:", self.command);
        for c in self.codes {
            out.push_str(&format!("\n  {}  {}", c.value, c.meaning));
        }
        out
    }

    /// The README's table for this command.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "| `{}` exit code | meaning |\n| --- | --- |\n",
            self.command
        );
        for c in self.codes {
            out.push_str(&format!("| {} | {} |\n", c.value, c.meaning));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code [`of`] gives is in that command's table.
    #[test]
    fn every_reason_maps_to_a_code_of_its_commands_table() {
        use crate::shared::report::Command as C;
        for (cmd, table) in [
            (C::Leave, LEAVE),
            (C::Upgrade, UPGRADE),
            (C::Snapshot, SNAPSHOT),
            (C::Restore, RESTORE),
            (C::Maintain, MAINTAIN),
            (C::RotateCa, ROTATE_CA),
            (C::Backups, BACKUPS),
        ] {
            for reason in crate::reason::ReasonCode::ALL {
                let code = of(cmd, *reason);
                assert!(
                    table.codes.iter().any(|c| c.value == code),
                    "{cmd}: {reason} gives {code}, not in its table"
                );
            }
        }
    }

    /// A lock held past its wait is the table's own "locked" row for every command that
    /// takes one, not its general failure (snapshot's snapshot.lock once gave 1 where its
    /// table says 5). `backups` takes none.
    #[test]
    fn a_lock_held_too_long_gives_the_row_that_says_so() {
        use crate::shared::report::Command as C;
        for (cmd, table) in [
            (C::Leave, LEAVE),
            (C::Upgrade, UPGRADE),
            (C::Snapshot, SNAPSHOT),
            (C::Restore, RESTORE),
            (C::Maintain, MAINTAIN),
            (C::RotateCa, ROTATE_CA),
        ] {
            let code = of(cmd, crate::reason::ReasonCode::Locked);
            let row = table.codes.iter().find(|c| c.value == code);
            assert!(
                row.is_some_and(|r| r.meaning.contains("lock")),
                "{cmd}: locked gives {code}: {row:?}"
            );
        }
    }

    #[test]
    fn codes_are_distinct_and_in_order_in_every_table() {
        for t in ALL {
            let values: Vec<u8> = t.codes.iter().map(|c| c.value).collect();
            let mut sorted = values.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(values, sorted, "{}", t.command);
            assert!(
                values.contains(&USAGE),
                "{} lacks the usage code",
                t.command
            );
        }
    }

    /// The README is where operators read the contract: its tables are these tables.
    #[test]
    fn the_readme_carries_every_table_as_generated() {
        let readme = include_str!("../README.md");
        for t in ALL {
            assert!(
                readme.contains(&t.markdown()),
                "README.md lacks the exit codes of `{}` as generated; paste:\n{}",
                t.command,
                t.markdown()
            );
        }
    }
}
