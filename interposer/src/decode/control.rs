//! Control-path handlers: read the arguments and results of the calls that create, change
//! and destroy verbs objects (and the completion-channel and asynchronous events) into plain
//! values, and hand them to `record::control`. Each runs after the real call (a few also
//! before it, to read an object about to be destroyed), inside a guard. Calls that also need
//! pointers swapped go through `swap::objects` first.

use std::ffi::{c_int, c_uint, c_void, CStr};

use sigmatrace_schemas::{cq_event_kind, cq_variant, mr_variant, qp_variant};

use crate::ffi::dl::NextFn;
use crate::ffi::*;
use crate::record::control::{self as rc, AhInfo, CqInfo, MrInfo, QpInfo, QpModifyInfo};
use crate::record::{self, emit, emit_if};
use crate::runtime::{cq_owners, queues};
use crate::sink::{self, cat};

/// Writes `DeviceOpen` for a context (`query_guid`: the device is libibverbs' own).
///
/// # Safety
/// `ctx` live.
pub unsafe fn device_opened(ctx: *mut ibv_context, query_guid: bool) {
    // SAFETY: live context; device is set by libibverbs before the context is returned.
    let dev = unsafe { (*ctx).device };
    let (name, guid) = if dev.is_null() {
        ([0u8; 64], 0)
    } else {
        // SAFETY: the device outlives its contexts; name is a NUL-terminated array.
        let name = unsafe { (*dev).name }.map(|c| c as u8);
        (name, if query_guid { device_guid(dev) } else { 0 })
    };
    emit_if(
        cat::CONTROL,
        rc::device_open(sink::now(), ctx as u64, guid, &name),
    );
    if query_guid && sink::tracing(cat::CONTROL) {
        // SAFETY: a live context of libibverbs' own device.
        unsafe { port_addresses(ctx) };
    }
}

/// Ports queried per context, and GID-table entries per port.
const MAX_PORTS: u8 = 4;
const MAX_GIDS: c_int = 16;

/// Records the context's own port addresses (`port_addr=` attributes): LID and the non-zero
/// GIDs among the first [`MAX_GIDS`] entries, through the real `ibv_query_port` and
/// `ibv_query_gid` (control path, once per context).
///
/// # Safety
/// `ctx` a live context of a libibverbs device.
unsafe fn port_addresses(ctx: *mut ibv_context) {
    static PORT: NextFn = NextFn::new(c"ibv_query_port", Some(c"IBVERBS_1.1"), c"libibverbs.so.1");
    static GID: NextFn = NextFn::new(c"ibv_query_gid", Some(c"IBVERBS_1.1"), c"libibverbs.so.1");
    let (qp, qg) = (PORT.get(), GID.get());
    if qp == 0 {
        return;
    }
    type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    type QueryGid = unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    for port in 1..=MAX_PORTS {
        let mut pa = ibv_port_attr::default();
        // SAFETY: the real ibv_query_port(ctx, port, attr) with the full-size attribute
        // struct (it writes at most that); ctx is live.
        if unsafe { as_fn::<QueryPort>(qp)(ctx, port, &mut pa) } != 0 {
            break;
        }
        let mut gids = Vec::new();
        if qg != 0 {
            for i in 0..pa.gid_tbl_len.min(MAX_GIDS) {
                let mut g = ibv_gid::default();
                // SAFETY: the real ibv_query_gid(ctx, port, index, gid) writes one GID.
                let ok = unsafe { as_fn::<QueryGid>(qg)(ctx, port, i, &mut g) } == 0;
                // SAFETY: ibv_gid is a 16-byte union; `raw` is always a valid view.
                let raw = unsafe { g.raw };
                if ok && raw != [0; 16] {
                    gids.push((i as u32, raw));
                }
            }
        }
        rc::port_addr(ctx as u64, port, pa.lid, &gids);
    }
}

