//! etcd's live view: etcd.service over D-Bus and its health endpoint, asked when an answer is built.

use super::protocol::{Role, SpaceView};
use crate::cluster::health::{self, Health};
use crate::member::unit::ETCD_UNIT;
use crate::shared::systemd::{Systemd, UnitState};
use std::net::SocketAddr;
#[cfg(any(test, feature = "test-fixtures"))]
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the live view of etcd found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdLive {
    /// etcd.service's properties.
    pub unit: UnitState,
    /// Its health endpoint.
    pub health: Health,
    /// The version the running etcd reports on `/metrics`; `None` when it is not active
    /// or could not be read.
    pub version: Option<String>,
}

/// Where the answer's live view of etcd comes from: systemd and the health endpoint on a
/// node ([`SystemLive`]), a fixture in tests.
pub trait LiveView: Send + Sync {
    /// etcd's state now, or why it cannot be read.
    fn etcd(&self) -> Result<EtcdLive, String>;

    /// etcd's database size, size in use and quota now, when it says.
    fn space(&self) -> Option<SpaceView> {
        None
    }

    /// The member's role (voter or learner) in the etcd process `unit` names, when it
    /// says.
    fn role(&self, unit: &UnitState) -> Option<Role> {
        let _ = unit;
        None
    }
}

/// Where [`SystemLive`] asks the member's role.
#[derive(Debug, Clone)]
pub enum RoleSource {
    /// The plain-http client listener on loopback: etcd's JSON gateway
    /// ([`crate::cluster::gateway`]), no process.
    Gateway(SocketAddr),
    /// Client TLS: the installed etcdctl at this member's client URL alone (the agent
    /// carries no TLS stack): [`learner_by_etcdctl`], once per etcd process for a voter.
    Etcdctl(crate::cluster::etcd::Client),
}

/// Where this member's role is asked: the gateway on the loopback client listener when
/// clients speak plain http, else etcdctl with the client certificate at the client URL
/// (the one its certificate is issued for).
pub fn role_source(s: &crate::shared::config::Settings) -> RoleSource {
    let member = crate::member::ThisMember::of(s);
    match &s.tls.client {
        None => RoleSource::Gateway(SocketAddr::new(
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            s.client_port,
        )),
        Some(files) => {
            let mut client = crate::cluster::etcd::Client::new(
                member.etcdctl,
                vec![member.client_url],
                Some(files.clone()),
            );
            // A learner's refusal of `member list` comes after etcdctl's retries
            // (about 3 s); the command timeout leaves room for it.
            client.dial_timeout = Duration::from_secs(1);
            RoleSource::Etcdctl(client)
        }
    }
}

/// Whether the member `client` asks (its one endpoint) is a learner, through etcdctl:
/// `endpoint status` (learners serve it; 3.5 says `isLearner`, 3.4 leaves it out), then
/// for a member it calls a voter `member list`, whose entry for the answering member
/// decides; a learner refuses that call (`rpc not supported for learner`), which says so
/// too. A voter costs two calls once per etcd process, a 3.5 learner one.
fn learner_by_etcdctl(client: &crate::cluster::etcd::Client) -> Result<bool, String> {
    use crate::cluster::etcd::ErrorKind;
    let status = client.endpoint_status().map_err(|e| e.to_string())?;
    let me = status.first().ok_or("endpoint status answered nothing")?;
    if me.is_learner {
        return Ok(true);
    }
    match client.member_list() {
        Ok(list) => list.get(me.member_id).map(|m| m.is_learner).ok_or_else(|| {
            format!(
                "member list from {}: member {} is not listed",
                client.endpoints().join(","),
                me.member_id
            )
        }),
        Err(e) if e.kind == ErrorKind::NotForLearner => Ok(true),
        Err(e) => Err(e.to_string()),
    }
}

