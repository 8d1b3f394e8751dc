//! # TEST DOUBLE — not a CUDA driver
//!
//! A stand-in `libcuda.so.1` (SONAME) for tests without a GPU. It exports the driver entry
//! points SigmaTrace's interposer hooks (directly and through `cuGetProcAddress[_v2]`) with
//! plausible host-memory behaviour: "device" and pinned allocations come from `malloc`,
//! device pointers of host memory are the host pointers, modules and functions are named
//! handles, and launches are recorded (never executed) and return success. Kernels, events and
//! stream synchronisation follow a simulated clock ([`timing`]: each launch occupies its stream
//! for `SIGMATRACE_CUDA_DOUBLE_KERNEL_NS`, default 1 ms), so event timing of kernels can be
//! tested. `sigmatrace_cuda_double_*` functions let tests inspect what was called. Kernels with
//! a registered host build run on host threads, and host registration follows the driver's
//! page rules ([`exec`]); device queries and the remaining copies are in [`device`].

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::Mutex;

pub mod abi;
mod device;
mod exec;
mod graph;
mod timing;

pub use abi::{LaunchConfig, LaunchRecord};

pub type CUresult = sigmatrace_cuda_abi::CuResult;
pub(crate) const SUCCESS: CUresult = 0;
pub(crate) const INVALID_VALUE: CUresult = 1;
const NOT_INITIALIZED: CUresult = 3;
const INVALID_HANDLE: CUresult = 400;
const NOT_FOUND: CUresult = 500;
const NOT_READY: CUresult = 600;

/// Driver version the double reports (12.9).
pub const DRIVER_VERSION: c_int = 12090;

#[derive(Default)]
struct State {
    init: bool,
    calls: HashMap<String, u64>,
    launches: Vec<LaunchRecord>,
    functions: HashMap<u64, std::ffi::CString>,
    allocs: HashMap<u64, usize>,
    /// Executable graphs instantiated and not destroyed ([`graph`]).
    graph_execs: std::collections::HashSet<u64>,
    next_handle: u64,
    timing: timing::Timing,
    /// (start, end) of every launch on the simulated stream clock (CLOCK_MONOTONIC ns).
    spans: Vec<(u64, u64)>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(State::default))
}

pub(crate) fn count(name: &str) {
    with(|s| *s.calls.entry(name.to_string()).or_default() += 1);
}

fn initialised() -> bool {
    with(|s| s.init)
}

/// The driver's out-pointer convention: `CUDA_ERROR_INVALID_VALUE` for a null `out`, else
/// `*out = value()` and `CUDA_SUCCESS`. `value` runs only for a non-null pointer (it may
/// allocate a handle).
///
/// # Safety
/// `out` is null or valid for writing a `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: impl FnOnce() -> T) -> CUresult {
    if out.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: non-null, and writable by the caller's contract.
    unsafe { out.write(value()) };
    SUCCESS
}

// ---------------------------------------------------------------------------------------------
// Introspection for tests.

/// Always 1: lets a test assert it talks to the double, not a real driver.
#[no_mangle]
pub extern "C" fn sigmatrace_cuda_double_is_test_double() -> c_int {
    1
}

/// Times `name` was called.
#[no_mangle]
pub unsafe extern "C" fn sigmatrace_cuda_double_calls(name: *const c_char) -> u64 {
    if name.is_null() {
        return 0;
    }
    // SAFETY: caller passes a NUL-terminated string.
    let n = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    with(|s| s.calls.get(&n).copied().unwrap_or(0))
}

/// Number of recorded launches.
#[no_mangle]
pub extern "C" fn sigmatrace_cuda_double_launch_count() -> u64 {
    with(|s| s.launches.len() as u64)
}

