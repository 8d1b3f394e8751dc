//! The global solve: offsets and drifts of all clock domains from causality constraints.
//!
//! Unknowns: per domain k an offset `o_k` (correction at the reference time t0) and a drift
//! `r_k` (the correction's change at t0 ± half the run, so `τ = (t − t0)/half` ∈ [−1, 1]); the
//! reference domain keeps 0. A message sent by domain a at x and received by b at x + d (both
//! relative to t0, uncorrected) gives `o_a − o_b + r_a·τ(x) − r_b·τ(x + d) ≤ d`; drifts lie in
//! a box (|r| ≤ [`MAX_DRIFT`]·half).
//!
//! 1. Drifts: one LP maximises the smallest slack of all constraints (a point deep inside the
//!    feasible set, the midline of every two-sided band that binds), with a small penalty on
//!    |r| so that drifts nothing pins stay 0. If no solution has every slack ≥ 0, an elastic LP
//!    minimises the total violation; the constraints it violates are dropped, those the others
//!    do not contradict are put back one by one, and the drift LP is solved again.
//! 2. Offsets at those drifts: the constraints are difference constraints `o_a − o_b ≤ w`, so
//!    the largest and the smallest feasible offset of every domain are shortest paths
//!    (Bellman-Ford, fixed edge order). Both extreme vectors are feasible, so their average is
//!    feasible and lies at the centre of every domain's interval. The average can still sit on
//!    a constraint between two non-reference domains (both extremes on it: a receive at
//!    exactly its send time, one ns of rounding from inverted), so the offsets are placed in
//!    the constraints tightened by [`ROUNDING_MARGIN_NS`] (the drift LP's smallest slack, if
//!    less): every kept constraint keeps that slack, which covers the rounding of the trace's
//!    times to whole ns. A side with no path (traffic in one direction only) is capped at the
//!    smallest correction that keeps causality; a group of domains with no constraint linking
//!    it to the reference keeps its lowest domain uncorrected, the others centred against it.
//! 3. Uncertainty: per domain pair, two tiny LPs ([`super::small_lp`]) give the range of
//!    `o_a − o_b` over all drifts of the box; shortest paths over those ranges bound each
//!    domain's offset (an outer bound of every offset the constraints allow). The uncertainty is
//!    the largest distance from the estimate to that bound: unbounded where one side has no
//!    constraint. Per pair, the same LPs find the time where its own messages bound its clock
//!    difference most tightly (the range's width is convex in time: bisection on its
//!    subgradient); drift widens the range away from that time, so a pair's range is stated
//!    there.
//!
//! Everything is computed in a fixed order (sorted constraints, BTreeMaps), so the same logs give
//! the same numbers. Internally times are in µs, which keeps the LP coefficients near 1.

use std::collections::BTreeMap;

use microlp::{ComparisonOp, OptimizationDirection, Problem, Variable};
use rayon::prelude::*;

use crate::align::small_lp::{self, Outcome, PairLp, Row};

/// Largest drift of a domain's clock the solve allows (500 ppm).
pub const MAX_DRIFT: f64 = 500e-6;
/// Slack below which an elastic variable counts as a violated constraint (µs).
const VIOLATED_US: f64 = 1e-6;
/// Cap on the smallest slack the drift LP maximises (µs): keeps the LP bounded when no
/// constraint pair closes a band.
const MARGIN_CAP_US: f64 = 1e6;
/// Most dropped constraints [`restore`] tries to put back (one LP each).
const MAX_RESTORE: usize = 64;
/// Penalty per µs of drift in the drift LP (µs of slack).
const DRIFT_PENALTY: f64 = 1e-3;
/// Slack (ns) every kept constraint keeps after the offsets are placed, where the drift LP's
/// smallest slack allows it. The trace's times are whole ns: a written time is at most 1.5 ns
/// from the exact correction (the uncorrected time the LP saw, the correction's offset and the
/// corrected slope's product are each rounded once, ≤ 0.5 ns each), so a message's two ends
/// move by at most 3 ns against each other.
pub const ROUNDING_MARGIN_NS: f64 = 4.0;
/// The bisection for a pair's best time stops when its bracket is this short (ns): the range's
/// width changes by at most 2·[`MAX_DRIFT`] of the time moved, 1 ns here.
const BEST_TIME_NS: f64 = 1000.0;

