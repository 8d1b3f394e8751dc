//! Connecting: rdma_connect, rdma_accept, rdma_reject, rdma_establish, rdma_disconnect.

use crate::addr::{self, Family};
use crate::event::complete_sync;
use crate::ffi::*;
use crate::id::{einval, ret};
use crate::proto::{self, report_disconnect};
use crate::state::{lock, Cm, CmError, CmResult, Conn, IdState};
use crate::verbs::{qp_connect, qp_error, Path};
use crate::wire::{Kind, Msg, REJ_CONSUMER_DEFINED, REJ_INVALID_SERVICE_ID};

/// Reads the application's private data (at most what `kind` carries).
fn private(data: *const libc::c_void, len: u8, kind: Kind) -> CmResult<Vec<u8>> {
    let len = usize::from(len);
    if len > kind.private_capacity() {
        return einval();
    }
    if data.is_null() || len == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the application passes len readable bytes at data.
    Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec())
}

/// Resolves RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH to the device limit.
fn depth(v: u8, max: u8) -> u8 {
    if v == 0xff {
        max
    } else {
        v.min(max)
    }
}

/// Fills the port facts (LID, GID, MTU) of a message from the device.
fn with_port(cm: &mut Cm, mut m: Msg) -> CmResult<Msg> {
    let dev = cm.dev()?;
    m.lid = dev.lid;
    m.gid = dev.gid;
    m.mtu = dev.mtu as u8;
    Ok(m)
}

fn connect(cm: &mut Cm, key: usize, p: Option<&rdma_conn_param>) -> CmResult<()> {
    let dev = cm.dev()?;
    let (max_rd, max_init) = (dev.max_rd_atom, dev.max_init_rd_atom);
    let st = cm.id(key)?;
    if st.conn != Conn::RouteResolved {
        return einval();
    }
    let ud = st.cid.ps == RDMA_PS_UDP;
    let kind = if ud { Kind::SidrReq } else { Kind::Req };
    let mut m = Msg::new(kind);
    if let Some(p) = p {
        m.private = private(p.private_data, p.private_data_len, kind)?;
        st.responder_resources = depth(p.responder_resources, max_rd);
        st.initiator_depth = depth(p.initiator_depth, max_init);
        st.retry_count = p.retry_count.min(7);
        st.rnr_retry_count = p.rnr_retry_count.min(7);
        m.qpn = p.qp_num;
        m.srq = p.srq;
    } else {
        st.responder_resources = max_rd;
        st.initiator_depth = max_init;
    }
    id_fields(&mut m, st);
    m.retry_count = st.retry_count;
    m.rnr_retry_count = st.rnr_retry_count;
    st.conn = Conn::Connecting;
    // An IPv6 request reaches an IPv6-only listener first, else one that takes both.
    let v6 = st.family == Family::V6;
    let m = with_port(cm, m)?;
    let mut sent = v6 && proto::send(cm, key, &addr::bound_name(m.ps, m.dst, true), &m).is_ok();
    if !sent {
        sent = proto::send(cm, key, &addr::bound_name(m.ps, m.dst, false), &m).is_ok();
    }
    if !sent {
        // Nobody is bound there: what the IB CM reports for an unknown service ID.
        cm.id(key)?.conn = Conn::Idle;
        let (event, status) = if ud {
            (RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT)
        } else {
            (RDMA_CM_EVENT_REJECTED, i32::from(REJ_INVALID_SERVICE_ID))
        };
        cm.push_simple(key, event, status);
    }
    Ok(())
}

/// What a REQ or REP says of the id itself: its QP (number, SRQ or not; over any the
/// connection parameters named), port space, QP type, addresses, PSN and the negotiated
/// depths.
fn id_fields(m: &mut Msg, st: &IdState) {
    if !st.cid.qp.is_null() {
        // SAFETY: the id's QP is live.
        m.qpn = unsafe { (*st.cid.qp).qp_num };
        m.srq = u8::from(!st.cid.srq.is_null());
    }
    m.ps = st.cid.ps;
    m.qp_type = st.cid.qp_type as u8;
    m.src = st.local;
    m.dst = st.remote;
    m.psn = st.psn;
    m.responder_resources = st.responder_resources;
    m.initiator_depth = st.initiator_depth;
}

