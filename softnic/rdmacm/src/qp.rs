//! Verbs resources on ids: rdma_create_qp(_ex) (with the CQs and completion channels the
//! rdma_verbs.h helpers use), SRQs, rdma_create_ep / rdma_get_request / rdma_destroy_ep.

use crate::event::complete_sync;
use crate::ffi::*;
use crate::id::{einval, read_sockaddr, ret};
use crate::state::{errno, lock, set_errno, Cm, CmError, CmResult, Conn};
use crate::verbs::qp_init;
use std::ptr;

fn check_pd(cm: &mut Cm, key: usize, pd: *mut ibv_pd) -> CmResult<*mut ibv_pd> {
    let dev_pd = cm.dev()?.pd;
    let st = cm.id(key)?;
    if st.cid.verbs.is_null() {
        return einval();
    }
    if pd.is_null() {
        return Ok(dev_pd);
    }
    // SAFETY: pd is the application's live PD.
    if unsafe { (*pd).context } != st.cid.verbs {
        return einval();
    }
    Ok(pd)
}

/// Creates a completion channel and a CQ of `n` entries on the id's device.
fn cq_pair(ctx: *mut ibv_context, n: u32) -> CmResult<(*mut ibv_comp_channel, *mut ibv_cq)> {
    // SAFETY: ctx is the id's open device context.
    let ch = unsafe { ibv_create_comp_channel(ctx) };
    if ch.is_null() {
        return Err(CmError::Errno(errno()));
    }
    // SAFETY: ctx and ch are live.
    let cq = unsafe { ibv_create_cq(ctx, n.max(1) as i32, ptr::null_mut(), ch, 0) };
    if cq.is_null() {
        let e = errno();
        // SAFETY: ch was just created and has no CQ.
        unsafe { ibv_destroy_comp_channel(ch) };
        return Err(CmError::Errno(e));
    }
    Ok((ch, cq))
}

/// Creates the id's QP from extended attributes (the PD already chosen): plain
/// `ibv_create_qp` when nothing beyond the PD is asked for, else the context's
/// `create_qp_ex` operation, as the inline `ibv_create_qp_ex` does.
fn create_qp_verbs(ctx: *mut ibv_context, ax: &mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    if ax.comp_mask & !IBV_QP_INIT_ATTR_PD == 0 {
        let mut a = ibv_qp_init_attr {
            qp_context: ax.qp_context,
            send_cq: ax.send_cq,
            recv_cq: ax.recv_cq,
            srq: ax.srq,
            cap: ax.cap,
            qp_type: ax.qp_type,
            sq_sig_all: ax.sq_sig_all,
        };
        // SAFETY: ax.pd is live; a is a valid init attribute struct.
        let qp = unsafe { ibv_create_qp(ax.pd, &mut a) };
        ax.cap = a.cap;
        return qp;
    }
    match crate::verbs::ctx_op(ctx, std::mem::offset_of!(verbs_context, create_qp_ex))
        .and_then(|v| v.create_qp_ex)
    {
        // SAFETY: the provider's create_qp_ex of this context, with the caller's attributes.
        Some(f) => unsafe { f(ctx, ax) },
        None => {
            crate::state::set_errno(libc::EOPNOTSUPP);
            ptr::null_mut()
        }
    }
}

fn create_qp(
    cm: &mut Cm,
    key: usize,
    pd: *mut ibv_pd,
    ax: &mut ibv_qp_init_attr_ex,
) -> CmResult<()> {
    let pd = check_pd(cm, key, pd)?;
    let st = cm.id(key)?;
    if !st.cid.qp.is_null() {
        return einval();
    }
    let ctx = st.cid.verbs;
    if ax.send_cq.is_null() && st.cid.send_cq.is_null() {
        let (ch, cq) = cq_pair(ctx, ax.cap.max_send_wr)?;
        st.cid.send_cq_channel = ch;
        st.cid.send_cq = cq;
        st.own_cqs = true;
    }
    if ax.recv_cq.is_null() && st.cid.recv_cq.is_null() {
        let (ch, cq) = cq_pair(ctx, ax.cap.max_recv_wr)?;
        st.cid.recv_cq_channel = ch;
        st.cid.recv_cq = cq;
        st.own_cqs = true;
    }
    if ax.send_cq.is_null() {
        ax.send_cq = st.cid.send_cq;
    }
    if ax.recv_cq.is_null() {
        ax.recv_cq = st.cid.recv_cq;
    }
    if ax.srq.is_null() {
        ax.srq = st.cid.srq;
    }
    ax.pd = pd;
    ax.comp_mask |= IBV_QP_INIT_ATTR_PD;
    let qp = create_qp_verbs(ctx, ax);
    if qp.is_null() {
        let e = errno();
        crate::state::debug(format_args!("creating the QP failed: errno {e}"));
        destroy_cqs(cm, key);
        return Err(CmError::Errno(e));
    }
    let attr = ax;
    let ud = attr.qp_type == IBV_QPT_UD;
    let rc = qp_init(qp, ud);
    if rc != 0 {
        crate::state::debug(format_args!("moving the new QP to INIT failed: {rc}"));
        // SAFETY: qp was just created and is not published.
        unsafe { ibv_destroy_qp(qp) };
        destroy_cqs(cm, key);
        return Err(CmError::Errno(rc.abs()));
    }
    let st = cm.id(key)?;
    st.cid.qp = qp;
    st.cid.pd = pd;
    st.cid.qp_type = attr.qp_type;
    Ok(())
}

