//! TLS files made by `openssl` for the certificate tests: a CA, and leaves with chosen
//! validity, SANs and keys, in a scratch folder ([`super::scratch`]) outside /tmp, /home
//! and /root wherever the checkout lies (etcd's sandbox hides those, so the configuration
//! refuses TLS files there).
#![allow(dead_code)] // each test binary uses its own part of the support

use std::path::{Path, PathBuf};
use std::process::Command;

/// A test CA and the folder its files go in.
pub struct Pki {
    /// Kept so the folder lives as long as the test.
    pub dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

impl Pki {
    /// A new CA (`ca.crt`, P-256) in a fresh folder under the target's tmp folder.
    pub fn new() -> Pki {
        let dir = super::scratch::dir("pki");
        let d = dir.path();
        std::fs::write(
            d.join("ca.cnf"),
            format!(
                "[ca]\ndefault_ca = d\n[d]\ndatabase = {0}/index.txt\nnew_certs_dir = {0}\n\
                 serial = {0}/serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n\
                 [p]\ncommonName = supplied\n",
                d.display()
            ),
        )
        .unwrap();
        std::fs::write(d.join("index.txt"), "").unwrap();
        std::fs::write(d.join("serial"), "1000\n").unwrap();
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-subj",
                "/CN=test-ca",
                "-days",
                "3650",
            ],
        );
        Pki { dir }
    }

    /// A path in the folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A private key `NAME.key`: `ec` (PKCS#8 P-256), `ec-sec1` (SEC1 P-384) or `rsa`
    /// (PKCS#8 2048 bits).
    pub fn key(&self, name: &str, kind: &str) -> PathBuf {
        let file = format!("{name}.key");
        match kind {
            "ec" => openssl(
                self.dir.path(),
                &[
                    "genpkey",
                    "-algorithm",
                    "EC",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-out",
                    &file,
                ],
            ),
            "ec-sec1" => openssl(
                self.dir.path(),
                &["ecparam", "-genkey", "-name", "secp384r1", "-out", &file],
            ),
            _ => openssl(
                self.dir.path(),
                &[
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                    "-out",
                    &file,
                ],
            ),
        }
        self.path(&file)
    }

    /// `NAME.crt` for the key `key`, signed by the CA, valid from `start` to `end`
    /// (`YYYYMMDDHHMMSSZ`), with subject alternative names `san` (`IP:…,DNS:…`).
    pub fn leaf(&self, name: &str, key: &Path, san: &str, start: &str, end: &str) -> PathBuf {
        let d = self.dir.path();
        let csr = format!("{name}.csr");
        let ext = format!("{name}.ext");
        let crt = format!("{name}.crt");
        std::fs::write(d.join(&ext), format!("subjectAltName={san}\n")).unwrap();
        openssl(
            d,
            &[
                "req",
                "-new",
                "-key",
                key.to_str().unwrap(),
                "-subj",
                &format!("/CN={name}"),
                "-out",
                &csr,
            ],
        );
        openssl(
            d,
            &[
                "ca",
                "-batch",
                "-notext",
                "-config",
                "ca.cnf",
                "-cert",
                "ca.crt",
                "-keyfile",
                "ca.key",
                "-in",
                &csr,
                "-out",
                &crt,
                "-startdate",
                start,
                "-enddate",
                end,
                "-extfile",
                &ext,
            ],
        );
        self.path(&crt)
    }

    /// The `[tls]` table giving `cert`, `key` and `ca` to both sides.
    pub fn tls_table(cert: &Path, key: &Path, ca: &Path) -> String {
        let (c, k, a) = (cert.display(), key.display(), ca.display());
        format!(
            "[tls]\nclient_cert = \"{c}\"\nclient_key = \"{k}\"\nclient_trusted_ca = \"{a}\"\n\
             peer_cert = \"{c}\"\npeer_key = \"{k}\"\npeer_trusted_ca = \"{a}\"\n"
        )
    }
}

/// `YYYYMMDDHHMMSSZ` for `days` days from now (negative: ago), as `openssl ca` takes it.
pub fn days_from_now(days: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs((now + days * 86_400) as u64);
    etcd_setup::shared::report::file_stamp(t)
        .replace('T', "")
        .to_string()
}
