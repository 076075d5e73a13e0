//! `etcd-setup backups [list]` and `etcd-setup backups verify [latest|NAME]`: the
//! cluster's backups in the `[backup]` bucket, and the proof that one restores.
//!
//! - `list`: the objects under `<prefix><cluster ID>/` whose names are ours
//!   ([`crate::backup::fetch::list`]), newest first, each with its time, member, revision,
//!   size, age and how it was verified (its metadata), in text or one JSON object.
//! - `verify`: the backup fetched, decrypted and proven in a root-only scratch copy
//!   ([`crate::backup::fetch::fetch`]: digests, etcd's trailer, `snapshot status` at the
//!   recorded revision, a trial restore), removed on every way out. Nothing on the node
//!   changes: etcd is not touched, no lock is taken. Its verdict on the object goes into
//!   `backup.json` for status. With `--if-configured` (the daily timer, on every node) a
//!   node that cannot verify ([`why_not_verifiable`]) says why and succeeds; any other
//!   runs the same verification.
//!
//! The cluster is the one this configuration makes (`etcd.initial_cluster` and
//! `etcd.cluster_token`, as `run` checks it), or `--cluster ID`. Every message names the
//! endpoint, bucket and object; no key, secret or identity is ever printed.

use super::frame::{self, Spec};
use crate::backup::fetch::{self, Listed, Proven, Which};
use crate::backup::s3::Client;
use crate::cli::{BackupsAction, BackupsArgs, Format};
use crate::reason::{Failure, ReasonCode};
use crate::shared::config::{BackupSettings, Settings};
use crate::shared::report::{rfc3339, Command};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// `[backup]` of `s`, or `config-invalid` naming the file.
pub fn settings<'a>(s: &'a Settings, config: &Path) -> Result<&'a BackupSettings, Failure> {
    s.backup.as_ref().ok_or_else(|| {
        Failure::new(
            ReasonCode::ConfigInvalid,
            format!(
                "{}: there is no [backup] table: name the bucket there (endpoint, bucket, key \
                 files; see /usr/share/doc/etcd-setup/examples/config.toml)",
                config.display()
            ),
        )
    })
}

/// The client of `b`'s bucket, its keys read from their files.
pub fn client(b: &BackupSettings) -> Result<Client, Failure> {
    Client::new(b, b.credentials()?)
}

/// `d` as an age: `45s`, `12min`, `3h 5min`, `2d 4h`.
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}min", s / 60),
        3600..86_400 => match (s % 3600) / 60 {
            0 => format!("{}h", s / 3600),
            m => format!("{}h {m}min", s / 3600),
        },
        _ => match (s % 86_400) / 3600 {
            0 => format!("{}d", s / 86_400),
            h => format!("{}d {h}h", s / 86_400),
        },
    }
}

/// How a listed backup was verified, as shown: its metadata's word, `other-cluster` when
/// its metadata names another cluster, `no` when it was never read back.
fn verified(l: &Listed, cluster: u64) -> String {
    match l.recorded.cluster {
        Some(c) if c != cluster => "other-cluster".into(),
        _ => l.recorded.verified.clone().unwrap_or_else(|| "no".into()),
    }
}

/// Why the name of `l` is not believed at `now` ([`crate::backup::bucket::distrusted`]).
fn distrusted(l: &Listed, now: SystemTime) -> Option<String> {
    crate::backup::bucket::distrusted(&l.backup, l.recorded.time.as_deref(), now)
}

fn age_of(l: &Listed, now: SystemTime) -> Duration {
    now.duration_since(l.time()).unwrap_or(Duration::ZERO)
}

