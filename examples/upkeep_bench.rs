//! Snapshot and defragmentation of a database of at least 100 MiB: `etcd-setup snapshot`
//! against `etcdctl snapshot save`, `etcd-setup maintain` against `etcdctl defrag`, on the
//! same one-member etcd on loopback in the same run; prints the figures and their ratios,
//! asserts nothing about them.
//!
//! `cargo run --release --example upkeep_bench [-- VERSION [MIB [ROUNDS]]]` (default
//! 3.5.16, 110, 3).
//! The data, built once: MIB MiB of distinct keys of 96 KiB values, 5% of them overwritten
//! and compacted away, so that `maintain` (thresholds 1 MiB, 1%) finds the member
//! fragmented. The snapshots run on that member, ROUNDS groups of two of each alternated (A B
//! C C B A): `etcd-setup snapshot` (which verifies), `etcdctl snapshot save` alone, and the
//! by-hand verified snapshot of etcd's operations guide (`save`, then `etcdutl snapshot
//! status`); both ratios are printed. Then the member is
//! stopped (SIGTERM) and its data dir is the source of every defragmentation run: each run
//! starts etcd on a fresh copy of it (`cp -a --reflink=auto`, fsynced) and times one
//! command, `etcdctl defrag`, `maintain`, `maintain`, `etcdctl defrag` (A B B A) ROUNDS
//! times, so that both sides defragment the same file and neither always runs first or
//! with the warmer page cache. Each group's ratio is printed, and their median: on a
//! shared machine one group's ratio swings (0.74–1.41× for the snapshot in three runs of
//! one group each), the median of several less.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::etcd::Cluster;

/// The etcd-setup binary of the same profile (`cargo run --example` builds it too):
/// target/PROFILE/etcd-setup beside target/PROFILE/examples/.
fn bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("etcd-setup");
    assert!(
        bin.is_file(),
        "{} missing: cargo build --release first",
        bin.display()
    );
    bin
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// One timed command: how long it took, its stdout, and the wall clock (Unix ms) at its
/// spawn and at its exit.
struct Run {
    took: Duration,
    stdout: String,
    spawned_ms: u128,
    exited_ms: u128,
}