fn destroy_cqs(cm: &mut Cm, key: usize) {
    let Some(st) = cm.ids.get_mut(&key) else {
        return;
    };
    if !st.own_cqs {
        return;
    }
    st.own_cqs = false;
    let c = &mut st.cid;
    // SAFETY: these CQs/channels were created by cq_pair for this id and nothing else uses
    // them once the QP is gone.
    unsafe {
        for (cq, ch) in [
            (c.send_cq, c.send_cq_channel),
            (c.recv_cq, c.recv_cq_channel),
        ] {
            if !cq.is_null() {
                ibv_destroy_cq(cq);
            }
            if !ch.is_null() {
                ibv_destroy_comp_channel(ch);
            }
        }
    }
    c.send_cq = ptr::null_mut();
    c.send_cq_channel = ptr::null_mut();
    c.recv_cq = ptr::null_mut();
    c.recv_cq_channel = ptr::null_mut();
}

fn destroy_qp(cm: &mut Cm, key: usize) -> CmResult<()> {
    let st = cm.id(key)?;
    let qp = std::mem::replace(&mut st.cid.qp, ptr::null_mut());
    if !qp.is_null() {
        // SAFETY: the id's QP, unpublished now.
        unsafe { ibv_destroy_qp(qp) };
    }
    destroy_cqs(cm, key);
    Ok(())
}

/// Extended attributes equivalent to `a` (with the PD).
fn to_ex(a: &ibv_qp_init_attr) -> ibv_qp_init_attr_ex {
    ibv_qp_init_attr_ex {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
        ..Default::default()
    }
}

/// Creates the id's QP from plain attributes, writing back CQs and capabilities as
/// librdmacm does.
fn create_qp_plain(
    cm: &mut Cm,
    key: usize,
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
) -> CmResult<()> {
    let mut ax = to_ex(a);
    create_qp(cm, key, pd, &mut ax)?;
    a.send_cq = ax.send_cq;
    a.recv_cq = ax.recv_cq;
    a.srq = ax.srq;
    a.cap = ax.cap;
    Ok(())
}

#[no_mangle]
pub extern "C" fn sv_rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> i32 {
    // SAFETY: attr is the application's init attribute struct (checked non-null).
    let Some(attr) = (unsafe { attr.as_mut() }) else {
        return ret(einval());
    };
    ret(create_qp_plain(&mut lock(), id as usize, pd, attr))
}

#[no_mangle]
pub extern "C" fn sv_rdma_create_qp_ex(id: *mut rdma_cm_id, ax: *mut ibv_qp_init_attr_ex) -> i32 {
    // SAFETY: ax is the application's extended init attribute struct (checked non-null).
    let Some(ax) = (unsafe { ax.as_mut() }) else {
        return ret(einval());
    };
    let pd = if ax.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
        ax.pd
    } else {
        ptr::null_mut()
    };
    ret(create_qp(&mut lock(), id as usize, pd, ax))
}

#[no_mangle]
pub extern "C" fn sv_rdma_destroy_qp(id: *mut rdma_cm_id) {
    let _ = destroy_qp(&mut lock(), id as usize);
}

