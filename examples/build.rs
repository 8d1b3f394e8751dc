//! Generates verbs bindings from the system's rdma-core headers (libibverbs-dev) and links
//! libibverbs; at run time any libibverbs.so.1 (softnic's included) provides it.
//!
//! Also generates the `mlx5dv_*` bindings the GPU-initiated-style workloads use
//! (`mlx5dv_init_obj`, devx umem/UAR/object calls) and links libmlx5, as NVSHMEM's IBGDA
//! transport does; the `ibv_*` types they mention come from the verbs bindings.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-lib=ibverbs");
    println!("cargo:rustc-link-lib=mlx5");
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
    bindgen::Builder::default()
        .header_contents("wrapper_mlx5.h", "#include <infiniband/mlx5dv.h>\n")
        .allowlist_function("mlx5dv_init_obj")
        .allowlist_function("mlx5dv_devx_.*")
        .allowlist_type("mlx5dv_(obj|obj_type|qp|cq|pd|devx_.*)")
        .blocklist_type("ibv_.*")
        .blocklist_type("pthread_.*")
        .derive_default(true)
        .prepend_enum_name(false)
        .generate()
        .expect("bindgen on <infiniband/mlx5dv.h> (install libibverbs-dev and libclang-dev: scripts/install-deps.sh)")
        .write_to_file(out.join("mlx5dv.rs"))
        .unwrap();
}
