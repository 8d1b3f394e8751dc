//! mlx5 direct queues.
//!
//! `rings` is the ring format softnic executes (WQE parsing, CQE64 writing); it knows only
//! `crate::wire::work`, so the wire engine can run it. `dv` (the `mlx5dv_*` entry points) and
//! `devx` (raw PRM commands) sit on top of everything: they build rings over verbs objects.
//! This decoder is deliberately independent of the repository's mlx5 codec crate: softnic is
//! the oracle the tracer's decoder is tested against, so it must not share its code.

pub mod devx;
pub mod dv;
pub mod rings;
