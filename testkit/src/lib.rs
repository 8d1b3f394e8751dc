//! Shared test helpers of the SigmaTrace workspace (a dev-dependency of the other crates):
//! where the built artifacts are ([`artifacts`]), free ports and listening sockets ([`net`]),
//! the Nsight Systems fixtures ([`nsys`]),
//! running programs traced or untraced ([`process`]), rdma-core's own test suite ([`pyverbs`]), and the repository's own Perfetto trace
//! checker ([`trace`], also the `sigmatrace-trace-check` binary).
//!
//! `unsafe` is denied except in one function that signals a child's process group.
#![deny(unsafe_code)]

pub mod artifacts;
pub mod net;
pub mod nsys;
pub mod process;
pub mod pyverbs;
pub mod trace;

pub use artifacts::{artifact, build_dir, libsigmatrace, softnic_run, system_bin, workspace_root};
pub use net::{cm_listening, free_port, listening};
pub use nsys::{nsys_fixture, NSYS_COMMON_CALLS};
pub use process::{convert_logs, output_ok, output_text, Cmd, Guarded, Out, Running};
