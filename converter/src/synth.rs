//! Synthetic multi-rank log sets with exact ground truth, written with the schemas writer.
//!
//! A [`Scenario`] places ranks on hosts whose clocks have a known offset and drift, connects
//! them with RC QPs (QPNs repeat across hosts, as on real HCAs) and runs traffic in both
//! directions of every link. All times derive from one true time line, so the converter's
//! matches, flows, matrices and clock corrections can be checked exactly.

use std::collections::BinaryHeap;

use rayon::prelude::*;
use std::path::{Path, PathBuf};

use sigmatrace_schemas::clock::TimestampSource;
use sigmatrace_schemas::header::{FileHeader, RankInfo};
use sigmatrace_schemas::records::*;
use sigmatrace_schemas::writer::{LogWriter, WriteError, WriterOptions};
use sigmatrace_schemas::{FORMAT_MAJOR, FORMAT_MINOR};

use crate::read::verbs;

/// A node and its clock error: its clocks read `true + offset + drift·(true − start)`.
#[derive(Clone, Debug)]
pub struct HostSpec {
    pub name: String,
    pub offset_ns: i64,
    pub drift_ppm: f64,
}

/// Traffic pattern of a link (both directions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Two-sided SEND / RECV.
    SendRecv,
    /// RDMA WRITE, one signaled WR every `signal_every`, plus a WRITE_WITH_IMM every 8th.
    Write { signal_every: u32 },
    /// Cycles WRITE, SEND, READ, WRITE_WITH_IMM, FAA (all signaled).
    Mixed,
    /// SEND datagrams between UD QPs (address handles, no connection; each host's LID is its
    /// index + 1).
    Ud,
}

/// A connected QP pair between two ranks (indices into `Scenario::ranks`).
#[derive(Clone, Debug)]
pub struct LinkSpec {
    pub a: usize,
    pub b: usize,
    pub pattern: Pattern,
    /// Messages per direction.
    pub messages: u64,
    pub bytes: u32,
}

/// The run to synthesize.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub hosts: Vec<HostSpec>,
    /// Host index of each rank (rank number = position).
    pub ranks: Vec<usize>,
    pub links: Vec<LinkSpec>,
    /// Spacing of the messages of one direction of a link (ns).
    pub interval_ns: u64,
    /// One-way latency range (ns).
    pub latency_ns: (u64, u64),
    pub tsc_hz: u64,
    /// Clock snapshot period (ns).
    pub snapshot_every_ns: u64,
    pub chunk_size: u32,
    /// 1: one thread writes everything; 2: posts on one thread, completions on another.
    pub threads: u32,
    /// (link, direction 0 = a→b, message index) whose WR fails with REM_ACCESS_ERR.
    pub fail: Option<(usize, u8, u64)>,
    /// Connect with a GRH (link-local GID embedding the peer's GUID); else LID only.
    pub global_routes: bool,
    /// Post every send WR with wr_id 0 (as perftest does) instead of its index.
    pub constant_wr_id: bool,
    /// Extra one-way latency of every link's a→b direction (ns): asymmetric links.
    pub asym_latency_ns: u64,
    /// When > 0, a due clock snapshot is written as the interposer does: just before the
    /// event that made it due, stamped this many ns after that event (so the log's timestamps
    /// go backwards there).
    pub snapshot_lead_ns: u64,
    /// All hosts are simulated nodes of one machine (softnic): one boot id, one hostname
    /// ("machine"), one REALTIME − MONOTONIC, attribute `node=<host index>`.
    pub shared_machine: bool,
}

impl Scenario {
    /// `ranks_per_host` ranks on each of `hosts` hosts; each rank connected to the next rank
    /// (ring) with the given pattern.
    pub fn ring(hosts: usize, ranks_per_host: usize, pattern: Pattern, messages: u64) -> Scenario {
        let n = hosts * ranks_per_host;
        Scenario {
            hosts: (0..hosts)
                .map(|h| HostSpec {
                    name: format!("node{h}"),
                    offset_ns: 0,
                    drift_ppm: 0.0,
                })
                .collect(),
            ranks: (0..n).map(|r| r / ranks_per_host).collect(),
            links: (0..n)
                .filter(|&r| n > 2 || r == 0)
                .map(|r| LinkSpec {
                    a: r,
                    b: (r + 1) % n,
                    pattern,
                    messages,
                    bytes: 4096,
                })
                .collect(),
            interval_ns: 1000,
            latency_ns: (1500, 2500),
            tsc_hz: 2_500_000_000,
            snapshot_every_ns: 10_000_000,
            chunk_size: 1 << 16,
            threads: 2,
            fail: None,
            global_routes: true,
            constant_wr_id: false,
            asym_latency_ns: 0,
            snapshot_lead_ns: 0,
            shared_machine: false,
        }
    }
}

