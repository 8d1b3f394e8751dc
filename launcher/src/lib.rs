//! The `sigmatrace` launcher library: `run` (trace a command), `demo` (the embedded
//! multi-rank workload) and how they find the interposer and softnic.

pub mod artifacts;
pub mod demo;
pub mod run;

use std::ffi::OsString;
use std::path::PathBuf;

/// Everything that can go wrong in the launcher.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("no command given (usage: sigmatrace run [OPTIONS] -- CMD [ARGS...])")]
    NoCommand,
    #[error("{0}")]
    Usage(String),
    #[error("cannot find {what} (looked at: {}); {hint}", searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    Missing {
        what: String,
        searched: Vec<PathBuf>,
        hint: String,
    },
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Io(PathBuf, std::io::Error),
    #[error("cannot run {0:?}: {1}")]
    Spawn(OsString, std::io::Error),
    #[error("demo workload: {0}")]
    Workload(String),
    #[error("conversion failed: {0}")]
    Convert(#[from] sigmatrace_convert::ConvertError),
}

/// Converts `logs` into the Perfetto trace `trace` with the default options; the report of
/// what was converted.
pub(crate) fn convert(
    logs: &[PathBuf],
    trace: &std::path::Path,
) -> Result<sigmatrace_convert::Report, LaunchError> {
    let opts = sigmatrace_convert::ConvertOptions::default();
    Ok(sigmatrace_convert::convert_with_report(logs, trace, &opts)?)
}
