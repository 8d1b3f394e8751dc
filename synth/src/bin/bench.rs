//! Benchmark of `sigmatrace-convert` (converter README "Benchmark"):
//!
//!     cargo build --release -p sigmatrace-convert -p sigmatrace-synth
//!     target/release/sigmatrace-convert-bench [--ranks 64] [--events 50000000]
//!
//! Generates a log set of `--ranks` ranks (8 per host) with a record mix like traced runs —
//! per rank 8 QPs of RDMA WRITEs with selective signalling (one signaled WR in 100, as
//! `ib_write_bw`) to ranks on other hosts, and one SEND/RECV ping-pong QP — with at least
//! `--events` WR events, streaming (bounded memory at any rank count), and prints its peak RSS;
//! converts it with `--jobs 1` and `--jobs 2` (as child processes) and prints WR events/s,
//! input bytes/s, peak RSS (anonymous and total) and output bytes per WR event; first the same
//! with a quarter-size set, to show whether peak memory depends on the trace length. The log
//! sets are deleted afterwards unless `--keep`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sigmatrace_synth::{LinkSpec, Pattern, Scenario};

struct Args {
    ranks: usize,
    events: u64,
    dir: PathBuf,
    keep: bool,
    detail: String,
    compress: u32,
    skip_small: bool,
}

const USAGE: &str = "usage: sigmatrace-convert-bench [--ranks N] [--events N] [--dir PATH] [--keep] [--detail compact|normal|full] [--compress N] [--no-scaling]";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        ranks: 64,
        events: 50_000_000,
        dir: std::env::temp_dir().join("sigmatrace-bench"),
        keep: false,
        detail: "normal".into(),
        compress: 1,
        skip_small: false,
    };
    let mut it = std::env::args().skip(1);
    fn num<T: std::str::FromStr>(name: &str, v: Option<String>) -> Result<T, String> {
        v.and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a number"))
    }
    while let Some(x) = it.next() {
        match x.as_str() {
            "--ranks" => a.ranks = num("--ranks", it.next())?,
            "--events" => a.events = num("--events", it.next())?,
            "--dir" => a.dir = PathBuf::from(it.next().ok_or("--dir needs a path")?),
            "--keep" => a.keep = true,
            "--detail" => a.detail = it.next().ok_or("--detail needs a level")?,
            "--compress" => a.compress = num("--compress", it.next())?,
            "--no-scaling" => a.skip_small = true,
            _ => return Err(format!("unknown argument {x}")),
        }
    }
    if a.ranks < 2 {
        return Err("--ranks must be at least 2".into());
    }
    Ok(a)
}

/// `ranks` ranks, 8 per host. Per rank 8 QPs of RDMA WRITE with selective signalling (links to
/// the ranks 8, 16, 24, 32 further, both directions writing) and one SEND/RECV ping-pong QP
/// (even rank r with rank r + 9, another host). Messages are sized so that the set has at
/// least `events` WR events: per message a bulk WRITE is ≈ 1.01 WR events, a ping-pong
/// message 4 (post, completion, receive completion, repost).
fn scenario(ranks: usize, events: u64) -> Scenario {
    let n = ranks;
    let mut sc = Scenario::ring(n.div_ceil(8), 8, Pattern::SendRecv, 1);
    sc.ranks.truncate(n);
    let bulk: Vec<(usize, usize)> = (0..n)
        .flat_map(|r| (1..=4).map(move |j| (r, (r + 8 * j) % n)))
        .filter(|&(a, b)| a != b)
        .collect();
    let pingpong: Vec<(usize, usize)> = (0..n)
        .step_by(2)
        .map(|r| (r, (r + 9) % n))
        .filter(|&(a, b)| a != b)
        .collect();
    let per_msg = bulk.len() as f64 * 2.0 * 1.01 + pingpong.len() as f64 * 2.0 * 4.0;
    let m = (events as f64 / per_msg).ceil() as u64 + 1;
    let link = |(a, b): (usize, usize), pattern, bytes| LinkSpec {
        a,
        b,
        pattern,
        messages: m,
        bytes,
    };
    sc.links = bulk
        .into_iter()
        .map(|l| link(l, Pattern::Bulk { signal_every: 100 }, 65536))
        .chain(
            pingpong
                .into_iter()
                .map(|l| link(l, Pattern::PingPong, 4096)),
        )
        .collect();
    // Longer than a ping-pong round trip (two one-way latencies of at most 2.5 µs).
    sc.interval_ns = 8_000;
    sc.chunk_size = 1 << 20;
    sc.snapshot_every_ns = 100_000_000;
    for (h, host) in sc.hosts.iter_mut().enumerate() {
        let c = (h % 9) as i64 - 4;
        host.offset_ns = c * 37_000;
        host.drift_ppm = c as f64 * 3.0;
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

/// Peak anonymous and total (VmHWM) RSS of this process while `f` runs, in KiB.
fn own_peak_rss<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let pid = std::process::id();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut anon = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                anon = status_kb(pid, "RssAnon:").unwrap_or(0).max(anon);
                std::thread::sleep(Duration::from_millis(10));
            }
            anon
        });
        let out = f();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let anon = sampler.join().unwrap_or(0);
        (out, anon, status_kb(pid, "VmHWM:").unwrap_or(0))
    })
}

/// Generates one set and converts it with 1 and 2 jobs.
fn bench_set(a: &Args, exe: &Path, label: &str, events: u64) {
    let dir = a.dir.join(label);
    let _ = std::fs::remove_dir_all(&dir);
    let sc = scenario(a.ranks, events);
    let t0 = Instant::now();
    let (truth, anon, total) = own_peak_rss(|| sigmatrace_synth::write(&dir, &sc));
    let truth = truth.expect("generate logs");
    let gen_s = t0.elapsed().as_secs_f64();
    let input = du(&dir);
    println!(
        "[{label}] generated {} ranks on {} hosts, {} QPs, {} WR events, {} records, {:.2} GB in {gen_s:.1} s, peak RSS anon {:.0} MB / total {:.0} MB",
        sc.ranks.len(),
        sc.hosts.len(),
        sc.links.len() * 2,
        truth.wr_events,
        truth.records,
        input as f64 / 1e9,
        anon as f64 / 1024.0,
        total as f64 / 1024.0,
    );
    for jobs in [1usize, 2] {
        let out = a.dir.join(format!("{label}-j{jobs}.perfetto-trace"));
        let r = convert(exe, &dir, &out, jobs, &a.detail, a.compress);
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

fn main() {
    let a = parse().unwrap_or_else(|e| {
        eprintln!("sigmatrace-convert-bench: {e}\n{USAGE}");
        std::process::exit(2);
    });
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
    if !a.skip_small {
        bench_set(&a, &exe, "quarter", a.events / 4);
    }
    bench_set(&a, &exe, "full", a.events);
    if !a.keep {
        let _ = std::fs::remove_dir_all(&a.dir);
    }
}