fn create_srq(
    cm: &mut Cm,
    key: usize,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> CmResult<()> {
    if attr.is_null() {
        return einval();
    }
    let pd = check_pd(cm, key, pd)?;
    // SAFETY: pd is live; attr is the application's struct.
    let srq = unsafe { ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return Err(CmError::Errno(errno()));
    }
    let st = cm.id(key)?;
    st.cid.srq = srq;
    st.cid.pd = pd;
    Ok(())
}

#[no_mangle]
pub extern "C" fn sv_rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> i32 {
    ret(create_srq(&mut lock(), id as usize, pd, attr))
}

#[no_mangle]
pub extern "C" fn sv_rdma_create_srq_ex(id: *mut rdma_cm_id, ax: *mut ibv_srq_init_attr_ex) -> i32 {
    // SAFETY: ax is the application's struct (checked non-null).
    let Some(ax) = (unsafe { ax.as_mut() }) else {
        return ret(einval());
    };
    let basic = ax.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || ax.srq_type == IBV_SRQT_BASIC;
    if !basic || ax.comp_mask & !(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD) != 0 {
        return ret(Err(CmError::Errno(libc::EOPNOTSUPP)));
    }
    let mut a = ibv_srq_init_attr {
        srq_context: ax.srq_context,
        attr: ax.attr,
    };
    let pd = if ax.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 {
        ax.pd
    } else {
        ptr::null_mut()
    };
    ret(create_srq(&mut lock(), id as usize, pd, &mut a))
}

#[no_mangle]
pub extern "C" fn sv_rdma_destroy_srq(id: *mut rdma_cm_id) {
    let mut cm = lock();
    if let Ok(st) = cm.id(id as usize) {
        let srq = std::mem::replace(&mut st.cid.srq, ptr::null_mut());
        if !srq.is_null() {
            // SAFETY: the id's SRQ, unpublished now.
            unsafe { ibv_destroy_srq(srq) };
        }
    }
}

fn create_ep(res: &rdma_addrinfo, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> CmResult<usize> {
    // SAFETY: a non-null attr is the application's init attributes; librdmacm sets its QP
    // type from the addrinfo.
    if let Some(a) = unsafe { attr.as_mut() } {
        a.qp_type = res.ai_qp_type as u32;
    }
    let key = crate::id::new_id(
        &mut lock(),
        None,
        ptr::null_mut(),
        res.ai_port_space as u32,
        res.ai_qp_type as u32,
    )?;
    let r = (|| {
        if res.ai_flags & RAI_PASSIVE as i32 != 0 {
            let src = read_sockaddr(res.ai_src_addr.cast())?;
            let mut cm = lock();
            crate::id::bind(&mut cm, key, src)?;
            let st = cm.id(key)?;
            st.ep_pd = pd;
            // SAFETY: a non-null attr is the application's init attributes.
            st.ep_attr = unsafe { attr.as_ref() }.map(|a| Box::new(*a));
            return Ok(());
        }
        let src = if res.ai_src_addr.is_null() {
            None
        } else {
            Some(read_sockaddr(res.ai_src_addr.cast())?)
        };
        let dst = read_sockaddr(res.ai_dst_addr.cast())?;
        crate::id::resolve_addr(&mut lock(), key, src, dst)?;
        complete_sync(key, RDMA_CM_EVENT_ADDR_RESOLVED)?;
        crate::id::resolve_route(&mut lock(), key)?;
        complete_sync(key, RDMA_CM_EVENT_ROUTE_RESOLVED)?;
        // SAFETY: a non-null attr is the application's init attributes.
        if let Some(a) = unsafe { attr.as_mut() } {
            create_qp_plain(&mut lock(), key, pd, a)?;
        }
        Ok(())
    })();
    if let Err(e) = r {
        let _ = crate::id::destroy(&mut lock(), key);
        return Err(e);
    }
    Ok(key)
}

#[no_mangle]
pub extern "C" fn sv_rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> i32 {
    // SAFETY: res is the application's addrinfo (checked non-null).
    let Some(res) = (unsafe { res.as_ref() }) else {
        return ret(einval());
    };
    if id.is_null() {
        return ret(einval());
    }
    match create_ep(res, pd, attr) {
        Ok(k) => {
            // SAFETY: id is the caller's non-null out pointer.
            unsafe { *id = k as *mut rdma_cm_id };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

#[no_mangle]
pub extern "C" fn sv_rdma_destroy_ep(id: *mut rdma_cm_id) {
    let mut cm = lock();
    let key = id as usize;
    let _ = destroy_qp(&mut cm, key);
    if let Ok(st) = cm.id(key) {
        let srq = std::mem::replace(&mut st.cid.srq, ptr::null_mut());
        if !srq.is_null() {
            // SAFETY: the id's SRQ, unpublished now.
            unsafe { ibv_destroy_srq(srq) };
        }
    }
    let _ = crate::id::destroy(&mut cm, key);
}

fn get_request(listen: usize) -> CmResult<usize> {
    let (sync, chan) = {
        let mut cm = lock();
        let st = cm.id(listen)?;
        if st.conn != Conn::Listening {
            return einval();
        }
        (st.sync, st.chan)
    };
    if !sync {
        return einval();
    }
    let ev = crate::event::next_event(chan as *mut rdma_event_channel)?;
    // SAFETY: ev was just produced by next_event.
    let (event, status, child) = unsafe { ((*ev).event, (*ev).status, (*ev).id as usize) };
    if event != RDMA_CM_EVENT_CONNECT_REQUEST {
        crate::event::ack(&mut lock(), ev);
        return Err(CmError::Errno(if status < 0 { -status } else { libc::EIO }));
    }
    let mut cm = lock();
    let (pd, attr) = {
        let l = cm.id(listen)?;
        (l.ep_pd, l.ep_attr.clone())
    };
    cm.id(child)?.cid.event = ev;
    if let Some(mut a) = attr {
        if let Err(e) = create_qp_plain(&mut cm, child, pd, &mut a) {
            let _ = crate::id::destroy(&mut cm, child);
            return Err(e);
        }
    }
    Ok(child)
}

#[no_mangle]
pub extern "C" fn sv_rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> i32 {
    if id.is_null() {
        return ret(einval());
    }
    match get_request(listen as usize) {
        Ok(k) => {
            // SAFETY: id is the caller's non-null out pointer.
            unsafe { *id = k as *mut rdma_cm_id };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

/// The attributes rdma_cm would use to move the id's QP to `attr->qp_state`.
fn init_qp_attr(cm: &mut Cm, key: usize, a: &mut ibv_qp_attr) -> CmResult<i32> {
    let mtu = cm.dev()?.mtu;
    let st = cm.id(key)?;
    let ud = st.cid.ps == RDMA_PS_UDP;
    let state = a.qp_state;
    *a = ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    let peer = st.peer_msg.as_ref();
    let mask = match state {
        IBV_QPS_INIT => {
            a.pkey_index = 0;
            a.port_num = 1;
            if ud {
                a.qkey = RDMA_UDP_QKEY;
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
            } else {
                a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE
                    | IBV_ACCESS_REMOTE_WRITE
                    | IBV_ACCESS_REMOTE_READ
                    | IBV_ACCESS_REMOTE_ATOMIC;
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
            }
        }
        IBV_QPS_RTR if ud => IBV_QP_STATE,
        IBV_QPS_RTR => {
            let p = peer.ok_or(CmError::Errno(libc::EINVAL))?;
            a.path_mtu = mtu.min(u32::from(p.mtu)).max(1);
            a.dest_qp_num = p.qpn;
            a.rq_psn = p.psn;
            a.max_dest_rd_atomic = st.responder_resources;
            a.min_rnr_timer = 12;
            crate::verbs::set_av(&mut a.ah_attr, p.lid, &p.gid);
            RC_RTR_ATTRS
        }
        IBV_QPS_RTS if ud => {
            a.sq_psn = 0;
            IBV_QP_STATE | IBV_QP_SQ_PSN
        }
        IBV_QPS_RTS => {
            let p = peer.ok_or(CmError::Errno(libc::EINVAL))?;
            a.sq_psn = st.psn;
            a.timeout = 14;
            a.retry_cnt = st.retry_count;
            a.rnr_retry = p.rnr_retry_count.min(7);
            a.max_rd_atomic = st.initiator_depth;
            RC_RTS_ATTRS
        }
        _ => return einval(),
    };
    Ok(mask as i32)
}

#[no_mangle]
pub extern "C" fn sv_rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut i32,
) -> i32 {
    // SAFETY: attr and mask are the application's out pointers (checked non-null).
    let (Some(a), Some(m)) = (unsafe { attr.as_mut() }, unsafe { mask.as_mut() }) else {
        return ret(einval());
    };
    match init_qp_attr(&mut lock(), id as usize, a) {
        Ok(v) => {
            *m = v;
            0
        }
        Err(e) => {
            set_errno(e.errno());
            -1
        }
    }
}
