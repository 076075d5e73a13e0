//! Member and cluster IDs: 64-bit numbers, shown in hex as etcdctl shows them, read as
//! etcd's two JSON spellings write 64-bit integers ([`number`], which `json.rs` reads
//! its other integers with), and the cluster ID a configuration implies.
//!
//! etcd does not expose the cluster token of a running cluster, but it derives the
//! cluster ID from it at bootstrap (etcd's `membership` package, 3.4 and 3.5 alike): each
//! member's ID is the first 8 bytes (big-endian) of SHA-1 over its sorted peer URLs
//! concatenated, followed by the token; the cluster ID is the first 8 bytes of SHA-1 over
//! the sorted member IDs, each as 8 big-endian bytes. So the ID the peers report can be
//! compared with the one our `initial_cluster` and `cluster_token` give: equal means the
//! same bootstrap; different means another token or another initial member list. The ID
//! never changes after bootstrap (members come and go, the ID stays), so a cluster whose
//! members were replaced still matches.

use serde::{Deserialize, Deserializer};
use sha1::{Digest, Sha1};
use std::fmt;
use std::fmt::Display;
use std::str::FromStr;

/// A member's or a cluster's ID.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub u64);

/// A JSON number (etcdctl) or a decimal string (the gateway), read exactly.
impl<'de> serde::Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        number(d).map(Id)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

impl Id {
    /// Parses the hex form etcdctl prints and takes (`8e9e05c52164694d`).
    pub fn parse_hex(s: &str) -> Option<Id> {
        u64::from_str_radix(s.trim(), 16).ok().map(Id)
    }
}

/// The ID etcd gives a member bootstrapped with `peer_urls` in the cluster `token`.
pub fn member_id(peer_urls: &[String], token: &str) -> Id {
    let mut urls: Vec<&str> = peer_urls.iter().map(String::as_str).collect();
    urls.sort_unstable();
    let mut h = Sha1::new();
    for u in urls {
        h.update(u.as_bytes());
    }
    h.update(token.as_bytes());
    first_u64(&h.finalize())
}

/// The cluster ID etcd computes when `initial_cluster` (name, peer URL pairs; a name may
/// repeat for several URLs) bootstraps with `token`.
pub fn cluster_id(initial_cluster: &[(String, String)], token: &str) -> Id {
    let mut by_name: Vec<(&str, Vec<String>)> = Vec::new();
    for (name, url) in initial_cluster {
        match by_name.iter_mut().find(|(n, _)| n == name) {
            Some((_, urls)) => urls.push(url.clone()),
            None => by_name.push((name, vec![url.clone()])),
        }
    }
    let mut ids: Vec<u64> = by_name
        .iter()
        .map(|(_, urls)| member_id(urls, token).0)
        .collect();
    ids.sort_unstable();
    let mut h = Sha1::new();
    for id in ids {
        h.update(id.to_be_bytes());
    }
    first_u64(&h.finalize())
}

fn first_u64(digest: &[u8]) -> Id {
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    Id(u64::from_be_bytes(b))
}

/// A 64-bit integer written as a JSON number (etcdctl) or as a decimal string (the
/// gateway).
#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrString<T> {
    Number(T),
    String(String),
}

/// Reads a 64-bit integer that is a JSON number or a decimal string.
pub(super) fn number<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + FromStr,
    T::Err: Display,
{
    match NumberOrString::<T>::deserialize(d)? {
        NumberOrString::Number(n) => Ok(n),
        NumberOrString::String(s) => s
            .parse()
            .map_err(|e| serde::de::Error::custom(format!("{s:?} is no integer: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(n: &str, u: &str) -> (String, String) {
        (n.into(), u.into())
    }

    // Recorded from real etcd: 3.4.23 (Debian) bootstrapped as
    // n1=http://127.0.0.1:23424 with token "tok" reported member 4882207455511630925 and
    // cluster 4194641949231201594; 3.5.16 as n1=http://127.0.0.1:23517 reported member
    // 2669156212950936917 and cluster 11931292582570105337.
    #[test]
    fn ids_match_what_real_etcd_3_4_and_3_5_reported() {
        assert_eq!(
            member_id(&["http://127.0.0.1:23424".into()], "tok"),
            Id(4882207455511630925)
        );
        assert_eq!(
            cluster_id(&[pair("n1", "http://127.0.0.1:23424")], "tok"),
            Id(4194641949231201594)
        );
        assert_eq!(
            member_id(&["http://127.0.0.1:23517".into()], "tok"),
            Id(2669156212950936917)
        );
        assert_eq!(
            cluster_id(&[pair("n1", "http://127.0.0.1:23517")], "tok"),
            Id(11931292582570105337)
        );
    }

    #[test]
    fn another_token_or_member_list_gives_another_cluster_id() {
        let three = [
            pair("a", "http://10.0.0.1:2380"),
            pair("b", "http://10.0.0.2:2380"),
            pair("c", "http://10.0.0.3:2380"),
        ];
        let id = cluster_id(&three, "t1");
        assert_ne!(id, cluster_id(&three, "t2"));
        assert_ne!(id, cluster_id(&three[..2], "t1"));
        // The order of the file does not matter, as in etcd.
        let shuffled = [three[2].clone(), three[0].clone(), three[1].clone()];
        assert_eq!(id, cluster_id(&shuffled, "t1"));
    }

    #[test]
    fn ids_show_and_parse_as_etcdctl_hex() {
        let id = Id(4882207455511630925);
        assert_eq!(id.to_string(), "43c115d05188d44d");
        assert_eq!(Id::parse_hex("43c115d05188d44d"), Some(id));
        assert_eq!(Id::parse_hex("zz"), None);
    }
}
