//! Build script: the versioned entry points of exports.txt and the C test program. The C
//! layouts come from `verbs-sys`'s `rdma_cm` module (bindgen of the installed
//! <rdma/rdma_cma.h>).

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));

    let table = manifest.join("exports.txt");
    softnic_symver::build_exports(&table, &out, "rdmacm", "librdmacm.so.1").expect("export table");
    // ibv_* are called through the dynamic linker: whichever libibverbs.so.1 the process loads
    // (softnic's under softnic-run) serves them.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--push-state,--no-as-needed,-l:libibverbs.so.1,--pop-state");

    // C test programs, linked against the system librdmacm; softnic-run makes them load
    // softnic's at run time.
    let cdir = manifest.join("cprogs");
    println!("cargo:rerun-if-changed={}", cdir.display());
    let bindir = out.join("cprogs");
    std::fs::create_dir_all(&bindir).expect("mkdir cprogs");
    let cc = cc::Build::new().get_compiler();
    let name = "cm_test";
    let src = cdir.join(format!("{name}.c"));
    println!("cargo:rerun-if-changed={}", src.display());
    let status = std::process::Command::new(cc.path())
        .args([
            "-O2",
            "-g",
            "-Wall",
            "-Werror",
            "-std=gnu11",
            "-pthread",
            "-o",
        ])
        .arg(bindir.join(name))
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .status()
        .expect("run C compiler");
    assert!(status.success(), "compiling {} failed", src.display());
    println!("cargo:rustc-env=RDMACM_CPROGS={}", bindir.display());
}
