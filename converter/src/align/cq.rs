//! Completions without a QP number, and QP numbers used by more than one QP.
//!
//! An extended CQ created without `IBV_WC_EX_WITH_QP_NUM` gives completions with `qpn` 0 when
//! several QPs complete into it (the interposer fills the QPN when exactly one live QP does).
//! Such a completion belongs to one of the QPs whose send (or receive) CQ it is — the process
//! attributes `qp_cq=` say which — and, of those, to the one that has a WR with the
//! completion's `wr_id` outstanding; when several have, to the one that posted it first (a CQ
//! completes in order per queue). A QPN created again after `ibv_destroy_qp` is a new QP (its
//! own track, connection and counts): records go to the generation created last before them.
//!
//! [`recount`] reads one process in time order (only processes that need it: completions with
//! QPN 0 or a reused QPN) and gives every QP generation its counts and every attributed
//! completion its QP (by the record's file offset, so that every later pass — the causality
//! join, the model — finds the same QP without repeating the work).

use std::collections::{BTreeMap, VecDeque};

use crate::fastmap::IndexCache;
use crate::read::hot::{is_received_message, Hot};
use crate::read::input::LogInput;
use crate::read::scan::QpCounts;
use crate::read::verbs;

#[derive(Default)]
struct Queues {
    /// Posted send WRs: (wr_id, post sequence number, signaled).
    send: VecDeque<(u64, u64, bool)>,
    /// Posted receive WRs: (wr_id, post sequence number).
    recv: VecDeque<(u64, u64)>,
}

/// Which side of a QP a completion can be on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Send,
    Recv,
    /// An error completion (its opcode is undefined): either.
    Any,
}

fn side(wc: &sigmatrace_schemas::records::WorkCompletion) -> Side {
    if wc.status != 0 {
        Side::Any
    } else if wc.opcode >= verbs::wc::RECV {
        Side::Recv
    } else {
        Side::Send
    }
}

/// What [`recount`] needs of a process's QPs (implemented by the topology's process).
pub trait QpTable {
    /// Number of QPs (indices `0..qp_count`).
    fn qp_count(&self) -> usize;
    /// QP `i`: (send CQ, receive CQ, SRQ) handles.
    fn queues(&self, i: usize) -> (u64, u64, u64);
    /// The QP a record with QPN `qpn` at log time `ts` belongs to.
    fn qp_at(&self, cache: &mut IndexCache, qpn: u32, ts: u64) -> Option<usize>;
    /// Whether QP `i` exists at log time `ts`.
    fn live_at(&self, i: usize, ts: u64) -> bool;
}

/// Reads a process's records in time order: the counts of every QP and the attributed
/// completions without QPN ((record file offset, QP index), sorted).
pub fn recount(input: &LogInput, p: &impl QpTable) -> (Vec<QpCounts>, Vec<(u64, u32)>) {
    let n = p.qp_count();
    let mut counts = vec![QpCounts::default(); n];
    let mut queues: Vec<Queues> = (0..n).map(|_| Queues::default()).collect();
    let mut srq: BTreeMap<u64, VecDeque<(u64, u64)>> = BTreeMap::new();
    // CQ handle → QPs (indices) completing into it, in QP order.
    let mut by_cq: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for i in 0..n {
        let (send_cq, recv_cq, _) = p.queues(i);
        for cq in [send_cq, recv_cq] {
            if cq != 0 {
                let v = by_cq.entry(cq).or_default();
                if !v.contains(&i) {
                    v.push(i);
                }
            }
        }
    }
    let mut attributed = Vec::new();
    let mut seq = 0u64;
    let mut cache = IndexCache::default();
    let mut recs = input.merged();
    while let Some((ts, r)) = recs.next() {
        match Hot::of(r) {
            Some(Hot::PostSend(ps)) => {
                let Some(qi) = p.qp_at(&mut cache, ps.qpn, ts) else {
                    continue;
                };
                seq += 1;
                let signaled = ps.hdr.aux & verbs::SEND_SIGNALED != 0;
                queues[qi].send.push_back((ps.wr_id, seq, signaled));
                counts[qi].posts += 1;
                counts[qi].consuming_sends += verbs::consumes_recv(ps.opcode) as u64;
            }
            Some(Hot::PostRecv(pr)) => {
                seq += 1;
                if pr.qpn == 0 {
                    if pr.srq != 0 {
                        srq.entry(pr.srq).or_default().push_back((pr.wr_id, seq));
                    }
                    continue;
                }
                if let Some(qi) = p.qp_at(&mut cache, pr.qpn, ts) {
                    queues[qi].recv.push_back((pr.wr_id, seq));
                    counts[qi].posts += 1;
                }
            }
            Some(Hot::Completion(wc)) => {
                let qi = if wc.qpn != 0 {
                    p.qp_at(&mut cache, wc.qpn, ts)
                } else {
                    let cands = by_cq.get(&wc.cq).map_or(&[][..], |v| &v[..]);
                    let qi = choose(p, &queues, &srq, cands, wc, ts);
                    if let Some(qi) = qi {
                        attributed.push((r.offset, qi as u32));
                    }
                    qi
                };
                let Some(qi) = qi else { continue };
                retire(&mut queues[qi], &mut srq, p.queues(qi).2, wc);
                counts[qi].completions += 1;
                counts[qi].recv_ok += is_received_message(wc) as u64;
            }
            None => {}
        }
    }
    attributed.sort_unstable();
    (counts, attributed)
}

