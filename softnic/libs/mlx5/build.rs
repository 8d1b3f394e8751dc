//! Generates libmlx5.so.1's versioned trampolines from ../../exports/mlx5.txt.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let table = manifest.join("../../exports/mlx5.txt");
    softnic_symver::build_exports(&table, &out, "mlx5", "libmlx5.so.1").expect("export table");
    // The sv_mlx5dv_* targets live in softnic's libibverbs.so.1: record it as NEEDED (linked
    // against the system copy only to name the dependency; at run time softnic-run's
    // LD_LIBRARY_PATH selects softnic's).
    println!("cargo:rustc-cdylib-link-arg=-Wl,--push-state,--no-as-needed,-l:libibverbs.so.1,--pop-state");
}
