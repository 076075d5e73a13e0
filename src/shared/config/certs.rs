//! The TLS files of `[tls]`, read and judged: the one home of the rules on certificates.
//!
//! For every certificate (server, peer, and each CA of the trusted bundles): subject,
//! issuer, serial, validity and days left; for a leaf, whether its key is the private key
//! of its public key and whether it names this node's IP (and name) among its subject
//! alternative names — Go's TLS, and so etcd's peers and clients, check only those.
//!
//! - expired or not yet valid: `cert-expired`;
//! - key of another certificate, no SAN for `node.ip`, a file that cannot be read or holds
//!   no certificate or key etcd can use: `cert-mismatch`;
//! - expiring within `tls.warn_days`: a warning.
//!
//! `run` refuses the first two at once as `config-invalid` naming the key ([`refuse`]);
//! status shows all of it and fails with the code ([`Inspector`] keeps parsed files by
//! (inode, mtime, size), so its frequent evaluations read each file once per change).
//!
//! Files are opened as records are: no link followed, never blocking on a FIFO, only a
//! regular file of bounded size. A private key's bytes never leave this module.

use super::{Settings, TlsFiles};
use crate::reason::{Failure, ReasonCode};
use crate::shared::report::Reason;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use x509_cert::der::{self, Decode};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::Certificate;

/// The largest TLS file read (a CA bundle of a few dozen certificates is ~100 KiB).
const MAX_FILE: u64 = 1 << 20;
/// `rsaEncryption`.
const RSA: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
/// `id-ecPublicKey`.
const EC: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");

/// What a certificate is to etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CertKind {
    /// The certificate etcd presents (`tls.*_cert`).
    Leaf,
    /// A CA of a trusted bundle (`tls.*_trusted_ca`).
    Ca,
}

/// One certificate as status shows it (JSON schema 1, `certificates`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertView {
    /// The configuration key naming the file: `tls.peer_cert`, `tls.client_trusted_ca`.
    pub key: String,
    /// The file.
    pub path: String,
    /// `leaf` or `ca`.
    pub kind: CertKind,
    /// RFC 4514, e.g. `CN=etcd-1`; `null` when the file could not be read.
    pub subject: Option<String>,
    /// RFC 4514.
    pub issuer: Option<String>,
    /// Hexadecimal, as `openssl x509 -serial` prints it.
    pub serial: Option<String>,
    /// RFC 3339.
    pub not_before: Option<String>,
    /// RFC 3339.
    pub not_after: Option<String>,
    /// `not_after` in seconds since the epoch (the metrics' expiry timestamp).
    pub not_after_unix: Option<u64>,
    /// Whole days until `not_after`; negative once expired.
    pub days_left: Option<i64>,
    /// A leaf: whether its key file holds its private key; `null` for a CA, or when the
    /// key's public half cannot be told (a key type this agent does not know).
    pub key_matches: Option<bool>,
    /// A leaf: whether a SAN names `node.ip`.
    pub covers_ip: Option<bool>,
    /// A leaf: whether a DNS SAN names `node.name` (shown; etcd dials IPs here).
    pub covers_name: Option<bool>,
    /// A leaf's subject alternative names (`DNS:…`, `IP:…`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// What is wrong with it, when something is: `cert-expired` or `cert-mismatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<Reason>,
    /// Within `tls.warn_days` of its end (and not yet a problem).
    #[serde(default)]
    pub expiring: bool,
}

/// What status and `run` need of the configuration to judge the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// (side, its files): `client`, `peer`.
    pub sides: Vec<(&'static str, TlsFiles)>,
    /// `node.ip`.
    pub node_ip: IpAddr,
    /// `node.name`.
    pub node_name: String,
    /// `tls.warn_days`.
    pub warn_days: u32,
}

