//! Asking the cluster what it looks like: the member list from every peer that answers,
//! and the health, status, version and role of every member that list names. One
//! bounded round; nothing changes. The one survey of the agent: joining and leaving read
//! its health ([`Survey::is_healthy`]), `maintain` and `upgrade` its members
//! ([`Survey::view`], one [`MemberView`] each).

use super::node::Node;
use crate::cluster::etcd::{self, EndpointHealth, EndpointStatus, EtcdError, Id, MemberList};
use crate::shared::advisory::Version;

/// How one member is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberHealth {
    /// It answered a health check (voters: a linearizable read; learners, which serve
    /// none: an endpoint status with a known leader).
    Healthy,
    /// It did not: why.
    Unhealthy(String),
}

/// What one member answered: its `endpoint status`, and for voters its `endpoint health`
/// (a learner serves no linearizable read, which the health check makes).
#[derive(Debug, Clone)]
pub struct Answer {
    /// `endpoint health` (voters; `None` for a learner).
    pub health: Option<Result<Vec<EndpointHealth>, EtcdError>>,
    /// `endpoint status`.
    pub status: Result<Vec<EndpointStatus>, EtcdError>,
}

/// One member as the survey saw it: what `maintain` and `upgrade` decide on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// Its member ID.
    pub id: Id,
    /// Its etcd name (its ID when it has none: it never started).
    pub name: String,
    /// Its first client URL (empty when it never started).
    pub endpoint: String,
    /// Its `endpoint status`, when it answered one.
    pub status: Option<EndpointStatus>,
    /// The version its `endpoint status` reported; `None` when it did not answer.
    pub version: Option<Version>,
    /// Whether it is a voter and `endpoint health` answered healthy.
    pub healthy: bool,
    /// Whether it is the leader.
    pub is_leader: bool,
    /// Whether it is this node's member.
    pub is_self: bool,
    /// What was wrong when it is not healthy (etcd's or etcdctl's line).
    pub problem: Option<String>,
    /// Whether its status or health check ran out of time ([`Answer::ran_out_of_time`]).
    pub out_of_time: bool,
}

impl MemberView {
    /// The share of its database file not in use, in percent; `None` when etcd does not
    /// say (etcd before 3.4) or it gave no status.
    pub fn fragmented_percent(&self) -> Option<u64> {
        let status = self.status.as_ref()?;
        let in_use = status.db_size_in_use?;
        let size = status.db_size.max(1);
        Some(size.saturating_sub(in_use) * 100 / size)
    }

    /// Its database file's size (0 when it gave no status).
    pub fn db_size(&self) -> u64 {
        self.status.as_ref().map_or(0, |s| s.db_size)
    }

    /// Whether it is unhealthy only for want of an answer in time: it gave no status, or
    /// its status or health check ran out of time ([`Answer::ran_out_of_time`]). Not an
    /// alarm, "no leader" or a learner that answered.
    pub fn answered_late(&self) -> bool {
        !self.healthy && (self.status.is_none() || self.out_of_time)
    }
}

impl Answer {
    /// Whether its status or health check ran out of time, told by the error's kind, not
    /// its words: etcdctl killed at our deadline ([`etcd::ErrorKind::Timeout`]; c4, three
    /// upgrades surveying at once in one-vCPU guests: every member's health check killed
    /// after 17 s), or no endpoint answered in time ([`etcd::ErrorKind::Unreachable`]:
    /// etcdctl's `context deadline exceeded`, in its exit or in the health entry, which it
    /// also says of a port nobody listens on; a caller tells the two apart by whether the
    /// endpoint accepts connections).
    pub fn ran_out_of_time(&self) -> bool {
        let late = |e: &EtcdError| {
            matches!(
                e.kind,
                etcd::ErrorKind::Timeout | etcd::ErrorKind::Unreachable
            )
        };
        let late_entry = |h: &EndpointHealth| {
            h.error
                .as_deref()
                .is_some_and(|e| etcd::classify(e) == etcd::ErrorKind::Unreachable)
        };
        self.status.as_ref().err().is_some_and(late)
            || match &self.health {
                Some(Ok(h)) => h.iter().any(late_entry),
                Some(Err(e)) => late(e),
                None => false,
            }
    }
}

/// What the cluster answered in one round.
#[derive(Debug, Clone, Default)]
pub struct Survey {
    /// Each client URL asked, with its member list or why it gave none.
    pub peers: Vec<(String, Result<MemberList, EtcdError>)>,
    /// The health of each member of the first member list, by ID.
    pub health: Vec<(Id, MemberHealth)>,
    /// The peers that gave no member list but answered `endpoint status` (which is
    /// served without a leader): a cluster that lost its quorum.
    pub statuses: Vec<etcd::EndpointStatus>,
    /// What each member of the first member list answered, by ID (members skipped are
    /// not in it).
    pub answers: Vec<(Id, Answer)>,
}

impl Survey {
    /// The first member list that came back.
    pub fn list(&self) -> Option<&MemberList> {
        self.peers.iter().find_map(|(_, r)| r.as_ref().ok())
    }

