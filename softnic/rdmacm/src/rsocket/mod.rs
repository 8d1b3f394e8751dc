//! rsockets (`<rdma/rsocket.h>`): stream sockets over RC QPs. Each socket is a handle (an
//! eventfd, so the number is a real descriptor of this process) in a table; a connected socket
//! owns a [`link::Link`]. Connection setup uses this library's own CM calls on synchronous
//! ids; the data protocol is in `link.rs` and the softnic README ("rsockets").

mod calls;
mod link;

use crate::addr::V4;
use crate::ffi::*;
use crate::state::{lock, set_errno};
use link::{Errno, Link};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// `SOL_RDMA` and its options (rsocket.h).
const SOL_RDMA: i32 = 0x10000;
const RDMA_SQSIZE: i32 = 0;
const RDMA_RQSIZE: i32 = 1;
const RDMA_INLINE: i32 = 2;
const RDMA_IOMAPSIZE: i32 = 3;

/// Socket options remembered as set (they do not change the transport).
#[derive(Debug, Default, Clone, Copy)]
struct Opts {
    reuseaddr: i32,
    keepalive: i32,
    sndbuf: i32,
    rcvbuf: i32,
    nodelay: i32,
    sqsize: i32,
    rqsize: i32,
    inline: i32,
    iomapsize: i32,
}

enum Role {
    Fresh,
    Listening {
        id: *mut rdma_cm_id,
        chan: *mut rdma_event_channel,
    },
    Connected(Box<Link>),
}

struct Sock {
    role: Role,
    nonblock: bool,
    bound: Option<V4>,
    opts: Opts,
    so_error: i32,
}

// SAFETY: the raw pointers (CM id, channel, verbs objects) are owned by the socket and used
// only while its mutex is held; librdmacm and libibverbs objects are thread-safe.
unsafe impl Send for Sock {}

type Shared = Arc<Mutex<Sock>>;

fn table() -> MutexGuard<'static, HashMap<i32, Shared>> {
    static T: OnceLock<Mutex<HashMap<i32, Shared>>> = OnceLock::new();
    T.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn get(s: i32) -> Result<Shared, Errno> {
    table().get(&s).cloned().ok_or(Errno(libc::EBADF))
}

fn locked(s: &Shared) -> MutexGuard<'_, Sock> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new handle for `sock`.
fn install(sock: Sock) -> Result<i32, Errno> {
    // SAFETY: eventfd creates a descriptor owned by the table until rclose.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(Errno(crate::state::errno()));
    }
    table().insert(fd, Arc::new(Mutex::new(sock)));
    Ok(fd)
}

fn fresh(nonblock: bool, opts: Opts) -> Sock {
    Sock {
        role: Role::Fresh,
        nonblock,
        bound: None,
        opts,
        so_error: 0,
    }
}

