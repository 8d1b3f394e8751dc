//! Checks of what SigmaTrace observed against a workload's own bookkeeping and ground truth:
//! every posted WQE observed exactly once with identical content, every ring discovered, and
//! `sigmatrace-convert stats` barrier rounds / traffic skew equal to the ground truth.
//! Shared by the self-observation, interposer verbs-mode and interposer end-to-end tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sigmatrace_examples::cluster::Bookkeeping;
use sigmatrace_examples::mlx5::{op, CE_CQE_ALWAYS};
use sigmatrace_schemas::records::{
    discovery, queue_kind, CqeObserved, PostSend, QueueDiscovered, Record, WqeObserved,
};
use sigmatrace_schemas::LogFile;

use super::artifact;

/// What one process's log holds that these checks use.
#[derive(Default)]
pub struct ProcLog {
    pub path: PathBuf,
    /// Observed WQEs per QPN, in log order.
    pub wqes: BTreeMap<u32, Vec<WqeObserved>>,
    /// Verbs-posted WRs per QPN, in log order.
    pub posts: BTreeMap<u32, Vec<PostSend>>,
    /// Observed CQEs per QPN, in log order.
    pub cqes: BTreeMap<u32, Vec<CqeObserved>>,
    pub queues: Vec<QueueDiscovered>,
    /// WQEBBs reported overwritten before they were seen (send-ring `ObserveOverrun`s).
    pub wqebbs_lost: u64,
    /// CQEs reported lost (CQ `ObserveOverrun`s).
    pub cqes_lost: u64,
    /// Kernel launches the interposer's hooked driver entry points recorded, and how many of
    /// them have an execution span (`KernelExec`).
    pub kernel_launches: u64,
    pub kernel_execs: u64,
}

/// Every `.sigmalog` under `dir`, by header rank.
pub fn read_logs(dir: &Path) -> BTreeMap<u32, ProcLog> {
    let mut out = BTreeMap::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sigmalog"))
        .collect();
    paths.sort();
    for path in paths {
        let log = LogFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let rank = log
            .header()
            .rank
            .rank
            .unwrap_or_else(|| panic!("{}: no rank in the header", path.display()));
        let mut p = ProcLog {
            path: path.clone(),
            ..Default::default()
        };
        for c in log.chunks() {
            for raw in log.records(c) {
                let raw = raw.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                match raw.decode() {
                    Ok(Record::WqeObserved(w)) => p.wqes.entry(w.qpn).or_default().push(*w),
                    Ok(Record::QueueDiscovered(q)) => p.queues.push(*q),
                    Ok(Record::PostSend(w)) => p.posts.entry(w.qpn).or_default().push(*w),
                    Ok(Record::CqeObserved(c)) => p.cqes.entry(c.qpn).or_default().push(*c),
                    Ok(Record::ObserveOverrun(o)) if o.hdr.aux & 0xff == queue_kind::SEND => {
                        p.wqebbs_lost += o.lost;
                    }
                    Ok(Record::ObserveOverrun(o)) => p.cqes_lost += o.lost,
                    Ok(Record::KernelLaunch(_)) => p.kernel_launches += 1,
                    Ok(Record::KernelExec(_)) => p.kernel_execs += 1,
                    _ => {}
                }
            }
        }
        assert!(
            out.insert(rank, p).is_none(),
            "two logs claim rank {rank} in {}",
            dir.display()
        );
    }
    out
}

