//! `stats` sections "barriers" and "skew" on generated logs with exact ground truth: four
//! simulated nodes on one host (one process each, softnic-style QPNs that repeat across nodes,
//! node GUIDs in the GIDs), barrier rounds of observed ATOMIC_FA WQEs on a counter at rank 0
//! (rank 0 through a loopback QP pair), payload WRITE/READ WQEs with a known byte matrix, one
//! rank connected devx-style (QpModify only, no QpCreate), verbs-posted traffic on one QP, and
//! a QP seen both as verbs WRs and observed WQEs (counted once).

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;
use sigmatrace_convert::{stats, ConvertOptions};
use sigmatrace_schemas::records::*;
use sigmatrace_schemas::writer::{ChunkWriter, LogWriter, WriterOptions};

const RT0: u64 = 1_700_000_000_000_000_000;
const RANKS: usize = 4;
const COUNTER: (u64, u32) = (0x7f00_0000_1000, 0x301);
const FA: u8 = 0x12;
const WRITE: u8 = 0x08;
const READ: u8 = 0x10;

fn snap(ns: u64) -> ClockSnapshot {
    common::snapshot(ns, RT0)
}

fn guid(node: u64) -> u64 {
    0x5346_4e00_0000_0000 | node
}

fn gid(node: u64) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&guid(node).to_be_bytes());
    g
}

/// A log being written (the chunk writer is dropped before the log writer).
struct Log {
    t: ChunkWriter,
    _w: LogWriter,
}

fn open(dir: &Path, rank: usize) -> (Log, PathBuf) {
    let path = dir.join(format!("rank{rank}.sigmatrace"));
    let header = common::log_header(1000 + rank as u32, rank as u32, snap(1_000));
    let w = LogWriter::create(
        &path,
        &header,
        WriterOptions {
            chunk_size: 1 << 16,
            max_bytes: 1 << 28,
            ..Default::default()
        },
    )
    .unwrap();
    let t = w.thread_writer(1);
    (Log { t, _w: w }, path)
}

/// softnic numbering: every node's QPNs start at 256; rank r's QP towards peer p is created
/// in peer order, rank 0 adds a loopback pair after its peer QPs.
fn qpn_to(rank: usize, peer: usize) -> u32 {
    if rank == peer {
        return 256 + (RANKS as u32 - 1);
    }
    256 + (0..peer).filter(|&x| x != rank).count() as u32
}
const LOOP_TARGET: u32 = 256 + RANKS as u32;

fn modify(t: &mut ChunkWriter, ts: u64, qpn: u32, dest: u32, node: u64) {
    // RTR with destination QPN and address (what ibv_modify_qp records; for the devx rank the
    // interposer records the decoded INIT2RTR the same way).
    t.append(&QpModify {
        hdr: RecordHeader::of::<QpModify>(1 | 1 << 7 | 1 << 20),
        ts,
        qpn,
        new_state: 2,
        path_mtu: 3,
        port: 1,
        dest_qpn: dest,
        dlid: node as u16 + 1,
        is_global: 1,
        dgid: gid(node),
        ..Default::default()
    });
}

/// Appends an observed WQE; `target` = (remote address, rkey, atomic operand).
fn wqe(
    t: &mut ChunkWriter,
    ts: u64,
    qpn: u32,
    idx: u16,
    opcode: u8,
    bytes: u32,
    target: (u64, u32, u64),
) {
    t.append(&WqeObserved {
        hdr: RecordHeader::of::<WqeObserved>(0),
        ts,
        remote_addr: target.0,
        compare_add: target.2,
        qpn,
        bytes,
        rkey: target.1,
        wqe_index: idx,
        opcode,
        ds: if opcode == FA { 4 } else { 3 },
        fm_ce_se: 8,
        ..Default::default()
    });
}

/// Ground truth of the generated run.
struct Truth {
    /// Per round: arrival time (log ts) of each rank.
    arrivals: Vec<[u64; RANKS]>,
    /// Payload bytes src → dst.
    bytes: [[u64; RANKS]; RANKS],
}