/// Copies launch `i` to `out`; returns 0, or -1 if out of range.
#[no_mangle]
pub unsafe extern "C" fn sigmatrace_cuda_double_launch(i: u64, out: *mut LaunchRecord) -> c_int {
    match with(|s| s.launches.get(i as usize).copied()) {
        Some(r) if !out.is_null() => {
            // SAFETY: caller passes a valid LaunchRecord pointer.
            unsafe { *out = r };
            0
        }
        _ => -1,
    }
}

/// Simulated (start, end) of launch `i` in CLOCK_MONOTONIC ns; returns 0, or -1 if out of range.
#[no_mangle]
pub unsafe extern "C" fn sigmatrace_cuda_double_launch_span(
    i: u64,
    start: *mut u64,
    end: *mut u64,
) -> c_int {
    match with(|s| s.spans.get(i as usize).copied()) {
        Some((a, b)) if !start.is_null() && !end.is_null() => {
            // SAFETY: caller passes valid out pointers.
            unsafe {
                *start = a;
                *end = b;
            }
            0
        }
        _ => -1,
    }
}

// ---------------------------------------------------------------------------------------------
// Driver entry points.

#[no_mangle]
pub extern "C" fn cuInit(_flags: c_uint) -> CUresult {
    count("cuInit");
    with(|s| s.init = true);
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    count("cuDriverGetVersion");
    // SAFETY: `v` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(v, || DRIVER_VERSION) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> CUresult {
    count("cuDeviceGetCount");
    // SAFETY: `n` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(n, || 1) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(d: *mut c_int, ordinal: c_int) -> CUresult {
    count("cuDeviceGet");
    if d.is_null() || ordinal != 0 {
        return INVALID_VALUE;
    }
    // SAFETY: non-null out pointer.
    unsafe { *d = 0 };
    SUCCESS
}

