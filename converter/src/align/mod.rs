//! Align: one time line for all processes.
//!
//! 1. Per process, its timestamps map to its machine's REALTIME through its own fit of the
//!    timestamp source against CLOCK_MONOTONIC ([`clock`]).
//! 2. Processes that read one machine clock form a clock domain ([`domains`]): same boot and
//!    host, simulated softnic nodes included. Within a domain nothing else is corrected.
//! 3. Between domains, message causality: every message (a consuming send joined with its
//!    receive, [`join`]) must arrive after it left. Per directed domain pair only the lower
//!    convex hull of the points (send time, delay) is kept ([`hull`]); a global LP over all
//!    domains ([`solve`]) gives each domain an offset and a drift inside the feasible set, the
//!    constraints it had to drop when they contradict each other, and an honest uncertainty.
//! 4. The result is checked on every message pair: the number of pairs whose receive precedes
//!    its send is counted before and after; a correction that would make it larger is
//!    discarded (no correction, and the report says so).
//!
//! Event times are never rewritten: a correction is a per-domain linear map applied to every
//! event of the domain's processes alike.

pub mod clock;
pub mod cq;
pub mod domains;
pub mod hull;
pub mod join;
pub mod small_lp;
pub mod solve;
pub mod topology;

use std::collections::BTreeMap;

pub use join::{join, verify, Pair};

use crate::align::domains::Domains;
use crate::align::hull::IncHull;
use crate::align::solve::Con;
use crate::align::topology::Topology;
use crate::read::input::LogInput;

/// Correction of one clock domain.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct DomainAlign {
    pub name: String,
    /// Processes of the domain (indices into the topology's processes).
    pub procs: Vec<usize>,
    /// Correction added at the reference time `t0` (ns).
    pub offset_ns: f64,
    /// Drift correction (parts per million).
    pub drift_ppm: f64,
    /// Bounds of every offset the causality constraints allow (ns); `None`: unbounded side.
    pub offset_min_ns: Option<f64>,
    pub offset_max_ns: Option<f64>,
    /// Largest distance from `offset_ns` to an allowed offset (ns); `None`: unbounded.
    pub uncertainty_ns: Option<f64>,
}

/// Correction of one host (node) of the topology: that of its clock domain.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct HostAlign {
    pub host: String,
    pub domain: usize,
    pub offset_ns: f64,
    pub drift_ppm: f64,
    pub uncertainty_ns: Option<f64>,
}

/// A pair of clock domains with traffic between them.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LinkAlign {
    /// Domains, a < b.
    pub a: usize,
    pub b: usize,
    /// Message pairs a→b and b→a.
    pub pairs_ab: u64,
    pub pairs_ba: u64,
    /// Estimated clock difference b − a before correction, at t0 (ns): the correction's.
    pub skew_ns: Option<f64>,
    /// The time (output ns, on the reference's time line) where the pair's own messages bound
    /// its clock difference most tightly (drift widens the range away from it); `None`:
    /// messages in one direction only (unbounded) or contradictory.
    pub best_at_ns: Option<i64>,
    /// The pair's own estimate of its clock difference b − a at `best_at_ns` (ns): the middle
    /// of the range its messages allow there.
    pub pair_skew_ns: Option<f64>,
    /// The correction's clock difference b − a at `best_at_ns` (ns; inside that range).
    pub corrected_skew_ns: Option<f64>,
    /// Half-width of the range the pair's own messages allow for its clock difference at
    /// `best_at_ns` (ns); `None`: messages in one direction only (unbounded) or contradictory.
    pub uncertainty_ns: Option<f64>,
    /// The pair's messages contradict each other (no linear correction satisfies them all).
    pub infeasible: bool,
    /// Messages dropped from the solve, a→b and b→a.
    pub dropped_ab: u64,
    pub dropped_ba: u64,
}