/// The node GUID through the real `ibv_get_device_guid` (a sysfs read on real hardware).
fn device_guid(dev: *mut ibv_device) -> u64 {
    static GUID: NextFn = NextFn::new(
        c"ibv_get_device_guid",
        Some(c"IBVERBS_1.1"),
        c"libibverbs.so.1",
    );
    match GUID.get() {
        0 => 0,
        // SAFETY: the real ibv_get_device_guid(struct ibv_device *) -> __be64; dev is a live
        // device, which it only reads. The GUID is big-endian.
        f => u64::from_be(unsafe { as_fn::<unsafe extern "C" fn(*mut ibv_device) -> u64>(f)(dev) }),
    }
}

// --- devices ---------------------------------------------------------------------------------

/// `ibv_get_device_list`: one `StringDef` process attribute naming the devices seen.
///
/// # Safety
/// `list` null or the NULL-terminated array just returned.
pub unsafe fn ibv_get_device_list(_num: *mut c_int, list: *mut *mut ibv_device) {
    if list.is_null() || !sink::tracing(cat::CONTROL) {
        return;
    }
    let mut names = String::from("ibv_devices=");
    for i in 0..256 {
        // SAFETY: the array is NULL-terminated.
        let d = unsafe { *list.add(i) };
        if d.is_null() {
            break;
        }
        if i > 0 {
            names.push(',');
        }
        // SAFETY: live device; name is NUL-terminated within its 64 bytes.
        let name = unsafe { CStr::from_ptr((*d).name.as_ptr()) };
        names.push_str(&name.to_string_lossy());
    }
    record::process_attr(&names);
}

/// `ibv_close_device`.
pub fn ibv_close_device(ctx: *mut ibv_context, ret: c_int) {
    emit_if(cat::CONTROL, rc::device_close(sink::now(), ctx as u64, ret));
}

// --- PDs and MRs -------------------------------------------------------------------------------

/// `ibv_alloc_pd` returned `pd` (non-null).
pub fn pd_allocated(ctx: *mut ibv_context, pd: *mut ibv_pd) {
    emit_if(
        cat::CONTROL,
        rc::pd_alloc(sink::now(), pd as u64, ctx as u64),
    );
}

/// `ibv_dealloc_pd`.
pub fn ibv_dealloc_pd(pd: *mut ibv_pd, ret: c_int) {
    emit_if(cat::CONTROL, rc::pd_dealloc(sink::now(), pd as u64, ret));
}

/// Writes `MrReg` for a new MR.
///
/// # Safety
/// `mr` null or a live MR.
unsafe fn mr_registered(mr: *mut ibv_mr, iova: Option<u64>, access: u32, variant: u32) {
    if mr.is_null() || !sink::tracing(cat::CONTROL) {
        return;
    }
    // SAFETY: live MR just returned by the provider.
    let m = unsafe { &*mr };
    let info = MrInfo {
        mr: mr as u64,
        pd: m.pd as u64,
        addr: m.addr as u64,
        length: m.length as u64,
        iova: iova.unwrap_or(m.addr as u64),
        lkey: m.lkey,
        rkey: m.rkey,
        access,
        variant,
    };
    emit(rc::mr_reg(sink::now(), &info));
}

/// `ibv_reg_mr`.
///
/// # Safety
/// `mr` null or the new MR.
pub unsafe fn ibv_reg_mr(
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _len: usize,
    access: c_int,
    mr: *mut ibv_mr,
) {
    // SAFETY: per caller.
    unsafe { mr_registered(mr, None, access as u32, mr_variant::REG_MR) }
}

/// `ibv_reg_mr_iova`.
///
/// # Safety
/// As [`ibv_reg_mr`].
pub unsafe fn ibv_reg_mr_iova(
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _len: usize,
    iova: u64,
    access: c_int,
    mr: *mut ibv_mr,
) {
    // SAFETY: per caller.
    unsafe { mr_registered(mr, Some(iova), access as u32, mr_variant::REG_MR_IOVA) }
}

