//! Damaged input: clear errors for unreadable files, salvage of everything valid otherwise.

mod common;

use common::*;
use sigmatrace_schemas::*;
use std::path::Path;

fn make_log(path: &Path, records: u64) {
    let w = writer(path, 4096, 64 << 20);
    let mut tw = w.thread_writer(9);
    for i in 0..records {
        assert!(tw.append(&post_full(i, 0)));
    }
}

fn count(log: &LogFile) -> u64 {
    log.chunks()
        .iter()
        .map(|c| log.records(c).filter(|r| r.is_ok()).count() as u64)
        .sum()
}

#[test]
fn wrong_magic_is_rejected_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.sigmalog");
    std::fs::write(&p, vec![b'A'; 5000]).unwrap();
    let e = LogFile::open(&p).err().expect("must fail");
    let msg = e.to_string();
    assert!(matches!(e, ReadError::BadMagic { .. }), "{msg}");
    assert!(
        msg.contains("x.sigmalog") && msg.contains("offset 0") && msg.contains("SIGMATRC"),
        "{msg}"
    );
}

#[test]
fn short_file_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("short.sigmalog");
    std::fs::write(&p, b"SIGMATRC").unwrap();
    let e = LogFile::open(&p).err().unwrap();
    assert!(matches!(e, ReadError::TooShort { len: 8, .. }), "{e}");
}

#[test]
fn newer_major_version_names_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("new.sigmalog");
    make_log(&p, 3);
    let mut b = std::fs::read(&p).unwrap();
    b[8..10].copy_from_slice(&(FORMAT_MAJOR + 1).to_ne_bytes());
    b[10..12].copy_from_slice(&7u16.to_ne_bytes());
    std::fs::write(&p, &b).unwrap();
    let e = LogFile::open(&p).err().unwrap();
    let msg = e.to_string();
    assert!(matches!(e, ReadError::NewerVersion { .. }));
    assert!(msg.contains(&format!("{}.7", FORMAT_MAJOR + 1)), "{msg}");
    assert!(
        msg.contains(&format!("{FORMAT_MAJOR}.{FORMAT_MINOR}")),
        "{msg}"
    );
}

#[test]
fn newer_minor_version_with_unknown_record_kind_is_read_and_unknown_kind_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("minor.sigmalog");
    make_log(&p, 3);
    let mut b = std::fs::read(&p).unwrap();
    b[10..12].copy_from_slice(&(FORMAT_MINOR + 1).to_ne_bytes());
    // Turn the second record into an unknown kind (same length).
    let rec1 = HEADER_SIZE + CHUNK_HEADER_SIZE + 64;
    b[rec1..rec1 + 2].copy_from_slice(&(RecordKind::NEXT_FREE_ID + 100).to_ne_bytes());
    std::fs::write(&p, &b).unwrap();
    let log = LogFile::open(&p).unwrap();
    let raws: Vec<_> = log.records(&log.chunks()[0]).map(|r| r.unwrap()).collect();
    let decoded: Vec<_> = raws.iter().map(|r| r.decode().unwrap()).collect();
    assert_eq!(decoded.len(), 3);
    assert!(matches!(decoded[1], Record::Unknown { .. }));
    assert!(matches!(decoded[2], Record::PostSend(p) if p.wr_id == 2));
}

#[test]
fn truncated_file_keeps_whole_records_and_reports_losses() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("trunc.sigmalog");
    make_log(&p, 100); // 62 in chunk 0, 38 in chunk 1
    let b = std::fs::read(&p).unwrap();
    // Cut chunk 1 in the middle of its 11th record.
    let cut = HEADER_SIZE + 4096 + CHUNK_HEADER_SIZE + 10 * 64 + 20;
    std::fs::write(&p, &b[..cut]).unwrap();
    let log = LogFile::open(&p).unwrap();
    let s = log.salvage();
    assert!(s.truncated);
    assert_eq!(count(&log), 62 + 10);
    assert_eq!(s.lost_records, 28);
    assert_eq!(s.lost_bytes, 28 * 64);
    assert!(s.issues[0].message.contains("truncated"), "{:?}", s.issues);
    assert_eq!(s.issues[0].offset, (HEADER_SIZE + 4096) as u64);
}

#[test]
fn corrupt_chunk_is_reported_and_other_chunks_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("corrupt.sigmalog");
    make_log(&p, 150); // chunks 0,1 full (62 each), chunk 2 has 26
    let mut b = std::fs::read(&p).unwrap();
    let c1 = HEADER_SIZE + 4096;
    b[c1..c1 + 4].copy_from_slice(b"XXXX");
    // Corrupt a record length inside chunk 2 (its 5th record).
    let r = HEADER_SIZE + 2 * 4096 + CHUNK_HEADER_SIZE + 4 * 64;
    b[r + 2..r + 4].copy_from_slice(&13u16.to_ne_bytes());
    std::fs::write(&p, &b).unwrap();
    let log = LogFile::open(&p).unwrap();
    assert_eq!(log.salvage().issues.len(), 1);
    assert_eq!(log.salvage().issues[0].offset, c1 as u64);
    assert!(log.salvage().issues[0].message.contains("CHNK"));
    assert_eq!(log.chunks().len(), 2);
    let errs: Vec<RecordError> = log
        .chunks()
        .iter()
        .flat_map(|c| log.records(c))
        .filter_map(|r| r.err())
        .collect();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].offset, r as u64);
    assert!(errs[0].what.contains("length 13"), "{}", errs[0]);
    assert_eq!(count(&log), 62 + 4);
}

#[test]
fn allocated_but_uninitialised_chunks_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("zero.sigmalog");
    make_log(&p, 10);
    let mut b = std::fs::read(&p).unwrap();
    b.extend(std::iter::repeat_n(0u8, 4096 * 2));
    std::fs::write(&p, &b).unwrap();
    let log = LogFile::open(&p).unwrap();
    assert_eq!(log.salvage().unused_chunks, 2);
    assert!(log.salvage().is_clean());
    assert_eq!(count(&log), 10);
}