/// Result of the alignment.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Alignment {
    pub method: String,
    pub reference_host: usize,
    pub reference_domain: usize,
    pub t0: i64,
    pub domains: Vec<DomainAlign>,
    pub hosts: Vec<HostAlign>,
    pub links: Vec<LinkAlign>,
    /// Matched message pairs (all, within and across domains).
    pub pairs: u64,
    /// Of those, pairs across clock domains.
    pub cross_domain_pairs: u64,
    /// Message pairs whose receive precedes its send, on the uncorrected clocks and on the
    /// final clocks (the same pairs; flows that end before they start in the trace).
    pub inverted_before: u64,
    pub inverted_after: u64,
    /// Causality constraints (hull vertices) of the solve and those dropped as contradictory.
    pub constraints: u64,
    pub dropped_constraints: u64,
    /// Smallest slack of a kept constraint at the final correction, before the trace's
    /// rounding to whole ns (ns; at least [`solve::ROUNDING_MARGIN_NS`] where the constraints
    /// leave that much room).
    pub min_slack_ns: Option<f64>,
    /// Why the correction is absent or limited (solve failure, fallback), if it is.
    pub note: Option<String>,
    /// With verification: every matched pair re-checked on the final clocks
    /// (pairs, pairs whose receive precedes its send).
    pub verified: Option<(u64, u64)>,
}

/// Sets every process's output map: its own fit, its domain's REALTIME offset and the domain's
/// correction `(offset ns, rate)` applied at `t0`.
fn apply(topo: &mut Topology, dom: &Domains, rt: &[i64], corr: &[(f64, f64)], t0: i64) {
    for p in &mut topo.procs {
        let d = dom.of_proc[p.index];
        let (o, r) = corr.get(d).copied().unwrap_or((0.0, 0.0));
        p.map = p.clock.to_realtime(rt[d]).then_correct(o, r, t0);
    }
}

/// Within a clock domain both ends of a message get the same linear correction, which keeps
/// the sign of their difference; each written time is at most 1.5 ns from the exact one
/// ([`solve::ROUNDING_MARGIN_NS`]), so only ends at most this far apart could change order.
const NEAR_NS: i64 = 4;

/// Per directed domain pair: message pairs and the lower hull of (x − t0, y − x).
type PairHulls = BTreeMap<(usize, usize), (u64, Vec<(i64, i64)>)>;

/// Everything the join of the uncorrected clocks yields.
#[derive(Default)]
struct Joined {
    pairs: u64,
    cross: u64,
    inverted: u64,
    /// Of the inverted pairs, those within one clock domain.
    inverted_within: u64,
    /// Pairs within one clock domain whose two ends are at most [`NEAR_NS`] apart (in either
    /// order): the only ones whose order a domain's correction could change.
    near_within: u64,
    hulls: PairHulls,
    /// Earliest send and latest receive of the messages across domains (output ns).
    span: (i64, i64),
}

fn join_hulls(inputs: &[LogInput], topo: &Topology, dom: &Domains, t0: i64) -> Joined {
    let mut per_conn: Vec<IncHull> = Vec::new();
    let mut j = Joined {
        span: (i64::MAX, i64::MIN),
        ..Default::default()
    };
    join(inputs, topo, |pr| {
        j.pairs += 1;
        j.inverted += (pr.y < pr.x) as u64;
        let (a, b) = (dom.of_proc[pr.sender.0], dom.of_proc[pr.receiver]);
        if a == b {
            j.inverted_within += (pr.y < pr.x) as u64;
            j.near_within += ((pr.y - pr.x).abs() <= NEAR_NS) as u64;
            return;
        }
        j.cross += 1;
        j.span = (j.span.0.min(pr.x), j.span.1.max(pr.y));
        let c = pr.conn as usize;
        if per_conn.len() <= c {
            per_conn.resize_with(c + 1, IncHull::default);
        }
        per_conn[c].domains = (a, b);
        per_conn[c].push(pr.x - t0, pr.y - pr.x);
    });
    for h in per_conn.into_iter().filter(|h| h.pairs > 0) {
        let e = j.hulls.entry(h.domains).or_default();
        e.0 += h.pairs;
        e.1.extend(h.finish());
    }
    for e in j.hulls.values_mut() {
        e.1 = hull::lower_hull(std::mem::take(&mut e.1));
    }
    j
}