/// One causality constraint: domain `a` sent at `x` ns (relative to t0); domain `b` received
/// `d` ns later (uncorrected clocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Con {
    pub a: usize,
    pub b: usize,
    pub x: i64,
    pub d: i64,
}

/// Range of `o_a − o_b` (ns) a domain pair's own constraints allow; `None`: unbounded side.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PairRange {
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    /// The pair's constraints contradict each other (under the drift box).
    pub infeasible: bool,
    /// Where the pair's own constraints bound its clock difference most tightly: (time on a's
    /// uncorrected clock relative to t0, b's estimated lead σ there, lowest, highest) of the
    /// clock difference at that instant, `o_a − o_b + r_a·τ − r_b·(τ + σ)` (ns); `None` when
    /// a side is unbounded or the pair is contradictory.
    pub best: Option<(f64, f64, f64, f64)>,
}

/// Result of the solve (ns; drift as a fraction).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Solved {
    pub offset: Vec<f64>,
    pub drift: Vec<f64>,
    /// Bounds of every offset the (kept) constraints allow; `None`: unbounded.
    pub lo: Vec<Option<f64>>,
    pub hi: Vec<Option<f64>>,
    /// Indices (into the constraints) of those dropped to make the set feasible.
    pub dropped: Vec<usize>,
    /// Per unordered domain pair (a < b) with constraints: its range of `o_a − o_b`.
    pub pairs: BTreeMap<(usize, usize), PairRange>,
    /// Smallest slack (ns) of a kept constraint at the final offsets and drifts (exact, before
    /// the trace's rounding); `None` without constraints.
    pub min_slack_ns: Option<f64>,
}

/// Why no correction could be computed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SolveError {
    #[error("the linear program failed: {0}")]
    Lp(String),
    #[error("the constraints stay contradictory after dropping {0} of them")]
    StillInfeasible(usize),
}

const US: f64 = 1e-3;

struct Vars {
    o: Vec<Option<Variable>>,
    r: Vec<Option<Variable>>,
}

fn add_domain_vars(p: &mut Problem, n: usize, reference: usize, box_us: f64) -> Vars {
    let mut v = Vars {
        o: vec![None; n],
        r: vec![None; n],
    };
    for k in (0..n).filter(|&k| k != reference) {
        v.o[k] = Some(p.add_var(0.0, (f64::NEG_INFINITY, f64::INFINITY)));
        v.r[k] = Some(p.add_var(0.0, (-box_us, box_us)));
    }
    v
}

/// Left-hand side of a constraint (without slack variables) and its right-hand side, in µs.
fn row(v: &Vars, c: &Con, half: f64) -> (Vec<(Variable, f64)>, f64) {
    let (tx, ty) = (c.x as f64 / half, (c.x + c.d) as f64 / half);
    let mut e = Vec::with_capacity(4);
    if let (Some(o), Some(r)) = (v.o[c.a], v.r[c.a]) {
        e.push((o, 1.0));
        e.push((r, tx));
    }
    if let (Some(o), Some(r)) = (v.o[c.b], v.r[c.b]) {
        e.push((o, -1.0));
        e.push((r, -ty));
    }
    (e, c.d as f64 * US)
}

fn lp_err(e: microlp::Error) -> SolveError {
    SolveError::Lp(e.to_string())
}

