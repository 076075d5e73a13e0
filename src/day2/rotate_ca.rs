//! `etcd-setup rotate-ca`: this member's etcd restarted so that it loads the trust
//! bundles now on disk (etcd re-reads its own certificate and key at every handshake, but
//! reads `--trusted-ca-file` and `--peer-trusted-ca-file` only at its start: etcd #11555).
//!
//! One step of the three-phase CA rotation (docs/runbooks.md, "Rotating certificates"), guarded as
//! `upgrade` is, and checked on the files first, so that a restart never cuts the member
//! off:
//! 1. the files: every trust bundle of `[tls]` parses, and this member's own certificate
//!    of each side chains to a CA of that side's bundle (etcd's gRPC gateway and this
//!    agent's etcdctl dial the member with its client certificate);
//! 2. the cluster: every member healthy, and one member down leaves a quorum
//!    (`cluster-unhealthy` otherwise; `--force` restarts anyway, without the cluster lock
//!    when there is no quorum to hold it);
//! 3. the peers: the certificate every other member serves on its peer URL (and client
//!    URL, with client TLS) chains to a CA of this member's bundle
//!    ([`crate::cluster::tls_peek`], [`certs::issuer_in`]): `cert-untrusted` naming the
//!    member and the bundle when not;
//! 4. the cluster lock `etcd-setup/rotate-ca` in etcd, held on the other members, one
//!    member at a time; the leader goes last: holding the lock while other members wait
//!    for it, it lets it go and queues again behind them (at most `--leader-wait`), and at
//!    its turn hands leadership to another healthy member first. Steps 1 to 3 are asked
//!    again under the lock;
//! 5. etcd stopped and started through the one controller ([`crate::member::service`]),
//!    confirmed healthy; the operation record says etcd is down on purpose meanwhile
//!    (status `in-progress`).

use super::frame::{self, Frame, Spec};
use crate::cli::RotateCaArgs;
use crate::cluster::etcd::Client;
use crate::cluster::health;
use crate::cluster::lifecycle::survey::{self, MemberView};
use crate::cluster::lifecycle::Node;
use crate::cluster::tls_peek;
use crate::member::service::{self, Etcd, Service};
use crate::reason::{Failure, ReasonCode};
use crate::shared::advisory::Version;
use crate::shared::config::certs::{self, Link};
use crate::shared::config::{Settings, TlsFiles};
use crate::shared::report::Command;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

/// The lock's name in etcd.
pub const LOCK_NAME: &str = "etcd-setup/rotate-ca";
/// The lock's lease: how long a holder killed outright keeps the others waiting.
const LOCK_TTL: Duration = Duration::from_secs(60);
/// How long reading a peer's certificate may take.
const PEEK_WAIT: Duration = Duration::from_secs(5);

/// Runs `etcd-setup rotate-ca`; returns the exit code.
pub fn command(args: &RotateCaArgs) -> u8 {
    frame::run(
        Spec {
            command: Command::RotateCa,
            config: &args.config,
            dirs: &args.dirs,
            lock: Some(args.lock_timeout),
            record: Some("checking the trust bundles"),
            json: false,
        },
        |f| rotate(f, args).map(|line| vec![line]),
    )
}

fn untrusted(message: String) -> Failure {
    Failure::new(ReasonCode::CertUntrusted, message)
}

fn unhealthy(message: String) -> Failure {
    Failure::new(ReasonCode::ClusterUnhealthy, message)
}

/// The sides with TLS: (`client` or `peer`, its files).
fn sides(s: &Settings) -> Vec<(&'static str, &TlsFiles)> {
    [("client", &s.tls.client), ("peer", &s.tls.peer)]
        .into_iter()
        .filter_map(|(side, f)| f.as_ref().map(|f| (side, f)))
        .collect()
}