/// Address handle of UD direction `di`.
fn ud_ah(di: usize) -> u64 {
    0xa000_0000 + di as u64 * 0x40
}

/// True start of the run (ns since the epoch).
pub const T_START: u64 = 1_700_000_000_000_000_000;

/// Expected results.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Truth {
    pub files: Vec<PathBuf>,
    /// [src][dst] bytes moved and [initiator][target] operations (successful WRs).
    pub bytes: Vec<Vec<u64>>,
    pub ops: Vec<Vec<u64>>,
    pub send_wrs: u64,
    pub failed_wrs: u64,
    pub recv_completions: u64,
    /// Messages that consume a receive (= flows).
    pub flows: u64,
    pub one_sided: u64,
    pub records: u64,
    pub wr_events: u64,
    /// Earliest and latest true time of traffic.
    pub t_first: u64,
    pub t_last: u64,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One direction of a link.
#[derive(Clone, Debug)]
struct Dir {
    src: usize,
    dst: usize,
    qpn_src: u32,
    qpn_dst: u32,
    pattern: Pattern,
    messages: u64,
    bytes: u32,
    phase: u64,
    seed: u64,
    fail_at: Option<u64>,
    /// Added to every one-way latency of this direction.
    extra_ns: u64,
}

impl Dir {
    fn opcode(&self, k: u64) -> u8 {
        match self.pattern {
            Pattern::SendRecv | Pattern::Ud => verbs::wr::SEND,
            Pattern::Write { .. } if k % 8 == 7 => verbs::wr::RDMA_WRITE_WITH_IMM,
            Pattern::Write { .. } => verbs::wr::RDMA_WRITE,
            Pattern::Mixed => [
                verbs::wr::RDMA_WRITE,
                verbs::wr::SEND,
                verbs::wr::RDMA_READ,
                verbs::wr::RDMA_WRITE_WITH_IMM,
                verbs::wr::ATOMIC_FETCH_AND_ADD,
            ][(k % 5) as usize],
        }
    }
    fn signaled(&self, k: u64) -> bool {
        let last = self.fail_at.map_or(self.messages, |f| f + 1) - 1;
        match self.pattern {
            Pattern::Write { signal_every } => {
                k == last
                    || k % signal_every.max(1) as u64 == signal_every.max(1) as u64 - 1
                    || verbs::consumes_recv(self.opcode(k))
                    || Some(k) == self.fail_at
            }
            _ => true,
        }
    }
    fn count(&self) -> u64 {
        self.fail_at.map_or(self.messages, |f| f + 1)
    }
    fn bytes_of(&self, k: u64) -> u32 {
        if self.opcode(k) == verbs::wr::ATOMIC_FETCH_AND_ADD {
            8
        } else {
            self.bytes
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Ev {
    Post,
    Complete,
    RecvDone,
    Repost,
}

/// A time-ordered stream of one kind of event of one direction.
#[derive(Debug)]
struct Stream {
    t: u64,
    ev: Ev,
    dir: usize,
    k: u64,
    /// Running arrival time (monotone).
    arrival: u64,
}

impl PartialEq for Stream {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.ev, self.dir) == (o.t, o.ev, o.dir)
    }
}
impl Eq for Stream {}
impl PartialOrd for Stream {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Stream {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Min-heap on time.
        (o.t, o.ev, o.dir).cmp(&(self.t, self.ev, self.dir))
    }
}

struct Sim<'a> {
    sc: &'a Scenario,
    dirs: Vec<Dir>,
}

