//! The S3 client against a real object store: Ceph's radosgw from Debian's packages,
//! started once for this file by `tests/support/radosgw` (one mon, one memstore OSD, rgw on
//! loopback with http and https), stopped when the test process exits. No mock S3.
mod support;

use etcd_setup::backup::s3::{Client, ErrorKind, MIN_PART_SIZE};
use etcd_setup::reason::{Failure, ReasonCode};
use etcd_setup::shared::config::{self, BackupSettings};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::net::TcpListener;

use support::store::store;

/// `[backup]` for the store with `extra` lines, as config reads it.
fn settings_with(endpoint: &str, extra: &str) -> Result<BackupSettings, Failure> {
    let s = store();
    let text = format!(
        r#"
[node]
name = "etcd-1"
ip = "127.0.0.1"

[etcd]
initial_cluster = "etcd-1=http://127.0.0.1:2380"
cluster_token = "tok"

[backup]
endpoint = "{endpoint}"
bucket = "{}"
path_style = true
access_key_file = "{}"
secret_key_file = "{}"
encrypt = false
{extra}
"#,
        s.bucket,
        s.access.display(),
        s.secret.display()
    );
    // One file per call: the tests of this binary run in parallel threads of one
    // process, and a name by pid alone had one test read another's half-written file.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = s
        .dir
        .join(format!("config-{}-{n}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    config::load(&path).map(|c| c.backup.unwrap())
}

fn client_for(settings: &BackupSettings) -> Client {
    Client::new(settings, settings.credentials().unwrap())
        .unwrap()
        .with_part_size(MIN_PART_SIZE)
}

fn http() -> Client {
    client_for(&settings_with(&store().http, "allow_http = true").unwrap())
}

fn secret() -> String {
    std::fs::read_to_string(&store().secret).unwrap()
}

/// Bytes that differ along their length.
fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

#[test]
fn a_small_object_goes_up_in_one_put_and_comes_back_with_its_digest_and_metadata() {
    let c = http();
    let body = data(1000, 1);
    let meta = vec![
        ("cluster-id".to_string(), "8e9e05c52164694d".to_string()),
        ("revision".to_string(), "4711".to_string()),
    ];
    let mut up = c.upload("small/one.db", &meta);
    up.write_all(&body).unwrap();
    let sent = up.finish().unwrap();
    assert_eq!(sent.object.len, 1000);
    assert_eq!(sent.object.sha256, sha(&body));
    assert_eq!(sent.parts, [sent.object], "one PUT, one part");
    let mut back = Vec::new();
    let got = c
        .get(
            "small/one.db",
            c.head("small/one.db").unwrap().unwrap().size,
            &mut back,
        )
        .unwrap();
    assert_eq!(got, sent.object);
    assert_eq!(back, body);
    let read = c.read_back("small/one.db", &sent.parts).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!((read[0].got, read[0].object_size), (sent.object, 1000));
    let head = c.head("small/one.db").unwrap().unwrap();
    assert_eq!(head.size, 1000);
    assert_eq!(head.get("cluster-id"), Some("8e9e05c52164694d"));
    assert_eq!(head.get("revision"), Some("4711"));
    assert_eq!(c.head("small/none.db").unwrap(), None);
}

#[test]
fn a_large_object_goes_up_in_parts_and_comes_back_whole() {
    let c = http();
    // Five parts: more than are sent at once (s3::IN_FLIGHT), so every buffer is given
    // back and filled again, and the parts' threads add to the digest in their order.
    let body = data(4 * MIN_PART_SIZE + 12345, 2);
    let mut up = c.upload("large/five-parts.db", &[("member".into(), "etcd-1".into())]);
    // Odd-sized writes, as a reader's buffer gives them.
    for chunk in body.chunks(70_001) {
        up.write_all(chunk).unwrap();
    }
    let sent = up.finish().unwrap();
    assert_eq!(sent.object.len, body.len() as u64);
    let mut back = Vec::new();
    let got = c
        .get(
            "large/five-parts.db",
            c.head("large/five-parts.db").unwrap().unwrap().size,
            &mut back,
        )
        .unwrap();
    assert_eq!(got.sha256, sha(&body));
    assert_eq!(
        sent.object.sha256,
        sha(&body),
        "the digest of what was sent"
    );
    assert!(back == body, "the object read back differs");
    // Each part's digest is that of its slice of the object, in order.
    let slices: Vec<&[u8]> = body.chunks(MIN_PART_SIZE).collect();
    assert_eq!(sent.parts.len(), 5);
    for (part, slice) in sent.parts.iter().zip(&slices) {
        assert_eq!((part.len, part.sha256), (slice.len() as u64, sha(slice)));
    }
    // Read back part by part, several at once: each range as sent, the size stated.
    let read = c.read_back("large/five-parts.db", &sent.parts).unwrap();
    assert_eq!(read.iter().map(|r| r.got).collect::<Vec<_>>(), sent.parts);
    assert!(read.iter().all(|r| r.object_size == body.len() as u64));
    let head = c.head("large/five-parts.db").unwrap().unwrap();
    assert_eq!(head.get("member"), Some("etcd-1"));
    assert!(c.list_uploads("large/").unwrap().is_empty());
}

/// `key` replaced in the bucket by `bytes` (in parts, as the agent writes).
fn replace(c: &Client, key: &str, bytes: &[u8]) {
    let mut up = c.upload(key, &[]);
    up.write_all(bytes).unwrap();
    up.finish().unwrap();
}

#[test]
fn a_part_damaged_cut_or_grown_in_the_bucket_fails_the_read_back_naming_it() {
    use etcd_setup::backup::bucket::verify_read_back;
    let c = http();
    let key = "damaged/five-parts.db";
    let body = data(4 * MIN_PART_SIZE + 777, 3);
    let mut up = c.upload(key, &[]);
    up.write_all(&body).unwrap();
    let sent = up.finish().unwrap();
    let check = || verify_read_back("s3", key, &sent, &c.read_back(key, &sent.parts).unwrap());
    check().unwrap();
    let verify_failed = |what: &str| {
        let e = check().unwrap_err();
        assert_eq!(e.code, ReasonCode::BackupVerifyFailed, "{what}: {e:?}");
        assert!(
            e.message.contains("does not count as a backup"),
            "{what}: {e:?}"
        );
        e.message
    };

    // One byte flipped in the fourth part: the other four read back as sent.
    let mut flipped = body.clone();
    flipped[3 * MIN_PART_SIZE + 4242] ^= 0x20;
    replace(&c, key, &flipped);
    let read = c.read_back(key, &sent.parts).unwrap();
    for (i, (r, p)) in read.iter().zip(&sent.parts).enumerate() {
        assert_eq!(r.got == *p, i != 3, "part {}", i + 1);
    }
    let first = 3 * MIN_PART_SIZE;
    let m = verify_failed("a flipped byte");
    assert!(
        m.contains(&format!(
            "part 4 (bytes {first}-{}) read back",
            first + MIN_PART_SIZE - 1
        )),
        "{m}"
    );

    // Cut by one byte: the last part comes back short, the size stated one less.
    replace(&c, key, &body[..body.len() - 1]);
    let m = verify_failed("a cut object");
    assert!(
        m.contains(&format!("the store holds {} bytes", body.len() - 1)),
        "{m}"
    );

    // One byte more at the end: every part reads back as sent, but the object is larger.
    let mut grown = body.clone();
    grown.push(0);
    replace(&c, key, &grown);
    let read = c.read_back(key, &sent.parts).unwrap();
    assert!(read.iter().zip(&sent.parts).all(|(r, p)| r.got == *p));
    let m = verify_failed("a grown object");
    assert!(
        m.contains(&format!("the store holds {} bytes", body.len() + 1)),
        "{m}"
    );

    // Replaced by a small object: the later parts' ranges start past its end and come
    // back empty, which is a read-back that differs, not a failed request.
    replace(&c, key, &body[..1000]);
    let read = c.read_back(key, &sent.parts).unwrap();
    assert_eq!(read[0].got.len, 1000);
    assert!(read[1..]
        .iter()
        .all(|r| r.got.len == 0 && r.object_size == 1000));
    let m = verify_failed("a small object");
    assert!(m.contains("the store holds 1000 bytes"), "{m}");

    // Gone: the read-back's request fails with the store's own answer.
    c.delete(key).unwrap();
    let e = c.read_back(key, &sent.parts).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert!(e.message.starts_with("read back s3://"), "{e}");
}

#[test]
fn a_listing_walks_every_page_and_a_delete_removes_one() {
    let c = http();
    for i in 0..7 {
        let mut up = c.upload(&format!("paged/obj-{i}"), &[]);
        up.write_all(&data(10 + i, 3)).unwrap();
        up.finish().unwrap();
    }
    let all = c.list("paged/", 2).unwrap();
    let keys: Vec<_> = all.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(
        keys,
        (0..7).map(|i| format!("paged/obj-{i}")).collect::<Vec<_>>()
    );
    assert_eq!(all[3].size, 13);
    assert!(!all[3].last_modified.is_empty());
    c.delete("paged/obj-3").unwrap();
    c.delete("paged/obj-3").unwrap();
    assert_eq!(c.list("paged/", 1000).unwrap().len(), 6);
}

#[test]
fn an_upload_dropped_midway_is_aborted_and_a_forgotten_one_is_found_and_aborted_later() {
    let c = http();
    // Dropped with parts still on their way (of three full parts the first is sent, the
    // other two may still be sending): the abort waits for them, so none lands after it.
    let mut up = c.upload("pending/dropped.db", &[]);
    up.write_all(&data(3 * MIN_PART_SIZE + 10, 4)).unwrap();
    drop(up);
    assert!(c.list_uploads("pending/dropped").unwrap().is_empty());
    assert_eq!(c.head("pending/dropped.db").unwrap(), None);

    // A process killed mid-upload leaves its multipart upload behind.
    let mut up = c.upload("pending/killed.db", &[]);
    up.write_all(&data(MIN_PART_SIZE + 10, 5)).unwrap();
    std::mem::forget(up);
    let left = c.list_uploads("pending/").unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].key, "pending/killed.db");
    c.abort_upload(&left[0].key, &left[0].upload_id).unwrap();
    assert!(c.list_uploads("pending/").unwrap().is_empty());
    assert_eq!(c.head("pending/killed.db").unwrap(), None);
}

