use super::*;
use std::time::Duration;

fn answer(extra: serde_json::Value) -> Answer {
    let mut base = serde_json::json!({
        "schema_version": 1,
        "phase": "running",
        "phases": [],
        "run": { "pid": 7, "alive": false },
        "etcd": {
            "active_state": "active", "sub_state": "running", "n_restarts": 2,
            "active_enter_timestamp_us": 1, "health": "healthy"
        },
        "verdict": "running",
        "exit_code": 0
    });
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(base).unwrap()
}

fn at(s: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(s)
}

/// Each family has its HELP and TYPE before its samples, once; every sample line is
/// `name{labels} value` with a known family.
fn well_formed(text: &str) {
    let mut typed = std::collections::HashSet::new();
    let mut series = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(typed.insert(name.to_string()), "TYPE twice: {name}");
            assert!(rest.ends_with(" gauge"), "{line}");
        } else if !line.starts_with("# HELP ") {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(typed.contains(name), "sample before its TYPE: {line}");
            assert!(name.starts_with("etcd_setup_"), "{line}");
            // Prometheus rejects a scrape with a series twice.
            let (id, _) = line.rsplit_once(' ').unwrap();
            assert!(series.insert(id.to_string()), "series twice: {id}");
        }
    }
}

#[test]
fn a_running_node_shows_its_verdict_phase_unit_and_health() {
    let text = exposition(&answer(serde_json::json!({})), at(1000));
    well_formed(&text);
    for line in [
        "etcd_setup_status_up 1",
        "etcd_setup_status_exit_code 0",
        "etcd_setup_verdict{verdict=\"running\"} 1",
        "etcd_setup_verdict{verdict=\"failed\"} 0",
        "etcd_setup_phase{phase=\"running\"} 1",
        "etcd_setup_phase{phase=\"waiting-for-iso\"} 0",
        "etcd_setup_etcd_unit_active{active_state=\"active\",sub_state=\"running\"} 1",
        "etcd_setup_etcd_unit_restarts 2",
        "etcd_setup_etcd_healthy 1",
        "etcd_setup_alarm{alarm=\"NOSPACE\"} 0",
        "etcd_setup_warnings 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    // Nothing said about what the answer does not know.
    assert!(!text.contains("etcd_setup_db_size_bytes"), "{text}");
    assert!(!text.contains("etcd_setup_snapshot_age_seconds"), "{text}");
    assert!(!text.contains("etcd_setup_failed{"), "{text}");
    assert!(!text.contains("etcd_setup_member_role"), "{text}");
}

#[test]
fn the_member_s_role_is_one_series_per_role() {
    let text = exposition(&answer(serde_json::json!({ "role": "learner" })), at(1000));
    well_formed(&text);
    for line in [
        "etcd_setup_member_role{role=\"voter\"} 0",
        "etcd_setup_member_role{role=\"learner\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    let text = exposition(&answer(serde_json::json!({ "role": "voter" })), at(1000));
    assert!(
        text.lines()
            .any(|l| l == "etcd_setup_member_role{role=\"voter\"} 1"),
        "{text}"
    );
}

#[test]
fn failure_space_alarms_snapshot_certificates_and_advisories() {
    let a = answer(serde_json::json!({
        "verdict": "failed", "exit_code": 1,
        "reason": { "code": "etcd-nospace", "message": "full" },
        "space": { "db_size": 900, "db_size_in_use": 400, "quota": 1000, "quota_used_percent": 90 },
        "alarms": ["NOSPACE"],
        "snapshot": {
            "last": { "time": "x", "unix_time": 400, "revision": 3, "size": 77, "file": "/s", "hash": 1, "total_keys": 5,
                      "pruned_files": 4, "pruned_bytes": 3000 },
            "failure": { "time": "y", "code": "snapshot-failed", "message": "m" },
            "stale": true
        },
        "warnings": ["one", "two"],
        "advisory_details": [{ "id": "etcd-3.5-data-inconsistency", "summary": "s", "source": "u" }],
        "certificates": [{
            "key": "tls.peer_cert", "path": "/etc/etcd/pki/pe\"er\\.crt", "kind": "leaf",
            "subject": "CN=etcd-1", "issuer": "CN=ca", "serial": "1000",
            "not_before": null, "not_after": null, "not_after_unix": 5000, "days_left": 3,
            "key_matches": true, "covers_ip": true, "covers_name": true,
            "problem": { "code": "cert-expired", "message": "m" }, "expiring": false
        }]
    }));
    let text = exposition(&a, at(1000));
    well_formed(&text);
    let labels = "key=\"tls.peer_cert\",path=\"/etc/etcd/pki/pe\\\"er\\\\.crt\",kind=\"leaf\",serial=\"1000\",subject=\"CN=etcd-1\"";
    for line in [
        "etcd_setup_verdict{verdict=\"failed\"} 1".to_string(),
        "etcd_setup_status_exit_code 1".into(),
        "etcd_setup_failed{reason=\"etcd-nospace\"} 1".into(),
        "etcd_setup_alarm{alarm=\"NOSPACE\"} 1".into(),
        "etcd_setup_alarm{alarm=\"CORRUPT\"} 0".into(),
        "etcd_setup_db_size_bytes 900".into(),
        "etcd_setup_db_size_in_use_bytes 400".into(),
        "etcd_setup_db_quota_bytes 1000".into(),
        "etcd_setup_snapshot_last_success_timestamp_seconds 400".into(),
        "etcd_setup_snapshot_age_seconds 600".into(),
        "etcd_setup_snapshot_stale 1".into(),
        "etcd_setup_snapshot_failing 1".into(),
        "etcd_setup_snapshot_copy_failing 0".into(),
        "etcd_setup_snapshot_pruned_bytes 3000".into(),
        "etcd_setup_snapshot_pruned_files 4".into(),
        format!("etcd_setup_certificate_expiry_timestamp_seconds{{{labels}}} 5000"),
        format!("etcd_setup_certificate_problem{{{labels},code=\"cert-expired\"}} 1"),
        format!("etcd_setup_certificate_expiring{{{labels}}} 0"),
        "etcd_setup_warnings 2".into(),
        "etcd_setup_advisory{id=\"etcd-3.5-data-inconsistency\"} 1".into(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
}

#[test]
fn label_values_escape_backslash_quote_and_newline() {
    assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

#[test]
fn unreachable_says_status_up_0_only() {
    let text = unreachable();
    well_formed(&text);
    assert!(text.ends_with("etcd_setup_status_up 0\n"), "{text}");
    assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 1);
}

#[test]
fn backups_give_their_times_age_and_failures_and_nothing_without_backup() {
    let text = exposition(&answer(serde_json::json!({})), at(1000));
    assert!(!text.contains("etcd_setup_backup"), "{text}");
    let backup = serde_json::json!({ "backup": {
        "configured": true,
        "last_upload": {
            "time": "2026-12-01T09:45:00Z", "unix_time": 1_796_118_300u64,
            "object": "etcd-setup/8e9e05c52164694d/20261201T094500Z-rev4711-etcd-1.db.age",
            "bucket": "b", "size": 4242, "verified": true, "member": "etcd-1",
            "revision": 4711, "encrypted": true
        },
        "newest": {
            "time": "2026-12-01T09:45:00Z", "unix_time": 1_796_118_300u64,
            "object": "etcd-setup/8e9e05c52164694d/20261201T094500Z-rev4711-etcd-1.db.age",
            "member": "etcd-1", "size": 4242
        },
        "checked": null,
        "failure": {
            "time": "2026-12-01T10:45:00Z", "unix_time": 1_796_121_900u64,
            "code": "backup-denied", "message": "SignatureDoesNotMatch"
        },
        "last_verification": {
            "time": "2026-12-01T11:00:00Z", "unix_time": 1_796_122_800u64,
            "object": "x", "ok": false, "code": "backup-verify-failed", "message": "m"
        },
        "age_s": 3600, "period_s": 3600, "stale": false
    }});
    let text = exposition(&answer(backup), at(1_796_121_900));
    well_formed(&text);
    for line in [
        "etcd_setup_backup_newest_timestamp_seconds 1796118300",
        "etcd_setup_backup_age_seconds 3600",
        "etcd_setup_backup_last_upload_timestamp_seconds 1796118300",
        "etcd_setup_backup_last_upload_size_bytes 4242",
        "etcd_setup_backup_stale 0",
        "etcd_setup_backup_failed{reason=\"backup-denied\"} 1",
        "etcd_setup_backup_verification_failed{reason=\"backup-verify-failed\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    // A failed verification gives no "last verified" time.
    assert!(
        !text.contains("etcd_setup_backup_last_verified_timestamp_seconds "),
        "{text}"
    );
}

/// Issue 38 (low): a CA twice in a bundle gave the same series twice, and Prometheus
/// rejects such a scrape whole.
#[test]
fn a_ca_twice_in_a_bundle_is_one_series() {
    let ca = serde_json::json!({
        "key": "tls.client_trusted_ca", "path": "/etc/etcd/pki/ca.crt", "kind": "ca",
        "subject": "CN=ca", "issuer": "CN=ca", "serial": "01",
        "not_before": null, "not_after": null, "not_after_unix": 5000, "days_left": 3,
        "key_matches": null, "covers_ip": null, "covers_name": null,
        "problem": null, "expiring": true
    });
    let a = answer(serde_json::json!({ "certificates": [ca.clone(), ca] }));
    let text = exposition(&a, at(1000));
    well_formed(&text);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("etcd_setup_certificate_expiry_timestamp_seconds{"))
            .count(),
        1,
        "{text}"
    );
}