impl Policy {
    /// The TLS files of `s`; `None` when `[tls]` is off.
    pub fn of(s: &Settings) -> Option<Policy> {
        let sides: Vec<_> = [("client", &s.tls.client), ("peer", &s.tls.peer)]
            .into_iter()
            .filter_map(|(side, f)| f.clone().map(|f| (side, f)))
            .collect();
        (!sides.is_empty()).then(|| Policy {
            sides,
            node_ip: s.node_ip,
            node_name: s.node_name.clone(),
            warn_days: s.tls.warn_days,
        })
    }
}

/// The facts of one parsed certificate, before they are judged at a time.
#[derive(Debug, Clone)]
struct Facts {
    subject: String,
    issuer: String,
    serial: String,
    not_before: u64,
    not_after: u64,
    /// The SPKI's key bits, to compare with a private key's public half.
    public: Public,
    names: Vec<GeneralNameView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum GeneralNameView {
    Dns(String),
    Ip(IpAddr),
}

/// A public key, in the form both a certificate and a private key can give.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Public {
    /// Modulus and exponent, without leading zeros.
    Rsa(Vec<u8>, Vec<u8>),
    /// An EC point or another algorithm's raw key bits.
    Bits(Vec<u8>),
    /// A private key whose public half is not stored and not derived here.
    Unknown,
}

/// A file as read: its identity on disk and what it held.
#[derive(Debug, Clone)]
struct Read<T> {
    stamp: (u64, i64, i64, u64),
    parsed: Result<T, String>,
}

/// Reads and parses the TLS files, keeping each until its inode, mtime or size changes.
#[derive(Debug, Default)]
pub struct Inspector {
    certs: HashMap<PathBuf, Read<Vec<Facts>>>,
    keys: HashMap<PathBuf, Read<Public>>,
}

impl Inspector {
    /// A new inspector with nothing read.
    pub fn new() -> Inspector {
        Inspector::default()
    }

    /// [`Inspector::inspect`], and when it finds a problem, the files read again after
    /// `pause` (a sleep, in status), whose answer stands. A leaf and its key are replaced
    /// by two renames (`write_files`, an operator's copy, c3's rotation): a read between
    /// them sees the new certificate beside the old key, a mismatch that is gone a moment
    /// later (c3 under load: a poll failed `cert-mismatch` mid-rotation). What still holds
    /// after the pause is told; a good pair is read once.
    pub fn inspect_settled(
        &mut self,
        policy: &Policy,
        now: SystemTime,
        pause: impl FnOnce(),
    ) -> Vec<CertView> {
        let views = self.inspect(policy, now);
        if first_problem(&views).is_none() {
            return views;
        }
        pause();
        self.inspect(policy, now)
    }

