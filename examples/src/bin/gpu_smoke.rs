//! `gpu_smoke`: the CUDA checks of `scripts/gpu-check.sh` that need no RDMA — device query, a
//! trivial kernel, host-mapped memory seen both ways while a kernel runs (pinned and
//! registered), the `%globaltimer` ↔ CLOCK_REALTIME mapping and its error, and the device
//! poller's capture at the highest post rate (a flood kernel posting IBGDA-style into a
//! GPU-resident ring watched by `sigmatrace-observe`'s `DevicePoller`). One line per check
//! (`gpu-smoke: NAME: PASS|FAIL …`), a JSON summary with `--out FILE`; exit 1 if any failed.
//! Against the libcuda TEST DOUBLE the kernels run as host builds (`gpu::host`), smaller.
//!
//! ```text
//! gpu_smoke [--out FILE] [--flood N] [--clock-pairs N]
//! ```

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sigmatrace_examples::gpu::clock::{ClockFit, Probe};
use sigmatrace_examples::gpu::driver::{Gpu, HostMap, Pinned};
use sigmatrace_examples::gpu::{host, GpuRun};
use sigmatrace_examples::workload::{num, Res};
use sigmatrace_observe::cuda::{DevicePoller, DevicePollerConfig, Driver};
use sigmatrace_observe::device::ClockMap;
use sigmatrace_observe::mlx5::wqe::Transport;
use sigmatrace_observe::QueueDesc;
use sigmatrace_observe::SendQueueDesc;
use sigmatrace_schemas::{discovery, mem_kind};

struct Args {
    out: Option<std::path::PathBuf>,
    flood: u64,
    clock_pairs: usize,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        out: None,
        flood: 0,
        clock_pairs: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--out" => a.out = Some(v()?.into()),
            "--flood" => a.flood = num(&k, v()?)?,
            "--clock-pairs" => a.clock_pairs = num(&k, v()?)?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// `SmokeAddArgs` in gpu/smoke.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct AddArgs {
    x: u64,
    y: u64,
    n: u32,
    pad: u32,
}

/// `SmokeMappedArgs`.
#[repr(C)]
#[derive(Clone, Copy)]
struct MappedArgs {
    cell: u64,
    limit_ns: u64,
}

/// `FloodArgs`.
#[repr(C)]
#[derive(Clone, Copy)]
struct FloodArgs {
    wqe: u64,
    dbrec: u64,
    bf: u64,
    counters: u64,
    out: u64,
    nwqes: u32,
    qpn: u32,
    count: u32,
    pad: u32,
}

fn device_query(gr: &GpuRun) -> Res<(bool, String, Value)> {
    let g = &gr.gpu;
    let v = json!({"name": g.name, "compute_capability": [g.cc.0, g.cc.1], "total_mem": g.total_mem,
        "driver_version": g.driver_version, "can_map_host": g.can_map_host,
        "unified_addressing": g.unified_addressing, "test_double": gr.test_double});
    let d = format!(
        "{} sm_{}{} {:.1} GiB driver {} map-host {} uva {}{}",
        g.name,
        g.cc.0,
        g.cc.1,
        g.total_mem as f64 / (1u64 << 30) as f64,
        g.driver_version,
        g.can_map_host,
        g.unified_addressing,
        if gr.test_double { " (TEST DOUBLE)" } else { "" }
    );
    Ok((g.can_map_host && g.cc.0 >= 8, d, v))
}

fn trivial_kernel(gr: &GpuRun) -> Res<(bool, String, Value)> {
    let g = &gr.gpu;
    let (n, grid, block) = if gr.test_double {
        (4096u32, 2, 32)
    } else {
        (1 << 22, 1024, 256)
    };
    let x: Vec<u64> = (0..n as u64).map(|i| i * 0x9e37 + 5).collect();
    let dx = g.upload(&x)?;
    let dy = g.alloc(n as usize * 8)?;
    let f = g.function(&gr.smoke, "sigmatrace_smoke_add")?;
    let s = g.stream()?;
    let t0 = Instant::now();
    g.launch(
        f,
        grid,
        block,
        &s,
        &AddArgs {
            x: dx.ptr,
            y: dy.ptr,
            n,
            pad: 0,
        },
    )?;
    g.sync(&s)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut y = vec![0u64; n as usize];
    g.dtoh(dy.ptr, &mut y)?;
    let bad = x.iter().zip(&y).filter(|(a, b)| 3 * **a + 1 != **b).count();
    Ok((
        bad == 0,
        format!("y = 3x + 1 over {n} elements ({grid}×{block}), {bad} wrong, {ms:.2} ms"),
        json!({"elements": n, "wrong": bad, "ms": ms}),
    ))
}

