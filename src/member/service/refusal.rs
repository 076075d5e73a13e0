//! A TLS handshake refused by a peer, seen in etcd's own log while a start waits for
//! READY: one line at a time ([`classify`]), and the rule that turns repeats into a
//! failure ([`Watch`]).
//!
//! What etcd logs (zap JSON, 3.4 and 3.5; recorded in the tests below from two members
//! of two CAs on loopback):
//! - the server side of the peer port: `"msg":"rejected connection"` (3.4; the client
//!   port's refusals read the same, so only a configured peer's address counts) or
//!   `"msg":"rejected connection on peer endpoint"` (3.5), with `remote-addr` and
//!   `"error":"remote error: tls: bad certificate"` (the peer refused our certificate) or
//!   `tls: failed to verify client certificate: x509: …` (we refused the peer's);
//! - the dialling side: `"msg":"prober detected unhealthy status"` with `remote-peer-id`
//!   and `"error":"x509: certificate signed by unknown authority"` (3.4) or `tls: failed
//!   to verify certificate: x509: …` (3.5), every 5 s per peer.
//!
//! A single refusal can be a peer restarting with new files; a cluster whose certificates
//! do not fit refuses every attempt, several a second. The rule: the same peer refusing
//! at least [`MIN_REFUSALS`] times over at least [`MIN_SPAN`]. The start waits only while
//! etcd has no quorum (READY ends the watch), so a refusal by one peer of three that does
//! not keep the others from electing a leader never fails a start.

use crate::reason::{Failure, ReasonCode};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How many refusals by one peer fail the start.
pub const MIN_REFUSALS: u32 = 3;
/// Over how long at least, from the first to the last.
pub const MIN_SPAN: Duration = Duration::from_secs(5);

/// Who refused, as the line names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Peer {
    /// The remote address of a connection to our peer port (its port dropped).
    Addr(IpAddr),
    /// A member ID (hex) our prober dialled.
    Member(String),
}

/// A refused handshake in one log line: the peer and etcd's words (`error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Who.
    pub peer: Peer,
    /// etcd's `error`, e.g. `remote error: tls: bad certificate`.
    pub words: String,
}

/// Words of a failed TLS handshake in etcd's `error` (Go's crypto/tls and crypto/x509).
fn is_handshake_error(e: &str) -> bool {
    (e.contains("tls: ") || e.contains("x509: "))
        // A plain EOF or reset is a peer going away, not a refusal.
        && !e.ends_with("EOF")
}

/// The refused handshake `line` (one line of etcd's JSON log) tells of, if any.
pub fn classify(line: &str) -> Option<Refused> {
    let start = line.find('{')?;
    let v: serde_json::Value = serde_json::from_str(line[start..].trim_end()).ok()?;
    let msg = v.get("msg")?.as_str()?;
    let words = v.get("error")?.as_str()?;
    if !is_handshake_error(words) {
        return None;
    }
    let peer = match msg {
        "rejected connection" | "rejected connection on peer endpoint" => {
            let addr = v.get("remote-addr")?.as_str()?;
            Peer::Addr(host_of(addr)?)
        }
        _ if msg.starts_with("prober detected unhealthy status")
            || msg.starts_with("failed to dial")
            || msg.starts_with("lost TCP streaming connection") =>
        {
            Peer::Member(v.get("remote-peer-id")?.as_str()?.to_string())
        }
        _ => return None,
    };
    Some(Refused {
        peer,
        words: words.chars().take(300).collect(),
    })
}

/// The IP of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> Option<IpAddr> {
    addr.parse::<std::net::SocketAddr>()
        .map(|s| s.ip())
        .ok()
        .or_else(|| addr.parse().ok())
}

