//! The S3 client's bounds against a hostile server (issue 38, item 4): not a store (the
//! client's work against a real one is tests/backup_s3.rs, against Ceph's radosgw), but a
//! loopback listener that answers each request as a broken or malicious store would: a
//! listing whose continuation never ends or goes round, a head of endless header lines, a
//! body dripped a byte at a time, a download that never ends or says it is larger than
//! the listing, and a `QuotaExceeded` sent before the request's body was taken. Each ends
//! with its own error, naming what happened, and the process's peak memory is printed
//! after each (one test in this binary, so that the figure is this client's alone).
use etcd_setup::backup::s3::{Client, ErrorKind, MAX_LISTED, MIN_PART_SIZE};
use etcd_setup::shared::config;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

#[path = "support/scratch.rs"]
mod scratch;

/// The request a connection carried: its method and target (the body is not read).
struct Request {
    method: String,
    target: String,
}

/// A server on loopback answering every connection with `answer` on a thread of its own.
fn serve(
    answer: impl Fn(&Request, &mut TcpStream) + Send + Sync + 'static,
) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut first = String::new();
                if r.read_line(&mut first).is_err() {
                    return;
                }
                loop {
                    let mut l = String::new();
                    if r.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" {
                        break;
                    }
                }
                let mut it = first.split_whitespace();
                let req = Request {
                    method: it.next().unwrap_or("").to_string(),
                    target: it.next().unwrap_or("").to_string(),
                };
                answer(&req, &mut s);
            });
        }
    });
    addr
}

/// A client of the bucket `hostile` at `addr` (plain http), with key files of its own.
fn client(dir: &std::path::Path, addr: std::net::SocketAddr) -> Client {
    client_at(dir, &format!("http://{addr}"), "allow_http = true", addr)
}

/// A client of the bucket `hostile` at `endpoint` with the `[backup]` lines `extra`.
fn client_at(
    dir: &std::path::Path,
    endpoint: &str,
    extra: &str,
    addr: std::net::SocketAddr,
) -> Client {
    let key = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    };
    let (access, secret) = (
        key("access", "AKIDHOSTILE\n"),
        key("secret", "not-a-secret\n"),
    );
    let cfg = dir.join(format!("config-{}.toml", addr.port()));
    std::fs::write(
        &cfg,
        format!(
            r#"
[node]
name = "etcd-1"
ip = "127.0.0.1"

[etcd]
initial_cluster = "etcd-1=http://127.0.0.1:2380"
cluster_token = "tok"

[backup]
endpoint = "{endpoint}"
{extra}
bucket = "hostile"
path_style = true
access_key_file = "{}"
secret_key_file = "{}"
encrypt = false
"#,
            access.display(),
            secret.display()
        ),
    )
    .unwrap();
    let settings = config::load(&cfg).unwrap().backup.unwrap();
    Client::new(&settings, settings.credentials().unwrap())
        .unwrap()
        .with_part_size(MIN_PART_SIZE)
}

/// This process's peak resident memory in MiB (`VmHWM`).
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib / 1024.0
}

/// A ListObjectsV2 page of `n` objects from `first`, continued by `token` when given.
fn page(first: usize, n: usize, token: Option<&str>) -> String {
    let mut xml = String::from("<ListBucketResult><Name>hostile</Name>");
    for i in first..first + n {
        xml.push_str(&format!(
            "<Contents><Key>p/{i:08}.db.age</Key><Size>20000</Size></Contents>"
        ));
    }
    match token {
        Some(t) => xml.push_str(&format!(
            "<IsTruncated>true</IsTruncated><NextContinuationToken>{t}</NextContinuationToken>"
        )),
        None => xml.push_str("<IsTruncated>false</IsTruncated>"),
    }
    xml.push_str("</ListBucketResult>");
    xml
}

