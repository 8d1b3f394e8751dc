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

/// A child process in its own process group, killed (with everything it started) when
/// dropped — also when a test panics — so no process outlives a failed test.
pub struct Guarded(pub Option<std::process::Child>);

impl Guarded {
    /// Spawns `cmd` as the leader of a new process group.
    pub fn spawn(cmd: &mut Command) -> Guarded {
        use std::os::unix::process::CommandExt;
        Guarded(Some(cmd.process_group(0).spawn().expect("spawn")))
    }

    /// Waits up to `timeout`; returns (success, stdout+stderr). Panics on timeout.
    pub fn finish(mut self, what: &str, timeout: std::time::Duration) -> (bool, String) {
        let start = std::time::Instant::now();
        let child = self.0.as_mut().unwrap();
        loop {
            if child.try_wait().unwrap().is_some() {
                let out = self.0.take().unwrap().wait_with_output().unwrap();
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                return (out.status.success(), text);
            }
            assert!(
                start.elapsed() < timeout,
                "{what} did not finish within {timeout:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            // SAFETY: signalling our own child's process group.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}