#[test]
fn a_wrong_secret_is_denied_naming_the_key_file_and_s3s_code_never_the_secret() {
    let s = store();
    let settings = settings_with(&s.http, "allow_http = true").unwrap();
    let wrong_dir = s.dir.join("wrong");
    std::fs::create_dir_all(&wrong_dir).unwrap();
    let wrong = wrong_dir.join("secret_key");
    let wrong_secret = "not-the-secret-0123456789-wrong";
    std::fs::write(&wrong, wrong_secret).unwrap();
    std::fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut bad = settings.clone();
    bad.secret_key_file = wrong.clone();
    let c = client_for(&bad);
    let mut up = c.upload("denied/x.db", &[]);
    up.write_all(b"x").unwrap();
    let e = up.finish().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Denied, "{e}");
    assert_eq!(e.code.as_deref(), Some("SignatureDoesNotMatch"), "{e}");
    let f: Failure = e.into();
    assert_eq!(f.code, ReasonCode::BackupDenied);
    for part in [
        "SignatureDoesNotMatch",
        &*wrong.to_string_lossy(),
        "backup.secret_key_file",
        &s.bucket,
        "denied/x.db",
        &s.http,
    ] {
        assert!(f.message.contains(part), "{part} not in {}", f.message);
    }
    let shown = format!("{f:?} {c:?} {bad:?} {}", f.message);
    assert!(!shown.contains(wrong_secret), "{shown}");
    assert!(!shown.contains(&secret()), "{shown}");
    let e = c.list("denied/", 10).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Denied, "{e}");
}

