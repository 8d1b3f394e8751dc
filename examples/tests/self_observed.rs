//! End-to-end observation of the GPU-initiated-style workloads on 4 softnic nodes, with the
//! workloads recording themselves (`--self-observe`: the discovery calls and host poller the
//! interposer runs, from inside the program) — through both construction paths:
//!
//! * every WQE in the workload's bookkeeping was observed exactly once, with the same content,
//!   and every send ring was discovered by its path (`mlx5dv_init_obj` or devx);
//! * `sigmatrace-convert stats` finds the BFS barrier rounds with the true slowest rank and
//!   spread (within the observation delay), and the MoE traffic matrix and skew equal to the
//!   ground truth (skew within 1 % of the configured one).
//!
//! The same checks under `LD_PRELOAD=libsigmatrace.so` are in `observed_e2e.rs`; both run the
//! scenarios of `common/workloads.rs`.

mod common;

use common::workloads::{bfs, moe};
use common::Tracing;
use sigmatrace_schemas::records::discovery;

#[test]
fn bfs_initobj_observed_barriers() {
    bfs("initobj", discovery::INIT_OBJ, Tracing::SelfRecorded);
}

#[test]
fn bfs_devx_observed_barriers() {
    bfs("devx", discovery::DEVX, Tracing::SelfRecorded);
}

#[test]
fn moe_initobj_observed_skew() {
    moe("initobj", discovery::INIT_OBJ, Tracing::SelfRecorded);
}

#[test]
fn moe_devx_observed_skew() {
    moe("devx", discovery::DEVX, Tracing::SelfRecorded);
}
