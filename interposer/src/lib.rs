//! libsigmatrace.so: an `LD_PRELOAD` interposer that records every CPU-initiated verbs
//! operation of an unmodified program into a per-process binary log (format: the
//! `sigmatrace-schemas` crate). See README.md.
//!
//! One-way layers, each using only those after it:
//! [`exports`] (the `#[no_mangle]` symbols) → [`swap`] (pointers swapped on provider objects)
//! → [`decode`] (C structures → Rust values) → [`runtime`] (init, guard, config, background
//! components) → [`record`] (records, no `unsafe`) → [`sink`] (the log writer); [`ffi`]
//! (bindings and loader access) is used by the C-facing layers. `tests/layers.rs` checks it.

pub mod decode;
pub mod exports;
pub mod ffi;
pub mod record;
pub mod runtime;
pub mod sink;
pub mod swap;