/// The IP of a validated peer URL `scheme://HOST:PORT` (`[v6]` too); `None` for a name.
fn url_ip(url: &str) -> Option<IpAddr> {
    let (_, rest) = url.split_once("://")?;
    let (host, _) = rest.rsplit_once(':')?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// The refusals seen so far during one start.
pub struct Watch {
    /// The configured peers: their IP, for naming and to tell peers from clients, and
    /// their peer URL and name.
    peers: Vec<(IpAddr, String)>,
    /// The members' IDs as a bootstrap with the configured token gives them (a prober
    /// line names only the ID), with the same naming.
    ids: Vec<(crate::cluster::etcd::Id, String)>,
    /// Per peer: first seen, how many, the last words.
    seen: HashMap<Peer, (Instant, u32, String)>,
}

impl Watch {
    /// A watch for a start whose peers are `peers` (name, peer URL), this member excluded,
    /// in the cluster of `token`.
    pub fn new(peers: &[(String, String)], token: &str) -> Watch {
        let named = |name: &str, url: &str| format!("{name} at {url}");
        Watch {
            peers: peers
                .iter()
                .filter_map(|(name, url)| Some((url_ip(url)?, named(name, url))))
                .collect(),
            ids: peers
                .iter()
                .map(|(name, url)| {
                    let id = crate::cluster::etcd::member_id(std::slice::from_ref(url), token);
                    (id, named(name, url))
                })
                .collect(),
            seen: HashMap::new(),
        }
    }

    /// Takes one log line seen at `now`; the failure once a peer has refused
    /// [`MIN_REFUSALS`] times over [`MIN_SPAN`].
    pub fn observe(&mut self, line: &str, now: Instant) -> Option<Failure> {
        let r = classify(line)?;
        let named = match &r.peer {
            Peer::Addr(ip) => {
                // 3.4 logs a client's refusal in the same words: peers only.
                let (_, who) = self.peers.iter().find(|(p, _)| p == ip)?;
                format!("peer {who}")
            }
            Peer::Member(id) => {
                let known = crate::cluster::etcd::Id::parse_hex(id)
                    .and_then(|i| self.ids.iter().find(|(p, _)| *p == i));
                match known {
                    Some((_, who)) => format!("peer {who} (member {id})"),
                    None => format!("peer member {id}"),
                }
            }
        };
        let entry = self.seen.entry(r.peer).or_insert((now, 0, String::new()));
        entry.1 += 1;
        entry.2 = r.words;
        let span = now.saturating_duration_since(entry.0);
        if entry.1 < MIN_REFUSALS || span < MIN_SPAN {
            return None;
        }
        Some(Failure::new(
            ReasonCode::EtcdTlsRefused,
            format!(
                "the TLS handshake with {named} failed {} times in {} s while etcd started (etcd: \"{}\"); \
                 give this node a certificate and trusted CA of the cluster's CA for its IP (or that peer a good one), then run again",
                entry.1,
                span.as_secs(),
                entry.2
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Recorded from etcd 3.4.23 and 3.5.16, two members of two CAs on loopback.
    const REJECTED_34: &str = r#"{"level":"warn","ts":"2026-12-02T04:06:03.099Z","caller":"embed/config_logging.go:287","msg":"rejected connection","remote-addr":"127.0.0.1:47830","server-name":"","error":"remote error: tls: bad certificate"}"#;
    const PROBER_34: &str = r#"{"level":"warn","ts":"2026-12-02T04:06:08.171Z","caller":"rafthttp/probing_status.go:70","msg":"prober detected unhealthy status","round-tripper-name":"ROUND_TRIPPER_SNAPSHOT","remote-peer-id":"5c7040010c2018f7","rtt":"0s","error":"x509: certificate signed by unknown authority"}"#;
    const REJECTED_35: &str = r#"{"level":"warn","ts":"2026-12-02T04:07:30.380661Z","caller":"embed/config_logging.go:170","msg":"rejected connection on peer endpoint","remote-addr":"127.0.0.1:45412","server-name":"","error":"remote error: tls: bad certificate"}"#;
    const PROBER_35: &str = r#"{"level":"warn","ts":"2026-12-02T04:07:35.400061Z","caller":"rafthttp/probing_status.go:68","msg":"prober detected unhealthy status","round-tripper-name":"ROUND_TRIPPER_RAFT_MESSAGE","remote-peer-id":"2217cdee1ba82b2e","rtt":"0s","error":"tls: failed to verify certificate: x509: certificate signed by unknown authority"}"#;
    /// A peer's certificate without its source address (3.5 names its SANs).
    const SAN_35: &str = r#"{"level":"warn","ts":"2026-12-02T04:29:40.721871Z","caller":"embed/config_logging.go:161","msg":"rejected connection on peer endpoint","remote-addr":"127.0.0.1:43728","server-name":"","ip-addresses":["127.155.106.2"],"dns-names":[],"error":"x509: certificate is valid for 127.155.106.2, not 127.0.0.1"}"#;
    /// Not refusals: a peer that is not up yet, a client port refusal, a timeout.
    const NOT_UP_35: &str = r#"{"level":"warn","ts":"2026-12-02T04:07:35.400061Z","caller":"rafthttp/probing_status.go:68","msg":"prober detected unhealthy status","round-tripper-name":"ROUND_TRIPPER_RAFT_MESSAGE","remote-peer-id":"2217cdee1ba82b2e","rtt":"0s","error":"dial tcp 127.0.0.1:2380: connect: connection refused"}"#;
    const CLIENT_35: &str = r#"{"level":"warn","ts":"2026-12-02T04:07:30.380661Z","caller":"embed/config_logging.go:160","msg":"rejected connection on client endpoint","remote-addr":"127.0.0.1:45412","server-name":"","error":"remote error: tls: bad certificate"}"#;
    const PUBLISH_35: &str = r#"{"level":"warn","ts":"2026-12-02T04:07:37.401142Z","caller":"etcdserver/server.go:2161","msg":"failed to publish local member to cluster through raft","local-member-id":"1e6c7a5825d99e77","request-path":"/0/members/1e6c7a5825d99e77/attributes","publish-timeout":"7s","error":"etcdserver: request timed out"}"#;

    #[test]
    fn reads_the_refusals_of_3_4_and_3_5() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        for line in [REJECTED_34, REJECTED_35] {
            let r = classify(line).unwrap();
            assert_eq!(r.peer, Peer::Addr(lo));
            assert_eq!(r.words, "remote error: tls: bad certificate");
        }
        let r = classify(PROBER_34).unwrap();
        assert_eq!(r.peer, Peer::Member("5c7040010c2018f7".into()));
        assert_eq!(r.words, "x509: certificate signed by unknown authority");
        let r = classify(PROBER_35).unwrap();
        assert_eq!(r.peer, Peer::Member("2217cdee1ba82b2e".into()));
        assert!(r.words.starts_with("tls: failed to verify certificate"));
        let r = classify(SAN_35).unwrap();
        assert_eq!(r.peer, Peer::Addr(lo));
        assert!(r.words.contains("certificate is valid for"), "{}", r.words);
        // journalctl's short format puts a prefix before etcd's JSON.
        let prefixed = format!("Dec 02 04:07:30 etcd-2 etcd[812]: {REJECTED_35}");
        assert!(classify(&prefixed).is_some());
        for line in [NOT_UP_35, CLIENT_35, PUBLISH_35, "plain text", ""] {
            assert_eq!(classify(line), None, "{line}");
        }
    }

    fn peers() -> Vec<(String, String)> {
        vec![("etcd-2".into(), "https://127.0.0.1:2380".into())]
    }

    #[test]
    fn one_peer_refusing_three_times_over_five_seconds_fails_the_start() {
        let mut w = Watch::new(&peers(), "tok");
        let t = Instant::now();
        assert!(w.observe(REJECTED_35, t).is_none());
        // Many at once are not enough: they must go on for 5 s.
        for i in 1..20 {
            assert!(w
                .observe(REJECTED_35, t + Duration::from_millis(i * 50))
                .is_none());
        }
        let f = w.observe(REJECTED_35, t + MIN_SPAN).unwrap();
        assert_eq!(f.code, ReasonCode::EtcdTlsRefused);
        assert!(
            f.message.contains("peer etcd-2 at https://127.0.0.1:2380"),
            "{}",
            f.message
        );
        assert!(
            f.message.contains("\"remote error: tls: bad certificate\""),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_single_refusal_or_one_from_no_peer_is_no_failure() {
        let t = Instant::now();
        let mut w = Watch::new(&peers(), "tok");
        assert!(w.observe(REJECTED_34, t).is_none());
        assert!(w.observe(NOT_UP_35, t + Duration::from_secs(60)).is_none());
        // A client at an address that is no peer's (3.4 logs it in the same words).
        let mut w = Watch::new(&[("etcd-2".into(), "https://10.0.0.2:2380".into())], "tok");
        for i in 0..10 {
            assert!(w.observe(REJECTED_34, t + Duration::from_secs(i)).is_none());
        }
        // Prober lines name the member; they count on their own.
        let mut w = Watch::new(&[], "tok");
        assert!(w.observe(PROBER_34, t).is_none());
        assert!(w.observe(PROBER_34, t + Duration::from_secs(5)).is_none());
        let f = w.observe(PROBER_34, t + Duration::from_secs(10)).unwrap();
        assert!(
            f.message.contains("peer member 5c7040010c2018f7"),
            "{}",
            f.message
        );
        assert!(f
            .message
            .contains("x509: certificate signed by unknown authority"));
    }
}
