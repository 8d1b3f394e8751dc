//! Align: cross-host clock correction from message causality.
//!
//! Every process's timestamps are first mapped to its host's REALTIME ([`crate::align::clock`]).
//! Hosts' wall clocks disagree, so each host h gets a linear correction
//! `c_h(t) = o_h + ρ_h·τ(t)` (offset and drift; the reference host — that of the lowest rank —
//! keeps 0). Causality bounds it: the k-th message-consuming send on a QP (post time x on host
//! i) is received as the k-th successful receive completion of the peer QP (time y on host j),
//! so `x + c_i(x) ≤ y + c_j(y)`. Sends in both directions between two hosts bound their
//! relative correction from both sides (NTP style).
//!
//! Pass 2 (this module) joins the two sides of every connection. All logs are read in
//! lock-step epochs of host time (in parallel per process, rayon), and the per-connection FIFOs
//! hold only what the epoch and the clock skew leave unmatched. For each directed host pair only
//! the lower convex hull of the points (x, y − x) is kept: a line below the hull vertices is below
//! every point, so the hull carries every binding constraint in O(hull) memory.
//!
//! Solve: per host pair, the midline between the two bounding hulls gives an offset/drift
//! estimate and its half-gap the uncertainty; a weighted least-squares fit over all pairs makes
//! the estimates consistent; cyclic projection onto the constraint half-spaces (hull vertices,
//! 1 ns margin) then removes every remaining violation when the constraints are feasible.

pub mod clock;
pub mod topology;

use std::collections::{HashMap, VecDeque};

use rayon::prelude::*;
use sigmatrace_schemas::records::{PostSend, WorkCompletion};

use crate::align::topology::Topology;
use crate::input::LogInput;
use crate::verbs;

/// Correction of one host.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct HostAlign {
    pub host: String,
    /// Correction added at the reference time `t0` (ns).
    pub offset_ns: f64,
    /// Drift correction (parts per million).
    pub drift_ppm: f64,
    /// Half-width of the tightest causality interval on the path to the reference (ns);
    /// `None` when no two-way traffic connects the host to the reference.
    pub uncertainty_ns: Option<f64>,
}

/// A host pair with traffic.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LinkAlign {
    pub a: usize,
    pub b: usize,
    /// Message pairs a→b and b→a.
    pub pairs_ab: u64,
    pub pairs_ba: u64,
    /// Estimated clock difference b − a before correction, at t0 (ns), and its uncertainty.
    pub skew_ns: Option<f64>,
    pub uncertainty_ns: Option<f64>,
}

/// Result of the alignment.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Alignment {
    pub method: String,
    pub reference_host: usize,
    pub t0: i64,
    pub hosts: Vec<HostAlign>,
    pub links: Vec<LinkAlign>,
    /// Matched message pairs across hosts.
    pub pairs: u64,
    /// Pairs whose receive precedes the send on the uncorrected clocks.
    pub violations_before: u64,
    /// Hull constraints still violated after the solve (0 unless infeasible).
    pub violations_after: u64,
    /// With verification: every matched pair re-checked on the final clocks
    /// (pairs, pairs whose receive precedes its send).
    pub verified: Option<(u64, u64)>,
}

/// Re-joins all messages on the final clocks and counts causality violations.
pub fn verify(inputs: &[LogInput], topo: &Topology) -> (u64, u64) {
    let (mut n, mut bad) = (0u64, 0u64);
    join(inputs, topo, |p| {
        n += 1;
        if p.y < p.x {
            bad += 1;
        }
    });
    (n, bad)
}

/// One matched message: sender (process, QPN), index k, send and receive output times.
#[derive(Clone, Copy, Debug)]
pub struct Pair {
    pub sender: (usize, u32),
    pub receiver: usize,
    /// Dense index of the sending QP ([`crate::align::topology::Qp::conn`], from 1).
    pub conn: u32,
    pub k: u64,
    pub x: i64,
    pub y: i64,
}

