//! etcd's health endpoint, asked over plain HTTP on the loopback metrics listener
//! (`--listen-metrics-urls`), which answers without client TLS even when clients need it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// What etcd's `/health` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// `{"health":"true"}`: the member serves and the cluster has a leader.
    Healthy,
    /// It answered, but not healthy (no leader yet, alarms, ...): the body, shortened.
    Unhealthy(String),
    /// Nothing answered: connection refused, timed out, or not HTTP.
    Unreachable(String),
}

/// Asks `GET /health` at `addr`, bounded by `timeout` for connect, write and read.
pub fn check(addr: SocketAddr, timeout: Duration) -> Health {
    let mut stream = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) => return Health::Unreachable(format!("{addr}: {e}")),
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let request = format!("GET /health HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if let Err(e) = stream.write_all(request.as_bytes()) {
        return Health::Unreachable(format!("{addr}: {e}"));
    }
    let mut reply = Vec::new();
    // A health reply is tiny; never read more than 16 KiB from anyone.
    if let Err(e) = stream.take(16 * 1024).read_to_end(&mut reply) {
        return Health::Unreachable(format!("{addr}: {e}"));
    }
    parse(&String::from_utf8_lossy(&reply))
}

/// Interprets an HTTP reply to `GET /health`.
pub fn parse(reply: &str) -> Health {
    let Some((head, body)) = reply.split_once("\r\n\r\n") else {
        return Health::Unreachable("not an HTTP reply".into());
    };
    let status = head.split_whitespace().nth(1).unwrap_or("");
    let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    if status == "200" && compact.contains("\"health\":\"true\"") {
        Health::Healthy
    } else {
        let shown: String = body.trim().chars().take(200).collect();
        Health::Unhealthy(format!("HTTP {status}: {shown}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn reads_healthy_and_unhealthy_replies() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"health\":\"true\",\"reason\":\"\"}";
        assert_eq!(parse(ok), Health::Healthy);
        let bad = "HTTP/1.1 503 Service Unavailable\r\n\r\n{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}";
        assert!(
            matches!(parse(bad), Health::Unhealthy(m) if m.contains("503") && m.contains("NO LEADER"))
        );
        assert!(matches!(parse("garbage"), Health::Unreachable(_)));
    }

    #[test]
    fn asks_a_real_listener_and_reports_a_closed_port() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /health HTTP/1.0\r\n"));
            s.write_all(b"HTTP/1.1 200 OK\r\n\r\n{\"health\":\"true\"}")
                .unwrap();
        });
        assert_eq!(check(addr, Duration::from_secs(2)), Health::Healthy);
        server.join().unwrap();
        drop(TcpListener::bind(addr)); // the port is free again: nothing listens
        assert!(matches!(
            check(addr, Duration::from_secs(2)),
            Health::Unreachable(_)
        ));
    }
}
