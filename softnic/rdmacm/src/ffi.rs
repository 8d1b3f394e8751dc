//! C layouts (`verbs-sys`'s `rdma_cm` module: bindgen of the installed `<rdma/rdma_cma.h>`,
//! with the root's `<infiniband/verbs.h>` types) and the libibverbs functions this library
//! calls through the dynamic linker.

pub use verbs_sys::rdma_cm::*;

// The exported (non-inline) libibverbs functions verbs-sys declares (`ibv_get_device_list`,
// `ibv_create_qp`, `ibv_reg_mr`, …) are resolved at load time against whichever
// libibverbs.so.1 the process uses, so an LD_PRELOADed tracer sees every call. verbs-sys
// carries no link directive; this is ours.
#[link(name = "ibverbs")]
extern "C" {}
