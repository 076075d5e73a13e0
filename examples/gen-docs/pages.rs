//! The man pages and the bash completion, made from the clap definition
//! (`etcd_setup::cli::Cli`), the exit-code tables (`etcd_setup::exit`) and the README's
//! reason-code table, so none of them can drift from the binary. Shared by the
//! `gen-docs` example (what packaging/build-deb runs) and tests/manpages.rs.
#![allow(dead_code)]

use clap::CommandFactory;
use etcd_setup::cli::Cli;
use etcd_setup::exit::{self, Table};
use etcd_setup::reason::ReasonCode;
use roff::{bold, roman, Roff};

/// One man page: its file name (`etcd-setup-run.8`) and its roff source.
pub struct Page {
    /// File name, with the section as extension.
    pub file: String,
    /// The roff source.
    pub roff: String,
}

/// One row of the README's reason-code table.
struct Reason {
    code: String,
    cause: String,
    action: String,
}

/// The rows of the README's `## Reason codes` table; every code the agent knows must be
/// there, and nothing else.
fn reasons(readme: &str) -> Result<Vec<Reason>, String> {
    let section = readme
        .split("\n## Reason codes\n")
        .nth(1)
        .ok_or("README.md has no `## Reason codes` section")?;
    let mut rows = Vec::new();
    for line in section.lines().take_while(|l| !l.starts_with("## ")) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").collect();
        let [code, cause, action] = cells[..] else {
            continue;
        };
        let Some(code) = code
            .trim()
            .strip_prefix('`')
            .and_then(|c| c.strip_suffix('`'))
        else {
            continue;
        };
        rows.push(Reason {
            code: code.to_string(),
            cause: plain(cause),
            action: plain(action),
        });
    }
    let known: Vec<&str> = ReasonCode::ALL.iter().map(|c| c.as_str()).collect();
    let listed: Vec<&str> = rows.iter().map(|r| r.code.as_str()).collect();
    if known != listed {
        return Err(format!(
            "README.md's reason table lists {listed:?}, the agent has {known:?}"
        ));
    }
    Ok(rows)
}

/// Markdown cell text as plain text (code spans lose their backticks).
fn plain(cell: &str) -> String {
    cell.trim().replace('`', "")
}

/// One of clap_mangen's section renderers.
type Section = fn(&clap_mangen::Man, &mut dyn std::io::Write) -> std::io::Result<()>;

