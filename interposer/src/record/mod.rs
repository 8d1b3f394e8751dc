//! Safe construction of log records from decoded verbs data. The hooks decode the provider's
//! and the program's structures (`hooks/`, `ffi/`), this layer turns them into records of the
//! format defined by the schemas crate, the sink writes them.

pub mod control;
pub mod data;
pub mod empty;
pub mod wr_builder;

pub use empty::Runs;
pub use wr_builder::Builders;

use sigmatrace_schemas::FixedRecord;

use crate::sink;

/// Per-thread recording state, kept in the sink's thread-local.
#[derive(Clone, Debug)]
pub struct ThreadState {
    /// Open empty-poll runs.
    pub runs: Runs,
    /// `ibv_wr_*` batches being built.
    pub builders: Builders,
}

impl Default for ThreadState {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadState {
    pub const fn new() -> Self {
        ThreadState {
            runs: Runs::new(),
            builders: Builders::new(),
        }
    }
}

/// Writes one record from a control-path hook (creating the log on first use).
pub fn emit<R: FixedRecord>(rec: R) {
    sink::with_thread(|t| t.append(&rec));
}
