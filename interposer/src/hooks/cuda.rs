//! Handlers of the CUDA driver entry points in the hook table, however the program got them:
//! by symbol, through `dlsym`, or — the CUDA runtime's way — through `cuGetProcAddress[_v2]`,
//! whose results are replaced by our wrappers ([`wrapper_for`]). Memory calls become
//! `GpuMemory` records and feed the memory map that says where each discovered ring lives;
//! kernel launches go to [`super::kernels`].
//!
//! libcuda is never loaded by the interposer: every real function is resolved from the
//! already loaded library (`RTLD_NEXT`, then `RTLD_NOLOAD`). The interposer's own driver calls
//! (device poller, kernel timing) run with [`internal`] set, so they are neither recorded nor
//! wrapped.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use sigmatrace_observe::discover::CudaMemEvent;
use sigmatrace_schemas::launch_api;

use crate::hooks::{table, Lib};
use crate::record::emit;
use crate::runtime::internal::is_internal;
use crate::runtime::{kernels, queues};
use crate::sink;
use crate::sink::cat;

fn traced() -> bool {
    sink::tracing(cat::GPU) && !is_internal()
}

// --- cuGetProcAddress ------------------------------------------------------------------------

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
        "cuLaunchKernel" | "cuLaunchKernelEx" | "cuLaunchCooperativeKernel" if ptsz => {
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

// --- memory ------------------------------------------------------------------------------------

fn memory(e: CudaMemEvent, ret: c_int) {
    if ret == 0 {
        queues::cuda_mem(&e);
    }
    if traced() {
        emit(e.to_record(sink::now(), ret));
    }
}

/// `cuMemAlloc_v2`.
///
/// # Safety
/// `dptr` the program's out pointer.
pub unsafe fn cu_mem_alloc(dptr: *mut u64, size: usize, ret: c_int) {
    if is_internal() {
        return;
    }
    // SAFETY: written by the successful call.
    let ptr = if ret == 0 && !dptr.is_null() {
        unsafe { *dptr }
    } else {
        0
    };
    memory(
        CudaMemEvent::DeviceAlloc {
            ptr,
            size: size as u64,
        },
        ret,
    );
}

/// Before `cuMemFree_v2`: stop watching queues in that allocation.
pub fn cu_mem_free_pre(dptr: u64) {
    if is_internal() {
        return;
    }
    let mut inner = queues::lock();
    let size = inner.disc.memory().find(dptr).map(|r| r.size);
    if let Some(size) = size {
        queues::gone_range(&mut inner, dptr, size);
    }
}

/// `cuMemFree_v2`.
pub fn cu_mem_free(_: (), dptr: u64, ret: c_int) {
    if !is_internal() {
        memory(CudaMemEvent::DeviceFree { ptr: dptr }, ret);
    }
}

/// `cuMemHostAlloc`.
///
/// # Safety
/// `pp` the program's out pointer.
pub unsafe fn cu_mem_host_alloc(pp: *mut *mut c_void, size: usize, flags: c_uint, ret: c_int) {
    if is_internal() {
        return;
    }
    // SAFETY: written by the successful call.
    let ptr = if ret == 0 && !pp.is_null() {
        unsafe { *pp as u64 }
    } else {
        0
    };
    memory(
        CudaMemEvent::HostAlloc {
            ptr,
            size: size as u64,
            flags,
        },
        ret,
    );
}

/// Before `cuMemFreeHost`: stop watching queues in that allocation.
pub fn cu_mem_free_host_pre(p: *mut c_void) {
    cu_mem_free_pre(p as u64);
}

/// `cuMemFreeHost`: the range leaves the memory map (no record kind for a pinned free).
pub fn cu_mem_free_host(_: (), p: *mut c_void, ret: c_int) {
    if ret == 0 && !is_internal() {
        queues::cuda_mem(&CudaMemEvent::DeviceFree { ptr: p as u64 });
    }
}

/// `cuMemHostRegister_v2` (`IOMEMORY` marks a doorbell page).
pub fn cu_mem_host_register(p: *mut c_void, size: usize, flags: c_uint, ret: c_int) {
    if !is_internal() {
        memory(
            CudaMemEvent::HostRegister {
                ptr: p as u64,
                size: size as u64,
                flags,
            },
            ret,
        );
    }
}

/// Before `cuMemHostUnregister`: stop watching queues in that range.
pub fn cu_mem_host_unregister_pre(p: *mut c_void) {
    cu_mem_free_pre(p as u64);
}

/// `cuMemHostUnregister`.
pub fn cu_mem_host_unregister(_: (), p: *mut c_void, ret: c_int) {
    if !is_internal() {
        memory(CudaMemEvent::HostUnregister { ptr: p as u64 }, ret);
    }
}

/// `cuMemHostGetDevicePointer_v2`.
///
/// # Safety
/// `dptr` the program's out pointer.
pub unsafe fn cu_mem_host_get_device_pointer(
    dptr: *mut u64,
    p: *mut c_void,
    _f: c_uint,
    ret: c_int,
) {
    if is_internal() {
        return;
    }
    // SAFETY: written by the successful call.
    let device = if ret == 0 && !dptr.is_null() {
        unsafe { *dptr }
    } else {
        0
    };
    memory(
        CudaMemEvent::DevicePointer {
            host: p as u64,
            device,
        },
        ret,
    );
}

/// `cuMemHostGetDevicePointer` (legacy 32-bit device pointer).
///
/// # Safety
/// As [`cu_mem_host_get_device_pointer`].
pub unsafe fn cu_mem_host_get_device_pointer_v1(
    dptr: *mut u32,
    p: *mut c_void,
    _f: c_uint,
    ret: c_int,
) {
    if is_internal() {
        return;
    }
    // SAFETY: written by the successful call.
    let device = if ret == 0 && !dptr.is_null() {
        unsafe { *dptr as u64 }
    } else {
        0
    };
    memory(
        CudaMemEvent::DevicePointer {
            host: p as u64,
            device,
        },
        ret,
    );
}

// --- kernels ----------------------------------------------------------------------------------

/// `cuModuleGetFunction`: the kernel's name (`StringDef`, namespace FUNCTION, key = handle).
///
/// # Safety
/// `f` the program's out pointer, `name` NUL-terminated.
pub unsafe fn cu_module_get_function(f: *mut u64, _module: u64, name: *const c_char, ret: c_int) {
    if ret != 0 || f.is_null() || name.is_null() || !traced() {
        return;
    }
    // SAFETY: written by the successful call; the program's name.
    let (h, n) = unsafe { (*f, CStr::from_ptr(name)) };
    kernels::name_function(h, n.to_bytes());
}

/// `CUlaunchConfig` (CUDA 12): grid, block, shared memory, stream, attributes.
#[repr(C)]
pub struct CuLaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_mem: c_uint,
    pub stream: u64,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

type Launch = Option<kernels::Launch>;

/// Before `cuLaunchKernel`.
#[allow(clippy::too_many_arguments)]
pub fn launch_pre(
    _f: u64,
    _gx: c_uint,
    _gy: c_uint,
    _gz: c_uint,
    _bx: c_uint,
    _by: c_uint,
    _bz: c_uint,
    _shm: c_uint,
    stream: u64,
    _p: *mut *mut c_void,
    _e: *mut *mut c_void,
) -> Launch {
    traced().then(|| kernels::before(stream, false))
}

/// Before `cuLaunchKernel_ptsz`.
#[allow(clippy::too_many_arguments)]
pub fn launch_pre_ptsz(
    _f: u64,
    _gx: c_uint,
    _gy: c_uint,
    _gz: c_uint,
    _bx: c_uint,
    _by: c_uint,
    _bz: c_uint,
    _shm: c_uint,
    stream: u64,
    _p: *mut *mut c_void,
    _e: *mut *mut c_void,
) -> Launch {
    traced().then(|| kernels::before(stream, true))
}

/// `cuLaunchKernel[_ptsz]`.
#[allow(clippy::too_many_arguments)]
pub fn launch(
    st: Launch,
    f: u64,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shm: c_uint,
    _stream: u64,
    _p: *mut *mut c_void,
    _e: *mut *mut c_void,
    ret: c_int,
) {
    if let Some(st) = st {
        let dims = kernels::Dims {
            grid: [gx, gy, gz],
            block: [bx, by, bz],
            shared_mem: shm,
        };
        kernels::after(st, launch_api::CU_LAUNCH_KERNEL, f, dims, ret);
    }
}

/// # Safety
/// `cfg` null or the program's launch configuration.
unsafe fn ex_pre(cfg: *const CuLaunchConfig, ptsz: bool) -> Launch {
    if cfg.is_null() || !traced() {
        return None;
    }
    // SAFETY: the program's configuration, valid for the call.
    let stream = unsafe { (*cfg).stream };
    Some(kernels::before(stream, ptsz))
}

/// Before `cuLaunchKernelEx`.
///
/// # Safety
/// `cfg` null or the program's launch configuration.
pub unsafe fn launch_ex_pre(
    cfg: *const CuLaunchConfig,
    _f: u64,
    _p: *mut *mut c_void,
    _e: *mut *mut c_void,
) -> Launch {
    // SAFETY: per caller.
    unsafe { ex_pre(cfg, false) }
}

/// Before `cuLaunchKernelEx_ptsz`.
///
/// # Safety
/// `cfg` null or the program's launch configuration.
pub unsafe fn launch_ex_pre_ptsz(
    cfg: *const CuLaunchConfig,
    _f: u64,
    _p: *mut *mut c_void,
    _e: *mut *mut c_void,
) -> Launch {
    // SAFETY: per caller.
    unsafe { ex_pre(cfg, true) }
}

/// `cuLaunchKernelEx[_ptsz]`.
///
/// # Safety
/// `cfg` the program's launch configuration (non-null when `st` is set).
pub unsafe fn launch_ex(
    st: Launch,
    cfg: *const CuLaunchConfig,
    f: u64,
    _p: *mut *mut c_void,
    _e: *mut *mut c_void,
    ret: c_int,
) {
    if let Some(st) = st {
        // SAFETY: checked non-null in the pre handler; valid for the call.
        let c = unsafe { &*cfg };
        let dims = kernels::Dims {
            grid: c.grid,
            block: c.block,
            shared_mem: c.shared_mem,
        };
        kernels::after(st, launch_api::CU_LAUNCH_KERNEL_EX, f, dims, ret);
    }
}

/// Before `cuLaunchCooperativeKernel`.
#[allow(clippy::too_many_arguments)]
pub fn coop_pre(
    _f: u64,
    _gx: c_uint,
    _gy: c_uint,
    _gz: c_uint,
    _bx: c_uint,
    _by: c_uint,
    _bz: c_uint,
    _shm: c_uint,
    stream: u64,
    _p: *mut *mut c_void,
) -> Launch {
    traced().then(|| kernels::before(stream, false))
}

/// Before `cuLaunchCooperativeKernel_ptsz`.
#[allow(clippy::too_many_arguments)]
pub fn coop_pre_ptsz(
    _f: u64,
    _gx: c_uint,
    _gy: c_uint,
    _gz: c_uint,
    _bx: c_uint,
    _by: c_uint,
    _bz: c_uint,
    _shm: c_uint,
    stream: u64,
    _p: *mut *mut c_void,
) -> Launch {
    traced().then(|| kernels::before(stream, true))
}

/// `cuLaunchCooperativeKernel[_ptsz]`.
#[allow(clippy::too_many_arguments)]
pub fn coop(
    st: Launch,
    f: u64,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shm: c_uint,
    _stream: u64,
    _p: *mut *mut c_void,
    ret: c_int,
) {
    if let Some(st) = st {
        let dims = kernels::Dims {
            grid: [gx, gy, gz],
            block: [bx, by, bz],
            shared_mem: shm,
        };
        kernels::after(st, launch_api::CU_LAUNCH_COOPERATIVE_KERNEL, f, dims, ret);
    }
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
