//! How the agent speaks etcd's v3 API: the installed release's own `etcdctl`, as a
//! bounded child process with `-w json`, for TLS, the lock, `snapshot save` and member
//! changes; etcd's JSON gateway in-process ([`crate::cluster::gateway`]) for the reads
//! and the defragmentation of the upkeep (`member list`, `endpoint status`,
//! `alarm list`, `defrag`) when every endpoint is plain `http://` and the client has no
//! TLS files.
//!
//! Why etcdctl and not a gRPC client:
//! - **Size.** No client library goes into the static binary: this module and
//!   `lifecycle` together cost at most 0.34 MB (measured on a static musl release
//!   example linking all of it against one without). A gRPC client (tonic, prost, hyper,
//!   h2) adds well over 1 MiB.
//! - **TLS with client certificates.** etcdctl takes the very files etcd is configured
//!   with (`--cacert/--cert/--key` from [`TlsFiles`]) and speaks the TLS etcd speaks; the
//!   agent's own TLS stack (rustls, for S3) is not a second implementation whose quirks
//!   we would meet on etcd's port. A client with TLS files, or any `https://` endpoint,
//!   keeps etcdctl for every call.
//! - **3.4 and 3.5.** The etcdctl of the installed release matches its server by
//!   construction; its JSON is Go's `encoding/json` of the same responses in both lines
//!   (recorded outputs in `etcd/json/tests.rs`; host tests in `tests/etcd.rs` run 3.4.23
//!   and 3.5.x).
//! - **The lock** is etcdctl's `lock` held by a child process ([`ClusterLock`]): its
//!   session lease is kept alive by that child and expires `ttl` seconds after it died,
//!   even by SIGKILL of both of us; `snapshot save` streams to a file etcdctl writes and
//!   renames; member changes are rare. These stay etcdctl.
//!
//! Why the gateway for the upkeep's reads and defragmentation: one child per call (about
//! 20–30 ms each: etcdctl's start and its gRPC dial) was most of the fixed cost `maintain`
//! added around a defragmentation (0.14–0.17 s, for a config, alarm list, member list,
//! every member's status, the lock before, a status and the unlock after; 1.27–1.30× an
//! `etcdctl defrag` of 0.55 s on 150 MiB) and part of what `snapshot` added around
//! `snapshot save` (`docs/measurements.md`, "Snapshots and defragmentation"). A gateway
//! call is one HTTP/1.0 exchange of a few ms. It answers on the client port since 3.4
//! (`/v3`), with the proto field names etcdctl prints, 64-bit integers as strings and
//! alarms by name (`etcd/json.rs` reads both spellings; recorded answers of 3.4.23 and
//! 3.5.16 beside etcdctl's). Its errors carry etcd's own error line, classified as
//! etcdctl's are, so callers decide on the same [`ErrorKind`]s: a member that takes no
//! connection is [`ErrorKind::Unreachable`] (etcdctl: `context deadline exceeded`), one
//! that takes it but does not answer within the command timeout is
//! [`ErrorKind::Timeout`]; both are "late or down" to the survey, which tells the two
//! apart by whether the member accepts connections.
//!
//! Every call is bounded twice: etcdctl's `--dial-timeout`/`--command-timeout`, and our
//! deadline after which the child is killed; a gateway call by the same dial timeout for
//! its connection and the command timeout for its answer. Output is capped; the child
//! dies with us (`PR_SET_PDEATHSIG`). Errors are an [`EtcdError`] naming the call, the
//! endpoint URL(s) and etcd's or etcdctl's own error line.

pub(crate) mod command;
pub(super) mod error;
mod id;
mod json;
mod lock;

pub use error::{classify, error_line, ErrorKind, EtcdError};
pub use id::{cluster_id, member_id, Id};
pub use json::{
    Added, Alarm, AlarmKind, EndpointHealth, EndpointStatus, Header, KeyValue, Member, MemberList,
};
pub use lock::ClusterLock;

