//! `bfs --gpu` and `moe --gpu` on 4 softnic nodes, traced by the interposer
//! (`LD_PRELOAD=libsigmatrace.so`): the workloads' CUDA kernels post into softnic's rings
//! mapped into the GPU; the interposer discovers the rings through `mlx5dv_init_obj` / devx
//! and watches them, and records the kernels' launches through its hooked driver entry
//! points. Checked as for the CPU-thread modes: every WQE of the kernels' own bookkeeping
//! observed exactly once, no `PostSend`, BFS barrier rounds (true slowest rank and spread, the
//! kernel's `%globaltimer` arrival stamps mapped onto CLOCK_REALTIME) and the MoE traffic
//! matrix and skew against the ground truth; plus kernel launches in every rank's log.
//!
//! The driver: the libcuda TEST DOUBLE by default (it runs the kernels' host builds on host
//! threads); with `SIGMATRACE_GPU_CHECK=device` the machine's own libcuda (`scripts/gpu-check.sh`
//! on a GPU machine). With `SIGMATRACE_GPU_CHECK_OUT=DIR` each test leaves its truth,
//! bookkeeping, `gpu.<rank>.json`, logs and converted trace in `DIR/<name>/`, its numbers in
//! `DIR/<name>.json`, and prints `GPU-CHECK <name> PASS …`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::observed::{check_barriers, check_exactly_once, check_skew, read_logs, stats_json};
use common::workloads::{MOE_ARGS, RANKS, SERIAL};
use common::{artifact, build_dir, run_ranks, Run, Tracing};
use serde_json::{json, Value};
use sigmatrace_schemas::records::discovery;

const LIMIT: Duration = Duration::from_secs(300);

fn on_device() -> bool {
    std::env::var("SIGMATRACE_GPU_CHECK").is_ok_and(|v| v == "device")
}

/// LD_LIBRARY_PATH for the TEST DOUBLE (libcuda.so.1 and libcuda.so, the names cudarc's
/// loader tries), or nothing on a GPU machine.
fn driver_env() -> (Option<tempfile::TempDir>, Vec<(String, String)>) {
    if on_device() {
        return (None, Vec::new());
    }
    let lib = build_dir().join("libsigmatrace_cuda_double.so");
    assert!(
        lib.exists(),
        "{} missing: cargo build --workspace",
        lib.display()
    );
    let d = tempfile::tempdir().expect("tempdir");
    for n in ["libcuda.so.1", "libcuda.so"] {
        std::os::unix::fs::symlink(&lib, d.path().join(n)).expect("symlink");
    }
    let env = vec![("LD_LIBRARY_PATH".into(), d.path().display().to_string())];
    (Some(d), env)
}

fn threads() -> &'static str {
    if on_device() {
        "64"
    } else {
        "4"
    }
}

fn run(workload: &str, mode: &str, args: &[&str]) -> Run {
    let (_dir, env) = driver_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut all = vec!["--gpu", "--threads", threads()];
    all.extend_from_slice(args);
    run_ranks(
        workload,
        mode,
        RANKS,
        &all,
        Tracing::Interposer,
        LIMIT,
        &env,
    )
}

/// The kernels' bookkeeping is marked as theirs, every rank's kernel ran on the driver the
/// test asked for, and every rank's log holds its kernel launches (clock probe, workload,
/// clock probe) through the hooked driver entry points.
fn check_gpu_run(run: &Run, kernel: &str) -> Vec<Value> {
    let books = run.books(RANKS);
    assert!(
        books.iter().all(|b| b.gpu),
        "bookkeeping written by the kernels"
    );
    let mut reports = Vec::new();
    for r in 0..RANKS {
        let p = run.out.join(format!("gpu.{r}.json"));
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(&p).expect("gpu report")).expect("JSON");
        assert_eq!(v["test_double"], !on_device(), "{v:#}");
        assert_eq!(v["kernel"], kernel);
        assert_eq!(v["wqes"], books[r as usize].total);
        reports.push(v);
    }
    for (rank, l) in read_logs(&run.log_dir()) {
        assert!(
            l.posts.is_empty(),
            "rank {rank}: kernels never call ibv_post_send"
        );
        assert!(
            l.kernel_launches >= 3,
            "rank {rank}: {} kernel launches recorded",
            l.kernel_launches
        );
    }
    reports
}

