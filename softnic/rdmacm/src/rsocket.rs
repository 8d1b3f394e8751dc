//! rsockets (rsocket.h): not provided by softnic; every call fails with EOPNOTSUPP.

use crate::state::set_errno;

fn unsupported() -> i32 {
    set_errno(libc::EOPNOTSUPP);
    -1
}

#[no_mangle]
pub extern "C" fn sv_rsocket(_domain: i32, _type: i32, _protocol: i32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rbind(_s: i32, _a: *const libc::sockaddr, _l: u32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rlisten(_s: i32, _backlog: i32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_raccept(_s: i32, _a: *mut libc::sockaddr, _l: *mut u32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rconnect(_s: i32, _a: *const libc::sockaddr, _l: u32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rshutdown(_s: i32, _how: i32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rclose(_s: i32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rgetpeername(_s: i32, _a: *mut libc::sockaddr, _l: *mut u32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rgetsockname(_s: i32, _a: *mut libc::sockaddr, _l: *mut u32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rsetsockopt(
    _s: i32,
    _level: i32,
    _name: i32,
    _val: *const libc::c_void,
    _len: u32,
) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rgetsockopt(
    _s: i32,
    _level: i32,
    _name: i32,
    _val: *mut libc::c_void,
    _len: *mut u32,
) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rfcntl(_s: i32, _cmd: i32, _arg: usize) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rpoll(_fds: *mut libc::pollfd, _n: u64, _timeout: i32) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rselect(
    _n: i32,
    _r: *mut libc::fd_set,
    _w: *mut libc::fd_set,
    _e: *mut libc::fd_set,
    _t: *mut libc::timeval,
) -> i32 {
    unsupported()
}

#[no_mangle]
pub extern "C" fn sv_rrecv(_s: i32, _buf: *mut libc::c_void, _len: usize, _flags: i32) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_rrecvfrom(
    _s: i32,
    _buf: *mut libc::c_void,
    _len: usize,
    _flags: i32,
    _a: *mut libc::sockaddr,
    _l: *mut u32,
) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_rrecvmsg(_s: i32, _msg: *mut libc::msghdr, _flags: i32) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_rsend(_s: i32, _buf: *const libc::c_void, _len: usize, _flags: i32) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_rsendto(
    _s: i32,
    _buf: *const libc::c_void,
    _len: usize,
    _flags: i32,
    _a: *const libc::sockaddr,
    _l: u32,
) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_rsendmsg(_s: i32, _msg: *const libc::msghdr, _flags: i32) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_rread(_s: i32, _buf: *mut libc::c_void, _len: usize) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_rreadv(_s: i32, _iov: *const libc::iovec, _n: i32) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_rwrite(_s: i32, _buf: *const libc::c_void, _len: usize) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_rwritev(_s: i32, _iov: *const libc::iovec, _n: i32) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_riowrite(
    _s: i32,
    _buf: *const libc::c_void,
    _len: usize,
    _off: i64,
    _flags: i32,
) -> isize {
    unsupported() as isize
}

#[no_mangle]
pub extern "C" fn sv_riomap(
    _s: i32,
    _buf: *mut libc::c_void,
    _len: usize,
    _prot: i32,
    _flags: i32,
    _off: i64,
) -> i64 {
    unsupported() as i64
}

#[no_mangle]
pub extern "C" fn sv_riounmap(_s: i32, _buf: *mut libc::c_void, _len: usize) -> i32 {
    unsupported()
}
