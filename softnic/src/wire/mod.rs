//! The wire: softnic's device proper, below the C entry points.
//!
//! Layers, each using only those before it: `shm` (the fabric: shared-memory files, packet
//! rings, futex words) → `work` (the records every layer exchanges: send/receive WQEs,
//! completions, the clock) → `state` (process-wide device state and the Rust side of every
//! object; ring handles from `crate::mlx5::rings`, which itself knows only `work`) → `queues`
//! (local checks, scatter, in-order completion and flushing) → `responder` (executes inbound
//! requests) → `engine` (requester transmit, responses, the progress thread).

pub mod engine;
pub mod queues;
pub mod responder;
pub mod shm;
pub mod state;
pub mod work;