impl Sim<'_> {
    fn post_time(&self, d: &Dir, k: u64) -> u64 {
        T_START
            + d.phase
            + k * self.sc.interval_ns
            + mix(d.seed ^ k) % (self.sc.interval_ns / 4).max(1)
    }
    fn next_arrival(&self, d: &Dir, k: u64, prev: u64) -> u64 {
        let (lo, hi) = self.sc.latency_ns;
        let ow = lo + d.extra_ns + mix(d.seed.wrapping_mul(31) ^ k) % (hi - lo).max(1);
        (self.post_time(d, k) + ow).max(prev + 1)
    }
    /// Advances a stream to its next event of its kind; false when exhausted.
    fn advance(&self, s: &mut Stream) -> bool {
        let d = &self.dirs[s.dir];
        let n = d.count();
        loop {
            if s.k >= n {
                return false;
            }
            let k = s.k;
            s.arrival = self.next_arrival(d, k, s.arrival);
            s.k += 1;
            match s.ev {
                Ev::Post => {
                    s.t = self.post_time(d, k);
                    return true;
                }
                Ev::Complete if d.signaled(k) => {
                    s.t = s.arrival + self.sc.latency_ns.0 / 2 + 100;
                    return true;
                }
                Ev::RecvDone if verbs::consumes_recv(d.opcode(k)) && Some(k) != d.fail_at => {
                    s.t = s.arrival + 50;
                    return true;
                }
                Ev::Repost if verbs::consumes_recv(d.opcode(k)) && Some(k) != d.fail_at => {
                    s.t = s.arrival + 120;
                    return true;
                }
                _ => {}
            }
        }
    }
}

struct Clk {
    offset: i64,
    drift: f64,
    rt_minus_mono: i64,
    tsc0: u64,
    hz: f64,
}

impl Clk {
    fn realtime(&self, t: u64) -> u64 {
        (t as i64 + self.offset + (self.drift * 1e-6 * (t + 10_000_000 - T_START) as f64) as i64)
            as u64
    }
    fn mono(&self, t: u64) -> u64 {
        (self.realtime(t) as i64 - self.rt_minus_mono) as u64
    }
    fn ts(&self, t: u64) -> u64 {
        let m0 = self.mono(T_START - 10_000_000);
        self.tsc0 + ((self.mono(t) - m0) as f64 * self.hz / 1e9) as u64
    }
    fn snapshot(&self, t: u64) -> ClockSnapshot {
        let ts = self.ts(t);
        let m = self.mono(t);
        ClockSnapshot {
            hdr: RecordHeader::of::<ClockSnapshot>(0),
            ts: ts - 15,
            monotonic: m,
            monotonic_raw: m,
            boottime: m,
            realtime: self.realtime(t),
            ts_after: ts + 15,
        }
    }
}

