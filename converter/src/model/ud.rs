//! UD traffic: datagrams matched to the receive completions they produced.
//!
//! A UD send names its destination in the work request itself: `rkey` = remote QPN,
//! `remote_addr` = the address handle (whose `AhCreate` record gives the destination LID). The
//! receive completion names the source: `src_qp` and `slid`. So traffic forms streams — per
//! sending (process, QP, destination QPN, AH) and per receiving (process, QP, source QPN, SLID) —
//! and a send stream pairs with the receive stream whose QPNs point at each other. QPNs repeat
//! across nodes; candidates are narrowed by each port's own LID (`port_addr=`) where the logs
//! recorded it, else by LIDs learned from unambiguous pairs (an AH's DLID
//! is the receiver host's LID, a completion's SLID the sender host's). A pair is drawn with
//! flows (k-th datagram → k-th receive, UD keeps order on a path and never duplicates) when
//! both counts agree. When fewer were received (n of m), the first n are paired only where that
//! is proven: sender and receiver read one machine clock (one clock domain) and datagram n + 1
//! was sent after the last receive completed — then every datagram received was among the
//! first n sent, so they are exactly those, in order; the last m − n are reported as sent
//! after the last receive (lost or never polled, e.g. a client that exits with its last
//! datagram in flight). Otherwise a dropped datagram could shift every later flow, so the
//! stream gets none; every such stream is named in a warning with its counts.
//!
//! This needs one extra pass, only over the processes that have UD QPs (and one more over the
//! senders of streams whose counts differ).

use rayon::prelude::*;
use sigmatrace_schemas::records::{AhCreate, RecordKind};

use crate::align::topology::Topology;
use crate::fastmap::FastMap;
use crate::read::hot::{is_received_message, Hot};
use crate::read::input::LogInput;
use crate::read::verbs;

/// Sending stream key: (QPN, destination QPN, AH handle).
pub type SendKey = (u32, u32, u64);
/// Receiving stream key: (QPN, source QPN, source LID).
pub type RecvKey = (u32, u32, u16);

/// A paired stream end: flow ids `flow_id(conn, k)` for k < `flows`; `slot` indexes the
/// process's per-stream counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdLink {
    pub conn: u64,
    pub flows: u64,
    pub slot: usize,
}

/// Paired UD streams of every process.
#[derive(Clone, Debug, Default)]
pub struct UdStreams {
    pub send: Vec<FastMap<SendKey, UdLink>>,
    pub recv: Vec<FastMap<RecvKey, UdLink>>,
    /// Streams per process (size of the model's counter array).
    pub slots: Vec<usize>,
    pub pairs: u64,
    pub warnings: Vec<String>,
}

#[derive(Default)]
struct Counts {
    send: FastMap<SendKey, u64>,
    recv: FastMap<RecvKey, u64>,
    /// Timestamp of each receive stream's last completion.
    last_recv: FastMap<RecvKey, u64>,
    ah_dlid: FastMap<u64, u16>,
}

fn count(input: &LogInput, ud_qps: &[u32]) -> Counts {
    let mut c = Counts::default();
    let mut issues = Vec::new();
    let is_ud = |q: u32| ud_qps.binary_search(&q).is_ok();
    for mut cur in input.thread_cursors() {
        while let Some((ts, r)) = cur.pop(&mut issues) {
            match Hot::of(r) {
                Some(Hot::PostSend(ps)) if is_ud(ps.qpn) && verbs::consumes_recv(ps.opcode) => {
                    *c.send.entry((ps.qpn, ps.rkey, ps.remote_addr)).or_default() += 1;
                }
                Some(Hot::Completion(wc)) if is_ud(wc.qpn) && is_received_message(wc) => {
                    let k = (wc.qpn, wc.src_qp, wc.slid);
                    *c.recv.entry(k).or_default() += 1;
                    let last = c.last_recv.entry(k).or_default();
                    *last = (*last).max(ts);
                }
                Some(_) => {}
                None if r.kind == RecordKind::AhCreate as u16 => {
                    if let Ok(ah) = bytemuck::try_from_bytes::<AhCreate>(r.bytes) {
                        c.ah_dlid.insert(ah.ah, ah.dlid);
                    }
                }
                None => {}
            }
        }
    }
    c
}

