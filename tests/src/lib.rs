//! Helpers for the end-to-end tests: everything comes from `sigmatrace-testkit` (artifact
//! lookup, free ports, guarded child processes, the repository's own trace checker); what is
//! specific to these tests is the golden-log fixture's location.

use std::path::{Path, PathBuf};

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

/// Converts `logs` into `dir/t1.perfetto-trace` and `dir/t2.perfetto-trace` with 1 and 2
/// worker threads, asserts the two are byte-identical and returns the first.
pub fn convert_with_one_and_two_workers(logs: &Path, dir: &Path, what: &str) -> PathBuf {
    let mut traces = Vec::new();
    for jobs in [1, 2] {
        let out = dir.join(format!("t{jobs}.perfetto-trace"));
        let opts = sigmatrace_convert::ConvertOptions {
            jobs,
            ..Default::default()
        };
        sigmatrace_convert::convert(&[logs.to_owned()], &out, &opts).unwrap();
        traces.push(out);
    }
    assert!(
        std::fs::read(&traces[0]).unwrap() == std::fs::read(&traces[1]).unwrap(),
        "{what}: traces with --jobs 1 and 2 differ"
    );
    traces.swap_remove(0)
}
