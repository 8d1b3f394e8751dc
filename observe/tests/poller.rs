//! The host poller against simulated producer threads posting IBGDA-style: every WQE observed
//! exactly once with identical content (read back from the log), forced overruns counted
//! exactly, dynamic register/unregister from several threads.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sigmatrace_mlx5::wqe::{opcode, WqeBuilder};
use sigmatrace_observe::poller::ObservationSink;
use sigmatrace_observe::sim::{SimCq, SimSendQueue};
use sigmatrace_observe::{HostPoller, Observation, PollerConfig};
use sigmatrace_schemas::{
    FileHeader, LogFile, LogWriter, Record, TimestampSource, Timestamper, WqeObserved,
    WriterOptions,
};

fn wqe(i: u32, pi: u16, qpn: u32) -> Vec<u8> {
    match i % 4 {
        0 => WqeBuilder::new(opcode::RDMA_WRITE, pi, qpn)
            .fm_ce_se(0x08)
            .raddr(0x1000_0000 + i as u64 * 64, 0x77)
            .data(0x2000, 5, 64 + i % 100)
            .finish(),
        1 => WqeBuilder::new(opcode::ATOMIC_FA, pi, qpn)
            .raddr(0x3000_0000, 0x78)
            .atomic(i as u64, 0)
            .data(0x4000, 5, 8)
            .finish(),
        2 => WqeBuilder::new(opcode::RDMA_WRITE_IMM, pi, qpn)
            .imm(i)
            .raddr(0x5000_0000 + i as u64, 0x79)
            .inline(&[i as u8; 20])
            .pad(4)
            .finish(),
        _ => WqeBuilder::new(opcode::NOP, pi, qpn).finish(),
    }
}

fn open_log(dir: &tempfile::TempDir) -> (LogWriter, std::path::PathBuf) {
    let ts = Timestamper::with_source(TimestampSource::MonotonicRaw);
    let hdr = FileHeader::for_current_process(
        TimestampSource::MonotonicRaw,
        1_000_000_000,
        ts.snapshot(),
        1 << 16,
    );
    let path = dir.path().join("obs.sigmatrace");
    (
        LogWriter::create(
            &path,
            &hdr,
            WriterOptions {
                chunk_size: 1 << 16,
                max_bytes: 64 << 20,
                ..Default::default()
            },
        )
        .unwrap(),
        path,
    )
}

#[test]
fn every_wqe_observed_exactly_once_with_identical_content() {
    let dir = tempfile::tempdir().unwrap();
    let (log, path) = open_log(&dir);
    let cfg = PollerConfig {
        spin_passes: 50,
        min_sleep: Duration::from_micros(20),
        max_sleep: Duration::from_micros(200),
    };
    let ts = Timestamper::with_source(TimestampSource::MonotonicRaw);
    // Flow control like a real producer waiting for completions: the sink counts WQEBBs
    // observed per queue and producers stay within half a ring of it (no timing assumptions).
    let observed: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
    let o2 = observed.clone();
    let sink: ObservationSink = Box::new(move |o: &Observation| {
        if let Observation::Wqe(r, d) = o {
            o2[(r.qpn - 0x100) as usize]
                .fetch_add(d.wqebbs as u64, std::sync::atomic::Ordering::Release);
        }
    });
    let poller = HostPoller::start(cfg, ts, Some(log.thread_writer(1)), Some(sink)).unwrap();
    const QUEUES: u32 = 3;
    const PER_QUEUE: u32 = 3000;
    let mut producers = Vec::new();
    let expected = Arc::new(Mutex::new(Vec::<(u32, u16, Vec<u8>)>::new()));
    for qn in 0..QUEUES {
        // Depth 1024 WQEBBs and a producer that waits for the poller when 3/4 full, like real
        // flow control waits for completions.
        let mut q = SimSendQueue::new(0x100 + qn, 1024);
        let h = poller.register(q.as_queue(), q.memory()).unwrap();
        let exp = expected.clone();
        let seen = observed.clone();
        producers.push((
            h,
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut bbs = 0u64;
                for i in 0..PER_QUEUE {
                    let b = wqe(i, q.pi(), q.qpn);
                    while bbs - seen[qn as usize].load(std::sync::atomic::Ordering::Acquire) > 512 {
                        std::thread::yield_now();
                    }
                    mine.push((q.qpn, q.pi(), b.clone()));
                    bbs += q.post(&b) as u64;
                }
                exp.lock().unwrap().extend(mine);
                (q, bbs)
            }),
        ));
    }
    let mut keep = Vec::new();
    for (h, p) in producers {
        let (q, _) = p.join().unwrap();
        assert!(poller.unregister(h), "unregister waits for a final poll");
        keep.push(q);
    }
    let (w, stats) = poller.stop();
    drop(w);
    assert_eq!(stats.wqes, (QUEUES * PER_QUEUE) as u64);
    assert_eq!(
        stats.wqebbs_lost, 0,
        "slow-producer run must not overrun: {stats:?}"
    );
    // Read the log back and compare every record with the producers' own bookkeeping.
    let lf = LogFile::open(&path).unwrap();
    let v = lf.view();
    let mut got: Vec<WqeObserved> = Vec::new();
    for c in v.chunks() {
        for r in v.records(c) {
            if let Ok(Record::WqeObserved(w)) = r.unwrap().decode() {
                got.push(*w);
            }
        }
    }
    assert_eq!(got.len(), (QUEUES * PER_QUEUE) as usize);
    let exp = expected.lock().unwrap();
    let mut by_key = std::collections::HashMap::new();
    for (qpn, pi, bytes) in exp.iter() {
        by_key.insert((*qpn, *pi), bytes.clone());
    }
    let mut seen_keys = std::collections::HashSet::new();
    for r in &got {
        assert!(
            seen_keys.insert((r.qpn, r.wqe_index)),
            "observed twice: {r:?}"
        );
        let bytes = by_key
            .get(&(r.qpn, r.wqe_index))
            .expect("observed a WQE nobody posted");
        let mut p = bytes.clone();
        p.resize(p.len().next_multiple_of(64), 0);
        let d = sigmatrace_mlx5::wqe::decode(&p, sigmatrace_mlx5::wqe::Transport::Rc).unwrap();
        assert_eq!(
            (
                r.opcode,
                r.ds,
                r.fm_ce_se,
                r.imm,
                r.remote_addr,
                r.rkey,
                r.compare_add,
                r.bytes as u64
            ),
            (
                d.ctrl.opcode,
                d.ctrl.ds,
                d.ctrl.fm_ce_se,
                d.ctrl.imm,
                d.remote_addr,
                d.rkey,
                d.compare_add,
                d.bytes
            )
        );
        assert_eq!(r.observer, 0);
    }
    assert_eq!(seen_keys.len(), by_key.len());
    drop(keep);
}

