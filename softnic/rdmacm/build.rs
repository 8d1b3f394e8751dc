//! Build script: bindgen of Debian's <rdma/rdma_cma.h> (exact librdmacm layouts) and the
//! versioned entry points of exports.txt.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));

    println!("cargo:rerun-if-changed=src/wrapper.h");
    let bindings = bindgen::Builder::default()
        .header(manifest.join("src/wrapper.h").display().to_string())
        .allowlist_type("rdma_.*|ibv_.*|_ibv_.*|verbs_context")
        .allowlist_var("RDMA_.*|RAI_.*|IBV_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect("bindgen failed on rdma/rdma_cma.h (is librdmacm-dev installed?)");
    bindings
        .write_to_file(out.join("cma_bindings.rs"))
        .expect("write bindings");

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
        .args(["-O2", "-g", "-Wall", "-Werror", "-std=gnu11", "-o"])
        .arg(bindir.join(name))
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .status()
        .expect("run C compiler");
    assert!(status.success(), "compiling {} failed", src.display());
    println!("cargo:rustc-env=RDMACM_CPROGS={}", bindir.display());
}