/// Step 1: every bundle parses and trusts this member's own certificate of its side.
/// Returns each side's bundle.
pub fn check_files(s: &Settings) -> Result<Vec<(&'static str, Vec<Link>)>, Failure> {
    let sides = sides(s);
    if sides.is_empty() {
        return Err(Failure::new(
            ReasonCode::ConfigInvalid,
            "[tls] is off in the configuration: etcd trusts no CA, there is nothing to rotate"
                .to_string(),
        ));
    }
    let mut out = Vec::new();
    for (side, files) in sides {
        let ca_key = format!("tls.{side}_trusted_ca");
        let bundle = certs::read_links(&files.trusted_ca)
            .map_err(|why| untrusted(format!("{ca_key}: {} {why}", files.trusted_ca.display())))?;
        let leaf = certs::read_links(&files.cert)
            .map_err(|why| untrusted(format!("tls.{side}_cert: {} {why}", files.cert.display())))?;
        let own = &leaf[0];
        if certs::issuer_in(own, &bundle).is_none() {
            return Err(untrusted(format!(
                "{ca_key}: {} lacks the CA of this member's tls.{side}_cert {} ({}, serial {}): \
                 add it (old and new CA together while rotating)",
                files.trusted_ca.display(),
                files.cert.display(),
                own.subject,
                own.serial
            )));
        }
        out.push((side, bundle));
    }
    Ok(out)
}

/// Each member's (name, peer URLs, client URLs), from the member list.
type Urls = Vec<(String, Vec<String>, Vec<String>)>;

/// `host:port` of a URL.
fn address_of(url: &str) -> Option<SocketAddr> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let hostport = rest.split('/').next()?;
    hostport.to_socket_addrs().ok()?.next()
}

/// Step 3: the certificate every other member serves on its `side` URLs chains to a CA
/// of `bundle` (the file `bundle_file`).
fn check_peers(
    view: &[MemberView],
    urls: &Urls,
    side: &str,
    bundle: &[Link],
    bundle_file: &Path,
) -> Result<usize, Failure> {
    let mut checked = 0;
    for m in view.iter().filter(|m| !m.is_self) {
        let Some((_, peer, client)) = urls.iter().find(|(name, _, _)| *name == m.name) else {
            continue;
        };
        let list = if side == "peer" { peer } else { client };
        for url in list.iter().filter(|u| u.starts_with("https://")) {
            let Some(addr) = address_of(url) else {
                return Err(untrusted(format!(
                    "member {}'s {side} URL {url} names no address",
                    m.name
                )));
            };
            let chain = match tls_peek::served_chain(addr, PEEK_WAIT) {
                Ok(chain) => chain,
                // A member down is the health check's to refuse (or --force's to pass).
                Err(_) if !m.healthy => continue,
                // Healthy at the survey, gone at the handshake: restarting in its own
                // turn (another rotate-ca), not a certificate of another CA. Asked again
                // under --health-wait like any member down (seen on c3's VMs: the
                // second member's check hit the first's restart and failed at once).
                Err(tls_peek::PeekError::NoAnswer(why)) => {
                    return Err(unhealthy(format!(
                        "member {} at {url} did not serve its certificate ({why}): it is \
                         restarting or down",
                        m.name
                    )))
                }
                Err(why) => {
                    return Err(untrusted(format!(
                        "member {} at {url}: cannot read its certificate ({why})",
                        m.name
                    )))
                }
            };
            let leaf = certs::link_of_der(&chain[0]).map_err(|why| {
                untrusted(format!(
                    "member {} at {url} serves a certificate that {why}",
                    m.name
                ))
            })?;
            if certs::issuer_in(&leaf, bundle).is_none() {
                return Err(untrusted(format!(
                    "member {} at {url} serves {} (serial {}), of no CA in tls.{side}_trusted_ca \
                     {}: add its CA to the bundle",
                    m.name,
                    leaf.subject,
                    leaf.serial,
                    bundle_file.display()
                )));
            }
            checked += 1;
        }
    }
    Ok(checked)
}

