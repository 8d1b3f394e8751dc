fn main() {
    // The double answers to the real driver's SONAME so `dlopen("libcuda.so.1")` and
    // `dlopen(..., RTLD_NOLOAD)` find it.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
