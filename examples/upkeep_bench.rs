//! Snapshot and defragmentation of a database of at least 100 MiB: `etcd-setup snapshot`
//! against `etcdctl snapshot save`, `etcd-setup maintain` against `etcdctl defrag`, on the
//! same one-member etcd in the same run; prints the figures and their ratios, asserts
//! nothing.
//!
//! `cargo run --release --example upkeep_bench [-- VERSION [MIB]]` (default 3.5.16, 110).
//! The data: MIB MiB of distinct keys of 96 KiB values, 5% of them overwritten and
//! compacted away, so that `maintain` (thresholds 1 MiB, 1%) finds the member fragmented.
//! `etcdctl defrag` runs first; the same fragmentation is made again for `maintain`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::etcd::Cluster;

/// The etcd-setup binary of the same profile (`cargo run --example` builds it too):
/// target/PROFILE/etcd-setup beside target/PROFILE/examples/.
fn bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("etcd-setup");
    assert!(
        bin.is_file(),
        "{} missing: cargo build --release first",
        bin.display()
    );
    bin
}

fn timed_ok(what: &str, cmd: &mut Command) -> Duration {
    let t = Instant::now();
    let out = cmd.output().expect(what);
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    print!(
        "{what}: {:.3} s  {}",
        took.as_secs_f64(),
        String::from_utf8_lossy(&out.stdout)
    );
    if !String::from_utf8_lossy(&out.stdout).ends_with('\n') {
        println!();
    }
    took
}

fn main() {
    let mut args = std::env::args().skip(1);
    let version = args.next().unwrap_or_else(|| "3.5.16".into());
    let mib: usize = args.next().and_then(|m| m.parse().ok()).unwrap_or(110);
    let c = Cluster::start_with(
        &version,
        1,
        "tok-bench",
        &["--quota-backend-bytes=8589934592"],
    );
    let dir = tempfile::Builder::new()
        .prefix("upkeep-bench-")
        // target/tmp: outside /tmp, which etcd's sandbox hides and config refuses.
        .tempdir_in({
            let t = bin().parent().unwrap().parent().unwrap().join("tmp");
            std::fs::create_dir_all(&t).unwrap();
            t
        })
        .unwrap();
    let d = dir.path();
    let cfg = d.join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[node]\nname = \"m1\"\nip = \"{ip}\"\n\n[etcd]\ninitial_cluster = \"{ic}\"\n\
             cluster_token = \"{tok}\"\ndata_dir = \"{d}/data\"\nclient_port = {cp}\n\
             peer_port = {pp}\nmetrics_port = {mp}\nquota_backend_bytes = \"8GiB\"\n\n\
             [install]\ndir = \"{bin}\"\n\n[snapshot]\ndir = \"{d}/snaps\"\n\n\
             [maintain]\nmin_db_size = \"1MiB\"\nmin_fragmented_percent = 1\n",
            ip = c.members[0].ip,
            ic = c.initial_cluster_arg(),
            tok = c.token,
            d = d.display(),
            cp = c.client_port,
            pp = c.peer_port,
            mp = c.peer_port.wrapping_add(1).max(1024),
            bin = c.bin.display(),
        ),
    )
    .unwrap();
    let client = c.client();
    let value = "v".repeat(96 << 10);
    let keys = mib * 1024 / 96;
    let t = Instant::now();
    for i in 0..keys {
        client.put(&format!("bench/{i:05}"), &value).unwrap();
    }
    let written = t.elapsed();
    // 5% of the keys rewritten short and the old revisions compacted away: the same
    // fragmentation before each defragmentation.
    let fragment = || {
        for i in (0..keys).step_by(20) {
            client.put(&format!("bench/{i:05}"), &value).unwrap();
            client.put(&format!("bench/{i:05}"), "short").unwrap();
        }
        let rev = client.endpoint_status().unwrap()[0].revision;
        client.compact(rev, true, Duration::from_secs(120)).unwrap();
        client.put("tick", "t").unwrap();
        let s = client.endpoint_status().unwrap().remove(0);
        format!(
            "db {:.1} MiB, in use {:.1} MiB",
            s.db_size as f64 / 1048576.0,
            s.db_size_in_use.unwrap_or(0) as f64 / 1048576.0
        )
    };
    let state = fragment();
    println!(
        "etcd {version}: {keys} keys written in {:.1} s; {state}",
        written.as_secs_f64()
    );

    let snap_ours = || {
        timed_ok(
            "etcd-setup snapshot",
            Command::new(bin()).args([
                "snapshot",
                "--config",
                cfg.to_str().unwrap(),
                "--state-dir",
                d.join("state").to_str().unwrap(),
            ]),
        )
    };
    let raw_file = d.join("raw.db");
    let snap_raw = || {
        timed_ok(
            "etcdctl snapshot save",
            Command::new(c.etcdctl())
                .env_clear()
                .env("ETCDCTL_API", "3")
                .args([
                    &format!("--endpoints={}", c.client_url(0)),
                    "snapshot",
                    "save",
                    raw_file.to_str().unwrap(),
                ]),
        )
    };
    // Alternated, so that neither always runs with the warmer page cache.
    let (o1, r1, r2, o2) = (snap_ours(), snap_raw(), snap_raw(), snap_ours());
    let (ours, raw) = (o1 + o2, r1 + r2);
    let size = std::fs::metadata(&raw_file).unwrap().len();
    println!(
        "snapshot of {:.1} MiB, two each: etcd-setup {:.3} s / etcdctl {:.3} s = {:.2}x",
        size as f64 / 1048576.0,
        ours.as_secs_f64(),
        raw.as_secs_f64(),
        ours.as_secs_f64() / raw.as_secs_f64()
    );

    let raw = timed_ok(
        "etcdctl defrag",
        Command::new(c.etcdctl())
            .env_clear()
            .env("ETCDCTL_API", "3")
            .args([
                &format!("--endpoints={}", c.client_url(0)),
                "--command-timeout=600s",
                "defrag",
            ]),
    );
    println!("fragmented again: {}", fragment());
    let ours = timed_ok(
        "etcd-setup maintain",
        Command::new(bin()).args(["maintain", "--config", cfg.to_str().unwrap()]),
    );
    println!(
        "defrag: etcd-setup maintain {:.3} s / etcdctl defrag {:.3} s = {:.2}x",
        ours.as_secs_f64(),
        raw.as_secs_f64(),
        ours.as_secs_f64() / raw.as_secs_f64()
    );
}
