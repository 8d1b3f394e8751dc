//! Joining the two sides of every connection: the k-th message-consuming send on a QP is
//! received as the k-th successful receive completion of the peer QP.
//!
//! All logs are read in lock-step epochs of output time (in parallel per process, rayon); the
//! per-connection FIFOs hold only what the epoch and the clock skew leave unmatched. Within a
//! process a connection's sends (or receives) keep their time order, ties in log order.

use std::collections::VecDeque;

use rayon::prelude::*;

use crate::align::topology::{Process, Topology, UdJoin};
use crate::fastmap::FastMap;
use crate::read::hot::message_of;
use crate::read::input::{LogInput, ThreadMessages};
use crate::read::messages::Message;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    let epochs = (total / 2_000_000).clamp(1, 10_000) as i128;
    // In i128: a damaged log's times may span all of i64.
    let step = ((hi as i128 - lo as i128) / epochs).max(1) + 1;
    // A process without a message to match (no consuming send or successful receive on a
    // joined connection, no UD stream end: its scan counted none) is not read at all; of the
    // others, threads in order are read for their messages only: from the scan's spill, or
    // their records passed over at a glance.
    let mut cursors: Vec<_> = topo
        .procs
        .iter()
        .zip(&keys)
        .map(|(p, keys)| match has_messages(p, keys, &topo.ud) {
            true => inputs_for(inputs, p).thread_messages(),
            false => Vec::new(),
        })
        .collect();
    let mut queues: Vec<ConnQueues> = (0..conns.len()).map(|_| ConnQueues::default()).collect();
    let mut next_end = lo as i128;
    while next_end <= hi as i128 + step {
        next_end += step;
        // The epoch's end, past i64 only after the last time there is.
        let end = next_end.min(i64::MAX as i128) as i64;
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
    threads: &mut [ThreadMessages<'_>],
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
    for thread in threads.iter_mut() {
        let before = out.len();
        match thread {
            ThreadMessages::Records(cur) => {
                while cur.head_ts().is_some_and(|ts| ts < ts_end) {
                    let (ts, r) = cur.pop(&mut issues).expect("head");
                    if let Some(m) = message_of(r, ts) {
                        out.extend(joined(&m, p, &mut cache, keys, ud));
                    }
                }
                cur.park();
            }
            ThreadMessages::Spilled(cur) => {
                while cur.head_ts().is_some_and(|ts| ts < ts_end) {
                    let m = cur.pop().expect("head");
                    out.extend(joined(&m, p, &mut cache, keys, ud));
                }
            }
        }
        runs += (out.len() > before) as usize;
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

/// A message (a message-consuming send or a successful receive completion) on a joined
/// connection or UD stream, as (connection, is send, output time); `None` on neither.
#[inline]
fn joined(
    m: &Message,
    p: &Process,
    cache: &mut crate::fastmap::IndexCache,
    keys: &[(u32, u32)],
    (ud_send, ud_recv): UdMaps<'_>,
) -> Option<(u32, bool, i64)> {
    let qi = if m.send {
        if let Some(m_ud) = ud_send.filter(|u| !u.is_empty()) {
            if let Some(&c) = m_ud.get(&(m.qpn, m.a, m.b)) {
                return Some((c, true, p.time(m.ts)));
            }
        }
        p.qp_at(cache, m.qpn, m.ts)
    } else {
        if let Some(m_ud) = ud_recv.filter(|u| !u.is_empty()) {
            if let Some(&c) = m_ud.get(&(m.qpn, m.a, m.b as u16)) {
                return Some((c, false, p.time(m.ts)));
            }
        }
        p.completion_qp(cache, m.qpn, m.ts, m.offset)
    };
    let qi = qi?;
    let c = if m.send { keys[qi].0 } else { keys[qi].1 };
    (c != 0).then(|| (c, m.send, p.time(m.ts)))
}

pub(crate) fn inputs_for<'a>(inputs: &'a [LogInput], p: &Process) -> &'a LogInput {
    p.log_in(inputs).expect("every process has its input")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::scan::{scan_spilling, Scan};
    use sigmatrace_synth::{Pattern, Scenario};

    /// The logs of `sc`, opened and scanned (with or without the message spill), and their
    /// topology with its UD streams, as the pipeline builds them.
    fn loaded(dir: &std::path::Path, spill: bool) -> (Vec<LogInput>, Topology) {
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "sigmatrace"))
            .collect();
        paths.sort();
        let inputs: Vec<LogInput> = paths.iter().map(|p| LogInput::open(p).unwrap()).collect();
        let spill = spill.then(|| crate::read::messages::Spill::create().unwrap());
        let scans: Vec<Scan> = scan_spilling(&inputs, spill);
        let mut topo = Topology::build(&inputs, &scans);
        let first = topo
            .procs
            .iter()
            .flat_map(|p| p.qps.iter().map(|q| q.conn))
            .max();
        let ud = crate::model::ud::build(&inputs, &topo, first.unwrap_or(0) + 1);
        topo.ud = ud.join_keys();
        (inputs, topo)
    }

    fn pairs(inputs: &[LogInput], topo: &Topology) -> Vec<Pair> {
        let mut v = Vec::new();
        join(inputs, topo, |p| v.push(*p));
        v
    }

    /// The join pairs the same messages, in the same order, whether it reads the scan's spill
    /// (threads in order) or every record — over two writer threads per process, RC and UD
    /// streams, many chunks; and with logs whose time goes backwards (snapshots stamped ahead),
    /// whose threads it reads from their records.
    #[test]
    fn the_join_pairs_the_same_from_the_spill_and_from_the_records() {
        let rc = Scenario::ring(3, 2, Pattern::SendRecv, 3_000);
        let ud = Scenario::ring(2, 2, Pattern::Ud, 300);
        for (mut sc, messages) in [(rc, 6 * 3_000 * 2), (ud, 4 * 300 * 2)] {
            for lead in [0, 4_000] {
                let dir = tempfile::tempdir().unwrap();
                sc.threads = 2;
                sc.chunk_size = 64 << 10;
                sc.snapshot_every_ns = 200_000;
                sc.snapshot_lead_ns = lead;
                sigmatrace_synth::write(dir.path(), &sc).unwrap();
                let (spilled, topo) = loaded(dir.path(), true);
                let (unspilled, topo_b) = loaded(dir.path(), false);
                let threads = |inputs: &[LogInput]| -> usize {
                    let per_log = |i: &LogInput| {
                        let n = i.threads.len();
                        (0..n).filter(|&t| i.spilled_messages(t).is_some()).count()
                    };
                    inputs.iter().map(per_log).sum()
                };
                let all: usize = spilled.iter().map(|i| i.threads.len()).sum();
                assert_eq!(threads(&unspilled), 0);
                // Most threads are in order (a SEND's completion can be written behind a
                // later record); with snapshots stamped ahead, those that write them are not.
                let n = threads(&spilled);
                match lead {
                    0 => assert!(n > all / 2, "{n} of {all}"),
                    _ => assert!(n > 0 && n <= all / 2, "{n} of {all}"),
                }
                let (a, b) = (pairs(&spilled, &topo), pairs(&unspilled, &topo_b));
                assert_eq!(a.len(), messages, "every message paired");
                assert_eq!(a, b);
            }
        }
    }
}