/// `ibv_reg_mr_iova2`.
///
/// # Safety
/// As [`ibv_reg_mr`].
pub unsafe fn ibv_reg_mr_iova2(
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _len: usize,
    iova: u64,
    access: c_uint,
    mr: *mut ibv_mr,
) {
    // SAFETY: per caller.
    unsafe { mr_registered(mr, Some(iova), access, mr_variant::REG_MR_IOVA2) }
}

/// `ibv_reg_dmabuf_mr`.
///
/// # Safety
/// As [`ibv_reg_mr`].
pub unsafe fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _off: u64,
    _len: usize,
    iova: u64,
    _fd: c_int,
    access: c_int,
    mr: *mut ibv_mr,
) {
    // SAFETY: per caller.
    unsafe { mr_registered(mr, Some(iova), access as u32, mr_variant::REG_DMABUF_MR) }
}

/// `ibv_dereg_mr`.
pub fn ibv_dereg_mr(mr: *mut ibv_mr, ret: c_int) {
    emit_if(cat::CONTROL, rc::mr_dereg(sink::now(), mr as u64, ret));
}

// --- completion channels and events --------------------------------------------------------

/// `ibv_create_comp_channel`.
pub fn ibv_create_comp_channel(_ctx: *mut ibv_context, ch: *mut ibv_comp_channel) {
    let result = if ch.is_null() { -1 } else { 0 };
    emit_if(
        cat::EVENTS,
        rc::cq_event(
            sink::now(),
            cq_event_kind::CREATE_CHANNEL,
            ch as u64,
            0,
            result,
        ),
    );
}

/// `ibv_destroy_comp_channel`.
pub fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel, ret: c_int) {
    emit_if(
        cat::EVENTS,
        rc::cq_event(
            sink::now(),
            cq_event_kind::DESTROY_CHANNEL,
            ch as u64,
            0,
            ret,
        ),
    );
}

/// `ibv_get_cq_event`.
///
/// # Safety
/// `cq` is the program's out-pointer, set on success.
pub unsafe fn ibv_get_cq_event(
    _ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    _ctx: *mut *mut c_void,
    ret: c_int,
) {
    // SAFETY: on success the out-pointer holds the CQ.
    let which = if ret == 0 && !cq.is_null() {
        (unsafe { *cq }) as u64
    } else {
        0
    };
    emit_if(
        cat::EVENTS,
        rc::cq_event(sink::now(), cq_event_kind::GET_EVENT, which, 0, ret),
    );
}

/// `ibv_ack_cq_events`.
pub fn ibv_ack_cq_events(cq: *mut ibv_cq, n: c_uint, _ret: ()) {
    emit_if(
        cat::EVENTS,
        rc::cq_event(sink::now(), cq_event_kind::ACK_EVENTS, cq as u64, n, 0),
    );
}

/// `ibv_req_notify_cq` (through `ctx->ops`).
pub fn req_notify(cq: *mut ibv_cq, solicited_only: c_int, ret: c_int) {
    emit_if(
        cat::EVENTS,
        rc::cq_event(
            sink::now(),
            cq_event_kind::REQ_NOTIFY,
            cq as u64,
            solicited_only as u32,
            ret,
        ),
    );
}

/// `ibv_get_async_event`.
///
/// # Safety
/// `ev` is the program's event, filled on success.
pub unsafe fn ibv_get_async_event(ctx: *mut ibv_context, ev: *mut ibv_async_event, ret: c_int) {
    if ret != 0 || ev.is_null() || !sink::tracing(cat::EVENTS) {
        return;
    }
    // SAFETY: filled by the provider on success.
    let (ty, element) = unsafe {
        let e = &*ev;
        let ty = e.event_type;
        let element = match ty {
            IBV_EVENT_PORT_ACTIVE
            | IBV_EVENT_PORT_ERR
            | IBV_EVENT_LID_CHANGE
            | IBV_EVENT_PKEY_CHANGE
            | IBV_EVENT_SM_CHANGE
            | IBV_EVENT_CLIENT_REREGISTER
            | IBV_EVENT_GID_CHANGE => e.element.port_num as u32 as u64,
            IBV_EVENT_DEVICE_FATAL => 0,
            _ => e.element.qp as u64,
        };
        (ty, element)
    };
    emit(rc::async_event(sink::now(), ctx as u64, ty, element));
}

