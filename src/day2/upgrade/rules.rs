//! The upgrade's rules, as etcd's upgrade guides state them: one minor version at a time,
//! never down; into a minor only from the minimum patch etcd's guide for that step names
//! ([`MINIMUMS`]); every member healthy; no two-member cluster (one member down is a lost
//! quorum); no member on a third release (another upgrade half done). Pure functions over
//! what the cluster survey saw, so every rule is unit-tested without etcd.
//!
//! | rule | code | function |
//! | --- | --- | --- |
//! | never down | `upgrade-downgrade` | [`versions`] |
//! | one minor at a time, never another major | `upgrade-too-far` | [`versions`] |
//! | every member at the step's minimum patch ([`MINIMUMS`]) | `upgrade-below-minimum` | [`minimum`] |
//! | more than two members | `upgrade-two-members` | [`cluster`] |
//! | every member healthy (before the lock: a quorum, the rest may be in their turn) | `upgrade-unhealthy` | [`cluster`], [`cluster_before_lock`] |
//! | no member on a third release | `upgrade-in-progress` | [`cluster`] |

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

/// One minor step that etcd's guide lets start only from a minimum patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Minimum {
    /// The minor moved from (`major.minor`, the patch ignored).
    pub from: (u32, u32),
    /// The minor moved to.
    pub to: (u32, u32),
    /// The lowest release of `from` every member must run before the step.
    pub at_least: Version,
    /// Why, and where etcd says so.
    pub source: &'static str,
}

/// The minimum patches, one row per minor step that has one, as etcd's upgrade guides
/// state them now (etcd's website repository, `content/en/docs/v3.6/upgrades/upgrade_3_6.md`
/// and `content/en/docs/v3.7/upgrades/upgrade_3_7.md`, read in December 2026).
///
/// 3.5 → 3.6: "make sure that all of your 3.5 members are updated to 3.5.32 or later.
/// Patch releases 3.5.24 through 3.5.32 fix several potential upgrade blockers including
/// `--v2-deprecation=write-only-skip-check` and `etcdutl check v2store` to inspect WAL
/// records as well as the v2 snapshot." The floor rose over time: 3.5.20 first (the "too
/// many learner member" failure, etcd-io/etcd#19557), then 3.5.26 (zombie members), then
/// 3.5.32 (3.5.30's `etcdutl check v2store` misses v2 content only in the WAL, which 3.6
/// then refuses at start: "detected disallowed v2 WAL").
///
/// 3.6 → 3.7: "make sure that all of your 3.6 members are updated to 3.6.11 or later.
/// Earlier 3.6 patch releases may not be compatible with a rolling upgrade to 3.7."
pub const MINIMUMS: &[Minimum] = &[
    Minimum {
        from: (3, 5),
        to: (3, 6),
        at_least: Version::new(3, 5, 32),
        source:
            "etcd's 3.5 -> 3.6 upgrade guide (etcd.io/docs/v3.6/upgrades/upgrade_3_6, \"Update 3.5\")",
    },
    Minimum {
        from: (3, 6),
        to: (3, 7),
        at_least: Version::new(3, 6, 11),
        source: "etcd's 3.6 -> 3.7 upgrade guide (etcd.io/docs/v3.7/upgrades/upgrade_3_7)",
    },
];

/// The minimum `installed` → `new` needs, if the step has one.
pub fn minimum_for(installed: Version, new: Version) -> Option<&'static Minimum> {
    MINIMUMS
        .iter()
        .find(|m| (installed.major, installed.minor) == m.from && (new.major, new.minor) == m.to)
}