use super::gateway;
use crate::shared::config::TlsFiles;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// etcdctl's `--dial-timeout` unless told otherwise.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
/// etcdctl's `--command-timeout` unless told otherwise.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// What our own deadline adds to etcdctl's timeouts before the child is killed: etcdctl's
/// own start and exit, which its timeouts do not count. On a loaded node it takes seconds
/// (c3 under TCG: three rotate-ca surveys at once, six etcdctl each on one vCPU, were all
/// killed at 3 s of grace although etcd answered); etcdctl's timeouts still bound etcd's
/// side, so a longer grace only bounds a stuck child later.
const GRACE: Duration = Duration::from_secs(10);
/// How long [`Client::lock`] keeps asking again after its first transient failure.
const LOCK_TRANSIENT_FOR: Duration = Duration::from_secs(60);
/// The pause before it asks again.
const LOCK_RETRY_PAUSE: Duration = Duration::from_secs(2);

/// An etcd client: the `etcdctl` to run, the client URLs to ask, TLS and timeouts.
#[derive(Debug, Clone)]
pub struct Client {
    etcdctl: PathBuf,
    endpoints: Vec<String>,
    tls: Option<TlsFiles>,
    /// etcdctl's `--dial-timeout`.
    pub dial_timeout: Duration,
    /// etcdctl's `--command-timeout`.
    pub command_timeout: Duration,
    /// Whether plain-http calls may go through the gateway ([`Client::without_gateway`]).
    gateway: bool,
}

fn go_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

impl Client {
    /// A client running `etcdctl` against `endpoints` (client URLs), with the client side
    /// of TLS when `tls` is given.
    pub fn new(etcdctl: impl Into<PathBuf>, endpoints: Vec<String>, tls: Option<TlsFiles>) -> Self {
        Client {
            etcdctl: etcdctl.into(),
            endpoints,
            tls,
            dial_timeout: DIAL_TIMEOUT,
            command_timeout: COMMAND_TIMEOUT,
            gateway: true,
        }
    }

    /// The same client running etcdctl for every call, plain-http ones too (the
    /// gateway's answers are compared with etcdctl's in `tests/etcd.rs`).
    pub fn without_gateway(&self) -> Self {
        Client {
            gateway: false,
            ..self.clone()
        }
    }

    /// The same client asking other endpoints.
    pub fn with_endpoints(&self, endpoints: Vec<String>) -> Self {
        Client {
            endpoints,
            ..self.clone()
        }
    }

    /// The client URLs this client asks.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The etcdctl this client runs.
    pub fn etcdctl(&self) -> &Path {
        &self.etcdctl
    }

    /// The deadline of a call whose etcd side may take `command` at most.
    fn deadline(&self, command: Duration) -> Duration {
        self.dial_timeout + command + GRACE
    }

    /// etcdctl with the endpoints, timeouts and TLS; `json` asks for `-w json` (only
    /// where the answer is read: etcdctl 3.5's JSON printer of `member promote` panics on
    /// success, the simple one does not).
    fn command(
        &self,
        signal: nix::sys::signal::Signal,
        command_timeout: Duration,
        json: bool,
    ) -> Command {
        let mut cmd = command::command(&self.etcdctl, signal);
        cmd.arg(format!("--endpoints={}", self.endpoints.join(",")))
            .arg(format!("--dial-timeout={}", go_duration(self.dial_timeout)))
            .arg(format!(
                "--command-timeout={}",
                go_duration(command_timeout)
            ))
            .arg(if json {
                "--write-out=json"
            } else {
                "--write-out=simple"
            });
        if let Some(tls) = &self.tls {
            cmd.arg(format!("--cacert={}", tls.trusted_ca.display()))
                .arg(format!("--cert={}", tls.cert.display()))
                .arg(format!("--key={}", tls.key.display()));
        }
        cmd
    }

