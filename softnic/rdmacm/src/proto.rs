//! The CM exchange: what an arriving message does to its id, and sending messages.
//!
//! Active side: REQ → (REP → RTU | REJ). Passive: REQ arrives at the listener's socket and
//! becomes CONNECT_REQUEST; rdma_accept sends REP; RTU → ESTABLISHED. Either side: DREQ →
//! DREP, each side reports DISCONNECTED once. UD port space: SIDR REQ → SIDR REP.

use crate::ffi::*;
use crate::state::{Cm, Conn, Pending};
use crate::wire::{Kind, Msg, REJ_INVALID_SERVICE_ID};
use std::os::unix::net::SocketAddr;

/// Sends `m` from id `key`'s socket to `to`.
pub fn send(cm: &Cm, key: usize, to: &SocketAddr, m: &Msg) -> std::io::Result<()> {
    let sock = cm
        .ids
        .get(&key)
        .and_then(|s| s.sock.as_ref())
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOTCONN))?;
    sock.send_to_addr(&m.encode(), to).map(|_| ())
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
    cm.push_simple(key, RDMA_CM_EVENT_DISCONNECTED, 0);
}
