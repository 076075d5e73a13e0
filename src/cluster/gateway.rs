//! etcd's JSON gateway on a plain-http client port: the calls the upkeep makes most
//! (maintenance status, alarm list, member list, defragment), each one bounded local or
//! LAN HTTP exchange in-process instead of an `etcdctl` child; and the member's role
//! (`isLearner`) for the status server.
//!
//! Why: one etcdctl child per call (20–30 ms each on these machines, its start and
//! its gRPC dial) was most of the fixed cost `maintain` and `snapshot` add to the work
//! itself (`docs/measurements.md`, "Snapshots and defragmentation"). The gateway answers
//! on the client port (etcd muxes gRPC and HTTP on it) with the path `/v3` since 3.4.
//! Its JSON (grpc-gateway's marshaller) uses the proto field names etcdctl's `-w json`
//! uses, but writes 64-bit integers as strings, alarms by their enum names, and leaves
//! out fields at their zero value (a voter's status has no `isLearner`); the parsers in
//! [`crate::cluster::etcd`]'s `json` read both spellings. An error is a non-200 answer
//! whose JSON carries etcd's own error line (`message`; 3.4 also `error`), classified
//! as etcdctl's is.
//!
//! Only for plain `http://` client URLs with an IP address and a client without TLS
//! files ([`plain`]): with client TLS the port speaks only TLS, and the agent keeps
//! etcdctl for it, which takes the very files etcd is configured with and speaks the
//! TLS etcd speaks ([`crate::cluster::etcd`] says why). A host name goes to etcdctl too
//! (resolving it here would be an unbounded wait).
//!
//! Every exchange is HTTP/1.0 (the reply is plain, not chunked, and ends when etcd
//! closes), bounded as etcdctl's calls are: the connection by the dial timeout, the
//! request and the whole answer by the command timeout (a defragmentation's by its
//! own); the answer is read to at most [`MAX_REPLY`] bytes.

use super::etcd::error::{classify, ErrorKind, EtcdError};
use super::health::{remaining, Deadlined};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The most of an answer read: as much as etcdctl's stdout is kept (a member list of
/// hundreds of members fits; a status is about 300 bytes).
pub const MAX_REPLY: u64 = super::etcd::command::MAX_STDOUT as u64;

/// What an exchange with the gateway gave: its HTTP status code and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status code.
    pub code: u16,
    /// The body.
    pub body: Vec<u8>,
}

/// How an exchange failed before an HTTP answer came.
#[derive(Debug)]
pub enum Failed {
    /// No connection within the dial timeout, or it was refused.
    Connect(io::Error),
    /// The request could not be sent, or the answer did not come within the deadline
    /// (`TimedOut`), or the connection broke.
    Exchange(io::Error),
    /// What came back is not an HTTP answer.
    NotHttp,
}

/// `POST path` with the JSON `body` to the gateway at `addr`: connected within
/// `connect`, then the request sent and the whole answer read within `answer` (and by
/// `by` at the latest, when given).
pub fn post(
    addr: SocketAddr,
    (path, body): (&str, &str),
    connect: Duration,
    answer: Duration,
    by: Option<Instant>,
) -> Result<Reply, Failed> {
    let stream = TcpStream::connect_timeout(&addr, connect).map_err(Failed::Connect)?;
    let end = Instant::now() + answer;
    let end = by.map_or(end, |by| by.min(end));
    let exchange = Failed::Exchange;
    stream
        .set_write_timeout(Some(remaining(end).map_err(exchange)?))
        .map_err(exchange)?;
    stream.set_nodelay(true).map_err(exchange)?;
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    (&stream).write_all(request.as_bytes()).map_err(exchange)?;
    let mut reply = Vec::new();
    Deadlined { stream, end }
        .take(MAX_REPLY)
        .read_to_end(&mut reply)
        .map_err(exchange)?;
    parse_reply(&reply).ok_or(Failed::NotHttp)
}

/// The status code and body of an HTTP answer.
pub fn parse_reply(reply: &[u8]) -> Option<Reply> {
    let split = reply.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&reply[..split]).ok()?;
    let status_line = head.lines().next()?;
    if !status_line.starts_with("HTTP/") {
        return None;
    }
    let code = status_line.split_whitespace().nth(1)?.parse().ok()?;
    Some(Reply {
        code,
        body: reply[split + 4..].to_vec(),
    })
}

/// The socket addresses of `endpoints` when every one is a plain `http://IP:PORT`
/// client URL (a trailing `/` allowed); `None` otherwise (TLS, a host name, a path).
pub fn plain(endpoints: &[String]) -> Option<Vec<SocketAddr>> {
    endpoints
        .iter()
        .map(|u| {
            let rest = u.strip_prefix("http://")?;
            let hostport = rest.strip_suffix('/').unwrap_or(rest);
            hostport.parse::<SocketAddr>().ok()
        })
        .collect()
}

