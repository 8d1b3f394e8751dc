//! The rsocket entry points (`sv_r*`, exported as `r*@RDMACM_1.0`).

use super::*;
use crate::id::read_sockaddr;

/// Whether a call on `sock` with `flags` must not block.
fn nonblocking(sock: &Sock, flags: i32) -> bool {
    sock.nonblock || flags & libc::MSG_DONTWAIT != 0
}

/// Runs `step` (bytes moved now) until `want` bytes moved, blocking as the socket allows;
/// `done_early` says whether a partial result may be returned.
fn transfer(
    s: i32,
    flags: i32,
    want: usize,
    mut step: impl FnMut(&mut Link, usize) -> Result<usize, Errno>,
    receiving: bool,
) -> Result<usize, Errno> {
    let sh = get(s)?;
    let mut sock = locked(&sh);
    let nb = nonblocking(&sock, flags);
    let Role::Connected(l) = &mut sock.role else {
        return Err(Errno(libc::ENOTCONN));
    };
    let mut done = 0usize;
    let mut failure = None;
    wait_until(None, || {
        match step(l, done) {
            Ok(n) => done += n,
            Err(e) => {
                failure = Some(e);
                return true;
            }
        }
        if done == want {
            return true;
        }
        if receiving {
            let all = flags & libc::MSG_WAITALL != 0;
            if (done > 0 && !all) || (l.fin_recv && !l.readable_data()) || l.err != 0 {
                return true;
            }
        }
        nb
    });
    match failure {
        Some(_) if done > 0 => Ok(done),
        Some(e) => Err(e),
        None if done == 0 && want > 0 && l.err != 0 => Err(Errno(l.err)),
        None if done == 0 && want > 0 && nb && !(receiving && l.fin_recv) => {
            Err(Errno(libc::EAGAIN))
        }
        None => Ok(done),
    }
}

fn send_bytes(s: i32, buf: *const libc::c_void, len: usize, flags: i32) -> isize {
    if len == 0 {
        return 0;
    }
    // SAFETY: the application passes len readable bytes at buf.
    let data = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
    ret_isize(transfer(
        s,
        flags,
        len,
        |l, done| l.send(&data[done..]),
        false,
    ))
}

fn recv_bytes(s: i32, buf: *mut libc::c_void, len: usize, flags: i32) -> isize {
    if len == 0 {
        return 0;
    }
    // SAFETY: the application passes len writable bytes at buf.
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) };
    ret_isize(transfer(
        s,
        flags,
        len,
        |l, done| Ok(l.recv(&mut out[done..])),
        true,
    ))
}

