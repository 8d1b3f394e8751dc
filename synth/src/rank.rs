//! One rank's log, written record by record as its events come due: the setup (device, QPs,
//! connections), pre-posted receives, then a time-ordered merge of the streams of the messages
//! it sends and receives, with periodic clock snapshots. Memory: one heap entry per stream,
//! one receive counter per incoming direction — nothing that grows with the trace length.

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::path::{Path, PathBuf};

use sigmatrace_schemas::clock::TimestampSource;
use sigmatrace_schemas::header::{FileHeader, RankInfo};
use sigmatrace_schemas::records::*;
use sigmatrace_schemas::writer::{ChunkWriter, LogWriter, WriteError, WriterOptions};
use sigmatrace_schemas::{FORMAT_MAJOR, FORMAT_MINOR};

use crate::ibv;
use crate::sim::{Clk, Dir, Ev, Sim, Stream};
use crate::{Pattern, T_START};

/// Address handle of UD direction `di`.
fn ud_ah(di: usize) -> u64 {
    0xa000_0000 + di as u64 * 0x40
}

/// Receives pre-posted on every QP that receives from another rank.
const PREPOSTED_RECVS: u64 = 16;

/// What one rank's log contributes to the ground truth.
#[derive(Debug, Default)]
pub(crate) struct RankTruth {
    pub file: PathBuf,
    /// (src, dst) → [bytes, operations]; only pairs this rank initiates.
    pub traffic: BTreeMap<(usize, usize), [u64; 2]>,
    pub counts: crate::Counts,
}

/// The directions a rank sends on (`my`) and receives on (`theirs`).
pub(crate) struct RankDirs<'a> {
    pub my: &'a [usize],
    pub theirs: &'a [usize],
}

/// Writes rank `r`'s log into `dir`.
pub(crate) fn write_rank(
    sim: &Sim,
    dir: &Path,
    r: usize,
    dirs: RankDirs,
) -> Result<RankTruth, WriteError> {
    let sc = sim.sc;
    let host = sc.ranks[r];
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
    let w = LogWriter::create(
        &path,
        &header(sim, r, &clk),
        WriterOptions {
            chunk_size: sc.chunk_size,
            max_bytes: 1 << 40,
            ..Default::default()
        },
    )?;
    let mut log = RankLog {
        sim,
        r,
        clk,
        t0: w.thread_writer(5000 + r as u32),
        t1: w.thread_writer(5001 + r as u32),
        truth: RankTruth::default(),
        recv_posted: HashMap::new(),
        recv_done: HashMap::new(),
    };
    log.setup(dirs.my);
    log.prepost(dirs.theirs);
    log.events(&dirs);
    let mut truth = log.truth;
    drop((log.t0, log.t1));
    w.flush().map_err(|source| WriteError::Header {
        path: path.clone(),
        source,
    })?;
    truth.file = path;
    Ok(truth)
}

/// The log header of rank `r`.
fn header(sim: &Sim, r: usize, clk: &Clk) -> FileHeader {
    let sc = sim.sc;
    let host = sc.ranks[r];
    FileHeader {
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
            world_size: Some(sc.ranks.len() as u32),
            source: "OMPI_COMM_WORLD_RANK".into(),
        },
        tsc_hz: sc.tsc_hz,
        start: clk.snapshot(T_START - 10_000_000),
        boot_id: if sc.shared_machine {
            [0x5a; 16]
        } else {
            host_boot_id(host)
        },
        hostname: if sc.shared_machine {
            "machine".into()
        } else {
            sc.hosts[host].name.clone()
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
    }
}

/// A distinct boot id per simulated host (a boot id names one machine: two hosts that shared
/// one would be one machine to the converter, with one clock).
fn host_boot_id(host: usize) -> [u8; 16] {
    let mut id = [0x5b; 16];
    id[..8].copy_from_slice(&(host as u64 + 1).to_le_bytes());
    id
}

/// The writers and counters of one rank's log while it is written.
struct RankLog<'a> {
    sim: &'a Sim<'a>,
    r: usize,
    clk: Clk,
    /// Posts (and everything on one thread when `threads == 1`).
    t0: ChunkWriter,
    /// Completions when `threads >= 2`.
    t1: ChunkWriter,
    truth: RankTruth,
    /// Per incoming direction: receives posted and completed so far.
    recv_posted: HashMap<usize, u64>,
    recv_done: HashMap<usize, u64>,
}

const SETUP: u64 = T_START - 5_000_000;