/// Drifts (µs at τ = 1) maximising the smallest slack, and that slack (µs); `Ok(None)` when
/// no drift makes every constraint hold.
fn drift_lp(
    n: usize,
    reference: usize,
    half: f64,
    cons: &[&Con],
) -> Result<Option<(Vec<f64>, f64)>, SolveError> {
    let box_us = MAX_DRIFT * half * US;
    let mut p = Problem::new(OptimizationDirection::Maximize);
    let v = add_domain_vars(&mut p, n, reference, box_us);
    let m = p.add_var(1.0, (0.0, MARGIN_CAP_US));
    for k in 0..n {
        if let Some(r) = v.r[k] {
            // |r| ≤ a: penalised through a ≥ r, a ≥ −r.
            let a = p.add_var(-DRIFT_PENALTY, (0.0, box_us));
            p.add_constraint([(r, 1.0), (a, -1.0)], ComparisonOp::Le, 0.0);
            p.add_constraint([(r, -1.0), (a, -1.0)], ComparisonOp::Le, 0.0);
        }
    }
    for c in cons {
        let (mut e, rhs) = row(&v, c, half);
        if e.is_empty() {
            continue;
        }
        e.push((m, 1.0));
        p.add_constraint(e, ComparisonOp::Le, rhs);
    }
    match p.solve() {
        Ok(s) => {
            let s = s
                .into_solution()
                .map_err(|_| SolveError::Lp("interrupted".into()))?;
            Ok(Some((
                v.r.iter()
                    .map(|r| r.map_or(0.0, |r| s.var_value(r)))
                    .collect(),
                s.var_value(m),
            )))
        }
        Err(microlp::Error::Infeasible) => Ok(None),
        Err(e) => Err(lp_err(e)),
    }
}

/// Elastic LP: the constraints (indices into `cons`) that a least-total-violation solution
/// violates.
fn violated(n: usize, reference: usize, half: f64, cons: &[Con]) -> Result<Vec<usize>, SolveError> {
    let mut p = Problem::new(OptimizationDirection::Minimize);
    let v = add_domain_vars(&mut p, n, reference, MAX_DRIFT * half * US);
    let mut slack = Vec::with_capacity(cons.len());
    for c in cons {
        let (mut e, rhs) = row(&v, c, half);
        let s = p.add_var(1.0, (0.0, f64::INFINITY));
        e.push((s, -1.0));
        p.add_constraint(e, ComparisonOp::Le, rhs);
        slack.push(s);
    }
    let s = p.solve().map_err(lp_err)?;
    let s = s
        .into_solution()
        .map_err(|_| SolveError::Lp("interrupted".into()))?;
    Ok(slack
        .iter()
        .enumerate()
        .filter(|(_, &v)| s.var_value(v) > VIOLATED_US)
        .map(|(i, _)| i)
        .collect())
}

/// Difference constraints `o_i − o_j ≤ w` (µs): the feasible interval of every offset with the
/// reference at 0 (`None`: unbounded), by Bellman-Ford in a fixed order. `None` on a negative
/// cycle (beyond rounding).
type Interval = (Vec<Option<f64>>, Vec<Option<f64>>);
fn intervals(n: usize, reference: usize, diffs: &[(usize, usize, f64)]) -> Option<Interval> {
    // hi: o_i ≤ o_j + w (edge j → i); lo: −o_j ≤ −o_i + w (edge i → j on −o).
    let hi = shortest(n, reference, diffs.iter().map(|&(i, j, w)| (j, i, w)))?;
    let neg = shortest(n, reference, diffs.iter().map(|&(i, j, w)| (i, j, w)))?;
    Some((hi, neg.into_iter().map(|d| d.map(|d| -d)).collect()))
}

fn shortest(
    n: usize,
    src: usize,
    edges: impl Iterator<Item = (usize, usize, f64)>,
) -> Option<Vec<Option<f64>>> {
    let edges: Vec<(usize, usize, f64)> = edges.collect();
    let mut dist = vec![f64::INFINITY; n];
    dist[src] = 0.0;
    for round in 0..=n {
        let mut changed = false;
        for &(u, v, w) in &edges {
            let nd = dist[u] + w;
            if nd < dist[v] - 1e-9 * (1.0 + nd.abs()) {
                dist[v] = nd;
                changed = true;
            }
        }
        if !changed {
            return Some(
                dist.into_iter()
                    .map(|d| d.is_finite().then_some(d))
                    .collect(),
            );
        }
        if round == n {
            return None;
        }
    }
    None
}

