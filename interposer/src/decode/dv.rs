//! Handlers of the libmlx5 calls that reveal rings the program writes itself:
//! `mlx5dv_init_obj` (verbs-created QPs and CQs), the devx umem, object and UAR calls (rings
//! in the program's own memory, created with raw PRM commands). Each decodes what the call
//! returned, hands it to the discovery state (`runtime::queues`) and writes the control
//! records a devx object has no other source for (`QpCreate`/`CqCreate`/`QpModify`/
//! `QpDestroy`/`CqDestroy` with the devx variant). Destroy and dereg hooks stop watching the
//! memory *before* the real call frees it.

use std::ffi::{c_int, c_void};

use sigmatrace_observe::discover::{InitObjCq, InitObjQp, UarInfo};
use sigmatrace_observe::mlx5::prm::{self, Command, ModifyQpIn};
use sigmatrace_observe::mlx5::wqe::Transport;
use sigmatrace_observe::QueueDesc;
use sigmatrace_schemas::{cq_variant, qp_variant};

use crate::ffi::*;
use crate::record::control::{self as rc, CqInfo, QpInfo, QpModifyInfo};
use crate::record::{self, emit};
use crate::runtime::queues::{self, Key};
use crate::sink;
use crate::sink::{cat, Diag};

/// The program's command buffer as a slice (empty when null).
///
/// # Safety
/// `p` null or readable for `len` bytes for the duration of the hook.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: per caller.
        unsafe { std::slice::from_raw_parts(p.cast(), len) }
    }
}

/// `mlx5dv_init_obj`: CQs first (their CQN completes a QP's description), then QPs.
///
/// # Safety
/// `obj` the program's `mlx5dv_obj`, filled by the successful real call.
pub unsafe fn mlx5dv_init_obj(obj: *mut mlx5dv_obj, obj_type: u64, ret: c_int) {
    if ret != 0 || obj.is_null() {
        return;
    }
    // SAFETY: the program's struct, filled by the provider for the requested types.
    let o = unsafe { &*obj };
    let mut inner = queues::lock();
    if obj_type & MLX5DV_OBJ_CQ as u64 != 0 && !o.cq.in_.is_null() && !o.cq.out.is_null() {
        // SAFETY: out pointer filled by the successful call.
        let c = unsafe { &*o.cq.out };
        let d = InitObjCq::of(c);
        inner.cqns.insert(o.cq.in_ as u64, c.cqn);
        if let Some(q) = inner.disc.on_init_obj_cq(&d) {
            queues::discovered(&mut inner, Key::Cq(o.cq.in_ as u64), q);
        }
    }
    if obj_type & MLX5DV_OBJ_QP as u64 != 0 && !o.qp.in_.is_null() && !o.qp.out.is_null() {
        // SAFETY: live QP (the program's) and the filled out struct.
        let (qp, out) = unsafe { (&*o.qp.in_, &*o.qp.out) };
        let send_cqn = inner.cqns.get(&(qp.send_cq as u64)).copied();
        let d = InitObjQp::of(qp, out, send_cqn.unwrap_or(0));
        if let Some(q) = inner.disc.on_init_obj_qp(&d) {
            queues::discovered(&mut inner, Key::Qp(o.qp.in_ as u64), q);
        }
    }
}

/// `mlx5dv_devx_umem_reg`.
///
/// # Safety
/// `umem` null or the new umem.
pub unsafe fn mlx5dv_devx_umem_reg(
    _ctx: *mut ibv_context,
    addr: *mut c_void,
    size: usize,
    _access: u32,
    umem: *mut mlx5dv_devx_umem,
) {
    if umem.is_null() {
        return;
    }
    // SAFETY: the provider's new umem.
    let id = unsafe { (*umem).umem_id };
    let mut inner = queues::lock();
    inner
        .disc
        .on_devx_umem_reg(umem as u64, id, addr as u64, size as u64, None);
    inner.umems.insert(umem as u64, (addr as u64, size as u64));
}