#[derive(Default)]
struct ConnQueues {
    sends: VecDeque<i64>,
    recvs: VecDeque<i64>,
    k: u64,
}

/// Per process and QP index: the connection (sender QP's `conn`) its sends and its successful
/// receives belong to (0: none).
fn conn_keys(topo: &Topology) -> Vec<Vec<(u32, u32)>> {
    topo.procs
        .iter()
        .map(|p| {
            p.qps
                .iter()
                .map(|q| match q.peer {
                    Some((pp, pq)) => (
                        q.conn as u32,
                        topo.procs[pp].qp(pq).map_or(0, |s| s.conn as u32),
                    ),
                    None => (0, 0),
                })
                .collect()
        })
        .collect()
}

/// Joins sends with their receives over all processes, calling `f` for every matched pair.
/// Times use each process's current `map` (uncorrected host time on the first run).
pub fn join(inputs: &[LogInput], topo: &Topology, mut f: impl FnMut(&Pair)) {
    use std::mem::offset_of;
    let n = topo.procs.len();
    if n == 0 {
        return;
    }
    let total: u64 = topo.procs.iter().map(|p| p.wr_events).sum();
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for p in &topo.procs {
        lo = lo.min(p.time(p.min_ts));
        hi = hi.max(p.time(p.max_ts));
    }
    if lo > hi {
        return;
    }
    let keys = conn_keys(topo);
    // Sender (process, QPN) and receiver process of every connection.
    let mut conns: Vec<((usize, u32), usize)> = vec![((0, 0), 0)];
    for p in &topo.procs {
        for q in &p.qps {
            if q.conn != 0 {
                let c = q.conn as usize;
                if conns.len() <= c {
                    conns.resize(c + 1, ((0, 0), 0));
                }
                conns[c] = ((p.index, q.qpn), q.peer.map_or(0, |x| x.0));
            }
        }
    }
    let epochs = (total / 2_000_000).clamp(1, 10_000) as i64;
    let step = ((hi - lo) / epochs).max(1) + 1;
    let mut cursors: Vec<_> = topo
        .procs
        .iter()
        .map(|p| inputs_for(inputs, p).thread_cursors())
        .collect();
    let mut queues: Vec<ConnQueues> = (0..conns.len()).map(|_| ConnQueues::default()).collect();
    let (k_send, k_wc) = (
        sigmatrace_schemas::records::RecordKind::PostSend as u16,
        sigmatrace_schemas::records::RecordKind::WorkCompletion as u16,
    );
    let mut end = lo;
    while end <= hi + step {
        end += step;
        // Per process, its messages of this epoch: (connection, is send, time).
        let batches: Vec<Vec<(u32, bool, i64)>> = cursors
            .par_iter_mut()
            .zip(topo.procs.par_iter())
            .zip(keys.par_iter())
            .map(|((threads, p), keys)| {
                let mut out = Vec::new();
                let mut issues = Vec::new();
                let mut cache = crate::verbs::IndexCache::default();
                let ts_end = p.map.inverse_ceil(end);
                let mut runs = 0;
                for cur in threads.iter_mut() {
                    let before = out.len();
                    while cur.head_ts().is_some_and(|ts| ts < ts_end) {
                        let (ts, r) = cur.pop(&mut issues).expect("head");
                        let b = r.bytes;
                        let qpn_at =
                            |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().expect("4"));
                        let (qpn, send) = if r.kind == k_send {
                            if !verbs::consumes_recv(b[offset_of!(PostSend, opcode)]) {
                                continue;
                            }
                            (qpn_at(offset_of!(PostSend, qpn)), true)
                        } else if r.kind == k_wc {
                            let op = b[offset_of!(WorkCompletion, opcode)];
                            if b[offset_of!(WorkCompletion, status)] != 0
                                || (op != verbs::wc::RECV && op != verbs::wc::RECV_RDMA_WITH_IMM)
                            {
                                continue;
                            }
                            (qpn_at(offset_of!(WorkCompletion, qpn)), false)
                        } else {
                            continue;
                        };
                        let Some(qi) = cache.get(&p.qp_index, qpn) else {
                            continue;
                        };
                        let c = if send { keys[qi].0 } else { keys[qi].1 };
                        if c != 0 {
                            out.push((c, send, p.time(ts)));
                        }
                    }
                    runs += (out.len() > before) as usize;
                }
                if runs > 1 {
                    out.sort_by_key(|e| e.2);
                }
                out
            })
            .collect();
        for batch in batches {
            for (c, is_send, t) in batch {
                let cq = &mut queues[c as usize];
                if is_send {
                    cq.sends.push_back(t);
                } else {
                    cq.recvs.push_back(t);
                }
                while !cq.sends.is_empty() && !cq.recvs.is_empty() {
                    let x = cq.sends.pop_front().expect("non-empty");
                    let y = cq.recvs.pop_front().expect("non-empty");
                    let (sender, receiver) = conns[c as usize];
                    f(&Pair {
                        sender,
                        receiver,
                        conn: c,
                        k: cq.k,
                        x,
                        y,
                    });
                    cq.k += 1;
                }
            }
        }
    }
}

