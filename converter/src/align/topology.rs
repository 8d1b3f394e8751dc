//! Model, static part: hosts → processes (ranks) → devices → QPs, and the connections between
//! QPs of different ranks, built from pass-1 metadata.
//!
//! Connection matching: a QP's RTR transition records its destination (remote QPN, DLID, DGID)
//! but not its own port address. QP A on one rank and QP B on another are a pair when
//! `A.dest_qpn == B.qpn` and `B.dest_qpn == A.qpn`. QPNs repeat across nodes, so this can be
//! ambiguous; the address a QP uses for its peer is then the peer port's LID/GID, which pairs that
//! are unambiguous teach. Resolution iterates: unique candidates are paired and their port
//! addresses learned; candidates whose learned addresses contradict the recorded destination
//! are dropped; until nothing changes. What stays ambiguous is left unpaired (and reported).

use std::collections::HashMap;
use std::path::PathBuf;

use sigmatrace_schemas::clock::TimestampSource;
use sigmatrace_schemas::header::format_boot_id;

use crate::align::clock::{GpuClocks, LinearMap, ProcessClock};
use crate::read::input::LogInput;
use crate::read::scan::{QpCounts, Scan};
use crate::read::verbs;

/// A node (one boot of one machine).
#[derive(Clone, Debug)]
pub struct Host {
    pub name: String,
    pub boot_id: String,
    pub procs: Vec<usize>,
    /// REALTIME − MONOTONIC of the host (from its earliest log start).
    pub realtime_offset: i64,
}

/// A QP of a process.
#[derive(Clone, Debug, Default)]
pub struct Qp {
    pub qpn: u32,
    pub qp_type: u8,
    pub handle: u64,
    pub context: u64,
    pub srq: u64,
    pub port: u8,
    pub dest_qpn: Option<u32>,
    pub dest_addr: (u16, [u8; 16]),
    /// The matched remote QP: (process index, QPN).
    pub peer: Option<(usize, u32)>,
    pub counts: QpCounts,
    /// Messages of this QP's send queue that have a matching receive on the peer.
    pub flows_out: u64,
    /// Messages received on this QP that have a matching send on the peer.
    pub flows_in: u64,
    /// Dense index of this QP as a message sender (flow ids), 0 = none.
    pub conn: u64,
    /// The peer QP's `conn` and track (0 = no traced peer), resolved once for the hot path.
    pub peer_conn: u64,
    pub peer_track: u64,
    /// Track uuids: the QP's parent track and its counters.
    pub track: u64,
    pub outstanding_track: u64,
    pub inflight_bytes_track: u64,
}

impl Qp {
    /// "RC", "UD", ...
    pub fn type_name(&self) -> &'static str {
        verbs::qp_type_name(self.qp_type)
    }
}

/// A traced process (one log).
#[derive(Clone, Debug)]
pub struct Process {
    pub index: usize,
    pub path: PathBuf,
    pub rank: Option<u32>,
    pub pid: u32,
    pub host: usize,
    pub hostname: String,
    pub exe: String,
    pub ts_source: TimestampSource,
    pub tsc_hz: u64,
    pub clock: ProcessClock,
    /// Log ts → output time (ns since the epoch, aligned across hosts).
    pub map: LinearMap,
    pub gpu: GpuClocks,
    pub qps: Vec<Qp>,
    pub qp_index: crate::fastmap::FastMap<u32, usize>,
    /// Device contexts: (context handle, name, guid).
    pub devices: Vec<(u64, String, u64)>,
    pub min_ts: u64,
    pub max_ts: u64,
    pub records: u64,
    pub wr_events: u64,
    pub dropped: u64,
    /// Track uuids.
    pub track: u64,
    pub throughput_track: u64,
    /// Packet sequence ids (main, GPU kernels).
    pub seq: u32,
    pub gpu_seq: u32,
}

impl Process {
    /// "rank 3" or "pid 1234".
    pub fn label(&self) -> String {
        match self.rank {
            Some(r) => format!("rank {r}"),
            None => format!("pid {}", self.pid),
        }
    }

    /// The QP with this number.
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qp_index.get(&qpn).map(|&i| &self.qps[i])
    }

    /// Output time of a log timestamp.
    #[inline]
    pub fn time(&self, ts: u64) -> i64 {
        self.map.map(ts)
    }
}