fn generate(dir: &Path) -> (Vec<PathBuf>, Truth) {
    let rounds = 6;
    // Rank r's delay in round e: rotating, plus a per-round jitter.
    let arrivals: Vec<[u64; RANKS]> = (0..rounds)
        .map(|e| {
            let base = 10_000_000 + e as u64 * 5_000_000;
            std::array::from_fn(|r| {
                base + ((r + e) % RANKS) as u64 * 700_000 + (r * 13 + e * 7) as u64
            })
        })
        .collect();
    let mut bytes = [[0u64; RANKS]; RANKS];
    let mut paths = Vec::new();
    for r in 0..RANKS {
        let (mut log, path) = open(dir, r);
        let node = r as u64 + 1;
        let t = &mut log.t;
        t.append(&snap(2_000));
        t.append(&DeviceOpen {
            hdr: RecordHeader::of::<DeviceOpen>(0),
            ts: 3_000,
            context: 0xc0de,
            guid: guid(node),
            name: *b"softnic0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        });
        connect(t, r, node);
        let mut idx = [0u16; RANKS];
        barrier_rounds(t, r, &arrivals, &mut idx, &mut bytes);
        verbs_posted(t, r, &mut idx, &mut bytes);
        t.append(&snap(70_000_000));
        drop(log);
        paths.push(path);
    }
    (paths, Truth { arrivals, bytes })
}

/// Rank `r`'s QPs to every rank (rank 0 also a loopback pair) and their connections.
fn connect(t: &mut ChunkWriter, r: usize, node: u64) {
    // Rank 2 builds its QPs with devx: the interposer records QpCreate variant 3 (devx)
    // with the context, the ring as QueueDiscovered, and the decoded transitions as
    // QpModify.
    let devx = r == 2;
    let mut qps: Vec<u32> = (0..RANKS).map(|p| qpn_to(r, p)).collect();
    if r == 0 {
        qps.push(LOOP_TARGET);
    }
    for &q in &qps {
        t.append(&QpCreate {
            hdr: RecordHeader::of::<QpCreate>(2 | if devx { 3 << 8 } else { 0 }),
            ts: 4_000,
            qp: 0xa000 + q as u64,
            context: 0xc0de,
            qpn: q,
            max_send_wr: 256,
            ..Default::default()
        });
        if devx {
            t.append(&QueueDiscovered {
                hdr: RecordHeader::of::<QueueDiscovered>(1 | 2 << 16),
                ts: 4_100,
                base: 0x10_0000 + q as u64 * 0x1_0000,
                dbrec: 0x20_0000 + q as u64 * 64,
                doorbell: 0x30_0800,
                number: q,
                depth: 256,
                stride: 64,
                cqn: q + 0x100,
            });
        }
    }
    for p in 0..RANKS {
        let q = qpn_to(r, p);
        if p == r {
            if r == 0 {
                modify(t, 5_000, q, LOOP_TARGET, node);
                modify(t, 5_000, LOOP_TARGET, q, node);
            }
        } else {
            modify(t, 5_000, q, qpn_to(p, r), p as u64 + 1);
        }
    }
}

/// The next WQE index of rank `r`'s QP to rank `p`.
fn next_index(idx: &mut [u16; RANKS], p: usize) -> u16 {
    idx[p] = idx[p].wrapping_add(1);
    idx[p] - 1
}

/// Rank `r`'s observed WQEs of every round: payload writes (and rank 3's reads), then its
/// barrier FETCH_ADD.
#[allow(clippy::needless_range_loop)]
fn barrier_rounds(
    t: &mut ChunkWriter,
    r: usize,
    arrivals: &[[u64; RANKS]],
    idx: &mut [u16; RANKS],
    bytes: &mut [[u64; RANKS]; RANKS],
) {
    // Payload: rank r writes (r+1)·(p+1)·1000 bytes to p in 4 WQEs, before each barrier.
    for (e, arr) in arrivals.iter().enumerate() {
        for p in 0..RANKS {
            // Rank 1's QP to rank 2 carries only verbs-posted traffic (below).
            if p == r || (r, p) == (1, 2) {
                continue;
            }
            for k in 0..4u64 {
                let b = ((r + 1) * (p + 1) * 250) as u32;
                let ts = arr[r] - 100_000 + k * 1_000 + p as u64 * 10;
                wqe(
                    t,
                    ts,
                    qpn_to(r, p),
                    next_index(idx, p),
                    WRITE,
                    b,
                    (0x9000, 0x77, 0),
                );
                bytes[r][p] += b as u64;
            }
        }
        // Rank 3 also READs 4096 bytes from rank 1 every round (data flows 1 → 3).
        if r == 3 {
            wqe(
                t,
                arr[r] - 50_000,
                qpn_to(3, 1),
                next_index(idx, 1),
                READ,
                4096,
                (0x9000, 0x77, 0),
            );
            bytes[1][3] += 4096;
        }
        let add = 1 | (((e + r) % 2) as u64) << 32;
        wqe(
            t,
            arr[r],
            qpn_to(r, 0),
            next_index(idx, 0),
            FA,
            8,
            (COUNTER.0, COUNTER.1, add),
        );
        if r == 0 {
            // A private atomic target only rank 0 uses: not a barrier.
            wqe(
                t,
                arr[r] + 10,
                qpn_to(0, 1),
                next_index(idx, 1),
                FA,
                8,
                (0x5555_0000, 0x99, 1),
            );
        }
    }
}

/// A signalled RDMA WRITE of `bytes` posted through verbs on `qpn` at `ts`.
fn verbs_write(t: &mut ChunkWriter, ts: u64, qpn: u32, wr_id: u64, bytes: u32) {
    t.append(&PostSend {
        hdr: RecordHeader::of::<PostSend>(2),
        ts,
        wr_id,
        qpn,
        bytes,
        opcode: 0,
        num_sge: 1,
        ..Default::default()
    });
}

/// The completion of [`verbs_write`] `wr_id` at `ts` (CQ 0xcc).
fn write_completed(t: &mut ChunkWriter, ts: u64, qpn: u32, wr_id: u64) {
    t.append(&WorkCompletion {
        hdr: RecordHeader::of::<WorkCompletion>(0),
        ts,
        wr_id,
        cq: 0xcc,
        qpn,
        opcode: 1,
        ..Default::default()
    });
}

/// Verbs-posted traffic: rank 1's writes to rank 2 (counted from completions) and rank 2's
/// writes to rank 3, posted and also observed.
fn verbs_posted(
    t: &mut ChunkWriter,
    r: usize,
    idx: &mut [u16; RANKS],
    bytes: &mut [[u64; RANKS]; RANKS],
) {
    if r == 1 {
        // Verbs-posted writes 1 → 2 on its QP to rank 2 (no observed WQEs there): counted
        // from completions. Plus a verbs FETCH_AND_ADD that is not a barrier.
        let q = qpn_to(1, 2);
        for k in 0..5u64 {
            let ts = 60_000_000 + k * 1_000;
            verbs_write(t, ts, q, k, 3000);
            write_completed(t, ts + 500, q, k);
        }
        bytes[1][2] += 5 * 3000;
    }
    if r == 2 {
        // A QP both posted through verbs and observed in its ring (2 → 3): observed WQEs
        // win, the WRs are not counted again.
        let q = qpn_to(2, 3);
        for k in 0..3u64 {
            let ts = 61_000_000 + k * 1_000;
            verbs_write(t, ts, q, k, 512);
            wqe(
                t,
                ts + 100,
                q,
                next_index(idx, 3),
                WRITE,
                512,
                (0x9000, 0x77, 0),
            );
            write_completed(t, ts + 500, q, k);
            bytes[2][3] += 512;
        }
    }
}

fn skew_of(m: &[[u64; RANKS]; RANKS]) -> (f64, f64, f64) {
    let mut links = Vec::new();
    let (mut inn, mut out) = ([0f64; RANKS], [0f64; RANKS]);
    for (i, row) in m.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            if i != j {
                links.push(v as f64);
                inn[j] += v as f64;
                out[i] += v as f64;
            }
        }
    }
    let r = |v: &[f64]| {
        v.iter().copied().fold(0.0, f64::max) / (v.iter().sum::<f64>() / v.len() as f64)
    };
    (r(&links), r(&inn), r(&out))
}

