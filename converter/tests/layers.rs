//! The converter's modules depend on each other one way only.
//!
//! Every `crate::…` path in `src/` (comments and string literals stripped; `super::` resolved)
//! is an edge from the file it appears in to the file that defines the path's module. Two
//! checks:
//! * **layers**: each top-level module (a directory under `src/` or a single file) has a rank in
//!   [`LAYERS`]; an edge may only go to the same or a lower rank (read → align → model →
//!   report → import → pipeline);
//! * **no cycles** between files (Tarjan's strongly connected components), inside a layer too.
//!
//! A file's unit tests (from its first `#[cfg(test)]` on) are left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules from the bottom up; a module may use those on its own line or above.
const LAYERS: &[&[&str]] = &[
    &["error", "fastmap", "progress"],
    &["read"],
    &["align"],
    &["model"],
    &["report"],
    &["import"],
    &["pipeline"],
    &["shard"],
    &["lib"],
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The library's source files (not `main.rs`, `cli/` or `bin/`: the binaries use the library
/// from outside).
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "bin" || n == "cli") {
                continue;
            }
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") && p != src().join("main.rs") {
            out.push(p);
        }
    }
}

/// Module path of a file: `read/hot.rs` → ["read", "hot"], `model/mod.rs` → ["model"].
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// Source without comments and string/char literals (so doc links and messages are not edges).
fn code_only(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// `crate::a::b::C` and `super::x` paths of a file, as module paths (identifiers only).
fn paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for (at, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
    {
        if at > 0 && (ident(code[..at].chars().last().unwrap()) || code[..at].ends_with("::")) {
            continue;
        }
        let mut base: Vec<String> = if code[at..].starts_with("crate::") {
            Vec::new()
        } else {
            // `super` of a `mod.rs` or a file module is its parent module.
            module[..module.len().saturating_sub(1)].to_vec()
        };
        let mut rest = &code[at + code[at..].find("::").unwrap() + 2..];
        loop {
            let n = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
            if n == 0 {
                break;
            }
            base.push(rest[..n].to_string());
            rest = &rest[n..];
            if let Some(r) = rest.strip_prefix("::") {
                rest = r;
            } else {
                break;
            }
        }
        out.push(base);
    }
    out
}

/// The file defining the longest prefix of `path` that is a module.
fn target(path: &[String], modules: &BTreeMap<Vec<String>, PathBuf>) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains_key(p))
}

fn rank(module: &[String]) -> usize {
    let top = module.first().map(String::as_str).unwrap_or("lib");
    LAYERS
        .iter()
        .position(|l| l.contains(&top))
        .unwrap_or_else(|| panic!("top-level module `{top}` has no layer in LAYERS"))
}

struct Graph {
    modules: BTreeMap<Vec<String>, PathBuf>,
    edges: BTreeMap<Vec<String>, Vec<Vec<String>>>,
}

fn graph() -> Graph {
    let mut list = Vec::new();
    files(&src(), &mut list);
    let mut modules = BTreeMap::new();
    for f in &list {
        modules.insert(module_of(f), f.clone());
    }
    let mut edges = BTreeMap::new();
    for (m, f) in &modules {
        let text = std::fs::read_to_string(f).unwrap();
        // Unit tests (`#[cfg(test)] mod tests` at the end of a file) are not part of the design.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code = code_only(text);
        let mut to: Vec<Vec<String>> = paths(&code, m)
            .iter()
            .filter_map(|p| target(p, &modules))
            .filter(|t| t != m)
            .collect();
        to.sort();
        to.dedup();
        edges.insert(m.clone(), to);
    }
    Graph { modules, edges }
}

#[test]
fn every_edge_goes_down_the_layers() {
    let g = graph();
    assert!(
        g.modules.len() > 20,
        "found only {} modules",
        g.modules.len()
    );
    let mut bad = Vec::new();
    for (from, tos) in &g.edges {
        for to in tos {
            if rank(to) > rank(from) {
                bad.push(format!("{} → {}", from.join("::"), to.join("::")));
            }
        }
    }
    assert!(bad.is_empty(), "upward dependencies: {bad:#?}");
}

#[test]
fn no_import_cycles_between_files() {
    let g = graph();
    let names: Vec<&Vec<String>> = g.modules.keys().collect();
    let index: BTreeMap<&Vec<String>, usize> =
        names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let adj: Vec<Vec<usize>> = names
        .iter()
        .map(|n| g.edges[*n].iter().map(|t| index[t]).collect())
        .collect();
    let cycles: Vec<String> = strongly_connected(&adj)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            c.iter()
                .map(|&i| names[i].join("::"))
                .collect::<Vec<_>>()
                .join(" ↔ ")
        })
        .collect();
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}

/// The checker itself: it must see an upward edge and a cycle when there is one.
#[test]
fn the_parser_finds_edges_through_crate_and_super_paths() {
    let m = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let code = code_only(
        "use crate::read::hot::{Hot, x}; // crate::model::no\nlet s = \"crate::report\";\nuse super::verbs;\nfn f(a: crate::fastmap::FastMap<u8, u8>) {}",
    );
    let got = paths(&code, &m("read::scan"));
    assert_eq!(
        got,
        vec![m("read::hot"), m("fastmap::FastMap"), m("read::verbs")]
    );
    // 0 → 1 → 2 → 0 and 3 alone.
    let sccs = strongly_connected(&[vec![1], vec![2], vec![0], vec![]]);
    assert!(sccs.iter().any(|c| c.len() == 3));
    assert_eq!(rank(&m("read::hot")), 1);
    assert!(rank(&m("report")) > rank(&m("model")));
}

/// Tarjan's algorithm (iterative): the strongly connected components of a graph.
fn strongly_connected(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut out, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut child)) = work.last_mut() {
            if *child == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&w) = adj[v].get(*child) {
                *child += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(u, _)) = work.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(comp);
            }
        }
    }
    out
}
