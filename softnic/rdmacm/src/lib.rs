//! softnic's `librdmacm.so.1`: the RDMA connection manager for programs running on softnic.
//! See README.md (section "rdmacm") for the design.

#![allow(clippy::missing_safety_doc)]

mod addr;
mod conn;
mod event;
mod ffi;
mod id;
mod misc;
mod proto;
mod qp;
mod rsocket;
mod state;
mod verbs;
mod wire;

// Versioned entry points generated from exports.txt.
std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/rdmacm.s")));
