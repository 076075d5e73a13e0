//! One validate+extract pass over a tarball, for `tests/inputs/bench-extract` to time from
//! outside like `tar -xzf`.
//!
//! Usage: `bench_extract TARBALL STAGING_PARENT [--fsync]`. Keeps the staging folder (the
//! script removes it outside the timing, as it does tar's output) and prints `key=value`
//! lines: the staging folder, this process's peak RSS, and with `--fsync` the time
//! `fsync_tree` then takes, which the installer pays before its rename.
//!
//! `bench_extract --stages TARBALL STAGING_PARENT` (issue 24 item 2) times the pass's parts
//! one by one, best of three, on the machine it runs on (meant for the node VM, where the
//! pass runs under TCG; copy the static musl build in): reading the file, SHA-256 over it, CRC-32 of the unpacked stream,
//! inflate alone, the whole pass (which does all of these once, and writes), and the
//! installer's `fsync_tree`; `stage_NAME_s=` lines.

use anyhow::Context;
use etcd_setup::road::archive::{extract, fsync_tree, Policy};
use std::fs::File;
use std::path::Path;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, t, p] = args.as_slice() {
        if flag == "--stages" {
            return stages(Path::new(t), Path::new(p));
        }
    }
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

/// Best of three of `f`, in seconds.
fn best(mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        f()?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn stages(tarball: &Path, parent: &Path) -> anyhow::Result<()> {
    use sha2::Digest;
    use std::io::Read;
    let bytes =
        std::fs::read(tarball).with_context(|| format!("cannot read {}", tarball.display()))?;
    let mut unpacked = Vec::new();
    flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut unpacked)?;
    let read = best(|| {
        let mut f = File::open(tarball)?;
        let mut buf = vec![0u8; 64 * 1024];
        while f.read(&mut buf)? > 0 {}
        Ok(())
    })?;
    let sha = best(|| {
        std::hint::black_box(sha2::Sha256::digest(&bytes));
        Ok(())
    })?;
    let crc = best(|| {
        std::hint::black_box(crc32fast::hash(&unpacked));
        Ok(())
    })?;
    let inflate = best(|| {
        // A gzip header without optional fields (FLG 0, as `tar -czf` writes) is 10 bytes;
        // any other tarball is refused here rather than timed wrong.
        anyhow::ensure!(
            bytes.len() > 10 && bytes[3] == 0,
            "{}: --stages needs a gzip header without optional fields",
            tarball.display()
        );
        let mut d = flate2::Decompress::new(false);
        let mut out = vec![0u8; 128 * 1024];
        let mut input = &bytes[10..];
        loop {
            let before_in = d.total_in();
            let status = d.decompress(input, &mut out, flate2::FlushDecompress::None)?;
            input = &input[(d.total_in() - before_in) as usize..];
            if status == flate2::Status::StreamEnd {
                break;
            }
        }
        Ok(())
    })?;
    let (mut pass, mut fsync) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let start = Instant::now();
        let extracted = extract(File::open(tarball)?, "bench", parent, &Policy::default())?;
        pass = pass.min(start.elapsed().as_secs_f64());
        let start = Instant::now();
        fsync_tree(extracted.staging.path())?;
        fsync = fsync.min(start.elapsed().as_secs_f64());
    }
    println!("stage_read_s={read:.3}");
    println!("stage_sha256_s={sha:.3}");
    println!("stage_crc32_s={crc:.3}");
    println!("stage_inflate_s={inflate:.3}");
    println!("stage_pass_s={pass:.3}");
    println!("stage_fsync_tree_s={fsync:.3}");
    Ok(())
}
