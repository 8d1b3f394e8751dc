//! Queue pairs: creation, the state machine (ibv_modify_qp), query, destruction.

use crate::ffi::*;
use crate::verbs::ctx::set_errno;
use crate::verbs::objects::{ah_node, pd_id, SnCq, SnSrq};
use crate::wire::queues;
use crate::wire::shm::QpFile;
use crate::wire::state::*;
use crate::wire::work::*;
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// driver.h's `VERBS_QP_EX`.
const VERBS_QP_EX: u32 = 1 << 1;

/// Staging area of the ibv_wr_* builder API.
pub struct WrBuild {
    pub wqes: Vec<SendWqe>,
    pub n: usize,
    pub err: c_int,
}

/// A QP as softnic allocates it: rdma-core's `struct verbs_qp` layout (ibv_qp_ex, comp_mask,
/// xrcd), then softnic's fields.
#[repr(C)]
pub struct SnQp {
    pub qpx: ibv_qp_ex,
    pub comp_mask: u32,
    pub xrcd: *mut c_void,
    pub inner: Arc<QpInner>,
    pub attr: Mutex<ibv_qp_attr>,
    pub init: ibv_qp_init_attr,
    pub wr: std::cell::UnsafeCell<WrBuild>,
}

/// # Safety
/// `qp` must be a softnic QP.
pub unsafe fn sn_qp<'a>(qp: *mut ibv_qp) -> &'a SnQp {
    &*(qp as *mut SnQp)
}

const SEND_OPS_SUPPORTED: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;

pub(crate) unsafe fn create_qp(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
    ex: bool,
) -> *mut ibv_qp {
    create_qp_in(ctx, pd, a, ex, null_mut())
}

