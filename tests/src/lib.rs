//! Helpers for the end-to-end tests: everything comes from `sigmatrace-testkit` (artifact
//! lookup, free ports, guarded child processes, the repository's own trace checker); what is
//! specific to these tests is the golden-log fixture's location.

use std::path::PathBuf;

pub use sigmatrace_testkit::trace::validate;
pub use sigmatrace_testkit::{
    artifact, build_dir, convert_logs, free_port, output_ok, workspace_root, Guarded,
};

/// A file under `fixtures/` of the repository.
pub fn fixture(rel: &str) -> PathBuf {
    let p = workspace_root().join("fixtures").join(rel);
    assert!(p.exists(), "fixture {} is missing", p.display());
    p
}
