//! Overhead of libsigmatrace.so (interposer/README.md, "Overhead"). One command:
//!
//! ```text
//! cargo build --release -p softnic -p softnic-mlx5 -p softnic-efa -p softnic-rdmacm
//! cargo bench -p sigmatrace-interposer --bench overhead
//! ```
//!
//! 1. No-op device (cprogs/noop_bench.c): the hook cost alone — post_send, poll_cq, both, a
//!    receive completion, post_recv and a one-WR `ibv_wr_*` batch (`wr_start`,
//!    `wr_rdma_write`, `wr_set_sge`, `wr_complete`), traced and untraced contexts interleaved in one
//!    process; median ns/op, with the log's chunks prepared ahead (steady state) and with
//!    default settings (amortised, including chunk preparation on a background thread).
//! 2. `valgrind --tool=callgrind`: instructions per op of the same loops (inclusive cost of
//!    each loop function / ops), traced minus untraced.
//! 3. Memory, log volume and tracer CPU: Debian's `ib_write_bw -q 16 -s 8 -n N` client over
//!    softnic, untraced and traced runs interleaved (`OVERHEAD_BW_ROUNDS` pairs): peak RSS
//!    (`/usr/bin/time -v`), log bytes per WR, and `tracer CPU per WR event` — traced −
//!    untraced user+system time of the client process (all its threads, the tracer's
//!    background thread included) per WR event recorded, median and range over the pairs;
//!    the background thread's own CPU per WR event, with the drain's direct I/O (default) and
//!    from a third, buffered run per round (`SIGMATRACE_DIRECT_IO=0`).
//! 4. softnic message rate (cprogs/loopback.c `rate`): 8-byte RDMA writes, 64 in flight, one in
//!    16 signaled; traced and untraced processes alternate; median msgs/s and the ratio
//!    traced/untraced (per pair: median and range).
//!
//! The bench builds `libsigmatrace.so` (release) first, and refuses one older than the
//! interposer's or the schemas' sources. Timing on a shared, virtualised 2-core machine is
//! noisy: the spread is printed with each number, and the load average before and after.
//! Environment: `OVERHEAD_ROUNDS` (default 9), `OVERHEAD_WRITES` (default 2000000),
//! `OVERHEAD_BW_ITERS` (default 1000000, `ib_write_bw -n`), `OVERHEAD_BW_ROUNDS` (default 3),
//! `OVERHEAD_SECTIONS` (default `1,2,3,4`: which sections to run).

mod common;

use common::{env_num, fresh_lib, load, median};
use std::path::{Path, PathBuf};
use std::process::Command;

fn cprog(name: &str) -> PathBuf {
    Path::new(env!("OUT_DIR")).join("cprogs").join(name)
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn traced<'a>(cmd: &'a mut Command, lib: &Path, logs: &Path) -> &'a mut Command {
    cmd.env("LD_PRELOAD", lib).env("SIGMATRACE_DIR", logs)
}

fn main() {
    let dir = sigmatrace_testkit::build_dir();
    let lib = dir.join("libsigmatrace.so");
    fresh_lib(&lib);
    println!("load average at start: {}", load());
    let tmp = tempfile::tempdir().expect("tempdir");
    let logs = tmp.path().join("logs");
    let rounds = env_num("OVERHEAD_ROUNDS", 9);
    let sections = std::env::var("OVERHEAD_SECTIONS").unwrap_or_else(|_| "1,2,3,4".into());
    let section = |n: &str| sections.split(',').any(|s| s.trim() == n);

    if section("1") {
        noop_section(&lib, &logs);
    }
    if section("2") {
        callgrind_section(&lib, tmp.path(), &logs);
    }
    if section("3") {
        write_bw_memory(&dir, &lib, tmp.path());
    }
    if section("4") {
        message_rate_section(&dir, &lib, tmp.path(), &logs, rounds);
    }
    println!("load average at end: {}", load());
}

/// Median and range of `v`, formatted with `prec` decimals.
fn summary(v: &[f64], prec: usize) -> String {
    let mut s = v.to_vec();
    let m = median(&mut s);
    format!(
        "{m:.prec$} (range {:.prec$}..{:.prec$}, {} runs)",
        s[0],
        s[s.len() - 1],
        s.len()
    )
}

