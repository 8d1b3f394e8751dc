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
//!
//! Logs that record each context's own port addresses (process attributes `port_addr=`) need
//! no learning: a candidate pairs only when each side's destination names the other side's
//! own port (its LID, or with a GRH one of its GIDs), so identical QPNs on every node, LID-only
//! addressing and peers reached both with and without a GRH resolve directly.
//!
//! A QPN created again after `ibv_destroy_qp` is a new QP entry (a new generation, see
//! [`crate::align::cq`]); `qp_cq=` attributes give each QP's CQs and SRQ.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use sigmatrace_schemas::clock::TimestampSource;
use sigmatrace_schemas::header::format_boot_id;

use crate::align::clock::{GpuClocks, LinearMap, ProcessClock};
use crate::read::input::LogInput;
use crate::read::scan::{QpCounts, Scan};
use crate::read::verbs;

mod connect;

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
    /// Index of the matched remote QP in its process's `qps` (valid when `peer` is set).
    pub peer_index: usize,
    /// CQ handles of the send and receive queue (from `qp_cq=`; 0 = unknown).
    pub send_cq: u64,
    pub recv_cq: u64,
    /// Log timestamp of the QP's creation (0 = unknown).
    pub created: u64,
    /// The next QP created with the same QPN: (its creation timestamp, index).
    pub next_gen: Option<(u64, usize)>,
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
    /// Index of the process's log in the inputs the topology was built from.
    pub input: usize,
    pub rank: Option<u32>,
    pub pid: u32,
    pub host: usize,
    pub hostname: String,
    pub exe: String,
    pub ts_source: TimestampSource,
    pub tsc_hz: u64,
    pub clock: ProcessClock,
    /// The clock snapshots the fit used (the header's start snapshot first): processes of
    /// one clock domain are refitted together ([`crate::align::domains::pooled_clocks`]).
    pub snapshots: Vec<sigmatrace_schemas::records::ClockSnapshot>,
    /// Log ts → output time (ns since the epoch, aligned across hosts).
    pub map: LinearMap,
    pub gpu: GpuClocks,
    pub qps: Vec<Qp>,
    pub qp_index: crate::fastmap::FastMap<u32, usize>,
    /// Device contexts: (context handle, name, guid).
    pub devices: Vec<(u64, String, u64)>,
    /// The contexts' own port addresses (`port_addr=` attributes).
    pub ports: Vec<PortAddr>,
    /// Completions without a QPN attributed to a QP: (record file offset, QP index), sorted.
    pub attributed: Vec<(u64, u32)>,
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
    /// The process's log among `inputs` (those the topology was built from: by index, else
    /// by path).
    pub fn log_in<'a>(&self, inputs: &'a [LogInput]) -> Option<&'a LogInput> {
        match inputs.get(self.input) {
            Some(i) if i.path == self.path => Some(i),
            _ => inputs.iter().find(|i| i.path == self.path),
        }
    }

    /// "rank 3" or "pid 1234".
    pub fn label(&self) -> String {
        match self.rank {
            Some(r) => format!("rank {r}"),
            None => format!("pid {}", self.pid),
        }
    }

    /// The (first) QP with this number.
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qp_index.get(&qpn).map(|&i| &self.qps[i])
    }

    /// The generation of QP `i`'s number in use at log time `ts`.
    #[inline]
    pub fn resolve(&self, mut i: usize, ts: u64) -> usize {
        while let Some((t0, j)) = self.qps[i].next_gen {
            if ts < t0 {
                break;
            }
            i = j;
        }
        i
    }

    /// Whether QP `i` exists at log time `ts` (created, not yet replaced by a new generation).
    pub fn live_at(&self, i: usize, ts: u64) -> bool {
        let q = &self.qps[i];
        q.created <= ts && q.next_gen.is_none_or(|(t0, _)| ts < t0)
    }

    /// The QP (index) a record with QPN `qpn` at log time `ts` belongs to.
    #[inline]
    pub fn qp_at(
        &self,
        cache: &mut crate::fastmap::IndexCache,
        qpn: u32,
        ts: u64,
    ) -> Option<usize> {
        let i = cache.get(&self.qp_index, qpn)?;
        Some(self.resolve(i, ts))
    }

    /// The QP of a completion: its QPN, or for QPN 0 the attribution of the record at file
    /// offset `offset` ([`crate::align::cq`]).
    #[inline]
    pub fn completion_qp(
        &self,
        cache: &mut crate::fastmap::IndexCache,
        qpn: u32,
        ts: u64,
        offset: u64,
    ) -> Option<usize> {
        if qpn == 0 {
            let i = self
                .attributed
                .binary_search_by_key(&offset, |a| a.0)
                .ok()?;
            return Some(self.attributed[i].1 as usize);
        }
        self.qp_at(cache, qpn, ts)
    }

    /// The own address of the port QP `q` uses, when the log recorded it.
    pub fn own_addr(&self, q: &Qp) -> Option<&PortAddr> {
        self.ports
            .iter()
            .find(|a| a.context == q.context && a.port == q.port.max(1))
    }

    /// Output time of a log timestamp.
    #[inline]
    pub fn time(&self, ts: u64) -> i64 {
        self.map.map(ts)
    }
}

