//! Times the archive pass on one tarball, for `tests/inputs/bench-extract`.
//!
//! Usage: `bench_extract TARBALL STAGING_PARENT RUNS`. Prints the best wall time of RUNS
//! validate+extract passes, then the time `fsync_tree` takes on one extracted tree.

use etcd_setup::archive::{extract, fsync_tree, Policy};
use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, tarball, parent, runs] = args.as_slice() else {
        anyhow::bail!("usage: bench_extract TARBALL STAGING_PARENT RUNS");
    };
    let runs: u32 = runs.parse()?;
    let policy = Policy::default();
    let mut best = Duration::MAX;
    let mut fsync = Duration::ZERO;
    for run in 0..runs {
        let input = File::open(tarball)?;
        let start = Instant::now();
        let extracted = extract(input, tarball, Path::new(parent), &policy)?;
        best = best.min(start.elapsed());
        if run == 0 {
            println!(
                "extracted {} ({} entries, {} bytes, sha256 {})",
                extracted.top,
                extracted.entries,
                extracted.unpacked_bytes,
                extracted.sha256_hex()
            );
            let start = Instant::now();
            fsync_tree(extracted.staging.path())?;
            fsync = start.elapsed();
        }
    }
    println!("ours_best_s={:.3}", best.as_secs_f64());
    println!("fsync_tree_s={:.3}", fsync.as_secs_f64());
    Ok(())
}
