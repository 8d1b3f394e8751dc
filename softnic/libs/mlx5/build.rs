//! Generates libmlx5.so.1's versioned trampolines from ../../exports/mlx5.txt.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let table_path = manifest.join("../../exports/mlx5.txt");
    println!("cargo:rerun-if-changed={}", table_path.display());
    let table = softnic_symver::Table::load(&table_path).expect("export table");
    let (_asm, map) = table.write(&out, "mlx5").expect("write symver files");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmlx5.so.1");
    // The sv_mlx5dv_* targets live in softnic's libibverbs.so.1: record it as NEEDED (linked
    // against the system copy only to name the dependency; at run time softnic-run's
    // LD_LIBRARY_PATH selects softnic's).
    println!("cargo:rustc-cdylib-link-arg=-Wl,--push-state,--no-as-needed,-l:libibverbs.so.1,--pop-state");
}
