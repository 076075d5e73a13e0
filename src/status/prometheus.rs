//! `status --format prometheus`: the answer as Prometheus' text exposition format 0.0.4,
//! a pure function of the answer (and the time, for ages), for node-exporter's textfile
//! collector (`packaging/etcd-setup-metrics.service` writes it each minute).
//!
//! Every metric is a gauge named `etcd_setup_…`; an enumeration (verdict, phase, alarm) is
//! one series per value, 1 for the current one and 0 for the others, so an alert can test
//! `== 1` and a missing series means the agent did not say. What the answer does not know
//! (etcd's space while it is down, a snapshot never taken) is left out, not written as 0.

use super::protocol::{Answer, Role, Verdict};
use crate::shared::config::certs::CertKind;
use crate::shared::report::Phase;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// The content type of what [`exposition`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// The alarms etcd has; each gets a series, 1 while active.
const ALARMS: [&str; 2] = ["NOSPACE", "CORRUPT"];

/// Every phase, in the run's order.
const PHASES: [Phase; 8] = [
    Phase::NotStarted,
    Phase::WaitingForIso,
    Phase::Validating,
    Phase::Installing,
    Phase::Starting,
    Phase::Running,
    Phase::Failed,
    Phase::Left,
];

const VERDICTS: [Verdict; 6] = [
    Verdict::Running,
    Verdict::Failed,
    Verdict::InProgress,
    Verdict::NotStarted,
    Verdict::Unreadable,
    Verdict::Left,
];

/// One metric family being written: its HELP and TYPE once, then its samples.
struct Out(String);

impl Out {
    fn family(&mut self, name: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.0, "# HELP etcd_setup_{name} {help}");
        let _ = writeln!(self.0, "# TYPE etcd_setup_{name} gauge");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let _ = write!(self.0, "etcd_setup_{name}");
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    fn gauge(&mut self, name: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, help);
        self.sample(name, &[], value);
    }
}

/// A label value as the format wants it: `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn bit(b: bool) -> u8 {
    u8::from(b)
}