/// The whole run.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    pub hosts: Vec<Host>,
    pub procs: Vec<Process>,
    /// QPs with a destination that no traced QP matched, and ambiguous ones.
    pub unmatched_qps: Vec<(usize, u32)>,
    pub ambiguous_qps: Vec<(usize, u32)>,
    /// Next free track uuid after the static tracks.
    pub next_uuid: u64,
}

impl Topology {
    /// Builds the model from opened logs and their scans (same order).
    pub fn build(inputs: &[LogInput], scans: &[Scan]) -> Topology {
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| {
            let h = inputs[i].file.header();
            (
                h.rank.rank.unwrap_or(u32::MAX),
                h.hostname.clone(),
                h.pid,
                inputs[i].path.clone(),
            )
        });
        let mut topo = Topology::default();
        let mut host_keys: HashMap<String, usize> = HashMap::new();
        for (index, &i) in order.iter().enumerate() {
            let inp = &inputs[i];
            let h = inp.file.header();
            let s = &scans[i];
            let boot = if h.boot_id == [0; 16] {
                String::new()
            } else {
                format_boot_id(&h.boot_id)
            };
            // Simulated nodes sharing one machine (header attribute `node=`) are separate
            // nodes for traffic and skew; each still gets its own clock fit.
            let node = h.node().map(str::to_owned);
            let key = match (boot.is_empty(), &node) {
                (true, None) => format!("host:{}", h.hostname),
                (true, Some(n)) => format!("host:{}/node:{n}", h.hostname),
                (false, None) => boot.clone(),
                (false, Some(n)) => format!("{boot}/node:{n}"),
            };
            let clock = ProcessClock::fit(&h.start, &s.snapshots, h.ts_source, h.tsc_hz);
            let host = *host_keys.entry(key).or_insert_with(|| {
                topo.hosts.push(Host {
                    name: match (h.hostname.is_empty(), &node) {
                        (true, None) => "unknown".into(),
                        (true, Some(n)) => format!("node{n}"),
                        (false, None) => h.hostname.clone(),
                        (false, Some(n)) => format!("{}/node{n}", h.hostname),
                    },
                    boot_id: boot.clone(),
                    procs: Vec::new(),
                    realtime_offset: clock.realtime_offset,
                });
                topo.hosts.len() - 1
            });
            topo.hosts[host].procs.push(index);
            let ts_per_ns = 1.0 / clock.to_monotonic.slope.max(1e-12);
            let mut p = Process {
                index,
                path: inp.path.clone(),
                rank: h.rank.rank,
                pid: h.pid,
                host,
                hostname: h.hostname.clone(),
                exe: h.exe.clone(),
                ts_source: h.ts_source,
                tsc_hz: h.tsc_hz,
                clock,
                map: LinearMap::IDENTITY,
                gpu: GpuClocks::fit(&s.gpu_pairs, ts_per_ns),
                qps: Vec::new(),
                qp_index: Default::default(),
                devices: s
                    .devices
                    .iter()
                    .map(|d| (d.context, d.name_str().to_string(), d.guid))
                    .collect(),
                min_ts: s.min_ts,
                max_ts: s.max_ts,
                records: s.records,
                wr_events: s.wr_events,
                dropped: s.dropped,
                track: 0,
                throughput_track: 0,
                seq: 0,
                gpu_seq: 0,
            };
            for q in &s.qp_creates {
                let qp = p.qp_entry(q.qpn);
                qp.qp_type = (q.hdr.aux & 0xff) as u8;
                qp.handle = q.qp;
                qp.context = q.context;
                qp.srq = q.srq;
            }
            for m in &s.qp_modifies {
                let qp = p.qp_entry(m.qpn);
                let mask = m.hdr.aux;
                if mask & verbs::QP_PORT != 0 && m.port != 0 {
                    qp.port = m.port;
                }
                if (mask & verbs::QP_DEST_QPN != 0)
                    || (m.new_state == verbs::QPS_RTR && m.dest_qpn != 0)
                {
                    qp.dest_qpn = Some(m.dest_qpn);
                }
                if (mask & verbs::QP_AV != 0) || m.new_state == verbs::QPS_RTR {
                    qp.dest_addr = (m.dlid, if m.is_global != 0 { m.dgid } else { [0; 16] });
                }
            }
            for (&qpn, c) in &s.per_qp {
                if p.qp_index.contains_key(&qpn) || c.posts > 0 || c.completions > 0 {
                    p.qp_entry(qpn).counts = *c;
                }
            }
            p.qps.sort_by_key(|q| q.qpn);
            p.qp_index = p.qps.iter().enumerate().map(|(i, q)| (q.qpn, i)).collect();
            topo.procs.push(p);
        }
        topo.match_connections();
        topo.assign_ids();
        topo
    }

    /// Sets every process's output map from its clock fit plus a per-host correction
    /// `(offset ns, rate)` applied at `at` (host time).
    pub fn set_maps(&mut self, corrections: &[(f64, f64)], at: i64) {
        for p in &mut self.procs {
            let rt = self.hosts[p.host].realtime_offset;
            let base = p.clock.to_realtime(rt);
            let (o, r) = corrections.get(p.host).copied().unwrap_or((0.0, 0.0));
            p.map = base.then_correct(o, r, at);
        }
    }

    /// Key of the port a QP uses (host, device context → guid/name, port number).
    fn port_key(&self, p: usize, q: &Qp) -> (usize, String, u8) {
        let proc_ = &self.procs[p];
        let dev = proc_
            .devices
            .iter()
            .find(|d| d.0 == q.context)
            .map(|d| {
                if d.2 != 0 {
                    format!("{:x}", d.2)
                } else {
                    d.1.clone()
                }
            })
            .unwrap_or_default();
        (proc_.host, dev, q.port.max(1))
    }

    /// Whether a destination GID's interface id can be the GUID of the device of `q`.
    fn gid_matches(&self, gid: [u8; 16], p: usize, q: &Qp) -> bool {
        if gid == [0; 16] || gid[0] != 0xfe || gid[1] & 0xc0 != 0x80 {
            return true;
        }
        let iface = u64::from_be_bytes(gid[8..16].try_into().expect("8 bytes"));
        let guid = self.procs[p]
            .devices
            .iter()
            .find(|d| d.0 == q.context)
            .map_or(0, |d| d.2);
        if guid == 0 {
            return true;
        }
        let near = |x: u64| x.wrapping_sub(guid) < 4;
        near(iface) || near(iface ^ 0x0200_0000_0000_0000)
    }

    fn match_connections(&mut self) {
        // Candidate index: qpn → QPs with that number.
        let mut by_qpn: HashMap<u32, Vec<(usize, usize)>> = HashMap::new();
        for (p, proc_) in self.procs.iter().enumerate() {
            for (qi, q) in proc_.qps.iter().enumerate() {
                by_qpn.entry(q.qpn).or_default().push((p, qi));
            }
        }
        type Addr = (u16, [u8; 16]);
        type Cands = Vec<((usize, usize), Vec<(usize, usize)>)>;
        let mut cands: Cands = Vec::new();
        for (p, proc_) in self.procs.iter().enumerate() {
            for (qi, q) in proc_.qps.iter().enumerate() {
                if q.qp_type == verbs::qp_type::UD {
                    continue;
                }
                let Some(dest) = q.dest_qpn else { continue };
                let c: Vec<(usize, usize)> = by_qpn
                    .get(&dest)
                    .map(|v| {
                        v.iter()
                            .copied()
                            .filter(|&(p2, q2)| {
                                (p2, q2) != (p, qi)
                                    && self.procs[p2].qps[q2].dest_qpn == Some(q.qpn)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                cands.push(((p, qi), c));
            }
        }
        let mut learned: HashMap<(usize, String, u8), Addr> = HashMap::new();
        let mut resolved: HashMap<(usize, usize), (usize, usize)> = HashMap::new();
        loop {
            let mut progress = false;
            for (a, cs) in cands.iter_mut() {
                if resolved.contains_key(a) {
                    continue;
                }
                let qa = &self.procs[a.0].qps[a.1];
                let ka = self.port_key(a.0, qa);
                // Tie-breaker: a link-local destination GID usually embeds the peer port's
                // GUID (EUI-64); drop candidates whose device GUID contradicts it, unless that
                // would drop them all.
                if cs.len() > 1 {
                    let keep: Vec<(usize, usize)> = cs
                        .iter()
                        .copied()
                        .filter(|b| {
                            self.gid_matches(qa.dest_addr.1, b.0, &self.procs[b.0].qps[b.1])
                        })
                        .collect();
                    if !keep.is_empty() {
                        *cs = keep;
                    }
                }
                cs.retain(|b| {
                    if resolved.get(b).is_some_and(|x| x != a) {
                        return false;
                    }
                    let qb = &self.procs[b.0].qps[b.1];
                    let kb = self.port_key(b.0, qb);
                    let ok_b = learned.get(&kb).is_none_or(|addr| *addr == qa.dest_addr);
                    let ok_a = learned.get(&ka).is_none_or(|addr| *addr == qb.dest_addr);
                    ok_a && ok_b
                });
                if cs.len() == 1 {
                    let b = cs[0];
                    let qb = &self.procs[b.0].qps[b.1];
                    let kb = self.port_key(b.0, qb);
                    learned.entry(kb).or_insert(qa.dest_addr);
                    learned.entry(ka).or_insert(qb.dest_addr);
                    resolved.insert(*a, b);
                    resolved.insert(b, *a);
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        for (a, cs) in &cands {
            let qpn = self.procs[a.0].qps[a.1].qpn;
            match resolved.get(a) {
                Some(&b) => {
                    let bqpn = self.procs[b.0].qps[b.1].qpn;
                    self.procs[a.0].qps[a.1].peer = Some((b.0, bqpn));
                }
                None if cs.is_empty() => self.unmatched_qps.push((a.0, qpn)),
                None => self.ambiguous_qps.push((a.0, qpn)),
            }
        }
        // Flow counts need both sides.
        for p in 0..self.procs.len() {
            for qi in 0..self.procs[p].qps.len() {
                if let Some((pp, pq)) = self.procs[p].qps[qi].peer {
                    let peer_recv = self.procs[pp].qp(pq).map(|q| q.counts.recv_ok).unwrap_or(0);
                    let peer_send = self.procs[pp]
                        .qp(pq)
                        .map(|q| q.counts.consuming_sends)
                        .unwrap_or(0);
                    let q = &mut self.procs[p].qps[qi];
                    q.flows_out = q.counts.consuming_sends.min(peer_recv);
                    q.flows_in = q.counts.recv_ok.min(peer_send);
                }
            }
        }
    }

    fn assign_ids(&mut self) {
        let mut uuid = 1u64;
        let mut next = || {
            let u = uuid;
            uuid += 1;
            u
        };
        let n = self.procs.len() as u32;
        let mut conn = 0u64;
        for p in &mut self.procs {
            p.track = next();
            p.throughput_track = next();
            p.seq = p.index as u32 + 1;
            p.gpu_seq = n + p.index as u32 + 1;
            for q in &mut p.qps {
                q.track = next();
                if q.peer.is_some() {
                    conn += 1;
                    q.conn = conn;
                }
                q.outstanding_track = next();
                q.inflight_bytes_track = next();
            }
        }
        self.next_uuid = uuid;
        for p in 0..self.procs.len() {
            for qi in 0..self.procs[p].qps.len() {
                if let Some((pp, pq)) = self.procs[p].qps[qi].peer {
                    let (c, t) = self.procs[pp].qp(pq).map_or((0, 0), |s| (s.conn, s.track));
                    let q = &mut self.procs[p].qps[qi];
                    (q.peer_conn, q.peer_track) = (c, t);
                }
            }
        }
    }
}

impl Process {
    fn qp_entry(&mut self, qpn: u32) -> &mut Qp {
        let i = *self.qp_index.entry(qpn).or_insert_with(|| {
            self.qps.push(Qp {
                qpn,
                qp_type: verbs::qp_type::RC,
                ..Default::default()
            });
            self.qps.len() - 1
        });
        &mut self.qps[i]
    }
}

/// Flow id of message `k` sent by a QP with sender index `conn` (see [`Qp::conn`]). Both
/// sides derive it independently; consecutive messages differ only in the low bytes, which
/// keeps compressed traces small.
#[inline]
pub fn flow_id(conn: u64, k: u64) -> u64 {
    conn << 40 | (k & ((1 << 40) - 1))
}
