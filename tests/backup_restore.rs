//! The read side of off-node backups (issue 21) against a real object store (Ceph's
//! radosgw, `tests/support/store.rs`) and real etcd on loopback, the binary run with
//! `--config`: a real snapshot sealed to an age recipient and uploaded as `snapshot`
//! uploads it (`bucket::upload_snapshot`); `backups` lists it (text and JSON),
//! `backups verify` proves it; `restore --from-backup latest` brings its keys back on
//! the data dir of a fresh node's empty cluster (moved aside); an object flipped in the
//! bucket, one cut at a chunk boundary, a wrong identity, a name not there and another
//! cluster's backup each end with their own reason, before etcd is touched; the scratch
//! copy is gone after every command; no output holds a key or the identity. The daily
//! timer's `backups verify --if-configured` verifies as by hand where the node can, both
//! recording their verdict for status, and says why not where it cannot.
mod support;

use etcd_setup::backup::bucket::{self, Meta};
use etcd_setup::backup::evidence;
use etcd_setup::backup::s3::Client;
use etcd_setup::backup::seal;
use etcd_setup::reason::{Failure, ReasonCode};
use etcd_setup::shared::config::{self, BackupSettings};
use etcd_setup::shared::report::read_backup_record;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use std::time::SystemTime;
use support::age::keygen;
use support::etcd::Cluster;
use support::store::store;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-setup");
/// Keys put before the snapshot.
const KEYS: usize = 20;

/// The secret key line of an identity file.
fn secret_of(identity: &Path) -> String {
    std::fs::read_to_string(identity)
        .unwrap()
        .lines()
        .find(|l| l.starts_with("AGE-SECRET-KEY-"))
        .unwrap()
        .to_string()
}

/// Where and how a test uploads, as `snapshot` does.
struct Upload<'a> {
    backup: &'a BackupSettings,
    client: &'a Client,
    recipients: &'a Path,
    /// The cluster whose release reads the snapshot's key count.
    c: &'a Cluster,
}

impl Upload<'_> {
    /// `snapshot` uploaded as the object of `cluster` at `revision` (member m1), sealed to
    /// the recipients, with the metadata `bucket::upload_snapshot` writes; its key.
    fn sealed(&self, snapshot: &Path, cluster: u64, revision: i64) -> String {
        let recipients = seal::read_recipients(self.recipients).unwrap();
        let mut sealer = |r: &mut dyn Read, w: &mut dyn Write| {
            seal::seal(r, &recipients, w)
                .map(drop)
                .map_err(|e| Failure::new(ReasonCode::BackupFailed, e.to_string()))
        };
        let meta = Meta {
            cluster,
            member: "m1".into(),
            revision,
            etcd_version: self.c.version.clone(),
            total_keys: etcd_setup::member::tools::file_status(
                &etcd_setup::backup::trial::tool_for(&self.c.bin, &self.c.version).unwrap(),
                snapshot,
            )
            .unwrap()
            .total_keys,
            time: SystemTime::now(),
        };
        // Its digest as the agent's verification of the snapshot gives it.
        let verified = etcd_setup::member::tools::check_trailer(snapshot).unwrap();
        bucket::upload_snapshot(
            self.backup,
            self.client,
            snapshot,
            &verified,
            &meta,
            &mut sealer,
        )
        .unwrap()
        .key
    }
}

/// One member of `version` with [`KEYS`] keys of `value_kib` KiB, its configuration with
/// `[snapshot]` and `[backup]` (objects under a prefix of this test), an identity and
/// its recipients file.
struct Bed {
    c: Cluster,
    dir: tempfile::TempDir,
    cfg: PathBuf,
    identity: PathBuf,
    recipients: PathBuf,
    backup: BackupSettings,
    client: Client,
    /// Every output of the binary, to grep for secrets.
    outputs: Vec<String>,
    /// Secrets beside the store's keys and the identity, to grep for.
    secrets: Vec<String>,
}

impl Bed {
    fn new(version: &str, token: &str, value_kib: usize) -> Bed {
        Bed::with(version, token, value_kib, true)
    }

    /// [`Bed::new`], the snapshots uploaded in the clear unless `encrypt`.
    fn with(version: &str, token: &str, value_kib: usize, encrypt: bool) -> Bed {
        let st = store();
        let c = Cluster::start(version, 1, token);
        let dir = support::scratch::dir("fromback");
        let (identity, recipient) = keygen(dir.path(), "identity");
        let recipients = dir.path().join("recipients");
        std::fs::write(&recipients, format!("{recipient}\n")).unwrap();
        std::fs::set_permissions(&recipients, std::fs::Permissions::from_mode(0o644)).unwrap();
        let prefix = format!("fromback-{}-{token}/", std::process::id());
        let extra = format!(
            "[snapshot]\ndir = \"{}/snaps\"\n\n{}",
            dir.path().display(),
            st.backup_table(
                &prefix,
                &if encrypt {
                    format!(
                        "recipients_file = \"{}\"\nidentity_file = \"{}\"",
                        recipients.display(),
                        identity.display()
                    )
                } else {
                    "encrypt = false".to_string()
                }
            )
        );
        let cfg = c.config_file(0, dir.path(), "", &extra);
        let backup = config::load(&cfg).unwrap().backup.unwrap();
        let client = Client::new(&backup, backup.credentials().unwrap()).unwrap();
        let value = "v".repeat(value_kib << 10);
        let etcd = c.client();
        for i in 0..KEYS {
            etcd.put(&format!("/registry/k{i:02}"), &format!("{i} {value}"))
                .unwrap();
        }
        Bed {
            c,
            dir,
            cfg,
            identity,
            recipients,
            backup,
            client,
            outputs: Vec::new(),
            secrets: Vec::new(),
        }
    }

