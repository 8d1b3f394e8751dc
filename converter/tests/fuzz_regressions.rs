//! Inputs the `decode_log` fuzzer found (`converter/fuzz`), kept so that they run on every
//! test: each goes through the paths the fuzz target takes — the conversion at default and
//! full detail and the stats report — and must end in a result or an error, never a panic
//! (this debug build checks integer overflow, as the fuzz build does).
//!
//! - `time-base-near-u64-max.sigmalog`: a chunk whose `TimeBase` sets a base within 2^24 of
//!   2^64, so `base + dts` overflowed in the compact-record reader.
//! - `times-spanning-i64.sigmalog`: records whose output times span nearly all of i64, so the
//!   causality join's epoch arithmetic overflowed.

use std::path::Path;

use sigmatrace_convert::{convert, stats, ConvertOptions, Detail};

fn run_every_path(name: &str) {
    let input = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz-regressions")
        .join(name);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("input.sigmatrace");
    std::fs::copy(&input, &log).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    for detail in [Detail::Normal, Detail::Full] {
        let opts = ConvertOptions {
            jobs: 1,
            detail,
            ..Default::default()
        };
        let out = dir.path().join("out.perfetto-trace");
        let _ = convert(std::slice::from_ref(&log), &out, &opts);
        if let Ok(r) = stats(std::slice::from_ref(&log), &opts) {
            let _ = (r.text(), r.json());
        }
    }
}

#[test]
fn a_time_base_near_the_top_of_u64() {
    run_every_path("time-base-near-u64-max.sigmalog");
}

#[test]
fn times_spanning_all_of_i64() {
    run_every_path("times-spanning-i64.sigmalog");
}
