//! Links libibverbs and libmlx5 (as NVSHMEM's IBGDA transport does): the workloads call verbs
//! and `mlx5dv_*` functions whose declarations come from the `verbs-sys` crate. At run time any
//! libibverbs.so.1 (softnic's included) provides them.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-lib=ibverbs");
    println!("cargo:rustc-link-lib=mlx5");
}
