//! The CUDA driver as the GPU workloads use it, through cudarc's driver bindings
//! (`cudarc::driver::sys`, loaded dynamically: any `libcuda.so.1` — the real driver, or the
//! TEST DOUBLE in `testkit/cuda-double` on machines without a GPU). **Unsafe module (driver
//! FFI).** Host memory the kernels touch is registered with `cuMemHostRegister(DEVICEMAP)`
//! page-merged ([`HostMap`]), posting state lives in device memory ([`DeviceBuf`]).

use std::ffi::{c_char, c_void, CString};

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUfunction, CUmodule, CUresult, CUstream};

/// Driver failures.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no libcuda.so.1 could be loaded (no CUDA driver; for a dry run put the TEST DOUBLE's directory on LD_LIBRARY_PATH)")]
    NoDriver,
    #[error("{call} failed: {code:?}")]
    Call { call: &'static str, code: CUresult },
    #[error("cuMemHostRegister({addr:#x}, {bytes}) failed: {code:?}")]
    Register {
        addr: u64,
        bytes: u64,
        code: CUresult,
    },
    #[error("host address {0:#x} is not in registered memory")]
    NotMapped(u64),
    #[error("{0}")]
    Kernel(String),
}

fn check(call: &'static str, code: CUresult) -> Result<(), GpuError> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Call { call, code })
    }
}

/// `CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP`.
const REGISTER_FLAGS: u32 = 0x1 | 0x2;
const PAGE: u64 = 4096;

/// An open device with its primary context current on the calling thread.
pub struct Gpu {
    pub ordinal: i32,
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    pub total_mem: usize,
    pub driver_version: i32,
    pub can_map_host: bool,
    pub unified_addressing: bool,
    dev: CUdevice,
    ctx: CUcontext,
}

/// A loaded module.
pub struct Module(CUmodule);
/// A kernel of a module.
#[derive(Clone, Copy)]
pub struct Function(CUfunction);
/// A stream.
pub struct Stream(CUstream);

// SAFETY: driver handles are process-wide; the context is made current by `Gpu::bind`.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Send for Stream {}

