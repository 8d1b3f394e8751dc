//! Per-thread rings (`WriterOptions::ring_chunks`): threads append into reused slots that a
//! drainer copies to their final positions; a SIGKILL leaves every committed record readable
//! exactly once — drained or still in a ring slot, or in both during the copy.

mod common;

use common::*;
use sigmatrace_schemas::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "SIGMATRACE_SCHEMAS_RING_CHILD";
const CS: u32 = 1 << 12;
const THREADS: u32 = 4;
/// Records per thread in the counted run: about 300 chunks each, so most are drained.
const COUNTED: u64 = 20_000;

/// A writer with rings drained as the interposer drains them (direct I/O where the file
/// system has it); the size-cap test below drains through the page cache.
fn ring_writer(path: &Path, ring_chunks: u32) -> LogWriter {
    LogWriter::create(
        path,
        &test_header(),
        WriterOptions {
            chunk_size: CS,
            max_bytes: 1 << 30,
            ring_chunks,
            direct_io: true,
            ..Default::default()
        },
    )
    .expect("create log")
}

/// Whether a chunk sits in a ring slot (not at its final position).
fn in_ring(c: &ChunkInfo) -> bool {
    c.offset != (HEADER_SIZE + c.header.index as usize * CS as usize) as u64
}

/// Every record of the log per thread in chunk-index order; asserts nothing is torn and
/// each thread's sequence numbers run 0, 1, 2, … without gap or repeat.
fn sequences(path: &Path) -> ([u64; THREADS as usize], usize, usize) {
    let log = LogFile::open(path).unwrap();
    let s = log.salvage();
    assert_eq!((s.lost_bytes, s.lost_records), (0, 0), "{s:?}");
    assert!(s.issues.is_empty(), "{s:?}");
    let mut chunks: Vec<_> = log.chunks().to_vec();
    chunks.sort_by_key(|c| c.header.index);
    let mut next = [0u64; THREADS as usize];
    for c in &chunks {
        for r in log.records(c) {
            match r.expect("committed records are whole").decode().unwrap() {
                Record::PostSend(p) => {
                    let t = p.qpn as usize;
                    assert_eq!(p.wr_id, next[t], "gap or repeat in thread {t}");
                    assert_eq!(*p, post_full(next[t], t as u32));
                    next[t] += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let ringed = chunks.iter().filter(|c| in_ring(c)).count();
    (next, ringed, chunks.len() - ringed)
}

/// Records per thread appended after the drainer stopped: more than two 4 KiB chunks (63
/// records each) and at most three, so each thread leaves at least one finished and one live
/// chunk undrained in its ring (4 slots, all free after the last drain).
const TAIL: u64 = 150;

/// Records the holding thread of the mid-run child appends before it looks for a ring slot.
const HOLDER_RECORDS: u64 = 2_000;
/// Records each other thread of the mid-run child appends before the kill may come.
const MID_RUN_MIN: u64 = 1_001;

/// In the child: THREADS threads append through 4-slot rings while a drainer runs. With a
/// count, they append `count − TAIL` records each, the drainer drains everything and stops,
/// they append TAIL more, signal `<path>.done` and wait to be killed; without (mid-run),
/// thread 0 appends HOLDER_RECORDS and then until its live chunk is in a ring slot, stops
/// there (a live chunk is never drained) and writes its count to `<path>.held`, while the others append
/// until killed (the last to pass MID_RUN_MIN records creates `<path>.started`) — so at the
/// kill at least one chunk is in a ring and every thread has run, whatever the scheduling.
#[test]
fn ring_child_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (path, count) = match spec.split_once('#') {
        Some((p, n)) => (p.to_owned(), Some(n.parse::<u64>().unwrap())),
        None => (spec, None),
    };
    let w = ring_writer(Path::new(&path), 4);
    let done = std::sync::atomic::AtomicU32::new(0);
    let started = std::sync::atomic::AtomicU32::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let phase = std::sync::Barrier::new(THREADS as usize + 1);
    std::thread::scope(|s| {
        let (drainer, stop, phase) = (&w, &stop, &phase);
        s.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                drainer.drain();
                std::thread::sleep(Duration::from_micros(100));
            }
            while drainer.drain().chunks > 0 {}
            phase.wait();
        });
        for t in 0..THREADS {
            let mut tw = w.thread_writer(t + 1);
            let (done, started, path) = (&done, &started, &path);
            s.spawn(move || {
                let mut i = 0u64;
                if count.is_none() && t == 0 {
                    while i < HOLDER_RECORDS || !tw.in_ring_slot() {
                        assert!(tw.append(&post_full(i, t)));
                        i += 1;
                    }
                    std::fs::write(format!("{path}.held"), i.to_string()).unwrap();
                    loop {
                        std::thread::park();
                    }
                }
                while count.is_none_or(|n| i < n - TAIL) {
                    assert!(tw.append(&post_full(i, t)));
                    i += 1;
                    if count.is_none()
                        && i == MID_RUN_MIN
                        && started.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 2 == THREADS
                    {
                        std::fs::write(format!("{path}.started"), b"").unwrap();
                    }
                }
                if done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == THREADS {
                    stop.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                phase.wait();
                for _ in 0..TAIL {
                    assert!(tw.append(&post_full(i, t)));
                    i += 1;
                }
                if done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == 2 * THREADS {
                    std::fs::write(format!("{path}.done"), b"").unwrap();
                }
                loop {
                    std::thread::park();
                }
            });
        }
    });
}

fn spawn_child(spec: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ring_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, spec)
        .spawn()
        .unwrap()
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(60), "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigkill_after_a_counted_run_leaves_exactly_every_record_drained_or_in_a_ring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counted.sigmalog");
    let mut child = spawn_child(&format!("{}#{COUNTED}", path.display()));
    let done = dir.path().join("counted.sigmalog.done");
    wait_for("the child never finished its records", || done.exists());
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let (next, ringed, drained) = sequences(&path);
    assert_eq!(next, [COUNTED; THREADS as usize]);
    // Each thread's last two or three chunks were never drained (see TAIL).
    assert!(ringed >= 2 * THREADS as usize, "{ringed} chunks in rings");
    assert!(drained > 100, "{drained} chunks drained");
}

