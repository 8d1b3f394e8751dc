//! Every committed PTX of the repository — the device-side poller here and the example
//! workloads' kernels in examples/gpu — assembles for sm_80 and sm_90 (ptxas from the
//! nvidia-cuda-nvcc-cu12 wheel) and matches its .cu source (NVRTC).
//! Compile check only: no GPU is needed. Fails loudly when the tools are missing.

use std::process::Command;

#[test]
fn ptx_assembles_for_sm80_and_sm90_and_is_up_to_date() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/gpu/check-ptx.sh");
    let out = Command::new("bash")
        .arg(script)
        .output()
        .expect("run check-ptx.sh");
    let text = sigmatrace_testkit::output_text(&out);
    assert!(out.status.success(), "check-ptx.sh failed:\n{text}");
    assert!(text.contains("8 assemblies ok"), "{text}");
    for f in [
        "observe/gpu/poller.ptx",
        "examples/gpu/bfs.ptx",
        "examples/gpu/moe.ptx",
        "examples/gpu/smoke.ptx",
    ] {
        assert!(text.contains(f), "{f} not assembled: {text}");
    }
}

#[test]
fn embedded_ptx_has_the_poller() {
    use sigmatrace_observe::device::ptx;
    assert!(ptx::POLLER.contains(&format!(".entry {}", ptx::POLLER_ENTRY)));
    assert!(ptx::POLLER.contains("%globaltimer"));
}