#[test]
fn forced_overrun_counted_exactly_by_the_poller() {
    // A poller that sleeps long enough for the producer to lap the ring: the producer posts
    // a burst of 5 × depth WQEBBs between two polls (forced by holding the poller asleep:
    // spin_passes 0, long sleeps, and the burst happens before registration is adopted).
    let seen = Arc::new(Mutex::new(Vec::<Observation>::new()));
    let s2 = seen.clone();
    let sink: ObservationSink = Box::new(move |o: &Observation| s2.lock().unwrap().push(*o));
    let cfg = PollerConfig {
        spin_passes: 0,
        min_sleep: Duration::from_millis(1),
        max_sleep: Duration::from_millis(1),
    };
    let poller = HostPoller::start(
        cfg,
        Timestamper::with_source(TimestampSource::MonotonicRaw),
        None,
        Some(sink),
    )
    .unwrap();
    let mut q = SimSendQueue::new(0x55, 32);
    let mut cq = SimCq::new(0x56, 16, true);
    let h = poller.register(q.as_queue(), q.memory()).unwrap();
    let hc = poller
        .register(sigmatrace_observe::QueueDesc::Cq(cq.desc()), cq.memory())
        .unwrap();
    // No poll between here and the final poll done by unregister.
    poller.pause();
    for i in 0..160u32 {
        let b = WqeBuilder::new(opcode::RDMA_WRITE, q.pi(), 0x55)
            .raddr(i as u64, 1)
            .data(0, 0, 8)
            .finish();
        q.write_wqe(&b);
    }
    q.ring_doorbell();
    // CQ: 40 completions, all consumed by the program before the poller looks (one DBR
    // update at the end), so 40 − 16 = 24 are provably lost.
    for n in 0..40u32 {
        cq.produce(&sigmatrace_mlx5::cqe::Cqe {
            wqe_counter: n as u16,
            qpn: 0x55,
            ..Default::default()
        });
    }
    cq.consume(40);
    assert!(poller.unregister(h));
    assert!(poller.unregister(hc));
    let (_, stats) = poller.stop();
    let obs = seen.lock().unwrap();
    let wqes = obs
        .iter()
        .filter(|o| matches!(o, Observation::Wqe(..)))
        .count();
    let cqes = obs
        .iter()
        .filter(|o| matches!(o, Observation::Cqe(..)))
        .count();
    assert_eq!((stats.wqebbs_lost, wqes), (128, 32));
    assert_eq!((stats.cqes_lost, cqes), (24, 16));
    assert_eq!(stats.overruns, 2);
}

