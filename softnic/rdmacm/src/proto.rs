//! The CM exchange: what an arriving message does to its id, and sending messages.
//!
//! Active side: REQ → (REP → RTU | REJ). Passive: REQ arrives at the listener's socket and
//! becomes CONNECT_REQUEST; rdma_accept sends REP; RTU → ESTABLISHED. Either side: DREQ →
//! DREP, each side reports DISCONNECTED once. UD port space: SIDR REQ → SIDR REP.

use crate::ffi::*;
use crate::state::{Cm, Conn, Pending};
use crate::wire::{Kind, Msg, REJ_INVALID_SERVICE_ID};
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A CM message the receiver's full socket queue refused (`EAGAIN`: a Unix datagram socket
/// holds `net.unix.max_dgram_qlen` datagrams, 10 by default — a burst of REQs at one listener
/// overflows it), sent again by the receive thread, as the IB CM retransmits a MAD nobody
/// answered. Messages of one id keep their order: while one waits, the id's later ones
/// queue behind it.
struct Resend {
    key: usize,
    kind: Kind,
    /// The id's socket (a second handle: the id may be destroyed meanwhile, as a DREQ sent
    /// by rdma_destroy_id still goes out).
    sock: UnixDatagram,
    to: SocketAddr,
    bytes: Vec<u8>,
    since: Instant,
}

static RESENDS: Mutex<VecDeque<Resend>> = Mutex::new(VecDeque::new());

/// How many messages wait in [`RESENDS`] (read by the receive thread without the lock).
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// How long a refused message is retried: librdmacm's CM response timeout (2^20 × 4.096 µs,
/// 4.3 s) a few times over. A REQ or SIDR REQ not delivered by then reports
/// RDMA_CM_EVENT_UNREACHABLE with `-ETIMEDOUT`, as the IB CM does after its retries.
const RESEND_FOR: Duration = Duration::from_secs(16);

fn resends() -> MutexGuard<'static, VecDeque<Resend>> {
    RESENDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends `m` from id `key`'s socket to `to`; a full receive queue queues it for the receive
/// thread ([`resend_waiting`]) and counts as sent.
pub fn send(cm: &Cm, key: usize, to: &SocketAddr, m: &Msg) -> std::io::Result<()> {
    let sock = cm
        .ids
        .get(&key)
        .and_then(|s| s.sock.as_ref())
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOTCONN))?;
    let bytes = m.encode();
    let mut q = resends();
    if !q.iter().any(|r| r.key == key) {
        match sock.send_to_addr(&bytes, to) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            r => return r.map(|_| ()),
        }
    }
    q.push_back(Resend {
        key,
        kind: m.kind,
        sock: sock.try_clone()?,
        to: to.clone(),
        bytes,
        since: Instant::now(),
    });
    WAITING.store(q.len(), Ordering::Release);
    Ok(())
}

/// Whether messages wait to be sent again.
pub fn resends_waiting() -> bool {
    WAITING.load(Ordering::Acquire) > 0
}

/// Sends the waiting messages again, in order (receive thread, CM lock held): each that goes
/// out or fails for good leaves the queue; the first still refused holds back its id's later
/// ones. A request that fails for good reports as [`super::conn`]'s connect does.
pub fn resend_waiting(cm: &mut Cm) {
    let mut q = resends();
    let mut blocked: Vec<usize> = Vec::new();
    let mut failed: Vec<(usize, Kind, bool)> = Vec::new();
    q.retain(|r| {
        if blocked.contains(&r.key) {
            return true;
        }
        match r.sock.send_to_addr(&r.bytes, &r.to) {
            Err(e) if e.kind() == ErrorKind::WouldBlock && r.since.elapsed() < RESEND_FOR => {
                blocked.push(r.key);
                true
            }
            Err(e) => {
                failed.push((r.key, r.kind, e.kind() == ErrorKind::WouldBlock));
                false
            }
            Ok(_) => false,
        }
    });
    WAITING.store(q.len(), Ordering::Release);
    drop(q);
    for (key, kind, timed_out) in failed {
        let Some(st) = cm.ids.get_mut(&key) else {
            continue;
        };
        if !matches!(kind, Kind::Req | Kind::SidrReq) || st.conn != Conn::Connecting {
            continue;
        }
        st.conn = Conn::Idle;
        let (event, status) = if timed_out || kind == Kind::SidrReq {
            (RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT)
        } else {
            (RDMA_CM_EVENT_REJECTED, i32::from(REJ_INVALID_SERVICE_ID))
        };
        cm.push_simple(key, event, status);
    }
}

/// Sends `m` to the peer of id `key`, if it has one.
pub fn send_peer(cm: &Cm, key: usize, m: &Msg) -> std::io::Result<()> {
    let to = cm
        .ids
        .get(&key)
        .and_then(|s| s.peer.clone())
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOTCONN))?;
    send(cm, key, &to, m)
}

/// A process that exits closes its ids' sockets, as the kernel destroys a dead process's CM
/// ids: a connected id whose peer socket is gone reports DISCONNECTED (its peer can no longer
/// answer a DREQ). Probed with an empty datagram, which receivers ignore.
pub fn check_peers(cm: &mut Cm) {
    let gone: Vec<usize> = cm
        .ids
        .iter()
        .filter(|(_, st)| {
            matches!(st.conn, Conn::Connected | Conn::Accepting | Conn::Responded)
                && !st.disc_reported
        })
        .filter_map(|(k, st)| {
            let (sock, peer) = (st.sock.as_ref()?, st.peer.as_ref()?);
            match sock.send_to_addr(&[], peer) {
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Some(*k),
                _ => None,
            }
        })
        .collect();
    for key in gone {
        if let Some(st) = cm.ids.get_mut(&key) {
            st.conn = Conn::Connected;
        }
        report_disconnect(cm, key);
    }
}

