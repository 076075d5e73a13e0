//! `etcd-setup maintain`: defragmentation when it pays, one member at a time, the leader
//! last; recovery from the NOSPACE alarm.
//!
//! Whoever runs it looks after the whole cluster, as etcd-druid does, so that the order
//! is decided in one place: under the cluster lock `etcd-setup/maintain` (etcdctl's
//! lock, a lease that dies with its holder), every member whose database is at least
//! `maintain.min_db_size` and at least `maintain.min_fragmented_percent` unused is
//! defragmented, followers first, the leader last, each only after every member answered
//! its status again. The leader is defragmented last rather than relieved of leadership
//! first: a defragmentation blocks only that member's own reads and writes, raft keeps
//! running, and moving leadership costs an election on every run. Three nodes' timers
//! firing together thus go one after another: the first holder defragments every
//! member that needs it; the next ones find nothing left to do.
//!
//! NOSPACE: etcd then refuses every write, a lock's lease included, so the recovery runs
//! without the lock: compact to the current revision (physically), defragment every
//! member one at a time (followers first, the leader last), and disarm only when every
//! member's database is below [`RECOVERED_PERCENT`] of the quota again; otherwise the
//! alarm stays and the command fails with `etcd-nospace`. Two nodes recovering at once
//! do no harm: compacting an already compacted revision is no error, and a defragmented
//! member defragments again in moments.
//!
//! A CORRUPT alarm stops everything: it is for an operator (`etcd-corrupt`).

use crate::cluster::etcd::{AlarmKind, Client, ErrorKind, EtcdError};
use crate::cluster::lifecycle::survey::{self, MemberView};
use crate::cluster::lifecycle::Node;
use crate::member::Member;
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::Settings;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The cluster lock's name.
pub const LOCK: &str = "etcd-setup/maintain";
/// The lock's lease TTL: how long a holder killed outright keeps the others waiting.
pub const LOCK_TTL: Duration = Duration::from_secs(30);
/// After NOSPACE, the alarm is disarmed only when every member's database is below this
/// share of the quota, in percent: a quarter of it free, so that the alarm does not come
/// straight back with the next writes.
pub const RECOVERED_PERCENT: u64 = 75;
/// How long a member may report no leader before the cluster counts as unhealthy. etcd
/// elects within a few election timeouts (1 s by default); a leader's defragmentation on
/// a starved guest can miss heartbeats and start one, so a run waits it out rather than
/// failing right after its own work.
pub const ELECTION_WAIT: Duration = Duration::from_secs(30);

/// Why a survey round failed in a way that asking again may mend.
enum Again {
    /// The member at this client URL did not answer in time.
    Late(String),
    /// A member has no leader: an election is under way.
    Electing,
}

fn unhealthy(message: String) -> Failure {
    Failure::new(ReasonCode::ClusterUnhealthy, message)
}

fn failed(e: EtcdError) -> Failure {
    Failure::new(ReasonCode::MaintainFailed, e.to_string())
}

/// `bytes` as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Every started member with its status, from the one survey of this member's list; a
/// member that does not answer makes the cluster unhealthy.
pub fn members(node: &Node) -> Result<Vec<MemberView>, Failure> {
    one_round(node).map_err(|(f, _)| f)
}

/// [`members`], and on failure the client URL of the member that did not answer, if
/// that is why.
fn one_round(node: &Node) -> Result<Vec<MemberView>, (Failure, Option<Again>)> {
    // Sizes and leaders decide here, not health: the survey without health checks.
    let seen = survey::survey_status(node, node.own_client_url().into_iter().collect(), &[]);
    if seen.list().is_none() {
        let why = seen
            .list_error()
            .map_or_else(|| "no client URL to ask".to_string(), |e| e.to_string());
        // etcd lists its members through raft: without a leader the list times out. The
        // own member's status (answered locally) tells an election from other troubles.
        let leaderless = node
            .own_client()
            .endpoint_status()
            .is_ok_and(|v| v.first().is_some_and(|s| s.leader.0 == 0));
        return Err(if leaderless {
            (
                unhealthy(format!(
                    "cannot list the members: {why}; this member has no leader"
                )),
                Some(Again::Electing),
            )
        } else {
            (unhealthy(format!("cannot list the members: {why}")), None)
        });
    }
    let mut out = Vec::new();
    for m in seen.view(node) {
        if m.endpoint.is_empty() {
            // Never started: nothing to defragment.
            continue;
        }
        let answer = seen
            .answers
            .iter()
            .find(|(i, _)| *i == m.id)
            .map(|(_, a)| a);
        let Some(status) = &m.status else {
            let why = match answer.map(|a| &a.status) {
                Some(Err(e)) => e.to_string(),
                _ => EtcdError::new(
                    ErrorKind::Parse,
                    "endpoint status",
                    std::slice::from_ref(&m.endpoint),
                    "no answer",
                )
                .to_string(),
            };
            return Err((
                unhealthy(format!(
                    "member {} at {} does not answer: {why}",
                    m.name, m.endpoint
                )),
                Some(Again::Late(m.endpoint.clone())),
            ));
        };
        if status.leader.0 == 0 {
            return Err((
                unhealthy(format!("member {} at {} has no leader", m.name, m.endpoint)),
                Some(Again::Electing),
            ));
        }
        out.push(m);
    }
    Ok(out)
}

