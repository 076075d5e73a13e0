//! etcd's JSON answers, 3.4 and 3.5, read into our own types: etcdctl's `-w json` output
//! and the JSON gateway's ([`crate::cluster::gateway`]) answers to the same calls.
//!
//! Both print the gRPC responses with the proto field names (`header.cluster_id`,
//! `dbSize`, `isLearner`, `ID`, `peerURLs`, `memberID`, `alarm`) and leave out fields at
//! their zero value (`name` of a member that never started, `isLearner` of a voter,
//! `clientURLs`, the whole `header` of an empty 3.4 `alarm list`), so every field but the
//! IDs is optional here. They differ in two spellings, and both are read: etcdctl (Go's
//! `encoding/json`) writes 64-bit integers as numbers and an alarm as its number
//! (`"alarm":1`); the gateway (protobuf's JSON mapping) writes 64-bit integers as strings
//! (`"dbSize":"20480"`) and an alarm as its enum name (`"alarm":"NOSPACE"`). IDs are
//! read exactly either way (serde_json reads integers without going through f64).

use super::id::{number, Id};
use serde::{Deserialize, Deserializer};
use std::fmt::Display;
use std::str::FromStr;

/// [`number`] of a field that may be absent (`None`, not zero).
fn some_number<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + FromStr,
    T::Err: Display,
{
    number(d).map(Some)
}

/// One member as `member list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Member {
    /// Its ID.
    #[serde(rename = "ID")]
    pub id: Id,
    /// Its name; empty while the member was added but never started.
    #[serde(default)]
    pub name: String,
    /// The URLs its peers reach it at.
    #[serde(rename = "peerURLs", default)]
    pub peer_urls: Vec<String>,
    /// The URLs clients reach it at; empty while it never started.
    #[serde(rename = "clientURLs", default)]
    pub client_urls: Vec<String>,
    /// A learner (non-voting) member.
    #[serde(rename = "isLearner", default)]
    pub is_learner: bool,
}

impl Member {
    /// Whether the member ever started and published itself. Publishing sets its client
    /// URLs (and its name): an initial member that never started has its name from
    /// `--initial-cluster` but no client URL; one added by `member add` has neither.
    pub fn is_started(&self) -> bool {
        !self.client_urls.is_empty()
    }
}

/// The header etcd puts on every response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub struct Header {
    /// The cluster's ID.
    pub cluster_id: Id,
    /// The member that answered.
    pub member_id: Id,
    /// The store's revision (absent from membership answers).
    #[serde(default, deserialize_with = "number")]
    pub revision: i64,
    /// The raft term.
    #[serde(default, deserialize_with = "number")]
    pub raft_term: u64,
}

/// The answer of `member list` (and the member part of `member add`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MemberList {
    /// Cluster and answering member.
    pub header: Header,
    /// Every member, learners included.
    #[serde(default)]
    pub members: Vec<Member>,
}

impl MemberList {
    /// The member with this ID.
    pub fn get(&self, id: Id) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// The member advertising `peer_url`, compared as etcd compares URLs (exactly).
    pub fn by_peer_url(&self, peer_url: &str) -> Option<&Member> {
        self.members
            .iter()
            .find(|m| m.peer_urls.iter().any(|u| u == peer_url))
    }

    /// The voting members.
    pub fn voters(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    /// etcd's `--initial-cluster` for a member joining this cluster: every member's
    /// `name=peerURL`, the member `new_id` under `new_name` (it has no name yet), in the
    /// order etcd lists them, exactly as `etcdctl member add` prints
    /// `ETCD_INITIAL_CLUSTER` (a member with no name yet appears as `=URL`: an `existing`
    /// start checks that it knows every member's peer URLs).
    pub fn initial_cluster_for(&self, new_id: Id, new_name: &str) -> String {
        let mut parts = Vec::new();
        for m in &self.members {
            let name = if m.id == new_id {
                new_name
            } else {
                m.name.as_str()
            };
            for u in &m.peer_urls {
                parts.push(format!("{name}={u}"));
            }
        }
        parts.join(",")
    }
}

/// The answer of `member add`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Added {
    /// Cluster and answering member.
    pub header: Header,
    /// The member just added.
    pub member: Member,
    /// The member list after the change.
    #[serde(default)]
    pub members: Vec<Member>,
}

