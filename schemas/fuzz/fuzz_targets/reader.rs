//! Fuzzes the log reader: arbitrary bytes must give an error or a salvaged view, never a
//! panic, hang or unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sigmatrace_schemas::{LogView, HEADER_SIZE};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    // Most inputs are too short for a header: build one from a valid prefix so the fuzzer
    // explores chunks and records too.
    let mut bytes: Vec<u64> = vec![0; data.len().div_ceil(8) + HEADER_SIZE / 8];
    // Work on an 8-aligned copy so record casts see realistic alignment.
    let buf: &mut [u8] = bytemuck_cast(&mut bytes);
    static TEMPLATE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let template = TEMPLATE.get_or_init(template_header);
    let take = if data.first().copied().unwrap_or(0) & 1 == 0 { template.len() } else { 0 };
    buf[..take].copy_from_slice(&template[..take]);
    let n = data.len().min(buf.len() - take);
    buf[take..take + n].copy_from_slice(&data[..n]);
    let len = take + n;
    if let Ok(view) = LogView::parse(&buf[..len], Path::new("fuzz")) {
        let _ = view.header();
        for c in view.chunks() {
            for r in view.records(c) {
                match r {
                    Ok(raw) => {
                        let _ = raw.decode();
                    }
                    Err(e) => {
                        let _ = e.to_string();
                    }
                }
            }
        }
    }
});

fn bytemuck_cast(v: &mut [u64]) -> &mut [u8] {
    let len = v.len() * 8;
    // SAFETY: u64 has no padding or invalid bit patterns; the byte view covers exactly the
    // vector's memory and borrows it mutably.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, len) }
}

fn template_header() -> Vec<u8> {
    use sigmatrace_schemas::*;
    let ts = Timestamper::with_source(TimestampSource::MonotonicRaw);
    let mut h = FileHeader::for_current_process(ts.source(), 1_000_000_000, ts.snapshot(), 4096);
    h.chunk_size = 4096;
    h.encode()
}