    /// A snapshot of the member saved with etcdctl; its file and revision.
    fn snapshot(&self) -> (PathBuf, i64) {
        let file = self.dir.path().join("snap.db");
        let out = Command::new(self.c.etcdctl())
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.c.client_url(0)))
            .args(["snapshot", "save"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "snapshot save: {out:?}");
        let revision = self.c.client().endpoint_status().unwrap()[0].revision;
        (file, revision)
    }

    /// The cluster's ID, as etcd says it.
    fn cluster(&self) -> u64 {
        self.c.client().endpoint_status().unwrap()[0].cluster_id.0
    }

    /// `snapshot` uploaded as the object of `cluster`, sealed to the recipients.
    fn upload(&self, snapshot: &Path, cluster: u64, revision: i64) -> String {
        let to = Upload {
            backup: &self.backup,
            client: &self.client,
            recipients: &self.recipients,
            c: &self.c,
        };
        to.sealed(snapshot, cluster, revision)
    }

    /// The binary with `args` and `--config`, its output kept.
    fn run(&mut self, args: &[&str]) -> (Option<i32>, String, String) {
        let state = self.dir.path().join("state");
        let mut cmd = Command::new(BIN);
        // The state folders first: `backups`' subcommands take them before their name.
        let (first, rest) = args.split_first().unwrap();
        cmd.arg(first);
        if *first == "backups" || *first == "restore" {
            cmd.arg("--run-dir")
                .arg(&state)
                .arg("--state-dir")
                .arg(&state);
        }
        cmd.args(rest).arg("--config").arg(&self.cfg);
        let out: Output = cmd.output().unwrap();
        let (so, se) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        println!("$ etcd-setup {}\n{so}{se}", args.join(" "));
        self.outputs.push(format!("{so}{se}"));
        (out.status.code(), so, se)
    }

    /// The scratch copies' folder holds nothing.
    fn assert_no_scratch(&self, case: &str) {
        let top = self.dir.path().join("snaps/.backup-scratch");
        let left: Vec<_> = std::fs::read_dir(&top)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "{case}: the scratch copy is left: {left:?}"
        );
    }

    /// No output held a key or the identity.
    fn assert_no_secret(&self) {
        let st = store();
        let mut secrets = vec![st.secret_key(), st.access_key(), secret_of(&self.identity)];
        secrets.extend(self.secrets.iter().cloned());
        for out in &self.outputs {
            for s in &secrets {
                assert!(!out.contains(s.as_str()), "a secret in: {out}");
            }
        }
        assert!(!self.outputs.is_empty());
    }

    /// Replaces the object `key` by `bytes`, with its metadata as it was.
    fn reput(&self, key: &str, bytes: &[u8]) {
        let head = self.client.head(key).unwrap().unwrap();
        let mut up = self.client.upload(key, &head.meta);
        up.write_all(bytes).unwrap();
        up.finish().unwrap();
    }

    fn object(&self, key: &str) -> Vec<u8> {
        let mut out = Vec::new();
        self.client
            .get(key, self.client.head(key).unwrap().unwrap().size, &mut out)
            .unwrap();
        out
    }
}