// --- CQs and SRQs -----------------------------------------------------------------------------

/// `ibv_create_cq` returned `cq`.
///
/// # Safety
/// `cq` the new CQ (live).
pub unsafe fn cq_created(
    ctx: *mut ibv_context,
    ch: *mut ibv_comp_channel,
    vector: c_int,
    cq: *mut ibv_cq,
) {
    let info = CqInfo {
        cq: cq as u64,
        context: ctx as u64,
        channel: ch as u64,
        // SAFETY: new live CQ; cqe holds the actual size.
        cqe: unsafe { (*cq).cqe } as u32,
        comp_vector: vector as u32,
        wc_flags: 0,
        variant: cq_variant::CREATE_CQ,
    };
    cq_owners::cq_created(cq as usize);
    emit_if(cat::CONTROL, rc::cq_create(sink::now(), &info));
}

/// The `wc_flags` an extended CQ is created with.
///
/// # Safety
/// `attr` the program's attributes (non-null).
pub unsafe fn cq_ex_wc_flags(attr: *const ibv_cq_init_attr_ex) -> u64 {
    // SAFETY: per caller.
    unsafe { (*attr).wc_flags }
}

/// An extended CQ was created (`ibv_create_cq_ex`, `mlx5dv_create_cq`).
///
/// # Safety
/// `attr` the program's attributes, `cq` the new CQ (both non-null).
pub unsafe fn cq_ex_created(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
    cq: *mut ibv_cq_ex,
    variant: u32,
) {
    // SAFETY: the program's attributes and the provider's new CQ.
    let (a, cqe) = unsafe { (&*attr, (*cq).cqe) };
    let info = CqInfo {
        cq: cq as u64,
        context: ctx as u64,
        channel: a.channel as u64,
        cqe: cqe as u32,
        comp_vector: a.comp_vector,
        wc_flags: a.wc_flags,
        variant,
    };
    cq_owners::cq_created(cq as usize);
    emit_if(cat::CONTROL, rc::cq_create(sink::now(), &info));
}

/// Before `ibv_destroy_cq`: stop watching its ring (`mlx5dv_init_obj`), which the call frees.
pub fn destroy_cq_pre(cq: *mut ibv_cq) {
    queues::gone(queues::Key::Cq(cq as u64));
    queues::lock().cqns.remove(&(cq as u64));
}

/// `ibv_destroy_cq`.
pub fn ibv_destroy_cq(_: (), cq: *mut ibv_cq, ret: c_int) {
    emit_if(cat::CONTROL, rc::cq_destroy(sink::now(), cq as u64, ret));
}

/// `ibv_create_srq`.
///
/// # Safety
/// `attr` the program's attributes (updated by the provider), `srq` null or the new SRQ.
pub unsafe fn ibv_create_srq(_pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr, srq: *mut ibv_srq) {
    if srq.is_null() || attr.is_null() {
        return;
    }
    // SAFETY: the program's live attributes.
    let a = unsafe { (*attr).attr };
    // SAFETY: srq is the live new SRQ.
    unsafe { srq_created(a, srq) }
}

/// `ibv_create_srq_ex` (through `verbs_context`).
///
/// # Safety
/// As [`ibv_create_srq`].
pub unsafe fn srq_created_ex(attr: *mut ibv_srq_init_attr_ex, srq: *mut ibv_srq) {
    if srq.is_null() || attr.is_null() {
        return;
    }
    // SAFETY: the program's live attributes.
    let a = unsafe { (*attr).attr };
    // SAFETY: srq is the live new SRQ.
    unsafe { srq_created(a, srq) }
}

