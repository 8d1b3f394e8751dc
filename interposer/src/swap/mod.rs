//! Per-object function-pointer swaps: the verbs data path is `static inline` in verbs.h and
//! jumps through pointers in the provider's objects, so the interposer replaces those
//! pointers — on contexts ([`ctx`]: `ops` and the `verbs_context` extensions, WQs), extended
//! QPs ([`qp_ex`]: the `ibv_wr_*` builders), extended CQs ([`cq_ex`]: `start_poll`/
//! `next_poll`) and mlx5 QP views ([`mlx5`]: `mlx5dv_wr_*`). Originals live in [`slots`],
//! one monomorphised copy of every hook per distinct provider table. [`objects`] holds the
//! handlers of the calls that hand out such objects.
//!
//! Each swapped hook forwards to the provider exactly once and hands the call to `decode`
//! inside `runtime::guard`. Called by `exports` (new objects); calls `decode`, `runtime`,
//! `record` (values it already holds: the `ibv_wr_*` setters) and `sink` (switches) below.

pub mod cq_ex;
pub mod ctx;
pub mod mlx5;
pub mod objects;
pub mod qp_ex;
pub mod slots;
