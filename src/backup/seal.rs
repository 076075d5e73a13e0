//! Encryption of backups in the age v1 format (age-encryption.org/v1, X25519 recipients),
//! so that the stock `age` tool decrypts what the node encrypts (`age -d -i KEY`) and the
//! node decrypts what `age -r` encrypted.
//!
//! The format, as this file writes and reads it:
//! - a header: `age-encryption.org/v1`, one stanza per recipient (`-> X25519 <ephemeral
//!   share>` then the wrapped 16-byte file key), and `--- <MAC>`, an HMAC-SHA-256 of the
//!   header under a key derived from the file key;
//! - a payload: a 16-byte nonce, then the plaintext in 64 KiB chunks, each sealed with
//!   ChaCha20-Poly1305 under a key derived from the file key and that nonce; a chunk's
//!   nonce is its counter and a flag marking the last one, so a file cut at a chunk
//!   boundary, reordered or extended does not authenticate.
//!
//! Built on RustCrypto's primitives (x25519-dalek, chacha20poly1305, hkdf, hmac, sha2)
//! rather than the `age` crate: that one costs the static binary 1+ MiB (localisation,
//! plugins, scrypt, post-quantum stanzas we do not use; measured in its commit), this
//! file about 0.1 MiB. `tests/backup_seal.rs` proves the format against the stock `age`
//! both ways.
//!
//! Streaming in bounded memory: two 64 KiB buffers whatever the size. [`open`] writes
//! each chunk only once it authenticated, but a later chunk may still fail (truncation,
//! damage): what it wrote before an error is not to be trusted, so the caller writes into
//! a scratch file and removes it on error.
//!
//! Secrets: an [`Identity`]'s keys are never printed — not by `Debug`, not in an error
//! (an identity file's error names the file and line, never the line's text).

use crate::reason::{Failure, ReasonCode};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, KeyInit};
use hmac::{Hmac, Mac};
use payload_cipher::PayloadCipher;
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use x25519_dalek::{PublicKey, StaticSecret};

/// The plaintext's chunk: 64 KiB.
const CHUNK: usize = 64 * 1024;
/// ChaCha20-Poly1305's tag.
const TAG: usize = 16;
/// The file key's length.
const FILE_KEY: usize = 16;
/// The header's first line.
const VERSION_LINE: &[u8] = b"age-encryption.org/v1\n";
/// The X25519 stanza's HKDF info.
const X25519_INFO: &[u8] = b"age-encryption.org/v1/X25519";
/// A header longer than this is not one we wrote nor `age` would (a stanza is ~100 bytes).
const MAX_HEADER: usize = 1 << 20;
/// A key file larger than this is not a key file.
const MAX_KEY_FILE: u64 = 1 << 20;
/// The recipients' spelling is the configuration's too: it lives below both.
pub use crate::shared::age_key::Recipient;
use crate::shared::age_key::{bech32, IDENTITY_HRP};

/// The secret keys of an identity file (`AGE-SECRET-KEY-1…` lines, as `age-keygen`
/// writes them), which decrypt backups. Never printed: `Debug` shows the file and the
/// public keys only.
pub struct Identity {
    file: PathBuf,
    keys: Vec<(StaticSecret, PublicKey)>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let publics: Vec<String> = self.recipients().iter().map(|r| r.to_string()).collect();
        f.debug_struct("Identity")
            .field("file", &self.file)
            .field("recipients", &publics)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Reads the identity file at `path`: a regular file of root's (no link, mode 0600 or
    /// stricter), one or more `AGE-SECRET-KEY-1…` lines, `#` comments and blank lines.
    pub fn read(path: &Path) -> Result<Identity, Failure> {
        let text = read_key_file(path, KeyFile::Identity)?;
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let secret = parse_secret(line).map_err(|why| {
                invalid(format!(
                    "{} line {}: {why} (age-keygen writes one)",
                    path.display(),
                    n + 1
                ))
            })?;
            let public = PublicKey::from(&secret);
            keys.push((secret, public));
        }
        if keys.is_empty() {
            return Err(invalid(format!(
                "{} holds no AGE-SECRET-KEY-1… line: write an identity there with age-keygen",
                path.display()
            )));
        }
        Ok(Identity {
            file: path.to_path_buf(),
            keys,
        })
    }

    /// The file it was read from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The public keys of its secret keys.
    pub fn recipients(&self) -> Vec<Recipient> {
        self.keys
            .iter()
            .map(|(_, p)| Recipient { key: p.to_bytes() })
            .collect()
    }
}

