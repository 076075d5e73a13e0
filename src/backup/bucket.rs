//! The backups in the bucket: the objects' names and metadata, the upload of one snapshot
//! (streamed, sealed, read back and compared), retention, and whether an upload is due.
//!
//! ```text
//! <prefix><cluster ID, 16 hex>/<UTC time>-rev<revision>-<member>.db.age   (encrypted)
//! etcd-setup/8e9e05c52164694d/20261201T094500Z-rev4711-etcd-1.db.age
//! etcd-setup/8e9e05c52164694d/20261201T094500Z-rev4711-etcd-1.db          (encrypt = false)
//! ```
//!
//! An object counts as a backup only once it was read back and matched: the upload then
//! rewrites its metadata with `object-sha256` and `verified = read-back`. Retention touches
//! only objects whose name has this grammar under this cluster's prefix and whose metadata
//! names this cluster, and never the newest verified one.

use super::s3::{Client, Digest256, Head, RangeRead, S3Result, Sent};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::BackupSettings;
use crate::shared::report::file_stamp;
use sha2::{Digest, Sha256};
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What an object's metadata says (names without `x-amz-meta-`).
pub mod key {
    /// The cluster ID, 16 hex.
    pub const CLUSTER: &str = "etcd-setup-cluster-id";
    /// The member that took the snapshot.
    pub const MEMBER: &str = "etcd-setup-member";
    /// etcd's revision in it.
    pub const REVISION: &str = "etcd-setup-revision";
    /// The etcd version that took it.
    pub const ETCD_VERSION: &str = "etcd-setup-etcd-version";
    /// How many keys etcd's `snapshot status` counted in it (`totalKey`).
    pub const TOTAL_KEYS: &str = "etcd-setup-total-keys";
    /// SHA-256 of the snapshot file (the plaintext).
    pub const PLAIN_SHA256: &str = "etcd-setup-plain-sha256";
    /// SHA-256 of the object as stored (after sealing); set once read back.
    pub const OBJECT_SHA256: &str = "etcd-setup-object-sha256";
    /// `read-back` once the object was read back and matched.
    pub const VERIFIED: &str = "etcd-setup-verified";
    /// The agent's version.
    pub const AGENT: &str = "etcd-setup-agent";
    /// When the snapshot was taken (RFC 3339).
    pub const TIME: &str = "etcd-setup-time";
    /// Whether it is age-encrypted (`age`) or not (`none`).
    pub const SEAL: &str = "etcd-setup-seal";
}

/// The snapshot an object is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The cluster's ID.
    pub cluster: u64,
    /// The member that took it.
    pub member: String,
    /// etcd's revision in it.
    pub revision: i64,
    /// The etcd version that took it.
    pub etcd_version: String,
    /// How many keys etcd's `snapshot status` counted in it (`totalKey`).
    pub total_keys: u64,
    /// When it was taken.
    pub time: SystemTime,
}

/// What an object name of ours says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    /// When the snapshot was taken (to the second).
    pub time: SystemTime,
    /// Its revision.
    pub revision: i64,
    /// The member.
    pub member: String,
    /// `.db.age` (true) or `.db`.
    pub sealed: bool,
}

/// The folder of `cluster`'s objects: `<prefix><cluster ID>/`.
pub fn cluster_prefix(settings: &BackupSettings, cluster: u64) -> String {
    format!("{}{cluster:016x}/", settings.prefix)
}

/// The object name of `meta`'s snapshot.
pub fn object_name(settings: &BackupSettings, meta: &Meta) -> String {
    format!(
        "{}{}-rev{}-{}{}",
        cluster_prefix(settings, meta.cluster),
        file_stamp(meta.time),
        meta.revision,
        meta.member,
        if settings.encrypt { ".db.age" } else { ".db" }
    )
}

/// Parses the last part of an object name (after the cluster prefix); `None` unless it is
/// exactly our grammar.
pub fn parse_name(name: &str) -> Option<ObjectName> {
    let (rest, sealed) = match name.strip_suffix(".db.age") {
        Some(r) => (r, true),
        None => (name.strip_suffix(".db")?, false),
    };
    // `20261201T094500Z` is 16 bytes of ASCII.
    let stamp = rest.get(..16)?;
    let rest = rest.get(16..)?.strip_prefix("-rev")?;
    let (revision, member) = rest.split_once('-')?;
    if revision.is_empty() || !revision.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let member_ok = !member.is_empty()
        && member.len() <= 63
        && member
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !member_ok {
        return None;
    }
    Some(ObjectName {
        time: parse_stamp(stamp)?,
        revision: revision.parse().ok()?,
        member: member.to_string(),
        sealed,
    })
}