#[no_mangle]
pub extern "C" fn sv_rsocket(domain: i32, ty: i32, _protocol: i32) -> i32 {
    let r = (|| {
        if domain != libc::AF_INET {
            return Err(Errno(libc::EAFNOSUPPORT));
        }
        if ty & 0xf != libc::SOCK_STREAM {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        install(fresh(ty & libc::SOCK_NONBLOCK != 0, Opts::default()))
    })();
    ret_i32(r)
}

#[no_mangle]
pub extern "C" fn sv_rbind(s: i32, a: *const libc::sockaddr, _l: u32) -> i32 {
    let r = (|| {
        let addr = read_sockaddr(a).map_err(|e| Errno(e.errno()))?;
        let sh = get(s)?;
        let mut sock = locked(&sh);
        if !matches!(sock.role, Role::Fresh) || sock.bound.is_some() {
            return Err(Errno(libc::EINVAL));
        }
        sock.bound = Some(addr);
        Ok(0)
    })();
    ret_i32(r)
}

#[no_mangle]
pub extern "C" fn sv_rlisten(s: i32, _backlog: i32) -> i32 {
    ret_i32(get(s).and_then(|sh| listen(&mut locked(&sh)).map(|()| 0)))
}

#[no_mangle]
pub extern "C" fn sv_raccept(s: i32, a: *mut libc::sockaddr, l: *mut u32) -> i32 {
    let r = get(s).and_then(|sh| accept(&mut locked(&sh)));
    if let Ok(fd) = r {
        if !a.is_null() {
            sv_rgetpeername(fd, a, l);
        }
    }
    ret_i32(r)
}

#[no_mangle]
pub extern "C" fn sv_rconnect(s: i32, a: *const libc::sockaddr, _l: u32) -> i32 {
    let r = (|| {
        let dst = read_sockaddr(a).map_err(|e| Errno(e.errno()))?;
        let sh = get(s)?;
        let mut sock = locked(&sh);
        connect(&mut sock, dst).map(|()| 0)
    })();
    ret_i32(r)
}

#[no_mangle]
pub extern "C" fn sv_rshutdown(s: i32, how: i32) -> i32 {
    ret_i32(get(s).and_then(|sh| shutdown(&mut locked(&sh), how).map(|()| 0)))
}

#[no_mangle]
pub extern "C" fn sv_rclose(s: i32) -> i32 {
    ret_i32(close(s))
}

fn name(s: i32, a: *mut libc::sockaddr, l: *mut u32, local: bool) -> i32 {
    let r = (|| {
        if a.is_null() || l.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        let sh = get(s)?;
        let sock = locked(&sh);
        let id = match &sock.role {
            Role::Connected(link) => link.id,
            Role::Listening { id, .. } if local => *id,
            Role::Fresh if local => std::ptr::null_mut(),
            _ => return Err(Errno(libc::ENOTCONN)),
        };
        let v = if id.is_null() {
            sock.bound.unwrap_or(V4::UNSPECIFIED)
        } else {
            id_addr(id, local).ok_or(Errno(libc::ENOTCONN))?
        };
        let sin = sockaddr_of(v);
        // SAFETY: l points to the caller's buffer length; a to at least that many bytes.
        unsafe {
            let n = (*l as usize).min(std::mem::size_of::<libc::sockaddr_in>());
            std::ptr::copy_nonoverlapping(
                &sin as *const libc::sockaddr_in as *const u8,
                a as *mut u8,
                n,
            );
            *l = std::mem::size_of::<libc::sockaddr_in>() as u32;
        }
        Ok(0)
    })();
    ret_i32(r)
}

#[no_mangle]
pub extern "C" fn sv_rgetpeername(s: i32, a: *mut libc::sockaddr, l: *mut u32) -> i32 {
    name(s, a, l, false)
}

#[no_mangle]
pub extern "C" fn sv_rgetsockname(s: i32, a: *mut libc::sockaddr, l: *mut u32) -> i32 {
    name(s, a, l, true)
}

/// The remembered option a (level, name) pair selects.
fn opt_slot(o: &mut Opts, level: i32, name: i32) -> Result<&mut i32, Errno> {
    Ok(match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => &mut o.reuseaddr,
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => &mut o.keepalive,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => &mut o.sndbuf,
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => &mut o.rcvbuf,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => &mut o.nodelay,
        (SOL_RDMA, RDMA_SQSIZE) => &mut o.sqsize,
        (SOL_RDMA, RDMA_RQSIZE) => &mut o.rqsize,
        (SOL_RDMA, RDMA_INLINE) => &mut o.inline,
        (SOL_RDMA, RDMA_IOMAPSIZE) => &mut o.iomapsize,
        _ => return Err(Errno(libc::ENOPROTOOPT)),
    })
}

#[no_mangle]
pub extern "C" fn sv_rsetsockopt(
    s: i32,
    level: i32,
    name: i32,
    val: *const libc::c_void,
    len: u32,
) -> i32 {
    let r = (|| {
        if val.is_null() || (len as usize) < std::mem::size_of::<i32>() {
            return Err(Errno(libc::EINVAL));
        }
        // SAFETY: the caller passes at least 4 readable bytes (checked above).
        let v = unsafe { std::ptr::read_unaligned(val as *const i32) };
        let sh = get(s)?;
        let mut sock = locked(&sh);
        *opt_slot(&mut sock.opts, level, name)? = v;
        Ok(0)
    })();
    ret_i32(r)
}

