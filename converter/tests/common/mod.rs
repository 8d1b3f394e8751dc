//! Shared test helpers: synthetic log sets and the independent trace validator.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use sigmatrace_convert::synth::{self, Scenario, Truth};

/// Workspace root (converter/..).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Python that has `perfetto` and `protobuf`: $SIGMATRACE_PYTHON (set by scripts/test.sh),
/// else the workspace's .venv. Panics (never skips) when neither exists.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SIGMATRACE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = workspace().join(".venv/bin/python");
    assert!(
        venv.exists(),
        "no Python for the trace validator: set SIGMATRACE_PYTHON or run `bash scripts/install-deps.sh` (creates {})",
        venv.display()
    );
    venv
}

/// The validator script (shared/tools, beside the workspace).
pub fn validator() -> PathBuf {
    let v = workspace().join("../shared/tools/validate_perfetto.py");
    assert!(v.exists(), "trace validator missing at {}", v.display());
    v
}

/// Runs validate_perfetto.py on a trace; panics with its report unless it is clean.
/// Returns the validator's JSON (stats etc.).
pub fn validate(trace: &Path, expect_min: &[&str]) -> serde_json::Value {
    let mut cmd = Command::new(python());
    cmd.arg(validator()).arg(trace).arg("--json");
    if !expect_min.is_empty() {
        cmd.arg("--expect-min").args(expect_min);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the validator ({}): {e}", python().display()));
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "validator output is not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success() && v["ok"] == true,
        "validator rejected {}: {}",
        trace.display(),
        serde_json::to_string_pretty(&v).unwrap_or_default()
    );
    v
}

/// Writes a scenario into a fresh temp dir.
pub fn generate(sc: &Scenario) -> (tempfile::TempDir, Truth) {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = synth::write(dir.path(), sc).expect("synthetic logs");
    (dir, truth)
}

/// Decodes a trace written by the converter (expanding compressed packet blocks).
pub fn decode(trace: &Path) -> Vec<sigmatrace_convert::perfetto::proto::TracePacket> {
    use prost::Message;
    use sigmatrace_convert::perfetto::proto::Trace;
    let bytes = std::fs::read(trace).expect("trace");
    let mut out = Vec::new();
    for p in Trace::decode(&bytes[..]).expect("valid trace").packet {
        match &p.compressed_packets {
            Some(z) => {
                let mut d = flate2::read::ZlibDecoder::new(&z[..]);
                let mut raw = Vec::new();
                std::io::Read::read_to_end(&mut d, &mut raw).expect("zlib");
                out.extend(Trace::decode(&raw[..]).expect("inner packets").packet);
            }
            None => out.push(p),
        }
    }
    out
}