/// `AGE-SECRET-KEY-1…` → the secret; errors never include the text.
fn parse_secret(line: &str) -> Result<StaticSecret, String> {
    if !line.starts_with("AGE-SECRET-KEY-1") {
        return Err("is no AGE-SECRET-KEY-1… line".into());
    }
    let (hrp, mut data) = bech32::decode(line).map_err(|e| format!("is no age secret key: {e}"))?;
    if hrp != IDENTITY_HRP || data.len() != 32 {
        use zeroize::Zeroize;
        data.zeroize();
        return Err("is no X25519 age secret key".into());
    }
    let mut bytes = [0u8; 32];
    bytes.copy_from_slice(&data);
    {
        use zeroize::Zeroize;
        data.zeroize();
    }
    let secret = StaticSecret::from(bytes);
    {
        use zeroize::Zeroize;
        bytes.zeroize();
    }
    Ok(secret)
}

/// Reads the recipients file at `path`: a regular file of root's (no link, not writable
/// by group or others), one `age1…` per line, `#` comments and blank lines; at least one.
pub fn read_recipients(path: &Path) -> Result<Vec<Recipient>, Failure> {
    let text = read_key_file(path, KeyFile::Recipients)?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let r: Recipient = line
            .parse()
            .map_err(|why| invalid(format!("{} line {}: the line {why}", path.display(), n + 1)))?;
        out.push(r);
    }
    if out.is_empty() {
        return Err(invalid(format!(
            "{} holds no recipient: write one age1… public key per line (age-keygen -y \
             IDENTITY prints it)",
            path.display()
        )));
    }
    Ok(out)
}

fn invalid(message: String) -> Failure {
    Failure::new(ReasonCode::ConfigInvalid, message)
}

/// Which of the two key files: their rules differ in the mode allowed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyFile {
    Recipients,
    Identity,
}

/// The text of a key file, after its checks: no link (`O_NOFOLLOW`), no FIFO
/// (`O_NONBLOCK`, regular files only), root's (the effective user's), not writable by
/// group or others; an identity file also unreadable by them (0600 or stricter).
fn read_key_file(path: &Path, kind: KeyFile) -> Result<String, Failure> {
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc_eloop) if libc_eloop == nix::errno::Errno::ELOOP as i32 => invalid(format!(
                "{} is a symbolic link: name the file itself",
                path.display()
            )),
            _ => invalid(format!("cannot open {}: {e}", path.display())),
        })?;
    let m = f
        .metadata()
        .map_err(|e| invalid(format!("cannot stat {}: {e}", path.display())))?;
    if !m.is_file() {
        return Err(invalid(format!("{} is not a regular file", path.display())));
    }
    let me = nix::unistd::geteuid().as_raw();
    if m.uid() != me {
        return Err(invalid(format!(
            "{} is owned by uid {}, not root: chown root it",
            path.display(),
            m.uid()
        )));
    }
    let mode = m.mode() & 0o7777;
    let (forbidden, rule) = match kind {
        KeyFile::Recipients => (0o022, "chmod go-w it"),
        KeyFile::Identity => (0o077, "it holds a secret key: chmod 0600 it"),
    };
    if mode & forbidden != 0 {
        return Err(invalid(format!(
            "{} has mode {mode:04o}: {rule}",
            path.display()
        )));
    }
    if m.len() > MAX_KEY_FILE {
        return Err(invalid(format!(
            "{} is {} bytes, too large for a key file",
            path.display(),
            m.len()
        )));
    }
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(|e| {
        // The error of a non-UTF-8 file names no content.
        invalid(format!("cannot read {}: {e}", path.display()))
    })?;
    Ok(text)
}

/// What passed through [`seal`] or [`open`]: the plaintext's and the sealed file's
/// SHA-256 and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digests {
    /// SHA-256 of the plaintext.
    pub plain_sha256: [u8; 32],
    /// The plaintext's length.
    pub plain_len: u64,
    /// SHA-256 of the sealed (age) bytes.
    pub sealed_sha256: [u8; 32],
    /// Their length.
    pub sealed_len: u64,
}