fn a_backup_is_listed_verified_and_restored_on_a_fresh_node(version: &str) {
    let token = format!("tok-fromback-{}", version.replace('.', ""));
    let mut bed = Bed::new(version, &token, 1);
    let (snap, revision) = bed.snapshot();
    let cluster = bed.cluster();
    // The ID the configuration makes: the folder `backups` reads without etcd.
    assert_eq!(
        cluster,
        etcd_setup::cluster::etcd::cluster_id(&bed.c.initial_cluster(), &token).0
    );
    let key = bed.upload(&snap, cluster, revision);
    let name = key.rsplit('/').next().unwrap().to_string();

    // Listed, in JSON and text.
    let (code, so, se) = bed.run(&["backups", "--format", "json"]);
    assert_eq!(code, Some(0), "{so}{se}");
    let v: serde_json::Value = serde_json::from_str(so.trim()).unwrap();
    assert_eq!(v["cluster"], format!("{cluster:016x}"));
    assert_eq!(v["bucket"], store().bucket.as_str());
    assert_eq!(v["endpoint"], store().http.as_str());
    assert_eq!(v["prefix"], format!("{}{cluster:016x}/", bed.backup.prefix));
    let list = v["backups"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    let b = &list[0];
    assert_eq!(b["name"], name.as_str());
    assert_eq!(b["key"], key.as_str());
    assert_eq!(b["member"], "m1");
    assert_eq!(b["revision"], revision);
    assert_eq!(b["verified"], "read-back");
    assert_eq!(b["sealed"], true);
    assert_eq!(b["cluster"], format!("{cluster:016x}"));
    assert_eq!(b["etcd_version"], version);
    let size = bed.client.head(&key).unwrap().unwrap().size;
    assert_eq!(b["size"], size);
    assert!(b["age_seconds"].as_u64().unwrap() < 600, "{b}");
    assert!(b["time"].as_str().unwrap().ends_with('Z'), "{b}");
    let (code, so, _) = bed.run(&["backups", "list"]);
    assert_eq!(code, Some(0));
    assert!(
        so.contains(&format!(
            "{name} time {} member m1 revision {revision} size {size} age ",
            b["time"].as_str().unwrap()
        )) && so.contains("verified read-back"),
        "{so}"
    );

    // What a killed fetch left (its pid and start time name no process) goes with the next.
    let dead = bed.dir.path().join("snaps/.backup-scratch/999999999-1-0");
    std::fs::create_dir_all(dead.join(".trial-999999999-1/data")).unwrap();
    std::fs::write(dead.join("etcd-snapshot-left.db"), "plaintext").unwrap();

    // Proven, with the identity of the configuration.
    let (code, so, se) = bed.run(&["backups", "verify", "--format", "json"]);
    assert_eq!(code, Some(0), "{so}{se}");
    let v: serde_json::Value = serde_json::from_str(so.trim()).unwrap();
    assert_eq!(v["verified"], true);
    assert_eq!(v["key"], key.as_str());
    assert_eq!(v["revision"], revision);
    assert_eq!(v["key_revisions"], KEYS as u64);
    assert_eq!(v["snapshot_size"], std::fs::metadata(&snap).unwrap().len());
    assert_eq!(v["object_size"], size);
    assert!(!dead.exists());
    bed.assert_no_scratch("verify");
    // Recorded where status reads it; and the daily timer's run (--if-configured), on a
    // node with the identity, is the same proof, recorded the same way.
    let state = bed.dir.path().join("state");
    let proven = |state: &Path| {
        let v = read_backup_record(state)
            .unwrap()
            .and_then(|r| r.last_verification)
            .expect("a verification recorded");
        assert!(v.ok && v.code.is_none(), "{v:?}");
        assert_eq!(v.object, key);
    };
    proven(&state);
    std::fs::remove_file(state.join("backup.json")).unwrap();
    let (code, so, se) = bed.run(&["backups", "verify", "--if-configured"]);
    assert_eq!(code, Some(0), "{so}{se}");
    assert!(
        so.starts_with(&format!("verified s3://{}/{key} at ", store().bucket)),
        "{so}"
    );
    proven(&state);
    bed.assert_no_scratch("verify --if-configured");
    let (code, so, se) = bed.run(&["backups", "verify", &name]);
    assert_eq!(code, Some(0), "{so}{se}");
    assert!(
        so.starts_with(&format!("verified s3://{}/{key} at ", store().bucket)),
        "{so}"
    );
    assert!(
        so.contains(&format!("revision {revision}, {KEYS} key revisions")),
        "{so}"
    );

    // Every VM lost: a new node from the same template has formed an empty cluster of the
    // same ID on its data dir.
    bed.c.kill(0);
    let data = bed.dir.path().join("data");
    bed.c.members[0].data_dir = data.clone();
    let initial = bed.c.initial_cluster_arg();
    bed.c.launch(0, &initial, "new");
    bed.c.await_ready(0);
    let fresh = bed.c.client();
    fresh.put("/fresh/marker", "the empty cluster").unwrap();
    assert_eq!(fresh.get("/registry/k00").unwrap(), None);
    assert_eq!(bed.cluster(), cluster);
    // While etcd serves, its data is not replaced (and the scratch copy goes anyway).
    let (code, _, se) = bed.run(&["restore", "--from-backup", "latest", "--no-systemd"]);
    assert_eq!(code, Some(1), "{se}");
    assert!(
        se.starts_with("restore-failed: etcd still serves at "),
        "{se}"
    );
    bed.assert_no_scratch("restore refused");
    bed.c.kill(0);

    let identity = bed.identity.display().to_string();
    let (code, so, se) = bed.run(&[
        "restore",
        "--from-backup",
        "latest",
        "--identity",
        &identity,
        "--no-systemd",
    ]);
    assert_eq!(code, Some(0), "{so}{se}");
    assert!(
        so.contains(&format!(
            "restored s3://{}/{key} at {} (revision {revision}, ",
            store().bucket,
            store().http
        )),
        "{so}"
    );
    assert!(so.contains("old data dir moved to "), "{so}");
    assert!(so.contains("the backup's scratch copy "), "{so}");
    bed.assert_no_scratch("restore");
    let aside: Vec<PathBuf> = std::fs::read_dir(bed.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains("data.before-restore-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(aside[0].join("member").is_dir(), "{aside:?}");
    assert!(so.contains(&aside[0].display().to_string()), "{so}");

    // etcd once with --force-new-cluster (systemd's part on a node).
    bed.c.extra = vec!["--force-new-cluster".into()];
    bed.c.launch(0, &initial, "new");
    bed.c.await_ready(0);
    bed.c.extra.clear();
    let back = bed.c.client();
    for i in 0..KEYS {
        let v = back.get(&format!("/registry/k{i:02}")).unwrap().unwrap();
        assert!(v.starts_with(format!("{i} v").as_bytes()), "key {i}");
    }
    assert_eq!(back.get("/fresh/marker").unwrap(), None);
    let rev = back.endpoint_status().unwrap()[0].revision;
    assert!(rev >= revision, "{rev} < {revision}");
    if version.starts_with("3.5") {
        // etcdutl bumps the revision past the lost cluster's, for Kubernetes' watchers.
        assert!(rev > 1_000_000_000, "{rev}");
    }
    let list = back.member_list().unwrap();
    assert_eq!(list.members.len(), 1, "{list:?}");
    assert_eq!(list.header.cluster_id.0, cluster);
    bed.assert_no_secret();
}

#[test]
fn a_backup_is_listed_verified_and_restored_on_a_fresh_node_3_5() {
    a_backup_is_listed_verified_and_restored_on_a_fresh_node("3.5.16");
}

#[test]
fn a_backup_is_listed_verified_and_restored_on_a_fresh_node_3_4() {
    a_backup_is_listed_verified_and_restored_on_a_fresh_node("3.4.23");
}

/// The end of an age file's header (`--- MAC\n`) in `sealed`.
fn header_end(sealed: &[u8]) -> usize {
    let at = sealed
        .windows(5)
        .position(|w| w == b"\n--- ")
        .expect("an age header");
    at + 1 + sealed[at + 1..].iter().position(|&b| b == b'\n').unwrap() + 1
}

#[test]
fn a_damaged_a_cut_and_a_foreign_backup_and_a_wrong_identity_each_have_their_reason() {
    // 8 KiB values: a snapshot of several 64 KiB age chunks.
    let mut bed = Bed::new("3.5.16", "tok-fromback-bad", 8);
    let (snap, revision) = bed.snapshot();
    assert!(std::fs::metadata(&snap).unwrap().len() > 2 * 65536);
    let cluster = bed.cluster();
    let key = bed.upload(&snap, cluster, revision);
    let name = key.rsplit('/').next().unwrap().to_string();
    let good = bed.object(&key);
    let serving = |bed: &Bed| {
        assert!(
            bed.c.client().get("/registry/k03").unwrap().is_some(),
            "etcd was touched"
        )
    };

    // Another identity: decryption fails, for verify and for restore, and etcd is not
    // touched.
    let (other, _) = keygen(bed.dir.path(), "other-identity");
    let other_s = other.display().to_string();
    let (code, so, se) = bed.run(&["backups", "verify", "--identity", &other_s]);
    assert_eq!(code, Some(6), "{so}{se}");
    assert!(se.starts_with("backup-decrypt-failed: "), "{se}");
    assert!(se.contains(&key) && se.contains(&other_s), "{se}");
    bed.assert_no_scratch("wrong identity");
    let (code, _, se) = bed.run(&[
        "restore",
        "--from-backup",
        "latest",
        "--identity",
        &other_s,
        "--no-systemd",
    ]);
    assert_eq!(code, Some(1), "{se}");
    assert!(se.starts_with("backup-decrypt-failed: "), "{se}");
    serving(&bed);
    bed.assert_no_scratch("restore, wrong identity");
    bed.secrets.push(secret_of(&other));

    // A name that is not there.
    let (code, _, se) = bed.run(&["backups", "verify", "20200101T000000Z-rev1-m1.db.age"]);
    assert_eq!(code, Some(1), "{se}");
    assert!(se.starts_with("backup-not-found: "), "{se}");
    // With --format json the failure is also one JSON object on stdout, for programs.
    let (code, so, se) = bed.run(&[
        "backups",
        "verify",
        "20200101T000000Z-rev1-m1.db.age",
        "--format",
        "json",
    ]);
    assert_eq!(code, Some(1), "{se}");
    let v: serde_json::Value = serde_json::from_str(&so).unwrap_or_else(|e| panic!("{e}: {so}"));
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["command"], "backups", "{v}");
    assert_eq!(v["reason"]["code"], "backup-not-found", "{v}");
    assert_eq!(v["exit_code"], 1, "{v}");
    assert!(
        v["reason"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("20200101T000000Z-rev1-m1.db.age") && se.contains(m)),
        "{v}\n{se}"
    );

    // One byte flipped in the store.
    let mut flipped = good.clone();
    let n = flipped.len();
    flipped[n / 2] ^= 0x01;
    bed.reput(&key, &flipped);
    let (code, so, se) = bed.run(&["backups", "verify", &name, "--format", "json"]);
    assert_eq!(code, Some(6), "{se}");
    assert!(se.starts_with("backup-corrupt: "), "{se}");
    let v: serde_json::Value = serde_json::from_str(&so).unwrap_or_else(|e| panic!("{e}: {so}"));
    assert_eq!(
        (v["reason"]["code"].as_str(), v["exit_code"].as_u64()),
        (Some("backup-corrupt"), Some(6)),
        "{v}"
    );
    assert!(se.contains(&key), "{se}");
    bed.assert_no_scratch("flipped");
    // The timer's run finds it too, and records the failure status fails with.
    let (code, _, se) = bed.run(&["backups", "verify", "--if-configured"]);
    assert_eq!(code, Some(6), "{se}");
    assert!(se.starts_with("backup-corrupt: "), "{se}");
    let v = read_backup_record(&bed.dir.path().join("state"))
        .unwrap()
        .and_then(|r| r.last_verification)
        .expect("a verification recorded");
    assert_eq!(
        (v.ok, v.code),
        (false, Some(ReasonCode::BackupCorrupt)),
        "{v:?}"
    );
    assert!(
        v.message.as_deref().is_some_and(|m| se.contains(m)),
        "{v:?}\n{se}"
    );
    bed.assert_no_scratch("flipped, --if-configured");
    let (code, _, se) = bed.run(&["restore", "--from-backup", &name, "--no-systemd"]);
    assert_eq!(code, Some(1), "{se}");
    assert!(se.starts_with("backup-corrupt: "), "{se}");
    serving(&bed);

    // Cut after its first chunk.
    let cut = header_end(&good) + 16 + 65536 + 16;
    bed.reput(&key, &good[..cut]);
    let (code, _, se) = bed.run(&["backups", "verify"]);
    assert_eq!(code, Some(6), "{se}");
    assert!(se.starts_with("backup-truncated: "), "{se}");
    assert!(se.contains(&key), "{se}");
    bed.assert_no_scratch("cut");

    // Put back as it was, it passes again.
    bed.reput(&key, &good);
    let (code, so, se) = bed.run(&["backups", "verify", &name]);
    assert_eq!(code, Some(0), "{so}{se}");

    // Another cluster's backup: listed in its folder with --cluster, refused by name
    // without it; in our folder with another cluster's metadata, shown and refused.
    let foreign = 0x0000_0000_dead_beef;
    let theirs = bed.upload(&snap, foreign, revision);
    let (code, so, _) = bed.run(&[
        "backups",
        "--cluster",
        "00000000deadbeef",
        "--format",
        "json",
    ]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(so.trim()).unwrap();
    assert_eq!(v["backups"][0]["key"], theirs.as_str(), "{v}");
    let (code, _, se) = bed.run(&["restore", "--from-backup", &theirs, "--no-systemd"]);
    assert_eq!(code, Some(1), "{se}");
    assert!(se.starts_with("cluster-mismatch: "), "{se}");
    assert!(se.contains("--cluster"), "{se}");
    serving(&bed);
    let planted = format!(
        "{}20200101T000000Z-rev{revision}-m1.db.age",
        bucket::cluster_prefix(&bed.backup, cluster)
    );
    let head = bed.client.head(&theirs).unwrap().unwrap();
    let mut up = bed.client.upload(&planted, &head.meta);
    up.write_all(&good).unwrap();
    up.finish().unwrap();
    let (code, so, _) = bed.run(&["backups"]);
    assert_eq!(code, Some(0));
    assert!(so.contains("verified other-cluster"), "{so}");
    let (code, _, se) = bed.run(&["backups", "verify", planted.rsplit('/').next().unwrap()]);
    assert_eq!(code, Some(1), "{se}");
    assert!(se.starts_with("cluster-mismatch: "), "{se}");
    bed.assert_no_scratch("foreign");
    // Told with --cluster, it is fetched and proven, with a warning; its content is this
    // cluster's (the members decide, not the name its scratch copy gets from the
    // metadata): restore's own --cluster-check passes it, and the restore stops only at
    // the etcd that still serves here, nothing changed.
    let (code, _, se) = bed.run(&[
        "restore",
        "--from-backup",
        theirs.rsplit('/').next().unwrap(),
        "--cluster",
        "00000000deadbeef",
        "--cluster-check",
        "--no-systemd",
    ]);
    assert_eq!(code, Some(1), "{se}");
    assert!(
        se.contains("is a backup of cluster 00000000deadbeef (--cluster)"),
        "{se}"
    );
    assert!(!se.contains("cluster-mismatch: "), "{se}");
    assert!(se.contains("restore-failed: etcd still serves at "), "{se}");
    serving(&bed);
    bed.assert_no_scratch("foreign, told");

    // Issue 38: another cluster's snapshot put in the bucket by one of its writers, named
    // and described as this cluster's newest backup. Its content decides: `backups
    // verify` and `restore --from-backup` refuse it as cluster-mismatch, etcd untouched.
    let mut other = support::etcd::Cluster::start("3.5.16", 1, "tok-other-writer");
    other
        .client()
        .put("/registry/secrets/planted", "x")
        .unwrap();
    let other_snap = bed.dir.path().join("other.db");
    other
        .client()
        .snapshot_save(&other.client_url(0), &other_snap, Duration::from_secs(30))
        .unwrap();
    let other_revision = other.client().endpoint_status().unwrap()[0].revision;
    other.kill(0);
    // Named now, so the newest; its metadata true to the content but for the cluster.
    let fake = bed.upload(&other_snap, cluster, other_revision);
    let fake_name = fake.rsplit('/').next().unwrap().to_string();
    for args in [
        vec!["backups", "verify", "latest"],
        vec!["restore", "--from-backup", "latest", "--no-systemd"],
    ] {
        let (code, so, se) = bed.run(&args);
        assert_eq!(code, Some(1), "{args:?}: {so}{se}");
        // Its revision is below the older backup's: said first (issue 38, item 3).
        let (warning, failure) = se.split_once('\n').unwrap_or(("", &se));
        assert!(
            warning.starts_with("etcd-setup: warning: ")
                && warning.contains(&format!("{fake_name} at "))
                && warning.contains(&format!(
                    "(revision {other_revision}) is the newest backup, but the older "
                )),
            "{args:?}: {se}"
        );
        assert!(failure.starts_with("cluster-mismatch: "), "{args:?}: {se}");
        assert!(
            failure.contains(&fake_name) && failure.contains("but its content is not"),
            "{args:?}: {se}"
        );
        serving(&bed);
        bed.assert_no_scratch("another cluster's content under our name");
    }
    assert!(bed
        .c
        .client()
        .get("/registry/secrets/planted")
        .unwrap()
        .is_none());
    bed.client.delete(&fake).unwrap();

    // A configuration without [backup] says so.
    let elsewhere = bed.dir.path().join("plain");
    std::fs::create_dir(&elsewhere).unwrap();
    let plain = bed.c.config_file(0, &elsewhere, "", "");
    let out = Command::new(BIN)
        .args(["backups", "--config"])
        .arg(&plain)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no [backup] table"));
    // An encrypted backup and no identity named: the command says where to name one.
    let table = store().backup_table(
        &bed.backup.prefix,
        &format!("recipients_file = \"{}\"", bed.recipients.display()),
    );
    let no_identity = bed.c.config_file(0, &elsewhere, "", &table);
    let out = Command::new(BIN)
        .args(["backups", "verify", "--config"])
        .arg(&no_identity)
        .output()
        .unwrap();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{se}");
    assert!(
        se.starts_with("config-invalid: ") && se.contains("--identity FILE"),
        "{se}"
    );
    bed.outputs.push(se);
    bed.assert_no_secret();
}

/// `backups verify --if-configured` (etcd-setup-backup-verify.timer, on every node) where
/// the node cannot verify: no `[backup]`, or encrypted backups and no identity named. One
/// line says why, the exit code is 0, nothing is recorded and no store is asked (the
/// endpoint here is a closed port). With an identity named it verifies as without the
/// flag, and fails as it does: the store out of reach.
#[test]
fn verify_if_configured_says_why_a_node_without_backup_or_identity_verifies_nothing() {
    let dir = support::scratch::dir("ifconf");
    let state = dir.path().join("state");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let key_file = |name: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, format!("{name}-not-a-real-key\n")).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        f
    };
    let (access, secret) = (key_file("access"), key_file("secret"));
    let (identity, recipient) = keygen(dir.path(), "identity");
    let recipients = dir.path().join("recipients");
    std::fs::write(&recipients, format!("{recipient}\n")).unwrap();
    let node = "[node]\nname = \"m1\"\nip = \"127.0.0.1\"\n[etcd]\n\
                initial_cluster = \"m1=http://127.0.0.1:2380\"\ncluster_token = \"t\"\n";
    let write = |name: &str, text: String| {
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        f
    };
    let plain = write("plain.toml", node.to_string());
    let sealed = write(
        "sealed.toml",
        format!(
            "{node}[backup]\nendpoint = \"http://127.0.0.1:{closed}\"\nallow_http = true\n\
             path_style = true\nbucket = \"etcd-backups\"\naccess_key_file = \"{}\"\nsecret_key_file = \"{}\"\n\
             recipients_file = \"{}\"\n",
            access.display(),
            secret.display(),
            recipients.display()
        ),
    );
    let verify = |config: &Path, extra: &[&str]| {
        let out = Command::new(BIN)
            .arg("backups")
            .arg("--run-dir")
            .arg(&state)
            .arg("--state-dir")
            .arg(&state)
            .args(["verify", "--if-configured"])
            .args(extra)
            .arg("--config")
            .arg(config)
            .output()
            .unwrap();
        let (so, se) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        println!(
            "$ etcd-setup backups verify --if-configured {extra:?} ({})\n{so}{se}",
            config.display()
        );
        (out.status.code(), so, se)
    };
    for (config, why) in [
        (
            &plain,
            format!(
                "nothing verified: {} has no [backup] table, so this node keeps no backups \
                 off the node",
                plain.display()
            ),
        ),
        (
            &sealed,
            format!(
                "nothing verified: the backups are encrypted (age) and {} names no \
                 backup.identity_file to decrypt them; verify where the identity is: \
                 etcd-setup backups verify --identity FILE",
                sealed.display()
            ),
        ),
    ] {
        let (code, so, se) = verify(config, &[]);
        assert_eq!(code, Some(0), "{so}{se}");
        assert_eq!(so, format!("{why}\n"));
        assert_eq!(se, "");
        let (code, so, se) = verify(config, &["--format", "json"]);
        assert_eq!(code, Some(0), "{so}{se}");
        let v: serde_json::Value =
            serde_json::from_str(&so).unwrap_or_else(|e| panic!("{e}: {so}"));
        assert_eq!(v, serde_json::json!({ "verified": false, "skipped": why }));
    }
    assert!(!state.join("backup.json").exists());

    // An identity named: the same verification as without the flag, which asks the store.
    let identity_s = identity.display().to_string();
    let (code, so, se) = verify(&sealed, &["--identity", &identity_s]);
    assert_eq!(code, Some(1), "{so}{se}");
    assert!(se.starts_with("backup-unreachable: "), "{se}");
    assert!(se.contains(&format!("127.0.0.1:{closed}")), "{se}");
    assert!(!se.contains("not-a-real-key"), "{se}");
    assert!(!se.contains(&secret_of(&identity)), "{se}");
    assert!(!state.join("backup.json").exists());
}

#[test]
fn a_backup_in_the_clear_is_proven_by_its_digests_and_a_flipped_byte_is_corrupt() {
    let mut bed = Bed::with("3.5.16", "tok-fromback-clear", 1, false);
    let (snap, revision) = bed.snapshot();
    let cluster = bed.cluster();
    let key = bed.upload(&snap, cluster, revision);
    assert!(key.ends_with(".db"), "{key}");
    let (code, so, se) = bed.run(&["backups", "--format", "json"]);
    assert_eq!(code, Some(0), "{so}{se}");
    let v: serde_json::Value = serde_json::from_str(so.trim()).unwrap();
    assert_eq!(v["backups"][0]["sealed"], false, "{v}");
    let (code, so, se) = bed.run(&["backups", "verify"]);
    assert_eq!(code, Some(0), "{so}{se}");
    assert!(
        so.contains(&format!("revision {revision}, {KEYS} key revisions")),
        "{so}"
    );
    assert!(!so.contains("decrypted"), "{so}");
    // In the clear no identity is needed: the timer's run (--if-configured) verifies.
    let (code, so, se) = bed.run(&["backups", "verify", "--if-configured"]);
    assert_eq!(code, Some(0), "{so}{se}");
    assert!(so.starts_with("verified s3://"), "{so}");

    let good = bed.object(&key);
    assert_eq!(good, std::fs::read(&snap).unwrap());
    let mut flipped = good.clone();
    let n = flipped.len();
    flipped[n / 3] ^= 0x80;
    bed.reput(&key, &flipped);
    let (code, _, se) = bed.run(&["backups", "verify"]);
    assert_eq!(code, Some(6), "{se}");
    assert!(se.starts_with("backup-corrupt: "), "{se}");
    assert!(
        se.contains("its metadata says the object uploaded had SHA-256"),
        "{se}"
    );
    bed.assert_no_scratch("flipped in the clear");
    bed.assert_no_secret();
}

#[test]
fn a_verify_stopped_by_sigterm_removes_its_scratch_copy() {
    // 100 KiB values: a snapshot of about 2 MiB, long enough to be caught mid-way.
    let mut bed = Bed::new("3.5.16", "tok-fromback-term", 100);
    let etcd = bed.c.client();
    let value = "w".repeat(100 << 10);
    for i in 0..100 {
        etcd.put(&format!("/bulk/{i:03}"), &value).unwrap();
    }
    let (snap, revision) = bed.snapshot();
    let key = bed.upload(&snap, bed.cluster(), revision);
    let state = bed.dir.path().join("state");
    let mut child = Command::new(BIN)
        .args(["backups", "--run-dir"])
        .arg(&state)
        .args(["verify", "--config"])
        .arg(&bed.cfg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Awaited: the plaintext copy appears in the scratch folder.
    let top = bed.dir.path().join("snaps/.backup-scratch");
    let started = std::time::Instant::now();
    let seen = loop {
        let copy = std::fs::read_dir(&top).ok().and_then(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_dir(e.path()).ok())
                .flatten()
                .flatten()
                .find(|f| {
                    f.file_name()
                        .to_string_lossy()
                        .starts_with("etcd-snapshot-")
                })
        });
        if let Some(f) = copy {
            break f.path();
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("verify of {key} ended ({status}) before its copy was seen");
        }
        assert!(started.elapsed().as_secs() < 60, "no scratch copy appeared");
        std::thread::yield_now();
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("{seen:?}: {se}");
    bed.outputs.push(se.clone());
    // Caught before it ended: interrupted, and the copy is gone.
    assert_eq!(out.status.code(), Some(4), "{se}");
    assert!(
        se.starts_with(
            "interrupted: etcd-setup backups was stopped by SIGTERM while fetching and proving \
             the backup latest of cluster "
        ),
        "{se}"
    );
    assert!(!seen.exists());
    bed.assert_no_scratch("SIGTERM");
    bed.assert_no_secret();
}

/// A member's progress lines (`said`) tell of no restore of its own.
fn assert_restored_nothing(said: &[String]) {
    assert!(
        !said
            .iter()
            .any(|l| l.starts_with("restore_when_empty: restored")),
        "{said:?}"
    );
}

/// `backup.restore_when_empty` (issue 21 item 6, issue 38 items 1 and 2): every member of a
/// three-member cluster lost, the new ones start with empty data dirs and the same
/// configuration, each file listing itself first. All three decide at once and say
/// through the bucket that they are empty; m1, the first by name, proves the newest backup
/// and restores it; the other two wait for it instead of bootstrapping an empty cluster,
/// then join it as learners, one after the other, and are promoted; the keys and the
/// cluster ID are those of before. Then m1 recreated empty while m2 and m3 reboot with
/// keys newer than the backup: m1 restores nothing and joins them, the keys kept; a member
/// that never speaks keeps an empty one waiting (`join-blocked`). A folder without a
/// backup starts a new cluster; a bucket out of reach keeps etcd off with the bucket's
/// reason.
fn restore_when_empty_brings_a_lost_cluster_back_from_the_bucket(version: &str) {
    use etcd_setup::cluster::lifecycle::{join, Node};
    use etcd_setup::member::service::ByCaller;
    use etcd_setup::road::from_bucket::{self, Start};
    let st = store();
    let v = version.replace('.', "");
    let token = &format!("tok-when-empty-{v}");
    let mut c = Cluster::start(version, 3, token);
    let dir = support::scratch::dir("whenempty");
    let (identity, recipient) = keygen(dir.path(), "identity");
    let recipients = dir.path().join("recipients");
    std::fs::write(&recipients, format!("{recipient}\n")).unwrap();
    let prefix = format!("whenempty-{}-{v}/", std::process::id());
    let config_of = |c: &Cluster, i: usize, table: &str| {
        let d = dir.path().join(format!("node-{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let extra = format!("[snapshot]\ndir = \"{}/snaps\"\n\n{table}", d.display());
        c.config_file(i, &d, "", &extra)
    };
    let table = st.backup_table(
        &prefix,
        &format!(
            "recipients_file = \"{}\"\nidentity_file = \"{}\"\nrestore_when_empty = true",
            recipients.display(),
            identity.display()
        ),
    );
    let etcd = c.client();
    for i in 0..KEYS {
        etcd.put(&format!("/registry/k{i:02}"), &format!("value {i}"))
            .unwrap();
    }
    let cluster = etcd.endpoint_status().unwrap()[0].cluster_id.0;
    let snap = dir.path().join("snap.db");
    etcd.snapshot_save(&c.client_url(0), &snap, std::time::Duration::from_secs(30))
        .unwrap();
    let revision = etcd.endpoint_status().unwrap()[0].revision;
    // Each node's file lists the members starting with itself (issue 38: two members
    // whose files began with themselves both restored): the restorer is the first by name.
    let settings: Vec<_> = (0..3)
        .map(|i| {
            let path = config_of(&c, i, &table);
            let text = std::fs::read_to_string(&path).unwrap();
            let mut members: Vec<_> = c
                .initial_cluster_arg()
                .split(',')
                .map(str::to_string)
                .collect();
            members.rotate_left(i);
            let text = text.replace(&c.initial_cluster_arg(), &members.join(","));
            std::fs::write(&path, text).unwrap();
            let s = config::load(&path).unwrap();
            assert_eq!(s.initial_cluster[0].0, format!("m{}", i + 1));
            s
        })
        .collect();
    let backup = settings[0].backup.clone().unwrap();
    assert!(backup.restore_when_empty);
    let client = Client::new(&backup, backup.credentials().unwrap()).unwrap();
    let key = Upload {
        backup: &backup,
        client: &client,
        recipients: &recipients,
        c: &c,
    }
    .sealed(&snap, cluster, revision);

    // Every VM gone: three fresh ones, data dirs empty, nothing serving.
    for (i, s) in settings.iter().enumerate() {
        c.wipe(i);
        c.members[i].data_dir = s.data_dir.clone();
    }
    // The second and third members decide while the first does: each says that its data
    // dir is empty, and only m1, the first by name, restores once all three have.
    let decider = |s: &config::Settings| {
        let s = s.clone();
        std::thread::spawn(move || {
            let node = Node::from_settings(&s);
            let mut said = Vec::new();
            let start =
                from_bucket::decide(&s, &node, &ByCaller, &mut |p| said.push(p.to_string()));
            (start, said)
        })
    };
    let second = decider(&settings[1]);
    let third = decider(&settings[2]);
    let node0 = Node::from_settings(&settings[0]);
    assert!(from_bucket::applies(&settings[0], &node0, &None));
    let mut said = Vec::new();
    let start = from_bucket::decide(&settings[0], &node0, &ByCaller, &mut |p| {
        said.push(p.to_string())
    })
    .unwrap();
    println!("first member:\n  {}", said.join("\n  "));
    let Start::Restored(shown) = &start else {
        panic!("{start:?}")
    };
    assert!(shown.contains(&format!("/{key} at ")), "{shown}");
    assert!(said.iter().any(|l| l.contains("proven in")), "{said:?}");
    // The road starts it once with --force-new-cluster.
    c.extra = vec!["--force-new-cluster".into()];
    let initial = c.initial_cluster_arg();
    c.launch(0, &initial, "new");
    c.await_ready(0);
    c.extra.clear();
    let join_as = |c: &mut Cluster, i: usize, plan: &join::Plan| {
        c.launch(i, &plan.initial_cluster, plan.state.as_str());
        c.await_ready(i);
        let node = Node::from_settings(&settings[i]);
        join::promote(&node, plan, std::time::Duration::from_secs(60), &mut |_| {}).unwrap();
    };
    // Each joins as its decision ends: etcd takes one learner at a time, so whichever
    // added its learner first is started and promoted before the other can add its own.
    let mut pending = vec![(1, second), (2, third)];
    while !pending.is_empty() {
        let Some(k) = pending.iter().position(|(_, t)| t.is_finished()) else {
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        };
        let (i, t) = pending.remove(k);
        let (start, said) = t.join().unwrap();
        println!("member m{}:\n  {}", i + 1, said.join("\n  "));
        let Start::AsDecided(Some(plan)) = start.unwrap() else {
            panic!("m{} did not join", i + 1)
        };
        // It waited for m1's restore, or (having asked before m1 said it was empty) found
        // m1's etcd running; it never restored.
        assert!(
            said.iter().any(|l| {
                l.contains("waiting for m1, the first member by name, to restore")
                    || l.contains("etcd runs on m1 (")
            }),
            "{said:?}"
        );
        assert_restored_nothing(&said);
        join_as(&mut c, i, &plan);
    }
    assert!(
        evidence::empty_members(&backup, &client, cluster)
            .unwrap()
            .is_empty(),
        "markers left after the recovery"
    );
    let all = c.client().with_endpoints(c.client_urls());
    let list = all.member_list().unwrap();
    assert_eq!(list.header.cluster_id.0, cluster);
    assert_eq!(
        list.members.iter().filter(|m| !m.is_learner).count(),
        3,
        "{list:?}"
    );
    let one = c.client().with_endpoints(vec![c.client_url(1)]);
    for i in 0..KEYS {
        assert_eq!(
            one.get(&format!("/registry/k{i:02}")).unwrap().as_deref(),
            Some(format!("value {i}").as_bytes())
        );
    }

    // Issue 38's B1: power lost everywhere, m1's VM recreated empty while m2 and m3 boot
    // with their data, newer than the backup. m1 says it is empty and waits; it never
    // restores, and joins them once their etcd runs: no key is lost.
    for i in 0..KEYS {
        all.put(&format!("/registry/after-{i:02}"), "newer than the backup")
            .unwrap();
    }
    for i in 0..3 {
        c.kill(i);
    }
    c.wipe(0);
    let first = decider(&settings[0]);
    std::thread::sleep(std::time::Duration::from_secs(8));
    assert!(!first.is_finished(), "m1 decided with m2 and m3 silent");
    let initial = c.initial_cluster_arg();
    for i in 1..3 {
        c.launch(i, &initial, "existing");
    }
    let (start, said) = first.join().unwrap();
    println!(
        "m1 recreated empty, m2 and m3 booting with data:\n  {}",
        said.join("\n  ")
    );
    let Start::AsDecided(Some(plan)) = start.unwrap() else {
        panic!("m1 did not join the members with data: {said:?}")
    };
    assert!(
        said.iter()
            .any(|l| l.contains("waiting for m2, m3 to say that their data dirs are empty")),
        "{said:?}"
    );
    assert!(
        said.iter().any(|l| l.contains("restores nothing")),
        "{said:?}"
    );
    assert_restored_nothing(&said);
    join_as(&mut c, 0, &plan);
    let one = c.client().with_endpoints(vec![c.client_url(0)]);
    for i in 0..KEYS {
        assert_eq!(
            one.get(&format!("/registry/after-{i:02}"))
                .unwrap()
                .as_deref(),
            Some(&b"newer than the backup"[..]),
            "a key written after the backup is lost"
        );
    }
    // A member that never says it is empty (its VM gone for good, say) keeps an empty one
    // waiting until the start timeout, never restoring.
    for i in 0..3 {
        c.kill(i);
    }
    c.wipe(2);
    let mut short = settings[2].clone();
    short.start_timeout = std::time::Duration::from_secs(12);
    let f = from_bucket::decide(&short, &Node::from_settings(&short), &ByCaller, &mut |_| {})
        .unwrap_err();
    assert_eq!(f.code, ReasonCode::JoinBlocked, "{f}");
    assert!(
        f.message
            .contains("within 12 s neither did m1, m2 say that their data dirs are empty"),
        "{f}"
    );

    // Another cluster's configuration (another token: its own, empty folder) starts new.
    let other = config_of(&c, 0, &table).to_string_lossy().into_owned();
    let text = std::fs::read_to_string(&other)
        .unwrap()
        .replace(token.as_str(), "tok-when-empty-other");
    let other_cfg = dir.path().join("other.toml");
    std::fs::write(&other_cfg, text).unwrap();
    let s = config::load(&other_cfg).unwrap();
    let _ = std::fs::remove_dir_all(&s.data_dir);
    let mut said = Vec::new();
    let start = from_bucket::decide(&s, &Node::from_settings(&s), &ByCaller, &mut |p| {
        said.push(p.to_string())
    })
    .unwrap();
    assert!(matches!(start, Start::AsDecided(None)), "{start:?}");
    assert!(
        said.last().unwrap().contains("starting a new cluster"),
        "{said:?}"
    );

    // The store out of reach: etcd stays off, with the bucket's reason.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let text = std::fs::read_to_string(&other_cfg)
        .unwrap()
        .replace(st.http.as_str(), &format!("http://127.0.0.1:{port}"));
    std::fs::write(&other_cfg, text).unwrap();
    let s = config::load(&other_cfg).unwrap();
    let f = from_bucket::decide(&s, &Node::from_settings(&s), &ByCaller, &mut |_| {}).unwrap_err();
    assert_eq!(f.code, ReasonCode::BackupUnreachable, "{f}");
    assert!(f.message.contains("etcd stays off"), "{f}");
    let out = format!("{f}");
    for secret in [st.secret_key(), st.access_key(), secret_of(&identity)] {
        assert!(!out.contains(&secret));
    }
}

#[test]
fn restore_when_empty_brings_a_lost_cluster_back_from_the_bucket_3_5() {
    restore_when_empty_brings_a_lost_cluster_back_from_the_bucket("3.5.16");
}

#[test]
fn restore_when_empty_brings_a_lost_cluster_back_from_the_bucket_3_6() {
    restore_when_empty_brings_a_lost_cluster_back_from_the_bucket("3.6.16");
}

#[test]
fn restore_when_empty_brings_a_lost_cluster_back_from_the_bucket_3_7() {
    restore_when_empty_brings_a_lost_cluster_back_from_the_bucket("3.7.3");
}
