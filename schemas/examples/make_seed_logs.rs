//! Writes small, valid logs (several chunks, every record class) into a directory, as a seed
//! corpus for the reader fuzz target: `cargo run -p sigmatrace-schemas --example
//! make_seed_logs -- schemas/fuzz/corpus/reader`.

use sigmatrace_schemas::*;

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: make_seed_logs DIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let ts = Timestamper::detect();
    for (i, records) in [3u64, 70, 200].into_iter().enumerate() {
        let path = dir.join(format!("seed-{i}.sigmalog"));
        let _ = std::fs::remove_file(&path);
        let h = FileHeader::uncalibrated(4096);
        let w = LogWriter::create(
            &path,
            &h,
            WriterOptions {
                chunk_size: 4096,
                max_bytes: 1 << 20,
                ..Default::default()
            },
        )
        .unwrap();
        let mut tw = w.thread_writer(1);
        tw.append(&ts.snapshot());
        tw.append_meta(RecordKind::ThreadName, 0, 1, 1, b"main");
        for n in 0..records {
            tw.append(&PostSend {
                hdr: RecordHeader::of::<PostSend>(2),
                ts: n,
                wr_id: n,
                qpn: 5,
                bytes: 8,
                ..Default::default()
            });
            tw.append(&WorkCompletion {
                hdr: RecordHeader::of::<WorkCompletion>(0),
                ts: n + 1,
                wr_id: n,
                qpn: 5,
                ..Default::default()
            });
            if n % 50 == 0 {
                tw.append(&QpModify {
                    hdr: RecordHeader::of::<QpModify>(1),
                    qpn: 5,
                    dest_qpn: 6,
                    ..Default::default()
                });
                tw.append_meta(RecordKind::Annotation, 0, n, n, b"seed annotation");
            }
        }
        let mut other = w.thread_writer(2);
        other.append(&EmptyPolls {
            hdr: RecordHeader::of::<EmptyPolls>(0),
            ts: 9,
            first_ts: 1,
            cq: 1,
            count: 4,
        });
    }
}
