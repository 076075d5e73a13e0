//! The failure file the platform reads over SSH: `code: sentence`, then the detail.

use super::atomic::atomic_write;
use super::time::rfc3339;
use super::{DIR_MODE, FILE_MODE};
use crate::reason::Failure;
use crate::shared::printable;
use nix::unistd::{geteuid, gethostname, User};
use std::fs::{self};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::time::SystemTime;

/// Writes the failure file at `path`, owned by the user `owner`, mode 0644: the headline
/// `code: sentence` on the first line, then
/// the error chain (a `cause:` line for each line of each cause), the agent version, the
/// time and the host, one detail a line. Every line is [`printable::line`]: a label or a
/// name from the disc cannot add a line, start another field or colour one.
///
/// The reason is always written, whatever happens to the owner: an unknown user, or a
/// `chown` the system refuses, leaves the file owned by the writer with a `note:` line
/// saying so. A missing parent folder (the user's home not made yet) is created, owned by
/// the user when known, mode 0755.
pub fn write_failure(
    path: &Path,
    owner: &str,
    failure: &Failure,
    now: SystemTime,
) -> io::Result<()> {
    let mut notes = Vec::new();
    let ids = match User::from_name(owner) {
        Ok(Some(user)) => Some((user.uid.as_raw(), user.gid.as_raw())),
        Ok(None) => {
            notes.push(format!(
                "user {owner:?} does not exist; this file is owned by uid {}",
                geteuid()
            ));
            None
        }
        Err(e) => {
            notes.push(format!(
                "cannot look up user {owner:?} ({e}); this file is owned by uid {}",
                geteuid()
            ));
            None
        }
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(parent)?;
            if let Some((uid, gid)) = ids {
                // Only the last folder is the user's; any above it stay root's.
                let _ = std::os::unix::fs::chown(parent, Some(uid), Some(gid));
            }
        }
    }
    let text = failure_text(failure, now, &notes);
    match atomic_write(path, text.as_bytes(), FILE_MODE, ids) {
        Err(e) if ids.is_some() && e.kind() == io::ErrorKind::PermissionDenied => {
            notes.push(format!(
                "cannot give this file to user {owner:?} ({e}); it is owned by uid {}",
                geteuid()
            ));
            let text = failure_text(failure, now, &notes);
            atomic_write(path, text.as_bytes(), FILE_MODE, None)
        }
        other => other,
    }
}

/// The failure file's content.
fn failure_text(failure: &Failure, now: SystemTime, notes: &[String]) -> String {
    let mut text = format!("{}: {}\n", failure.code, printable::line(&failure.message));
    if let Some(source) = &failure.source {
        for cause in source.chain() {
            // A cause of several lines (etcd's journal lines) keeps them: a `cause:`
            // line each, so none can pass for the headline or another field.
            for line in cause.to_string().lines() {
                text.push_str(&format!("cause: {}\n", printable::line(line)));
            }
        }
    }
    text.push_str(&format!("agent: etcd-setup {}\n", crate::VERSION));
    text.push_str(&format!("time: {}\n", rfc3339(now)));
    text.push_str(&format!("host: {}\n", printable::line(&hostname())));
    for note in notes {
        text.push_str(&format!("note: {}\n", printable::line(note)));
    }
    text
}

/// Removes the failure file; one that is absent already is fine.
pub fn clear_failure(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

pub(super) fn hostname() -> String {
    gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_string())
}
