//! The answer as text: one line, or labelled lines with `--long`. Every line is
//! [`printable::line`]: a label, a reason or a progress line from the state file cannot
//! add a line or an escape sequence.

use super::protocol::{Answer, Verdict};
use crate::shared::printable;
use std::time::{Duration, UNIX_EPOCH};

/// The one-line summary, e.g. `running: member etcd-1, etcd 3.5.16 active, healthy (0
/// restarts)`. The version is the running etcd's, else the installed one.
pub fn text_line(a: &Answer) -> String {
    printable::line(&raw_line(a))
}

fn raw_line(a: &Answer) -> String {
    let mut line = verdict_line(a);
    if let Some(u) = a.upgrade.as_ref().filter(|u| !u.phase.ended()) {
        line.push_str(&format!("; upgrading {} -> {}: {}", u.from, u.to, u.phase));
    }
    // The first advisory in full, the others counted: the line stays one a management
    // server can show (`--long` and JSON give every one).
    if let Some(first) = a.advisories.first() {
        line.push_str(&format!("; advisory: {first}"));
        match a.advisories.len() - 1 {
            0 => {}
            more => line.push_str(&format!(
                " (and {more} more advisor{}: etcd-setup status --long)",
                if more == 1 { "y" } else { "ies" }
            )),
        }
    }
    for c in a.certificates.iter().filter(|c| c.expiring) {
        line.push_str(&format!(
            "; certificate {} {} ends in {} days",
            c.key,
            c.path,
            c.days_left.unwrap_or_default()
        ));
    }
    line
}

fn verdict_line(a: &Answer) -> String {
    match a.verdict {
        Verdict::Running => {
            let (state, health, restarts) = a.etcd.as_ref().map_or_else(
                || ("unknown".to_string(), "unknown".to_string(), 0),
                |e| (e.active_state.clone(), e.health.clone(), e.n_restarts),
            );
            let member = a
                .member_name
                .as_ref()
                .map(|m| format!("member {m}, "))
                .unwrap_or_default();
            let version = a
                .etcd
                .as_ref()
                .and_then(|e| e.version.as_deref())
                .or(a.etcd_version.as_deref())
                .unwrap_or("(version unknown)");
            format!(
                "running: {member}etcd {version} {state}, {health} ({restarts} restart{})",
                if restarts == 1 { "" } else { "s" }
            )
        }
        Verdict::Failed => match &a.reason {
            Some(r) => format!("failed: {}: {}", r.code, r.message),
            None => "failed: (no reason recorded)".into(),
        },
        Verdict::Unreadable => match &a.reason {
            Some(r) => format!("unreadable: {}: {}", r.code, r.message),
            None => "unreadable: (no reason given)".into(),
        },
        Verdict::InProgress | Verdict::NotStarted | Verdict::Left => {
            let phase = a.phase.map_or("unknown", |p| p.as_str());
            format!("{phase}: {}", a.progress.as_deref().unwrap_or(phase))
        }
    }
}

/// The `etcd:` line of `--long`: the installed version and the running one, and whether
/// they differ.
fn versions_text(a: &Answer) -> String {
    let installed = a.etcd_version.as_deref().unwrap_or("-");
    let sha = a.sha256.as_deref().unwrap_or("-");
    let running = match a.etcd.as_ref().and_then(|e| e.version.as_deref()) {
        None => "unknown".to_string(),
        Some(v) if a.etcd_version.as_deref().is_some_and(|i| i != v) => {
            format!("{v} (not the installed {installed}: etcd.service runs another binary, or was not restarted since the install)")
        }
        Some(v) => v.to_string(),
    };
    format!("installed {installed} (sha256 {sha}), running {running}")
}

/// `--long`: labelled lines.
pub fn text_long(a: &Answer) -> String {
    raw_long(a)
        .lines()
        .map(|l| format!("{}\n", printable::line(l)))
        .collect()
}

