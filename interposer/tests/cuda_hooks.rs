//! CUDA driver entry points against the libcuda.so.1 TEST DOUBLE (testkit/cuda-double: host
//! memory, launches recorded and timed on a simulated stream clock, never run). `cuda_app`
//! gets the driver the CUDA runtime's way (dlopen, dlsym(cuGetProcAddress_v2), then
//! cuGetProcAddress for everything, cuGetProcAddress itself included) and, built a second
//! time, by linking the symbols. Traced, the hooked entry points it receives are the
//! interposer's (unhooked ones and cuGetExportTable untouched), and the log holds its memory
//! calls (`GpuMemory`), kernel names (`StringDef` FUNCTION), launches (`KernelLaunch`) and
//! their event-timed execution (`KernelExec`). `ibgda devx-gpu` puts devx rings in "device
//! memory" from cuMemAlloc: they are discovered as GPU-resident and the device-side poller is
//! launched for them.

mod common;
use common::*;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use sigmatrace_schemas::{gpu_mem_op, launch_api, mem_kind, queue_kind, string_ns, KernelLaunch};

const LIMIT: Duration = Duration::from_secs(120);
/// Simulated kernel duration in the double.
const KERNEL_NS: u64 = 3_000_000;

fn cuda_app(which: &str, logs: Option<&Path>, extra: &[(&str, &str)]) -> (Out, Option<Trace>) {
    let (out, _) = run_cuda_app(which, logs, extra);
    (out, logs.map(only_log))
}

fn run_cuda_app(which: &str, logs: Option<&Path>, extra: &[(&str, &str)]) -> (Out, ()) {
    let cuda = cuda_double_dir();
    let mut c = Cmd::new(&[cprog(which)])
        .env("LD_LIBRARY_PATH", &cuda.path().display().to_string())
        .env("SIGMATRACE_CUDA_DOUBLE_KERNEL_NS", &KERNEL_NS.to_string());
    for (k, v) in extra {
        c = c.env(k, v);
    }
    if let Some(l) = logs {
        c = c.traced(l);
    }
    let out = c.run(LIMIT);
    assert!(out.ok(), "{which}: {out:?}");
    assert!(out.stdout.ends_with("done\n"), "{}", out.stdout);
    (out, ())
}

/// `ep NAME OBJECT` lines.
fn entry_points(out: &str) -> HashMap<String, String> {
    tagged(out, "ep")
        .into_iter()
        .map(|f| (f[0].clone(), f[1].clone()))
        .collect()
}

const HOOKED: &[&str] = &[
    "cuMemAlloc",
    "cuMemFree",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister",
    "cuMemHostUnregister",
    "cuMemHostGetDevicePointer",
    "cuModuleGetFunction",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
];
const UNHOOKED: &[&str] = &[
    "cuInit",
    "cuDeviceGet",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuStreamCreateWithPriority",
    "cuStreamSynchronize",
    "cuModuleLoadData",
    "cuGraphCreate",
    "cuGraphInstantiateWithFlags",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
];