/// Section 1: the no-op device's hook cost.
fn noop_section(lib: &Path, logs: &Path) {
    let (lib, logs) = (lib.to_path_buf(), logs.to_path_buf());
    println!("== 1. no-op device: hook cost (ns per op, median of rounds, traced vs untraced interleaved)");
    tsc_read_cost();
    println!("-- steady state: 64-chunk rings (64 MiB per thread)");
    let noop = cprog("noop_bench");
    let out = run(traced(&mut Command::new(&noop), &lib, &logs)
        .args(["time", "15", "100000", "3000"])
        .env("SIGMATRACE_MAX_BYTES", "600M")
        .env("SIGMATRACE_PREFAULT_CHUNKS", "64"));
    print!("{out}");
    let _ = std::fs::remove_dir_all(&logs);
    println!("-- default settings (1 MiB chunks, 4-chunk rings drained by the background thread)");
    let out = run(traced(&mut Command::new(&noop), &lib, &logs).args(["time", "15", "100000"]));
    print!("{out}");
    let _ = std::fs::remove_dir_all(&logs);
}

/// One line: what a TSC read (the timestamp every traced post and poll takes) costs on this
/// machine by itself, back to back (median of 9 runs of 10 M reads) — a floor under the
/// per-post cost that no placing of the record can go below.
fn tsc_read_cost() {
    #[cfg(target_arch = "x86_64")]
    {
        const READS: u32 = 10_000_000;
        let mut ns: Vec<f64> = (0..9)
            .map(|_| {
                let start = std::time::Instant::now();
                let mut sum = 0u64;
                for _ in 0..READS {
                    // SAFETY: `rdtsc` reads the time-stamp counter; no memory is touched.
                    sum = sum.wrapping_add(unsafe { core::arch::x86_64::_rdtsc() });
                }
                std::hint::black_box(sum);
                start.elapsed().as_nanos() as f64 / READS as f64
            })
            .collect();
        println!(
            "one TSC read (rdtsc, back to back): {:.1} ns",
            median(&mut ns)
        );
    }
}

/// Section 2: callgrind instructions per op, traced minus untraced.
fn callgrind_section(lib: &Path, tmp: &Path, logs: &Path) {
    let (lib, logs) = (lib.to_path_buf(), logs.to_path_buf());
    let noop = cprog("noop_bench");
    println!("== 2. callgrind: instructions per op (inclusive cost of each loop / ops)");
    let valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if valgrind {
        let cg = tmp.join("cg.out");
        let ops = 100_000u64;
        run(traced(&mut Command::new("valgrind"), &lib, &logs)
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", cg.display()))
            .arg(&noop)
            .args(["count", &ops.to_string()]));
        let ann = run(Command::new("callgrind_annotate")
            .arg("--inclusive=yes")
            .arg(&cg));
        let cost = |f: &str| -> f64 {
            ann.lines()
                .find(|l| l.contains(&format!(":{f} ")) && !l.contains("=>"))
                .and_then(|l| l.split_whitespace().next())
                .map(|n| n.replace(',', "").parse::<f64>().unwrap_or(0.0))
                .unwrap_or(0.0)
                / ops as f64
        };
        for (l, name) in [
            ("post", "post"),
            ("poll", "poll"),
            ("both", "both"),
            ("recv", "poll (receive)"),
            ("postrecv", "post recv"),
            ("wr", "wr batch"),
        ] {
            let (t, u) = (
                cost(&format!("loop_{l}_traced")),
                cost(&format!("loop_{l}_untraced")),
            );
            println!(
                "{name:<18} traced {t:6.1} instr/op  untraced {u:5.1}  added {:6.1}",
                t - u
            );
        }
        let _ = std::fs::remove_dir_all(&logs);
    } else {
        println!("(valgrind not installed: skipped)");
    }
}

