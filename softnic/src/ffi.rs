//! The C layouts softnic implements: the installed `<infiniband/verbs.h>` and
//! `<infiniband/mlx5dv.h>` as bound by the workspace's `verbs-sys` crate, plus the few macro
//! values bindgen cannot translate.

pub use verbs_sys::*;

/// `IBV_ACCESS_OPTIONAL_RANGE` (a macro expression bindgen does not translate).
pub const IBV_ACCESS_OPTIONAL_RANGE: u32 =
    ((IBV_ACCESS_OPTIONAL_FIRST << 10) - 1) & !(IBV_ACCESS_OPTIONAL_FIRST - 1);
/// `IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG` (rdma-core v45+; v44 headers lack it).
pub const IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG: u32 = 1 << 0;
