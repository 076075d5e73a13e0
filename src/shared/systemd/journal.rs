//! The unit's last journal lines, for the detail of a failure; and its new lines as they
//! come, while a start waits ([`follow`]).

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest line [`follow`] hands on; the rest of a longer one is dropped.
const MAX_FOLLOWED_LINE: u64 = 16 * 1024;

/// A `journalctl --follow` of a unit's own output, killed (and reaped) when dropped.
pub struct Follow {
    child: Child,
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Follows what `unit`'s processes log from `since` on (this boot): every line, cut to
/// 16 KiB, goes to `each` on a reader thread until `each` returns false, journalctl ends,
/// or the [`Follow`] is dropped. `None` when journalctl cannot be started (then nothing
/// is followed: a start goes on as before, bounded by its timeout).
///
/// journalctl, as [`journal_tail`]: the journal's files are no stable interface to parse.
/// It dies with the thread that started it (`PR_SET_PDEATHSIG`), so a killed agent
/// leaves no follower behind.
pub fn follow(
    unit: &str,
    since: SystemTime,
    mut each: impl FnMut(String) -> bool + Send + 'static,
) -> Option<Follow> {
    let secs = since.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut cmd = Command::new("journalctl");
    cmd.arg("--boot")
        .arg(format!("_SYSTEMD_UNIT={unit}"))
        .arg(format!("--since=@{secs}"))
        // Every line since then, not the last ten of them, then the new ones.
        .args([
            "--follow",
            "--no-tail",
            "--output",
            "cat",
            "--no-pager",
            "--quiet",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: only the async-signal-safe prctl between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Some(nix::sys::signal::Signal::SIGKILL))
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn().ok()?;
    let stdout = child.stdout.take()?;
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader
                .by_ref()
                .take(MAX_FOLLOWED_LINE)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') {
                // Cut: skip to the end of this line.
                let mut rest = Vec::new();
                if matches!(reader.read_until(b'\n', &mut rest), Ok(0) | Err(_)) {
                    return;
                }
            }
            if !each(String::from_utf8_lossy(&line).trim_end().to_string()) {
                return;
            }
        }
    });
    Some(Follow { child })
}

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