/// One extreme of a pair's clock difference: its value (µs) and `r_a`, `r_b` there (µs at
/// τ = 1; they give a subgradient of that extreme in τ); `None`: unbounded.
type Extreme = Option<(f64, f64, f64)>;

/// Lowest and highest clock difference of the pair at one instant, `c_a(τ) − c_b(τ + σ)` =
/// `o_a − o_b + r_a·τ − r_b·(τ + σ)` (µs), over the pair's own constraints and the drift box:
/// a's clock reads τ when b's reads τ + σ (σ: b's lead, from the global solution; an error in
/// it moves each extreme by at most [`MAX_DRIFT`] of that error). `Err` when they contradict
/// each other.
fn pair_at(
    reference: usize,
    half: f64,
    (a, b): (usize, usize),
    cons: &[&Con],
    (tau, sigma): (f64, f64),
) -> Result<(Extreme, Extreme), ()> {
    let rows: Vec<Row> = cons
        .iter()
        .map(|c| {
            let (tx, ty) = (c.x as f64 / half, (c.x + c.d) as f64 / half);
            let d = c.d as f64 * US;
            // c.a = a: w + r_a τx − r_b τy ≤ d; c.a = b: −w + r_b τx − r_a τy ≤ d.
            if c.a == a {
                Row {
                    upper: true,
                    ca: tx,
                    cb: -ty,
                    d,
                }
            } else {
                Row {
                    upper: false,
                    ca: -ty,
                    cb: tx,
                    d,
                }
            }
        })
        .collect();
    let lp = PairLp {
        rows: &rows,
        bound: MAX_DRIFT * half * US,
        has_a: a != reference,
        has_b: b != reference,
        obj: (tau, -(tau + sigma)),
    };
    let extreme = |dir| match small_lp::solve(&lp, dir) {
        Outcome::Optimal { value, ra, rb, .. } => Ok(Some((value, ra, rb))),
        Outcome::Unbounded => Ok(None),
        Outcome::Infeasible => Err(()),
    };
    Ok((
        extreme(OptimizationDirection::Minimize)?,
        extreme(OptimizationDirection::Maximize)?,
    ))
}

/// Range of `o_a − o_b` over the pair's own constraints and the drift box: at t0, and where
/// the pair's clock difference at one instant is narrowest. The width `hi(τ) − lo(τ)` is
/// convex (a maximum minus a minimum of linear functions of τ over one set, σ being linear in
/// τ), so bisection on the sign of its subgradient finds that time within the span of the
/// pair's messages. `lead`: b's lead over a in the global solution, `(at t0, per τ)` (µs).
fn pair_range(
    reference: usize,
    half: f64,
    pair: (usize, usize),
    cons: &[&Con],
    lead: (f64, f64),
) -> PairRange {
    let Ok((lo, hi)) = pair_at(reference, half, pair, cons, (0.0, 0.0)) else {
        return PairRange {
            infeasible: true,
            ..Default::default()
        };
    };
    let mut out = PairRange {
        lo: lo.map(|v| v.0 / US),
        hi: hi.map(|v| v.0 / US),
        ..Default::default()
    };
    if lo.is_none() || hi.is_none() {
        return out;
    }
    let sigma = |tau: f64| (lead.0 + lead.1 * tau) / US / half;
    // The range at t0 above is of the offsets (both clocks read τ = 0); the clock difference
    // at t0 reads b's clock σ(0) later, as at every other candidate time (the range of the
    // offsets reported as the difference's put the correction outside it by up to
    // MAX_DRIFT·σ(0) where the drifts reach the box).
    let Ok((Some(lo0), Some(hi0))) = pair_at(reference, half, pair, cons, (0.0, sigma(0.0))) else {
        return out;
    };
    let mut best = (0.0, lo0.0, hi0.0);
    let (mut l, mut h) = cons
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), c| {
            (l.min(c.x as f64 / half), h.max((c.x + c.d) as f64 / half))
        });
    while (h - l) * half > BEST_TIME_NS {
        let m = l + (h - l) / 2.0;
        let Ok((Some(lo), Some(hi))) = pair_at(reference, half, pair, cons, (m, sigma(m))) else {
            break;
        };
        if hi.0 - lo.0 < best.2 - best.1 {
            best = (m, lo.0, hi.0);
        }
        // d/dτ of an extreme is r_a − r_b·(1 + σ') at its optimum (σ' = dσ/dτ).
        let d = |e: (f64, f64, f64)| e.1 - e.2 * (1.0 + lead.1 / US / half);
        let slope = d(hi) - d(lo);
        if slope > 0.0 {
            h = m;
        } else if slope < 0.0 {
            l = m;
        } else {
            break;
        }
    }
    out.best = Some((
        best.0 * half,
        sigma(best.0) * half,
        best.1 / US,
        best.2 / US,
    ));
    out
}