/// The members as the one survey sees them, with each member's (name, peer URLs,
/// client URLs) from the member list.
fn survey(client: &Client, node: &Node) -> Result<(Vec<MemberView>, Urls), Failure> {
    let seen = survey::survey(node, client.endpoints().to_vec(), &[]);
    let Some(list) = seen.list() else {
        return Err(unhealthy(format!(
            "no member answered the member list: {}",
            seen.list_error()
                .map_or_else(|| "no client URL to ask".to_string(), |e| e.to_string())
        )));
    };
    let urls = list
        .members
        .iter()
        .map(|m| (m.name.clone(), m.peer_urls.clone(), m.client_urls.clone()))
        .collect();
    Ok((seen.view(node), urls))
}

/// Step 2: every member healthy (`all`; before the lock, while another member may be in
/// its own turn, a quorum healthy), and a quorum left while this one restarts.
fn check_cluster(view: &[MemberView], all: bool) -> Result<(), Failure> {
    let healthy = view.iter().filter(|m| m.healthy).count();
    if !all && healthy <= view.len() / 2 {
        return Err(unhealthy(format!(
            "only {healthy} of {} members are healthy, no quorum ({}); bring them back (or --force)",
            view.len(),
            view.iter()
                .filter(|m| !m.healthy)
                .map(|m| format!("{} {}", m.name, m.problem.as_deref().unwrap_or("no answer")))
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    if let Some(m) = view.iter().find(|m| all && !m.healthy) {
        return Err(unhealthy(format!(
            "member {} {} is not healthy ({}): bring it back (or --force)",
            m.name,
            m.endpoint,
            m.problem.as_deref().unwrap_or("no answer")
        )));
    }
    let voters = view.len();
    if voters < 3 {
        return Err(unhealthy(format!(
            "{voters} member(s): a restart leaves no quorum (or --force)"
        )));
    }
    Ok(())
}

/// Steps 1 to 3; a line saying what was checked. `under_lock`: every member must be
/// healthy (before the lock a quorum is enough: another member may be in its turn).
fn check_all(
    s: &Settings,
    client: &Client,
    node: &Node,
    force: bool,
    under_lock: bool,
) -> Result<(String, Vec<MemberView>), Failure> {
    let bundles = check_files(s)?;
    let (view, urls) = match survey(client, node) {
        Ok(v) => v,
        Err(f) if force => {
            eprintln!("etcd-setup rotate-ca: --force: {}", f.headline());
            (Vec::new(), Vec::new())
        }
        Err(f) => return Err(f),
    };
    let mut said = Vec::new();
    for (side, bundle) in &bundles {
        let file = sides(s)
            .into_iter()
            .find(|(x, _)| x == side)
            .map(|(_, f)| f.trusted_ca.clone())
            .unwrap_or_default();
        let n = check_peers(&view, &urls, side, bundle, &file)?;
        said.push(format!(
            "tls.{side}_trusted_ca {} ({}): this member's certificate and {n} served by the others chain to it",
            file.display(),
            bundle.iter().map(|c| c.subject.as_str()).collect::<Vec<_>>().join(" + ")
        ));
    }
    // After the peers: a member this bundle cuts off looks unhealthy too, and the
    // refusal should name the certificate.
    if let Err(f) = check_cluster(&view, under_lock) {
        if !force {
            return Err(f);
        }
        eprintln!("etcd-setup rotate-ca: --force: {}", f.headline());
    }
    Ok((said.join("; "), view))
}

/// [`check_all`], asked again every 5 s while it finds the cluster unhealthy, for at most
/// `--health-wait`: a member slow to answer one survey (a loaded node, another member's
/// turn just ending) is not a member down. Any other refusal is at once.
fn check_all_patiently(
    f: &Frame,
    client: &Client,
    node: &Node,
    args: &RotateCaArgs,
    under_lock: bool,
) -> Result<(String, Vec<MemberView>), Failure> {
    let started = Instant::now();
    loop {
        match check_all(&f.settings, client, node, args.force, under_lock) {
            Err(e)
                if e.code == ReasonCode::ClusterUnhealthy
                    && started.elapsed() < args.health_wait =>
            {
                eprintln!(
                    "etcd-setup rotate-ca: {}; asking again in 5 s (until {} s of --health-wait)",
                    e.headline(),
                    args.health_wait.as_secs()
                );
                std::thread::sleep(Duration::from_secs(5));
                frame::checkpoint()?;
            }
            other => return other,
        }
    }
}

fn rotate(f: &Frame, args: &RotateCaArgs) -> Result<String, Failure> {
    let s = &f.settings;
    let node = &f.member.node;
    let mut all = node.own_client_url().into_iter().collect::<Vec<_>>();
    all.extend(node.peer_client_urls());
    let client = node.client(all);
    let (said, view) = check_all_patiently(f, &client, node, args, false)?;
    eprintln!("etcd-setup rotate-ca: {said}");

    // One member at a time: the lock lives on the other members, whose etcd stays up
    // while this one restarts.
    let quorum = view.iter().filter(|m| m.healthy).count() > view.len() / 2;
    let lock = if quorum {
        f.step(&format!("waiting for the cluster lock {LOCK_NAME}"), false);
        Some(take_turn(f, &client, node, args)?)
    } else {
        None
    };
    let metrics = f.member.own.metrics;
    let release = health::server_version(metrics, health::DAY2_DEADLINE)
        .ok()
        .and_then(|v| Version::parse(&v));
    let service = Etcd::connect(s)?;
    if let Some(r) = release {
        service.set_release(r);
    }
    frame::checkpoint()?;
    f.step("restarting etcd to load the trust bundles", true);
    let started = Instant::now();
    let outcome = frame::critical(|| {
        service.stop()?;
        service.start()?;
        service::confirm(metrics, None, s.start_timeout)
    });
    drop(lock);
    outcome?;
    Ok(format!(
        "{} restarted with the trust bundles on disk; etcd healthy {} ms after its stop",
        node.name,
        started.elapsed().as_millis()
    ))
}

/// Step 4: the cluster lock, steps 1 to 3 asked again under it; the leader last.
fn take_turn(
    f: &Frame,
    client: &Client,
    node: &Node,
    args: &RotateCaArgs,
) -> Result<crate::cluster::etcd::ClusterLock, Failure> {
    let started = Instant::now();
    let others = node.peer_client_urls();
    let locker = if others.is_empty() {
        client.clone()
    } else {
        client.with_endpoints(others)
    };
    loop {
        let lock = locker
            .lock(LOCK_NAME, LOCK_TTL, args.lock_wait)
            .map_err(|e| frame::cluster_lock_failure(LOCK_NAME, args.lock_wait, e))?;
        let (said, view) = check_all_patiently(f, client, node, args, true)?;
        let leads = view.iter().any(|m| m.is_self && m.is_leader);
        // Others waiting for the lock hold keys under its prefix beside the holder's.
        // A count that cannot be read is not "nobody waits": a leader asks again (within
        // --leader-wait) rather than go first unseen.
        let waiting = match locker.count_prefix(&format!("{LOCK_NAME}/")) {
            Ok(n) => n.saturating_sub(1),
            Err(e) if leads => {
                eprintln!(
                    "etcd-setup rotate-ca: cannot count the members waiting for {LOCK_NAME} \
                     ({e}); as the leader, asking again after them"
                );
                1
            }
            Err(_) => 0,
        };
        if leads && waiting > 0 && started.elapsed() < args.leader_wait {
            lock.release();
            f.step(
                &format!("this member leads: {waiting} other member(s) go first"),
                false,
            );
            // Queued again, behind them: etcd's lock serves its waiters in order.
            continue;
        }
        eprintln!(
            "etcd-setup rotate-ca: {} holds {LOCK_NAME}; checked again: {said}",
            node.name
        );
        if leads {
            f.step(
                "handing leadership to another member before the restart",
                true,
            );
            if let Some(to) = view.iter().find(|m| !m.is_self && m.healthy) {
                client.move_leader(to.id).map_err(|e| {
                    unhealthy(format!(
                        "cannot hand leadership to {} before the restart: {e}",
                        to.name
                    ))
                })?;
            }
        }
        return Ok(lock);
    }
}
