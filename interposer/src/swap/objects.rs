//! Handlers of the calls that hand out objects whose pointers are swapped: new contexts (and
//! contexts first seen on a PD, CQ, QP or devx object), extended QPs and CQs, mlx5 QP views.
//! Each swaps what the new object needs ([`super::ctx`], [`super::qp_ex`], [`super::cq_ex`],
//! [`super::mlx5`]) and leaves reading and recording the call to `decode`.

use std::ffi::{c_int, c_void};

use sigmatrace_schemas::{cq_variant, qp_variant};

use super::ctx::{self, Instrumented};
use super::{cq_ex, mlx5, qp_ex};
use crate::decode::{control as dc, dv};
use crate::ffi::*;
use crate::sink::{self, Diag};

/// Instruments a context handed over through the C API and records its `DeviceOpen`.
///
/// # Safety
/// `ctx` null or live.
pub unsafe fn adopt_context(ctx: *mut ibv_context) -> Instrumented {
    // SAFETY: per caller.
    let r = unsafe { ctx::instrument(ctx) };
    if r == Instrumented::Now {
        // SAFETY: ctx is live. Its device may not be libibverbs' (a program-made context):
        // never ask libibverbs about it.
        unsafe { dc::device_opened(ctx, false) };
    }
    r
}

/// Instruments `ctx` if no hook saw it opened; reports contexts discovered that way.
///
/// # Safety
/// `ctx` null or live.
pub unsafe fn discover(ctx: *mut ibv_context) {
    // SAFETY: per caller.
    if unsafe { ctx::instrument(ctx) } == Instrumented::Now {
        sink::diag(
            Diag::Debug,
            "sigmatrace: instrumented a context first seen on an object",
        );
        // SAFETY: ctx is live.
        unsafe { dc::device_opened(ctx, true) };
    }
}

/// `ibv_open_device`.
///
/// # Safety
/// `ctx` null or the new context.
pub unsafe fn ibv_open_device(_dev: *mut ibv_device, ctx: *mut ibv_context) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: new live context.
    unsafe {
        ctx::instrument(ctx);
        dc::device_opened(ctx, true);
    }
}

/// `ibv_import_device`.
///
/// # Safety
/// As [`ibv_open_device`].
pub unsafe fn ibv_import_device(_fd: c_int, ctx: *mut ibv_context) {
    // SAFETY: per caller.
    unsafe { ibv_open_device(std::ptr::null_mut(), ctx) }
}

/// `ibv_alloc_pd`.
///
/// # Safety
/// `pd` null or the new PD.
pub unsafe fn ibv_alloc_pd(ctx: *mut ibv_context, pd: *mut ibv_pd) {
    if pd.is_null() {
        return;
    }
    // SAFETY: ctx is the program's live context.
    unsafe { discover(ctx) };
    dc::pd_allocated(ctx, pd);
}

/// `ibv_create_cq`.
///
/// # Safety
/// `cq` null or the new CQ.
pub unsafe fn ibv_create_cq(
    ctx: *mut ibv_context,
    _cqe: c_int,
    _c: *mut c_void,
    ch: *mut ibv_comp_channel,
    vector: c_int,
    cq: *mut ibv_cq,
) {
    if cq.is_null() {
        return;
    }
    // SAFETY: ctx live (program's); cq live (new).
    unsafe {
        discover(ctx);
        dc::cq_created(ctx, ch, vector, cq);
    }
}

/// An extended CQ was created (`ibv_create_cq_ex`, `mlx5dv_create_cq`): swap its poll
/// pointers and record it.
///
/// # Safety
/// `attr` the program's attributes, `cq` null or the new CQ.
pub unsafe fn cq_created_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
    cq: *mut ibv_cq_ex,
    variant: u32,
) {
    if cq.is_null() || attr.is_null() {
        return;
    }
    // SAFETY: the program's attributes and the provider's new CQ.
    unsafe {
        cq_ex::instrument(cq, dc::cq_ex_wc_flags(attr));
        dc::cq_ex_created(ctx, attr, cq, variant);
    }
}

