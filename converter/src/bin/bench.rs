//! Benchmark of `sigmatrace-convert` (README "Benchmark"):
//!
//!     cargo run --release -p sigmatrace-convert --bin sigmatrace-convert-bench -- [--events 50000000]
//!
//! Generates a 64-rank log set (8 hosts, send/recv and RDMA-write rings) with at least
//! `--events` WR events, converts it with `--jobs 1` and `--jobs 2` (as child processes), and
//! prints WR events/s, input bytes/s, peak RSS (anonymous and total) and output bytes per WR
//! event; then repeats with a quarter-size set to show whether peak memory depends on the trace
//! length. The log sets are deleted afterwards unless `--keep`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sigmatrace_convert::synth::{LinkSpec, Pattern, Scenario};

struct Args {
    events: u64,
    dir: PathBuf,
    keep: bool,
    detail: String,
    compress: u32,
    skip_small: bool,
}

fn parse() -> Args {
    let mut a = Args {
        events: 50_000_000,
        dir: std::env::temp_dir().join("sigmatrace-bench"),
        keep: false,
        detail: "normal".into(),
        compress: 1,
        skip_small: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--events" => a.events = it.next().and_then(|v| v.parse().ok()).expect("--events N"),
            "--dir" => a.dir = PathBuf::from(it.next().expect("--dir PATH")),
            "--keep" => a.keep = true,
            "--detail" => a.detail = it.next().expect("--detail LEVEL"),
            "--compress" => {
                a.compress = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--compress N")
            }
            "--no-scaling" => a.skip_small = true,
            _ => {
                eprintln!("usage: sigmatrace-convert-bench [--events N] [--dir PATH] [--keep] [--detail compact|normal|full] [--compress N] [--no-scaling]");
                std::process::exit(2);
            }
        }
    }
    a
}

/// 64 ranks, 8 per host; ring of SEND/RECV links and a ring of RDMA-write links to the rank
/// 8 further (another host). Events per message: SEND/RECV 4, WRITE (1 in 4 signaled) 1.5.
fn scenario(events: u64) -> Scenario {
    let mut sc = Scenario::ring(8, 8, Pattern::SendRecv, 1);
    let n = 64;
    let per_msg = 64.0 * 2.0 * 4.0 + 64.0 * 2.0 * 1.5;
    let m = (events as f64 / per_msg).ceil() as u64 + 1;
    sc.links = (0..n)
        .map(|r| LinkSpec {
            a: r,
            b: (r + 1) % n,
            pattern: Pattern::SendRecv,
            messages: m,
            bytes: 4096,
        })
        .chain((0..n).map(|r| LinkSpec {
            a: r,
            b: (r + 8) % n,
            pattern: Pattern::Write { signal_every: 4 },
            messages: m,
            bytes: 65536,
        }))
        .collect();
    sc.chunk_size = 1 << 20;
    sc.snapshot_every_ns = 100_000_000;
    for (h, host) in sc.hosts.iter_mut().enumerate() {
        host.offset_ns = (h as i64 - 4) * 37_000;
        host.drift_ppm = (h as f64 - 4.0) * 3.0;
    }
    sc
}

fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn status_kb(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

struct Run {
    wall: f64,
    cpu: f64,
    peak_anon_kb: u64,
    peak_total_kb: u64,
    out_bytes: u64,
}

fn children_cpu() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn convert(exe: &Path, dir: &Path, out: &Path, jobs: usize, detail: &str, compress: u32) -> Run {
    let cpu0 = children_cpu();
    let t0 = Instant::now();
    let mut child = Command::new(exe)
        .arg(dir)
        .arg("-o")
        .arg(out)
        .args([
            "--jobs",
            &jobs.to_string(),
            "--detail",
            detail,
            "--compress",
            &compress.to_string(),
            "--quiet",
        ])
        .spawn()
        .expect("run sigmatrace-convert");
    let pid = child.id();
    let (mut anon, mut total) = (0, 0);
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            assert!(st.success(), "sigmatrace-convert failed: {st}");
            break;
        }
        anon = anon.max(status_kb(pid, "RssAnon:").unwrap_or(0));
        total = total.max(status_kb(pid, "VmHWM:").unwrap_or(0));
        std::thread::sleep(Duration::from_millis(20));
    }
    Run {
        wall: t0.elapsed().as_secs_f64(),
        cpu: children_cpu() - cpu0,
        peak_anon_kb: anon,
        peak_total_kb: total,
        out_bytes: std::fs::metadata(out).map(|m| m.len()).unwrap_or(0),
    }
}

fn main() {
    let a = parse();
    let exe = std::env::current_exe()
        .expect("exe")
        .with_file_name("sigmatrace-convert");
    assert!(
        exe.exists(),
        "build sigmatrace-convert first ({} missing)",
        exe.display()
    );
    let _ = Command::new("df")
        .args(["-h"])
        .arg(a.dir.parent().unwrap_or(Path::new("/")))
        .status();
    let sizes: Vec<(String, u64)> = if a.skip_small {
        vec![("full".into(), a.events)]
    } else {
        vec![("quarter".into(), a.events / 4), ("full".into(), a.events)]
    };
    for (label, events) in sizes {
        let dir = a.dir.join(&label);
        let _ = std::fs::remove_dir_all(&dir);
        let sc = scenario(events);
        let t0 = Instant::now();
        let truth = sigmatrace_convert::synth::write(&dir, &sc).expect("generate logs");
        let gen_s = t0.elapsed().as_secs_f64();
        let input = du(&dir);
        println!(
            "[{label}] generated {} ranks, {} WR events, {} records, {:.2} GB in {gen_s:.1} s",
            sc.ranks.len(),
            truth.wr_events,
            truth.records,
            input as f64 / 1e9
        );
        for jobs in [1usize, 2] {
            let out = a.dir.join(format!("{label}-j{jobs}.perfetto-trace"));
            let r = convert(&exe, &dir, &out, jobs, &a.detail, a.compress);
            println!(
                "[{label}] --jobs {jobs}: {:.2} s wall, {:.2} s CPU, {:.2} M WR events/s, {:.2} M WR events per CPU-second, {:.0} MB/s input, peak RSS anon {:.0} MB / total {:.0} MB, output {:.1} MB = {:.2} B/WR event",
                r.wall,
                r.cpu,
                truth.wr_events as f64 / r.wall / 1e6,
                truth.wr_events as f64 / r.cpu / 1e6,
                input as f64 / r.wall / 1e6,
                r.peak_anon_kb as f64 / 1024.0,
                r.peak_total_kb as f64 / 1024.0,
                r.out_bytes as f64 / 1e6,
                r.out_bytes as f64 / truth.wr_events as f64
            );
            let _ = std::fs::remove_file(&out);
        }
        if !a.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    if !a.keep {
        let _ = std::fs::remove_dir_all(&a.dir);
    }
}