/// Section 4: softnic message rate, traced and untraced processes alternating.
fn message_rate_section(dir: &Path, lib: &Path, tmp: &Path, logs: &Path, rounds: u64) {
    let (lib, logs) = (lib.to_path_buf(), logs.to_path_buf());
    println!("== 4. softnic message rate (8-byte RDMA writes; {rounds} rounds, traced and untraced alternating)");
    let softnic = dir.join("softnic-run");
    if !softnic.exists() || !dir.join("libsoftnic_verbs.so").exists() {
        println!("(softnic not built in {}: run `cargo build --release -p softnic -p softnic-mlx5 -p softnic-efa`)", dir.display());
        return;
    }
    let writes = env_num("OVERHEAD_WRITES", 2_000_000).to_string();
    let rate = |out: &str| -> f64 {
        out.split('=')
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .expect("rate line")
    };
    let (mut plain, mut tr) = (Vec::new(), Vec::new());
    let fabric = tmp.join("fabric");
    let rate_run = || {
        let mut c = Command::new(&softnic);
        c.arg("--fabric")
            .arg(&fabric)
            .arg("--")
            .arg(cprog("loopback_linked"))
            .args(["rate", &writes]);
        c
    };
    for _ in 0..rounds {
        plain.push(rate(&run(&mut rate_run())));
        tr.push(rate(&run(traced(&mut rate_run(), &lib, &logs))));
        let _ = std::fs::remove_dir_all(&logs);
    }
    let (p, t) = (median(&mut plain.clone()), median(&mut tr.clone()));
    println!("untraced {} msgs/s", summary(&plain, 0));
    println!("traced   {} msgs/s", summary(&tr, 0));
    println!(
        "time per message: untraced {:.1} ns, traced {:.1} ns",
        1e9 / p,
        1e9 / t
    );
    let pairs: Vec<f64> = tr.iter().zip(&plain).map(|(t, p)| t / p).collect();
    println!(
        "softnic message rate traced/untraced: {:.3} (medians); per pair {}",
        t / p,
        summary(&pairs, 3)
    );
}

/// Peak RSS (kB) and user+system seconds of a command run under `/usr/bin/time -v`, and the
/// tracer's background-thread CPU seconds (its `SIGMATRACE_DIAG=info` exit line; 0 without).
fn time_v(cmd: &mut Command) -> (u64, f64, f64) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed: {err}");
    let field = |name: &str| -> f64 {
        err.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name:?} in {err}"))
    };
    let background = err
        .lines()
        .find_map(|l| l.strip_prefix("sigmatrace: background thread CPU "))
        .and_then(|v| v.trim_end_matches(" s").parse().ok())
        .unwrap_or(0.0);
    (
        field("Maximum resident set size (kbytes):") as u64,
        field("User time (seconds):") + field("System time (seconds):"),
        background,
    )
}

/// One `ib_write_bw -q 16 -s 8 -n <iters>` client run over softnic (its server on another
/// softnic node, untraced): peak RSS (kB) and user+system seconds of the client, traced into
/// `logs` when given.
fn write_bw_run(
    softnic: &Path,
    iters: &str,
    fabric: &Path,
    port: u32,
    traced_into: Option<(&Path, &Path, bool)>,
) -> (u64, f64, f64) {
    let side = |node: &str| {
        let mut c = Command::new(softnic);
        c.args(["--node", node, "--fabric"]).arg(fabric).arg("--");
        c.arg("/usr/bin/ib_write_bw").args([
            "-q",
            "16",
            "-s",
            "8",
            "-n",
            iters,
            "-p",
            &port.to_string(),
        ]);
        c
    };
    let mut server = side("1")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("server");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mut client = Command::new("/usr/bin/time");
    client.arg("-v");
    let mut c = side("2");
    c.arg("localhost");
    client.arg(c.get_program()).args(c.get_args());
    if let Some((lib, logs, direct)) = traced_into {
        traced(&mut client, lib, logs)
            .env("SIGMATRACE_DIAG", "info")
            .env("SIGMATRACE_DIRECT_IO", if direct { "1" } else { "0" });
    }
    let r = time_v(&mut client);
    let _ = server.wait();
    r
}

/// Bytes, posted WRs and WR events (posts, receives, completions) of the logs in `logs`.
fn log_volume(logs: &Path) -> (u64, u64, u64) {
    use sigmatrace_schemas::RecordKind as K;
    let (mut bytes, mut posts, mut events) = (0u64, 0u64, 0u64);
    for e in std::fs::read_dir(logs).expect("log directory").flatten() {
        bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
        let log = sigmatrace_schemas::LogFile::open(&e.path()).expect("log");
        for c in log.chunks() {
            for r in log.records(c).flatten() {
                let k = K::from_id(r.kind);
                posts += (k == Some(K::PostSend)) as u64;
                events += matches!(k, Some(K::PostSend | K::PostRecv | K::WorkCompletion)) as u64;
            }
        }
    }
    (bytes, posts, events)
}

