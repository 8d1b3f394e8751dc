//! softnic's `librdmacm.so.1`: the RDMA connection manager for programs running on softnic.
//! See README.md (section "rdmacm") for the design.

#![allow(clippy::missing_safety_doc)]

pub mod addr;
pub mod conn;
pub mod event;
pub mod ffi;
pub mod id;
pub mod misc;
pub mod proto;
pub mod qp;
pub mod rsocket;
pub mod state;
pub mod verbs;
pub mod wire;

// Versioned entry points generated from exports.txt.
std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/rdmacm.s")));