/// Spins, then yields, then sleeps briefly between checks of `ready`, until it holds or the
/// deadline passes.
fn wait_until(deadline: Option<Instant>, mut ready: impl FnMut() -> bool) -> bool {
    let mut round = 0u32;
    loop {
        if ready() {
            return true;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        round = round.saturating_add(1);
        if round < 100 {
            std::hint::spin_loop();
        } else if round < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Maps a result to the C convention for calls returning int.
fn ret_i32(r: Result<i32, Errno>) -> i32 {
    match r {
        Ok(v) => v,
        Err(Errno(e)) => {
            set_errno(e);
            -1
        }
    }
}

fn ret_isize(r: Result<usize, Errno>) -> isize {
    match r {
        Ok(v) => v as isize,
        Err(Errno(e)) => {
            set_errno(e);
            -1
        }
    }
}

fn cm_errno() -> Errno {
    Errno(crate::state::errno())
}

/// The id's local or remote address, as the CM recorded it.
fn id_addr(id: *mut rdma_cm_id, local: bool) -> Option<V4> {
    let cm = lock();
    cm.ids
        .get(&(id as usize))
        .map(|st| if local { st.local } else { st.remote })
}

fn sockaddr_of(a: V4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(a.ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// Connects a fresh socket (blocking until the peer accepts or rejects).
fn connect(sock: &mut Sock, dst: V4) -> Result<(), Errno> {
    if !matches!(sock.role, Role::Fresh) {
        return Err(Errno(libc::EISCONN));
    }
    let mut id = std::ptr::null_mut();
    if crate::id::sv_rdma_create_id(
        std::ptr::null_mut(),
        &mut id,
        std::ptr::null_mut(),
        RDMA_PS_TCP,
    ) != 0
    {
        return Err(cm_errno());
    }
    let mut dsin = sockaddr_of(dst);
    let mut ssin = sock.bound.map(sockaddr_of);
    let src = ssin.as_mut().map_or(std::ptr::null_mut(), |s| {
        s as *mut libc::sockaddr_in as *mut libc::sockaddr
    });
    let dptr = &mut dsin as *mut libc::sockaddr_in as *mut libc::sockaddr;
    if crate::id::sv_rdma_resolve_addr(id, src, dptr, 2000) != 0
        || crate::id::sv_rdma_resolve_route(id, 2000) != 0
    {
        let e = cm_errno();
        crate::id::sv_rdma_destroy_id(id);
        return Err(e);
    }
    let mut l = match Link::new(id) {
        Ok(l) => l,
        Err(e) => {
            crate::id::sv_rdma_destroy_id(id);
            return Err(e);
        }
    };
    let hello = l.hello().encode();
    let mut param = conn_param(&hello);
    if crate::conn::sv_rdma_connect(id, &mut param) != 0 {
        let e = crate::state::errno();
        return Err(Errno(if e == 0 { libc::ECONNREFUSED } else { e }));
    }
    // SAFETY: a synchronous id keeps its last event (ESTABLISHED, with the REP's private
    // data) in id->event until its next call.
    let peer = unsafe { event_private(&*(*id).event) };
    l.set_peer(link::Hello::decode(&peer).ok_or(Errno(libc::EPROTO))?);
    sock.role = Role::Connected(l);
    Ok(())
}

fn conn_param(hello: &[u8; link::HELLO_LEN]) -> rdma_conn_param {
    rdma_conn_param {
        private_data: hello.as_ptr().cast(),
        private_data_len: link::HELLO_LEN as u8,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    }
}

/// The private data an event carries.
fn event_private(ev: &rdma_cm_event) -> Vec<u8> {
    // SAFETY: connection events use the `conn` member; its private data (when non-null)
    // holds private_data_len bytes owned by the event.
    unsafe {
        let c = &ev.param.conn;
        if c.private_data.is_null() {
            return Vec::new();
        }
        std::slice::from_raw_parts(c.private_data as *const u8, c.private_data_len as usize)
            .to_vec()
    }
}

/// Starts listening on the bound (or wildcard) address.
fn listen(sock: &mut Sock) -> Result<(), Errno> {
    if !matches!(sock.role, Role::Fresh) {
        return Err(Errno(libc::EINVAL));
    }
    let chan = crate::id::sv_rdma_create_event_channel();
    if chan.is_null() {
        return Err(cm_errno());
    }
    let mut id = std::ptr::null_mut();
    let fail = |id: *mut rdma_cm_id| {
        let e = cm_errno();
        if !id.is_null() {
            crate::id::sv_rdma_destroy_id(id);
        }
        crate::id::sv_rdma_destroy_event_channel(chan);
        Err(e)
    };
    if crate::id::sv_rdma_create_id(chan, &mut id, std::ptr::null_mut(), RDMA_PS_TCP) != 0 {
        return fail(std::ptr::null_mut());
    }
    let mut sin = sockaddr_of(sock.bound.unwrap_or(V4::UNSPECIFIED));
    let sa = &mut sin as *mut libc::sockaddr_in as *mut libc::sockaddr;
    if crate::id::sv_rdma_bind_addr(id, sa) != 0 || crate::id::sv_rdma_listen(id, 16) != 0 {
        return fail(id);
    }
    sock.role = Role::Listening { id, chan };
    Ok(())
}

/// Whether the listener's channel has an event waiting.
fn chan_ready(chan: *mut rdma_event_channel) -> bool {
    // SAFETY: chan is the listener's live channel.
    let fd = unsafe { (*chan).fd };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// Takes the next connection request of a listener and accepts it on a new socket.
fn accept(sock: &mut Sock) -> Result<i32, Errno> {
    let Role::Listening { chan, .. } = sock.role else {
        return Err(Errno(libc::EINVAL));
    };
    loop {
        if sock.nonblock && !chan_ready(chan) {
            return Err(Errno(libc::EAGAIN));
        }
        let mut ev = std::ptr::null_mut();
        if crate::event::sv_rdma_get_cm_event(chan, &mut ev) != 0 {
            return Err(cm_errno());
        }
        // SAFETY: ev was just returned by rdma_get_cm_event.
        let (kind, id, private) = unsafe { ((*ev).event, (*ev).id, event_private(&*ev)) };
        crate::event::sv_rdma_ack_cm_event(ev);
        if kind == RDMA_CM_EVENT_CONNECT_REQUEST {
            return accept_request(id, &private, sock.opts);
        }
    }
}

fn accept_request(id: *mut rdma_cm_id, private: &[u8], opts: Opts) -> Result<i32, Errno> {
    let refuse = |e: Errno| {
        crate::conn::sv_rdma_reject(id, std::ptr::null(), 0);
        crate::id::sv_rdma_destroy_id(id);
        Err(e)
    };
    let Some(peer) = link::Hello::decode(private) else {
        return refuse(Errno(libc::EPROTO));
    };
    // The new id becomes synchronous: rdma_accept waits for ESTABLISHED.
    if crate::id::sv_rdma_migrate_id(id, std::ptr::null_mut()) != 0 {
        return refuse(cm_errno());
    }
    let mut l = match Link::new(id) {
        Ok(l) => l,
        Err(e) => return refuse(e),
    };
    l.set_peer(peer);
    let hello = l.hello().encode();
    let mut param = conn_param(&hello);
    if crate::conn::sv_rdma_accept(id, &mut param) != 0 {
        return Err(cm_errno());
    }
    let mut s = fresh(false, opts);
    s.role = Role::Connected(l);
    install(s)
}

/// Sends the end of stream (after all queued data) and, for SHUT_RDWR, waits for every send
/// to complete and disconnects.
fn shutdown(sock: &mut Sock, how: i32) -> Result<(), Errno> {
    let Role::Connected(l) = &mut sock.role else {
        return Err(Errno(libc::ENOTCONN));
    };
    if how == libc::SHUT_RD {
        return Ok(());
    }
    l.queue_fin();
    let deadline = Some(Instant::now() + Duration::from_secs(5));
    wait_until(deadline, || {
        l.progress();
        l.idle() || l.err != 0
    });
    if how == libc::SHUT_RDWR && !l.closing {
        l.closing = true;
        crate::conn::sv_rdma_disconnect(l.id);
    }
    Ok(())
}

fn close(s: i32) -> Result<i32, Errno> {
    let sh = table().remove(&s).ok_or(Errno(libc::EBADF))?;
    let mut sock = locked(&sh);
    match std::mem::replace(&mut sock.role, Role::Fresh) {
        Role::Connected(mut l) => {
            if !l.closing {
                let mut tmp = fresh(false, sock.opts);
                tmp.role = Role::Connected(l);
                let _ = shutdown(&mut tmp, libc::SHUT_RDWR);
                drop(tmp);
            } else {
                l.progress();
            }
        }
        Role::Listening { id, chan } => {
            crate::id::sv_rdma_destroy_id(id);
            crate::id::sv_rdma_destroy_event_channel(chan);
        }
        Role::Fresh => {}
    }
    // SAFETY: s is the eventfd install() created for this socket, closed once.
    unsafe { libc::close(s) };
    Ok(0)
}
