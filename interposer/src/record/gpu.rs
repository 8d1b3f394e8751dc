//! GPU-side and observed records: CUDA memory calls, kernel names, launches and execution
//! times, the queues discovered in the program's memory, and what the host and device
//! pollers observe. The background components write through their own chunk writers (passed
//! in); the program's threads through their own.

use sigmatrace_observe::discover::CudaMemEvent;
use sigmatrace_observe::{Observation, QueueDesc};
use sigmatrace_schemas::{
    gpu_clock, string_ns, ChunkWriter, GpuClockPair, KernelExec, KernelLaunch, RecordHeader,
    RecordKind,
};

use super::emit;
use crate::sink::{self, cat};

/// A queue became known (`QueueDiscovered`; also a UAR page), when `observe` is traced.
pub fn queue_discovered(q: &QueueDesc) {
    if sink::tracing(cat::OBSERVE) {
        emit(q.to_record(sink::now()));
    }
}

/// A CUDA memory call that returned `ret` (`GpuMemory`).
pub fn gpu_memory(e: &CudaMemEvent, ret: i32) {
    emit(e.to_record(sink::now(), ret));
}

/// A kernel's name, once per function handle (`StringDef`, namespace FUNCTION).
pub fn function_name(function: u64, name: &[u8]) {
    sink::with_thread(|t| {
        t.append_meta(RecordKind::StringDef, string_ns::FUNCTION, function, name)
    });
}

/// One kernel launch the driver accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    /// `launch_api` value.
    pub api: u32,
    /// Joins the launch with its `KernelExec`.
    pub correlation: u64,
    pub function: u64,
    pub stream: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub device: u32,
}

/// `KernelLaunch` (block dimensions saturate at 65535).
pub fn kernel_launch(l: &Launch) {
    let b16 = |v: u32| v.min(u16::MAX as u32) as u16;
    emit(KernelLaunch {
        hdr: RecordHeader::of::<KernelLaunch>(l.api),
        ts: sink::now(),
        correlation: l.correlation,
        function: l.function,
        stream: l.stream,
        grid: l.grid,
        block: [b16(l.block[0]), b16(l.block[1]), b16(l.block[2])],
        device: l.device as u16,
        shared_mem: l.shared_mem,
    });
}

/// `KernelExec` of launch `correlation`: its start and end in host time, written by the
/// kernel-timing thread's writer `w` when `gpu` is traced.
pub fn kernel_exec(w: &mut ChunkWriter, correlation: u64, start: u64, end: u64, device: u32) {
    let rec = KernelExec {
        hdr: RecordHeader::of::<KernelExec>(gpu_clock::HOST_TS),
        ts: sink::now(),
        correlation,
        start,
        end,
        device,
        _pad: 0,
    };
    if sink::tracing(cat::GPU) {
        w.append(&rec);
    }
}

/// What a poller observed (`WqeObserved`, `CqeObserved`, `ObserveOverrun`).
pub fn observation(w: &mut ChunkWriter, o: &Observation) {
    match o {
        Observation::Wqe(r, _) => w.append(r),
        Observation::Cqe(r) => w.append(r),
        Observation::Overrun(r) => w.append(r),
    };
}

/// A GPU/host clock pair sampled by the device poller, when `observe` is traced.
pub fn clock_pair(w: &mut ChunkWriter, pair: &GpuClockPair) {
    if sink::tracing(cat::OBSERVE) {
        w.append(pair);
    }
}