/// Section 3: `ib_write_bw -q 16 -s 8 -n N` over softnic, untraced and traced runs interleaved
/// (client only): peak RSS, log volume, and the CPU the tracer adds per WR event.
fn write_bw_memory(dir: &Path, lib: &Path, tmp: &Path) {
    let iters = env_num("OVERHEAD_BW_ITERS", 1_000_000).to_string();
    let rounds = env_num("OVERHEAD_BW_ROUNDS", 3).max(1);
    println!("== 3. memory and tracer CPU: ib_write_bw -q 16 -s 8 -n {iters} client over softnic ({rounds} untraced/traced pairs, interleaved)");
    let softnic = dir.join("softnic-run");
    let bw = Path::new("/usr/bin/ib_write_bw");
    if !softnic.exists() || !bw.exists() || !Path::new("/usr/bin/time").exists() {
        println!("(needs softnic-run, /usr/bin/ib_write_bw and /usr/bin/time: skipped)");
        return;
    }
    let logs = tmp.join("bw-logs");
    let fabric = tmp.join("bw-fabric");
    let base = 20_000 + std::process::id() % 20_000;
    let (mut rss, mut cpu, mut per_event, mut per_wr, mut bg, mut bg_buffered) = (
        [vec![], vec![]],
        [vec![], vec![]],
        vec![],
        vec![],
        vec![],
        vec![],
    );
    for round in 0..rounds as u32 {
        let port = base + 3 * round;
        let u = write_bw_run(&softnic, &iters, &fabric, port, None);
        let t = write_bw_run(
            &softnic,
            &iters,
            &fabric,
            port + 1,
            Some((lib, &logs, true)),
        );
        let (bytes, posts, events) = log_volume(&logs);
        let _ = std::fs::remove_dir_all(&logs);
        // The same traced run with the drain through the page cache, for its background CPU.
        let b = write_bw_run(
            &softnic,
            &iters,
            &fabric,
            port + 2,
            Some((lib, &logs, false)),
        );
        let (_, _, buffered_events) = log_volume(&logs);
        let _ = std::fs::remove_dir_all(&logs);
        bg_buffered.push(b.2 * 1e9 / buffered_events.max(1) as f64);
        for (i, (r, c, _)) in [u, t].into_iter().enumerate() {
            rss[i].push(r as f64 / 1024.0);
            cpu[i].push(c);
        }
        let per = |s: f64| s * 1e9 / events.max(1) as f64;
        per_event.push(per(t.1 - u.1));
        bg.push(per(t.2));
        per_wr.push(bytes as f64 / posts.max(1) as f64);
        println!(
            "  pair {round}: client CPU {:.2} s untraced, {:.2} s traced (background thread {:.2} s, {:.2} s buffered); {posts} posted WRs, {events} WR events, {:.1} MB of log",
            u.1, t.1, t.2, b.2, bytes as f64 / 1e6
        );
    }
    let added: Vec<f64> = rss[1].iter().zip(&rss[0]).map(|(t, u)| t - u).collect();
    println!(
        "peak RSS: untraced {} MB, traced {} MB",
        summary(&rss[0], 0),
        summary(&rss[1], 0)
    );
    println!("peak RSS added by the tracer: {} MB", summary(&added, 1));
    println!("log bytes per WR: {}", summary(&per_wr, 1));
    println!(
        "client CPU: untraced {} s, traced {} s",
        summary(&cpu[0], 2),
        summary(&cpu[1], 2)
    );
    println!("tracer CPU per WR event: {} ns", summary(&per_event, 1));
    println!(
        "  of which the background thread (drain to the file, direct I/O): {} ns",
        summary(&bg, 1)
    );
    println!(
        "  the background thread with SIGMATRACE_DIRECT_IO=0 (buffered): {} ns",
        summary(&bg_buffered, 1)
    );
}
