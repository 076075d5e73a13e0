//! Known-bad etcd releases: the advisories `check`, `run`, `status` and `upgrade` know
//! about, as one data file, [`advisories.toml`](../../src/shared/advisories.toml)
//! (compiled in; a unit test parses it and checks every entry).
//!
//! Only statements the etcd maintainers published belong there, each with the releases it
//! covers, a [`Severity`] that says what etcd-setup does with it, and where it was
//! published. Versions are compared as `MAJOR.MINOR.PATCH`; a version that does not parse
//! has no advisory (the archive pass already decided it is a release).

use std::fmt;
use std::sync::OnceLock;

/// What etcd-setup does with an advisory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Data can be lost or differ between members: a warning everywhere, recorded by
    /// `run`, and refused with `iso.refuse_known_bad`.
    DataSafety,
    /// Below the releases etcd recommends for production (no published defect of its own
    /// beyond the others listed): a note.
    ProductionMinimum,
    /// A security advisory that applies to a node as etcd-setup runs it: a warning, recorded.
    Security,
    /// A security advisory that applies only with etcd's own authentication on, which
    /// etcd-setup never turns on: a note.
    AuthOnly,
    /// Matters on the way to the next minor release: a note, said by `upgrade`.
    UpgradePath,
}

impl Severity {
    /// The data file's name of it.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::DataSafety => "data-safety",
            Severity::ProductionMinimum => "production-minimum",
            Severity::Security => "security",
            Severity::AuthOnly => "auth-only",
            Severity::UpgradePath => "upgrade-path",
        }
    }

    /// A warning (shown as one, recorded by `run`), not a note.
    pub fn warns(self) -> bool {
        matches!(self, Severity::DataSafety | Severity::Security)
    }
}

/// One published advisory over a range of releases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advisory {
    /// A short stable name, e.g. `etcd-3.5-data-inconsistency`.
    pub id: String,
    /// The first release affected, inclusive.
    pub first: Version,
    /// The last release affected, inclusive.
    pub last: Version,
    /// What etcd-setup does with it.
    pub severity: Severity,
    /// One sentence: what is wrong and which release fixes it.
    pub summary: String,
    /// Where the maintainers published it.
    pub source: String,
}

/// The data file, as compiled in.
pub const DATA: &str = include_str!("advisories.toml");

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    advisory: Vec<Entry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    first: String,
    last: String,
    severity: Severity,
    summary: String,
    source: String,
}

/// Parses and checks an advisory file: versions `MAJOR.MINOR.PATCH`, `first <= last`,
/// ids unique, no field empty or holding a newline.
pub fn parse(text: &str) -> Result<Vec<Advisory>, String> {
    let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut out: Vec<Advisory> = Vec::new();
    for e in file.advisory {
        let version = |s: &str| {
            Version::parse(s).ok_or_else(|| format!("{}: {s:?} is not MAJOR.MINOR.PATCH", e.id))
        };
        let (first, last) = (version(&e.first)?, version(&e.last)?);
        if first > last {
            return Err(format!("{}: first {first} is after last {last}", e.id));
        }
        for (name, v) in [
            ("id", &e.id),
            ("summary", &e.summary),
            ("source", &e.source),
        ] {
            if v.trim().is_empty() || v.contains(['\n', '\r']) {
                return Err(format!("{}: {name} is empty or holds a newline", e.id));
            }
        }
        if out.iter().any(|a| a.id == e.id) {
            return Err(format!("{}: the id is used twice", e.id));
        }
        out.push(Advisory {
            id: e.id,
            first,
            last,
            severity: e.severity,
            summary: e.summary,
            source: e.source,
        });
    }
    Ok(out)
}

/// The table, parsed from [`DATA`] once. The file is part of the program (a unit test
/// parses it), so a parse failure here is a bug of the build.
pub fn table() -> &'static [Advisory] {
    static TABLE: OnceLock<Vec<Advisory>> = OnceLock::new();
    TABLE.get_or_init(|| {
        #[allow(clippy::expect_used)]
        parse(DATA).expect("src/shared/advisories.toml parses (unit-tested)")
    })
}

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
    /// [`Advisory::severity`] (`data-safety`, `production-minimum`, `security`,
    /// `auth-only`, `upgrade-path`); empty in a record written before it was kept.
    #[serde(default)]
    pub severity: String,
}

impl From<&Advisory> for AdvisoryRecord {
    fn from(a: &Advisory) -> AdvisoryRecord {
        AdvisoryRecord {
            id: a.id.clone(),
            summary: a.summary.clone(),
            source: a.source.clone(),
            severity: a.severity.as_str().to_string(),
        }
    }
}

/// The warnings covering `version` as records.
pub fn records(version: &str) -> Vec<AdvisoryRecord> {
    for_version(version)
        .into_iter()
        .map(AdvisoryRecord::from)
        .collect()
}

/// The notes covering `version` as records.
pub fn note_records(version: &str) -> Vec<AdvisoryRecord> {
    notes(version)
        .into_iter()
        .map(AdvisoryRecord::from)
        .collect()
}