/// One exchange through `cell` (4 words, device address `dev`) with the mapped kernel.
fn mapped_once(
    g: &Gpu,
    gr: &GpuRun,
    word: &dyn Fn(usize) -> u64,
    set: &dyn Fn(usize, u64),
    dev: u64,
) -> Res<(bool, f64)> {
    let f = g.function(&gr.smoke, "sigmatrace_smoke_mapped")?;
    let s = g.stream()?;
    g.launch(
        f,
        1,
        1,
        &s,
        &MappedArgs {
            cell: dev,
            limit_ns: 10_000_000_000,
        },
    )?;
    let v = 0x5eed_0000_1234u64;
    let t0 = Instant::now();
    set(0, v);
    while word(1) != 2 * v + 1 && t0.elapsed() < Duration::from_secs(10) {
        std::hint::spin_loop();
    }
    let rtt_us = t0.elapsed().as_secs_f64() * 1e6;
    let seen = word(1) == 2 * v + 1;
    set(2, 1);
    g.sync(&s)?;
    Ok((seen && word(3) == 1, rtt_us))
}

fn host_mapped(gr: &GpuRun) -> Res<(bool, String, Value)> {
    let g = &gr.gpu;
    let p = Pinned::new(g, 4)?;
    let (ok_p, rtt_p) = mapped_once(
        g,
        gr,
        &|i| p.word(i).load(Ordering::SeqCst),
        &|i, v| p.word(i).store(v, Ordering::SeqCst),
        p.dev,
    )?;
    let cell: Vec<std::sync::atomic::AtomicU64> = (0..4).map(|_| Default::default()).collect();
    // SAFETY: `cell` outlives the map (dropped first, at the end of this function).
    let map = unsafe { HostMap::register(g, &[(cell.as_ptr() as u64, 32)])? };
    let dev = map.dev(cell.as_ptr() as u64)?;
    let (ok_r, rtt_r) = mapped_once(
        g,
        gr,
        &|i| cell[i].load(Ordering::SeqCst),
        &|i, v| cell[i].store(v, Ordering::SeqCst),
        dev,
    )?;
    drop(map);
    Ok((
        ok_p && ok_r,
        format!("host→GPU→host while the kernel runs: cuMemHostAlloc {} ({rtt_p:.1} µs round trip), cuMemHostRegister {} ({rtt_r:.1} µs)",
            if ok_p { "ok" } else { "FAILED" }, if ok_r { "ok" } else { "FAILED" }),
        json!({"pinned_ok": ok_p, "pinned_rtt_us": rtt_p, "registered_ok": ok_r, "registered_rtt_us": rtt_r}),
    ))
}

fn clock(gr: &GpuRun, n: usize) -> Res<(bool, String, Value)> {
    let mut p = Probe::start(&gr.gpu, &gr.smoke, Duration::from_secs(10))?;
    let first = p.pairs(n / 2, Duration::from_micros(500))?;
    std::thread::sleep(Duration::from_millis(if gr.test_double {
        50
    } else {
        1000
    }));
    let second = p.pairs(n - n / 2, Duration::from_micros(500))?;
    p.stop()?;
    let all: Vec<_> = first.iter().chain(&second).copied().collect();
    let fit = ClockFit::fit(&all).ok_or("no fit")?;
    let early = ClockFit::fit(&first).ok_or("no fit")?;
    let predicted = early.error_on(&second);
    // A real GPU answers over PCIe in microseconds; the double's host threads share two
    // loaded cores.
    let limit_ns = if gr.test_double { 50e6 } else { 50e3 };
    Ok((
        fit.error_median_ns <= limit_ns,
        format!(
            "{} pairs: host − GPU {:.0} ns, drift {:.2} ppm, half bracket median {:.0} ns, mapping error median {:.0} ns (limit {:.0}), max residual {:.0} ns; first-half fit predicts the second half within {:.0} ns",
            fit.pairs, fit.host_minus_gpu_ns, fit.drift_ppm, fit.half_bracket_median_ns, fit.error_median_ns, limit_ns, fit.residual_max_ns, predicted
        ),
        json!({"fit": fit, "prediction_error_ns": predicted, "limit_ns": limit_ns}),
    ))
}