#[test]
fn the_client_and_settings_never_show_the_keys() {
    let settings = settings_with(&store().http, "allow_http = true").unwrap();
    let creds = settings.credentials().unwrap();
    let c = client_for(&settings);
    let shown = format!("{settings:?} {creds:?} {c:?} {:#?}", c);
    let access = std::fs::read_to_string(&store().access).unwrap();
    assert!(!shown.contains(&secret()), "{shown}");
    assert!(!shown.contains(access.trim()), "{shown}");
}

#[test]
fn https_works_with_the_ca_file_and_is_refused_without_it() {
    let s = store();
    let ca = format!("ca_file = \"{}\"", s.ca.display());
    let c = client_for(&settings_with(&s.https, &ca).unwrap());
    let mut up = c.upload("tls/one.db", &[]);
    up.write_all(b"over tls").unwrap();
    let sent = up.finish().unwrap();
    let mut back = Vec::new();
    c.get(
        "tls/one.db",
        c.head("tls/one.db").unwrap().unwrap().size,
        &mut back,
    )
    .unwrap();
    assert_eq!(back, b"over tls");
    let read = c.read_back("tls/one.db", &sent.parts).unwrap();
    assert_eq!((read[0].got, read[0].object_size), (sent.object, 8));

    // The system's bundle does not know the test CA.
    let c = client_for(&settings_with(&s.https, "").unwrap());
    let e = c.list("tls/", 10).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Tls, "{e}");
    let f: Failure = e.into();
    assert_eq!(f.code, ReasonCode::BackupTlsRefused);
    assert!(f.message.contains(&s.https), "{}", f.message);
}

