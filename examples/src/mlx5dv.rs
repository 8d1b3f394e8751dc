//! Bindings of the `mlx5dv_*` calls the direct-posting workloads make (generated from the
//! system's `<infiniband/mlx5dv.h>`; `ibv_*` types come from [`crate::verbs::ffi`]).

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
pub mod ffi {
    pub use crate::verbs::ffi::*;
    include!(concat!(env!("OUT_DIR"), "/mlx5dv.rs"));
}
