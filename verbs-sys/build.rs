//! bindgen over the installed rdma-core headers (`wrapper.h`: `<infiniband/verbs.h>` and
//! `<infiniband/mlx5dv.h>` from libibverbs-dev), so every layout is the one the system's
//! libibverbs and libmlx5 use.
//!
//! The allowlists are what the workspace uses: every `ibv_*` / `verbs_*` type, constant and
//! function; the `mlx5dv_*` types the interposer reads (`mlx5dv_qp_ex`, `mlx5dv_obj`, devx umem
//! and UAR) and the example workloads pass (`mlx5dv_qp`, `mlx5dv_cq`, `mlx5dv_pd`); the
//! `mlx5dv_init_obj` and `mlx5dv_devx_*` functions. No link directive: the interposer must not
//! link libibverbs (it finds the real functions with `dlsym`), so users that call functions
//! link the libraries themselves.

fn main() {
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest"));
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let header = manifest.join("wrapper.h");
    println!("cargo:rerun-if-changed={}", header.display());
    bindgen::Builder::default()
        .header(header.display().to_string())
        .allowlist_type("ibv_.*|_ibv_.*|verbs_.*")
        .allowlist_type(
            "mlx5dv_qp_ex|mlx5dv_obj|mlx5dv_obj_type|mlx5dv_qp|mlx5dv_cq|mlx5dv_pd|mlx5dv_devx_.*",
        )
        .allowlist_var("IBV_.*|MLX5DV_OBJ_.*|MLX5DV_UMEM_MASK_.*")
        .allowlist_function("ibv_.*|mlx5dv_init_obj|mlx5dv_devx_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect("bindgen on <infiniband/verbs.h> and <infiniband/mlx5dv.h> (install libibverbs-dev and libclang-dev: scripts/install-deps.sh)")
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");
}
