//! Known-bad etcd releases: the advisories `check`, `run`, `status` and `upgrade` know
//! about, as one data file, [`advisories.toml`](../../src/shared/advisories.toml)
//! (compiled in; a unit test parses it and checks every entry), and the operator's file of
//! the same format beside the configuration file ([`load_operator_file`]: the next
//! advisory needs no new agent). The operator's entries come first; one with the id of a
//! compiled entry replaces it.
//!
//! Only statements the etcd maintainers published belong there, each with the releases it
//! covers, a [`Severity`] that says what etcd-setup does with it, and where it was
//! published. Versions are compared as `MAJOR.MINOR.PATCH`; a version that does not parse
//! has no advisory (the archive pass already decided it is a release).

use std::fmt;
use std::path::Path;
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
    /// A published defect that can stop etcd or keep a member from starting, as
    /// etcd-setup runs it: a warning, recorded.
    Availability,
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
            Severity::Availability => "availability",
            Severity::UpgradePath => "upgrade-path",
        }
    }

    /// A warning (shown as one, recorded by `run`), not a note.
    pub fn warns(self) -> bool {
        matches!(
            self,
            Severity::DataSafety | Severity::Security | Severity::Availability
        )
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

/// The compiled table, parsed from [`DATA`] once. The file is part of the program (a unit
/// test parses it), so a parse failure here is a bug of the build.
pub fn compiled() -> &'static [Advisory] {
    static TABLE: OnceLock<Vec<Advisory>> = OnceLock::new();
    TABLE.get_or_init(|| {
        #[allow(clippy::expect_used)]
        parse(DATA).expect("src/shared/advisories.toml parses (unit-tested)")
    })
}

/// The operator's file's name, beside the configuration file
/// (`/etc/etcd-setup/advisories.toml` on a node).
pub const OPERATOR_FILE: &str = "advisories.toml";

/// The largest operator file read.
const MAX_OPERATOR_FILE: u64 = 1 << 20;

static OPERATOR: OnceLock<Vec<Advisory>> = OnceLock::new();

/// Reads the operator's advisories at `path` for the rest of the process (the first load
/// counts); a missing file adds none. The file must be a regular file of at most 1 MiB,
/// owned by root or by the user running, that neither its group nor others may write (it
/// decides what `iso.refuse_known_bad` refuses), and parse as the compiled file does
/// ([`parse`]). Returns how many entries it holds; the error names the file and, for an
/// entry, its id.
pub fn load_operator_file(path: &Path) -> Result<usize, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let shown = path.display();
    // Non-blocking: a FIFO put there cannot hold the command.
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let _ = OPERATOR.set(Vec::new());
            return Ok(0);
        }
        Err(e) => return Err(format!("{shown}: cannot open: {e}")),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("{shown}: cannot stat: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown}: is not a regular file"));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "{shown}: is owned by uid {}, not root; chown root:root it",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "{shown}: has mode {mode:04o}; others may write it (chmod 0644 it)"
        ));
    }
    let mut text = String::new();
    file.take(MAX_OPERATOR_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{shown}: cannot read as UTF-8 text: {e}"))?;
    if text.len() as u64 > MAX_OPERATOR_FILE {
        return Err(format!("{shown}: is larger than 1 MiB"));
    }
    let entries = parse(&text).map_err(|e| format!("{shown}: {e}"))?;
    let n = entries.len();
    let _ = OPERATOR.set(entries);
    Ok(n)
}