impl Added {
    /// The member list after the change.
    pub fn list(&self) -> MemberList {
        MemberList {
            header: self.header,
            members: self.members.clone(),
        }
    }
}

/// One endpoint of `endpoint status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStatus {
    /// The client URL asked.
    pub endpoint: String,
    /// The cluster it belongs to.
    pub cluster_id: Id,
    /// The member that answered.
    pub member_id: Id,
    /// The store's revision.
    pub revision: i64,
    /// The server's version, e.g. `3.5.16`.
    pub version: String,
    /// The database file's size in bytes.
    pub db_size: u64,
    /// The part of it in use (etcd ≥ 3.4; `None` when the server does not say).
    pub db_size_in_use: Option<u64>,
    /// The leader's ID as this member sees it (0: no leader).
    pub leader: Id,
    /// The member's raft index.
    pub raft_index: u64,
    /// The raft term.
    pub raft_term: u64,
    /// The applied index (`None` when not reported).
    pub raft_applied_index: Option<u64>,
    /// The member is a learner (3.5 reports it; 3.4 omits it).
    pub is_learner: bool,
    /// Errors the member reports, e.g. `memberID:… alarm:NOSPACE`.
    pub errors: Vec<String>,
}

#[derive(Deserialize)]
struct RawEndpointStatus {
    #[serde(rename = "Endpoint")]
    endpoint: String,
    #[serde(rename = "Status")]
    status: RawStatus,
}

#[derive(Deserialize)]
struct RawStatus {
    header: Header,
    #[serde(default)]
    version: String,
    #[serde(rename = "dbSize", default, deserialize_with = "number")]
    db_size: u64,
    #[serde(rename = "dbSizeInUse", default, deserialize_with = "some_number")]
    db_size_in_use: Option<u64>,
    #[serde(default)]
    leader: Id,
    #[serde(rename = "raftIndex", default, deserialize_with = "number")]
    raft_index: u64,
    #[serde(rename = "raftTerm", default, deserialize_with = "number")]
    raft_term: u64,
    #[serde(rename = "raftAppliedIndex", default, deserialize_with = "some_number")]
    raft_applied_index: Option<u64>,
    #[serde(rename = "isLearner", default)]
    is_learner: bool,
    #[serde(default)]
    errors: Vec<String>,
}

/// One endpoint of `endpoint health`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EndpointHealth {
    /// The client URL asked.
    pub endpoint: String,
    /// Whether it answered a linearizable read in time.
    #[serde(rename = "health")]
    pub healthy: bool,
    /// How long it took, as etcdctl prints it (`1.09ms`).
    #[serde(default)]
    pub took: String,
    /// Why not, when not healthy.
    #[serde(default)]
    pub error: Option<String>,
}

/// An active alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alarm {
    /// The member that raised it.
    pub member_id: Id,
    /// What it is.
    pub kind: AlarmKind,
}

/// The alarm types of etcd's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmKind {
    /// The database reached its quota; the cluster takes no more writes.
    NoSpace,
    /// A member's data is corrupt.
    Corrupt,
    /// A type this agent does not know (its number).
    Other(i64),
}

impl AlarmKind {
    /// The name etcdctl prints (`NOSPACE`, `CORRUPT`).
    pub fn as_str(&self) -> String {
        match self {
            AlarmKind::NoSpace => "NOSPACE".into(),
            AlarmKind::Corrupt => "CORRUPT".into(),
            AlarmKind::Other(n) => format!("alarm type {n}"),
        }
    }
}

#[derive(Deserialize)]
struct RawAlarms {
    #[serde(default)]
    alarms: Vec<RawAlarm>,
}

#[derive(Deserialize)]
struct RawAlarm {
    #[serde(rename = "memberID")]
    member_id: Id,
    #[serde(default)]
    alarm: serde_json::Value,
}