fn reply(s: &mut TcpStream, status: &str, body: &str) {
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The continuation token a listing's target asked for.
fn token_of(target: &str) -> Option<usize> {
    target
        .split(['?', '&'])
        .find_map(|q| q.strip_prefix("continuation-token="))
        .and_then(|t| t.parse().ok())
}

#[test]
fn a_hostile_store_cannot_hold_the_client_or_grow_its_memory() {
    let dir = scratch::dir("s3-bounds");
    let base = peak_mib();
    let figure = |what: &str, took: Duration| {
        println!(
            "{what}: {:.1} s, peak memory {:.1} MiB ({:+.1} MiB since the start)",
            took.as_secs_f64(),
            peak_mib(),
            peak_mib() - base
        )
    };

    // 1. A listing whose continuation token never changes: one page again and again.
    let c = client(
        dir.path(),
        serve(|_, s| reply(s, "200 OK", &page(0, 1000, Some("same")))),
    );
    let t = Instant::now();
    let e = c.list("p/", 1000).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Other, "{e}");
    assert!(e.message.contains("goes round: page 2 continues"), "{e}");
    figure("listing that goes round", t.elapsed());

    // 2. A listing that never ends, each page continued by a new token.
    let c = client(
        dir.path(),
        serve(|r, s| {
            let n = token_of(&r.target).unwrap_or(0);
            reply(
                s,
                "200 OK",
                &page(n * 1000, 1000, Some(&(n + 1).to_string())),
            )
        }),
    );
    let t = Instant::now();
    let e = c.list("p/", 1000).unwrap_err();
    assert!(
        e.message
            .contains(&format!("more than {MAX_LISTED} entries under \"p/\"")),
        "{e}"
    );
    figure("listing without end", t.elapsed());

    // 3. An answer's head of endless header lines.
    let c = client(
        dir.path(),
        serve(|_, s| {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\n");
            let line = format!("x-amz-meta-pad: {}\r\n", "a".repeat(1000));
            while s.write_all(line.as_bytes()).is_ok() {}
        }),
    );
    let t = Instant::now();
    let e = c.head("p/x.db.age").unwrap_err();
    assert!(
        e.message.contains("the answer's head is over 64 KiB"),
        "{e}"
    );
    figure("endless header lines", t.elapsed());

    // 4. A download the listing said is 20,000 bytes, whose body never ends (no length).
    let c = client(
        dir.path(),
        serve(|_, s| {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let chunk = vec![b'x'; 64 << 10];
            while s.write_all(&chunk).is_ok() {}
        }),
    );
    let t = Instant::now();
    let mut out = Vec::new();
    let e = c.get("p/x.db.age", 20_000, &mut out).unwrap_err();
    assert!(
        e.message
            .contains("the store sends more than the 20000 bytes the store listed"),
        "{e}"
    );
    assert!(out.len() <= 20_001, "{} bytes written", out.len());
    figure("download without end", t.elapsed());

    // 5. A download whose length is over the listing's: refused before a byte is read.
    let c = client(
        dir.path(),
        serve(|_, s| {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n");
            std::thread::sleep(Duration::from_secs(2));
        }),
    );
    let mut out = Vec::new();
    let e = c.get("p/x.db.age", 20_000, &mut out).unwrap_err();
    assert!(e.message.contains("more than the 20000 bytes"), "{e}");
    assert!(out.is_empty());

    // 6. A body dripped a byte a second: too slow once the grace has passed, not a hang.
    let c = client(
        dir.path(),
        serve(|_, s| {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n");
            for _ in 0..20_000 {
                if s.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }),
    );
    let t = Instant::now();
    let mut out = Vec::new();
    let e = c.get("p/x.db.age", 20_000, &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(e.message.contains("the store: too slow: "), "{e}");
    assert!(
        e.message.contains("under the least rate of 16 KiB/s"),
        "{e}"
    );
    // The grace is 30 s: the request ends soon after, whatever the drip would take.
    assert!(out.len() < 100, "{} bytes", out.len());
    figure("dripped body", t.elapsed());

    // 7. QuotaExceeded answered as soon as a part's head came, its body not taken.
    let c = client(
        dir.path(),
        serve(|r, s| {
            match r.method.as_str() {
            "POST" => reply(
                s,
                "200 OK",
                "<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>",
            ),
            "PUT" => {
                let body = "<Error><Code>QuotaExceeded</Code><Message>quota full</Message></Error>";
                reply(s, "403 Forbidden", body);
                // Closed with the part unread: the kernel resets the connection.
                std::thread::sleep(Duration::from_millis(200));
                let _ = s.shutdown(std::net::Shutdown::Both);
                let mut sink = [0u8; 1];
                let _ = s.read(&mut sink);
            }
            _ => reply(s, "204 No Content", ""),
        }
        }),
    );
    let mut up = c.upload("p/big.db.age", &[]);
    let body = vec![7u8; 3 * MIN_PART_SIZE];
    let written = up.write_all(&body);
    let e = match written {
        Err(e) => e.to_string(),
        Ok(()) => up.finish().unwrap_err().message,
    };
    assert!(e.contains("QuotaExceeded"), "{e}");
    assert!(!e.contains("Broken pipe") && !e.contains("reset"), "{e}");

    // 8. A TLS handshake answered a byte a second: each read comes within its own
    // bound, so the handshake is bounded as a whole (30 s), not a hang.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut hello = [0u8; 4096];
                let _ = s.read(&mut hello);
                // A handshake record's header, then its 16 KiB body a byte at a time.
                for b in [0x16u8, 0x03, 0x03, 0x40, 0x00]
                    .into_iter()
                    .chain(std::iter::repeat(0))
                {
                    if s.write_all(&[b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
        }
    });
    let c = client_at(dir.path(), &format!("https://{addr}"), "", addr);
    let t = Instant::now();
    let e = c.head("p/x.db.age").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(
        e.message.contains("TLS handshake with https://127.0.0.1:"),
        "{e}"
    );
    assert!(e.message.contains(": not done within 30 s"), "{e}");
    // The drip would go on for hours; the client gave up at its bound.
    assert!(t.elapsed() < Duration::from_secs(90), "{:?}", t.elapsed());
    figure("dripped TLS handshake", t.elapsed());

    let grew = peak_mib() - base;
    println!("peak memory grew {grew:.1} MiB over every case");
    // Unbounded, case 1 alone reached 3.7 GB in 60 s and case 3 9.5 GB in 40 s.
    assert!(grew < 256.0, "{grew:.1} MiB");
}