/// What [`seal`] wrote.
pub type Sealed = Digests;
/// What [`open`] read.
pub type Opened = Digests;

/// How [`open`] failed: the caller decides the reason code (a wrong identity and a
/// damaged object are fixed differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenErrorKind {
    /// Reading the input or writing the output failed.
    Io,
    /// The input is no age v1 file (or one of another recipient type).
    NotAge,
    /// No stanza opens with this identity: encrypted to other recipients.
    WrongIdentity,
    /// The header or a chunk fails its authentication: damaged or tampered with.
    Damaged,
    /// The input ends before its last chunk.
    Truncated,
}

/// A failed [`open`]: what kind, and the sentence (never a key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenError {
    /// What kind of failure.
    pub kind: OpenErrorKind,
    /// What happened, in a sentence.
    pub message: String,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpenError {}

fn open_err(kind: OpenErrorKind, message: impl Into<String>) -> OpenError {
    OpenError {
        kind,
        message: message.into(),
    }
}

/// A reader or writer that hashes and counts what passes.
struct Tally<T> {
    inner: T,
    sha: Sha256,
    len: u64,
}

impl<T> Tally<T> {
    fn new(inner: T) -> Self {
        Tally {
            inner,
            sha: Sha256::new(),
            len: 0,
        }
    }
    fn finish(self) -> ([u8; 32], u64) {
        (self.sha.finalize().into(), self.len)
    }
}

impl<T: Read> Read for Tally<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

impl<T: Write> Write for Tally<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Reads into `buf` until it is full or the input ends; how many bytes it holds.
fn fill(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn random<const N: usize>() -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| io::Error::other(format!("no randomness: {e}")))?;
    Ok(b)
}

fn hkdf(salt: &[u8], ikm: &[u8], info: &[u8]) -> [u8; 32] {
    let mut okm = [0u8; 32];
    // 32 bytes is far below HKDF-SHA-256's limit (255 × 32): the expand cannot fail.
    let _ = hkdf::Hkdf::<Sha256>::new(Some(salt), ikm).expand(info, &mut okm);
    okm
}

/// The header MAC of `header` (everything through `---`).
fn header_mac(file_key: &[u8; FILE_KEY], header: &[u8]) -> Hmac<Sha256> {
    let key = hkdf(&[], file_key, b"header");
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap_or_else(|_| unreachable!());
    mac.update(header);
    mac
}

/// A chunk's nonce: its counter, big-endian in 11 bytes, then 1 for the last one.
fn chunk_nonce(counter: u64, last: bool) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[3..11].copy_from_slice(&counter.to_be_bytes());
    n[11] = u8::from(last);
    n
}

/// Wraps `file_key` for `to`: the stanza's ephemeral share and body.
fn wrap(file_key: &[u8; FILE_KEY], to: &Recipient) -> io::Result<([u8; 32], Vec<u8>)> {
    let ephemeral = StaticSecret::from(random::<32>()?);
    let share = PublicKey::from(&ephemeral).to_bytes();
    let shared = ephemeral.diffie_hellman(&PublicKey::from(to.key));
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(&share);
    salt[32..].copy_from_slice(&to.key);
    let key = hkdf(&salt, shared.as_bytes(), X25519_INFO);
    let aead = ChaCha20Poly1305::new(&key.into());
    let mut key_copy = *file_key;
    let tag = aead
        .encrypt_in_place_detached(&[0u8; 12].into(), b"", &mut key_copy)
        .map_err(|_| io::Error::other("cannot wrap the file key"))?;
    let mut body = Vec::with_capacity(FILE_KEY + TAG);
    body.extend_from_slice(&key_copy);
    body.extend_from_slice(&tag);
    {
        use zeroize::Zeroize;
        key_copy.zeroize();
    }
    Ok((share, body))
}