/// The role of one etcd process, as last read.
pub(super) struct RoleSeen {
    /// `(MainPID, ActiveEnterTimestamp)` of the process read.
    process: (u32, u64),
    role: Option<Role>,
    /// When to ask again: never for a voter (a voter stays one until it is removed, which
    /// ends its process); soon for a learner (its promotion shows) or after a failed read.
    pub(super) retry_at: Option<Instant>,
}

/// The live view on a node: `etcd.service` over D-Bus (one connection, kept) and
/// `GET /health` on the metrics port. Results are kept for [`SystemLive::TTL`], so a
/// burst of clients costs one round trip, not one each.
pub struct SystemLive {
    metrics: SocketAddr,
    systemd: Mutex<Option<Systemd>>,
    cache: Mutex<Option<(Instant, Result<EtcdLive, String>)>>,
    pub(super) version: Mutex<Option<VersionSeen>>,
    space: Mutex<Option<(Instant, Option<SpaceView>)>>,
    role_source: Option<RoleSource>,
    pub(super) role: Mutex<Option<RoleSeen>>,
}

/// The running etcd's version, read once per etcd process: it cannot change without a
/// restart, which changes `MainPID` and `ActiveEnterTimestamp`.
pub(super) struct VersionSeen {
    /// `(MainPID, ActiveEnterTimestamp)` of the process read.
    process: (u32, u64),
    /// What it said.
    version: Option<String>,
    /// After a failed read: when to try again.
    pub(super) retry_at: Option<Instant>,
}

/// `first`, etcd's `/health`, or when it is not decisive, what `again` reads after each
/// pause it is given. etcd answers `{"health":"false"}` when one linearizable read took
/// over a second (3.4) or its quorum read timed out (3.5), and a loaded moment makes it
/// answer nothing within [`SystemLive::HEALTH_DEADLINE`]: both happen to a healthy member.
/// c4 under TCG, three upgrades surveying a 3.4 cluster at once: every member said false
/// twice half a second apart, and was healthy at the next poll. c4 beside the other stream
/// of tests/run: a member just confirmed healthy said false three times over two seconds.
/// CI at 1166ed4: members of c1 and c4 that were healthy at the next poll said nothing for
/// 3 s, and one silence was believed at once.
///
/// So an answer without an alarm, or a silence, is asked again: after the pauses of
/// [`SystemLive::HEALTH_RECHECKS`] when it came fast, at once after a silence (which has
/// waited its deadline already), until [`SystemLive::HEALTH_PATIENCE`] is spent: four fast
/// reads over five seconds, or three silences over nine. The first answer that is healthy,
/// refused (a stopped or crashed etcd: at once) or names an alarm (`ALARM NOSPACE`,
/// `ALARM CORRUPT`) is believed at once.
fn confirmed(first: Health, mut again: impl FnMut(Duration) -> Health) -> Health {
    let cost = |h: &Health| match h {
        Health::Silent(_) => SystemLive::HEALTH_DEADLINE,
        _ => Duration::ZERO,
    };
    let mut spent = cost(&first);
    let mut now = first;
    for pause in SystemLive::HEALTH_RECHECKS {
        let pause = match &now {
            Health::Unhealthy(body) if !body.contains("ALARM") => pause,
            Health::Silent(_) => Duration::ZERO,
            _ => break,
        };
        if spent + pause >= SystemLive::HEALTH_PATIENCE {
            break;
        }
        spent += pause;
        now = again(pause);
        spent += cost(&now);
    }
    now
}