#[test]
fn plain_http_is_refused_unless_allow_http_is_written() {
    let e = settings_with(&store().http, "").unwrap_err();
    assert_eq!(e.code, ReasonCode::ConfigInvalid);
    assert!(e.message.contains("backup.endpoint"), "{}", e.message);
    assert!(e.message.contains("allow_http"), "{}", e.message);
}

#[test]
fn a_missing_bucket_and_an_unreachable_endpoint_have_their_reasons() {
    let s = store();
    let mut settings = settings_with(&s.http, "allow_http = true").unwrap();
    settings.bucket = "no-such-bucket-here".into();
    let e = client_for(&settings).list("x/", 10).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NoBucket, "{e}");
    assert_eq!(Failure::from(e).code, ReasonCode::BackupBucketMissing);

    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let settings = settings_with(&format!("http://127.0.0.1:{port}"), "allow_http = true").unwrap();
    let e = client_for(&settings).list("x/", 10).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(e.message.contains(&format!("127.0.0.1:{port}")), "{e}");
}

mod bucket {
    use super::*;
    use etcd_setup::backup::bucket::{self, key, Meta};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    /// A stand-in for age's `seal`: marks the stream so the test sees it was called.
    fn pass_through(r: &mut dyn std::io::Read, w: &mut dyn std::io::Write) -> Result<(), Failure> {
        w.write_all(b"SEALED:").unwrap();
        std::io::copy(r, w)
            .map(|_| ())
            .map_err(|e| Failure::new(ReasonCode::BackupFailed, e.to_string()))
    }

    fn meta(cluster: u64, secs: u64, revision: i64) -> Meta {
        Meta {
            cluster,
            member: "etcd-1".into(),
            revision,
            etcd_version: "3.5.16".into(),
            total_keys: 1,
            time: UNIX_EPOCH + Duration::from_secs(secs),
        }
    }

    /// The length and SHA-256 of `file`, as the snapshot's verification gives them.
    fn digest_of(file: &std::path::Path) -> etcd_setup::backup::s3::Digest256 {
        let bytes = std::fs::read(file).unwrap();
        etcd_setup::backup::s3::Digest256 {
            len: bytes.len() as u64,
            sha256: sha(&bytes),
        }
    }

