//! One validate+extract pass over a tarball, for `tests/inputs/bench-extract` to time from
//! outside like `tar -xzf`.
//!
//! Usage: `bench_extract TARBALL STAGING_PARENT [--fsync]`. Keeps the staging folder (the
//! script removes it outside the timing, as it does tar's output) and prints `key=value`
//! lines: the staging folder, this process's peak RSS, and with `--fsync` the time
//! `fsync_tree` then takes, which the installer pays before its rename.

use anyhow::Context;
use etcd_setup::road::archive::{extract, fsync_tree, Policy};
use std::fs::File;
use std::path::Path;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (tarball, parent, fsync) = match args.as_slice() {
        [t, p] => (t, p, false),
        [t, p, f] if f == "--fsync" => (t, p, true),
        _ => anyhow::bail!("usage: bench_extract TARBALL STAGING_PARENT [--fsync]"),
    };
    let input = File::open(tarball).with_context(|| format!("cannot open {tarball}"))?;
    let extracted = extract(input, tarball, Path::new(parent), &Policy::default())?;
    if fsync {
        let start = Instant::now();
        fsync_tree(extracted.staging.path())?;
        println!("fsync_s={:.3}", start.elapsed().as_secs_f64());
    }
    let status = std::fs::read_to_string("/proc/self/status")?;
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .context("no VmHWM in /proc/self/status")?;
    println!("peak_rss_kib={}", peak.trim().trim_end_matches(" kB"));
    println!("sha256={}", extracted.sha256_hex());
    println!("staging={}", extracted.staging.into_path().display());
    Ok(())
}
