//! Fuzzes `NsysReport::open` with arbitrary file contents (written to a per-process temp file,
//! the code path users hit) and checks the invariants of whatever it reads.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sigmatrace_nsys::{NsysReport, NvtxKind};

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        let dir = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        dir.join(format!(
            "sigmatrace-nsys-fuzz-{}.sqlite",
            std::process::id()
        ))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    std::fs::write(path, data).expect("write the scratch file");
    let Ok(report) = NsysReport::open(path) else {
        return;
    };
    for (s, e) in report
        .kernels
        .iter()
        .map(|k| (k.start, k.end))
        .chain(report.memcpys.iter().map(|m| (m.start, m.end)))
        .chain(report.memsets.iter().map(|m| (m.start, m.end)))
        .chain(report.syncs.iter().map(|m| (m.start, m.end)))
        .chain(report.api_calls.iter().map(|m| (m.start, m.end)))
    {
        assert!(e >= s, "an imported event ends before it starts");
    }
    for n in &report.nvtx {
        if n.kind == NvtxKind::Mark {
            assert!(n.end.is_none());
        }
        if let Some(e) = n.end {
            assert!(e >= n.start);
        }
    }
    let summary = report.summary();
    assert_eq!(summary.events.kernels, report.kernels.len());
    assert_eq!(summary.events.api_calls, report.api_calls.len());
    let json: serde_json::Value = serde_json::from_str(&summary.to_json()).expect("summary JSON");
    assert_eq!(json["events"]["memcpys"], report.memcpys.len());
    let _ = summary.to_table();
    let offset = data.first().map_or(0, |&b| i64::from(b) << 56);
    if let Ok(m) = report.clock_mapping(Some(offset), None) {
        let _ = m.to_realtime(i64::MAX);
        let _ = m.to_realtime(i64::MIN);
        let _ = m.describe();
    }
});