fn capture(gr: &GpuRun, count: u64) -> Res<(bool, String, Value)> {
    let g = &gr.gpu;
    const DEPTH: u32 = 4096;
    let ring = g.alloc(DEPTH as usize * 64)?;
    let dbr = g.alloc(8)?;
    let bf = g.alloc(8)?;
    let counters = g.alloc(16)?;
    let out = Pinned::new(g, 3)?;
    let q = QueueDesc::Send(SendQueueDesc {
        qpn: 0x5157,
        transport: Transport::Rc,
        base: ring.ptr,
        wqebbs: DEPTH,
        dbrec: dbr.ptr,
        doorbell: bf.ptr,
        uar_page: 0,
        cqn: 0,
        memory: mem_kind::GPU,
        dbr_memory: mem_kind::GPU,
        discovery: discovery::DEVX,
    });
    let drv = Driver::if_loaded()?;
    let cfg = DevicePollerConfig {
        threads: if gr.test_double { 2 } else { 128 },
        ..Default::default()
    };
    let mut dp = DevicePoller::start(&drv, vec![q], cfg, ClockMap::new(1.0))?;
    g.bind()?;
    let f = g.function(&gr.smoke, "sigmatrace_flood")?;
    let s = g.stream()?;
    let args = FloodArgs {
        wqe: ring.ptr,
        dbrec: dbr.ptr,
        bf: bf.ptr,
        counters: counters.ptr,
        out: out.dev,
        nwqes: DEPTH,
        qpn: 0x5157,
        count: count as u32,
        pad: 0,
    };
    g.launch(f, 1, if gr.test_double { 2 } else { 256 }, &s, &args)?;
    let mut observed = 0u64;
    let t0 = Instant::now();
    // Drain while the flood runs, then until the poller has caught up.
    let mut quiet = 0;
    loop {
        let n = dp.drain(&mut |_| {});
        observed += n as u64;
        let st = dp.stats();
        let done = out.word(2).load(Ordering::SeqCst) == count;
        if done && st.wqes + st.lost >= count {
            break;
        }
        quiet = if n == 0 { quiet + 1 } else { 0 };
        if t0.elapsed() > Duration::from_secs(60) || (done && quiet > 20_000) {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    g.sync(&s)?;
    // Bounded: the poller answers within a pass (host builds on a loaded machine: longer).
    let t1 = Instant::now();
    let mut stopped = dp.stop(1_000_000);
    while !stopped && t1.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
        stopped = dp.stop(1_000_000);
    }
    let st = dp.stats();
    let (first, last) = (
        out.word(0).load(Ordering::SeqCst),
        out.word(1).load(Ordering::SeqCst),
    );
    let rate = count as f64 / ((last.saturating_sub(first)).max(1) as f64 / 1e9);
    let unaccounted = count as i64 - st.wqes as i64 - st.lost as i64;
    let ratio = st.wqes as f64 / count as f64;
    let _ = observed;
    Ok((
        unaccounted == 0 && st.wqes > 0 && stopped,
        format!("{count} WQEs at {:.2} M WQE/s into a {DEPTH}-WQEBB GPU ring: observed {} (capture {:.4}), lost (counted) {}, unaccounted {unaccounted}, poller stopped {stopped}",
            rate / 1e6, st.wqes, ratio, st.lost),
        json!({"posted": count, "post_rate_per_s": rate, "observed": st.wqes, "lost": st.lost,
               "capture": ratio, "unaccounted": unaccounted, "poller_stopped": stopped}),
    ))
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpu_smoke: {e}");
            std::process::exit(2);
        }
    };
    let gr = match GpuRun::open() {
        Ok(g) => g,
        Err(e) => {
            println!("gpu-smoke: device: FAIL {e}");
            std::process::exit(1);
        }
    };
    let double = gr.test_double;
    let flood = if a.flood > 0 {
        a.flood
    } else if double {
        20_000
    } else {
        4_000_000
    };
    let pairs = if a.clock_pairs > 0 {
        a.clock_pairs
    } else if double {
        40
    } else {
        400
    };
    if double && host::param_size("sigmatrace_flood") != Some(size_of::<FloodArgs>() as u64) {
        println!("gpu-smoke: layout: FAIL FloodArgs differs from gpu/smoke.cu");
        std::process::exit(1);
    }
    type CheckFn<'a> = Box<dyn Fn() -> Res<(bool, String, Value)> + 'a>;
    let checks: Vec<(&str, CheckFn)> = vec![
        ("device", Box::new(|| device_query(&gr))),
        ("trivial-kernel", Box::new(|| trivial_kernel(&gr))),
        ("host-mapped", Box::new(|| host_mapped(&gr))),
        ("clock-mapping", Box::new(|| clock(&gr, pairs))),
        ("device-poller-capture", Box::new(|| capture(&gr, flood))),
    ];
    let mut results = Vec::new();
    let mut failed = 0;
    for (name, f) in checks {
        let (pass, detail, values) = match f() {
            Ok(r) => r,
            Err(e) => (false, format!("error: {e}"), Value::Null),
        };
        failed += !pass as u32;
        println!(
            "gpu-smoke: {name}: {} {detail}",
            if pass { "PASS" } else { "FAIL" }
        );
        results.push(json!({"check": name, "pass": pass, "detail": detail, "values": values}));
    }
    if let Some(p) = &a.out {
        let s = serde_json::to_string_pretty(&json!({"test_double": double, "checks": results}))
            .expect("JSON");
        if let Err(e) = std::fs::write(p, s) {
            eprintln!("gpu_smoke: {}: {e}", p.display());
            failed += 1;
        }
    }
    std::process::exit(if failed > 0 { 1 } else { 0 });
}
