//! The public C API of libsigmatrace.so (for tools, tests and benchmarks):
//!
//! ```c
//! int sigmatrace_active(void);                         // 1 while tracing, else 0
//! int sigmatrace_instrument_context(struct ibv_context *ctx);  // 0 ok, -1 not traced
//! long sigmatrace_log_path(char *buf, size_t len);     // length, or -1 (no log yet)
//! int sigmatrace_poller_sync(void);                    // 0 ok (or no poller), -1 paused/timeout
//! int sigmatrace_poller_pause(int paused);             // 0 ok, -1 no poller
//! ```
//!
//! `sigmatrace_poller_sync` returns once the host poller has completed a full pass that
//! started after the call (everything written to watched rings before the call has been
//! observed; at most 10 s). `sigmatrace_poller_pause(1)` stops polling until
//! `sigmatrace_poller_pause(0)` (a pass in progress completes; registrations and final polls
//! still happen). Both are for tests and tools that need a deterministic poller (the traced
//! program looks them up with `dlsym(RTLD_DEFAULT, …)`; untraced, they do not exist).
//!
//! `sigmatrace_instrument_context` swaps the data-path pointers of a context the interposer
//! did not see being opened (a context made by the program itself, like the benchmark's
//! no-op device); contexts from `ibv_open_device` never need it.

use std::ffi::{c_char, c_int, c_long, c_void};

use crate::runtime::{guard, init, queues};
use crate::sink;
use crate::sink::cat;
use crate::swap::{ctx, objects};

/// 1 while tracing is active.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sigmatrace_active() -> c_int {
    init::ensure();
    sink::tracing(cat::ALL) as c_int
}

/// Instruments `ctx` (idempotent) and records its `DeviceOpen`.
///
/// # Safety
/// `ctx` must be a live `struct ibv_context` (a `verbs_context` if `abi_compat` says so).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sigmatrace_instrument_context(ctx: *mut c_void) -> c_int {
    init::ensure();
    if ctx.is_null() || !sink::tracing(cat::ALL) {
        return -1;
    }
    // SAFETY: per contract.
    let r = guard::run("sigmatrace_instrument_context", || unsafe {
        objects::adopt_context(ctx.cast())
    });
    match r {
        Some(ctx::Instrumented::Now | ctx::Instrumented::Already) => 0,
        _ => -1,
    }
}

/// Waits until the host poller has seen everything written before the call.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sigmatrace_poller_sync() -> c_int {
    init::ensure();
    let ok = guard::run("sigmatrace_poller_sync", || {
        queues::sync(std::time::Duration::from_secs(10))
    });
    if ok == Some(true) {
        0
    } else {
        -1
    }
}

/// Pauses (`paused` ≠ 0) or resumes the host poller.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sigmatrace_poller_pause(paused: c_int) -> c_int {
    init::ensure();
    match guard::run("sigmatrace_poller_pause", || queues::pause(paused != 0)) {
        Some(true) => 0,
        _ => -1,
    }
}

/// Copies this process's log path (NUL-terminated) into `buf`.
///
/// # Safety
/// `buf` must be writable for `len` bytes.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sigmatrace_log_path(buf: *mut c_char, len: usize) -> c_long {
    let Some(path) = sink::log_path() else {
        return -1;
    };
    let bytes = path.as_os_str().as_encoded_bytes();
    if buf.is_null() || len <= bytes.len() {
        return -1;
    }
    // SAFETY: buf holds len > bytes.len() bytes (checked).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast(), bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    bytes.len() as c_long
}
