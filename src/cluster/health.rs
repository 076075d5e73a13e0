//! etcd's health endpoint and its running version, asked over plain HTTP on the loopback
//! metrics listener (`--listen-metrics-urls`), which answers without client TLS even when
//! clients need it. That listener serves only `/metrics` and `/health`; the version is the
//! `etcd_server_version{server_version="3.5.1"} 1` line of `/metrics` (etcd 3.4 and 3.5).
//! And [`listens`]: whether a member's URL accepts connections at all (late, or down).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Whether something accepts TCP connections at URL `url` (`scheme://host:port`):
/// an etcd that runs but answers late does (the kernel accepts for a stalled process), a
/// stopped one does not.
pub fn listens(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let hostport = rest.split('/').next().unwrap_or_default();
    let Ok(addrs) = std::net::ToSocketAddrs::to_socket_addrs(hostport) else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
}

/// What etcd's `/health` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// `{"health":"true"}`: the member serves and the cluster has a leader.
    Healthy,
    /// It answered, but not healthy (no leader yet, alarms, ...): the body, shortened.
    Unhealthy(String),
    /// Nothing answered: connection refused, or not HTTP.
    Unreachable(String),
    /// It took the connection (the kernel accepts for a busy process) and said nothing
    /// within the bound: a member too slow at that moment to say how it is, which a
    /// stopped or crashed one never is (it refuses).
    Silent(String),
}

/// Asks `GET /health` at `addr`, bounded by `timeout` for connect, write and read.
pub fn check(addr: SocketAddr, timeout: Duration) -> Health {
    let silent = || {
        Health::Silent(format!(
            "{addr}: no answer within {} s",
            timeout.as_secs_f64()
        ))
    };
    let mut stream = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        // A connect that times out on loopback is a full accept queue: a busy listener.
        Err(e) if e.kind() == io::ErrorKind::TimedOut => return silent(),
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
        // A read timeout shows as EAGAIN ("Resource temporarily unavailable").
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => silent(),
            _ => Health::Unreachable(format!("{addr}: {e}")),
        };
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

/// The most of `/metrics` [`server_version`] reads before giving up. etcd 3.4.23 and
/// 3.5.1 put the version line about 32 KiB in (of about 150 KiB): the families before it
/// are etcd's own (`etcd_cluster_*` … `etcd_server_*`), sorted by name.
pub const MAX_METRICS: u64 = 1 << 20;

/// The metric naming the running version.
const VERSION_METRIC: &str = "etcd_server_version{";

/// How long a day-2 command's one read of `/metrics` may take (upgrade, rotate-ca): etcd
/// renders every metric family before it sends the first byte, which took more than 3 s on
/// a loaded, emulated node (c4: a healthy etcd 3.4 refused as `upgrade-unhealthy`). The
/// status server's reads stay short: it answers a poll, and says "unknown" instead.
pub const DAY2_DEADLINE: Duration = Duration::from_secs(15);

/// The version the etcd answering at `addr` runs, from `GET /metrics`: read line by line
/// and stopped at the `etcd_server_version` line, within `deadline` in all (connect,
/// write, every read) and [`MAX_METRICS`] bytes.
pub fn server_version(addr: SocketAddr, deadline: Duration) -> Result<String, String> {
    metric_label(addr, deadline, VERSION_METRIC, "server_version")
}

/// The cluster version (`etcd_cluster_version{cluster_version="3.5"}`) the etcd at `addr`
/// reports on `/metrics`, bounded as [`server_version`] is.
pub fn cluster_version(addr: SocketAddr, deadline: Duration) -> Result<String, String> {
    metric_label(addr, deadline, "etcd_cluster_version{", "cluster_version")
}

/// The value of `label` on the first line of `metric` (`name{`) in `GET /metrics`.
fn metric_label(
    addr: SocketAddr,
    deadline: Duration,
    metric: &str,
    label: &str,
) -> Result<String, String> {
    let reader = get_metrics(addr, deadline)?;
    read_label(reader, metric, label).map_err(|e| format!("{addr}/metrics: {e}"))
}

/// `GET /metrics` at `addr`: the reply (headers included) as a reader that ends by
/// `deadline` in all (connect, write, every read) and after [`MAX_METRICS`] bytes.
/// Errors name `ADDR/metrics`.
pub fn get_metrics(addr: SocketAddr, deadline: Duration) -> Result<impl BufRead, String> {
    let end = Instant::now() + deadline;
    let failed = |e: io::Error| format!("{addr}/metrics: {e}");
    let mut stream = TcpStream::connect_timeout(&addr, deadline).map_err(failed)?;
    stream
        .set_write_timeout(Some(remaining(end).map_err(failed)?))
        .map_err(failed)?;
    // HTTP/1.0: the reply is plain (not chunked) and ends when etcd closes.
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(failed)?;
    Ok(BufReader::new(Deadlined { stream, end }.take(MAX_METRICS)))
}

/// Finds the version in an HTTP reply to `GET /metrics`, reading no further than its line.
pub fn read_version(reader: impl BufRead) -> Result<String, String> {
    read_label(reader, VERSION_METRIC, "server_version")
}

