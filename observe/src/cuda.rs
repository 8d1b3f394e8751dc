//! CUDA driver access for the device-side poller. **Unsafe module (driver FFI).**
//!
//! Rule: never load libcuda into a process that has not loaded it. [`Driver::if_loaded`]
//! only proceeds when `dlopen("libcuda.so.1", RTLD_NOLOAD)` finds the library already
//! mapped; entry points are then resolved from *that* handle the way the CUDA runtime does
//! (`dlsym(cuGetProcAddress_v2)` → `cuGetProcAddress(name, 12000)`), with cudarc's driver
//! types (`cudarc::driver::sys`) for handles. cudarc's own dynamic loader is deliberately not
//! invoked: it `dlopen`s the first of `libcuda.so`, `libcuda64.so`, … that exists, which on a
//! machine with the CUDA toolkit can be the link-time stub or another copy of the driver —
//! a second libcuda in the process.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};

use cudarc::driver::sys::{CUcontext, CUdevice, CUdeviceptr, CUfunction, CUmodule, CUstream};
use sigmatrace_schemas::{GpuClockPair, Timestamper};

use crate::device::{self, ClockMap, DeviceDrain, EventBuffer, Watch};
use crate::queue::QueueDesc;
use crate::watcher::Observation;

/// Errors of the CUDA path.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("libcuda.so.1 is not loaded in this process; the device poller never loads it")]
    NotLoaded,
    #[error("libcuda.so.1 has no cuGetProcAddress[_v2]")]
    NoGetProcAddress,
    #[error("driver entry point {0} not found")]
    Missing(&'static str),
    #[error("{call} failed with CUresult {code}")]
    Call { call: &'static str, code: i32 },
    #[error("no queue to watch (device-resident send rings or CQs)")]
    NoQueues,
}

/// Whether `libcuda.so.1` is already loaded (checked with `RTLD_NOLOAD`; never loads it).
pub fn libcuda_loaded() -> bool {
    let name = CString::new("libcuda.so.1").expect("static name");
    // SAFETY: RTLD_NOLOAD never maps a new object; it returns a new reference to an already
    // loaded one (or NULL), which we release right away.
    unsafe {
        let h = libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if h.is_null() {
            return false;
        }
        libc::dlclose(h);
        true
    }
}

type GetProcV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type GetProcV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;

// Driver entry-point signatures (results as raw `c_int` CUresult codes: a Rust enum must
// never hold an unknown code).
type FInit = unsafe extern "C" fn(c_uint) -> c_int;
type FDeviceGet = unsafe extern "C" fn(*mut CUdevice, c_int) -> c_int;
type FCtxRetain = unsafe extern "C" fn(*mut CUcontext, CUdevice) -> c_int;
type FCtxSet = unsafe extern "C" fn(CUcontext) -> c_int;
type FHostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> c_int;
type FFreeHost = unsafe extern "C" fn(*mut c_void) -> c_int;
type FDevPtr = unsafe extern "C" fn(*mut CUdeviceptr, *mut c_void, c_uint) -> c_int;
type FModLoad = unsafe extern "C" fn(*mut CUmodule, *const c_void) -> c_int;
type FModFunc = unsafe extern "C" fn(*mut CUfunction, CUmodule, *const c_char) -> c_int;
type FPrio = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type FStream = unsafe extern "C" fn(*mut CUstream, c_uint, c_int) -> c_int;
/// `cuLaunchKernel` (handles as `u64`: the one definition the interposer and the test
/// double share).
type FLaunch = sigmatrace_cuda_abi::LaunchKernelFn;

/// Driver entry points.
#[allow(non_snake_case)]
struct Fns {
    cuInit: FInit,
    cuDeviceGet: FDeviceGet,
    cuDevicePrimaryCtxRetain: FCtxRetain,
    cuCtxSetCurrent: FCtxSet,
    cuMemHostAlloc: FHostAlloc,
    cuMemFreeHost: FFreeHost,
    cuMemHostGetDevicePointer: FDevPtr,
    cuModuleLoadData: FModLoad,
    cuModuleGetFunction: FModFunc,
    cuCtxGetStreamPriorityRange: FPrio,
    cuStreamCreateWithPriority: FStream,
    cuLaunchKernel: FLaunch,
}

/// The already-loaded driver.
pub struct Driver {
    fns: Fns,
}

fn check(call: &'static str, code: c_int) -> Result<(), CudaError> {
    if code == 0 {
        Ok(())
    } else {
        Err(CudaError::Call { call, code })
    }
}

impl Driver {
    /// Resolves the entry points if and only if libcuda.so.1 is already loaded.
    pub fn if_loaded() -> Result<Driver, CudaError> {
        let name = CString::new("libcuda.so.1").expect("static name");
        // SAFETY: RTLD_NOLOAD: returns the loaded library or NULL, never loads. The reference
        // is kept for the Driver's lifetime (function pointers stay valid); it is one more
        // reference count on a library the process already holds.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if h.is_null() {
            return Err(CudaError::NotLoaded);
        }
        let sym = |n: &str| {
            let c = CString::new(n).expect("symbol name");
            // SAFETY: valid handle and NUL-terminated name.
            unsafe { libc::dlsym(h, c.as_ptr()) }
        };
        let (v2, v1) = (sym("cuGetProcAddress_v2"), sym("cuGetProcAddress"));
        if v2.is_null() && v1.is_null() {
            return Err(CudaError::NoGetProcAddress);
        }
        let get = |n: &'static str| -> Result<*mut c_void, CudaError> {
            let c = CString::new(n).expect("symbol name");
            let mut p: *mut c_void = std::ptr::null_mut();
            let mut status: c_int = 0;
            // SAFETY: the symbols are the driver's cuGetProcAddress[_v2] with these
            // signatures (CUDA 12 driver API); pointers are valid for the call.
            let rc = unsafe {
                if !v2.is_null() {
                    std::mem::transmute::<*mut c_void, GetProcV2>(v2)(
                        c.as_ptr(),
                        &mut p,
                        12000,
                        0,
                        &mut status,
                    )
                } else {
                    std::mem::transmute::<*mut c_void, GetProcV1>(v1)(c.as_ptr(), &mut p, 12000, 0)
                }
            };
            if rc != 0 || p.is_null() {
                Err(CudaError::Missing(n))
            } else {
                Ok(p)
            }
        };
        macro_rules! f {
            ($n:literal, $t:ty) => {
                // SAFETY: cuGetProcAddress returned the entry point named $n for CUDA 12.0,
                // whose C signature is $t.
                unsafe { std::mem::transmute::<*mut c_void, $t>(get($n)?) }
            };
        }
        let fns = Fns {
            cuInit: f!("cuInit", FInit),
            cuDeviceGet: f!("cuDeviceGet", FDeviceGet),
            cuDevicePrimaryCtxRetain: f!("cuDevicePrimaryCtxRetain", FCtxRetain),
            cuCtxSetCurrent: f!("cuCtxSetCurrent", FCtxSet),
            cuMemHostAlloc: f!("cuMemHostAlloc", FHostAlloc),
            cuMemFreeHost: f!("cuMemFreeHost", FFreeHost),
            cuMemHostGetDevicePointer: f!("cuMemHostGetDevicePointer", FDevPtr),
            cuModuleLoadData: f!("cuModuleLoadData", FModLoad),
            cuModuleGetFunction: f!("cuModuleGetFunction", FModFunc),
            cuCtxGetStreamPriorityRange: f!("cuCtxGetStreamPriorityRange", FPrio),
            cuStreamCreateWithPriority: f!("cuStreamCreateWithPriority", FStream),
            cuLaunchKernel: f!("cuLaunchKernel", FLaunch),
        };
        Ok(Driver { fns })
    }
}