/// Every WQE of every rank's bookkeeping was observed exactly once, in ring order, with the
/// same content, and every signalled one's CQE too; nothing else was observed; nothing was
/// lost; every send ring was discovered by `expect_discovery` (`discovery::INIT_OBJ` or
/// `DEVX`).
pub fn check_exactly_once(
    books: &[Bookkeeping],
    logs: &BTreeMap<u32, ProcLog>,
    expect_discovery: u32,
) {
    assert_eq!(logs.len(), books.len(), "one log per rank");
    let mut total = 0;
    for b in books {
        let log = logs
            .get(&b.rank)
            .unwrap_or_else(|| panic!("no log of rank {}", b.rank));
        assert_eq!(
            log.wqebbs_lost,
            0,
            "rank {}: {} WQEBBs reported lost ({})",
            b.rank,
            log.wqebbs_lost,
            log.path.display()
        );
        assert_eq!(log.cqes_lost, 0, "rank {}: CQEs reported lost", b.rank);
        for q in &b.qps {
            let seen = log.wqes.get(&q.qpn).map(Vec::as_slice).unwrap_or(&[]);
            assert_eq!(
                seen.len(),
                q.wqes.len(),
                "rank {} QP {:#x}: observed {} WQEs, posted {}",
                b.rank,
                q.qpn,
                seen.len(),
                q.wqes.len()
            );
            for (w, o) in q.wqes.iter().zip(seen) {
                let got = (
                    o.wqe_index,
                    o.opcode,
                    o.bytes,
                    o.remote_addr,
                    o.rkey,
                    o.compare_add,
                    o.fm_ce_se,
                    o.ds,
                );
                let want = (
                    w.wqe_index,
                    w.opcode,
                    w.bytes,
                    w.raddr,
                    w.rkey,
                    w.compare_add,
                    w.fm_ce_se,
                    w.ds,
                );
                assert_eq!(got, want, "rank {} QP {:#x} WQE {}", b.rank, q.qpn, w.index);
            }
            // One requester CQE per signalled WQE, naming it, in order, none an error.
            let signalled: Vec<u16> = q
                .wqes
                .iter()
                .filter(|w| w.fm_ce_se == CE_CQE_ALWAYS)
                .map(|w| w.wqe_index)
                .collect();
            let cqes: Vec<u16> = log
                .cqes
                .get(&q.qpn)
                .map(|v| v.iter().map(|c| c.wqe_counter).collect())
                .unwrap_or_default();
            assert_eq!(
                cqes, signalled,
                "rank {} QP {:#x}: observed CQEs",
                b.rank, q.qpn
            );
            for c in log.cqes.get(&q.qpn).into_iter().flatten() {
                assert_eq!(
                    c.opcode, 0,
                    "rank {} QP {:#x}: requester CQE",
                    b.rank, q.qpn
                );
            }
            total += q.wqes.len();
            let ring = log
                .queues
                .iter()
                .find(|d| d.number == q.qpn && d.hdr.aux & 0xff == queue_kind::SEND);
            let ring = ring.unwrap_or_else(|| {
                panic!("rank {} QP {:#x}: send ring not discovered", b.rank, q.qpn)
            });
            assert_eq!(
                (ring.hdr.aux >> 16) & 0xff,
                expect_discovery,
                "discovery path"
            );
            assert_eq!(ring.stride, 64);
            if expect_discovery == discovery::DEVX {
                assert!(
                    log.queues
                        .iter()
                        .any(|d| d.hdr.aux & 0xff == queue_kind::UAR),
                    "rank {}: devx UAR discovered",
                    b.rank
                );
            }
        }
        let booked: Vec<u32> = b.qps.iter().map(|q| q.qpn).collect();
        for (qpn, ws) in &log.wqes {
            assert!(
                booked.contains(qpn) || ws.is_empty(),
                "rank {}: {} WQEs observed on QP {qpn:#x} the workload never posted to",
                b.rank,
                ws.len()
            );
        }
    }
    assert!(total > 0);
}

