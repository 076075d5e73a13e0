//! Snapshot file names: what `snapshot` writes, and the strict grammar retention
//! recognises (nothing else in a folder is ever touched by it).
//!
//! ```text
//! etcd-snapshot-<cluster ID, 16 hex>-<member name>-<UTC time to the ms>-rev<revision>.db
//! etcd-snapshot-8e9e05c52164694d-etcd-1-20261201T094500.123Z-rev4711.db
//! etcd-snapshot-20261201T094500.123Z-rev4711.db          (before the cluster and member)
//! ```
//!
//! The cluster and the member are in the name, so a `snapshot.copy_dir` shared by the
//! members (or by clusters) holds each one's snapshots apart, and retention in it moves
//! only this member's. The time is parsed from the name, not taken from the file's
//! mtime (a copy or a restore from backup changes that).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The name every kept snapshot starts with.
pub const PREFIX: &str = "etcd-snapshot-";
/// And ends with.
pub const SUFFIX: &str = ".db";

/// What a strict snapshot name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotName {
    /// The cluster's ID; `None` for a name from before it was written.
    pub cluster: Option<u64>,
    /// The member's name; `None` likewise.
    pub member: Option<String>,
    /// When it was taken (UTC, to the millisecond).
    pub time: SystemTime,
    /// etcd's revision in it.
    pub revision: i64,
}

/// The name of a snapshot of `member` of `cluster` taken at `time` holding `revision`.
pub fn name_for(cluster: u64, member: &str, time: SystemTime, revision: i64) -> String {
    format!(
        "{PREFIX}{cluster:016x}-{member}-{}-rev{revision}{SUFFIX}",
        crate::shared::report::file_stamp_ms(time)
    )
}

/// Parses a strict snapshot name (either form); `None` for anything else.
pub fn parse(name: &str) -> Option<SnapshotName> {
    let rest = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let (rest, revision) = rest.rsplit_once("-rev")?;
    if revision.is_empty() || !revision.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let revision: i64 = revision.parse().ok()?;
    // `20261201T094500.123Z` is 20 bytes of ASCII.
    const STAMP: usize = 20;
    if rest.len() < STAMP || !rest.is_char_boundary(rest.len() - STAMP) {
        return None;
    }
    let (ident, stamp) = rest.split_at(rest.len() - STAMP);
    let time = parse_stamp(stamp)?;
    if ident.is_empty() {
        return Some(SnapshotName {
            cluster: None,
            member: None,
            time,
            revision,
        });
    }
    let ident = ident.strip_suffix('-')?;
    let (cluster, member) = ident.split_once('-')?;
    if cluster.len() != 16 || !cluster.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let ok_member = !member.is_empty()
        && member
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok_member {
        return None;
    }
    Some(SnapshotName {
        cluster: Some(u64::from_str_radix(cluster, 16).ok()?),
        member: Some(member.to_string()),
        time,
        revision,
    })
}

/// `20261201T094500.123Z` as a time; `None` unless it is exactly that form and a real
/// date and time.
fn parse_stamp(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 20 || b[8] != b'T' || b[15] != b'.' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, min, sec, ms) = (num(9..11)?, num(11..13)?, num(13..15)?, num(16..19)?);
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || min > 59
        || sec > 59
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date from 1970 on (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_name_parses_back_to_its_cluster_member_time_and_revision() {
        let t = UNIX_EPOCH + Duration::from_millis(1_796_118_300_123);
        let n = name_for(0x8e9e_05c5_2164_694d, "etcd-1", t, 4711);
        assert_eq!(
            n,
            "etcd-snapshot-8e9e05c52164694d-etcd-1-20261201T094500.123Z-rev4711.db"
        );
        assert_eq!(
            parse(&n),
            Some(SnapshotName {
                cluster: Some(0x8e9e_05c5_2164_694d),
                member: Some("etcd-1".into()),
                time: t,
                revision: 4711,
            })
        );
    }

    #[test]
    fn old_names_are_recognised_and_look_alikes_are_not() {
        let old = parse("etcd-snapshot-20991231T000000.000Z-rev1.db").unwrap();
        assert_eq!((old.cluster, old.member, old.revision), (None, None, 1));
        assert_eq!(
            old.time,
            UNIX_EPOCH + Duration::from_secs(days_from_civil(2099, 12, 31) * 86_400)
        );
        for bad in [
            "etcd-snapshot-zzz.db",
            "etcd-snapshot-20261301T000000.000Z-rev1.db",
            "etcd-snapshot-20260230T000000.000Z-rev1.db",
            "etcd-snapshot-20260101T000000.000Z-rev.db",
            "etcd-snapshot-20260101T000000.000Z-rev1.db.part",
            "etcd-snapshot-20260101T000000.000Z-rev-1.db",
            "etcd-snapshot-x20260101T000000.000Z-rev1.db",
            "etcd-snapshot-8e9e05c52164694-m-20260101T000000.000Z-rev1.db",
            "etcd-snapshot-8e9e05c52164694d--20260101T000000.000Z-rev1.db",
            "etcd-snapshot-8e9e05c52164694d-m/x-20260101T000000.000Z-rev1.db",
            "etcd-snapshot-keep-me-forever.db",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
