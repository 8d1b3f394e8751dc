//! The embedded workload PTX carries the kernels the constants name (that the PTX assembles
//! and matches its .cu source is checked by observe's `ptx` test, which runs
//! `observe/gpu/check-ptx.sh` over every kernel of the repository).

use sigmatrace_examples::kernels;

#[test]
fn embedded_ptx_has_the_workload_kernels() {
    assert!(kernels::BFS_PTX.contains(&format!(".entry {}", kernels::BFS_ENTRY)));
    assert!(kernels::MOE_PTX.contains(&format!(".entry {}", kernels::MOE_ENTRY)));
    for e in kernels::SMOKE_ENTRIES {
        assert!(kernels::SMOKE_PTX.contains(&format!(".entry {e}")), "{e}");
    }
    // Both post WQEs IBGDA-style: a system-scope fence orders the WQE and DBR stores before
    // the doorbell store.
    for ptx in [kernels::BFS_PTX, kernels::MOE_PTX] {
        assert!(ptx.contains("membar.sys") || ptx.contains(".sys;"));
    }
}
