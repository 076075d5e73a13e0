//! Writing to stdout without panicking when the reader is gone.
//!
//! `println!` panics ("failed printing to stdout: Broken pipe", exit 101) once stdout is
//! closed, as in `etcd-setup check A.iso B.iso | head -1`. Every command prints through
//! [`print`] instead: a closed stdout (EPIPE) ends the output quietly, as it does for other
//! Unix tools, and the command still exits with the code its outcome gives. Any other
//! write error is said once on stderr; later output is dropped.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once stdout cannot be written any more.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout and flushes it; nothing once stdout is closed.
pub fn print(text: &str) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("etcd-setup: cannot write to stdout: {e}");
        }
    }
}

/// Prints `text` as one line ([`crate::shared::printable::line`]: nothing that could
/// forge another line or a terminal sequence) through [`print`].
pub fn line(text: &str) {
    print(&format!("{}\n", crate::shared::printable::line(text)));
}

/// Whether stdout was found closed (or failing): further output is dropped.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}