/// [`members`] where the survey decides (under the cluster lock, and after a NOSPACE
/// recovery's defragmentations): a member that is late (it accepts connections but its
/// answer did not come within etcdctl's bounds: a guest starved of CPU while three
/// nodes' maintenances survey at once, a member still busy with a defragmentation of a
/// NOSPACE recovery, which takes no lock) is asked again, for at most `patience`
/// (`maintain.defrag_timeout`, the longest a member may be busy with one
/// defragmentation); a member without a leader is asked again each second for at most
/// [`ELECTION_WAIT`]. One that refuses connections (etcd down), or no list at all,
/// fails at once.
fn members_answering(node: &Node, patience: Duration) -> Result<Vec<MemberView>, Failure> {
    let started = Instant::now();
    let mut electing_since: Option<Instant> = None;
    loop {
        let (f, why, since, bound) = match one_round(node) {
            Ok(v) => return Ok(v),
            Err((f, Some(Again::Late(url))))
                if started.elapsed() < patience && crate::cluster::health::listens(&url) =>
            {
                (
                    f,
                    "it accepts connections, so it is late, not down",
                    started,
                    patience,
                )
            }
            Err((f, Some(Again::Electing)))
                if electing_since.get_or_insert_with(Instant::now).elapsed() < ELECTION_WAIT =>
            {
                std::thread::sleep(Duration::from_secs(1));
                let since = electing_since.unwrap_or(started);
                (f, "an election is under way", since, ELECTION_WAIT)
            }
            Err((f, _)) => return Err(f),
        };
        crate::shared::output::line(&format!(
            "{}; {why}: asking again ({:.0} s of {} s)",
            f.message,
            since.elapsed().as_secs_f64(),
            bound.as_secs()
        ));
    }
}

/// Followers first (by name), the leader last.
fn leader_last(mut v: Vec<MemberView>) -> Vec<MemberView> {
    v.sort_by(|a, b| (a.is_leader, &a.name).cmp(&(b.is_leader, &b.name)));
    v
}

/// Defragments `m`, printing one line with its sizes and times.
fn defragment(client: &Client, m: &MemberView, timeout: Duration) -> Result<(), Failure> {
    let role = if m.is_leader { "leader" } else { "follower" };
    let start = unix_ms();
    let t = Instant::now();
    client.defrag(&m.endpoint, timeout).map_err(failed)?;
    let took = t.elapsed();
    let end = unix_ms();
    let after = client
        .with_endpoints(vec![m.endpoint.clone()])
        .endpoint_status()
        .ok()
        .and_then(|mut v| v.pop())
        .map_or("?".to_string(), |s| mib(s.db_size));
    crate::shared::output::line(&format!(
        "defragmented {} ({role}) {}: {} -> {after} in {:.2} s [{start}..{end}]",
        m.name,
        m.endpoint,
        mib(m.db_size()),
        took.as_secs_f64()
    ));
    Ok(())
}

/// What a maintenance run did.
#[derive(Debug, Clone, Default)]
pub struct Done {
    /// Members defragmented, in order.
    pub defragmented: Vec<String>,
    /// Whether a NOSPACE alarm was recovered and disarmed.
    pub disarmed: bool,
}

