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
//!
//! The scenarios (arguments, run, checks) are shared with `self_observed.rs` in
//! `common/workloads.rs`.

mod common;

use common::workloads::{bfs, moe};
use common::Tracing;
use sigmatrace_schemas::records::discovery;

#[test]
fn bfs_initobj_interposed() {
    bfs("initobj", discovery::INIT_OBJ, Tracing::Interposer);
}

#[test]
fn bfs_devx_interposed() {
    bfs("devx", discovery::DEVX, Tracing::Interposer);
}

#[test]
fn moe_initobj_interposed() {
    moe("initobj", discovery::INIT_OBJ, Tracing::Interposer);
}

#[test]
fn moe_devx_interposed() {
    moe("devx", discovery::DEVX, Tracing::Interposer);
}