/// `mlx5dv_devx_umem_reg_ex` (dma-buf umems carry their fd).
///
/// # Safety
/// `umem_in` the program's attributes, `umem` null or the new umem.
pub unsafe fn mlx5dv_devx_umem_reg_ex(
    _ctx: *mut ibv_context,
    umem_in: *mut mlx5dv_devx_umem_in,
    umem: *mut mlx5dv_devx_umem,
) {
    if umem.is_null() || umem_in.is_null() {
        return;
    }
    // SAFETY: the program's attributes and the provider's new umem.
    let (a, id) = unsafe { (&*umem_in, (*umem).umem_id) };
    let fd = (a.comp_mask & MLX5DV_UMEM_MASK_DMABUF as u64 != 0).then_some(a.dmabuf_fd);
    let mut inner = queues::lock();
    inner
        .disc
        .on_devx_umem_reg(umem as u64, id, a.addr as u64, a.size as u64, fd);
    inner
        .umems
        .insert(umem as u64, (a.addr as u64, a.size as u64));
}

/// Before `mlx5dv_devx_umem_dereg`: stop watching every queue in the umem's memory.
pub fn umem_dereg_pre(umem: *mut mlx5dv_devx_umem) {
    let mut inner = queues::lock();
    if let Some(&(addr, size)) = inner.umems.get(&(umem as u64)) {
        queues::gone_range(&mut inner, addr, size);
    }
}

/// `mlx5dv_devx_umem_dereg`.
pub fn mlx5dv_devx_umem_dereg(_: (), umem: *mut mlx5dv_devx_umem, ret: c_int) {
    if ret == 0 {
        let mut inner = queues::lock();
        inner.disc.on_devx_umem_dereg(umem as u64);
        inner.umems.remove(&(umem as u64));
    }
}

/// `ibv_qp_type` of a PRM service type (DCI as `IBV_QPT_DRIVER`).
fn ibv_qp_type(t: Option<Transport>) -> u32 {
    match t {
        Some(Transport::Rc) => IBV_QPT_RC,
        Some(Transport::Uc) => IBV_QPT_UC,
        Some(Transport::Ud) => IBV_QPT_UD,
        Some(Transport::Xrc) => IBV_QPT_XRC_SEND,
        Some(Transport::Dci) => IBV_QPT_DRIVER,
        Some(Transport::RawPacket) => IBV_QPT_RAW_PACKET,
        None => 0,
    }
}

/// `mlx5dv_devx_obj_create`: CREATE_QP / CREATE_CQ become `QpCreate` / `CqCreate` (devx
/// variant) and, with their umems resolved, discovered queues.
///
/// `understood` runs once the command is decoded, before any record (the caller instruments
/// the context there).
///
/// # Safety
/// `cmd_in`/`out` the program's command buffers (with their lengths), `obj` null or the new
/// object.
pub unsafe fn mlx5dv_devx_obj_create(
    ctx: *mut ibv_context,
    (cmd_in, inlen): (*const c_void, usize),
    (out, outlen): (*mut c_void, usize),
    obj: *mut c_void,
    understood: impl FnOnce(),
) {
    if obj.is_null() {
        return;
    }
    // SAFETY: the program's buffers, valid for the call.
    let (input, output) = unsafe { (bytes(cmd_in, inlen), bytes(out, outlen)) };
    let (Ok(cmd), Some(res)) = (prm::decode_command(input), prm::decode_output(output)) else {
        return;
    };
    understood();
    let ts = sink::now();
    match cmd {
        Command::CreateQp(q) if sink::tracing(cat::CONTROL) => {
            let rq = if q.rq_type == prm::rq_type::REGULAR {
                1 << q.log_rq_size
            } else {
                0
            };
            let info = QpInfo {
                qp: obj as u64,
                context: ctx as u64,
                srq: 0,
                qpn: res.number,
                qp_type: ibv_qp_type(q.transport()),
                variant: qp_variant::DEVX,
                max_send_wr: q.sq_wqebbs(),
                max_recv_wr: rq,
                max_send_sge: 0,
                max_recv_sge: 0,
                max_inline: 0,
            };
            emit(rc::qp_create(ts, &info));
        }
        Command::CreateCq(c) if sink::tracing(cat::CONTROL) => {
            let info = CqInfo {
                cq: obj as u64,
                context: ctx as u64,
                channel: 0,
                cqe: c.cqe_cnt(),
                comp_vector: c.c_eqn,
                wc_flags: 0,
                variant: cq_variant::DEVX,
            };
            emit(rc::cq_create(ts, &info));
        }
        _ => {}
    }
    let mut inner = queues::lock();
    match inner.disc.on_devx_obj_create(obj as u64, input, output) {
        Ok(Some(q)) => queues::discovered(&mut inner, Key::Devx(obj as u64), q),
        Ok(None) => {}
        Err(e) => sink::diag(
            Diag::Debug,
            &format!("sigmatrace: devx object not understood as a queue: {e}"),
        ),
    }
}

