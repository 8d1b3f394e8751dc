//! `sigmatrace-convert`: reads the per-process SigmaTrace logs of a run (many ranks, hosts and
//! GPUs), aligns their clocks and writes one Perfetto trace (one track per QP and kernel stream,
//! flows between ranks, counters) and traffic reports.
//!
//! Pipeline (one module each): read ([`read::input`], [`read::scan`]) → align ([`align`], [`align::clock`]) →
//! model ([`align::topology`], [`model`], [`gpu`]) → emit ([`emit`] onto the
//! generic `sigmatrace-timeline` writers). Tests and tools call [`convert()`] and [`stats()`]; [`synth`] writes
//! synthetic multi-rank log sets with known ground truth.

pub mod align;
pub mod convert;
pub mod error;
pub mod fastmap;
pub mod import;
pub mod model;
pub mod progress;
pub mod read;
pub mod report;
pub mod synth;

pub use convert::{convert, convert_with_report, stats, ConvertOptions, Report, Summary};
pub use error::ConvertError;
pub use model::emit::{Detail, Format};
