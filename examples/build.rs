//! Links libibverbs and libmlx5 (as NVSHMEM's IBGDA transport does): the workloads call verbs
//! and `mlx5dv_*` functions whose declarations come from the `verbs-sys` crate. At run time any
//! libibverbs.so.1 (softnic's included) provides them.
//!
//! Also compiles the repository's CUDA kernels (`gpu/*.cu`, `../observe/gpu/poller.cu`) as host
//! C++ over `gpu/host_shim.h` (TEST DOUBLE support: the libcuda test double runs them on host
//! threads; `src/gpu/host.rs`). The PTX the real GPU runs is generated separately (NVRTC).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-lib=ibverbs");
    println!("cargo:rustc-link-lib=mlx5");
    let sources = [
        "gpu/bfs.cu",
        "gpu/moe.cu",
        "gpu/smoke.cu",
        "../observe/gpu/poller.cu",
    ];
    for f in sources
        .iter()
        .chain(&["gpu/host_shim.h", "../observe/gpu/ibgda.cuh"])
    {
        println!("cargo:rerun-if-changed={f}");
    }
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .define("ST_HOST", None)
        .include("gpu")
        .include("../observe/gpu")
        .flag("-xc++")
        .flag_if_supported("-Wno-unused-function")
        .flag_if_supported("-Wno-unused-parameter")
        .files(sources)
        .compile("sigmatrace_gpu_host");
}