/// Host-mapped pinned memory allocated with `cuMemHostAlloc(DEVICEMAP)`.
pub struct MappedBuffer {
    ptr: *mut u8,
    len: usize,
    device: CUdeviceptr,
    free: unsafe extern "C" fn(*mut c_void) -> c_int,
}

// SAFETY: the buffer is plain pinned host memory, accessed only through atomics.
unsafe impl Send for MappedBuffer {}
// SAFETY: as above.
unsafe impl Sync for MappedBuffer {}

impl MappedBuffer {
    fn alloc(d: &Driver, len: usize) -> Result<MappedBuffer, CudaError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: driver call with a valid out pointer; PORTABLE (1) | DEVICEMAP (2).
        check("cuMemHostAlloc", unsafe {
            (d.fns.cuMemHostAlloc)(&mut p, len, 0x1 | 0x2)
        })?;
        let mut dev: CUdeviceptr = 0;
        // SAFETY: p is the mapped allocation just made.
        check("cuMemHostGetDevicePointer", unsafe {
            (d.fns.cuMemHostGetDevicePointer)(&mut dev, p, 0)
        })?;
        // SAFETY: p points to len writable bytes owned by us; zero them.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, len) };
        Ok(MappedBuffer {
            ptr: p as *mut u8,
            len,
            device: dev,
            free: d.fns.cuMemFreeHost,
        })
    }

    /// Device address of the buffer.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }

    fn at<T>(&self, off: usize) -> *mut T {
        assert!(
            off + std::mem::size_of::<T>() <= self.len
                && off.is_multiple_of(std::mem::align_of::<T>())
        );
        // SAFETY: bounds and alignment checked just above.
        unsafe { self.ptr.add(off) as *mut T }
    }
}

