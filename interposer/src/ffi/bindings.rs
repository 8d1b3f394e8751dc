//! bindgen output for Debian's <infiniband/verbs.h> and <infiniband/mlx5dv.h> (see build.rs).
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all,
    clippy::pedantic
)]
include!(concat!(env!("OUT_DIR"), "/verbs_bindings.rs"));
