//! `sigmatrace-convert`: reads the per-process SigmaTrace logs of a run (many ranks, hosts and
//! GPUs), aligns their clocks and writes one Perfetto trace (one track per QP and kernel stream,
//! flows between ranks, counters) and traffic reports.
//!
//! [`pipeline`]: [`read`] (open, scan, typed hot records) → [`align`] (per-process clock fits,
//! topology, cross-domain alignment) → [`model`] (pass 2: tracks, slices, flows onto the
//! `sigmatrace-timeline` sinks) → [`report`] (sections fed by the same pass); [`import`] merges
//! Nsight Systems exports. Each layer uses only those before it (`tests/layers.rs`). Tests and
//! tools call [`convert()`] and [`stats()`] (synthetic log sets with known ground truth come from
//! the `sigmatrace-synth` crate).

pub mod align;
pub mod error;
pub mod fastmap;
pub mod import;
pub mod model;
pub mod pipeline;
pub mod progress;
pub mod read;
pub mod report;
pub mod shard;

pub use error::ConvertError;
pub use model::emit::{Detail, Format};
pub use pipeline::{convert, convert_with_report, stats, ConvertOptions, Report, Summary};
