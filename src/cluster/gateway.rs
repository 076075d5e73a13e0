//! etcd's JSON gateway on a plain-http client port: the maintenance status
//! (`POST /v3/maintenance/status`, body `{}`), for the member's role (`isLearner`).
//!
//! One bounded local HTTP exchange, no etcdctl process: the status server asks it for
//! every etcd process it sees. The gateway answers on the client port (etcd muxes gRPC
//! and HTTP on it) with the path `/v3` since 3.4, and has `isLearner` since 3.4. Its JSON
//! (grpc-gateway's marshaller) leaves out fields at their zero value: a voter's answer has
//! no `isLearner`, a learner's has `"isLearner":true`. 64-bit numbers are strings.
//!
//! With client TLS the port speaks only TLS and the agent carries no TLS stack
//! ([`crate::cluster::etcd`] says why); the caller asks etcdctl's `endpoint status` then.

use super::health::{remaining, Deadlined};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The most of an answer read: a status reply is about 300 bytes.
const MAX_REPLY: u64 = 64 * 1024;

/// Whether the member answering at `addr` (a plain-http client listener) is a learner,
/// from its maintenance status, within `deadline` in all. Errors name `ADDR/v3/maintenance/status`.
pub fn is_learner(addr: SocketAddr, deadline: Duration) -> Result<bool, String> {
    let end = Instant::now() + deadline;
    let failed = |e: io::Error| format!("{addr}/v3/maintenance/status: {e}");
    let mut stream = TcpStream::connect_timeout(&addr, deadline).map_err(failed)?;
    stream
        .set_write_timeout(Some(remaining(end).map_err(failed)?))
        .map_err(failed)?;
    // HTTP/1.0: the reply is plain (not chunked) and ends when etcd closes.
    let request = format!(
        "POST /v3/maintenance/status HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).map_err(failed)?;
    let mut reply = Vec::new();
    Deadlined { stream, end }
        .take(MAX_REPLY)
        .read_to_end(&mut reply)
        .map_err(failed)?;
    parse(&reply).map_err(|e| format!("{addr}/v3/maintenance/status: {e}"))
}

/// Reads `isLearner` from an HTTP reply to the maintenance status.
pub fn parse(reply: &[u8]) -> Result<bool, String> {
    let text = String::from_utf8_lossy(reply);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err("not an HTTP reply".into());
    };
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if !head.starts_with("HTTP/") || status != "200" {
        let shown: String = body.trim().chars().take(200).collect();
        return Err(format!("HTTP {status}: {shown}"));
    }
    #[derive(serde::Deserialize)]
    struct Status {
        // Present in every status etcd gives; its absence means this is not one.
        #[allow(dead_code)]
        header: serde_json::Value,
        #[serde(rename = "isLearner", default)]
        is_learner: bool,
    }
    let s: Status =
        serde_json::from_str(body.trim()).map_err(|e| format!("not a maintenance status ({e})"))?;
    Ok(s.is_learner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from etcd 3.4.23 and 3.5.16 on loopback (a voter: no `isLearner`).
    const VOTER_34: &str = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"header\":{\"cluster_id\":\"14299088550553659169\",\"member_id\":\"6883581636028848829\",\"revision\":\"1\",\"raft_term\":\"2\"},\"version\":\"3.4.23\",\"dbSize\":\"20480\",\"leader\":\"6883581636028848829\",\"raftIndex\":\"4\",\"raftTerm\":\"2\",\"raftAppliedIndex\":\"4\",\"dbSizeInUse\":\"16384\"}";
    const VOTER_35: &str = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 266\r\n\r\n{\"header\":{\"cluster_id\":\"17337617138615489283\", \"member_id\":\"7367137136018225357\", \"revision\":\"1\", \"raft_term\":\"2\"}, \"version\":\"3.5.16\", \"dbSize\":\"20480\", \"leader\":\"7367137136018225357\", \"raftIndex\":\"4\", \"raftTerm\":\"2\", \"raftAppliedIndex\":\"4\", \"dbSizeInUse\":\"16384\"}";

    #[test]
    fn a_status_without_is_learner_is_a_voter_s() {
        assert_eq!(parse(VOTER_34.as_bytes()), Ok(false));
        assert_eq!(parse(VOTER_35.as_bytes()), Ok(false));
        let learner = VOTER_35.replace("\"dbSizeInUse\"", "\"isLearner\":true, \"dbSizeInUse\"");
        assert_eq!(parse(learner.as_bytes()), Ok(true));
    }

    #[test]
    fn what_is_not_a_status_is_an_error_naming_why() {
        let e = parse(b"HTTP/1.1 404 Not Found\r\n\r\n404 page not found\n").unwrap_err();
        assert!(e.contains("404"), "{e}");
        let e = parse(b"HTTP/1.0 200 OK\r\n\r\n{\"isLearner\":true}").unwrap_err();
        assert!(e.contains("not a maintenance status"), "{e}");
        assert!(parse(b"garbage").is_err());
    }
}
