//! Generates libefa.so.1's versioned trampolines from ../../exports/efa.txt.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let table = manifest.join("../../exports/efa.txt");
    softnic_symver::build_exports(&table, &out, "efa", "libefa.so.1").expect("export table");
}