/// The exposition of `answer` at `now`.
pub fn exposition(answer: &Answer, now: SystemTime) -> String {
    let now_s = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut o = Out(String::new());
    o.gauge(
        "status_up",
        "1 when the status server answered (this file is fresh), 0 when it could not be asked.",
        1,
    );
    o.gauge(
        "status_exit_code",
        "The exit code etcd-setup status gives: 0 running, 1 failed, 3 in progress, 4 not started, 6 unreadable, 7 left.",
        answer.exit_code,
    );
    o.family(
        "verdict",
        "The node's verdict: 1 for the current one, 0 for the others.",
    );
    for v in VERDICTS {
        o.sample(
            "verdict",
            &[("verdict", v.as_str())],
            bit(v == answer.verdict),
        );
    }
    o.family(
        "phase",
        "The run's phase: 1 for the current one, 0 for the others; none when the state cannot be read.",
    );
    if let Some(current) = answer.phase {
        for p in PHASES {
            o.sample("phase", &[("phase", p.as_str())], bit(p == current));
        }
    }
    o.family(
        "failed",
        "1 with the reason code when the verdict is failed or unreadable (the failure file's code).",
    );
    if let Some(r) = &answer.reason {
        o.sample("failed", &[("reason", r.code.as_str())], 1);
    }
    if let Some(e) = &answer.etcd {
        o.family(
            "etcd_unit_active",
            "1 while etcd.service is active, with systemd's ActiveState and SubState.",
        );
        o.sample(
            "etcd_unit_active",
            &[
                ("active_state", &e.active_state),
                ("sub_state", &e.sub_state),
            ],
            bit(e.active_state == "active"),
        );
        o.gauge(
            "etcd_unit_restarts",
            "systemd's NRestarts of etcd.service: automatic restarts since its last start job.",
            e.n_restarts,
        );
        if let Some(n) = e.restarts_since_confirmed {
            o.gauge(
                "etcd_restarts_since_confirmed",
                "Automatic restarts of etcd since etcd-setup confirmed it running.",
                n,
            );
        }
        o.gauge(
            "etcd_healthy",
            "1 when etcd's /health says healthy.",
            bit(e.health == "healthy"),
        );
        o.family(
            "alarm",
            "1 while etcd's alarm is active (NOSPACE: the quota is reached, writes fail).",
        );
        for a in ALARMS {
            o.sample(
                "alarm",
                &[("alarm", a)],
                bit(answer.alarms.iter().any(|x| x == a)),
            );
        }
    }
    if let Some(r) = answer.role {
        o.family(
            "member_role",
            "This member's role in its cluster (etcd's maintenance status, isLearner): 1 for the current one, 0 for the other.",
        );
        for each in [Role::Voter, Role::Learner] {
            o.sample("member_role", &[("role", each.as_str())], bit(each == r));
        }
    }
    if let Some(sp) = &answer.space {
        o.gauge(
            "db_size_bytes",
            "etcd's database file size (etcd_mvcc_db_total_size_in_bytes).",
            sp.db_size,
        );
        if let Some(u) = sp.db_size_in_use {
            o.gauge(
                "db_size_in_use_bytes",
                "The part of etcd's database in use (etcd_mvcc_db_total_size_in_use_in_bytes).",
                u,
            );
        }
        o.gauge(
            "db_quota_bytes",
            "etcd's backend quota (etcd_server_quota_backend_bytes): NOSPACE beyond it.",
            sp.quota,
        );
    }
    if let Some(s) = &answer.snapshot {
        if let Some(last) = s.last.as_ref().filter(|l| l.unix_time > 0) {
            o.gauge(
                "snapshot_last_success_timestamp_seconds",
                "When the last good snapshot was taken, seconds since the epoch.",
                last.unix_time,
            );
            o.gauge(
                "snapshot_age_seconds",
                "Age of the last good snapshot when this was written.",
                now_s.saturating_sub(last.unix_time),
            );
            o.gauge(
                "snapshot_last_size_bytes",
                "Size of the last good snapshot.",
                last.size,
            );
            o.gauge(
                "snapshot_pruned_bytes",
                "Bytes of the files in the snapshot folders' pruned/ after the last good snapshot's retention.",
                last.pruned_bytes,
            );
            o.gauge(
                "snapshot_pruned_files",
                "Files in the snapshot folders' pruned/ after the last good snapshot's retention.",
                last.pruned_files,
            );
        }
        o.gauge(
            "snapshot_stale",
            "1 when the last good snapshot is older than snapshot.stale_after, or there is none.",
            bit(s.stale),
        );
        o.gauge(
            "snapshot_failing",
            "1 when the last snapshot attempt failed (after the last good one).",
            bit(s.failure.is_some()),
        );
        o.gauge(
            "snapshot_copy_failing",
            "1 when copying the last good snapshot into snapshot.copy_dir failed.",
            bit(s.copy_failure.is_some()),
        );
    }
    if let Some(b) = &answer.backup {
        backup_metrics(&mut o, b, now_s);
    }
    // One series per label set: a CA twice in a bundle would be a duplicate series, which
    // Prometheus rejects with the whole scrape.
    let mut seen = std::collections::HashSet::new();
    let certificates: Vec<_> = answer
        .certificates
        .iter()
        .filter(|c| seen.insert(cert_labels(c)))
        .collect();
    if !certificates.is_empty() {
        o.family(
            "certificate_expiry_timestamp_seconds",
            "notAfter of each certificate of [tls] (leaves and CAs of the trusted bundles), seconds since the epoch.",
        );
        for c in &certificates {
            if let Some(t) = c.not_after_unix {
                o.sample("certificate_expiry_timestamp_seconds", &cert_labels(c), t);
            }
        }
        o.family(
            "certificate_problem",
            "1 when a [tls] file is expired, not yet valid or does not fit (code cert-expired or cert-mismatch).",
        );
        for c in &certificates {
            let code = c.problem.as_ref().map_or("", |p| p.code.as_str());
            let mut labels = cert_labels(c);
            labels.push(("code", code));
            o.sample("certificate_problem", &labels, bit(c.problem.is_some()));
        }
        o.family(
            "certificate_expiring",
            "1 when a certificate ends within tls.warn_days.",
        );
        for c in &certificates {
            o.sample("certificate_expiring", &cert_labels(c), bit(c.expiring));
        }
    }
    o.gauge(
        "warnings",
        "How many warnings status gives (stale snapshot, expiring certificate, ...).",
        answer.warnings.len(),
    );
    o.family(
        "advisory",
        "1 for each published advisory that warns (data safety, security, availability) of the installed etcd release.",
    );
    for a in &answer.advisory_details {
        o.sample("advisory", &[("id", &a.id)], 1);
    }
    o.0
}