/// Writes the scenario's logs into `dir` (one per rank) and returns the ground truth.
pub fn write(dir: &Path, sc: &Scenario) -> Result<Truth, WriteError> {
    let n = sc.ranks.len();
    let mut next_qpn = vec![0x100u32; sc.hosts.len()];
    let mut dirs = Vec::new();
    for (li, l) in sc.links.iter().enumerate() {
        let qa = next_qpn[sc.ranks[l.a]];
        next_qpn[sc.ranks[l.a]] += 1;
        let qb = next_qpn[sc.ranks[l.b]];
        next_qpn[sc.ranks[l.b]] += 1;
        for (di, (s, d, qs, qd)) in [(l.a, l.b, qa, qb), (l.b, l.a, qb, qa)]
            .into_iter()
            .enumerate()
        {
            dirs.push(Dir {
                src: s,
                dst: d,
                qpn_src: qs,
                qpn_dst: qd,
                pattern: l.pattern,
                messages: l.messages,
                bytes: l.bytes,
                phase: (mix(li as u64 * 2 + di as u64) % sc.interval_ns.max(1)) + 1000,
                seed: mix(0x5157 + li as u64 * 2 + di as u64),
                fail_at: sc
                    .fail
                    .and_then(|(fl, fd, k)| (fl == li && fd as usize == di).then_some(k)),
                extra_ns: if di == 0 { sc.asym_latency_ns } else { 0 },
            });
        }
    }
    let sim = Sim { sc, dirs };
    std::fs::create_dir_all(dir).map_err(|source| WriteError::Create {
        path: dir.to_owned(),
        source,
    })?;
    let per_rank = |r: usize, host: usize| -> Result<Truth, WriteError> {
        let mut truth = Truth {
            bytes: vec![vec![0; n]; n],
            ops: vec![vec![0; n]; n],
            t_first: u64::MAX,
            ..Default::default()
        };
        let h = &sc.hosts[host];
        let clk = Clk {
            offset: h.offset_ns,
            drift: h.drift_ppm,
            rt_minus_mono: 1_699_000_000_000_000_000
                + if sc.shared_machine {
                    0
                } else {
                    host as i64 * 7_000_000_000
                },
            tsc0: 1_000_000_000 + r as u64 * 12_345,
            hz: sc.tsc_hz as f64 * (1.0 + 3e-6),
        };
        let path = dir.join(format!("rank{r:04}.sigmatrace"));
        let header = FileHeader {
            major: FORMAT_MAJOR,
            minor: FORMAT_MINOR,
            header_size: 4096,
            chunk_size: sc.chunk_size,
            pointer_size: 8,
            ts_source: TimestampSource::Tsc,
            flags: 0,
            pid: 1000 + r as u32,
            ppid: 1,
            rank: RankInfo {
                rank: Some(r as u32),
                local_rank: Some(r as u32),
                world_size: Some(n as u32),
                source: "OMPI_COMM_WORLD_RANK".into(),
            },
            tsc_hz: sc.tsc_hz,
            start: clk.snapshot(T_START - 10_000_000),
            boot_id: if sc.shared_machine {
                [0x5a; 16]
            } else {
                [(host % 250) as u8 + 1; 16]
            },
            hostname: if sc.shared_machine {
                "machine".into()
            } else {
                h.name.clone()
            },
            cmdline: vec!["synthetic".into()],
            exe: "/usr/bin/synthetic".into(),
            attrs: if sc.shared_machine {
                vec![format!("node={host}")]
            } else {
                vec![]
            },
            dropped: 0,
            chunks_allocated: 0,
        };
        let w = LogWriter::create(
            &path,
            &header,
            WriterOptions {
                chunk_size: sc.chunk_size,
                max_bytes: 1 << 40,
                ..Default::default()
            },
        )?;
        let mut t0 = w.thread_writer(5000 + r as u32);
        let mut t1 = w.thread_writer(5001 + r as u32);
        let setup = T_START - 5_000_000;
        let ctx = 0x7000_0000 + r as u64 * 0x1000;
        let mut name = [0u8; 32];
        name[..6].copy_from_slice(b"mlx5_0");
        t0.append(&DeviceOpen {
            hdr: RecordHeader::of::<DeviceOpen>(0),
            ts: clk.ts(setup),
            context: ctx,
            guid: 0xabc0_0000 + ((host as u64) << 16),
            name,
        });
        let my: Vec<usize> = (0..sim.dirs.len())
            .filter(|&i| sim.dirs[i].src == r)
            .collect();
        for (i, &di) in my.iter().enumerate() {
            let d = &sim.dirs[di];
            let ts = clk.ts(setup + 1000 * i as u64);
            let ud = d.pattern == Pattern::Ud;
            let qp_type = if ud {
                verbs::qp_type::UD
            } else {
                verbs::qp_type::RC
            };
            t0.append(&QpCreate {
                hdr: RecordHeader::of::<QpCreate>(qp_type as u32),
                ts,
                qp: 0x9000_0000 + d.qpn_src as u64,
                context: ctx,
                qpn: d.qpn_src,
                max_send_wr: 256,
                max_recv_wr: 256,
                ..Default::default()
            });
            let peer_host = sc.ranks[d.dst];
            let mut dgid = [0u8; 16];
            dgid[0] = 0xfe;
            dgid[1] = 0x80;
            dgid[8..].copy_from_slice(&(0xabc0_0000u64 + ((peer_host as u64) << 16)).to_be_bytes());
            let global = sc.global_routes;
            if ud {
                t0.append(&AhCreate {
                    hdr: RecordHeader::of::<AhCreate>(0),
                    ts: ts + 5,
                    ah: ud_ah(di),
                    dlid: peer_host as u16 + 1,
                    port: 1,
                    ..Default::default()
                });
            }
            let rtr_mask = if ud {
                1
            } else {
                verbs::QP_AV | verbs::QP_DEST_QPN | 1
            };
            for (state, mask) in [
                (1u8, verbs::QP_PORT | 1),
                (verbs::QPS_RTR, rtr_mask),
                (3, 1),
            ] {
                let rtr = state == verbs::QPS_RTR && !ud;
                t0.append(&QpModify {
                    hdr: RecordHeader::of::<QpModify>(mask),
                    ts: ts + 10 + state as u64,
                    qpn: d.qpn_src,
                    new_state: state,
                    port: if state == 1 { 1 } else { 0 },
                    dest_qpn: if rtr { d.qpn_dst } else { 0 },
                    dlid: if rtr { peer_host as u16 + 1 } else { 0 },
                    is_global: (rtr && global) as u8,
                    dgid: if rtr && global { dgid } else { [0; 16] },
                    ..Default::default()
                });
            }
        }
        // Pre-posted receives on the QPs that receive from other ranks.
        let theirs: Vec<usize> = (0..sim.dirs.len())
            .filter(|&i| sim.dirs[i].dst == r)
            .collect();
        let mut recv_ids = vec![0u64; sim.dirs.len()];
        for &di in &theirs {
            let d = &sim.dirs[di];
            for _ in 0..16 {
                truth.records += 1;
                truth.wr_events += 1;
                t0.append(&PostRecv {
                    hdr: RecordHeader::of::<PostRecv>(0),
                    ts: clk.ts(setup + 100_000),
                    wr_id: (di as u64) << 32 | recv_ids[di],
                    qpn: d.qpn_dst,
                    bytes: 65536,
                    num_sge: 1,
                    source: 3,
                    ..Default::default()
                });
                recv_ids[di] += 1;
            }
        }
        let mut heap = BinaryHeap::new();
        for &di in &my {
            for ev in [Ev::Post, Ev::Complete] {
                let mut s = Stream {
                    t: 0,
                    ev,
                    dir: di,
                    k: 0,
                    arrival: 0,
                };
                if sim.advance(&mut s) {
                    heap.push(s);
                }
            }
        }
        for &di in &theirs {
            for ev in [Ev::RecvDone, Ev::Repost] {
                let mut s = Stream {
                    t: 0,
                    ev,
                    dir: di,
                    k: 0,
                    arrival: 0,
                };
                if sim.advance(&mut s) {
                    heap.push(s);
                }
            }
        }
        let mut next_snap = T_START;
        let mut recv_done = vec![0u64; sim.dirs.len()];
        while let Some(mut s) = heap.pop() {
            while next_snap <= s.t {
                let at = if sc.snapshot_lead_ns > 0 {
                    s.t + sc.snapshot_lead_ns
                } else {
                    next_snap
                };
                t0.append(&clk.snapshot(at));
                truth.records += 1;
                next_snap += sc.snapshot_every_ns;
            }
            let d = &sim.dirs[s.dir];
            let k = s.k - 1;
            let ts = clk.ts(s.t);
            truth.t_first = truth.t_first.min(s.t);
            truth.t_last = truth.t_last.max(s.t);
            truth.records += 1;
            truth.wr_events += 1;
            let poll = if sc.threads >= 2 { &mut t1 } else { &mut t0 };
            match s.ev {
                Ev::Post => {
                    let op = d.opcode(k);
                    let bytes = d.bytes_of(k);
                    t0.append(&PostSend {
                        hdr: RecordHeader::of::<PostSend>(if d.signaled(k) {
                            verbs::SEND_SIGNALED
                        } else {
                            0
                        }),
                        ts,
                        wr_id: if sc.constant_wr_id { 0 } else { k },
                        // UD: remote_addr = AH handle, rkey = remote QPN, compare_add = qkey.
                        remote_addr: if d.pattern == Pattern::Ud {
                            ud_ah(s.dir)
                        } else {
                            0x5500_0000 + (k % 64) * bytes as u64
                        },
                        compare_add: if d.pattern == Pattern::Ud { 0x1111 } else { 0 },
                        qpn: d.qpn_src,
                        bytes,
                        rkey: if d.pattern == Pattern::Ud {
                            d.qpn_dst
                        } else {
                            0x1234
                        },
                        imm: k as u32,
                        num_sge: 1,
                        opcode: op,
                        ..Default::default()
                    });
                    let failed = Some(k) == d.fail_at;
                    if failed {
                        truth.failed_wrs += 1;
                    } else {
                        truth.send_wrs += 1;
                        truth.ops[d.src][d.dst] += 1;
                        match op {
                            verbs::wr::RDMA_READ => truth.bytes[d.dst][d.src] += bytes as u64,
                            verbs::wr::ATOMIC_FETCH_AND_ADD => {
                                truth.bytes[d.src][d.dst] += 8;
                                truth.bytes[d.dst][d.src] += 8;
                            }
                            _ => truth.bytes[d.src][d.dst] += bytes as u64,
                        }
                        if verbs::consumes_recv(op) {
                            truth.flows += 1;
                        }
                        if verbs::one_sided(op) {
                            truth.one_sided += 1;
                        }
                    }
                }
                Ev::Complete => {
                    let failed = Some(k) == d.fail_at;
                    let op = d.opcode(k);
                    poll.append(&WorkCompletion {
                        hdr: RecordHeader::of::<WorkCompletion>(0),
                        ts,
                        wr_id: if sc.constant_wr_id { 0 } else { k },
                        cq: 0xc000,
                        qpn: d.qpn_src,
                        byte_len: d.bytes_of(k),
                        status: if failed { 10 } else { 0 },
                        opcode: match op {
                            verbs::wr::RDMA_WRITE | verbs::wr::RDMA_WRITE_WITH_IMM => 1,
                            verbs::wr::RDMA_READ => 2,
                            verbs::wr::ATOMIC_FETCH_AND_ADD => 4,
                            _ => 0,
                        },
                        ..Default::default()
                    });
                }
                Ev::RecvDone => {
                    let imm = d.opcode(k) == verbs::wr::RDMA_WRITE_WITH_IMM;
                    poll.append(&WorkCompletion {
                        hdr: RecordHeader::of::<WorkCompletion>(if imm { 2 } else { 0 }),
                        ts,
                        wr_id: (s.dir as u64) << 32 | recv_done[s.dir],
                        cq: 0xc001,
                        qpn: d.qpn_dst,
                        src_qp: d.qpn_src,
                        slid: if d.pattern == Pattern::Ud {
                            sc.ranks[d.src] as u16 + 1
                        } else {
                            0
                        },
                        byte_len: if imm { 0 } else { d.bytes_of(k) },
                        imm: k as u32,
                        opcode: if imm {
                            verbs::wc::RECV_RDMA_WITH_IMM
                        } else {
                            verbs::wc::RECV
                        },
                        ..Default::default()
                    });
                    recv_done[s.dir] += 1;
                    truth.recv_completions += 1;
                }
                Ev::Repost => {
                    t0.append(&PostRecv {
                        hdr: RecordHeader::of::<PostRecv>(0),
                        ts,
                        wr_id: (s.dir as u64) << 32 | recv_ids[s.dir],
                        qpn: d.qpn_dst,
                        bytes: 65536,
                        num_sge: 1,
                        source: 3,
                        ..Default::default()
                    });
                    recv_ids[s.dir] += 1;
                }
            }
            if sim.advance(&mut s) {
                heap.push(s);
            }
        }
        t0.append(&clk.snapshot(next_snap));
        truth.records += 1;
        // Setup records: DeviceOpen, per own QP: create + 3 modifies.
        truth.records += 1 + my.len() as u64 * 4;
        w.flush().map_err(|source| WriteError::Header {
            path: path.clone(),
            source,
        })?;
        truth.files.push(path);
        Ok(truth)
    };
    let parts: Vec<Truth> = sc
        .ranks
        .par_iter()
        .enumerate()
        .map(|(r, &h)| per_rank(r, h))
        .collect::<Result<_, _>>()?;
    let mut truth = Truth {
        bytes: vec![vec![0; n]; n],
        ops: vec![vec![0; n]; n],
        t_first: u64::MAX,
        ..Default::default()
    };
    for p in parts {
        truth.files.extend(p.files);
        for i in 0..n {
            for j in 0..n {
                truth.bytes[i][j] += p.bytes[i][j];
                truth.ops[i][j] += p.ops[i][j];
            }
        }
        truth.send_wrs += p.send_wrs;
        truth.failed_wrs += p.failed_wrs;
        truth.recv_completions += p.recv_completions;
        truth.flows += p.flows;
        truth.one_sided += p.one_sided;
        truth.records += p.records;
        truth.wr_events += p.wr_events;
        truth.t_first = truth.t_first.min(p.t_first);
        truth.t_last = truth.t_last.max(p.t_last);
    }
    Ok(truth)
}
