//! Report sections for GPU-initiated (and other direct-posting) workloads, computed from the
//! WQEs SigmaTrace observed in queue memory (`WqeObserved`) and, for verbs-posted work, from
//! `PostSend` / completed WRs:
//!
//! * **barriers** — barrier rounds detected from remote atomics (mlx5 `ATOMIC_FA`/`ATOMIC_CS`
//!   WQEs, verbs `FETCH_AND_ADD`/`CMP_AND_SWP`). Atomics are grouped by target (the peer
//!   process of the QP, remote address, rkey); round k of a target is the k-th atomic of every
//!   process on it. A round's arrival spread is max − min of the arrival times (the time the
//!   WQE was first observed in its send ring, or the post time for verbs WRs) on the aligned
//!   clock, and its slowest process is the one that arrived last. Only targets hit by at least
//!   two processes count.
//! * **skew** — payload bytes source → destination (RDMA WRITE / SEND: source → peer; RDMA READ:
//!   peer → source; atomics are counted as operations, not bytes), the destination being the
//!   peer of the QP connection. Per QP, observed WQEs are used when there are any, otherwise
//!   completed WRs (never both). Reported per process and per node (a node is one host, or one
//!   (host, device GUID) when processes of one host use different devices, as simulated nodes
//!   do) with the skews max/mean over links i≠j, and over nodes of the bytes each receives and
//!   sends (the definitions `sigmatrace-examples`' `skew` module uses for ground truth).

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use serde_json::{json, Value};
use sigmatrace_schemas::records::Record;

use crate::align::topology::{Process, Topology};
use crate::model::ModelEvent;
use crate::read::verbs;
use crate::report::section::{matrix_table, ReportCtx, Section};
use sigmatrace_mlx5::wqe::opcode as mlx5;

fn is_verbs_atomic(op: u8) -> bool {
    op == verbs::wr::ATOMIC_CMP_AND_SWP || op == verbs::wr::ATOMIC_FETCH_AND_ADD
}

/// One remote atomic: who, when, on what.
#[derive(Clone, Copy, Debug)]
struct Atomic {
    proc_: usize,
    qpn: u32,
    t: i64,
    target: Option<usize>,
    raddr: u64,
    rkey: u32,
    observed: bool,
}

/// A detected barrier round.
#[derive(Clone, Debug)]
pub struct BarrierRound {
    /// Target process (peer of the QPs), remote address and rkey of the shared word.
    pub target: Option<usize>,
    pub raddr: u64,
    pub rkey: u32,
    /// Round index on this target (k-th atomic of each process).
    pub index: usize,
    /// (process index, arrival time in output ns), in process order.
    pub arrivals: Vec<(usize, i64)>,
    pub spread_ns: i64,
    pub slowest: usize,
}

/// Barrier rounds from remote atomics.
#[derive(Default)]
pub struct Barriers {
    atomics: Vec<Atomic>,
}

impl Barriers {
    /// The rounds, ordered by first arrival.
    pub fn rounds(&self) -> Vec<BarrierRound> {
        // Per QP, observed WQEs win over posted WRs (a QP can be seen both ways).
        let observed_qps: std::collections::HashSet<(usize, u32)> = self
            .atomics
            .iter()
            .filter(|a| a.observed)
            .map(|a| (a.proc_, a.qpn))
            .collect();
        type Key = (Option<usize>, u64, u32);
        let mut groups: BTreeMap<Key, BTreeMap<usize, Vec<i64>>> = BTreeMap::new();
        for a in &self.atomics {
            if !a.observed && observed_qps.contains(&(a.proc_, a.qpn)) {
                continue;
            }
            groups
                .entry((a.target, a.raddr, a.rkey))
                .or_default()
                .entry(a.proc_)
                .or_default()
                .push(a.t);
        }
        let mut out = Vec::new();
        for ((target, raddr, rkey), per_proc) in groups {
            if per_proc.len() < 2 {
                continue;
            }
            let mut per_proc: Vec<(usize, Vec<i64>)> = per_proc.into_iter().collect();
            for (_, ts) in &mut per_proc {
                ts.sort_unstable();
            }
            let rounds = per_proc.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
            for k in 0..rounds {
                let arrivals: Vec<(usize, i64)> = per_proc
                    .iter()
                    .filter_map(|(p, ts)| ts.get(k).map(|&t| (*p, t)))
                    .collect();
                if arrivals.len() < 2 {
                    continue;
                }
                let max = arrivals.iter().map(|a| a.1).max().unwrap_or(0);
                let min = arrivals.iter().map(|a| a.1).min().unwrap_or(0);
                let slowest = arrivals.iter().find(|a| a.1 == max).map_or(0, |a| a.0);
                out.push(BarrierRound {
                    target,
                    raddr,
                    rkey,
                    index: k,
                    arrivals,
                    spread_ns: max - min,
                    slowest,
                });
            }
        }
        out.sort_by_key(|r| (r.arrivals.iter().map(|a| a.1).min().unwrap_or(0), r.index));
        out
    }
}

