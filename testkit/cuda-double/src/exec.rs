//! Kernel execution and host-memory mapping rules of the TEST DOUBLE.
//!
//! **Kernels.** A program may register a *host build* of a kernel
//! (`sigmatrace_cuda_double_register_kernel(name, launcher, param_sizes)`; the repository's
//! kernels compile as host C++ with `examples/gpu/host_shim.h`). A launch of a function of that
//! name then does what the driver does with a real kernel: it copies the parameters (sizes
//! from the registration, as the driver takes them from the kernel's parameter info) and runs
//! the kernel asynchronously — on a host thread per launch, after the stream's previous launch
//! finished; `cuStreamSynchronize` / `cuCtxSynchronize` wait for it and report a failed
//! launcher as `CUDA_ERROR_LAUNCH_FAILED`. Unregistered kernels are only recorded, as before.
//!
//! **%globaltimer.** `sigmatrace_cuda_double_globaltimer()` is the simulated GPU clock the
//! host-built kernels read: `CLOCK_REALTIME` + an offset
//! (`SIGMATRACE_CUDA_DOUBLE_GT_OFFSET_NS`, default 3 s) + a drift
//! (`SIGMATRACE_CUDA_DOUBLE_GT_DRIFT_PPM`, default 25 ppm of the time since the first read),
//! in 32 ns steps — so a GPU↔host clock mapping has something to find.
//!
//! **Host registration.** `cuMemHostRegister` pins whole pages: a range sharing a page with
//! an earlier registration fails with `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`, as on the
//! real driver; `cuMemHostGetDevicePointer` succeeds only inside registered or
//! `cuMemHostAlloc` memory; `cuMemHostUnregister` only for a registered base address.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::Mutex;
use std::thread::JoinHandle;

use crate::CUresult;

/// `CUDA_ERROR_LAUNCH_FAILED`.
pub const LAUNCH_FAILED: CUresult = 719;
/// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`.
pub const ALREADY_REGISTERED: CUresult = 712;
/// `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`.
pub const NOT_REGISTERED: CUresult = 713;

const PAGE: u64 = 4096;

/// A host build of a kernel: runs the grid on host threads, returns 0 on success.
pub type HostLauncher =
    unsafe extern "C" fn(*mut *mut c_void, *const c_uint, *const c_uint) -> c_int;

struct Kernel {
    launcher: HostLauncher,
    sizes: Vec<usize>,
}

#[derive(Default)]
struct Exec {
    kernels: HashMap<CString, Kernel>,
    /// Stream → its last launch (chained: each waits for the one before).
    streams: HashMap<u64, JoinHandle<c_int>>,
    /// Registered host ranges: base → (size, page-rounded start, page-rounded end).
    registered: HashMap<u64, (u64, u64, u64)>,
}

static EXEC: Mutex<Option<Exec>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Exec) -> R) -> R {
    let mut g = EXEC.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Exec::default))
}

/// Registers the host build of kernel `name`; `sizes` is the byte size of each parameter,
/// 0-terminated. Returns 0, or -1 for a null argument.
#[no_mangle]
pub unsafe extern "C" fn sigmatrace_cuda_double_register_kernel(
    name: *const c_char,
    launcher: Option<HostLauncher>,
    sizes: *const u64,
) -> c_int {
    let (Some(launcher), false, false) = (launcher, name.is_null(), sizes.is_null()) else {
        return -1;
    };
    let mut v = Vec::new();
    // SAFETY: the caller passes a 0-terminated array of sizes.
    unsafe {
        while *sizes.add(v.len()) != 0 {
            v.push(*sizes.add(v.len()) as usize);
        }
    }
    // SAFETY: NUL-terminated name from the caller.
    let n = unsafe { CStr::from_ptr(name) }.to_owned();
    with(|e| e.kernels.insert(n, Kernel { launcher, sizes: v }));
    0
}

/// The parameter copy a launch thread owns (8-byte aligned buffers and the pointer array).
struct Params {
    bufs: Vec<Vec<u64>>,
    ptrs: Vec<*mut c_void>,
}

// SAFETY: `Params` owns its buffers; the pointers address those buffers only.
unsafe impl Send for Params {}

