#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
include!(concat!(env!("OUT_DIR"), "/verbs_bindings.rs"));

/// `IBV_ACCESS_OPTIONAL_RANGE` (a macro expression bindgen does not translate).
pub const IBV_ACCESS_OPTIONAL_RANGE: u32 =
    ((IBV_ACCESS_OPTIONAL_FIRST << 10) - 1) & !(IBV_ACCESS_OPTIONAL_FIRST - 1);
/// `IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG` (rdma-core v45+; v44 headers lack it).
pub const IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG: u32 = 1 << 0;
