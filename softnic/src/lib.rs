//! softnic: a user-space RDMA device exposing the libibverbs ABI (see README.md).
//!
//! Built as `libsoftnic_verbs.so` with SONAME `libibverbs.so.1`; `softnic-run` puts it (and
//! the companion libmlx5/libefa stubs) on LD_LIBRARY_PATH under the real sonames.

#![allow(clippy::missing_safety_doc)]

pub mod ffi;
pub mod mlx5;
pub mod verbs;
pub mod wire;

// Versioned entry points generated from exports/ibverbs.txt.
std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/ibverbs.s")));
