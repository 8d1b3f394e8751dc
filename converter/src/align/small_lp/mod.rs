//! An exact, deterministic solver for the per-pair LPs of the uncertainty step.
//!
//! Step 3 of [`super::solve`] asks, per domain pair and instant, for the lowest and the highest
//! `w + t_a·r_a + t_b·r_b` over `w` free, the drifts `r_a`, `r_b` in `[−B, B]` (a reference
//! domain's drift is absent, fixed at 0) and the pair's rows `±w + c_a·r_a + c_b·r_b ≤ d`: an
//! LP with at most 3 unknowns and some tens of rows, on which a general sparse solver (microlp)
//! spends ~650 k instructions.
//!
//! Here a dual simplex on the dense problem. A vertex is n active constraints (rows or drift
//! bounds) whose multipliers are ≥ 0, so it is optimal for the constraints it has; each step
//! brings in the most violated constraint (the lowest-numbered one after a degenerate step:
//! Bland's rule, so it cannot cycle) and drops the active one the ratio test names, until no
//! constraint is violated. Each step refactors the n×n basis from the data (no update carries
//! error forward), so the vertex it ends on is exact up to one small solve's round-off.
//!
//! Classification: `w`'s objective coefficient is ±1 and the drifts are boxed, so the maximum is
//! unbounded exactly when no row bounds `w` from above, the minimum exactly when none bounds it
//! from below; otherwise the feasible set is bounded and the simplex ends at an optimum or on a
//! ray of the dual, a certificate that the rows contradict each other. What it cannot decide
//! beyond doubt (a certificate within microlp's feasibility tolerance, a singular basis,
//! non-finite input, the iteration cap) goes to microlp, which is also the tests' reference.
#![forbid(unsafe_code)]

use microlp::{ComparisonOp, OptimizationDirection, Problem, Variable};

/// One row of a pair's LP: `±w + ca·r_a + cb·r_b ≤ d` (`+w` where `upper`: the row bounds `w`
/// from above).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    pub upper: bool,
    pub ca: f64,
    pub cb: f64,
    pub d: f64,
}

/// A pair's LP: `w` free, `r_a` and `r_b` in `[−bound, bound]` where present (absent: 0), the
/// rows, and the objective `w + obj.0·r_a + obj.1·r_b`.
#[derive(Clone, Copy, Debug)]
pub struct PairLp<'a> {
    pub rows: &'a [Row],
    pub bound: f64,
    pub has_a: bool,
    pub has_b: bool,
    pub obj: (f64, f64),
}

/// How a pair's LP ends. At an optimum: the objective and the vertex (an absent drift is 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outcome {
    Optimal {
        value: f64,
        w: f64,
        ra: f64,
        rb: f64,
    },
    Unbounded,
    Infeasible,
}

/// Most unknowns: `w`, `r_a`, `r_b`.
const N: usize = 3;
type Vn = [f64; N];
type Mat = [[f64; N]; N];

/// A row counts as violated when its slack is below this fraction of [`Dense::span`].
const OPT_TOL: f64 = 1e-12;
/// Smallest entry of the ratio test's column that may leave the basis.
const PIVOT_TOL: f64 = 1e-9;
/// A step whose length (in the dual) is at most this is degenerate: the next entering
/// constraint is chosen by Bland's rule.
const DEGENERATE: f64 = 1e-12;
/// A pivot of the basis' elimination below this fraction of its largest entry: singular.
const SINGULAR: f64 = 1e-14;
/// Infeasibility (µs, the rows' unit) a dual ray must prove before the answer is
/// "infeasible" without microlp: ten times microlp's feasibility tolerance (1e-7), which lets
/// a point violate each row by that much.
const INFEASIBLE_US: f64 = 1e-6;

/// Why the dense simplex gave no vertex.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stop {
    /// A dual ray proves the rows contradict each other by more than [`INFEASIBLE_US`].
    Infeasible,
    /// Not decided beyond doubt: microlp decides.
    Undecided,
}

