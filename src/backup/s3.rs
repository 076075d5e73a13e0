//! A small S3 client for the backups: SigV4-signed HTTP/1.1 over TLS (rustls, ring), one
//! connection a request, an upload's bodies bounded to 1 + [`IN_FLIGHT`] parts in memory.
//!
//! Operations: a streaming [`Upload`] (`std::io::Write`: one PUT below the part size,
//! multipart above it, parts sent while the next is written, aborted on error or drop),
//! [`Client::get`] into a `Write`,
//! [`Client::head`] (user metadata), [`Client::list`] (ListObjectsV2, every page),
//! [`Client::delete`], and the incomplete multipart uploads under a prefix
//! ([`Client::list_uploads`], [`Client::abort_upload`]). Every error names the endpoint,
//! the bucket and key and S3's own code and message; never a key.
//!
//! Every request is bounded, whatever the store does: the connection within
//! [`CONNECT_TIMEOUT`]; the answer's head within [`HEAD_WAIT`] of the request sent and in
//! at most [`MAX_HEAD`] bytes; a body sent or read at [`MIN_RATE`] at least once
//! [`RATE_GRACE`] has passed, and no longer than the caller expects (a listing's page
//! [`MAX_BODY`], a download the size the store listed); a listing stops at a token it was
//! given before and at [`MAX_LISTED`] entries. An answer sent before the request's body
//! was taken (radosgw's `QuotaExceeded`) is read and named.

use super::sigv4::{self, Canonical, EMPTY_SHA256};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::{BackupSettings, Credentials, Endpoint};
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The part size of a multipart upload. An upload holds at most 1 + [`IN_FLIGHT`] parts
/// in memory: one filled by the writer while those before it are sent.
pub const PART_SIZE: usize = 6 << 20;
/// How many parts of one upload are sent at once, each on a thread of its own.
pub const IN_FLIGHT: usize = 2;
/// The smallest part S3 takes (every part but the last).
pub const MIN_PART_SIZE: usize = 5 << 20;
/// The system's CA bundle, the trust roots when `backup.ca_file` is not given.
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The largest response body read into memory (listings, errors).
const MAX_BODY: usize = 16 << 20;
/// The longest wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest wait for any one read or write.
const IO_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest an answer's head may take, from the request sent to its empty line.
const HEAD_WAIT: Duration = IO_TIMEOUT;
/// How long an answer is awaited when the store stopped taking the request's body.
const EARLY_WAIT: Duration = Duration::from_secs(5);
/// The longest TLS handshake, as a whole: each read and write of it is bounded by
/// [`IO_TIMEOUT`], which a store dripping a byte now and then would never reach.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(30);
/// The most bytes an answer's head may have, informational answers included.
const MAX_HEAD: usize = 64 << 10;
/// The least rate a body is sent or read at (its bytes over the time since its first),
/// once [`RATE_GRACE`] has passed: a store that drips bytes fails the request rather than
/// hold the snapshot's locks for hours.
const MIN_RATE: u64 = 16 << 10;
/// How long a body may move slower than [`MIN_RATE`].
const RATE_GRACE: Duration = Duration::from_secs(30);
/// The most entries (objects or incomplete uploads) a listing gathers.
pub const MAX_LISTED: usize = 100_000;
/// How many bytes past the parts sent a read-back reads (a grown object is named as one).
const READ_BACK_EXTRA: u64 = 1 << 20;

/// What kind of failure, one per thing an operator fixes differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No connection (DNS, refused, timed out, reset).
    Unreachable,
    /// The TLS handshake failed (unknown CA, wrong name, or not TLS at all).
    Tls,
    /// The store refused the keys (`SignatureDoesNotMatch`, `InvalidAccessKeyId`,
    /// `AccessDenied`).
    Denied,
    /// `NoSuchBucket`.
    NoBucket,
    /// `QuotaExceeded` (CloudStack's bucket quota, RGW's user quota).
    Quota,
    /// `RequestTimeTooSkewed`: the node's clock is off.
    Skew,
    /// `NoSuchKey` / 404.
    NotFound,
    /// Anything else the store answered, or a malformed answer.
    Other,
}

impl ErrorKind {
    /// The reason code an operator sees.
    pub fn reason(self) -> ReasonCode {
        match self {
            ErrorKind::Unreachable => ReasonCode::BackupUnreachable,
            ErrorKind::Tls => ReasonCode::BackupTlsRefused,
            ErrorKind::Denied => ReasonCode::BackupDenied,
            ErrorKind::NoBucket => ReasonCode::BackupBucketMissing,
            ErrorKind::Quota => ReasonCode::BackupQuotaExceeded,
            ErrorKind::Skew => ReasonCode::BackupClockSkew,
            ErrorKind::NotFound | ErrorKind::Other => ReasonCode::BackupFailed,
        }
    }
}

/// A failed S3 request: its kind and the one sentence naming endpoint, bucket, key and
/// S3's code and message.
#[derive(Debug, Clone)]
pub struct S3Error {
    /// What went wrong.
    pub kind: ErrorKind,
    /// S3's error code when it answered one (`SignatureDoesNotMatch`).
    pub code: Option<String>,
    /// The sentence.
    pub message: String,
}

impl fmt::Display for S3Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for S3Error {}

impl From<S3Error> for Failure {
    fn from(e: S3Error) -> Failure {
        Failure::new(e.kind.reason(), e.message)
    }
}

/// The result of a request that failed.
pub type S3Result<T> = Result<T, S3Error>;

/// An object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// `LastModified` as the store wrote it (RFC 3339).
    pub last_modified: String,
}

/// An incomplete multipart upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingUpload {
    /// Its key.
    pub key: String,
    /// Its upload ID.
    pub upload_id: String,
    /// `Initiated` as the store wrote it.
    pub initiated: String,
}

/// What `head` says about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// `Content-Length`.
    pub size: u64,
    /// The user metadata (`x-amz-meta-NAME`), names in lower case without the prefix.
    pub meta: Vec<(String, String)>,
}

impl Head {
    /// The value of metadata `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.meta
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What was sent or received: its length and SHA-256.
pub use crate::shared::digest::Digest256;

/// What came back of one part's range of an object ([`Client::read_back`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRead {
    /// The bytes that came back: fewer than the part's when the object ends sooner.
    pub got: Digest256,
    /// The object's whole size as read.
    pub object_size: u64,
}