/// A key and its value from `get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// The revision it was last changed at.
    pub mod_revision: i64,
}

#[derive(Deserialize)]
struct RawGet {
    #[serde(default)]
    kvs: Vec<RawKv>,
}

#[derive(Deserialize)]
struct RawKv {
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default, deserialize_with = "number")]
    mod_revision: i64,
}

/// Parses a `member list` answer.
pub fn member_list(json: &[u8]) -> Result<MemberList, String> {
    serde_json::from_slice(json).map_err(|e| e.to_string())
}

/// Parses a `member add` answer.
pub fn added(json: &[u8]) -> Result<Added, String> {
    serde_json::from_slice(json).map_err(|e| e.to_string())
}

/// Parses an `endpoint status` answer (one entry per endpoint that answered).
pub fn endpoint_status(json: &[u8]) -> Result<Vec<EndpointStatus>, String> {
    let raw: Vec<RawEndpointStatus> = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    Ok(raw
        .into_iter()
        .map(|r| from_raw(r.endpoint, r.status))
        .collect())
}

/// Parses the gateway's maintenance status of the member at `endpoint` (the `Status`
/// part of an `endpoint status` entry, alone).
pub fn status(endpoint: &str, json: &[u8]) -> Result<EndpointStatus, String> {
    let raw: RawStatus = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    Ok(from_raw(endpoint.to_string(), raw))
}

fn from_raw(endpoint: String, s: RawStatus) -> EndpointStatus {
    EndpointStatus {
        endpoint,
        cluster_id: s.header.cluster_id,
        member_id: s.header.member_id,
        revision: s.header.revision,
        version: s.version,
        db_size: s.db_size,
        db_size_in_use: s.db_size_in_use,
        leader: s.leader,
        raft_index: s.raft_index,
        raft_term: s.raft_term,
        raft_applied_index: s.raft_applied_index,
        is_learner: s.is_learner,
        errors: s.errors,
    }
}

/// Parses an `endpoint health` answer.
pub fn endpoint_health(json: &[u8]) -> Result<Vec<EndpointHealth>, String> {
    serde_json::from_slice(json).map_err(|e| e.to_string())
}

/// Parses an `alarm list` (or `alarm disarm`) answer.
pub fn alarms(json: &[u8]) -> Result<Vec<Alarm>, String> {
    let raw: RawAlarms = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    Ok(raw
        .alarms
        .into_iter()
        .map(|a| Alarm {
            member_id: a.member_id,
            kind: match &a.alarm {
                serde_json::Value::Number(n) if n.as_i64() == Some(1) => AlarmKind::NoSpace,
                serde_json::Value::Number(n) if n.as_i64() == Some(2) => AlarmKind::Corrupt,
                serde_json::Value::String(s) if s == "NOSPACE" => AlarmKind::NoSpace,
                serde_json::Value::String(s) if s == "CORRUPT" => AlarmKind::Corrupt,
                // The gateway's names of the other types (etcd's AlarmType enum).
                serde_json::Value::String(s) if s == "NONE" => AlarmKind::Other(0),
                other => AlarmKind::Other(other.as_i64().unwrap_or(-1)),
            },
        })
        .collect())
}

/// Parses a `get` answer; keys and values are base64 in etcdctl's JSON.
pub fn get(json: &[u8]) -> Result<Vec<KeyValue>, String> {
    let raw: RawGet = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    raw.kvs
        .into_iter()
        .map(|kv| {
            Ok(KeyValue {
                key: base64_decode(&kv.key)
                    .ok_or_else(|| format!("key {:?} is not base64", kv.key))?,
                value: base64_decode(&kv.value)
                    .ok_or_else(|| format!("value of {:?} is not base64", kv.key))?,
                mod_revision: kv.mod_revision,
            })
        })
        .collect()
}

/// Standard base64 with padding, as Go's `encoding/json` writes `[]byte`.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = n << 6 | val(c)?;
        }
        n <<= 6 * pad as u32;
        let b = n.to_be_bytes();
        out.extend_from_slice(&b[1..4 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests;