#[test]
fn barriers_and_skew_match_generated_truth() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, truth) = generate(dir.path());
    let rep = stats(
        &paths,
        &ConvertOptions {
            jobs: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let j = rep.json();
    assert!(
        rep.topology.unmatched_qps.is_empty(),
        "unmatched {:?}",
        rep.topology.unmatched_qps
    );
    assert!(
        rep.topology.ambiguous_qps.is_empty(),
        "ambiguous {:?}",
        rep.topology.ambiguous_qps
    );

    // Barriers: exactly the generated rounds, in order, with exact spreads and slowest ranks.
    let rounds = j["barriers"]["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), truth.arrivals.len(), "{:#}", j["barriers"]);
    for (e, (r, want)) in rounds.iter().zip(&truth.arrivals).enumerate() {
        assert_eq!(r["target"]["rank"], 0);
        assert_eq!(r["target"]["raddr"], COUNTER.0);
        assert_eq!(r["target"]["rkey"], COUNTER.1);
        assert_eq!(r["index"], e);
        let arr = r["arrivals"].as_array().unwrap();
        assert_eq!(arr.len(), RANKS);
        for a in arr {
            let rank = a["rank"].as_u64().unwrap() as usize;
            let t = a["t_ns"].as_i64().unwrap();
            let exp = (RT0 + want[rank]) as i64;
            assert!((t - exp).abs() <= 2, "round {e} rank {rank}: {t} vs {exp}");
        }
        let max = *want.iter().max().unwrap();
        let min = *want.iter().min().unwrap();
        let spread = r["spread_ns"].as_i64().unwrap();
        assert!(
            (spread - (max - min) as i64).abs() <= 2,
            "round {e}: spread {spread} vs {}",
            max - min
        );
        let slowest = want.iter().position(|&t| t == max).unwrap();
        assert_eq!(r["slowest_rank"], slowest as u64, "round {e}");
    }
    let text = rep.text();
    assert!(text.contains("== Barriers"), "{text}");
    assert!(text.contains("== Inter-node traffic skew"), "{text}");

    // Skew: exact byte matrix per node (one process per simulated node) and per rank.
    let s = &j["skew"];
    assert_eq!(s["nodes"].as_array().unwrap().len(), RANKS, "{s:#}");
    for (i, row) in truth.bytes.iter().enumerate() {
        for (k, &want) in row.iter().enumerate() {
            assert_eq!(s["rank_bytes"][i][k], want, "rank {i} → {k}");
            assert_eq!(s["node_bytes"][i][k], want, "node {i} → {k}");
        }
    }
    assert_eq!(s["unattributed_bytes"], 0);
    let (link, inn, out) = skew_of(&truth.bytes);
    let f = |v: &Value| v.as_f64().unwrap();
    assert!((f(&s["node_skew"]["link"]) - link).abs() < 1e-9);
    assert!((f(&s["node_skew"]["node_in"]) - inn).abs() < 1e-9);
    assert!((f(&s["node_skew"]["node_out"]) - out).abs() < 1e-9);
    assert_eq!(s["completed_wrs"], 5, "the verbs-only QP's completed WRs");
}

#[test]
fn no_barrier_without_two_processes_on_a_target() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, path) = open(dir.path(), 0);
    log.t.append(&snap(2_000));
    modify(&mut log.t, 5_000, 300, LOOP_TARGET, 1);
    modify(&mut log.t, 5_000, LOOP_TARGET, 300, 1);
    for k in 0..10 {
        wqe(
            &mut log.t,
            10_000 + k * 100,
            300,
            k as u16,
            FA,
            8,
            (COUNTER.0, COUNTER.1, 1),
        );
    }
    log.t.append(&snap(20_000));
    drop(log);
    let rep = stats(&[path], &ConvertOptions::default()).unwrap();
    let j = rep.json();
    assert_eq!(j["barriers"]["rounds"].as_array().unwrap().len(), 0);
    assert!(rep.text().contains("no barrier rounds"));
    assert_eq!(j["skew"]["observed_wqes"], 10);
}