/// A listing's `LastModified` (`2026-12-01T09:45:00.000Z`, the fraction optional) as a
/// time, to the second.
pub fn parse_last_modified(s: &str) -> Option<SystemTime> {
    let secs = s.get(..19)?;
    parse_stamp(&format!("{}Z", secs.replace(['-', ':'], "")))
}

/// `20261201T094500Z` as a time.
fn parse_stamp(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let p = s.get(r)?;
        p.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| p.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, se) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1970..=9999).contains(&y)
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
        || h > 23
        || mi > 59
        || se > 59
    {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy / 400;
    let yoe = yy - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let t = UNIX_EPOCH + Duration::from_secs(days * 86_400 + h * 3600 + mi * 60 + se);
    // 31 February and the like come back as another date: refuse them.
    (file_stamp(t) == s).then_some(t)
}

/// The metadata an upload starts with. The plaintext's SHA-256 is added with the
/// object's once it was read back ([`upload_snapshot`]).
fn upload_meta(settings: &BackupSettings, meta: &Meta) -> Vec<(String, String)> {
    vec![
        (key::CLUSTER.into(), format!("{:016x}", meta.cluster)),
        (key::MEMBER.into(), meta.member.clone()),
        (key::REVISION.into(), meta.revision.to_string()),
        (key::ETCD_VERSION.into(), meta.etcd_version.clone()),
        (key::TOTAL_KEYS.into(), meta.total_keys.to_string()),
        (key::AGENT.into(), env!("CARGO_PKG_VERSION").to_string()),
        (key::TIME.into(), crate::shared::report::rfc3339(meta.time)),
        (
            key::SEAL.into(),
            if settings.encrypt { "age" } else { "none" }.into(),
        ),
    ]
}

/// What one upload left in the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// The object's key.
    pub key: String,
    /// The object as sent and read back.
    pub object: Digest256,
    /// The snapshot file.
    pub plain: Digest256,
}

/// Seals a plaintext stream into an output (the age helper's `seal` with the recipients).
pub type Seal<'a> = dyn FnMut(&mut dyn Read, &mut dyn Write) -> Result<(), Failure> + 'a;

/// A reader that hashes what it reads.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    len: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

/// Whether what came back ([`Client::read_back`]) is what was sent: the object's size
/// as the store stated it equal to the bytes sent, and each part's range read back equal
/// (length and SHA-256) to the part sent. The parts follow each other from byte 0 and add
/// up to the object, so this proves every byte in the bucket is the byte sent, as a
/// whole-object hash would. `backup-verify-failed` naming the object and the first part
/// that differs when not.
pub fn verify_read_back(
    store: &str,
    key: &str,
    sent: &Sent,
    got: &[RangeRead],
) -> Result<(), Failure> {
    let hex = super::sigv4::hex;
    let differs = |what: String| {
        Err(Failure::new(
            ReasonCode::BackupVerifyFailed,
            format!(
                "{key} in {store}: {what}; {} bytes with SHA-256 {} were sent; the \
                 object does not count as a backup",
                sent.object.len,
                hex(&sent.object.sha256)
            ),
        ))
    };
    if got.len() != sent.parts.len() {
        return differs(format!(
            "{} of its {} parts were read back",
            got.len(),
            sent.parts.len()
        ));
    }
    let mut offset = 0;
    for (i, (part, read)) in sent.parts.iter().zip(got).enumerate() {
        if read.object_size != sent.object.len {
            return differs(format!("the store holds {} bytes", read.object_size));
        }
        if read.got != *part {
            return differs(format!(
                "part {} (bytes {offset}-{}) read back as {} bytes with SHA-256 {}, but was \
                 sent as {} bytes with SHA-256 {}",
                i + 1,
                offset + part.len.max(1) - 1,
                read.got.len,
                hex(&read.got.sha256),
                part.len,
                hex(&part.sha256)
            ));
        }
        offset += part.len;
    }
    if offset != sent.object.len {
        return differs(format!("its parts add up to {offset} bytes"));
    }
    Ok(())
}