/// The records the program's own output predicts, checked against the trace.
fn check_trace(out: &Out, t: &Trace) {
    let line = |tag: &str| -> Vec<u64> {
        tagged(&out.stdout, tag)
            .first()
            .unwrap_or_else(|| panic!("no {tag} line"))
            .iter()
            .map(|s| num(s))
            .collect()
    };
    let mem = t.all(|r| match r {
        Rec::GpuMem(m) => Some(*m),
        _ => None,
    });
    let ops: Vec<u32> = mem.iter().map(|m| m.hdr.aux).collect();
    assert_eq!(
        ops,
        vec![
            gpu_mem_op::DEVICE_ALLOC,
            gpu_mem_op::HOST_ALLOC,
            gpu_mem_op::HOST_REGISTER,
            gpu_mem_op::DEVICE_POINTER,
            gpu_mem_op::HOST_UNREGISTER,
            gpu_mem_op::DEVICE_FREE
        ]
    );
    assert!(mem.iter().all(|m| m.result == 0));
    let (alloc, host, reg, dev) = (
        line("alloc"),
        line("hostalloc"),
        line("register"),
        line("devptr"),
    );
    assert_eq!((mem[0].addr, mem[0].size), (alloc[0], alloc[1]));
    assert_eq!(
        (mem[1].addr, mem[1].size, mem[1].flags),
        (host[0], host[1], 0x2)
    );
    assert_eq!(
        (mem[2].addr, mem[2].size, mem[2].flags),
        (reg[0], reg[1], reg[2] as u32)
    );
    assert_eq!(mem[2].flags & 0x4, 0x4, "IOMEMORY: a doorbell page");
    assert_eq!((mem[3].addr, mem[3].alias), (dev[0], dev[1]));
    assert_eq!(mem[4].addr, reg[0]);
    assert_eq!(mem[5].addr, alloc[0]);

    let names: Vec<(u64, String)> = t.defs(string_ns::FUNCTION);
    let expect: Vec<(u64, String)> = tagged(&out.stdout, "function")
        .iter()
        .map(|f| (num(&f[0]), f[1].clone()))
        .collect();
    assert_eq!(names, expect, "kernel names, once each");

    let launches: Vec<KernelLaunch> = t.all(|r| match r {
        Rec::Launch(l) => Some(*l),
        _ => None,
    });
    let printed = tagged(&out.stdout, "launch");
    assert_eq!(launches.len(), printed.len());
    for (l, p) in launches.iter().zip(&printed) {
        let p: Vec<u64> = p.iter().map(|s| num(s)).collect();
        assert_eq!(l.hdr.aux as u64, p[0], "launch API");
        assert_eq!(l.function, p[1]);
        assert_eq!(l.grid.map(u64::from), [p[2], p[3], p[4]]);
        assert_eq!(l.block.map(u64::from), [p[5], p[6], p[7]]);
        assert_eq!(l.shared_mem as u64, p[8]);
        assert_eq!(l.stream, p[9]);
        assert_eq!(l.device, 0);
    }
    let apis: Vec<u32> = launches.iter().map(|l| l.hdr.aux).collect();
    assert_eq!(
        apis,
        vec![
            launch_api::CU_LAUNCH_KERNEL,
            launch_api::CU_LAUNCH_KERNEL,
            launch_api::CU_LAUNCH_KERNEL_EX,
            launch_api::CU_LAUNCH_COOPERATIVE_KERNEL,
            launch_api::CU_GRAPH_LAUNCH,
            launch_api::CU_GRAPH_LAUNCH
        ]
    );

    // Execution spans: one per launch, each KERNEL_NS long on the simulated stream clock, and
    // back to back in launch order on the one stream.
    let execs = t.all(|r| match r {
        Rec::Exec(e) => Some(*e),
        _ => None,
    });
    assert_eq!(execs.len(), launches.len());
    let hz = t.header.as_ref().unwrap().tsc_hz as f64;
    let ns = |ticks: i64| ticks as f64 * 1e9 / hz;
    let mut prev_end: Option<u64> = None;
    for l in &launches {
        let e = execs
            .iter()
            .find(|e| e.correlation == l.correlation)
            .expect("KernelExec of each launch");
        assert_eq!(e.hdr.aux, 0, "log clock");
        // The end event resolves when the kernel ends; the start event, recorded on the host
        // just before the launch, when it is recorded (the stream is idle): a host thread
        // preempted between the two lengthens the span by that much, as on a GPU (189 µs seen
        // on a loaded 2-core VM). So never shorter than the kernel, and at most 2 ms longer.
        let d = ns(e.end as i64 - e.start as i64);
        assert!(
            d > KERNEL_NS as f64 - 50_000.0 && d < KERNEL_NS as f64 + 2_000_000.0,
            "duration {d} ns, simulated {KERNEL_NS}"
        );
        if let Some(p) = prev_end {
            assert!(ns(e.start as i64 - p as i64) > -50_000.0, "stream order");
        }
        prev_end = Some(e.end);
    }
    assert_eq!(
        t.attr("kernel_timing").as_deref(),
        Some("resolved:6,unresolved:0,untimed:0,failed:0")
    );
}

#[test]
fn cuda_runtime_style_lookups_are_wrapped_and_traced() {
    let logs = tempfile::tempdir().unwrap();
    let (out, trace) = cuda_app("cuda_app_dlopen", Some(logs.path()), &[]);
    let ep = entry_points(&out.stdout);
    assert_eq!(ep["dlsym:cuGetProcAddress_v2"], "libsigmatrace.so");
    assert_eq!(
        ep["cuGetProcAddress"], "libsigmatrace.so",
        "asked for itself: the wrapper"
    );
    assert_eq!(
        ep["dlsym:cuMemAlloc_v2"], "libsigmatrace.so",
        "dlsym of a hooked name"
    );
    assert_eq!(
        ep["cuGetExportTable"], "libcuda.so.1",
        "private tables: untouched"
    );
    assert_eq!(ep["dlsym:cuGetExportTable"], "libcuda.so.1");
    for n in HOOKED {
        assert_eq!(ep[*n], "libsigmatrace.so", "{n}");
    }
    for n in UNHOOKED {
        assert_eq!(ep[*n], "libcuda.so.1", "{n} untouched");
    }
    check_trace(&out, trace.as_ref().unwrap());

    // Untraced, every entry point is the driver's own and the output has the same shape.
    let (plain, _) = cuda_app("cuda_app_dlopen", None, &[]);
    let ep = entry_points(&plain.stdout);
    assert!(HOOKED.iter().all(|n| ep[*n] == "libcuda.so.1"));
    assert_eq!(shape(&plain.stdout).len(), shape(&out.stdout).len());
}

