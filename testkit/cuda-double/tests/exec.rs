//! The TEST DOUBLE's kernel execution and host-registration rules (src/exec.rs), driven
//! through the C ABI as a program would: a registered host build runs asynchronously on a
//! copy of its parameters, launches on one stream run in order, synchronisation waits and
//! reports a failed launcher; `cuMemHostRegister` refuses a page twice,
//! `cuMemHostGetDevicePointer` refuses unregistered memory; the simulated `%globaltimer` runs
//! 3 s ahead of CLOCK_REALTIME.
//! One test function: the double's state is process-wide.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};

// The driver's launch signature (the one definition); this test calls only cuLaunchKernel.
use sigmatrace_cuda_abi::LaunchKernelFn;

fn lib() -> *mut c_void {
    let exe = std::env::current_exe().expect("current_exe");
    let target = exe.parent().and_then(|p| p.parent()).expect("target dir");
    let path = target.join("libsigmatrace_cuda_double.so");
    assert!(
        path.exists(),
        "{} missing: cargo build --workspace",
        path.display()
    );
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: loading the test double by path.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null());
    h
}

/// The double's export `name`, as the function-pointer type `F` the caller stores it in.
fn sym<F: Copy>(h: *mut c_void, name: &str) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let c = CString::new(name).unwrap();
    // SAFETY: valid handle and name.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    assert!(!p.is_null(), "{name} missing");
    // SAFETY: the double's export has the C signature `F` (a function pointer, same size).
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

/// Sum of every (thread index + parameter) the host kernel saw; threads that ran.
static SUM: AtomicU64 = AtomicU64::new(0);
static RAN: AtomicU64 = AtomicU64::new(0);
/// Order of the launches on one stream (each appends its parameter).
static ORDER: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn launcher(
    p: *mut *mut c_void,
    grid: *const c_uint,
    block: *const c_uint,
) -> c_int {
    // SAFETY: one 8-byte parameter (registered size); grid/block point at 3 values each.
    let (v, g, b) = unsafe { (*(*p as *const u64), *grid, *block) };
    std::thread::sleep(std::time::Duration::from_millis(20));
    for t in 0..g * b {
        SUM.fetch_add(v + t as u64, Ordering::SeqCst);
        RAN.fetch_add(1, Ordering::SeqCst);
    }
    ORDER.lock().unwrap().push(v);
    if v == 666 {
        1
    } else {
        0
    }
}

type Launcher = unsafe extern "C" fn(*mut *mut c_void, *const c_uint, *const c_uint) -> c_int;

/// The double's entry points this test calls.
struct Double {
    init: unsafe extern "C" fn(c_uint) -> c_int,
    load: unsafe extern "C" fn(*mut u64, *const c_void) -> c_int,
    getf: unsafe extern "C" fn(*mut u64, u64, *const c_char) -> c_int,
    register: unsafe extern "C" fn(*const c_char, Option<Launcher>, *const u64) -> c_int,
    launch: LaunchKernelFn,
    sync: unsafe extern "C" fn(u64) -> c_int,
    hreg: unsafe extern "C" fn(u64, usize, c_uint) -> c_int,
    hunreg: unsafe extern "C" fn(u64) -> c_int,
    devptr: unsafe extern "C" fn(*mut u64, u64, c_uint) -> c_int,
    gt: unsafe extern "C" fn() -> u64,
}

impl Double {
    fn open() -> Double {
        let h = lib();
        Double {
            init: sym(h, "cuInit"),
            load: sym(h, "cuModuleLoadData"),
            getf: sym(h, "cuModuleGetFunction"),
            register: sym(h, "sigmatrace_cuda_double_register_kernel"),
            launch: sym(h, "cuLaunchKernel"),
            sync: sym(h, "cuStreamSynchronize"),
            hreg: sym(h, "cuMemHostRegister_v2"),
            hunreg: sym(h, "cuMemHostUnregister"),
            devptr: sym(h, "cuMemHostGetDevicePointer_v2"),
            gt: sym(h, "sigmatrace_cuda_double_globaltimer"),
        }
    }

    /// Loads a module and returns `(k_host, k_recorded_only)`: the first with `launcher` as
    /// its registered host build (one 8-byte parameter), the second without one.
    fn functions(&self) -> (u64, u64) {
        let (init, load, getf, register) = (self.init, self.load, self.getf, self.register);
        // SAFETY: C calls into the double with valid pointers throughout.
        unsafe {
            assert_eq!(init(0), 0);
            let ptx = CString::new(".version 8.0").unwrap();
            let (mut m, mut f, mut other) = (0u64, 0u64, 0u64);
            assert_eq!(load(&mut m, ptx.as_ptr() as *const c_void), 0);
            let name = CString::new("k_host").unwrap();
            assert_eq!(getf(&mut f, m, name.as_ptr()), 0);
            let unreg = CString::new("k_recorded_only").unwrap();
            assert_eq!(getf(&mut other, m, unreg.as_ptr()), 0);
            let sizes = [8u64, 0];
            assert_eq!(register(name.as_ptr(), Some(launcher), sizes.as_ptr()), 0);
            (f, other)
        }
    }

