//! Joining the two sides of every connection: the k-th message-consuming send on a QP is
//! received as the k-th successful receive completion of the peer QP.
//!
//! All logs are read in lock-step epochs of output time (in parallel per process, rayon); the
//! per-connection FIFOs hold only what the epoch and the clock skew leave unmatched. Within a
//! process a connection's sends (or receives) keep their time order, ties in log order.

use std::collections::VecDeque;

use rayon::prelude::*;
use sigmatrace_schemas::reader::RawRecord;
use sigmatrace_schemas::records::{PostSend, RecordKind, WorkCompletion};

use crate::align::topology::{Process, Topology, UdJoin};
use crate::fastmap::FastMap;
use crate::read::input::{LogInput, ThreadCursor};
use crate::read::verbs;

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
            (0..p.qps.len())
                .map(|qi| match topo.peer_of(p.index, qi) {
                    Some(peer) => (p.qps[qi].conn as u32, peer.conn as u32),
                    None => (0, 0),
                })
                .collect()
        })
        .collect()
}

/// Sender (process, QPN) and receiver process of every connection, indexed by its `conn`
/// (RC from the QPs' peers, UD from the streams' ends).
fn conn_ends(topo: &Topology) -> Vec<((usize, u32), usize)> {
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
    for &(c, sender, receiver) in &topo.ud.ends {
        let c = c as usize;
        if conns.len() <= c {
            conns.resize(c + 1, ((0, 0), 0));
        }
        conns[c] = (sender, receiver);
    }
    conns
}

