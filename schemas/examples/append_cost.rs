//! Appends N 64-byte records on one thread; run under callgrind with two values of N to get
//! the instructions per append:
//! `valgrind --tool=callgrind target/release/examples/append_cost 0` and `... 1000000`,
//! then (Ir(1000000) - Ir(0)) / 1000000. `scripts/bench-writer.sh` does exactly that.

use sigmatrace_schemas::*;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("sigmatrace-append-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cost.sigmalog");
    let ts = Timestamper::detect();
    let h = FileHeader::uncalibrated(DEFAULT_CHUNK_SIZE);
    let w = LogWriter::create(
        &path,
        &h,
        WriterOptions {
            chunk_size: 1 << 20,
            max_bytes: 1 << 30,
            ..Default::default()
        },
    )
    .unwrap();
    let mut tw = w.thread_writer(1);
    let start = std::time::Instant::now();
    for i in 0..n {
        let rec = PostSend {
            hdr: RecordHeader::of::<PostSend>(2),
            ts: ts.now(),
            wr_id: i,
            qpn: 7,
            bytes: 8,
            num_sge: 1,
            ..Default::default()
        };
        std::hint::black_box(tw.append(std::hint::black_box(&rec)));
    }
    let el = start.elapsed();
    if n > 0 {
        println!(
            "{n} appends (timestamp + 64-byte record): {:.2} ns/append",
            el.as_nanos() as f64 / n as f64
        );
    }
    drop(tw);
    drop(w);
    let _ = std::fs::remove_dir_all(&dir);
}