/// One call of `what` to the gateway at `addr` (client URL `url`): its body on HTTP 200,
/// else an [`EtcdError`] naming `endpoints`, of the kind etcdctl's error would have
/// (etcd's own line classified; no connection [`ErrorKind::Unreachable`]; no answer in
/// time [`ErrorKind::Timeout`]).
pub fn call(
    (url, addr): (&str, SocketAddr),
    (path, body): (&str, &str),
    (dial, command): (Duration, Duration),
    what: &str,
    endpoints: &[String],
) -> Result<Vec<u8>, EtcdError> {
    let err = |kind, line: String| EtcdError::new(kind, what, endpoints, line);
    // etcdctl's client retries these calls (all "repeatable" to it) while etcd answers
    // gRPC's Unavailable (`leader changed`, `no leader` during an election), within its
    // command timeout; so does this, with its first backoff, where it would fail at once.
    let end = Instant::now() + command;
    let mut by: Option<Instant> = None;
    let reply = loop {
        // The command's bound counts from the connection, as etcdctl's from its dial; an
        // answer asked again comes by the first's end.
        let reply = post(addr, (path, body), dial, command, by);
        by = Some(end);
        match &reply {
            Ok(r)
                if r.code != 200 && unavailable(&r.body) && Instant::now() + RETRY_PAUSE < end =>
            {
                std::thread::sleep(RETRY_PAUSE);
            }
            _ => break reply,
        }
    };
    match reply {
        Ok(Reply { code: 200, body }) => Ok(body),
        Ok(Reply { code, body }) => {
            let line = error_message(&body).unwrap_or_else(|| {
                let shown: String = String::from_utf8_lossy(&body)
                    .trim()
                    .chars()
                    .take(200)
                    .collect();
                format!("{url}{path} answered HTTP {code}: {shown}")
            });
            Err(err(classify(&line), line))
        }
        Err(Failed::Connect(e))
            if matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ) =>
        {
            Err(err(
                ErrorKind::Unreachable,
                format!("no connection to {url} within {} s", dial.as_secs_f32()),
            ))
        }
        Err(Failed::Connect(e)) => Err(err(
            ErrorKind::Unreachable,
            format!("cannot connect to {url}: {e}"),
        )),
        Err(Failed::Exchange(e)) if e.kind() == io::ErrorKind::TimedOut => Err(err(
            ErrorKind::Timeout,
            format!(
                "{url}{path} gave no answer within {} s",
                command.as_secs_f32()
            ),
        )),
        Err(Failed::Exchange(e)) => Err(err(ErrorKind::Unreachable, format!("{url}{path}: {e}"))),
        Err(Failed::NotHttp) => Err(err(
            ErrorKind::Parse,
            format!("{url}{path}: the answer is not HTTP"),
        )),
    }
}

/// The pause before a call etcd answered Unavailable is made again (etcd's client's
/// first backoff).
const RETRY_PAUSE: Duration = Duration::from_millis(25);

/// Whether a gateway's error answer is gRPC's Unavailable (code 14), which etcdctl's
/// client retries for these calls.
fn unavailable(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("code").and_then(serde_json::Value::as_u64))
        == Some(14)
}

/// etcd's error line in a gateway's error answer: `message` (3.4 and 3.5), else `error`
/// (3.4 has both).
pub fn error_message(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let line = v
        .get("message")
        .and_then(serde_json::Value::as_str)
        .filter(|m| !m.is_empty())
        .or_else(|| v.get("error").and_then(serde_json::Value::as_str))?;
    Some(line.chars().take(500).collect())
}

/// Whether the member answering at `addr` (a plain-http client listener) is a learner,
/// from its maintenance status, within `deadline` in all. Errors name `ADDR/v3/maintenance/status`.
pub fn is_learner(addr: SocketAddr, deadline: Duration) -> Result<bool, String> {
    let end = Instant::now() + deadline;
    let reply = post(
        addr,
        ("/v3/maintenance/status", "{}"),
        deadline,
        deadline,
        Some(end),
    )
    .map_err(|e| {
        let why = match e {
            Failed::Connect(e) | Failed::Exchange(e) => e.to_string(),
            Failed::NotHttp => "not an HTTP reply".into(),
        };
        format!("{addr}/v3/maintenance/status: {why}")
    })?;
    learner_in(&reply).map_err(|e| format!("{addr}/v3/maintenance/status: {e}"))
}

/// Reads `isLearner` from an HTTP reply to the maintenance status.
pub fn parse(reply: &[u8]) -> Result<bool, String> {
    learner_in(&parse_reply(reply).ok_or("not an HTTP reply")?)
}

fn learner_in(reply: &Reply) -> Result<bool, String> {
    if reply.code != 200 {
        let shown: String = String::from_utf8_lossy(&reply.body)
            .trim()
            .chars()
            .take(200)
            .collect();
        return Err(format!("HTTP {}: {shown}", reply.code));
    }
    #[derive(serde::Deserialize)]
    struct Status {
        // Present in every status etcd gives; its absence means this is not one.
        #[allow(dead_code)]
        header: serde_json::Value,
        #[serde(rename = "isLearner", default)]
        is_learner: bool,
    }
    let s: Status = serde_json::from_slice(&reply.body)
        .map_err(|e| format!("not a maintenance status ({e})"))?;
    Ok(s.is_learner)
}

#[cfg(test)]
mod tests;