/// The client of one bucket. A clone asks the same bucket (an upload's part sender
/// thread holds one).
#[derive(Clone)]
pub struct Client {
    endpoint: Endpoint,
    bucket: String,
    region: String,
    path_style: bool,
    credentials: Credentials,
    key_files: (PathBuf, PathBuf),
    tls: Option<Arc<rustls::ClientConfig>>,
    part_size: usize,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint.to_string())
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("path_style", &self.path_style)
            .field("credentials", &"<redacted>")
            .finish()
    }
}

/// The socket as the TLS handshake reads and writes it: every call bounded by what is
/// left until `until`, and refused once it has passed.
struct Deadline<'a> {
    sock: &'a TcpStream,
    until: Instant,
}

impl Deadline<'_> {
    fn left(&self) -> io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake's time is up",
            ));
        }
        Ok(left.min(IO_TIMEOUT))
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.set_read_timeout(Some(self.left()?))?;
        (&*self.sock).read(buf)
    }
}

impl Write for Deadline<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.set_write_timeout(Some(self.left()?))?;
        (&*self.sock).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => match s.read(buf) {
                // A server that closes without close_notify after a complete response.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A connection under its request's bounds: each read or write waits at most until the
/// answer's head is due (while it is read), else until the bytes moved since the
/// phase began fall under [`MIN_RATE`] (after [`RATE_GRACE`]), and never more than
/// [`IO_TIMEOUT`].
struct Conn {
    stream: Stream,
    /// The same socket, for its timeouts.
    socket: TcpStream,
    /// While the answer's head is read: when it is due.
    head_by: Option<(Instant, Duration)>,
    /// When this phase (the request sent, or the answer's body read) began.
    since: Instant,
    /// The bytes it moved.
    moved: u64,
}

impl Conn {
    /// A new phase: the answer's head, due within `head` (`None`: a body, at the least rate).
    fn phase(&mut self, head: Option<Duration>) {
        self.since = Instant::now();
        self.head_by = head.map(|d| (self.since + d, d));
        self.moved = 0;
    }

    /// How long the next read or write may wait; the bound passed, when one is.
    fn wait(&self) -> io::Result<Duration> {
        let now = Instant::now();
        let left = if let Some((by, within)) = self.head_by {
            by.checked_duration_since(now).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no complete answer within {} s", within.as_secs()),
                )
            })?
        } else {
            let floor =
                RATE_GRACE.max(Duration::from_secs_f64(self.moved as f64 / MIN_RATE as f64));
            let elapsed = now - self.since;
            floor.checked_sub(elapsed).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "too slow: {} bytes in {:.0} s, under the least rate of {} KiB/s",
                        self.moved,
                        elapsed.as_secs_f64(),
                        MIN_RATE >> 10
                    ),
                )
            })?
        };
        Ok(left.clamp(Duration::from_millis(50), IO_TIMEOUT))
    }

    /// `op` (a read or a write) within [`Conn::wait`]; a wait that ran out says which bound.
    fn bounded(
        &mut self,
        set: fn(&TcpStream, Option<Duration>) -> io::Result<()>,
        op: impl FnOnce(&mut Stream) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let wait = self.wait()?;
        set(&self.socket, Some(wait))?;
        match op(&mut self.stream) {
            Ok(n) => {
                self.moved += n as u64;
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(self.wait().err().unwrap_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("nothing moved for {:.0} s", wait.as_secs_f64()),
                    )
                }))
            }
            Err(e) => Err(e),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.bounded(TcpStream::set_read_timeout, |s| s.read(buf))
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bounded(TcpStream::set_write_timeout, |s| s.write(buf))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// A response whose head was read; the body still on the connection.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: BufReader<Conn>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request.
struct Req<'a> {
    /// What it does, for messages ("upload", "list", …).
    op: &'a str,
    method: &'a str,
    key: Option<&'a str>,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: &'a [u8],
    /// The body's SHA-256 in hex when the caller has it (a part, hashed once for its
    /// signature and its read-back); computed here otherwise.
    payload_sha256: Option<String>,
}

impl Client {
    /// The client of `settings`' bucket with `credentials` (from
    /// [`BackupSettings::credentials`]). Fails when the trust roots cannot be read.
    pub fn new(settings: &BackupSettings, credentials: Credentials) -> Result<Client, Failure> {
        let tls = if settings.endpoint.tls {
            Some(Arc::new(tls_config(settings)?))
        } else {
            None
        };
        Ok(Client {
            endpoint: settings.endpoint.clone(),
            bucket: settings.bucket.clone(),
            region: settings.region.clone(),
            path_style: settings.path_style,
            credentials,
            key_files: (
                settings.access_key_file.clone(),
                settings.secret_key_file.clone(),
            ),
            tls,
            part_size: PART_SIZE,
        })
    }

    /// The part size of uploads (tests use a small one; at least S3's 5 MiB).
    pub fn with_part_size(mut self, part_size: usize) -> Client {
        self.part_size = part_size.max(MIN_PART_SIZE);
        self
    }

    /// The part size of uploads.
    pub fn part_size(&self) -> usize {
        self.part_size
    }

    /// `s3://bucket/key at https://endpoint`, for messages.
    fn shown(&self, key: Option<&str>) -> String {
        format!(
            "s3://{}/{} at {}",
            self.bucket,
            key.unwrap_or(""),
            self.endpoint
        )
    }

    fn err(
        &self,
        kind: ErrorKind,
        op: &str,
        key: Option<&str>,
        what: impl fmt::Display,
    ) -> S3Error {
        S3Error {
            kind,
            code: None,
            message: format!("{op} {}: {what}", self.shown(key)),
        }
    }

    /// A read or write of `op` that failed: a bound passed is the store's (too slow, no
    /// answer in time), anything else a connection lost.
    fn io_failed(&self, op: &str, key: Option<&str>, e: io::Error) -> S3Error {
        let what = if e.kind() == io::ErrorKind::TimedOut {
            "the store"
        } else {
            "connection lost"
        };
        self.err(ErrorKind::Unreachable, op, key, format_args!("{what}: {e}"))
    }

