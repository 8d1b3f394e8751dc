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

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::cluster::{write_json, Cluster};
use crate::workload::{RankOptions, Res};
use clock::{ClockFit, ClockPair};
use driver::{Gpu, GpuError, HostMap, Module};
use qp::{check_outcomes, GpuQps};

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

    /// One run of a workload kernel (BFS, MoE), the part they share: clock pairs before; the
    /// cluster's rings, `host` and the status words mapped; the QPs built; `args` makes the
    /// argument struct; kernel `entry` of `ptx` runs as one block of `opts.threads` threads
    /// ([`Self::run_kernel`]); its status words are checked (`failed` says what an error code
    /// means) and the report written ([`Self::report`], for `opts.rank` into `opts.out`).
    ///
    /// # Safety
    /// Every range of `host` stays allocated until this returns.
    pub unsafe fn run_workload<A: Copy>(
        &self,
        c: &Cluster,
        opts: &RankOptions,
        (ptx, entry): (&str, &'static str),
        host: &[(u64, u64)],
        args: impl FnOnce(&Mapped) -> Res<A>,
        failed: impl FnOnce(&[u32; 4]) -> String,
    ) -> Res<(GpuReport, [u32; 4])> {
        let before = self.clock_pairs(16)?;
        let status = KernelStatus::default();
        let mut host = host.to_vec();
        host.push(status.range());
        // SAFETY: the caller's ranges outlive `map` (dropped when this returns), and so do the
        // status words.
        let map = unsafe { self.map(c, &host)? };
        let qps = GpuQps::build(&self.gpu, &map, c, LOG_CAP)?;
        let mapped = Mapped {
            gpu: &self.gpu,
            map: &map,
            qps: qps.array.ptr,
            status: map.dev(status.range().0)?,
        };
        let a = args(&mapped)?;
        let k = self.run_kernel(ptx, entry, opts.threads as u32, &a, before)?;
        let st = status.check(failed)?;
        let report = self.report(&k, c, &qps, map.bytes(), opts.rank, &opts.out)?;
        Ok((report, st))
    }

    /// Runs kernel `entry` of `ptx` as one block of `block` threads with the argument struct
    /// `args` — against the test double, first checked to be as large as its host build's — and
    /// waits for it; then takes the clock pairs after it (`before`: those taken before).
    fn run_kernel<A: Copy>(
        &self,
        ptx: &str,
        entry: &'static str,
        block: u32,
        args: &A,
        before: Vec<ClockPair>,
    ) -> Res<KernelRun> {
        let size = std::mem::size_of::<A>() as u64;
        if self.test_double && host::param_size(entry) != Some(size) {
            return Err(format!(
                "the argument struct of {entry} ({size} bytes) differs from the kernel's \
                 (host build size)"
            )
            .into());
        }
        let g = &self.gpu;
        let module = g.module(ptx)?;
        let f = g.function(&module, entry)?;
        let stream = g.stream()?;
        let t0 = Instant::now();
        g.launch(f, 1, block, &stream, args)?;
        g.sync(&stream)?;
        let kernel_ms = t0.elapsed().as_secs_f64() * 1e3;
        let after = self.clock_pairs(16)?;
        Ok(KernelRun {
            entry,
            block,
            kernel_ms,
            before,
            after,
        })
    }

    /// After a kernel that succeeded: the QPs' bookkeeping logs, checked, become the cluster's
    /// posted WQEs, and `gpu.<rank>.json` is written into `out`.
    fn report(
        &self,
        k: &KernelRun,
        c: &Cluster,
        qps: &GpuQps,
        registered_bytes: u64,
        rank: u32,
        out: &Path,
    ) -> Res<GpuReport> {
        let posted = check_outcomes(&qps.read_back(&self.gpu)?)?;
        let wqes = posted.values().map(|v| v.len() as u64).sum();
        c.set_gpu_posted(posted);
        let all: Vec<_> = k.before.iter().chain(&k.after).copied().collect();
        let report = GpuReport {
            rank,
            device: self.gpu.name.clone(),
            compute_capability: self.gpu.cc,
            driver_version: self.gpu.driver_version,
            test_double: self.test_double,
            kernel: k.entry.into(),
            block: k.block,
            kernel_ms: k.kernel_ms,
            registered_bytes,
            wqes,
            clock: ClockFit::fit(&all),
            clock_prediction_error_ns: ClockFit::fit(&k.before).map(|f| f.error_on(&k.after)),
        };
        std::fs::create_dir_all(out)?;
        write_json(&out.join(format!("gpu.{rank}.json")), &report)?;
        Ok(report)
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

/// What a workload's argument struct is made of ([`GpuRun::run_workload`]): the device (to
/// upload to), the device addresses of the mapped host ranges, the QPs' array, the status
/// words.
pub struct Mapped<'a> {
    pub gpu: &'a Gpu,
    map: &'a HostMap,
    /// Device address of the QPs' array ([`GpuQps`]).
    pub qps: u64,
    /// Device address of the status words ([`KernelStatus`]).
    pub status: u64,
}

impl Mapped<'_> {
    /// The device address of a mapped host address.
    pub fn dev(&self, host: u64) -> Result<u64, GpuError> {
        self.map.dev(host)
    }
}

/// The host range `(address, bytes)` of `v`, for [`GpuRun::map`].
pub fn host_range<T>(v: &[T]) -> (u64, u64) {
    (v.as_ptr() as u64, std::mem::size_of_val(v) as u64)
}

/// A workload kernel's four status words, in host memory the kernel writes through its
/// mapping: `[0]` progress (levels, iterations), `[1]` error code (0: none), `[2]`, `[3]` the
/// error's details (or more progress).
pub struct KernelStatus([AtomicU32; 4]);

impl Default for KernelStatus {
    fn default() -> Self {
        KernelStatus([0; 4].map(AtomicU32::new))
    }
}

impl KernelStatus {
    /// The words' host range (to map them for the GPU).
    pub fn range(&self) -> (u64, u64) {
        host_range(&self.0)
    }

    /// The words after the kernel; an error built by `failed` from them when the kernel set
    /// an error code.
    pub fn check(&self, failed: impl FnOnce(&[u32; 4]) -> String) -> Res<[u32; 4]> {
        let st = self.0.each_ref().map(|w| w.load(Ordering::Acquire));
        if st[1] != 0 {
            return Err(failed(&st).into());
        }
        Ok(st)
    }
}

/// A finished run of a workload's kernel.
pub struct KernelRun {
    pub entry: &'static str,
    pub block: u32,
    /// Launch to synchronise, wall time.
    pub kernel_ms: f64,
    /// Clock pairs taken before and after the kernel.
    pub before: Vec<ClockPair>,
    pub after: Vec<ClockPair>,
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
