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
//!    feasible and lies at the centre of every domain's interval. A side with no path (traffic
//!    in one direction only) is capped at the smallest correction that keeps causality.
//! 3. Uncertainty: per domain pair, two tiny LPs give the range of `o_a − o_b` over all drifts
//!    of the box; shortest paths over those ranges bound each domain's offset (an outer bound of
//!    every offset the constraints allow). The uncertainty is the largest distance from the
//!    estimate to that bound: unbounded where one side has no constraint.
//!
//! Everything is computed in a fixed order (sorted constraints, BTreeMaps), so the same logs give
//! the same numbers. Internally times are in µs, which keeps the LP coefficients near 1.

use std::collections::BTreeMap;

use microlp::{ComparisonOp, OptimizationDirection, Problem, Variable};

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

/// Drifts (µs at τ = 1) maximising the smallest slack; `Ok(None)` when no drift makes every
/// constraint hold.
fn drift_lp(
    n: usize,
    reference: usize,
    half: f64,
    cons: &[&Con],
) -> Result<Option<Vec<f64>>, SolveError> {
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
            Ok(Some(
                v.r.iter()
                    .map(|r| r.map_or(0.0, |r| s.var_value(r)))
                    .collect(),
            ))
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

/// Range of `o_a − o_b` (µs) over the pair's own constraints and the drift box.
fn pair_range(reference: usize, half: f64, a: usize, b: usize, cons: &[&Con]) -> PairRange {
    let box_us = MAX_DRIFT * half * US;
    let extreme = |dir| -> Result<Option<f64>, ()> {
        let mut p = Problem::new(dir);
        let w = p.add_var(1.0, (f64::NEG_INFINITY, f64::INFINITY));
        let r =
            |p: &mut Problem, k: usize| (k != reference).then(|| p.add_var(0.0, (-box_us, box_us)));
        let (ra, rb) = (r(&mut p, a), r(&mut p, b));
        for c in cons {
            let (tx, ty) = (c.x as f64 / half, (c.x + c.d) as f64 / half);
            // c.a = a: w + r_a τx − r_b τy ≤ d; c.a = b: −w + r_b τx − r_a τy ≤ d.
            let (sign, rs, rr) = if c.a == a {
                (1.0, ra, rb)
            } else {
                (-1.0, rb, ra)
            };
            let mut e = vec![(w, sign)];
            e.extend(rs.map(|v| (v, tx)));
            e.extend(rr.map(|v| (v, -ty)));
            p.add_constraint(e, ComparisonOp::Le, c.d as f64 * US);
        }
        match p.solve() {
            Ok(s) => Ok(s.into_solution().ok().map(|s| s.objective())),
            Err(microlp::Error::Unbounded) => Ok(None),
            Err(_) => Err(()),
        }
    };
    match (
        extreme(OptimizationDirection::Minimize),
        extreme(OptimizationDirection::Maximize),
    ) {
        (Ok(lo), Ok(hi)) => PairRange {
            lo: lo.map(|v| v / US),
            hi: hi.map(|v| v / US),
            infeasible: false,
        },
        _ => PairRange {
            infeasible: true,
            ..Default::default()
        },
    }
}

/// Solves for all domains' corrections. `cons` must be sorted (it is the solve's order).
pub fn solve(n: usize, reference: usize, half: f64, cons: &[Con]) -> Result<Solved, SolveError> {
    let mut dropped = Vec::new();
    let all: Vec<&Con> = cons.iter().collect();
    let r_us = match drift_lp(n, reference, half, &all)? {
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
    // Offsets at these drifts: per directed pair the tightest bound.
    let mut tight: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for c in &kept {
        let (tx, ty) = (c.x as f64 / half, (c.x + c.d) as f64 / half);
        let w = c.d as f64 * US - r_us[c.a] * tx + r_us[c.b] * ty;
        let e = tight.entry((c.a, c.b)).or_insert(w);
        *e = e.min(w);
    }
    let mut diffs: Vec<(usize, usize, f64)> = tight.iter().map(|(&(a, b), &w)| (a, b, w)).collect();
    let (hi, lo) =
        intervals(n, reference, &diffs).ok_or(SolveError::StillInfeasible(dropped.len()))?;
    // Cap unbounded sides at the smallest correction that keeps causality, upper caps first
    // (the smallest feasible vector satisfies them), then lower caps (the largest does).
    for k in 0..n {
        if hi[k].is_none() {
            diffs.push((k, reference, lo[k].unwrap_or(0.0).max(0.0)));
        }
    }
    let (hi2, _) = intervals(n, reference, &diffs).ok_or(SolveError::StillInfeasible(0))?;
    for k in 0..n {
        if lo[k].is_none() {
            diffs.push((reference, k, -hi2[k].unwrap_or(0.0).min(0.0)));
        }
    }
    let (hi3, lo3) = intervals(n, reference, &diffs).ok_or(SolveError::StillInfeasible(0))?;
    let offset: Vec<f64> = (0..n)
        .map(|k| (hi3[k].unwrap_or(0.0) + lo3[k].unwrap_or(0.0)) / 2.0 / US)
        .collect();
    // Uncertainty: per pair ranges over all drifts, combined along paths.
    let mut by_pair: BTreeMap<(usize, usize), Vec<&Con>> = BTreeMap::new();
    for c in &kept {
        by_pair
            .entry((c.a.min(c.b), c.a.max(c.b)))
            .or_default()
            .push(c);
    }
    let mut pairs = BTreeMap::new();
    let mut outer: Vec<(usize, usize, f64)> = Vec::new();
    for (&(a, b), cs) in &by_pair {
        let pr = pair_range(reference, half, a, b, cs);
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
        offset,
        drift: r_us.iter().map(|r| r / US / half).collect(),
        lo: olo.into_iter().map(|v| v.map(|v| v / US)).collect(),
        hi: ohi.into_iter().map(|v| v.map(|v| v / US)).collect(),
        dropped,
        pairs,
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
