//! The C layouts and driver signatures the double shares with the programs that call it
//! (its probe and its tests include this file with `#[path]`: the crate is a cdylib only).

use std::ffi::{c_int, c_uint, c_void};

/// One recorded launch (`sigmatrace_cuda_double_launch`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LaunchRecord {
    /// 1 cuLaunchKernel, 2 cuLaunchKernelEx, 3 cuLaunchCooperativeKernel.
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

/// `CUlaunchConfig` prefix (grid, block, shared memory, stream), CUDA 12 layout.
#[repr(C)]
pub struct LaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_mem: c_uint,
    pub stream: u64,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

/// `cuLaunchKernel`: function, grid x/y/z, block x/y/z, shared memory, stream, kernel
/// parameters, extra (result as the raw CUresult code).
pub type LaunchKernelFn = unsafe extern "C" fn(
    u64,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    u64,
    *mut *mut c_void,
    *mut *mut c_void,
) -> c_int;

/// `cuLaunchKernelEx`: configuration, function, kernel parameters, extra.
pub type LaunchKernelExFn =
    unsafe extern "C" fn(*const LaunchConfig, u64, *mut *mut c_void, *mut *mut c_void) -> c_int;

/// `cuLaunchCooperativeKernel`: as [`LaunchKernelFn`] without `extra`.
pub type LaunchCooperativeKernelFn = unsafe extern "C" fn(
    u64,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    u64,
    *mut *mut c_void,
) -> c_int;