impl EventBuffer for MappedBuffer {
    fn load_u64(&self, off: usize) -> u64 {
        // SAFETY: in-bounds, aligned; the GPU writes concurrently, so the load is atomic.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.at(off)) }
            .load(std::sync::atomic::Ordering::Acquire)
    }
    fn load_u32(&self, off: usize) -> u32 {
        // SAFETY: as above.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.at(off)) }
            .load(std::sync::atomic::Ordering::Acquire)
    }
    fn read(&self, off: usize, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: in-bounds byte (checked by `at`), atomic load.
            *d = unsafe { std::sync::atomic::AtomicU8::from_ptr(self.at(off + i)) }
                .load(std::sync::atomic::Ordering::Relaxed);
        }
    }
    fn store_u64(&self, off: usize, v: u64) {
        // SAFETY: in-bounds, aligned, atomic store into our own buffer.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.at(off)) }
            .store(v, std::sync::atomic::Ordering::Release)
    }
    fn store_u32(&self, off: usize, v: u32) {
        // SAFETY: as above.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.at(off)) }
            .store(v, std::sync::atomic::Ordering::Release)
    }
}

/// Launch parameters of the device poller.
#[derive(Clone, Copy, Debug)]
pub struct DevicePollerConfig {
    /// Events in the host-mapped ring (power of two).
    pub capacity: u32,
    /// Threads in the one block.
    pub threads: u32,
    /// Period of the kernel's CLOCK heartbeat events (ns of %globaltimer; 0 = none).
    pub clock_period_ns: u64,
    /// Device ordinal.
    pub device: i32,
}

impl Default for DevicePollerConfig {
    fn default() -> Self {
        DevicePollerConfig {
            capacity: 1 << 16,
            threads: 128,
            clock_period_ns: 10_000_000,
            device: 0,
        }
    }
}

/// The running device-side poller: one persistent block on its own non-blocking,
/// lowest-priority stream, plus its host-mapped event ring.
pub struct DevicePoller {
    ring: MappedBuffer,
    watches: MappedBuffer,
    stream: CUstream,
    function: CUfunction,
    drain: DeviceDrain,
    config: DevicePollerConfig,
    stopped: bool,
}

// SAFETY: the stream and function handles are process-wide driver handles, usable from any
// thread with the context current.
unsafe impl Send for DevicePoller {}