fn inputs_for<'a>(inputs: &'a [LogInput], p: &crate::align::topology::Process) -> &'a LogInput {
    inputs
        .iter()
        .find(|i| i.path == p.path)
        .expect("every process has its input")
}

/// Lower convex hull of points (x, d), sorted by x.
pub fn lower_hull(mut pts: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    pts.sort_unstable();
    pts.dedup_by_key(|p| p.0);
    let mut h: Vec<(i64, i64)> = Vec::with_capacity(pts.len().min(64));
    for p in pts {
        while h.len() >= 2 {
            let (o, a) = (h[h.len() - 2], h[h.len() - 1]);
            let d = |u: i64, v: i64| u as i128 - v as i128;
            let cross = d(a.0, o.0) * d(p.1, o.1) - d(a.1, o.1) * d(p.0, o.0);
            if cross <= 0 {
                h.pop();
            } else {
                break;
            }
        }
        h.push(p);
    }
    h
}

/// Value of a hull chain (convex piecewise-linear) at x (clamped to its ends).
fn hull_at(h: &[(i64, i64)], x: i64) -> f64 {
    if x <= h[0].0 {
        return h[0].1 as f64;
    }
    for w in h.windows(2) {
        if x <= w[1].0 {
            let f = (x - w[0].0) as f64 / (w[1].0 - w[0].0).max(1) as f64;
            return w[0].1 as f64 + f * (w[1].1 - w[0].1) as f64;
        }
    }
    h[h.len() - 1].1 as f64
}

/// Incremental lower hull of points arriving with non-decreasing x (out-of-order points are
/// kept aside and merged at the end).
#[derive(Clone, Default)]
struct IncHull {
    hosts: (usize, usize),
    hull: Vec<(i64, i64)>,
    spill: Vec<(i64, i64)>,
    pairs: u64,
}

impl IncHull {
    #[inline]
    fn push(&mut self, x: i64, d: i64) {
        self.pairs += 1;
        let h = &mut self.hull;
        if let Some(&(lx, ld)) = h.last() {
            if x < lx {
                self.spill.push((x, d));
                return;
            }
            if x == lx {
                if d >= ld {
                    return;
                }
                h.pop();
            }
        }
        while h.len() >= 2 {
            let (o, a) = (h[h.len() - 2], h[h.len() - 1]);
            let df = |u: i64, v: i64| u as i128 - v as i128;
            if df(a.0, o.0) * df(d, o.1) - df(a.1, o.1) * df(x, o.0) <= 0 {
                h.pop();
            } else {
                break;
            }
        }
        h.push((x, d));
    }
}

#[derive(Default)]
struct HullAcc {
    hull: Vec<(i64, i64)>,
    buf: Vec<(i64, i64)>,
    pairs: u64,
}

