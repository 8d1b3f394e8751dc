//! Popping events: `rdma_get_cm_event` turns a queued event into a `struct rdma_cm_event`,
//! creating the new id of a CONNECT_REQUEST and bringing the active side's QP up on a REP
//! (then reporting ESTABLISHED), as librdmacm does.

use crate::ffi::*;
use crate::id::{einval, private_socket, ret};
use crate::proto;
use crate::state::{errno, lock, set_errno, Cm, CmError, CmResult, Conn, Pending};
use crate::verbs::{qp_connect, Path};
use crate::wire::{Kind, Msg, REJ_CONSUMER_DEFINED};
use std::ptr;
use std::sync::atomic::Ordering;

/// An event and the private data its parameters point to.
#[repr(C)]
struct EventBox {
    ev: rdma_cm_event,
    private: [u8; 256],
    /// The id the event was reported for: `ev.id`, or the listener of a CONNECT_REQUEST.
    owner: usize,
}

/// Acks and frees an event returned by rdma_get_cm_event: counts it on the id it was
/// reported for and wakes rdma_destroy_id waiting for that.
pub fn ack(cm: &mut Cm, ev: *mut rdma_cm_event) {
    // SAFETY: every event handed out is the first field of a leaked Box<EventBox>.
    let b = unsafe { Box::from_raw(ev as *mut EventBox) };
    if let Some(st) = cm.ids.get_mut(&b.owner) {
        st.events_acked += 1;
    }
    crate::state::notify_ack();
}

/// Blocks (unless the fd is non-blocking) for the next event on `chan`.
pub fn next_event(chan: *mut rdma_event_channel) -> CmResult<*mut rdma_cm_event> {
    if chan.is_null() {
        return einval();
    }
    let mut waited = false;
    loop {
        let readers = match lock().chans.get(&(chan as usize)) {
            Some(c) => c.readers.clone(),
            // The channel was destroyed while this thread waited in the call (rping's
            // cm_thread, never joined, wakes for the DISCONNECTED event of its own
            // rdma_disconnect after main destroyed the id and the channel). A thread blocked
            // in the kernel on a ucma fd that another thread closes waits until the process
            // exits, and the kernel discards the destroyed id's events: so does this one.
            None if waited => loop {
                std::thread::park();
            },
            None => return einval(),
        };
        readers.fetch_add(1, Ordering::SeqCst);
        let mut b = [0u8];
        // SAFETY: chan is a channel from rdma_create_event_channel; one-byte read into b.
        let n = unsafe { libc::read((*chan).fd, b.as_mut_ptr().cast(), 1) };
        readers.fetch_sub(1, Ordering::SeqCst);
        waited = true;
        if n != 1 {
            return Err(CmError::Errno(if n == 0 { libc::EIO } else { errno() }));
        }
        let mut cm = lock();
        let Some(p) = cm
            .chans
            .get_mut(&(chan as usize))
            .and_then(|c| c.queue.pop_front())
        else {
            continue;
        };
        if let Some(ev) = materialize(&mut cm, p)? {
            return Ok(ev);
        }
    }
}

fn new_event(p: &Pending, id: usize, owner: usize) -> Box<EventBox> {
    let mut b = Box::new(EventBox {
        ev: rdma_cm_event {
            id: id as *mut rdma_cm_id,
            listen_id: p.listen as *mut rdma_cm_id,
            event: p.event,
            status: p.status,
            ..Default::default()
        },
        private: [0; 256],
        owner,
    });
    if let Some(m) = &p.msg {
        let cap = m.kind.private_capacity();
        let n = m.private.len().min(cap);
        b.private[..n].copy_from_slice(&m.private[..n]);
        let pd = b.private.as_ptr().cast();
        // SAFETY: writing the union member matching the id's port space.
        unsafe {
            let c = &mut b.ev.param.conn;
            c.private_data = pd;
            c.private_data_len = cap as u8;
            c.responder_resources = m.initiator_depth;
            c.initiator_depth = m.responder_resources;
            c.flow_control = 1;
            c.retry_count = m.retry_count;
            c.rnr_retry_count = m.rnr_retry_count;
            c.srq = m.srq;
            c.qp_num = m.qpn;
        }
    }
    b
}

