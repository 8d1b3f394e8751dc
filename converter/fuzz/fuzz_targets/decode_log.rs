//! Fuzzes the converter's decoding path: arbitrary bytes as a log file go through header and
//! chunk parsing, record decoding, the metadata scan, topology, clock fits, the model pass and
//! the Perfetto encoder (default and full detail) or the stats report. Any panic is a bug;
//! errors are fine.
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
    // The input's length picks the path (each input takes one, the same every time): the
    // conversion at default detail, at full detail (drawn per-WR args, empty-poll runs), or
    // the stats report (every report section).
    let detail = match data.len() % 3 {
        1 => sigmatrace_convert::Detail::Full,
        _ => sigmatrace_convert::Detail::Normal,
    };
    let opts = sigmatrace_convert::ConvertOptions {
        jobs: 1,
        detail,
        ..Default::default()
    };
    if data.len() % 3 == 2 {
        if let Ok(r) = sigmatrace_convert::stats(std::slice::from_ref(&log), &opts) {
            let _ = (r.text(), r.json());
        }
    } else {
        let _ = sigmatrace_convert::convert(&[log], &dir.join("out.perfetto-trace"), &opts);
    }
});