    fn snapshot(len: usize, seed: u8) -> (tempfile::NamedTempFile, Vec<u8>) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let body = data(len, seed);
        f.write_all(&body).unwrap();
        (f, body)
    }

    fn settings(prefix: &str, extra: &str) -> BackupSettings {
        settings_with(
            &store().http,
            &format!("allow_http = true\nprefix = \"{prefix}\"\n{extra}"),
        )
        .unwrap()
    }

    #[test]
    fn a_snapshot_is_streamed_sealed_read_back_and_marked_verified() {
        let s = store();
        let recipients = s.dir.join("recipients");
        std::fs::write(
            &recipients,
            "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p\n",
        )
        .unwrap();
        let mut b = settings("sealed/", "");
        b.encrypt = true;
        b.recipients_file = Some(recipients);
        let c = client_for(&b);
        let (file, body) = snapshot(MIN_PART_SIZE + 4321, 7);
        let m = meta(0x8e9e05c52164694d, 1_796_118_300, 4711);
        let up = bucket::upload_snapshot(
            &b,
            &c,
            file.path(),
            &digest_of(file.path()),
            &m,
            &mut pass_through,
        )
        .unwrap();
        assert_eq!(
            up.key,
            "sealed/8e9e05c52164694d/20261201T094500Z-rev4711-etcd-1.db.age"
        );
        assert_eq!(up.plain.len, body.len() as u64);
        assert_eq!(up.object.len, body.len() as u64 + 7);
        let mut back = Vec::new();
        c.get(&up.key, c.head(&up.key).unwrap().unwrap().size, &mut back)
            .unwrap();
        assert_eq!(&back[..7], b"SEALED:");
        assert!(back[7..] == body[..]);
        let head = c.head(&up.key).unwrap().unwrap();
        assert_eq!(head.get(key::CLUSTER), Some("8e9e05c52164694d"));
        assert_eq!(head.get(key::REVISION), Some("4711"));
        assert_eq!(head.get(key::ETCD_VERSION), Some("3.5.16"));
        assert_eq!(head.get(key::SEAL), Some("age"));
        assert_eq!(head.get(key::VERIFIED), Some("read-back"));
        assert_eq!(
            head.get(key::PLAIN_SHA256).map(str::to_string),
            Some(etcd_setup::backup::sigv4::hex(&sha(&body)))
        );
        assert_eq!(
            head.get(key::OBJECT_SHA256).map(str::to_string),
            Some(etcd_setup::backup::sigv4::hex(&sha(&back)))
        );
    }

    #[test]
    fn without_encryption_the_snapshot_goes_up_as_it_is_and_seal_is_not_called() {
        let b = settings("clear/", "");
        let c = client_for(&b);
        let (file, body) = snapshot(1000, 8);
        let mut called = false;
        let mut seal = |_: &mut dyn std::io::Read, _: &mut dyn std::io::Write| {
            called = true;
            Ok(())
        };
        let up = bucket::upload_snapshot(
            &b,
            &c,
            file.path(),
            &digest_of(file.path()),
            &meta(1, 1_796_118_300, 5),
            &mut seal,
        )
        .unwrap();
        assert!(!called);
        assert!(up.key.ends_with("-rev5-etcd-1.db"), "{}", up.key);
        let mut back = Vec::new();
        c.get(&up.key, c.head(&up.key).unwrap().unwrap().size, &mut back)
            .unwrap();
        assert_eq!(back, body);
        assert_eq!(
            c.head(&up.key).unwrap().unwrap().get(key::SEAL),
            Some("none")
        );
    }

    #[test]
    fn a_snapshot_that_changed_since_its_verification_does_not_count() {
        let b = settings("changed/", "");
        let c = client_for(&b);
        let (file, body) = snapshot(MIN_PART_SIZE + 10, 4);
        // Verified as it was; one byte differs by the time it is uploaded.
        let verified = digest_of(file.path());
        let mut changed = body.clone();
        changed[MIN_PART_SIZE] ^= 1;
        std::fs::write(file.path(), &changed).unwrap();
        let e = bucket::upload_snapshot(
            &b,
            &c,
            file.path(),
            &verified,
            &meta(2, 1_796_118_300, 6),
            &mut pass_through,
        )
        .unwrap_err();
        assert_eq!(e.code, ReasonCode::BackupFailed, "{e:?}");
        assert!(
            e.message.contains("changed since it was verified")
                && e.message
                    .contains(&etcd_setup::backup::sigv4::hex(&verified.sha256)),
            "{e:?}"
        );
        // What went up is not marked verified, so it counts for nothing.
        let key = bucket::object_name(&b, &meta(2, 1_796_118_300, 6));
        let head = c.head(&key).unwrap().unwrap();
        assert_eq!(head.get(key::VERIFIED), None);
        assert_eq!(
            bucket::newest_verified(&b, &c, 2, SystemTime::now()).unwrap(),
            None
        );
    }

    #[test]
    fn retention_keeps_the_newest_of_this_cluster_and_touches_nothing_else() {
        let mut b = settings("retain/", "retain = 2");
        let c = client_for(&b);
        let ours = 0xaaaa;
        let (file, _) = snapshot(100, 9);
        let base = 1_796_118_300;
        let mut keys = Vec::new();
        for i in 0..4 {
            let up = bucket::upload_snapshot(
                &b,
                &c,
                file.path(),
                &digest_of(file.path()),
                &meta(ours, base + i * 3600, 100 + i as i64),
                &mut pass_through,
            )
            .unwrap();
            keys.push(up.key);
        }
        // Under our prefix: a stranger's file, and an object named like ours with another
        // cluster's metadata; another cluster's own object.
        let prefix = bucket::cluster_prefix(&b, ours);
        let mut up = c.upload(&format!("{prefix}notes.txt"), &[]);
        up.write_all(b"not ours").unwrap();
        up.finish().unwrap();
        let impostor = format!("{prefix}20200101T000000Z-rev1-etcd-9.db");
        let mut up = c.upload(
            &impostor,
            &[(key::CLUSTER.into(), "000000000000bbbb".into())],
        );
        up.write_all(b"x").unwrap();
        up.finish().unwrap();
        let other = bucket::upload_snapshot(
            &b,
            &c,
            file.path(),
            &digest_of(file.path()),
            &meta(0xbbbb, base, 1),
            &mut pass_through,
        )
        .unwrap();
        // An upload killed two periods ago, and one in flight now.
        let stale = format!("{prefix}20200101T000000Z-rev2-etcd-1.db");
        let mut up = c.upload(&stale, &[]);
        up.write_all(&data(MIN_PART_SIZE, 1)).unwrap();
        std::mem::forget(up);
        let now = UNIX_EPOCH + Duration::from_secs(base + 3 * 3600);
        // One cut off half an hour before the newest verified object (base + 3 h) was made
        // under the lock: superseded, aborted although it is young.
        let superseded = format!(
            "{prefix}{}-rev3-etcd-3.db",
            etcd_setup::shared::report::file_stamp(
                UNIX_EPOCH + Duration::from_secs(base + 2 * 3600 + 1800)
            )
        );
        let mut up = c.upload(&superseded, &[]);
        up.write_all(&data(MIN_PART_SIZE, 3)).unwrap();
        std::mem::forget(up);
        let live = format!(
            "{prefix}{}-rev9-etcd-2.db",
            etcd_setup::shared::report::file_stamp(now)
        );
        let mut up = c.upload(&live, &[]);
        up.write_all(&data(MIN_PART_SIZE, 2)).unwrap();
        std::mem::forget(up);

        let pruned = bucket::prune(&b, &c, ours, now).unwrap();
        assert_eq!(pruned.deleted, vec![keys[1].clone(), keys[0].clone()]);
        assert_eq!(pruned.aborted, vec![stale, superseded]);
        let left: Vec<_> = c
            .list(&prefix, 1000)
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert!(
            left.contains(&keys[2]) && left.contains(&keys[3]),
            "{left:?}"
        );
        assert!(left.contains(&impostor) && left.contains(&format!("{prefix}notes.txt")));
        assert!(c.head(&other.key).unwrap().is_some());
        let pending = c.list_uploads(&prefix).unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].key, live);
        c.abort_upload(&live, &pending[0].upload_id).unwrap();

        // The newest verified one stays even when newer unverified ones fill `retain`.
        b.retain = 1;
        let mut up = c.upload(
            &format!(
                "{prefix}{}-rev999-etcd-1.db",
                etcd_setup::shared::report::file_stamp(now + Duration::from_secs(600))
            ),
            &[(key::CLUSTER.into(), format!("{ours:016x}"))],
        );
        up.write_all(b"unverified").unwrap();
        up.finish().unwrap();
        let pruned = bucket::prune(&b, &c, ours, now).unwrap();
        assert_eq!(pruned.deleted, vec![keys[2].clone()]);
        assert!(c.head(&keys[3]).unwrap().is_some());
    }

    /// Issue 38, item 5: a writer of the bucket copies our newest backup under a name a
    /// day ahead (uploads stopped until then, status said age 0), and an old backup under
    /// a newer name than the newest (restored as `latest`); another cluster's objects
    /// named newer than ours filled retention's slots.
    #[test]
    fn a_name_in_the_future_or_against_its_metadata_counts_for_nothing() {
        use etcd_setup::backup::fetch::{self, Which};
        let mut b = settings("names/", "period = \"1h\"\nretain = 2");
        let c = client_for(&b);
        let ours = 0xcccc;
        let now = SystemTime::now();
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs();
        let (file, _) = snapshot(100, 5);
        let up = |cluster: u64, at: u64, revision: i64| {
            bucket::upload_snapshot(
                &b,
                &c,
                file.path(),
                &digest_of(file.path()),
                &meta(cluster, at, revision),
                &mut pass_through,
            )
            .unwrap()
            .key
        };
        let older = up(ours, secs(now) - 3 * 3600, 10);
        let newest = up(ours, secs(now) - 2 * 3600, 20);
        // Copies of `older` with its metadata, under other names of this cluster's folder.
        let copy = |at: SystemTime| {
            let head = c.head(&older).unwrap().unwrap();
            let mut bytes = Vec::new();
            c.get(&older, head.size, &mut bytes).unwrap();
            let key = bucket::object_name(
                &b,
                &Meta {
                    time: at,
                    ..meta(ours, 0, 10)
                },
            );
            let mut w = c.upload(&key, &head.meta);
            w.write_all(&bytes).unwrap();
            w.finish().unwrap();
            key
        };
        let future = copy(now + Duration::from_secs(24 * 3600));
        let renamed = copy(now - Duration::from_secs(600));
        let foreign = [
            up(0xdddd, secs(now) - 300, 1),
            up(0xdddd, secs(now) - 200, 2),
        ];
        let prefix = bucket::cluster_prefix(&b, ours);
        for f in &foreign {
            // Another cluster's objects, moved into ours under names newer than ours.
            let head = c.head(f).unwrap().unwrap();
            let mut bytes = Vec::new();
            c.get(f, head.size, &mut bytes).unwrap();
            let name = f.rsplit('/').next().unwrap();
            let mut w = c.upload(&format!("{prefix}{name}"), &head.meta);
            w.write_all(&bytes).unwrap();
            w.finish().unwrap();
        }

        // Neither copy is the newest: an upload is due (the newest is two periods old).
        let got = bucket::newest_verified(&b, &c, ours, now).unwrap().unwrap();
        assert_eq!(got.key, newest);
        assert!(bucket::upload_due(&b, &c, ours, now).unwrap());
        let head = c.head(&future).unwrap().unwrap();
        let listed = bucket::backups(&b, &c, ours).unwrap();
        let find = |k: &str| listed.iter().find(|x| x.key == k).unwrap().clone();
        let why = bucket::distrusted(&find(&future), head.get(key::TIME), now).unwrap();
        assert!(why.contains("more than 30 min after now"), "{why}");
        let head = c.head(&renamed).unwrap().unwrap();
        let why = bucket::distrusted(&find(&renamed), head.get(key::TIME), now).unwrap();
        assert!(
            why.contains("but its metadata says it was taken at"),
            "{why}"
        );
        // `latest` is the newest believed; the listing says which are not, and why.
        let latest = fetch::choose(&b, &c, ours, &Which::Latest).unwrap();
        assert_eq!(latest.backup.key, newest);
        let all = fetch::list(&b, &c, ours).unwrap();
        let text = etcd_setup::day2::backups::list_lines(
            &b,
            ours,
            &all,
            etcd_setup::cli::Format::Text,
            now,
        );
        let line = |k: &str| {
            let name = k.rsplit('/').next().unwrap();
            text.iter().find(|l| l.starts_with(name)).unwrap().clone()
        };
        assert!(
            line(&future).contains("; not believed, counts for nothing: "),
            "{text:?}"
        );
        assert!(
            line(&renamed).contains("; not believed, counts for nothing: "),
            "{text:?}"
        );
        assert!(!line(&newest).contains("not believed"), "{text:?}");

        // Retention (2): our two stay; the copies and the foreign objects take no slot and
        // are not deleted either.
        let pruned = bucket::prune(&b, &c, ours, now).unwrap();
        assert_eq!(pruned.deleted, Vec::<String>::new());
        b.retain = 1;
        let pruned = bucket::prune(&b, &c, ours, now).unwrap();
        assert_eq!(pruned.deleted, vec![older.clone()]);
        for k in [&future, &renamed, &newest] {
            assert!(c.head(k).unwrap().is_some(), "{k} deleted");
        }
    }

    /// Issue 38, item 3: `latest` whose revision is below an older backup's of the
    /// cluster is said (a restore since, or an older snapshot under a newer name), not
    /// refused: etcd's restore keeps the backup's revision, so a cluster restored from an
    /// older backup uploads lower revisions for a while.
    #[test]
    fn a_latest_below_an_older_backups_revision_is_said() {
        use etcd_setup::backup::fetch::{self, Which};
        let b = settings("regress/", "period = \"1h\"");
        let c = client_for(&b);
        let ours = 0xeeee;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let (file, _) = snapshot(100, 5);
        let up = |at: u64, revision: i64| {
            bucket::upload_snapshot(
                &b,
                &c,
                file.path(),
                &digest_of(file.path()),
                &meta(ours, at, revision),
                &mut pass_through,
            )
            .unwrap()
            .key
        };
        up(now - 3 * 3600, 94);
        up(now - 4 * 3600, 50);
        let first = up(now - 2 * 3600, 120);
        let latest = fetch::choose(&b, &c, ours, &Which::Latest).unwrap();
        assert_eq!(
            (latest.backup.key.as_str(), &latest.regression),
            (first.as_str(), &None)
        );
        let low = up(now - 3600, 92);
        let latest = fetch::choose(&b, &c, ours, &Which::Latest).unwrap();
        assert_eq!(latest.backup.key, low);
        let said = latest.regression.expect("a regression said");
        let first_name = first.rsplit('/').next().unwrap();
        assert!(
            said.contains("(revision 92) is the newest backup, but the older ")
                && said.contains(&format!("{first_name} holds revision 120")),
            "{said}"
        );
        // Named, a backup is what the operator chose: nothing said.
        let name = low.rsplit('/').next().unwrap().to_string();
        let named = fetch::choose(&b, &c, ours, &Which::Name(name)).unwrap();
        assert_eq!(named.regression, None);
    }

    #[test]
    fn an_upload_is_due_once_the_period_of_the_newest_verified_object_is_over() {
        let b = settings("due/", "period = \"1h\"");
        let c = client_for(&b);
        // 09:45:00 UTC: its period is 09:00 to 10:00.
        let t = 1_796_118_300;
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        assert!(bucket::upload_due(&b, &c, 7, at(t)).unwrap());
        let (file, _) = snapshot(10, 1);
        bucket::upload_snapshot(
            &b,
            &c,
            file.path(),
            &digest_of(file.path()),
            &meta(7, t, 1),
            &mut pass_through,
        )
        .unwrap();
        assert!(!bucket::upload_due(&b, &c, 7, at(t + 899)).unwrap());
        assert!(bucket::upload_due(&b, &c, 7, at(t + 900)).unwrap());
        // Another cluster's object does not count for this one.
        assert!(bucket::upload_due(&b, &c, 8, at(t)).unwrap());
        let _ = SystemTime::now();
    }
}
