//! The clock alignment section: each host's (clock domain's) correction, the causality counts
//! and the inter-node skew.

use std::any::Any;
use std::fmt::Write;

use serde_json::{json, Value};

use crate::align::topology::Topology;
use crate::align::Alignment;

use crate::report::section::{ReportCtx, Section};

/// Clock alignment and inter-node skew.
pub struct AlignmentSection;

impl Section for AlignmentSection {
    fn key(&self) -> &'static str {
        "alignment"
    }
    fn fresh(&self, _: &Topology) -> Box<dyn Section> {
        Box::new(AlignmentSection)
    }
    fn merge(&mut self, _: Box<dyn Section>) {}
    fn text(&self, ctx: &ReportCtx<'_>, out: &mut String) {
        let a = ctx.alignment;
        let _ = writeln!(out, "== Clock alignment ({})", a.method);
        let _ = writeln!(
            out,
            "{:<24} {:>7} {:>14} {:>12} {:>16}",
            "host", "domain", "offset ns", "drift ppm", "uncertainty ns"
        );
        for (i, h) in a.hosts.iter().enumerate() {
            let unc = h
                .uncertainty_ns
                .map(|u| format!("±{u:.0}"))
                .unwrap_or_else(|| "unbounded".into());
            // Hosts of the reference's clock domain read its clock: no correction, exactly.
            let mark = if i == a.reference_host {
                " (reference)"
            } else if h.domain == a.reference_domain {
                " (reference clock)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "{:<24} {:>7} {:>14.0} {:>12.3} {:>16}{mark}",
                h.host, h.domain, h.offset_ns, h.drift_ppm, unc
            );
        }
        let s = skew_summary(a);
        let _ = writeln!(
            out,
            "inter-node skew: nodes max {:.0} ns mean {:.0} ns; links max {:.0} ns mean {:.0} ns ({} links)",
            s.0, s.1, s.2, s.3, s.4
        );
        let _ = writeln!(
            out,
            "message pairs: {} ({} across clock domains); receive before send: before alignment {}, after {}",
            a.pairs, a.cross_domain_pairs, a.inverted_before, a.inverted_after
        );
        let _ = writeln!(
            out,
            "causality constraints: {}, dropped as contradictory: {}{}{}\n",
            a.constraints,
            a.dropped_constraints,
            a.min_slack_ns
                .map(|m| format!("; smallest slack kept {m:.1} ns"))
                .unwrap_or_default(),
            a.note
                .as_deref()
                .map(|n| format!("; {n}"))
                .unwrap_or_default()
        );
        link_lines(a, out);
        for l in a.links.iter().filter(|l| l.dropped_ab + l.dropped_ba > 0) {
            let name = |d: usize| a.domains.get(d).map_or("-", |d| d.name.as_str());
            let _ = writeln!(
                out,
                "dropped messages {} → {}: {}, {} → {}: {}",
                name(l.a),
                name(l.b),
                l.dropped_ab,
                name(l.b),
                name(l.a),
                l.dropped_ba
            );
        }
        if let Some((n, bad)) = a.verified {
            let _ = writeln!(out, "verified on the final clocks: {n} matched message pairs, {bad} receive before send\n");
        }
    }
    fn json(&self, ctx: &ReportCtx<'_>) -> Value {
        let a = ctx.alignment;
        let s = skew_summary(a);
        json!({
            "method": a.method, "reference_host": a.reference_host, "t0_ns": a.t0,
            "hosts": a.hosts, "links": a.links, "pairs": a.pairs,
            "domains": a.domains, "cross_domain_pairs": a.cross_domain_pairs,
            "inverted_before": a.inverted_before, "inverted_after": a.inverted_after,
            "constraints": a.constraints, "dropped_constraints": a.dropped_constraints, "note": a.note,
            "min_slack_ns": a.min_slack_ns,
            "verified": a.verified.map(|(n, b)| json!({"pairs": n, "violations": b})),
            "skew": {"node_max_ns": s.0, "node_mean_ns": s.1, "link_max_ns": s.2, "link_mean_ns": s.3, "links": s.4},
        })
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Most links listed in the text report (the JSON lists all).
const MAX_LINK_LINES: usize = 32;

/// Per pair of clock domains with messages both ways: where its own messages bound its clock
/// difference best, and how well.
fn link_lines(a: &Alignment, out: &mut String) {
    let bounded: Vec<_> = a.links.iter().filter(|l| l.best_at_ns.is_some()).collect();
    if bounded.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "clock difference b − a of each linked pair, where its own messages bound it best (time from t0; correction's value in brackets):"
    );
    let name = |d: usize| a.domains.get(d).map_or("-", |d| d.name.as_str());
    for l in bounded.iter().take(MAX_LINK_LINES) {
        let (Some(at), Some(est), Some(u), Some(c)) = (
            l.best_at_ns,
            l.pair_skew_ns,
            l.uncertainty_ns,
            l.corrected_skew_ns,
        ) else {
            continue;
        };
        let _ = writeln!(
            out,
            "  a {} – b {}: at t0{:+.3} ms {est:.0} ±{u:.0} ns ({c:.0} ns); messages {} / {}",
            name(l.a),
            name(l.b),
            (at - a.t0) as f64 / 1e6,
            l.pairs_ab,
            l.pairs_ba
        );
    }
    if bounded.len() > MAX_LINK_LINES {
        let _ = writeln!(
            out,
            "  … {} more (JSON: alignment.links)",
            bounded.len() - MAX_LINK_LINES
        );
    }
    let _ = writeln!(out);
}

/// (node max |offset|, node mean, link max |skew|, link mean, links).
fn skew_summary(a: &Alignment) -> (f64, f64, f64, f64, usize) {
    let offs: Vec<f64> = a.hosts.iter().map(|h| h.offset_ns.abs()).collect();
    let links: Vec<f64> = a
        .links
        .iter()
        .filter_map(|l| l.skew_ns.map(f64::abs))
        .collect();
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    (
        max(&offs),
        mean(&offs),
        max(&links),
        mean(&links),
        links.len(),
    )
}

// ---------------------------------------------------------------------------------------------
