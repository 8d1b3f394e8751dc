//! `cuGetProcAddress[_v2]`: the CUDA runtime fetches every driver entry point through it,
//! so its answer for a name of the hook table is replaced by our export (or by one of the
//! entry's alternative wrappers when the driver hands out another implementation), exactly as
//! `dlsym` lookups are redirected. Asked for itself, it returns its own wrapper.
//!
//! libcuda is never loaded by the interposer: every real function is resolved from the
//! already loaded library (`RTLD_NEXT`, then `RTLD_NOLOAD`). Lookups made by the interposer's
//! own driver work (`runtime::internal`) get the driver's real addresses.

use std::ffi::{c_char, c_int, c_void, CStr};

use super::entry::Lib;
use super::table;
use crate::runtime::internal::is_internal;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// Whether table name `entry` is a variant of the base name `base` the runtime asks for.
pub fn is_variant(entry: &[u8], base: &[u8]) -> bool {
    if entry == base {
        return true;
    }
    let Some(rest) = entry.strip_prefix(base).and_then(|r| r.strip_prefix(b"_")) else {
        return false;
    };
    matches!(
        rest,
        b"v2" | b"v3" | b"ptsz" | b"ptds" | b"v2_ptsz" | b"v2_ptds"
    )
}

/// The exported name of the implementation the driver hands out for `base` at CUDA version
/// `ver` with `flags` (the versioned `_v2` ABIs, the per-thread-default-stream variants).
pub fn variant_name(base: &str, ver: i32, flags: u64) -> String {
    let ptsz = flags & PER_THREAD_DEFAULT_STREAM != 0;
    match base {
        "cuGetProcAddress" if ver >= 12000 => "cuGetProcAddress_v2".into(),
        "cuMemAlloc" | "cuMemFree" | "cuMemHostGetDevicePointer" if ver >= 3020 => {
            format!("{base}_v2")
        }
        "cuMemHostRegister" if ver >= 6050 => format!("{base}_v2"),
        "cuLaunchKernel" | "cuLaunchKernelEx" | "cuLaunchCooperativeKernel" | "cuGraphLaunch"
            if ptsz =>
        {
            format!("{base}_ptsz")
        }
        _ => base.into(),
    }
}

/// The address to hand the program instead of `p`, the driver's answer for `name`: our shim
/// when `p` is the real function of a table entry of that name, else an alternative wrapper of
/// the variant the driver gives for (`ver`, `flags`); `None` to leave `p` alone (not hooked,
/// or no wrapper free).
pub fn wrapper_for(name: &[u8], ver: i32, flags: u64, p: usize) -> Option<usize> {
    let base = std::str::from_utf8(name).ok()?;
    let exact =
        table::find(variant_name(base, ver, flags).as_bytes(), None).filter(|e| e.lib == Lib::Cuda);
    if let Some(e) = exact {
        if e.is_wrapper(p) || e.real::<usize>() == Some(p) {
            return Some(if e.is_wrapper(p) { p } else { e.shim() });
        }
    }
    for e in table::ENTRIES
        .iter()
        .filter(|e| e.lib == Lib::Cuda && is_variant(e.name().to_bytes(), name))
    {
        if e.is_wrapper(p) {
            return Some(p);
        }
        if e.real::<usize>() == Some(p) {
            return Some(e.shim());
        }
    }
    exact?.wrap(p)
}

/// # Safety
/// `symbol` NUL-terminated or null, `pfn` the program's out pointer.
unsafe fn wrap_proc(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    ver: c_int,
    flags: u64,
    ret: c_int,
) {
    if ret != 0 || symbol.is_null() || pfn.is_null() || is_internal() {
        return;
    }
    // SAFETY: out pointer written by the successful real call; name from the program.
    let (p, name) = unsafe { (*pfn as usize, CStr::from_ptr(symbol)) };
    if let Some(w) = wrapper_for(name.to_bytes(), ver, flags, p) {
        // SAFETY: the program's out pointer; `w` has the prototype of the driver's answer.
        unsafe { *pfn = w as *mut c_void };
    }
}

/// `cuGetProcAddress` (CUDA 11.3–12.x signature).
///
/// # Safety
/// As [`wrap_proc`].
pub unsafe fn cu_get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    ver: c_int,
    flags: u64,
    ret: c_int,
) {
    // SAFETY: per caller.
    unsafe { wrap_proc(symbol, pfn, ver, flags, ret) }
}

/// `cuGetProcAddress_v2` (adds the symbol-status out parameter).
///
/// # Safety
/// As [`wrap_proc`].
pub unsafe fn cu_get_proc_address_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    ver: c_int,
    flags: u64,
    _status: *mut c_int,
    ret: c_int,
) {
    // SAFETY: per caller.
    unsafe { wrap_proc(symbol, pfn, ver, flags, ret) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_follow_the_drivers_versioning() {
        assert_eq!(variant_name("cuMemAlloc", 12000, 0), "cuMemAlloc_v2");
        assert_eq!(variant_name("cuMemAlloc", 3000, 0), "cuMemAlloc");
        assert_eq!(
            variant_name("cuMemHostRegister", 11000, 0),
            "cuMemHostRegister_v2"
        );
        assert_eq!(
            variant_name("cuGetProcAddress", 12000, 0),
            "cuGetProcAddress_v2"
        );
        assert_eq!(
            variant_name("cuGetProcAddress", 11030, 0),
            "cuGetProcAddress"
        );
        assert_eq!(
            variant_name("cuLaunchKernel", 12000, PER_THREAD_DEFAULT_STREAM),
            "cuLaunchKernel_ptsz"
        );
        assert_eq!(variant_name("cuLaunchKernel", 12000, 0), "cuLaunchKernel");
        assert_eq!(
            variant_name("cuGraphLaunch", 12000, PER_THREAD_DEFAULT_STREAM),
            "cuGraphLaunch_ptsz"
        );
        assert_eq!(variant_name("cuGraphLaunch", 12000, 0), "cuGraphLaunch");
        assert_eq!(
            variant_name("cuModuleGetFunction", 12000, 2),
            "cuModuleGetFunction"
        );
        assert!(is_variant(b"cuLaunchKernel_ptsz", b"cuLaunchKernel"));
        assert!(!is_variant(b"cuLaunchKernelEx", b"cuLaunchKernel"));
        assert!(!is_variant(b"cuLaunchKernelEx_ptsz", b"cuLaunchKernel"));
        assert!(is_variant(b"cuMemAlloc_v2", b"cuMemAlloc"));
    }

    #[test]
    fn unknown_names_are_never_wrapped() {
        assert_eq!(wrapper_for(b"cuGetExportTable", 12000, 0, 0x1234), None);
        assert_eq!(wrapper_for(b"cuCtxCreate", 12000, 0, 0x1234), None);
    }
}
