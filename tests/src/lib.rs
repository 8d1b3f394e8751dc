//! Helpers for the end-to-end tests: where the built artifacts are, and the independent
//! Perfetto validator (`shared/tools/validate_perfetto.py`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the repository checkout).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `target/<profile>` of the running test binary (works with any CARGO_TARGET_DIR).
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().unwrap();
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().unwrap().to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// A built artifact; panics with a clear message when it is missing.
pub fn artifact(name: &str) -> PathBuf {
    let p = build_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace --all-targets)",
        p.display()
    );
    p
}

/// The Python interpreter with `perfetto` and `protobuf` (scripts/install-deps.sh makes it).
pub fn python() -> PathBuf {
    let p = std::env::var_os("SIGMATRACE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv/bin/python"));
    assert!(
        p.exists(),
        "Python for the trace validator not found at {} (run scripts/install-deps.sh)",
        p.display()
    );
    p
}

/// The independent validator script.
pub fn validator() -> PathBuf {
    let p = workspace_root().join("../shared/tools/validate_perfetto.py");
    assert!(p.exists(), "validator missing at {}", p.display());
    p
}

/// Runs the validator on `trace`, asserts it passes, and returns its JSON report.
pub fn validate(trace: &Path, expect_min: &[&str]) -> serde_json::Value {
    let mut c = Command::new(python());
    c.arg(validator()).arg(trace).arg("--json");
    for e in expect_min {
        c.arg("--expect-min").arg(e);
    }
    let out = c.output().expect("run validate_perfetto.py");
    let text = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "validator output is not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success() && json["ok"] == serde_json::Value::Bool(true),
        "validate_perfetto.py rejected {}: {json:#}",
        trace.display()
    );
    json
}