/// The off-node backups' series: what is not known is left out, as elsewhere.
fn backup_metrics(o: &mut Out, b: &super::protocol::BackupView, now_s: u64) {
    if let Some(n) = &b.newest {
        o.gauge(
            "backup_newest_timestamp_seconds",
            "When the newest verified backup of the cluster in the bucket was taken (any member's), seconds since the epoch.",
            n.at.unix_time,
        );
        o.gauge(
            "backup_age_seconds",
            "Age of the newest verified backup of the cluster when this was written.",
            now_s.saturating_sub(n.at.unix_time),
        );
    }
    if let Some(u) = b.last_upload.as_ref().filter(|u| u.verified) {
        o.gauge(
            "backup_last_upload_timestamp_seconds",
            "When the snapshot this node last uploaded (and verified by read-back) was taken.",
            u.at.unix_time,
        );
        o.gauge(
            "backup_last_upload_size_bytes",
            "Size of the object this node last uploaded, as stored.",
            u.size,
        );
    }
    if let Some(v) = b.last_verification.as_ref().filter(|v| v.ok) {
        o.gauge(
            "backup_last_verified_timestamp_seconds",
            "When the last full verification of a backup (etcd-setup backups verify) passed.",
            v.at.unix_time,
        );
    }
    o.gauge(
        "backup_stale",
        "1 when the newest verified backup is older than two backup.period, or none is known.",
        bit(b.stale),
    );
    o.family(
        "backup_failed",
        "1 with the reason code when the last upload failed (after the last good one).",
    );
    if let Some(f) = &b.failure {
        o.sample("backup_failed", &[("reason", f.code.as_str())], 1);
    }
    o.family(
        "backup_verification_failed",
        "1 with the reason code when the last full verification of a backup failed.",
    );
    if let Some(v) = b.last_verification.as_ref().filter(|v| !v.ok) {
        let code = v.code.map_or("backup-verify-failed", |c| c.as_str());
        o.sample("backup_verification_failed", &[("reason", code)], 1);
    }
}

fn cert_labels(c: &crate::shared::config::certs::CertView) -> Vec<(&str, &str)> {
    vec![
        ("key", c.key.as_str()),
        ("path", c.path.as_str()),
        (
            "kind",
            match c.kind {
                CertKind::Leaf => "leaf",
                CertKind::Ca => "ca",
            },
        ),
        ("serial", c.serial.as_deref().unwrap_or("")),
        ("subject", c.subject.as_deref().unwrap_or("")),
    ]
}

/// The exposition when the status server could not be asked: `etcd_setup_status_up 0`,
/// so an alert sees the agent's view is missing rather than a stale file.
pub fn unreachable() -> String {
    let mut o = Out(String::new());
    o.gauge(
        "status_up",
        "1 when the status server answered (this file is fresh), 0 when it could not be asked.",
        0,
    );
    o.0
}

#[cfg(test)]
mod tests;
