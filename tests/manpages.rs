//! The man pages and bash completion that packaging/build-deb ships, generated from the
//! clap definition by examples/gen-docs (the same code, included here), rendered with
//! man(1) as an operator reads them.

#[path = "../examples/gen-docs/pages.rs"]
mod pages;

use etcd_setup::exit;
use etcd_setup::reason::ReasonCode;
use std::io::Write;
use std::process::Command;

fn generated() -> Vec<pages::Page> {
    let readme = include_str!("../README.md");
    pages::man_pages(readme).expect("man pages")
}

/// A page as `man` shows it, one line per paragraph (wide enough never to wrap).
fn rendered(page: &pages::Page) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(&page.file);
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(page.roff.as_bytes()))
        .unwrap();
    let out = Command::new("man")
        .args(["--warnings", "-l", "-P", "cat"])
        .arg(&path)
        .env("MANWIDTH", "400")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .expect("run man (apt install man-db)");
    assert!(
        out.status.success(),
        "man -l {}: {}",
        page.file,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "groff warns about {}: {}",
        page.file,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The paragraphs of section `heading`, whitespace-normalised.
fn section(text: &str, heading: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    assert!(lines.next().is_some(), "no {heading} section in:\n{text}");
    lines
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

/// Whether a tagged paragraph for `tag` is in `lines`, with its text: man puts a short tag
/// and its text on one line, a long one on a line of its own.
fn lists(lines: &[String], tag: &str) -> bool {
    lines.iter().enumerate().any(|(i, l)| {
        l.strip_prefix(tag)
            .is_some_and(|rest| rest.starts_with(' '))
            || (l == tag && lines.get(i + 1).is_some_and(|t| t.len() > 10))
    })
}

/// `code meaning` as the page shows a table row.
fn row(code: &exit::Code) -> String {
    format!("{} {}", code.value, code.meaning.replace('`', ""))
}

/// The subcommands `--help` shows, in its order.
fn visible_subcommands() -> Vec<String> {
    use clap::CommandFactory;
    etcd_setup::cli::Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .collect()
}

#[test]
fn there_is_a_page_for_the_tool_and_each_subcommand() {
    let files: Vec<String> = generated().into_iter().map(|p| p.file).collect();
    let mut want = vec!["etcd-setup.8".to_string()];
    want.extend(
        visible_subcommands()
            .iter()
            .map(|s| format!("etcd-setup-{s}.8")),
    );
    assert_eq!(files, want);
    for core in ["run", "check", "status"] {
        assert!(files.contains(&format!("etcd-setup-{core}.8")), "{files:?}");
    }
}

#[test]
fn every_subcommand_page_lists_its_exit_codes_and_every_reason_code() {
    for page in generated().iter().skip(1) {
        let text = rendered(page);
        let command = page
            .file
            .trim_start_matches("etcd-setup-")
            .trim_end_matches(".8");
        let table = exit::ALL.iter().find(|t| t.command == command).unwrap();
        let rows = section(&text, "EXIT STATUS");
        let want: Vec<String> = table.codes.iter().map(row).collect();
        assert_eq!(rows, want, "{}", page.file);
        let reasons = section(&text, "REASON CODES");
        for code in ReasonCode::ALL {
            assert!(
                lists(&reasons, code.as_str()),
                "{}: no {code:?}: {reasons:?}",
                page.file
            );
        }
        assert!(text.contains(&format!("etcd-setup {command}")), "{text}");
    }
}

#[test]
fn the_main_page_lists_every_commands_exit_codes_and_every_reason_code() {
    let text = rendered(&generated()[0]);
    let rows = section(&text, "EXIT STATUS");
    for table in exit::ALL {
        let at = rows
            .iter()
            .position(|l| *l == format!("etcd-setup {}", table.command))
            .unwrap_or_else(|| panic!("no table for {}: {rows:?}", table.command));
        let want: Vec<String> = table.codes.iter().map(row).collect();
        assert_eq!(
            rows[at + 1..at + 1 + want.len()],
            want[..],
            "{}",
            table.command
        );
    }
    let reasons = section(&text, "REASON CODES");
    for code in ReasonCode::ALL {
        assert!(lists(&reasons, code.as_str()), "no {code:?}: {reasons:?}");
    }
    for sub in visible_subcommands() {
        let page = format!("etcd-setup-{sub}(8)");
        assert!(text.contains(&page), "{page} not referenced:\n{text}");
    }
}

#[test]
fn bash_completion_knows_every_subcommand_and_option() {
    let script = pages::bash_completion();
    for word in [
        "run",
        "check",
        "status",
        "--lock-timeout",
        "--archive-path",
        "--wait",
        "--format",
    ] {
        assert!(script.contains(word), "completion lacks {word}");
    }
    let out = Command::new("bash")
        .args(["-n", "-c", &script])
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
