//! Which cluster a snapshot file is of, as far as it can be known without etcd.
//!
//! etcd keeps no cluster ID in its database (it lives in the WAL, which a snapshot has
//! not), and `snapshot status` says only hash, revision and keys. What decides is the
//! content: the database's `members` bucket (read by [`super::bolt`]), the members the
//! cluster had, each with its ID. A member bootstrapped by `initial_cluster` has the ID
//! etcd derives from its peer URLs and the token (see `cluster::etcd::id`), and so has the
//! member a restore made: one of them in the snapshot means this configuration's cluster;
//! members that share neither an ID nor a peer URL with the configuration mean another
//! cluster. Members added later (joins) get IDs of their own; a snapshot whose members
//! share no ID but a peer URL with the configuration cannot be told apart from another
//! cluster on the same addresses, and is `Unknown`.
//!
//! The file's name (`etcd-snapshot-<cluster ID, 16 hex>-<member>-<time>-rev<N>.db`, as
//! `etcd-setup snapshot` and a backup's scratch copy are named) is only a hint, said
//! beside the verdict: anyone who can write a folder or a bucket can choose a name (issue
//! 38: another cluster's snapshot uploaded under this cluster's name was restored).

use crate::cluster::etcd::{cluster_id, member_id, Id};
use crate::shared::bolt::Db;
use crate::shared::config::Settings;
use std::path::Path;

/// What the snapshot's identity is, against this configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Of this configuration's cluster; how that is known.
    Same(String),
    /// Of another cluster: the sentence naming both.
    Other(String),
    /// Cannot be told: the sentence saying why (naming what is known).
    Unknown(String),
}

/// A member as etcd stores it in the `members` bucket (JSON).
#[derive(Debug, serde::Deserialize)]
struct Stored {
    id: u64,
    #[serde(rename = "peerURLs", default)]
    peer_urls: Vec<String>,
    #[serde(default)]
    name: String,
}

/// The cluster ID in the name of a file `etcd-setup snapshot` wrote, if it has one
/// (the strict grammar of [`crate::member::names`]).
pub fn cluster_in_name(file: &Path) -> Option<Id> {
    crate::member::names::parse(file.file_name()?.to_str()?)?
        .cluster
        .map(Id)
}

/// This configuration's members: name, ID, peer URLs.
fn configured(s: &Settings) -> Vec<(String, Id, Vec<String>)> {
    let mut by_name: Vec<(String, Vec<String>)> = Vec::new();
    for (name, url) in &s.initial_cluster {
        match by_name.iter_mut().find(|(n, _)| n == name) {
            Some((_, urls)) => urls.push(url.clone()),
            None => by_name.push((name.clone(), vec![url.clone()])),
        }
    }
    by_name
        .into_iter()
        .map(|(n, urls)| (n, member_id(&urls, &s.cluster_token), urls))
        .collect()
}

fn list(members: &[(String, Id, Vec<String>)]) -> String {
    let mut shown: Vec<String> = members
        .iter()
        .take(5)
        .map(|(n, id, urls)| format!("{n} ({id}, {})", urls.join(" ")))
        .collect();
    if members.len() > 5 {
        shown.push(format!("{} more", members.len() - 5));
    }
    shown.join(", ")
}

/// The members the snapshot's database holds.
fn members_of(file: &Path) -> Result<Vec<(String, Id, Vec<String>)>, String> {
    let db = Db::open(file)?;
    let Some(pairs) = db.bucket(b"members")? else {
        return Ok(Vec::new());
    };
    let mut v = Vec::new();
    for (key, value) in pairs.into_iter().take(1000) {
        let m: Stored = serde_json::from_slice(&value).map_err(|e| {
            format!(
                "member {} is not etcd's JSON ({e})",
                String::from_utf8_lossy(&key)
            )
        })?;
        v.push((
            crate::shared::printable::line(&m.name),
            Id(m.id),
            m.peer_urls
                .iter()
                .map(|u| crate::shared::printable::line(u))
                .collect(),
        ));
    }
    Ok(v)
}

