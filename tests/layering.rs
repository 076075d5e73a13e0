//! The house's layering (ARCHITECTURE.md, "The layout"): every `crate::`, `super::`,
//! `self::` and child-module path in `src/` is read, resolved to the file it names, and
//! the test fails on an import that runs up against the parts' order and on two files
//! that import each other (a face, `cluster/etcd.rs`, and a file of its own folder,
//! `cluster/etcd/json.rs`, are one unit and may). Plain Rust over the source text, no
//! dependencies.
//!
//! `LAYERING_PRINT=1 cargo test --test layering -- --nocapture` prints every edge between
//! files of different parts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The parts, bottom → top: a file may name files of its own part and of the parts
/// below it, never one above. The same order is ARCHITECTURE.md's layout table.
const PARTS: &[(&str, &[&str])] = &[
    // The crate root (`crate::VERSION`) and the reason codes every part speaks.
    ("root", &["lib.rs", "reason.rs"]),
    // Plumbing: configuration, the node's record, systemd, locks, signals, output, paths.
    ("shared", &["shared"]),
    // The cluster client: etcdctl, the gateway, /health, membership.
    ("cluster", &["cluster"]),
    // This etcd on this node: identity and URLs, unit, etcd.service, the data dir,
    // snapshot files and tools, the one restore.
    ("member", &["member"]),
    // Backups off the node.
    ("backup", &["backup"]),
    // The command line and exit codes (the commands below read their arguments here).
    ("contract", &["cli.rs", "exit.rs"]),
    // Day 1: `run` and `check`.
    ("road", &["road"]),
    // The day-2 commands.
    ("day2", &["day2"]),
    // The status service and its client.
    ("status", &["status"]),
    // The binary: `main.rs` names the library as `etcd_setup::`, never `crate::`.
    ("main", &["main.rs"]),
];

/// A part's rank and name for a file under `src/` (`shared/config/raw.rs`).
fn part_of(rel: &Path) -> Option<(usize, &'static str)> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let stem = first.strip_suffix(".rs").unwrap_or(first);
    PARTS
        .iter()
        .enumerate()
        .find_map(|(rank, (name, members))| {
            members
                .iter()
                .any(|m| *m == first || m.strip_suffix(".rs").is_none() && *m == stem)
                .then_some((rank, *name))
        })
}

/// One token of Rust source with comments, strings and characters removed.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Path, // `::`
    Open, // `{`
    Close,
    Comma,
    Semi,
    Star,
    Other,
}

fn lex(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let count = |s: &[char]| s.iter().filter(|&&x| x == '\n').count();
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let (start, mut depth) = (i, 0);
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            line += count(&c[start..i]);
        } else if (ch == 'r' || ch == 'b')
            && raw_string_start(&c, i).is_some()
            && !prev_is_ident(&c, i)
        {
            let (hashes, body) = raw_string_start(&c, i).unwrap_or((0, i));
            let start = i;
            i = body;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            line += count(&c[start..i]);
        } else if ch == '"' || (ch == 'b' && next == Some('"') && !prev_is_ident(&c, i)) {
            let start = i;
            i += if ch == 'b' { 2 } else { 1 };
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            line += count(&c[start..i.min(c.len())]);
        } else if ch == '\'' {
            // A character literal or a lifetime.
            if next == Some('\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            if word == "r" && c.get(i) == Some(&'#') {
                // A raw identifier: r#type.
                i += 1;
                continue;
            }
            out.push((Tok::Ident(word), line));
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == '.') {
                i += 1;
            }
            out.push((Tok::Other, line));
        } else if ch == ':' && next == Some(':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            let t = match ch {
                '{' => Tok::Open,
                '}' => Tok::Close,
                ',' => Tok::Comma,
                ';' => Tok::Semi,
                '*' => Tok::Star,
                // `$crate::` in a macro is `crate::`.
                '$' => {
                    i += 1;
                    continue;
                }
                _ => Tok::Other,
            };
            out.push((t, line));
            i += 1;
        }
    }
    out
}

fn prev_is_ident(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

/// For `r"`, `r#"`, `br"`, …: the number of `#` and where the body starts.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if c[j] == 'b' {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// One path a file names, with its line.
struct Named {
    segments: Vec<String>,
    line: usize,
}

/// The paths of a `use` tree starting at `toks[*i]`, each prefixed by `prefix`.
fn use_tree(toks: &[(Tok, usize)], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Named>) {
    let mut path = prefix;
    let line = toks.get(*i).map_or(0, |t| t.1);
    loop {
        match toks.get(*i).map(|t| &t.0) {
            Some(Tok::Ident(w)) if w == "as" => {
                *i += 2;
                out.push(Named {
                    segments: path,
                    line,
                });
                return;
            }
            Some(Tok::Ident(w)) => {
                if w != "self" || path.is_empty() {
                    path.push(w.clone());
                }
                *i += 1;
            }
            Some(Tok::Path) => *i += 1,
            Some(Tok::Star) => {
                *i += 1;
                out.push(Named {
                    segments: path,
                    line,
                });
                return;
            }
            Some(Tok::Open) => {
                *i += 1;
                loop {
                    match toks.get(*i).map(|t| &t.0) {
                        Some(Tok::Close) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Comma) => *i += 1,
                        None => return,
                        _ => use_tree(toks, i, path.clone(), out),
                    }
                }
            }
            _ => {
                out.push(Named {
                    segments: path,
                    line,
                });
                return;
            }
        }
    }
}

