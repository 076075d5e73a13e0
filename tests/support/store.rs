//! A real object store for the backup tests: Ceph's radosgw from Debian's packages,
//! started once per test process by `tests/support/radosgw` (one mon, one memstore OSD,
//! rgw on loopback with http and https) in a scratch folder, stopped when the process
//! exits. No mock S3. (Shared by tests/backup_s3.rs, backup_upload.rs and backup_restore.rs.)
#![allow(dead_code)] // each test binary uses its own part of the support

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The radosgw of this test process.
pub struct Store {
    /// Its scratch folder.
    pub dir: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub http: String,
    /// `https://127.0.0.1:PORT`.
    pub https: String,
    /// The CA of its https certificate.
    pub ca: PathBuf,
    /// The access key's file (0600).
    pub access: PathBuf,
    /// The secret key's file (0600).
    pub secret: PathBuf,
    /// The bucket made for the tests.
    pub bucket: String,
}

static STORE: OnceLock<Store> = OnceLock::new();
static DIR: OnceLock<PathBuf> = OnceLock::new();

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/radosgw")
}

extern "C" fn stop_store() {
    if let Some(dir) = DIR.get() {
        let _ = Command::new(script()).arg("stop").arg(dir).status();
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Three free loopback ports in a row: PORT, PORT+1 (the monitor), PORT+2 (https).
fn ports() -> (u16, u16) {
    for _ in 0..50 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        drop(l);
        if p > 65000 {
            continue;
        }
        let free = |q: u16| TcpListener::bind(("127.0.0.1", q)).is_ok();
        if free(p) && free(p + 1) && free(p + 2) {
            return (p, p + 2);
        }
    }
    panic!("no three free loopback ports in a row");
}

/// The store, started on first use.
pub fn store() -> &'static Store {
    STORE.get_or_init(|| {
        let dir = super::scratch::dir("radosgw").keep();
        DIR.set(dir.clone()).unwrap();
        // SAFETY: registers a plain function to run at exit; it touches only statics.
        unsafe { nix::libc::atexit(stop_store) };
        let (port, tls) = ports();
        let out = Command::new(script())
            .arg("start")
            .arg(&dir)
            .arg(port.to_string())
            .arg(tls.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "radosgw did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("no {k} in {text}"))
                .to_string()
        };
        Store {
            http: get("endpoint"),
            https: get("tls_endpoint"),
            ca: get("ca_file").into(),
            access: get("access_key_file").into(),
            secret: get("secret_key_file").into(),
            bucket: get("bucket"),
            dir,
        }
    })
}

impl Store {
    /// The secret key as the store knows it (to grep outputs for).
    pub fn secret_key(&self) -> String {
        std::fs::read_to_string(&self.secret)
            .unwrap()
            .trim()
            .to_string()
    }

    /// The access key likewise.
    pub fn access_key(&self) -> String {
        std::fs::read_to_string(&self.access)
            .unwrap()
            .trim()
            .to_string()
    }

    /// A `[backup]` table for the store over plain http, objects under `prefix`, with
    /// `extra` lines.
    pub fn backup_table(&self, prefix: &str, extra: &str) -> String {
        format!(
            "[backup]\nendpoint = \"{}\"\nallow_http = true\nbucket = \"{}\"\npath_style = true\n\
             prefix = \"{prefix}\"\naccess_key_file = \"{}\"\nsecret_key_file = \"{}\"\n{extra}\n",
            self.http,
            self.bucket,
            self.access.display(),
            self.secret.display()
        )
    }
}
