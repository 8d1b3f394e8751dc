//! rdma_getaddrinfo, devices, options, and the calls softnic does not support (multicast,
//! ECE), which fail as librdmacm documents: -1 with errno.

use crate::addr::V4;
use crate::ffi::*;
use crate::id::{einval, ret, write_sin};
use crate::state::{lock, set_errno, CmError, CmResult};
use std::ffi::CStr;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::ptr;

/// `v` in memory of its own from `malloc`, as librdmacm allocates each part of an
/// `rdma_addrinfo` (programs may free or replace one part; `rdma_freeaddrinfo` frees each).
fn malloced<T: Copy>(v: T) -> CmResult<*mut T> {
    // SAFETY: malloc of the size of T; checked for null before the write.
    let p = unsafe { libc::malloc(std::mem::size_of::<T>()) }.cast::<T>();
    if p.is_null() {
        return Err(CmError::Errno(libc::ENOMEM));
    }
    // SAFETY: p is a fresh allocation of T's size (malloc aligns for every basic type).
    unsafe { p.write(v) };
    Ok(p)
}

fn cstr<'a>(p: *const libc::c_char) -> Option<&'a str> {
    // SAFETY: a non-null pointer from the application is a NUL-terminated string.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_str().unwrap_or(""))
}

fn lookup(node: &str) -> CmResult<Ipv4Addr> {
    if let Ok(ip) = node.parse::<Ipv4Addr>() {
        return Ok(ip);
    }
    (node, 0)
        .to_socket_addrs()
        .map_err(|_| CmError::Errno(libc::ENOENT))?
        .find_map(|a| match a {
            SocketAddr::V4(v) => Some(*v.ip()),
            SocketAddr::V6(_) => None,
        })
        .ok_or(CmError::Errno(libc::EAFNOSUPPORT))
}

fn getaddrinfo(
    node: Option<&str>,
    service: Option<&str>,
    hints: Option<&rdma_addrinfo>,
) -> CmResult<*mut rdma_addrinfo> {
    let port = match service {
        Some(s) => s.parse::<u16>().map_err(|_| CmError::Errno(libc::EINVAL))?,
        None => 0,
    };
    let flags = hints.map_or(0, |h| h.ai_flags);
    let passive = flags & RAI_PASSIVE as i32 != 0;
    if let Some(h) = hints {
        if h.ai_family != 0 && h.ai_family != libc::AF_INET {
            return Err(CmError::Errno(libc::EAFNOSUPPORT));
        }
    }
    let ps = match hints.map_or(0, |h| h.ai_port_space) {
        0 => RDMA_PS_TCP as i32,
        p => p,
    };
    let qp_type = match hints.map_or(0, |h| h.ai_qp_type) {
        0 if ps == RDMA_PS_UDP as i32 => IBV_QPT_UD as i32,
        0 => IBV_QPT_RC as i32,
        t => t,
    };
    // Addresses the caller passes in the hints (libfabric's verbs provider gives its peer's
    // this way, with no node): used where node and service give none, as librdmacm does.
    let hinted = |addr: *mut sockaddr, len: u32| -> Option<sockaddr_in> {
        if addr.is_null() || (len as usize) < std::mem::size_of::<sockaddr_in>() {
            return None;
        }
        // SAFETY: the caller's hint points to `len` bytes of a socket address, at least a
        // sockaddr_in (checked); its family says whether it is one.
        let sin = unsafe { addr.cast::<sockaddr_in>().read_unaligned() };
        (sin.sin_family as i32 == libc::AF_INET).then_some(sin)
    };
    let hint_src = hints.and_then(|h| hinted(h.ai_src_addr, h.ai_src_len));
    let hint_dst = hints.and_then(|h| hinted(h.ai_dst_addr, h.ai_dst_len));
    let ip = match node {
        Some(n) => Some(lookup(n)?),
        None if passive => Some(Ipv4Addr::UNSPECIFIED),
        None if hint_src.is_some() || hint_dst.is_some() => None,
        None => return einval(),
    };
    let mut ai = rdma_addrinfo {
        ai_flags: flags,
        ai_family: libc::AF_INET,
        ai_qp_type: qp_type,
        ai_port_space: ps,
        ..Default::default()
    };
    let len = std::mem::size_of::<sockaddr_in>() as u32;
    let (mut src, mut dst) = (hint_src, hint_dst);
    if let Some(ip) = ip {
        let mut sin = sockaddr_in::default();
        write_sin(&mut sin, V4 { ip, port });
        if passive {
            src = Some(sin);
        } else {
            dst = Some(sin);
        }
    }
    if let Some(sin) = src {
        ai.ai_src_len = len;
        ai.ai_src_addr = malloced(sin)?.cast();
    }
    if let Some(sin) = dst {
        let p = malloced(sin).inspect_err(|_| free_parts(&ai))?;
        ai.ai_dst_len = len;
        ai.ai_dst_addr = p.cast();
    }
    malloced(ai).inspect_err(|_| free_parts(&ai))
}

