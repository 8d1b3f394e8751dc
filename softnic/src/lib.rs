//! softnic: a user-space RDMA device exposing the libibverbs ABI (see README.md).
//!
//! Built as `libsoftnic_verbs.so` with SONAME `libibverbs.so.1`; `softnic-run` puts it (and
//! the companion libmlx5/libefa stubs) on LD_LIBRARY_PATH under the real sonames.

#![allow(clippy::missing_safety_doc)]

pub mod ctx;
pub mod datapath;
pub mod devx;
pub mod dv;
pub mod engine;
pub mod ffi;
pub mod layout;
pub mod misc;
pub mod mlx5dv;
pub mod obj;
pub mod objects;
pub mod qp;
pub mod responder;
pub mod shm;

// Versioned entry points generated from exports/ibverbs.txt.
std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/ibverbs.s")));
