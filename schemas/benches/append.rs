//! Writer benchmark: cost of appending one 64-byte hot record, on one thread and with 8
//! threads appending at once. Run: `cargo bench -p sigmatrace-schemas --bench append`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sigmatrace_schemas::*;
use std::time::{Duration, Instant};

fn record(i: u64) -> PostSend {
    PostSend {
        hdr: RecordHeader::of::<PostSend>(2),
        ts: i,
        wr_id: i,
        qpn: 7,
        bytes: 8,
        num_sge: 1,
        ..Default::default()
    }
}

/// A fresh log large enough for `n` records per thread; files live in a temp dir.
fn fresh(dir: &std::path::Path, name: &str, records: u64) -> LogWriter {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    LogWriter::create(
        &path,
        &FileHeader::uncalibrated(DEFAULT_CHUNK_SIZE),
        WriterOptions {
            chunk_size: 1 << 20,
            max_bytes: (records * 64 * 2).max(64 << 20),
            ..Default::default()
        },
    )
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut g = c.benchmark_group("append");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));
    // Hot path: chunks provisioned beforehand (what the interposer's background preparer
    // does), so the timed loop measures the append itself.
    g.bench_function("one_thread_64B_provisioned", |b| {
        b.iter_custom(|iters| {
            let w = fresh(dir.path(), "hot.sigmalog", iters);
            let chunks = (iters * 64).div_ceil((1 << 20) - 64) as u32 + 1;
            w.prefault_ahead(chunks).unwrap();
            let mut tw = w.thread_writer(1);
            let t = Instant::now();
            for i in 0..iters {
                tw.append(&record(i));
            }
            t.elapsed()
        })
    });
    // Including the kernel's cost of providing fresh file pages (MADV_POPULATE_WRITE at each
    // chunk allocation, on the appending thread).
    g.bench_function("one_thread_64B", |b| {
        b.iter_custom(|iters| {
            let w = fresh(dir.path(), "one.sigmalog", iters);
            let mut tw = w.thread_writer(1);
            let t = Instant::now();
            for i in 0..iters {
                tw.append(&record(i));
            }
            t.elapsed()
        })
    });
    for threads in [2u64, 8] {
        g.bench_function(format!("{threads}_threads_64B_provisioned"), |b| {
            b.iter_custom(|iters| {
                let w = fresh(dir.path(), "mt.sigmalog", iters * threads);
                let chunks =
                    (iters * threads * 64).div_ceil((1 << 20) - 64) as u32 + threads as u32;
                w.prefault_ahead(chunks).unwrap();
                let barrier = std::sync::Barrier::new(threads as usize);
                let total: Duration = std::thread::scope(|s| {
                    let hs: Vec<_> = (0..threads)
                        .map(|t| {
                            let mut tw = w.thread_writer(t as u32);
                            let barrier = &barrier;
                            s.spawn(move || {
                                barrier.wait();
                                let start = Instant::now();
                                for i in 0..iters {
                                    tw.append(&record(i));
                                }
                                start.elapsed()
                            })
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap()).sum()
                });
                // Mean per-thread time per append.
                total / threads as u32
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
