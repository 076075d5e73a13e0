//! What `etcd-setup maintain` prints, read back by the tests that run it on loopback
//! members and on node VMs.
#![allow(dead_code)] // each test binary uses its own part of the support

/// One `defragmented NAME (ROLE) URL: A MiB -> B MiB in S s [START..END]` line (START and
/// END in Unix milliseconds).
#[derive(Debug, Clone)]
pub struct Defrag {
    /// The member's name.
    pub name: String,
    /// `leader` or `follower`.
    pub role: String,
    /// When its defragmentation began.
    pub start: u128,
    /// When it ended.
    pub end: u128,
}

/// Every defragmentation `maintain` reported in `stdout`.
pub fn defrags(stdout: &str) -> Vec<Defrag> {
    stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("defragmented ")?;
            let (name, rest) = rest.split_once(" (")?;
            let (role, _) = rest.split_once(')')?;
            let (_, times) = l.rsplit_once('[')?;
            let (a, b) = times.trim_end_matches(']').split_once("..")?;
            Some(Defrag {
                name: name.into(),
                role: role.into(),
                start: a.parse().ok()?,
                end: b.parse().ok()?,
            })
        })
        .collect()
}