impl Section for Barriers {
    fn key(&self) -> &'static str {
        "barriers"
    }
    fn fresh(&self, _: &Topology) -> Box<dyn Section> {
        Box::new(Barriers::default())
    }
    fn record(&mut self, p: &Process, t: i64, rec: &Record<'_>) {
        let (qpn, raddr, rkey, observed) = match *rec {
            Record::WqeObserved(w) if mlx5::is_atomic(w.opcode) => {
                (w.qpn, w.remote_addr, w.rkey, true)
            }
            Record::PostSend(ps) if is_verbs_atomic(ps.opcode) => {
                (ps.qpn, ps.remote_addr, ps.rkey, false)
            }
            _ => return,
        };
        self.atomics.push(Atomic {
            proc_: p.index,
            qpn,
            t,
            target: p.qp(qpn).and_then(|q| q.peer).map(|(pp, _)| pp),
            raddr,
            rkey,
            observed,
        });
    }
    fn merge(&mut self, other: Box<dyn Section>) {
        if let Ok(o) = other.into_any().downcast::<Barriers>() {
            self.atomics.extend(o.atomics);
        }
    }
    fn text(&self, ctx: &ReportCtx<'_>, out: &mut String) {
        let rounds = self.rounds();
        let label = |p: usize| ctx.topo.procs[p].label();
        let _ = writeln!(
            out,
            "== Barriers (rounds of remote atomics on a shared word; arrival = atomic first seen)"
        );
        if rounds.is_empty() {
            let _ = writeln!(
                out,
                "no barrier rounds (no shared atomic target hit by two or more processes)\n"
            );
            return;
        }
        let _ = writeln!(
            out,
            "{:>6} {:<34} {:>8} {:>14} {:<12}",
            "round", "target", "arrived", "spread us", "slowest"
        );
        for (i, r) in rounds.iter().enumerate() {
            let target = format!(
                "{} {:#x} rkey {:#x}",
                r.target.map(label).unwrap_or_else(|| "?".into()),
                r.raddr,
                r.rkey
            );
            let _ = writeln!(
                out,
                "{:>6} {:<34} {:>8} {:>14.3} {:<12}",
                i + 1,
                target,
                r.arrivals.len(),
                r.spread_ns as f64 / 1e3,
                label(r.slowest)
            );
        }
        let (mean, max) = spread_summary(&rounds);
        let _ = writeln!(
            out,
            "{} rounds; spread mean {:.3} us, max {:.3} us",
            rounds.len(),
            mean / 1e3,
            max as f64 / 1e3
        );
        let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
        for r in &rounds {
            *counts.entry(r.slowest).or_default() += 1;
        }
        let list: Vec<String> = counts
            .iter()
            .map(|(p, n)| format!("{} {n}", label(*p)))
            .collect();
        let _ = writeln!(out, "slowest arrival per process: {}\n", list.join(", "));
    }
    fn json(&self, ctx: &ReportCtx<'_>) -> Value {
        let rounds = self.rounds();
        let who = |p: usize| json!({"rank": ctx.topo.procs[p].rank, "process": ctx.topo.procs[p].label()});
        let (mean, max) = spread_summary(&rounds);
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for r in &rounds {
            *counts.entry(ctx.topo.procs[r.slowest].label()).or_default() += 1;
        }
        json!({
            "rounds": rounds.iter().enumerate().map(|(i, r)| json!({
                "round": i + 1,
                "index": r.index,
                "target": {
                    "rank": r.target.and_then(|p| ctx.topo.procs[p].rank),
                    "process": r.target.map(|p| ctx.topo.procs[p].label()),
                    "raddr": r.raddr, "rkey": r.rkey,
                },
                "arrivals": r.arrivals.iter().map(|&(p, t)| {
                    let mut v = who(p);
                    v["t_ns"] = json!(t);
                    v
                }).collect::<Vec<_>>(),
                "spread_ns": r.spread_ns,
                "slowest_rank": ctx.topo.procs[r.slowest].rank,
                "slowest_process": ctx.topo.procs[r.slowest].label(),
            })).collect::<Vec<_>>(),
            "mean_spread_ns": mean,
            "max_spread_ns": max,
            "slowest_counts": counts,
        })
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn spread_summary(rounds: &[BarrierRound]) -> (f64, i64) {
    let max = rounds.iter().map(|r| r.spread_ns).max().unwrap_or(0);
    let mean = if rounds.is_empty() {
        0.0
    } else {
        rounds.iter().map(|r| r.spread_ns as f64).sum::<f64>() / rounds.len() as f64
    };
    (mean, max)
}

// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default)]
struct QpBytes {
    dst: Option<usize>,
    /// Observed WQEs: bytes source → peer, peer → source (reads), WQEs, atomics.
    obs: [u64; 4],
    /// Completed WRs: the same.
    posted: [u64; 4],
}

pub use sigmatrace_schemas::skew::Skew;

/// Skews of `m` (n × n, row = source), as `sigmatrace_schemas::skew` defines them (the
/// workloads' ground truth uses the same definition).
pub fn skew(m: &[u64], n: usize) -> Skew {
    sigmatrace_schemas::skew::skew(n, |i, j| m[i * n + j] as f64)
}

/// [`skew`] of the n × n matrix that is 0 but for the pairs of `m` (the same values).
pub fn skew_of_pairs(m: &BTreeMap<(usize, usize), u64>, n: usize) -> Skew {
    sigmatrace_schemas::skew::skew_pairs(n, m.iter().map(|(&(i, j), &v)| (i, j, v as f64)))
}

/// The node of every process and the node labels.
pub fn nodes(topo: &Topology) -> (Vec<usize>, Vec<String>) {
    let key = |p: &Process| (p.host, p.devices.first().map_or(0, |d| d.2));
    let mut per_host: HashMap<usize, std::collections::BTreeSet<u64>> = HashMap::new();
    for p in &topo.procs {
        per_host.entry(p.host).or_default().insert(key(p).1);
    }
    let mut ids: BTreeMap<(usize, u64), usize> = BTreeMap::new();
    let mut labels = Vec::new();
    let mut of = Vec::new();
    for p in &topo.procs {
        let split = per_host.get(&p.host).is_some_and(|g| g.len() > 1);
        let k = if split { key(p) } else { (p.host, 0) };
        let id = *ids.entry(k).or_insert_with(|| {
            let host = &topo.hosts[p.host].name;
            labels.push(if split {
                format!("{host} node {:x}", k.1)
            } else {
                host.clone()
            });
            labels.len() - 1
        });
        of.push(id);
    }
    (of, labels)
}

/// Inter-node (and inter-process) traffic matrix and skew.
#[derive(Default)]
pub struct TrafficSkew {
    qps: crate::fastmap::FastMap<(usize, u32), QpBytes>,
}

impl TrafficSkew {
    fn entry(&mut self, p: &Process, qpn: u32) -> &mut QpBytes {
        self.qps.entry((p.index, qpn)).or_insert_with(|| QpBytes {
            dst: p.qp(qpn).and_then(|q| q.peer).map(|(pp, _)| pp),
            ..Default::default()
        })
    }

    /// Process × process bytes (source, destination) → bytes, only the pairs with traffic;
    /// unattributed bytes, observed WQEs, posted WRs.
    pub fn matrix(&self, n: usize) -> (BTreeMap<(usize, usize), u64>, u64, u64, u64) {
        let mut m: BTreeMap<(usize, usize), u64> = BTreeMap::new();
        let (mut lost, mut wqes, mut wrs) = (0, 0, 0);
        for (&(p, _), q) in &self.qps {
            let use_obs = q.obs[2] > 0;
            let c = if use_obs { q.obs } else { q.posted };
            if use_obs {
                wqes += c[2];
            } else {
                wrs += c[2];
            }
            match q.dst {
                Some(d) if d < n => {
                    if c[0] != 0 {
                        *m.entry((p, d)).or_default() += c[0];
                    }
                    if c[1] != 0 {
                        *m.entry((d, p)).or_default() += c[1];
                    }
                }
                _ => lost += c[0] + c[1],
            }
        }
        (m, lost, wqes, wrs)
    }

    /// Node × node aggregation of a process matrix.
    pub fn by_node(m: &BTreeMap<(usize, usize), u64>, node_of: &[usize], nodes: usize) -> Vec<u64> {
        let mut out = vec![0u64; nodes * nodes];
        for (&(i, j), &v) in m {
            out[node_of[i] * nodes + node_of[j]] += v;
        }
        out
    }
}

fn classify(out: &mut [u64; 4], bytes: u64, read: bool, write: bool, atomic: bool) {
    out[2] += 1;
    if atomic {
        out[3] += 1;
    } else if read {
        out[1] += bytes;
    } else if write {
        out[0] += bytes;
    }
}

impl Section for TrafficSkew {
    fn key(&self) -> &'static str {
        "skew"
    }
    fn fresh(&self, _: &Topology) -> Box<dyn Section> {
        Box::new(TrafficSkew::default())
    }
    fn observe(&mut self, p: &Process, ev: &ModelEvent<'_>) {
        if let ModelEvent::WrsDone {
            qp, wrs, status: 0, ..
        } = *ev
        {
            let e = self.entry(p, qp.qpn);
            // Summed in a local copy (registers), then stored once.
            let mut sums = e.posted;
            for w in wrs {
                let write = matches!(
                    w.opcode,
                    verbs::wr::RDMA_WRITE
                        | verbs::wr::RDMA_WRITE_WITH_IMM
                        | verbs::wr::SEND
                        | verbs::wr::SEND_WITH_IMM
                        | verbs::wr::SEND_WITH_INV
                );
                classify(
                    &mut sums,
                    w.bytes as u64,
                    w.opcode == verbs::wr::RDMA_READ,
                    write,
                    is_verbs_atomic(w.opcode),
                );
            }
            e.posted = sums;
        }
    }
    fn record(&mut self, p: &Process, _t: i64, rec: &Record<'_>) {
        if let Record::WqeObserved(w) = *rec {
            let write = matches!(
                w.opcode,
                mlx5::RDMA_WRITE
                    | mlx5::RDMA_WRITE_IMM
                    | mlx5::SEND
                    | mlx5::SEND_IMM
                    | mlx5::SEND_INVAL
            );
            let e = self.entry(p, w.qpn);
            classify(
                &mut e.obs,
                w.bytes as u64,
                w.opcode == mlx5::RDMA_READ,
                write,
                mlx5::is_atomic(w.opcode),
            );
        }
    }
    fn merge(&mut self, other: Box<dyn Section>) {
        if let Ok(o) = other.into_any().downcast::<TrafficSkew>() {
            self.qps.extend(o.qps);
        }
    }
    fn text(&self, ctx: &ReportCtx<'_>, out: &mut String) {
        let n = ctx.topo.procs.len();
        let (m, lost, wqes, wrs) = self.matrix(n);
        let (node_of, labels) = nodes(ctx.topo);
        let nm = Self::by_node(&m, &node_of, labels.len());
        let _ = writeln!(
            out,
            "== Inter-node traffic skew (payload bytes; {wqes} observed WQEs, {wrs} completed WRs; {lost} bytes without a known peer)"
        );
        matrix_table(out, &labels, &nm);
        let s = skew(&nm, labels.len());
        let _ = writeln!(
            out,
            "node skew: links max/mean {:.4} (max {:.0} B, mean {:.0} B), bytes in {:.4}, bytes out {:.4}",
            s.link, s.link_max, s.link_mean, s.node_in, s.node_out
        );
        let r = skew_of_pairs(&m, n);
        let _ = writeln!(
            out,
            "process skew: links {:.4}, bytes in {:.4}, bytes out {:.4}\n",
            r.link, r.node_in, r.node_out
        );
    }
    fn json(&self, ctx: &ReportCtx<'_>) -> Value {
        let n = ctx.topo.procs.len();
        let (m, lost, wqes, wrs) = self.matrix(n);
        let (node_of, labels) = nodes(ctx.topo);
        let k = labels.len();
        let nm = Self::by_node(&m, &node_of, k);
        let rows = |m: &[u64], n: usize| -> Vec<Vec<u64>> {
            (0..n).map(|i| m[i * n..(i + 1) * n].to_vec()).collect()
        };
        let mut v = json!({
            "ranks": ctx.topo.procs.iter().map(|p| p.label()).collect::<Vec<_>>(),
            "nodes": labels,
            "node_of_rank": node_of,
            "rank_pairs": m.iter().map(|(&(i, j), &v)| [i as u64, j as u64, v]).collect::<Vec<_>>(),
            "node_bytes": rows(&nm, k),
            "rank_skew": skew_of_pairs(&m, n),
            "node_skew": skew(&nm, k),
            "unattributed_bytes": lost,
            "observed_wqes": wqes,
            "completed_wrs": wrs,
        });
        if n <= crate::report::traffic::DENSE_RANKS {
            let mut dense = vec![0u64; n * n];
            for (&(i, j), &b) in &m {
                dense[i * n + j] = b;
            }
            v["rank_bytes"] = rows(&dense, n).into();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_definitions() {
        let s = skew(&[0, 1, 1, 4, 0, 1, 4, 1, 0], 3);
        assert!((s.link - 2.0).abs() < 1e-12);
        assert!((s.node_in - 2.0).abs() < 1e-12);
        assert!((s.node_out - 1.25).abs() < 1e-12);
        assert_eq!(skew(&[0], 1).link, 0.0);
    }
}