/// Groups of domains that no constraint links to the reference: the lowest domain of each.
fn unlinked_roots(n: usize, reference: usize, diffs: &[(usize, usize, f64)]) -> Vec<usize> {
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut k: usize) -> usize {
        while parent[k] != k {
            parent[k] = parent[parent[k]];
            k = parent[k];
        }
        k
    }
    for &(i, j, _) in diffs {
        let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
        // The lower index becomes the root, so a group's root is its lowest domain.
        parent[ri.max(rj)] = ri.min(rj);
    }
    let r = root(&mut parent, reference);
    (0..n)
        .filter(|&k| root(&mut parent, k) == k && k != r)
        .collect()
}

/// Offsets (µs) at the centre of every domain's interval under the difference constraints
/// `o_i − o_j ≤ w`; `None` when they contradict each other.
fn place(n: usize, reference: usize, mut diffs: Vec<(usize, usize, f64)>) -> Option<Vec<f64>> {
    for root in unlinked_roots(n, reference, &diffs) {
        diffs.push((root, reference, 0.0));
        diffs.push((reference, root, 0.0));
    }
    let (hi, lo) = intervals(n, reference, &diffs)?;
    // Cap unbounded sides at the smallest correction that keeps causality, upper caps first
    // (the smallest feasible vector satisfies them), then lower caps (the largest does).
    for k in 0..n {
        if hi[k].is_none() {
            diffs.push((k, reference, lo[k].unwrap_or(0.0).max(0.0)));
        }
    }
    let (hi2, _) = intervals(n, reference, &diffs)?;
    for k in 0..n {
        if lo[k].is_none() {
            diffs.push((reference, k, -hi2[k].unwrap_or(0.0).min(0.0)));
        }
    }
    let (hi3, lo3) = intervals(n, reference, &diffs)?;
    Some(
        (0..n)
            .map(|k| (hi3[k].unwrap_or(0.0) + lo3[k].unwrap_or(0.0)) / 2.0)
            .collect(),
    )
}

/// `w` of a constraint at fixed drifts (µs): `o_a − o_b ≤ w`.
fn weight(c: &Con, r_us: &[f64], half: f64) -> f64 {
    let (tx, ty) = (c.x as f64 / half, (c.x + c.d) as f64 / half);
    c.d as f64 * US - r_us[c.a] * tx + r_us[c.b] * ty
}