#[test]
fn cuda_linked_by_symbol_is_traced_the_same() {
    let logs = tempfile::tempdir().unwrap();
    let (out, trace) = cuda_app("cuda_app_linked", Some(logs.path()), &[]);
    let ep = entry_points(&out.stdout);
    assert_eq!(ep["cuMemAlloc_v2"], "libsigmatrace.so");
    assert_eq!(ep["cuLaunchKernel"], "libsigmatrace.so");
    check_trace(&out, trace.as_ref().unwrap());
}

#[test]
fn gpu_category_off_records_no_cuda_work() {
    let logs = tempfile::tempdir().unwrap();
    let (out, _) = run_cuda_app(
        "cuda_app_dlopen",
        Some(logs.path()),
        &[("SIGMATRACE_TRACE", "all,-gpu")],
    );
    // Nothing to record: the log is never created; the program still got working wrappers.
    assert!(logs_in(logs.path()).is_empty());
    assert_eq!(
        entry_points(&out.stdout)["cuLaunchKernel"],
        "libsigmatrace.so"
    );
}

#[test]
fn devx_rings_in_device_memory_get_the_device_poller() {
    let logs = tempfile::tempdir().unwrap();
    let fabric = tempfile::tempdir().unwrap();
    let cuda = cuda_double_dir();
    let out = Cmd::new(&[
        softnic_run().display().to_string(),
        "--fabric".into(),
        fabric.path().join("f").display().to_string(),
        "--".into(),
        cprog("ibgda").display().to_string(),
        "devx-gpu".into(),
        "100".into(),
        "64".into(),
    ])
    .env("LD_LIBRARY_PATH", &cuda.path().display().to_string())
    .traced(logs.path())
    .run(LIMIT);
    assert!(out.ok(), "{out:?}");
    let t = only_log(logs.path());
    let a = fields(out.stdout.lines().find(|l| l.starts_with("A ")).unwrap());
    let queues = t.all(|r| match r {
        Rec::Queue(q) => Some(*q),
        _ => None,
    });
    let ring = |kind: u32| queues.iter().find(|q| q.hdr.aux & 0xff == kind).unwrap();
    assert_eq!(ring(queue_kind::SEND).base, num(&a["sq"]));
    assert_eq!(ring(queue_kind::CQ).base, num(&a["cq"]));
    for k in [queue_kind::SEND, queue_kind::CQ] {
        assert_eq!(
            (ring(k).hdr.aux >> 8) & 0xff,
            mem_kind::GPU as u32,
            "cuMemAlloc memory"
        );
    }
    // Not host-watchable: the host poller never started; the device poller was launched (by
    // the interposer, on its own stream: one block of 128 threads), and its own launch is not
    // a program kernel.
    assert_eq!(t.count(|r| matches!(r, Rec::Wqe(_) | Rec::Cqe(_))), 0);
    assert!(t.attr("host_poller").is_none());
    let launches = tagged(&out.stdout, "launch");
    assert!(!launches.is_empty(), "{}", out.stdout);
    assert!(launches
        .iter()
        .all(|l| l == &["api=1", "grid=1,1,1", "block=128,1,1"]));
    assert_eq!(t.count(|r| matches!(r, Rec::Launch(_))), 0);
    // Launched for the CQ and QP (once when both appear within the debounce time), relaunched
    // for the CQ alone when the QP was destroyed, stopped when the CQ was.
    let dp = t.attr("device_poller").expect("device poller counters");
    let n: usize = dp
        .strip_prefix("launches:")
        .and_then(|r| r.strip_suffix(",failures:0"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{dp}"));
    assert!(
        n > launches.len(),
        "{dp}: the relaunch after the QP's destruction"
    );
    // The doorbell page: registered as I/O memory and mapped for the device.
    let mem = t.all(|r| match r {
        Rec::GpuMem(m) => Some(*m),
        _ => None,
    });
    let uar = fields(out.stdout.lines().find(|l| l.starts_with("uar ")).unwrap());
    assert!(mem
        .iter()
        .any(|m| m.hdr.aux == gpu_mem_op::HOST_REGISTER && m.flags & 0x4 != 0));
    assert!(mem.iter().any(|m| m.hdr.aux == gpu_mem_op::DEVICE_POINTER
        && m.addr == num(&uar["reg"])
        && m.alias == num(&uar["device"])));
    assert_eq!(
        mem.iter()
            .filter(|m| m.hdr.aux == gpu_mem_op::DEVICE_ALLOC)
            .count(),
        3,
        "CQ, doorbell records, WQ"
    );
}