    /// The host to connect to and name in `Host` and SNI, and the request path.
    fn host_and_path(&self, key: Option<&str>) -> (String, String, String) {
        let key_path = key.map(|k| sigv4::uri_encode(k, true)).unwrap_or_default();
        if self.path_style {
            let path = match key {
                Some(_) => format!("/{}/{key_path}", self.bucket),
                None => format!("/{}", self.bucket),
            };
            (self.endpoint.host.clone(), self.endpoint.authority(), path)
        } else {
            let host = format!("{}.{}", self.bucket, self.endpoint.host);
            (
                host,
                format!("{}.{}", self.bucket, self.endpoint.authority()),
                format!("/{key_path}"),
            )
        }
    }

    fn connect(&self, op: &str, key: Option<&str>, host: &str) -> S3Result<Conn> {
        let unreachable = |e: &dyn fmt::Display| {
            self.err(
                ErrorKind::Unreachable,
                op,
                key,
                format_args!("cannot connect: {e}"),
            )
        };
        let addrs: Vec<_> = (host, self.endpoint.port)
            .to_socket_addrs()
            .map_err(|e| unreachable(&e))?
            .collect();
        let mut last = None;
        let mut tcp = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = match (tcp, last) {
            (Some(t), _) => t,
            (None, Some(e)) => return Err(unreachable(&e)),
            (None, None) => return Err(unreachable(&"no address")),
        };
        let _ = tcp.set_read_timeout(Some(IO_TIMEOUT));
        let _ = tcp.set_write_timeout(Some(IO_TIMEOUT));
        let _ = tcp.set_nodelay(true);
        let socket = tcp
            .try_clone()
            .map_err(|e| self.err(ErrorKind::Other, op, key, format_args!("socket: {e}")))?;
        let bounded = |stream| Conn {
            stream,
            socket,
            head_by: None,
            since: Instant::now(),
            moved: 0,
        };
        let Some(config) = &self.tls else {
            return Ok(bounded(Stream::Plain(tcp)));
        };
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
            self.err(
                ErrorKind::Tls,
                op,
                key,
                format_args!("{host} is no TLS server name: {e}"),
            )
        })?;
        let conn = rustls::ClientConnection::new(config.clone(), name)
            .map_err(|e| self.err(ErrorKind::Tls, op, key, format_args!("TLS: {e}")))?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        // The handshake now, so that its failure is named as one; bounded as a whole
        // (rustls reads on inside one complete_io while bytes trickle in).
        let until = Instant::now() + HANDSHAKE_WAIT;
        while s.conn.is_handshaking() {
            let mut io = Deadline {
                sock: &s.sock,
                until,
            };
            if let Err(e) = s.conn.complete_io(&mut io) {
                if Instant::now() >= until {
                    return Err(self.err(
                        ErrorKind::Unreachable,
                        op,
                        key,
                        format_args!(
                            "TLS handshake with {}: not done within {} s (the store answers \
                             too slowly, or not with TLS)",
                            self.endpoint,
                            HANDSHAKE_WAIT.as_secs()
                        ),
                    ));
                }
                let tls = e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>())
                    || e.kind() == io::ErrorKind::InvalidData;
                let kind = if tls {
                    ErrorKind::Tls
                } else {
                    ErrorKind::Unreachable
                };
                return Err(self.err(
                    kind,
                    op,
                    key,
                    format_args!("TLS handshake with {}: {e}", self.endpoint),
                ));
            }
        }
        let _ = s.sock.set_read_timeout(Some(IO_TIMEOUT));
        let _ = s.sock.set_write_timeout(Some(IO_TIMEOUT));
        Ok(bounded(Stream::Tls(Box::new(s))))
    }

    /// Sends `req` and reads the response's head.
    fn send(&self, req: &Req<'_>) -> S3Result<Response> {
        let (host, authority, path) = self.host_and_path(req.key);
        let amz_date = crate::shared::report::file_stamp(SystemTime::now());
        let payload = match &req.payload_sha256 {
            Some(p) => p.clone(),
            None if req.body.is_empty() => EMPTY_SHA256.to_string(),
            None => sigv4::sha256_hex(req.body),
        };
        let mut headers = vec![
            ("host".to_string(), authority),
            ("x-amz-content-sha256".to_string(), payload.clone()),
            ("x-amz-date".to_string(), amz_date.clone()),
        ];
        headers.extend(req.headers.iter().cloned());
        let auth = sigv4::authorization(
            self.credentials.access_key.expose(),
            self.credentials.secret_key.expose(),
            &self.region,
            &amz_date,
            &Canonical {
                method: req.method,
                path: &path,
                query: &req.query,
                headers: &headers,
                payload_sha256: &payload,
            },
        );
        let query = sigv4::canonical_query(&req.query);
        let target = if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        };
        let mut head = format!("{} {target} HTTP/1.1\r\n", req.method);
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!(
            "authorization: {auth}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            req.body.len()
        ));
        let mut conn = self.connect(req.op, req.key, &host)?;
        let io_err = |e| self.io_failed(req.op, req.key, e);
        conn.phase(None);
        let sent = conn
            .write_all(head.as_bytes())
            .and_then(|()| conn.write_all(req.body))
            .and_then(|()| conn.flush());
        // A store that stopped taking the body may have said why before it closed
        // (radosgw's QuotaExceeded): its answer, when there is one, is the error.
        conn.phase(Some(if sent.is_ok() { HEAD_WAIT } else { EARLY_WAIT }));
        let mut reader = BufReader::with_capacity(64 << 10, conn);
        let head = self.read_head(req, &mut reader);
        let (status, headers) = match (head, sent) {
            (Ok(h), _) => h,
            (Err(_), Err(e)) => return Err(io_err(e)),
            (Err(e), Ok(())) => return Err(e),
        };
        reader.get_mut().phase(None);
        Ok(Response {
            status,
            headers,
            body: reader,
        })
    }

    /// The status and headers of the answer on `reader`, at most [`MAX_HEAD`] bytes of
    /// them; informational answers (1xx) skipped.
    fn read_head(
        &self,
        req: &Req<'_>,
        reader: &mut BufReader<Conn>,
    ) -> S3Result<(u16, Vec<(String, String)>)> {
        let io_err = |e| self.io_failed(req.op, req.key, e);
        let mut line = String::new();
        let mut read = 0;
        let mut next_line = |line: &mut String| {
            line.clear();
            read_line(reader, line).map_err(io_err)?;
            read += line.len();
            if read > MAX_HEAD {
                return Err(self.err(
                    ErrorKind::Other,
                    req.op,
                    req.key,
                    format_args!("the answer's head is over {} KiB", MAX_HEAD >> 10),
                ));
            }
            Ok(())
        };
        loop {
            next_line(&mut line)?;
            let status = line
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse::<u16>().ok())
                .ok_or_else(|| {
                    self.err(
                        ErrorKind::Other,
                        req.op,
                        req.key,
                        format_args!("not an HTTP answer: {:?}", one_line(line.trim_end())),
                    )
                })?;
            let mut headers = Vec::new();
            loop {
                next_line(&mut line)?;
                let l = line.trim_end();
                if l.is_empty() {
                    break;
                }
                if let Some((k, v)) = l.split_once(':') {
                    headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                }
            }
            // 100 Continue is never asked for; skip any informational answer.
            if !(100..200).contains(&status) {
                return Ok((status, headers));
            }
        }
    }

    /// Reads the body of `resp` into `out` (Content-Length, chunked, or to the close), at
    /// most `limit` bytes: a body that says or turns out longer fails, unread.
    fn body_into(
        &self,
        op: &str,
        key: Option<&str>,
        resp: &mut Response,
        head: bool,
        (limit, expected): (u64, &str),
        out: &mut dyn Write,
    ) -> S3Result<u64> {
        if head || resp.status == 204 || resp.status == 304 {
            return Ok(0);
        }
        let lost = |e| self.io_failed(op, key, e);
        let too_long = || {
            self.err(
                ErrorKind::Other,
                op,
                key,
                format_args!("the store sends more than the {limit} bytes {expected}"),
            )
        };
        let chunked = resp
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let mut total = 0u64;
        if chunked {
            let mut line = String::new();
            loop {
                line.clear();
                read_line(&mut resp.body, &mut line).map_err(lost)?;
                let size = line.trim().split(';').next().unwrap_or("");
                let size = u64::from_str_radix(size.trim(), 16)
                    .map_err(|_| self.err(ErrorKind::Other, op, key, "malformed chunked body"))?;
                if size == 0 {
                    // Trailers, up to the empty line.
                    loop {
                        line.clear();
                        read_line(&mut resp.body, &mut line).map_err(lost)?;
                        if line.trim().is_empty() {
                            break;
                        }
                    }
                    return Ok(total);
                }
                if size > limit - total {
                    return Err(too_long());
                }
                let n = io::copy(&mut (&mut resp.body).take(size), out).map_err(lost)?;
                if n != size {
                    return Err(lost(io::ErrorKind::UnexpectedEof.into()));
                }
                total += n;
                line.clear();
                read_line(&mut resp.body, &mut line).map_err(lost)?;
            }
        }
        match resp.header("content-length").map(str::parse::<u64>) {
            Some(Ok(len)) if len > limit => Err(too_long()),
            Some(Ok(len)) => {
                let n = io::copy(&mut (&mut resp.body).take(len), out).map_err(lost)?;
                if n != len {
                    return Err(lost(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{n} of {len} bytes"),
                    )));
                }
                Ok(n)
            }
            Some(Err(_)) => Err(self.err(ErrorKind::Other, op, key, "malformed Content-Length")),
            None => {
                let n = io::copy(&mut (&mut resp.body).take(limit + 1), out).map_err(lost)?;
                if n > limit {
                    return Err(too_long());
                }
                Ok(n)
            }
        }
    }

    /// The body of `resp`, at most [`MAX_BODY`], as text.
    fn body_text(
        &self,
        op: &str,
        key: Option<&str>,
        resp: &mut Response,
        head: bool,
    ) -> S3Result<String> {
        let mut buf = Vec::new();
        let limit = (MAX_BODY as u64, "an answer may have");
        self.body_into(op, key, resp, head, limit, &mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// `req` sent; a 2xx answer's response, else the S3 error it carries.
    fn call(&self, req: &Req<'_>) -> S3Result<Response> {
        let mut resp = self.send(req)?;
        if (200..300).contains(&resp.status) {
            return Ok(resp);
        }
        let body = self
            .body_text(req.op, req.key, &mut resp, req.method == "HEAD")
            .unwrap_or_default();
        Err(self.s3_error(req, resp.status, &body))
    }

    fn s3_error(&self, req: &Req<'_>, status: u16, body: &str) -> S3Error {
        let code = xml_field(body, "Code");
        let message = xml_field(body, "Message").filter(|m| !m.is_empty());
        let kind = match (code.as_deref(), status) {
            (Some("SignatureDoesNotMatch" | "InvalidAccessKeyId" | "AccessDenied"), _) => {
                ErrorKind::Denied
            }
            (Some("NoSuchBucket"), _) => ErrorKind::NoBucket,
            (Some("QuotaExceeded"), _) => ErrorKind::Quota,
            (Some("RequestTimeTooSkewed"), _) => ErrorKind::Skew,
            (Some("NoSuchKey" | "NoSuchUpload"), _) | (None, 404) => ErrorKind::NotFound,
            (None, 403) => ErrorKind::Denied,
            _ => ErrorKind::Other,
        };
        let mut what = format!(
            "{} (HTTP {status})",
            code.as_deref().unwrap_or("no S3 error code")
        );
        if let Some(m) = &message {
            what.push_str(&format!(": {}", one_line(m)));
        }
        match kind {
            ErrorKind::Denied => what.push_str(&format!(
                "; the store refused the keys: check backup.access_key_file {} and \
                 backup.secret_key_file {}, and the bucket's policy",
                self.key_files.0.display(),
                self.key_files.1.display()
            )),
            ErrorKind::Skew => what.push_str("; the node's clock is off: check NTP (timedatectl)"),
            ErrorKind::NoBucket => what.push_str("; check backup.bucket"),
            ErrorKind::Quota => {
                what.push_str("; the bucket's quota is full: raise it or lower backup.retain")
            }
            _ => {}
        }
        S3Error {
            kind,
            message: format!("{} {}: {what}", req.op, self.shown(req.key)),
            code,
        }
    }

    /// Starts a streaming upload of `key` with user metadata `meta` (names without
    /// `x-amz-meta-`, values printable ASCII).
    pub fn upload(&self, key: &str, meta: &[(String, String)]) -> Upload<'_> {
        Upload {
            client: self,
            key: key.to_string(),
            meta: meta_headers(meta),
            buf: Vec::new(),
            upload_id: None,
            parts: Vec::new(),
            sending: std::collections::VecDeque::new(),
            chain: Arc::new(Chain::default()),
            len: 0,
            failed: None,
            done: false,
        }
    }

    /// Downloads `key`, of `size` bytes as the store listed it, into `out`; its length and
    /// SHA-256. A body longer than `size` fails, unread.
    pub fn get(&self, key: &str, size: u64, out: &mut dyn Write) -> S3Result<Digest256> {
        self.get_as("download", key, (size, "the store listed"), out)
    }

    /// [`Client::get`], its errors naming the operation `op`, at most `limit` bytes.
    fn get_as(
        &self,
        op: &'static str,
        key: &str,
        limit: (u64, &str),
        out: &mut dyn Write,
    ) -> S3Result<Digest256> {
        let req = Req {
            op,
            method: "GET",
            key: Some(key),
            query: Vec::new(),
            headers: Vec::new(),
            body: &[],
            payload_sha256: None,
        };
        let mut resp = self.call(&req)?;
        let mut tee = Hashing {
            inner: out,
            hasher: Sha256::new(),
        };
        let len = self.body_into(op, Some(key), &mut resp, false, limit, &mut tee)?;
        Ok(Digest256 {
            len,
            sha256: tee.hasher.finalize().into(),
        })
    }

    /// Reads `key` back as `parts` were sent (from [`Sent::parts`]): one GET of the
    /// object ([`Client::get`]), each part's range hashed apart as the bytes stream by
    /// (kept nowhere); what came back of each, in part order. Bytes past the last part
    /// count in the object's size only (an object over 1 MiB larger than sent fails the
    /// request, unread); a part the object ends before comes back short or empty.
    ///
    /// With every part's bytes as stored equal (SHA-256 and length) to the part sent,
    /// the ranges following each other from 0, and the object's size equal to their sum,
    /// the object is the bytes sent, byte for byte, and the first part that differs is
    /// named. (Three ranged GETs at once measured no faster than this one GET, 0.102 s
    /// against 0.106 s for 121 MiB on the bed, and cost a connection a part.)
    pub fn read_back(&self, key: &str, parts: &[Digest256]) -> S3Result<Vec<RangeRead>> {
        let mut split = PartHashes {
            lens: parts.iter().map(|p| p.len).collect(),
            done: Vec::with_capacity(parts.len()),
            part: Sha256::new(),
            in_part: 0,
        };
        // A grown object is read far enough to name it as one, never to the end.
        let sent: u64 = parts.iter().map(|p| p.len).sum();
        let limit = (sent + READ_BACK_EXTRA, "a read-back reads");
        let object = self.get_as("read back", key, limit, &mut split)?;
        Ok(split
            .finish()
            .into_iter()
            .map(|got| RangeRead {
                got,
                object_size: object.len,
            })
            .collect())
    }

    /// The size and user metadata of `key`; `None` when there is no such object.
    pub fn head(&self, key: &str) -> S3Result<Option<Head>> {
        let req = Req {
            op: "head",
            method: "HEAD",
            key: Some(key),
            query: Vec::new(),
            headers: Vec::new(),
            body: &[],
            payload_sha256: None,
        };
        let resp = match self.call(&req) {
            Ok(r) => r,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let size = resp
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let meta = resp
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("x-amz-meta-")?.to_string(), v.clone())))
            .collect();
        Ok(Some(Head { size, meta }))
    }

    /// Every object under `prefix` (ListObjectsV2, `page` keys a request), in key order;
    /// at most [`MAX_LISTED`], and a continuation token given twice fails the listing.
    pub fn list(&self, prefix: &str, page: u32) -> S3Result<Vec<Object>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        let mut tokens = std::collections::HashSet::new();
        loop {
            let mut query = vec![
                ("list-type".to_string(), "2".to_string()),
                ("prefix".to_string(), prefix.to_string()),
                ("max-keys".to_string(), page.to_string()),
            ];
            if let Some(t) = &token {
                query.push(("continuation-token".to_string(), t.clone()));
            }
            let req = Req {
                op: "list",
                method: "GET",
                key: None,
                query,
                headers: Vec::new(),
                body: &[],
                payload_sha256: None,
            };
            let mut resp = self.call(&req)?;
            let body = self.body_text("list", None, &mut resp, false)?;
            for block in xml_blocks(&body, "Contents") {
                let (Some(key), Some(size)) = (xml_field(block, "Key"), xml_field(block, "Size"))
                else {
                    continue;
                };
                out.push(Object {
                    key,
                    size: size.parse().unwrap_or(0),
                    last_modified: xml_field(block, "LastModified").unwrap_or_default(),
                });
            }
            self.within_listing("list", prefix, out.len())?;
            let truncated = xml_field(&body, "IsTruncated").as_deref() == Some("true");
            token = xml_field(&body, "NextContinuationToken");
            match &token {
                Some(t) if truncated => {
                    if !tokens.insert(t.clone()) {
                        return Err(self.looping("list", prefix, tokens.len()));
                    }
                }
                _ => return Ok(out),
            }
        }
    }

    /// A listing of `prefix` that gathered `n` entries: an error past [`MAX_LISTED`].
    fn within_listing(&self, op: &str, prefix: &str, n: usize) -> S3Result<()> {
        if n <= MAX_LISTED {
            return Ok(());
        }
        Err(self.err(
            ErrorKind::Other,
            op,
            None,
            format_args!(
                "more than {MAX_LISTED} entries under {prefix:?}; a prefix of etcd-setup's \
                 own holds a few backups a cluster (backup.retain)"
            ),
        ))
    }

    /// A listing of `prefix` whose store gave a continuation it gave before, after `pages`.
    fn looping(&self, op: &str, prefix: &str, pages: usize) -> S3Error {
        self.err(
            ErrorKind::Other,
            op,
            None,
            format_args!(
                "the store's listing of {prefix:?} goes round: page {} continues from where \
                 an earlier one did",
                pages + 1
            ),
        )
    }

    /// Replaces the user metadata of `key` by `meta` (a copy onto itself, the data kept).
    pub fn set_meta(&self, key: &str, meta: &[(String, String)]) -> S3Result<()> {
        let mut headers = vec![
            (
                "x-amz-copy-source".to_string(),
                format!("/{}/{}", self.bucket, sigv4::uri_encode(key, true)),
            ),
            (
                "x-amz-metadata-directive".to_string(),
                "REPLACE".to_string(),
            ),
        ];
        headers.extend(meta_headers(meta));
        let req = Req {
            op: "set metadata of",
            method: "PUT",
            key: Some(key),
            query: Vec::new(),
            headers,
            body: &[],
            payload_sha256: None,
        };
        let mut resp = self.call(&req)?;
        let body = self.body_text(req.op, req.key, &mut resp, false)?;
        if body.contains("<Error>") {
            return Err(self.s3_error(&req, 200, &body));
        }
        Ok(())
    }

    /// Deletes `key` (no error when it is gone already).
    pub fn delete(&self, key: &str) -> S3Result<()> {
        let req = Req {
            op: "delete",
            method: "DELETE",
            key: Some(key),
            query: Vec::new(),
            headers: Vec::new(),
            body: &[],
            payload_sha256: None,
        };
        match self.call(&req) {
            Ok(_)
            | Err(S3Error {
                kind: ErrorKind::NotFound,
                ..
            }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The incomplete multipart uploads under `prefix`.
    pub fn list_uploads(&self, prefix: &str) -> S3Result<Vec<PendingUpload>> {
        let mut out = Vec::new();
        let mut markers: Option<(String, String)> = None;
        let mut seen = std::collections::HashSet::new();
        loop {
            let mut query = vec![
                ("uploads".to_string(), String::new()),
                ("prefix".to_string(), prefix.to_string()),
            ];
            if let Some((k, u)) = &markers {
                query.push(("key-marker".to_string(), k.clone()));
                query.push(("upload-id-marker".to_string(), u.clone()));
            }
            let req = Req {
                op: "list incomplete uploads",
                method: "GET",
                key: None,
                query,
                headers: Vec::new(),
                body: &[],
                payload_sha256: None,
            };
            let mut resp = self.call(&req)?;
            let body = self.body_text(req.op, None, &mut resp, false)?;
            for block in xml_blocks(&body, "Upload") {
                let (Some(key), Some(upload_id)) =
                    (xml_field(block, "Key"), xml_field(block, "UploadId"))
                else {
                    continue;
                };
                out.push(PendingUpload {
                    key,
                    upload_id,
                    initiated: xml_field(block, "Initiated").unwrap_or_default(),
                });
            }
            self.within_listing(req.op, prefix, out.len())?;
            let truncated = xml_field(&body, "IsTruncated").as_deref() == Some("true");
            let next =
                xml_field(&body, "NextKeyMarker").zip(xml_field(&body, "NextUploadIdMarker"));
            match next {
                Some(n) if truncated => {
                    if !seen.insert(n.clone()) {
                        return Err(self.looping(req.op, prefix, seen.len()));
                    }
                    markers = Some(n);
                }
                _ => return Ok(out),
            }
        }
    }

    /// Aborts the multipart upload `upload_id` of `key`.
    pub fn abort_upload(&self, key: &str, upload_id: &str) -> S3Result<()> {
        let req = Req {
            op: "abort upload",
            method: "DELETE",
            key: Some(key),
            query: vec![("uploadId".to_string(), upload_id.to_string())],
            headers: Vec::new(),
            body: &[],
            payload_sha256: None,
        };
        match self.call(&req) {
            Ok(_)
            | Err(S3Error {
                kind: ErrorKind::NotFound,
                ..
            }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A thread sending one part: the part's ETag, its length and SHA-256, and its buffer
/// when done.
type PartThread = std::thread::JoinHandle<S3Result<(String, Digest256, Vec<u8>)>>;

/// What an upload sent: the object, and each part of it in order (one part, the object,
/// when it went up in one PUT). The parts' digests are those their PUTs were signed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// Every byte written.
    pub object: Digest256,
    /// Each part, in part order; their lengths add up to the object's.
    pub parts: Vec<Digest256>,
}

/// A streaming upload: bytes written are sent in parts of the client's part size (one PUT
/// when they all fit in one), each part on a thread while the next is written;
/// [`Upload::finish`] completes it. On an error, or when dropped unfinished, a started
/// multipart upload is aborted.
pub struct Upload<'c> {
    client: &'c Client,
    key: String,
    meta: Vec<(String, String)>,
    buf: Vec<u8>,
    upload_id: Option<String>,
    /// The parts sent: number, ETag, and what the part was.
    parts: Vec<(u32, String, Digest256)>,
    /// The parts being sent, oldest first, each by a thread of its own while the writer
    /// fills the next one: its number, and the thread, which gives back the part's ETag
    /// and its buffer.
    sending: std::collections::VecDeque<(u32, PartThread)>,
    /// The SHA-256 of the object, fed by the part threads in part order.
    chain: Arc<Chain>,
    len: u64,
    failed: Option<S3Error>,
    done: bool,
}

impl fmt::Debug for Upload<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upload")
            .field("key", &self.key)
            .field("len", &self.len)
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl Upload<'_> {
    fn req<'b>(
        &'b self,
        op: &'b str,
        method: &'b str,
        query: Vec<(String, String)>,
        body: &'b [u8],
    ) -> Req<'b> {
        Req {
            op,
            method,
            key: Some(&self.key),
            query,
            headers: Vec::new(),
            body,
            payload_sha256: None,
        }
    }

    fn start(&mut self) -> S3Result<()> {
        let mut req = self.req(
            "upload",
            "POST",
            vec![("uploads".into(), String::new())],
            &[],
        );
        req.headers = self.meta.clone();
        let c = self.client;
        let mut resp = c.call(&req)?;
        let body = c.body_text("upload", Some(&self.key), &mut resp, false)?;
        let id = xml_field(&body, "UploadId").ok_or_else(|| {
            c.err(
                ErrorKind::Other,
                "upload",
                Some(&self.key),
                "no UploadId in the answer to CreateMultipartUpload",
            )
        })?;
        self.upload_id = Some(id);
        Ok(())
    }

    /// Sends the full part in `buf` on a thread of its own, once fewer than
    /// [`IN_FLIGHT`] parts are on their way: sealing the next part overlaps sending the
    /// ones before it, and at most 1 + [`IN_FLIGHT`] parts are in memory.
    fn send_part(&mut self) -> S3Result<()> {
        if self.upload_id.is_none() {
            self.start()?;
        }
        let spare = if self.sending.len() >= IN_FLIGHT {
            self.sent()?.unwrap_or_default()
        } else {
            Vec::new()
        };
        let number = (self.parts.len() + self.sending.len()) as u32 + 1;
        let body = std::mem::replace(&mut self.buf, spare);
        let (client, key) = (self.client.clone(), self.key.clone());
        let id = self.upload_id.clone().unwrap_or_default();
        let chain = self.chain.clone();
        let thread = std::thread::Builder::new()
            .name(format!("s3-part-{number}"))
            .spawn(move || {
                // The part's own digest (its signature's payload hash and what its
                // read-back is compared with), then the object's in part order; both
                // before it is sent, so that no later part waits on a failed one.
                let part = Digest256 {
                    len: body.len() as u64,
                    sha256: Sha256::digest(&body).into(),
                };
                chain.hash_in_turn(number, &body);
                let etag = put_part(&client, &key, &id, number, &body, &part)?;
                Ok((etag, part, body))
            })
            .map_err(|e| {
                self.client.err(
                    ErrorKind::Other,
                    "upload",
                    Some(&self.key),
                    format!("cannot start the thread sending part {number}: {e}"),
                )
            })?;
        self.sending.push_back((number, thread));
        Ok(())
    }

    /// Waits for the oldest part being sent, if any, and keeps its ETag; its buffer,
    /// emptied, for the next part.
    fn sent(&mut self) -> S3Result<Option<Vec<u8>>> {
        let Some((number, thread)) = self.sending.pop_front() else {
            return Ok(None);
        };
        let (etag, part, mut buf) = thread.join().map_err(|_| {
            self.client.err(
                ErrorKind::Other,
                "upload",
                Some(&self.key),
                format!("the thread sending part {number} panicked"),
            )
        })??;
        self.parts.push((number, etag, part));
        buf.clear();
        Ok(Some(buf))
    }

    fn abort(&mut self) {
        // A part still on its way would land after the abort and leave storage behind.
        while !self.sending.is_empty() {
            let _ = self.sent();
        }
        if let Some(id) = self.upload_id.take() {
            let _ = self.client.abort_upload(&self.key, &id);
        }
    }

    /// Sends what is left and completes the upload: the length and SHA-256 of every byte
    /// written, and of each part.
    pub fn finish(mut self) -> S3Result<Sent> {
        let r = self.finish_inner();
        if r.is_err() {
            self.abort();
        }
        self.done = true;
        r
    }

    fn finish_inner(&mut self) -> S3Result<Sent> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let c = self.client;
        let parts = if self.upload_id.is_none() {
            self.chain.hash_in_turn(1, &self.buf);
            let whole = Digest256 {
                len: self.len,
                sha256: self.chain.digest(),
            };
            let mut req = self.req("upload", "PUT", Vec::new(), &self.buf);
            req.headers = self.meta.clone();
            req.payload_sha256 = Some(sigv4::hex(&whole.sha256));
            c.call(&req)?;
            vec![whole]
        } else {
            if !self.buf.is_empty() {
                self.send_part()?;
            }
            while self.sent()?.is_some() {}
            let mut xml = String::from("<CompleteMultipartUpload>");
            for (n, etag, _) in &self.parts {
                xml.push_str(&format!(
                    "<Part><PartNumber>{n}</PartNumber><ETag>{}</ETag></Part>",
                    xml_escape(etag)
                ));
            }
            xml.push_str("</CompleteMultipartUpload>");
            let id = self.upload_id.clone().unwrap_or_default();
            let req = self.req(
                "upload",
                "POST",
                vec![("uploadId".into(), id)],
                xml.as_bytes(),
            );
            let mut resp = c.call(&req)?;
            // S3 may answer 200 and still fail the completion in the body.
            let body = c.body_text("upload", Some(&self.key), &mut resp, false)?;
            if body.contains("<Error>") {
                return Err(c.s3_error(&req, 200, &body));
            }
            self.upload_id = None;
            self.parts.iter().map(|(_, _, part)| *part).collect()
        };
        Ok(Sent {
            object: Digest256 {
                len: self.len,
                sha256: self.chain.digest(),
            },
            parts,
        })
    }
}

