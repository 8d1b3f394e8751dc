//! The GPU-initiated-style workloads (`bfs`, `moe`) on 4 softnic nodes, through both direct
//! construction paths (mlx5dv_init_obj, devx + umem) and plain verbs posting: each run must
//! verify its own results (the binaries exit non-zero otherwise), and its ground truth and WQE
//! bookkeeping must be complete and consistent with the configuration.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{run_ranks, Tracing};
use serde_json::Value;
use sigmatrace_examples::cluster::Bookkeeping;
use sigmatrace_examples::mlx5::{op, CE_CQE_ALWAYS};

const RANKS: u32 = 4;
const LIMIT: Duration = Duration::from_secs(240);
const DELAYS: [u64; 4] = [0, 2000, 4000, 6000];

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{v} is not an unsigned integer"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

/// Structural checks every QP's bookkeeping must pass, whatever the workload.
fn check_books(books: &[Bookkeeping], mode: &str, direct: bool) {
    for b in books {
        assert_eq!(b.mode.name(), mode);
        assert_eq!(b.total, b.qps.iter().map(|q| q.count).sum::<u64>());
        for q in &b.qps {
            assert_eq!(q.count as usize, q.wqes.len());
            for (k, w) in q.wqes.iter().enumerate() {
                assert_eq!(
                    w.index, k as u64,
                    "rank {} QP {:#x}: indices contiguous",
                    b.rank, q.qpn
                );
                assert_eq!(w.wqe_index, w.index as u16);
                let ds = match w.opcode {
                    op::RDMA_WRITE => 3,
                    op::ATOMIC_FA => 4,
                    o => panic!("rank {} posted unexpected opcode {o:#x}", b.rank),
                };
                assert_eq!(w.ds, ds);
                assert!(w.fm_ce_se == 0 || w.fm_ce_se == CE_CQE_ALWAYS);
                assert!(w.bytes > 0 && w.bytes % 8 == 0);
                assert_ne!(w.rkey, 0);
            }
            if let Some(last) = q.wqes.last() {
                assert_eq!(
                    last.fm_ce_se, CE_CQE_ALWAYS,
                    "the last WQE of a QP is signalled"
                );
            }
        }
        if direct {
            // Direct modes: rings of 256 WQEBBs; every QP's signalled WQEs are at most 64
            // apart (the poster forces a CQE every depth/4).
            for q in &b.qps {
                let mut since = 0;
                for w in &q.wqes {
                    since = if w.fm_ce_se == CE_CQE_ALWAYS {
                        0
                    } else {
                        since + 1
                    };
                    assert!(since < 64);
                }
            }
        }
    }
}

fn bfs(mode: &str) {
    let delays = DELAYS.map(|d| d.to_string()).join(",");
    let run = run_ranks(
        "bfs",
        mode,
        RANKS,
        &["--threads", "2", "--delays-us", &delays, "--rotate"],
        Tracing::Off,
        LIMIT,
        &[],
    );
    for (r, l) in run.logs.iter().enumerate() {
        assert!(
            l.contains("levels verified against serial BFS"),
            "rank {r}: {l}"
        );
    }
    let t = run.truth("bfs-truth.json");
    assert_eq!(u(&t["ranks"]), RANKS as u64);
    assert_eq!(t["mode"], mode);
    assert_eq!(
        u(&t["reached"]),
        u(&t["vertices"]),
        "the generated graph is connected"
    );
    let levels = u(&t["levels"]);
    assert!(levels >= 10, "a deep enough BFS ({levels} levels)");
    let rounds = t["rounds"].as_array().expect("rounds");
    // One barrier per level plus the final one that finds no rank active.
    assert_eq!(rounds.len() as u64, levels + 1);
    for (e, r) in rounds.iter().enumerate() {
        assert_eq!(u(&r["epoch"]), e as u64 + 1);
        let arr: Vec<u64> = r["arrivals_ns"].as_array().unwrap().iter().map(u).collect();
        assert_eq!(arr.len(), RANKS as usize);
        let (max, min) = (*arr.iter().max().unwrap(), *arr.iter().min().unwrap());
        assert_eq!(u(&r["spread_ns"]), max - min);
        assert_eq!(arr[u(&r["slowest_rank"]) as usize], max);
        let delays: Vec<u64> = r["delays_us"].as_array().unwrap().iter().map(u).collect();
        let want: Vec<u64> = (0..RANKS as usize).map(|k| DELAYS[(k + e) % 4]).collect();
        assert_eq!(delays, want, "rotated per-rank delays, round {}", e + 1);
        assert!(u(&r["last_arriver"]) < RANKS as u64);
    }
    let books = run.books(RANKS);
    check_books(&books, mode, mode != "verbs");
    let counter = &t["barrier_counter"];
    let mut active_per_round = vec![0u64; rounds.len()];
    let mut eight_byte_writes = 0;
    for b in &books {
        let fas: Vec<_> = b
            .qps
            .iter()
            .flat_map(|q| q.wqes.iter().map(move |w| (q, w)))
            .filter(|(_, w)| w.opcode == op::ATOMIC_FA)
            .collect();
        assert_eq!(
            fas.len(),
            rounds.len(),
            "rank {}: one FETCH_ADD per barrier",
            b.rank
        );
        for (k, (q, w)) in fas.iter().enumerate() {
            assert_eq!(q.peer_rank, 0, "the barrier counter lives on rank 0");
            assert_eq!(q.role, if b.rank == 0 { "loopback" } else { "peer" });
            assert_eq!(
                (w.raddr, w.rkey as u64),
                (u(&counter["addr"]), u(&counter["rkey"]))
            );
            assert_eq!(w.bytes, 8);
            assert_eq!(w.compare_add & 0xffff_ffff, 1);
            active_per_round[k] += w.compare_add >> 32;
        }
        eight_byte_writes += b
            .qps
            .iter()
            .flat_map(|q| &q.wqes)
            .filter(|w| w.opcode == op::RDMA_WRITE && w.bytes == 8)
            .count();
    }
    assert_eq!(
        *active_per_round.last().unwrap(),
        0,
        "the last barrier ends the BFS"
    );
    assert!(active_per_round[..rounds.len() - 1].iter().all(|&a| a > 0));
    // The last arriver of every round releases the 3 others with an 8-byte WRITE (frontier
    // bitmaps are 64 bytes per worker here, so no other write is 8 bytes).
    assert_eq!(eight_byte_writes, rounds.len() * 3);
}

