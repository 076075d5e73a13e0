//! The cluster client: speaking etcd's API through the installed release ([`etcd`]),
//! etcd's own `/health` and version on the loopback metrics listener ([`health`]), the
//! member's role from etcd's JSON gateway on a plain client port ([`gateway`]), and a
//! member's life in its cluster, joining and leaving ([`lifecycle`]).

pub mod etcd;
pub mod gateway;
pub mod health;
pub mod lifecycle;
pub mod tls_peek;