impl Gpu {
    /// Loads the driver (cudarc's loader), initialises it and retains device `ordinal`'s
    /// primary context.
    pub fn open(ordinal: i32) -> Result<Gpu, GpuError> {
        // SAFETY: probing for the library only (dlopen of candidate names).
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        let mut g = Gpu {
            ordinal,
            name: String::new(),
            cc: (0, 0),
            total_mem: 0,
            driver_version: 0,
            can_map_host: false,
            unified_addressing: false,
            dev: 0,
            ctx: std::ptr::null_mut(),
        };
        let mut name = [0 as c_char; 256];
        let attr = |a: sys::CUdevice_attribute, dev: CUdevice| -> Result<i32, GpuError> {
            let mut v = 0;
            // SAFETY: valid out pointer.
            check("cuDeviceGetAttribute", unsafe {
                sys::cuDeviceGetAttribute(&mut v, a, dev)
            })?;
            Ok(v)
        };
        // SAFETY: driver calls with valid out pointers.
        unsafe {
            check("cuInit", sys::cuInit(0))?;
            check(
                "cuDriverGetVersion",
                sys::cuDriverGetVersion(&mut g.driver_version),
            )?;
            check("cuDeviceGet", sys::cuDeviceGet(&mut g.dev, ordinal))?;
            check(
                "cuDeviceGetName",
                sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, g.dev),
            )?;
            check(
                "cuDeviceTotalMem",
                sys::cuDeviceTotalMem_v2(&mut g.total_mem, g.dev),
            )?;
            check(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut g.ctx, g.dev),
            )?;
            g.name = std::ffi::CStr::from_ptr(name.as_ptr())
                .to_string_lossy()
                .into_owned();
        }
        use sys::CUdevice_attribute as A;
        g.cc = (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g.dev)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g.dev)?,
        );
        g.can_map_host = attr(A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, g.dev)? != 0;
        g.unified_addressing = attr(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, g.dev)? != 0;
        g.bind()?;
        Ok(g)
    }

    /// Makes the context current on the calling thread.
    pub fn bind(&self) -> Result<(), GpuError> {
        // SAFETY: the retained primary context.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    /// Loads PTX (the driver JIT-compiles it for the device).
    pub fn module(&self, ptx: &str) -> Result<Module, GpuError> {
        let c = CString::new(ptx).map_err(|_| GpuError::Kernel("PTX holds a NUL".into()))?;
        let mut m: CUmodule = std::ptr::null_mut();
        // SAFETY: NUL-terminated image that outlives the call.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut m, c.as_ptr() as *const c_void)
        })?;
        Ok(Module(m))
    }

    pub fn function(&self, m: &Module, name: &str) -> Result<Function, GpuError> {
        let c = CString::new(name).map_err(|_| GpuError::Kernel("bad kernel name".into()))?;
        let mut f: CUfunction = std::ptr::null_mut();
        // SAFETY: valid module and name.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, m.0, c.as_ptr())
        })?;
        Ok(Function(f))
    }

    pub fn stream(&self) -> Result<Stream, GpuError> {
        let mut s: CUstream = std::ptr::null_mut();
        // SAFETY: valid out pointer; CU_STREAM_NON_BLOCKING.
        check("cuStreamCreate", unsafe { sys::cuStreamCreate(&mut s, 1) })?;
        Ok(Stream(s))
    }

    /// Zeroed device memory.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuf, GpuError> {
        let mut p = 0;
        // SAFETY: valid out pointer.
        check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut p, bytes.max(8))
        })?;
        let b = DeviceBuf { ptr: p, bytes };
        self.htod_bytes(p, &vec![0u8; bytes])?;
        Ok(b)
    }

    /// Device memory holding `v`.
    pub fn upload<T: Copy>(&self, v: &[T]) -> Result<DeviceBuf, GpuError> {
        let b = self.alloc(std::mem::size_of_val(v))?;
        self.htod(b.ptr, v)?;
        Ok(b)
    }

    pub fn htod_bytes(&self, dst: u64, src: &[u8]) -> Result<(), GpuError> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` is device memory of at least src.len() bytes (caller's allocation).
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(dst, src.as_ptr() as *const c_void, src.len())
        })
    }

    /// Copies plain values (`#[repr(C)]` structs without implicit padding, integers).
    pub fn htod<T: Copy>(&self, dst: u64, src: &[T]) -> Result<(), GpuError> {
        // SAFETY: T is Copy plain data; the byte view covers exactly the slice.
        let b = unsafe {
            std::slice::from_raw_parts(src.as_ptr() as *const u8, std::mem::size_of_val(src))
        };
        self.htod_bytes(dst, b)
    }

    /// Reads device memory back into plain values.
    pub fn dtoh<T: Copy>(&self, src: u64, dst: &mut [T]) -> Result<(), GpuError> {
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `src` is device memory of at least size_of_val(dst) bytes; T is plain data
        // for which every byte pattern the kernel writes is valid.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(
                dst.as_mut_ptr() as *mut c_void,
                src,
                std::mem::size_of_val(dst),
            )
        })
    }

    /// Launches `f` with one parameter (the kernel's argument struct) on a 1-D grid.
    pub fn launch<A: Copy>(
        &self,
        f: Function,
        grid: u32,
        block: u32,
        s: &Stream,
        args: &A,
    ) -> Result<(), GpuError> {
        let mut a = *args;
        let mut params = [&mut a as *mut A as *mut c_void];
        // SAFETY: the kernel takes one parameter of A's layout; the driver copies it before
        // returning.
        unsafe { self.launch_raw(f, grid, block, s, &mut params) }
    }

    /// Launches with raw parameter pointers (kernels with several parameters).
    ///
    /// # Safety
    /// Each pointer addresses a value of the kernel's parameter type, in order.
    pub unsafe fn launch_raw(
        &self,
        f: Function,
        grid: u32,
        block: u32,
        s: &Stream,
        params: &mut [*mut c_void],
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                f.0,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                s.0,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }

    pub fn sync(&self, s: &Stream) -> Result<(), GpuError> {
        // SAFETY: a stream of this context.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(s.0)
        })
    }
}