/// Verbs mode: every WR of the bookkeeping was recorded exactly once by the interposer as a
/// `PostSend` with the same opcode, length, remote address, rkey, atomic operand and
/// signalling; no WQE was "observed" (nothing bypassed verbs).
pub fn check_posted_exactly_once(books: &[Bookkeeping], logs: &BTreeMap<u32, ProcLog>) {
    const IBV_WR_RDMA_WRITE: u8 = 0;
    const IBV_WR_ATOMIC_FETCH_AND_ADD: u8 = 6;
    const IBV_SEND_SIGNALED: u32 = 2;
    assert_eq!(logs.len(), books.len(), "one log per rank");
    for b in books {
        let log = &logs[&b.rank];
        assert!(
            log.wqes.is_empty(),
            "rank {}: WQEs observed in verbs mode",
            b.rank
        );
        for q in &b.qps {
            // Worker threads post to the same QP and each writes its own chunks: order by
            // wr_id (= the workload's index).
            let mut seen = log.posts.get(&q.qpn).cloned().unwrap_or_default();
            seen.sort_by_key(|p| p.wr_id);
            assert_eq!(
                seen.len(),
                q.wqes.len(),
                "rank {} QP {:#x}: PostSend records",
                b.rank,
                q.qpn
            );
            for (w, p) in q.wqes.iter().zip(&seen) {
                let opcode = match w.opcode {
                    op::RDMA_WRITE => IBV_WR_RDMA_WRITE,
                    op::ATOMIC_FA => IBV_WR_ATOMIC_FETCH_AND_ADD,
                    o => panic!("unexpected opcode {o:#x}"),
                };
                assert_eq!(p.wr_id, w.index);
                assert_eq!(
                    (p.opcode, p.bytes, p.remote_addr, p.rkey, p.compare_add),
                    (opcode, w.bytes, w.raddr, w.rkey, w.compare_add),
                    "rank {} QP {:#x} WR {}",
                    b.rank,
                    q.qpn,
                    w.index
                );
                assert_eq!(
                    p.hdr.aux & IBV_SEND_SIGNALED != 0,
                    w.fm_ce_se == CE_CQE_ALWAYS
                );
            }
        }
    }
}