/// What an error of a stream from `snapshot` into an upload means: the store's error
/// (with its reason code) when the upload's write failed, else a read of the file.
pub fn stream_failure(snapshot: &Path, e: io::Error) -> Failure {
    let kind = e.kind();
    match e.into_inner() {
        Some(inner) => match inner.downcast::<super::s3::S3Error>() {
            Ok(s3) => Failure::from(*s3),
            Err(other) => Failure::io(snapshot, "cannot read", io::Error::new(kind, other)),
        },
        None => Failure::new(
            ReasonCode::BackupFailed,
            format!("cannot upload {}: {kind}", snapshot.display()),
        ),
    }
}

/// Uploads `snapshot` (a verified snapshot file, `verified` its length and SHA-256 as its
/// verification read them) as the object of `meta`: streamed through `seal` (when
/// `settings.encrypt`) into the bucket, the plaintext hashed as it is read and compared
/// with `verified` (what went up is the snapshot that was verified, unchanged since), the
/// object read back part by part and compared ([`Client::read_back`],
/// [`verify_read_back`]), then marked verified in its metadata with both digests. Memory
/// is bounded to a few parts ([`super::s3::IN_FLIGHT`]).
pub fn upload_snapshot(
    settings: &BackupSettings,
    client: &Client,
    snapshot: &Path,
    verified: &Digest256,
    meta: &Meta,
    seal: &mut Seal<'_>,
) -> Result<Uploaded, Failure> {
    let name = object_name(settings, meta);
    let mut metadata = upload_meta(settings, meta);
    let (plain, sent) = stream_up(settings, client, snapshot, &name, &metadata, seal)?;
    if plain != *verified {
        return Err(Failure::new(
            ReasonCode::BackupFailed,
            format!(
                "{} changed since it was verified ({} bytes with SHA-256 {}; {} bytes with \
                 SHA-256 {} were read to upload it as {name}); the object does not count",
                snapshot.display(),
                verified.len,
                super::sigv4::hex(&verified.sha256),
                plain.len,
                super::sigv4::hex(&plain.sha256)
            ),
        ));
    }
    let got = client.read_back(&name, &sent.parts)?;
    let store = format!("s3://{} at {}", settings.bucket, settings.endpoint);
    verify_read_back(&store, &name, &sent, &got)?;
    metadata.push((key::PLAIN_SHA256.into(), super::sigv4::hex(&plain.sha256)));
    metadata.push((
        key::OBJECT_SHA256.into(),
        super::sigv4::hex(&sent.object.sha256),
    ));
    metadata.push((key::VERIFIED.into(), "read-back".into()));
    client.set_meta(&name, &metadata)?;
    Ok(Uploaded {
        key: name,
        object: sent.object,
        plain,
    })
}

/// Streams `snapshot` through `seal` (or as it is) into the object `name`: the digests of
/// the plaintext read and of the object sent (and its parts).
fn stream_up(
    settings: &BackupSettings,
    client: &Client,
    snapshot: &Path,
    name: &str,
    metadata: &[(String, String)],
    seal: &mut Seal<'_>,
) -> Result<(Digest256, Sent), Failure> {
    let file =
        std::fs::File::open(snapshot).map_err(|e| Failure::io(snapshot, "cannot open", e))?;
    let mut reader = Hashing {
        inner: io::BufReader::with_capacity(1 << 20, file),
        hasher: Sha256::new(),
        len: 0,
    };
    let mut upload = client.upload(name, metadata);
    if settings.encrypt {
        seal(&mut reader, &mut upload)?;
    } else {
        io::copy(&mut reader, &mut upload).map_err(|e| stream_failure(snapshot, e))?;
    }
    let sent = upload.finish()?;
    let read = Digest256 {
        len: reader.len,
        sha256: reader.hasher.finalize().into(),
    };
    Ok((read, sent))
}

/// One object of this cluster in the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// Its key.
    pub key: String,
    /// What its name says.
    pub name: ObjectName,
    /// Its size.
    pub size: u64,
}

/// The objects under `cluster`'s prefix whose names are ours, newest first.
pub fn backups(settings: &BackupSettings, client: &Client, cluster: u64) -> S3Result<Vec<Backup>> {
    let prefix = cluster_prefix(settings, cluster);
    let mut out: Vec<Backup> = client
        .list(&prefix, 1000)?
        .into_iter()
        .filter_map(|o| {
            let name = parse_name(o.key.strip_prefix(&prefix)?)?;
            Some(Backup {
                key: o.key,
                name,
                size: o.size,
            })
        })
        .collect();
    out.sort_by(|a, b| b.name.time.cmp(&a.name.time).then(b.key.cmp(&a.key)));
    Ok(out)
}