    /// Runs `etcdctl ARGS`, bounded by `command_timeout` on etcd's side; stdout on success.
    fn call_with(
        &self,
        what: &str,
        args: &[&str],
        command_timeout: Duration,
    ) -> Result<command::Output, EtcdError> {
        if self.endpoints.is_empty() {
            return Err(EtcdError::new(
                ErrorKind::Unreachable,
                what,
                &[],
                "no endpoint to ask",
            ));
        }
        let json = matches!(
            args.first().copied().zip(args.get(1).copied()),
            Some(
                ("member", "list" | "add")
                    | ("endpoint", _)
                    | ("alarm", _)
                    | ("get", _)
                    | ("lease", "grant")
            )
        );
        let mut cmd = self.command(nix::sys::signal::Signal::SIGKILL, command_timeout, json);
        cmd.args(args);
        command::run(cmd, self.deadline(command_timeout), what, &self.endpoints)
    }

    fn call(&self, what: &str, args: &[&str]) -> Result<Vec<u8>, EtcdError> {
        let out = self.call_with(what, args, self.command_timeout)?;
        self.ok(what, out)
    }

    fn ok(&self, what: &str, out: command::Output) -> Result<Vec<u8>, EtcdError> {
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(EtcdError::from_stderr(
                what,
                &self.endpoints,
                &out.stderr,
                &out.status.to_string(),
            ))
        }
    }

    fn parsed<T>(
        &self,
        what: &str,
        stdout: &[u8],
        parse: impl Fn(&[u8]) -> Result<T, String>,
    ) -> Result<T, EtcdError> {
        parse(stdout).map_err(|e| {
            let shown: String = String::from_utf8_lossy(stdout).chars().take(200).collect();
            EtcdError::new(
                ErrorKind::Parse,
                what,
                &self.endpoints,
                format!("unreadable answer ({e}): {shown}"),
            )
        })
    }

    /// The endpoints' addresses when this client speaks etcd's JSON gateway instead of
    /// etcdctl ([`gateway`]): no TLS files, and every endpoint a plain `http://IP:PORT`.
    fn plain(&self) -> Option<Vec<SocketAddr>> {
        if !self.gateway || self.tls.is_some() || self.endpoints.is_empty() {
            return None;
        }
        gateway::plain(&self.endpoints)
    }

    /// `what` through the gateway at `addrs` (this client's endpoints, in order): the
    /// first endpoint's answer; one that takes no connection passes the call on to the
    /// next, as etcdctl's balancer does. Bounded as etcdctl's calls are.
    fn over_gateway(
        &self,
        addrs: &[SocketAddr],
        what: &str,
        request: (&str, &str),
        command_timeout: Duration,
    ) -> Result<Vec<u8>, EtcdError> {
        let mut last = None;
        for (url, addr) in self.endpoints.iter().zip(addrs) {
            match gateway::call(
                (url, *addr),
                request,
                (self.dial_timeout, command_timeout),
                what,
                &self.endpoints,
            ) {
                Err(e) if e.kind == ErrorKind::Unreachable => last = Some(e),
                answer => return answer,
            }
        }
        Err(last.unwrap_or_else(|| {
            EtcdError::new(ErrorKind::Unreachable, what, &[], "no endpoint to ask")
        }))
    }

    /// `member list`: every member, learners included, and the cluster's ID. Linearizable,
    /// as etcdctl 3.5 asks it (3.4 serves it from the member's own view either way).
    pub fn member_list(&self) -> Result<MemberList, EtcdError> {
        let out = match self.plain() {
            Some(addrs) => self.over_gateway(
                &addrs,
                "member list",
                ("/v3/cluster/member/list", r#"{"linearizable":true}"#),
                self.command_timeout,
            )?,
            None => self.call("member list", &["member", "list"])?,
        };
        self.parsed("member list", &out, json::member_list)
    }

    /// `member add NAME --peer-urls=… --learner`: the new member's ID and the member list.
    pub fn member_add_learner(&self, name: &str, peer_urls: &[String]) -> Result<Added, EtcdError> {
        let what = format!("member add {name} --learner");
        let urls = format!("--peer-urls={}", peer_urls.join(","));
        let out = self.call(&what, &["member", "add", name, &urls, "--learner"])?;
        self.parsed(&what, &out, json::added)
    }

    /// `member promote ID`: a learner becomes a voting member. Fails with
    /// [`ErrorKind::LearnerNotInSync`] while it has not caught up.
    pub fn member_promote(&self, id: Id) -> Result<(), EtcdError> {
        let what = format!("member promote {id}");
        self.call(&what, &["member", "promote", &id.to_string()])
            .map(drop)
    }

    /// `member remove ID`.
    pub fn member_remove(&self, id: Id) -> Result<(), EtcdError> {
        let what = format!("member remove {id}");
        self.call(&what, &["member", "remove", &id.to_string()])
            .map(drop)
    }

    /// `endpoint status` of every endpoint; any endpoint that does not answer fails the call
    /// (ask one endpoint per client to learn about each).
    pub fn endpoint_status(&self) -> Result<Vec<EndpointStatus>, EtcdError> {
        let Some(addrs) = self.plain() else {
            let out = self.call("endpoint status", &["endpoint", "status"])?;
            return self.parsed("endpoint status", &out, json::endpoint_status);
        };
        let mut all = Vec::new();
        for (url, addr) in self.endpoints.iter().zip(addrs) {
            let one = self.with_endpoints(vec![url.clone()]);
            let out = one.over_gateway(
                &[addr],
                "endpoint status",
                ("/v3/maintenance/status", "{}"),
                self.command_timeout,
            )?;
            all.push(one.parsed("endpoint status", &out, |b| json::status(url, b))?);
        }
        Ok(all)
    }

    /// `endpoint health` of every endpoint: one entry each, healthy or with etcdctl's
    /// reason (etcdctl exits 1 when one is unhealthy; its answer is still read).
    pub fn endpoint_health(&self) -> Result<Vec<EndpointHealth>, EtcdError> {
        let out = self.call_with(
            "endpoint health",
            &["endpoint", "health"],
            self.command_timeout,
        )?;
        match json::endpoint_health(&out.stdout) {
            Ok(h) if !h.is_empty() => Ok(h),
            _ => {
                self.ok("endpoint health", out)?;
                Err(EtcdError::new(
                    ErrorKind::Parse,
                    "endpoint health",
                    &self.endpoints,
                    "no answer",
                ))
            }
        }
    }

    /// `alarm list`: the cluster's active alarms.
    pub fn alarm_list(&self) -> Result<Vec<Alarm>, EtcdError> {
        let out = match self.plain() {
            Some(addrs) => self.over_gateway(
                &addrs,
                "alarm list",
                ("/v3/maintenance/alarm", r#"{"action":"GET"}"#),
                self.command_timeout,
            )?,
            None => self.call("alarm list", &["alarm", "list"])?,
        };
        self.parsed("alarm list", &out, json::alarms)
    }

    /// `alarm disarm`: disarms every alarm; the alarms it disarmed.
    pub fn alarm_disarm(&self) -> Result<Vec<Alarm>, EtcdError> {
        let out = self.call("alarm disarm", &["alarm", "disarm"])?;
        self.parsed("alarm disarm", &out, json::alarms)
    }

    /// `defrag` of the one member at `endpoint`, bounded by `timeout` (defragmentation of
    /// a large database takes a while and blocks that member meanwhile).
    pub fn defrag(&self, endpoint: &str, timeout: Duration) -> Result<(), EtcdError> {
        let one = self.with_endpoints(vec![endpoint.to_string()]);
        if let Some(addrs) = one.plain() {
            return one
                .over_gateway(
                    &addrs,
                    "defrag",
                    ("/v3/maintenance/defragment", "{}"),
                    timeout,
                )
                .map(drop);
        }
        let out = one.call_with("defrag", &["defrag"], timeout)?;
        one.ok("defrag", out).map(drop)
    }

    /// `compaction REV` (with `--physical`: waits until old revisions are really gone),
    /// bounded by `timeout`.
    pub fn compact(
        &self,
        revision: i64,
        physical: bool,
        timeout: Duration,
    ) -> Result<(), EtcdError> {
        let rev = revision.to_string();
        let what = format!("compaction {rev}");
        let mut args = vec!["compaction", rev.as_str()];
        if physical {
            args.push("--physical");
        }
        let out = self.call_with(&what, &args, timeout)?;
        self.ok(&what, out).map(drop)
    }

    /// `move-leader ID`: hands leadership to member `to`. etcdctl finds the current leader
    /// among this client's endpoints, so give it every member's client URL.
    pub fn move_leader(&self, to: Id) -> Result<(), EtcdError> {
        let what = format!("move-leader {to}");
        self.call(&what, &["move-leader", &to.to_string()])
            .map(drop)
    }

    /// `snapshot save PATH` from the one member at `endpoint`, bounded by `timeout`.
    /// etcdctl writes `PATH.part` and renames it when complete.
    pub fn snapshot_save(
        &self,
        endpoint: &str,
        path: &Path,
        timeout: Duration,
    ) -> Result<(), EtcdError> {
        let one = self.with_endpoints(vec![endpoint.to_string()]);
        let p = path.to_string_lossy();
        let what = format!("snapshot save {p}");
        let out = one.call_with(&what, &["snapshot", "save", &p], timeout)?;
        one.ok(&what, out).map(drop)
    }

    /// `put KEY VALUE`.
    pub fn put(&self, key: &str, value: &str) -> Result<(), EtcdError> {
        let what = format!("put {key}");
        self.call(&what, &["put", "--", key, value]).map(drop)
    }

    /// `lease grant TTL` then `lease revoke ID`: two entries every member applies, and
    /// nothing left in the key space (a revoke that fails leaves the lease to expire).
    pub fn lease_grant_and_revoke(&self, ttl: Duration) -> Result<(), EtcdError> {
        let ttl = ttl.as_secs().max(1).to_string();
        let what = format!("lease grant {ttl}");
        let out = self.call(&what, &["lease", "grant", &ttl])?;
        let id = self.parsed(&what, &out, |b| {
            serde_json::from_slice::<serde_json::Value>(b)
                .map_err(|e| e.to_string())?
                .get("ID")
                .and_then(serde_json::Value::as_i64)
                .ok_or_else(|| "no lease ID".to_string())
        })?;
        // etcdctl reads the ID to revoke in hexadecimal.
        let hex = format!("{id:x}");
        self.call(&format!("lease revoke {hex}"), &["lease", "revoke", &hex])
            .map(drop)
    }

    /// `get KEY`: the value, or `None` when the key does not exist.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, EtcdError> {
        let what = format!("get {key}");
        let out = self.call(&what, &["get", "--", key])?;
        let kvs = self.parsed(&what, &out, json::get)?;
        Ok(kvs
            .into_iter()
            .find(|kv| kv.key == key.as_bytes())
            .map(|kv| kv.value))
    }

    /// How many keys begin with `prefix`: the range's `count`, which etcd gives for the
    /// whole range whatever the limit (`get --prefix --keys-only --limit=1`; 3.6's
    /// etcdctl refuses `--count-only` with JSON output).
    pub fn count_prefix(&self, prefix: &str) -> Result<u64, EtcdError> {
        let what = format!("get --prefix {prefix}");
        let out = self.call(
            &what,
            &["get", "--prefix", "--keys-only", "--limit=1", "--", prefix],
        )?;
        // etcd's JSON leaves the count out when it is 0.
        self.parsed(&what, &out, |b| {
            serde_json::from_slice::<serde_json::Value>(b)
                .map(|v| {
                    v.get("count")
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(0)
                })
                .map_err(|e| e.to_string())
        })
    }

    /// `lock NAME --ttl=TTL`, held until the returned guard is dropped or released;
    /// waits at most `wait` to acquire it. See [`ClusterLock`]. A transient failure
    /// ([`EtcdError::is_transient`]) is asked again, within `wait` and for at most
    /// [`LOCK_TRANSIENT_FOR`] after the first; the error then says how often it asked.
    pub fn lock(
        &self,
        name: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<ClusterLock, EtcdError> {
        let started = Instant::now();
        let mut attempts = 0u32;
        // A failure comes at once or after a wait for another holder: the retries'
        // bound counts from the first failure, not from the start.
        let mut failing_since: Option<Instant> = None;
        loop {
            // SIGTERM: etcdctl then releases the lock at once; after SIGKILL of etcdctl
            // its lease expires after `ttl`.
            let mut cmd = self.command(
                nix::sys::signal::Signal::SIGTERM,
                self.command_timeout,
                false,
            );
            cmd.arg("lock")
                .arg(format!("--ttl={}", ttl.as_secs().max(1)))
                .arg("--")
                .arg(name);
            let left = wait.saturating_sub(started.elapsed());
            attempts += 1;
            match ClusterLock::acquire(cmd, name, &self.endpoints, left) {
                Err(e)
                    if e.is_transient()
                        && started.elapsed() + LOCK_RETRY_PAUSE < wait
                        && failing_since.get_or_insert_with(Instant::now).elapsed()
                            + LOCK_RETRY_PAUSE
                            < LOCK_TRANSIENT_FOR =>
                {
                    std::thread::sleep(LOCK_RETRY_PAUSE);
                }
                Err(mut e) if attempts > 1 => {
                    e.line = format!(
                        "{} (asked {attempts} times over {} s)",
                        e.line,
                        started.elapsed().as_secs()
                    );
                    return Err(e);
                }
                other => return other,
            }
        }
    }
}

/// Runs `f` on a one-endpoint client for each endpoint of `client`, all at once, each
/// answer beside its endpoint (so one unreachable member costs one timeout, not one each).
pub fn each_endpoint<T: Send>(
    client: &Client,
    f: impl Fn(&Client) -> Result<T, EtcdError> + Sync,
) -> Vec<(String, Result<T, EtcdError>)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = client
            .endpoints
            .iter()
            .map(|e| {
                let one = client.with_endpoints(vec![e.clone()]);
                let f = &f;
                (e.clone(), s.spawn(move || f(&one)))
            })
            .collect();
        handles
            .into_iter()
            .map(|(e, h)| {
                let r = h.join().unwrap_or_else(|_| {
                    Err(EtcdError::new(
                        ErrorKind::Other,
                        "call",
                        std::slice::from_ref(&e),
                        "the thread asking it panicked",
                    ))
                });
                (e, r)
            })
            .collect()
    })
}