    /// Every certificate of `policy`'s files as at `now`, judged.
    pub fn inspect(&mut self, policy: &Policy, now: SystemTime) -> Vec<CertView> {
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut out = Vec::new();
        for (side, files) in &policy.sides {
            let cert_key = format!("tls.{side}_cert");
            let key_key = format!("tls.{side}_key");
            let ca_key = format!("tls.{side}_trusted_ca");
            let leaf = cached(&mut self.certs, &files.cert, parse_certs);
            let private = cached(&mut self.keys, &files.key, parse_key);
            out.push(match leaf.as_ref().map(|c| c.first()) {
                Ok(Some(c)) => {
                    let mut v = view(&cert_key, &files.cert, CertKind::Leaf, c, now, policy);
                    v.covers_ip = Some(c.names.contains(&GeneralNameView::Ip(policy.node_ip)));
                    v.covers_name = Some(c.names.iter().any(|n| {
                        matches!(n, GeneralNameView::Dns(d) if d.eq_ignore_ascii_case(&policy.node_name))
                    }));
                    v.key_matches = match &private {
                        Ok(Public::Unknown) => None,
                        Ok(p) => Some(*p == c.public),
                        Err(_) => None,
                    };
                    if v.problem.is_none() {
                        v.problem = match (&private, v.key_matches, v.covers_ip) {
                            (Err(why), _, _) => Some(mismatch(format!(
                                "{key_key}: {} {why}",
                                files.key.display()
                            ))),
                            (_, Some(false), _) => Some(mismatch(format!(
                                "{key_key}: {} is not the private key of {cert_key} {} (serial {}); \
                                 put the key issued with that certificate",
                                files.key.display(),
                                files.cert.display(),
                                v.serial.as_deref().unwrap_or_default()
                            ))),
                            (_, _, Some(false)) => Some(mismatch(format!(
                                "{cert_key}: {} does not name node.ip {} among its subject \
                                 alternative names ({}); peers and clients refuse it: issue one \
                                 with IP:{}",
                                files.cert.display(),
                                policy.node_ip,
                                if v.names.is_empty() { "none".to_string() } else { v.names.join(", ") },
                                policy.node_ip
                            ))),
                            _ => None,
                        };
                        if v.problem.is_some() {
                            v.expiring = false;
                        }
                    }
                    v
                }
                Ok(None) => unreadable(&cert_key, &files.cert, CertKind::Leaf, "holds no PEM certificate"),
                Err(why) => unreadable(&cert_key, &files.cert, CertKind::Leaf, why),
            });
            match cached(&mut self.certs, &files.trusted_ca, parse_certs) {
                Ok(cas) if !cas.is_empty() => {
                    let mut views: Vec<CertView> = cas
                        .iter()
                        .map(|c| view(&ca_key, &files.trusted_ca, CertKind::Ca, c, now, policy))
                        .collect();
                    // An expired CA beside a valid one (a bundle mid-rotation) is a warning;
                    // a bundle with no valid CA left fails every handshake.
                    if views.iter().any(|v| v.problem.is_none()) {
                        for v in &mut views {
                            if v.problem.take().is_some() {
                                v.expiring = true;
                            }
                        }
                    }
                    out.extend(views);
                }
                Ok(_) => out.push(unreadable(
                    &ca_key,
                    &files.trusted_ca,
                    CertKind::Ca,
                    "holds no PEM certificate",
                )),
                Err(why) => out.push(unreadable(&ca_key, &files.trusted_ca, CertKind::Ca, &why)),
            }
        }
        out
    }
}

/// The first problem of `views`, as the reason status fails with.
pub fn first_problem(views: &[CertView]) -> Option<&Reason> {
    views.iter().find_map(|v| v.problem.as_ref())
}