/// Every entry covering `version`, warnings and notes (empty for an unparsable version).
pub fn covering(version: &str) -> Vec<&'static Advisory> {
    let Some(v) = Version::parse(version) else {
        return Vec::new();
    };
    table()
        .iter()
        .filter(|a| a.first <= v && v <= a.last)
        .collect()
}

/// The warnings covering `version` ([`Severity::warns`]; empty for an unknown or
/// unparsable version).
pub fn for_version(version: &str) -> Vec<&'static Advisory> {
    covering(version)
        .into_iter()
        .filter(|a| a.severity.warns())
        .collect()
}

/// The notes covering `version`: below etcd's production minimum, advisories that apply
/// only with etcd's authentication on, and those on the way to the next minor release.
pub fn notes(version: &str) -> Vec<&'static Advisory> {
    covering(version)
        .into_iter()
        .filter(|a| !a.severity.warns())
        .collect()
}

/// The operator lines for `version`'s warnings, one per advisory.
pub fn lines(version: &str) -> Vec<String> {
    for_version(version)
        .iter()
        .map(|a| a.line(version))
        .collect()
}

/// The operator lines for `version`'s notes, one per advisory.
pub fn note_lines(version: &str) -> Vec<String> {
    notes(version).iter().map(|a| a.line(version)).collect()
}

/// The upgrade-path notes of `installed` that matter on the step to `new` (a minor step).
pub fn before_step(installed: Version, new: Version) -> Vec<String> {
    if (new.major, new.minor) == (installed.major, installed.minor) {
        return Vec::new();
    }
    let v = installed.to_string();
    notes(&v)
        .into_iter()
        .filter(|a| a.severity == Severity::UpgradePath)
        .map(|a| a.line(&v))
        .collect()
}

/// What `run` and `upgrade` do with `version`: its warning lines (to record and show),
/// or `known-bad-release` when it has a data-safety advisory and `refuse`
/// (`iso.refuse_known_bad`) is on.
pub fn gate(version: &str, refuse: bool) -> Result<Vec<String>, crate::reason::Failure> {
    let found = lines(version);
    let data_safety = for_version(version)
        .iter()
        .any(|a| a.severity == Severity::DataSafety);
    if refuse && data_safety {
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
    fn the_data_file_parses_and_every_entry_is_sound() {
        let t = parse(DATA).unwrap();
        assert!(t.len() >= 8, "{t:?}");
        assert_eq!(table(), t.as_slice());
        for a in &t {
            assert!(a.first <= a.last, "{a:?}");
            assert!(a.source.contains("etcd"), "{a:?}");
        }
        // A broken entry is caught with its id.
        let bad = "[[advisory]]\nid = \"x\"\nfirst = \"3.5.9\"\nlast = \"3.5.1\"\n\
                   severity = \"data-safety\"\nsummary = \"s\"\nsource = \"etcd\"\n";
        assert!(parse(bad)
            .unwrap_err()
            .contains("x: first 3.5.9 is after last 3.5.1"));
        assert!(parse(&bad.replace("data-safety", "scary")).is_err());
        assert!(parse(&bad.replace("3.5.9", "3.5"))
            .unwrap_err()
            .contains("not MAJOR"));
    }

    #[test]
    fn each_release_range_gets_its_entries() {
        let ids = |v: &str| -> Vec<String> { covering(v).iter().map(|a| a.id.clone()).collect() };
        assert!(ids("3.5.16").contains(&"etcd-3.5-learner-promotion-before-3.6".to_string()));
        assert!(ids("3.5.20").contains(&"etcd-3.5-zombie-members-before-3.6".to_string()));
        assert!(!ids("3.5.20").contains(&"etcd-3.5-learner-promotion-before-3.6".to_string()));
        assert!(ids("3.5.4").contains(&"etcd-3.5-below-production-minimum".to_string()));
        assert!(ids("3.4.9").contains(&"etcd-3.4-security-2020".to_string()));
        assert!(ids("3.4.21").contains(&"etcd-3.4-below-production-minimum".to_string()));
        // The release the CloudStack notes recommend has none at all.
        assert!(covering("3.5.30").is_empty(), "{:?}", ids("3.5.30"));
        assert!(covering("3.4.44").is_empty(), "{:?}", ids("3.4.44"));
        // Notes are not warnings: 3.5.16 warns of nothing, and the gate does not refuse it.
        assert!(lines("3.5.16").is_empty());
        assert!(note_lines("3.5.16").len() >= 2);
        assert!(gate("3.5.16", true).unwrap().is_empty());
        // A warning that is not data safety is shown but not refused; a note is neither.
        assert_eq!(gate("3.4.9", true).unwrap().len(), 1, "security");
        assert!(gate("3.5.4", true).unwrap().is_empty());
        assert_eq!(note_lines("3.5.4").len(), 4, "{:?}", note_lines("3.5.4"));
    }

    #[test]
    fn upgrade_path_notes_are_said_on_a_minor_step_only() {
        let (v3516, v365) = (Version::new(3, 5, 16), Version::new(3, 6, 5));
        let said = before_step(v3516, v365);
        assert!(
            said.iter().any(|l| l.contains("too many learner member")),
            "{said:?}"
        );
        assert!(before_step(v3516, Version::new(3, 5, 30)).is_empty());
        assert!(before_step(Version::new(3, 5, 30), v365).is_empty());
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
