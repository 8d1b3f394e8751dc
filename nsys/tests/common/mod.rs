//! Shared helpers of the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A fixture from `fixtures/nsys/` (in the repository). Panics with a clear message
/// when it is missing: these tests must never be skipped.
pub fn fixture(name: &str) -> PathBuf {
    let dir = std::env::var_os("SIGMATRACE_NSYS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/nsys"));
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "nsys fixture {} is missing: the repository ships fixtures/nsys/ \
         (or SIGMATRACE_NSYS_FIXTURES pointing at that folder)",
        path.display()
    );
    path
}

/// Creates an SQLite database at `path` from SQL statements.
pub fn make_db(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).expect("create test database");
    conn.execute_batch(sql).expect("populate test database");
}
