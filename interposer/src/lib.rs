//! libsigmatrace.so: an `LD_PRELOAD` interposer that records every CPU-initiated verbs
//! operation of an unmodified program into a per-process binary log (format: the
//! `sigmatrace-schemas` crate).
//!
//! Layers: [`hooks`] (the C side: exported shims generated from one table, swapped provider
//! pointers, `dlsym`/`dlvsym`) → [`record`] (safe construction of records) → [`sink`]
//! (per-process log, per-thread lock-free writers); [`ffi`] holds the foreign layouts and
//! loader access; [`config`] the `SIGMATRACE_*` environment. `unsafe` code lives only in
//! `hooks/`, `ffi/` and `sink/`. See README.md.

pub mod config;
pub mod ffi;
pub mod hooks;
pub mod record;
pub mod sink;