impl DevicePoller {
    /// Loads the poller PTX and launches it on `queues` (their addresses must be device
    /// addresses: GPU memory, or host memory mapped for the device).
    pub fn start(
        d: &Driver,
        queues: Vec<QueueDesc>,
        config: DevicePollerConfig,
        clock: ClockMap,
    ) -> Result<DevicePoller, CudaError> {
        let watch: Vec<Watch> = queues
            .iter()
            .filter_map(|q| Watch::for_queue(q, 0))
            .collect();
        if watch.is_empty() {
            return Err(CudaError::NoQueues);
        }
        let f = &d.fns;
        let mut dev: CUdevice = 0;
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: driver calls with valid out pointers; the process already initialised CUDA
        // (cuInit is idempotent), we only join the primary context.
        unsafe {
            check("cuInit", (f.cuInit)(0))?;
            check("cuDeviceGet", (f.cuDeviceGet)(&mut dev, config.device))?;
            check(
                "cuDevicePrimaryCtxRetain",
                (f.cuDevicePrimaryCtxRetain)(&mut ctx, dev),
            )?;
            check("cuCtxSetCurrent", (f.cuCtxSetCurrent)(ctx))?;
        }
        let ring = MappedBuffer::alloc(d, device::ring_bytes(config.capacity))?;
        device::init_header(&ring, config.capacity);
        let watches = MappedBuffer::alloc(d, watch.len() * device::WATCH_BYTES)?;
        for (i, w) in watch.iter().enumerate() {
            let b = w.encode();
            for k in (0..device::WATCH_BYTES).step_by(8) {
                watches.store_u64(
                    i * device::WATCH_BYTES + k,
                    u64::from_ne_bytes(b[k..k + 8].try_into().expect("8")),
                );
            }
        }
        let ptx = CString::new(device::ptx::POLLER).expect("PTX has no NUL");
        let entry = CString::new(device::ptx::POLLER_ENTRY).expect("entry");
        let mut module: CUmodule = std::ptr::null_mut();
        let mut function: CUfunction = std::ptr::null_mut();
        let (mut least, mut greatest) = (0, 0);
        let mut stream: CUstream = std::ptr::null_mut();
        // SAFETY: driver calls with valid pointers; the PTX string outlives the call.
        unsafe {
            check(
                "cuModuleLoadData",
                (f.cuModuleLoadData)(&mut module, ptx.as_ptr() as *const c_void),
            )?;
            check(
                "cuModuleGetFunction",
                (f.cuModuleGetFunction)(&mut function, module, entry.as_ptr()),
            )?;
            check(
                "cuCtxGetStreamPriorityRange",
                (f.cuCtxGetStreamPriorityRange)(&mut least, &mut greatest),
            )?;
            // CU_STREAM_NON_BLOCKING = 1; `least` is the lowest priority.
            check(
                "cuStreamCreateWithPriority",
                (f.cuStreamCreateWithPriority)(&mut stream, 1, least),
            )?;
        }
        let mut a_watch: u64 = watches.device_ptr();
        let mut a_n: u32 = watch.len() as u32;
        let mut a_hdr: u64 = ring.device_ptr();
        let mut a_ev: u64 = ring.device_ptr() + device::HEADER_BYTES as u64;
        let mut a_period: u64 = config.clock_period_ns;
        let mut params: [*mut c_void; 5] = [
            &mut a_watch as *mut u64 as *mut c_void,
            &mut a_n as *mut u32 as *mut c_void,
            &mut a_hdr as *mut u64 as *mut c_void,
            &mut a_ev as *mut u64 as *mut c_void,
            &mut a_period as *mut u64 as *mut c_void,
        ];
        // SAFETY: kernel parameters match sigmatrace_device_poller(StWatch*, u32,
        // StRingHeader*, StEvent*, u64); the pointed-to values outlive the launch call.
        check("cuLaunchKernel", unsafe {
            (f.cuLaunchKernel)(
                function as u64,
                1,
                1,
                1,
                config.threads,
                1,
                1,
                0,
                stream as u64,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })?;
        let drain = DeviceDrain::new(
            queues
                .into_iter()
                .filter(|q| !matches!(q, QueueDesc::Uar(_)))
                .collect(),
            config.capacity,
            clock,
        );
        Ok(DevicePoller {
            ring,
            watches,
            stream,
            function,
            drain,
            config,
            stopped: false,
        })
    }

    /// Drains published events into observations.
    pub fn drain(&mut self, out: &mut dyn FnMut(Observation)) -> usize {
        self.drain.drain(&self.ring, &self.watches, out)
    }

    /// Takes a GPU/host clock pair from the running kernel (bounded wait) and feeds the
    /// drain's clock map.
    pub fn sample_clock(&mut self, ts: &Timestamper, spins: u64) -> Option<GpuClockPair> {
        let p = device::sample_clock(&self.ring, ts, self.config.device as u32, spins)?;
        self.drain.clock.add(&p);
        Some(p)
    }

    /// The host-mapped event ring (tests emulate the kernel on it when no GPU runs it).
    pub fn event_ring(&self) -> &MappedBuffer {
        &self.ring
    }

    /// The host-mapped watch list.
    pub fn watch_list(&self) -> &MappedBuffer {
        &self.watches
    }

    /// The stream and function handles (for logging the launch).
    pub fn handles(&self) -> (u64, u64) {
        (self.stream as u64, self.function as u64)
    }

    /// Drain counters.
    pub fn stats(&self) -> device::DrainStats {
        self.drain.stats
    }

    /// Asks the kernel to exit and waits (bounded) for it to say so; returns whether it did.
    pub fn stop(&mut self, spins: u64) -> bool {
        self.ring.store_u32(device::hdr::STOP, 1);
        for _ in 0..spins {
            if self.ring.load_u32(device::hdr::RUNNING) == 2 {
                self.stopped = true;
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }
}

impl Drop for DevicePoller {
    fn drop(&mut self) {
        if self.stopped {
            // SAFETY: the kernel has exited, nothing on the device writes these buffers now;
            // each was allocated by cuMemHostAlloc and is freed once.
            unsafe {
                (self.ring.free)(self.ring.ptr as *mut c_void);
                (self.watches.free)(self.watches.ptr as *mut c_void);
            }
        }
        // Otherwise the kernel may still write them: leaking is the only safe choice.
    }
}