/// The `SrqCreate` record of a new SRQ, with the attributes the provider settled on.
///
/// # Safety
/// `srq` must be a live SRQ.
unsafe fn srq_created(a: ibv_srq_attr, srq: *mut ibv_srq) {
    // SAFETY: live object.
    let pd = unsafe { (*srq).pd };
    emit_if(
        cat::CONTROL,
        rc::srq_create(
            sink::now(),
            srq as u64,
            pd as u64,
            a.max_wr,
            a.max_sge,
            a.srq_limit,
            0,
        ),
    );
}

/// `ibv_destroy_srq`.
pub fn ibv_destroy_srq(srq: *mut ibv_srq, ret: c_int) {
    emit_if(cat::CONTROL, rc::srq_destroy(sink::now(), srq as u64, ret));
}

// --- QPs ----------------------------------------------------------------------------------------

/// The `QpCreate` fields of a new QP; also notes which CQs it completes into
/// ([`cq_owners`], and a `qp_cq=` process attribute for the converter).
///
/// # Safety
/// `qp` live.
unsafe fn qp_info(qp: *mut ibv_qp, cap: ibv_qp_cap, variant: u32) -> QpInfo {
    // SAFETY: live QP.
    let q = unsafe { &*qp };
    let (send_cq, recv_cq) = (q.send_cq as usize, q.recv_cq as usize);
    cq_owners::qp_created(qp as usize, q.qp_num, send_cq, recv_cq);
    if sink::tracing(cat::CONTROL) {
        rc::qp_cqs(
            qp as u64,
            q.qp_num,
            send_cq as u64,
            recv_cq as u64,
            q.srq as u64,
        );
    }
    QpInfo {
        qp: qp as u64,
        context: q.context as u64,
        srq: q.srq as u64,
        qpn: q.qp_num,
        qp_type: q.qp_type,
        variant,
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline: cap.max_inline_data,
    }
}

/// The context of a live QP.
///
/// # Safety
/// `qp` live.
pub unsafe fn qp_context(qp: *mut ibv_qp) -> *mut ibv_context {
    // SAFETY: per caller.
    unsafe { (*qp).context }
}

/// `ibv_create_qp` returned `qp`.
///
/// # Safety
/// `attr` the program's attributes (caps updated by the provider), `qp` the new QP (both
/// non-null).
pub unsafe fn qp_created(_pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr, qp: *mut ibv_qp) {
    // SAFETY: live objects.
    let info = unsafe { qp_info(qp, (*attr).cap, qp_variant::CREATE_QP) };
    emit_if(cat::CONTROL, rc::qp_create(sink::now(), &info));
}

/// Whether an extended QP is created with the `ibv_wr_*` API (`SEND_OPS_FLAGS`).
///
/// # Safety
/// `attr` the program's attributes (non-null).
pub unsafe fn qp_ex_has_send_ops(attr: *const ibv_qp_init_attr_ex) -> bool {
    // SAFETY: per caller.
    let a = unsafe { &*attr };
    a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 && a.send_ops_flags != 0
}

/// An extended QP was created (`ibv_create_qp_ex`, `mlx5dv_create_qp`).
///
/// # Safety
/// `attr` the program's attributes, `qp` the new QP (both non-null).
pub unsafe fn qp_ex_created(attr: *mut ibv_qp_init_attr_ex, qp: *mut ibv_qp, variant: u32) {
    // SAFETY: live objects.
    let info = unsafe { qp_info(qp, (*attr).cap, variant) };
    emit_if(cat::CONTROL, rc::qp_create(sink::now(), &info));
}

/// `ibv_open_qp` (XRC): recorded as a `QpCreate` of the extended kind.
///
/// # Safety
/// `qp` null or the opened QP.
pub unsafe fn qp_opened(_ctx: *mut ibv_context, qp: *mut ibv_qp) {
    if qp.is_null() {
        return;
    }
    // SAFETY: live QP.
    let info = unsafe { qp_info(qp, ibv_qp_cap::default(), qp_variant::CREATE_QP_EX) };
    emit_if(cat::CONTROL, rc::qp_create(sink::now(), &info));
}

