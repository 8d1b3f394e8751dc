//! The process around the hooks: configuration, initialisation, panic containment, and the
//! background components that run beside the program's threads.
//!
//! - [`config`]: the `SIGMATRACE_*` environment, read once.
//! - [`init`]: the constructor (or the first hook), `fork` and exit handlers.
//! - [`guard`]: every hook body runs inside it; a panic disables tracing, never the program.
//! - [`singleton`]: the one leak-once, fork-forgotten holder the background components use.
//! - [`cq_owners`]: which QPs complete into which CQ (completions without a QP number).
//! - [`flight`]: the flight recorder's SIGUSR2 dump request.
//! - [`queues`] (ring discovery and the host poller), [`gpu`] (the device-side poller),
//!   [`kernels`] (kernel launch timing), and [`internal`] (their own CUDA calls stay
//!   untraced).
//!
//! The hook layers above (`exports`, `swap`, `decode`) call into it; it writes through
//! `record` and `sink` below and never calls back up.

pub mod config;
pub mod cq_owners;
pub mod flight;
pub mod gpu;
pub mod guard;
pub mod init;
pub mod internal;
pub mod kernels;
pub mod queues;
pub mod singleton;
