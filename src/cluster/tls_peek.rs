//! The certificate chain a TLS server presents, read without a TLS library: a TLS 1.2
//! ClientHello is sent, and the server's Certificate message, which TLS 1.2 sends in
//! the clear, is read; the connection is closed before any key is exchanged (etcd logs a
//! handshake that ended early). Only what `rotate-ca` needs: which certificate a peer
//! serves, to judge it against a trust bundle on disk ([`crate::shared::config::certs`]).
//!
//! etcd (Go's crypto/tls) accepts TLS 1.2 unless it was started with
//! `--tls-min-version=TLS1.3`; then the server's alert is said as such.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The most read from the server before its Certificate message must have come.
const MAX_READ: usize = 256 * 1024;

/// Why [`served_chain`] read no chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeekError {
    /// Nothing answered: no connection, or it was closed or reset before any TLS record
    /// (a server down or restarting), which says nothing of the certificate it serves.
    NoAnswer(String),
    /// The server answered with something other than a chain to read.
    Answered(String),
}

impl std::fmt::Display for PeekError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeekError::NoAnswer(w) | PeekError::Answered(w) => f.write_str(w),
        }
    }
}

/// The DER certificates `addr` presents (the leaf first), within `limit`.
pub fn served_chain(addr: SocketAddr, limit: Duration) -> Result<Vec<Vec<u8>>, PeekError> {
    let mut s = TcpStream::connect_timeout(&addr, limit)
        .map_err(|e| PeekError::NoAnswer(format!("connect: {e}")))?;
    read_chain(&mut s, limit).map_err(|e| match e {
        Short::Closed => {
            PeekError::NoAnswer("the server closed the connection before its certificate".into())
        }
        Short::Other(w) => PeekError::Answered(w),
    })
}

/// What [`read_chain`] can end in short of a chain.
enum Short {
    /// Closed or cut by the server before any TLS record came.
    Closed,
    Other(String),
}

impl From<String> for Short {
    fn from(w: String) -> Short {
        Short::Other(w)
    }
}

/// A connection cut by the other end (reset, aborted, a broken pipe).
fn cut(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe
    )
}