/// Every send-side CQE is logged after the WQEs it retires: per QP, the first requester CQE
/// whose `wqe_counter` covers a WQE has a later time than the WQE. (A poll pass that read a
/// CQ before the send ring logged completions of WQEs it had not seen yet: their slices then
/// stayed open until a later CQE.)
pub fn check_completions_after_their_wqes(logs: &BTreeMap<u32, ProcLog>) {
    use sigmatrace_mlx5::cqe::opcode as cqe_op;
    let mut checked = 0usize;
    for (rank, log) in logs {
        for (qpn, wqes) in &log.wqes {
            let cqes: Vec<&CqeObserved> = log
                .cqes
                .get(qpn)
                .map(|v| {
                    v.iter()
                        .filter(|c| c.opcode == cqe_op::REQ || c.opcode == cqe_op::REQ_ERR)
                        .collect()
                })
                .unwrap_or_default();
            let mut j = 0;
            for w in wqes {
                while j < cqes.len() && cqes[j].wqe_counter.wrapping_sub(w.wqe_index) >= 0x8000 {
                    j += 1;
                }
                let Some(c) = cqes.get(j) else { break };
                assert!(
                    c.ts > w.ts,
                    "rank {rank} QP {qpn:#x}: WQE {} (ts {}) logged after the CQE retiring it \
                     (counter {}, ts {})",
                    w.wqe_index,
                    w.ts,
                    c.wqe_counter,
                    c.ts
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no WQE with a completion to check");
}

/// Every one-sided WQE (write, read, atomic) the ranks posted — all to traced peers — is
/// drawn as an inferred arrival on its target QP: the conversion's `inferred` total equals
/// the count from the workloads' own bookkeeping, and the trace (converted to `trace`) passes
/// the project's checker with that many slices at least.
pub fn check_inferred(dir: &Path, books: &[Bookkeeping], trace: &Path) {
    let one_sided = |o: u8| {
        [
            op::RDMA_WRITE,
            op::RDMA_WRITE_IMM,
            op::RDMA_READ,
            op::ATOMIC_CS,
            op::ATOMIC_FA,
        ]
        .contains(&o)
    };
    let want = books
        .iter()
        .flat_map(|b| &b.qps)
        .flat_map(|q| &q.wqes)
        .filter(|w| one_sided(w.opcode))
        .count() as u64;
    assert!(want > 0, "the workload posts one-sided WQEs");
    let st = Command::new(artifact("sigmatrace-convert"))
        .arg(dir)
        .arg("-o")
        .arg(trace)
        .status()
        .expect("run sigmatrace-convert");
    assert!(st.success(), "sigmatrace-convert failed");
    let stats = stats_json(dir);
    let got = stats["summary"]["totals"]["inferred"].as_u64();
    assert_eq!(
        got,
        Some(want),
        "inferred arrivals against one-sided WQEs posted"
    );
    sigmatrace_testkit::trace::validate(trace, &[&format!("slices={want}")]);
}

/// `sigmatrace-convert stats --json` over the logs in `dir`.
pub fn stats_json(dir: &Path) -> Value {
    let out = Command::new(artifact("sigmatrace-convert"))
        .arg("stats")
        .arg("--json")
        .arg(dir)
        .output()
        .expect("run sigmatrace-convert");
    assert!(
        out.status.success(),
        "sigmatrace-convert stats failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stats JSON")
}

/// How early an observed arrival may be against the workload's own stamp (ns): each process's
/// log time is mapped to REALTIME through its own clock snapshots, good to well under 1 ms;
/// 5 ms leaves room for a preempted snapshot.
pub const CLOCK_SLACK_NS: i64 = 5_000_000;

/// Barrier rounds of `stats` against the BFS ground truth, with fixed tolerances. An observed
/// arrival is the true one plus the observation delay `d` (post → first seen in the ring, ~0
/// for verbs posts) plus the clock mapping's error:
///
/// * same number of rounds, each on the barrier counter of the truth;
/// * every `d` within `[-CLOCK_SLACK_NS, max_delay_ns]` — `max_delay_ns` is a fixed bound
///   per observation path (the callers'), not the delays a run happened to measure;
/// * observed spread within `max_delay_ns + CLOCK_SLACK_NS` of the true spread;
/// * the slowest rank equal to the true one in every round whose true margin (slowest minus
///   second slowest) exceeds that same tolerance — with the ranks' configured delays (the
///   truth's `delays_us`) further apart than the tolerance by at least half of it, at least
///   half of the rounds must be that decisive.
pub fn check_barriers(stats: &Value, truth: &Value, max_delay_ns: i64) {
    let rounds = stats["barriers"]["rounds"]
        .as_array()
        .expect("barrier rounds");
    let want = truth["rounds"].as_array().expect("truth rounds");
    assert_eq!(
        rounds.len(),
        want.len(),
        "barrier rounds: {:#}",
        stats["barriers"]
    );
    let spacing = delay_spacing_ns(want);
    assert!(
        3 * (max_delay_ns + CLOCK_SLACK_NS) <= 2 * spacing,
        "tolerances of {} ns against the workload's {spacing} ns barrier delay spacing decide nothing",
        max_delay_ns + CLOCK_SLACK_NS
    );
    let counter = &truth["barrier_counter"];
    let mut decisive = 0;
    for (r, w) in rounds.iter().zip(want) {
        let e = w["epoch"].as_u64().unwrap();
        assert_eq!(r["target"]["rank"], truth["barrier_rank"], "round {e}");
        assert_eq!(r["target"]["raddr"], counter["addr"]);
        assert_eq!(r["target"]["rkey"], counter["rkey"]);
        let arr = r["arrivals"].as_array().unwrap();
        let real: Vec<i64> = w["arrivals_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(arr.len(), real.len());
        let mut delays = vec![0i64; real.len()];
        for a in arr {
            let rank = a["rank"].as_u64().unwrap() as usize;
            let d = a["t_ns"].as_i64().unwrap() - real[rank];
            assert!(
                (-CLOCK_SLACK_NS..=max_delay_ns).contains(&d),
                "round {e} rank {rank}: observed {d} ns after the post (allowed -{CLOCK_SLACK_NS} ..= {max_delay_ns} ns)"
            );
            delays[rank] = d;
        }
        let slack = max_delay_ns + CLOCK_SLACK_NS;
        let (obs, spread) = (
            r["spread_ns"].as_i64().unwrap(),
            w["spread_ns"].as_i64().unwrap(),
        );
        assert!(
            (obs - spread).abs() <= slack,
            "round {e}: spread observed {obs} ns, true {spread} ns, delays {delays:?} ns"
        );
        let mut sorted = real.clone();
        sorted.sort_unstable();
        let margin = sorted[sorted.len() - 1] - sorted[sorted.len() - 2];
        if margin > slack {
            decisive += 1;
            assert_eq!(
                r["slowest_rank"], w["slowest_rank"],
                "round {e}: slowest rank (true margin {margin} ns, delays {delays:?} ns)"
            );
        }
    }
    assert!(
        2 * decisive >= rounds.len(),
        "only {decisive} of {} rounds had a slowest rank clear of the observation delays",
        rounds.len()
    );
}

/// The smallest gap between two ranks' configured barrier delays in any round of the truth
/// (ns): what separates the slowest rank from the second slowest before compute jitter.
fn delay_spacing_ns(rounds: &[Value]) -> i64 {
    rounds
        .iter()
        .flat_map(|w| {
            let mut d: Vec<i64> = w["delays_us"]
                .as_array()
                .expect("truth delays_us")
                .iter()
                .map(|v| v.as_i64().unwrap() * 1000)
                .collect();
            d.sort_unstable();
            d.windows(2).map(|p| p[1] - p[0]).collect::<Vec<_>>()
        })
        .min()
        .expect("truth rounds of at least two ranks")
}

/// The `stats` skew section equals the MoE ground truth: the node × node byte matrix exactly
/// (what the workload posted), and the skews within 1 % of the configured ones.
pub fn check_skew(stats: &Value, truth: &Value) {
    let s = &stats["skew"];
    let n = truth["ranks"].as_u64().unwrap() as usize;
    assert_eq!(
        s["nodes"].as_array().unwrap().len(),
        n,
        "one node per rank: {s:#}"
    );
    let node_of: Vec<u64> = s["node_of_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let ranks: Vec<String> = s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    for i in 0..n {
        for j in 0..n {
            let (pi, pj) = (
                ranks
                    .iter()
                    .position(|l| *l == format!("rank {i}"))
                    .expect("rank label"),
                ranks
                    .iter()
                    .position(|l| *l == format!("rank {j}"))
                    .expect("rank label"),
            );
            let got = s["node_bytes"][node_of[pi] as usize][node_of[pj] as usize]
                .as_f64()
                .unwrap();
            let want = truth["posted"]["bytes"][i][j].as_f64().unwrap();
            assert_eq!(got, want, "bytes {i} → {j}");
            // The rank × rank traffic matrix (and so the `--svg` picture) counts the same
            // bytes, directly posted (observed WQEs) or not.
            let traffic = stats["traffic"]["rank_bytes"][pi][pj].as_f64().unwrap();
            assert_eq!(traffic, want, "traffic matrix bytes {i} → {j}");
        }
    }
    assert_eq!(s["unattributed_bytes"], 0);
    for k in ["link", "node_in", "node_out"] {
        let got = s["node_skew"][k].as_f64().unwrap();
        let cfg = truth["configured"]["skew"][k].as_f64().unwrap();
        assert!(
            (got - cfg).abs() <= 0.01 * cfg,
            "{k} skew: stats {got} vs configured {cfg}"
        );
    }
}
