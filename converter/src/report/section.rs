//! The [`Section`] interface: one part of the report, fed per process by the model pass
//! ([`SectionSet`] is the model's observer) and merged at the end.

use std::any::Any;

use serde_json::Value;

use crate::align::topology::{Process, Topology};
use crate::align::Alignment;
use crate::model::{ModelEvent, Observer, ProcessTotals};

/// What sections can see when reporting.
pub struct ReportCtx<'a> {
    pub topo: &'a Topology,
    pub alignment: &'a Alignment,
    pub totals: &'a ProcessTotals,
}

/// One part of the report.
pub trait Section: Send + Sync {
    /// Key in the JSON report.
    fn key(&self) -> &'static str;
    /// A new, empty instance for one process of the model pass.
    fn fresh(&self, topo: &Topology) -> Box<dyn Section>;
    /// Observes one model event of process `p`.
    fn observe(&mut self, _p: &Process, _ev: &ModelEvent<'_>) {}
    /// Observes a raw record of process `p` at output time `t` (ns), in time order. Only the
    /// kinds [`crate::model::Observer::record`] lists reach sections.
    fn record(&mut self, _p: &Process, _t: i64, _rec: &sigmatrace_schemas::records::Record<'_>) {}
    /// The process this instance observed is done: what only its observation needed can go
    /// (the instances of all processes are kept until they are merged at the end).
    fn finish(&mut self) {}
    /// Adds another instance's observations (same type).
    fn merge(&mut self, other: Box<dyn Section>);
    /// Human-readable table(s).
    fn text(&self, ctx: &ReportCtx<'_>, out: &mut String);
    /// Machine-readable form.
    fn json(&self, ctx: &ReportCtx<'_>) -> Value;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
    fn as_any(&self) -> &dyn Any;
}

/// Observer that feeds a set of per-process section instances.
pub struct SectionSet(pub Vec<Box<dyn Section>>);

impl Observer for SectionSet {
    fn observe(&mut self, p: &Process, ev: &ModelEvent<'_>) {
        for s in &mut self.0 {
            s.observe(p, ev);
        }
    }
    fn wants_done_wrs(&self) -> bool {
        !self.0.is_empty()
    }
    fn record(&mut self, p: &Process, t: i64, rec: &sigmatrace_schemas::records::Record<'_>) {
        for s in &mut self.0 {
            s.record(p, t, rec);
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// A square matrix (`labels.len()` rows of as many columns, row-major) as a text table: a
/// header line of the labels, then one line per row, columns right-aligned.
pub fn matrix_table(out: &mut String, labels: &[String], m: &[u64]) {
    use std::fmt::Write;
    let n = labels.len();
    let w = labels.iter().map(|l| l.len()).max().unwrap_or(4).max(12);
    let _ = write!(out, "{:<w$}", "");
    for l in labels {
        let _ = write!(out, " {l:>w$}");
    }
    out.push('\n');
    for (i, l) in labels.iter().enumerate() {
        let _ = write!(out, "{l:<w$}");
        for v in &m[i * n..(i + 1) * n] {
            let _ = write!(out, " {v:>w$}");
        }
        out.push('\n');
    }
}
