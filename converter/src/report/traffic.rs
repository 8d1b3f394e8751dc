//! Traffic sections: rank × rank and node × node matrices, the per-QP table (counts, bytes,
//! latency quantiles, errors) and the SVG heatmap.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{json, Value};

use crate::align::topology::{Process, Topology};
use crate::model::{DoneWr, ModelEvent};
use crate::read::verbs;

use crate::report::section::{matrix_table, ReportCtx, Section};

/// Rank × rank and node × node traffic (bytes and operations): successful WRs posted through
/// verbs, and WQEs the observer saw in queue memory (directly posted, GPU-initiated style).
/// A QP whose WQEs were observed counts those only (its verbs posts, if any, are the same
/// work seen twice), as in the skew section.
///
/// A process's instance keeps one row of sums per QP and peer (no per-WR state, nothing of
/// the other processes); the merged instance holds the pairs of processes with traffic
/// ([`Traffic::bytes`], [`Traffic::ops`]): as many as connections at most, where a dense
/// rank × rank matrix would be 268 MB at 4 096 ranks.
#[derive(Default)]
pub struct Traffic {
    n: usize,
    /// (src, dst) → bytes moved src → dst (READ counts towards the initiator) and operations
    /// src → dst (src the initiator); filled by [`Section::merge`] (empty in a process's own
    /// instance). Only pairs with traffic.
    cells: BTreeMap<(usize, usize), Cell>,
    /// This process's QPs (by QPN): what their completed WRs and observed WQEs added.
    qps: Vec<QpSums>,
    index: crate::fastmap::FastMap<u32, usize>,
    /// The QP last looked up: (qpn, index + 1).
    last: (u32, usize),
    proc_: usize,
}

/// One (source, destination) pair's bytes and operations.
#[derive(Clone, Copy, Default)]
struct Cell {
    bytes: u64,
    ops: u64,
}

/// Rank × rank matrices are printed in full (text, JSON rows) up to this many ranks; above,
/// the text lists the pairs with the most bytes and the JSON has the pairs only.
pub const DENSE_RANKS: usize = 64;

/// Pairs listed in the text report above [`DENSE_RANKS`] ranks.
const TOP_PAIRS: usize = 32;

/// What one QP number's operations added, per peer process: verbs WRs and observed WQEs
/// apart; the observed WQEs replace the WRs once there is one.
#[derive(Default)]
struct QpSums {
    verbs: Vec<PeerSums>,
    observed: Vec<PeerSums>,
    /// Whether a WQE of this QP was observed.
    seen: bool,
}

/// Bytes initiator → peer and peer → initiator, operations initiator → peer.
#[derive(Clone, Copy)]
struct PeerSums {
    peer: usize,
    fwd: u64,
    back: u64,
    ops: u64,
}

impl PeerSums {
    /// The sums of `peer` in `list` (added when it has none).
    fn of(list: &mut Vec<PeerSums>, peer: usize) -> &mut PeerSums {
        let i = match list.iter().position(|s| s.peer == peer) {
            Some(i) => i,
            None => {
                list.push(PeerSums {
                    peer,
                    fwd: 0,
                    back: 0,
                    ops: 0,
                });
                list.len() - 1
            }
        };
        &mut list[i]
    }

    fn add(list: &mut Vec<PeerSums>, peer: usize, kind: OpKind, bytes: u64) {
        let s = Self::of(list, peer);
        s.ops += 1;
        match kind {
            OpKind::Read => s.back += bytes,
            OpKind::Atomic => {
                s.fwd += 8;
                s.back += 8;
            }
            OpKind::Other => s.fwd += bytes,
        }
    }

    /// [`PeerSums::add`] of every WR of `wrs` (at least one), the peer looked up once and the
    /// sums kept in registers (one completion retires up to a whole send queue's WRs).
    fn add_wrs(list: &mut Vec<PeerSums>, peer: usize, wrs: &[DoneWr]) {
        let (mut fwd, mut back, mut atomics) = (0u64, 0u64, 0u64);
        for w in wrs {
            let bytes = w.bytes as u64;
            match verbs_kind(w.opcode) {
                OpKind::Read => back += bytes,
                OpKind::Atomic => atomics += 1,
                OpKind::Other => fwd += bytes,
            }
        }
        let s = Self::of(list, peer);
        s.ops += wrs.len() as u64;
        s.fwd += fwd + 8 * atomics;
        s.back += back + 8 * atomics;
    }
}

