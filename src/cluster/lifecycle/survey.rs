//! Asking the cluster what it looks like: the member list from every peer that answers,
//! and the health of every member that list names. One bounded round; nothing changes.

use super::node::Node;
use crate::cluster::etcd::{self, EtcdError, Id, MemberList};

/// How one member is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberHealth {
    /// It answered a health check (voters: a linearizable read; learners, which serve
    /// none: an endpoint status with a known leader).
    Healthy,
    /// It did not: why.
    Unhealthy(String),
}

/// What the cluster answered in one round.
#[derive(Debug, Clone)]
pub struct Survey {
    /// Each client URL asked, with its member list or why it gave none.
    pub peers: Vec<(String, Result<MemberList, EtcdError>)>,
    /// The health of each member of the first member list, by ID.
    pub health: Vec<(Id, MemberHealth)>,
    /// The peers that gave no member list but answered `endpoint status` (which is
    /// served without a leader): a cluster that lost its quorum.
    pub statuses: Vec<etcd::EndpointStatus>,
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
}

/// Asks `urls` for the member list (all at once), then every member of the first list
/// for its health (all at once). `skip` members are not asked (this node while its etcd
/// is stopped).
pub fn survey(node: &Node, urls: Vec<String>, skip: &[Id]) -> Survey {
    let peers = etcd::each_endpoint(&node.client(urls), |c| c.member_list());
    let mut survey = Survey {
        peers,
        health: Vec::new(),
        statuses: Vec::new(),
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
    let health = std::thread::scope(|s| {
        let handles: Vec<_> = list
            .members
            .iter()
            .filter(|m| !skip.contains(&m.id))
            .map(|m| {
                let m = m.clone();
                let client = node.client(m.client_urls.clone());
                s.spawn(move || (m.id, member_health(&m, &client)))
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().ok())
            .collect::<Vec<_>>()
    });
    survey.health = health;
    survey
}

fn member_health(m: &etcd::Member, client: &etcd::Client) -> MemberHealth {
    if m.client_urls.is_empty() {
        return MemberHealth::Unhealthy("never started (no client URL)".into());
    }
    if m.is_learner {
        return match client.endpoint_status() {
            Ok(s) if s.iter().any(|s| s.leader != Id(0)) => MemberHealth::Healthy,
            Ok(_) => MemberHealth::Unhealthy("it knows no leader".into()),
            Err(e) => MemberHealth::Unhealthy(e.to_string()),
        };
    }
    match client.endpoint_health() {
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
