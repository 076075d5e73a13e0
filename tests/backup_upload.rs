//! `etcd-setup snapshot` with `[backup]` against a real object store (Ceph's radosgw from
//! Debian's packages, `tests/support/radosgw`) and real etcd 3.5.16 on loopback: one
//! object per cluster per period, which the stock `age -d` opens into a snapshot
//! `etcdutl snapshot status` reads; two members at once make one object; wrong keys are
//! `backup-denied` in the command's output and in status, the local snapshot kept; no
//! output carries a secret key.
mod support;

use etcd_setup::backup::bucket;
use etcd_setup::backup::s3::Client;
use etcd_setup::shared::config::{self, BackupSettings};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use support::etcd::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-setup");
const VERSION: &str = "3.5.16";

use support::store::store;

fn secret() -> String {
    std::fs::read_to_string(&store().secret)
        .unwrap()
        .trim()
        .to_string()
}

/// A node's files: its scratch folder, snapshot folder, state folder, age identity.
struct Node {
    dir: tempfile::TempDir,
    identity: PathBuf,
}

impl Node {
    fn new() -> Node {
        let dir = support::scratch::dir("upload");
        let (identity, recipient) = support::age::keygen(dir.path(), "identity");
        let recipients = dir.path().join("recipients");
        std::fs::write(&recipients, format!("{recipient}\n")).unwrap();
        std::fs::set_permissions(&recipients, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::create_dir(dir.path().join("snaps")).unwrap();
        Node { dir, identity }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn state(&self) -> PathBuf {
        self.path("state")
    }

    /// The configuration of member `i` of `c`: snapshots into `snaps/`, backups under
    /// `prefix`, the secret key in `secret_file`.
    fn config(&self, c: &Cluster, i: usize, prefix: &str, secret_file: &Path) -> PathBuf {
        let s = store();
        let extra = format!(
            r#"[snapshot]
dir = "{snaps}"

[backup]
endpoint = "{endpoint}"
allow_http = true
bucket = "{bucket}"
prefix = "{prefix}"
path_style = true
access_key_file = "{access}"
secret_key_file = "{secret}"
recipients_file = "{recipients}"
identity_file = "{identity}"
# Long periods, aligned on the epoch: a test never straddles two.
period = "744h"
"#,
            snaps = self.path("snaps").display(),
            endpoint = s.http,
            bucket = s.bucket,
            access = s.access.display(),
            secret = secret_file.display(),
            recipients = self.path("recipients").display(),
            identity = self.identity.display(),
        );
        c.config_file(i, self.dir.path(), "", &extra)
    }

    fn snapshot_cmd(&self, cfg: &Path) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("snapshot")
            .arg("--config")
            .arg(cfg)
            .arg("--state-dir")
            .arg(self.state())
            .arg("--run-dir")
            .arg(self.state());
        cmd
    }

    fn snapshot(&self, cfg: &Path) -> Output {
        self.snapshot_cmd(cfg).output().unwrap()
    }

    fn record(&self, name: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.state().join(name)).unwrap()).unwrap()
    }

    /// `etcd-setup status --format json` from a server reading `cfg` and the state folder.
    fn status_json(&self, cfg: &Path) -> (String, serde_json::Value) {
        use std::io::BufRead;
        // A socket's path is short (108 bytes): not in the scratch folder.
        let short = tempfile::tempdir().unwrap();
        let socket = short.path().join("status.sock");
        let mut server = Command::new(BIN)
            .args(["serve-status", "--idle-exit", "1s", "--config"])
            .arg(cfg)
            .arg("--socket")
            .arg(&socket)
            .arg("--run-dir")
            .arg(self.path("run"))
            .arg("--state-dir")
            .arg(self.state())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(server.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("serving"), "{line}");
        let out = Command::new(BIN)
            .args(["status", "--format", "json", "--socket"])
            .arg(&socket)
            .output()
            .unwrap();
        let _ = server.wait();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        (text, v)
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `[backup]` of `cfg` as the agent reads it, and a client for it.
fn bucket_of(cfg: &Path) -> (BackupSettings, Client) {
    let b = config::load(cfg).unwrap().backup.unwrap();
    let c = Client::new(&b, b.credentials().unwrap()).unwrap();
    (b, c)
}

fn cluster_id(c: &Cluster) -> u64 {
    c.client().endpoint_status().unwrap()[0].cluster_id.0
}

/// The objects of `cluster` under `b`'s prefix.
fn objects(b: &BackupSettings, c: &Client, cluster: u64) -> Vec<String> {
    c.list(&bucket::cluster_prefix(b, cluster), 1000)
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect()
}

#[test]
fn a_snapshot_goes_up_once_per_period_and_age_and_etcdutl_open_it() {
    let c = Cluster::start(VERSION, 1, "tok-upload-one");
    for i in 0..20 {
        c.client().put(&format!("k{i}"), "v").unwrap();
    }
    let n = Node::new();
    let cfg = n.config(&c, 0, "one/", &store().secret);
    let first = n.snapshot(&cfg);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let (b, client) = bucket_of(&cfg);
    let cluster = cluster_id(&c);
    let keys = objects(&b, &client, cluster);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let key = &keys[0];
    assert!(key.ends_with("-m1.db.age"), "{key}");
    let out = String::from_utf8_lossy(&first.stdout);
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("backup {key} in bucket"))
                && l.ends_with("age-encrypted verified read-back")),
        "{out}"
    );
    let head = client.head(key).unwrap().unwrap();
    assert_eq!(head.get(bucket::key::VERIFIED), Some("read-back"));
    assert_eq!(head.get(bucket::key::ETCD_VERSION), Some(VERSION));
    assert_eq!(head.get(bucket::key::MEMBER), Some("m1"));

    // The stock age opens it into the very snapshot kept on the node, which etcdutl reads.
    let sealed = n.path("sealed.age");
    let mut f = std::fs::File::create(&sealed).unwrap();
    client.get(key, &mut f).unwrap();
    drop(f);
    let plain = n.path("plain.db");
    let age = Command::new("age")
        .arg("-d")
        .arg("-i")
        .arg(&n.identity)
        .arg("-o")
        .arg(&plain)
        .arg(&sealed)
        .output()
        .unwrap();
    assert!(age.status.success(), "{age:?}");
    let snap = n.record("snapshot.json");
    let kept = PathBuf::from(snap["last"]["file"].as_str().unwrap());
    assert_eq!(
        std::fs::read(&plain).unwrap(),
        std::fs::read(&kept).unwrap()
    );
    let status = Command::new(support::etcd::release(VERSION).join("etcdutl"))
        .args(["snapshot", "status", "-w", "json"])
        .arg(&plain)
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let st: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(st["revision"], snap["last"]["revision"], "{st}");
    assert_eq!(
        head.get(bucket::key::REVISION).map(str::to_string),
        Some(snap["last"]["revision"].to_string())
    );
    // The key count the metadata carries is etcdutl's own for the object's plaintext.
    assert_eq!(
        head.get(bucket::key::TOTAL_KEYS).map(str::to_string),
        Some(st["totalKey"].to_string()),
        "{st}"
    );

    let rec = n.record("backup.json");
    assert_eq!(rec["last_upload"]["object"], key.as_str());
    assert_eq!(rec["last_upload"]["verified"], true);
    assert_eq!(rec["last_upload"]["member"], "m1");
    assert!(rec["failure"].is_null(), "{rec}");

    // The same period: a second snapshot is kept here, and nothing more goes up.
    c.client().put("later", "v").unwrap();
    let second = n.snapshot(&cfg);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    let out = String::from_utf8_lossy(&second.stdout);
    assert!(out.contains(&format!("backup not due: {key}")), "{out}");
    assert_eq!(objects(&b, &client, cluster), keys);

    let (json, v) = n.status_json(&cfg);
    assert_eq!(v["backup"]["configured"], true, "{json}");
    assert_eq!(v["backup"]["newest"]["object"], key.as_str(), "{json}");
    assert_eq!(v["backup"]["stale"], false, "{json}");
    let all = format!(
        "{}{}{json}{rec}{}",
        text(&first),
        text(&second),
        std::fs::read_to_string(n.state().join("backup.json")).unwrap()
    );
    assert!(!all.contains(&secret()), "a secret key in the outputs");
}