impl SystemLive {
    /// How long one look is reused.
    pub const TTL: Duration = Duration::from_millis(500);
    /// The longest wait for etcd's `/health`. A slow answer is not an unhealthy etcd: on a
    /// loaded node (three emulated guests on two cores, say) etcd took over a second to
    /// answer, and a one-second bound reported a healthy member as failed.
    pub const HEALTH_DEADLINE: Duration = Duration::from_secs(3);
    /// The pauses after an unhealthy `/health` that names no alarm, before it is asked
    /// again ([`confirmed`]): five seconds in all, so a poll of a really unhealthy member
    /// answers that much later (a stopped or crashed one answers at once: unreachable).
    pub const HEALTH_RECHECKS: [Duration; 3] = [
        Duration::from_millis(500),
        Duration::from_millis(1500),
        Duration::from_millis(3000),
    ];
    /// The most a poll spends judging `/health` ([`confirmed`]): pauses and silences, the
    /// fast answers' own time not counted. Under the client's patience
    /// (`status::client`'s slack) with the version, space and role reads after it.
    pub const HEALTH_PATIENCE: Duration = Duration::from_secs(9);
    /// The longest read of `/metrics` for the version.
    pub const VERSION_DEADLINE: Duration = Duration::from_secs(2);
    /// How long a failed version read stands before the same process is asked again.
    pub const VERSION_RETRY: Duration = Duration::from_secs(10);
    /// The longest read of the role (one gateway exchange; etcdctl gets its own bounds).
    pub const ROLE_DEADLINE: Duration = Duration::from_secs(2);
    /// How long a learner's role stands before it is asked again (its promotion shows
    /// within this), and a failed read likewise.
    pub const ROLE_RETRY: Duration = Duration::from_secs(2);

    /// A live view asking etcd's health on 127.0.0.1:`metrics_port`.
    pub fn new(metrics_port: u16) -> SystemLive {
        SystemLive {
            metrics: crate::member::this::loopback_metrics(metrics_port),
            systemd: Mutex::new(None),
            cache: Mutex::new(None),
            version: Mutex::new(None),
            space: Mutex::new(None),
            role_source: None,
            role: Mutex::new(None),
        }
    }

    /// The same, asking the member's role at `source`.
    pub fn with_role(mut self, source: RoleSource) -> SystemLive {
        self.role_source = Some(source);
        self
    }

    fn read_role(&self) -> Result<Role, String> {
        let learner = match &self.role_source {
            None => return Err("no role source".into()),
            Some(RoleSource::Gateway(addr)) => {
                crate::cluster::gateway::is_learner(*addr, Self::ROLE_DEADLINE)?
            }
            Some(RoleSource::Etcdctl(client)) => learner_by_etcdctl(client)?,
        };
        Ok(if learner { Role::Learner } else { Role::Voter })
    }

    /// The running etcd's version: from the cache while the process is the same, else
    /// from `/metrics` (a streaming read that stops at the version line).
    pub(super) fn live_version(&self, unit: &UnitState) -> Option<String> {
        let process = (unit.main_pid, unit.active_enter_timestamp_us);
        let mut seen = self.version.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = seen.as_ref().filter(|v| v.process == process) {
            if v.retry_at.is_none_or(|at| Instant::now() < at) {
                return v.version.clone();
            }
        }
        let read = health::server_version(self.metrics, Self::VERSION_DEADLINE).ok();
        *seen = Some(VersionSeen {
            process,
            retry_at: read.is_none().then(|| Instant::now() + Self::VERSION_RETRY),
            version: read.clone(),
        });
        read
    }

    fn look(&self) -> Result<EtcdLive, String> {
        let unit = {
            let mut sd = self.systemd.lock().unwrap_or_else(|e| e.into_inner());
            if sd.is_none() {
                *sd = Some(Systemd::connect().map_err(|f| f.message)?);
            }
            let Some(conn) = sd.as_ref() else {
                return Err("no systemd connection".into());
            };
            match conn.unit_state(ETCD_UNIT) {
                Ok(u) => u,
                Err(f) => {
                    // A broken connection is made again on the next look.
                    *sd = None;
                    return Err(f.message);
                }
            }
        };
        let (health, version) = if unit.is_active() {
            (
                confirmed(
                    health::check(self.metrics, Self::HEALTH_DEADLINE),
                    |pause| {
                        std::thread::sleep(pause);
                        health::check(self.metrics, Self::HEALTH_DEADLINE)
                    },
                ),
                self.live_version(&unit),
            )
        } else {
            (
                Health::Unreachable(format!("etcd.service is {}", unit.active_state)),
                None,
            )
        };
        Ok(EtcdLive {
            unit,
            health,
            version,
        })
    }
}