impl Traffic {
    /// The sums of QP `qpn` of this instance's process `p`.
    #[inline]
    fn qp(&mut self, p: usize, qpn: u32) -> &mut QpSums {
        if self.last.1 == 0 || self.last.0 != qpn {
            let qps = &mut self.qps;
            let i = *self.index.entry(qpn).or_insert_with(|| {
                qps.push(QpSums::default());
                qps.len() - 1
            });
            self.last = (qpn, i + 1);
        }
        self.proc_ = p;
        &mut self.qps[self.last.1 - 1]
    }

    /// Adds this instance's per-QP sums to `cells`.
    fn fold_into(&self, cells: &mut BTreeMap<(usize, usize), Cell>) {
        let src = self.proc_;
        for q in &self.qps {
            for s in if q.seen { &q.observed } else { &q.verbs } {
                let c = cells.entry((src, s.peer)).or_default();
                c.bytes += s.fwd;
                c.ops += s.ops;
                if s.back != 0 {
                    cells.entry((s.peer, src)).or_default().bytes += s.back;
                }
            }
        }
    }

    /// The pairs with traffic: the merged ones and this instance's own QPs'.
    fn pairs(&self) -> std::borrow::Cow<'_, BTreeMap<(usize, usize), Cell>> {
        if self.qps.is_empty() {
            return std::borrow::Cow::Borrowed(&self.cells);
        }
        let mut cells = self.cells.clone();
        self.fold_into(&mut cells);
        std::borrow::Cow::Owned(cells)
    }

    /// Bytes moved `src` → `dst` (process indices; READs count towards their initiator).
    pub fn bytes(&self, src: usize, dst: usize) -> u64 {
        self.pairs().get(&(src, dst)).map_or(0, |c| c.bytes)
    }

    /// Operations `src` initiated towards `dst`.
    pub fn ops(&self, src: usize, dst: usize) -> u64 {
        self.pairs().get(&(src, dst)).map_or(0, |c| c.ops)
    }

    /// The rank × rank bytes matrix, row-major (`n`² cells: for small jobs and the heatmap).
    pub fn bytes_matrix(&self) -> Vec<u64> {
        self.dense(|c| c.bytes)
    }

    fn dense(&self, f: impl Fn(&Cell) -> u64) -> Vec<u64> {
        let mut m = vec![0; self.n * self.n];
        for (&(i, j), c) in self.pairs().iter() {
            m[i * self.n + j] = f(c);
        }
        m
    }

    /// Node × node aggregation of one value of the pairs.
    fn by_node(&self, topo: &Topology, f: impl Fn(&Cell) -> u64) -> Vec<u64> {
        let h = topo.hosts.len();
        let mut out = vec![0; h * h];
        for (&(i, j), c) in self.pairs().iter() {
            out[topo.procs[i].host * h + topo.procs[j].host] += f(c);
        }
        out
    }

    /// Above [`DENSE_RANKS`] ranks: the pairs with the most bytes, largest first (ties in
    /// rank order), as a text table.
    fn top_pairs_text(&self, out: &mut String, labels: &[String]) {
        let pairs = self.pairs();
        let mut top: Vec<(&(usize, usize), &Cell)> = pairs.iter().collect();
        top.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(b.0)));
        let _ = writeln!(
            out,
            "== Traffic rank × rank: {} ranks, {} pairs with traffic; the {} with the most bytes (all pairs: --json)",
            self.n,
            top.len(),
            TOP_PAIRS.min(top.len())
        );
        let w = labels.iter().map(|l| l.len()).max().unwrap_or(4).max(12);
        let _ = writeln!(
            out,
            "{:<w$} {:<w$} {:>14} {:>12}",
            "source", "destination", "bytes", "operations"
        );
        for (&(i, j), c) in top.into_iter().take(TOP_PAIRS) {
            let _ = writeln!(
                out,
                "{:<w$} {:<w$} {:>14} {:>12}",
                labels[i], labels[j], c.bytes, c.ops
            );
        }
        out.push('\n');
    }
}

