//! The CUDA path never loads libcuda: with none loaded, `Driver::if_loaded` refuses and the
//! process still has no libcuda. Once the "application" has loaded one (here the TEST DOUBLE
//! libcuda.so.1), the device poller resolves entry points through cuGetProcAddress, allocates
//! its host-mapped ring, loads the PTX and launches one block on a low-priority non-blocking
//! stream; the double records the launch (it cannot run it), so a CPU reference pass stands in
//! for the kernel and the drain turns its events into records.
//! One test function: the steps depend on process-wide loader state.

use std::ffi::CString;
use std::path::PathBuf;

use sigmatrace_mlx5::wqe::{opcode, WqeBuilder};
use sigmatrace_observe::cuda::{
    libcuda_loaded, CudaError, DevicePoller, DevicePollerConfig, Driver,
};
use sigmatrace_observe::device::{self, cpu_reference_pass, ClockMap, EventBuffer, Watch};
use sigmatrace_observe::sim::SimSendQueue;
use sigmatrace_observe::Observation;

fn loaded_objects() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5).map(str::to_string))
        .collect()
}

#[test]
fn gate_then_device_poller_on_the_test_double() {
    // 1. Nothing loaded: refuse, and do not load anything.
    assert!(!libcuda_loaded());
    assert!(matches!(Driver::if_loaded(), Err(CudaError::NotLoaded)));
    assert!(!libcuda_loaded(), "the check must not load libcuda");
    assert!(!loaded_objects()
        .iter()
        .any(|p| p.contains("libcuda") || p.contains("cuda_double")));

    // 2. The application loads libcuda.so.1 (the double, via a libcuda.so.1 symlink).
    let exe = std::env::current_exe().unwrap();
    let target: PathBuf = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let lib = target.join("libsigmatrace_cuda_double.so");
    assert!(
        lib.exists(),
        "{} missing: build the workspace first (cargo build --workspace)",
        lib.display()
    );
    // Removed when the test ends, passed or failed (the library stays mapped once loaded).
    let dir = tempfile::Builder::new()
        .prefix("observe-cuda-gate-")
        .tempdir()
        .unwrap();
    let link = dir.path().join("libcuda.so.1");
    std::os::unix::fs::symlink(&lib, &link).unwrap();
    let c = CString::new(link.to_str().unwrap()).unwrap();
    // SAFETY: loading a test library by path, as an application would load its driver.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!h.is_null());
    assert!(libcuda_loaded(), "found by SONAME with RTLD_NOLOAD");
    let drv = Driver::if_loaded().expect("driver entry points through cuGetProcAddress");

    // 3. Start the device poller on a host-resident queue (device address = host address in
    //    the double).
    let mut sq = SimSendQueue::new(0x99, 64);
    let mut dp = DevicePoller::start(
        &drv,
        vec![sq.as_queue()],
        DevicePollerConfig {
            capacity: 256,
            threads: 64,
            ..Default::default()
        },
        ClockMap::new(1.0),
    )
    .unwrap();
    let sym = |n: &str| {
        let c = CString::new(n).unwrap();
        // SAFETY: valid handle and name.
        unsafe { libc::dlsym(h, c.as_ptr()) }
    };
    // SAFETY: the double's introspection function signature.
    let launches: extern "C" fn() -> u64 =
        unsafe { std::mem::transmute(sym("sigmatrace_cuda_double_launch_count")) };
    assert_eq!(launches(), 1);
    #[repr(C)]
    #[derive(Default)]
    struct Rec {
        api: u32,
        grid: [u32; 3],
        block: [u32; 3],
        shm: u32,
        function: u64,
        stream: u64,
        params: u64,
        first: u64,
    }
    // SAFETY: as above.
    let rec: unsafe extern "C" fn(u64, *mut Rec) -> i32 =
        unsafe { std::mem::transmute(sym("sigmatrace_cuda_double_launch")) };
    let mut r = Rec::default();
    // SAFETY: valid out pointer.
    assert_eq!(unsafe { rec(0, &mut r) }, 0);
    let (stream, function) = dp.handles();
    assert_eq!(
        (r.api, r.grid, r.block, r.stream, r.function),
        (1, [1, 1, 1], [64, 1, 1], stream, function)
    );
    assert_eq!(
        r.first,
        dp.watch_list().device_ptr(),
        "first kernel argument = watch list"
    );
    assert_eq!(
        EventBuffer::load_u64(dp.event_ring(), device::hdr::MAGIC),
        device::MAGIC
    );

    // 4. Emulate the kernel on the mapped ring; drain.
    for i in 0..10u32 {
        let b = WqeBuilder::new(opcode::RDMA_WRITE, sq.pi(), 0x99)
            .raddr(0x1000 * i as u64, 7)
            .data(0, 1, 32)
            .finish();
        sq.post(&b);
    }
    let watch = vec![Watch::for_queue(&sq.as_queue(), 0).unwrap()];
    let (mut next, mut lost) = (vec![0u32], vec![0u64]);
    cpu_reference_pass(
        &watch,
        &mut next,
        &mut lost,
        &sq.memory(),
        dp.event_ring(),
        123,
    );
    let mut got = Vec::new();
    dp.drain(&mut |o| {
        if let Observation::Wqe(r, _) = o {
            got.push((r.wqe_index, r.remote_addr))
        }
    });
    assert_eq!(
        got,
        (0..10u16)
            .map(|i| (i, 0x1000 * i as u64))
            .collect::<Vec<_>>()
    );
    // The double runs no kernel: stop() times out and the buffers are deliberately leaked.
    assert!(!dp.stop(1000));
}