/// The QP a completion without QPN belongs to, among the QPs `cands` that use its CQ.
fn choose(
    p: &impl QpTable,
    queues: &[Queues],
    srq: &BTreeMap<u64, VecDeque<(u64, u64)>>,
    cands: &[usize],
    wc: &sigmatrace_schemas::records::WorkCompletion,
    ts: u64,
) -> Option<usize> {
    let side = side(wc);
    // Live QPs (the generation in use at `ts`) that complete this side into the CQ.
    let live: Vec<usize> = cands
        .iter()
        .copied()
        .filter(|&i| {
            let (send_cq, recv_cq, _) = p.queues(i);
            let on_side = match side {
                Side::Send => send_cq == wc.cq,
                Side::Recv => recv_cq == wc.cq,
                Side::Any => true,
            };
            on_side && p.live_at(i, ts)
        })
        .collect();
    if let [only] = live[..] {
        return Some(only);
    }
    // The QP whose outstanding WR with this wr_id was posted first.
    let mut best: Option<(u64, usize)> = None;
    let mut consider = |s: u64, i: usize| {
        if best.is_none_or(|b| s < b.0) {
            best = Some((s, i));
        }
    };
    for &i in &live {
        let q = &queues[i];
        if side != Side::Recv {
            if let Some(w) = q.send.iter().find(|w| w.0 == wc.wr_id) {
                consider(w.1, i);
            }
        }
        if side != Side::Send {
            if let Some(w) = q.recv.iter().find(|w| w.0 == wc.wr_id) {
                consider(w.1, i);
            }
        }
    }
    if best.is_some() {
        return best.map(|b| b.1);
    }
    // A receive from a shared SRQ: only when exactly one of the QPs uses that SRQ.
    if side != Side::Send {
        let with_srq: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&i| {
                let s = p.queues(i).2;
                s != 0
                    && srq
                        .get(&s)
                        .is_some_and(|v| v.iter().any(|w| w.0 == wc.wr_id))
            })
            .collect();
        if let [only] = with_srq[..] {
            return Some(only);
        }
    }
    None
}

/// Removes the WR(s) a completion retires from the queues (as the model does).
fn retire(
    q: &mut Queues,
    srq: &mut BTreeMap<u64, VecDeque<(u64, u64)>>,
    qp_srq: u64,
    wc: &sigmatrace_schemas::records::WorkCompletion,
) {
    let side = side(wc);
    if side != Side::Recv {
        let pos = if wc.status == 0 {
            q.send.iter().position(|w| w.0 == wc.wr_id && w.2)
        } else {
            None
        }
        .or_else(|| q.send.iter().position(|w| w.0 == wc.wr_id));
        if let Some(pos) = pos {
            q.send.drain(..=pos);
            return;
        }
    }
    if side != Side::Send {
        if let Some(pos) = q.recv.iter().position(|w| w.0 == wc.wr_id) {
            q.recv.remove(pos);
        } else if let Some(v) = srq.get_mut(&qp_srq) {
            if let Some(pos) = v.iter().position(|w| w.0 == wc.wr_id) {
                v.remove(pos);
            }
        }
    }
}
