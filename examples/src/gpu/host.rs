//! TEST DOUBLE support: when the loaded `libcuda.so.1` is the test double
//! (`testkit/cuda-double`, which exports `sigmatrace_cuda_double_register_kernel`), the host
//! builds of this repository's kernels (`gpu/*.cu` and `observe/gpu/poller.cu` compiled as
//! host C++ over `gpu/host_shim.h` by build.rs) are registered with it, so a launch runs the
//! same kernel source on host threads against softnic's rings. Against a real driver nothing
//! is registered. **Unsafe module (dlsym / C function pointers).**

use std::ffi::{c_char, c_int, c_uint, c_void, CString};

type Launcher = unsafe extern "C" fn(*mut *mut c_void, *const c_uint, *const c_uint) -> c_int;
type Register = unsafe extern "C" fn(*const c_char, Option<Launcher>, *const u64) -> c_int;

// The host entries build.rs compiles: `<kernel>_host` (launcher) and `<kernel>_params` (sizes
// of the kernel's parameters, 0-terminated).
extern "C" {
    fn sigmatrace_bfs_host(p: *mut *mut c_void, g: *const c_uint, b: *const c_uint) -> c_int;
    static sigmatrace_bfs_params: [u64; 2];
    fn sigmatrace_moe_host(p: *mut *mut c_void, g: *const c_uint, b: *const c_uint) -> c_int;
    static sigmatrace_moe_params: [u64; 2];
    fn sigmatrace_smoke_add_host(p: *mut *mut c_void, g: *const c_uint, b: *const c_uint) -> c_int;
    static sigmatrace_smoke_add_params: [u64; 2];
    fn sigmatrace_smoke_mapped_host(
        p: *mut *mut c_void,
        g: *const c_uint,
        b: *const c_uint,
    ) -> c_int;
    static sigmatrace_smoke_mapped_params: [u64; 2];
    fn sigmatrace_clock_probe_host(
        p: *mut *mut c_void,
        g: *const c_uint,
        b: *const c_uint,
    ) -> c_int;
    static sigmatrace_clock_probe_params: [u64; 2];
    fn sigmatrace_flood_host(p: *mut *mut c_void, g: *const c_uint, b: *const c_uint) -> c_int;
    static sigmatrace_flood_params: [u64; 2];
    fn sigmatrace_device_poller_host(
        p: *mut *mut c_void,
        g: *const c_uint,
        b: *const c_uint,
    ) -> c_int;
    static sigmatrace_device_poller_params: [u64; 6];
}

/// Byte size of the (single) parameter of each one-struct kernel, as the C++ host build sees
/// it: the Rust argument structs are checked against these.
pub fn param_size(kernel: &str) -> Option<u64> {
    // SAFETY: constant arrays defined by the host build.
    unsafe {
        Some(match kernel {
            "sigmatrace_bfs" => sigmatrace_bfs_params[0],
            "sigmatrace_moe" => sigmatrace_moe_params[0],
            "sigmatrace_smoke_add" => sigmatrace_smoke_add_params[0],
            "sigmatrace_smoke_mapped" => sigmatrace_smoke_mapped_params[0],
            "sigmatrace_clock_probe" => sigmatrace_clock_probe_params[0],
            "sigmatrace_flood" => sigmatrace_flood_params[0],
            _ => return None,
        })
    }
}

/// Whether the loaded libcuda is the TEST DOUBLE; if so, registers every host kernel with it.
/// Call after the driver was loaded ([`super::driver::Gpu::open`]).
pub fn register_with_test_double() -> bool {
    let name = CString::new("libcuda.so.1").expect("static");
    // SAFETY: RTLD_NOLOAD only finds an already loaded library.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return false;
    }
    let sym = CString::new("sigmatrace_cuda_double_register_kernel").expect("static");
    // SAFETY: valid handle and name.
    let f = unsafe { libc::dlsym(h, sym.as_ptr()) };
    if f.is_null() {
        return false;
    }
    // SAFETY: the double's registration function has this signature (testkit/cuda-double).
    let register: Register = unsafe { std::mem::transmute::<*mut c_void, Register>(f) };
    // SAFETY: the host build's constant arrays are 0-terminated.
    let table: [(&str, Launcher, *const u64); 7] = unsafe {
        [
            (
                "sigmatrace_bfs",
                sigmatrace_bfs_host as Launcher,
                sigmatrace_bfs_params.as_ptr(),
            ),
            (
                "sigmatrace_moe",
                sigmatrace_moe_host,
                sigmatrace_moe_params.as_ptr(),
            ),
            (
                "sigmatrace_smoke_add",
                sigmatrace_smoke_add_host,
                sigmatrace_smoke_add_params.as_ptr(),
            ),
            (
                "sigmatrace_smoke_mapped",
                sigmatrace_smoke_mapped_host,
                sigmatrace_smoke_mapped_params.as_ptr(),
            ),
            (
                "sigmatrace_clock_probe",
                sigmatrace_clock_probe_host,
                sigmatrace_clock_probe_params.as_ptr(),
            ),
            (
                "sigmatrace_flood",
                sigmatrace_flood_host,
                sigmatrace_flood_params.as_ptr(),
            ),
            (
                "sigmatrace_device_poller",
                sigmatrace_device_poller_host,
                sigmatrace_device_poller_params.as_ptr(),
            ),
        ]
    };
    for (n, l, sizes) in table {
        let c = CString::new(n).expect("kernel name");
        // SAFETY: valid name, launcher and 0-terminated sizes.
        unsafe { register(c.as_ptr(), Some(l), sizes) };
    }
    true
}
