//! A writer process killed with SIGKILL mid-run: every committed record is readable — also
//! those of chunks a background thread was handing back (`release_retired`) meanwhile.

mod common;

use common::*;
use sigmatrace_schemas::*;
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "SIGMATRACE_SCHEMAS_KILL_CHILD";

/// In the child: append numbered records from 4 threads forever, while a fifth hands back
/// the chunks they finished.
#[test]
fn child_writer_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let w = writer(std::path::Path::new(&path), 1 << 12, 1 << 30);
    let barrier = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        let releaser = &w;
        s.spawn(move || loop {
            releaser.release_retired();
            std::thread::sleep(std::time::Duration::from_micros(200));
        });
        for t in 0..4u32 {
            let mut tw = w.thread_writer(t + 1);
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                let mut i = 0u64;
                loop {
                    tw.append(&post(i, t));
                    if i.is_multiple_of(64) {
                        tw.append_meta(
                            RecordKind::Annotation,
                            t,
                            i,
                            i,
                            format!("note {i}").as_bytes(),
                        );
                    }
                    i += 1;
                }
            });
        }
    });
}

#[test]
fn sigkill_mid_run_loses_nothing_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.sigmalog");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_writer_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .spawn()
        .unwrap();
    // Wait until the child has written a good amount, then kill it without warning.
    let start = Instant::now();
    loop {
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len > 16 << 20 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "child never wrote"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let log = LogFile::open(&path).unwrap();
    let s = log.salvage();
    assert_eq!((s.lost_bytes, s.lost_records), (0, 0), "{s:?}");
    assert!(s.issues.is_empty(), "{s:?}");
    let mut next = [0u64; 4];
    let mut total = 0u64;
    let mut chunks: Vec<_> = log.chunks().to_vec();
    chunks.sort_by_key(|c| c.header.index);
    for c in &chunks {
        assert_eq!(c.readable, c.header.committed_bytes());
        let mut n = 0;
        for r in log.records(c) {
            let r = r.expect("committed records are whole");
            n += 1;
            match r.decode().unwrap() {
                Record::PostSend(p) => {
                    let t = p.qpn as usize;
                    assert_eq!(p.wr_id, next[t], "gap in thread {t}");
                    assert_eq!(*p, post(next[t], t as u32));
                    next[t] += 1;
                    total += 1;
                }
                Record::Annotation(m) => assert_eq!(m.text(), format!("note {}", m.key)),
                other => panic!("unexpected {other:?}"),
            }
        }
        // Every committed record is read; compact records' context records are consumed.
        assert_eq!(
            log.raw_records(c).count() as u32,
            c.header.committed_records()
        );
        assert!(n <= c.header.committed_records());
    }
    assert!(total > 10_000, "only {total} records");
    assert!(next.iter().all(|&n| n > 0));
}