/// `ibv_create_qp`.
///
/// # Safety
/// `attr` the program's attributes (caps updated by the provider), `qp` null or the new QP.
pub unsafe fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr, qp: *mut ibv_qp) {
    if qp.is_null() || attr.is_null() {
        return;
    }
    // SAFETY: live objects.
    unsafe {
        discover(dc::qp_context(qp));
        dc::qp_created(pd, attr, qp);
    }
}

/// An extended QP was created (`ibv_create_qp_ex`, `mlx5dv_create_qp`): if it has the
/// `ibv_wr_*` API, swap its builders; record it.
///
/// # Safety
/// `attr` the program's attributes, `qp` null or the new QP.
pub unsafe fn qp_created_ex(
    _ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
    qp: *mut ibv_qp,
    variant: u32,
) {
    if qp.is_null() || attr.is_null() {
        return;
    }
    // SAFETY: live objects; with SEND_OPS_FLAGS the QP is embedded in an ibv_qp_ex at
    // offset 0 (qp_base is its first member), as ibv_qp_to_qp_ex returns.
    unsafe {
        if dc::qp_ex_has_send_ops(attr) {
            let atomic_write = (*attr).send_ops_flags & u64::from(IBV_QP_EX_WITH_ATOMIC_WRITE) != 0;
            qp_ex::instrument_ops(qp.cast(), atomic_write);
        }
        dc::qp_ex_created(attr, qp, variant);
    }
}

/// `ibv_qp_to_qp_ex`: the program is about to use the `ibv_wr_*` API.
///
/// # Safety
/// `qpx` null or the returned extended QP.
pub unsafe fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp, qpx: *mut ibv_qp_ex) {
    // SAFETY: per caller.
    unsafe { qp_ex::instrument(qpx) };
}

/// `mlx5dv_create_qp`.
///
/// # Safety
/// As [`qp_created_ex`].
pub unsafe fn mlx5dv_create_qp(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
    _dv: *mut c_void,
    qp: *mut ibv_qp,
) {
    // SAFETY: per caller.
    unsafe {
        discover(ctx);
        qp_created_ex(ctx, attr, qp, qp_variant::MLX5DV_CREATE_QP);
    }
}

/// `mlx5dv_create_cq`.
///
/// # Safety
/// As [`cq_created_ex`].
pub unsafe fn mlx5dv_create_cq(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
    _dv: *mut c_void,
    cq: *mut ibv_cq_ex,
) {
    // SAFETY: per caller.
    unsafe {
        discover(ctx);
        cq_created_ex(ctx, attr, cq, cq_variant::MLX5DV_CREATE_CQ);
    }
}

/// `mlx5dv_qp_ex_from_ibv_qp_ex`: swap the mlx5 builders of that QP.
///
/// # Safety
/// `qpx` the program's extended QP, `mqp` null or its mlx5 view.
pub unsafe fn mlx5dv_qp_ex_from_ibv_qp_ex(qpx: *mut ibv_qp_ex, mqp: *mut mlx5dv_qp_ex) {
    // SAFETY: per caller.
    unsafe {
        qp_ex::instrument(qpx);
        mlx5::instrument(qpx, mqp);
    }
}

/// `mlx5dv_devx_obj_create`: its context may not have been seen yet (a devx-only program);
/// it is instrumented once the command is understood, before the object's records.
///
/// # Safety
/// As `decode::dv::mlx5dv_devx_obj_create`.
pub unsafe fn mlx5dv_devx_obj_create(
    ctx: *mut ibv_context,
    cmd_in: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
    obj: *mut c_void,
) {
    // SAFETY: per caller; ctx is the program's live context.
    unsafe {
        dv::mlx5dv_devx_obj_create(ctx, (cmd_in, inlen), (out, outlen), obj, || discover(ctx))
    }
}