/// Starts kernel `name` if it has a host build: `Some(result)`, else `None` (record only).
///
/// # Safety
/// `params` is the driver's `kernelParams`: one pointer per parameter, each valid for the
/// registered size.
pub unsafe fn launch(
    name: &CStr,
    params: *mut *mut c_void,
    grid: [u32; 3],
    block: [u32; 3],
    stream: u64,
) -> Option<CUresult> {
    let (launcher, sizes) = with(|e| e.kernels.get(name).map(|k| (k.launcher, k.sizes.clone())))?;
    if params.is_null() && !sizes.is_empty() {
        return Some(crate::INVALID_VALUE);
    }
    let mut p = Params {
        bufs: Vec::new(),
        ptrs: Vec::new(),
    };
    for (i, &n) in sizes.iter().enumerate() {
        let mut b = vec![0u64; n.div_ceil(8)];
        // SAFETY: parameter i points at n bytes (caller contract).
        unsafe {
            let src = *params.add(i) as *const u8;
            if src.is_null() {
                return Some(crate::INVALID_VALUE);
            }
            std::ptr::copy_nonoverlapping(src, b.as_mut_ptr() as *mut u8, n);
        }
        p.bufs.push(b);
    }
    p.ptrs = p
        .bufs
        .iter_mut()
        .map(|b| b.as_mut_ptr() as *mut c_void)
        .collect();
    let prev = with(|e| e.streams.remove(&stream));
    let h = std::thread::Builder::new()
        .name("cuda-double-kernel".into())
        .spawn(move || {
            let mut p = p;
            let before = prev.map_or(0, |h| h.join().unwrap_or(LAUNCH_FAILED));
            // SAFETY: the launcher is the registered host build; the parameter copies live
            // until it returns.
            let rc = unsafe { launcher(p.ptrs.as_mut_ptr(), grid.as_ptr(), block.as_ptr()) };
            if before != 0 {
                before
            } else {
                rc
            }
        });
    match h {
        Ok(h) => {
            with(|e| e.streams.insert(stream, h));
            Some(crate::SUCCESS)
        }
        Err(_) => Some(LAUNCH_FAILED),
    }
}

fn join(h: JoinHandle<c_int>) -> CUresult {
    match h.join() {
        Ok(0) => crate::SUCCESS,
        _ => LAUNCH_FAILED,
    }
}

/// Waits for the running kernels of `stream`.
pub fn sync_stream(stream: u64) -> CUresult {
    match with(|e| e.streams.remove(&stream)) {
        Some(h) => join(h),
        None => crate::SUCCESS,
    }
}

/// Waits for every running kernel.
pub fn sync_all() -> CUresult {
    let all: Vec<_> = with(|e| e.streams.drain().map(|(_, h)| h).collect());
    all.into_iter()
        .map(join)
        .fold(crate::SUCCESS, |a, r| if a != 0 { a } else { r })
}

/// `cuMemHostRegister`: whole pages, no page registered twice.
pub fn register(p: u64, size: u64) -> CUresult {
    let (lo, hi) = (p & !(PAGE - 1), (p + size).div_ceil(PAGE) * PAGE);
    with(|e| {
        if e.registered.values().any(|&(_, a, b)| lo < b && a < hi) {
            return ALREADY_REGISTERED;
        }
        e.registered.insert(p, (size, lo, hi));
        crate::SUCCESS
    })
}

/// `cuMemHostUnregister`.
pub fn unregister(p: u64) -> CUresult {
    match with(|e| e.registered.remove(&p)) {
        Some(_) => crate::SUCCESS,
        None => NOT_REGISTERED,
    }
}

/// Whether `p` lies in registered host memory.
pub fn is_registered(p: u64) -> bool {
    with(|e| e.registered.values().any(|&(_, a, b)| a <= p && p < b))
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn env_f64(k: &str, default: f64) -> f64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The simulated `%globaltimer` (ns): see the module documentation.
#[no_mangle]
pub extern "C" fn sigmatrace_cuda_double_globaltimer() -> u64 {
    static T0: std::sync::OnceLock<(u64, f64, f64)> = std::sync::OnceLock::new();
    let &(mono0, offset, ppm) = T0.get_or_init(|| {
        (
            clock_ns(libc::CLOCK_MONOTONIC),
            env_f64("SIGMATRACE_CUDA_DOUBLE_GT_OFFSET_NS", 3e9),
            env_f64("SIGMATRACE_CUDA_DOUBLE_GT_DRIFT_PPM", 25.0),
        )
    });
    let since = clock_ns(libc::CLOCK_MONOTONIC).saturating_sub(mono0) as f64;
    let t = clock_ns(libc::CLOCK_REALTIME) as f64 + offset + since * ppm * 1e-6;
    (t as u64) & !31
}
