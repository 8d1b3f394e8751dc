//! Handlers of the CUDA driver's memory and launch entry points in the hook table (however
//! the program got them: by symbol, `dlsym`, or `cuGetProcAddress`, see
//! `exports::proc_address`): they read the call's arguments and out-pointers. Memory calls
//! become `GpuMemory` records and feed the memory map that says where each discovered ring
//! lives (`runtime::queues`); launches go to kernel timing (`runtime::kernels`).
//!
//! The interposer's own driver calls (device poller, kernel timing) run *internal*
//! (`runtime::internal`): these handlers then record nothing.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use sigmatrace_observe::discover::CudaMemEvent;
use sigmatrace_schemas::launch_api;

use crate::record;
use crate::runtime::internal::is_internal;
use crate::runtime::{kernels, queues};
use crate::sink;
use crate::sink::cat;

fn traced() -> bool {
    sink::tracing(cat::GPU) && !is_internal()
}

// --- memory ------------------------------------------------------------------------------------

fn memory(e: CudaMemEvent, ret: c_int) {
    if ret == 0 {
        queues::cuda_mem(&e);
    }
    if traced() {
        record::gpu::gpu_memory(&e, ret);
    }
}

/// What a successful call wrote to the program's out pointer (`None` when the call failed or
/// the pointer is null).
///
/// # Safety
/// `out` null or the program's out pointer of the call that returned `ret`.
unsafe fn written<T: Copy>(out: *const T, ret: c_int) -> Option<T> {
    // SAFETY: non-null, and written by the successful call.
    (ret == 0 && !out.is_null()).then(|| unsafe { *out })
}

/// `cuMemAlloc_v2`.
///
/// # Safety
/// `dptr` the program's out pointer.
pub unsafe fn cu_mem_alloc(dptr: *mut u64, size: usize, ret: c_int) {
    if is_internal() {
        return;
    }
    // SAFETY: the program's out pointer.
    let ptr = unsafe { written(dptr, ret) }.unwrap_or(0);
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
    // SAFETY: the program's out pointer.
    let ptr = unsafe { written(pp, ret) }.map_or(0, |p| p as u64);
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
    if !is_internal() {
        // SAFETY: the program's out pointer.
        let device = unsafe { written(dptr, ret) }.unwrap_or(0);
        device_pointer(p, device, ret);
    }
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
    if !is_internal() {
        // SAFETY: the program's out pointer.
        let device = unsafe { written(dptr, ret) }.map_or(0, u64::from);
        device_pointer(p, device, ret);
    }
}

/// The device address of host memory `p` (0 when the call failed).
fn device_pointer(p: *mut c_void, device: u64, ret: c_int) {
    let host = p as u64;
    memory(CudaMemEvent::DevicePointer { host, device }, ret);
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

/// `CUlaunchConfig`, as the hook table names it.
pub use sigmatrace_cuda_abi::LaunchConfig as CuLaunchConfig;

type Launch = Option<kernels::Launch>;

/// The launch's timing state, when traced. `PTSZ`: the `_ptsz` variant, whose stream 0 is
/// the per-thread default stream.
fn before<const PTSZ: bool>(stream: u64) -> Launch {
    traced().then(|| kernels::before(stream, PTSZ))
}

/// Ends the timing of a traced launch with its grid.
fn after(
    st: Launch,
    api: u32,
    f: u64,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shm: c_uint,
    ret: c_int,
) {
    if let Some(st) = st {
        let dims = kernels::Dims {
            grid,
            block,
            shared_mem: shm,
        };
        kernels::after(st, api, f, dims, ret);
    }
}

/// The handlers of a grid launch — `cuLaunchKernel` and `cuLaunchCooperativeKernel`, which
/// take the same arguments but `extra` (cooperative launches have none) — from one
/// parameter list: `$pre` (`PTSZ`: the `_ptsz` variant) starts the timing, `$post` ends it.
macro_rules! grid_launch {
    ($(#[$doc:meta])* $pre:ident, $post:ident, $api:expr $(, $extra:ident)?) => {
        $(#[$doc])*
        #[allow(clippy::too_many_arguments)]
        pub fn $pre<const PTSZ: bool>(
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
            $($extra: *mut *mut c_void,)?
        ) -> Launch {
            before::<PTSZ>(stream)
        }

        $(#[$doc])*
        #[allow(clippy::too_many_arguments)]
        pub fn $post(
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
            $($extra: *mut *mut c_void,)?
            ret: c_int,
        ) {
            after(st, $api, f, [gx, gy, gz], [bx, by, bz], shm, ret);
        }
    };
}

grid_launch!(
    /// `cuLaunchKernel[_ptsz]`.
    launch_pre,
    launch,
    launch_api::CU_LAUNCH_KERNEL,
    _e
);
grid_launch!(
    /// `cuLaunchCooperativeKernel[_ptsz]`.
    coop_pre,
    coop,
    launch_api::CU_LAUNCH_COOPERATIVE_KERNEL
);

/// Before `cuLaunchKernelEx` (`PTSZ`: `cuLaunchKernelEx_ptsz`).
///
/// # Safety
/// `cfg` null or the program's launch configuration.
pub unsafe fn launch_ex_pre<const PTSZ: bool>(
    cfg: *const CuLaunchConfig,
    _f: u64,
    _p: *mut *mut c_void,
    _e: *mut *mut c_void,
) -> Launch {
    if cfg.is_null() {
        return None;
    }
    // SAFETY: the program's configuration, valid for the call.
    let stream = unsafe { (*cfg).stream };
    before::<PTSZ>(stream)
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
    if st.is_some() {
        // SAFETY: checked non-null in the pre handler; valid for the call.
        let c = unsafe { &*cfg };
        let api = launch_api::CU_LAUNCH_KERNEL_EX;
        after(st, api, f, c.grid, c.block, c.shared_mem, ret);
    }
}

/// Before `cuGraphLaunch` (`PTSZ`: `cuGraphLaunch_ptsz`): an executable graph is timed on its
/// stream as a kernel is (events before and after it), the whole graph as one span.
pub fn graph_launch_pre<const PTSZ: bool>(_exec: u64, stream: u64) -> Launch {
    before::<PTSZ>(stream)
}

/// `cuGraphLaunch[_ptsz]`: recorded as a launch of [`launch_api::CU_GRAPH_LAUNCH`] whose
/// function is the executable graph (no grid: a graph's kernels are its nodes).
pub fn graph_launch(st: Launch, exec: u64, _stream: u64, ret: c_int) {
    after(
        st,
        launch_api::CU_GRAPH_LAUNCH,
        exec,
        [0; 3],
        [0; 3],
        0,
        ret,
    );
}
