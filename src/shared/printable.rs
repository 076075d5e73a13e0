//! Text from outside made safe to print: the one home of output escaping.
//!
//! A volume label, a file name on a disc, a line of etcd's journal or a state file that
//! someone edited may hold a newline, a carriage return or a terminal escape sequence.
//! Printed raw, it forges a second `check` line, rewrites the failure file's first line
//! (which the platform reads as `code: sentence`) or recolours an operator's terminal.
//! Every output boundary that shows such text (check's text lines, the failure file, the
//! journal lines of the reporter, `status`'s text) passes it through [`line`]; JSON does
//! not: it keeps the exact value, which serde escapes as JSON does.
//!
//! What is escaped: C0 controls (newline, tab and ESC included) and DEL as `\n`, `\r`,
//! `\t` or `\xNN`; C1 controls (U+0080–U+009F, among them the one-character CSI U+009B),
//! the Unicode line and paragraph separators and the bidirectional overrides, which
//! reorder what a terminal shows, as `\u{NNNN}`. Everything else, non-ASCII letters
//! included, is kept. Backslashes are kept too: an escape never ends a line, so text
//! that looks like one cannot forge anything.

use std::fmt::Write;

/// Whether `c` is escaped by [`line`].
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` as one printable line: every character [`is_unsafe`] says is unsafe escaped.
pub fn line(text: &str) -> String {
    if !text.chars().any(is_unsafe) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// [`line`] of a path as shown (`Path::display`, lossy for bytes that are not UTF-8).
pub fn path(p: &std::path::Path) -> String {
    line(&p.display().to_string())
}

/// A failure as a command prints it on stderr, one shape for every command: the reason
/// line `code: sentence` (the failure file's first line), then one `cause: …` line per
/// error of its chain, each [`line`].
pub fn failure(f: &crate::reason::Failure) -> Vec<String> {
    let mut out = vec![line(&f.headline())];
    if let Some(src) = &f.source {
        for cause in src.chain() {
            out.push(line(&format!("cause: {cause}")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newlines_escapes_and_c1_controls_are_escaped_and_the_rest_is_kept() {
        assert_eq!(line("plain CDROM é"), "plain CDROM é");
        assert_eq!(line("a\nb"), "a\\nb");
        assert_eq!(line("a\r\n\tb"), "a\\r\\n\\tb");
        assert_eq!(line("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
        assert_eq!(line("del\x7f nul\0"), "del\\x7f nul\\x00");
        assert_eq!(line("csi\u{9b}31m"), "csi\\u{009b}31m");
        assert_eq!(line("rtl\u{202e}txt"), "rtl\\u{202e}txt");
        assert_eq!(line("sep\u{2028}x"), "sep\\u{2028}x");
        assert!(!line("x\n\x1b\u{85}").chars().any(is_unsafe));
    }

    #[test]
    fn a_failure_is_its_reason_line_then_its_causes() {
        use crate::reason::{Failure, ReasonCode};
        let f = Failure::new(ReasonCode::LeaveFailed, "cannot move\nit")
            .with_source(anyhow::anyhow!("inner").context("outer"));
        assert_eq!(
            failure(&f),
            [
                "leave-failed: cannot move\\nit",
                "cause: outer",
                "cause: inner"
            ]
        );
    }
}