/// Timestamps of the sends of the streams `keys` of one process, each stream's sorted.
fn send_times(input: &LogInput, keys: &[SendKey]) -> FastMap<SendKey, Vec<u64>> {
    let mut out: FastMap<SendKey, Vec<u64>> = FastMap::default();
    let mut issues = Vec::new();
    for mut cur in input.thread_cursors() {
        while let Some((ts, r)) = cur.pop(&mut issues) {
            if let Some(Hot::PostSend(ps)) = Hot::of(r) {
                let k = (ps.qpn, ps.rkey, ps.remote_addr);
                if verbs::consumes_recv(ps.opcode) && keys.contains(&k) {
                    out.entry(k).or_default().push(ts);
                }
            }
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

/// Streams whose receiver got fewer datagrams than were sent, `(sender, send key, receiver,
/// receive key, received)`: whether the received ones are provably the first ones sent (one
/// clock domain, and the next datagram sent after the last receive), in the given order.
fn tails_proven(
    inputs: &[LogInput],
    topo: &Topology,
    counts: &[Counts],
    short: &[(usize, SendKey, usize, RecvKey, u64)],
) -> Vec<bool> {
    if short.is_empty() {
        return Vec::new();
    }
    let dom = crate::align::domains::clock_domains(inputs, topo);
    // One time line per domain, as the alignment has it: the domain's pooled fit plus its
    // REALTIME − MONOTONIC.
    let rt = |p: usize| {
        let first = dom.procs[dom.of_proc[p]][0];
        topo.hosts[topo.procs[first].host].realtime_offset
    };
    let clocks = crate::align::domains::pooled_clocks(topo, &dom);
    let time = |p: usize, ts: u64| clocks[p].to_realtime(rt(p)).map(ts);
    let mut senders: Vec<usize> = short.iter().map(|s| s.0).collect();
    senders.sort_unstable();
    senders.dedup();
    let times: Vec<(usize, FastMap<SendKey, Vec<u64>>)> = senders
        .par_iter()
        .map(|&p| {
            let keys: Vec<SendKey> = short.iter().filter(|s| s.0 == p).map(|s| s.1).collect();
            (
                p,
                send_times(
                    crate::align::join::inputs_for(inputs, &topo.procs[p]),
                    &keys,
                ),
            )
        })
        .collect();
    short
        .iter()
        .map(|&(p, sk, p2, rk, nr)| {
            let Some(last) = counts[p2].last_recv.get(&rk) else {
                return false;
            };
            let next = times
                .iter()
                .find(|t| t.0 == p)
                .and_then(|t| t.1.get(&sk))
                .and_then(|v| v.get(nr as usize));
            dom.of_proc[p] == dom.of_proc[p2]
                && next.is_some_and(|&ts| time(p, ts) > time(p2, *last))
        })
        .collect()
}

/// The own LID of the port QP `qpn` of process `p` uses, when its log recorded it.
fn own_lid(topo: &Topology, p: usize, qpn: u32) -> Option<u16> {
    let proc_ = &topo.procs[p];
    proc_.qp(qpn).and_then(|q| proc_.own_addr(q)).map(|a| a.lid)
}

/// A UD send stream (process, key) paired with its receive stream (process, key).
type StreamPair = ((usize, SendKey), (usize, RecvKey));

/// Counts and pairs the UD streams; flow connection ids start at `first_conn`.
pub fn build(inputs: &[LogInput], topo: &Topology, first_conn: u64) -> UdStreams {
    let n = topo.procs.len();
    let mut out = UdStreams {
        send: vec![FastMap::default(); n],
        recv: vec![FastMap::default(); n],
        slots: vec![0; n],
        ..Default::default()
    };
    let ud = ud_qpns(topo);
    if ud.iter().all(|v| v.is_empty()) {
        return out;
    }
    let counts = count_all(inputs, topo, &ud);
    let (sends, pairs) = pair_streams(topo, &counts);
    let short: Vec<(usize, SendKey, usize, RecvKey, u64)> = pairs
        .iter()
        .map(|&((p, sk), (p2, rk))| (p, sk, p2, rk, counts[p2].recv[&rk]))
        .filter(|s| counts[s.0].send[&s.1] > s.4)
        .collect();
    let proven = tails_proven(inputs, topo, &counts, &short);
    for (conn, ((p, sk), (p2, rk))) in (first_conn..).zip(pairs) {
        let (ns, nr) = (counts[p].send[&sk], counts[p2].recv[&rk]);
        let what = format!(
            "{} UD QP {:#x} → {} QP {:#x}: {ns} datagrams sent, {nr} received",
            topo.procs[p].label(),
            sk.0,
            topo.procs[p2].label(),
            rk.0
        );
        let tail = short
            .iter()
            .position(|s| (s.0, s.1) == (p, sk))
            .is_some_and(|i| proven[i]);
        let flows = if ns == nr {
            ns
        } else if tail {
            out.warnings.push(format!(
                "{what}; the first {nr} paired, the last {} sent after the last receive (lost or never polled)",
                ns - nr
            ));
            nr
        } else {
            out.warnings.push(format!("{what}; no flows drawn"));
            0
        };
        let (s1, s2) = (out.slots[p], out.slots[p2] + (p2 == p) as usize);
        out.slots[p] += 1;
        out.slots[p2] += 1;
        out.send[p].insert(
            sk,
            UdLink {
                conn,
                flows,
                slot: s1,
            },
        );
        out.recv[p2].insert(
            rk,
            UdLink {
                conn,
                flows,
                slot: s2,
            },
        );
        out.pairs += 1;
    }
    for &(p, sk) in &sends {
        if !out.send[p].contains_key(&sk) {
            out.warnings
                .push(unpaired_warning(topo, &ud, &counts, p, sk));
        }
    }
    out
}

/// The warning for a UD send stream paired with no receive stream: its datagram count, and
/// whether one traced UD QP fits its destination (the QPN, and the AH's DLID where the
/// receiver's port LID is recorded) and received nothing from it — then the datagrams were
/// dropped there (no receive posted, or never polled) — or none or several fit.
fn unpaired_warning(
    topo: &Topology,
    ud: &[Vec<u32>],
    counts: &[Counts],
    p: usize,
    sk: SendKey,
) -> String {
    let ns = counts[p].send[&sk];
    let dlid = counts[p].ah_dlid.get(&sk.2).copied();
    let fits: Vec<usize> = (0..topo.procs.len())
        .filter(|&p2| ud[p2].binary_search(&sk.1).is_ok())
        .filter(|&p2| own_lid(topo, p2, sk.1).is_none_or(|l| dlid.is_none_or(|d| d == l)))
        .collect();
    let head = format!(
        "{} UD QP {:#x} → QP {:#x}: {ns} datagrams sent",
        topo.procs[p].label(),
        sk.0,
        sk.1
    );
    match fits[..] {
        [p2] if !counts[p2].recv.keys().any(|k| (k.0, k.1) == (sk.1, sk.0)) => format!(
            "{head}, none received by {} QP {:#x} (no receive posted, or never polled); no flows drawn",
            topo.procs[p2].label(),
            sk.1
        ),
        [] => format!("{head}; no traced UD QP {:#x} fits the destination; no flows drawn", sk.1),
        [p2] => format!(
            "{head}; the receive streams of {} QP {:#x} from QP {:#x} fit no send stream alone (source LID, or several senders); no flows drawn",
            topo.procs[p2].label(),
            sk.1,
            sk.0
        ),
        _ => format!("{head}; receiver ambiguous ({} traced UD QPs fit); no flows drawn", fits.len()),
    }
}

/// Per process, its UD QPNs (sorted).
fn ud_qpns(topo: &Topology) -> Vec<Vec<u32>> {
    topo.procs
        .iter()
        .map(|p| {
            let mut v: Vec<u32> = p
                .qps
                .iter()
                .filter(|q| q.qp_type == verbs::qp_type::UD)
                .map(|q| q.qpn)
                .collect();
            v.sort_unstable();
            v
        })
        .collect()
}

/// Per process (in parallel), the datagrams of each of its UD streams (`ud`: its UD QPNs).
fn count_all(inputs: &[LogInput], topo: &Topology, ud: &[Vec<u32>]) -> Vec<Counts> {
    topo.procs
        .par_iter()
        .zip(ud.par_iter())
        .map(|(p, qps)| {
            if qps.is_empty() {
                return Counts::default();
            }
            let input = inputs
                .iter()
                .find(|i| i.path == p.path)
                .expect("every process has its input");
            count(input, qps)
        })
        .collect()
}

/// Every UD send stream (sorted), and the send streams paired with their receive stream:
/// the receiver's (QPN, source QPN) name the sender's, and the LIDs fit — own port LIDs where
/// recorded, else host LIDs learned from the pairs already unambiguous, repeated until nothing
/// changes. Pairs sorted.
fn pair_streams(topo: &Topology, counts: &[Counts]) -> (Vec<(usize, SendKey)>, Vec<StreamPair>) {
    // Receive streams by (receiving QPN, source QPN).
    let mut by_qpns: FastMap<(u32, u32), Vec<(usize, RecvKey)>> = FastMap::default();
    for (p, c) in counts.iter().enumerate() {
        for &k in c.recv.keys() {
            by_qpns.entry((k.0, k.1)).or_default().push((p, k));
        }
    }
    let mut sends: Vec<(usize, SendKey)> = counts
        .iter()
        .enumerate()
        .flat_map(|(p, c)| c.send.keys().map(move |&k| (p, k)))
        .collect();
    sends.sort_unstable();
    // Host LIDs learned from unambiguous pairs.
    let mut lid: FastMap<usize, u16> = FastMap::default();
    let mut paired: FastMap<(usize, SendKey), (usize, RecvKey)> = FastMap::default();
    let mut taken: FastMap<(usize, RecvKey), usize> = FastMap::default();
    loop {
        let mut progress = false;
        for &(p, sk) in &sends {
            if paired.contains_key(&(p, sk)) {
                continue;
            }
            let dlid = counts[p].ah_dlid.get(&sk.2).copied();
            let hp = topo.procs[p].host;
            let cands: Vec<(usize, RecvKey)> = by_qpns
                .get(&(sk.1, sk.0))
                .map(|v| {
                    v.iter()
                        .copied()
                        .filter(|&(p2, rk)| {
                            let h2 = topo.procs[p2].host;
                            // Own port LIDs (`port_addr=`) where recorded: the AH's DLID is
                            // the receiver's, the completion's SLID the sender's. A host LID
                            // learned from another pair stands in only where a port's own
                            // LID is not recorded: a host's processes can use different
                            // ports (one HCA per rank, or softnic nodes on one machine), so
                            // one pair's LID says nothing of another process's port.
                            let (own2, own1) = (own_lid(topo, p2, rk.0), own_lid(topo, p, sk.0));
                            let fits = own2.is_none_or(|l| dlid.is_none_or(|d| d == l))
                                && own1.is_none_or(|l| l == rk.2);
                            let learned2 = own2.is_some()
                                || lid.get(&h2).is_none_or(|&l| dlid.is_none_or(|d| d == l));
                            let learned1 =
                                own1.is_some() || lid.get(&hp).is_none_or(|&l| l == rk.2);
                            fits && !taken.contains_key(&(p2, rk)) && learned2 && learned1
                        })
                        .collect()
                })
                .unwrap_or_default();
            if let [(p2, rk)] = cands[..] {
                paired.insert((p, sk), (p2, rk));
                taken.insert((p2, rk), p);
                if let Some(d) = dlid {
                    lid.entry(topo.procs[p2].host).or_insert(d);
                }
                lid.entry(hp).or_insert(rk.2);
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    let mut pairs: Vec<_> = paired.into_iter().collect();
    pairs.sort_unstable();
    (sends, pairs)
}

impl UdStreams {
    /// The streams with flows, as the causality join needs them.
    pub fn join_keys(&self) -> crate::align::topology::UdJoin {
        let mut j = crate::align::topology::UdJoin {
            send: vec![Default::default(); self.send.len()],
            recv: vec![Default::default(); self.recv.len()],
            ends: Vec::new(),
        };
        let mut sender: std::collections::BTreeMap<u64, (usize, u32)> = Default::default();
        for (p, m) in self.send.iter().enumerate() {
            for (k, l) in m.iter().filter(|(_, l)| l.flows > 0) {
                j.send[p].insert(*k, l.conn as u32);
                sender.insert(l.conn, (p, k.0));
            }
        }
        for (p, m) in self.recv.iter().enumerate() {
            for (k, l) in m.iter().filter(|(_, l)| l.flows > 0) {
                j.recv[p].insert(*k, l.conn as u32);
                if let Some(&s) = sender.get(&l.conn) {
                    j.ends.push((l.conn as u32, s, p));
                }
            }
        }
        j.ends.sort_unstable();
        j
    }

    fn next(link: Option<&UdLink>, counters: &mut [u64]) -> Option<(u64, u64)> {
        let l = link?;
        let k = counters.get_mut(l.slot)?;
        let i = *k;
        *k += 1;
        (i < l.flows).then_some((l.conn, i))
    }

    /// The stream's connection and the index of the next datagram of process `p`'s send
    /// stream `key` (its counter in `counters` advances) — its flow id is
    /// `flow_id(conn, index)` — when the stream is paired and drawn with flows.
    pub fn next_send(&self, p: usize, key: SendKey, counters: &mut [u64]) -> Option<(u64, u64)> {
        Self::next(self.send.get(p).and_then(|m| m.get(&key)), counters)
    }

    /// The same for the next receive of process `p`'s receive stream `key`.
    pub fn next_recv(&self, p: usize, key: RecvKey, counters: &mut [u64]) -> Option<(u64, u64)> {
        Self::next(self.recv.get(p).and_then(|m| m.get(&key)), counters)
    }
}
