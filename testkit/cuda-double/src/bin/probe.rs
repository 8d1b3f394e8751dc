//! Probe for the libcuda.so.1 TEST DOUBLE (or any libcuda.so.1): dlopens `libcuda.so.1`
//! (found through the loader path, e.g. LD_LIBRARY_PATH), resolves `cuGetProcAddress_v2`
//! (else `cuGetProcAddress`) with dlsym, then fetches every other entry point through it the
//! way the CUDA runtime does and calls them. Prints one `ok <what>` line per step; exits 1 on
//! the first failure. `--expect-double` also checks the double's own launch records.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

#[path = "../abi.rs"]
mod abi;
use abi::{
    GraphLaunchFn, LaunchConfig, LaunchCooperativeKernelFn, LaunchKernelExFn, LaunchKernelFn,
    LaunchRecord,
};

type GetProc =
    unsafe extern "C" fn(*const c_char, *mut *const c_void, c_int, u64, *mut c_int) -> c_int;
type GetProcV1 = unsafe extern "C" fn(*const c_char, *mut *const c_void, c_int, u64) -> c_int;

struct Lib {
    handle: *mut c_void,
    v2: Option<GetProc>,
    v1: Option<GetProcV1>,
}

fn fail(msg: String) -> ! {
    eprintln!("FAIL {msg}");
    std::process::exit(1)
}

impl Lib {
    fn open() -> Lib {
        let name = CString::new("libcuda.so.1").expect("name");
        // SAFETY: dlopen with a valid C string.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            fail("dlopen(libcuda.so.1)".into());
        }
        println!("ok dlopen libcuda.so.1");
        let sym = |n: &str| {
            let c = CString::new(n).expect("name");
            // SAFETY: valid handle and C string.
            unsafe { libc::dlsym(handle, c.as_ptr()) }
        };
        let p2 = sym("cuGetProcAddress_v2");
        let p1 = sym("cuGetProcAddress");
        if p2.is_null() && p1.is_null() {
            fail("dlsym(cuGetProcAddress[_v2])".into());
        }
        println!(
            "ok dlsym cuGetProcAddress{}",
            if p2.is_null() { "" } else { "_v2" }
        );
        Lib {
            handle,
            // SAFETY: the symbols have these C signatures (CUDA 12 driver API).
            v2: (!p2.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, GetProc>(p2) }),
            // SAFETY: as above.
            v1: (!p1.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut c_void, GetProcV1>(p1) }),
        }
    }

    /// Fetches `name` through cuGetProcAddress (CUDA 12.0 semantics, default flags).
    fn get(&self, name: &str) -> *const c_void {
        let c = CString::new(name).expect("name");
        let mut p: *const c_void = std::ptr::null();
        let mut status = -1;
        // SAFETY: valid C string and out pointers.
        let rc = unsafe {
            match self.v2 {
                Some(f) => f(c.as_ptr(), &mut p, 12000, 0, &mut status),
                None => self.v1.expect("v1")(c.as_ptr(), &mut p, 12000, 0),
            }
        };
        if rc != 0 || p.is_null() {
            fail(format!("cuGetProcAddress({name}) = {rc}"));
        }
        println!("ok cuGetProcAddress {name}");
        p
    }

    fn dlsym(&self, name: &str) -> *mut c_void {
        let c = CString::new(name).expect("name");
        // SAFETY: valid handle and C string.
        unsafe { libc::dlsym(self.handle, c.as_ptr()) }
    }
}

macro_rules! call {
    ($lib:expr, $name:literal, $ty:ty, ($($arg:expr),*)) => {{
        let f: $ty = {
            let p = $lib.get($name);
            // SAFETY: p is the driver entry point `$name`, which has signature `$ty`.
            unsafe { std::mem::transmute::<*const c_void, $ty>(p) }
        };
        // SAFETY: arguments follow the driver API contract for `$name`.
        let rc = unsafe { f($($arg),*) };
        if rc != 0 {
            fail(format!("{} returned {}", $name, rc));
        }
        println!("ok call {}", $name);
    }};
}

fn main() {
    let expect_double = std::env::args().any(|a| a == "--expect-double");
    let lib = Lib::open();
    call!(lib, "cuInit", unsafe extern "C" fn(c_uint) -> c_int, (0));
    let mut ver = 0;
    call!(
        lib,
        "cuDriverGetVersion",
        unsafe extern "C" fn(*mut c_int) -> c_int,
        (&mut ver)
    );
    println!("ok driver version {ver}");
    let (dptr, _page) = memory(&lib);
    let func = kernel(&lib);
    launches(&lib, func);
    graph(&lib);
    call!(lib, "cuMemFree", unsafe extern "C" fn(u64) -> c_int, (dptr));
    // cuGetExportTable is forwarded untouched by hooks; the double has no tables.
    let t = lib.dlsym("cuGetExportTable");
    if t.is_null() {
        fail("dlsym(cuGetExportTable)".into());
    }
    println!("ok dlsym cuGetExportTable");
    if expect_double {
        print_double_launches(&lib, func);
    }
    println!("probe: all ok");
}

