//! Device queries, host-to-device copies and module unloading of the TEST DOUBLE: one device
//! named "SigmaTrace cuda-double (TEST DOUBLE, no GPU)", compute capability 9.0, 1 GiB, able
//! to map host memory with unified addressing (device address = host address).

use std::ffi::{c_char, c_int, c_void};

use crate::{count, put, CUresult, INVALID_VALUE, SUCCESS};

/// The double's device name.
pub const NAME: &str = "SigmaTrace cuda-double (TEST DOUBLE, no GPU)";

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> CUresult {
    count("cuDeviceGetName");
    if name.is_null() || len <= 0 || dev != 0 {
        return INVALID_VALUE;
    }
    let n = NAME.len().min(len as usize - 1);
    // SAFETY: the caller's buffer holds `len` bytes; n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(NAME.as_ptr(), name as *mut u8, n);
        *name.add(n) = 0;
    }
    SUCCESS
}

/// `CUdevice_attribute` values the double answers; others are 0.
fn attribute(a: c_int) -> c_int {
    match a {
        1 => 1024, // MAX_THREADS_PER_BLOCK
        16 => 1,   // MULTIPROCESSOR_COUNT
        19 => 1,   // CAN_MAP_HOST_MEMORY
        41 => 1,   // UNIFIED_ADDRESSING
        75 => 9,   // COMPUTE_CAPABILITY_MAJOR
        76 => 0,   // COMPUTE_CAPABILITY_MINOR
        _ => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(v: *mut c_int, attr: c_int, dev: c_int) -> CUresult {
    count("cuDeviceGetAttribute");
    if dev != 0 {
        return INVALID_VALUE;
    }
    // SAFETY: `v` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(v, || attribute(attr)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> CUresult {
    count("cuDeviceTotalMem_v2");
    if dev != 0 {
        return INVALID_VALUE;
    }
    // SAFETY: `bytes` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(bytes, || 1 << 30) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> CUresult {
    count("cuMemcpyHtoD_v2");
    if dst == 0 || src.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: "device" memory is host memory here; the caller guarantees both ranges.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
    SUCCESS
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(_module: u64) -> CUresult {
    count("cuModuleUnload");
    SUCCESS
}