/// How far after this node's clock an object's name may be: SigV4 keeps every uploader's
/// clock within 15 min of the store's, and this node's too, so a name later than twice
/// that is no upload's own (a copy by another writer, a clock far off).
pub const FUTURE_TOLERANCE: Duration = Duration::from_secs(30 * 60);

/// Why `b`'s name is not believed, `None` when it is: named after `now` by more than
/// [`FUTURE_TOLERANCE`], or at another time than its metadata's `etcd-setup-time`
/// (`meta_time`, when it has one). Such an object counts for nothing: not as the newest
/// (an upload is due, status shows the age of the real newest), not as `latest`, not in
/// retention (neither kept in a slot nor deleted).
pub fn distrusted(b: &Backup, meta_time: Option<&str>, now: SystemTime) -> Option<String> {
    let named = crate::shared::report::rfc3339(b.name.time);
    if b.name.time > now + FUTURE_TOLERANCE {
        return Some(format!(
            "{} is named {named}, more than {} min after now ({})",
            b.key,
            FUTURE_TOLERANCE.as_secs() / 60,
            crate::shared::report::rfc3339(now)
        ));
    }
    match meta_time.map(str::trim) {
        Some(t) if t != named => Some(format!(
            "{} is named {named}, but its metadata says it was taken at {t}",
            b.key
        )),
        _ => None,
    }
}

/// Whether `head` says the object is this cluster's and was verified.
fn ours(head: &Head, cluster: u64) -> bool {
    head.get(key::CLUSTER) == Some(&format!("{cluster:016x}"))
}

fn verified(head: &Head) -> bool {
    head.get(key::VERIFIED) == Some("read-back") && head.get(key::OBJECT_SHA256).is_some()
}

/// The newest verified object of `cluster` at `now` (ours by name and metadata, its name
/// believed: [`distrusted`]), if any.
pub fn newest_verified(
    settings: &BackupSettings,
    client: &Client,
    cluster: u64,
    now: SystemTime,
) -> S3Result<Option<Backup>> {
    for b in backups(settings, client, cluster)? {
        if b.name.time > now + FUTURE_TOLERANCE {
            continue;
        }
        let Some(head) = client.head(&b.key)? else {
            continue;
        };
        if ours(&head, cluster)
            && verified(&head)
            && distrusted(&b, head.get(key::TIME), now).is_none()
        {
            return Ok(Some(b));
        }
    }
    Ok(None)
}

/// Whether `newest` (the newest verified object, [`newest_verified`]) leaves an upload due
/// at `now`: none, or it was taken in an earlier period than `now`'s. Periods are aligned
/// on the epoch (with `6h`: 00:00, 06:00, 12:00, 18:00 UTC), so a timer whose runs drift
/// within a period (the snapshot timer's random delay) still makes one object per period;
/// an age test (`now - newest >= period`) would skip a run that came a little early.
pub fn due_after(settings: &BackupSettings, newest: Option<&Backup>, now: SystemTime) -> bool {
    let period = settings.period.as_secs().max(1);
    let window = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) / period;
    newest.is_none_or(|b| window(b.name.time) < window(now))
}

/// Whether an upload is due at `now`: the newest verified object of `cluster` was taken in
/// an earlier period ([`due_after`]), or there is none.
pub fn upload_due(
    settings: &BackupSettings,
    client: &Client,
    cluster: u64,
    now: SystemTime,
) -> S3Result<bool> {
    Ok(due_after(
        settings,
        newest_verified(settings, client, cluster, now)?.as_ref(),
        now,
    ))
}

/// An incomplete upload of ours is aborted once its name is this old (or one period, when
/// that is longer): a live upload is younger. One named before the newest verified object
/// is aborted at once (see [`prune`]).
pub const STALE_UPLOAD: Duration = Duration::from_secs(24 * 3600);

/// What retention did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// The objects deleted.
    pub deleted: Vec<String>,
    /// The incomplete uploads aborted.
    pub aborted: Vec<String>,
}

