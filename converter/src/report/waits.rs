//! **waits** — where each process waited: per CQ it polled, the time it spent polling that CQ
//! while it had nothing (the tracer's `EmptyPolls` runs: first to last empty poll of a run),
//! and whom it was waiting for. Per CQ, since a process may poll several in turn (Open MPI's
//! openib polls two per device): their runs overlap, and a sum over CQs would count the same
//! time twice. A run is charged to the completion that ended it — the next one on its CQ (the
//! tracer writes a run when its CQ returns work) — and so to that QP's traced peer process; a
//! run on a CQ whose QPs are not known (no `qp_cq=` attribute), or after which the CQ
//! returned nothing more, is charged to no peer. Times are output ns (aligned clocks).

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use serde_json::{json, Value};
use sigmatrace_schemas::records::Record;

use crate::align::topology::{Process, Topology};
use crate::model::ModelEvent;
use crate::report::section::{ReportCtx, Section};

/// One process's waits on one CQ.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CqWaits {
    pub runs: u64,
    pub polls: u64,
    pub ns: u64,
    /// Wait time by the peer process whose completion ended it (`None`: no traced peer, or no
    /// completion followed).
    pub by_peer: BTreeMap<Option<usize>, u64>,
}

/// The waits of every process on each of its CQs, by (process index, CQ handle) (merged), and
/// one process's runs not yet charged, by CQ.
#[derive(Default)]
pub struct Waits {
    pub cqs: BTreeMap<(usize, u64), CqWaits>,
    pending: HashMap<u64, u64>,
    current: Option<usize>,
}

impl Waits {
    fn charge(&mut self, cq: u64, peer: Option<usize>) {
        if cq == 0 || self.pending.is_empty() {
            return;
        }
        if let (Some(ns), Some(p)) = (self.pending.remove(&cq), self.current) {
            let w = self.cqs.entry((p, cq)).or_default();
            let charged = w.by_peer.entry(peer).or_default();
            *charged = charged.saturating_add(ns);
        }
    }
}

impl Section for Waits {
    fn key(&self) -> &'static str {
        "waits"
    }
    fn fresh(&self, _: &Topology) -> Box<dyn Section> {
        Box::new(Waits::default())
    }
    fn record(&mut self, p: &Process, _t: i64, rec: &Record<'_>) {
        let Record::EmptyPolls(e) = *rec else { return };
        let (start, end) = (p.time(e.first_ts), p.time(e.ts));
        // Saturating: a damaged log's times may map anywhere in i64 (the model passes only
        // runs whose end is not before their start).
        let ns = end.saturating_sub(start).max(0) as u64;
        self.current = Some(p.index);
        let w = self.cqs.entry((p.index, e.cq)).or_default();
        w.runs += 1;
        w.polls = w.polls.saturating_add(e.count);
        w.ns = w.ns.saturating_add(ns);
        let pending = self.pending.entry(e.cq).or_default();
        *pending = pending.saturating_add(ns);
    }
    fn observe(&mut self, _p: &Process, ev: &ModelEvent<'_>) {
        match *ev {
            ModelEvent::RecvDone { qp, .. } => self.charge(qp.recv_cq, qp.peer.map(|x| x.0)),
            ModelEvent::WrsDone { qp, .. } => self.charge(qp.send_cq, qp.peer.map(|x| x.0)),
        }
    }
    fn finish(&mut self) {
        let Some(p) = self.current else { return };
        for (cq, ns) in self.pending.drain() {
            let w = self.cqs.entry((p, cq)).or_default();
            let charged = w.by_peer.entry(None).or_default();
            *charged = charged.saturating_add(ns);
        }
    }
    fn merge(&mut self, other: Box<dyn Section>) {
        if let Ok(o) = other.into_any().downcast::<Waits>() {
            for (k, w) in o.cqs {
                let m = self.cqs.entry(k).or_default();
                m.runs += w.runs;
                m.polls = m.polls.saturating_add(w.polls);
                m.ns = m.ns.saturating_add(w.ns);
                for (k, v) in w.by_peer {
                    let charged = m.by_peer.entry(k).or_default();
                    *charged = charged.saturating_add(v);
                }
            }
        }
    }
    fn text(&self, ctx: &ReportCtx<'_>, out: &mut String) {
        let _ = writeln!(
            out,
            "== Waits (time polling CQs that had nothing: empty-poll runs, first to last poll; \
             charged to the peer whose completion ended the wait)"
        );
        if self.cqs.is_empty() {
            let _ = writeln!(out, "no empty polls recorded\n");
            return;
        }
        let label = |p: usize| ctx.topo.procs[p].label();
        let _ = writeln!(
            out,
            "{:<18} {:<16} {:>8} {:>12} {:>12} {:>7}  waiting for (ms)",
            "process", "CQ", "runs", "empty polls", "waited ms", "share"
        );
        for (&(p, cq), w) in &self.cqs {
            let proc_ = &ctx.topo.procs[p];
            let span = (proc_
                .time(proc_.max_ts)
                .saturating_sub(proc_.time(proc_.min_ts)))
            .max(1) as f64;
            let mut peers: Vec<(&Option<usize>, &u64)> = w.by_peer.iter().collect();
            peers.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let peers: Vec<String> = peers
                .iter()
                .map(|(k, v)| {
                    let who = k.map(label).unwrap_or_else(|| "no traced peer".into());
                    format!("{who} {:.3}", **v as f64 / 1e6)
                })
                .collect();
            let _ = writeln!(
                out,
                "{:<18} {:<16} {:>8} {:>12} {:>12.3} {:>6.1}%  {}",
                label(p),
                format!("{cq:#x}"),
                w.runs,
                w.polls,
                w.ns as f64 / 1e6,
                100.0 * w.ns as f64 / span,
                peers.join(", ")
            );
        }
        out.push('\n');
    }
    fn json(&self, ctx: &ReportCtx<'_>) -> Value {
        let cqs: Vec<Value> = self
            .cqs
            .iter()
            .map(|(&(p, cq), w)| {
                let by_peer: Vec<Value> = w
                    .by_peer
                    .iter()
                    .map(|(k, v)| {
                        json!({
                            "peer": k.map(|x| ctx.topo.procs[x].label()),
                            "ns": v,
                        })
                    })
                    .collect();
                json!({
                    "process": ctx.topo.procs[p].label(),
                    "cq": cq,
                    "runs": w.runs,
                    "empty_polls": w.polls,
                    "ns": w.ns,
                    "by_peer": by_peer,
                })
            })
            .collect();
        json!(cqs)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
