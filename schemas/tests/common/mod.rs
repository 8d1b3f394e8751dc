//! Helpers shared by the schemas integration tests.
#![allow(dead_code)]

use sigmatrace_schemas::*;
use std::path::Path;

/// A header for the current process with a fixed clock snapshot.
pub fn test_header() -> FileHeader {
    FileHeader::uncalibrated(DEFAULT_CHUNK_SIZE)
}

/// Creates a writer with the given chunk size and cap.
pub fn writer(path: &Path, chunk_size: u32, max_bytes: u64) -> LogWriter {
    LogWriter::create(
        path,
        &test_header(),
        WriterOptions {
            chunk_size,
            max_bytes,
            ..Default::default()
        },
    )
    .expect("create log")
}

/// A PostSend record whose fields all derive from `seq` (so content can be checked): every
/// other one (even `seq`) has no immediate and is written compact.
pub fn post(seq: u64, thread: u32) -> PostSend {
    PostSend {
        imm: if seq.is_multiple_of(2) { 0 } else { seq as u32 },
        ..post_full(seq, thread)
    }
}

/// Like [`post`], but always written as a full 64-byte record (an immediate).
pub fn post_full(seq: u64, thread: u32) -> PostSend {
    PostSend {
        hdr: RecordHeader::of::<PostSend>(2),
        ts: seq.wrapping_mul(10),
        wr_id: seq,
        remote_addr: seq.wrapping_mul(0x9E37_79B9),
        compare_add: 0,
        qpn: thread,
        bytes: (seq % 4096) as u32,
        rkey: 0x1234,
        imm: seq as u32 | 1 << 31,
        num_sge: 1,
        opcode: 0,
        source: post_source::POST_SEND,
        _pad: 0,
    }
}

/// Reads every record of a log, returning (tid, records) per chunk in file order.
/// Per chunk: owning tid and the raw bytes of each record.
pub type ChunkRecords = Vec<(u32, Vec<Vec<u8>>)>;

pub fn read_all(path: &Path) -> (LogFile, ChunkRecords) {
    let log = LogFile::open(path).expect("open log");
    let mut out = Vec::new();
    for c in log.chunks() {
        let recs = log
            .records(c)
            .map(|r| r.expect("record").record_bytes().to_vec())
            .collect();
        out.push((c.header.tid, recs));
    }
    (log, out)
}

/// Resident kB of this process's mapping of `path` (from /proc/self/smaps).
pub fn resident_kb(path: &std::path::Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.to_str().unwrap();
    let mut in_map = false;
    let mut kb = 0;
    for line in smaps.lines() {
        if line.contains('-') && line.split_whitespace().nth(1).is_some_and(|p| p.len() == 4) {
            in_map = line.ends_with(name);
        } else if in_map {
            if let Some(v) = line.strip_prefix("Rss:") {
                kb += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap();
            }
        }
    }
    kb
}