/// The listing's lines: text, or one JSON object.
pub fn list_lines(
    b: &BackupSettings,
    cluster: u64,
    all: &[Listed],
    format: Format,
    now: SystemTime,
) -> Vec<String> {
    let prefix = crate::backup::bucket::cluster_prefix(b, cluster);
    match format {
        Format::Json => {
            let backups: Vec<serde_json::Value> = all
                .iter()
                .map(|l| {
                    let r = &l.recorded;
                    serde_json::json!({
                        "name": l.name,
                        "key": l.backup.key,
                        "time": rfc3339(l.time()),
                        "member": r.member.clone().unwrap_or_else(|| l.backup.name.member.clone()),
                        "revision": r.revision.unwrap_or(l.backup.name.revision),
                        "size": l.backup.size,
                        "age_seconds": age_of(l, now).as_secs(),
                        "verified": match verified(l, cluster).as_str() {
                            "no" => serde_json::Value::Null,
                            v => v.into(),
                        },
                        "cluster": r.cluster.map(|c| format!("{c:016x}")),
                        "etcd_version": r.etcd_version,
                        "sealed": l.sealed(),
                        "agent": r.agent,
                        "distrusted": distrusted(l, now),
                    })
                })
                .collect();
            vec![serde_json::json!({
                "cluster": format!("{cluster:016x}"),
                "endpoint": b.endpoint.to_string(),
                "bucket": b.bucket,
                "prefix": prefix,
                "backups": backups,
            })
            .to_string()]
        }
        Format::Text => {
            let folder = fetch::shown(b, &prefix);
            if all.is_empty() {
                return vec![format!("no backups of cluster {cluster:016x} in {folder}")];
            }
            let mut lines = vec![format!(
                "{} backup(s) of cluster {cluster:016x} in {folder}, newest first:",
                all.len()
            )];
            for l in all {
                lines.push(format!(
                    "{} time {} member {} revision {} size {} age {} verified {}",
                    l.name,
                    rfc3339(l.time()),
                    l.recorded
                        .member
                        .as_deref()
                        .unwrap_or(&l.backup.name.member),
                    l.recorded.revision.unwrap_or(l.backup.name.revision),
                    l.backup.size,
                    age(age_of(l, now)),
                    verified(l, cluster)
                ));
                if let Some(why) = distrusted(l, now) {
                    let last = lines.len() - 1;
                    lines[last].push_str(&format!(
                        "; not believed, counts for nothing: {}",
                        crate::shared::printable::line(&why)
                    ));
                }
            }
            lines
        }
    }
}

/// The lines of a backup proven.
pub fn verified_lines(b: &BackupSettings, p: &Proven, format: Format) -> Vec<String> {
    let t = &p.trial;
    match format {
        Format::Json => vec![serde_json::json!({
            "verified": true,
            "name": p.backup.name,
            "key": p.backup.backup.key,
            "endpoint": b.endpoint.to_string(),
            "bucket": b.bucket,
            "revision": t.revision,
            "key_revisions": t.keys,
            "etcd_version": t.etcd_version,
            "snapshot_size": p.plain.len,
            "object_size": p.object.len,
            "sealed": p.backup.sealed(),
            "took_ms": u64::try_from(t.took.as_millis()).unwrap_or(u64::MAX),
        })
        .to_string()],
        Format::Text => vec![format!(
            "verified {}: revision {}, {} key revisions, etcd {}, snapshot {} bytes{}, trial \
             restore passed in {:.1} s; the scratch copy is removed",
            fetch::shown(b, &p.backup.backup.key),
            t.revision,
            t.keys,
            t.etcd_version,
            p.plain.len,
            if p.backup.sealed() {
                format!(", decrypted from {} bytes", p.object.len)
            } else {
                String::new()
            },
            t.took.as_secs_f64()
        )],
    }
}

/// The identity that decrypts `b`'s backups: `given` (`--identity`), else
/// `backup.identity_file`.
fn identity_of<'a>(b: &'a BackupSettings, given: Option<&'a Path>) -> Option<&'a Path> {
    given.or(b.identity_file.as_deref())
}

/// Why `backups verify --if-configured` verifies nothing here, or `None` when it can:
/// the configuration `config` has no `[backup]` table (nothing leaves the node), or its
/// backups are encrypted (`backup.encrypt`, the default) and it names no identity to
/// decrypt them (`identity`, from `--identity`, nor `backup.identity_file`): the identity
/// is best kept off the nodes, and the timer runs on every one. With `encrypt = false` the
/// backups are in the clear and the proof needs no identity, so it runs (a backup found
/// encrypted then is `config-invalid`, as without the flag).
pub fn why_not_verifiable(s: &Settings, config: &Path, identity: Option<&Path>) -> Option<String> {
    let Some(b) = &s.backup else {
        return Some(format!(
            "nothing verified: {} has no [backup] table, so this node keeps no backups off \
             the node",
            config.display()
        ));
    };
    if b.encrypt && identity_of(b, identity).is_none() {
        return Some(format!(
            "nothing verified: the backups are encrypted (age) and {} names no \
             backup.identity_file to decrypt them; verify where the identity is: \
             etcd-setup backups verify --identity FILE",
            config.display()
        ));
    }
    None
}