/// Joins sends with their receives over all processes, calling `f` for every matched pair.
/// Times use each process's current `map` (uncorrected host time on the first run).
pub fn join(inputs: &[LogInput], topo: &Topology, mut f: impl FnMut(&Pair)) {
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
    let conns = conn_ends(topo);
    let epochs = (total / 2_000_000).clamp(1, 10_000) as i64;
    let step = ((hi - lo) / epochs).max(1) + 1;
    // A process without a message to match (no consuming send or successful receive on a
    // joined connection, no UD stream end: its scan counted none) is not read at all; of the
    // others, threads in order are read for their messages only.
    let mut cursors: Vec<_> = topo
        .procs
        .iter()
        .zip(&keys)
        .map(|(p, keys)| match has_messages(p, keys, &topo.ud) {
            true => inputs_for(inputs, p).message_cursors(),
            false => Vec::new(),
        })
        .collect();
    let mut queues: Vec<ConnQueues> = (0..conns.len()).map(|_| ConnQueues::default()).collect();
    let mut end = lo;
    while end <= hi + step {
        end += step;
        // Per process, its messages of this epoch: (connection, is send, time).
        let batches: Vec<Vec<(u32, bool, i64)>> = cursors
            .par_iter_mut()
            .zip(topo.procs.par_iter())
            .zip(keys.par_iter())
            .map(|((threads, p), keys)| epoch_messages(threads, p, keys, &topo.ud, end))
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

/// Whether process `p` has a message the join can match, by its scan's per-QP counts: a
/// message-consuming send or a successful receive completion on a joined connection (the
/// counts of the very records [`message`] takes), or an end of a UD stream.
fn has_messages(p: &Process, keys: &[(u32, u32)], ud: &UdJoin) -> bool {
    let ud_end = ud.send.get(p.index).is_some_and(|m| !m.is_empty())
        || ud.recv.get(p.index).is_some_and(|m| !m.is_empty());
    ud_end
        || p.qps.iter().zip(keys).any(|(q, &(send, recv))| {
            (send != 0 && q.counts.consuming_sends > 0) || (recv != 0 && q.counts.recv_ok > 0)
        })
}

/// Process `p`'s messages before output time `end` (the epoch's end), from each of its
/// threads in turn: (connection, is send, output time), in time order.
fn epoch_messages(
    threads: &mut [ThreadCursor<'_>],
    p: &Process,
    keys: &[(u32, u32)],
    ud: &UdJoin,
    end: i64,
) -> Vec<(u32, bool, i64)> {
    let mut out = Vec::new();
    let mut issues = Vec::new();
    let mut cache = crate::fastmap::IndexCache::default();
    let ts_end = p.map.inverse_ceil(end);
    let ud = (ud.send.get(p.index), ud.recv.get(p.index));
    let mut runs = 0;
    for cur in threads.iter_mut() {
        let before = out.len();
        while cur.head_ts().is_some_and(|ts| ts < ts_end) {
            let (ts, r) = cur.pop(&mut issues).expect("head");
            if let Some(m) = message(r, ts, p, &mut cache, keys, ud) {
                out.push(m);
            }
        }
        runs += (out.len() > before) as usize;
        cur.park();
    }
    if runs > 1 {
        out.sort_by_key(|e| e.2);
    }
    out
}

/// The UD stream maps of one process: sends by (QPN, remote QPN, AH), receives by (QPN, source
/// QPN, source LID).
type UdMaps<'a> = (
    Option<&'a FastMap<(u32, u32, u64), u32>>,
    Option<&'a FastMap<(u32, u32, u16), u32>>,
);

/// The message a record is, if any: a message-consuming send or a successful receive
/// completion on a joined connection or UD stream, as (connection, is send, output time).
#[inline]
fn message(
    r: &RawRecord<'_>,
    ts: u64,
    p: &Process,
    cache: &mut crate::fastmap::IndexCache,
    keys: &[(u32, u32)],
    (ud_send, ud_recv): UdMaps<'_>,
) -> Option<(u32, bool, i64)> {
    use std::mem::offset_of;
    const K_SEND: u16 = RecordKind::PostSend as u16;
    const K_WC: u16 = RecordKind::WorkCompletion as u16;
    let b = r.record_bytes();
    let u32_at = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().expect("4"));
    let (qi, send) = match r.kind {
        K_SEND => {
            if !verbs::consumes_recv(b[offset_of!(PostSend, opcode)]) {
                return None;
            }
            let qpn = u32_at(offset_of!(PostSend, qpn));
            if let Some(m) = ud_send.filter(|m| !m.is_empty()) {
                let rkey = u32_at(offset_of!(PostSend, rkey));
                let at = offset_of!(PostSend, remote_addr);
                let ah = u64::from_ne_bytes(b[at..at + 8].try_into().expect("8"));
                if let Some(&c) = m.get(&(qpn, rkey, ah)) {
                    return Some((c, true, p.time(ts)));
                }
            }
            (p.qp_at(cache, qpn, ts), true)
        }
        K_WC => {
            let op = b[offset_of!(WorkCompletion, opcode)];
            if b[offset_of!(WorkCompletion, status)] != 0
                || (op != verbs::wc::RECV && op != verbs::wc::RECV_RDMA_WITH_IMM)
            {
                return None;
            }
            let qpn = u32_at(offset_of!(WorkCompletion, qpn));
            if let Some(m) = ud_recv.filter(|m| !m.is_empty()) {
                let src = u32_at(offset_of!(WorkCompletion, src_qp));
                let at = offset_of!(WorkCompletion, slid);
                let slid = u16::from_ne_bytes(b[at..at + 2].try_into().expect("2"));
                if let Some(&c) = m.get(&(qpn, src, slid)) {
                    return Some((c, false, p.time(ts)));
                }
            }
            (p.completion_qp(cache, qpn, ts, r.offset), false)
        }
        _ => return None,
    };
    let qi = qi?;
    let c = if send { keys[qi].0 } else { keys[qi].1 };
    (c != 0).then(|| (c, send, p.time(ts)))
}

pub(crate) fn inputs_for<'a>(inputs: &'a [LogInput], p: &Process) -> &'a LogInput {
    p.log_in(inputs).expect("every process has its input")
}