/// Encrypts `plain` to every one of `recipients` into `out` in the age v1 format, in
/// bounded memory; the digests of both sides.
pub fn seal(
    plain: &mut dyn Read,
    recipients: &[Recipient],
    out: &mut dyn Write,
) -> io::Result<Sealed> {
    let mut out = Tally::new(out);
    let mut plain = Tally::new(plain);
    seal_stream(&mut plain, recipients, &mut out)?;
    let (plain_sha256, plain_len) = plain.finish();
    let (sealed_sha256, sealed_len) = out.finish();
    Ok(Digests {
        plain_sha256,
        plain_len,
        sealed_sha256,
        sealed_len,
    })
}

/// [`seal`] without its digests, for a caller that hashes both sides itself (the upload
/// hashes what it reads and what it sends): two SHA-256 passes fewer.
pub fn seal_stream(
    plain: &mut dyn Read,
    recipients: &[Recipient],
    out: &mut dyn Write,
) -> io::Result<()> {
    if recipients.is_empty() {
        return Err(io::Error::other("no recipient to encrypt to"));
    }
    let mut file_key = random::<FILE_KEY>()?;
    let mut header = VERSION_LINE.to_vec();
    for r in recipients {
        let (share, body) = wrap(&file_key, r)?;
        header.extend_from_slice(b"-> X25519 ");
        header.extend_from_slice(base64::encode(&share).as_bytes());
        header.push(b'\n');
        // 32 bytes are 43 characters: one line, shorter than 64, ends the body.
        header.extend_from_slice(base64::encode(&body).as_bytes());
        header.push(b'\n');
    }
    header.extend_from_slice(b"---");
    let mac = header_mac(&file_key, &header).finalize().into_bytes();
    header.push(b' ');
    header.extend_from_slice(base64::encode(&mac).as_bytes());
    header.push(b'\n');

    let nonce = random::<16>()?;
    let payload_key = hkdf(&nonce, &file_key, b"payload");
    {
        use zeroize::Zeroize;
        file_key.zeroize();
    }
    let aead = PayloadCipher::new(&payload_key);

    out.write_all(&header)?;
    out.write_all(&nonce)?;
    // One byte past a chunk tells whether another follows; the tag goes where it was.
    let mut buf = vec![0u8; CHUNK + TAG];
    let mut have = 0;
    let mut counter = 0u64;
    loop {
        let n = have + fill(plain, &mut buf[have..CHUNK + 1])?;
        let last = n <= CHUNK;
        let len = n.min(CHUNK);
        let next = buf[CHUNK];
        let tag = aead.seal(&chunk_nonce(counter, last), &mut buf[..len]);
        buf[len..len + TAG].copy_from_slice(&tag);
        out.write_all(&buf[..len + TAG])?;
        if last {
            break;
        }
        buf[0] = next;
        have = 1;
        counter += 1;
    }
    out.flush()
}

/// One stanza of a header.
struct Stanza {
    args: Vec<String>,
    body: Vec<u8>,
}

/// A header read: its stanzas, the bytes the MAC covers, and the MAC.
struct Header {
    stanzas: Vec<Stanza>,
    covered: Vec<u8>,
    mac: Vec<u8>,
}

/// One line (through its `\n`) of the header, within the header's bound.
fn header_line(r: &mut dyn BufRead, taken: &mut Vec<u8>) -> Result<Vec<u8>, OpenError> {
    let mut line = Vec::new();
    let left = MAX_HEADER.saturating_sub(taken.len()) as u64;
    r.take(left)
        .read_until(b'\n', &mut line)
        .map_err(|e| open_err(OpenErrorKind::Io, format!("cannot read: {e}")))?;
    if line.last() != Some(&b'\n') {
        return Err(if taken.len() + line.len() >= MAX_HEADER {
            open_err(
                OpenErrorKind::NotAge,
                format!("its header runs past {MAX_HEADER} bytes: no age file"),
            )
        } else {
            open_err(
                OpenErrorKind::Truncated,
                "it ends inside its header: truncated",
            )
        });
    }
    taken.extend_from_slice(&line);
    line.pop();
    Ok(line)
}

