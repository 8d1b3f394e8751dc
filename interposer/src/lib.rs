//! libsigmatrace.so: an `LD_PRELOAD` interposer that records every CPU-initiated verbs
//! operation of an unmodified program into a per-process binary log (format: the
//! `sigmatrace-schemas` crate). See README.md.

pub mod ffi;
pub mod hooks;
pub mod record;
pub mod runtime;
pub mod sink;
