//! Event channels and ids: create/destroy, bind, listen, resolve address and route, migrate.

use crate::addr::{self, Family, V4};
use crate::ffi::*;
use crate::state::{lock, set_errno, Cm, CmError, CmResult, Conn, IdState};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::net::UnixDatagram;
use std::ptr;
use std::sync::MutexGuard;

/// Maps a result to the C convention (0, or -1 with errno).
pub fn ret(r: CmResult<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            if std::env::var_os("SOFTNIC_CM_DEBUG").is_some() {
                eprintln!("softnic librdmacm: call failed: {e}");
            }
            set_errno(e.errno());
            -1
        }
    }
}

#[track_caller]
pub fn einval<T>() -> CmResult<T> {
    if std::env::var_os("SOFTNIC_CM_DEBUG").is_some() {
        eprintln!(
            "softnic librdmacm: EINVAL at {}",
            std::panic::Location::caller()
        );
    }
    Err(CmError::Errno(libc::EINVAL))
}

/// Reads a `struct sockaddr` supplied by the application (IPv4, or IPv6 naming an IPv4 address:
/// see `addr`).
pub fn read_sockaddr(sa: *const libc::sockaddr) -> CmResult<V4> {
    read_addr(sa).map(|(a, _)| a)
}

/// [`read_sockaddr`] and the family the application wrote it in.
pub fn read_addr(sa: *const libc::sockaddr) -> CmResult<(V4, Family)> {
    if sa.is_null() {
        return einval();
    }
    // SAFETY: the caller passed a sockaddr; sa_family is its first field.
    let family = i32::from(unsafe { (*sa).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            let port = u16::from_be(sin.sin_port);
            Ok((V4 { ip, port }, Family::V4))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let sin6 = unsafe { &*(sa as *const libc::sockaddr_in6) };
            let ip = addr::v4_of(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
                .ok_or(CmError::Errno(libc::EADDRNOTAVAIL))?;
            let port = u16::from_be(sin6.sin6_port);
            Ok((V4 { ip, port }, Family::V6))
        }
        _ => Err(CmError::Errno(libc::EAFNOSUPPORT)),
    }
}

/// Fills a `sockaddr_in` (bindgen layout).
pub fn write_sin(sin: &mut sockaddr_in, a: V4) {
    sin.sin_family = libc::AF_INET as sa_family_t;
    sin.sin_port = a.port.to_be();
    sin.sin_addr.s_addr = u32::from(a.ip).to_be();
}

/// Fills a `sockaddr_in6` (bindgen layout) with the IPv6 form of `a`.
pub fn write_sin6(sin6: &mut sockaddr_in6, a: V4) {
    *sin6 = sockaddr_in6::default();
    sin6.sin6_family = libc::AF_INET6 as sa_family_t;
    sin6.sin6_port = a.port.to_be();
    sin6.sin6_addr.__in6_u.__u6_addr8 = addr::v6_of(a.ip).octets();
}

/// A random 24-bit PSN.
pub fn random_psn() -> u32 {
    let mut v = 0u32;
    // SAFETY: v is 4 writable bytes.
    unsafe { libc::getrandom((&mut v as *mut u32).cast(), 4, 0) };
    v & 0xff_ffff
}

impl IdState {
    /// Writes local/remote addresses and the route into the C id.
    pub fn publish_route(&mut self, dev_gid: [u8; 16], dev_lid: u16) {
        let local = self.local;
        let remote = self.remote;
        let r = &mut self.cid.route;
        // SAFETY: writing the sockaddr_in or sockaddr_in6 member of the address unions (both
        // fit their sockaddr_storage).
        unsafe {
            match self.family {
                Family::V4 => {
                    write_sin(&mut r.addr.__bindgen_anon_1.src_sin, local);
                    write_sin(&mut r.addr.__bindgen_anon_2.dst_sin, remote);
                }
                Family::V6 => {
                    write_sin6(&mut r.addr.__bindgen_anon_1.src_sin6, local);
                    write_sin6(&mut r.addr.__bindgen_anon_2.dst_sin6, remote);
                }
            }
            r.addr.addr.ibaddr.sgid.raw = dev_gid;
            r.addr.addr.ibaddr.pkey = 0xffffu16.to_be();
        }
        self.path.sgid.raw = dev_gid;
        self.path.slid = dev_lid.to_be();
        self.path.pkey = 0xffffu16.to_be();
        self.path.reversible = 1;
        self.path.numb_path = 1;
        self.path.mtu = IBV_MTU_4096 as u8;
        self.path.rate = 3;
        self.path.packet_life_time = 18;
        if let Some(m) = &self.peer_msg {
            self.path.dgid.raw = m.gid;
            self.path.dlid = m.lid.to_be();
            r.addr.addr.ibaddr.dgid.raw = m.gid;
        }
    }
}

/// Creates an id on `chan` (or, with `None`, a synchronous id owning a private channel).
pub fn new_id(
    cm: &mut Cm,
    chan: Option<usize>,
    context: *mut libc::c_void,
    ps: u32,
    qp_type: u32,
) -> CmResult<usize> {
    let (chan, sync) = match chan {
        Some(c) if cm.chans.contains_key(&c) => (c, false),
        Some(_) => return einval(),
        None => (cm.new_channel()?, true),
    };
    let cid = Box::new(rdma_cm_id {
        channel: chan as *mut rdma_event_channel,
        context,
        ps,
        qp_type,
        ..Default::default()
    });
    let key = &*cid as *const rdma_cm_id as usize;
    cm.ids.insert(
        key,
        IdState {
            cid,
            chan,
            sync,
            sock: None,
            local: V4::UNSPECIFIED,
            remote: V4::UNSPECIFIED,
            family: Family::V4,
            afonly: false,
            bound: false,
            peer: None,
            peer_msg: None,
            conn: Conn::Idle,
            dreq_sent: false,
            disc_reported: false,
            timewait_until: None,
            events_reported: 0,
            events_acked: 0,
            destroying: false,
            psn: random_psn(),
            responder_resources: 0xff,
            initiator_depth: 0xff,
            retry_count: 7,
            rnr_retry_count: 7,
            path: Box::default(),
            ep_pd: ptr::null_mut(),
            ep_attr: None,
            early: Vec::new(),
            own_cqs: false,
        },
    );
    Ok(key)
}

/// Binds id `key` to `a` (port 0: an ephemeral port), claiming its socket name.
pub fn bind(cm: &mut Cm, key: usize, a: V4) -> CmResult<()> {
    if !addr::bindable(a.ip) {
        return Err(CmError::Errno(libc::EADDRNOTAVAIL));
    }
    let st = cm.id(key)?;
    if st.bound {
        return einval();
    }
    let ps = st.cid.ps;
    let v6_only = st.family == Family::V6 && st.afonly;
    // A wildcard bind claims the node's own address: requests to it reach this id.
    let claim_ip = if a.ip.is_unspecified() {
        addr::node_ip()
    } else {
        a.ip
    };
    let sock = if a.port != 0 {
        let at = V4 {
            ip: claim_ip,
            port: a.port,
        };
        UnixDatagram::bind_addr(&addr::bound_name(ps, at, v6_only))
            .map_err(|e| CmError::Errno(e.raw_os_error().unwrap_or(libc::EADDRINUSE)))?
    } else {
        ephemeral(ps, claim_ip, v6_only)?.1
    };
    let port = if a.port != 0 { a.port } else { port_of(&sock) };
    sock.set_nonblocking(true)
        .map_err(|e| CmError::Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    let dev = cm.dev()?;
    let (ctx, gid, lid) = (dev.ctx, dev.gid, dev.lid);
    let st = cm.id(key)?;
    st.sock = Some(sock);
    st.bound = true;
    st.local = V4 { ip: a.ip, port };
    if !a.ip.is_unspecified() {
        st.cid.verbs = ctx;
        st.cid.port_num = 1;
    }
    st.publish_route(gid, lid);
    cm.watch(key)
}

fn ephemeral(ps: u32, ip: Ipv4Addr, v6_only: bool) -> CmResult<(u16, UnixDatagram)> {
    let start = (random_psn() % 28232) as u16;
    for i in 0..28232u16 {
        let port = 32768 + (start + i) % 28232;
        let name = addr::bound_name(ps, V4 { ip, port }, v6_only);
        if let Ok(s) = UnixDatagram::bind_addr(&name) {
            return Ok((port, s));
        }
    }
    Err(CmError::Errno(libc::EADDRINUSE))
}

fn port_of(sock: &UnixDatagram) -> u16 {
    use std::os::linux::net::SocketAddrExt;
    sock.local_addr()
        .ok()
        .and_then(|a| a.as_abstract_name().map(|n| n.to_vec()))
        .and_then(|n| {
            let s = String::from_utf8_lossy(&n).into_owned();
            s.rsplit(':').next().and_then(|p| p.parse().ok())
        })
        .unwrap_or(0)
}

/// Gives an id created for an incoming connection its own socket.
pub fn private_socket(cm: &mut Cm, key: usize) -> CmResult<()> {
    cm.next_private += 1;
    let name = addr::private_name(cm.next_private);
    let sock = UnixDatagram::bind_addr(&name)
        .and_then(|s| s.set_nonblocking(true).map(|()| s))
        .map_err(|e| CmError::Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    cm.id(key)?.sock = Some(sock);
    cm.watch(key)
}

pub fn resolve_addr(cm: &mut Cm, key: usize, src: Option<V4>, dst: V4) -> CmResult<()> {
    if !dst.ip.is_loopback() {
        // softnic's fabric is this machine: only loopback addresses name its nodes.
        return Err(CmError::Errno(libc::EADDRNOTAVAIL));
    }
    reject_early(cm, key);
    let bound = cm.id(key)?.bound;
    if !bound {
        let src = src.unwrap_or(V4 {
            ip: addr::node_ip(),
            port: 0,
        });
        let src = if src.ip.is_unspecified() {
            V4 {
                ip: addr::node_ip(),
                ..src
            }
        } else {
            src
        };
        bind(cm, key, src)?;
    }
    let dev = cm.dev()?;
    let (ctx, gid, lid) = (dev.ctx, dev.gid, dev.lid);
    let st = cm.id(key)?;
    if st.local.ip.is_unspecified() {
        st.local.ip = addr::node_ip();
    }
    st.remote = dst;
    st.cid.verbs = ctx;
    st.cid.port_num = 1;
    st.conn = Conn::AddrResolved;
    st.publish_route(gid, lid);
    cm.push_simple(key, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    Ok(())
}

pub fn resolve_route(cm: &mut Cm, key: usize) -> CmResult<()> {
    let st = cm.id(key)?;
    if st.conn != Conn::AddrResolved && st.conn != Conn::RouteResolved {
        return einval();
    }
    st.conn = Conn::RouteResolved;
    let path: *mut ibv_sa_path_rec = &mut *st.path;
    st.cid.route.path_rec = path;
    st.cid.route.num_paths = 1;
    cm.push_simple(key, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    Ok(())
}

pub fn listen(cm: &mut Cm, key: usize) -> CmResult<()> {
    let st = cm.id(key)?;
    if !st.bound {
        bind(cm, key, V4::UNSPECIFIED)?;
    }
    let st = cm.id(key)?;
    if !matches!(st.conn, Conn::Idle | Conn::Listening) {
        return einval();
    }
    st.conn = Conn::Listening;
    let (chan, early) = (st.chan, std::mem::take(&mut st.early));
    for (m, from) in early {
        cm.push(
            chan,
            crate::state::Pending {
                id: 0,
                listen: key,
                event: RDMA_CM_EVENT_CONNECT_REQUEST,
                status: 0,
                msg: Some(m),
                peer: Some(from),
            },
        );
    }
    Ok(())
}

/// Rejects the requests that reached id `key` before it listened.
pub fn reject_early(cm: &mut Cm, key: usize) {
    let early = match cm.ids.get_mut(&key) {
        Some(st) => std::mem::take(&mut st.early),
        None => return,
    };
    for (m, from) in early {
        let _ = crate::proto::send(cm, key, &from, &crate::proto::no_listener(&m));
    }
}

/// Destroys an id: tells a connected peer (DREQ) or a requester (REJ), frees everything.
pub fn destroy(cm: &mut Cm, key: usize) -> CmResult<()> {
    use crate::wire::{Kind, Msg, REJ_CONSUMER_DEFINED};
    let st = cm.id(key)?;
    let conn = st.conn;
    let (sync, chan, ev) = (st.sync, st.chan, st.cid.event);
    let notify = match conn {
        Conn::Connected | Conn::Accepting | Conn::Responded
            if !st.dreq_sent && !st.disc_reported =>
        {
            Some(Msg::new(Kind::Dreq))
        }
        Conn::Requested => {
            let mut m = Msg::new(Kind::Rej);
            m.status = REJ_CONSUMER_DEFINED;
            Some(m)
        }
        _ => None,
    };
    if let Some(m) = notify {
        let _ = crate::proto::send_peer(cm, key, &m);
    }
    reject_early(cm, key);
    cm.unwatch(key);
    cm.ids.remove(&key);
    if !ev.is_null() {
        crate::event::ack(cm, ev);
    }
    if sync {
        cm.chans.remove(&chan);
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn sv_rdma_create_event_channel() -> *mut rdma_event_channel {
    match lock().new_channel() {
        Ok(k) => k as *mut rdma_event_channel,
        Err(e) => {
            set_errno(e.errno());
            ptr::null_mut()
        }
    }
}

#[no_mangle]
pub extern "C" fn sv_rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    lock().chans.remove(&(ch as usize));
}

#[no_mangle]
pub extern "C" fn sv_rdma_create_id(
    ch: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut libc::c_void,
    ps: u32,
) -> i32 {
    let qp_type = match ps {
        RDMA_PS_TCP | RDMA_PS_IB => IBV_QPT_RC,
        RDMA_PS_UDP | RDMA_PS_IPOIB => IBV_QPT_UD,
        _ => return ret(einval()),
    };
    if id.is_null() {
        return ret(einval());
    }
    let chan = (!ch.is_null()).then_some(ch as usize);
    match new_id(&mut lock(), chan, context, ps, qp_type) {
        Ok(k) => {
            // SAFETY: id is the caller's out pointer (checked non-null).
            unsafe { *id = k as *mut rdma_cm_id };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

/// What `rdma_destroy_id` and `rdma_migrate_id` do first, as librdmacm: ack the event the id
/// holds (a synchronous id's last call's) when `ack_held`, then wait (the lock released)
/// until every event reported for the id was acked.
fn settle_events(
    mut cm: MutexGuard<'static, Cm>,
    key: usize,
    ack_held: bool,
) -> MutexGuard<'static, Cm> {
    let held = match cm.ids.get_mut(&key) {
        Some(st) if ack_held => std::mem::replace(&mut st.cid.event, ptr::null_mut()),
        _ => ptr::null_mut(),
    };
    if !held.is_null() {
        crate::event::ack(&mut cm, held);
    }
    while cm
        .ids
        .get(&key)
        .is_some_and(|st| st.events_acked < st.events_reported)
    {
        cm = crate::state::wait_for_ack(cm);
    }
    cm
}

#[no_mangle]
pub extern "C" fn sv_rdma_destroy_id(id: *mut rdma_cm_id) -> i32 {
    let key = id as usize;
    let mut cm = lock();
    // As librdmacm: the id stops reporting events, acks the one it holds (a synchronous
    // id's last event), then waits until every event it reported was acked, so that no
    // other thread still handles one of its events when it is freed.
    match cm.id(key) {
        Ok(st) => st.destroying = true,
        Err(e) => return ret(Err(e)),
    }
    let mut cm = settle_events(cm, key, true);
    ret(destroy(&mut cm, key))
}

#[no_mangle]
pub extern "C" fn sv_rdma_bind_addr(id: *mut rdma_cm_id, sa: *mut libc::sockaddr) -> i32 {
    ret(read_addr(sa).and_then(|(a, family)| {
        in_family(&mut lock(), id as usize, family, |cm| {
            bind(cm, id as usize, a)
        })
    }))
}

/// Runs `f` with id `key` reporting its addresses in `family` (kept only if `f` succeeds).
fn in_family(
    cm: &mut Cm,
    key: usize,
    family: Family,
    f: impl FnOnce(&mut Cm) -> CmResult<()>,
) -> CmResult<()> {
    let before = std::mem::replace(&mut cm.id(key)?.family, family);
    let r = f(cm);
    if r.is_err() {
        if let Ok(st) = cm.id(key) {
            st.family = before;
        }
    }
    r
}

#[no_mangle]
pub extern "C" fn sv_rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: i32,
) -> i32 {
    let r = (|| {
        let src = if src.is_null() {
            None
        } else {
            Some(read_sockaddr(src)?)
        };
        let (dst, family) = read_addr(dst)?;
        in_family(&mut lock(), id as usize, family, |cm| {
            resolve_addr(cm, id as usize, src, dst)
        })?;
        crate::event::complete_sync(id as usize, RDMA_CM_EVENT_ADDR_RESOLVED)
    })();
    ret(r)
}

#[no_mangle]
pub extern "C" fn sv_rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: i32) -> i32 {
    let r = resolve_route(&mut lock(), id as usize);
    ret(r.and_then(|()| crate::event::complete_sync(id as usize, RDMA_CM_EVENT_ROUTE_RESOLVED)))
}

#[no_mangle]
pub extern "C" fn sv_rdma_listen(id: *mut rdma_cm_id, _backlog: i32) -> i32 {
    ret(listen(&mut lock(), id as usize))
}

#[no_mangle]
pub extern "C" fn sv_rdma_migrate_id(id: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> i32 {
    let cm = lock();
    // As librdmacm: a synchronous id acks the event it holds (its last call's), then no
    // event of the id is still being handled on the old channel when the call returns
    // (every one reported was acked).
    let sync = cm.ids.get(&(id as usize)).is_some_and(|st| st.sync);
    let mut cm = settle_events(cm, id as usize, sync);
    let r = (|| {
        let new = if ch.is_null() {
            cm.new_channel()?
        } else if cm.chans.contains_key(&(ch as usize)) {
            ch as usize
        } else {
            return einval();
        };
        let st = cm.id(id as usize)?;
        let (old, old_sync) = (st.chan, st.sync);
        st.chan = new;
        st.sync = ch.is_null();
        st.cid.channel = new as *mut rdma_event_channel;
        // Events not yet reported move with the id.
        let moved: Vec<_> = match cm.chans.get_mut(&old) {
            Some(c) => {
                let all: Vec<_> = c.queue.drain(..).collect();
                let (mine, rest): (Vec<_>, Vec<_>) =
                    all.into_iter().partition(|p| p.id == id as usize);
                c.queue = rest.into();
                mine
            }
            None => Vec::new(),
        };
        for p in moved {
            drain_one_byte(&cm, old);
            cm.push(new, p);
        }
        if old_sync {
            cm.chans.remove(&old);
        }
        Ok(())
    })();
    ret(r)
}

fn drain_one_byte(cm: &Cm, chan: usize) {
    if let Some(c) = cm.chans.get(&chan) {
        use std::os::fd::AsRawFd;
        let mut b = [0u8];
        // SAFETY: one-byte read into a valid buffer from our pipe, made non-blocking for it.
        unsafe {
            let fd = c.read.as_raw_fd();
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            libc::read(fd, b.as_mut_ptr().cast(), 1);
            libc::fcntl(fd, libc::F_SETFL, fl);
        }
    }
}

fn port_be(id: *mut rdma_cm_id, src: bool) -> u16 {
    let cm = lock();
    match cm.ids.get(&(id as usize)) {
        Some(st) if src => st.local.port.to_be(),
        Some(st) => st.remote.port.to_be(),
        None => 0,
    }
}

#[no_mangle]
pub extern "C" fn sv_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    port_be(id, true)
}

#[no_mangle]
pub extern "C" fn sv_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    port_be(id, false)
}
