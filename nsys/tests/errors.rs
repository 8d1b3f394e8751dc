//! Garbage, truncated, corrupt and non-nsys input: clear, typed errors naming the file.

mod common;

use std::fs;
use std::path::Path;

use common::{fixture, make_db};
use sigmatrace_nsys::{NsysError, NsysReport};

fn open_err(path: &Path) -> NsysError {
    let err = NsysReport::open(path).expect_err("opening must fail");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&path.display().to_string()),
        "error does not name the file first: {msg}"
    );
    err
}

#[test]
fn missing_file_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.sqlite");
    let err = open_err(&path);
    assert!(matches!(err, NsysError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot read the file"));
}

#[test]
fn garbage_is_not_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.sqlite");
    fs::write(&path, b"this is a .nsys-rep, not an export \x00\x01\x02").unwrap();
    let err = open_err(&path);
    assert!(matches!(err, NsysError::NotSqlite { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("not an SQLite database"), "{msg}");
    assert!(msg.contains("74 68 69 73"), "shows the first bytes: {msg}");
    assert!(msg.contains("nsys export --type sqlite"), "{msg}");
}

#[test]
fn empty_file_and_directory_are_not_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.sqlite");
    fs::write(&path, b"").unwrap();
    let err = open_err(&path);
    assert!(matches!(&err, NsysError::NotSqlite { detail, .. } if detail.contains("empty")));
    let err = open_err(dir.path());
    assert!(
        matches!(&err, NsysError::NotSqlite { detail, .. } if detail.contains("not a regular file")),
        "{err:?}"
    );
}

#[test]
fn truncated_exports_are_reported_with_sizes() {
    let full = fs::read(fixture("report1.sqlite")).unwrap();
    assert_eq!(full.len(), 577_536);
    let dir = tempfile::tempdir().unwrap();
    for cut in [10usize, 50, 99, 4096, 300_000, full.len() - 1] {
        let path = dir.path().join(format!("cut{cut}.sqlite"));
        fs::write(&path, &full[..cut]).unwrap();
        let err = open_err(&path);
        match &err {
            NsysError::Truncated {
                expected_bytes,
                actual_bytes,
                ..
            } => {
                assert_eq!(*actual_bytes, cut as u64);
                let want = if cut < 100 { 100 } else { 577_536 };
                assert_eq!(*expected_bytes, want, "cut at {cut}");
            }
            other => panic!("cut at {cut}: expected Truncated, got {other:?}"),
        }
        assert!(err.to_string().contains("truncated SQLite database"));
    }
}

#[test]
fn corrupt_schema_page_is_reported_as_corrupt() {
    let mut bytes = fs::read(fixture("report1.sqlite")).unwrap();
    // Page 1 holds sqlite_master after the 100-byte file header: scribble over it.
    for b in &mut bytes[100..4096] {
        *b = 0xA5;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corrupt.sqlite");
    fs::write(&path, &bytes).unwrap();
    let err = open_err(&path);
    assert!(matches!(err, NsysError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("corrupt SQLite database"));
}

#[test]
fn corrupt_data_pages_never_panic() {
    // Scribble over every 16th page in turn: each open must return Ok or a typed error.
    let full = fs::read(fixture("report2.sqlite")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scribbled.sqlite");
    let mut errors = 0;
    for page in (1..full.len() / 4096).step_by(16) {
        let mut bytes = full.clone();
        for (i, b) in bytes[page * 4096..(page + 1) * 4096].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37);
        }
        fs::write(&path, &bytes).unwrap();
        if NsysReport::open(&path).is_err() {
            errors += 1;
        }
    }
    assert!(errors > 0, "no scribbled page was detected at all");
}

#[test]
fn sqlite_without_nsys_tables_is_not_nsys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.sqlite");
    make_db(
        &path,
        "CREATE TABLE users(id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'a');",
    );
    let err = open_err(&path);
    assert!(matches!(err, NsysError::NotNsys { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("not an Nsight Systems export"), "{msg}");
    assert!(msg.contains("users"), "lists the tables found: {msg}");

    let path = dir.path().join("empty-db.sqlite");
    make_db(&path, "PRAGMA user_version = 1;");
    let err = open_err(&path);
    assert!(
        matches!(&err, NsysError::NotNsys { detail, .. } if detail.contains("no tables")),
        "{err:?}"
    );
}

#[test]
fn minimal_export_without_event_tables_opens_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("minimal.sqlite");
    make_db(
        &path,
        "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE META_DATA_EXPORT(name TEXT, value TEXT);
         INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.0.0');",
    );
    let r = NsysReport::open(&path).unwrap();
    assert!(r.kernels.is_empty() && r.api_calls.is_empty() && r.nvtx.is_empty());
    assert_eq!(r.host.schema_version.as_deref(), Some("3.0.0"));
    assert_eq!(r.time_span(), None);
    // No session start: a mapping needs a manual offset.
    assert!(r.clock_mapping(None, None).is_err());
    assert_eq!(r.clock_mapping(Some(5), None).unwrap().to_realtime(10), 15);
    let s = r.summary();
    assert_eq!(s.events.kernels, 0);
    assert!(s.to_table().contains("CUDA kernels"));
}