/// The labelled lines, each ending in a newline; values may hold anything the state held.
/// Each value is escaped on its own before the lines are joined, so a newline in a value
/// is shown as `\n` on its line rather than starting a new one.
fn raw_long(a: &Answer) -> String {
    let or_dash = |v: &Option<String>| printable::line(v.as_deref().unwrap_or("-"));
    let mut out = format!("verdict:  {}\n", a.verdict.as_str());
    out.push_str(&format!(
        "phase:    {}\n",
        a.phase.map_or("- (unknown)", |p| p.as_str())
    ));
    if let Some(r) = &a.reason {
        out.push_str(&format!(
            "reason:   {}: {}\n",
            r.code,
            printable::line(&r.message)
        ));
    }
    for note in &a.notes {
        out.push_str(&format!("note:     {}\n", printable::line(note)));
    }
    out.push_str(&format!("progress: {}\n", or_dash(&a.progress)));
    out.push_str(&format!(
        "iso:      {} (label {})\n",
        or_dash(&a.device),
        or_dash(&a.label)
    ));
    out.push_str(&format!("member:   {}\n", or_dash(&a.member_name)));
    out.push_str(&format!(
        "etcd:     {}\n",
        printable::line(&versions_text(a))
    ));
    for adv in &a.advisories {
        out.push_str(&format!("advisory: {}\n", printable::line(adv)));
    }
    if let Some(u) = &a.upgrade {
        out.push_str(&format!(
            "upgrade:  {} {} -> {} ({}) at {}\n",
            u.phase,
            printable::line(&u.from),
            printable::line(&u.to),
            printable::line(&u.progress),
            printable::line(&u.updated_at)
        ));
        out.push_str(&format!(
            "cluster:  version {}; members {}\n",
            printable::line(u.cluster_version.as_deref().unwrap_or("-")),
            if u.members.is_empty() {
                "-".to_string()
            } else {
                printable::line(&u.members.join(", "))
            }
        ));
    }
    match &a.etcd {
        Some(e) => out.push_str(&format!(
            "unit:     etcd.service {}/{}, {} restart(s){}, active since {}; {}\n",
            printable::line(&e.active_state),
            printable::line(&e.sub_state),
            e.n_restarts,
            e.restarts_since_confirmed
                .map(|n| format!(" ({n} since etcd-setup confirmed it)"))
                .unwrap_or_default(),
            micros_text(e.active_enter_timestamp_us),
            printable::line(&e.health)
        )),
        None => out.push_str("unit:     -\n"),
    }
    let pid = a.run.pid.map_or_else(|| "-".into(), |p| p.to_string());
    out.push_str(&format!(
        "run:      pid {pid} ({})\n",
        if a.run.alive { "alive" } else { "not running" }
    ));
    let phases: Vec<String> = a
        .phases
        .iter()
        .map(|p| format!("{} {}", p.phase, printable::line(&p.at)))
        .collect();
    out.push_str(&format!(
        "phases:   {}\n",
        if phases.is_empty() {
            "-".into()
        } else {
            phases.join(", ")
        }
    ));
    if let Some(sp) = &a.space {
        out.push_str(&format!(
            "space:    db {} bytes, {} in use, quota {} ({}% used)\n",
            sp.db_size,
            sp.db_size_in_use.map_or("?".to_string(), |u| u.to_string()),
            sp.quota,
            sp.quota_used_percent
        ));
    }
    if let Some(r) = a.role {
        out.push_str(&format!("role:     {}\n", r.as_str()));
    }
    if !a.alarms.is_empty() {
        out.push_str(&format!("alarms:   {}\n", a.alarms.join(", ")));
    }
    if let Some(l) = a.snapshot.as_ref().and_then(|v| v.last.as_ref()) {
        out.push_str(&printable::line(&format!(
            "snapshot: {} revision {} size {} {}; pruned/: {} file(s), {} bytes",
            l.time, l.revision, l.size, l.file, l.pruned_files, l.pruned_bytes
        )));
        out.push('\n');
    }
    if let Some(b) = &a.backup {
        out.push_str(&printable::line(&backup_text(b)));
        out.push('\n');
    }
    for c in &a.certificates {
        let facts = match (&c.subject, &c.not_after, c.days_left) {
            (Some(subject), Some(until), Some(days)) => format!(
                "{subject}, serial {}, until {until} ({days} days)",
                c.serial.as_deref().unwrap_or("-")
            ),
            _ => "unreadable".into(),
        };
        let state = match &c.problem {
            Some(p) => p.code.as_str(),
            None if c.expiring => "expiring",
            None => "ok",
        };
        out.push_str(&printable::line(&format!(
            "cert:     {} {}: {facts}: {state}",
            c.key, c.path
        )));
        out.push('\n');
    }
    for w in &a.warnings {
        // A store's error text, say, may hold CR or LF: one warning, one line.
        out.push_str(&format!("warning:  {}\n", printable::line(w)));
    }
    out.push_str(&format!("updated:  {}\n", or_dash(&a.updated_at)));
    out
}

/// The `backup:` line of `--long`: the newest verified object and its age, this node's
/// last upload, the last verification, the failure.
fn backup_text(b: &super::protocol::BackupView) -> String {
    let mut line = match (&b.newest, b.age_s) {
        (Some(n), Some(age)) => format!(
            "backup:   newest {} (member {}, taken {}, {} h old)",
            n.object,
            n.member,
            n.at.time,
            age / 3600
        ),
        _ => "backup:   no verified object known".to_string(),
    };
    if let Some(u) = &b.last_upload {
        line.push_str(&format!(
            "; uploaded here {} at {}{}",
            u.object,
            u.at.time,
            if u.verified {
                ", verified read-back"
            } else {
                ", NOT verified"
            }
        ));
    }
    if let Some(v) = &b.last_verification {
        line.push_str(&format!(
            "; verified {} at {}: {}",
            v.object,
            v.at.time,
            match (v.ok, v.code) {
                (true, _) => "ok",
                (false, Some(c)) => c.as_str(),
                (false, None) => "failed",
            }
        ));
    }
    if let Some(f) = &b.failure {
        line.push_str(&format!(
            "; last upload failed at {}: {}",
            f.at.time, f.code
        ));
    }
    line
}

fn micros_text(us: u64) -> String {
    if us == 0 {
        return "never".into();
    }
    crate::shared::report::rfc3339(UNIX_EPOCH + Duration::from_micros(us))
}
