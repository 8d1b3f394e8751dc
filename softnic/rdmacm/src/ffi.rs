//! C layouts (bindgen of Debian's `<rdma/rdma_cma.h>`) and the libibverbs functions this
//! library calls through the dynamic linker.

#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all,
    unsafe_op_in_unsafe_fn,
    unnecessary_transmutes
)]

include!(concat!(env!("OUT_DIR"), "/cma_bindings.rs"));

// Exported (non-inline) libibverbs functions; resolved at load time against whichever
// libibverbs.so.1 the process uses, so an LD_PRELOADed tracer sees every call.
#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_get_device_list(num: *mut libc::c_int) -> *mut *mut ibv_device;
    pub fn ibv_free_device_list(list: *mut *mut ibv_device);
    pub fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_close_device(ctx: *mut ibv_context) -> libc::c_int;
    pub fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> libc::c_int;
    pub fn ibv_query_gid(
        ctx: *mut ibv_context,
        port: u8,
        index: libc::c_int,
        gid: *mut ibv_gid,
    ) -> libc::c_int;
    pub fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_dealloc_pd(pd: *mut ibv_pd) -> libc::c_int;
    pub fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> libc::c_int;
    pub fn ibv_create_cq(
        ctx: *mut ibv_context,
        cqe: libc::c_int,
        cq_context: *mut libc::c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: libc::c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> libc::c_int;
    pub fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: libc::c_int)
        -> libc::c_int;
    pub fn ibv_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        mask: libc::c_int,
        init: *mut ibv_qp_init_attr,
    ) -> libc::c_int;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> libc::c_int;
    pub fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    pub fn ibv_destroy_srq(srq: *mut ibv_srq) -> libc::c_int;
    pub fn ibv_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut libc::c_void,
        length: usize,
        access: libc::c_int,
    ) -> *mut ibv_mr;
    pub fn ibv_dereg_mr(mr: *mut ibv_mr) -> libc::c_int;
}
