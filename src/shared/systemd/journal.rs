//! The unit's last journal lines, for the detail of a failure.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The last `lines` lines etcd (or `unit`) logged in this boot, for a failure's detail;
/// empty if the journal cannot be read.
///
/// Runs `journalctl`, the one subprocess of this module: the journal's file format is
/// not a stable interface to parse natively and no small crate reads it. Bounded: lines
/// longer than 500 bytes are cut, and journalctl is killed after 5 seconds.
pub fn journal_tail(unit: &str, lines: usize) -> Vec<String> {
    let child = Command::new("journalctl")
        // The unit's processes' own output (etcd's log), not systemd's messages about the
        // unit, which the unit state already sums up.
        .arg("--boot")
        .arg(format!("_SYSTEMD_UNIT={unit}"))
        .arg("--lines")
        .arg(lines.to_string())
        .args(["--output", "cat", "--no-pager", "--quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return Vec::new();
    };
    let Some(mut stdout) = child.stdout.take() else {
        return Vec::new();
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.by_ref().take(1 << 20).read_to_end(&mut out);
        let _ = tx.send(out);
    });
    let out = rx.recv_timeout(Duration::from_secs(5));
    if out.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    out.map(|bytes| tail_lines(&bytes, lines))
        .unwrap_or_default()
}

/// The last `n` non-empty lines of `bytes`, each cut to 500 bytes (on a char boundary).
pub(super) fn tail_lines(bytes: &[u8], n: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut end = l.len().min(500);
            while !l.is_char_boundary(end) {
                end -= 1;
            }
            l[..end].to_string()
        })
        .collect();
    let skip = lines.len().saturating_sub(n);
    lines.drain(..skip);
    lines
}