fn read_chain(s: &mut TcpStream, limit: Duration) -> Result<Vec<Vec<u8>>, Short> {
    let deadline = Instant::now() + limit;
    s.set_write_timeout(Some(limit))
        .map_err(|e| e.to_string())?;
    s.write_all(&client_hello()).map_err(|e| {
        if cut(&e) {
            Short::Closed
        } else {
            format!("send the ClientHello: {e}").into()
        }
    })?;
    let mut handshake = Vec::new();
    let mut buf = Vec::new();
    loop {
        // Every complete record read so far.
        while buf.len() >= 5 {
            let len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
            if buf.len() < 5 + len {
                break;
            }
            let (kind, body) = (buf[0], buf[5..5 + len].to_vec());
            buf.drain(..5 + len);
            match kind {
                22 => handshake.extend_from_slice(&body),
                21 => return Err(alert(&body).into()),
                other => return Err(format!("unexpected TLS record type {other}").into()),
            }
        }
        if let Some(chain) = certificate(&handshake)? {
            return Ok(chain);
        }
        if buf.len() + handshake.len() > MAX_READ {
            return Err("no Certificate message in the server's first 256 KiB"
                .to_string()
                .into());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no certificate within {} s", limit.as_secs()).into());
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        let mut chunk = [0u8; 16 * 1024];
        match s.read(&mut chunk) {
            // Closed before any record: nothing answered. After one: an answer cut short.
            Ok(0) if handshake.is_empty() && buf.is_empty() => return Err(Short::Closed),
            Ok(0) => {
                return Err("the server closed the connection before its certificate"
                    .to_string()
                    .into())
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if cut(&e) && handshake.is_empty() && buf.is_empty() => {
                return Err(Short::Closed)
            }
            Err(e) => return Err(format!("read: {e}").into()),
        }
    }
}

/// An alert record's words.
fn alert(body: &[u8]) -> String {
    match body.get(1) {
        Some(70) => {
            "the server refused TLS 1.2 (protocol_version alert: it requires TLS 1.3)".into()
        }
        Some(40) => {
            "the server refused the handshake (handshake_failure alert: no common cipher)".into()
        }
        Some(d) => format!("the server sent TLS alert {d}"),
        None => "the server sent an empty alert".into(),
    }
}

/// The certificates of the Certificate message in `handshake` (the handshake messages so
/// far, concatenated), once it is complete.
fn certificate(handshake: &[u8]) -> Result<Option<Vec<Vec<u8>>>, String> {
    let mut rest = handshake;
    while rest.len() >= 4 {
        let len = usize::from(rest[1]) << 16 | usize::from(rest[2]) << 8 | usize::from(rest[3]);
        if rest.len() < 4 + len {
            return Ok(None);
        }
        let (kind, body) = (rest[0], &rest[4..4 + len]);
        match kind {
            // ServerHello: TLS 1.2, or the certificate would be encrypted.
            2 if body.get(..2) != Some(&[3, 3]) => {
                return Err(format!(
                    "the server chose TLS version {:02x?}, not 1.2",
                    body.get(..2).unwrap_or_default()
                ))
            }
            11 => return certificates(body).map(Some),
            _ => {}
        }
        rest = &rest[4 + len..];
    }
    Ok(None)
}

fn u24(b: &[u8]) -> Option<usize> {
    Some(usize::from(*b.first()?) << 16 | usize::from(*b.get(1)?) << 8 | usize::from(*b.get(2)?))
}

fn certificates(body: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let bad = || "a malformed Certificate message".to_string();
    let total = u24(body).ok_or_else(bad)?;
    let mut list = body.get(3..3 + total).ok_or_else(bad)?;
    let mut out = Vec::new();
    while !list.is_empty() {
        let len = u24(list).ok_or_else(bad)?;
        out.push(list.get(3..3 + len).ok_or_else(bad)?.to_vec());
        list = &list[3 + len..];
    }
    if out.is_empty() {
        return Err("the server presented no certificate".into());
    }
    Ok(out)
}

/// A TLS 1.2 ClientHello offering the ECDHE suites Go serves with ECDSA and RSA keys.
fn client_hello() -> Vec<u8> {
    let ext = |kind: u16, data: &[u8]| {
        let mut e = kind.to_be_bytes().to_vec();
        e.extend_from_slice(&(data.len() as u16).to_be_bytes());
        e.extend_from_slice(data);
        e
    };
    let list16 = |items: &[u16]| {
        let mut v = ((items.len() * 2) as u16).to_be_bytes().to_vec();
        for i in items {
            v.extend_from_slice(&i.to_be_bytes());
        }
        v
    };
    let mut extensions = Vec::new();
    // supported_groups: x25519, secp256r1, secp384r1.
    extensions.extend(ext(0x000a, &list16(&[0x001d, 0x0017, 0x0018])));
    // ec_point_formats: uncompressed.
    extensions.extend(ext(0x000b, &[1, 0]));
    // signature_algorithms: ECDSA, RSA-PSS and PKCS#1 with SHA-256/384/512.
    extensions.extend(ext(
        0x000d,
        &list16(&[
            0x0403, 0x0503, 0x0603, 0x0804, 0x0805, 0x0806, 0x0401, 0x0501, 0x0601,
        ]),
    ));
    // renegotiation_info (empty) and extended_master_secret.
    extensions.extend(ext(0xff01, &[0]));
    extensions.extend(ext(0x0017, &[]));
    let mut body = vec![3, 3];
    // The random need not be random: no key is ever derived from this hello.
    body.extend_from_slice(&[0x42; 32]);
    body.push(0); // no session id
    body.extend(list16(&[
        0xc02b, 0xc02c, 0xc02f, 0xc030, 0xcca9, 0xcca8, 0xc009, 0xc013, 0x009c, 0x002f,
    ]));
    body.extend_from_slice(&[1, 0]); // compression: null
    body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    body.extend(extensions);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend(body);
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    record.extend(hs);
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_message_split_over_records_is_read_once_complete() {
        // ServerHello (TLS 1.2), then Certificate with two certificates.
        let mut hs = vec![2, 0, 0, 2, 3, 3];
        let certs = [vec![0xaa; 5], vec![0xbb; 3]];
        let mut list = Vec::new();
        for c in &certs {
            list.extend_from_slice(&(c.len() as u32).to_be_bytes()[1..]);
            list.extend_from_slice(c);
        }
        let mut body = (list.len() as u32).to_be_bytes()[1..].to_vec();
        body.extend(list);
        hs.push(11);
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        assert_eq!(certificate(&hs[..hs.len() - 1]).unwrap(), None);
        assert_eq!(certificate(&hs).unwrap(), Some(certs.to_vec()));
    }

    /// Nothing listening, or a server that closes before any record (etcd restarting),
    /// is no answer; one that answers with something else is an answer (rotate-ca asks
    /// again after the first, refuses after the second).
    #[test]
    fn a_closed_port_or_a_close_before_any_record_is_no_answer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let limit = Duration::from_secs(5);
        let server = std::thread::spawn(move || {
            for reply in [&b""[..], &[21, 3, 3, 0, 2, 2, 40][..]] {
                let (mut c, _) = listener.accept().unwrap();
                // The whole ClientHello read first, so the close is a FIN, not a reset.
                let mut hello = Vec::new();
                let mut chunk = [0u8; 1024];
                while hello.len() < 5
                    || hello.len() < 5 + usize::from(u16::from_be_bytes([hello[3], hello[4]]))
                {
                    let n = c.read(&mut chunk).unwrap();
                    assert!(n > 0, "the client closed first");
                    hello.extend_from_slice(&chunk[..n]);
                }
                c.write_all(reply).unwrap();
            }
        });
        assert!(matches!(
            served_chain(addr, limit),
            Err(PeekError::NoAnswer(_))
        ));
        let answered = served_chain(addr, limit).unwrap_err();
        assert!(
            matches!(&answered, PeekError::Answered(w) if w.contains("handshake_failure")),
            "{answered}"
        );
        server.join().unwrap();
        // The listener is gone: nobody at that port.
        assert!(matches!(
            served_chain(addr, limit),
            Err(PeekError::NoAnswer(w)) if w.starts_with("connect: ")
        ));
    }

    #[test]
    fn a_server_choosing_another_version_or_alerting_is_said() {
        assert!(certificate(&[2, 0, 0, 2, 3, 4])
            .unwrap_err()
            .contains("not 1.2"));
        assert!(alert(&[2, 70]).contains("TLS 1.3"));
    }
}
