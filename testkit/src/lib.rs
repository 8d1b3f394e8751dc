//! Shared test helpers of the SigmaTrace workspace (a dev-dependency of the other crates):
//! where the built artifacts are ([`artifacts`]), free ports and listening sockets ([`net`]),
//! running programs traced or untraced and softnic pairs ([`process`]), and the repository's
//! own Perfetto trace checker ([`trace`], also the `sigmatrace-trace-check` binary).
#![forbid(unsafe_code)]

pub mod trace;