/// The SHA-256 of an upload's parts, each added by its own thread in part order: hashing
/// leaves the writer's thread (which seals) and overlaps the sending.
#[derive(Default)]
struct Chain {
    /// The number of the part to hash next (from 1), and the digest of those before it.
    state: std::sync::Mutex<(u32, Sha256)>,
    turn: std::sync::Condvar,
}

impl Chain {
    /// Adds part `number` once every part before it was added.
    fn hash_in_turn(&self, number: u32, data: &[u8]) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while state.0 + 1 != number {
            state = self
                .turn
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        state.1.update(data);
        state.0 = number;
        self.turn.notify_all();
    }

    /// The digest of every part added.
    fn digest(&self) -> [u8; 32] {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.1.clone().finalize().into()
    }
}

impl Write for Upload<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if let Some(e) = &self.failed {
            return Err(io::Error::other(e.clone()));
        }
        let part = self.client.part_size;
        let room = part - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        self.len += n as u64;
        if self.buf.len() == part {
            if let Err(e) = self.send_part() {
                self.failed = Some(e.clone());
                self.abort();
                return Err(io::Error::other(e));
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Upload<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.abort();
        }
    }
}

/// PUTs part `number` of upload `id` of `key`, whose digest is `part`: its ETag.
fn put_part(
    client: &Client,
    key: &str,
    id: &str,
    number: u32,
    body: &[u8],
    part: &Digest256,
) -> S3Result<String> {
    let req = Req {
        op: "upload",
        method: "PUT",
        key: Some(key),
        query: vec![
            ("partNumber".into(), number.to_string()),
            ("uploadId".into(), id.to_string()),
        ],
        headers: Vec::new(),
        body,
        payload_sha256: Some(sigv4::hex(&part.sha256)),
    };
    let resp = client.call(&req)?;
    Ok(resp.header("etag").unwrap_or("").to_string())
}

