//! The management server's view of three-node etcd clusters, on booted node VMs.
//!
//! Three VMs share a private layer-2 network of their own (support::net::Hub: unix
//! datagram sockets, no host interface, no other address), each configured by the
//! packaged cloud-config as one member of one new three-member cluster. The platform
//! attaches the Kubernetes ISO to one node after another; a driver polls every node over
//! SSH with `etcd-setup status --format json`, as the management server does, and prints
//! each node's timeline. Then: etcdctl sees three started members and a healthy cluster;
//! `status` against `systemctl is-active etcd` in the guest; etcd made to crash
//! repeatedly on one node. Then day 2 on the same cluster: that node is made anew in place
//! (nothing of etcd or etcd-setup left, the drive empty until the ISO is attached again)
//! with the same cloud-config and rejoins by itself, leaves again, a second leave is refused by the quorum guard, and that node, made fresh again
//! in place and configured with another cluster token, is refused. A TLS cluster refuses a
//! node made fresh in place with a foreign CA. A
//! third cluster has one node whose ISO lacks etcd (then mended), is upgraded from 3.4 to
//! 3.5, and goes through NOSPACE, maintenance and a restore (issue 12).
//!
//! One test per cluster, each booting its three nodes once, under the names (and so in
//! the order) they had when this was one file: the bed the clusters share
//! (`bed.rs`: nodes, the driver's polls, boot, ISO inserts, awaiting `running`; `pki.rs`:
//! a test CA), and each cluster's scenarios in a file of its own (`c1.rs`, `c3.rs`,
//! `c4.rs`).

#[path = "../support/mod.rs"]
mod support;

mod bed;
mod c1;
mod c3;
mod c4;
mod offsite;
mod pki;
mod rotation;

/// Cluster c1: formed, a crash loop, rejoin, leave, a foreign token ([`c1`]).
#[test]
fn three_nodes_form_a_cluster_and_a_crash_loop_is_reported() {
    c1::three_nodes_form_a_cluster_and_a_crash_loop_is_reported();
}

/// Cluster c3: mutual TLS, a node with a foreign CA refused ([`c3`]).
#[test]
fn a_tls_cluster_forms_and_a_node_with_a_foreign_ca_is_refused_by_its_peers() {
    c3::a_tls_cluster_forms_and_a_node_with_a_foreign_ca_is_refused_by_its_peers();
}

/// Cluster c4: day 2 from one boot ([`c4`]).
#[test]
fn c4_bad_iso_mended_upgrade_3_4_to_3_5_nospace_maintain_and_restore() {
    c4::c4_bad_iso_mended_upgrade_3_4_to_3_5_nospace_maintain_and_restore();
}