/// Paired UD streams as the causality join sees them (filled from the UD pairing,
/// `model::ud`, before the alignment): per process, send stream (QPN, destination QPN, AH)
/// and receive stream (QPN, source QPN, SLID) → connection; per connection its sender
/// (process, QPN) and receiver process. Only streams whose datagram counts agree (k-th sent =
/// k-th received) are listed.
#[derive(Clone, Debug, Default)]
pub struct UdJoin {
    pub send: Vec<crate::fastmap::FastMap<(u32, u32, u64), u32>>,
    pub recv: Vec<crate::fastmap::FastMap<(u32, u32, u16), u32>>,
    pub ends: Vec<(u32, (usize, u32), usize)>,
}

impl crate::align::cq::QpTable for Process {
    fn qp_count(&self) -> usize {
        self.qps.len()
    }
    fn queues(&self, i: usize) -> (u64, u64, u64) {
        let q = &self.qps[i];
        (q.send_cq, q.recv_cq, q.srq)
    }
    fn qp_at(&self, cache: &mut crate::fastmap::IndexCache, qpn: u32, ts: u64) -> Option<usize> {
        Process::qp_at(self, cache, qpn, ts)
    }
    fn live_at(&self, i: usize, ts: u64) -> bool {
        Process::live_at(self, i, ts)
    }
}

/// The whole run.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    /// UD streams for the causality join.
    pub ud: UdJoin,
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
        Topology::build_with(inputs, scans, &[])
    }

    /// [`Topology::build`] where `recounted[i]`, when set, holds input `i`'s per-QP counts
    /// as [`crate::align::cq::recount`] gave them on the machine that read the whole log (a
    /// sharded conversion's other logs are header-and-messages extracts; see `crate::shard`).
    pub fn build_with(
        inputs: &[LogInput],
        scans: &[Scan],
        recounted: &[Option<Vec<QpCounts>>],
    ) -> Topology {
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
                input: i,
                rank: h.rank.rank,
                pid: h.pid,
                host,
                hostname: h.hostname.clone(),
                exe: h.exe.clone(),
                ts_source: h.ts_source,
                tsc_hz: h.tsc_hz,
                clock,
                snapshots: std::iter::once(h.start)
                    .chain(s.snapshots.iter().copied())
                    .collect(),
                map: LinearMap::IDENTITY,
                gpu: GpuClocks::fit(&s.gpu_pairs, ts_per_ns),
                qps: Vec::new(),
                qp_index: Default::default(),
                devices: s
                    .devices
                    .iter()
                    .map(|d| (d.context, d.name_str().to_string(), d.guid))
                    .collect(),
                ports: Vec::new(),
                attributed: Vec::new(),
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
            p.ports = port_addrs(&s.strings);
            build_qps(&mut p, s);
            let qpn0 = s.per_qp.get(&0).map_or(0, |c| c.completions);
            // Completions without QPN (with `qp_cq=` to attribute them) or a reused QPN:
            // counted per QP by reading the process once.
            let cq_known = p.qps.iter().any(|q| q.send_cq != 0 || q.recv_cq != 0);
            if (qpn0 > 0 && cq_known) || p.qps.iter().any(|q| q.next_gen.is_some()) {
                let (counts, attributed) = match recounted.get(i).cloned().flatten() {
                    Some(counts) => (counts, Vec::new()),
                    None => crate::align::cq::recount(inp, &p),
                };
                for (q, c) in p.qps.iter_mut().zip(counts) {
                    q.counts = c;
                }
                p.attributed = attributed;
            }
            topo.procs.push(p);
        }
        topo.match_connections();
        topo.assign_ids();
        topo
    }

    /// First track uuid of the tracks process `i` creates while it is modelled (lanes, SRQs,
    /// observed queues): each process has its own range, so ids do not depend on which worker
    /// ran first; `i` = the number of processes gives the range after them (Nsight Systems).
    pub fn dynamic_uuids(&self, i: usize) -> u64 {
        self.next_uuid.max(1) + ((i as u64 + 1) << 36)
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

    /// The matched peer QP of QP `qi` of process `p`.
    pub fn peer_of(&self, p: usize, qi: usize) -> Option<&Qp> {
        let q = &self.procs[p].qps[qi];
        q.peer.map(|(pp, _)| &self.procs[pp].qps[q.peer_index])
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
                if let Some((c, t)) = self.peer_of(p, qi).map(|s| (s.conn, s.track)) {
                    let q = &mut self.procs[p].qps[qi];
                    (q.peer_conn, q.peer_track) = (c, t);
                }
            }
        }
    }
}

