//! `LogWriter::prefault_ahead`: chunks prepared off the appending thread are used in order,
//! never appear as chunks of their own, and never exceed the size cap.

mod common;

use common::*;
use sigmatrace_schemas::*;

#[test]
fn prepared_chunks_are_used_in_order_and_unused_ones_read_as_unused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.sigmalog");
    let w = writer(&p, 4096, 1 << 20);
    assert_eq!(
        w.prefault_ahead(3).unwrap(),
        3,
        "nothing allocated yet: chunks 0..3 prepared"
    );
    let len = std::fs::metadata(&p).unwrap().len();
    assert!(
        len >= HEADER_SIZE as u64 + 3 * 4096,
        "file blocks exist: {len}"
    );
    // Two chunks' worth of records: chunks 0 and 1 are allocated from the prepared ones.
    let per_chunk = (4096 - CHUNK_HEADER_SIZE) / std::mem::size_of::<PostSend>();
    let mut tw = w.thread_writer(3);
    for i in 0..(per_chunk as u64 + 5) {
        assert!(tw.append(&post_full(i, 3)));
    }
    assert_eq!(
        w.prefault_ahead(3).unwrap(),
        3,
        "prepared up to 3 past the 2 allocated"
    );
    let log = LogFile::open(&p).unwrap();
    assert!(log.salvage().is_clean(), "{:?}", log.salvage());
    assert_eq!(log.chunks().len(), 2, "prepared chunks are not chunks");
    let seqs: Vec<u64> = log
        .chunks()
        .iter()
        .flat_map(|c| log.records(c))
        .map(|r| match r.unwrap().decode().unwrap() {
            Record::PostSend(p) => p.wr_id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(seqs, (0..(per_chunk as u64 + 5)).collect::<Vec<_>>());
}

#[test]
fn preparing_stays_within_the_size_cap() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.sigmalog");
    // Room for two chunks after the header.
    let w = writer(&p, 4096, HEADER_SIZE as u64 + 2 * 4096);
    assert_eq!(w.prefault_ahead(10).unwrap(), 2);
    assert!(std::fs::metadata(&p).unwrap().len() <= HEADER_SIZE as u64 + 2 * 4096);
    assert_eq!(w.prefault_ahead(10).unwrap(), 2, "idempotent");
}

#[test]
fn retired_chunks_leave_the_process_memory_and_keep_their_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.sigmalog");
    let w = writer(&p, 64 << 10, 64 << 20);
    let mut tw = w.thread_writer(7);
    // 64 chunks of 64 KiB (1020 records each).
    let n = 64 * 1020u64;
    for i in 0..n {
        assert!(tw.append(&post_full(i, 7)));
    }
    let before = resident_kb(&p);
    assert!(
        before >= 60 * 64,
        "the written chunks are resident: {before} kB"
    );
    assert_eq!(w.release_retired(), 63, "every chunk but the one in use");
    assert_eq!(w.release_retired(), 0, "released once");
    let after = resident_kb(&p);
    assert!(
        after <= 2 * 64 + 4,
        "only the chunk in use (and the header) stays resident: {after} kB (was {before})"
    );
    // The writer keeps appending into its chunk; every record reads back.
    for i in n..n + 10 {
        assert!(tw.append(&post_full(i, 7)));
    }
    let log = LogFile::open(&p).unwrap();
    assert!(log.salvage().is_clean(), "{:?}", log.salvage());
    let seqs: Vec<u64> = log
        .chunks()
        .iter()
        .flat_map(|c| log.records(c))
        .map(|r| match r.unwrap().decode().unwrap() {
            Record::PostSend(q) => {
                assert_eq!(*q, post_full(q.wr_id, 7));
                q.wr_id
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(seqs, (0..n + 10).collect::<Vec<_>>());
}