impl RankLog<'_> {
    fn ctx(&self) -> u64 {
        0x7000_0000 + self.r as u64 * 0x1000
    }

    /// DeviceOpen, and per own QP: create (+ address handle for UD) and three modifies.
    fn setup(&mut self, my: &[usize]) {
        let host = self.sim.sc.ranks[self.r];
        let mut name = [0u8; 32];
        name[..6].copy_from_slice(b"mlx5_0");
        self.t0.append(&DeviceOpen {
            hdr: RecordHeader::of::<DeviceOpen>(0),
            ts: self.clk.ts(SETUP),
            context: self.ctx(),
            guid: 0xabc0_0000 + ((host as u64) << 16),
            name,
        });
        for (i, &di) in my.iter().enumerate() {
            self.connect(di, self.clk.ts(SETUP + 1000 * i as u64));
        }
        self.truth.counts.records += 1 + my.len() as u64 * 4;
    }

    fn connect(&mut self, di: usize, ts: u64) {
        let sc = self.sim.sc;
        let d = &self.sim.dirs[di];
        let ud = d.pattern == Pattern::Ud;
        let qp_type = if ud {
            ibv::qp_type::UD
        } else {
            ibv::qp_type::RC
        };
        self.t0.append(&QpCreate {
            hdr: RecordHeader::of::<QpCreate>(qp_type as u32),
            ts,
            qp: 0x9000_0000 + d.qpn_src as u64,
            context: self.ctx(),
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
        if ud {
            self.t0.append(&AhCreate {
                hdr: RecordHeader::of::<AhCreate>(0),
                ts: ts + 5,
                ah: ud_ah(di),
                dlid: peer_host as u16 + 1,
                port: 1,
                ..Default::default()
            });
        }
        let rtr_mask = if ud {
            ibv::QP_STATE
        } else {
            ibv::QP_AV | ibv::QP_DEST_QPN | ibv::QP_STATE
        };
        for (state, mask) in [
            (ibv::QPS_INIT, ibv::QP_PORT | ibv::QP_STATE),
            (ibv::QPS_RTR, rtr_mask),
            (ibv::QPS_RTS, ibv::QP_STATE),
        ] {
            let rtr = state == ibv::QPS_RTR && !ud;
            let global = rtr && sc.global_routes;
            self.t0.append(&QpModify {
                hdr: RecordHeader::of::<QpModify>(mask),
                ts: ts + 10 + state as u64,
                qpn: d.qpn_src,
                new_state: state,
                port: if state == ibv::QPS_INIT { 1 } else { 0 },
                dest_qpn: if rtr { d.qpn_dst } else { 0 },
                dlid: if rtr { peer_host as u16 + 1 } else { 0 },
                is_global: global as u8,
                dgid: if global { dgid } else { [0; 16] },
                ..Default::default()
            });
        }
    }

    /// Receives pre-posted on the QPs that receive from other ranks.
    fn prepost(&mut self, theirs: &[usize]) {
        for &di in theirs {
            for _ in 0..PREPOSTED_RECVS {
                self.truth.counts.records += 1;
                self.truth.counts.wr_events += 1;
                self.post_recv(di, self.clk.ts(SETUP + 100_000));
            }
        }
    }

    fn post_recv(&mut self, di: usize, ts: u64) {
        let id = self.recv_posted.entry(di).or_default();
        self.t0.append(&PostRecv {
            hdr: RecordHeader::of::<PostRecv>(0),
            ts,
            wr_id: (di as u64) << 32 | *id,
            qpn: self.sim.dirs[di].qpn_dst,
            bytes: 65536,
            num_sge: 1,
            source: 3,
            ..Default::default()
        });
        *id += 1;
    }

    /// Every event of the rank's streams in time order, with clock snapshots as they come due.
    fn events(&mut self, dirs: &RankDirs) {
        let sim = self.sim;
        let sc = sim.sc;
        let mut heap = BinaryHeap::new();
        let streams = dirs
            .my
            .iter()
            .flat_map(|&di| [Ev::Post, Ev::Complete].map(|ev| (ev, di)))
            .chain(
                dirs.theirs
                    .iter()
                    .flat_map(|&di| [Ev::RecvDone, Ev::Repost].map(|ev| (ev, di))),
            );
        for (ev, di) in streams {
            let mut s = Stream::new(ev, di);
            if sim.advance(&mut s) {
                heap.push(s);
            }
        }
        let mut next_snap = T_START;
        while let Some(mut s) = heap.pop() {
            while next_snap <= s.t {
                let at = if sc.snapshot_lead_ns > 0 {
                    s.t + sc.snapshot_lead_ns
                } else {
                    next_snap
                };
                self.t0.append(&self.clk.snapshot(at));
                self.truth.counts.records += 1;
                next_snap += sc.snapshot_every_ns;
            }
            self.event(&s);
            if sim.advance(&mut s) {
                heap.push(s);
            }
        }
        self.t0.append(&self.clk.snapshot(next_snap));
        self.truth.counts.records += 1;
    }

    /// Writes the current event of stream `s` (its message `s.k - 1`).
    fn event(&mut self, s: &Stream) {
        let d = &self.sim.dirs[s.dir];
        let k = s.k - 1;
        let ts = self.clk.ts(s.t);
        let truth = &mut self.truth;
        truth.counts.t_first = truth.counts.t_first.min(s.t);
        truth.counts.t_last = truth.counts.t_last.max(s.t);
        truth.counts.records += 1;
        truth.counts.wr_events += 1;
        match s.ev {
            Ev::Post => self.post_send(s.dir, d, k, ts),
            Ev::Complete => self.complete(d, k, ts),
            Ev::RecvDone => self.recv_done(s.dir, d, k, ts),
            Ev::Repost => self.post_recv(s.dir, ts),
        }
    }

    fn post_send(&mut self, di: usize, d: &Dir, k: u64, ts: u64) {
        let sc = self.sim.sc;
        let op = d.opcode(k);
        let bytes = d.bytes_of(k);
        let ud = d.pattern == Pattern::Ud;
        self.t0.append(&PostSend {
            hdr: RecordHeader::of::<PostSend>(if d.signaled(k) { ibv::SEND_SIGNALED } else { 0 }),
            ts,
            wr_id: if sc.constant_wr_id { 0 } else { k },
            // UD: remote_addr = AH handle, rkey = remote QPN, compare_add = qkey.
            remote_addr: if ud {
                ud_ah(di)
            } else {
                0x5500_0000 + (k % 64) * bytes as u64
            },
            compare_add: if ud { 0x1111 } else { 0 },
            qpn: d.qpn_src,
            bytes,
            rkey: if ud { d.qpn_dst } else { 0x1234 },
            // As the tracer records it: immediate data only where the opcode carries it (a
            // program's `imm_data` is not read otherwise), so that the hot sends are written
            // compact as a traced program's are.
            imm: if op == ibv::wr::RDMA_WRITE_WITH_IMM {
                k as u32
            } else {
                0
            },
            num_sge: 1,
            opcode: op,
            ..Default::default()
        });
        let t = &mut self.truth;
        if Some(k) == d.fail_at {
            t.counts.failed_wrs += 1;
            return;
        }
        t.counts.send_wrs += 1;
        t.traffic.entry((d.src, d.dst)).or_default()[1] += 1;
        let mut add = |i: usize, j: usize, b: u64| t.traffic.entry((i, j)).or_default()[0] += b;
        match op {
            ibv::wr::RDMA_READ => add(d.dst, d.src, bytes as u64),
            ibv::wr::ATOMIC_FETCH_AND_ADD => {
                add(d.src, d.dst, 8);
                add(d.dst, d.src, 8);
            }
            _ => add(d.src, d.dst, bytes as u64),
        }
        if ibv::consumes_recv(op) {
            t.counts.flows += 1;
        }
        if ibv::one_sided(op) {
            t.counts.one_sided += 1;
        }
    }

    fn poller(&mut self) -> &mut ChunkWriter {
        if self.sim.sc.threads >= 2 {
            &mut self.t1
        } else {
            &mut self.t0
        }
    }

    fn complete(&mut self, d: &Dir, k: u64, ts: u64) {
        let failed = Some(k) == d.fail_at;
        let wr_id = if self.sim.sc.constant_wr_id { 0 } else { k };
        self.poller().append(&WorkCompletion {
            hdr: RecordHeader::of::<WorkCompletion>(0),
            ts,
            wr_id,
            cq: 0xc000,
            qpn: d.qpn_src,
            byte_len: d.bytes_of(k),
            status: if failed { ibv::WC_REM_ACCESS_ERR } else { 0 },
            opcode: match d.opcode(k) {
                ibv::wr::RDMA_WRITE | ibv::wr::RDMA_WRITE_WITH_IMM => ibv::wc::RDMA_WRITE,
                ibv::wr::RDMA_READ => ibv::wc::RDMA_READ,
                ibv::wr::ATOMIC_FETCH_AND_ADD => ibv::wc::FETCH_ADD,
                _ => ibv::wc::SEND,
            },
            ..Default::default()
        });
    }

    fn recv_done(&mut self, di: usize, d: &Dir, k: u64, ts: u64) {
        let imm = d.opcode(k) == ibv::wr::RDMA_WRITE_WITH_IMM;
        let done = *self.recv_done.entry(di).or_default();
        let slid = if d.pattern == Pattern::Ud {
            self.sim.sc.ranks[d.src] as u16 + 1
        } else {
            0
        };
        self.poller().append(&WorkCompletion {
            hdr: RecordHeader::of::<WorkCompletion>(if imm { ibv::WC_WITH_IMM } else { 0 }),
            ts,
            wr_id: (di as u64) << 32 | done,
            cq: 0xc001,
            qpn: d.qpn_dst,
            src_qp: d.qpn_src,
            slid,
            byte_len: if imm { 0 } else { d.bytes_of(k) },
            // Only a completion with immediate data has it (`IBV_WC_WITH_IMM`), as traced.
            imm: if imm { k as u32 } else { 0 },
            opcode: if imm {
                ibv::wc::RECV_RDMA_WITH_IMM
            } else {
                ibv::wc::RECV
            },
            ..Default::default()
        });
        *self.recv_done.entry(di).or_default() += 1;
        self.truth.counts.recv_completions += 1;
    }
}