/// Every member not yet on `new` runs at least the step's minimum patch
/// (`upgrade-below-minimum` names those below it, and the patch upgrade to take first).
pub fn minimum(members: &[MemberView], installed: Version, new: Version) -> Result<(), Failure> {
    let Some(min) = minimum_for(installed, new) else {
        return Ok(());
    };
    let below: Vec<String> = members
        .iter()
        .filter_map(|m| {
            let v = m.version?;
            ((v.major, v.minor) == min.from && v < min.at_least)
                .then(|| format!("{} runs {v}", m.name))
        })
        .collect();
    if below.is_empty() {
        return Ok(());
    }
    Err(Failure::new(
        ReasonCode::UpgradeBelowMinimum,
        format!(
            "etcd {}.{} -> {new} needs every member on {} or later first ({}): {}; upgrade \
             every member to the newest {}.{} patch first (attach an ISO with {} or later and \
             run etcd-setup upgrade on each member), then to {new}",
            min.from.0,
            min.from.1,
            min.at_least,
            min.source,
            below.join(", "),
            min.from.0,
            min.from.1,
            min.at_least,
        ),
    ))
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
/// `installed` or `new` (`upgrade-in-progress` otherwise), every one at the step's
/// minimum patch ([`minimum`]).
pub fn cluster(members: &[MemberView], installed: Version, new: Version) -> Result<(), Failure> {
    if members.len() == 2 {
        return Err(Failure::new(
            ReasonCode::UpgradeTwoMembers,
            "the cluster has two members: while one restarts the other has no quorum; add a \
             third member (or go to one) before upgrading",
        ));
    }
    answering(members, installed, new)
}

/// [`cluster`] before the cluster lock is ours: a member that is down or unhealthy is let
/// through while a quorum of the members is healthy, and the other rules are asked of the
/// members that answered. Upgrades started on every node at once take turns under the
/// lock, so the member in its turn may be restarting right now (c4 under TCG: a slow
/// survey landed in another member's restart and was refused). Under the lock
/// [`cluster`] asks every rule of every member again, so a member down then still refuses.
pub fn cluster_before_lock(
    members: &[MemberView],
    installed: Version,
    new: Version,
) -> Result<(), Failure> {
    let answered: Vec<MemberView> = members
        .iter()
        .filter(|m| m.healthy && m.version.is_some())
        .cloned()
        .collect();
    let quorum = answered.len() * 2 > members.len();
    if members.len() == 2 || answered.len() == members.len() || !quorum {
        return cluster(members, installed, new);
    }
    answering(&answered, installed, new)
}

/// The rules past the member count: every one of `members` healthy, on `installed` or
/// `new`, at the step's minimum patch.
fn answering(members: &[MemberView], installed: Version, new: Version) -> Result<(), Failure> {
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
    minimum(members, installed, new)
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
            out_of_time: false,
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
        // Before the lock, one member down of three may be restarting in its turn: let
        // through; two down is no quorum, refused; under the lock, refused (above).
        cluster_before_lock(&three, old, new).unwrap();
        three[2].version = None;
        cluster_before_lock(&three, old, new).unwrap();
        three[1].healthy = false;
        assert_eq!(
            cluster_before_lock(&three, old, new).unwrap_err().code,
            ReasonCode::UpgradeUnhealthy
        );
        three[1].healthy = true;
        // The other rules still hold for the members that answered.
        three[1].version = Some(v("3.5.30"));
        assert_eq!(
            cluster_before_lock(&three, old, new).unwrap_err().code,
            ReasonCode::UpgradeInProgress
        );
        three[1].version = Some(v("3.5.16"));
        three[2].version = Some(v("3.4.23"));
        three[2].healthy = true;
        three[1].version = Some(v("3.5.30"));
        let f = cluster(&three, old, new).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeInProgress);
        assert!(f.message.contains("b runs 3.5.30"), "{f}");
        // One member: nothing to be kept up, a restart is the upgrade.
        cluster(&[member("a", "3.4.23", true, true)], old, new).unwrap();
    }

    #[test]
    fn rule_never_down() {
        assert_eq!(
            versions(v("3.6.0"), v("3.5.30")).unwrap_err().code,
            ReasonCode::UpgradeDowngrade
        );
    }

    #[test]
    fn rule_one_minor_at_a_time() {
        assert_eq!(versions(v("3.5.32"), v("3.6.5")).unwrap(), Step::Upgrade);
        assert_eq!(versions(v("3.6.16"), v("3.7.3")).unwrap(), Step::Upgrade);
        assert_eq!(
            versions(v("3.5.33"), v("3.7.3")).unwrap_err().code,
            ReasonCode::UpgradeTooFar
        );
        assert_eq!(
            versions(v("3.4.23"), v("3.6.5")).unwrap_err().code,
            ReasonCode::UpgradeTooFar
        );
    }

    #[test]
    fn rule_3_5_to_3_6_needs_every_member_on_the_minimum_patch() {
        let (min, new) = (v("3.5.32"), v("3.6.5"));
        assert_eq!(minimum_for(v("3.5.16"), new).unwrap().at_least, min);
        assert!(
            minimum_for(v("3.4.23"), v("3.5.16")).is_none(),
            "3.4 -> 3.5 has none"
        );
        assert!(
            minimum_for(v("3.5.16"), v("3.5.30")).is_none(),
            "a patch step has none"
        );
        // All three below: refused, each named, the minimum and the step to take first said.
        let mut ms = vec![
            member("a", "3.5.16", true, true),
            member("b", "3.5.16", false, false),
            member("c", "3.5.16", false, false),
        ];
        let f = cluster(&ms, v("3.5.16"), new).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeBelowMinimum);
        for s in [
            "a runs 3.5.16",
            "b runs 3.5.16",
            "c runs 3.5.16",
            "3.5.32 or later",
        ] {
            assert!(f.message.contains(s), "{s}: {f}");
        }
        assert!(f.message.contains("newest 3.5 patch first"), "{f}");
        assert!(f.message.contains("upgrade_3_6"), "{f}");
        // Exactly the minimum and above: allowed; a member already on 3.6 is not below.
        for m in &mut ms {
            m.version = Some(min);
        }
        cluster(&ms, min, new).unwrap();
        ms[1].version = Some(new);
        cluster(&ms, min, new).unwrap();
        for m in &mut ms {
            m.version = Some(v("3.5.33"));
        }
        cluster(&ms, v("3.5.33"), new).unwrap();
        // One member just below, the others over: that one alone is named. Debian's
        // 3.5.30 was let through while the floor was 3.5.26.
        ms[2].version = Some(v("3.5.30"));
        let f = minimum(&ms, v("3.5.33"), new).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeBelowMinimum);
        assert!(f.message.contains("c runs 3.5.30"), "{f}");
        assert!(!f.message.contains("a runs"), "{f}");
        // The rule is the 3.5 -> 3.6 step's: 3.4 -> 3.5 and patch steps pass it.
        minimum(
            &[member("a", "3.4.23", true, true)],
            v("3.4.23"),
            v("3.5.16"),
        )
        .unwrap();
        minimum(&[member("a", "3.5.1", true, true)], v("3.5.1"), v("3.5.30")).unwrap();
    }

    #[test]
    fn rule_3_6_to_3_7_needs_every_member_on_3_6_11() {
        let new = v("3.7.3");
        assert_eq!(minimum_for(v("3.6.5"), new).unwrap().at_least, v("3.6.11"));
        let mut ms = vec![
            member("a", "3.6.10", true, true),
            member("b", "3.6.10", false, false),
            member("c", "3.6.10", false, false),
        ];
        let f = cluster(&ms, v("3.6.10"), new).unwrap_err();
        assert_eq!(f.code, ReasonCode::UpgradeBelowMinimum);
        for s in [
            "b runs 3.6.10",
            "3.6.11 or later",
            "upgrade_3_7",
            "newest 3.6 patch",
        ] {
            assert!(f.message.contains(s), "{s}: {f}");
        }
        // The floor itself and later: allowed.
        for m in &mut ms {
            m.version = Some(v("3.6.11"));
        }
        cluster(&ms, v("3.6.11"), new).unwrap();
        ms[0].version = Some(new);
        cluster(&ms, v("3.6.11"), new).unwrap();
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