/// Every path a file's code names, each resolved against `module` (the file's module
/// path, with the inline modules it is in at that point).
fn named_paths(toks: &[(Tok, usize)], file_module: &[String]) -> Vec<(Vec<String>, Named)> {
    let mut out = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    let module = |inline: &[(String, usize)]| {
        let mut m = file_module.to_vec();
        m.extend(inline.iter().map(|(n, _)| n.clone()));
        m
    };
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Open => {
                depth += 1;
                i += 1;
            }
            Tok::Close => {
                depth -= 1;
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                i += 1;
            }
            Tok::Ident(w) if w == "mod" => {
                if let (Some((Tok::Ident(name), _)), Some((Tok::Open, _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth));
                    depth += 1;
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Tok::Ident(w) if w == "use" => {
                i += 1;
                let mut found = Vec::new();
                use_tree(toks, &mut i, Vec::new(), &mut found);
                let m = module(&inline);
                out.extend(found.into_iter().map(|n| (m.clone(), n)));
            }
            Tok::Ident(w)
                if (w == "crate" || w == "super" || w == "self")
                    && toks.get(i + 1).is_some_and(|t| t.0 == Tok::Path)
                    && (i == 0 || toks[i - 1].0 != Tok::Path) =>
            {
                let line = toks[i].1;
                let mut segments = vec![w.clone()];
                i += 1;
                while toks.get(i).is_some_and(|t| t.0 == Tok::Path) {
                    match toks.get(i + 1) {
                        Some((Tok::Ident(s), _)) => {
                            segments.push(s.clone());
                            i += 2;
                        }
                        _ => break,
                    }
                }
                out.push((module(&inline), Named { segments, line }));
            }
            _ => i += 1,
        }
    }
    out
}

/// A path's absolute module segments, or `None` for another crate's path.
fn absolute(
    module: &[String],
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => module.to_vec(),
        _ => {
            // A child module of this one, named relatively (`use json::Status`).
            let mut child = module.to_vec();
            child.push(first.clone());
            if !modules.contains(&child) {
                return None;
            }
            module.to_vec()
        }
    };
    let mut rest = path;
    if first == "crate" || first == "self" {
        rest = &path[1..];
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

struct Edge {
    from: PathBuf,
    to: PathBuf,
    line: usize,
    path: String,
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            source_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A file's module path: `shared/config/raw.rs` → `[shared, config, raw]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    if segs == ["lib"] || segs == ["main"] {
        segs.clear();
    }
    segs
}

/// Every edge between two distinct files of `src/`.
fn edges() -> Vec<Edge> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let rel: Vec<PathBuf> = files
        .iter()
        .map(|f| f.strip_prefix(&src).expect("under src").to_path_buf())
        .collect();
    let by_module: BTreeMap<Vec<String>, PathBuf> = rel
        .iter()
        .filter(|r| *r != Path::new("main.rs"))
        .map(|r| (module_of(r), r.clone()))
        .collect();
    let modules: BTreeSet<Vec<String>> = by_module.keys().cloned().collect();
    let mut edges = Vec::new();
    for (file, r) in files.iter().zip(&rel) {
        if r == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let toks = lex(&text);
        for (module, named) in named_paths(&toks, &module_of(r)) {
            let Some(abs) = absolute(&module, &named.segments, &modules) else {
                continue;
            };
            // The deepest file module the path passes through.
            let mut target = by_module.get(&Vec::new()).cloned();
            for n in 1..=abs.len() {
                if let Some(f) = by_module.get(&abs[..n]) {
                    target = Some(f.clone());
                }
            }
            let Some(to) = target else { continue };
            if &to != r {
                edges.push(Edge {
                    from: r.clone(),
                    to,
                    line: named.line,
                    path: named.segments.join("::"),
                });
            }
        }
    }
    edges
}

#[test]
fn every_file_belongs_to_a_part() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let lost: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(&src).expect("under src"))
        .filter(|r| part_of(r).is_none())
        .map(|r| r.display().to_string())
        .collect();
    assert!(lost.is_empty(), "files in no part of PARTS: {lost:?}");
}

#[test]
fn no_import_runs_up_against_the_parts_order() {
    let print = std::env::var_os("LAYERING_PRINT").is_some();
    let mut upward = Vec::new();
    for e in edges() {
        let (Some((from, fp)), Some((to, tp))) = (part_of(&e.from), part_of(&e.to)) else {
            continue;
        };
        if print && from != to {
            println!("{fp} -> {tp}: {}:{} {}", e.from.display(), e.line, e.path);
        }
        if to > from {
            upward.push(format!(
                "{}:{}: {} ({fp}) names {} ({tp}), a part above it",
                e.from.display(),
                e.line,
                e.path,
                e.to.display()
            ));
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the parts' order:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_two_files_import_each_other() {
    let mut pairs: BTreeMap<(PathBuf, PathBuf), (usize, String)> = BTreeMap::new();
    for e in edges() {
        pairs
            .entry((e.from.clone(), e.to.clone()))
            .or_insert((e.line, e.path));
    }
    let mut circles = Vec::new();
    for ((a, b), (line, path)) in &pairs {
        // A face and a file of its own folder are one unit: the face declares the file
        // and shows its items, the file reads the face's (`super::`).
        let face_of = |face: &Path, file: &Path| file.parent() == Some(&face.with_extension(""));
        if a < b && !face_of(a, b) && !face_of(b, a) {
            if let Some((back_line, back)) = pairs.get(&(b.clone(), a.clone())) {
                circles.push(format!(
                    "{}:{line} names {path}, and {}:{back_line} names {back}",
                    a.display(),
                    b.display()
                ));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "files that import each other:\n{}",
        circles.join("\n")
    );
}
