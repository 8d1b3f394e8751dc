//! Build script: the C test and benchmark programs in cprogs/ (linked against the system
//! libibverbs; tests run them under LD_PRELOAD, on softnic or on the fake device they build
//! themselves). The rdma-core layouts the hooks read come from the `verbs-sys` crate.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));

    build_c_programs(&manifest.join("cprogs"), &out.join("cprogs"));
}

/// Compiles every cprogs/*.c into OUT_DIR/cprogs/<stem> (loopback.c and cuda_app.c twice, see
/// below).
fn build_c_programs(src_dir: &Path, bin_dir: &Path) {
    println!("cargo:rerun-if-changed={}", src_dir.display());
    std::fs::create_dir_all(bin_dir).expect("mkdir cprogs");
    let cc = cc::Build::new().get_compiler();
    let mut sources: Vec<PathBuf> = std::fs::read_dir(src_dir)
        .expect("read cprogs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    sources.sort();
    for src in &sources {
        println!("cargo:rerun-if-changed={}", src.display());
    }
    for src in sources
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
    {
        let stem = src.file_stem().and_then(|s| s.to_str()).expect("stem");
        if stem == "loopback" {
            // NCCL-style twin: one binary links libibverbs, the other only dlopen()s it.
            let linked = bin_dir.join("loopback_linked");
            compile(cc.path(), src, src_dir, &linked, &["-libverbs", "-ldl"]);
            let dlopen = bin_dir.join("loopback_dlopen");
            compile(cc.path(), src, src_dir, &dlopen, &["-DUSE_DLOPEN", "-ldl"]);
        } else if stem == "cuda_app" {
            // The CUDA-runtime way (dlopen + cuGetProcAddress), and linked by symbol against a
            // link-time stub libcuda.so (like the toolkit's stubs/libcuda.so); at run time the
            // loader finds the real libcuda.so.1 (in tests: the test double).
            let dlopen = bin_dir.join("cuda_app_dlopen");
            compile(cc.path(), src, src_dir, &dlopen, &["-ldl"]);
            let stub_dir = bin_dir.join("cuda-stub");
            build_cuda_stub(cc.path(), &stub_dir);
            let linked = bin_dir.join("cuda_app_linked");
            let l = format!("-L{}", stub_dir.display());
            compile(
                cc.path(),
                src,
                src_dir,
                &linked,
                &["-DLINKED", &l, "-lcuda", "-ldl"],
            );
        } else if stem == "ibgda" {
            let libs = ["-libverbs", "-lmlx5", "-ldl"];
            compile(cc.path(), src, src_dir, &bin_dir.join(stem), &libs);
        } else {
            let libs = ["-libverbs", "-ldl", "-lpthread"];
            compile(cc.path(), src, src_dir, &bin_dir.join(stem), &libs);
        }
    }
}

/// A link-time stub `libcuda.so` (SONAME `libcuda.so.1`) defining the driver names
/// cuda_app.c calls; never loaded at run time.
fn build_cuda_stub(cc: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir cuda-stub");
    let names = [
        "cuInit",
        "cuDeviceGet",
        "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent",
        "cuStreamCreateWithPriority",
        "cuStreamSynchronize",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemHostAlloc",
        "cuMemFreeHost",
        "cuMemHostRegister_v2",
        "cuMemHostUnregister",
        "cuMemHostGetDevicePointer_v2",
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cuGraphCreate",
        "cuGraphInstantiateWithFlags",
        "cuGraphLaunch",
        "cuGraphExecDestroy",
        "cuGraphDestroy",
    ];
    let src: String = names
        .iter()
        .map(|n| format!("int {n}(void) {{ return 999; }}\n"))
        .collect();
    let c = dir.join("stub.c");
    std::fs::write(&c, src).expect("write stub.c");
    let status = Command::new(cc)
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(dir.join("libcuda.so"))
        .arg(&c)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "building the CUDA link stub failed");
}

fn compile(cc: &Path, src: &Path, include: &Path, out: &Path, extra: &[&str]) {
    let status = Command::new(cc)
        .args(["-O2", "-g", "-Wall", "-Werror", "-std=gnu11", "-o"])
        .arg(out)
        .arg(src)
        .arg(format!("-I{}", include.display()))
        .args(extra)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling {} failed", src.display());
}