fn ud_params(b: &mut EventBox, m: &Msg) {
    let cap = m.kind.private_capacity();
    let pd = b.private.as_ptr().cast();
    let mut ud = rdma_ud_param {
        private_data: pd,
        private_data_len: cap as u8,
        qp_num: m.qpn,
        qkey: m.qkey,
        ..Default::default()
    };
    crate::verbs::set_av(&mut ud.ah_attr, m.lid, &m.gid);
    b.ev.param.ud = ud;
}

fn materialize(cm: &mut Cm, p: Pending) -> CmResult<Option<*mut rdma_cm_event>> {
    let owner = if p.event == RDMA_CM_EVENT_CONNECT_REQUEST {
        p.listen
    } else {
        p.id
    };
    // The kernel discards the events of an id being destroyed.
    if cm.ids.get(&owner).is_none_or(|st| st.destroying) {
        return Ok(None);
    }
    let key = if p.event == RDMA_CM_EVENT_CONNECT_REQUEST {
        match new_request_id(cm, &p) {
            Ok(k) => k,
            Err(_) => return Ok(None),
        }
    } else {
        p.id
    };
    let Some(st) = cm.ids.get(&key) else {
        return Ok(None);
    };
    let ud = st.cid.ps == RDMA_PS_UDP;
    let mut p = p;
    if p.event == RDMA_CM_EVENT_CONNECT_RESPONSE && !st.cid.qp.is_null() {
        let (event, status) = establish_active(cm, key);
        p.event = event;
        p.status = status;
    }
    let mut b = new_event(&p, key, owner);
    if ud {
        if let Some(m) = &p.msg {
            ud_params(&mut b, m);
        }
    }
    if matches!(
        p.event,
        RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_ADDR_RESOLVED | RDMA_CM_EVENT_ROUTE_RESOLVED
    ) {
        b.ev.param.conn = rdma_conn_param::default();
    }
    if let Some(st) = cm.ids.get_mut(&owner) {
        st.events_reported += 1;
    }
    Ok(Some(Box::into_raw(b) as *mut rdma_cm_event))
}

/// Active side, REP received with a QP on the id: RTR, RTS, RTU → ESTABLISHED.
fn establish_active(cm: &mut Cm, key: usize) -> (u32, i32) {
    let Ok(dev) = cm.dev() else {
        return (RDMA_CM_EVENT_CONNECT_ERROR, -libc::ENODEV);
    };
    let mtu = dev.mtu;
    let st = cm.ids.get_mut(&key).expect("caller checked");
    let rep = st.peer_msg.clone().expect("REP stored");
    let path = Path {
        remote_qpn: rep.qpn,
        remote_psn: rep.psn,
        local_psn: st.psn,
        dlid: rep.lid,
        dgid: rep.gid,
        mtu: mtu.min(u32::from(rep.mtu)).max(1),
        responder_resources: st.responder_resources.min(rep.initiator_depth),
        initiator_depth: st.initiator_depth.min(rep.responder_resources),
        retry_count: st.retry_count,
        rnr_retry_count: rep.rnr_retry_count,
    };
    let rc = qp_connect(st.cid.qp, &path);
    if rc != 0 {
        let mut m = Msg::new(Kind::Rej);
        m.status = REJ_CONSUMER_DEFINED;
        let _ = proto::send_peer(cm, key, &m);
        cm.ids.get_mut(&key).expect("present").conn = Conn::Idle;
        return (RDMA_CM_EVENT_CONNECT_ERROR, -rc.abs());
    }
    let _ = proto::send_peer(cm, key, &Msg::new(Kind::Rtu));
    let st = cm.ids.get_mut(&key).expect("present");
    st.conn = Conn::Connected;
    // SAFETY: every bit pattern of the GID union is a valid byte array.
    let (g, l) = (unsafe { st.path.sgid.raw }, u16::from_be(st.path.slid));
    st.publish_route(g, l);
    (RDMA_CM_EVENT_ESTABLISHED, 0)
}

