//! Property tests of the pair LP solver against microlp and an exact vertex enumeration.

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
    let cons: Vec<([i128; 3], i128)> = p.cons.iter().map(|(g, h)| (g.map(big), big(*h))).collect();
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