fn new_handle() -> u64 {
    with(|s| {
        s.next_handle += 1;
        0x7e57_0000_0000 + s.next_handle * 16
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut u64, _dev: c_int) -> CUresult {
    count("cuDevicePrimaryCtxRetain");
    // SAFETY: `ctx` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(ctx, || 0x7e57_c000) }
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(_ctx: u64) -> CUresult {
    count("cuCtxSetCurrent");
    SUCCESS
}

unsafe fn alloc(out: *mut u64, size: usize, name: &str) -> CUresult {
    count(name);
    if !initialised() {
        return NOT_INITIALIZED;
    }
    if out.is_null() || size == 0 {
        return INVALID_VALUE;
    }
    // SAFETY: plain calloc; freed by the matching free entry point.
    let p = unsafe { libc::calloc(1, size) } as u64;
    if p == 0 {
        return 2; // CUDA_ERROR_OUT_OF_MEMORY
    }
    with(|s| s.allocs.insert(p, size));
    // SAFETY: non-null out pointer.
    unsafe { *out = p };
    SUCCESS
}

unsafe fn free(p: u64, name: &str) -> CUresult {
    count(name);
    match with(|s| s.allocs.remove(&p)) {
        Some(_) => {
            // SAFETY: p came from calloc in `alloc` and is freed once.
            unsafe { libc::free(p as *mut c_void) };
            SUCCESS
        }
        None => INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, size: usize) -> CUresult {
    // SAFETY: forwards the caller's out pointer.
    unsafe { alloc(dptr, size, "cuMemAlloc_v2") }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> CUresult {
    // SAFETY: see `free`.
    unsafe { free(dptr, "cuMemFree_v2") }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(pp: *mut u64, size: usize, _flags: c_uint) -> CUresult {
    // SAFETY: forwards the caller's out pointer.
    unsafe { alloc(pp, size, "cuMemHostAlloc") }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: u64) -> CUresult {
    // SAFETY: see `free`.
    unsafe { free(p, "cuMemFreeHost") }
}

#[no_mangle]
pub extern "C" fn cuMemHostRegister_v2(p: u64, size: usize, _flags: c_uint) -> CUresult {
    count("cuMemHostRegister_v2");
    if p == 0 || size == 0 {
        INVALID_VALUE
    } else {
        exec::register(p, size as u64)
    }
}

#[no_mangle]
pub extern "C" fn cuMemHostUnregister(p: u64) -> CUresult {
    count("cuMemHostUnregister");
    exec::unregister(p)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    dptr: *mut u64,
    p: u64,
    _flags: c_uint,
) -> CUresult {
    count("cuMemHostGetDevicePointer_v2");
    let pinned = with(|s| s.allocs.iter().any(|(&a, &n)| a <= p && p < a + n as u64));
    if !pinned && !exec::is_registered(p) {
        return INVALID_VALUE;
    }
    // The "device" alias of host memory is the host address.
    // SAFETY: `dptr` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(dptr, || p) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> CUresult {
    count("cuMemcpyDtoH_v2");
    if dst.is_null() || src == 0 {
        return INVALID_VALUE;
    }
    // SAFETY: "device" memory is host memory here; the caller guarantees both ranges.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut u64, image: *const c_void) -> CUresult {
    count("cuModuleLoadData");
    if module.is_null() || image.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: non-null out pointer.
    unsafe { *module = new_handle() };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    f: *mut u64,
    _module: u64,
    name: *const c_char,
) -> CUresult {
    count("cuModuleGetFunction");
    if f.is_null() || name.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: NUL-terminated name from the caller.
    let n = unsafe { CStr::from_ptr(name) }.to_owned();
    let h = new_handle();
    with(|s| s.functions.insert(h, n));
    // SAFETY: non-null out pointer.
    unsafe { *f = h };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetName(name: *mut *const c_char, f: u64) -> CUresult {
    count("cuFuncGetName");
    if name.is_null() {
        return INVALID_VALUE;
    }
    // The CString lives in STATE for the life of the process (functions are never unloaded).
    match with(|s| s.functions.get(&f).map(|c| c.as_ptr())) {
        Some(p) => {
            // SAFETY: non-null out pointer.
            unsafe { *name = p };
            SUCCESS
        }
        None => INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CUresult {
    count("cuCtxGetStreamPriorityRange");
    // SAFETY: optional out pointers, written when non-null.
    unsafe {
        if !least.is_null() {
            *least = 0;
        }
        if !greatest.is_null() {
            *greatest = -5;
        }
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    s: *mut u64,
    _flags: c_uint,
    _prio: c_int,
) -> CUresult {
    count("cuStreamCreateWithPriority");
    // SAFETY: `s` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(s, new_handle) }
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(_s: u64) -> CUresult {
    count("cuStreamDestroy_v2");
    SUCCESS
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize(s: u64) -> CUresult {
    count("cuStreamSynchronize");
    timing::sleep_until(with(|st| st.timing.stream_end(s)));
    exec::sync_stream(s)
}

unsafe fn record_launch(
    api: u32,
    f: u64,
    grid: [u32; 3],
    block: [u32; 3],
    shm: u32,
    stream: u64,
    params: *mut *mut c_void,
) -> CUresult {
    let Some(name) = with(|s| s.functions.get(&f).cloned()) else {
        return INVALID_VALUE;
    };
    let first = if params.is_null() {
        0
    } else {
        // SAFETY: kernelParams is an array of pointers to the arguments; a kernel with at
        // least one parameter has a non-null first entry pointing at ≥ 1 byte. Only 8 bytes
        // are read when the first entry is non-null — the launch tests pass 8-byte arguments.
        unsafe {
            let p0 = *params;
            if p0.is_null() {
                0
            } else {
                std::ptr::read_unaligned(p0 as *const u64)
            }
        }
    };
    with(|s| {
        let span = s.timing.launch(stream);
        s.spans.push(span);
        s.launches.push(LaunchRecord {
            api,
            grid,
            block,
            shared_mem: shm,
            function: f,
            stream,
            kernel_params: params as u64,
            first_param: first,
        })
    });
    // SAFETY: `params` is the caller's kernelParams (see exec::launch).
    unsafe { exec::launch(&name, params, grid, block, stream) }.unwrap_or(SUCCESS)
}

/// `cuLaunchKernel` and `cuLaunchCooperativeKernel`: the same arguments but `extra`
/// (cooperative launches have none), recorded by one definition.
macro_rules! grid_launch {
    ($name:ident, $api:expr $(, $extra:ident)?) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            f: u64,
            gx: c_uint,
            gy: c_uint,
            gz: c_uint,
            bx: c_uint,
            by: c_uint,
            bz: c_uint,
            shm: c_uint,
            stream: u64,
            params: *mut *mut c_void,
            $($extra: *mut *mut c_void,)?
        ) -> CUresult {
            count(stringify!($name));
            // SAFETY: see record_launch.
            unsafe { record_launch($api, f, [gx, gy, gz], [bx, by, bz], shm, stream, params) }
        }
    };
}

grid_launch!(cuLaunchKernel, 1, _extra);
grid_launch!(cuLaunchCooperativeKernel, 3);

// The exports have the driver's signatures, as the callers' one definition states them.
const _: abi::LaunchKernelFn = cuLaunchKernel;
const _: abi::LaunchCooperativeKernelFn = cuLaunchCooperativeKernel;
const _: abi::LaunchKernelExFn = cuLaunchKernelEx;

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    cfg: *const LaunchConfig,
    f: u64,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> CUresult {
    count("cuLaunchKernelEx");
    if cfg.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: non-null config pointer from the caller.
    let c = unsafe { &*cfg };
    // SAFETY: see record_launch.
    unsafe { record_launch(2, f, c.grid, c.block, c.shared_mem, c.stream, params) }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut u64) -> CUresult {
    count("cuCtxGetCurrent");
    // SAFETY: `ctx` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(ctx, || if initialised() { 0x7e57_c000 } else { 0 }) }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut c_int) -> CUresult {
    count("cuCtxGetDevice");
    // SAFETY: `dev` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(dev, || 0) }
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    count("cuCtxSynchronize");
    timing::sleep_until(with(|s| s.timing.all_end()));
    exec::sync_all()
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(s: *mut u64, _flags: c_uint) -> CUresult {
    count("cuStreamCreate");
    // SAFETY: `s` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(s, new_handle) }
}

/// `CU_STREAM_CAPTURE_STATUS_NONE`: the double never captures.
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(_s: u64, status: *mut c_int) -> CUresult {
    count("cuStreamIsCapturing");
    // SAFETY: `status` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(status, || 0) }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(e: *mut u64, _flags: c_uint) -> CUresult {
    count("cuEventCreate");
    // SAFETY: `e` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe {
        put(e, || {
            let h = new_handle();
            with(|s| s.timing.create_event(h));
            h
        })
    }
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(e: u64) -> CUresult {
    count("cuEventDestroy_v2");
    if with(|s| s.timing.destroy_event(e)) {
        SUCCESS
    } else {
        INVALID_HANDLE
    }
}

#[no_mangle]
pub extern "C" fn cuEventRecord(e: u64, stream: u64) -> CUresult {
    count("cuEventRecord");
    if with(|s| s.timing.record(e, stream)) {
        SUCCESS
    } else {
        INVALID_HANDLE
    }
}

#[no_mangle]
pub extern "C" fn cuEventQuery(e: u64) -> CUresult {
    count("cuEventQuery");
    match with(|s| s.timing.completed(e)) {
        Ok(_) | Err(timing::EventError::NotRecorded) => SUCCESS,
        Err(timing::EventError::NotReady) => NOT_READY,
        Err(timing::EventError::Unknown) => INVALID_HANDLE,
    }
}

#[no_mangle]
pub extern "C" fn cuEventSynchronize(e: u64) -> CUresult {
    count("cuEventSynchronize");
    match with(|s| s.timing.due(e)) {
        Ok(t) => {
            timing::sleep_until(t.unwrap_or(0));
            SUCCESS
        }
        Err(_) => INVALID_HANDLE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: u64, end: u64) -> CUresult {
    count("cuEventElapsedTime");
    if ms.is_null() {
        return INVALID_VALUE;
    }
    let r = with(|s| {
        Ok::<_, timing::EventError>((s.timing.completed(start)?, s.timing.completed(end)?))
    });
    match r {
        Ok((a, b)) => {
            // SAFETY: non-null out pointer.
            unsafe { *ms = ((b as i64 - a as i64) as f64 / 1e6) as f32 };
            SUCCESS
        }
        Err(timing::EventError::NotReady) => NOT_READY,
        Err(_) => INVALID_HANDLE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetExportTable(
    table: *mut *const c_void,
    _uuid: *const c_void,
) -> CUresult {
    count("cuGetExportTable");
    // No private tables in a double.
    if !table.is_null() {
        // SAFETY: non-null out pointer.
        unsafe { *table = std::ptr::null() };
    }
    NOT_FOUND
}

/// Resolves a driver name (as the runtime asks: base name + CUDA version) to our export.
fn lookup(name: &str, cuda_version: c_int) -> Option<*const c_void> {
    fn v2(s: &str, cuda_version: c_int) -> &str {
        match s {
            "cuMemAlloc" => "cuMemAlloc_v2",
            "cuMemFree" => "cuMemFree_v2",
            "cuMemHostRegister" => "cuMemHostRegister_v2",
            "cuMemHostGetDevicePointer" => "cuMemHostGetDevicePointer_v2",
            "cuMemcpyDtoH" => "cuMemcpyDtoH_v2",
            "cuMemcpyHtoD" => "cuMemcpyHtoD_v2",
            "cuDeviceTotalMem" => "cuDeviceTotalMem_v2",
            "cuStreamDestroy" => "cuStreamDestroy_v2",
            "cuEventDestroy" => "cuEventDestroy_v2",
            "cuGetProcAddress" if cuda_version >= 12000 => "cuGetProcAddress_v2",
            other => other,
        }
    }
    let n = v2(name, cuda_version);
    let p: *const c_void = match n {
        "cuInit" => cuInit as *const c_void,
        "cuDriverGetVersion" => cuDriverGetVersion as *const c_void,
        "cuDeviceGetCount" => cuDeviceGetCount as *const c_void,
        "cuDeviceGet" => cuDeviceGet as *const c_void,
        "cuDevicePrimaryCtxRetain" => cuDevicePrimaryCtxRetain as *const c_void,
        "cuCtxSetCurrent" => cuCtxSetCurrent as *const c_void,
        "cuMemAlloc_v2" => cuMemAlloc_v2 as *const c_void,
        "cuMemFree_v2" => cuMemFree_v2 as *const c_void,
        "cuMemHostAlloc" => cuMemHostAlloc as *const c_void,
        "cuMemFreeHost" => cuMemFreeHost as *const c_void,
        "cuMemHostRegister_v2" => cuMemHostRegister_v2 as *const c_void,
        "cuMemHostUnregister" => cuMemHostUnregister as *const c_void,
        "cuMemHostGetDevicePointer_v2" => cuMemHostGetDevicePointer_v2 as *const c_void,
        "cuMemcpyDtoH_v2" => cuMemcpyDtoH_v2 as *const c_void,
        "cuMemcpyHtoD_v2" => device::cuMemcpyHtoD_v2 as *const c_void,
        "cuDeviceGetName" => device::cuDeviceGetName as *const c_void,
        "cuDeviceGetAttribute" => device::cuDeviceGetAttribute as *const c_void,
        "cuDeviceTotalMem_v2" => device::cuDeviceTotalMem_v2 as *const c_void,
        "cuModuleUnload" => device::cuModuleUnload as *const c_void,
        "cuModuleLoadData" => cuModuleLoadData as *const c_void,
        "cuModuleGetFunction" => cuModuleGetFunction as *const c_void,
        "cuFuncGetName" => cuFuncGetName as *const c_void,
        "cuCtxGetStreamPriorityRange" => cuCtxGetStreamPriorityRange as *const c_void,
        "cuStreamCreateWithPriority" => cuStreamCreateWithPriority as *const c_void,
        "cuStreamDestroy_v2" => cuStreamDestroy_v2 as *const c_void,
        "cuStreamSynchronize" => cuStreamSynchronize as *const c_void,
        "cuLaunchKernel" | "cuLaunchKernel_ptsz" => cuLaunchKernel as *const c_void,
        "cuLaunchKernelEx" | "cuLaunchKernelEx_ptsz" => cuLaunchKernelEx as *const c_void,
        "cuLaunchCooperativeKernel" | "cuLaunchCooperativeKernel_ptsz" => {
            cuLaunchCooperativeKernel as *const c_void
        }
        "cuGraphCreate" => graph::cuGraphCreate as *const c_void,
        "cuGraphInstantiateWithFlags" => graph::cuGraphInstantiateWithFlags as *const c_void,
        "cuGraphLaunch" | "cuGraphLaunch_ptsz" => graph::cuGraphLaunch as *const c_void,
        "cuGraphExecDestroy" => graph::cuGraphExecDestroy as *const c_void,
        "cuGraphDestroy" => graph::cuGraphDestroy as *const c_void,
        "cuCtxGetCurrent" => cuCtxGetCurrent as *const c_void,
        "cuCtxGetDevice" => cuCtxGetDevice as *const c_void,
        "cuCtxSynchronize" => cuCtxSynchronize as *const c_void,
        "cuStreamCreate" => cuStreamCreate as *const c_void,
        "cuStreamIsCapturing" | "cuStreamIsCapturing_ptsz" => cuStreamIsCapturing as *const c_void,
        "cuEventCreate" => cuEventCreate as *const c_void,
        "cuEventDestroy_v2" => cuEventDestroy_v2 as *const c_void,
        "cuEventRecord" | "cuEventRecord_ptsz" => cuEventRecord as *const c_void,
        "cuEventQuery" => cuEventQuery as *const c_void,
        "cuEventSynchronize" => cuEventSynchronize as *const c_void,
        "cuEventElapsedTime" => cuEventElapsedTime as *const c_void,
        "cuGetExportTable" => cuGetExportTable as *const c_void,
        "cuGetProcAddress" => cuGetProcAddress as *const c_void,
        "cuGetProcAddress_v2" => cuGetProcAddress_v2 as *const c_void,
        _ => return None,
    };
    Some(p)
}

/// CUDA 11.3–12.x signature.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *const c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult {
    count("cuGetProcAddress");
    // SAFETY: forwards the caller's pointers.
    unsafe { get_proc(symbol, pfn, cuda_version, flags, std::ptr::null_mut()) }
}

/// CUDA 12.x `cuGetProcAddress_v2` (adds the symbol status out-parameter).
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *const c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    count("cuGetProcAddress_v2");
    // SAFETY: forwards the caller's pointers.
    unsafe { get_proc(symbol, pfn, cuda_version, flags, status) }
}

unsafe fn get_proc(
    symbol: *const c_char,
    pfn: *mut *const c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    if symbol.is_null() || pfn.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: NUL-terminated symbol name from the caller.
    let name = unsafe { CStr::from_ptr(symbol) }
        .to_string_lossy()
        .into_owned();
    let name = if flags & 2 != 0 && (name.starts_with("cuLaunch") || name == "cuGraphLaunch") {
        format!("{name}_ptsz")
    } else {
        name
    };
    let (p, rc, st) = match lookup(&name, cuda_version) {
        Some(p) => (p, SUCCESS, 0),
        None => (std::ptr::null(), NOT_FOUND, 1),
    };
    // SAFETY: non-null out pointers (status optional).
    unsafe {
        *pfn = p;
        if !status.is_null() {
            *status = st;
        }
    }
    rc
}
