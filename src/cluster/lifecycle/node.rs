//! What joining, leaving and the day-2 commands need to know about this node, taken from
//! the settings through `crate::member::ThisMember` (`Node::from_settings`, beside it in
//! `member/this.rs`; or built directly by tests): its name and peer
//! URLs, the initial cluster and token, the client port and TLS, the data dir, the
//! installed etcdctl; and the clients that ask this member or its peers.

use crate::cluster::etcd::{self, Client, Id};
use crate::shared::config::{scheme, TlsFiles};
use std::path::PathBuf;

/// This node as a member of its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `node.name`: the member name.
    pub name: String,
    /// Its own peer URLs (`--initial-advertise-peer-urls`).
    pub peer_urls: Vec<String>,
    /// `etcd.initial_cluster`: every member as (name, peer URL).
    pub initial_cluster: Vec<(String, String)>,
    /// `etcd.cluster_token`.
    pub token: String,
    /// `etcd.client_port`: the members' client port (each member's client URL is its
    /// peer host with this port).
    pub client_port: u16,
    /// The client side of TLS; `None` is plain http.
    pub client_tls: Option<TlsFiles>,
    /// `etcd.data_dir`.
    pub data_dir: PathBuf,
    /// The installed etcdctl.
    pub etcdctl: PathBuf,
}

/// What this node's data dir holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// Nothing: no `member/`.
    Empty,
    /// etcd's data, whose newest revision is this when it could be read.
    Held(Option<i64>),
}

impl Node {
    /// The cluster ID etcd computed when it bootstrapped from this configuration.
    pub fn expected_cluster_id(&self) -> Id {
        etcd::cluster_id(&self.initial_cluster, &self.token)
    }

    /// Whether `url` is one of this node's peer URLs.
    pub fn is_own_peer_url(&self, url: &str) -> bool {
        self.peer_urls.iter().any(|u| u == url)
    }

    /// The client URL of the member at `peer_url`: its host with the client port, https
    /// when client TLS is configured. `None` when the URL has no host.
    pub fn client_url_of(&self, peer_url: &str) -> Option<String> {
        let rest = peer_url.split_once("://").map_or(peer_url, |(_, r)| r);
        let hostport = rest.split('/').next().unwrap_or("");
        let host = if let Some(end) = hostport.strip_prefix('[').and_then(|h| h.find(']')) {
            &hostport[..end + 2]
        } else {
            hostport.rsplit_once(':').map_or(hostport, |(h, _)| h)
        };
        if host.is_empty() {
            return None;
        }
        Some(format!(
            "{}://{host}:{}",
            scheme(self.client_tls.is_some()),
            self.client_port
        ))
    }

    /// The client URLs of the other members of `initial_cluster`.
    pub fn peer_client_urls(&self) -> Vec<String> {
        let mut urls: Vec<String> = self
            .initial_cluster
            .iter()
            .filter(|(name, url)| *name != self.name && !self.is_own_peer_url(url))
            .filter_map(|(_, url)| self.client_url_of(url))
            .collect();
        urls.dedup();
        urls
    }

    /// This node's own client URL (its first peer URL's host with the client port).
    pub fn own_client_url(&self) -> Option<String> {
        self.peer_urls.first().and_then(|u| self.client_url_of(u))
    }

    /// A client of this member only, at its own client URL (none when its peer URL has no
    /// host, which config does not let through).
    pub fn own_client(&self) -> Client {
        self.client(self.own_client_url().into_iter().collect())
    }

    /// A client of `endpoints` with this node's etcdctl and TLS.
    pub fn client(&self, endpoints: Vec<String>) -> Client {
        Client::new(self.etcdctl.clone(), endpoints, self.client_tls.clone())
    }

    /// Whether the data dir holds etcd data (`member/` inside it).
    pub fn has_data(&self) -> bool {
        self.data_dir.join("member").exists()
    }

    /// What the data dir holds: nothing, or etcd's data with the newest revision of its
    /// database (`member/snap/db`: the last key of its `key` bucket, read down the tree's
    /// edge; `None` when it cannot be read). Read while etcd is stopped, before a join.
    pub fn data(&self) -> Data {
        if !self.has_data() {
            return Data::Empty;
        }
        let db = self.data_dir.join("member/snap/db");
        let revision = crate::shared::bolt::Db::open(&db)
            .and_then(|d| d.last_key(b"key"))
            .ok()
            .flatten()
            .and_then(|k| <[u8; 8]>::try_from(k.get(..8)?).ok())
            .map(i64::from_be_bytes);
        Data::Held(revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(tls: bool) -> Node {
        Node {
            name: "etcd-1".into(),
            peer_urls: vec!["http://10.1.1.11:2380".into()],
            initial_cluster: vec![
                ("etcd-1".into(), "http://10.1.1.11:2380".into()),
                ("etcd-2".into(), "http://10.1.1.12:2380".into()),
                ("etcd-3".into(), "http://[fd00::13]:2380".into()),
            ],
            token: "tok".into(),
            client_port: 2379,
            client_tls: tls.then(|| TlsFiles {
                cert: "/c".into(),
                key: "/k".into(),
                trusted_ca: "/ca".into(),
            }),
            data_dir: "/var/lib/etcd".into(),
            etcdctl: "/opt/bin/etcdctl".into(),
        }
    }

    #[test]
    fn the_other_members_client_urls_are_their_peer_hosts_with_the_client_port() {
        assert_eq!(
            node(false).peer_client_urls(),
            ["http://10.1.1.12:2379", "http://[fd00::13]:2379"]
        );
        assert_eq!(
            node(true).peer_client_urls(),
            ["https://10.1.1.12:2379", "https://[fd00::13]:2379"]
        );
        assert_eq!(
            node(false).own_client_url().as_deref(),
            Some("http://10.1.1.11:2379")
        );
        assert_eq!(node(false).client_url_of("http://:2380"), None);
    }
}
