//! Report: sections computed from the same model pass as the trace (`stats`): [`alignment`],
//! [`traffic`] (matrices, per-QP table), [`direct`] (barriers and skew from directly posted or
//! observed WQEs), [`waits`] (time polling empty CQs, by the peer waited for). Each file
//! depends only on [`section`]; this module lists them.
//!
//! A report is a list of [`Section`]s. Each section gets a fresh instance per process (so the
//! model pass stays parallel), observes that process's [`ModelEvent`]s, and is merged at the
//! end. To add a report (e.g. barrier arrival spread), implement [`Section`] and add it to
//! [`default_sections`]; text, JSON and the CLI pick it up.

pub mod alignment;
pub mod direct;
pub mod section;
pub mod traffic;
pub mod waits;

pub use alignment::AlignmentSection;
pub use section::{ReportCtx, Section, SectionSet};
pub use traffic::{heatmap_svg, QpRow, QpTable, Traffic, DENSE_RANKS};
pub use waits::Waits;

use direct::{Barriers, TrafficSkew};

/// The sections `stats` prints, in order.
pub fn default_sections() -> Vec<Box<dyn Section>> {
    vec![
        Box::new(AlignmentSection),
        Box::new(Traffic::default()),
        Box::new(QpTable::default()),
        Box::new(Barriers::default()),
        Box::new(TrafficSkew::default()),
        Box::new(Waits::default()),
    ]
}
