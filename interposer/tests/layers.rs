//! The source's layering, checked on the source text (interposer/README.md, "Layout"):
//!
//! exports → swap → decode → runtime → record → sink, each layer using only layers after it
//! (and `ffi`, the bindings and loader access, used only by the C-facing layers); `record`
//! has no `unsafe` and is the only layer besides the sink that names the schemas crate's
//! record types; every source file is listed in the README's layout section.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, in dependency order: each may use those after it, never those before.
const LAYERS: &[&str] = &["exports", "swap", "decode", "runtime", "record", "sink"];
/// The layers that may use `ffi` (the C layouts and the loader).
const FFI_USERS: &[&str] = &["exports", "swap", "decode", "runtime"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as (path relative to src/, text).
fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read src dir") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src()).expect("under src").to_string_lossy();
                let text = std::fs::read_to_string(&p).expect("read source");
                out.push((rel.replace('\\', "/"), text));
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without comments (`//` to the end of the line; doc comments too).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level module a file belongs to (`swap/ctx.rs` → `swap`, `lib.rs` → `lib`).
fn module_of(rel: &str) -> &str {
    rel.split('/')
        .next()
        .map(|m| m.trim_end_matches(".rs"))
        .unwrap_or(rel)
}

/// The crate modules a file's code refers to: `crate::X…` (in `use` lines and paths), and
/// `super::X…` from a directory's `mod.rs` (whose `super` is the crate root).
fn referenced_modules(rel: &str, code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut scan = |prefix: &str| {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().next_back();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    };
    scan("crate::");
    if rel.ends_with("/mod.rs") {
        scan("super::");
    }
    found
}

#[test]
fn layers_only_use_the_layers_below_them() {
    let files = sources(&src());
    assert!(files.len() > 20, "found only {} source files", files.len());
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut violations = Vec::new();
    let mut edges: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (rel, text) in &files {
        let from = module_of(rel);
        for to in referenced_modules(rel, &code(text)) {
            if to == from {
                continue;
            }
            *edges.entry((from.to_string(), to.clone())).or_default() += 1;
            let allowed = match (rank(from), rank(&to), to.as_str()) {
                (_, _, "ffi") => FFI_USERS.contains(&from),
                // `ffi` uses no layer; `lib.rs` only declares them.
                (None, _, _) => from == "lib",
                (Some(a), Some(b), _) => a < b,
                (Some(_), None, _) => false,
            };
            if !allowed {
                violations.push(format!("{rel} uses crate::{to}"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports against the layer order {LAYERS:?} (ffi for {FFI_USERS:?} only):\n{}",
        violations.join("\n")
    );
    // The check sees the real structure: the hot path's chain is there.
    for (a, b) in [
        ("exports", "swap"),
        ("swap", "decode"),
        ("decode", "record"),
        ("record", "sink"),
        ("runtime", "record"),
    ] {
        assert!(
            edges.contains_key(&(a.to_string(), b.to_string())),
            "expected {a} to use {b}; edges: {edges:?}"
        );
    }
}

#[test]
fn the_checker_flags_an_upward_import() {
    let code = "use crate::sink::{self, cat};\nlet x = crate::exports::table::ENTRIES;";
    assert_eq!(
        referenced_modules("record/data.rs", code),
        vec!["sink".to_string(), "exports".to_string()]
    );
    assert_eq!(
        referenced_modules("swap/mod.rs", "use super::decode::x;"),
        vec!["decode".to_string()]
    );
    assert!(referenced_modules("swap/ctx.rs", "mycrate::exports::x").is_empty());
}

#[test]
fn record_has_no_unsafe_code() {
    let files = sources(&src().join("record"));
    assert!(!files.is_empty());
    let root = files
        .iter()
        .find(|(rel, _)| rel == "record/mod.rs")
        .expect("record/mod.rs");
    assert!(root.1.contains("#![forbid(unsafe_code)]"));
    for (rel, text) in &files {
        let code = code(text);
        let keyword = code
            .match_indices("unsafe")
            .any(|(i, _)| !code[i + 6..].starts_with(|c: char| c.is_alphanumeric() || c == '_'));
        assert!(!keyword, "{rel} contains unsafe code");
    }
}

/// The record struct names the schemas crate defines (in `records.rs`, or in the files of
/// `records/`).
fn schema_record_types() -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/src");
    let mut text = std::fs::read_to_string(src.join("records.rs")).unwrap_or_default();
    if let Ok(dir) = std::fs::read_dir(src.join("records")) {
        for e in dir.flatten() {
            text += &std::fs::read_to_string(e.path()).unwrap_or_default();
        }
    }
    assert!(!text.is_empty(), "no schemas/src/records.rs nor records/");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("pub struct "))
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|n| !n.is_empty())
        .collect()
}

#[test]
fn only_record_and_sink_name_the_record_types() {
    let types = schema_record_types();
    for t in ["PostSend", "WorkCompletion", "KernelLaunch", "QpCreate"] {
        assert!(types.iter().any(|n| n == t), "{t} not found in {types:?}");
    }
    let mut violations = Vec::new();
    for (rel, text) in sources(&src()) {
        if matches!(module_of(&rel), "record" | "sink") {
            continue;
        }
        let code = code(&text);
        for t in &types {
            let named = code.match_indices(t.as_str()).any(|(i, _)| {
                let before = code[..i].chars().next_back();
                let after = code[i + t.len()..].chars().next();
                let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                !ident(before) && !ident(after)
            });
            if named {
                violations.push(format!("{rel} names {t}"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "schemas record types outside record/ and sink/:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_readme_layout_lists_every_source_file() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let start = readme.find("## Layout").expect("a \"## Layout\" section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let missing: Vec<String> = sources(&src())
        .into_iter()
        .map(|(rel, _)| rel)
        .filter(|rel| !section.contains(rel.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "source files missing from README's layout section: {missing:?}"
    );
}
