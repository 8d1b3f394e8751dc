//! The workloads in verbs mode (`--mode verbs`: the same work requests through
//! `ibv_post_send`) under `LD_PRELOAD=libsigmatrace.so` on 4 softnic nodes — the comparison
//! baseline of the direct modes: every WR of the bookkeeping is recorded exactly once as a
//! `PostSend`, and `sigmatrace-convert stats` finds the BFS barrier rounds (from the verbs
//! FETCH_ADDs) and the MoE traffic skew (from completed WRs) of the ground truth.

mod common;

use common::observed::{
    check_barriers, check_posted_exactly_once, check_skew, read_logs, stats_json,
};
use common::workloads::{BFS_ARGS, LIMIT, RANKS, SERIAL};
use common::{run_ranks, Tracing};

#[test]
fn bfs_verbs_traced_barriers() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_ranks(
        "bfs",
        "verbs",
        RANKS,
        BFS_ARGS,
        Tracing::Interposer,
        LIMIT,
        &[],
    );
    let books = run.books(RANKS);
    check_posted_exactly_once(&books, &read_logs(&run.log_dir()));
    // Arrival = the FETCH_ADD's PostSend time: µs after the workload's own stamp unless the
    // thread is preempted in between (fixed tolerance 5 ms).
    check_barriers(
        &stats_json(&run.log_dir()),
        &run.truth("bfs-truth.json"),
        5_000_000,
    );
}

#[test]
fn moe_verbs_traced_skew() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_ranks(
        "moe",
        "verbs",
        RANKS,
        &["--threads", "2", "--zipf", "1.2", "--iters", "2"],
        Tracing::Interposer,
        LIMIT,
        &[],
    );
    let books = run.books(RANKS);
    check_posted_exactly_once(&books, &read_logs(&run.log_dir()));
    check_skew(&stats_json(&run.log_dir()), &run.truth("moe-truth.json"));
}