#[test]
fn register_and_unregister_from_many_threads() {
    let poller = Arc::new(
        HostPoller::start(
            PollerConfig::default(),
            Timestamper::with_source(TimestampSource::MonotonicRaw),
            None,
            None,
        )
        .unwrap(),
    );
    let mut ts = Vec::new();
    for t in 0..4u32 {
        let p = poller.clone();
        ts.push(std::thread::spawn(move || {
            let mut total = 0u64;
            for k in 0..20u32 {
                let mut q = SimSendQueue::new(t * 100 + k, 64);
                let h = p.register(q.as_queue(), q.memory()).unwrap();
                for _ in 0..10 {
                    let b = WqeBuilder::new(opcode::SEND, q.pi(), q.qpn)
                        .data(0, 0, 1)
                        .finish();
                    q.post(&b);
                }
                assert!(p.unregister(h));
                total += 10;
                // The queue's memory may be freed now: the poller no longer reads it.
                drop(q);
            }
            total
        }));
    }
    let total: u64 = ts.into_iter().map(|t| t.join().unwrap()).sum();
    let poller = Arc::try_unwrap(poller).ok().unwrap();
    assert!(poller.queues().is_empty());
    let (_, stats) = poller.stop();
    assert_eq!(stats.wqes, total, "final poll on unregister sees every WQE");
    assert_eq!(stats.wqebbs_lost, 0);
}

#[test]
fn device_resident_queue_is_refused() {
    let poller = HostPoller::start(
        PollerConfig::default(),
        Timestamper::with_source(TimestampSource::MonotonicRaw),
        None,
        None,
    )
    .unwrap();
    let q = SimSendQueue::new(1, 8);
    let mut d = q.desc();
    d.memory = sigmatrace_schemas::mem_kind::GPU;
    assert!(poller
        .register(sigmatrace_observe::QueueDesc::Send(d), q.memory())
        .is_err());
}

/// Every observed WQE is stamped after it was read, so never before it was posted: a producer
/// posting back to back into a ring the poller spins on takes a time before each post; each
/// observation's time must be at or after it. (A poll stamped all it found with one time read
/// before its producer-index read, so a WQE posted between the two was stamped before it was
/// posted.)
#[test]
fn observations_are_never_stamped_before_their_post() {
    let cfg = PollerConfig {
        spin_passes: 1_000_000,
        min_sleep: Duration::from_micros(1),
        max_sleep: Duration::from_micros(5),
    };
    let ts = Timestamper::with_source(TimestampSource::MonotonicRaw);
    let times: Arc<Mutex<Vec<u64>>> = Arc::default();
    let t2 = times.clone();
    let seen = Arc::new(AtomicU64::new(0));
    let s2 = seen.clone();
    let sink: ObservationSink = Box::new(move |o: &Observation| {
        if let Observation::Wqe(r, _) = o {
            t2.lock().unwrap().push(r.ts);
            s2.fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    });
    let poller = HostPoller::start(cfg, ts, None, Some(sink)).unwrap();
    let mut q = SimSendQueue::new(0x200, 256);
    let h = poller.register(q.as_queue(), q.memory()).unwrap();
    const POSTS: u64 = 20_000;
    let mut posted_at = Vec::with_capacity(POSTS as usize);
    for i in 0..POSTS {
        // One WQEBB each (NOPs); stay within half a ring of what was observed.
        while i - seen.load(std::sync::atomic::Ordering::Acquire) > 128 {
            std::hint::spin_loop();
        }
        let b = WqeBuilder::new(opcode::NOP, q.pi(), q.qpn).finish();
        posted_at.push(ts.now());
        q.post(&b);
    }
    assert!(poller.unregister(h), "unregister waits for a final poll");
    let (_, stats) = poller.stop();
    assert_eq!(stats.wqebbs_lost, 0, "{stats:?}");
    let got = times.lock().unwrap();
    assert_eq!(got.len() as u64, POSTS);
    let early: Vec<(usize, u64)> = got
        .iter()
        .zip(&posted_at)
        .enumerate()
        .filter(|(_, (&obs, &post))| obs < post)
        .map(|(i, (&obs, &post))| (i, post - obs))
        .collect();
    assert!(
        early.is_empty(),
        "{} of {POSTS} WQEs stamped before their post (first: #{} by {} ns)",
        early.len(),
        early.first().map_or(0, |e| e.0),
        early.first().map_or(0, |e| e.1)
    );
}