/// Solves for all domains' corrections. `cons` must be sorted (it is the solve's order).
pub fn solve(n: usize, reference: usize, half: f64, cons: &[Con]) -> Result<Solved, SolveError> {
    let mut dropped = Vec::new();
    let all: Vec<&Con> = cons.iter().collect();
    let (r_us, margin_us) = match drift_lp(n, reference, half, &all)? {
        Some(r) => r,
        None => {
            dropped = restore(
                n,
                reference,
                half,
                cons,
                violated(n, reference, half, cons)?,
            )?;
            let kept: Vec<&Con> = keep(cons, &dropped);
            drift_lp(n, reference, half, &kept)?
                .ok_or(SolveError::StillInfeasible(dropped.len()))?
        }
    };
    let kept = keep(cons, &dropped);
    // Offsets at these drifts: per directed pair the tightest bound, less the margin.
    let mut tight: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for c in &kept {
        let w = weight(c, &r_us, half);
        let e = tight.entry((c.a, c.b)).or_insert(w);
        *e = e.min(w);
    }
    let shrunk = |g: f64| tight.iter().map(|(&(a, b), &w)| (a, b, w - g)).collect();
    let g = (ROUNDING_MARGIN_NS * US).min(margin_us.max(0.0));
    let offset_us = place(n, reference, shrunk(g))
        .or_else(|| place(n, reference, shrunk(0.0)))
        .ok_or(SolveError::StillInfeasible(dropped.len()))?;
    let min_slack_ns = kept
        .iter()
        .map(|c| (weight(c, &r_us, half) - offset_us[c.a] + offset_us[c.b]) / US)
        .reduce(f64::min);
    // Uncertainty: per pair ranges over all drifts, combined along paths.
    let mut by_pair: BTreeMap<(usize, usize), Vec<&Con>> = BTreeMap::new();
    for c in &kept {
        by_pair
            .entry((c.a.min(c.b), c.a.max(c.b)))
            .or_default()
            .push(c);
    }
    // Each pair's LPs are independent: solved in parallel, collected in pair order.
    let by_pair: Vec<((usize, usize), Vec<&Con>)> = by_pair.into_iter().collect();
    let ranges: Vec<PairRange> = by_pair
        .par_iter()
        .map(|&((a, b), ref cs)| {
            let lead = (offset_us[a] - offset_us[b], r_us[a] - r_us[b]);
            pair_range(reference, half, (a, b), cs, lead)
        })
        .collect();
    let mut pairs = BTreeMap::new();
    let mut outer: Vec<(usize, usize, f64)> = Vec::new();
    for (&((a, b), _), pr) in by_pair.iter().zip(ranges) {
        if let Some(h) = pr.hi {
            outer.push((a, b, h * US));
        }
        if let Some(l) = pr.lo {
            outer.push((b, a, -l * US));
        }
        pairs.insert((a, b), pr);
    }
    let (ohi, olo) = intervals(n, reference, &outer).unwrap_or((vec![None; n], vec![None; n]));
    Ok(Solved {
        offset: offset_us.iter().map(|o| o / US).collect(),
        drift: r_us.iter().map(|r| r / US / half).collect(),
        lo: olo.into_iter().map(|v| v.map(|v| v / US)).collect(),
        hi: ohi.into_iter().map(|v| v.map(|v| v / US)).collect(),
        dropped,
        pairs,
        min_slack_ns,
    })
}

/// Puts dropped constraints back one at a time (in order) where the set stays feasible, so
/// that no constraint is dropped that the others do not contradict (the elastic LP minimises
/// the total violation, which can spread over more constraints than necessary).
fn restore(
    n: usize,
    reference: usize,
    half: f64,
    cons: &[Con],
    mut dropped: Vec<usize>,
) -> Result<Vec<usize>, SolveError> {
    if dropped.len() > MAX_RESTORE {
        return Ok(dropped);
    }
    let mut i = 0;
    while i < dropped.len() {
        let trial: Vec<usize> = dropped
            .iter()
            .copied()
            .filter(|&d| d != dropped[i])
            .collect();
        if drift_lp(n, reference, half, &keep(cons, &trial))?.is_some() {
            dropped = trial;
        } else {
            i += 1;
        }
    }
    Ok(dropped)
}

fn keep<'a>(cons: &'a [Con], dropped: &[usize]) -> Vec<&'a Con> {
    cons.iter()
        .enumerate()
        .filter(|(i, _)| dropped.binary_search(i).is_err())
        .map(|(_, c)| c)
        .collect()
}