fn accept(cm: &mut Cm, key: usize, p: Option<&rdma_conn_param>) -> CmResult<()> {
    let dev = cm.dev()?;
    let (max_rd, max_init, mtu) = (dev.max_rd_atom, dev.max_init_rd_atom, dev.mtu);
    let st = cm.id(key)?;
    if st.conn != Conn::Requested {
        return einval();
    }
    let req = st.peer_msg.clone().ok_or(CmError::Errno(libc::EINVAL))?;
    let ud = st.cid.ps == RDMA_PS_UDP;
    let kind = if ud { Kind::SidrRep } else { Kind::Rep };
    let mut m = Msg::new(kind);
    let mut rnr = 7;
    if let Some(p) = p {
        m.private = private(p.private_data, p.private_data_len, kind)?;
        if p.responder_resources != 0xff {
            st.responder_resources = p.responder_resources.min(max_rd);
        }
        if p.initiator_depth != 0xff {
            st.initiator_depth = p.initiator_depth.min(max_init);
        }
        rnr = p.rnr_retry_count.min(7);
        m.qpn = p.qp_num;
        m.srq = p.srq;
    }
    id_fields(&mut m, st);
    m.rnr_retry_count = rnr;
    if ud {
        m.qkey = RDMA_UDP_QKEY;
        st.conn = Conn::Connected;
    } else {
        if !st.cid.qp.is_null() {
            let path = Path {
                remote_qpn: req.qpn,
                remote_psn: req.psn,
                local_psn: st.psn,
                dlid: req.lid,
                dgid: req.gid,
                mtu: mtu.min(u32::from(req.mtu)).max(1),
                responder_resources: st.responder_resources,
                initiator_depth: st.initiator_depth,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
            };
            let rc = qp_connect(st.cid.qp, &path);
            if rc != 0 {
                return Err(CmError::Errno(rc.abs()));
            }
        }
        st.conn = Conn::Accepting;
    }
    let m = with_port(cm, m)?;
    proto::send_peer(cm, key, &m).map_err(|_| CmError::Errno(libc::ECONNRESET))
}

fn reject(cm: &mut Cm, key: usize, data: *const libc::c_void, len: u8) -> CmResult<()> {
    let st = cm.id(key)?;
    if st.conn != Conn::Requested {
        return einval();
    }
    let ud = st.cid.ps == RDMA_PS_UDP;
    let kind = if ud { Kind::SidrRep } else { Kind::Rej };
    let mut m = Msg::new(kind);
    m.private = private(data, len, kind)?;
    // REJ: consumer-defined reason; SIDR REP: status "rejected" (2).
    m.status = if ud { 2 } else { REJ_CONSUMER_DEFINED };
    st.conn = Conn::Idle;
    proto::send_peer(cm, key, &m).map_err(|_| CmError::Errno(libc::ECONNRESET))
}

/// Returns whether a DREQ went out (the caller then waits for DISCONNECTED on a sync id).
fn disconnect(cm: &mut Cm, key: usize) -> CmResult<bool> {
    let st = cm.id(key)?;
    if !st.cid.qp.is_null() {
        qp_error(st.cid.qp);
    }
    match st.conn {
        Conn::Connected | Conn::Accepting | Conn::Responded => {}
        Conn::Disconnected => return Ok(false),
        _ => return einval(),
    }
    if st.dreq_sent || st.disc_reported {
        return Ok(false);
    }
    st.dreq_sent = true;
    if st.conn != Conn::Connected {
        st.conn = Conn::Connected;
    }
    if proto::send_peer(cm, key, &Msg::new(Kind::Dreq)).is_err() {
        // The peer is gone: the DREQ would time out.
        report_disconnect(cm, key);
    }
    Ok(true)
}

fn param<'a>(p: *mut rdma_conn_param) -> Option<&'a rdma_conn_param> {
    // SAFETY: a non-null conn_param points to the application's struct.
    unsafe { p.as_ref() }
}

#[no_mangle]
pub extern "C" fn sv_rdma_connect(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> i32 {
    let key = id as usize;
    let r = connect(&mut lock(), key, param(p));
    ret(r.and_then(|()| complete_sync(key, RDMA_CM_EVENT_ESTABLISHED)))
}

#[no_mangle]
pub extern "C" fn sv_rdma_accept(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> i32 {
    let key = id as usize;
    let r = accept(&mut lock(), key, param(p));
    let r = r.and_then(|()| {
        let ud = lock().id(key).map(|s| s.cid.ps == RDMA_PS_UDP)?;
        if ud {
            Ok(())
        } else {
            complete_sync(key, RDMA_CM_EVENT_ESTABLISHED)
        }
    });
    ret(r)
}

#[no_mangle]
pub extern "C" fn sv_rdma_reject(id: *mut rdma_cm_id, data: *const libc::c_void, len: u8) -> i32 {
    ret(reject(&mut lock(), id as usize, data, len))
}

#[no_mangle]
pub extern "C" fn sv_rdma_reject_ece(
    id: *mut rdma_cm_id,
    data: *const libc::c_void,
    len: u8,
) -> i32 {
    sv_rdma_reject(id, data, len)
}

#[no_mangle]
pub extern "C" fn sv_rdma_establish(id: *mut rdma_cm_id) -> i32 {
    let mut cm = lock();
    let key = id as usize;
    let r = (|| {
        let st = cm.id(key)?;
        if st.conn != Conn::Responded {
            return einval();
        }
        st.conn = Conn::Connected;
        proto::send_peer(&cm, key, &Msg::new(Kind::Rtu))
            .map_err(|_| CmError::Errno(libc::ECONNRESET))
    })();
    ret(r)
}

#[no_mangle]
pub extern "C" fn sv_rdma_disconnect(id: *mut rdma_cm_id) -> i32 {
    let key = id as usize;
    let r = disconnect(&mut lock(), key);
    let r = r.and_then(|sent| {
        if sent {
            complete_sync(key, RDMA_CM_EVENT_DISCONNECTED)
        } else {
            Ok(())
        }
    });
    ret(r)
}

#[no_mangle]
pub extern "C" fn sv_rdma_notify(id: *mut rdma_cm_id, _event: u32) -> i32 {
    ret(lock().id(id as usize).map(|_| ()))
}