/// One warning line for each certificate within `warn_days` of its end.
pub fn warnings(views: &[CertView]) -> Vec<String> {
    views
        .iter()
        .filter(|v| v.expiring)
        .map(|v| {
            let days = v.days_left.unwrap_or_default();
            let when = if days < 0 {
                format!("expired {} days ago", -days)
            } else {
                format!("expires in {days} days")
            };
            format!(
                "{}: {} (serial {}) {when}, on {}; renew it",
                v.key,
                v.path,
                v.serial.as_deref().unwrap_or_default(),
                v.not_after.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// `run`'s check: the first expired or mismatched file as `config-invalid` naming the
/// configuration file and the key, before any wait.
pub fn refuse(settings: &Settings, config: &Path, now: SystemTime) -> Result<(), Failure> {
    let Some(policy) = Policy::of(settings) else {
        return Ok(());
    };
    match first_problem(&Inspector::new().inspect(&policy, now)) {
        None => Ok(()),
        Some(p) => Err(Failure::new(
            ReasonCode::ConfigInvalid,
            format!("{}: {} ({})", config.display(), p.message, p.code),
        )),
    }
}

fn mismatch(message: String) -> Reason {
    Reason {
        code: ReasonCode::CertMismatch,
        message,
    }
}

fn unreadable(key: &str, path: &Path, kind: CertKind, why: &str) -> CertView {
    CertView {
        key: key.to_string(),
        path: path.display().to_string(),
        kind,
        subject: None,
        issuer: None,
        serial: None,
        not_before: None,
        not_after: None,
        not_after_unix: None,
        days_left: None,
        key_matches: None,
        covers_ip: None,
        covers_name: None,
        names: Vec::new(),
        problem: Some(mismatch(format!("{key}: {} {why}", path.display()))),
        expiring: false,
    }
}

fn view(key: &str, path: &Path, kind: CertKind, c: &Facts, now: u64, policy: &Policy) -> CertView {
    let stamp =
        |s: u64| crate::shared::report::rfc3339(UNIX_EPOCH + std::time::Duration::from_secs(s));
    let days_left = (c.not_after as i64 - now as i64).div_euclid(86_400);
    let what = match kind {
        CertKind::Leaf => "",
        CertKind::Ca => " (a CA of the bundle)",
    };
    let problem = if now < c.not_before {
        Some(format!(
            "{key}: {}{what} (serial {}) is not valid before {}; check the clock or reissue it",
            path.display(),
            c.serial,
            stamp(c.not_before)
        ))
    } else if now > c.not_after {
        Some(format!(
            "{key}: {}{what} (serial {}) expired on {}; renew it",
            path.display(),
            c.serial,
            stamp(c.not_after)
        ))
    } else {
        None
    };
    CertView {
        key: key.to_string(),
        path: path.display().to_string(),
        kind,
        subject: Some(c.subject.clone()),
        issuer: Some(c.issuer.clone()),
        serial: Some(c.serial.clone()),
        not_before: Some(stamp(c.not_before)),
        not_after: Some(stamp(c.not_after)),
        not_after_unix: Some(c.not_after),
        days_left: Some(days_left),
        key_matches: None,
        covers_ip: None,
        covers_name: None,
        names: match kind {
            CertKind::Leaf => c
                .names
                .iter()
                .map(|n| match n {
                    GeneralNameView::Dns(d) => format!("DNS:{d}"),
                    GeneralNameView::Ip(ip) => format!("IP:{ip}"),
                })
                .collect(),
            CertKind::Ca => Vec::new(),
        },
        expiring: problem.is_none() && days_left < i64::from(policy.warn_days),
        problem: problem.map(|message| Reason {
            code: ReasonCode::CertExpired,
            message,
        }),
    }
}

/// The parsed file at `path`, from `cache` while its identity on disk is unchanged.
fn cached<T: Clone>(
    cache: &mut HashMap<PathBuf, Read<T>>,
    path: &Path,
    parse: fn(&[u8]) -> Result<T, String>,
) -> Result<T, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(crate::shared::report::record_open_flags())
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            cache.remove(path);
            return Err("is a symbolic link; etcd-setup follows none: name the file itself".into());
        }
        Err(e) => {
            cache.remove(path);
            return Err(format!("cannot be read: {e}"));
        }
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Err(format!("cannot be read: {e}")),
    };
    if !meta.file_type().is_file() {
        cache.remove(path);
        return Err("is not a regular file".into());
    }
    let stamp = (meta.ino(), meta.mtime(), meta.mtime_nsec(), meta.len());
    if let Some(hit) = cache.get(path).filter(|r| r.stamp == stamp) {
        return hit.parsed.clone();
    }
    let parsed = if meta.len() > MAX_FILE {
        Err(format!("is larger than {MAX_FILE} bytes"))
    } else {
        let mut bytes = Vec::new();
        use std::io::Read as _;
        match file.take(MAX_FILE + 1).read_to_end(&mut bytes) {
            Ok(_) => parse(&bytes),
            Err(e) => Err(format!("cannot be read: {e}")),
        }
    };
    cache.insert(
        path.to_path_buf(),
        Read {
            stamp,
            parsed: parsed.clone(),
        },
    );
    parsed
}

/// The PEM blocks of `bytes` as (label, DER); text around them is ignored, as OpenSSL
/// and Go do.
fn pem_blocks(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const END: &[u8] = b"-----END ";
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(start) = find(rest, BEGIN) {
        let block = &rest[start..];
        let end = find(block, END).ok_or("has a PEM block without its END line")?;
        let after = &block[end + END.len()..];
        let close = find(after, b"-----").ok_or("has a PEM END line without its closing dashes")?;
        let len = end + END.len() + close + 5;
        let (label, der) = der::pem::decode_vec(&block[..len])
            .map_err(|e| format!("has a PEM block that does not decode ({e})"))?;
        out.push((label.to_string(), der));
        rest = &block[len..];
    }
    Ok(out)
}

fn parse_certs(bytes: &[u8]) -> Result<Vec<Facts>, String> {
    let mut out = Vec::new();
    for (label, der) in pem_blocks(bytes)? {
        if label != "CERTIFICATE" {
            continue;
        }
        let n = out.len() + 1;
        let cert = Certificate::from_der(&der)
            .map_err(|e| format!("has a certificate (number {n}) that does not parse: {e}"))?;
        out.push(facts(&cert).map_err(|e| format!("certificate number {n}: {e}"))?);
    }
    Ok(out)
}

fn facts(cert: &Certificate) -> Result<Facts, String> {
    let tbs = &cert.tbs_certificate;
    let spki = &tbs.subject_public_key_info;
    let bits = spki.subject_public_key.raw_bytes();
    let public = if spki.algorithm.oid == RSA {
        let k = pkcs1::RsaPublicKey::from_der(bits)
            .map_err(|e| format!("its RSA key does not parse: {e}"))?;
        Public::Rsa(
            k.modulus.as_bytes().to_vec(),
            k.public_exponent.as_bytes().to_vec(),
        )
    } else {
        Public::Bits(bits.to_vec())
    };
    let mut names = Vec::new();
    if let Ok(Some((_, san))) = tbs.get::<SubjectAltName>() {
        for n in san.0 {
            match n {
                GeneralName::DnsName(d) => names.push(GeneralNameView::Dns(d.to_string())),
                GeneralName::IpAddress(o) => match o.as_bytes().len() {
                    4 => {
                        let b: [u8; 4] = o.as_bytes().try_into().unwrap_or_default();
                        names.push(GeneralNameView::Ip(IpAddr::from(b)));
                    }
                    16 => {
                        let b: [u8; 16] = o.as_bytes().try_into().unwrap_or_default();
                        names.push(GeneralNameView::Ip(IpAddr::from(b)));
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    let serial = tbs
        .serial_number
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<String>();
    Ok(Facts {
        subject: tbs.subject.to_string(),
        issuer: tbs.issuer.to_string(),
        serial,
        not_before: tbs.validity.not_before.to_unix_duration().as_secs(),
        not_after: tbs.validity.not_after.to_unix_duration().as_secs(),
        public,
        names,
    })
}

/// The public half of the private key in `bytes` (PKCS#8, SEC1 or PKCS#1 PEM).
fn parse_key(bytes: &[u8]) -> Result<Public, String> {
    let blocks = pem_blocks(bytes)?;
    for (label, der) in &blocks {
        return match label.as_str() {
            "PRIVATE KEY" => {
                let info = pkcs8::PrivateKeyInfo::from_der(der)
                    .map_err(|e| format!("holds a PKCS#8 key that does not parse: {e}"))?;
                if info.algorithm.oid == RSA {
                    rsa_public(info.private_key)
                } else if info.algorithm.oid == EC {
                    ec_public(info.private_key, info.public_key)
                } else {
                    Ok(info
                        .public_key
                        .map_or(Public::Unknown, |p| Public::Bits(p.to_vec())))
                }
            }
            "EC PRIVATE KEY" => ec_public(der, None),
            "RSA PRIVATE KEY" => rsa_public(der),
            "ENCRYPTED PRIVATE KEY" => {
                Err("holds an encrypted key; etcd needs it unencrypted".into())
            }
            _ => continue,
        };
    }
    Err("holds no PEM private key (PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)".into())
}

fn rsa_public(der: &[u8]) -> Result<Public, String> {
    let k = pkcs1::RsaPrivateKey::from_der(der)
        .map_err(|e| format!("holds an RSA key that does not parse: {e}"))?;
    Ok(Public::Rsa(
        k.modulus.as_bytes().to_vec(),
        k.public_exponent.as_bytes().to_vec(),
    ))
}

/// SEC1 keeps the public point beside the scalar (OpenSSL and Go write it); a key without
/// it cannot be compared here.
fn ec_public(der: &[u8], outer: Option<&[u8]>) -> Result<Public, String> {
    let k = sec1::EcPrivateKey::from_der(der)
        .map_err(|e| format!("holds an EC key that does not parse: {e}"))?;
    Ok(k.public_key
        .or(outer)
        .map_or(Public::Unknown, |p| Public::Bits(p.to_vec())))
}

/// A certificate as the trust check ([`issuer_in`]) sees it: names as DER (compared
/// byte for byte, as Go compares a child's issuer with a parent's subject), the key
/// identifiers, and what an operator reads.
#[derive(Debug, Clone)]
pub struct Link {
    /// RFC 4514.
    pub subject: String,
    /// Hexadecimal, as `openssl x509 -serial` prints it.
    pub serial: String,
    subject_der: Vec<u8>,
    issuer_der: Vec<u8>,
    /// Subject key identifier.
    ski: Option<Vec<u8>>,
    /// Authority key identifier (its key identifier field).
    aki: Option<Vec<u8>>,
}

/// The [`Link`] of a DER certificate.
pub fn link_of_der(der_bytes: &[u8]) -> Result<Link, String> {
    use x509_cert::der::Encode;
    use x509_cert::ext::pkix::{AuthorityKeyIdentifier, SubjectKeyIdentifier};
    let cert = Certificate::from_der(der_bytes)
        .map_err(|e| format!("holds a certificate that does not parse: {e}"))?;
    let tbs = &cert.tbs_certificate;
    let encode = |n: &x509_cert::name::Name| n.to_der().map_err(|e| e.to_string());
    Ok(Link {
        subject: tbs.subject.to_string(),
        serial: tbs
            .serial_number
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect(),
        subject_der: encode(&tbs.subject)?,
        issuer_der: encode(&tbs.issuer)?,
        ski: tbs
            .get::<SubjectKeyIdentifier>()
            .ok()
            .flatten()
            .map(|(_, s)| s.0.as_bytes().to_vec()),
        aki: tbs
            .get::<AuthorityKeyIdentifier>()
            .ok()
            .flatten()
            .and_then(|(_, a)| a.key_identifier.map(|k| k.as_bytes().to_vec())),
    })
}

fn parse_links(bytes: &[u8]) -> Result<Vec<Link>, String> {
    let mut out = Vec::new();
    for (label, der) in pem_blocks(bytes)? {
        if label == "CERTIFICATE" {
            let n = out.len() + 1;
            out.push(link_of_der(&der).map_err(|e| format!("certificate number {n}: {e}"))?);
        }
    }
    if out.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(out)
}

/// Every certificate of the PEM file at `path`, read as the other TLS files are (no
/// link followed, a regular file, bounded): a trust bundle, or a leaf (first) with its
/// chain.
pub fn read_links(path: &Path) -> Result<Vec<Link>, String> {
    cached(&mut HashMap::new(), path, parse_links)
}

/// The CA of `bundle` that issued `cert`: its subject is `cert`'s issuer and, where both
/// carry one, its subject key identifier is `cert`'s authority key identifier (a CA made
/// again under the same name has another key, and so another identifier). The signature
/// itself is not checked here (this agent carries no curve or big-number arithmetic):
/// this guards a restart against a bundle that lacks the issuer, which is what cuts a
/// member off; etcd checks every signature at every handshake.
pub fn issuer_in<'a>(cert: &Link, bundle: &'a [Link]) -> Option<&'a Link> {
    bundle.iter().find(|ca| {
        ca.subject_der == cert.issuer_der
            && match (&cert.aki, &ca.ski) {
                (Some(a), Some(s)) => a == s,
                _ => true,
            }
    })
}
