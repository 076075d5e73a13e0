//! A test CA made with openssl (nothing committed) and the node certificates it issues,
//! delivered to a node by cloud-init's write_files.

use crate::support::vm::VmSpec;

/// Where a TLS node keeps its CA, certificate and key: outside /home and /tmp, which
/// etcd.service's sandbox hides (and config validation refuses).
pub const PKI_DIR: &str = "/etc/etcd/pki";

/// A test CA made with openssl in a temporary folder (never committed), issuing node
/// certificates.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

/// One node's PEM files.
pub struct NodeCert {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// Runs openssl in `dir`; panics with its stderr when it fails.
pub fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    /// A new self-signed CA named `name` (EC P-256, valid two days).
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        openssl(
            dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        Pki { dir }
    }

    /// A certificate for node `name` at `ip`: SANs the node IP and 127.0.0.1, usable as
    /// server and client (etcd's peers are both).
    pub fn issue(&self, name: &str, ip: &str) -> NodeCert {
        self.issue_for(name, ip, 2)
    }

    /// [`Pki::issue`], valid `days` days: a renewal gets a new key, the CA's next serial
    /// and its own not-after.
    pub fn issue_for(&self, name: &str, ip: &str, days: u32) -> NodeCert {
        let d = self.dir.path();
        std::fs::write(
            d.join(format!("{name}.ext")),
            format!(
                "subjectAltName=IP:{ip},IP:127.0.0.1\n\
                 extendedKeyUsage=serverAuth,clientAuth\n\
                 keyUsage=critical,digitalSignature,keyEncipherment\n"
            ),
        )
        .expect("ext file");
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                &days.to_string(),
                "-out",
                &format!("{name}.crt"),
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
        let read = |f: &str| std::fs::read_to_string(d.join(f)).expect("PEM file");
        NodeCert {
            ca: read("ca.crt"),
            cert: read(&format!("{name}.crt")),
            key: read(&format!("{name}.key")),
        }
    }
}

/// Delivers `cert` through the spec's cloud-config `write_files` (owner root:etcd, the key
/// 0640) and turns on `[tls]`, client and peer sides, in the node's config.toml.
pub fn with_tls(spec: &mut VmSpec, cert: &NodeCert) {
    let file = |name: &str, mode: &str, pem: &str| {
        let body: String = pem.lines().map(|l| format!("      {l}\n")).collect();
        format!(
            "  - path: {PKI_DIR}/{name}\n    owner: root:etcd\n    permissions: '{mode}'\n    content: |\n{body}"
        )
    };
    let files = [
        file("ca.crt", "0644", &cert.ca),
        file("node.crt", "0644", &cert.cert),
        file("node.key", "0640", &cert.key),
    ]
    .concat();
    let tls = format!(
        "\n      [tls]\n\
         \x20     client_cert = \"{PKI_DIR}/node.crt\"\n\
         \x20     client_key = \"{PKI_DIR}/node.key\"\n\
         \x20     client_trusted_ca = \"{PKI_DIR}/ca.crt\"\n\
         \x20     peer_cert = \"{PKI_DIR}/node.crt\"\n\
         \x20     peer_key = \"{PKI_DIR}/node.key\"\n\
         \x20     peer_trusted_ca = \"{PKI_DIR}/ca.crt\"\n\
         \x20     warn_days = 1\n"
    );
    let text = &spec.user_data;
    assert!(
        text.contains("\nwrite_files:\n") && text.contains("\nruncmd:"),
        "the cloud-config has no write_files or runcmd to extend:\n{text}"
    );
    // After config.toml's content (the last write_files entry, runcmd next): the [tls]
    // table inside that content, then the PEM files as further write_files entries.
    spec.user_data = text.replacen("\nruncmd:", &format!("{tls}{files}runcmd:"), 1);
}

/// What `openssl x509 -noout -FLAG` says of the certificate `pem` (`serial`, `enddate`,
/// `issuer`), the value after `=`.
pub fn x509_field(pem: &str, flag: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("c.pem"), pem).expect("write PEM");
    let out = std::process::Command::new("openssl")
        .current_dir(dir.path())
        .args(["x509", "-noout", &format!("-{flag}"), "-in", "c.pem"])
        .output()
        .expect("run openssl");
    assert!(out.status.success(), "openssl x509 -{flag}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .split_once('=')
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default()
}