#[no_mangle]
pub extern "C" fn sv_rgetsockopt(
    s: i32,
    level: i32,
    name: i32,
    val: *mut libc::c_void,
    len: *mut u32,
) -> i32 {
    let r = (|| {
        // SAFETY: len is the caller's in/out length (checked non-null).
        if val.is_null() || len.is_null() || (unsafe { *len } as usize) < 4 {
            return Err(Errno(libc::EINVAL));
        }
        let sh = get(s)?;
        let mut sock = locked(&sh);
        let v = if (level, name) == (libc::SOL_SOCKET, libc::SO_ERROR) {
            let from_link = match &sock.role {
                Role::Connected(l) => l.err,
                _ => 0,
            };
            std::mem::take(&mut sock.so_error).max(from_link)
        } else {
            *opt_slot(&mut sock.opts, level, name)?
        };
        // SAFETY: val has at least 4 writable bytes; len is valid (checked above).
        unsafe {
            std::ptr::write_unaligned(val as *mut i32, v);
            *len = 4;
        }
        Ok(0)
    })();
    ret_i32(r)
}

#[no_mangle]
pub extern "C" fn sv_rfcntl(s: i32, cmd: i32, arg: usize) -> i32 {
    let r = (|| {
        let sh = get(s)?;
        let mut sock = locked(&sh);
        match cmd {
            libc::F_GETFL => Ok(libc::O_RDWR | if sock.nonblock { libc::O_NONBLOCK } else { 0 }),
            libc::F_SETFL => {
                sock.nonblock = arg as i32 & libc::O_NONBLOCK != 0;
                Ok(0)
            }
            _ => Err(Errno(libc::ENOTSUP)),
        }
    })();
    ret_i32(r)
}

