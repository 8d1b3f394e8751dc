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
        assert!(tw.append(&post(i, 3)));
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