#[test]
fn sigkill_mid_run_loses_nothing_committed_and_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.sigmalog");
    let mut child = spawn_child(&path.display().to_string());
    let held = dir.path().join("killed.sigmalog.held");
    let started = dir.path().join("killed.sigmalog.started");
    wait_for("the child never wrote", || {
        held.exists()
            && started.exists()
            && std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) > 16 << 20
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let (next, ringed, drained) = sequences(&path);
    // Every record the holder appended, the last ones from its live chunk in a ring slot.
    let held: u64 = std::fs::read_to_string(&held).unwrap().parse().unwrap();
    assert!(held >= HOLDER_RECORDS);
    assert_eq!(next[0], held);
    assert!(next.iter().all(|&n| n >= MID_RUN_MIN), "{next:?}");
    // The holder's live chunk at least (the other threads' undrained chunks vary with load).
    assert!(ringed >= 1, "{ringed} chunks in rings");
    assert!(drained > 100, "{drained} chunks drained");
}

#[test]
fn a_threads_pages_are_faulted_once_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reuse.sigmalog");
    let w = ring_writer(&path, 4);
    let mut tw = w.thread_writer(1);
    let mut drained = 0;
    for i in 0..200_000u64 {
        tw.append(&post_full(i, 0));
        if i % 32 == 0 {
            drained += w.drain().chunks;
        }
    }
    drained += w.drain().chunks;
    // 12.8 MB appended; resident: the 4 slots (16 KiB) and at most a few pages more.
    let rss = resident_kb(&path);
    assert!(rss <= 4 * 4 + 8, "{rss} kB of the log resident");
    // 200 000 × 64 bytes in 4 KiB chunks: about 3 200 chunks, all but the live one drained
    // through 4 slots (none fell back to a plain chunk: every chunk but one is at home).
    let (next, ringed, home) = sequences(&path);
    assert_eq!(next[0], 200_000);
    assert_eq!(ringed, 1, "only the live chunk is in a ring slot");
    assert_eq!(home as u32, drained);
    // The file holds the 4 ring slots ahead of the chunks.
    let log = LogFile::open(&path).unwrap();
    assert!(log.chunks().iter().all(|c| c.header.index >= 4));
}

