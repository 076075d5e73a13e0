//! This member: its URLs, its metrics address and its tools, derived from [`Settings`] in
//! one place. etcd's environment file ([`crate::member::unit`]) advertises them, and every
//! command that asks this member (`run`'s health check, `status`, the day-2 commands,
//! joining and leaving through [`crate::cluster::lifecycle::Node`]) asks them.
//!
//! Why here and not in `cluster/`: the unit renders these addresses and lives in
//! `shared/`, which may not reach up into the cluster client; the cluster's `Node` takes
//! them from here and adds the clients.

use crate::cluster::lifecycle::Node;
use crate::shared::config::{scheme, url_host, Settings};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// This node's member as etcd is configured to be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThisMember {
    /// Its peer URL (`--initial-advertise-peer-urls`, `--listen-peer-urls`): the node IP
    /// with the peer port, https with peer TLS.
    pub peer_url: String,
    /// Its client URL (`--advertise-client-urls`): the node IP with the client port,
    /// https with client TLS. The URL its certificate is issued for, so the one every
    /// command asks (etcd also listens on loopback, but a certificate need not name it).
    pub client_url: String,
    /// The same port on 127.0.0.1, with the client side's scheme.
    pub loopback_client_url: String,
    /// The client URL's address, to probe whether etcd still listens.
    pub client_addr: SocketAddr,
    /// etcd's `/metrics` and `/health` on loopback, plain http: [`loopback_metrics`].
    pub metrics: SocketAddr,
    /// The Prometheus listener on the node IP (`etcd.prometheus_port`), when configured.
    pub prometheus: Option<SocketAddr>,
    /// The installed etcdctl.
    pub etcdctl: PathBuf,
    /// The installed etcdutl (3.5 and later; absent on 3.4).
    pub etcdutl: PathBuf,
}

/// etcd's `/metrics` and `/health` listener on loopback at `port` (`etcd.metrics_port`).
pub fn loopback_metrics(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
}

impl ThisMember {
    /// The member `s` describes.
    pub fn of(s: &Settings) -> ThisMember {
        let host = url_host(s.node_ip);
        let client = scheme(s.tls.client.is_some());
        ThisMember {
            peer_url: format!("{}://{host}:{}", scheme(s.tls.peer.is_some()), s.peer_port),
            client_url: format!("{client}://{host}:{}", s.client_port),
            loopback_client_url: format!("{client}://127.0.0.1:{}", s.client_port),
            client_addr: SocketAddr::new(s.node_ip, s.client_port),
            metrics: loopback_metrics(s.metrics_port),
            prometheus: s
                .data
                .prometheus_port
                .map(|p| SocketAddr::new(s.node_ip, p)),
            etcdctl: s.install_dir.join("etcdctl"),
            etcdutl: s.install_dir.join("etcdutl"),
        }
    }

    /// etcd's `--listen-client-urls`: the client URL, and loopback beside it (the same
    /// scheme: a plain http listener beside a TLS one would let any local process past
    /// client-certificate authentication).
    pub fn listen_client_urls(&self) -> String {
        if self.client_url == self.loopback_client_url {
            self.client_url.clone()
        } else {
            format!("{},{}", self.client_url, self.loopback_client_url)
        }
    }

    /// etcd's `--listen-metrics-urls`: always plain http (the health check asks `/health`
    /// without certificates), loopback and, when configured, Prometheus on the node IP.
    pub fn listen_metrics_urls(&self) -> String {
        // A socket address prints an IPv6 host in brackets, as a URL needs.
        match self.prometheus {
            None => format!("http://{}", self.metrics),
            Some(p) => format!("http://{},http://{p}", self.metrics),
        }
    }

    /// The tool for snapshot files: etcdutl when installed, else etcdctl (3.4 has no
    /// etcdutl; its etcdctl has `snapshot status|restore`).
    pub fn snapshot_tool(&self) -> &Path {
        if self.etcdutl.is_file() {
            &self.etcdutl
        } else {
            &self.etcdctl
        }
    }
}

impl Node {
    /// The node that `settings` describe, with the etcdctl `run` installed.
    pub fn from_settings(settings: &Settings) -> Node {
        let member = ThisMember::of(settings);
        Node {
            name: settings.node_name.clone(),
            peer_urls: vec![member.peer_url],
            initial_cluster: settings.initial_cluster.clone(),
            token: settings.cluster_token.clone(),
            client_port: settings.client_port,
            client_tls: settings.tls.client.clone(),
            data_dir: settings.data_dir.clone(),
            etcdctl: member.etcdctl,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_of_the_documented_configuration() {
        let s =
            crate::shared::config::parse(crate::shared::config::EXAMPLE, Path::new("example.toml"))
                .expect("the example parses");
        let m = ThisMember::of(&s);
        assert_eq!(m.peer_url, "https://10.1.1.11:2380");
        assert_eq!(m.client_url, "https://10.1.1.11:2379");
        assert_eq!(
            m.listen_client_urls(),
            "https://10.1.1.11:2379,https://127.0.0.1:2379"
        );
        assert_eq!(m.metrics, "127.0.0.1:2381".parse().unwrap());
        assert_eq!(m.etcdctl, PathBuf::from("/opt/bin/etcdctl"));
        assert_eq!(m.snapshot_tool(), Path::new("/opt/bin/etcdctl"));
    }
}

#[cfg(test)]
mod node_tests {
    use super::*;
    use crate::cluster::etcd;

    #[test]
    fn the_node_of_the_documented_configuration() {
        let s = crate::shared::config::parse(
            crate::shared::config::EXAMPLE,
            std::path::Path::new("example.toml"),
        )
        .expect("the example parses");
        let n = Node::from_settings(&s);
        assert_eq!(n.name, "etcd-1");
        assert_eq!(n.peer_urls, ["https://10.1.1.11:2380"]);
        assert_eq!(
            n.peer_client_urls(),
            ["https://10.1.1.12:2379", "https://10.1.1.13:2379"]
        );
        assert_eq!(n.etcdctl, PathBuf::from("/opt/bin/etcdctl"));
        assert_eq!(n.client_tls, s.tls.client);
        assert_eq!(
            n.expected_cluster_id(),
            etcd::cluster_id(&s.initial_cluster, "k8s-etcd-abc")
        );
    }
}