fn read_label(mut reader: impl BufRead, metric: &str, label: &str) -> Result<String, String> {
    let mut line = Vec::new();
    let mut next = |line: &mut Vec<u8>| -> Result<bool, String> {
        line.clear();
        match reader.read_until(b'\n', line) {
            Ok(0) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) => Err(e.to_string()),
        }
    };
    if !next(&mut line)? {
        return Err("empty reply".into());
    }
    let status = String::from_utf8_lossy(&line);
    let code = status.split_whitespace().nth(1).unwrap_or("");
    if !status.starts_with("HTTP/") || code != "200" {
        return Err(format!("not an HTTP 200 reply: {}", status.trim()));
    }
    // The headers, up to the blank line.
    loop {
        if !next(&mut line)? {
            return Err("the reply ended in its headers".into());
        }
        if line == b"\r\n" || line == b"\n" {
            break;
        }
    }
    while next(&mut line)? {
        if let Some(version) = label_in(&String::from_utf8_lossy(&line), metric, label) {
            return Ok(version);
        }
    }
    Err(format!(
        "no {} line in the first MiB",
        metric.trim_end_matches('{')
    ))
}

/// The version in an `etcd_server_version{server_version="3.5.1"} 1` line.
/// The label's value on a `metric{…label="X"…} 1` line; a sample of 0 is skipped (etcd
/// keeps the old cluster version's line at 0 after the cluster version moved on).
fn label_in(line: &str, metric: &str, label: &str) -> Option<String> {
    let labels = line.strip_prefix(metric)?;
    let (_, sample) = labels.rsplit_once('}')?;
    if sample.trim().parse::<f64>().ok()? == 0.0 {
        return None;
    }
    let (_, rest) = labels.split_once(&format!("{label}=\""))?;
    let (version, _) = rest.split_once('"')?;
    let plausible = !version.is_empty()
        && version.len() <= 64
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    plausible.then(|| version.to_string())
}

/// The time left until `end`, or a timeout error when none is.
pub(crate) fn remaining(end: Instant) -> io::Result<Duration> {
    let left = end.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
    } else {
        Ok(left)
    }
}

/// A stream whose every read ends by `end`, however slowly the peer trickles bytes.
pub(crate) struct Deadlined {
    pub(crate) stream: TcpStream,
    pub(crate) end: Instant,
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(remaining(self.end)?))?;
        // A read timeout shows as EAGAIN ("Resource temporarily unavailable"): say what
        // it is.
        self.stream.read(buf).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                io::Error::new(io::ErrorKind::TimedOut, "no reply within the deadline")
            }
            _ => e,
        })
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

    const METRICS_351: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\r\n# HELP etcd_cluster_version Which version is running. 1 for 'cluster_version' label with current cluster version\n# TYPE etcd_cluster_version gauge\netcd_cluster_version{cluster_version=\"3.5\"} 1\n# HELP etcd_server_go_version Which Go version server is running with.\netcd_server_go_version{server_go_version=\"go1.16.3\"} 1\n# HELP etcd_server_version Which version is running. 1 for 'server_version' label with current version.\n# TYPE etcd_server_version gauge\netcd_server_version{server_version=\"3.5.1\"} 1\n";

    #[test]
    fn reads_the_version_line_and_nothing_else() {
        assert_eq!(read_version(METRICS_351.as_bytes()).unwrap(), "3.5.1");
        let v34 = METRICS_351.replace("3.5.1", "3.4.23");
        assert_eq!(read_version(v34.as_bytes()).unwrap(), "3.4.23");
        let none = METRICS_351.replace("etcd_server_version{", "etcd_other{");
        assert!(read_version(none.as_bytes())
            .unwrap_err()
            .contains("no etcd_server_version"));
        let e = read_version("HTTP/1.1 404 Not Found\r\n\r\n".as_bytes()).unwrap_err();
        assert!(e.contains("404"), "{e}");
        assert!(read_version("".as_bytes()).is_err());
        assert_eq!(
            label_in(
                "etcd_server_version{server_version=\"3.5.1\"} 1",
                VERSION_METRIC,
                "server_version"
            ),
            Some("3.5.1".into())
        );
        assert_eq!(
            label_in(
                "etcd_server_version{server_version=\"a b\"} 1",
                VERSION_METRIC,
                "server_version"
            ),
            None
        );
    }

    #[test]
    fn the_cluster_version_is_the_line_at_1_not_the_old_one_left_at_0() {
        let after_upgrade = "HTTP/1.1 200 OK\r\n\r\n\
            etcd_cluster_version{cluster_version=\"3.4\"} 0\n\
            etcd_cluster_version{cluster_version=\"3.5\"} 1\n";
        assert_eq!(
            read_label(
                after_upgrade.as_bytes(),
                "etcd_cluster_version{",
                "cluster_version"
            ),
            Ok("3.5".to_string())
        );
    }

    #[test]
    fn stops_reading_at_the_version_line_and_bounds_a_slow_server() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            // First: the version, then a body that never ends.
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /metrics HTTP/1.0\r\n"));
            s.write_all(METRICS_351.as_bytes()).unwrap();
            let _ = s.write_all(b"# more\n");
            // Second: headers, then silence.
            let (mut s2, _) = listener.accept().unwrap();
            let _ = s2.read(&mut buf);
            s2.write_all(b"HTTP/1.1 200 OK\r\n\r\n# HELP\n").unwrap();
            std::thread::sleep(Duration::from_secs(2));
            drop((s, s2));
        });
        let started = Instant::now();
        assert_eq!(
            server_version(addr, Duration::from_secs(5)).unwrap(),
            "3.5.1"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        let started = Instant::now();
        let e = server_version(addr, Duration::from_millis(300)).unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(1500), "{e}");
        assert!(
            e.contains(&format!("{addr}/metrics")) && e.contains("no reply within the deadline"),
            "{e}"
        );
        server.join().unwrap();
    }
}