/// A context's own address on one port (process attribute `port_addr=`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortAddr {
    pub context: u64,
    pub port: u8,
    pub lid: u16,
    /// The non-zero GIDs of the first GID-table entries.
    pub gids: Vec<[u8; 16]>,
}

impl PortAddr {
    /// Whether a destination (DLID, DGID; DGID zero without a GRH) names this port.
    pub fn named_by(&self, dest: (u16, [u8; 16])) -> bool {
        (dest.1 != [0; 16] && self.gids.contains(&dest.1)) || (dest.0 != 0 && dest.0 == self.lid)
    }
}

fn hex_u64(v: &str) -> Option<u64> {
    u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

/// `key=value` fields of a process attribute's value.
fn fields(v: &str) -> impl Iterator<Item = (&str, &str)> {
    v.split(',').filter_map(|f| f.split_once('='))
}

fn process_attrs<'s>(
    strings: &'s [(u32, u64, String)],
    key: &'s str,
) -> impl Iterator<Item = &'s str> {
    strings
        .iter()
        .filter(|s| s.0 == sigmatrace_schemas::records::string_ns::PROCESS_ATTR)
        .filter_map(move |s| s.2.strip_prefix(key)?.strip_prefix('='))
}

/// The `port_addr=` attributes of a log.
fn port_addrs(strings: &[(u32, u64, String)]) -> Vec<PortAddr> {
    let mut out: Vec<PortAddr> = Vec::new();
    for v in process_attrs(strings, "port_addr") {
        let mut a = PortAddr::default();
        for (k, x) in fields(v) {
            match k {
                "context" => a.context = hex_u64(x).unwrap_or(0),
                "port" => a.port = x.parse().unwrap_or(0),
                "lid" => a.lid = hex_u64(x).unwrap_or(0) as u16,
                g if g.starts_with("gid") && x.len() == 32 => {
                    let mut gid = [0u8; 16];
                    for (i, b) in gid.iter_mut().enumerate() {
                        *b = u8::from_str_radix(&x[2 * i..2 * i + 2], 16).unwrap_or(0);
                    }
                    a.gids.push(gid);
                }
                _ => {}
            }
        }
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// The `qp_cq=` attributes of a log: (qp handle, qpn, send cq, recv cq, srq), in log order.
fn qp_cqs(strings: &[(u32, u64, String)]) -> Vec<(u64, u32, u64, u64, u64)> {
    process_attrs(strings, "qp_cq")
        .map(|v| {
            let mut e = (0, 0, 0, 0, 0);
            for (k, x) in fields(v) {
                let n = hex_u64(x).unwrap_or(0);
                match k {
                    "qp" => e.0 = n,
                    "qpn" => e.1 = n as u32,
                    "send_cq" => e.2 = n,
                    "recv_cq" => e.3 = n,
                    "srq" => e.4 = n,
                    _ => {}
                }
            }
            e
        })
        .collect()
}

/// The QPs of a process from its scan: one entry per creation (a QPN created again after a
/// destroy is a new generation), plus QPs seen only in WRs or modifies; connection data from
/// the modifies of each generation's lifetime; CQs from `qp_cq=`; counts from the scan.
fn build_qps(p: &mut Process, s: &Scan) {
    for q in &s.qp_creates {
        p.qps.push(Qp {
            qpn: q.qpn,
            qp_type: (q.hdr.aux & 0xff) as u8,
            handle: q.qp,
            context: q.context,
            srq: q.srq,
            created: q.ts,
            ..Default::default()
        });
    }
    let mut extra: Vec<u32> = s.qp_modifies.iter().map(|m| m.qpn).collect();
    extra.extend(
        s.per_qp
            .iter()
            .filter(|(&n, c)| n != 0 && (c.posts > 0 || c.completions > 0))
            .map(|(&n, _)| n),
    );
    extra.sort_unstable();
    extra.dedup();
    for qpn in extra {
        if !p.qps.iter().any(|q| q.qpn == qpn) {
            p.qps.push(Qp {
                qpn,
                qp_type: verbs::qp_type::RC,
                ..Default::default()
            });
        }
    }
    p.qps.sort_by_key(|q| (q.qpn, q.created));
    p.qp_index = Default::default();
    for i in 0..p.qps.len() {
        let qpn = p.qps[i].qpn;
        p.qp_index.entry(qpn).or_insert(i);
        if i + 1 < p.qps.len() && p.qps[i + 1].qpn == qpn {
            p.qps[i].next_gen = Some((p.qps[i + 1].created, i + 1));
        }
    }
    let mut cache = crate::fastmap::IndexCache::default();
    for m in &s.qp_modifies {
        let Some(i) = p.qp_at(&mut cache, m.qpn, m.ts) else {
            continue;
        };
        let qp = &mut p.qps[i];
        let mask = m.hdr.aux;
        if mask & verbs::QP_PORT != 0 && m.port != 0 {
            qp.port = m.port;
        }
        if (mask & verbs::QP_DEST_QPN != 0) || (m.new_state == verbs::QPS_RTR && m.dest_qpn != 0) {
            qp.dest_qpn = Some(m.dest_qpn);
        }
        if (mask & verbs::QP_AV != 0) || m.new_state == verbs::QPS_RTR {
            qp.dest_addr = (m.dlid, if m.is_global != 0 { m.dgid } else { [0; 16] });
        }
    }
    // The k-th `qp_cq=` of a QPN belongs to its k-th generation.
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    for (handle, qpn, send_cq, recv_cq, srq) in qp_cqs(&s.strings) {
        let k = seen.entry(qpn).or_insert(0);
        let Some(mut i) = p.qp_index.get(&qpn).copied() else {
            continue;
        };
        for _ in 0..*k {
            match p.qps[i].next_gen {
                Some((_, j)) => i = j,
                None => break,
            }
        }
        *k += 1;
        let q = &mut p.qps[i];
        if q.handle == 0 || q.handle == handle {
            (q.send_cq, q.recv_cq) = (send_cq, recv_cq);
            if q.srq == 0 {
                q.srq = srq;
            }
        }
    }
    // A QPN of one generation takes the scan's counts; reused QPNs are counted per generation
    // by `cq::recount`.
    let reused: Vec<bool> = p
        .qps
        .iter()
        .map(|q| p.qps[p.qp_index[&q.qpn]].next_gen.is_some())
        .collect();
    for (q, reused) in p.qps.iter_mut().zip(reused) {
        if !reused {
            if let Some(c) = s.per_qp.get(&q.qpn) {
                q.counts = *c;
            }
        }
    }
}

/// Flow id of message `k` sent by a QP with sender index `conn` (see [`Qp::conn`]). Both
/// sides derive it independently; consecutive messages differ only in the low bytes, which
/// keeps compressed traces small.
#[inline]
pub fn flow_id(conn: u64, k: u64) -> u64 {
    conn << 40 | (k & ((1 << 40) - 1))
}
