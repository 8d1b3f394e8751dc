//! The probe resolves and calls every entry point of the TEST DOUBLE through dlopen +
//! dlsym(cuGetProcAddress[_v2]) + cuGetProcAddress, as the CUDA runtime does.

use std::path::PathBuf;
use std::process::Command;

/// target/<profile>/ from the test executable (…/deps/probe-xxxx).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|p| p.parent())
        .expect("target dir")
        .to_path_buf()
}

/// A directory holding `libcuda.so.1` → the built double.
pub fn double_dir() -> tempfile_dir::Dir {
    let lib = target_dir().join("libsigmatrace_cuda_double.so");
    assert!(
        lib.exists(),
        "{} missing: build the workspace first (cargo build --workspace)",
        lib.display()
    );
    let d = tempfile_dir::Dir::new();
    std::os::unix::fs::symlink(&lib, d.path().join("libcuda.so.1")).expect("symlink");
    d
}

mod tempfile_dir {
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            let p = std::env::temp_dir().join(format!(
                "cuda-double-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn probe_resolves_everything_through_cugetprocaddress() {
    let dir = double_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_cuda-double-probe"))
        .arg("--expect-double")
        .env("LD_LIBRARY_PATH", dir.path())
        .output()
        .expect("run probe");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for want in [
        "ok dlsym cuGetProcAddress_v2",
        "ok cuGetProcAddress cuMemAlloc",
        "ok call cuMemHostGetDevicePointer",
        "ok call cuFuncGetName",
        "ok driver version 12090",
        "launch api=1 grid=[2, 1, 1] block=[128, 1, 1] shm=0 stream=0x0 first_param=0xfeedf00d function_ok=true",
        "launch api=2 grid=[3, 1, 1] block=[64, 1, 1] shm=256 stream=0x55 first_param=0xfeedf00d function_ok=true",
        "launch api=3 grid=[4, 1, 1] block=[32, 1, 1]",
        "launch api=4 grid=[0, 0, 0] block=[0, 0, 0] shm=0 stream=0x0 first_param=0x0 function_ok=false",
        "probe: all ok",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}