fn read_header(r: &mut dyn BufRead) -> Result<Header, OpenError> {
    let damaged = |what: &str| {
        open_err(
            OpenErrorKind::Damaged,
            format!("its header is damaged ({what})"),
        )
    };
    let mut taken = Vec::new();
    let first = header_line(r, &mut taken).map_err(|e| match e.kind {
        OpenErrorKind::Truncated if taken.is_empty() => {
            open_err(OpenErrorKind::NotAge, "it is empty or no age file")
        }
        _ => e,
    })?;
    if first.as_slice() != &VERSION_LINE[..VERSION_LINE.len() - 1] {
        return Err(if first.starts_with(b"age-encryption.org/") {
            open_err(
                OpenErrorKind::NotAge,
                "it is an age file of another version than v1",
            )
        } else if first.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----") {
            open_err(
                OpenErrorKind::NotAge,
                "it is an ASCII-armored age file: decrypt it with `age -d`, or encrypt \
                 without --armor",
            )
        } else {
            open_err(
                OpenErrorKind::NotAge,
                "it does not start with age-encryption.org/v1: no age file, or damaged",
            )
        });
    }
    let mut stanzas = Vec::new();
    let mut line = header_line(r, &mut taken)?;
    loop {
        if let Some(rest) = line.strip_prefix(b"-> ") {
            let args: Vec<String> = rest
                .split(|&c| c == b' ')
                .map(|a| {
                    if !a.is_empty() && a.iter().all(|c| c.is_ascii_graphic()) {
                        Ok(String::from_utf8_lossy(a).into_owned())
                    } else {
                        Err(damaged("a stanza's argument"))
                    }
                })
                .collect::<Result<_, _>>()?;
            let mut text = Vec::new();
            loop {
                let l = header_line(r, &mut taken)?;
                if l.len() > 64 {
                    return Err(damaged("a stanza's line is longer than 64 columns"));
                }
                text.extend_from_slice(&l);
                if l.len() < 64 {
                    break;
                }
            }
            let body = base64::decode(&text).ok_or_else(|| damaged("a stanza's body"))?;
            stanzas.push(Stanza { args, body });
            line = header_line(r, &mut taken)?;
        } else if let Some(rest) = line.strip_prefix(b"--- ") {
            if stanzas.is_empty() {
                return Err(damaged("no recipient stanza"));
            }
            let mac = base64::decode(rest)
                .filter(|m| m.len() == 32)
                .ok_or_else(|| damaged("its MAC line"))?;
            // The MAC covers the header through `---`: all but ` <mac>\n`.
            let covered = taken[..taken.len() - rest.len() - 2].to_vec();
            return Ok(Header {
                stanzas,
                covered,
                mac,
            });
        } else {
            return Err(damaged("a line that is neither a stanza nor its MAC"));
        }
    }
}

