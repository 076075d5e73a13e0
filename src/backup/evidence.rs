//! What members with empty data dirs say to each other through the bucket, so that
//! `backup.restore_when_empty` restores on positive evidence only (issue 38): each such
//! member puts a marker `<prefix><cluster ID>.empty/<member>` (beside the cluster's folder
//! of backups, never in it), rewrites it while it waits, and takes it away once it has
//! joined or restored. A member that holds data never writes one: its etcd starts, and
//! the empty ones join it.
//!
//! A marker counts as fresh when the store's `LastModified` of it is within [`FRESH`] of
//! the newest marker's: one clock, the store's, judges them all, whatever the nodes'
//! clocks say.

use super::bucket::parse_last_modified;
use super::s3::{Client, S3Result};
use crate::shared::config::BackupSettings;
use std::io::Write;
use std::time::{Duration, SystemTime};

/// How often a waiting member writes its marker again.
pub const REFRESH: Duration = Duration::from_secs(60);
/// How far behind the newest marker a marker may be and still count: a member that
/// stopped waiting (it started etcd, or was switched off) drops out within it.
pub const FRESH: Duration = Duration::from_secs(150);

/// The folder of `cluster`'s markers: `<prefix><cluster ID>.empty/`.
pub fn folder(settings: &BackupSettings, cluster: u64) -> String {
    format!("{}{cluster:016x}.empty/", settings.prefix)
}

/// Says that `member`'s data dir is empty: its marker written (again).
pub fn say_empty(
    settings: &BackupSettings,
    client: &Client,
    cluster: u64,
    member: &str,
) -> S3Result<()> {
    let key = format!("{}{member}", folder(settings, cluster));
    let meta = [("member".to_string(), member.to_string())];
    let mut up = client.upload(&key, &meta);
    // Below the part size the bytes are only buffered: one PUT when the upload finishes,
    // whose failure `finish` returns.
    let _ =
        up.write_all(format!("{member}: data dir empty, restore_when_empty waiting\n").as_bytes());
    up.finish().map(drop)
}

/// The members whose markers are fresh ([`FRESH`] from the newest), in name order.
pub fn empty_members(
    settings: &BackupSettings,
    client: &Client,
    cluster: u64,
) -> S3Result<Vec<String>> {
    let prefix = folder(settings, cluster);
    let marks: Vec<(String, SystemTime)> = client
        .list(&prefix, 1000)?
        .into_iter()
        .filter_map(|o| {
            let member = o.key.strip_prefix(&prefix)?.to_string();
            Some((member, parse_last_modified(&o.last_modified)?))
        })
        .collect();
    let Some(newest) = marks.iter().map(|(_, t)| *t).max() else {
        return Ok(Vec::new());
    };
    let mut fresh: Vec<String> = marks
        .into_iter()
        .filter(|(_, t)| newest.duration_since(*t).unwrap_or_default() <= FRESH)
        .map(|(m, _)| m)
        .collect();
    fresh.sort();
    Ok(fresh)
}

/// Takes `members`' markers away (best effort: a marker left ages out of [`FRESH`]).
pub fn withdraw(settings: &BackupSettings, client: &Client, cluster: u64, members: &[&str]) {
    for m in members {
        let _ = client.delete(&format!("{}{m}", folder(settings, cluster)));
    }
}
