//! Entry points softnic does not implement, returning what the real function's contract says
//! "not supported" looks like, and the provider-interface (IBVERBS_PRIVATE_34) entry points.
//!
//! The generic targets take no arguments: a trampoline jumps to them with the caller's
//! arguments still in registers, which they ignore (x86_64 SysV: the caller owns them).
//! `exports/*.txt` names which one each unimplemented export uses.

use crate::ffi::*;
use crate::verbs::ctx::set_errno;
use std::ffi::{c_int, c_uint, c_void};

/// Pointer-returning functions: NULL with errno EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn sv_unsupported_null() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// Functions returning 0 or an errno value: EOPNOTSUPP (errno set too).
#[no_mangle]
pub extern "C" fn sv_unsupported_errno() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// Functions returning a count or a negative errno value: -EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn sv_unsupported_neg_errno() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    -libc::EOPNOTSUPP
}

/// Functions returning a descriptor/size or -1 with errno: -1, errno EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn sv_unsupported_minus1() -> isize {
    set_errno(libc::EOPNOTSUPP);
    -1
}

/// Void functions (releasing objects softnic never hands out, provider hooks): nothing to do.
#[no_mangle]
pub extern "C" fn sv_unsupported_void() {}

/// `verbs_init_cq`: initialises the generic fields of a provider-allocated CQ.
#[no_mangle]
pub unsafe extern "C" fn sv_verbs_init_cq(
    cq: *mut ibv_cq,
    context: *mut ibv_context,
    channel: *mut ibv_comp_channel,
    cq_context: *mut c_void,
) {
    let c = &mut *cq;
    c.context = context;
    c.channel = channel;
    if !channel.is_null() {
        let m = &mut (*context).mutex as *mut pthread_mutex_t as *mut libc::pthread_mutex_t;
        libc::pthread_mutex_lock(m);
        (*channel).refcnt += 1;
        libc::pthread_mutex_unlock(m);
    }
    c.cq_context = cq_context;
    c.comp_events_completed = 0;
    c.async_events_completed = 0;
    libc::pthread_mutex_init(
        &mut c.mutex as *mut pthread_mutex_t as *mut libc::pthread_mutex_t,
        std::ptr::null(),
    );
    libc::pthread_cond_init(
        &mut c.cond as *mut pthread_cond_t as *mut libc::pthread_cond_t,
        std::ptr::null(),
    );
}

/// `verbs_open_device`: opens the device (softnic needs no provider private data).
#[no_mangle]
pub unsafe extern "C" fn sv_verbs_open_device(
    device: *mut ibv_device,
    _private_data: *mut c_void,
) -> *mut ibv_context {
    crate::verbs::ctx::sv_ibv_open_device(device)
}

/// `__ioctl_final_num_attrs`: the attribute count of a command buffer chain. softnic builds no
/// chains (execute_ioctl is not supported), so the count is the buffer's own.
#[no_mangle]
pub extern "C" fn sv_ioctl_final_num_attrs(num_attrs: c_uint, _link: *mut c_void) -> c_uint {
    num_attrs
}
