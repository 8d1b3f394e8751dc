//! Typed errors of the converter library. Only `main()` maps them to exit codes.

use std::path::PathBuf;

use sigmatrace_schemas::reader::ReadError;

/// Why a conversion could not be done.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A log cannot be read at all (bad magic, newer major version, bad header).
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("no SigmaTrace logs found in {0}")]
    NoInputs(String),
    #[error("no process left after applying the filters ({0})")]
    NothingSelected(String),
    #[error("cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid option: {0}")]
    Options(String),
    /// A sharded conversion (under mpirun / srun) failed: a shard's files are missing or
    /// damaged, or another shard failed (its message).
    #[error("sharded conversion: {0}")]
    Shard(String),
    /// An Nsight Systems export (`--nsys`) cannot be read.
    #[error(transparent)]
    Nsys(#[from] sigmatrace_nsys::NsysError),
}

impl ConvertError {
    /// Whether the error is about the input logs (as opposed to options or output).
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            ConvertError::Read(_) | ConvertError::NoInputs(_) | ConvertError::Io { .. }
        )
    }
}
