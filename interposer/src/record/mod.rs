//! Records: turns decoded values (plain Rust values, never C pointers) into the log records
//! the schemas crate defines, and hands them to the sink. The only module that builds
//! `sigmatrace-schemas` records; no `unsafe`.
//!
//! - [`control`]: object lifecycle and connection records.
//! - [`data`]: posted work requests, completions, empty polls (hot paths in place).
//! - [`empty`]: the per-thread aggregation of empty polls.
//! - [`wr_builder`]: the per-thread `ibv_wr_*` batches.
//! - [`gpu`]: CUDA memory, kernels, discovered queues and the pollers' observations.
//!
//! Per-thread state ([`ThreadState`]) is plain data kept in the sink's per-thread scratch
//! area, so recording needs no lock and no allocation.
#![forbid(unsafe_code)]

pub mod control;
pub mod data;
pub mod empty;
pub mod gpu;
pub mod wr_builder;

pub use empty::Runs;
pub use wr_builder::Builders;

use bytemuck::{Pod, Zeroable};
use sigmatrace_schemas::{string_ns, FixedRecord, RecordKind};

use crate::sink;

/// Per-thread recording state, kept in the sink's per-thread scratch area (all-zero is the
/// empty state: a new thread, or the thread of a fork child).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct ThreadState {
    /// Open empty-poll runs.
    pub runs: Runs,
    /// `ibv_wr_*` batches being built.
    pub builders: Builders,
}

const _: () = assert!(std::mem::size_of::<ThreadState>() <= sink::STATE_BYTES);

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

/// [`emit`] when any of the `category` bits ([`sink::cat`]) is traced.
pub fn emit_if<R: FixedRecord>(category: u32, rec: R) {
    if sink::tracing(category) {
        emit(rec);
    }
}

/// A process attribute (`StringDef` in the process-attribute namespace, e.g. `ibv_devices=…`
/// or a background component's counters at exit).
pub fn process_attr(attr: &str) {
    sink::with_thread(|t| {
        t.append_meta(
            RecordKind::StringDef,
            string_ns::PROCESS_ATTR,
            0,
            attr.as_bytes(),
        )
    });
}

/// Exit: flushes this thread's open empty-poll runs, then writes a final clock snapshot (if a
/// log exists).
pub fn at_exit() {
    if !sink::tracing(sink::cat::ALL) {
        return;
    }
    sink::with_existing_thread(|t| {
        let (out, st) = t.parts::<ThreadState>();
        for rec in st.runs.drain() {
            out.append_raw(&rec);
        }
        out.snapshot_now();
        t.hold_hot(0);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_all_zero_state_is_the_empty_state() {
        let z: ThreadState = Zeroable::zeroed();
        assert_eq!(
            bytemuck::bytes_of(&z),
            bytemuck::bytes_of(&ThreadState::new())
        );
        assert!(z.builders.is_idle());
        assert_eq!(z.runs.open(), 0);
    }
}