fn timed_ok(what: &str, cmd: &mut Command) -> Run {
    let spawned_ms = unix_ms();
    let t = Instant::now();
    let out = cmd.output().expect(what);
    let took = t.elapsed();
    let exited_ms = unix_ms();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{what}: {:.3} s  {stdout}", took.as_secs_f64());
    if !stdout.ends_with('\n') {
        println!();
    }
    Run {
        took,
        stdout,
        spawned_ms,
        exited_ms,
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// The bbolt file of etcd data dir `data`.
fn db_file(data: &Path) -> PathBuf {
    data.join("member/snap/db")
}

/// The length of the bbolt file of `data`, and the bytes allocated to it on disk (bbolt
/// grows its file ahead of use, sparsely: the length says little of the space taken).
fn db_len(data: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let f = db_file(data);
    let m = std::fs::metadata(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    (m.len(), m.blocks() * 512)
}

/// A bbolt file's length and allocation, `L MiB (A allocated)`.
fn file_mib((len, allocated): (u64, u64)) -> String {
    format!("{:.1} MiB ({:.1} allocated)", mib(len), mib(allocated))
}

/// fsyncs every file under `p`, so that no copy's write-back runs during a measurement.
fn fsync_tree(p: &Path) {
    let meta = std::fs::symlink_metadata(p).unwrap();
    if meta.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            fsync_tree(&e.unwrap().path());
        }
    }
    if meta.is_dir() || meta.is_file() {
        std::fs::File::open(p)
            .and_then(|f| f.sync_all())
            .unwrap_or_else(|e| panic!("fsync {}: {e}", p.display()));
    }
}

/// `to` becomes a copy of data dir `from` (modes and times kept, a reflink where the
/// filesystem has them), on disk.
fn copy_dir(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(from)
        .arg(to)
        .output()
        .expect("run cp");
    assert!(
        out.status.success(),
        "cp -a {} {}: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    fsync_tree(to);
}

/// The `[start..end]` Unix ms of maintain's `defragmented` line.
fn defrag_call(stdout: &str) -> Option<(u128, u128)> {
    let line = stdout.lines().find(|l| l.starts_with("defragmented "))?;
    let inner = line.rsplit_once('[')?.1.strip_suffix(']')?;
    let (a, b) = inner.split_once("..")?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Where a snapshot's verification goes, on etcdctl's file `file`: the trailer's SHA-256
/// alone, `snapshot status` alone, then both at once as `snapshot` runs them. Were the
/// hash not the shorter, hashing the partial while etcdctl writes it could pay.
fn verification(c: &Cluster, file: &Path) -> String {
    use etcd_setup::member::tools;
    let tool = if c.bin.join("etcdutl").is_file() {
        c.bin.join("etcdutl")
    } else {
        c.etcdctl()
    };
    let timed = |f: &dyn Fn()| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64()
    };
    let trailer = || {
        tools::check_trailer(file).unwrap();
    };
    let status = || {
        tools::file_status(&tool, file).unwrap();
    };
    let hash = timed(&trailer);
    let read = timed(&status);
    let both = timed(&|| {
        std::thread::scope(|t| {
            let h = t.spawn(trailer);
            status();
            h.join().unwrap();
        })
    });
    format!(
        "verification of that file: SHA-256 trailer {hash:.3} s, `{} snapshot status` \
         {read:.3} s, both at once {both:.3} s",
        tool.file_name().unwrap().to_string_lossy()
    )
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Etcdctl,
    Maintain,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let version = args.next().unwrap_or_else(|| "3.5.16".into());
    let mib_arg: usize = args.next().and_then(|m| m.parse().ok()).unwrap_or(110);
    let rounds: usize = args.next().and_then(|m| m.parse().ok()).unwrap_or(3).max(1);
    let mut c = Cluster::start_with(
        &version,
        1,
        "tok-bench",
        &["--quota-backend-bytes=8589934592"],
    );
    // Outside the paths etcd's sandbox hides (config refuses them), wherever the checkout is.
    let dir = support::scratch::dir("upkeep-bench");
    let d = dir.path();
    // The data dir of every defragmentation run: a fresh copy each time.
    let data = d.join("data");
    let cfg = d.join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[node]\nname = \"m1\"\nip = \"{ip}\"\n\n[etcd]\ninitial_cluster = \"{ic}\"\n\
             cluster_token = \"{tok}\"\ndata_dir = \"{data}\"\nclient_port = {cp}\n\
             peer_port = {pp}\nmetrics_port = {mp}\nquota_backend_bytes = \"8GiB\"\n\n\
             [install]\ndir = \"{bin}\"\n\n[snapshot]\ndir = \"{d}/snaps\"\n\n\
             [maintain]\nmin_db_size = \"1MiB\"\nmin_fragmented_percent = 1\n",
            ip = c.members[0].ip,
            ic = c.initial_cluster_arg(),
            tok = c.token,
            data = data.display(),
            d = d.display(),
            cp = c.client_port,
            pp = c.peer_port,
            mp = c.peer_port.wrapping_add(1).max(1024),
            bin = c.bin.display(),
        ),
    )
    .unwrap();
    let client = c.client();
    let status = || {
        let s = client.endpoint_status().unwrap().remove(0);
        (s.db_size, s.db_size_in_use.unwrap_or(0))
    };
    let value = "v".repeat(96 << 10);
    let keys = mib_arg * 1024 / 96;
    let t = Instant::now();
    for i in 0..keys {
        client.put(&format!("bench/{i:05}"), &value).unwrap();
    }
    let written = t.elapsed();
    // 5% of the keys rewritten short and the old revisions compacted away: once, for
    // every run below.
    for i in (0..keys).step_by(20) {
        client.put(&format!("bench/{i:05}"), &value).unwrap();
        client.put(&format!("bench/{i:05}"), "short").unwrap();
    }
    let rev = client.endpoint_status().unwrap()[0].revision;
    client.compact(rev, true, Duration::from_secs(120)).unwrap();
    client.put("tick", "t").unwrap();
    let (db, in_use) = status();
    println!(
        "etcd {version}: {keys} keys written in {:.1} s; 5% rewritten and compacted: \
         db {:.1} MiB, in use {:.1} MiB",
        written.as_secs_f64(),
        mib(db),
        mib(in_use)
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
        .took
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
        .took
    };
    // etcd's operations guide verifies a saved snapshot with `snapshot status` (etcdutl
    // from 3.5, etcdctl before): the by-hand snapshot with etcd's own check.
    let (status_tool, status_name) = if c.bin.join("etcdutl").is_file() {
        (c.bin.join("etcdutl"), "etcdutl")
    } else {
        (c.etcdctl(), "etcdctl")
    };
    let snap_checked = || {
        let save = snap_raw();
        let start = Instant::now();
        let out = Command::new(&status_tool)
            .env_clear()
            .env("ETCDCTL_API", "3")
            .args(["snapshot", "status", raw_file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{status_name} snapshot status failed");
        let status = start.elapsed();
        println!(
            "  then {status_name} snapshot status: {:.3} s",
            status.as_secs_f64()
        );
        save + status
    };
    // Alternated, so that neither always runs with the warmer page cache: ours, etcdctl,
    // etcdctl + status, etcdctl + status, etcdctl, ours.
    let mut groups = Vec::new();
    let mut checked = Vec::new();
    for _ in 0..rounds {
        let (o1, r1, v1) = (snap_ours(), snap_raw(), snap_checked());
        let (v2, r2, o2) = (snap_checked(), snap_raw(), snap_ours());
        groups.push(((o1 + o2).as_secs_f64(), (r1 + r2).as_secs_f64()));
        checked.push(((o1 + o2).as_secs_f64(), (v1 + v2).as_secs_f64()));
    }
    let size = std::fs::metadata(&raw_file).unwrap().len();
    let snapshot_line = format!(
        "snapshot of {:.1} MiB, {rounds} group(s) of two each alternated (A B C C B A): {}",
        mib(size),
        ratios("etcd-setup", "etcdctl", &groups)
    );
    println!("{snapshot_line}");
    let checked_line = format!(
        "the same against the by-hand verified snapshot (`etcdctl snapshot save` then \
         `{status_name} snapshot status`): {}",
        ratios("etcd-setup", "save + status", &checked)
    );
    println!("{checked_line}");
    let verify_line = verification(&c, &raw_file);
    println!("{verify_line}");

    // The fragmented member, stopped cleanly: the source of every defragmentation run.
    let source = c.members[0].data_dir.clone();
    assert!(
        c.stop(0, Duration::from_secs(60)),
        "etcd did not exit on SIGTERM within 60 s"
    );
    let source_len = db_len(&source);
    println!(
        "stopped; source data dir {}: bbolt file {}",
        source.display(),
        file_mib(source_len)
    );
    let initial = c.initial_cluster_arg();
    let order: Vec<Side> = (0..rounds)
        .flat_map(|_| [Side::Etcdctl, Side::Maintain, Side::Maintain, Side::Etcdctl])
        .collect();
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    let mut rows = Vec::new();
    for (k, side) in order.into_iter().enumerate() {
        if data.exists() {
            std::fs::remove_dir_all(&data).unwrap();
        }
        let t = Instant::now();
        copy_dir(&source, &data);
        let copied = t.elapsed();
        let file_before = db_len(&data);
        c.members[0].data_dir = data.clone();
        c.launch(0, &initial, "new");
        c.await_ready(0);
        let (db_before, in_use_before) = status();
        let run = match side {
            Side::Etcdctl => timed_ok(
                "etcdctl defrag",
                Command::new(c.etcdctl())
                    .env_clear()
                    .env("ETCDCTL_API", "3")
                    .args([
                        &format!("--endpoints={}", c.client_url(0)),
                        "--command-timeout=600s",
                        "defrag",
                    ]),
            ),
            Side::Maintain => timed_ok(
                "etcd-setup maintain",
                Command::new(bin()).args(["maintain", "--config", cfg.to_str().unwrap()]),
            ),
        };
        let (db_after, in_use_after) = status();
        assert!(
            c.stop(0, Duration::from_secs(60)),
            "etcd did not exit on SIGTERM within 60 s"
        );
        let file_after = db_len(&data);
        let name = match side {
            Side::Etcdctl => "etcdctl defrag",
            Side::Maintain => "etcd-setup maintain",
        };
        let row = format!(
            "run {} {name}: {:.3} s; bbolt file {} -> {}; etcd's db {:.1} MiB \
             ({:.1} in use) -> {:.1} MiB ({:.1} in use); copy made in {:.1} s",
            k + 1,
            run.took.as_secs_f64(),
            file_mib(file_before),
            file_mib(file_after),
            mib(db_before),
            mib(in_use_before),
            mib(db_after),
            mib(in_use_after),
            copied.as_secs_f64()
        );
        println!("{row}");
        rows.push(row);
        match side {
            Side::Etcdctl => raw.push(run.took),
            Side::Maintain => {
                let (start, end) = defrag_call(&run.stdout)
                    .unwrap_or_else(|| panic!("maintain did not defragment: {}", run.stdout));
                let around = format!(
                    "  maintain around its defrag call: {} ms before it (config, alarm \
                     list, member list and statuses, the lock), {} ms after it (status, \
                     unlock, exit); the call itself {} ms",
                    start.saturating_sub(run.spawned_ms),
                    run.exited_ms.saturating_sub(end),
                    end.saturating_sub(start)
                );
                println!("{around}");
                rows.push(around);
                ours.push(run.took);
            }
        }
    }
    // Group k: ours[2k], ours[2k+1] beside raw[2k], raw[2k+1].
    let groups: Vec<(f64, f64)> = ours
        .chunks(2)
        .zip(raw.chunks(2))
        .map(|(o, r)| {
            (
                o.iter().sum::<Duration>().as_secs_f64(),
                r.iter().sum::<Duration>().as_secs_f64(),
            )
        })
        .collect();
    println!("\n--- summary (etcd {version}, one member on loopback) ---");
    println!("{snapshot_line}");
    println!("{checked_line}");
    println!("{verify_line}");
    for r in &rows {
        println!("{r}");
    }
    println!(
        "defrag of the same bbolt file, {}, etcd's db {:.1} MiB ({:.1} in use), {rounds} \
         group(s) of two each from fresh copies (A B B A): {}",
        file_mib(source_len),
        mib(db),
        mib(in_use),
        ratios("etcd-setup maintain", "etcdctl defrag", &groups)
    );
}

/// Each group's seconds (ours, theirs) and ratio, the median ratio and the whole's.
fn ratios(ours: &str, theirs: &str, groups: &[(f64, f64)]) -> String {
    let each: Vec<String> = groups
        .iter()
        .map(|(o, t)| format!("{o:.3} s / {t:.3} s = {:.2}x", o / t))
        .collect();
    let mut r: Vec<f64> = groups.iter().map(|(o, t)| o / t).collect();
    r.sort_by(f64::total_cmp);
    let median = if r.len() % 2 == 1 {
        r[r.len() / 2]
    } else {
        (r[r.len() / 2 - 1] + r[r.len() / 2]) / 2.0
    };
    let (o, t) = groups
        .iter()
        .fold((0.0, 0.0), |(a, b), (o, t)| (a + o, b + t));
    format!(
        "{ours} / {theirs} per group: {}; median {median:.2}x, all {:.2}x",
        each.join(", "),
        o / t
    )
}
