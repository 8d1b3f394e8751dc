//! Synthetic multi-rank SigmaTrace log sets with exact ground truth, written with the schemas
//! writer — for the converter's tests and its benchmark (`sigmatrace-convert-bench`).
//!
//! Data flow: [`Scenario`] (hosts with clock offset/drift, ranks, links) → `sim` (every
//! message's true times as closed-form functions of its direction, index and a seed) → `rank`
//! (one log per rank, written record by record in time order, ranks in parallel) → files +
//! [`Truth`] (exact counts, traffic matrices, flows).
//!
//! Streaming: a rank's log is written as its events come due (a heap of four streams per QP),
//! never held; each rank needs only its own QPs' state, and its share of the truth is merged
//! as it finishes. Memory is therefore bounded by the ranks being written at once (one per
//! worker thread), plus the truth's traffic of the rank pairs that have any (two per link at
//! most; a dense `n × n` matrix was 268 MB at 4 096 ranks).
//! QPNs repeat across hosts, as on real HCAs, and all times derive from one true time line,
//! so the converter's matches, flows, matrices and clock corrections can be checked exactly.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;

mod ibv;
mod rank;
mod sim;

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sigmatrace_schemas::writer::WriteError;

use rank::{RankDirs, RankTruth};
use sim::{mix, Dir, Sim};

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
    /// Two-sided SEND / RECV, both directions streaming independently.
    SendRecv,
    /// Two-sided SEND / RECV ping-pong: each b→a message answers the a→b message of the same
    /// index, posted 300 ns after it arrived (a strict ping-pong when `interval_ns` exceeds the
    /// round trip).
    PingPong,
    /// RDMA WRITE, one signaled WR every `signal_every`, plus a WRITE_WITH_IMM every 8th.
    Write { signal_every: u32 },
    /// RDMA WRITE only (as `ib_write_bw`): unsignaled, one signaled WR every `signal_every`
    /// (selective signalling) and the last.
    Bulk { signal_every: u32 },
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

/// True start of the run (ns since the epoch).
pub const T_START: u64 = 1_700_000_000_000_000_000;

/// What adds up over ranks: operations, records and the span of traffic (one rank's share
/// or a whole set's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub send_wrs: u64,
    pub failed_wrs: u64,
    pub recv_completions: u64,
    /// Messages that consume a receive (= flows).
    pub flows: u64,
    pub one_sided: u64,
    pub records: u64,
    pub wr_events: u64,
    /// Earliest and latest true time of traffic (`u64::MAX` and 0 while there is none).
    pub t_first: u64,
    pub t_last: u64,
}

impl Default for Counts {
    fn default() -> Counts {
        Counts {
            send_wrs: 0,
            failed_wrs: 0,
            recv_completions: 0,
            flows: 0,
            one_sided: 0,
            records: 0,
            wr_events: 0,
            t_first: u64::MAX,
            t_last: 0,
        }
    }
}

impl Counts {
    /// Adds another share.
    pub fn add(&mut self, o: &Counts) {
        self.send_wrs += o.send_wrs;
        self.failed_wrs += o.failed_wrs;
        self.recv_completions += o.recv_completions;
        self.flows += o.flows;
        self.one_sided += o.one_sided;
        self.records += o.records;
        self.wr_events += o.wr_events;
        self.t_first = self.t_first.min(o.t_first);
        self.t_last = self.t_last.max(o.t_last);
    }
}

/// Expected results. The counts read as fields of the truth (`truth.flows`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Truth {
    pub files: Vec<PathBuf>,
    /// (src, dst) → [bytes moved src → dst, operations src initiated towards dst]
    /// (successful WRs); only the pairs with traffic ([`Truth::bytes`], [`Truth::ops`]).
    pub traffic: BTreeMap<(usize, usize), [u64; 2]>,
    pub counts: Counts,
}

impl std::ops::Deref for Truth {
    type Target = Counts;
    fn deref(&self) -> &Counts {
        &self.counts
    }
}

impl Truth {
    /// Bytes moved from rank `src` to rank `dst`.
    pub fn bytes(&self, src: usize, dst: usize) -> u64 {
        self.traffic.get(&(src, dst)).map_or(0, |c| c[0])
    }

    /// Operations rank `src` initiated towards rank `dst`.
    pub fn ops(&self, src: usize, dst: usize) -> u64 {
        self.traffic.get(&(src, dst)).map_or(0, |c| c[1])
    }

    /// Adds one rank's share.
    fn absorb(&mut self, p: RankTruth) {
        self.files.push(p.file);
        for ((i, j), [bytes, ops]) in p.traffic {
            let c = self.traffic.entry((i, j)).or_default();
            c[0] += bytes;
            c[1] += ops;
        }
        self.counts.add(&p.counts);
    }
}

/// Both directions of every link, with their QPNs (numbered per host from 0x100).
fn directions(sc: &Scenario) -> Vec<Dir> {
    let mut next_qpn = vec![0x100u32; sc.hosts.len()];
    let mut dirs = Vec::with_capacity(sc.links.len() * 2);
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
                reply_to: (l.pattern == Pattern::PingPong && di == 1).then(|| dirs.len() - 1),
            });
        }
    }
    dirs
}

/// Writes the scenario's logs into `dir` (one per rank) and returns the ground truth.
pub fn write(dir: &Path, sc: &Scenario) -> Result<Truth, WriteError> {
    let n = sc.ranks.len();
    let sim = Sim {
        sc,
        dirs: directions(sc),
    };
    let mut sends: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut receives: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, d) in sim.dirs.iter().enumerate() {
        sends[d.src].push(i);
        receives[d.dst].push(i);
    }
    std::fs::create_dir_all(dir).map_err(|source| WriteError::Create {
        path: dir.to_owned(),
        source,
    })?;
    let parts: Vec<RankTruth> = (0..n)
        .into_par_iter()
        .map(|r| {
            let dirs = RankDirs {
                my: &sends[r],
                theirs: &receives[r],
            };
            rank::write_rank(&sim, dir, r, dirs)
        })
        .collect::<Result<_, _>>()?;
    let mut truth = Truth::default();
    for p in parts {
        truth.absorb(p);
    }
    Ok(truth)
}