/// The lines of a verification skipped for `why` ([`why_not_verifiable`]).
pub fn skipped_lines(why: &str, format: Format) -> Vec<String> {
    match format {
        Format::Json => vec![serde_json::json!({ "verified": false, "skipped": why }).to_string()],
        Format::Text => vec![why.to_string()],
    }
}

/// Fetches and proves `which` of `cluster` with the identity file `identity` (default
/// `backup.identity_file`), in a scratch copy in `snapshot.dir`; for `backups verify` and
/// `restore --from-backup`.
pub fn prove(
    s: &Settings,
    b: &BackupSettings,
    client: &Client,
    cluster: u64,
    which: &Which,
    identity: Option<&Path>,
) -> Result<Proven, Failure> {
    let chosen = fetch::choose(b, client, cluster, which)?;
    if let Some(w) = &chosen.regression {
        eprintln!("etcd-setup: warning: {}", crate::shared::printable::line(w));
    }
    let proven = fetch::fetch(
        b,
        client,
        chosen,
        identity_of(b, identity),
        &s.install_dir,
        &s.data.snapshot.dir,
    )?;
    // Its name and metadata say which cluster it is of, and any writer of the bucket
    // chooses those (issue 38): the members it holds decide, for this configuration's
    // cluster (`--cluster` is the operator's word for another one).
    let configured = crate::cluster::etcd::cluster_id(&s.initial_cluster, &s.cluster_token);
    if cluster == configured.0 {
        let shown = fetch::shown(b, &proven.backup.backup.key);
        match crate::member::identity::of_snapshot(proven.file(), s) {
            crate::member::identity::Verdict::Same(_) => {}
            crate::member::identity::Verdict::Other(why) => {
                return Err(Failure::new(
                    ReasonCode::ClusterMismatch,
                    format!(
                        "{shown} is named and described as a backup of cluster {configured}, \
                         but its content is not: {why}. Someone who can write the bucket put \
                         it there; it is not used"
                    ),
                ))
            }
            crate::member::identity::Verdict::Unknown(why) => eprintln!(
                "etcd-setup: warning: {}",
                crate::shared::printable::line(&format!(
                    "{shown}: its content does not show which cluster it is of: {why}"
                ))
            ),
        }
    }
    Ok(proven)
}

/// Records a verification's verdict in `backup.json` for status: a proof that passed, or
/// one that failed on the object itself (corrupt, truncated, not decryptable with the
/// identity, not restorable). A store out of reach, a name not found or a missing identity
/// say nothing about the bucket's backups and are not recorded. A record that cannot be
/// written is a warning: the proof's own outcome is the command's.
fn record_proof(
    state_dir: &std::path::Path,
    asked: &str,
    outcome: &Result<fetch::Proven, Failure>,
) {
    let (object, result) = match outcome {
        Ok(p) => (p.backup.backup.key.clone(), Ok(())),
        Err(f)
            if matches!(
                f.code,
                ReasonCode::BackupCorrupt
                    | ReasonCode::BackupTruncated
                    | ReasonCode::BackupDecryptFailed
                    | ReasonCode::BackupVerifyFailed
                    | ReasonCode::ClusterMismatch
            ) =>
        {
            (asked.to_string(), Err(f))
        }
        Err(_) => return,
    };
    if let Err(e) =
        crate::shared::report::record_verification(state_dir, &object, result, SystemTime::now())
    {
        eprintln!("etcd-setup backups: warning: {}", e.headline());
    }
}

