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
mod tests {
    use super::*;
    use OptimizationDirection::{Maximize, Minimize};

    /// splitmix64: the tests' deterministic generator.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        /// Uniform in [0, 1).
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
        fn range(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * self.unit()
        }
        /// Uniform in lo..=hi.
        fn int(&mut self, lo: i64, hi: i64) -> i64 {
            lo + (self.next() % (hi - lo + 1) as u64) as i64
        }
        fn chance(&mut self, p: f64) -> bool {
            self.unit() < p
        }
    }

    /// An owned instance.
    struct Inst {
        rows: Vec<Row>,
        bound: f64,
        has_a: bool,
        has_b: bool,
        obj: (f64, f64),
    }

    impl Inst {
        fn lp(&self) -> PairLp<'_> {
            PairLp {
                rows: &self.rows,
                bound: self.bound,
                has_a: self.has_a,
                has_b: self.has_b,
                obj: self.obj,
            }
        }
    }

    /// Which drifts are present: both mostly, one of them where the other domain is the
    /// reference.
    fn presence(rng: &mut Rng) -> (bool, bool) {
        match rng.int(0, 9) {
            0 | 1 => (false, true),
            2 | 3 => (true, false),
            _ => (true, true),
        }
    }

    /// An instance shaped like `pair_at`'s: messages at τ in [−1, 1], latencies −50..500 µs in
    /// whole ns, the drift box of a 10 ms..10 s half-run, some one-sided, empty, with
    /// duplicate rows, zero coefficients or τx = τy.
    fn real_like(rng: &mut Rng) -> Inst {
        let half = 10f64.powf(rng.range(7.0, 10.0));
        let (has_a, has_b) = presence(rng);
        let m = if rng.chance(0.03) {
            0
        } else {
            rng.int(1, 60) as usize
        };
        let sides = rng.int(0, 9); // 0: upper rows only, 1: lower rows only, else both.
                                   // Mostly causal latencies with a few inverted ones; in some sets any in the range.
        let inverted = if rng.chance(0.3) { 0.9 } else { 0.05 };
        let mut rows = Vec::with_capacity(m);
        for _ in 0..m {
            let upper = match sides {
                0 => true,
                1 => false,
                _ => rng.chance(0.5),
            };
            let tx = if rng.chance(0.1) {
                0.0
            } else {
                rng.range(-1.0, 1.0)
            };
            let d_ns = if rng.chance(inverted) {
                rng.int(-50_000, 500_000)
            } else {
                rng.int(0, 500_000)
            } as f64;
            let ty = if rng.chance(0.05) {
                tx
            } else {
                tx + d_ns / half
            };
            let (ca, cb) = if upper { (tx, -ty) } else { (-ty, tx) };
            rows.push(Row {
                upper,
                ca,
                cb,
                d: d_ns * 1e-3,
            });
        }
        if m > 0 && rng.chance(0.2) {
            for _ in 0..rng.int(1, 10) {
                let r = rows[rng.int(0, m as i64 - 1) as usize];
                let at = rng.int(0, rows.len() as i64) as usize;
                rows.insert(at, r);
            }
        }
        let tau = if rng.chance(0.2) {
            0.0
        } else {
            rng.range(-1.0, 1.0)
        };
        let sigma = if rng.chance(0.2) {
            0.0
        } else {
            rng.range(-0.01, 0.01)
        };
        Inst {
            rows,
            bound: 500e-6 * half * 1e-3,
            has_a,
            has_b,
            obj: (tau, -(tau + sigma)),
        }
    }

    /// Largest violation of a row or the box at a vertex.
    fn violation(i: &Inst, w: f64, ra: f64, rb: f64) -> f64 {
        let rows = i.rows.iter().map(|r| {
            let s = if r.upper { w } else { -w };
            s + r.ca * ra + r.cb * rb - r.d
        });
        let boxed = [ra.abs() - i.bound, rb.abs() - i.bound];
        rows.chain(boxed).fold(0.0, f64::max)
    }

    #[derive(Default, Debug)]
    struct Tally {
        optimal: usize,
        unbounded: usize,
        infeasible: usize,
        undecided: usize,
        /// Largest difference of an optimum from the reference's, relative (at least 1 µs).
        worst: f64,
    }

    /// Checks the small solver against `reference` on one instance and direction: the same
    /// class, the same optimum within `rel` (relative, at least 1 µs of scale), a feasible
    /// vertex whose objective is the value, and bit-identical repeats.
    fn check(i: &Inst, dir: OptimizationDirection, reference: Outcome, rel: f64, t: &mut Tally) {
        let Some(got) = solve_small(&i.lp(), dir) else {
            t.undecided += 1;
            return;
        };
        let again = solve_small(&i.lp(), dir).unwrap();
        assert_eq!(
            format!("{got:?}"),
            format!("{again:?}"),
            "not deterministic"
        );
        match (got, reference) {
            (Outcome::Unbounded, Outcome::Unbounded) => t.unbounded += 1,
            (Outcome::Infeasible, Outcome::Infeasible) => t.infeasible += 1,
            (Outcome::Optimal { value, w, ra, rb }, Outcome::Optimal { value: v, .. }) => {
                t.optimal += 1;
                let diff = (value - v).abs() / v.abs().max(1.0);
                t.worst = t.worst.max(diff);
                assert!(diff <= rel, "{dir:?}: {value} vs {v} ({got:?})");
                let span = 1.0 + i.rows.iter().fold(0.0f64, |s, r| s.max(r.d.abs())) + i.bound;
                assert!(
                    violation(i, w, ra, rb) <= 1e-11 * span,
                    "{got:?} infeasible"
                );
                assert!(i.has_a || ra == 0.0);
                assert!(i.has_b || rb == 0.0);
                let obj = w + i.obj.0 * ra + i.obj.1 * rb;
                assert!((obj - value).abs() <= 1e-12 * span);
            }
            (g, r) => panic!("{dir:?}: small solver {g:?}, reference {r:?}"),
        }
    }

    /// 10 000 real-like instances, both directions, against microlp.
    #[test]
    fn matches_microlp_on_real_like_instances() {
        let mut rng = Rng(0x5167_6d61_7472_6163);
        let mut t = Tally::default();
        for _ in 0..10_000 {
            let i = real_like(&mut rng);
            for dir in [Minimize, Maximize] {
                let reference = solve_microlp(&i.lp(), dir);
                check(&i, dir, reference, 1e-9, &mut t);
            }
        }
        eprintln!("{t:?}");
        assert!(
            t.optimal > 10_000 && t.unbounded > 1_000 && t.infeasible > 1_000,
            "{t:?}"
        );
        assert!(t.undecided < 100, "{t:?}");
    }

    /// An integer instance's exact class and optimum.
    #[derive(Debug, PartialEq)]
    enum Exact {
        Optimal(f64),
        Unbounded,
        Infeasible,
    }

    /// Determinant of the leading n×n block.
    fn det(m: &[[i128; 3]; 3], n: usize) -> i128 {
        match n {
            1 => m[0][0],
            2 => m[0][0] * m[1][1] - m[0][1] * m[1][0],
            _ => {
                m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
                    - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                    + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
            }
        }
    }

    /// The exact optimum of an integer instance: every vertex (n of the constraints active,
    /// Cramer's rule in i128) checked against every constraint, the best kept as a fraction.
    fn exact(i: &Inst, max: bool) -> Exact {
        if !i.rows.iter().any(|r| r.upper == max) {
            return Exact::Unbounded;
        }
        let p = dense(&i.lp(), max);
        let (n, big) = (p.n, |v: f64| v as i128);
        let cons: Vec<([i128; 3], i128)> =
            p.cons.iter().map(|(g, h)| (g.map(big), big(*h))).collect();
        let c = p.c.map(big);
        let mut best: Option<(i128, i128)> = None;
        let mm = cons.len();
        let combos: Vec<[usize; 3]> = match n {
            1 => (0..mm).map(|a| [a, 0, 0]).collect(),
            2 => (0..mm)
                .flat_map(|a| (a + 1..mm).map(move |b| [a, b, 0]))
                .collect(),
            _ => (0..mm)
                .flat_map(|a| (a + 1..mm).flat_map(move |b| (b + 1..mm).map(move |c| [a, b, c])))
                .collect(),
        };
        for idx in combos {
            let mut m = [[0i128; 3]; 3];
            for l in 0..n {
                m[l] = cons[idx[l]].0;
            }
            let mut dt = det(&m, n);
            if dt == 0 {
                continue;
            }
            let mut num = [0i128; 3];
            for (k, nk) in num.iter_mut().enumerate().take(n) {
                let mut mk = m;
                for l in 0..n {
                    mk[l][k] = cons[idx[l]].1;
                }
                *nk = det(&mk, n);
            }
            if dt < 0 {
                dt = -dt;
                num = num.map(|v| -v);
            }
            let feasible = cons
                .iter()
                .all(|(g, h)| h * dt - (0..n).map(|k| g[k] * num[k]).sum::<i128>() >= 0);
            if !feasible {
                continue;
            }
            let v = (0..n).map(|k| c[k] * num[k]).sum::<i128>();
            if best.is_none_or(|(bv, bd)| v * bd > bv * dt) {
                best = Some((v, dt));
            }
        }
        let s = if max { 1.0 } else { -1.0 };
        best.map_or(Exact::Infeasible, |(v, d)| {
            Exact::Optimal(s * v as f64 / d as f64)
        })
    }

    /// A small integer instance (coefficients −3..3, d −10..30, box 1..4).
    fn integer(rng: &mut Rng) -> Inst {
        let (has_a, has_b) = presence(rng);
        let m = rng.int(0, 7) as usize;
        let rows = (0..m)
            .map(|_| Row {
                upper: rng.chance(0.5),
                ca: rng.int(-3, 3) as f64,
                cb: rng.int(-3, 3) as f64,
                d: rng.int(-10, 30) as f64,
            })
            .collect();
        Inst {
            rows,
            bound: rng.int(1, 4) as f64,
            has_a,
            has_b,
            obj: (rng.int(-3, 3) as f64, rng.int(-3, 3) as f64),
        }
    }

    /// Both solvers agree with the exact optimum on 4 000 small integer instances, which are
    /// often degenerate (duplicate rows, ties, single feasible points).
    #[test]
    fn matches_exact_vertex_enumeration() {
        let mut rng = Rng(42);
        let mut t = Tally::default();
        for _ in 0..4_000 {
            let i = integer(&mut rng);
            for dir in [Minimize, Maximize] {
                let truth = match exact(&i, dir == Maximize) {
                    Exact::Optimal(v) => Outcome::Optimal {
                        value: v,
                        w: 0.0,
                        ra: 0.0,
                        rb: 0.0,
                    },
                    Exact::Unbounded => Outcome::Unbounded,
                    Exact::Infeasible => Outcome::Infeasible,
                };
                check(&i, dir, truth, 1e-12, &mut t);
                let micro = solve_microlp(&i.lp(), dir);
                let exactish = match (micro, truth) {
                    (Outcome::Optimal { value: a, .. }, Outcome::Optimal { value: b, .. }) => {
                        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
                    }
                    (a, b) => a == b,
                };
                assert!(exactish, "microlp {micro:?}, exact {truth:?}");
            }
        }
        eprintln!("{t:?}");
        assert!(
            t.optimal > 1_000 && t.unbounded > 500 && t.infeasible > 200,
            "{t:?}"
        );
        assert!(t.undecided < 40, "{t:?}");
    }

    /// Degenerate shapes: no rows, one drift, all rows equal, zero coefficients, a plane of
    /// feasible points, a zero box, no drift at all; none panics and each matches microlp.
    #[test]
    fn degenerate_inputs() {
        let r = |upper, ca, cb, d| Row { upper, ca, cb, d };
        let (both, only_a, only_b) = ((true, true), (true, false), (false, true));
        // w = 0.3·(r_b − r_a) exactly.
        let plane = vec![r(true, 0.3, -0.3, 0.0), r(false, -0.3, 0.3, 0.0)];
        let cases = [
            (vec![], 1.0, both),
            (vec![r(true, 0.5, -0.5, 1.0)], 1.0, both),
            (vec![r(true, 0.0, 0.0, 1.0); 5], 1.0, only_a),
            (plane.clone(), 2.0, both),
            (plane, 0.0, both),
            (
                vec![r(true, 0.0, 0.0, -1.0), r(false, 0.0, 0.0, 0.5)],
                3.0,
                only_b,
            ),
            (
                vec![r(true, 1.0, 0.0, 0.0), r(false, 1.0, 0.0, 0.0)],
                1.0,
                only_a,
            ),
            (
                vec![r(true, 0.2, 0.1, 5.0), r(false, 0.0, 0.0, -5.0)],
                1.0,
                (false, false),
            ),
        ];
        let mut t = Tally::default();
        for (rows, bound, (has_a, has_b)) in cases {
            for obj in [(0.0, 0.0), (1.0, -1.0), (0.25, 0.5)] {
                let rows = rows.clone();
                let i = Inst {
                    rows,
                    bound,
                    has_a,
                    has_b,
                    obj,
                };
                for dir in [Minimize, Maximize] {
                    check(&i, dir, solve_microlp(&i.lp(), dir), 1e-9, &mut t);
                    assert_eq!(solve(&i.lp(), dir), solve(&i.lp(), dir));
                }
            }
        }
        assert_eq!(t.undecided, 0, "{t:?}");
    }

    /// Input the small solver does not take (here an infinite box) gets microlp's answer.
    #[test]
    fn non_finite_goes_to_microlp() {
        let rows = [Row {
            upper: true,
            ca: 0.5,
            cb: -0.5,
            d: 1.0,
        }];
        let (bound, obj) = (f64::INFINITY, (0.0, 0.0));
        let lp = PairLp {
            rows: &rows,
            bound,
            has_a: true,
            has_b: true,
            obj,
        };
        assert_eq!(solve_small(&lp, Maximize), None);
        assert_eq!(solve(&lp, Maximize), solve_microlp(&lp, Maximize));
    }
}