/// The id a CONNECT_REQUEST reports: inherits the listener's channel (or gets a private one
/// when the listener is synchronous), context and port space; owns a socket for the peer.
fn new_request_id(cm: &mut Cm, p: &Pending) -> CmResult<usize> {
    let req = p.msg.clone().ok_or(CmError::Errno(libc::EINVAL))?;
    let l = cm.id(p.listen)?;
    let (sync, chan, ctx, ps, qpt, local) = (
        l.sync,
        l.chan,
        l.cid.context,
        l.cid.ps,
        l.cid.qp_type,
        l.local,
    );
    let key = crate::id::new_id(cm, (!sync).then_some(chan), ctx, ps, qpt)?;
    let dev = cm.dev()?;
    let (dctx, gid, lid, max_rd, max_init) = (
        dev.ctx,
        dev.gid,
        dev.lid,
        dev.max_rd_atom,
        dev.max_init_rd_atom,
    );
    let st = cm.id(key)?;
    st.cid.verbs = dctx;
    st.cid.port_num = 1;
    st.local = if local.ip.is_unspecified() {
        crate::addr::V4 {
            ip: crate::addr::node_ip(),
            ..local
        }
    } else {
        local
    };
    st.remote = req.src;
    st.bound = true;
    st.peer = p.peer.clone();
    st.responder_resources = req.initiator_depth.min(max_rd);
    st.initiator_depth = req.responder_resources.min(max_init);
    st.retry_count = req.retry_count;
    st.rnr_retry_count = req.rnr_retry_count;
    st.peer_msg = Some(req);
    st.conn = Conn::Requested;
    st.publish_route(gid, lid);
    let path: *mut ibv_sa_path_rec = &mut *st.path;
    st.cid.route.path_rec = path;
    st.cid.route.num_paths = 1;
    if let Err(e) = private_socket(cm, key) {
        cm.ids.remove(&key);
        return Err(e);
    }
    Ok(key)
}

/// For a synchronous id: waits for its event, keeps it in `id->event` (acked by the next
/// call, as librdmacm does) and fails with the event's error.
pub fn complete_sync(key: usize, expect: u32) -> CmResult<()> {
    let chan = {
        let mut cm = lock();
        let st = cm.id(key)?;
        if !st.sync {
            return Ok(());
        }
        let (chan, prev) = (
            st.chan,
            std::mem::replace(&mut st.cid.event, ptr::null_mut()),
        );
        if !prev.is_null() {
            ack(&mut cm, prev);
        }
        chan
    };
    let ev = next_event(chan as *mut rdma_event_channel)?;
    // SAFETY: ev was just produced by next_event.
    let (event, status) = unsafe { ((*ev).event, (*ev).status) };
    if let Ok(st) = lock().id(key) {
        st.cid.event = ev;
    }
    if event != expect {
        return Err(CmError::Errno(match event {
            RDMA_CM_EVENT_REJECTED => libc::ECONNREFUSED,
            RDMA_CM_EVENT_UNREACHABLE => libc::EHOSTUNREACH,
            _ if status < 0 => -status,
            _ => libc::EIO,
        }));
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn sv_rdma_get_cm_event(
    chan: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> i32 {
    if out.is_null() {
        return ret(einval());
    }
    match next_event(chan) {
        Ok(ev) => {
            // SAFETY: out is the caller's non-null out pointer.
            unsafe { *out = ev };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

#[no_mangle]
pub extern "C" fn sv_rdma_ack_cm_event(ev: *mut rdma_cm_event) -> i32 {
    if ev.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    ack(&mut lock(), ev);
    0
}

static EVENT_NAMES: [&std::ffi::CStr; 16] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

#[no_mangle]
pub extern "C" fn sv_rdma_event_str(event: u32) -> *const libc::c_char {
    EVENT_NAMES
        .get(event as usize)
        .copied()
        .unwrap_or(c"UNKNOWN EVENT")
        .as_ptr()
}
