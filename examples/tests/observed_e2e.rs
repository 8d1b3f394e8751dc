//! The GPU-initiated-style workloads on 4 softnic nodes, posting WQEs directly (no
//! `ibv_post_send`), traced by the interposer: `LD_PRELOAD=libsigmatrace.so` discovers the
//! queues through its `mlx5dv_init_obj` / `mlx5dv_devx_*` hooks and watches them with
//! `sigmatrace-observe`'s `HostPoller`. The checks are the ones `self_observed.rs` runs on the
//! workloads' self-recorded logs (the record contract of `examples/src/selfobs.rs`):
//!
//! * every WQE of the workload's bookkeeping observed exactly once (`WqeObserved`, same
//!   index, opcode, bytes, remote address, rkey, atomic operand, flags, ds), no send-ring
//!   overrun, no `PostSend`, every send ring announced by `QueueDiscovered` with its discovery
//!   path, and the devx UAR too;
//! * `sigmatrace-convert stats`: barrier rounds with the true slowest rank and spread (up to
//!   the measured observation delays), MoE node traffic matrix exact and skew within 1 % of
//!   the configured one — which relies on the `QpCreate` (devx variant) and decoded
//!   `QpModify` records of devx QPs for each QP's peer.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::observed::{check_barriers, check_exactly_once, check_skew, read_logs, stats_json};
use common::{run_ranks, Tracing};
use sigmatrace_schemas::records::discovery;

const RANKS: u32 = 4;
const LIMIT: Duration = Duration::from_secs(240);
static SERIAL: Mutex<()> = Mutex::new(());
const DELAYS: &str = "0,40000,80000,120000";
/// Upper bound on the observation delay (see `check_barriers`).
const MAX_DELAY_NS: i64 = 60_000_000_000;

fn bfs(mode: &str, disc: u32) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_ranks(
        "bfs",
        mode,
        RANKS,
        &[
            "--threads",
            "2",
            "--span",
            "700",
            "--delays-us",
            DELAYS,
            "--rotate",
        ],
        Tracing::Interposer,
        LIMIT,
    );
    let books = run.books(RANKS);
    let logs = read_logs(&run.log_dir());
    for l in logs.values() {
        assert!(l.posts.is_empty(), "direct modes never call ibv_post_send");
    }
    check_exactly_once(&books, &logs, disc);
    check_barriers(
        &stats_json(&run.log_dir()),
        &run.truth("bfs-truth.json"),
        MAX_DELAY_NS,
    );
}

#[test]
fn bfs_initobj_interposed() {
    bfs("initobj", discovery::INIT_OBJ);
}

#[test]
fn bfs_devx_interposed() {
    bfs("devx", discovery::DEVX);
}

fn moe(mode: &str, disc: u32) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_ranks(
        "moe",
        mode,
        RANKS,
        &[
            "--threads",
            "2",
            "--zipf",
            "1.2",
            "--iters",
            "2",
            "--signal-every",
            "8",
            "--depth",
            "1024",
        ],
        Tracing::Interposer,
        LIMIT,
    );
    let books = run.books(RANKS);
    let logs = read_logs(&run.log_dir());
    check_exactly_once(&books, &logs, disc);
    check_skew(&stats_json(&run.log_dir()), &run.truth("moe-truth.json"));
}

#[test]
fn moe_initobj_interposed() {
    moe("initobj", discovery::INIT_OBJ);
}

#[test]
fn moe_devx_interposed() {
    moe("devx", discovery::DEVX);
}