/// Copies the run's files to `SIGMATRACE_GPU_CHECK_OUT/<name>/`, converts the logs there,
/// writes `<name>.json` and prints the result line.
fn report(name: &str, run: &Run, numbers: Value) {
    let line = format!("GPU-CHECK {name} PASS {numbers}");
    println!("{line}");
    let Ok(out) = std::env::var("SIGMATRACE_GPU_CHECK_OUT") else {
        return;
    };
    let dst = PathBuf::from(out).join(name);
    copy_dir(&run.out, &dst.join("out"));
    copy_dir(&run.log_dir(), &dst.join("logs"));
    let trace = dst.join(format!("{name}.perfetto-trace"));
    let st = Command::new(artifact("sigmatrace-convert"))
        .arg(run.log_dir())
        .arg("-o")
        .arg(&trace)
        .status()
        .expect("sigmatrace-convert");
    assert!(st.success(), "sigmatrace-convert failed");
    let v = json!({"check": name, "pass": true, "numbers": numbers, "trace": trace});
    std::fs::write(
        dst.with_extension("json"),
        serde_json::to_string_pretty(&v).expect("JSON"),
    )
    .expect("write result");
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("mkdir");
    for e in std::fs::read_dir(src).expect("read_dir").flatten() {
        if e.path().is_file() {
            std::fs::copy(e.path(), dst.join(e.file_name())).expect("copy");
        }
    }
}

fn observed_total(run: &Run) -> (u64, u64) {
    let posted = run.books(RANKS).iter().map(|b| b.total).sum();
    let observed = read_logs(&run.log_dir())
        .values()
        .map(|l| l.wqes.values().map(|v| v.len() as u64).sum::<u64>())
        .sum();
    (posted, observed)
}

#[test]
fn bfs_gpu_initobj_traced() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let args = [
        "--span",
        "700",
        "--delays-us",
        common::workloads::DELAYS,
        "--rotate",
    ];
    let run = run("bfs", "initobj", &args);
    let reports = check_gpu_run(&run, "sigmatrace_bfs");
    check_exactly_once(
        &run.books(RANKS),
        &read_logs(&run.log_dir()),
        discovery::INIT_OBJ,
    );
    let stats = stats_json(&run.log_dir());
    let truth = run.truth("bfs-truth.json");
    check_barriers(&stats, &truth, common::workloads::MAX_DELAY_NS);
    let rounds = stats["barriers"]["rounds"].as_array().expect("rounds");
    let want = truth["rounds"].as_array().expect("truth rounds");
    let spread_err = rounds
        .iter()
        .zip(want)
        .map(|(r, w)| (r["spread_ns"].as_i64().unwrap() - w["spread_ns"].as_i64().unwrap()).abs())
        .max()
        .unwrap_or(0);
    let slowest_ok = rounds
        .iter()
        .zip(want)
        .filter(|(r, w)| r["slowest_rank"] == w["slowest_rank"])
        .count();
    let (posted, observed) = observed_total(&run);
    let clock: Vec<Value> = reports
        .iter()
        .map(|r| r["clock"]["error_median_ns"].clone())
        .collect();
    report(
        "bfs-gpu",
        &run,
        json!({"posted": posted, "observed": observed, "rounds": rounds.len(),
               "slowest_rank_matches": slowest_ok, "spread_error_max_ns": spread_err,
               "clock_error_median_ns_per_rank": clock}),
    );
}

#[test]
fn moe_gpu_devx_traced() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = run("moe", "devx", MOE_ARGS);
    check_gpu_run(&run, "sigmatrace_moe");
    check_exactly_once(
        &run.books(RANKS),
        &read_logs(&run.log_dir()),
        discovery::DEVX,
    );
    let stats = stats_json(&run.log_dir());
    let truth = run.truth("moe-truth.json");
    check_skew(&stats, &truth);
    let (posted, observed) = observed_total(&run);
    let skew = |k: &str| json!({"observed": stats["skew"]["node_skew"][k], "configured": truth["configured"]["skew"][k]});
    report(
        "moe-gpu",
        &run,
        json!({"posted": posted, "observed": observed, "link_skew": skew("link"),
               "node_in_skew": skew("node_in"), "node_out_skew": skew("node_out")}),
    );
}