/// Pinned host memory mapped for the GPU (`cuMemHostAlloc(DEVICEMAP)`), zeroed; freed on drop.
pub struct Pinned {
    ptr: *mut u64,
    words: usize,
    /// Device address.
    pub dev: u64,
}

// SAFETY: plain pinned memory, accessed through atomics only.
unsafe impl Send for Pinned {}
// SAFETY: as above.
unsafe impl Sync for Pinned {}

impl Pinned {
    /// `words` 8-byte words.
    pub fn new(_g: &Gpu, words: usize) -> Result<Pinned, GpuError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out pointer; PORTABLE | DEVICEMAP.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut p, words.max(1) * 8, REGISTER_FLAGS)
        })?;
        // SAFETY: p holds words·8 writable bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, words.max(1) * 8) };
        let mut dev = 0;
        // SAFETY: p is the mapped allocation just made.
        check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0)
        })?;
        Ok(Pinned {
            ptr: p as *mut u64,
            words: words.max(1),
            dev,
        })
    }

    /// Word `i` (the GPU reads and writes it concurrently: atomic access only).
    pub fn word(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(i < self.words);
        // SAFETY: in bounds, 8-byte aligned (cuMemHostAlloc is page-aligned), lives as long as
        // &self.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.ptr.add(i)) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once (after the kernels that used it).
        unsafe { sys::cuMemFreeHost(self.ptr as *mut c_void) };
    }
}

/// Device memory (freed with the process: the workloads allocate once per run).
#[derive(Clone, Copy, Debug)]
pub struct DeviceBuf {
    pub ptr: u64,
    pub bytes: usize,
}

/// Host ranges registered for the GPU (`cuMemHostRegister`, DEVICEMAP), merged to whole
/// pages so that no page is registered twice (the driver refuses that); unregistered on drop.
pub struct HostMap {
    /// (page-aligned start, end, device address of start).
    ranges: Vec<(u64, u64, u64)>,
}

impl HostMap {
    /// Registers every `(address, bytes)` range.
    ///
    /// # Safety
    /// Each range is host memory that stays allocated until the map is dropped.
    pub unsafe fn register(_g: &Gpu, ranges: &[(u64, u64)]) -> Result<HostMap, GpuError> {
        let mut pages: Vec<(u64, u64)> = ranges
            .iter()
            .filter(|r| r.1 > 0)
            .map(|&(a, n)| (a & !(PAGE - 1), (a + n).div_ceil(PAGE) * PAGE))
            .collect();
        pages.sort();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in pages {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let mut m = HostMap { ranges: Vec::new() };
        for (a, b) in merged {
            // SAFETY: page-aligned host range covering caller-owned memory (caller contract).
            let code = unsafe {
                sys::cuMemHostRegister_v2(a as *mut c_void, (b - a) as usize, REGISTER_FLAGS)
            };
            if code != CUresult::CUDA_SUCCESS {
                return Err(GpuError::Register {
                    addr: a,
                    bytes: b - a,
                    code,
                });
            }
            m.ranges.push((a, b, 0));
            let mut d = 0;
            // SAFETY: `a` was registered just above.
            check("cuMemHostGetDevicePointer", unsafe {
                sys::cuMemHostGetDevicePointer_v2(&mut d, a as *mut c_void, 0)
            })?;
            m.ranges.last_mut().expect("pushed").2 = d;
        }
        Ok(m)
    }

    /// The device address of host address `p`.
    pub fn dev(&self, p: u64) -> Result<u64, GpuError> {
        self.ranges
            .iter()
            .find(|r| r.0 <= p && p < r.1)
            .map(|r| r.2 + (p - r.0))
            .ok_or(GpuError::NotMapped(p))
    }

    /// Registered bytes.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.1 - r.0).sum()
    }
}

impl Drop for HostMap {
    fn drop(&mut self) {
        for r in &self.ranges {
            // SAFETY: registered by `register`, unregistered once.
            unsafe { sys::cuMemHostUnregister(r.0 as *mut c_void) };
        }
    }
}
