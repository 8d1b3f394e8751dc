//! Compile-time checks that the bindgen'd structs have rdma-core's x86_64 layout
//! (offsets from verbs-abi.md). A mismatch fails the build.

use crate::ffi::*;
use std::mem::{offset_of, size_of};

macro_rules! check {
    ($e:expr, $v:expr) => {
        const _: () = assert!($e == $v);
    };
}

check!(size_of::<ibv_context>(), 328);
check!(offset_of!(ibv_context, device), 0);
check!(offset_of!(ibv_context, ops), 8);
check!(size_of::<ibv_context_ops>(), 256);
check!(offset_of!(ibv_context, cmd_fd), 264);
check!(offset_of!(ibv_context, async_fd), 268);
check!(offset_of!(ibv_context, num_comp_vectors), 272);
check!(offset_of!(ibv_context, mutex), 280);
check!(offset_of!(ibv_context, abi_compat), 320);
check!(offset_of!(ibv_context_ops, alloc_mw), 56);
check!(offset_of!(ibv_context_ops, bind_mw), 64);
check!(offset_of!(ibv_context_ops, dealloc_mw), 72);
check!(offset_of!(ibv_context_ops, poll_cq), 88);
check!(offset_of!(ibv_context_ops, req_notify_cq), 96);
check!(offset_of!(ibv_context_ops, post_srq_recv), 160);
check!(offset_of!(ibv_context_ops, post_send), 200);
check!(offset_of!(ibv_context_ops, post_recv), 208);
check!(size_of::<verbs_context>(), 648);
check!(offset_of!(verbs_context, query_port), 0);
check!(offset_of!(verbs_context, post_srq_ops), 144);
check!(offset_of!(verbs_context, create_wq), 184);
check!(offset_of!(verbs_context, create_cq_ex), 200);
check!(offset_of!(verbs_context, open_qp), 256);
check!(offset_of!(verbs_context, create_qp_ex), 264);
check!(offset_of!(verbs_context, create_srq_ex), 280);
check!(offset_of!(verbs_context, close_xrcd), 296);
check!(offset_of!(verbs_context, sz), 312);
check!(offset_of!(verbs_context, context), 320);
check!(size_of::<ibv_qp>(), 160);
check!(size_of::<ibv_qp_ex>(), 352);
check!(offset_of!(ibv_qp_ex, wr_id), 168);
check!(offset_of!(ibv_qp_ex, wr_flags), 176);
check!(offset_of!(ibv_qp_ex, wr_atomic_cmp_swp), 184);
check!(size_of::<ibv_cq_ex>(), 288);
check!(offset_of!(ibv_cq_ex, status), 132);
check!(offset_of!(ibv_cq_ex, wr_id), 136);
check!(offset_of!(ibv_cq_ex, start_poll), 144);
check!(offset_of!(ibv_cq_ex, next_poll), 152);
check!(offset_of!(ibv_cq_ex, end_poll), 160);
check!(offset_of!(ibv_cq_ex, read_opcode), 168);
check!(size_of::<ibv_wc>(), 48);
check!(size_of::<ibv_send_wr>(), 128);
check!(size_of::<ibv_recv_wr>(), 32);
check!(size_of::<ibv_sge>(), 16);
// softnic's wrappers keep rdma-core's prefix layout.
check!(offset_of!(crate::verbs::qp::SnQp, qpx), 0);
check!(offset_of!(crate::verbs::qp::SnQp, comp_mask), 352);
check!(offset_of!(crate::verbs::objects::SnCq, cq), 0);
check!(offset_of!(crate::verbs::ctx::SnContext, vctx), 0);

// The IBVERBS_1.1 ibv_query_port fills `struct _compat_ibv_port_attr`: ibv_port_attr up to
// `flags` (offset 47), 48 bytes.
check!(offset_of!(ibv_port_attr, flags), 47);
check!(crate::verbs::ctx::COMPAT_PORT_ATTR_SIZE, 48);
check!(offset_of!(ibv_port_attr, port_cap_flags2), 48);
