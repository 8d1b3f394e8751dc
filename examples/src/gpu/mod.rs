//! `--gpu`: the GPU-initiated workloads on a real GPU. The kernels of `gpu/*.cu` (PTX
//! embedded by [`crate::kernels`], loaded with cudarc) post into softnic's rings exactly as
//! IBGDA does: softnic's send rings, doorbell records and CQ rings are host memory, registered
//! with `cuMemHostRegister(DEVICEMAP)` and mapped into the GPU; a GPU thread reserves a slot,
//! writes the WQE, release-stores the doorbell record (which softnic's progress thread
//! watches) and rings the doorbell, and polls CQEs by the owner bit.
//!
//! Data flow: [`driver::Gpu::open`] → [`host::register_with_test_double`] (only against the
//! libcuda TEST DOUBLE) → [`driver::HostMap`] over [`qp::ring_ranges`] and the workload's
//! registered buffers → [`qp::GpuQps`] (posting state + bookkeeping log per QP in device
//! memory) → the workload's argument struct → launch, synchronise → [`qp::GpuQps::read_back`]
//! → the same bookkeeping and truth files as the CPU-thread mode; [`clock`] maps the kernels'
//! `%globaltimer` stamps onto `CLOCK_REALTIME`.

pub mod clock;
pub mod driver;
pub mod host;
pub mod qp;

use std::time::Duration;

use crate::cluster::Cluster;
use driver::{Gpu, GpuError, HostMap, Module};

/// Bookkeeping entries per QP the kernels can record.
pub const LOG_CAP: u32 = 1 << 16;

/// What every `--gpu` run sets up before its kernel: the device, the test double's host
/// kernels when it is the double, the smoke module (for the clock probe).
pub struct GpuRun {
    pub gpu: Gpu,
    pub test_double: bool,
    pub smoke: Module,
}

impl GpuRun {
    pub fn open() -> Result<GpuRun, GpuError> {
        let gpu = Gpu::open(0)?;
        let test_double = host::register_with_test_double();
        if !gpu.can_map_host {
            return Err(GpuError::Kernel(format!(
                "{} cannot map host memory",
                gpu.name
            )));
        }
        let smoke = gpu.module(crate::kernels::SMOKE_PTX)?;
        Ok(GpuRun {
            gpu,
            test_double,
            smoke,
        })
    }

    /// `n` clock pairs from a short probe kernel run.
    pub fn clock_pairs(&self, n: usize) -> Result<Vec<clock::ClockPair>, GpuError> {
        let mut p = clock::Probe::start(&self.gpu, &self.smoke, Duration::from_secs(10))?;
        let v = p.pairs(n, Duration::from_micros(200));
        p.stop()?;
        v
    }

    /// Registers the cluster's rings plus `extra` host ranges for the GPU.
    ///
    /// # Safety
    /// Every range stays allocated while the map lives.
    pub unsafe fn map(&self, c: &Cluster, extra: &[(u64, u64)]) -> Result<HostMap, GpuError> {
        let mut r = qp::ring_ranges(c);
        r.extend_from_slice(extra);
        // SAFETY: the caller's contract; the rings live as long as the cluster.
        unsafe { HostMap::register(&self.gpu, &r) }
    }
}

/// What a `--gpu` rank reports besides the CPU mode's files (`gpu.<rank>.json`).
#[derive(serde::Serialize)]
pub struct GpuReport {
    pub rank: u32,
    pub device: String,
    pub compute_capability: (i32, i32),
    pub driver_version: i32,
    pub test_double: bool,
    pub kernel: String,
    pub block: u32,
    pub kernel_ms: f64,
    pub registered_bytes: u64,
    pub wqes: u64,
    pub clock: Option<clock::ClockFit>,
    /// Error of the fit taken before the kernel on the pairs taken after it (ns).
    pub clock_prediction_error_ns: Option<f64>,
}