    /// Whether member `id` answered its health check.
    pub fn is_healthy(&self, id: Id) -> bool {
        self.health
            .iter()
            .any(|(i, h)| *i == id && *h == MemberHealth::Healthy)
    }

    /// The health of member `id`, when it was asked.
    pub fn health_of(&self, id: Id) -> Option<&MemberHealth> {
        self.health.iter().find(|(i, _)| *i == id).map(|(_, h)| h)
    }

    /// Why no member list came back: the first peer's error.
    pub fn list_error(&self) -> Option<&EtcdError> {
        self.peers.iter().find_map(|(_, r)| r.as_ref().err())
    }

    /// Every member of the first member list as `node` sees it: health, status, version,
    /// role. Empty when no list came back.
    pub fn view(&self, node: &Node) -> Vec<MemberView> {
        let Some(list) = self.list() else {
            return Vec::new();
        };
        let own_id = etcd::member_id(&node.peer_urls, &node.token);
        list.members
            .iter()
            .map(|m| {
                let answer = self
                    .answers
                    .iter()
                    .find(|(i, _)| *i == m.id)
                    .map(|(_, a)| a);
                let status = answer.and_then(|a| a.status.as_ref().ok()?.first().cloned());
                let (healthy, problem) = match answer {
                    _ if m.is_learner => (false, Some("a learner".to_string())),
                    None if m.client_urls.is_empty() => (false, Some("no client URL".into())),
                    None => (false, Some("not asked".into())),
                    Some(a) => match (&a.health, &a.status) {
                        (Some(Ok(h)), Ok(_)) => (
                            !h.is_empty() && h.iter().all(|x| x.healthy),
                            h.iter().find_map(|x| x.error.clone()),
                        ),
                        (Some(Err(e)), _) | (_, Err(e)) => (false, Some(e.to_string())),
                        (None, Ok(_)) => (false, None),
                    },
                };
                MemberView {
                    id: m.id,
                    name: if m.name.is_empty() {
                        m.id.to_string()
                    } else {
                        m.name.clone()
                    },
                    endpoint: m.client_urls.first().cloned().unwrap_or_default(),
                    version: status.as_ref().and_then(|s| Version::parse(&s.version)),
                    is_leader: status.as_ref().is_some_and(|s| s.leader == m.id),
                    status,
                    healthy,
                    is_self: m.id == own_id || m.peer_urls.iter().any(|u| node.is_own_peer_url(u)),
                    problem,
                    out_of_time: !m.is_learner && answer.is_some_and(Answer::ran_out_of_time),
                }
            })
            .collect()
    }
}

/// Asks `urls` for the member list (all at once), then every member of the first list
/// for its status and health (all at once). `skip` members are not asked (this node
/// while its etcd is stopped).
pub fn survey(node: &Node, urls: Vec<String>, skip: &[Id]) -> Survey {
    survey_with(node, urls, skip, true)
}

/// [`survey`] without the health checks: the member list and every member's status, for
/// a caller that decides on sizes and leaders only (`maintain`). No voter's health is
/// asked, so [`Answer::health`] is `None` and [`MemberView::healthy`] false for every
/// member; [`Survey::health`] is judged as a learner's is (a status with a leader).
/// With plain-http client URLs every call of it goes through the gateway: `endpoint
/// health` is an etcdctl child per member (its 3.5 alarm check and 3.4's lack of one
/// are etcdctl's own), and maintain's fixed cost was mostly such children.
pub fn survey_status(node: &Node, urls: Vec<String>, skip: &[Id]) -> Survey {
    survey_with(node, urls, skip, false)
}