/// Keeps the newest `settings.retain` objects of `cluster`: deletes older ones that are
/// ours by name and metadata, never the newest verified one; an object of another cluster
/// or one whose name is not believed ([`distrusted`]) takes no slot and is never deleted; aborts our incomplete uploads
/// named more than [`STALE_UPLOAD`] (or one period, when longer) before `now` (a live
/// upload is younger), and those named before the newest verified object: that one was
/// uploaded under the cluster lock after them, so their uploader died, lost its link or
/// lost the lock, and what it would complete is older than what the bucket holds. (An
/// uploader whose lock lapsed and that still sends finds its upload gone and fails, which
/// it says.) Retention runs under the cluster lock, after this member's own upload.
pub fn prune(
    settings: &BackupSettings,
    client: &Client,
    cluster: u64,
    now: SystemTime,
) -> S3Result<Pruned> {
    let mut pruned = Pruned::default();
    let mut newest_verified_seen = false;
    let mut newest_verified_time = None;
    let keep = usize::try_from(settings.retain).unwrap_or(usize::MAX);
    let mut kept = 0;
    for b in backups(settings, client, cluster)? {
        let Some(head) = client.head(&b.key)? else {
            continue;
        };
        if !ours(&head, cluster) || distrusted(&b, head.get(key::TIME), now).is_some() {
            continue;
        }
        let is_verified = verified(&head);
        let newest_verified = is_verified && !newest_verified_seen;
        newest_verified_seen |= is_verified;
        if newest_verified {
            newest_verified_time = Some(b.name.time);
        }
        if kept < keep || newest_verified {
            kept += 1;
            continue;
        }
        client.delete(&b.key)?;
        pruned.deleted.push(b.key);
    }
    let prefix = cluster_prefix(settings, cluster);
    for u in client.list_uploads(&prefix)? {
        let Some(name) = u.key.strip_prefix(&prefix).and_then(parse_name) else {
            continue;
        };
        let stale = settings.period.max(STALE_UPLOAD);
        let old = now.duration_since(name.time).unwrap_or(Duration::ZERO) >= stale;
        let superseded = newest_verified_time.is_some_and(|t| name.time < t);
        if !old && !superseded {
            continue;
        }
        client.abort_upload(&u.key, &u.upload_id)?;
        pruned.aborted.push(u.key);
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_nothing_else_parses() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_118_300);
        let n = parse_name("20261201T094500Z-rev4711-etcd-1.db.age").unwrap();
        assert_eq!(n.time, t);
        assert_eq!(
            (n.revision, n.member.as_str(), n.sealed),
            (4711, "etcd-1", true)
        );
        assert!(
            !parse_name("20261201T094500Z-rev4711-etcd-1.db")
                .unwrap()
                .sealed
        );
        for bad in [
            "20261201T094500Z-rev4711-etcd-1.db.gz",
            "20261231T094500Z-rev-etcd-1.db",
            "20260231T094500Z-rev1-etcd-1.db",
            "20261201T094500Z-rev1-.db",
            "20261201T094500Z-rev1-a/b.db",
            "x20261201T094500Z-rev1-etcd-1.db",
            "notes.txt",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_read_back_that_differs_anywhere_is_its_own_reason_naming_the_part() {
        let part = |len: u64, b: u8| Digest256 {
            len,
            sha256: [b; 32],
        };
        let sent = Sent {
            object: part(25, 9),
            parts: vec![part(10, 1), part(10, 2), part(5, 3)],
        };
        let read = |got: Digest256| RangeRead {
            got,
            object_size: 25,
        };
        let good: Vec<RangeRead> = sent.parts.iter().copied().map(read).collect();
        verify_read_back("s3", "k", &sent, &good).unwrap();
        let fails = |got: &[RangeRead]| {
            let e = verify_read_back("s3", "k", &sent, got).unwrap_err();
            assert_eq!(e.code, ReasonCode::BackupVerifyFailed);
            assert!(e.message.starts_with("k in s3: "), "{}", e.message);
            assert!(
                e.message.contains("25 bytes with SHA-256 0909"),
                "{}",
                e.message
            );
            e.message
        };
        let mut bad = good.clone();
        bad[1].got.sha256 = [7; 32];
        let m = fails(&bad);
        assert!(
            m.contains("part 2 (bytes 10-19) read back as 10 bytes with SHA-256 0707"),
            "{m}"
        );
        let mut longer = good.clone();
        longer[2].object_size = 26;
        assert!(fails(&longer).contains("the store holds 26 bytes"));
        let mut short = good.clone();
        short[2].got.len = 4;
        assert!(fails(&short).contains("part 3 (bytes 20-24) read back as 4 bytes"));
        assert!(fails(&good[..2]).contains("2 of its 3 parts were read back"));
    }
}
