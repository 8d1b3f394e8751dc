//! Fuzzes the converter's decoding path: arbitrary bytes as a log file go through header and
//! chunk parsing, record decoding, the metadata scan, topology, clock fits, the model pass and
//! the Perfetto encoder. Any panic is a bug; errors are fine.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Also exercise the zero-copy reader directly on the bytes.
    if let Ok(view) = sigmatrace_schemas::reader::LogView::parse(data, std::path::Path::new("fuzz"))
    {
        for c in view.chunks() {
            for r in view.records(c).flatten() {
                let _ = r.decode();
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("sigmatrace-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let log = dir.join("input.sigmatrace");
    if std::fs::write(&log, data).is_err() {
        return;
    }
    let opts = sigmatrace_convert::ConvertOptions {
        jobs: 1,
        ..Default::default()
    };
    let _ = sigmatrace_convert::convert(&[log], &dir.join("out.perfetto-trace"), &opts);
});
