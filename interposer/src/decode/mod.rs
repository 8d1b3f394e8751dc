//! C structures → Rust values: the handlers that read what the program passed and what the
//! provider or driver returned (work-request lists, completions, object attributes, devx
//! command buffers, CUDA arguments) — the only reads of the program's and the provider's
//! memory — and hand plain values to `record` (and to `runtime`'s discovery and kernel
//! timing). Every read is bounded (list and SGE caps) and made only where the C API says the
//! field is valid.
//!
//! - [`control`]: object lifecycle, connection data, events.
//! - [`datapath`]: `ibv_post_*` lists (one walk for all of them), `ibv_poll_cq` entries.
//! - [`extended`]: the `ibv_wr_*` builders' QP fields and lists, extended-CQ entries.
//! - [`dv`]: libmlx5 calls that reveal rings (`mlx5dv_init_obj`, devx).
//! - [`cuda`]: CUDA memory and launch calls.
//!
//! Called by `exports` (the table's handlers) and `swap` (the swapped hooks); calls only
//! `runtime`, `record` and `sink` below.

pub mod control;
pub mod cuda;
pub mod datapath;
pub mod dv;
pub mod extended;
