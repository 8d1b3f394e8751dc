//! softnic's `libefa.so.1`: perftest links libefa, so it must load; softnic is not an EFA
//! device, so every entry point fails with EOPNOTSUPP (as libefa does on a non-EFA device).

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_int, c_void};

std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/efa.s")));

fn unsupported_ptr() -> *mut c_void {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn sv_efadv_create_driver_qp(
    _pd: *mut c_void,
    _attr: *mut c_void,
    _driver_qp_type: u32,
) -> *mut c_void {
    unsupported_ptr()
}
#[no_mangle]
pub extern "C" fn sv_efadv_create_qp_ex(
    _ctx: *mut c_void,
    _attr: *mut c_void,
    _efa_attr: *mut c_void,
    _inlen: u32,
) -> *mut c_void {
    unsupported_ptr()
}
#[no_mangle]
pub extern "C" fn sv_efadv_query_device(
    _ctx: *mut c_void,
    _attr: *mut c_void,
    _inlen: u32,
) -> c_int {
    libc::EOPNOTSUPP
}
#[no_mangle]
pub extern "C" fn sv_efadv_query_ah(_ah: *mut c_void, _attr: *mut c_void, _inlen: u32) -> c_int {
    libc::EOPNOTSUPP
}
#[no_mangle]
pub extern "C" fn sv_efadv_create_cq(
    _ctx: *mut c_void,
    _attr: *mut c_void,
    _efa_attr: *mut c_void,
    _inlen: u32,
) -> *mut c_void {
    unsupported_ptr()
}
#[no_mangle]
pub extern "C" fn sv_efadv_cq_from_ibv_cq_ex(_cq: *mut c_void) -> *mut c_void {
    unsupported_ptr()
}