/// The dense problem: maximise `c·x` subject to `g·x ≤ h` for each of `cons` (the rows first,
/// then per present drift its upper and its lower bound).
struct Dense {
    n: usize,
    rows: usize,
    cons: Vec<(Vn, f64)>,
    c: Vn,
    bound: f64,
    /// A bound on any slack's magnitude in the box (µs): the scale of the tolerances.
    span: f64,
}

/// Solves the LP in direction `dir`; microlp where the small solver cannot decide.
pub fn solve(lp: &PairLp, dir: OptimizationDirection) -> Outcome {
    match solve_small(lp, dir) {
        Some(o) => o,
        None => solve_microlp(lp, dir),
    }
}

/// The small solver alone; `None`: undecided (microlp's turn).
fn solve_small(lp: &PairLp, dir: OptimizationDirection) -> Option<Outcome> {
    let finite = lp.bound.is_finite()
        && lp.bound >= 0.0
        && lp.obj.0.is_finite()
        && lp.obj.1.is_finite()
        && lp
            .rows
            .iter()
            .all(|r| r.ca.is_finite() && r.cb.is_finite() && r.d.is_finite());
    if !finite {
        return None;
    }
    let max = dir == OptimizationDirection::Maximize;
    // The optimum needs a row bounding w on the objective's side.
    if !lp.rows.iter().any(|r| r.upper == max) {
        return Some(Outcome::Unbounded);
    }
    let p = dense(lp, max);
    match simplex(&p) {
        Ok(x) => {
            let (ra, rb) = unpack(lp, &x);
            let value = x[0] + lp.obj.0 * ra + lp.obj.1 * rb;
            Some(Outcome::Optimal {
                value,
                w: x[0],
                ra,
                rb,
            })
        }
        Err(Stop::Infeasible) => Some(Outcome::Infeasible),
        Err(Stop::Undecided) => None,
    }
}

/// The present drifts' positions in the dense unknowns (after `w` at 0).
fn slots(lp: &PairLp) -> (Option<usize>, Option<usize>) {
    let a = lp.has_a.then_some(1);
    let b = lp.has_b.then_some(1 + usize::from(lp.has_a));
    (a, b)
}

/// `(r_a, r_b)` of a dense vertex (0 where absent).
fn unpack(lp: &PairLp, x: &Vn) -> (f64, f64) {
    let (a, b) = slots(lp);
    (a.map_or(0.0, |k| x[k]), b.map_or(0.0, |k| x[k]))
}

/// The dense form of `lp`, maximising (the objective negated for a minimum).
fn dense(lp: &PairLp, max: bool) -> Dense {
    let (sa, sb) = slots(lp);
    let n = 1 + usize::from(lp.has_a) + usize::from(lp.has_b);
    let s = if max { 1.0 } else { -1.0 };
    let mut c = [0.0; N];
    c[0] = s;
    let mut cons = Vec::with_capacity(lp.rows.len() + 2 * (n - 1));
    let (mut dmax, mut cmax) = (0.0f64, 0.0f64);
    for r in lp.rows {
        let mut g = [0.0; N];
        g[0] = if r.upper { 1.0 } else { -1.0 };
        if let Some(k) = sa {
            g[k] = r.ca;
            cmax = cmax.max(r.ca.abs());
        }
        if let Some(k) = sb {
            g[k] = r.cb;
            cmax = cmax.max(r.cb.abs());
        }
        dmax = dmax.max(r.d.abs());
        cons.push((g, r.d));
    }
    for (slot, o) in [(sa, lp.obj.0), (sb, lp.obj.1)] {
        if let Some(k) = slot {
            c[k] = s * o;
        }
    }
    for k in 1..n {
        let mut e = [0.0; N];
        e[k] = 1.0;
        cons.push((e, lp.bound));
        e[k] = -1.0;
        cons.push((e, lp.bound));
    }
    Dense {
        n,
        rows: lp.rows.len(),
        cons,
        c,
        bound: lp.bound,
        span: 1.0 + dmax + 2.0 * lp.bound * (1.0 + cmax),
    }
}

