//! The libibverbs entry points (`sv_ibv_*`, reached through the versioned trampolines of
//! `exports/ibverbs.txt`) and the C-side objects rdma-core programs see.
//!
//! `ctx` (devices, contexts, queries), `async_events` → `objects` (PD and parent domains, MR,
//! channels, CQ, SRQ, AH), `mw` (memory windows), `xrc` (XRC domains and SRQs), `dm` (device
//! memory), `import` (`ibv_import_*`) → `qp` (QP creation and state machine) → `datapath`
//! (the per-object `ops` pointers: post, poll, `ibv_cq_ex`) and `wr` (the `ibv_wr_*` builder);
//! `tally` counts what the device accepted and delivered (`SOFTNIC_TALLY`); `misc` holds helper
//! entry points; `unsupported` the not-supported results and the provider interface (with
//! `varargs.c` for its two variadic functions);
//! `layout` checks the bindgen'd layouts at compile time; `by_number` finds PDs and CQs by
//! the numbers PRM commands use; `wc` writes a completion into the program's array the way
//! mlx5 does (only the fields it defines). All of it runs on `crate::wire`.

pub mod async_events;
pub mod by_number;
pub mod ctx;
pub mod datapath;
pub mod dm;
pub mod import;
pub mod layout;
pub mod misc;
pub mod mw;
pub mod objects;
pub mod qp;
pub mod tally;
pub mod unsupported;
pub mod wc;
pub mod wr;
pub mod xrc;
