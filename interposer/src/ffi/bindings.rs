//! The rdma-core layouts the hooks read and the pointers they swap: the workspace's one set of
//! bindings for the installed <infiniband/verbs.h> and <infiniband/mlx5dv.h> (`verbs-sys`).
pub use verbs_sys::*;