/// Renders clap_mangen's sections we keep, without the roff preamble repeated per call.
fn clap_sections(man: &clap_mangen::Man, with_subcommands: bool) -> String {
    let mut sections: Vec<Section> = vec![
        clap_mangen::Man::render_title,
        clap_mangen::Man::render_name_section,
        clap_mangen::Man::render_synopsis_section,
        clap_mangen::Man::render_description_section,
        clap_mangen::Man::render_options_section,
    ];
    if with_subcommands {
        sections.push(clap_mangen::Man::render_subcommands_section);
    }
    let mut text = String::new();
    for (i, render) in sections.iter().enumerate() {
        let mut out = Vec::new();
        render(man, &mut out).expect("rendering into memory");
        let part = String::from_utf8(out).expect("roff is UTF-8");
        // Each call starts with roff's apostrophe preamble; keep the first only.
        if i == 0 {
            text.push_str(&part);
        } else {
            for line in part
                .lines()
                .filter(|l| !l.starts_with(".ie \\n(.g .ds Aq") && !l.starts_with(".el .ds Aq"))
            {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    text
}

/// The EXIT STATUS section for one command's table.
fn exit_status(roff: &mut Roff, table: &Table, heading: bool) {
    if heading {
        roff.control("SH", ["EXIT STATUS"]);
    } else {
        roff.control("SS", [format!("etcd-setup {}", table.command).as_str()]);
    }
    for code in table.codes {
        roff.control("TP", []);
        roff.text([bold(code.value.to_string())]);
        roff.text([roman(plain(code.meaning))]);
    }
}

fn reason_codes(roff: &mut Roff, reasons: &[Reason]) {
    roff.control("SH", ["REASON CODES"]);
    roff.text([roman(
        "The first line of the failure file, and the reason etcd-setup status \
         prints, is code: sentence. The codes are a stable contract:",
    )]);
    for r in reasons {
        roff.control("TP", []);
        roff.text([bold(r.code.as_str())]);
        roff.text([roman(format!("{}; {}.", r.cause, r.action))]);
    }
}

fn files(roff: &mut Roff) {
    roff.control("SH", ["FILES"]);
    for (path, what) in [
        ("/etc/etcd-setup/config.toml", "the node's configuration, written by cloud-init; example in /usr/share/doc/etcd-setup/examples/config.toml"),
        ("/home/cloud/etcd-setup-failed", "the failure file (configurable): reason code, sentence, detail"),
        ("/run/etcd-setup/", "live state, lock and the status socket status.sock"),
        ("/var/lib/etcd-setup/", "the persistent copy of the state, read after a reboot"),
        ("/etc/systemd/system/etcd.service", "etcd's unit, written by etcd-setup run"),
        ("/usr/share/doc/etcd-setup/README.md", "the full documentation"),
    ] {
        roff.control("TP", []);
        roff.text([bold(path)]);
        roff.text([roman(what)]);
    }
}

fn see_also(roff: &mut Roff, pages: &[&str]) {
    roff.control("SH", ["SEE ALSO"]);
    let list: Vec<String> = pages.iter().map(|p| format!("{p}(8)")).collect();
    roff.text([roman(format!(
        "{}, systemctl(1), journalctl(1), /usr/share/doc/etcd-setup/README.md",
        list.join(", ")
    ))]);
}

/// Every man page: etcd-setup(8) and one per visible subcommand.
pub fn man_pages(readme: &str) -> Result<Vec<Page>, String> {
    let reasons = reasons(readme)?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let version = env!("CARGO_PKG_VERSION");
    let subcommands: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let names: Vec<String> = subcommands
        .iter()
        .map(|s| format!("etcd-setup-{}", s.get_name()))
        .collect();
    let mut pages = Vec::new();

    let man = clap_mangen::Man::new(cmd.clone())
        .section("8")
        .source(format!("etcd-setup {version}"))
        .manual("System Administration");
    let mut text = clap_sections(&man, true);
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    roff.text([roman(
        "Each command has its own exit codes; see its page. In short:",
    )]);
    for table in exit::ALL {
        exit_status(&mut roff, table, false);
    }
    reason_codes(&mut roff, &reasons);
    files(&mut roff);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    see_also(&mut roff, &refs);
    text.push_str(&roff.to_roff());
    pages.push(Page {
        file: "etcd-setup.8".into(),
        roff: text,
    });

    for (sub, name) in subcommands.iter().zip(&names) {
        let table = exit::ALL
            .iter()
            .find(|t| t.command == sub.get_name())
            .ok_or_else(|| {
                format!(
                    "no exit-code table in etcd_setup::exit for `{}`",
                    sub.get_name()
                )
            })?;
        let man = clap_mangen::Man::new(sub.clone())
            .title(name.as_str())
            .section("8")
            .source(format!("etcd-setup {version}"))
            .manual("System Administration");
        // `backups` has its own subcommands (list, verify): its page lists them.
        let mut text = clap_sections(&man, sub.has_subcommands());
        let mut roff = Roff::new();
        exit_status(&mut roff, table, true);
        reason_codes(&mut roff, &reasons);
        see_also(&mut roff, &["etcd-setup"]);
        text.push_str(&roff.to_roff());
        pages.push(Page {
            file: format!("{name}.8"),
            roff: text,
        });
    }
    Ok(pages)
}

/// The bash completion script.
pub fn bash_completion() -> String {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "etcd-setup", &mut out);
    String::from_utf8(out).expect("completion is UTF-8")
}