impl LiveView for SystemLive {
    fn role(&self, unit: &UnitState) -> Option<Role> {
        let process = (unit.main_pid, unit.active_enter_timestamp_us);
        let mut seen = self.role.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = seen.as_ref().filter(|r| r.process == process) {
            if r.retry_at.is_none_or(|at| Instant::now() < at) {
                return r.role;
            }
        }
        let role = self.read_role().ok();
        *seen = Some(RoleSeen {
            process,
            role,
            retry_at: (role != Some(Role::Voter)).then(|| Instant::now() + Self::ROLE_RETRY),
        });
        role
    }

    fn space(&self) -> Option<SpaceView> {
        let mut cache = self.space.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, seen)) = cache.as_ref() {
            if at.elapsed() < Self::TTL {
                return seen.clone();
            }
        }
        let seen = super::data::read_space(self.metrics, Duration::from_secs(1)).ok();
        *cache = Some((Instant::now(), seen.clone()));
        seen
    }

    fn etcd(&self) -> Result<EtcdLive, String> {
        // One look at a time; the others reuse it.
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, seen)) = cache.as_ref() {
            if at.elapsed() < Self::TTL {
                return seen.clone();
            }
        }
        let seen = self.look();
        *cache = Some((Instant::now(), seen.clone()));
        seen
    }
}

/// A live view read from a JSON file on every look (a test fixture, named by the
/// hidden `--live-fixture` option of `serve-status`, built with the `test-fixtures` feature): `{"unit":{UnitState fields},
/// "health":"healthy"|"unhealthy: …"|"unreachable: …", "version":"3.5.1",
/// "role":"voter"|"learner"}` (version and role optional), or `{"error":"…"}`.
#[cfg(any(test, feature = "test-fixtures"))]
pub struct FileLive(pub PathBuf);

#[cfg(any(test, feature = "test-fixtures"))]
impl LiveView for FileLive {
    fn role(&self, _unit: &UnitState) -> Option<Role> {
        #[derive(serde::Deserialize)]
        struct Fixture {
            role: Option<Role>,
        }
        let bytes = std::fs::read(&self.0).ok()?;
        serde_json::from_slice::<Fixture>(&bytes).ok()?.role
    }

    fn etcd(&self) -> Result<EtcdLive, String> {
        #[derive(serde::Deserialize)]
        struct Fixture {
            #[serde(default)]
            unit: UnitState,
            #[serde(default)]
            health: String,
            #[serde(default)]
            version: Option<String>,
            error: Option<String>,
        }
        let bytes = std::fs::read(&self.0).map_err(|e| format!("{}: {e}", self.0.display()))?;
        let f: Fixture =
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", self.0.display()))?;
        if let Some(e) = f.error {
            return Err(e);
        }
        let health = match f.health.split_once(": ") {
            _ if f.health == "healthy" => Health::Healthy,
            Some(("unhealthy", why)) => Health::Unhealthy(why.into()),
            Some((_, why)) => Health::Unreachable(why.into()),
            None => Health::Unreachable(f.health),
        };
        Ok(EtcdLive {
            unit: f.unit,
            health,
            version: f.version,
        })
    }
}