/// Device, host-allocated and host-registered memory; the device allocation and the
/// registered page (kept registered while the probe runs).
fn memory(lib: &Lib) -> (u64, Vec<u8>) {
    let mut dptr = 0u64;
    call!(
        lib,
        "cuMemAlloc",
        unsafe extern "C" fn(*mut u64, usize) -> c_int,
        (&mut dptr, 4096)
    );
    let mut host = 0u64;
    call!(
        lib,
        "cuMemHostAlloc",
        unsafe extern "C" fn(*mut u64, usize, c_uint) -> c_int,
        (&mut host, 4096, 0x2)
    );
    let mut alias = 0u64;
    call!(
        lib,
        "cuMemHostGetDevicePointer",
        unsafe extern "C" fn(*mut u64, u64, c_uint) -> c_int,
        (&mut alias, host, 0)
    );
    let page = vec![0u8; 8192];
    call!(
        lib,
        "cuMemHostRegister",
        unsafe extern "C" fn(u64, usize, c_uint) -> c_int,
        (page.as_ptr() as u64, 4096, 0x4)
    );
    (dptr, page)
}

/// A module from PTX and its kernel, whose name the driver must give back.
fn kernel(lib: &Lib) -> u64 {
    let ptx = CString::new(".version 8.0\n.target sm_80\n").expect("ptx");
    let mut module = 0u64;
    call!(
        lib,
        "cuModuleLoadData",
        unsafe extern "C" fn(*mut u64, *const c_void) -> c_int,
        (&mut module, ptx.as_ptr() as *const c_void)
    );
    let kname = CString::new("sigmatrace_probe_kernel").expect("k");
    let mut func = 0u64;
    call!(
        lib,
        "cuModuleGetFunction",
        unsafe extern "C" fn(*mut u64, u64, *const c_char) -> c_int,
        (&mut func, module, kname.as_ptr())
    );
    let mut nm: *const c_char = std::ptr::null();
    call!(
        lib,
        "cuFuncGetName",
        unsafe extern "C" fn(*mut *const c_char, u64) -> c_int,
        (&mut nm, func)
    );
    // SAFETY: the driver returned a NUL-terminated name.
    let got = unsafe { CStr::from_ptr(nm) }.to_string_lossy().into_owned();
    if got != "sigmatrace_probe_kernel" {
        fail(format!("cuFuncGetName gave {got}"));
    }
    func
}

/// The kernel through cuLaunchKernel, cuLaunchKernelEx and cuLaunchCooperativeKernel.
fn launches(lib: &Lib, func: u64) {
    let mut arg: u64 = 0xfeed_f00d;
    let mut params = [&mut arg as *mut u64 as *mut c_void];
    call!(
        lib,
        "cuLaunchKernel",
        LaunchKernelFn,
        (
            func,
            2,
            1,
            1,
            128,
            1,
            1,
            0,
            0,
            params.as_mut_ptr(),
            std::ptr::null_mut()
        )
    );
    let cfg = LaunchConfig {
        grid: [3, 1, 1],
        block: [64, 1, 1],
        shared_mem: 256,
        stream: 0x55,
        attrs: std::ptr::null_mut(),
        num_attrs: 0,
    };
    call!(
        lib,
        "cuLaunchKernelEx",
        LaunchKernelExFn,
        (&cfg, func, params.as_mut_ptr(), std::ptr::null_mut())
    );
    call!(
        lib,
        "cuLaunchCooperativeKernel",
        LaunchCooperativeKernelFn,
        (func, 4, 1, 1, 32, 1, 1, 0, 0, params.as_mut_ptr())
    );
}

/// An (empty) graph created, instantiated, launched on the default stream and destroyed.
fn graph(lib: &Lib) {
    let (mut g, mut exec) = (0u64, 0u64);
    call!(
        lib,
        "cuGraphCreate",
        unsafe extern "C" fn(*mut u64, c_uint) -> c_int,
        (&mut g, 0)
    );
    call!(
        lib,
        "cuGraphInstantiateWithFlags",
        unsafe extern "C" fn(*mut u64, u64, u64) -> c_int,
        (&mut exec, g, 0)
    );
    call!(lib, "cuGraphLaunch", GraphLaunchFn, (exec, 0));
    call!(
        lib,
        "cuGraphExecDestroy",
        unsafe extern "C" fn(u64) -> c_int,
        (exec)
    );
    call!(
        lib,
        "cuGraphDestroy",
        unsafe extern "C" fn(u64) -> c_int,
        (g)
    );
}

/// The double's own record of each launch (`--expect-double`).
fn print_double_launches(lib: &Lib, func: u64) {
    let is = lib.dlsym("sigmatrace_cuda_double_is_test_double");
    let n = lib.dlsym("sigmatrace_cuda_double_launch_count");
    let rec = lib.dlsym("sigmatrace_cuda_double_launch");
    if is.is_null() || n.is_null() || rec.is_null() {
        fail("not the SigmaTrace test double".into());
    }
    // SAFETY: the double's introspection functions have these signatures.
    let (n, rec) = unsafe {
        (
            std::mem::transmute::<*mut c_void, extern "C" fn() -> u64>(n),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(u64, *mut LaunchRecord) -> c_int>(
                rec,
            ),
        )
    };
    for i in 0..n() {
        let mut r = LaunchRecord::default();
        // SAFETY: valid out pointer.
        unsafe { rec(i, &mut r) };
        println!("launch api={} grid={:?} block={:?} shm={} stream={:#x} first_param={:#x} function_ok={}", r.api, r.grid, r.block, r.shared_mem, r.stream, r.first_param, r.function == func);
    }
}