fn dot(n: usize, a: &Vn, b: &Vn) -> f64 {
    (0..n).map(|k| a[k] * b[k]).sum()
}

/// The starting basis: the row on the objective's side whose one-row bound on the objective is
/// lowest (ties: the lowest row), the drifts at the bound their multipliers make ≥ 0.
fn start(p: &Dense) -> [usize; N] {
    let n = p.n;
    let one_row_bound = |i: usize| {
        let (g, h) = &p.cons[i];
        h + p.bound * (1..n).map(|k| (p.c[k] - g[k]).abs()).sum::<f64>()
    };
    let mut best: Option<(usize, f64)> = None;
    for i in (0..p.rows).filter(|&i| p.cons[i].0[0] * p.c[0] > 0.0) {
        let v = one_row_bound(i);
        if best.is_none_or(|(_, b)| v < b) {
            best = Some((i, v));
        }
    }
    let i0 = best.map_or(0, |b| b.0);
    let mut basis = [0; N];
    basis[0] = i0;
    for (k, slot) in basis.iter_mut().enumerate().take(n).skip(1) {
        let lower = p.c[k] - p.cons[i0].0[k] < 0.0;
        *slot = p.rows + 2 * (k - 1) + usize::from(lower);
    }
    basis
}

/// Dual simplex from [`start`]: the optimal vertex, or why there is none.
fn simplex(p: &Dense) -> Result<Vn, Stop> {
    let n = p.n;
    let tol = OPT_TOL * p.span;
    let mut basis = start(p);
    let mut bland = false;
    let cap = 50 + 10 * p.cons.len();
    for _ in 0..cap {
        let mut m: Mat = [[0.0; N]; N];
        let mut hb = [0.0; N];
        for l in 0..n {
            m[l] = p.cons[basis[l]].0;
            hb[l] = p.cons[basis[l]].1;
        }
        let mt = transpose(&m);
        let x = lu_solve(&m, n, hb).ok_or(Stop::Undecided)?;
        let y = lu_solve(&mt, n, p.c).ok_or(Stop::Undecided)?;
        // Entering: the most violated constraint, or under Bland's rule the first violated.
        let mut enter: Option<(usize, f64)> = None;
        for (j, (g, h)) in p.cons.iter().enumerate() {
            if basis[..n].contains(&j) {
                continue;
            }
            let s = h - dot(n, g, &x);
            if s < enter.map_or(-tol, |e| e.1) {
                enter = Some((j, s));
                if bland {
                    break;
                }
            }
        }
        let Some((q, sq)) = enter else {
            return Ok(snap(p, &basis, x));
        };
        let alpha = lu_solve(&mt, n, p.cons[q].0).ok_or(Stop::Undecided)?;
        // Leaving: the smallest ratio of multiplier to column entry (ties: lowest constraint).
        let mut leave: Option<(usize, f64)> = None;
        for l in 0..n {
            if alpha[l] > PIVOT_TOL {
                let t = y[l].max(0.0) / alpha[l];
                let better = leave.is_none_or(|(b, bt)| t < bt || (t == bt && basis[l] < basis[b]));
                if better {
                    leave = Some((l, t));
                }
            }
        }
        let Some((l, t)) = leave else {
            return Err(infeasible_or_undecided(p, &alpha, sq));
        };
        bland = t <= DEGENERATE;
        basis[l] = q;
    }
    Err(Stop::Undecided)
}

/// No basic multiplier bounds the step: the dual has a ray, `z` = 1 on the entering
/// constraint and `−α` on the basic ones. For every point, `Σ z·slack = s_q + Σ_{α>0} α·slack`
/// (the small positive entries the ratio test skipped), so some constraint is violated by at
/// least `(−s_q − Σ_{α>0} α·span) / Σ z`. That proves infeasibility only if it clearly exceeds
/// microlp's tolerance; otherwise microlp decides.
fn infeasible_or_undecided(p: &Dense, alpha: &Vn, sq: f64) -> Stop {
    let n = p.n;
    let pos: f64 = alpha[..n].iter().filter(|&&a| a > 0.0).sum();
    let neg: f64 = alpha[..n].iter().filter(|&&a| a <= 0.0).map(|a| -a).sum();
    let proven = -sq - pos * p.span;
    if proven > INFEASIBLE_US * (1.0 + neg) {
        Stop::Infeasible
    } else {
        Stop::Undecided
    }
}