/// User metadata as `x-amz-meta-NAME` headers.
fn meta_headers(meta: &[(String, String)]) -> Vec<(String, String)> {
    meta.iter()
        .map(|(k, v)| (format!("x-amz-meta-{}", k.to_ascii_lowercase()), v.clone()))
        .collect()
}

/// A `Write` that hashes what passes.
struct Hashing<'a> {
    inner: &'a mut dyn Write,
    hasher: Sha256,
}

impl Write for Hashing<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A writer that hashes what it is given in consecutive ranges of `lens` bytes, one
/// digest each ([`Client::read_back`]); what comes after the last range is dropped.
struct PartHashes {
    lens: Vec<u64>,
    done: Vec<Digest256>,
    part: Sha256,
    in_part: u64,
}

impl PartHashes {
    /// Closes every part whose length is reached (a zero-length one at once).
    fn close_full(&mut self) {
        while let Some(&len) = self.lens.get(self.done.len()) {
            if self.in_part < len {
                break;
            }
            let sha256 = std::mem::take(&mut self.part).finalize().into();
            self.done.push(Digest256 { len, sha256 });
            self.in_part = 0;
        }
    }

    /// Each part's digest: the ones the object ended in short, the ones after it empty.
    fn finish(mut self) -> Vec<Digest256> {
        self.close_full();
        while self.done.len() < self.lens.len() {
            let sha256 = std::mem::take(&mut self.part).finalize().into();
            self.done.push(Digest256 {
                len: self.in_part,
                sha256,
            });
            self.in_part = 0;
        }
        self.done
    }
}

