//! Generates verbs bindings from the system's rdma-core headers (libibverbs-dev) and links
//! libibverbs; at run time any libibverbs.so.1 (softnic's included) provides it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-lib=ibverbs");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    bindgen::Builder::default()
        .header_contents("wrapper.h", "#include <infiniband/verbs.h>\n")
        .allowlist_function("ibv_.*")
        .allowlist_type("ibv_.*")
        .allowlist_var("IBV_.*")
        .derive_default(true)
        .prepend_enum_name(false)
        .generate()
        .expect("bindgen on <infiniband/verbs.h> (install libibverbs-dev and libclang-dev: scripts/install-deps.sh)")
        .write_to_file(out.join("verbs.rs"))
        .unwrap();
}
