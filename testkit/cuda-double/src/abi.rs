//! The C layouts the double shares with the programs that call it: its own launch record,
//! and the driver's launch layouts and signatures (from `sigmatrace-cuda-abi`). Its probe and
//! its tests include this file with `#[path]`: the crate is a cdylib only.

/// One recorded launch (`sigmatrace_cuda_double_launch`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LaunchRecord {
    /// 1 cuLaunchKernel, 2 cuLaunchKernelEx, 3 cuLaunchCooperativeKernel, 4 cuGraphLaunch
    /// (`function` the executable graph; grid, block and shared memory 0).
    pub api: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub function: u64,
    pub stream: u64,
    pub kernel_params: u64,
    /// First 8 bytes of the first kernel parameter (0 if none).
    pub first_param: u64,
}

/// The driver's launch layouts and signatures: one definition, the interposer's and the
/// device poller's too.
pub use sigmatrace_cuda_abi::{
    GraphLaunchFn, LaunchConfig, LaunchCooperativeKernelFn, LaunchKernelExFn, LaunchKernelFn,
};
