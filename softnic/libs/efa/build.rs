//! Generates libefa.so.1's versioned trampolines from ../../exports/efa.txt.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let table_path = manifest.join("../../exports/efa.txt");
    println!("cargo:rerun-if-changed={}", table_path.display());
    let table = softnic_symver::Table::load(&table_path).expect("export table");
    let (_asm, map) = table.write(&out, "efa").expect("write symver files");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libefa.so.1");
}