/// `ibv_modify_qp`: the state change and connection data.
///
/// # Safety
/// `attr` the program's attributes.
pub unsafe fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int, ret: c_int) {
    if qp.is_null() || attr.is_null() || !sink::tracing(cat::CONTROL) {
        return;
    }
    // SAFETY: live QP, program's attributes.
    let (qpn, a) = unsafe { ((*qp).qp_num, &*attr) };
    let m = mask as u32;
    let has = |bit: u32| m & bit != 0;
    let mut info = QpModifyInfo {
        qpn,
        mask: m,
        result: ret,
        ..Default::default()
    };
    if has(IBV_QP_STATE) {
        info.new_state = a.qp_state as u8;
    }
    if has(IBV_QP_PATH_MTU) {
        info.path_mtu = a.path_mtu as u8;
    }
    if has(IBV_QP_PORT) {
        info.port = a.port_num;
    }
    if has(IBV_QP_AV) {
        let av = &a.ah_attr;
        info.sl = av.sl;
        info.dlid = av.dlid;
        info.is_global = av.is_global;
        if info.port == 0 {
            info.port = av.port_num;
        }
        if av.is_global != 0 {
            info.sgid_index = av.grh.sgid_index;
            // SAFETY: ibv_gid is a 16-byte union; `raw` is always a valid view.
            info.dgid = unsafe { av.grh.dgid.raw };
        }
    }
    if has(IBV_QP_DEST_QPN) {
        info.dest_qpn = a.dest_qp_num;
    }
    if has(IBV_QP_SQ_PSN) {
        info.sq_psn = a.sq_psn;
    }
    if has(IBV_QP_RQ_PSN) {
        info.rq_psn = a.rq_psn;
    }
    if has(IBV_QP_QKEY) {
        info.qkey = a.qkey;
    }
    emit(rc::qp_modify(sink::now(), &info));
}

/// Before `ibv_destroy_qp`: stop watching its send ring (`mlx5dv_init_obj`), which the call
/// frees; the QPN (the QP is freed by the call).
///
/// # Safety
/// `qp` live.
pub unsafe fn destroy_qp_pre(qp: *mut ibv_qp) -> u32 {
    queues::gone(queues::Key::Qp(qp as u64));
    // SAFETY: live until the real call.
    if qp.is_null() {
        0
    } else {
        unsafe { (*qp).qp_num }
    }
}

/// `ibv_destroy_qp`.
pub fn ibv_destroy_qp(qpn: u32, qp: *mut ibv_qp, ret: c_int) {
    if ret == 0 {
        cq_owners::qp_destroyed(qp as usize);
    }
    emit_if(
        cat::CONTROL,
        rc::qp_destroy(sink::now(), qp as u64, qpn, ret),
    );
}

// --- AHs ------------------------------------------------------------------------------------------

/// `ibv_create_ah`.
///
/// # Safety
/// `attr` the program's attributes, `ah` null or the new AH.
pub unsafe fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr, ah: *mut ibv_ah) {
    if ah.is_null() || attr.is_null() {
        return;
    }
    // SAFETY: program's attributes.
    let a = unsafe { &*attr };
    let info = AhInfo {
        ah: ah as u64,
        pd: pd as u64,
        dlid: a.dlid,
        sl: a.sl,
        is_global: a.is_global,
        port: a.port_num,
        sgid_index: if a.is_global != 0 {
            a.grh.sgid_index
        } else {
            0
        },
        // SAFETY: ibv_gid is a 16-byte union; `raw` is always valid.
        dgid: if a.is_global != 0 {
            unsafe { a.grh.dgid.raw }
        } else {
            [0; 16]
        },
    };
    emit_if(cat::CONTROL, rc::ah_create(sink::now(), &info));
}

/// `ibv_destroy_ah`.
pub fn ibv_destroy_ah(ah: *mut ibv_ah, ret: c_int) {
    emit_if(cat::CONTROL, rc::ah_destroy(sink::now(), ah as u64, ret));
}
