//! Control-path objects: PD, MR, MW, completion channel, CQ, SRQ, AH.

use crate::ffi::*;
use crate::verbs::ctx::set_errno;
use crate::wire::state::*;
use crate::wire::work::*;
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::verbs::qp::{vctx_create_qp_ex, SnQp};

#[repr(C)]
pub struct SnPd {
    pub pd: ibv_pd,
    /// The protection domain's number (a parent domain's is its PD's).
    pub id: u32,
    /// A parent domain (`ibv_alloc_parent_domain`): a second handle of its PD's domain.
    pub parent: bool,
}

#[repr(C)]
pub struct SnCq {
    pub cq: ibv_cq_ex,
    pub inner: Arc<CqInner>,
    pub cur: Cqe,
}

#[repr(C)]
pub struct SnChannel {
    pub ch: ibv_comp_channel,
    pub inner: Arc<ChannelInner>,
}

#[repr(C)]
pub struct SnSrq {
    pub srq: ibv_srq,
    pub inner: Arc<SrqInner>,
    pub attr: ibv_srq_attr,
}

#[repr(C)]
pub struct SnAh {
    pub ah: ibv_ah,
    pub node: u32,
    pub global: bool,
    pub sl: u8,
}

/// # Safety
/// `pd` must be a softnic PD.
pub unsafe fn pd_id(pd: *mut ibv_pd) -> u32 {
    (*(pd as *mut SnPd)).id
}

fn new_id() -> u32 {
    global().next_id.fetch_add(1, Ordering::Relaxed)
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    let id = new_id();
    let b = Box::new(SnPd {
        pd: ibv_pd {
            context: ctx,
            handle: id,
        },
        id,
        parent: false,
    });
    let p = Box::into_raw(b) as *mut ibv_pd;
    crate::verbs::by_number::register_pd(id, p);
    p
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    let b = Box::from_raw(pd as *mut SnPd);
    if !b.parent {
        crate::verbs::by_number::unregister_pd(b.id);
    }
    0
}

/// `ibv_alloc_parent_domain`: a handle that protects as its PD does (objects created on it
/// are in the PD's domain). The thread domain only promises single-threaded use, and the
/// allocators place a provider's queue buffers — softnic keeps its queues in its own memory,
/// so it has no buffer for them to place (a provider may use them or not). `ibv_dealloc_pd`
/// frees it.
pub unsafe extern "C" fn vctx_alloc_parent_domain(
    ctx: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    let Some(a) = attr.as_ref() else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    if a.pd.is_null() || a.comp_mask & !known != 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    Box::into_raw(Box::new(SnPd {
        pd: ibv_pd {
            context: ctx,
            handle: (*a.pd).handle,
        },
        id: pd_id(a.pd),
        parent: true,
    })) as *mut ibv_pd
}

/// `ibv_alloc_td`: a thread domain (the program's promise of single-threaded use of what is
/// created with it, which softnic needs not).
pub unsafe extern "C" fn vctx_alloc_td(
    ctx: *mut ibv_context,
    attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    if attr.is_null() || (*attr).comp_mask != 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    Box::into_raw(Box::new(ibv_td { context: ctx }))
}

/// `ibv_dealloc_td`.
pub unsafe extern "C" fn vctx_dealloc_td(td: *mut ibv_td) -> c_int {
    if td.is_null() {
        return libc::EINVAL;
    }
    drop(Box::from_raw(td));
    0
}

pub(crate) const ACCESS_SUPPORTED: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB
    | IBV_ACCESS_RELAXED_ORDERING;

fn access_ok(access: u32) -> bool {
    let a = access & !IBV_ACCESS_OPTIONAL_RANGE;
    a & !ACCESS_SUPPORTED == 0
        && (a & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) == 0
            || a & IBV_ACCESS_LOCAL_WRITE != 0)
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    if pd.is_null() || !access_ok(access) || (addr.is_null() && length > 0) {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let access = access & !IBV_ACCESS_OPTIONAL_RANGE;
    let key = global().reg_mr(iova, addr as u64, length as u64, access, pd_id(pd));
    let mr = Box::new(ibv_mr {
        context: (*pd).context,
        pd,
        addr,
        length,
        handle: key,
        lkey: key,
        rkey: key,
    });
    Box::into_raw(mr)
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    sv_ibv_reg_mr_iova2(pd, addr, length, iova, access as u32)
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    sv_ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as u32)
}

/// `IB_UVERBS_ADVISE_MR_FLAG_FLUSH` (`<rdma/ib_user_ioctl_verbs.h>`, outside the bindings).
const ADVISE_MR_FLAG_FLUSH: u32 = 1;

