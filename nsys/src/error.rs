//! Typed errors of the importer. Every variant names the file and says what was expected.

use std::path::PathBuf;

/// What an Nsight Systems export is expected to be; quoted in the errors.
pub const EXPECTED: &str =
    "an Nsight Systems SQLite export (`nsys export --type sqlite -o report.sqlite report.nsys-rep`)";

/// Why an export could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum NsysError {
    /// The file could not be opened or read.
    #[error("{}: cannot read the file: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with the SQLite header (`SQLite format 3\0`).
    #[error("{}: not an SQLite database ({detail}); expected {EXPECTED}", .path.display())]
    NotSqlite { path: PathBuf, detail: String },
    /// The file is shorter than its SQLite header says (a partial copy or download).
    #[error(
        "{}: truncated SQLite database: {detail} ({actual_bytes} bytes present, at least \
         {expected_bytes} expected); expected a complete copy of {EXPECTED}", .path.display())]
    Truncated {
        path: PathBuf,
        detail: String,
        expected_bytes: u64,
        actual_bytes: u64,
    },
    /// SQLite reported the database as corrupt while it was being read.
    #[error("{}: corrupt SQLite database while reading {what}: {detail}; expected {EXPECTED}", .path.display())]
    Corrupt {
        path: PathBuf,
        what: String,
        detail: String,
    },
    /// A valid SQLite database that lacks the tables every Nsight Systems export has.
    #[error("{}: SQLite database is not an Nsight Systems export: {detail}; expected {EXPECTED}", .path.display())]
    NotNsys { path: PathBuf, detail: String },
    /// Any other SQLite failure (locked file, out of memory, …).
    #[error("{}: SQLite error while reading {what}: {source}", .path.display())]
    Sqlite {
        path: PathBuf,
        what: String,
        #[source]
        source: rusqlite::Error,
    },
}

impl NsysError {
    /// Classifies a rusqlite error: corruption and "not a database" become [`NsysError::Corrupt`],
    /// everything else [`NsysError::Sqlite`].
    pub(crate) fn from_sqlite(path: &std::path::Path, what: &str, err: rusqlite::Error) -> Self {
        use rusqlite::ffi::ErrorCode;
        if let rusqlite::Error::SqliteFailure(e, msg) = &err {
            if matches!(e.code, ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) {
                return NsysError::Corrupt {
                    path: path.to_path_buf(),
                    what: what.to_string(),
                    detail: msg.clone().unwrap_or_else(|| e.to_string()),
                };
            }
        }
        NsysError::Sqlite {
            path: path.to_path_buf(),
            what: what.to_string(),
            source: err,
        }
    }
}