/// How a verbs opcode moves bytes.
fn verbs_kind(opcode: u8) -> OpKind {
    match opcode {
        verbs::wr::RDMA_READ => OpKind::Read,
        verbs::wr::ATOMIC_CMP_AND_SWP | verbs::wr::ATOMIC_FETCH_AND_ADD => OpKind::Atomic,
        _ => OpKind::Other,
    }
}

impl Section for Traffic {
    fn key(&self) -> &'static str {
        "traffic"
    }
    fn fresh(&self, topo: &Topology) -> Box<dyn Section> {
        Box::new(Traffic {
            n: topo.procs.len(),
            ..Default::default()
        })
    }
    fn observe(&mut self, p: &Process, ev: &ModelEvent<'_>) {
        if let ModelEvent::WrsDone {
            qp, wrs, status: 0, ..
        } = *ev
        {
            if let Some((pp, _)) = qp.peer {
                let q = self.qp(p.index, qp.qpn);
                if !q.seen && !wrs.is_empty() {
                    PeerSums::add_wrs(&mut q.verbs, pp, wrs);
                }
            }
        }
    }
    fn record(&mut self, p: &Process, _t: i64, rec: &sigmatrace_schemas::records::Record<'_>) {
        use sigmatrace_mlx5::wqe::opcode as mlx5;
        let sigmatrace_schemas::records::Record::WqeObserved(w) = *rec else {
            return;
        };
        let Some((pp, _)) = p.qp(w.qpn).and_then(|q| q.peer) else {
            return;
        };
        let kind = if w.opcode == mlx5::RDMA_READ {
            OpKind::Read
        } else if mlx5::is_atomic(w.opcode) {
            OpKind::Atomic
        } else {
            OpKind::Other
        };
        // From the first observed WQE of a QP on, its verbs posts no longer count.
        let q = self.qp(p.index, w.qpn);
        q.seen = true;
        q.verbs = Vec::new();
        PeerSums::add(&mut q.observed, pp, kind, w.bytes as u64);
    }
    fn merge(&mut self, other: Box<dyn Section>) {
        if let Ok(o) = other.into_any().downcast::<Traffic>() {
            if self.n == 0 {
                self.n = o.n;
            }
            for (k, c) in &o.cells {
                let mine = self.cells.entry(*k).or_default();
                mine.bytes += c.bytes;
                mine.ops += c.ops;
            }
            o.fold_into(&mut self.cells);
        }
    }
    fn text(&self, ctx: &ReportCtx<'_>, out: &mut String) {
        let labels: Vec<String> = ctx.topo.procs.iter().map(|p| p.label()).collect();
        if self.n <= DENSE_RANKS {
            matrix_text(
                out,
                "Traffic rank × rank (bytes, row = source)",
                &labels,
                &self.dense(|c| c.bytes),
            );
            matrix_text(
                out,
                "Operations rank × rank (row = initiator)",
                &labels,
                &self.dense(|c| c.ops),
            );
        } else {
            self.top_pairs_text(out, &labels);
        }
        let hl: Vec<String> = ctx.topo.hosts.iter().map(|h| h.name.clone()).collect();
        matrix_text(
            out,
            "Traffic node × node (bytes)",
            &hl,
            &self.by_node(ctx.topo, |c| c.bytes),
        );
        matrix_text(
            out,
            "Operations node × node",
            &hl,
            &self.by_node(ctx.topo, |c| c.ops),
        );
    }
    /// `rank_pairs`: every pair with traffic, `[source, destination, bytes, operations]` in
    /// rank order; `rank_bytes` / `rank_ops`: the full matrices' rows, up to [`DENSE_RANKS`]
    /// ranks.
    fn json(&self, ctx: &ReportCtx<'_>) -> Value {
        let rows = |m: &[u64], n: usize| -> Vec<Vec<u64>> {
            (0..n).map(|i| m[i * n..(i + 1) * n].to_vec()).collect()
        };
        let h = ctx.topo.hosts.len();
        let pairs: Vec<[u64; 4]> = self
            .pairs()
            .iter()
            .map(|(&(i, j), c)| [i as u64, j as u64, c.bytes, c.ops])
            .collect();
        let mut v = json!({
            "ranks": ctx.topo.procs.iter().map(|p| p.label()).collect::<Vec<_>>(),
            "nodes": ctx.topo.hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>(),
            "rank_pairs": pairs,
            "node_bytes": rows(&self.by_node(ctx.topo, |c| c.bytes), h),
            "node_ops": rows(&self.by_node(ctx.topo, |c| c.ops), h),
        });
        if self.n <= DENSE_RANKS {
            v["rank_bytes"] = rows(&self.dense(|c| c.bytes), self.n).into();
            v["rank_ops"] = rows(&self.dense(|c| c.ops), self.n).into();
        }
        v
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn matrix_text(out: &mut String, title: &str, labels: &[String], m: &[u64]) {
    let _ = writeln!(out, "== {title}");
    matrix_table(out, labels, m);
    out.push('\n');
}

/// How an operation moves bytes: a READ towards its initiator, an atomic 8 B each way,
/// everything else towards the peer.
#[derive(Clone, Copy)]
enum OpKind {
    Read,
    Atomic,
    Other,
}

// ---------------------------------------------------------------------------------------------

/// Buckets a latency can fall in (`bucket(u64::MAX)` < this).
#[cfg(test)]
const BUCKETS: usize = 1024;

fn bucket(v: u64) -> usize {
    if v < 32 {
        v as usize
    } else {
        let e = 63 - v.leading_zeros() as u64;
        ((e - 4) * 16 + ((v >> (e - 4)) & 15) + 16) as usize
    }
}

fn bucket_value(b: usize) -> u64 {
    if b < 32 {
        b as u64
    } else {
        let e = (b as u64 - 16) / 16 + 4;
        let m = (b as u64 - 16) % 16;
        let lo = (16 + m) << (e - 4);
        lo + (1u64 << (e - 4)) / 2
    }
}

/// Per-QP operation counts, bytes, latency (post → completion) quantiles and errors. The
/// latency is that of the WRs a completion reports; the unsignaled WRs it retires with them
/// (`implied`) have no completion time of their own and are not in it.
#[derive(Clone, Default)]
pub struct QpRow {
    pub proc_: usize,
    pub qpn: u32,
    pub ops: u64,
    /// WRs retired by a later WR's completion (unsignaled, in send-queue order).
    pub implied: u64,
    pub bytes: u64,
    pub errors: u64,
    pub recvs: u64,
    pub max_ns: u64,
    /// Completions per latency bucket while the process is modelled; summed up when the row
    /// is merged into the report ([`QpRow::seal`]: a histogram is up to 2.5 KB per QP).
    hist: Vec<u64>,
    sealed: Option<Latency>,
}

/// A sealed row's latency summary.
#[derive(Clone, Copy, Default)]
struct Latency {
    timed: u64,
    p50: u64,
    p99: u64,
}

impl QpRow {
    /// WRs whose latency was measured: those completions reported.
    pub fn timed(&self) -> u64 {
        match self.sealed {
            Some(l) => l.timed,
            None => self.hist.iter().sum(),
        }
    }

    /// Median latency (bucket precision ≈ 6 %).
    pub fn p50(&self) -> u64 {
        self.sealed.map_or_else(|| self.quantile(0.5), |l| l.p50)
    }

    /// 99th percentile latency (bucket precision ≈ 6 %).
    pub fn p99(&self) -> u64 {
        self.sealed.map_or_else(|| self.quantile(0.99), |l| l.p99)
    }

    /// Keeps the summary, drops the histogram.
    fn seal(&mut self) {
        if self.sealed.is_none() {
            self.sealed = Some(Latency {
                timed: self.timed(),
                p50: self.quantile(0.5),
                p99: self.quantile(0.99),
            });
            self.hist = Vec::new();
        }
    }

    /// Latency quantile of the histogram.
    fn quantile(&self, q: f64) -> u64 {
        let total: u64 = self.hist.iter().sum();
        if total == 0 {
            return 0;
        }
        let want = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut acc = 0;
        for (b, &c) in self.hist.iter().enumerate() {
            acc += c;
            if acc >= want {
                return bucket_value(b).min(self.max_ns);
            }
        }
        self.max_ns
    }
}

/// Per-QP table.
#[derive(Default)]
pub struct QpTable {
    pub rows: Vec<QpRow>,
    index: crate::fastmap::FastMap<(usize, u32), usize>,
    /// Last rows used: (process, qpn, row + 1).
    cache: [(usize, u32, usize); 8],
}

impl QpTable {
    #[inline]
    fn row(&mut self, p: usize, qpn: u32) -> &mut QpRow {
        let slot = qpn as usize & 7;
        let c = self.cache[slot];
        if c.2 != 0 && c.0 == p && c.1 == qpn {
            return &mut self.rows[c.2 - 1];
        }
        let i = self.row_slow(p, qpn);
        self.cache[slot] = (p, qpn, i + 1);
        &mut self.rows[i]
    }

    fn row_slow(&mut self, p: usize, qpn: u32) -> usize {
        let rows = &mut self.rows;
        let i = *self.index.entry((p, qpn)).or_insert_with(|| {
            rows.push(QpRow {
                proc_: p,
                qpn,
                ..Default::default()
            });
            rows.len() - 1
        });
        i
    }
}

impl Section for QpTable {
    fn key(&self) -> &'static str {
        "qps"
    }
    fn fresh(&self, _: &Topology) -> Box<dyn Section> {
        Box::new(QpTable::default())
    }
    fn observe(&mut self, p: &Process, ev: &ModelEvent<'_>) {
        match *ev {
            ModelEvent::WrsDone {
                qp,
                wrs,
                done,
                status,
            } => {
                let r = self.row(p.index, qp.qpn);
                r.ops += wrs.len() as u64;
                if status != 0 {
                    r.errors += wrs.len() as u64;
                } else {
                    r.bytes += wrs.iter().map(|w| w.bytes as u64).sum::<u64>();
                }
                // The last WR is the one the completion reports; the ones before it were
                // retired with it.
                let Some(last) = wrs.last() else { return };
                r.implied += wrs.len() as u64 - 1;
                let lat = done.saturating_sub(last.post).max(0) as u64;
                r.max_ns = r.max_ns.max(lat);
                let b = bucket(lat);
                if b >= r.hist.len() {
                    r.hist.resize(b + 1, 0);
                }
                r.hist[b] += 1;
            }
            ModelEvent::RecvDone { qp, status, .. } => {
                let r = self.row(p.index, qp.qpn);
                r.recvs += 1;
                if status != 0 {
                    r.errors += 1;
                }
            }
        }
    }
    fn finish(&mut self) {
        self.rows.iter_mut().for_each(QpRow::seal);
    }
    fn merge(&mut self, other: Box<dyn Section>) {
        if let Ok(o) = other.into_any().downcast::<QpTable>() {
            let mut rows = o.rows;
            rows.iter_mut().for_each(QpRow::seal);
            rows.sort_by_key(|r| (r.proc_, r.qpn));
            let key = |r: &QpRow| (r.proc_, r.qpn);
            // Processes merge in order: their rows go after the ones merged before.
            let after = match (self.rows.last(), rows.first()) {
                (Some(a), Some(b)) => key(a) < key(b),
                _ => true,
            };
            if after {
                for r in rows {
                    self.index.insert(key(&r), self.rows.len());
                    self.rows.push(r);
                }
            } else {
                self.rows.extend(rows);
                self.rows.sort_by_key(key);
                self.index = self
                    .rows
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (key(r), i))
                    .collect();
            }
            self.cache = Default::default();
        }
    }
    fn text(&self, ctx: &ReportCtx<'_>, out: &mut String) {
        let _ = writeln!(
            out,
            "== Queue pairs (send-queue WR latency post → its completion; implied: unsignaled WRs retired by a later completion, not timed)"
        );
        let _ = writeln!(
            out,
            "{:<12} {:>10} {:<24} {:>10} {:>10} {:>14} {:>9} {:>10} {:>10} {:>10} {:>7}",
            "rank",
            "QP",
            "peer",
            "ops",
            "implied",
            "bytes",
            "recvs",
            "p50 ns",
            "p99 ns",
            "max ns",
            "errors"
        );
        for r in &self.rows {
            let p = &ctx.topo.procs[r.proc_];
            let peer = p
                .qp(r.qpn)
                .and_then(|q| q.peer)
                .map(|(pp, pq)| format!("{} QP {pq:#x}", ctx.topo.procs[pp].label()))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "{:<12} {:>10} {:<24} {:>10} {:>10} {:>14} {:>9} {:>10} {:>10} {:>10} {:>7}",
                p.label(),
                format!("{:#x}", r.qpn),
                peer,
                r.ops,
                r.implied,
                r.bytes,
                r.recvs,
                r.p50(),
                r.p99(),
                r.max_ns,
                r.errors
            );
        }
        out.push('\n');
    }
    fn json(&self, ctx: &ReportCtx<'_>) -> Value {
        Value::Array(
            self.rows
                .iter()
                .map(|r| {
                    let p = &ctx.topo.procs[r.proc_];
                    json!({
                        "rank": p.rank, "process": p.label(), "qpn": r.qpn,
                        "peer": p.qp(r.qpn).and_then(|q| q.peer).map(|(pp, pq)| json!({"process": ctx.topo.procs[pp].label(), "rank": ctx.topo.procs[pp].rank, "qpn": pq})),
                        "ops": r.ops, "implied": r.implied, "timed": r.timed(), "bytes": r.bytes, "recvs": r.recvs, "errors": r.errors,
                        "latency_ns": {"p50": r.p50(), "p99": r.p99(), "max": r.max_ns},
                    })
                })
                .collect(),
        )
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// SVG heatmap of a square matrix (log colour scale).
pub fn heatmap_svg(title: &str, labels: &[String], m: &[u64]) -> String {
    let n = labels.len().max(1);
    let cell = (640 / n).clamp(4, 48);
    let margin = 120;
    let size = margin + cell * n + 20;
    let max = m.iter().copied().max().unwrap_or(0).max(1) as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{size}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"10\">",
        size + 20
    );
    let _ = writeln!(
        s,
        "<text x=\"10\" y=\"16\" font-size=\"14\">{}</text>",
        xml(title)
    );
    for i in 0..labels.len() {
        for j in 0..labels.len() {
            let v = m[i * labels.len() + j];
            let f = if v == 0 {
                0.0
            } else {
                ((v as f64).ln_1p() / max.ln_1p()).clamp(0.0, 1.0)
            };
            let (r, g, b) = (255.0 - 200.0 * f, 255.0 - 150.0 * f, 255.0 - 30.0 * f);
            let _ = writeln!(
                s,
                "<rect x=\"{}\" y=\"{}\" width=\"{cell}\" height=\"{cell}\" fill=\"rgb({:.0},{:.0},{:.0})\" stroke=\"#ddd\"><title>{} → {}: {v}</title></rect>",
                margin + j * cell,
                margin + i * cell,
                r,
                g,
                b,
                xml(&labels[i]),
                xml(&labels[j])
            );
        }
        if cell >= 8 {
            let _ = writeln!(
                s,
                "<text x=\"4\" y=\"{}\">{}</text>",
                margin + i * cell + cell / 2 + 3,
                xml(&labels[i])
            );
            let _ = writeln!(
                s,
                "<text transform=\"translate({},{}) rotate(-60)\">{}</text>",
                margin + i * cell + cell / 2,
                margin - 4,
                xml(&labels[i])
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_close() {
        let mut last = 0;
        for v in [0u64, 1, 31, 32, 33, 100, 1000, 12345, 1 << 40] {
            let b = bucket(v);
            assert!(b >= last && b < BUCKETS);
            last = b;
            let r = bucket_value(b) as f64;
            assert!((r - v as f64).abs() <= v as f64 * 0.07 + 1.0, "{v} → {r}");
        }
    }
}