/// The file key from the first X25519 stanza `identity` opens.
fn unwrap(header: &Header, identity: &Identity) -> Result<[u8; FILE_KEY], OpenError> {
    let mut x25519 = 0;
    for s in &header.stanzas {
        if s.args.first().map(String::as_str) == Some("scrypt") {
            return Err(open_err(
                OpenErrorKind::NotAge,
                "it was encrypted with a passphrase (age -p), not to a recipient: decrypt \
                 it with `age -d`",
            ));
        }
        if s.args.first().map(String::as_str) != Some("X25519") {
            continue;
        }
        x25519 += 1;
        let share: [u8; 32] = match (
            s.args.len(),
            s.args.get(1).and_then(|a| base64::decode(a.as_bytes())),
        ) {
            (2, Some(b)) if b.len() == 32 && s.body.len() == FILE_KEY + TAG => {
                let mut share = [0u8; 32];
                share.copy_from_slice(&b);
                share
            }
            _ => {
                return Err(open_err(
                    OpenErrorKind::Damaged,
                    "its header is damaged (an X25519 stanza of the wrong shape)",
                ))
            }
        };
        for (secret, public) in &identity.keys {
            let shared = secret.diffie_hellman(&PublicKey::from(share));
            if !shared.was_contributory() {
                return Err(open_err(
                    OpenErrorKind::Damaged,
                    "its header is damaged (an X25519 share of low order)",
                ));
            }
            let mut salt = [0u8; 64];
            salt[..32].copy_from_slice(&share);
            salt[32..].copy_from_slice(public.as_bytes());
            let key = hkdf(&salt, shared.as_bytes(), X25519_INFO);
            let mut fk = [0u8; FILE_KEY];
            fk.copy_from_slice(&s.body[..FILE_KEY]);
            let tag = chacha20poly1305::Tag::clone_from_slice(&s.body[FILE_KEY..]);
            if ChaCha20Poly1305::new(&key.into())
                .decrypt_in_place_detached(&[0u8; 12].into(), b"", &mut fk, &tag)
                .is_ok()
            {
                return Ok(fk);
            }
        }
    }
    let ours: Vec<String> = identity
        .recipients()
        .iter()
        .map(|r| r.to_string())
        .collect();
    Err(if x25519 == 0 {
        open_err(
            OpenErrorKind::NotAge,
            format!(
                "it has no X25519 recipient stanza (stanzas: {}): encrypted for a plugin \
                 or another recipient type",
                header
                    .stanzas
                    .iter()
                    .map(|s| s.args.first().cloned().unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    } else {
        open_err(
            OpenErrorKind::WrongIdentity,
            format!(
                "it was not encrypted to the identity in {} (recipient {}): a wrong \
                 identity file, or its header is damaged",
                identity.file.display(),
                ours.join(", ")
            ),
        )
    })
}

/// Decrypts the age v1 file `sealed` with `identity` into `out`, in bounded memory,
/// authenticating the header and every chunk; the digests of both sides. On an error,
/// what was written to `out` is not to be trusted (see the module's note).
pub fn open(
    sealed: &mut dyn Read,
    identity: &Identity,
    out: &mut dyn Write,
) -> Result<Opened, OpenError> {
    let io_err =
        |what: &str, e: io::Error| open_err(OpenErrorKind::Io, format!("cannot {what}: {e}"));
    let mut input = BufReader::with_capacity(16 * 1024, Tally::new(sealed));
    let header = read_header(&mut input)?;
    let mut file_key = unwrap(&header, identity)?;
    let mac = header_mac(&file_key, &header.covered);
    if mac.verify_slice(&header.mac).is_err() {
        return Err(open_err(
            OpenErrorKind::Damaged,
            "its header fails its MAC: damaged or tampered with",
        ));
    }
    let mut nonce = [0u8; 16];
    let n = fill(&mut input, &mut nonce).map_err(|e| io_err("read", e))?;
    if n < nonce.len() {
        return Err(open_err(
            OpenErrorKind::Truncated,
            "it ends before its payload: truncated",
        ));
    }
    let payload_key = hkdf(&nonce, &file_key, b"payload");
    {
        use zeroize::Zeroize;
        file_key.zeroize();
    }
    let aead = PayloadCipher::new(&payload_key);
    let mut out = Tally::new(out);
    // One byte past a sealed chunk tells whether another follows.
    let mut buf = vec![0u8; CHUNK + TAG + 1];
    let mut have = 0;
    let mut counter = 0u64;
    loop {
        let n = have + fill(&mut input, &mut buf[have..]).map_err(|e| io_err("read", e))?;
        let at = format!(
            "chunk {counter} (plaintext bytes from {})",
            counter * CHUNK as u64
        );
        if n < TAG + usize::from(counter > 0) {
            return Err(open_err(
                OpenErrorKind::Truncated,
                format!(
                    "it ends {} without its last chunk: truncated",
                    if counter == 0 {
                        "right after its header".to_string()
                    } else {
                        format!("after {} chunks", counter)
                    }
                ),
            ));
        }
        let last = n <= CHUNK + TAG;
        let len = n.min(CHUNK + TAG) - TAG;
        let next = buf[CHUNK + TAG];
        let (text, tag) = buf[..len + TAG].split_at_mut(len);
        let tag: [u8; TAG] = (&*tag).try_into().expect("a tag is TAG bytes");
        if aead.open(&chunk_nonce(counter, last), text, &tag).is_err() {
            // A full chunk that opens as a middle one but was the input's end: cut at a
            // chunk boundary.
            let mut copy = text.to_vec();
            let middle = last
                && len == CHUNK
                && aead
                    .open(&chunk_nonce(counter, false), &mut copy, &tag)
                    .is_ok();
            return Err(if middle {
                open_err(
                    OpenErrorKind::Truncated,
                    format!(
                        "it ends after {} chunks without its last one: truncated",
                        counter + 1
                    ),
                )
            } else if last {
                open_err(
                    OpenErrorKind::Damaged,
                    format!("its last {at} fails authentication: truncated or damaged"),
                )
            } else {
                open_err(
                    OpenErrorKind::Damaged,
                    format!("{at} fails authentication: damaged or tampered with"),
                )
            });
        }
        if last && len == 0 && counter > 0 {
            return Err(open_err(
                OpenErrorKind::Damaged,
                "its last chunk is empty, which age never writes: damaged",
            ));
        }
        out.write_all(text).map_err(|e| io_err("write", e))?;
        if last {
            break;
        }
        buf[0] = next;
        have = 1;
        counter += 1;
    }
    out.flush().map_err(|e| io_err("write", e))?;
    let (plain_sha256, plain_len) = out.finish();
    let (sealed_sha256, sealed_len) = input.into_inner().finish();
    Ok(Digests {
        plain_sha256,
        plain_len,
        sealed_sha256,
        sealed_len,
    })
}

/// Base64 as age uses it: the standard alphabet, no padding, canonical only.
mod base64 {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(data: &[u8]) -> String {
        let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
        for c in data.chunks(3) {
            let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
            let v = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
            for i in 0..=c.len() {
                out.push(ALPHABET[(v >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    fn value(c: u8) -> Option<u32> {
        ALPHABET.iter().position(|&a| a == c).map(|p| p as u32)
    }

    /// `None` for a character outside the alphabet, padding, a length no encoding has,
    /// or leftover bits that are not zero (a non-canonical encoding).
    pub fn decode(text: &[u8]) -> Option<Vec<u8>> {
        if text.len() % 4 == 1 {
            return None;
        }
        let mut out = Vec::with_capacity(text.len() * 3 / 4);
        for c in text.chunks(4) {
            let mut v = 0u32;
            for (i, &ch) in c.iter().enumerate() {
                v |= value(ch)? << (18 - 6 * i);
            }
            // k characters carry k - 1 bytes; the bits between them must be zero.
            let bytes = c.len() - 1;
            let spare = 6 * c.len() - 8 * bytes;
            if (v >> (24 - 6 * c.len())) & ((1 << spare) - 1) != 0 {
                return None;
            }
            for i in 0..bytes {
                out.push((v >> (16 - 8 * i)) as u8);
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payload cipher of crates/payload-cipher seals and opens as the generic
    /// ChaCha20-Poly1305 does (RFC 8439 section 2.8.2's key, nonce and text, without its
    /// associated data: age uses none), and leaves a forged chunk as it was.
    #[test]
    fn the_payload_cipher_is_the_generic_cipher() {
        use chacha20poly1305::aead::AeadInPlace;
        let key: [u8; 32] = core::array::from_fn(|i| 0x80 + i as u8);
        let nonce = [7, 0, 0, 0, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47];
        let plain = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".to_vec();
        let c = PayloadCipher::new(&key);
        let mut ours = plain.clone();
        let tag = c.seal(&nonce, &mut ours);
        let mut theirs = plain.clone();
        let their_tag = ChaCha20Poly1305::new((&key).into())
            .encrypt_in_place_detached((&nonce).into(), b"", &mut theirs)
            .unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(tag, <[u8; 16]>::from(their_tag));
        assert_ne!(ours, plain);
        let mut bad = tag;
        bad[0] ^= 1;
        let before = ours.clone();
        assert!(c.open(&nonce, &mut ours, &bad).is_err());
        assert_eq!(ours, before, "a forged chunk is left as it was");
        c.open(&nonce, &mut ours, &tag).unwrap();
        assert_eq!(ours, plain);
    }

    /// The X25519 identity and recipient of the age specification.
    const SPEC_IDENTITY: &str =
        "AGE-SECRET-KEY-1GFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPQ4EGAEX";
    const SPEC_RECIPIENT: &str = "age1zvkyg2lqzraa2lnjvqej32nkuu0ues2s82hzrye869xeexvn73equnujwj";

    fn identity(text: &str) -> (tempfile::TempDir, Identity) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let id = Identity::read(&p).unwrap();
        (dir, id)
    }

    #[test]
    fn the_specifications_identity_gives_its_recipient() {
        let (_d, id) = identity(&format!("# a comment\n\n{SPEC_IDENTITY}\n"));
        assert_eq!(id.recipients()[0].to_string(), SPEC_RECIPIENT);
        let r: Recipient = SPEC_RECIPIENT.parse().unwrap();
        assert_eq!(r, id.recipients()[0]);
    }

    #[test]
    fn base64_round_trips_and_refuses_non_canonical_text() {
        for len in 0..40 {
            let data: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37)).collect();
            let text = base64::encode(&data);
            assert!(!text.contains('='));
            assert_eq!(base64::decode(text.as_bytes()).unwrap(), data, "{len}");
        }
        // 32 bytes: 43 characters, the last one carrying 2 unused bits.
        let text = base64::encode(&[0xffu8; 32]);
        assert_eq!(text.len(), 43);
        let mut bad = text.into_bytes();
        *bad.last_mut().unwrap() = b'/'; // sets the unused bits
        assert_eq!(base64::decode(&bad), None);
        assert_eq!(base64::decode(b"AA=="), None);
        assert_eq!(base64::decode(b"A"), None);
    }

    #[test]
    fn bech32_catches_a_typo_and_mixed_case() {
        let mut typo = SPEC_RECIPIENT.to_string();
        typo.replace_range(10..11, "q");
        assert!(typo.parse::<Recipient>().unwrap_err().contains("checksum"));
        let mixed = format!("A{}", &SPEC_RECIPIENT[1..]);
        assert!(mixed.parse::<Recipient>().unwrap_err().contains("mixed"));
        assert!(SPEC_RECIPIENT.to_uppercase().parse::<Recipient>().is_ok());
    }

    #[test]
    fn non_ascii_text_is_refused_without_panicking() {
        let e = "agé1ééééééééééééééééééé".parse::<Recipient>().unwrap_err();
        assert!(e.contains("non-ASCII"), "{e}");
        let e = "AGE-SECRET-KEYé1".parse::<Recipient>().unwrap_err();
        assert!(e.contains("non-ASCII"), "{e}");
    }

    #[test]
    fn a_secret_key_as_a_recipient_is_refused_without_repeating_it() {
        let e = SPEC_IDENTITY.parse::<Recipient>().unwrap_err();
        assert!(e.contains("secret key"), "{e}");
        assert!(!e.contains("GFPYY"), "{e}");
    }

    #[test]
    fn the_identity_is_never_in_debug_nor_in_an_error() {
        let (_d, id) = identity(&format!("{SPEC_IDENTITY}\n"));
        let shown = format!("{id:?}");
        assert!(shown.contains(SPEC_RECIPIENT), "{shown}");
        assert!(!shown.to_uppercase().contains("GFPYY"), "{shown}");
        // A damaged key line: the error names the file and line, not the text.
        let damaged = SPEC_IDENTITY.replace("GFPQ4", "GFPQ5");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        std::fs::write(&p, format!("# created\n{damaged}\n")).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let e = Identity::read(&p).unwrap_err();
        assert_eq!(e.code, ReasonCode::ConfigInvalid);
        assert!(
            e.message.contains(&format!("{} line 2", p.display())),
            "{}",
            e.message
        );
        assert!(
            !e.headline().to_uppercase().contains("GFPYY"),
            "{}",
            e.message
        );
        assert!(!format!("{e:?}").to_uppercase().contains("GFPYY"));
    }

    #[test]
    fn seal_then_open_round_trips_with_digests() {
        let (_d, id) = identity(&format!("{SPEC_IDENTITY}\n"));
        for len in [0usize, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let mut sealed = Vec::new();
            let s = seal(&mut plain.as_slice(), &id.recipients(), &mut sealed).unwrap();
            assert_eq!(s.plain_len, len as u64);
            assert_eq!(s.sealed_len, sealed.len() as u64);
            assert_eq!(s.sealed_sha256, <[u8; 32]>::from(Sha256::digest(&sealed)));
            let mut back = Vec::new();
            let o = open(&mut sealed.as_slice(), &id, &mut back).unwrap();
            assert_eq!(back, plain, "{len}");
            assert_eq!(o, s);
        }
    }
}
