//! The Nsight Systems exports in `fixtures/nsys/` (two runs of one CUDA program, see that
//! folder's README) and what the tests of the nsys reader and of the converter know of them.

use std::path::PathBuf;

use crate::artifacts::workspace_root;

/// A fixture from `fixtures/nsys/`, or from `$SIGMATRACE_NSYS_FIXTURES` when set. Panics with
/// a clear message when it is missing: these tests must never be skipped.
pub fn nsys_fixture(name: &str) -> PathBuf {
    let dir = std::env::var_os("SIGMATRACE_NSYS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("fixtures/nsys"));
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "nsys fixture {} is missing: the repository ships fixtures/nsys/ \
         (or SIGMATRACE_NSYS_FIXTURES pointing at that folder)",
        path.display()
    );
    path
}

/// Runtime API names (version suffix stripped) and how often each is called, the same in
/// both reports (report2 also calls `cudaDeviceSynchronize` once).
pub const NSYS_COMMON_CALLS: [(&str, usize); 13] = [
    ("cudaEventCreate", 2),
    ("cudaEventDestroy", 2),
    ("cudaEventRecord", 2),
    ("cudaEventSynchronize", 1),
    ("cudaFree", 3),
    ("cudaFreeHost", 3),
    ("cudaHostAlloc", 3),
    ("cudaLaunchKernel", 4),
    ("cudaMalloc", 3),
    ("cudaMemcpyAsync", 12),
    ("cudaStreamCreate", 4),
    ("cudaStreamDestroy", 4),
    ("cuModuleGetLoadingMode", 1),
];