/// Handles one message that arrived at id `key`'s socket (receiving thread, lock held).
pub fn on_message(cm: &mut Cm, key: usize, m: Msg, from: SocketAddr) {
    let Some(st) = cm.ids.get(&key) else {
        return;
    };
    let (conn, chan, ps) = (st.conn, st.chan, st.cid.ps);
    let pending = |event: u32, status: i32, msg: Option<Msg>| Pending {
        id: key,
        listen: 0,
        event,
        status,
        msg,
        peer: Some(from.clone()),
    };
    match m.kind {
        Kind::Req | Kind::SidrReq => {
            if m.ps != ps {
                let _ = send(cm, key, &from, &no_listener(&m));
            } else if conn == Conn::Listening {
                cm.push(
                    chan,
                    Pending {
                        id: 0,
                        listen: key,
                        ..pending(RDMA_CM_EVENT_CONNECT_REQUEST, 0, Some(m))
                    },
                );
            } else if conn == Conn::Idle {
                // Bound, not listening yet (rdma_bind_addr then rdma_listen): held until it
                // listens, as a retried REQ would find it.
                cm.ids.get_mut(&key).expect("checked").early.push((m, from));
            } else {
                let _ = send(cm, key, &from, &no_listener(&m));
            }
        }
        Kind::Rep if conn == Conn::Connecting => {
            let st = cm.ids.get_mut(&key).expect("checked");
            st.peer = Some(from.clone());
            st.peer_msg = Some(m.clone());
            st.conn = Conn::Responded;
            // Internal: rdma_get_cm_event brings the QP up and reports ESTABLISHED.
            cm.push(chan, pending(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, Some(m)));
        }
        Kind::Rej if matches!(conn, Conn::Connecting | Conn::Accepting) => {
            cm.ids.get_mut(&key).expect("checked").conn = Conn::Idle;
            let status = i32::from(m.status);
            cm.push(chan, pending(RDMA_CM_EVENT_REJECTED, status, Some(m)));
        }
        Kind::Rtu if conn == Conn::Accepting => {
            cm.ids.get_mut(&key).expect("checked").conn = Conn::Connected;
            cm.push(chan, pending(RDMA_CM_EVENT_ESTABLISHED, 0, Some(m)));
        }
        Kind::Dreq => {
            let _ = send(cm, key, &from, &Msg::new(Kind::Drep));
            report_disconnect(cm, key);
        }
        Kind::Drep => report_disconnect(cm, key),
        Kind::SidrRep if conn == Conn::Connecting => {
            let st = cm.ids.get_mut(&key).expect("checked");
            if m.status == 0 {
                st.conn = Conn::Connected;
                st.peer_msg = Some(m.clone());
                cm.push(chan, pending(RDMA_CM_EVENT_ESTABLISHED, 0, Some(m)));
            } else {
                st.conn = Conn::Idle;
                let status = i32::from(m.status);
                cm.push(chan, pending(RDMA_CM_EVENT_UNREACHABLE, status, Some(m)));
            }
        }
        _ => {}
    }
}

/// The answer to a request no listener takes: REJ (invalid service ID) or a SIDR REP with
/// that status.
pub fn no_listener(req: &Msg) -> Msg {
    let mut r = Msg::new(if req.kind == Kind::Req {
        Kind::Rej
    } else {
        Kind::SidrRep
    });
    r.status = REJ_INVALID_SERVICE_ID;
    r
}

/// Reports DISCONNECTED on id `key` once per connection.
pub fn report_disconnect(cm: &mut Cm, key: usize) {
    let Some(st) = cm.ids.get_mut(&key) else {
        return;
    };
    if st.disc_reported || !matches!(st.conn, Conn::Connected | Conn::Disconnected) {
        return;
    }
    st.disc_reported = true;
    st.conn = Conn::Disconnected;
    st.timewait_until = Some(std::time::Instant::now() + TIMEWAIT);
    cm.push_simple(key, RDMA_CM_EVENT_DISCONNECTED, 0);
}

/// How long a disconnected connection stays in the IB CM's time wait: the kernel's
/// `cm_convert_to_ms(packet_life_time + 1)` for the path's packet lifetime (18, `id.rs`'s
/// `publish_route`: 1 << (19 − 8) ms).
pub const TIMEWAIT: std::time::Duration = std::time::Duration::from_millis(1 << (18 + 1 - 8));

/// Reports RDMA_CM_EVENT_TIMEWAIT_EXIT on each id whose time wait ended (receiving thread,
/// every [`super::state`] peer check): as over the kernel, the last event of a connection,
/// which programs that free a connection only then wait for (tgtd's iSER target drops its
/// last reference to the connection, and ends the session, on it). An id destroyed before
/// never reports it.
pub fn end_timewaits(cm: &mut Cm) {
    let now = std::time::Instant::now();
    let due: Vec<usize> = cm
        .ids
        .iter_mut()
        .filter(|(_, st)| st.timewait_until.is_some_and(|t| t <= now) && !st.destroying)
        .map(|(k, st)| {
            st.timewait_until = None;
            *k
        })
        .collect();
    for key in due {
        cm.push_simple(key, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
    }
}
