//! The library's exported C symbols, and nothing else: what the dynamic loader binds the
//! program to. Each export forwards the call to the real function exactly once and hands the
//! arguments and result to a handler in a lower layer.
//!
//! - [`table`]: THE hook table — one line per wrapped libibverbs, libmlx5 or libcuda entry
//!   point, generating its shim and its [`entry::Entry`].
//! - [`dlsym`]: the `dlsym`/`dlvsym` trampolines that redirect lookups of table names made in
//!   library handles (NCCL, NVSHMEM), and [`proc_address`]: the same for `cuGetProcAddress`.
//! - [`api`]: the `sigmatrace_*` C API for tools and tests.
//!
//! Below: `swap` (pointers swapped on the objects these calls create), `decode` (reading the
//! calls' C structures), `runtime` (initialisation, panic guard); nothing below calls up here.

pub mod api;
pub mod dlsym;
pub mod entry;
pub mod proc_address;
pub mod table;