/// NOSPACE: compact, defragment every member, disarm when space came back.
fn recover_nospace(
    s: &Settings,
    node: &Node,
    own: &Client,
    members: Vec<MemberView>,
) -> Result<Done, Failure> {
    let cfg = &s.data.maintain;
    let quota = s.data.quota_backend_bytes;
    let revision = members
        .iter()
        .filter_map(|m| m.status.as_ref().map(|s| s.revision))
        .max()
        .unwrap_or(0);
    crate::shared::output::line(&format!(
        "NOSPACE: databases {}; quota {}; compacting to revision {revision}",
        members
            .iter()
            .map(|m| format!("{} {}", m.name, mib(m.db_size())))
            .collect::<Vec<_>>()
            .join(", "),
        mib(quota)
    ));
    match own.compact(revision, true, cfg.defrag_timeout) {
        Ok(()) => {}
        Err(e) if e.line.contains("required revision has been compacted") => {}
        Err(e) => return Err(failed(e)),
    }
    let mut done = Done::default();
    for m in leader_last(members) {
        defragment(own, &m, cfg.defrag_timeout)?;
        done.defragmented.push(m.name.clone());
    }
    // Defragmenting the leader may have cost an election: wait for it.
    let after = members_answering(node, cfg.defrag_timeout)?;
    let limit = quota / 100 * RECOVERED_PERCENT;
    if let Some(full) = after.iter().find(|m| m.db_size() >= limit) {
        return Err(Failure::new(
            ReasonCode::EtcdNospace,
            format!(
                "space did not come back: member {} still holds {} of a {} quota after \
                 compaction and defragmentation; the alarm stays. Delete keys (or raise \
                 etcd.quota_backend_bytes) and run `etcd-setup maintain` again",
                full.name,
                mib(full.db_size()),
                mib(quota)
            ),
        ));
    }
    own.alarm_disarm().map_err(failed)?;
    crate::shared::output::line(&format!(
        "disarmed NOSPACE: databases now {}",
        after
            .iter()
            .map(|m| format!("{} {}", m.name, mib(m.db_size())))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    done.disarmed = true;
    Ok(done)
}

/// Whether member `m` passes the thresholds.
pub fn needs_defrag(s: &Settings, m: &MemberView) -> bool {
    let cfg = &s.data.maintain;
    m.db_size() >= cfg.min_db_size
        && m.fragmented_percent()
            .is_some_and(|p| p >= cfg.min_fragmented_percent)
}

/// One maintenance run.
pub fn maintain(s: &Settings, member: &Member) -> Result<Done, Failure> {
    let node = &member.node;
    let own = node.own_client();
    let alarms = own
        .alarm_list()
        .map_err(|e| unhealthy(format!("cannot list the alarms: {e}")))?;
    if let Some(a) = alarms.iter().find(|a| a.kind == AlarmKind::Corrupt) {
        return Err(Failure::new(
            ReasonCode::EtcdCorrupt,
            format!(
                "member {} raised the CORRUPT alarm: its data differ from the others'; \
                 nothing was done. Replace that member (remove it, move its data dir aside, \
                 let it join again) before any maintenance",
                a.member_id
            ),
        ));
    }
    // A member another node's maintenance is defragmenting answers late: that alone is
    // no reason to give up before the lock; the survey under the lock decides.
    let seen = match members(node) {
        Ok(seen) => Some(seen),
        Err(f) if f.code == ReasonCode::ClusterUnhealthy => {
            if alarms.iter().any(|a| a.kind == AlarmKind::NoSpace) {
                return Err(f);
            }
            None
        }
        Err(f) => return Err(f),
    };
    if let Some(seen) = seen {
        if alarms.iter().any(|a| a.kind == AlarmKind::NoSpace) {
            return recover_nospace(s, node, &own, seen);
        }
        if !seen.iter().any(|m| needs_defrag(s, m)) {
            print_nothing(s, &seen);
            return Ok(Done::default());
        }
    }
    let cfg = &s.data.maintain;
    let mut lock = own
        .lock(LOCK, LOCK_TTL, cfg.lock_wait)
        .map_err(|e| match e.kind {
            ErrorKind::Timeout => Failure::new(
                ReasonCode::Locked,
                format!("another node's maintenance holds {LOCK}: {e}"),
            ),
            _ => failed(e),
        })?;
    // Another node may have done the work while we waited.
    let members = members_answering(node, cfg.defrag_timeout)?;
    let mut done = Done::default();
    let todo: Vec<String> = leader_last(members.clone())
        .into_iter()
        .filter(|m| needs_defrag(s, m))
        .map(|m| m.name)
        .collect();
    if todo.is_empty() {
        print_nothing(s, &members);
    }
    // The survey just made serves the first member; every later one gets its own.
    let mut fresh = Some(members);
    for name in todo {
        // Every member answers before each defragmentation, and the leader is known now.
        let now = match fresh.take() {
            Some(v) => v,
            None => members_answering(node, cfg.defrag_timeout)?,
        };
        let Some(m) = now.into_iter().find(|m| m.name == name) else {
            continue;
        };
        // One member at a time only while the lock is ours.
        lock.ensure_held().map_err(|e| {
            Failure::new(
                ReasonCode::MaintainFailed,
                format!("{e}; defragmentation stopped before {}", m.name),
            )
        })?;
        defragment(&own, &m, cfg.defrag_timeout)?;
        done.defragmented.push(m.name);
    }
    drop(lock);
    Ok(done)
}

fn print_nothing(s: &Settings, members: &[MemberView]) {
    let cfg = &s.data.maintain;
    crate::shared::output::line(&format!(
        "nothing to defragment (threshold {} and {}% unused): {}",
        mib(cfg.min_db_size),
        cfg.min_fragmented_percent,
        members
            .iter()
            .map(|m| format!(
                "{} {} ({}% unused)",
                m.name,
                mib(m.db_size()),
                m.fragmented_percent()
                    .map_or("?".to_string(), |p| p.to_string())
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
}

/// `etcd-setup maintain`: the exit code.
pub fn command(args: &crate::cli::MaintainArgs) -> u8 {
    // No node lock and no operation record: maintain acts through etcd's API only, under
    // the cluster lock in etcd (see `super::frame`).
    let dirs = crate::cli::StateDirs {
        run_dir: crate::shared::report::RUN_DIR.into(),
        state_dir: crate::shared::report::PERSIST_DIR.into(),
    };
    super::frame::run(
        super::frame::Spec {
            command: crate::shared::report::Command::Maintain,
            config: &args.config,
            dirs: &dirs,
            lock: None,
            record: None,
            json: false,
        },
        |f| maintain(&f.settings, &f.member).map(|_| Vec::new()),
    )
}