#[test]
fn two_members_at_once_make_one_object() {
    let c = Cluster::start(VERSION, 3, "tok-upload-two");
    c.client().put("k", "v").unwrap();
    let (a, b) = (Node::new(), Node::new());
    let (cfg_a, cfg_b) = (
        a.config(&c, 0, "two/", &store().secret),
        b.config(&c, 1, "two/", &store().secret),
    );
    let ra = a
        .snapshot_cmd(&cfg_a)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rb = b
        .snapshot_cmd(&cfg_b)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (oa, ob) = (
        ra.wait_with_output().unwrap(),
        rb.wait_with_output().unwrap(),
    );
    assert_eq!(oa.status.code(), Some(0), "{}", text(&oa));
    assert_eq!(ob.status.code(), Some(0), "{}", text(&ob));
    let (settings, client) = bucket_of(&cfg_a);
    let keys = objects(&settings, &client, cluster_id(&c));
    assert_eq!(keys.len(), 1, "{keys:?}\n{}\n{}", text(&oa), text(&ob));
    let said: Vec<String> = [&oa, &ob]
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .collect();
    let uploaded = said
        .iter()
        .filter(|s| s.contains(" verified read-back"))
        .count();
    let not_due = said.iter().filter(|s| s.contains("backup not due")).count();
    assert_eq!((uploaded, not_due), (1, 1), "{said:?}");
    // Both nodes know the one object.
    for n in [&a, &b] {
        assert_eq!(
            n.record("backup.json")["newest"]["object"],
            keys[0].as_str()
        );
    }
}