#[test]
fn bfs_initobj_four_nodes() {
    bfs("initobj");
}

#[test]
fn bfs_devx_four_nodes() {
    bfs("devx");
}

#[test]
fn bfs_verbs_four_nodes() {
    bfs("verbs");
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(f).collect())
        .collect()
}

fn moe(mode: &str, skew_args: &[&str]) -> Value {
    let mut args = vec![
        "--threads",
        "2",
        "--tokens",
        "512",
        "--topk",
        "2",
        "--experts-per-rank",
        "4",
        "--hidden",
        "256",
        "--iters",
        "2",
        "--signal-every",
        "8",
    ];
    args.extend_from_slice(skew_args);
    let run = run_ranks("moe", mode, RANKS, &args, Tracing::Off, LIMIT, &[]);
    for (r, l) in run.logs.iter().enumerate() {
        assert!(
            l.contains("dispatched and combined, results verified"),
            "rank {r}: {l}"
        );
    }
    let t = run.truth("moe-truth.json");
    assert_eq!(t["mode"], mode);
    let (iters, hidden) = (u(&t["iters"]), u(&t["hidden"]));
    let q: Vec<u64> = t["pairs_per_expert"]
        .as_array()
        .unwrap()
        .iter()
        .map(u)
        .collect();
    assert_eq!(q.len(), 16);
    assert_eq!(
        q.iter().sum::<u64>(),
        512 * 2,
        "every (token, k) pair routed once"
    );
    // The routed traffic follows the configured skew within 1 %.
    for k in ["link", "node_in", "node_out"] {
        let (c, p) = (f(&t["configured"]["skew"][k]), f(&t["payload"]["skew"][k]));
        assert!(
            (p - c).abs() <= 0.01 * c,
            "{k} skew: routed {p} vs configured {c}"
        );
        assert!(c > 1.2, "{k} skew {c}: the configuration is skewed");
    }
    let payload = matrix(&t["payload"]["bytes"]);
    let posted = matrix(&t["posted"]["bytes"]);
    let books = run.books(RANKS);
    check_books(&books, mode, mode != "verbs");
    for b in &books {
        assert!(b.qps.iter().all(|q| q.role == "peer"));
        for q in &b.qps {
            let (i, j) = (b.rank as usize, q.peer_rank as usize);
            let bytes: u64 = q.wqes.iter().map(|w| w.bytes as u64).sum();
            assert_eq!(
                bytes as f64, posted[i][j],
                "rank {i} → {j}: bookkeeping = truth"
            );
            // Payload plus one 8-byte dispatch flag and one combine flag per iteration.
            assert_eq!(bytes as f64, payload[i][j] + (16 * iters) as f64);
            let payload_wqes = q.wqes.iter().filter(|w| w.bytes as u64 == hidden).count();
            assert_eq!(payload_wqes as f64 * hidden as f64, payload[i][j]);
            assert_eq!(
                q.wqes.iter().filter(|w| w.bytes == 8).count() as u64,
                2 * iters
            );
            if mode != "verbs" {
                assert!(
                    q.wqes.iter().any(|w| w.fm_ce_se == 0),
                    "selective signalling"
                );
            }
        }
    }
    // Rank 0 hosts the most popular experts: the busiest QP wraps its 256-WQEBB ring.
    let max_index = books
        .iter()
        .flat_map(|b| &b.qps)
        .map(|q| q.count)
        .max()
        .unwrap();
    assert!(
        max_index > 256,
        "ring wrap-around ({max_index} WQEs on one QP)"
    );
    t
}

#[test]
fn moe_initobj_zipf_four_nodes() {
    let t = moe("initobj", &["--zipf", "1.2"]);
    assert_eq!(f(&t["zipf"]), 1.2);
}

#[test]
fn moe_devx_zipf_four_nodes() {
    moe("devx", &["--zipf", "1.1"]);
}

#[test]
fn moe_verbs_explicit_weights_four_nodes() {
    let w = "8,4,2,1,1,1,1,1,1,1,1,1,1,1,1,1";
    let t = moe("verbs", &["--expert-weights", w]);
    let nw: Vec<f64> = t["node_weights"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    let want = [15.0 / 27.0, 4.0 / 27.0, 4.0 / 27.0, 4.0 / 27.0];
    for (a, b) in nw.iter().zip(want) {
        assert!((a - b).abs() < 1e-12);
    }
    let mut by_expert = BTreeMap::new();
    for (e, q) in t["pairs_per_expert"].as_array().unwrap().iter().enumerate() {
        by_expert.insert(e, u(q));
    }
    // 1024 pairs by weights 8:4:2:1×13 (sum 27): 303.4, 151.7, 75.9, 37.9 — the 14 pairs left
    // after flooring go to the largest remainders (the thirteen 37.9s, then 75.9).
    assert_eq!(by_expert[&0], 303);
    assert_eq!(by_expert[&1], 151);
    assert_eq!(by_expert[&2], 76);
    assert!((3..16).all(|e| by_expert[&e] == 38));
}
