//! Known-bad etcd releases: the published data-safety advisories `check`, `run` and
//! `upgrade` know about, as one documented table.
//!
//! Only advisories the etcd maintainers published about data safety belong here, each
//! with the releases it covers and where it was published. Versions are compared as
//! `MAJOR.MINOR.PATCH`; a version that does not parse has no advisory (the archive pass
//! already decided it is a release).

use std::fmt;

/// One published advisory over a range of releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advisory {
    /// A short stable name, e.g. `etcd-3.5-data-inconsistency`.
    pub id: &'static str,
    /// The first release affected, inclusive.
    pub first: Version,
    /// The last release affected, inclusive.
    pub last: Version,
    /// One sentence: what is wrong and which release fixes it.
    pub summary: &'static str,
    /// Where the maintainers published it.
    pub source: &'static str,
}

/// The table. etcd's CHANGELOG/README.md ("v3.5 data corruption issue", etcd-io/etcd
/// issue 13766, the maintainers' announcement of March 2022): 3.5.0–3.5.2 under high load
/// can lose committed transactions on some members when etcd is killed; fixed in 3.5.3.
pub const TABLE: &[Advisory] = &[Advisory {
    id: "etcd-3.5-data-inconsistency",
    first: Version::new(3, 5, 0),
    last: Version::new(3, 5, 2),
    summary: "not recommended for production: data inconsistency (committed transactions \
              missing on some members after a kill under load), fixed in 3.5.3",
    source: "etcd CHANGELOG/README.md \"v3.5 data corruption issue\", etcd-io/etcd#13766",
}];

/// An etcd release number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl Version {
    /// `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Parses `3.5.16` (a leading `v` and a `-rc.1`-like suffix are allowed; the suffix is
    /// dropped). `None` for anything else.
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.trim().trim_start_matches('v');
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let mut next = || -> Option<u32> {
            let p = parts.next()?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 9 {
                return None;
            }
            p.parse().ok()
        };
        let v = Version::new(next()?, next()?, next()?);
        parts.next().is_none().then_some(v)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Advisory {
    /// The line operators see: `etcd 3.5.1: not recommended … (source: …)`.
    pub fn line(&self, version: &str) -> String {
        format!(
            "etcd {version}: {} [{}; source: {}]",
            self.summary, self.id, self.source
        )
    }
}

/// An advisory as `check`'s JSON (`advisories`) and status's JSON (`advisory_details`)
/// show it: the one shape of an advisory in a record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AdvisoryRecord {
    /// [`Advisory::id`].
    pub id: String,
    /// [`Advisory::summary`].
    pub summary: String,
    /// [`Advisory::source`].
    pub source: String,
}

impl From<&Advisory> for AdvisoryRecord {
    fn from(a: &Advisory) -> AdvisoryRecord {
        AdvisoryRecord {
            id: a.id.to_string(),
            summary: a.summary.to_string(),
            source: a.source.to_string(),
        }
    }
}

/// The advisories covering `version` as records.
pub fn records(version: &str) -> Vec<AdvisoryRecord> {
    for_version(version)
        .into_iter()
        .map(AdvisoryRecord::from)
        .collect()
}

/// The advisories covering `version` (empty for an unknown or unparsable version).
pub fn for_version(version: &str) -> Vec<&'static Advisory> {
    let Some(v) = Version::parse(version) else {
        return Vec::new();
    };
    TABLE
        .iter()
        .filter(|a| a.first <= v && v <= a.last)
        .collect()
}

/// The operator lines for `version`, one per advisory.
pub fn lines(version: &str) -> Vec<String> {
    for_version(version)
        .iter()
        .map(|a| a.line(version))
        .collect()
}

/// What `run` and `upgrade` do with `version`: its advisory lines (to record and show),
/// or `known-bad-release` when it has any and `refuse` (`iso.refuse_known_bad`) is on.
pub fn gate(version: &str, refuse: bool) -> Result<Vec<String>, crate::reason::Failure> {
    let found = lines(version);
    if refuse && !found.is_empty() {
        return Err(crate::reason::Failure::new(
            crate::reason::ReasonCode::KnownBadRelease,
            format!(
                "etcd {version} has a published data-safety advisory and iso.refuse_known_bad \
                 is on; attach an ISO with a fixed release"
            ),
        )
        .with_source(anyhow::anyhow!("{}", found.join("\n"))));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_3_5_0_to_3_5_2_and_nothing_around_them() {
        for bad in ["3.5.0", "3.5.1", "3.5.2", "v3.5.1"] {
            assert_eq!(for_version(bad).len(), 1, "{bad}");
        }
        for good in [
            "3.4.23", "3.5.3", "3.5.16", "3.5.30", "3.6.0", "junk", "3.5", "",
        ] {
            assert!(for_version(good).is_empty(), "{good}");
        }
    }

    #[test]
    fn the_line_names_the_fix_and_the_source() {
        let l = &lines("3.5.1")[0];
        assert!(
            l.starts_with("etcd 3.5.1: not recommended for production"),
            "{l}"
        );
        assert!(
            l.contains("fixed in 3.5.3") && l.contains("CHANGELOG"),
            "{l}"
        );
    }

    #[test]
    fn the_gate_refuses_a_known_bad_release_only_when_told_to() {
        assert_eq!(gate("3.5.1", false).unwrap().len(), 1);
        let f = gate("3.5.1", true).unwrap_err();
        assert_eq!(f.code, crate::reason::ReasonCode::KnownBadRelease);
        assert!(f.message.contains("iso.refuse_known_bad"), "{f}");
        assert!(gate("3.5.16", true).unwrap().is_empty());
    }

    #[test]
    fn versions_parse_strictly_and_order_numerically() {
        assert_eq!(Version::parse("3.5.16"), Some(Version::new(3, 5, 16)));
        assert_eq!(Version::parse("3.5.0-rc.1"), Some(Version::new(3, 5, 0)));
        assert_eq!(Version::parse("3.5.16.1"), None);
        assert_eq!(Version::parse("3.x.1"), None);
        assert!(Version::new(3, 5, 16) > Version::new(3, 5, 9));
    }
}
