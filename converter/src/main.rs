//! `sigmatrace-convert` command line: parses the arguments ([`cli`]) and maps the library's
//! errors to exit codes — here only: 0 ok, 1 input logs unreadable, 2 usage/options (clap's own
//! usage errors exit with 2 as well), 3 output cannot be written.

use std::process::ExitCode;

use clap::Parser;
use sigmatrace_convert::ConvertError;

mod cli;

fn main() -> ExitCode {
    match cli::run(cli::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sigmatrace-convert: error: {e}");
            ExitCode::from(match e {
                ConvertError::Options(_) | ConvertError::NothingSelected(_) => 2,
                ConvertError::Output { .. } => 3,
                _ => 1,
            })
        }
    }
}