fn survey_with(node: &Node, urls: Vec<String>, skip: &[Id], ask_health: bool) -> Survey {
    let peers = etcd::each_endpoint(&node.client(urls), |c| c.member_list());
    let mut survey = Survey {
        peers,
        ..Survey::default()
    };
    let Some(list) = survey.list().cloned() else {
        // Nobody listed the members: a cluster without a leader still answers status.
        let silent: Vec<String> = survey
            .peers
            .iter()
            .filter(|(_, r)| r.as_ref().is_err_and(|e| e.kind != etcd::ErrorKind::Spawn))
            .map(|(u, _)| u.clone())
            .collect();
        survey.statuses = etcd::each_endpoint(&node.client(silent), |c| c.endpoint_status())
            .into_iter()
            .filter_map(|(_, r)| r.ok())
            .flatten()
            .collect();
        return survey;
    };
    let asked: Vec<&etcd::Member> = list
        .members
        .iter()
        .filter(|m| !skip.contains(&m.id))
        .collect();
    survey.answers = std::thread::scope(|s| {
        let handles: Vec<_> = asked
            .iter()
            .filter(|m| !m.client_urls.is_empty())
            .map(|m| {
                let client = node.client(m.client_urls.clone());
                // A learner serves no linearizable read, which the health check makes.
                let check_health = ask_health && !m.is_learner;
                let id = m.id;
                s.spawn(move || {
                    let (health, status) = std::thread::scope(|t| {
                        let health = check_health.then(|| t.spawn(|| client.endpoint_health()));
                        let status = client.endpoint_status();
                        (health.map(|h| join_or_panicked(h, &client)), status)
                    });
                    (id, Answer { health, status })
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().ok())
            .collect::<Vec<_>>()
    });
    survey.health = asked
        .iter()
        .map(|m| {
            let answer = survey.answers.iter().find(|(i, _)| *i == m.id);
            (m.id, member_health(m, answer.map(|(_, a)| a)))
        })
        .collect();
    survey
}

fn join_or_panicked<T>(
    h: std::thread::ScopedJoinHandle<'_, Result<T, EtcdError>>,
    client: &etcd::Client,
) -> Result<T, EtcdError> {
    h.join().unwrap_or_else(|_| {
        Err(EtcdError::new(
            etcd::ErrorKind::Other,
            "endpoint health",
            client.endpoints(),
            "the thread asking it panicked",
        ))
    })
}

/// A member's health as joining and leaving judge it: a voter by `endpoint health`, a
/// learner (which serves no linearizable read) by a status that knows a leader.
fn member_health(m: &etcd::Member, answer: Option<&Answer>) -> MemberHealth {
    let Some(answer) = answer.filter(|_| !m.client_urls.is_empty()) else {
        return MemberHealth::Unhealthy("never started (no client URL)".into());
    };
    let Some(health) = &answer.health else {
        return match &answer.status {
            Ok(s) if s.iter().any(|s| s.leader != Id(0)) => MemberHealth::Healthy,
            Ok(_) => MemberHealth::Unhealthy("it knows no leader".into()),
            Err(e) => MemberHealth::Unhealthy(e.to_string()),
        };
    };
    match health {
        Ok(h) if h.iter().any(|h| h.healthy) => MemberHealth::Healthy,
        Ok(h) => MemberHealth::Unhealthy(
            h.iter()
                .map(|h| {
                    format!(
                        "{}: {}",
                        h.endpoint,
                        h.error.as_deref().unwrap_or("unhealthy")
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Err(e) => MemberHealth::Unhealthy(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(status: bool, healthy: bool, out_of_time: bool) -> MemberView {
        MemberView {
            id: Id(1),
            name: "etcd-1".into(),
            endpoint: "http://10.0.0.1:2379".into(),
            status: status.then(|| EndpointStatus {
                endpoint: "http://10.0.0.1:2379".into(),
                cluster_id: Id(9),
                member_id: Id(1),
                revision: 1,
                version: "3.5.16".into(),
                db_size: 1,
                db_size_in_use: Some(1),
                leader: Id(1),
                raft_index: 1,
                raft_term: 1,
                raft_applied_index: Some(1),
                is_learner: false,
                errors: Vec::new(),
            }),
            version: None,
            healthy,
            is_leader: false,
            is_self: false,
            problem: None,
            out_of_time,
        }
    }

    #[test]
    fn late_is_no_status_or_a_check_out_of_time_and_nothing_else() {
        assert!(view(false, false, false).answered_late());
        assert!(view(true, false, true).answered_late());
        assert!(!view(true, true, false).answered_late());
        assert!(!view(true, true, true).answered_late());
        assert!(!view(true, false, false).answered_late());
    }

    fn status(err: Option<etcd::ErrorKind>) -> Result<Vec<EndpointStatus>, EtcdError> {
        let url = ["http://10.88.0.12:2379".to_string()];
        match err {
            Some(kind) => Err(EtcdError::new(kind, "endpoint status", &url, "it said")),
            None => Ok(Vec::new()),
        }
    }

    fn entry(error: Option<&str>) -> Option<Result<Vec<EndpointHealth>, EtcdError>> {
        Some(Ok(vec![EndpointHealth {
            endpoint: "http://10.88.0.12:2379".into(),
            healthy: error.is_none(),
            took: String::new(),
            error: error.map(str::to_string),
        }]))
    }

    #[test]
    fn out_of_time_is_told_by_the_errors_kind() {
        use etcd::ErrorKind::{NoSpace, Other, Timeout, Unreachable};
        let url = ["http://10.88.0.12:2379".to_string()];
        let killed = |kind| {
            Some(Err(EtcdError::new(
                kind,
                "endpoint health",
                &url,
                "/opt/bin/etcdctl did not finish within 17 s and was killed",
            )))
        };
        let answer = |health, err| Answer {
            health,
            status: status(err),
        };
        // c4 under TCG: our kill at the deadline, and etcdctl's own deadline.
        assert!(answer(killed(Timeout), None).ran_out_of_time());
        assert!(answer(killed(Unreachable), None).ran_out_of_time());
        assert!(answer(entry(Some("context deadline exceeded")), None).ran_out_of_time());
        assert!(answer(None, Some(Timeout)).ran_out_of_time());
        // The same words under another kind are not lateness: the kind decides.
        assert!(!answer(killed(Other), None).ran_out_of_time());
        assert!(!answer(
            entry(Some("etcdserver: mvcc: database space exceeded")),
            None
        )
        .ran_out_of_time());
        assert!(!answer(None, Some(NoSpace)).ran_out_of_time());
        assert!(!answer(entry(None), None).ran_out_of_time());
        assert!(!answer(None, None).ran_out_of_time());
    }
}