/// `ibv_advise_mr`: prefetching pages of on-demand-paging regions. softnic has nothing to
/// fetch ahead (it touches pages when a request does), so a valid request succeeds at once;
/// as the kernel's, an unknown advice or flag is `EOPNOTSUPP`, an empty list `EINVAL`, and a
/// range that is not inside an ODP region of this PD (writable, for PREFETCH_WRITE) `ENOENT`.
///
/// # Safety
/// `sg_list` holds `num_sges` entries (the caller's).
pub unsafe extern "C" fn vctx_advise_mr(
    pd: *mut ibv_pd,
    advice: ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sges: u32,
) -> c_int {
    if advice > IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT || flags & !ADVISE_MR_FLAG_FLUSH != 0 {
        return libc::EOPNOTSUPP;
    }
    if pd.is_null() || sg_list.is_null() || num_sges == 0 {
        return libc::EINVAL;
    }
    let pd = pd_id(pd);
    // SAFETY: per the caller, `num_sges` entries, read unaligned (programs may keep them at any
    // address, as datapath.rs's `copy_sges` says).
    let sges: Vec<ibv_sge> = (0..num_sges as usize)
        .map(|i| unsafe { sg_list.add(i).read_unaligned() })
        .collect();
    let prefetchable = |sge: &ibv_sge| {
        global().mr(sge.lkey).is_some_and(|mr| {
            mr.pd == pd
                && mr.access & IBV_ACCESS_ON_DEMAND != 0
                && (advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE
                    || mr.access & IBV_ACCESS_LOCAL_WRITE != 0)
                && mr.contains(sge.addr, u64::from(sge.length))
        })
    };
    if sges.iter().all(prefetchable) {
        0
    } else {
        libc::ENOENT
    }
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    // dma-buf exporters are device drivers (GPUs); softnic has none to import from.
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    let b = Box::from_raw(mr);
    global().dereg_mr(b.lkey);
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let flags = flags as u32;
    if flags
        & !(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS)
        != 0
        || flags == 0
    {
        return IBV_REREG_MR_ERR_INPUT;
    }
    if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 && !access_ok(access as u32) {
        return IBV_REREG_MR_ERR_INPUT;
    }
    let m = &mut *mr;
    let ok = global().update_mr(m.lkey, |info| {
        if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
            info.addr = addr as u64;
            info.iova = addr as u64;
            info.len = length as u64;
        }
        if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            info.pd = pd_id(pd);
        }
        if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            info.access = access as u32 & !IBV_ACCESS_OPTIONAL_RANGE;
        }
    });
    if !ok {
        return IBV_REREG_MR_ERR_INPUT;
    }
    if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
        m.addr = addr;
        m.length = length;
    }
    if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        m.pd = pd;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_comp_channel(
    ctx: *mut ibv_context,
) -> *mut ibv_comp_channel {
    let mut fds = [0 as c_int; 2];
    if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        return null_mut();
    }
    let inner = Arc::new(ChannelInner {
        rfd: fds[0],
        wfd: fds[1],
        q: Mutex::new(VecDeque::new()),
    });
    let b = Box::new(SnChannel {
        ch: ibv_comp_channel {
            context: ctx,
            fd: fds[0],
            refcnt: 0,
        },
        inner,
    });
    Box::into_raw(b) as *mut ibv_comp_channel
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    if (*ch).refcnt > 0 {
        return libc::EBUSY;
    }
    drop(Box::from_raw(ch as *mut SnChannel));
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_ctx: *mut *mut c_void,
) -> c_int {
    let c = &*(ch as *mut SnChannel);
    let mut b = 0u8;
    if libc::read(c.ch.fd, &mut b as *mut u8 as *mut c_void, 1) != 1 {
        return -1;
    }
    let Some(p) = c
        .inner
        .q
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop_front()
    else {
        set_errno(libc::EAGAIN);
        return -1;
    };
    let p = p as *mut ibv_cq;
    *cq = p;
    *cq_ctx = (*p).cq_context;
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_ack_cq_events(cq: *mut ibv_cq, n: u32) {
    let a = AtomicU32::from_ptr(&mut (*cq).comp_events_completed);
    a.fetch_add(n, Ordering::AcqRel);
}

const WC_FLAGS_SUPPORTED: u64 = (IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) as u64;

pub(crate) unsafe fn create_cq(
    ctx: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
    wc_flags: u64,
) -> *mut SnCq {
    // As mlx5 checks: a completion vector the context does not have is EINVAL; completion
    // fields the device cannot report (CVLAN, flow tag, TM info) are EOPNOTSUPP, so callers
    // probing features can tell "unsupported" from "wrong".
    if cqe == 0 || cqe > MAX_CQE || comp_vector >= (*ctx).num_comp_vectors as u32 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    if crate::verbs::misc::huge_pages_refused("MLX_CQ_ALLOC_TYPE") {
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    if wc_flags & !WC_FLAGS_SUPPORTED != 0 {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    let ch = if channel.is_null() {
        None
    } else {
        (*channel).refcnt += 1;
        Some((*(channel as *mut SnChannel)).inner.clone())
    };
    let mut b: Box<SnCq> = Box::new(SnCq {
        // SAFETY (zeroed): ibv_cq_ex is C data; all-zero pthread objects are valid initialisers.
        cq: std::mem::zeroed(),
        inner: Arc::new(CqInner {
            q: Mutex::new(VecDeque::with_capacity(cqe as usize)),
            count: AtomicUsize::new(0),
            armed: AtomicU32::new(ARM_NONE),
            channel: ch,
            cq_ptr: 0,
            qps: Mutex::new(Vec::new()),
            dv: OnceLock::new(),
            ts_wanted: wc_flags
                & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
                    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) as u64
                != 0,
        }),
        cur: Cqe {
            wc: Default::default(),
            ts: 0,
            op: 0,
            srqn: 0,
            counter: 0,
        },
    });
    let p = &mut *b as *mut SnCq;
    Arc::get_mut(&mut b.inner).expect("fresh CQ").cq_ptr = p as usize;
    let c = &mut b.cq;
    c.context = ctx;
    c.channel = channel;
    c.cq_context = cq_context;
    c.handle = new_id();
    c.cqe = cqe as c_int;
    c.comp_mask = 0;
    crate::verbs::datapath::fill_cq_ex_ops(c);
    let cqn = c.handle;
    let p = Box::into_raw(b);
    crate::verbs::by_number::register_cq(cqn, p as *mut ibv_cq);
    p
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    if cqe <= 0 || comp_vector < 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    create_cq(ctx, cqe as u32, cq_context, channel, comp_vector as u32, 0) as *mut ibv_cq
}

pub unsafe extern "C" fn vctx_create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    let a = &*attr;
    if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    // A CQ on a parent domain (whose allocators would place its buffer, as mlx5's): the
    // domain must be a parent domain, as mlx5 requires.
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0
        && (a.parent_domain.is_null() || !(*(a.parent_domain as *mut SnPd)).parent)
    {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    create_cq(
        ctx,
        a.cqe,
        a.cq_context,
        a.channel,
        a.comp_vector,
        a.wc_flags,
    ) as *mut ibv_cq_ex
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    if cqe <= 0 || cqe as u32 > MAX_CQE {
        return libc::EINVAL;
    }
    let c = &mut *(cq as *mut SnCq);
    if (cqe as usize) < c.inner.count.load(Ordering::Acquire) {
        return libc::EINVAL;
    }
    c.cq.cqe = cqe;
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    let c = cq as *mut SnCq;
    if Arc::strong_count(&(*c).inner) > 1 {
        return libc::EBUSY;
    }
    if !(*c).cq.channel.is_null() {
        (*(*c).cq.channel).refcnt -= 1;
    }
    crate::verbs::by_number::unregister_cq((*c).cq.handle);
    drop(Box::from_raw(c));
    0
}

/// A new SRQ on `pd` (an XRC SRQ when `xrc` says its domain and CQ).
pub(crate) unsafe fn create_srq(
    pd: *mut ibv_pd,
    ctx_ptr: *mut c_void,
    attr: &mut ibv_srq_attr,
    xrc: Option<XrcSrq>,
) -> *mut ibv_srq {
    // `max_wr` 0 is accepted, as by mlx5 (its queue then has room for no WR: posts fail).
    if attr.max_wr > MAX_WR || attr.max_sge as usize > MAX_SGE {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    if crate::verbs::misc::huge_pages_refused("MLX_SRQ_ALLOC_TYPE") {
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    let inner = Arc::new(SrqInner {
        rq: Mutex::new(RecvQueue {
            q: VecDeque::with_capacity(attr.max_wr as usize),
            max: attr.max_wr,
        }),
        limit: AtomicU32::new(attr.srq_limit),
        srqn: new_id(),
        pd: pd_id(pd),
        max_sge: attr.max_sge,
        srq_ptr: AtomicUsize::new(0),
        dv: OnceLock::new(),
        xrc,
    });
    if inner.xrc.is_some() {
        global().set_xrc_srq(inner.srqn, Some(inner.clone()));
    }
    let b = Box::new(SnSrq {
        srq: ibv_srq {
            context: (*pd).context,
            srq_context: ctx_ptr,
            pd,
            handle: inner.srqn,
            // SAFETY (zeroed): all-zero pthread objects are valid initialisers on glibc.
            mutex: std::mem::zeroed(),
            cond: std::mem::zeroed(),
            events_completed: 0,
        },
        inner,
        attr: *attr,
    });
    let p = Box::into_raw(b);
    let made = &*p;
    made.inner.srq_ptr.store(p as usize, Ordering::Relaxed);
    p as *mut ibv_srq
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    create_srq(pd, (*attr).srq_context, &mut (*attr).attr, None)
}

pub unsafe extern "C" fn vctx_create_srq_ex(
    _ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    let a = &mut *attr;
    if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type == IBV_SRQT_XRC {
        return crate::verbs::xrc::create_xrc_srq(a);
    }
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0
        || (a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC)
    {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    create_srq(a.pd, a.srq_context, &mut a.attr, None)
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let s = &mut *(srq as *mut SnSrq);
    let mask = mask as u32;
    if mask & IBV_SRQ_MAX_WR != 0 {
        let mut rq = s.inner.rq.lock().unwrap_or_else(|e| e.into_inner());
        if (*attr).max_wr == 0 || (*attr).max_wr > MAX_WR || ((*attr).max_wr as usize) < rq.q.len()
        {
            return libc::EINVAL;
        }
        rq.max = (*attr).max_wr;
        s.attr.max_wr = (*attr).max_wr;
    }
    if mask & IBV_SRQ_LIMIT != 0 {
        if (*attr).srq_limit > s.attr.max_wr {
            return libc::EINVAL;
        }
        s.inner.limit.store((*attr).srq_limit, Ordering::Relaxed);
        s.attr.srq_limit = (*attr).srq_limit;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let s = &*(srq as *mut SnSrq);
    *attr = s.attr;
    (*attr).srq_limit = s.inner.limit.load(Ordering::Relaxed);
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    let s = srq as *mut SnSrq;
    let inner = &(&*s).inner;
    if inner.xrc.is_some() {
        // No QP attaches to an XRC SRQ: requests to XRC targets find it by number, and stop
        // finding it now.
        global().set_xrc_srq(inner.srqn, None);
    } else if Arc::strong_count(inner) > 1 {
        return libc::EBUSY;
    }
    drop(Box::from_raw(s));
    0
}

/// The simulated node an address vector points at.
pub fn ah_node(a: &ibv_ah_attr) -> Option<u32> {
    if a.is_global != 0 {
        // SAFETY: ibv_gid is a union of plain byte views.
        let raw = unsafe { a.grh.dgid.raw };
        return gid_node(&raw);
    }
    // RoCE has no LIDs: an address vector must carry the GRH.
    (a.dlid != 0 && !crate::wire::state::roce()).then(|| a.dlid as u32 - 1)
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    let a = &*attr;
    let Some(node) = ah_node(a).filter(|_| a.port_num <= 1) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    let b = Box::new(SnAh {
        ah: ibv_ah {
            context: (*pd).context,
            pd,
            handle: new_id(),
        },
        node,
        global: a.is_global != 0,
        sl: a.sl,
    });
    Box::into_raw(b) as *mut ibv_ah
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    drop(Box::from_raw(ah as *mut SnAh));
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_init_ah_from_wc(
    _ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut u8,
    attr: *mut ibv_ah_attr,
) -> c_int {
    let w = &*wc;
    let a = &mut *attr;
    *a = Default::default();
    a.dlid = w.slid;
    a.sl = w.sl;
    a.src_path_bits = w.dlid_path_bits;
    a.port_num = port;
    if w.wc_flags & IBV_WC_GRH != 0 {
        if grh.is_null() {
            return libc::EINVAL;
        }
        a.is_global = 1;
        std::ptr::copy_nonoverlapping(grh.add(8), a.grh.dgid.raw.as_mut_ptr(), 16);
        a.grh.sgid_index = 0;
        a.grh.hop_limit = 0xff;
        a.grh.flow_label =
            u32::from_be_bytes([*grh, *grh.add(1), *grh.add(2), *grh.add(3)]) & 0xfffff;
        a.grh.traffic_class = ((u32::from_be_bytes([*grh, *grh.add(1), *grh.add(2), *grh.add(3)])
            >> 20)
            & 0xff) as u8;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut u8,
    port: u8,
) -> *mut ibv_ah {
    let mut a: ibv_ah_attr = Default::default();
    if sv_ibv_init_ah_from_wc((*pd).context, port, wc, grh, &mut a) != 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    sv_ibv_create_ah(pd, &mut a)
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_attach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    // No subnet manager, no multicast groups.
    libc::EOPNOTSUPP
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_detach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    libc::EOPNOTSUPP
}

#[allow(dead_code)]
fn _assert_types(_: *mut SnQp) {}
