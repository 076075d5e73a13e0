//! Times as the state and the failure file write them.

use std::time::{SystemTime, UNIX_EPOCH};

/// `t` as RFC 3339 in UTC to the second, e.g. `2026-05-01T12:34:56Z`. Times before 1970
/// (a clock not set yet) print as the epoch.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `t` in the basic ISO 8601 form, safe in a file name: `20261201T101500Z` (UTC, to the
/// second). Folders moved aside and snapshot files are named with it.
pub fn file_stamp(t: SystemTime) -> String {
    rfc3339(t).replace(['-', ':'], "")
}

/// `t` as a sortable file-name timestamp in UTC to the millisecond:
/// `20261201T094500.123Z`.
pub fn file_stamp_ms(t: SystemTime) -> String {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_millis());
    let s = file_stamp(t);
    format!("{}.{ms:03}Z", s.trim_end_matches('Z'))
}

/// Year, month, day of the `days`-th day after 1970-01-01 (proleptic Gregorian), after
/// Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

pub(super) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