/// Which cluster `file` is of, against `s`, by its content; the cluster its name
/// carries, if any, is said beside (and named as a mismatch when it disagrees).
pub fn of_snapshot(file: &Path, s: &Settings) -> Verdict {
    let ours_id = cluster_id(&s.initial_cluster, &s.cluster_token);
    let verdict = by_content(file, s);
    let Some(named) = cluster_in_name(file) else {
        return verdict;
    };
    let hint = if named == ours_id {
        format!("its name says cluster {named}, this configuration's")
    } else {
        format!("its name says cluster {named}")
    };
    match verdict {
        Verdict::Same(why) if named != ours_id => Verdict::Same(format!(
            "{why} (its name says cluster {named}, not {ours_id}: renamed or misnamed)"
        )),
        Verdict::Same(why) => Verdict::Same(why),
        Verdict::Other(why) => Verdict::Other(format!("{why}; {hint}, which is not proof")),
        Verdict::Unknown(why) => Verdict::Unknown(format!("{why}; {hint}, which is not proof")),
    }
}

/// [`of_snapshot`]'s verdict from the members bucket alone.
fn by_content(file: &Path, s: &Settings) -> Verdict {
    let ours = configured(s);
    let ours_id = cluster_id(&s.initial_cluster, &s.cluster_token);
    let this = format!(
        "this configuration's cluster {ours_id} (etcd.initial_cluster and etcd.cluster_token: \
         members {})",
        list(&ours)
    );
    let theirs = match members_of(file) {
        Ok(m) if m.is_empty() => {
            return Verdict::Unknown(format!(
                "cannot tell which cluster {} is of: it holds no member list",
                file.display()
            ))
        }
        Ok(m) => m,
        Err(e) => {
            return Verdict::Unknown(format!(
                "cannot tell which cluster {} is of: its member list cannot be read ({e})",
                file.display()
            ))
        }
    };
    if let Some((n, id, _)) = theirs
        .iter()
        .find(|(_, id, _)| ours.iter().any(|(_, o, _)| o == id))
    {
        return Verdict::Same(format!("it holds member {n} ({id}) of this configuration"));
    }
    // The ID etcd gave a cluster whose members are still its first ones.
    let mut ids: Vec<u64> = theirs.iter().map(|(_, id, _)| id.0).collect();
    ids.sort_unstable();
    let derived = {
        use sha1::{Digest, Sha1};
        let mut h = Sha1::new();
        for id in &ids {
            h.update(id.to_be_bytes());
        }
        let d = h.finalize();
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        Id(u64::from_be_bytes(b))
    };
    let shares_a_url = theirs.iter().any(|(_, _, urls)| {
        urls.iter()
            .any(|u| ours.iter().any(|(_, _, o)| o.contains(u)))
    });
    if shares_a_url {
        // Another token on the same addresses (clusters in networks of the same range),
        // or every member replaced since the cluster was made: the file cannot tell.
        return Verdict::Unknown(format!(
            "{} may be of another cluster: its members {} (cluster {derived} by those \
             members) have peer URLs of {this}, but none of its member IDs (another cluster \
             token, or every member replaced since the cluster was made)",
            file.display(),
            list(&theirs)
        ));
    }
    Verdict::Other(format!(
        "{} is a snapshot of another cluster (members {}; cluster {derived} by those \
         members), none of {this}",
        file.display(),
        list(&theirs)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_id_is_read_from_our_names_only() {
        assert_eq!(
            cluster_in_name(Path::new(
                "/s/etcd-snapshot-8e9e05c52164694d-m1-20261201T094500.123Z-rev4.db"
            )),
            Some(Id(0x8e9e_05c5_2164_694d))
        );
        for not in [
            "/s/etcd-snapshot-20261201T094500.123Z-rev4.db",
            "/s/etcd-snapshot-8e9e05c5216469-m1-x.db",
            "/s/backup-8e9e05c52164694d-m1.db",
            "/s/etcd-snapshot-8e9e05c52164694g-m1-x.db",
        ] {
            assert_eq!(cluster_in_name(Path::new(not)), None, "{not}");
        }
    }
}