#[test]
fn the_size_cap_counts_every_event_past_the_last_position() {
    // A cap that fits the ring and three more positions: the fourth drained chunk has no
    // position, so the writer runs dry and counts the rest.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cap.sigmalog");
    let w = LogWriter::create(
        &path,
        &test_header(),
        WriterOptions {
            chunk_size: CS,
            max_bytes: (HEADER_SIZE + 7 * CS as usize) as u64,
            ring_chunks: 4,
            ..Default::default()
        },
    )
    .unwrap();
    let mut tw = w.thread_writer(1);
    let (mut ok, total) = (0u64, 1000u64);
    for i in 0..total {
        ok += tw.append(&post_full(ok, 0)) as u64;
        if i % 10 == 0 {
            w.drain();
        }
    }
    let losses = w.losses();
    assert_eq!(
        losses.by_kind,
        vec![(RecordKind::PostSend as u16, total - ok)]
    );
    assert!(ok > 100 && ok < total, "{ok}");
    let (next, _, _) = sequences_lenient(&path);
    assert_eq!(next, ok);
}

/// Like `sequences` for one thread, allowing the loss marker.
fn sequences_lenient(path: &Path) -> (u64, usize, usize) {
    let log = LogFile::open(path).unwrap();
    let mut chunks: Vec<_> = log.chunks().to_vec();
    chunks.sort_by_key(|c| c.header.index);
    let mut next = 0;
    for c in &chunks {
        for r in log.records(c) {
            match r.unwrap().decode().unwrap() {
                Record::PostSend(p) => {
                    assert_eq!(p.wr_id, next);
                    next += 1;
                }
                Record::Dropped(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    (next, 0, chunks.len())
}

/// The drainer's direct I/O (`WriterOptions::direct_io`, on the test's file system): every
/// record read back once and in order from 64 KiB chunks drained with block-rounded direct
/// writes, and the bytes a drained chunk holds past its records up to the block end are
/// zeros (the slot's stale bytes from its previous chunk do not reach the file).
#[test]
fn direct_io_drains_every_record_once_and_no_stale_bytes() {
    const BIG: u32 = 64 << 10;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("direct.sigmalog");
    let w = LogWriter::create(
        &path,
        &test_header(),
        WriterOptions {
            chunk_size: BIG,
            max_bytes: 1 << 30,
            ring_chunks: 4,
            direct_io: true,
            ..Default::default()
        },
    )
    .expect("create log");
    assert!(w.drains_direct(), "direct I/O on {}", dir.path().display());
    let mut tw = w.thread_writer(1);
    // Records of 64 and 24 bytes alternating in runs, so that chunks end at different
    // offsets inside their last block; the slots are reused 25 times each.
    let mut drained = 0;
    for i in 0..100_000u64 {
        tw.append(&post_full(i, 0));
        if i % 7 == 0 {
            tw.append(&Dropped {
                hdr: RecordHeader::of::<Dropped>(drop_reason::INTERNAL_ERROR),
                ts: i,
                count: 1,
            });
        }
        if i % 64 == 0 {
            drained += w.drain().chunks;
        }
    }
    drained += w.drain().chunks;
    assert!(w.drains_direct(), "no direct write was refused");
    assert!(drained >= 100, "{drained} chunks drained");
    let log = LogFile::open(&path).unwrap();
    let s = log.salvage();
    assert_eq!((s.lost_bytes, s.lost_records), (0, 0), "{s:?}");
    let mut chunks: Vec<_> = log.chunks().to_vec();
    chunks.sort_by_key(|c| c.header.index);
    let mut next = 0u64;
    for c in &chunks {
        for r in log.records(c) {
            if let Record::PostSend(p) = r.expect("whole records").decode().unwrap() {
                assert_eq!(p.wr_id, next, "gap or repeat");
                next += 1;
            }
        }
    }
    assert_eq!(next, 100_000);
    let bytes = std::fs::read(&path).unwrap();
    let home = |c: &ChunkInfo| (HEADER_SIZE + c.header.index as usize * BIG as usize) as u64;
    let mut checked = 0;
    for c in chunks.iter().filter(|c| c.offset == home(c)) {
        let end = c.offset as usize + 64 + c.header.committed_bytes() as usize;
        let block_end = end.next_multiple_of(4096);
        assert!(
            bytes[end..block_end].iter().all(|&b| b == 0),
            "stale bytes after the records of chunk {}",
            c.header.index
        );
        checked += 1;
    }
    assert!(
        checked as u32 >= drained - 1,
        "{checked} drained chunks checked"
    );
}

/// `set_drain_waker`'s function, for [`a_finished_ring_chunk_wakes_the_parked_drainer`]: counts
/// its calls and unparks the test's drainer.
fn wake_test_drainer() {
    WAKES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    if let Some(t) = TEST_DRAINER.get() {
        t.unpark();
    }
}
static WAKES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static TEST_DRAINER: std::sync::OnceLock<std::thread::Thread> = std::sync::OnceLock::new();

/// The drainer parks for a minute between passes (as the interposer's backs off when idle);
/// the waker is called once per finished ring chunk, right after it is FULL, and wakes it: the
/// writer, waiting for each finished chunk to be drained before it goes on, never waits long
/// (20 s is the limit: without the waker the first wait lasts the minute) and never runs out
/// of FREE slots (its chunk is always a ring slot), and every record is read back once.
#[test]
fn a_finished_ring_chunk_wakes_the_parked_drainer() {
    use std::sync::atomic::Ordering::SeqCst;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("woken.sigmalog");
    let w = ring_writer(&path, 2);
    w.set_drain_waker(wake_test_drainer);
    let drained = std::sync::atomic::AtomicU64::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let total = 40 * 63u64;
    std::thread::scope(|s| {
        let (w, drained, stop) = (&w, &drained, &stop);
        let drainer = s.spawn(move || {
            let _ = TEST_DRAINER.set(std::thread::current());
            while !stop.load(SeqCst) {
                drained.fetch_add(w.drain().chunks as u64, SeqCst);
                std::thread::park_timeout(Duration::from_secs(60));
            }
        });
        while TEST_DRAINER.get().is_none() {
            std::thread::yield_now();
        }
        // Stops the drainer however this thread leaves the scope (a failed assertion too).
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool, std::thread::Thread);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
                self.1.unpark();
            }
        }
        let _stop = Stop(stop, drainer.thread().clone());
        let mut tw = w.thread_writer(1);
        for i in 0..total {
            assert!(tw.append(&post_full(i, 0)));
            assert!(
                tw.in_ring_slot(),
                "record {i}: the ring ran out of FREE slots"
            );
            let deadline = Instant::now() + Duration::from_secs(20);
            while drained.load(SeqCst) < WAKES.load(SeqCst) {
                assert!(
                    Instant::now() < deadline,
                    "record {i}: the drainer was not woken"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(tw);
    });
    drained.fetch_add(w.drain().chunks as u64, SeqCst);
    let wakes = WAKES.load(SeqCst);
    assert!(
        wakes >= 39,
        "{wakes} wakes for {total} records in 4 KiB chunks"
    );
    assert_eq!(drained.load(SeqCst), wakes, "one wake per finished chunk");
    let (next, _, _) = sequences_lenient(&path);
    assert_eq!(next, total);
}
