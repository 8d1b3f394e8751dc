//! Shared helpers of the integration tests.
#![allow(dead_code)]

use std::path::Path;

#[allow(unused_imports)]
pub use sigmatrace_testkit::nsys_fixture as fixture;

/// Creates an SQLite database at `path` from SQL statements.
pub fn make_db(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).expect("create test database");
    conn.execute_batch(sql).expect("populate test database");
}