/// Computes the per-domain corrections and applies them to `topo` (process maps).
pub fn align(inputs: &[LogInput], topo: &mut Topology, use_causality: bool) -> Alignment {
    let dom = domains::clock_domains(inputs, topo);
    let clocks = domains::pooled_clocks(topo, &dom);
    for (p, c) in topo.procs.iter_mut().zip(clocks) {
        p.clock = c;
    }
    let n = dom.len();
    // One REALTIME − MONOTONIC per domain (that of its first process's host): the processes of
    // a domain read one REALTIME, so they share one time line.
    let rt: Vec<i64> = dom
        .procs
        .iter()
        .map(|ps| topo.hosts[topo.procs[ps[0]].host].realtime_offset)
        .collect();
    for p in 0..topo.procs.len() {
        let h = topo.procs[p].host;
        topo.hosts[h].realtime_offset = rt[dom.of_proc[p]];
    }
    apply(topo, &dom, &rt, &[], 0);
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for p in &topo.procs {
        lo = lo.min(p.time(p.min_ts));
        hi = hi.max(p.time(p.max_ts));
    }
    let t0 = if lo <= hi { lo + (hi - lo) / 2 } else { 0 };
    let half = if lo <= hi { ((hi - lo) / 2).max(1) } else { 1 } as f64;
    let reference = dom.of_proc.first().copied().unwrap_or(0);
    let mut out = Alignment {
        method: if use_causality && n > 1 {
            format!("per-process TSC→MONOTONIC fit + REALTIME per clock domain ({n} domains), corrected between domains by message causality (LP: offset + drift)")
        } else {
            format!("per-process TSC→MONOTONIC fit + REALTIME per clock domain ({n} domains)")
        },
        reference_host: topo.procs.first().map_or(0, |p| p.host),
        reference_domain: reference,
        t0,
        domains: (0..n)
            .map(|d| DomainAlign {
                name: dom.names[d].clone(),
                procs: dom.procs[d].clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    if let Some(d) = out.domains.get_mut(reference) {
        (d.offset_min_ns, d.offset_max_ns, d.uncertainty_ns) = (Some(0.0), Some(0.0), Some(0.0));
    }
    if use_causality {
        let mut j = join_hulls(inputs, topo, &dom, t0);
        // Corrections are stated at the middle of the messages between domains, where they
        // are known best (not at the middle of the logs, which may be mostly setup or idle).
        let mut half = half;
        if j.span.0 <= j.span.1 {
            let mid = j.span.0 + (j.span.1 - j.span.0) / 2;
            for (_, h) in j.hulls.values_mut() {
                for p in h.iter_mut() {
                    p.0 -= mid - t0;
                }
            }
            out.t0 = mid;
            half = ((j.span.1 - j.span.0) / 2).max(1) as f64;
        }
        (out.pairs, out.cross_domain_pairs) = (j.pairs, j.cross);
        (out.inverted_before, out.inverted_after) = (j.inverted, j.inverted);
        correct(inputs, topo, &dom, &rt, &j, half, &mut out);
    } else {
        out.note = Some("causality alignment off: message pairs not joined or counted".into());
    }
    out.hosts = topo
        .hosts
        .iter()
        .map(|h| {
            let d = h.procs.first().map_or(0, |&p| dom.of_proc[p]);
            let da = out.domains.get(d).cloned().unwrap_or_default();
            HostAlign {
                host: h.name.clone(),
                domain: d,
                offset_ns: da.offset_ns,
                drift_ppm: da.drift_ppm,
                uncertainty_ns: da.uncertainty_ns,
            }
        })
        .collect();
    out
}

/// Solves for the corrections between domains, applies them when they do not increase the
/// inverted pairs, and fills the domain and link results.
fn correct(
    inputs: &[LogInput],
    topo: &mut Topology,
    dom: &Domains,
    rt: &[i64],
    j: &Joined,
    half: f64,
    out: &mut Alignment,
) {
    let n = dom.len();
    let reference = out.reference_domain;
    let cons: Vec<Con> = j
        .hulls
        .iter()
        .flat_map(|(&(a, b), (_, h))| h.iter().map(move |&(x, d)| Con { a, b, x, d }))
        .collect();
    out.constraints = cons.len() as u64;
    let mut links: BTreeMap<(usize, usize), LinkAlign> = BTreeMap::new();
    for (&(a, b), &(pairs, _)) in &j.hulls {
        let l = links.entry((a.min(b), a.max(b))).or_insert(LinkAlign {
            a: a.min(b),
            b: a.max(b),
            ..Default::default()
        });
        if a < b {
            l.pairs_ab += pairs;
        } else {
            l.pairs_ba += pairs;
        }
    }
    if n > 1 && !cons.is_empty() {
        match solve::solve(n, reference, half, &cons) {
            Err(e) => out.note = Some(format!("no correction between clock domains: {e}")),
            Ok(s) => {
                let corr: Vec<(f64, f64)> = (0..n).map(|d| (s.offset[d], s.drift[d])).collect();
                apply(topo, dom, rt, &corr, out.t0);
                let after = if corr.iter().all(|&c| c == (0.0, 0.0)) {
                    j.inverted
                } else if let Some(after) = inverted_after_without_join(j, &s) {
                    after
                } else {
                    verify(inputs, topo).1
                };
                if after > j.inverted {
                    apply(topo, dom, rt, &[], 0);
                    out.note = Some(format!(
                        "correction discarded: it left {after} message pairs with the receive before the send, more than the {} before",
                        j.inverted
                    ));
                } else {
                    out.inverted_after = after;
                    fill(out, &s, &cons, &mut links);
                    let margin = s.min_slack_ns.unwrap_or(0.0);
                    if after > 0 && s.dropped.is_empty() && margin >= solve::ROUNDING_MARGIN_NS {
                        // Every kept constraint has room for the rounding: this is a bug.
                        out.note = Some(format!(
                            "{after} message pairs with the receive before the send although every constraint kept {margin:.1} ns of slack (a converter bug)"
                        ));
                    }
                }
            }
        }
    }
    out.links = links.into_values().collect();
}

/// The pairs still inverted after the correction `s`, when they follow from the join of the
/// uncorrected clocks without joining again: every kept constraint has at least
/// [`solve::ROUNDING_MARGIN_NS`] of slack and none was dropped — then no pair across domains
/// is inverted (a message's slack is linear in its point with a positive weight on the delay,
/// so the smallest over all pairs is a hull vertex's, and the rounding of the trace's times
/// moves the two ends by at most 3 ns against each other) — and no pair within a domain has
/// its ends within [`NEAR_NS`] (those keep their order: the inverted ones stay inverted).
/// `None`: join again and count.
fn inverted_after_without_join(j: &Joined, s: &solve::Solved) -> Option<u64> {
    let slack = s.min_slack_ns?;
    (s.dropped.is_empty() && slack >= solve::ROUNDING_MARGIN_NS && j.near_within == 0)
        .then_some(j.inverted_within)
}

/// Copies a solve's corrections, bounds and dropped constraints into the result.
fn fill(
    out: &mut Alignment,
    s: &solve::Solved,
    cons: &[Con],
    links: &mut BTreeMap<(usize, usize), LinkAlign>,
) {
    for (d, da) in out.domains.iter_mut().enumerate() {
        da.offset_ns = s.offset[d];
        da.drift_ppm = s.drift[d] * 1e6;
        (da.offset_min_ns, da.offset_max_ns) = (s.lo[d], s.hi[d]);
        da.uncertainty_ns = match (s.lo[d], s.hi[d]) {
            (Some(lo), Some(hi)) => Some((s.offset[d] - lo).max(hi - s.offset[d]).max(0.0)),
            _ => None,
        };
    }
    out.dropped_constraints = s.dropped.len() as u64;
    out.min_slack_ns = s.min_slack_ns;
    for &i in &s.dropped {
        let c = &cons[i];
        if let Some(l) = links.get_mut(&(c.a.min(c.b), c.a.max(c.b))) {
            if c.a < c.b {
                l.dropped_ab += 1;
            } else {
                l.dropped_ba += 1;
            }
        }
    }
    let t0 = out.t0;
    for (&(a, b), l) in links.iter_mut() {
        l.skew_ns = Some(s.offset[a] - s.offset[b]);
        if let Some(r) = s.pairs.get(&(a, b)) {
            l.infeasible = r.infeasible;
            if let Some((at, lead, lo, hi)) = r.best {
                // `at` is on a's uncorrected clock: on the output time line a's correction
                // is added. At that instant b's clock reads `at + lead`.
                let on_a = s.offset[a] + s.drift[a] * at;
                l.best_at_ns = Some(t0 + (at + on_a).round() as i64);
                l.pair_skew_ns = Some((lo + hi) / 2.0);
                l.uncertainty_ns = Some((hi - lo) / 2.0);
                l.corrected_skew_ns = Some(on_a - s.offset[b] - s.drift[b] * (at + lead));
            }
        }
    }
}
