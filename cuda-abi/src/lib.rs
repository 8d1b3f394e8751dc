//! The C layouts and signatures of the CUDA driver's kernel-launch entry points, in one
//! place: the interposer reads a program's `CUlaunchConfig` and hooks the three launch calls
//! and `cuGraphLaunch` (`interposer/src/decode/cuda.rs`), the device poller calls
//! `cuLaunchKernel` (`observe/src/cuda.rs`), and the libcuda test double implements and calls
//! them (`testkit/cuda-double`). Written from the CUDA 12 driver API (`cuda.h`:
//! `CUlaunchConfig`, `cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel`,
//! `cuGraphLaunch`); no CUDA headers are needed to build. Handles (`CUfunction`, `CUstream`,
//! `CUgraphExec`) are pointers in C and `u64` here, the same 8 bytes on the 64-bit targets
//! SigmaTrace builds for; results are the raw `CUresult` code (`c_int`: a Rust enum must never
//! hold a code it does not know).
#![no_std]
#![forbid(unsafe_code)]

use core::ffi::{c_int, c_uint, c_void};

/// A driver call's result code (`CUresult`; 0 is `CUDA_SUCCESS`).
pub type CuResult = c_int;

/// `CUlaunchConfig` (CUDA 12): grid, block, shared memory, stream, attributes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct LaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_mem: c_uint,
    pub stream: u64,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

/// The signature of a grid launch: function, grid x/y/z, block x/y/z, shared memory, stream,
/// kernel parameters, then the launch's own trailing arguments.
macro_rules! grid_launch_fn {
    ($($extra:ty),*) => {
        unsafe extern "C" fn(
            u64,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            u64,
            *mut *mut c_void
            $(, $extra)*
        ) -> CuResult
    };
}

/// `cuLaunchKernel`: a grid launch with `extra`.
pub type LaunchKernelFn = grid_launch_fn!(*mut *mut c_void);

/// `cuLaunchCooperativeKernel`: a grid launch without `extra`.
pub type LaunchCooperativeKernelFn = grid_launch_fn!();

/// `cuLaunchKernelEx`: configuration, function, kernel parameters, extra.
pub type LaunchKernelExFn =
    unsafe extern "C" fn(*const LaunchConfig, u64, *mut *mut c_void, *mut *mut c_void) -> CuResult;

/// `cuGraphLaunch`: executable graph (`CUgraphExec`), stream.
pub type GraphLaunchFn = unsafe extern "C" fn(u64, u64) -> CuResult;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn launch_config_has_the_c_layout() {
        assert_eq!(offset_of!(LaunchConfig, grid), 0);
        assert_eq!(offset_of!(LaunchConfig, block), 12);
        assert_eq!(offset_of!(LaunchConfig, shared_mem), 24);
        assert_eq!(offset_of!(LaunchConfig, stream), 32);
        assert_eq!(offset_of!(LaunchConfig, attrs), 40);
        assert_eq!(offset_of!(LaunchConfig, num_attrs), 48);
        assert_eq!(size_of::<LaunchConfig>(), 56);
    }
}