/// The events of one pollfd that hold now.
fn revents(p: &libc::pollfd) -> i16 {
    let Ok(sh) = get(p.fd) else {
        let mut q = libc::pollfd {
            fd: p.fd,
            events: p.events,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        unsafe { libc::poll(&mut q, 1, 0) };
        return q.revents;
    };
    let mut sock = locked(&sh);
    let mut ev = 0i16;
    match &mut sock.role {
        Role::Connected(l) => {
            l.progress();
            if l.readable() {
                ev |= libc::POLLIN;
            }
            if l.writable() {
                ev |= libc::POLLOUT;
            }
            if l.err != 0 {
                ev |= libc::POLLERR | libc::POLLHUP;
            }
        }
        Role::Listening { chan, .. } => {
            if chan_ready(*chan) {
                ev |= libc::POLLIN;
            }
        }
        Role::Fresh => {}
    }
    ev & (p.events | libc::POLLERR | libc::POLLHUP)
}

#[no_mangle]
pub extern "C" fn sv_rpoll(fds: *mut libc::pollfd, n: u64, timeout: i32) -> i32 {
    if fds.is_null() && n > 0 {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: the application passes n pollfds at fds.
    let fds = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let mut ready = 0;
    wait_until(deadline, || {
        ready = 0;
        for p in fds.iter_mut() {
            p.revents = revents(p);
            ready += i32::from(p.revents != 0);
        }
        ready > 0
    });
    ready
}

#[no_mangle]
pub extern "C" fn sv_rselect(
    _n: i32,
    _r: *mut libc::fd_set,
    _w: *mut libc::fd_set,
    _e: *mut libc::fd_set,
    _t: *mut libc::timeval,
) -> i32 {
    set_errno(libc::EOPNOTSUPP);
    -1
}

#[no_mangle]
pub extern "C" fn sv_rrecv(s: i32, buf: *mut libc::c_void, len: usize, flags: i32) -> isize {
    recv_bytes(s, buf, len, flags)
}

#[no_mangle]
pub extern "C" fn sv_rrecvfrom(
    s: i32,
    buf: *mut libc::c_void,
    len: usize,
    flags: i32,
    _a: *mut libc::sockaddr,
    _l: *mut u32,
) -> isize {
    recv_bytes(s, buf, len, flags)
}

/// The iovecs of a msghdr/readv/writev call.
fn iovecs<'a>(iov: *const libc::iovec, n: usize) -> &'a [libc::iovec] {
    if iov.is_null() {
        return &[];
    }
    // SAFETY: the application passes n iovecs at iov.
    unsafe { std::slice::from_raw_parts(iov, n) }
}

/// Moves each iovec in turn, stopping at the first short transfer.
fn each_iov(v: &[libc::iovec], mut f: impl FnMut(&libc::iovec) -> isize) -> isize {
    let mut total = 0isize;
    for iov in v {
        let n = f(iov);
        if n < 0 {
            return if total > 0 { total } else { n };
        }
        total += n;
        if (n as usize) < iov.iov_len {
            break;
        }
    }
    total
}

#[no_mangle]
pub extern "C" fn sv_rrecvmsg(s: i32, msg: *mut libc::msghdr, flags: i32) -> isize {
    // SAFETY: msg is the application's msghdr (null checked).
    let Some(m) = (unsafe { msg.as_ref() }) else {
        set_errno(libc::EFAULT);
        return -1;
    };
    each_iov(iovecs(m.msg_iov, m.msg_iovlen), |i| {
        recv_bytes(s, i.iov_base, i.iov_len, flags)
    })
}

#[no_mangle]
pub extern "C" fn sv_rsend(s: i32, buf: *const libc::c_void, len: usize, flags: i32) -> isize {
    send_bytes(s, buf, len, flags)
}

#[no_mangle]
pub extern "C" fn sv_rsendto(
    s: i32,
    buf: *const libc::c_void,
    len: usize,
    flags: i32,
    _a: *const libc::sockaddr,
    _l: u32,
) -> isize {
    send_bytes(s, buf, len, flags)
}

#[no_mangle]
pub extern "C" fn sv_rsendmsg(s: i32, msg: *const libc::msghdr, flags: i32) -> isize {
    // SAFETY: msg is the application's msghdr (null checked).
    let Some(m) = (unsafe { msg.as_ref() }) else {
        set_errno(libc::EFAULT);
        return -1;
    };
    each_iov(iovecs(m.msg_iov, m.msg_iovlen), |i| {
        send_bytes(s, i.iov_base, i.iov_len, flags)
    })
}

#[no_mangle]
pub extern "C" fn sv_rread(s: i32, buf: *mut libc::c_void, len: usize) -> isize {
    recv_bytes(s, buf, len, 0)
}

#[no_mangle]
pub extern "C" fn sv_rreadv(s: i32, iov: *const libc::iovec, n: i32) -> isize {
    each_iov(iovecs(iov, n.max(0) as usize), |i| {
        recv_bytes(s, i.iov_base, i.iov_len, 0)
    })
}

#[no_mangle]
pub extern "C" fn sv_rwrite(s: i32, buf: *const libc::c_void, len: usize) -> isize {
    send_bytes(s, buf, len, 0)
}

#[no_mangle]
pub extern "C" fn sv_rwritev(s: i32, iov: *const libc::iovec, n: i32) -> isize {
    each_iov(iovecs(iov, n.max(0) as usize), |i| {
        send_bytes(s, i.iov_base, i.iov_len, 0)
    })
}

#[no_mangle]
pub extern "C" fn sv_riowrite(
    s: i32,
    buf: *const libc::c_void,
    len: usize,
    off: i64,
    flags: i32,
) -> isize {
    if len == 0 {
        return 0;
    }
    // SAFETY: the application passes len readable bytes at buf.
    let data = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
    let step = |l: &mut Link, done: usize| l.iowrite(&data[done..], off + done as i64);
    ret_isize(transfer(s, flags, len, step, false))
}

#[no_mangle]
pub extern "C" fn sv_riomap(
    s: i32,
    buf: *mut libc::c_void,
    len: usize,
    prot: i32,
    _flags: i32,
    off: i64,
) -> i64 {
    let r = (|| {
        if buf.is_null() || len == 0 || prot & libc::PROT_WRITE == 0 {
            return Err(Errno(libc::EINVAL));
        }
        let sh = get(s)?;
        let mut sock = locked(&sh);
        let max = sock.opts.iomapsize.max(0) as usize;
        let Role::Connected(l) = &mut sock.role else {
            return Err(Errno(libc::ENOTCONN));
        };
        l.iomap(buf as usize, len, off, max)
    })();
    match r {
        Ok(o) => o,
        Err(Errno(e)) => {
            set_errno(e);
            -1
        }
    }
}

#[no_mangle]
pub extern "C" fn sv_riounmap(s: i32, buf: *mut libc::c_void, len: usize) -> i32 {
    let r = (|| {
        let sh = get(s)?;
        let mut sock = locked(&sh);
        let Role::Connected(l) = &mut sock.role else {
            return Err(Errno(libc::ENOTCONN));
        };
        l.iounmap(buf as usize, len).map(|()| 0)
    })();
    ret_i32(r)
}