/// The `QpModify` of a devx QP transition (mask = the `ibv_qp_attr_mask` bits it carries).
pub fn devx_qp_modify(m: &ModifyQpIn, new_state: u8, result: i32) -> QpModifyInfo {
    let mut info = QpModifyInfo {
        qpn: m.qpn,
        new_state,
        mask: IBV_QP_STATE,
        result,
        ..Default::default()
    };
    if m.path.vhca_port != 0 {
        info.port = m.path.vhca_port;
        info.mask |= IBV_QP_PORT;
    }
    match m.opcode {
        prm::cmd::INIT2RTR_QP => {
            info.mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
            info.path_mtu = m.mtu;
            info.dest_qpn = m.remote_qpn;
            info.rq_psn = m.next_rcv_psn;
            info.dlid = m.path.rlid;
            info.sl = m.path.sl;
            info.is_global = m.path.grh as u8;
            if m.path.grh {
                info.sgid_index = m.path.src_addr_index;
                info.dgid = m.path.rgid;
            }
        }
        prm::cmd::RTR2RTS_QP | prm::cmd::RTS2RTS_QP | prm::cmd::SQERR2RTS_QP => {
            info.mask |= IBV_QP_SQ_PSN;
            info.sq_psn = m.next_send_psn;
        }
        _ => {}
    }
    info
}

/// `mlx5dv_devx_obj_modify`: QP transitions become `QpModify` records (the converter matches
/// connections on them: INIT2RTR carries the remote QPN and address).
///
/// # Safety
/// As [`mlx5dv_devx_obj_create`].
pub unsafe fn mlx5dv_devx_obj_modify(
    obj: *mut c_void,
    cmd_in: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
    ret: c_int,
) {
    if ret != 0 {
        return;
    }
    // SAFETY: the program's buffers, valid for the call.
    let (input, output) = unsafe { (bytes(cmd_in, inlen), bytes(out, outlen)) };
    let t = queues::lock()
        .disc
        .on_devx_obj_modify(obj as u64, input, output);
    if let Ok(Some(t)) = t {
        if sink::tracing(cat::CONTROL) {
            emit(rc::qp_modify(
                sink::now(),
                &devx_qp_modify(&t.cmd, t.state, ret),
            ));
        }
    }
}

/// Before `mlx5dv_devx_obj_destroy`: stop watching its queue; returns what it was.
pub fn obj_destroy_pre(obj: *mut c_void) -> Option<QueueDesc> {
    let mut inner = queues::lock();
    let watched = queues::forget(&mut inner, Key::Devx(obj as u64));
    inner.disc.on_devx_obj_destroy(obj as u64).or(watched)
}

/// `mlx5dv_devx_obj_destroy`.
pub fn mlx5dv_devx_obj_destroy(q: Option<QueueDesc>, obj: *mut c_void, ret: c_int) {
    if !sink::tracing(cat::CONTROL) {
        return;
    }
    let ts = sink::now();
    match q {
        Some(QueueDesc::Send(s)) => emit(rc::qp_destroy(ts, obj as u64, s.qpn, ret)),
        Some(QueueDesc::Cq(_)) => emit(rc::cq_destroy(ts, obj as u64, ret)),
        _ => {}
    }
}

/// `mlx5dv_devx_alloc_uar`: the doorbell page (logged; MMIO stores cannot be watched).
///
/// # Safety
/// `uar` null or the new UAR.
pub unsafe fn mlx5dv_devx_alloc_uar(
    _ctx: *mut ibv_context,
    _flags: u32,
    uar: *mut mlx5dv_devx_uar,
) {
    if uar.is_null() {
        return;
    }
    // SAFETY: the provider's new UAR.
    let u = unsafe { &*uar };
    let info = UarInfo {
        handle: uar as u64,
        page_id: u.page_id,
        reg_addr: u.reg_addr as u64,
        base_addr: u.base_addr as u64,
        mmap_off: u.mmap_off as u64,
    };
    let q = queues::lock().disc.on_alloc_uar(&info);
    record::gpu::queue_discovered(&q);
}
