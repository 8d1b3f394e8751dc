//! Shared test helpers: synthetic log sets and the trace checker (from `sigmatrace-testkit`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use sigmatrace_synth::{self as synth, Scenario, Truth};

/// Workspace root (converter/..).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Checks a trace with the repository's own checker (`sigmatrace-testkit`); panics with its
/// report unless it is valid and every `KEY=N` minimum holds. Returns the report as JSON.
#[allow(unused_imports)]
pub use sigmatrace_testkit::trace::validate;

/// Writes a scenario into a fresh temp dir.
pub fn generate(sc: &Scenario) -> (tempfile::TempDir, Truth) {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = synth::write(dir.path(), sc).expect("synthetic logs");
    (dir, truth)
}

/// Decodes a trace written by the converter (expanding compressed packet blocks).
pub fn decode(trace: &Path) -> Vec<sigmatrace_timeline::proto::TracePacket> {
    use prost::Message;
    use sigmatrace_timeline::proto::Trace;
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