/// `health` as the answer shows it.
pub fn health_text(health: &Health) -> String {
    match health {
        Health::Healthy => "healthy".into(),
        Health::Unhealthy(why) => format!("unhealthy: {why}"),
        Health::Unreachable(why) => format!("unreachable: {why}"),
        Health::Silent(why) => format!("unreachable: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unhealthy_answer_is_asked_again_unless_it_names_an_alarm() {
        let bare = || Health::Unhealthy(r#"HTTP 503: {"health":"false"}"#.into());
        // Reads after the pauses, in order; each call takes the next.
        let reads = |answers: Vec<Health>| {
            let mut answers = answers.into_iter();
            move |_: Duration| answers.next().expect("asked more often than answered")
        };
        // A later read decides: healthy again after one, two or three more, or unhealthy
        // still after four in all.
        assert_eq!(
            confirmed(bare(), reads(vec![Health::Healthy])),
            Health::Healthy
        );
        assert_eq!(
            confirmed(bare(), reads(vec![bare(), Health::Healthy])),
            Health::Healthy
        );
        assert_eq!(
            confirmed(bare(), reads(vec![bare(), bare(), Health::Healthy])),
            Health::Healthy
        );
        assert_eq!(
            confirmed(bare(), reads(vec![bare(), bare(), bare()])),
            bare()
        );
        // The pauses are the constant's, five seconds in all.
        let mut seen = Vec::new();
        confirmed(bare(), |p| {
            seen.push(p);
            bare()
        });
        assert_eq!(seen, SystemLive::HEALTH_RECHECKS);
        assert_eq!(seen.iter().sum::<Duration>(), Duration::from_secs(5));
        // An alarm is believed at once, also on a re-read; a healthy or unreachable answer
        // is not asked again.
        let alarm =
            Health::Unhealthy(r#"HTTP 503: {"health":"false","reason":"ALARM NOSPACE"}"#.into());
        let never = |_: Duration| -> Health { panic!("asked again") };
        assert_eq!(confirmed(alarm.clone(), never), alarm);
        assert_eq!(confirmed(bare(), reads(vec![alarm.clone()])), alarm);
        assert_eq!(confirmed(Health::Healthy, never), Health::Healthy);
        let gone = Health::Unreachable("connection refused".into());
        assert_eq!(confirmed(gone.clone(), never), gone);
    }

    #[test]
    fn a_silence_is_asked_again_at_once_within_the_patience() {
        let silent = || Health::Silent("127.0.0.1:2381: no answer within 3 s".into());
        let bare = || Health::Unhealthy(r#"HTTP 503: {"health":"false"}"#.into());
        // A silent member that answers healthy on the next read is healthy.
        let mut once = Some(Health::Healthy);
        assert_eq!(
            confirmed(silent(), |_| once.take().expect("asked twice")),
            Health::Healthy
        );
        // Silences are asked again without a pause: three reads of 3 s fill the nine.
        let mut seen = Vec::new();
        assert_eq!(
            confirmed(silent(), |p| {
                seen.push(p);
                silent()
            }),
            silent()
        );
        assert_eq!(seen, [Duration::ZERO, Duration::ZERO]);
        let spent = 3 * SystemLive::HEALTH_DEADLINE + seen.iter().sum::<Duration>();
        assert!(spent <= SystemLive::HEALTH_PATIENCE, "{spent:?}");
        // A fast false after a silence is paused for, as long as the patience lasts.
        let mut answers = vec![bare(), Health::Healthy].into_iter();
        let mut seen = Vec::new();
        let last = confirmed(silent(), |p| {
            seen.push(p);
            answers.next().expect("asked more often than answered")
        });
        assert_eq!(seen, [Duration::ZERO, SystemLive::HEALTH_RECHECKS[1]]);
        assert_eq!(last, Health::Healthy);
        // Two silences and a false: the next pause would pass the patience; false stands.
        let mut answers = vec![silent(), bare(), Health::Healthy].into_iter();
        let mut seen = Vec::new();
        let last = confirmed(silent(), |p| {
            seen.push(p);
            answers.next().expect("asked more often than answered")
        });
        assert_eq!(seen, [Duration::ZERO, Duration::ZERO]);
        assert_eq!(last, bare(), "the patience ends before a fourth read");
        // The text says unreachable, with the bound.
        assert_eq!(
            health_text(&silent()),
            "unreachable: 127.0.0.1:2381: no answer within 3 s"
        );
    }
}