/// `etcd-setup backups`: the exit code.
pub fn command(args: &BackupsArgs) -> u8 {
    frame::run(
        Spec {
            command: Command::Backups,
            config: &args.config,
            dirs: &args.dirs,
            lock: None,
            record: None,
            json: args.format == Format::Json,
        },
        |f| {
            let s = &f.settings;
            if let Some(BackupsAction::Verify(v)) = &args.action {
                let skip = v
                    .if_configured
                    .then(|| why_not_verifiable(s, &args.config, v.identity.as_deref()));
                if let Some(why) = skip.flatten() {
                    return Ok(skipped_lines(&why, args.format));
                }
            }
            let b = settings(s, &args.config)?;
            let client = client(b)?;
            let cluster = args
                .cluster
                .unwrap_or(f.member.node.expected_cluster_id().0);
            match &args.action {
                None | Some(BackupsAction::List) => {
                    f.step(
                        &format!("listing the backups of cluster {cluster:016x}"),
                        false,
                    );
                    let all = fetch::list(b, &client, cluster)?;
                    Ok(list_lines(b, cluster, &all, args.format, SystemTime::now()))
                }
                Some(BackupsAction::Verify(v)) => {
                    f.step(
                        &format!(
                            "fetching and proving the backup {} of cluster {cluster:016x}",
                            v.backup
                        ),
                        false,
                    );
                    let outcome = prove(s, b, &client, cluster, &v.backup, v.identity.as_deref());
                    record_proof(&f.paths.state_dir, &v.backup.to_string(), &outcome);
                    let proven = outcome?;
                    let lines = verified_lines(b, &proven, args.format);
                    drop(proven);
                    Ok(lines)
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "[node]\nname = \"a\"\nip = \"10.1.1.11\"\n[etcd]\n\
        initial_cluster = \"a=http://10.1.1.11:2380\"\ncluster_token = \"t\"\n";
    const BACKUP: &str = "[backup]\nendpoint = \"https://s3.example.org\"\n\
        bucket = \"etcd-backups\"\naccess_key_file = \"/root/s3-access\"\n\
        secret_key_file = \"/root/s3-secret\"\n";

    /// Why `--if-configured` skips the configuration `text`, or `None` when it verifies.
    fn why(text: &str, identity: Option<&str>) -> Option<String> {
        let config = Path::new("/etc/etcd-setup/config.toml");
        let s = crate::shared::config::parse(&format!("{NODE}{text}"), config).unwrap();
        why_not_verifiable(&s, config, identity.map(Path::new))
    }

    #[test]
    fn only_a_node_that_can_decrypt_its_backups_verifies_them_on_the_timer() {
        assert_eq!(
            why("", None).as_deref(),
            Some(
                "nothing verified: /etc/etcd-setup/config.toml has no [backup] table, so \
                 this node keeps no backups off the node"
            )
        );
        let sealed = format!("{BACKUP}recipients_file = \"/etc/etcd-setup/recipients\"\n");
        let no_identity = why(&sealed, None).unwrap();
        assert!(
            no_identity.starts_with(
                "nothing verified: the backups are encrypted (age) and \
                 /etc/etcd-setup/config.toml names no backup.identity_file"
            ),
            "{no_identity}"
        );
        assert!(no_identity.contains("--identity FILE"), "{no_identity}");
        // An identity named on the command line or in the configuration: it verifies.
        assert_eq!(why(&sealed, Some("/root/backup-identity")), None);
        let with_identity = format!("{sealed}identity_file = \"/root/backup-identity\"\n");
        assert_eq!(why(&with_identity, None), None);
        // In the clear, a trial restore needs no identity.
        assert_eq!(why(&format!("{BACKUP}encrypt = false\n"), None), None);
    }

    #[test]
    fn a_skip_is_one_line_or_one_json_object() {
        let why = "nothing verified: no [backup]";
        assert_eq!(skipped_lines(why, Format::Text), vec![why.to_string()]);
        let json = skipped_lines(why, Format::Json);
        assert_eq!(json.len(), 1);
        let v: serde_json::Value = serde_json::from_str(&json[0]).unwrap();
        assert_eq!(v, serde_json::json!({ "verified": false, "skipped": why }));
    }

    #[test]
    fn ages_read_as_people_say_them() {
        let d = Duration::from_secs;
        assert_eq!(age(d(45)), "45s");
        assert_eq!(age(d(12 * 60 + 5)), "12min");
        assert_eq!(age(d(3 * 3600)), "3h");
        assert_eq!(age(d(3 * 3600 + 5 * 60)), "3h 5min");
        assert_eq!(age(d(2 * 86_400 + 4 * 3600 + 7)), "2d 4h");
        assert_eq!(age(d(9 * 86_400)), "9d");
    }
}