/// The vertex with each drift on an active bound exactly at it, and `w` recomputed from the
/// one active row where there is one.
fn snap(p: &Dense, basis: &[usize; N], mut x: Vn) -> Vn {
    let n = p.n;
    let mut rows = basis[..n].iter().filter(|&&j| j < p.rows);
    for &j in basis[..n].iter().filter(|&&j| j >= p.rows) {
        let k = 1 + (j - p.rows) / 2;
        x[k] = if (j - p.rows).is_multiple_of(2) {
            p.bound
        } else {
            -p.bound
        };
    }
    if let (Some(&j), None) = (rows.next(), rows.next()) {
        let (g, h) = &p.cons[j];
        let rest: f64 = (1..n).map(|k| g[k] * x[k]).sum();
        x[0] = (h - rest) / g[0];
    }
    x
}

fn transpose(m: &Mat) -> Mat {
    let mut t = [[0.0; N]; N];
    for (i, row) in m.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            t[j][i] = *v;
        }
    }
    t
}

/// Solves `m·x = b` (the leading n×n block) by Gaussian elimination with partial pivoting
/// (ties: the upper row); `None` when `m` is singular as far as f64 can tell.
fn lu_solve(m: &Mat, n: usize, mut b: Vn) -> Option<Vn> {
    let mut a = *m;
    let scale = (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .fold(0.0f64, |s, (i, j)| s.max(a[i][j].abs()));
    if scale == 0.0 {
        return None;
    }
    for col in 0..n {
        let mut p = col;
        for r in col + 1..n {
            if a[r][col].abs() > a[p][col].abs() {
                p = r;
            }
        }
        if a[p][col].abs() <= SINGULAR * scale {
            return None;
        }
        a.swap(p, col);
        b.swap(p, col);
        for r in col + 1..n {
            let f = a[r][col] / a[col][col];
            let pivot = a[col];
            for (v, pv) in a[r][col..n].iter_mut().zip(&pivot[col..n]) {
                *v -= f * pv;
            }
            b[r] -= f * b[col];
        }
    }
    let mut x = [0.0; N];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|k| a[i][k] * x[k]).sum();
        x[i] = (b[i] - s) / a[i][i];
    }
    Some(x)
}

/// The same LP by microlp (the fallback and the tests' reference), classified as `pair_at`
/// always classified microlp's answers: an interrupted solve reads as unbounded, an error other
/// than unbounded as infeasible.
pub fn solve_microlp(lp: &PairLp, dir: OptimizationDirection) -> Outcome {
    let mut p = Problem::new(dir);
    let w = p.add_var(1.0, (f64::NEG_INFINITY, f64::INFINITY));
    let b = lp.bound;
    let ra = lp.has_a.then(|| p.add_var(lp.obj.0, (-b, b)));
    let rb = lp.has_b.then(|| p.add_var(lp.obj.1, (-b, b)));
    for r in lp.rows {
        let mut e = vec![(w, if r.upper { 1.0 } else { -1.0 })];
        e.extend(ra.map(|v| (v, r.ca)));
        e.extend(rb.map(|v| (v, r.cb)));
        p.add_constraint(e, ComparisonOp::Le, r.d);
    }
    match p.solve() {
        Ok(s) => match s.into_solution() {
            Ok(s) => {
                let val = |v: Option<Variable>| v.map_or(0.0, |v| s.var_value(v));
                Outcome::Optimal {
                    value: s.objective(),
                    w: s.var_value(w),
                    ra: val(ra),
                    rb: val(rb),
                }
            }
            Err(_) => Outcome::Unbounded,
        },
        Err(microlp::Error::Unbounded) => Outcome::Unbounded,
        Err(_) => Outcome::Infeasible,
    }
}

#[cfg(test)]
mod tests;