impl Write for PartHashes {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        self.close_full();
        while let Some(&len) = self.lens.get(self.done.len()) {
            if rest.is_empty() {
                break;
            }
            let take = ((len - self.in_part) as usize).min(rest.len());
            self.part.update(&rest[..take]);
            self.in_part += take as u64;
            rest = &rest[take..];
            self.close_full();
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One header line, at most [`MAX_HEAD`] bytes; EOF before its end is an error.
fn read_line(r: &mut BufReader<Conn>, line: &mut String) -> io::Result<()> {
    let n = r.by_ref().take(MAX_HEAD as u64 + 1).read_line(line)?;
    if n == 0 || !line.ends_with('\n') {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the answer ended early",
        ));
    }
    Ok(())
}

/// The trust roots: `ca_file` alone when given, else the system bundle.
fn tls_config(settings: &BackupSettings) -> Result<rustls::ClientConfig, Failure> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let (file, key) = match &settings.ca_file {
        Some(f) => (f.clone(), "backup.ca_file"),
        None => (PathBuf::from(SYSTEM_BUNDLE), "the system CA bundle"),
    };
    let bad = |why: String| {
        Failure::new(
            ReasonCode::ConfigInvalid,
            format!("{key}: {}: {why}", file.display()),
        )
    };
    let pem = std::fs::read(&file).map_err(|e| bad(format!("cannot read: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(format!("not PEM certificates: {e}")))?;
        // A bundle may hold a certificate webpki cannot use as an anchor; skip it.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(bad("holds no usable CA certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The text of the first `<name>…</name>` in `xml`, entities decoded.
fn xml_field(xml: &str, name: &str) -> Option<String> {
    xml_blocks(xml, name).next().map(xml_unescape)
}

/// The insides of every `<name>…</name>` in `xml` (not nested in each other).
fn xml_blocks<'a>(xml: &'a str, name: &str) -> impl Iterator<Item = &'a str> + 'a {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let mut rest = xml;
    std::iter::from_fn(move || {
        let start = rest.find(&open)? + open.len();
        let len = rest[start..].find(&close)?;
        let inner = &rest[start..start + len];
        rest = &rest[start + len + close.len()..];
        Some(inner)
    })
}

fn xml_unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#34;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Outside text on one line, bounded.
fn one_line(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect();
    s.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_back_is_hashed_part_by_part_across_writes() {
        let data: Vec<u8> = (0..100u8).collect();
        let digest = |b: &[u8]| Digest256 {
            len: b.len() as u64,
            sha256: Sha256::digest(b).into(),
        };
        let hashed = |lens: &[u64], writes: &[&[u8]]| {
            let mut p = PartHashes {
                lens: lens.to_vec(),
                done: Vec::new(),
                part: Sha256::new(),
                in_part: 0,
            };
            for w in writes {
                assert_eq!(p.write(w).unwrap(), w.len());
            }
            p.finish()
        };
        let parts = [
            digest(&data[..40]),
            digest(&data[40..90]),
            digest(&data[90..]),
        ];
        // Writes that cut across the parts' bounds, or one write of everything.
        for writes in [vec![&data[..7], &data[7..45], &data[45..]], vec![&data[..]]] {
            assert_eq!(hashed(&[40, 50, 10], &writes), parts);
        }
        // Short: the part it ends in is short, the next is empty.
        assert_eq!(
            hashed(&[40, 50, 10], &[&data[..60]]),
            [digest(&data[..40]), digest(&data[40..60]), digest(&[])]
        );
        // Long: what follows the last part is in no part.
        assert_eq!(hashed(&[40, 50, 10], &[&data[..], b"x"]), parts);
        // An empty object of one empty part.
        assert_eq!(hashed(&[0], &[]), [digest(&[])]);
    }

    #[test]
    fn xml_fields_and_blocks_are_found_and_decoded() {
        let xml = "<ListBucketResult><IsTruncated>true</IsTruncated>\
            <Contents><Key>a&amp;b</Key><Size>3</Size></Contents>\
            <Contents><Key>c</Key><Size>4</Size></Contents>\
            <NextContinuationToken>t&lt;1</NextContinuationToken></ListBucketResult>";
        let keys: Vec<_> = xml_blocks(xml, "Contents")
            .filter_map(|b| xml_field(b, "Key"))
            .collect();
        assert_eq!(keys, ["a&b", "c"]);
        assert_eq!(
            xml_field(xml, "NextContinuationToken").as_deref(),
            Some("t<1")
        );
        assert_eq!(xml_field(xml, "Nothing"), None);
    }
}
