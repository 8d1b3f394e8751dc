//! The device-side poller and the workload kernels assemble for sm_80 and sm_90 (ptxas from
//! the nvidia-cuda-nvcc-cu12 wheel) and the committed PTX matches the .cu sources (NVRTC).
//! Compile check only: no GPU is needed. Fails loudly when the tools are missing.

use std::process::Command;

#[test]
fn ptx_assembles_for_sm80_and_sm90_and_is_up_to_date() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/gpu/check-ptx.sh");
    let out = Command::new("bash")
        .arg(script)
        .output()
        .expect("run check-ptx.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "check-ptx.sh failed:\n{text}");
    assert!(text.contains("6 assemblies ok"), "{text}");
}

#[test]
fn embedded_ptx_has_the_kernels() {
    use sigmatrace_observe::device::ptx;
    assert!(ptx::POLLER.contains(".entry sigmatrace_device_poller"));
    assert!(ptx::BFS.contains(".entry sigmatrace_bfs"));
    assert!(
        ptx::MOE.contains(".entry sigmatrace_moe_dispatch")
            && ptx::MOE.contains(".entry sigmatrace_moe_combine")
    );
    assert!(ptx::POLLER.contains("%globaltimer"));
}
