//! Build script: versioned entry points from exports/ibverbs.txt and the C test/benchmark
//! programs in cprogs/. The C layouts come from the `verbs-sys` crate (bindgen of the
//! installed rdma-core headers).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));

    // 1. Versioned exports.
    let table = manifest.join("exports/ibverbs.txt");
    softnic_symver::build_exports(&table, &out, "ibverbs", "libibverbs.so.1")
        .expect("export table");
    println!("cargo:rerun-if-changed=src/verbs/varargs.c");
    cc::Build::new()
        .file(manifest.join("src/verbs/varargs.c"))
        .warnings(true)
        .compile("softnic_varargs");

    // 2. C programs (tests and benchmark), linked against the system libibverbs; at run time
    //    softnic-run makes them load softnic instead.
    let cdir = manifest.join("cprogs");
    println!("cargo:rerun-if-changed={}", cdir.display());
    let bindir = out.join("cprogs");
    std::fs::create_dir_all(&bindir).expect("mkdir cprogs");
    let cc = cc::Build::new().get_compiler();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&cdir)
        .expect("read cprogs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for src in entries {
        println!("cargo:rerun-if-changed={}", src.display());
        if src.extension().and_then(|e| e.to_str()) != Some("c") {
            continue;
        }
        compile_prog(cc.path(), &src, &bindir, &cdir);
    }
    println!("cargo:rustc-env=SOFTNIC_CPROGS={}", bindir.display());
}

fn compile_prog(cc: &Path, src: &Path, bindir: &Path, incdir: &Path) {
    let stem = src.file_stem().and_then(|s| s.to_str()).expect("stem");
    let libs: &[&str] = if stem.starts_with("dv_") {
        &["-libverbs", "-lmlx5", "-lpthread"]
    } else {
        &["-libverbs", "-lpthread"]
    };
    let status = Command::new(cc)
        .args(["-O2", "-g", "-Wall", "-Werror", "-std=gnu11", "-o"])
        .arg(bindir.join(stem))
        .arg(src)
        .arg(format!("-I{}", incdir.display()))
        .args(libs)
        .status()
        .expect("run C compiler");
    assert!(status.success(), "compiling {} failed", src.display());
}