/// Frees what an `rdma_addrinfo` points to (each part its own allocation, as librdmacm's).
fn free_parts(ai: &rdma_addrinfo) {
    let parts: [*mut libc::c_void; 6] = [
        ai.ai_src_addr.cast(),
        ai.ai_dst_addr.cast(),
        ai.ai_src_canonname.cast(),
        ai.ai_dst_canonname.cast(),
        ai.ai_route.cast(),
        ai.ai_connect.cast(),
    ];
    for p in parts {
        // SAFETY: each part is null or its own malloc'ed block (ours, or one the program put
        // there as librdmacm's allocation model allows); free(NULL) does nothing.
        unsafe { libc::free(p) };
    }
}

#[no_mangle]
pub extern "C" fn sv_rdma_getaddrinfo(
    node: *const libc::c_char,
    service: *const libc::c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> i32 {
    if res.is_null() {
        return ret(einval());
    }
    // SAFETY: a non-null hints points to the application's struct.
    let hints = unsafe { hints.as_ref() };
    match getaddrinfo(cstr(node), cstr(service), hints) {
        Ok(ai) => {
            // SAFETY: res is the caller's non-null out pointer.
            unsafe { *res = ai };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

#[no_mangle]
pub extern "C" fn sv_rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut at = res;
    while !at.is_null() {
        // SAFETY: a list of rdma_addrinfo from `sv_rdma_getaddrinfo`, each struct and each of
        // its parts malloc'ed; the next pointer is read before the struct is freed.
        unsafe {
            let next = (*at).ai_next;
            free_parts(&*at);
            libc::free(at.cast());
            at = next;
        }
    }
}

#[no_mangle]
pub extern "C" fn sv_rdma_get_devices(num: *mut i32) -> *mut *mut ibv_context {
    let ctx = match lock().dev() {
        Ok(d) => d.ctx,
        Err(e) => {
            set_errno(e.errno());
            return ptr::null_mut();
        }
    };
    // SAFETY: calloc of two pointers; freed by rdma_free_devices with free().
    let list = unsafe { libc::calloc(2, std::mem::size_of::<*mut ibv_context>()) }
        as *mut *mut ibv_context;
    if list.is_null() {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    }
    // SAFETY: list has room for two pointers (the second stays NULL).
    unsafe { *list = ctx };
    if !num.is_null() {
        // SAFETY: num is the caller's out pointer.
        unsafe { *num = 1 };
    }
    list
}

#[no_mangle]
pub extern "C" fn sv_rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: list came from rdma_get_devices (calloc).
    unsafe { libc::free(list.cast()) };
}

#[no_mangle]
pub extern "C" fn sv_rdma_set_option(
    id: *mut rdma_cm_id,
    level: i32,
    optname: i32,
    optval: *mut libc::c_void,
    optlen: usize,
) -> i32 {
    let r = (|| {
        let mut cm = lock();
        let st = cm.id(id as usize)?;
        if optval.is_null() {
            return einval();
        }
        match (level as u32, optname as u32) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS | RDMA_OPTION_ID_ACK_TIMEOUT) if optlen == 1 => {
                Ok(())
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) if optlen == std::mem::size_of::<i32>() => {
                Ok(())
            }
            // As the kernel: only before the id is bound.
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) if optlen == std::mem::size_of::<i32>() => {
                if st.bound {
                    return einval();
                }
                // SAFETY: optval points to optlen (= 4) readable bytes, an int.
                st.afonly = unsafe { optval.cast::<i32>().read_unaligned() } != 0;
                Ok(())
            }
            (RDMA_OPTION_ID | RDMA_OPTION_IB, _) => einval(),
            _ => Err(CmError::Errno(libc::ENOSYS)),
        }
    })();
    ret(r)
}

fn unsupported() -> i32 {
    set_errno(libc::EOPNOTSUPP);
    -1
}

/// Multicast: softnic has no multicast groups.
#[no_mangle]
pub extern "C" fn sv_rdma_join_multicast(
    _id: *mut rdma_cm_id,
    _addr: *mut libc::sockaddr,
    _context: *mut libc::c_void,
) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rdma_join_multicast_ex(
    _id: *mut rdma_cm_id,
    _attr: *mut libc::c_void,
    _context: *mut libc::c_void,
) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rdma_leave_multicast(_id: *mut rdma_cm_id, _addr: *mut libc::sockaddr) -> i32 {
    unsupported()
}

/// Enhanced Connection Establishment: not negotiated by softnic's CM.
#[no_mangle]
pub extern "C" fn sv_rdma_set_local_ece(_id: *mut rdma_cm_id, _ece: *mut libc::c_void) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rdma_get_remote_ece(_id: *mut rdma_cm_id, _ece: *mut libc::c_void) -> i32 {
    unsupported()
}