/// [`create_qp`], with the XRC domain of an XRC target (`IBV_QPT_XRC_RECV`; `verbs::xrc`).
unsafe fn create_qp_in(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
    ex: bool,
    xrcd: *mut ibv_xrcd,
) -> *mut ibv_qp {
    let g = global();
    // QP types verbs defines that softnic does not offer (raw Ethernet packets, the driver's
    // DC): EOPNOTSUPP, so that a program probing for them can tell "unsupported" from
    // "wrong" (rdma-core's tests skip then). An unknown type is EINVAL.
    if matches!(a.qp_type, IBV_QPT_RAW_PACKET | IBV_QPT_DRIVER) {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    let verbs_type = a.qp_type;
    let valid = match verbs_type {
        // An XRC target has no PD, CQ or queue of its own; an initiator no receive queue.
        IBV_QPT_XRC_RECV => !xrcd.is_null(),
        IBV_QPT_XRC_SEND => !pd.is_null() && !a.send_cq.is_null() && a.srq.is_null(),
        _ => init_attr_valid(pd, a),
    };
    if !valid {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let xrc = matches!(verbs_type, IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV);
    if xrc {
        // Both are RC on the wire; the initiator's queues as given, without receives.
        a.cap.max_recv_wr = 0;
        a.cap.max_recv_sge = 0;
        if verbs_type == IBV_QPT_XRC_RECV {
            a.cap = ibv_qp_cap::default();
            a.send_cq = null_mut();
            a.recv_cq = null_mut();
        }
    }
    if crate::verbs::misc::huge_pages_refused("MLX_QP_ALLOC_TYPE") {
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    let recv_cq = if a.recv_cq.is_null() {
        a.send_cq
    } else {
        a.recv_cq
    };
    let (send_inner, recv_inner) = if a.send_cq.is_null() {
        // An XRC target's own CQ is never written: its receives complete on their SRQs' CQs.
        let none = Arc::new(CqInner::unused());
        (none.clone(), none)
    } else {
        (
            (*(a.send_cq as *mut SnCq)).inner.clone(),
            (*(recv_cq as *mut SnCq)).inner.clone(),
        )
    };
    let srq = (!a.srq.is_null()).then(|| (*(a.srq as *mut SnSrq)).inner.clone());
    let transport = if xrc { IBV_QPT_RC } else { a.qp_type };
    let alloc = crate::wire::shm::alloc_qpn(g.node)
        .and_then(|qpn| Ok((qpn, QpInner::new_file(g.node, qpn, transport)?)));
    let (qpn, file) = match alloc {
        Ok(qf) => qf,
        Err(e) => {
            eprintln!("softnic: {e}");
            set_errno(libc::ENOMEM);
            return null_mut();
        }
    };
    a.cap.max_inline_data = MAX_INLINE as u32;
    let cqs = (send_inner.clone(), recv_inner.clone());
    let on_wire = ibv_qp_init_attr {
        qp_type: transport,
        ..*a
    };
    let pd_number = if pd.is_null() { u32::MAX } else { pd_id(pd) };
    let mut inner = reset_qp(&on_wire, pd_number, qpn, file, cqs, srq);
    inner.xrcd = crate::verbs::xrc::xrcd_id(xrcd);
    let inner = Arc::new(inner);
    let mut b = Box::new(SnQp {
        // SAFETY (zeroed): ibv_qp_ex is C data; zero pthread objects are valid initialisers.
        qpx: std::mem::zeroed(),
        comp_mask: if ex { VERBS_QP_EX } else { 0 },
        xrcd: xrcd.cast(),
        inner,
        attr: Mutex::new(Default::default()),
        init: *a,
        wr: std::cell::UnsafeCell::new(WrBuild {
            wqes: Vec::new(),
            n: 0,
            err: 0,
        }),
    });
    let p = &mut *b as *mut SnQp;
    Arc::get_mut(&mut b.inner).expect("fresh QP").qp_ptr = p as usize;
    {
        let q = &mut b.qpx.qp_base;
        q.context = ctx;
        q.qp_context = a.qp_context;
        q.pd = pd;
        q.send_cq = a.send_cq;
        q.recv_cq = recv_cq;
        q.srq = a.srq;
        q.handle = qpn;
        q.qp_num = qpn;
        q.state = IBV_QPS_RESET;
        q.qp_type = a.qp_type;
    }
    crate::verbs::wr::fill_qp_ex_ops(&mut b.qpx);
    {
        let mut at = b.attr.lock().unwrap_or_else(|e| e.into_inner());
        at.cap = a.cap;
        at.qp_state = IBV_QPS_RESET;
        at.port_num = 1;
    }
    register_qp(&b.inner, &send_inner, &recv_inner);
    Box::into_raw(b) as *mut ibv_qp
}

/// What `ibv_create_qp` accepts: a PD, a send CQ, a receive CQ or SRQ, RC/UC/UD, and
/// capacities within softnic's limits.
fn init_attr_valid(pd: *mut ibv_pd, a: &ibv_qp_init_attr) -> bool {
    let c = &a.cap;
    !(pd.is_null()
        || a.send_cq.is_null()
        || (a.recv_cq.is_null() && a.srq.is_null())
        || !matches!(a.qp_type, IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_UD)
        || c.max_send_wr > MAX_WR
        || c.max_recv_wr > MAX_WR
        || c.max_send_sge as usize > MAX_SGE
        || c.max_recv_sge as usize > MAX_SGE
        || c.max_inline_data as usize > MAX_INLINE)
}

/// A new QP in RESET as `a` describes it (type, capacities, `sq_sig_all`), on `file`, with
/// its `(send, receive)` CQs: no destination, empty queues, nothing pending.
fn reset_qp(
    a: &ibv_qp_init_attr,
    pd: u32,
    qpn: u32,
    file: QpFile,
    (send_cq, recv_cq): (Arc<CqInner>, Arc<CqInner>),
    srq: Option<Arc<SrqInner>>,
) -> QpInner {
    let cap = &a.cap;
    QpInner {
        qpn,
        qp_type: a.qp_type,
        pd,
        state: AtomicU32::new(IBV_QPS_RESET),
        file,
        send_cq,
        recv_cq,
        srq,
        sq_sig_all: a.sq_sig_all != 0,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline: MAX_INLINE as u32,
        dest_node: AtomicU32::new(0),
        dest_qpn: AtomicU32::new(0),
        qkey: AtomicU32::new(0),
        access: AtomicU32::new(0),
        min_rnr_timer: AtomicU32::new(0),
        rnr_retry: AtomicU32::new(0),
        retry_cnt: AtomicU32::new(0),
        timeout: AtomicU32::new(0),
        max_rd_atomic: AtomicU32::new(1),
        sl: AtomicU32::new(0),
        sq: Mutex::new(SendQueue::new(cap.max_send_wr)),
        rq: Mutex::new(RecvQueue {
            q: VecDeque::with_capacity(cap.max_recv_wr as usize),
            max: cap.max_recv_wr,
        }),
        resp: Mutex::new(Responder {
            expected_msn: 0,
            nak_sent: false,
            cur: None,
            read: None,
            ack_pending: None,
            acked_early: None,
            peer: None,
        }),
        backlog: AtomicBool::new(false),
        qp_ptr: 0,
        dv: std::sync::OnceLock::new(),
        xrcd: 0,
    }
}

/// Lists a new QP with its CQs (once when both are the same) and in the process's QPs.
fn register_qp(inner: &Arc<QpInner>, send: &Arc<CqInner>, recv: &Arc<CqInner>) {
    send.qps
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(inner.clone());
    if !Arc::ptr_eq(send, recv) {
        recv.qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(inner.clone());
    }
    global()
        .qps
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .push(inner.clone());
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    create_qp((*pd).context, pd, &mut *attr, false)
}

pub unsafe extern "C" fn vctx_create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let a = &mut *attr;
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
        | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    // An XRC target is created on an XRC domain, every other QP on a PD.
    let xrcd = if a.comp_mask & IBV_QP_INIT_ATTR_XRCD != 0 {
        a.xrcd
    } else {
        null_mut()
    };
    let placed = if a.qp_type == IBV_QPT_XRC_RECV {
        !xrcd.is_null()
    } else {
        a.comp_mask & IBV_QP_INIT_ATTR_PD != 0
    };
    if !placed || a.comp_mask & !known != 0 {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    // `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` (UD): a QP's own multicast sends do not loop back
    // to it — softnic has no multicast, so nothing loops back: honoured as is.
    let honoured = if a.qp_type == IBV_QPT_UD {
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
    } else {
        0
    };
    if (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags & !honoured != 0)
        || (a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0
            && a.send_ops_flags & !SEND_OPS_SUPPORTED != 0)
    {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    let mut base = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    let ex = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    let pd = if a.qp_type == IBV_QPT_XRC_RECV {
        null_mut()
    } else {
        a.pd
    };
    let qp = create_qp_in(ctx, pd, &mut base, ex, xrcd);
    a.cap = base.cap;
    qp
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    let s = sn_qp(qp);
    if s.comp_mask & VERBS_QP_EX != 0 {
        qp as *mut ibv_qp_ex
    } else {
        null_mut()
    }
}

/// Attribute masks a transition requires and allows (IB spec, as the kernel checks them).
fn transition_masks(cur: u32, next: u32, t: u32) -> Option<(u32, u32)> {
    if matches!(t, IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV) {
        return xrc_masks(cur, next, t);
    }
    let s = IBV_QP_STATE;
    let common_init = IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    match (cur, next) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => Some((s, s | IBV_QP_CUR_STATE)),
        (IBV_QPS_RESET, IBV_QPS_INIT) | (IBV_QPS_INIT, IBV_QPS_INIT) => {
            let req = if cur == IBV_QPS_RESET {
                s | common_init
            } else {
                s
            };
            Some(match t {
                IBV_QPT_UD => (
                    req | if cur == IBV_QPS_RESET { IBV_QP_QKEY } else { 0 },
                    s | common_init | IBV_QP_QKEY,
                ),
                _ => (
                    req | if cur == IBV_QPS_RESET {
                        IBV_QP_ACCESS_FLAGS
                    } else {
                        0
                    },
                    s | common_init | IBV_QP_ACCESS_FLAGS,
                ),
            })
        }
        (IBV_QPS_INIT, IBV_QPS_RTR) => Some(match t {
            IBV_QPT_RC => (
                RC_RTR_ATTRS,
                RC_RTR_ATTRS | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
            ),
            IBV_QPT_UC => (
                s | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
                s | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_ALT_PATH
                    | IBV_QP_ACCESS_FLAGS
                    | IBV_QP_PKEY_INDEX,
            ),
            _ => (s, s | IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
        }),
        (IBV_QPS_RTR, IBV_QPS_RTS) => Some(match t {
            IBV_QPT_RC => (
                RC_RTS_ATTRS,
                RC_RTS_ATTRS
                    | IBV_QP_CUR_STATE
                    | IBV_QP_ALT_PATH
                    | IBV_QP_ACCESS_FLAGS
                    | IBV_QP_MIN_RNR_TIMER
                    | IBV_QP_PATH_MIG_STATE,
            ),
            IBV_QPT_UC => (
                s | IBV_QP_SQ_PSN,
                s | IBV_QP_SQ_PSN
                    | IBV_QP_CUR_STATE
                    | IBV_QP_ALT_PATH
                    | IBV_QP_ACCESS_FLAGS
                    | IBV_QP_PATH_MIG_STATE,
            ),
            _ => (
                s | IBV_QP_SQ_PSN,
                s | IBV_QP_SQ_PSN | IBV_QP_CUR_STATE | IBV_QP_QKEY,
            ),
        }),
        (IBV_QPS_RTS, IBV_QPS_RTS) | (IBV_QPS_SQD, IBV_QPS_RTS) | (IBV_QPS_SQE, IBV_QPS_RTS) => {
            Some((
                s,
                s | IBV_QP_CUR_STATE
                    | IBV_QP_ACCESS_FLAGS
                    | IBV_QP_ALT_PATH
                    | IBV_QP_PATH_MIG_STATE
                    | IBV_QP_MIN_RNR_TIMER
                    | IBV_QP_QKEY,
            ))
        }
        (IBV_QPS_RTS, IBV_QPS_SQD) => Some((s, s | IBV_QP_EN_SQD_ASYNC_NOTIFY)),
        (IBV_QPS_SQD, IBV_QPS_SQD) => Some((
            s,
            s | IBV_QP_AV
                | IBV_QP_ALT_PATH
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_PKEY_INDEX
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_PATH_MIG_STATE
                | IBV_QP_QKEY
                | IBV_QP_MAX_QP_RD_ATOMIC
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY,
        )),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    let s = sn_qp(qp);
    let q = &s.inner;
    let a = &*attr;
    let mask = mask as u32;
    let mut stored = s.attr.lock().unwrap_or_else(|e| e.into_inner());
    let cur = q.state();
    if mask & IBV_QP_CUR_STATE != 0 && a.cur_qp_state != cur {
        return libc::EINVAL;
    }
    let next = if mask & IBV_QP_STATE != 0 {
        a.qp_state
    } else {
        cur
    };
    if mask & IBV_QP_STATE == 0 {
        // Attribute change without a transition: only allowed where RTS→RTS would allow it.
        if !matches!(cur, IBV_QPS_RTS | IBV_QPS_SQD) {
            return libc::EINVAL;
        }
    } else {
        // The QP's verbs type (an XRC QP's transport is RC).
        let Some((req, opt)) = transition_masks(cur, next, s.init.qp_type) else {
            return libc::EINVAL;
        };
        if mask & req != req || mask & !(req | opt) != 0 {
            return libc::EINVAL;
        }
    }
    if (mask & IBV_QP_PORT != 0 && a.port_num != 1)
        || (mask & IBV_QP_PKEY_INDEX != 0 && a.pkey_index != 0)
        || (mask & IBV_QP_MAX_QP_RD_ATOMIC != 0 && a.max_rd_atomic as u32 > MAX_RD_ATOMIC)
        || (mask & IBV_QP_MAX_DEST_RD_ATOMIC != 0 && a.max_dest_rd_atomic as u32 > MAX_RD_ATOMIC)
        || (mask & IBV_QP_PATH_MTU != 0 && !(IBV_MTU_256..=IBV_MTU_4096).contains(&a.path_mtu))
    {
        return libc::EINVAL;
    }
    if mask & IBV_QP_AV != 0 {
        let Some(node) = ah_node(&a.ah_attr) else {
            return libc::EINVAL;
        };
        q.dest_node.store(node, Ordering::Relaxed);
        q.sl.store(a.ah_attr.sl as u32, Ordering::Relaxed);
        stored.ah_attr = a.ah_attr;
    }
    macro_rules! set {
        ($bit:expr, $field:ident) => {
            if mask & $bit != 0 {
                stored.$field = a.$field;
            }
        };
    }
    set!(IBV_QP_PATH_MTU, path_mtu);
    set!(IBV_QP_QKEY, qkey);
    set!(IBV_QP_RQ_PSN, rq_psn);
    set!(IBV_QP_SQ_PSN, sq_psn);
    set!(IBV_QP_DEST_QPN, dest_qp_num);
    set!(IBV_QP_ACCESS_FLAGS, qp_access_flags);
    set!(IBV_QP_PKEY_INDEX, pkey_index);
    set!(IBV_QP_PORT, port_num);
    set!(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
    set!(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
    set!(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
    set!(IBV_QP_TIMEOUT, timeout);
    set!(IBV_QP_RETRY_CNT, retry_cnt);
    set!(IBV_QP_RNR_RETRY, rnr_retry);
    set!(IBV_QP_PATH_MIG_STATE, path_mig_state);
    if mask & IBV_QP_DEST_QPN != 0 {
        q.dest_qpn.store(a.dest_qp_num, Ordering::Relaxed);
    }
    if mask & IBV_QP_QKEY != 0 {
        q.qkey.store(a.qkey, Ordering::Relaxed);
    }
    if mask & IBV_QP_ACCESS_FLAGS != 0 {
        q.access.store(a.qp_access_flags, Ordering::Relaxed);
    }
    if mask & IBV_QP_MIN_RNR_TIMER != 0 {
        q.min_rnr_timer
            .store(a.min_rnr_timer as u32, Ordering::Relaxed);
    }
    if mask & IBV_QP_RNR_RETRY != 0 {
        q.rnr_retry.store(a.rnr_retry as u32, Ordering::Relaxed);
    }
    if mask & IBV_QP_RETRY_CNT != 0 {
        q.retry_cnt.store(a.retry_cnt as u32, Ordering::Relaxed);
    }
    if mask & IBV_QP_TIMEOUT != 0 {
        q.timeout.store(a.timeout as u32, Ordering::Relaxed);
    }
    if mask & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        q.max_rd_atomic
            .store(a.max_rd_atomic.max(1) as u32, Ordering::Relaxed);
    }
    if mask & IBV_QP_STATE != 0 {
        apply_transition(s, &stored, cur, next);
        stored.qp_state = next;
    }
    0
}

unsafe fn apply_transition(s: &SnQp, at: &ibv_qp_attr, cur: u32, next: u32) {
    let q = &s.inner;
    let qp = s as *const SnQp as *mut ibv_qp;
    match next {
        IBV_QPS_RESET => {
            let mut r = q.resp.lock().unwrap_or_else(|e| e.into_inner());
            let mut sq = q.sq.lock().unwrap_or_else(|e| e.into_inner());
            q.state.store(IBV_QPS_RESET, Ordering::Release);
            sq.head = sq.tail;
            sq.next = sq.tail;
            sq.rd_outstanding = 0;
            sq.rnr_until = None;
            sq.peer = None;
            r.cur = None;
            r.read = None;
            r.ack_pending = None;
            r.acked_early = None;
            r.nak_sent = false;
            r.peer = None;
            q.rq.lock().unwrap_or_else(|e| e.into_inner()).q.clear();
            q.backlog.store(false, Ordering::Relaxed);
            clean_cqs(q);
        }
        IBV_QPS_ERR => {
            let mut r = q.resp.lock().unwrap_or_else(|e| e.into_inner());
            // A NIC applies packets as they arrive: what reached this QP before the transition
            // — requests, then ACKs and read responses — takes effect before everything left
            // is flushed, whether or not the progress thread has looked at it yet. (Without
            // this a requester whose ACKs were waiting in its ring flushed WRs the peer had
            // received and acknowledged.) `process_req` may itself move the QP to ERR (and
            // lock the send queue): before the send queue is locked here.
            let live = matches!(cur, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_SQE);
            if live {
                global().responder_pass(|| crate::wire::responder::process_req(q, &mut r));
            }
            let mut sq = q.sq.lock().unwrap_or_else(|e| e.into_inner());
            if live && q.state() != IBV_QPS_ERR {
                crate::wire::engine::process_resp(q, &mut sq);
            }
            queues::qp_error(q, &mut sq);
        }
        IBV_QPS_RTR if cur == IBV_QPS_INIT => {
            let mut r = q.resp.lock().unwrap_or_else(|e| e.into_inner());
            r.expected_msn = if q.qp_type == IBV_QPT_RC {
                at.rq_psn
            } else {
                0
            };
            r.nak_sent = false;
            r.peer = None;
            q.state.store(next, Ordering::Release);
        }
        IBV_QPS_RTS if cur == IBV_QPS_RTR => {
            let mut sq = q.sq.lock().unwrap_or_else(|e| e.into_inner());
            sq.next_msn = if q.qp_type == IBV_QPT_RC {
                at.sq_psn
            } else {
                0
            };
            sq.acked_msn = sq.next_msn;
            sq.rnr_left = at.rnr_retry as u32;
            q.state.store(next, Ordering::Release);
        }
        _ => q.state.store(next, Ordering::Release),
    }
    (*qp).state = next;
}

/// The QP's unpolled completions leave its CQs (RESET, destroy: see `CqInner::clean`).
fn clean_cqs(q: &QpInner) {
    q.recv_cq.clean(q.qpn);
    if !Arc::ptr_eq(&q.send_cq, &q.recv_cq) {
        q.send_cq.clean(q.qpn);
    }
}

/// The XRC types' transitions, as the kernel's table has them: RC's, but an initiator needs
/// no responder resources at INIT→RTR (it has no receive side) and a target no requester
/// attributes but its timeout at RTR→RTS (it sends no request); what RC requires stays
/// allowed.
fn xrc_masks(cur: u32, next: u32, t: u32) -> Option<(u32, u32)> {
    let (req, opt) = transition_masks(cur, next, IBV_QPT_RC)?;
    let responder = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    let requester = IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    Some(match (cur, next, t) {
        (IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_SEND) => (req & !responder, opt | responder),
        (IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_RECV) => (req & !requester, opt | requester),
        _ => (req, opt),
    })
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    let s = sn_qp(qp);
    let mut a = *s.attr.lock().unwrap_or_else(|e| e.into_inner());
    a.qp_state = s.inner.state();
    a.cur_qp_state = a.qp_state;
    a.cap = s.init.cap;
    *attr = a;
    if !init.is_null() {
        *init = s.init;
        (*init).qp_context = (*qp).qp_context;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    let b = Box::from_raw(qp as *mut SnQp);
    let inner = b.inner.clone();
    let g = global();
    g.qps
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|q| !Arc::ptr_eq(q, &inner));
    for cq in [&inner.send_cq, &inner.recv_cq] {
        cq.qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|q| !Arc::ptr_eq(q, &inner));
    }
    // Wait until no engine pass still works on this QP, send the ACK a NIC would already have
    // sent for what was received, then retire its name.
    {
        let mut r = inner.resp.lock().unwrap_or_else(|e| e.into_inner());
        crate::wire::responder::flush_ack(&inner, &mut r);
    }
    drop(inner.sq.lock().unwrap_or_else(|e| e.into_inner()));
    inner.state.store(IBV_QPS_RESET, Ordering::Release);
    clean_cqs(&inner);
    inner.file.retire();
    drop(b);
    0
}