impl HullAcc {
    fn compact(&mut self) {
        let mut all = std::mem::take(&mut self.hull);
        all.append(&mut self.buf);
        self.hull = lower_hull(all);
    }
}

/// Computes the per-host corrections and applies them to `topo` (process maps).
pub fn align(inputs: &[LogInput], topo: &mut Topology, use_causality: bool) -> Alignment {
    let hn = topo.hosts.len();
    topo.set_maps(&vec![(0.0, 0.0); hn], 0);
    let reference = topo.procs.first().map(|p| p.host).unwrap_or(0);
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for p in &topo.procs {
        lo = lo.min(p.time(p.min_ts));
        hi = hi.max(p.time(p.max_ts));
    }
    let t0 = if lo <= hi { lo + (hi - lo) / 2 } else { 0 };
    let half = (((hi - lo) / 2).max(1)) as f64;
    let mut out = Alignment {
        method: if use_causality && hn > 1 {
            "per-process TSC→MONOTONIC fit + REALTIME, refined per host by message causality (offset + drift)".into()
        } else {
            "per-process TSC→MONOTONIC fit + host REALTIME".into()
        },
        reference_host: reference,
        t0,
        hosts: topo
            .hosts
            .iter()
            .enumerate()
            .map(|(i, h)| HostAlign {
                host: h.name.clone(),
                uncertainty_ns: (i == reference).then_some(0.0),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    if !use_causality || hn < 2 {
        return out;
    }
    // Per connection (sender QP), the lower hull of its points (x − t0, y − x): x grows along
    // a connection, so a monotone chain keeps it in O(1) amortized per message.
    let mut per_conn: Vec<IncHull> = Vec::new();
    let mut before = 0u64;
    {
        let topo_ref: &Topology = topo;
        let host_of: Vec<usize> = topo_ref.procs.iter().map(|p| p.host).collect();
        join(inputs, topo_ref, |pr| {
            let hi_ = host_of[pr.sender.0];
            let hj = host_of[pr.receiver];
            if hi_ == hj {
                return;
            }
            before += (pr.y < pr.x) as u64;
            let c = pr.conn as usize;
            if per_conn.len() <= c {
                per_conn.resize_with(c + 1, IncHull::default);
            }
            let h = &mut per_conn[c];
            h.hosts = (hi_, hj);
            h.push(pr.x - t0, pr.y - pr.x);
        });
    }
    let mut hulls: HashMap<(usize, usize), HullAcc> = HashMap::new();
    for h in per_conn.into_iter().filter(|h| h.pairs > 0) {
        let acc = hulls.entry(h.hosts).or_default();
        acc.pairs += h.pairs;
        acc.buf.extend(h.hull);
        acc.buf.extend(h.spill);
    }
    for h in hulls.values_mut() {
        h.compact();
    }
    out.violations_before = before;
    out.pairs = hulls.values().map(|h| h.pairs).sum();
    let tau = |x: i64| x as f64 / half;
    // Pairwise estimates of (o_i − o_j, ρ_i − ρ_j).
    let mut est: Vec<(usize, usize, f64, f64, f64)> = Vec::new();
    let mut keys: Vec<(usize, usize)> = hulls.keys().copied().filter(|(a, b)| a < b).collect();
    for &(a, b) in hulls.keys() {
        if a > b && !hulls.contains_key(&(b, a)) {
            keys.push((b, a));
        }
    }
    keys.sort();
    keys.dedup();
    for (a, b) in keys {
        let ab = hulls.get(&(a, b));
        let ba = hulls.get(&(b, a));
        let mut link = LinkAlign {
            a,
            b,
            pairs_ab: ab.map_or(0, |h| h.pairs),
            pairs_ba: ba.map_or(0, |h| h.pairs),
            ..Default::default()
        };
        if let (Some(ab), Some(ba)) = (ab, ba) {
            // c_a − c_b ≤ hull_ab(x) and c_a − c_b ≥ −hull_ba(x).
            let (h1, h2) = (&ab.hull, &ba.hull);
            let x_lo = h1[0].0.max(h2[0].0);
            let x_hi = h1[h1.len() - 1].0.min(h2[h2.len() - 1].0);
            let mut xs: Vec<i64> = h1
                .iter()
                .chain(h2.iter())
                .map(|p| p.0)
                .filter(|&x| x >= x_lo && x <= x_hi)
                .collect();
            if xs.is_empty() {
                xs.push((x_lo + x_hi) / 2);
            }
            let mut pts = Vec::new();
            let mut gap = f64::MAX;
            for &x in &xs {
                let ub = hull_at(h1, x);
                let lb = -hull_at(h2, x);
                gap = gap.min((ub - lb) / 2.0);
                pts.push((tau(x), (ub + lb) / 2.0));
            }
            let (a0, mut b0) = line_fit(&pts);
            // Drift is only identifiable when the traffic spans long enough for the band
            // between the hulls to pin a slope: a tilt of gap/span fits as well. Beyond
            // 50 ppm of slack, estimate offset only.
            let span = (x_hi - x_lo).max(1) as f64;
            if gap.abs() / span > 50e-6 {
                b0 = 0.0;
            }
            est.push((a, b, a0, b0, 1.0 / (gap.abs() + 1.0)));
            link.skew_ns = Some(-a0);
            link.uncertainty_ns = Some(gap.max(0.0));
        }
        out.links.push(link);
    }
    // Weighted least squares over all pairs, reference fixed, weak prior towards 0.
    let mut o = solve_laplacian(hn, reference, est.iter().map(|e| (e.0, e.1, e.2, e.4)));
    let mut r = solve_laplacian(hn, reference, est.iter().map(|e| (e.0, e.1, e.3, e.4)));
    // Constraints: for i→j vertex (x, d): o_i − o_j + ρ_i τ_x − ρ_j τ_y ≤ d − 1.
    let mut cons: Vec<Constraint> = Vec::new();
    for (&(i, j), h) in &hulls {
        for &(x, d) in &h.hull {
            cons.push((i, j, tau(x), tau(x + d), d as f64 - 1.0));
        }
    }
    // Project onto the constraints: first moving offsets only (drift stays as estimated),
    // then, if that cannot satisfy them, offsets and drifts together.
    for phase in 0..2 {
        project(&mut o, &mut r, &cons, reference, phase == 1);
        if cons.iter().all(|c| viol(&o, &r, c) <= 1e-6) {
            break;
        }
    }
    out.violations_after = cons.iter().filter(|c| viol(&o, &r, c) > 1e-6).count() as u64;
    // Uncertainty: cheapest path of link half-gaps to the reference.
    let mut unc = vec![f64::INFINITY; hn];
    unc[reference] = 0.0;
    for _ in 0..hn {
        for l in &out.links {
            if let Some(u) = l.uncertainty_ns {
                unc[l.b] = unc[l.b].min(unc[l.a] + u);
                unc[l.a] = unc[l.a].min(unc[l.b] + u);
            }
        }
    }
    let mut corr = Vec::with_capacity(hn);
    for h in 0..hn {
        let rate = r[h] / half;
        out.hosts[h].offset_ns = o[h];
        out.hosts[h].drift_ppm = rate * 1e6;
        out.hosts[h].uncertainty_ns = unc[h].is_finite().then_some(unc[h]);
        corr.push((o[h], rate));
    }
    topo.set_maps(&corr, t0);
    out
}

/// A causality constraint: `o_i − o_j + ρ_i τ_x − ρ_j τ_y ≤ bound`.
type Constraint = (usize, usize, f64, f64, f64);

fn viol(o: &[f64], r: &[f64], c: &Constraint) -> f64 {
    o[c.0] - o[c.1] + r[c.0] * c.2 - r[c.1] * c.3 - c.4
}

/// Cyclic projection (Kaczmarz) onto the constraint half-spaces; the reference host is fixed.
fn project(o: &mut [f64], r: &mut [f64], cons: &[Constraint], reference: usize, with_drift: bool) {
    for _sweep in 0..20_000 {
        let mut any = false;
        for c in cons {
            let v = viol(o, r, c);
            if v > 0.0 {
                any = true;
                let d = if with_drift { 1.0 } else { 0.0 };
                let mut g = [
                    (c.0, 0usize, 1.0),
                    (c.0, 1, c.2 * d),
                    (c.1, 0, -1.0),
                    (c.1, 1, -c.3 * d),
                ];
                for e in g.iter_mut() {
                    if e.0 == reference {
                        e.2 = 0.0;
                    }
                }
                let n2: f64 = g.iter().map(|e| e.2 * e.2).sum();
                if n2 == 0.0 {
                    continue;
                }
                let s = (v + 1e-3) / n2;
                for e in g {
                    if e.1 == 0 {
                        o[e.0] -= s * e.2;
                    } else {
                        r[e.0] -= s * e.2;
                    }
                }
            }
        }
        if !any {
            break;
        }
    }
}

fn line_fit(pts: &[(f64, f64)]) -> (f64, f64) {
    let n = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx < 1e-12 {
        (my, 0.0)
    } else {
        let b = sxy / sxx;
        (my - b * mx, b)
    }
}

/// Solves min Σ w (v_i − v_j − m)² + ε Σ v² with v_ref = 0 (dense normal equations).
fn solve_laplacian(
    n: usize,
    reference: usize,
    eqs: impl Iterator<Item = (usize, usize, f64, f64)>,
) -> Vec<f64> {
    let mut a = vec![vec![0.0f64; n]; n];
    let mut b = vec![0.0f64; n];
    for (i, j, m, w) in eqs {
        a[i][i] += w;
        a[j][j] += w;
        a[i][j] -= w;
        a[j][i] -= w;
        b[i] += w * m;
        b[j] -= w * m;
    }
    let eps = 1e-9;
    for (i, row) in a.iter_mut().enumerate() {
        row[i] += eps;
    }
    for (k, row) in a.iter_mut().enumerate() {
        if k == reference {
            row.iter_mut().for_each(|v| *v = 0.0);
            row[k] = 1.0;
        }
    }
    b[reference] = 0.0;
    // Gaussian elimination with partial pivoting.
    for c in 0..n {
        let p = (c..n)
            .max_by(|&x, &y| a[x][c].abs().total_cmp(&a[y][c].abs()))
            .unwrap_or(c);
        a.swap(c, p);
        b.swap(c, p);
        let d = a[c][c];
        if d.abs() < 1e-300 {
            continue;
        }
        for r in c + 1..n {
            let f = a[r][c] / d;
            if f != 0.0 {
                let (top, bottom) = a.split_at_mut(r);
                for (x, y) in bottom[0][c..n].iter_mut().zip(&top[c][c..n]) {
                    *x -= f * y;
                }
                b[r] -= f * b[c];
            }
        }
    }
    let mut x = vec![0.0; n];
    for c in (0..n).rev() {
        let s: f64 = (c + 1..n).map(|k| a[c][k] * x[k]).sum();
        x[c] = if a[c][c].abs() < 1e-300 {
            0.0
        } else {
            (b[c] - s) / a[c][c]
        };
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hull_keeps_the_lower_envelope() {
        let pts = vec![(0, 10), (1, 3), (2, 8), (3, 2), (4, 9), (5, 4)];
        assert_eq!(lower_hull(pts), vec![(0, 10), (1, 3), (3, 2), (5, 4)]);
    }

    #[test]
    fn laplacian_recovers_offsets() {
        // Host 1 is +5 relative to 0, host 2 is −3 relative to 1.
        let x = solve_laplacian(3, 0, [(1, 0, 5.0, 1.0), (2, 1, -3.0, 1.0)].into_iter());
        assert!(
            (x[1] - 5.0).abs() < 1e-6 && (x[2] - 2.0).abs() < 1e-6,
            "{x:?}"
        );
    }
}
