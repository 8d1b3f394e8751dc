//! The README's "Repository" table names every top-level folder of the repository, and every
//! folder it names exists: the layout a newcomer reads is the one they cloned.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::path::Path;

/// Top-level folders that are build output or local state, never part of the layout.
const NOT_LAYOUT: &[&str] = &["target", ".git", ".venv", ".ci", ".gl", ".whl"];

fn readme_folders(readme: &str) -> BTreeSet<String> {
    let section = readme
        .split("\n## Repository")
        .nth(1)
        .expect("README.md has a '## Repository' section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter_map(|p| p.strip_suffix('/'))
        .map(str::to_owned)
        .collect()
}

fn tracked_top_level_folders(root: &Path) -> BTreeSet<String> {
    let out = std::process::Command::new("git")
        .args(["ls-files"])
        .current_dir(root)
        .output()
        .expect("git ls-files runs");
    assert!(out.status.success(), "git ls-files failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|f| f.split_once('/').map(|(dir, _)| dir.to_owned()))
        .filter(|d| !NOT_LAYOUT.contains(&d.as_str()))
        .collect()
}

#[test]
fn readme_layout_matches_the_tree() {
    let root = sigmatrace_testkit::workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let named = readme_folders(&readme);
    let tracked = tracked_top_level_folders(&root);
    let missing: Vec<_> = tracked.difference(&named).collect();
    let stale: Vec<_> = named.difference(&tracked).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README.md's Repository table is out of date: folders not listed {missing:?}, \
         listed but absent {stale:?}"
    );
}
