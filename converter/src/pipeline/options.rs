//! What a conversion is asked ([`ConvertOptions`]) and what it answers ([`Summary`], the stats
//! [`Report`]).

use crate::align::topology::Topology;
use crate::align::Alignment;
use crate::model::emit::{Detail, Format};
use crate::model::ProcessTotals;
use crate::report::{ReportCtx, Section};

/// Options of [`convert`](super::convert) and [`stats`](super::stats).
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    pub format: Format,
    /// Worker threads (0 = all cores).
    pub jobs: usize,
    pub detail: Detail,
    /// Only events in [from, to) seconds after the trace start.
    pub window_s: Option<(f64, f64)>,
    /// Only these ranks (processes without a rank are kept only when this is `None`).
    pub ranks: Option<Vec<u32>>,
    /// Only processes on these hosts (host names).
    pub hosts: Option<Vec<String>>,
    /// zlib level for `compressed_packets` (0 = write plain packets).
    pub compress_level: u32,
    /// Refine host clocks with message causality (else REALTIME as recorded).
    pub causality_alignment: bool,
    /// Show a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
    /// Skip logs that cannot be read at all (with a warning) instead of failing.
    pub skip_unreadable: bool,
    /// Nsight Systems exports to merge (`--nsys`, `--nsys-offset`).
    pub nsys: crate::import::nsys::NsysOptions,
    /// Re-check every matched message pair on the final clocks (one more pass).
    pub verify_alignment: bool,
    /// Compute the report's sections (clock alignment, traffic, per-QP latency, barriers,
    /// skew: what `stats`, `--stats` and [`Report::text`] print). The trace does not depend
    /// on them; the command line turns them off when it prints no report, which saves their
    /// bookkeeping for every completion.
    pub report_sections: bool,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            format: Format::Perfetto,
            jobs: 0,
            detail: Detail::Normal,
            window_s: None,
            ranks: None,
            hosts: None,
            compress_level: 1,
            causality_alignment: true,
            progress: false,
            skip_unreadable: false,
            nsys: Default::default(),
            verify_alignment: false,
            report_sections: true,
        }
    }
}

/// What a conversion did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Summary {
    pub inputs: usize,
    pub processes: usize,
    pub hosts: usize,
    pub input_bytes: u64,
    pub records: u64,
    pub wr_events: u64,
    pub output_bytes: u64,
    pub totals: ProcessTotals,
    pub alignment: Alignment,
    /// Non-fatal problems (damaged or truncated logs, unmatched QPs, ...).
    pub warnings: Vec<String>,
    /// Merged Nsight Systems exports.
    pub nsys: Vec<crate::import::nsys::NsysMerged>,
    pub elapsed_s: f64,
    /// Wall time of each pipeline phase (seconds).
    pub phases: Vec<(String, f64)>,
}

/// The stats report: sections plus the context they report in.
pub struct Report {
    pub summary: Summary,
    pub topology: Topology,
    pub sections: Vec<Box<dyn Section>>,
}

impl Report {
    /// Text tables.
    pub fn text(&self) -> String {
        let ctx = ReportCtx {
            topo: &self.topology,
            alignment: &self.summary.alignment,
            totals: &self.summary.totals,
        };
        let s = &self.summary;
        let mut out = format!(
            "{} processes on {} hosts, {} records ({} WR events), {} completed WRs ({} failed), {} receives, {} flows\n\n",
            s.processes, s.hosts, s.records, s.wr_events, s.totals.wr_completed, s.totals.wr_failed, s.totals.recv_completed, s.totals.flows_out
        );
        if s.totals.recv_undrawn > 0 {
            out.push_str(&format!(
                "{} receive WRs not drawn as slices (posted while {} receives drawn on their \
                 queue were outstanding); their arrivals and flows are drawn\n\n",
                s.totals.recv_undrawn,
                crate::model::RECV_LANES
            ));
        }
        if s.totals.observed_late > 0 {
            out.push_str(&format!(
                "{} observed WQEs first seen after the CQE that retires them: drawn as instants \
                 (\"seen after its completion\")\n\n",
                s.totals.observed_late
            ));
        }
        if s.totals.kernels_malformed > 0 {
            out.push_str(&format!(
                "{} GPU kernel executions not drawn: their end maps before their start\n\n",
                s.totals.kernels_malformed
            ));
        }
        if s.totals.poll_runs > 0 {
            out.push_str(&format!(
                "{} empty-poll runs: {} polls of CQs that had nothing, {:.3} ms in all (by \
                 process and peer waited for: Waits; drawn as slices at --detail full)\n\n",
                s.totals.poll_runs,
                s.totals.empty_polls,
                s.totals.empty_poll_ns as f64 / 1e6
            ));
        }
        if s.totals.poll_runs_malformed > 0 {
            out.push_str(&format!(
                "{} empty-poll runs not counted: their last poll maps before their first\n\n",
                s.totals.poll_runs_malformed
            ));
        }
        for sec in &self.sections {
            sec.text(&ctx, &mut out);
        }
        for w in &s.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }

    /// JSON document.
    pub fn json(&self) -> serde_json::Value {
        let ctx = ReportCtx {
            topo: &self.topology,
            alignment: &self.summary.alignment,
            totals: &self.summary.totals,
        };
        let mut m = serde_json::Map::new();
        m.insert(
            "summary".into(),
            serde_json::to_value(&self.summary).unwrap_or_default(),
        );
        for sec in &self.sections {
            m.insert(sec.key().into(), sec.json(&ctx));
        }
        serde_json::Value::Object(m)
    }

    /// A section by type (e.g. `report.section::<Traffic>()`).
    pub fn section<T: 'static>(&self) -> Option<&T> {
        self.sections
            .iter()
            .find_map(|s| s.as_any().downcast_ref::<T>())
    }
}