#[test]
fn wrong_keys_are_backup_denied_in_output_and_status_and_the_snapshot_is_kept() {
    let c = Cluster::start(VERSION, 1, "tok-upload-denied");
    c.client().put("k", "v").unwrap();
    let n = Node::new();
    let wrong = n.path("wrong-secret");
    let wrong_secret = "wrong-secret-0123456789-not-the-key";
    std::fs::write(&wrong, wrong_secret).unwrap();
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cfg = n.config(&c, 0, "denied/", &wrong);
    let out = n.snapshot(&cfg);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("backup-denied: "), "{said}");
    assert!(said.contains("backup.secret_key_file"), "{said}");
    // The snapshot is kept and recorded, its line printed.
    let snap = n.record("snapshot.json");
    let kept = PathBuf::from(snap["last"]["file"].as_str().unwrap());
    assert!(kept.is_file(), "{snap}");
    assert!(snap["failure"].is_null(), "{snap}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("snapshot {}", kept.display())),
        "{said}"
    );
    let rec = n.record("backup.json");
    assert_eq!(rec["failure"]["code"], "backup-denied", "{rec}");

    let (json, v) = n.status_json(&cfg);
    assert_eq!(v["backup"]["failure"]["code"], "backup-denied", "{json}");
    let warned = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("backup upload failed"));
    assert!(warned, "{json}");

    let all = format!(
        "{said}{json}{}{}",
        std::fs::read_to_string(n.state().join("backup.json")).unwrap(),
        std::fs::read_to_string(n.state().join("snapshot.json")).unwrap()
    );
    assert!(!all.contains(wrong_secret), "the wrong secret shown: {all}");
    assert!(!all.contains(&secret()), "the secret shown");
}
