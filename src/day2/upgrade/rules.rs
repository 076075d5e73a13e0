//! The upgrade's rules, as etcd's upgrade guides state them: one minor version at a time,
//! never down; every member healthy; no two-member cluster (one member down is a lost
//! quorum); no member on a third release (another upgrade half done). Pure functions over
//! what the cluster survey saw, so every rule is unit-tested without etcd.

pub use crate::cluster::lifecycle::survey::MemberView;
use crate::reason::{Failure, ReasonCode};
use crate::shared::advisory::Version;

/// What the versions say to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The new release is the installed one: nothing to do.
    Nothing,
    /// Upgrade from the installed release to the new one.
    Upgrade,
}

/// The step from `installed` to `new`: refuses a downgrade (`upgrade-downgrade`) and a
/// step of more than one minor version or to another major (`upgrade-too-far`).
pub fn versions(installed: Version, new: Version) -> Result<Step, Failure> {
    if new == installed {
        return Ok(Step::Nothing);
    }
    if new < installed {
        return Err(Failure::new(
            ReasonCode::UpgradeDowngrade,
            format!(
                "the attached ISO holds etcd {new}, older than the installed {installed}; etcd \
                 does not support downgrades: attach an ISO with {installed} or later"
            ),
        ));
    }
    if new.major != installed.major || new.minor > installed.minor + 1 {
        let next = Version::new(installed.major, installed.minor + 1, 0);
        return Err(Failure::new(
            ReasonCode::UpgradeTooFar,
            format!(
                "etcd {installed} -> {new} skips a minor version; etcd upgrades one minor \
                 version at a time: upgrade to the latest {}.{} patch first",
                next.major, next.minor
            ),
        ));
    }
    Ok(Step::Upgrade)
}

/// The cluster allows this member to move from `installed` to `new`: more than two
/// members (`upgrade-two-members`), every one healthy (`upgrade-unhealthy`), each on
/// `installed` or `new` (`upgrade-in-progress` otherwise).
pub fn cluster(members: &[MemberView], installed: Version, new: Version) -> Result<(), Failure> {
    if members.len() == 2 {
        return Err(Failure::new(
            ReasonCode::UpgradeTwoMembers,
            "the cluster has two members: while one restarts the other has no quorum; add a \
             third member (or go to one) before upgrading",
        ));
    }
    let sick: Vec<String> = members
        .iter()
        .filter(|m| !m.healthy || m.version.is_none())
        .map(|m| match &m.problem {
            Some(p) => format!("{} ({}: {p})", m.name, m.endpoint),
            None => format!("{} ({})", m.name, m.endpoint),
        })
        .collect();
    if !sick.is_empty() {
        return Err(Failure::new(
            ReasonCode::UpgradeUnhealthy,
            format!(
                "not every member is healthy: {}; heal the cluster before upgrading",
                sick.join(", ")
            ),
        ));
    }
    let other: Vec<String> = members
        .iter()
        .filter_map(|m| {
            let v = m.version?;
            (v != installed && v != new).then(|| format!("{} runs {v}", m.name))
        })
        .collect();
    if !other.is_empty() {
        return Err(Failure::new(
            ReasonCode::UpgradeInProgress,
            format!(
                "another upgrade is half done: {} (this member runs {installed}, the ISO holds \
                 {new}); finish that one first",
                other.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Whether this member must wait for its turn as the leader: it leads and another member
/// still runs the old release. The leader goes last.
pub fn leader_must_wait(members: &[MemberView], new: Version) -> bool {
    let me_leads = members.iter().any(|m| m.is_self && m.is_leader);
    me_leads
        && members
            .iter()
            .any(|m| !m.is_self && m.version.is_some_and(|v| v != new))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn member(name: &str, version: &str, leader: bool, me: bool) -> MemberView {
        MemberView {
            id: crate::cluster::etcd::Id(u64::from(name.as_bytes()[0])),
            name: name.into(),
            status: None,
            endpoint: format!("http://{name}:2379"),
            version: Version::parse(version),
            healthy: true,
            is_leader: leader,
            is_self: me,
            problem: None,
        }
    }

    #[test]
    fn one_minor_up_and_patches_pass_the_same_is_nothing() {
        assert_eq!(versions(v("3.4.23"), v("3.5.16")).unwrap(), Step::Upgrade);
        assert_eq!(versions(v("3.5.16"), v("3.5.30")).unwrap(), Step::Upgrade);
        assert_eq!(versions(v("3.5.16"), v("3.6.0")).unwrap(), Step::Upgrade);
        assert_eq!(versions(v("3.5.16"), v("3.5.16")).unwrap(), Step::Nothing);
    }

    #[test]
    fn a_downgrade_is_refused_with_its_code() {
        let f = versions(v("3.5.16"), v("3.4.23")).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeDowngrade);
        assert!(
            f.message.contains("3.4.23") && f.message.contains("3.5.16"),
            "{f}"
        );
        let f = versions(v("3.5.30"), v("3.5.16")).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeDowngrade);
    }

    #[test]
    fn two_minors_or_another_major_are_refused_with_their_code() {
        // A relabelled 3.6 release does not exist as a real one here: the rule is a
        // comparison of numbers.
        let f = versions(v("3.4.23"), v("3.6.0")).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeTooFar);
        assert!(f.message.contains("latest 3.5 patch"), "{f}");
        let f = versions(v("3.5.16"), v("4.0.0")).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeTooFar);
    }

    #[test]
    fn two_members_unhealthy_ones_and_a_third_version_are_refused() {
        let (old, new) = (v("3.4.23"), v("3.5.16"));
        let two = [
            member("a", "3.4.23", true, true),
            member("b", "3.4.23", false, false),
        ];
        assert_eq!(
            cluster(&two, old, new).unwrap_err().code,
            ReasonCode::UpgradeTwoMembers
        );
        let mut three = vec![
            member("a", "3.4.23", true, true),
            member("b", "3.5.16", false, false),
            member("c", "3.4.23", false, false),
        ];
        cluster(&three, old, new).unwrap();
        three[2].healthy = false;
        let f = cluster(&three, old, new).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeUnhealthy);
        assert!(f.message.contains("c (http://c:2379)"), "{f}");
        three[2].healthy = true;
        three[1].version = Some(v("3.5.30"));
        let f = cluster(&three, old, new).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeInProgress);
        assert!(f.message.contains("b runs 3.5.30"), "{f}");
        // One member: nothing to be kept up, a restart is the upgrade.
        cluster(&[member("a", "3.4.23", true, true)], old, new).unwrap();
    }

    #[test]
    fn the_leader_waits_until_every_other_member_runs_the_new_release() {
        let new = v("3.5.16");
        let mut ms = vec![
            member("a", "3.4.23", true, true),
            member("b", "3.5.16", false, false),
            member("c", "3.4.23", false, false),
        ];
        assert!(leader_must_wait(&ms, new));
        ms[2].version = Some(new);
        assert!(!leader_must_wait(&ms, new));
        ms[0].is_leader = false;
        ms[2].version = Some(v("3.4.23"));
        assert!(!leader_must_wait(&ms, new), "a follower never waits");
    }
}
