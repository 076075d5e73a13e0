//! The typed error of every etcd call: which call, on which endpoint(s), and etcdctl's own
//! error line, classified where a caller decides on it (a learner not yet in sync is
//! retried, a member that is already gone is not an error to `leave`, ...).

use std::fmt;

/// What kind of failure an etcd call met, as far as a caller acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// etcdctl could not be started (missing, not executable).
    Spawn,
    /// Our own deadline passed; the child was killed.
    Timeout,
    /// No endpoint answered in time (connection refused, dial or command timeout).
    Unreachable,
    /// `member promote`: the learner has not caught up with the leader yet.
    LearnerNotInSync,
    /// `member add`: the cluster already holds as many learners as it allows.
    TooManyLearners,
    /// The member asked is a learner and does not serve this call
    /// (`etcdserver: rpc not supported for learner`; `member list` and writes, say).
    NotForLearner,
    /// The member ID is not in the cluster.
    MemberNotFound,
    /// etcd refused a membership change because the cluster is not healthy enough.
    UnhealthyCluster,
    /// `member add`: a member with these peer URLs exists already.
    PeerUrlExists,
    /// The database reached its quota (`mvcc: database space exceeded`).
    NoSpace,
    /// etcdctl printed something we could not parse.
    Parse,
    /// Any other error etcdctl reported.
    Other,
}

/// A failed etcd call.
#[derive(Debug, Clone)]
pub struct EtcdError {
    /// How the caller may react.
    pub kind: ErrorKind,
    /// The call, e.g. `member list`.
    pub what: String,
    /// The client URL(s) it went to.
    pub endpoints: Vec<String>,
    /// etcdctl's own error line (or ours when etcdctl said nothing).
    pub line: String,
}

impl EtcdError {
    /// An error of `kind` for the call `what` on `endpoints`.
    pub fn new(kind: ErrorKind, what: &str, endpoints: &[String], line: impl Into<String>) -> Self {
        EtcdError {
            kind,
            what: what.to_string(),
            endpoints: endpoints.to_vec(),
            line: line.into(),
        }
    }

    /// The error of a child that exited non-zero, classified by its error line.
    pub fn from_stderr(what: &str, endpoints: &[String], stderr: &[u8], status: &str) -> Self {
        let line = error_line(stderr);
        let line = if line.is_empty() {
            format!("etcdctl exited with {status} and printed no error")
        } else {
            line
        };
        EtcdError::new(classify(&line), what, endpoints, line)
    }

    /// Whether asking again soon may well succeed: no endpoint answered, or gRPC's
    /// transport failed under the call (`Unavailable`: a leader election, a member
    /// restarting; a stream cut or answered without gRPC's headers: `OK: HTTP status
    /// code 200; transport: missing content-type field`, as `etcdctl lock` read in CI's
    /// c3 while members restarted one by one — on etcd's TLS port gRPC is served through
    /// Go's HTTP/2 server, which answers 200 when the handler ends before any header, as
    /// we take a stopping gRPC server to do; not traced further). Never a refusal etcd
    /// means (permissions, certificates, a full database).
    pub fn is_transient(&self) -> bool {
        if self.kind == ErrorKind::Unreachable {
            return true;
        }
        if self.kind != ErrorKind::Other {
            return false;
        }
        let l = self.line.to_ascii_lowercase();
        [
            "code = unavailable",
            "transport: missing content-type",
            "transport is closing",
            "leader changed",
            "no leader",
            "connection reset by peer",
            "error reading from server: eof",
        ]
        .iter()
        .any(|t| l.contains(t))
    }
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "etcd {} on {}: {}",
            self.what,
            self.endpoints.join(","),
            self.line
        )
    }
}

impl std::error::Error for EtcdError {}

/// The line of etcdctl's stderr that says what went wrong: the last `Error: ...` line, or
/// else the last line that is not one of its JSON log records.
pub fn error_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let pick = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("Error:"))
        .or_else(|| lines.iter().find(|l| l.starts_with("panic:")))
        .or_else(|| lines.iter().rev().find(|l| !l.starts_with('{')))
        .copied()
        .unwrap_or("");
    let pick = pick.strip_prefix("Error:").unwrap_or(pick).trim();
    pick.chars().take(500).collect()
}

/// The kind an error line stands for.
pub fn classify(line: &str) -> ErrorKind {
    let l = line.to_ascii_lowercase();
    if l.contains("can only promote a learner member which is in sync") {
        ErrorKind::LearnerNotInSync
    } else if l.contains("too many learner members") {
        ErrorKind::TooManyLearners
    } else if l.contains("rpc not supported for learner") {
        ErrorKind::NotForLearner
    } else if l.contains("member not found") {
        ErrorKind::MemberNotFound
    } else if l.contains("unhealthy cluster")
        || l.contains("re-configuration failed due to not enough started members")
    {
        ErrorKind::UnhealthyCluster
    } else if l.contains("peer urls already exists") || l.contains("peerurl exists") {
        ErrorKind::PeerUrlExists
    } else if l.contains("database space exceeded") {
        ErrorKind::NoSpace
    } else if l.contains("context deadline exceeded")
        || l.contains("connection refused")
        || l.contains("transientfailure")
        || l.contains("no route to host")
        || l.contains("i/o timeout")
        || l.contains("failed to get the status of endpoint")
    {
        ErrorKind::Unreachable
    } else {
        ErrorKind::Other
    }
}