/// Every advisory known: the operator's first, then the compiled ones whose id the
/// operator's file does not hold.
pub fn table() -> Vec<&'static Advisory> {
    let operator: &'static [Advisory] = OPERATOR.get().map_or(&[], Vec::as_slice);
    operator
        .iter()
        .chain(
            compiled()
                .iter()
                .filter(|a| !operator.iter().any(|o| o.id == a.id)),
        )
        .collect()
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
        .into_iter()
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

    fn ids(v: &str, of: fn(&str) -> Vec<&'static Advisory>) -> Vec<&'static str> {
        of(v).iter().map(|a| a.id.as_str()).collect()
    }

    #[test]
    fn warns_of_each_published_defect_and_of_nothing_on_the_fixed_releases() {
        assert_eq!(
            ids("3.5.1", for_version),
            [
                "etcd-3.5-data-inconsistency",
                "etcd-3.5-tls-handshake-dos",
                "etcd-3.5-snapshot-defrag-corruption",
                "etcd-3.5-stale-reads-after-pause"
            ]
        );
        assert_eq!(
            ids("3.5.30", for_version),
            ["etcd-3.5-tls-handshake-dos"],
            "fixed in 3.5.33"
        );
        assert_eq!(
            ids("3.6.3", for_version),
            [
                "etcd-3.6-tls-handshake-dos",
                "etcd-3.6-snapshot-defrag-corruption",
                "etcd-3.6-stale-reads-after-pause",
                "etcd-3.6-learner-promotion-replay"
            ]
        );
        assert_eq!(ids("3.7.0", for_version), ["etcd-3.7-tls-handshake-dos"]);
        assert_eq!(ids("3.4.45", for_version), ["etcd-3.4-tls-handshake-dos"]);
        for good in [
            "3.5.33", "3.6.14", "3.6.16", "3.7.1", "3.7.3", "junk", "3.5", "",
        ] {
            assert!(for_version(good).is_empty(), "{good}");
        }
        // The releases a new cluster should take have no entry at all.
        for clean in ["3.5.33", "3.6.16", "3.7.3"] {
            assert!(
                covering(clean).is_empty(),
                "{clean}: {:?}",
                ids(clean, covering)
            );
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
        assert_eq!(gate("3.5.1", false).unwrap().len(), 4);
        let f = gate("3.5.1", true).unwrap_err();
        assert_eq!(f.code, crate::reason::ReasonCode::KnownBadRelease);
        assert!(f.message.contains("iso.refuse_known_bad"), "{f}");
        // A security or availability warning is shown, not refused.
        assert_eq!(gate("3.5.30", true).unwrap().len(), 1);
        assert_eq!(gate("3.6.3", false).unwrap().len(), 4);
        assert!(gate("3.6.3", true).is_err(), "data safety");
        assert!(gate("3.5.33", true).unwrap().is_empty());
    }

    #[test]
    fn the_data_file_parses_and_every_entry_is_sound() {
        let t = parse(DATA).unwrap();
        assert!(t.len() >= 8, "{t:?}");
        assert_eq!(compiled(), t.as_slice());
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
        let has = |v: &str, id: &str| ids(v, covering).contains(&id);
        assert!(has("3.5.16", "etcd-3.5-learner-promotion-before-3.6"));
        assert!(has("3.5.20", "etcd-3.5-zombie-members-before-3.6"));
        assert!(has("3.5.31", "etcd-3.5-zombie-members-before-3.6"));
        assert!(!has("3.5.32", "etcd-3.5-zombie-members-before-3.6"));
        assert!(!has("3.5.20", "etcd-3.5-learner-promotion-before-3.6"));
        assert!(has("3.5.4", "etcd-3.5-below-production-minimum"));
        assert!(has("3.4.9", "etcd-3.4-security-2020"));
        assert!(has("3.4.21", "etcd-3.4-below-production-minimum"));
        assert!(has("3.4.45", "etcd-3.4-end-of-life"));
        assert!(has("3.6.10", "etcd-3.6-2026-grpc-auth-bypass"));
        assert!(!has("3.6.11", "etcd-3.6-2026-grpc-auth-bypass"));
        // Notes are not warnings: 3.5.33 has none of either; 3.5.16's notes are not refused.
        assert!(note_lines("3.5.33").is_empty());
        assert!(note_lines("3.5.16").len() >= 2);
        assert!(gate("3.5.16", false)
            .unwrap()
            .iter()
            .all(|l| !l.contains("learner")));
        // A warning that is not data safety is shown but not refused; a note is neither.
        assert_eq!(
            gate("3.4.9", true).unwrap().len(),
            2,
            "two security warnings"
        );
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
        let said = before_step(Version::new(3, 5, 30), v365);
        assert!(
            said.iter().any(|l| l.contains("3.5.32 or later")),
            "{said:?}"
        );
        assert!(before_step(Version::new(3, 5, 33), Version::new(3, 6, 16)).is_empty());
    }

    /// An operator's file is refused, naming it, when another user could have written it,
    /// when it is not a file, and when an entry is unsound (naming the entry).
    #[test]
    fn an_operator_file_that_is_not_sound_is_refused_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(OPERATOR_FILE);
        let entry = "[[advisory]]\nid = \"mine\"\nfirst = \"3.6.16\"\nlast = \"3.6.16\"\n\
                     severity = \"data-safety\"\nsummary = \"s\"\nsource = \"etcd\"\n";
        std::fs::write(&path, entry).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = load_operator_file(&path).unwrap_err();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("mode 0666"),
            "{e}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&path, entry.replace("3.6.16\"\nsev", "3.6.1\"\nsev")).unwrap();
        let e = load_operator_file(&path).unwrap_err();
        assert!(e.contains("mine: first 3.6.16 is after last 3.6.1"), "{e}");
        std::fs::write(&path, "[[advisory]]\nid = \"x\"\nsevere = 1\n").unwrap();
        assert!(load_operator_file(&path)
            .unwrap_err()
            .contains(OPERATOR_FILE));
        let e = load_operator_file(dir.path()).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        // Nothing of it was taken.
        assert!(OPERATOR.get().is_none_or(Vec::is_empty));
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
