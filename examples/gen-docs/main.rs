//! Writes the man pages (OUT/man8/*.8) and the bash completion
//! (OUT/completions/etcd-setup.bash) for packaging/build-deb:
//!
//!     cargo run --example gen-docs -- OUT
//!
//! A build-time tool: clap_mangen and clap_complete are dev-dependencies, so the shipped
//! binary links neither.

mod pages;

use anyhow::{bail, Context, Result};
use std::path::PathBuf;

fn main() -> Result<()> {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        bail!("usage: gen-docs OUT");
    };
    let readme_path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme =
        std::fs::read_to_string(readme_path).with_context(|| format!("reading {readme_path}"))?;
    let pages = pages::man_pages(&readme).map_err(anyhow::Error::msg)?;
    let man8 = out.join("man8");
    let completions = out.join("completions");
    for dir in [&man8, &completions] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for page in &pages {
        let path = man8.join(&page.file);
        std::fs::write(&path, &page.roff).with_context(|| format!("writing {}", path.display()))?;
    }
    let path = completions.join("etcd-setup.bash");
    std::fs::write(&path, pages::bash_completion())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