/// Whether an etcd log line says this member was removed from its cluster (etcd then
/// exits; its data dir must be moved aside and the node join again).
pub fn says_member_removed(log_line: &str) -> bool {
    let l = log_line.to_ascii_lowercase();
    l.contains("the member has been permanently removed from the cluster")
        || l.contains("the member has been removed from the cluster")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_line_is_etcdctls_own_not_its_json_log() {
        let stderr = br#"{"level":"warn","ts":"2026-12-01T09:24:50.955Z","caller":"clientv3/retry_interceptor.go:62","msg":"retrying of unary invoker failed","error":"rpc error: code = NotFound desc = etcdserver: member not found"}
Error: etcdserver: member not found
"#;
        assert_eq!(error_line(stderr), "etcdserver: member not found");
        let e = EtcdError::from_stderr(
            "member remove 4d2",
            &["http://10.0.0.2:2379".into()],
            stderr,
            "exit status: 1",
        );
        assert_eq!(e.kind, ErrorKind::MemberNotFound);
        assert_eq!(
            e.to_string(),
            "etcd member remove 4d2 on http://10.0.0.2:2379: etcdserver: member not found"
        );
        assert_eq!(
            error_line(b"Failed to get the status of endpoint http://127.0.0.1:1 (context deadline exceeded)\n"),
            "Failed to get the status of endpoint http://127.0.0.1:1 (context deadline exceeded)"
        );
    }

    #[test]
    fn error_lines_are_classified_for_the_callers_decisions() {
        for (line, kind) in [
            (
                "etcdserver: can only promote a learner member which is in sync with leader",
                ErrorKind::LearnerNotInSync,
            ),
            (
                "etcdserver: too many learner members in cluster",
                ErrorKind::TooManyLearners,
            ),
            ("etcdserver: unhealthy cluster", ErrorKind::UnhealthyCluster),
            (
                "etcdserver: re-configuration failed due to not enough started members",
                ErrorKind::UnhealthyCluster,
            ),
            (
                "etcdserver: Peer URLs already exists",
                ErrorKind::PeerUrlExists,
            ),
            (
                "etcdserver: mvcc: database space exceeded",
                ErrorKind::NoSpace,
            ),
            ("context deadline exceeded", ErrorKind::Unreachable),
            ("etcdserver: bad leader transferee", ErrorKind::Other),
        ] {
            assert_eq!(classify(line), kind, "{line}");
        }
    }

    #[test]
    fn transient_lock_failures_are_told_from_refusals() {
        let e = |line: &str| EtcdError::new(classify(line), "lock x", &[], line);
        for line in [
            // etcdctl lock in c3 (TLS, 3.5) while a member restarted beside it.
            "rpc error: code = Unknown desc = OK: HTTP status code 200; transport: missing content-type field",
            "rpc error: code = Unavailable desc = etcdserver: leader changed",
            "context deadline exceeded",
            "rpc error: code = Unavailable desc = transport is closing",
        ] {
            assert!(e(line).is_transient(), "{line}");
        }
        for line in [
            "rpc error: code = PermissionDenied desc = etcdserver: permission denied",
            "x509: certificate signed by unknown authority",
            "etcdserver: mvcc: database space exceeded",
            "etcdserver: request timed out",
        ] {
            assert!(!e(line).is_transient(), "{line}");
        }
        let late = EtcdError::new(ErrorKind::Timeout, "lock x", &[], "another holder");
        assert!(!late.is_transient());
    }

    #[test]
    fn removal_is_recognised_in_etcds_log_of_3_4_and_3_5() {
        assert!(says_member_removed(
            r#"{"level":"fatal","msg":"the member has been permanently removed from the cluster"}"#
        ));
        assert!(says_member_removed(
            "etcdserver: the member has been permanently removed from the cluster"
        ));
        assert!(!says_member_removed("etcdserver: member not found"));
    }

    #[test]
    fn a_missing_etcdctl_is_a_spawn_error_naming_it() {
        let c = Client::new(
            "/nonexistent/etcdctl",
            vec!["http://127.0.0.1:1".into()],
            None,
        );
        // A call the gateway does not make (`member list` of a plain-http URL does not
        // run etcdctl at all).
        let e = c.alarm_disarm().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Spawn);
        assert!(e.line.contains("/nonexistent/etcdctl"), "{e}");
    }

    #[test]
    fn a_child_past_its_deadline_is_killed_and_named() {
        // `sleep` stands in for an etcdctl that hangs; the deadline is ours, not its own.
        let mut cmd = command::command(Path::new("/bin/sleep"), nix::sys::signal::Signal::SIGKILL);
        cmd.arg("30");
        let t = std::time::Instant::now();
        let e = command::run(
            cmd,
            Duration::from_millis(300),
            "member list",
            &["http://10.0.0.9:2379".into()],
        )
        .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(e.kind, ErrorKind::Timeout);
        assert!(e.to_string().contains("http://10.0.0.9:2379"), "{e}");
    }

    #[test]
    fn output_beyond_the_cap_is_dropped_not_buffered() {
        let data = vec![b'x'; 100_000];
        assert_eq!(command::drain(&data[..], 1000, false).len(), 1000);
        let tail = command::drain(&b"aaaaEND"[..], 3, true);
        assert_eq!(tail, b"END");
    }
}