    fn launches_run_in_order(&self, f: u64, other: u64) {
        let (launch, sync) = (self.launch, self.sync);
        // SAFETY: C calls into the double with valid pointers throughout.
        unsafe {
            // Two launches on one stream: parameters copied at launch (the local changes
            // right after), run in order, asynchronously (nothing ran when launch returned).
            let stream = 0x5eu64;
            let mut arg = 1000u64;
            let argp = &mut arg as *mut u64;
            let mut params = [argp as *mut c_void];
            let z = std::ptr::null_mut();
            assert_eq!(
                launch(f, 2, 1, 1, 3, 1, 1, 0, stream, params.as_mut_ptr(), z),
                0
            );
            argp.write(2000);
            assert_eq!(
                launch(f, 1, 1, 1, 2, 1, 1, 0, stream, params.as_mut_ptr(), z),
                0
            );
            argp.write(7);
            assert_eq!(RAN.load(Ordering::SeqCst), 0, "asynchronous");
            assert_eq!(sync(stream), 0);
            assert_eq!(RAN.load(Ordering::SeqCst), 6 + 2);
            assert_eq!(SUM.load(Ordering::SeqCst), (6 * 1000 + 15) + (2 * 2000 + 1));
            assert_eq!(*ORDER.lock().unwrap(), vec![1000, 2000]);
            // A kernel without a host build is only recorded.
            assert_eq!(
                launch(other, 1, 1, 1, 1, 1, 1, 0, stream, params.as_mut_ptr(), z),
                0
            );
            assert_eq!(sync(stream), 0);
            assert_eq!(RAN.load(Ordering::SeqCst), 8);
            // A failing launcher is reported by the synchronisation (CUDA_ERROR_LAUNCH_FAILED).
            let mut bad = 666u64;
            let mut bp = [&mut bad as *mut u64 as *mut c_void];
            assert_eq!(
                launch(f, 1, 1, 1, 1, 1, 1, 0, stream, bp.as_mut_ptr(), z),
                0
            );
            assert_eq!(sync(stream), 719);
        }
    }

    /// Host registration: whole pages, never twice; device pointers only inside.
    fn host_registration_rules(&self) {
        let (hreg, hunreg, devptr) = (self.hreg, self.hunreg, self.devptr);
        // SAFETY: C calls into the double with valid pointers throughout.
        unsafe {
            let buf = vec![0u8; 4 * 4096];
            let base = (buf.as_ptr() as u64 + 4095) & !4095;
            let mut d = 0u64;
            assert_eq!(
                devptr(&mut d, base + 16, 0),
                1,
                "unregistered memory has no device pointer"
            );
            assert_eq!(hreg(base + 100, 200, 2), 0);
            assert_eq!(hreg(base + 1000, 8, 2), 712, "same page registered twice");
            assert_eq!(hreg(base + 4096, 8, 2), 0, "the next page is free");
            assert_eq!(
                devptr(&mut d, base + 4000, 0),
                0,
                "inside the registered page"
            );
            assert_eq!(d, base + 4000);
            assert_eq!(hunreg(base), 713, "not a registered base address");
            assert_eq!(hunreg(base + 100), 0);
            assert_eq!(hunreg(base + 4096), 0);
            assert_eq!(devptr(&mut d, base + 4000, 0), 1);
        }
    }

    /// %globaltimer: 3 s ahead of CLOCK_REALTIME (default offset), 32 ns steps, monotone.
    fn globaltimer_runs_ahead(&self) {
        let rt = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128;
        // SAFETY: a C call without arguments.
        let (a, b) = unsafe { ((self.gt)(), (self.gt)()) };
        assert!(b >= a && a % 32 == 0);
        let off = a as i128 - rt;
        assert!(
            (2_990_000_000..3_010_000_000).contains(&off),
            "offset {off} ns"
        );
    }
}

#[test]
fn host_kernels_registration_rules_and_globaltimer() {
    let d = Double::open();
    let (f, other) = d.functions();
    d.launches_run_in_order(f, other);
    d.host_registration_rules();
    d.globaltimer_runs_ahead();
}
