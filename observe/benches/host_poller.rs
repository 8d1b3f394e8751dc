//! Host poller cost and capture rate.
//!
//! `cargo bench -p sigmatrace-observe --bench host_poller` — phases:
//! 0. watcher: single-thread decode capacity (full 4096-WQEBB ring per poll);
//! 1. idle: 8 registered queues, no traffic, 2 s → poller CPU (adaptive backoff);
//! 2. paced: 1 producer thread at ~200 k WQE/s (one WQE, then spin to the next slot time);
//! 3. flat out: 1 producer thread posting as fast as it can into a 4096-WQEBB ring.
//!    Capture = WQEs observed / WQEs posted; losses are counted overruns, never silent.
//!
//! Numbers depend on the machine and on other load (2 shared cores in CI).

use std::time::{Duration, Instant};

use sigmatrace_mlx5::wqe::{opcode, WqeBuilder};
use sigmatrace_observe::sim::SimSendQueue;
use sigmatrace_observe::{HostPoller, PollerConfig, PollerStats};
use sigmatrace_schemas::{TimestampSource, Timestamper};

fn run(name: &str, queues: usize, secs: f64, rate: Option<f64>) -> (u64, PollerStats) {
    let ts = Timestamper::with_source(TimestampSource::MonotonicRaw);
    let poller = HostPoller::start(PollerConfig::default(), ts, None, None).expect("start");
    let mut qs: Vec<SimSendQueue> = (0..queues)
        .map(|i| SimSendQueue::new(i as u32 + 1, 4096))
        .collect();
    let handles: Vec<_> = qs
        .iter()
        .map(|q| poller.register(q.as_queue(), q.memory()).expect("register"))
        .collect();
    let mut posted = 0u64;
    let start = Instant::now();
    let end = Duration::from_secs_f64(secs);
    {
        let q = &mut qs[0];
        let period = rate
            .filter(|r| *r > 0.0)
            .map(|r| Duration::from_secs_f64(1.0 / r));
        let mut next = Instant::now();
        while start.elapsed() < end {
            if rate == Some(0.0) {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            for _ in 0..64 {
                let b = WqeBuilder::new(opcode::RDMA_WRITE, q.pi(), q.qpn)
                    .fm_ce_se(0x08)
                    .raddr(0x1000, 1)
                    .data(0x2000, 2, 64)
                    .finish();
                q.post(&b);
                posted += 1;
                if let Some(p) = period {
                    next += p;
                    while Instant::now() < next {
                        std::hint::spin_loop();
                    }
                }
            }
        }
    }
    let wall = start.elapsed();
    for h in handles {
        poller.unregister(h);
    }
    let (_, s) = poller.stop();
    let capture = if posted > 0 {
        s.wqes as f64 / posted as f64
    } else {
        1.0
    };
    println!(
        "{name:<10} wall {:.2}s posted {posted} ({:.0}/s) observed {} lost_wqebbs {} (of which estimated PI laps {}) unaccounted {} capture {:.4} poller_cpu {:.1}% cpu_ns_per_wqe {:.0} passes {} sleeps {}",
        wall.as_secs_f64(),
        posted as f64 / wall.as_secs_f64(),
        s.wqes,
        s.wqebbs_lost,
        s.wqebbs_lost_estimated,
        posted as i64 - s.wqes as i64 - s.wqebbs_lost as i64,
        capture,
        100.0 * s.cpu_fraction(),
        if s.wqes > 0 { s.cpu_ns as f64 / s.wqes as f64 } else { 0.0 },
        s.passes,
        s.sleeps
    );
    (posted, s)
}

/// Single-thread watcher capacity: post a full ring, time one poll over it.
fn watcher_capacity(rounds: u32) {
    use sigmatrace_observe::SendWatcher;
    let mut q = SimSendQueue::new(1, 4096);
    let mem = q.memory();
    let mut w = SendWatcher::new(q.desc(), 0, None, &mem).expect("watcher");
    let mut total = Duration::ZERO;
    let mut n = 0u64;
    for _ in 0..rounds {
        for _ in 0..4096 {
            let b = WqeBuilder::new(opcode::RDMA_WRITE, q.pi(), 1)
                .fm_ce_se(0x08)
                .raddr(0x1000, 1)
                .data(0x2000, 2, 64)
                .finish();
            q.post(&b);
        }
        let t = Instant::now();
        n += w
            .poll(&mem, 0, &mut |o| {
                std::hint::black_box(o);
            })
            .expect("poll") as u64;
        total += t.elapsed();
    }
    println!(
        "watcher    {n} WQEs decoded in {:.3}s: {:.0} ns/WQE ({:.2} M WQE/s per core)",
        total.as_secs_f64(),
        total.as_nanos() as f64 / n as f64,
        n as f64 / total.as_secs_f64() / 1e6
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing: keep that short.
    let quick = !std::env::args().any(|a| a == "--bench");
    let secs = if quick { 0.2 } else { 2.0 };
    watcher_capacity(if quick { 4 } else { 100 });
    run("idle", 8, secs, Some(0.0));
    run("paced", 1, secs, Some(200_000.0));
    run("flat-out", 1, secs, None);
}
