//! Shared test helpers: synthetic log sets and the trace checker (from `sigmatrace-testkit`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use sigmatrace_schemas::clock::TimestampSource;
use sigmatrace_schemas::header::{FileHeader, RankInfo};
use sigmatrace_schemas::records::{ClockSnapshot, RecordHeader};
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

/// The event names interned in decoded packets, by (sequence, iid) (iids are per sequence).
pub fn event_names(
    pkts: &[sigmatrace_timeline::proto::TracePacket],
) -> std::collections::HashMap<(u32, u64), String> {
    pkts.iter()
        .filter_map(|p| {
            p.interned_data
                .as_ref()
                .map(|i| (p.trusted_packet_sequence_id.unwrap_or(0), i))
        })
        .flat_map(|(s, i)| {
            i.event_names
                .iter()
                .map(move |e| ((s, e.iid.unwrap()), e.name.clone().unwrap()))
        })
        .collect()
}

/// A clock snapshot at `t` ns on every clock but REALTIME, which reads `realtime_origin + t`
/// (a log with MONOTONIC_RAW timestamps).
pub fn snapshot(t: u64, realtime_origin: u64) -> ClockSnapshot {
    ClockSnapshot {
        hdr: RecordHeader::of::<ClockSnapshot>(0),
        ts: t,
        monotonic: t,
        monotonic_raw: t,
        boottime: t,
        realtime: realtime_origin + t,
        ts_after: t,
    }
}

/// The header of a hand-written log of process `pid`, rank `rank`, started at `start`: this
/// build's format, 64 KiB chunks, MONOTONIC_RAW timestamps in ns; host `simhost`, boot id
/// 7s, no command line or attributes (callers override what their case needs).
pub fn log_header(pid: u32, rank: u32, start: ClockSnapshot) -> FileHeader {
    FileHeader {
        major: sigmatrace_schemas::FORMAT_MAJOR,
        minor: sigmatrace_schemas::FORMAT_MINOR,
        header_size: 4096,
        chunk_size: 1 << 16,
        pointer_size: 8,
        ts_source: TimestampSource::MonotonicRaw,
        flags: 0,
        pid,
        ppid: 1,
        rank: RankInfo {
            rank: Some(rank),
            ..Default::default()
        },
        tsc_hz: 1_000_000_000,
        start,
        boot_id: [7; 16],
        hostname: "simhost".into(),
        cmdline: vec![],
        exe: String::new(),
        attrs: vec![],
        dropped: 0,
        chunks_allocated: 0,
    }
}

/// A small synthetic set: 2 ranks in a ring, send/receive, 2000 operations, 16 KiB chunks.
pub fn small_ring() -> (tempfile::TempDir, Truth) {
    let mut sc = Scenario::ring(2, 1, synth::Pattern::SendRecv, 2000);
    sc.chunk_size = 1 << 14;
    generate(&sc)
}

/// Conversion options with two jobs.
pub fn two_jobs() -> sigmatrace_convert::ConvertOptions {
    sigmatrace_convert::ConvertOptions {
        jobs: 2,
        ..Default::default()
    }
}

/// Converts every log in `dir` into `dir/<trace>` with [`two_jobs`].
pub fn convert_dir(
    dir: &Path,
    trace: &str,
) -> Result<sigmatrace_convert::Report, sigmatrace_convert::ConvertError> {
    sigmatrace_convert::convert_with_report(&[dir.to_owned()], &dir.join(trace), &two_jobs())
}

/// The summary warning of `rep` that names the file `log` and says `what`.
pub fn warning_about<'a>(
    rep: &'a sigmatrace_convert::Report,
    log: &Path,
    what: &str,
) -> Option<&'a String> {
    let name = log.file_name().unwrap().to_string_lossy().to_string();
    rep.summary
        .warnings
        .iter()
        .find(|w| w.contains(&name) && w.contains(what))
}

/// Cuts the file `path` to `len` bytes.
pub fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .expect("truncate");
}
