//! Ring watchers on simulated host queues: wrap-around, multi-WQEBB WQEs, owner-bit phases,
//! overruns counted exactly.

use sigmatrace_mlx5::cqe::Cqe;
use sigmatrace_mlx5::wqe::{self, opcode, Transport, WqeBuilder};
use sigmatrace_observe::sim::{SimCq, SimSendQueue};
use sigmatrace_observe::{CqWatcher, Observation, SendWatcher};
use sigmatrace_schemas::queue_kind;

fn collect(w: &mut SendWatcher, q: &SimSendQueue) -> Vec<Observation> {
    let mut v = Vec::new();
    w.poll(&q.memory(), 1, &mut |o| v.push(o)).unwrap();
    v
}

/// The WQE indices observed and the WQEBBs the overrun records count as lost (each overrun
/// record's queue kind checked to be SEND).
fn wqes_and_lost(obs: &[Observation]) -> (Vec<u16>, u64) {
    let (mut wqes, mut lost) = (Vec::new(), 0);
    for o in obs {
        match o {
            Observation::Wqe(r, _) => wqes.push(r.wqe_index),
            Observation::Overrun(r) => {
                assert_eq!(r.hdr.aux, queue_kind::SEND);
                lost += r.lost;
            }
            _ => {}
        }
    }
    (wqes, lost)
}

/// A WQE of `nbb` WQEBBs for index `pi` with a recognisable remote address.
fn wqe_of(pi: u16, qpn: u32, nbb: u16) -> Vec<u8> {
    let mut b = WqeBuilder::new(opcode::RDMA_WRITE, pi, qpn)
        .fm_ce_se(0x08)
        .raddr(0x1000 + pi as u64, 0x55);
    // ds: 2 + sges; 1 WQEBB = 4 DS.
    let sges = (nbb as usize * 4 - 2).min(8);
    for k in 0..sges {
        b = b.data(0x10 * k as u64, 1, 10);
    }
    b.finish()
}

#[test]
fn send_ring_wraps_with_multi_wqebb_wqes() {
    let mut q = SimSendQueue::new(0x42, 16);
    let mem = q.memory();
    let mut w = SendWatcher::new(q.desc(), 0, None, &mem).unwrap();
    let mut posted = Vec::new();
    let mut seen = Vec::new();
    for round in 0..40u16 {
        let nbb = 1 + round % 3;
        let bytes = wqe_of(q.pi(), 0x42, nbb);
        posted.push(
            wqe::decode(
                &{
                    let mut p = bytes.clone();
                    p.resize(nbb as usize * 64, 0);
                    p
                },
                Transport::Rc,
            )
            .unwrap(),
        );
        q.post(&bytes);
        if round % 2 == 1 {
            seen.extend(collect(&mut w, &q));
        }
    }
    seen.extend(collect(&mut w, &q));
    // The last 8-byte doorbell rung is NVSHMEM's {pi << 8, qpn << 8}.
    let db = sigmatrace_mlx5::dbr::parse_doorbell(&q.doorbell_bytes());
    assert_eq!(
        (db.wqe_index, db.qpn, db.opcode, db.ds),
        (q.pi(), 0x42, 0, 0)
    );
    let got: Vec<_> = seen
        .iter()
        .map(|o| match o {
            Observation::Wqe(r, d) => (*r, *d),
            o => panic!("unexpected {o:?}"),
        })
        .collect();
    assert_eq!(got.len(), posted.len());
    for ((rec, dec), want) in got.iter().zip(&posted) {
        assert_eq!(dec, want, "identical decode");
        assert_eq!(
            (rec.wqe_index, rec.remote_addr, rec.qpn, rec.opcode, rec.ds),
            (
                want.ctrl.wqe_index,
                want.remote_addr,
                0x42,
                opcode::RDMA_WRITE,
                want.ctrl.ds
            )
        );
        assert_eq!(rec.bytes as u64, want.bytes);
    }
    // Some WQE straddled the ring end (indices are mod 16 and sizes 1..3).
    assert!(posted
        .iter()
        .any(|p| (p.ctrl.wqe_index % 16) + p.wqebbs > 16));
    assert_eq!(w.stats.wqebbs_lost, 0);
}

#[test]
fn send_overrun_counted_exactly() {
    let mut q = SimSendQueue::new(1, 16);
    let mut w = SendWatcher::new(q.desc(), 0, None, &q.memory()).unwrap();
    for _ in 0..40 {
        let b = wqe_of(q.pi(), 1, 1);
        q.post(&b);
    }
    let (wqes, lost) = wqes_and_lost(&collect(&mut w, &q));
    assert_eq!(lost, 24);
    assert_eq!(wqes, (24..40).collect::<Vec<u16>>());
    assert_eq!(w.stats.wqebbs_lost, 24);
}

#[test]
fn send_overrun_resyncs_inside_multi_wqebb_wqe() {
    let mut q = SimSendQueue::new(1, 16);
    let mut w = SendWatcher::new(q.desc(), 0, None, &q.memory()).unwrap();
    for _ in 0..10 {
        let b = wqe_of(q.pi(), 1, 3);
        q.post(&b);
    }
    // PI = 30; WQEBBs 0..13 are gone, 14 is the tail of WQE 12..14, WQEs start at 15.
    let (wqes, lost) = wqes_and_lost(&collect(&mut w, &q));
    assert_eq!(lost, 15);
    assert_eq!(wqes, vec![15, 18, 21, 24, 27]);
    assert_eq!(w.stats.wqebbs_malformed, 0);
}

#[test]
fn pi_wraps_16_bits() {
    let mut q = SimSendQueue::new(9, 64);
    // Advance the producer close to 65536 while the watcher keeps up.
    let mut w = SendWatcher::new(q.desc(), 0, None, &q.memory()).unwrap();
    let mut n = 0u32;
    while n < 65536 + 100 {
        for _ in 0..50 {
            let b = wqe_of(q.pi(), 9, 1);
            q.post(&b);
            n += 1;
        }
        let obs = collect(&mut w, &q);
        assert_eq!(obs.len(), 50);
    }
    assert_eq!(w.stats.wqes, n as u64);
    assert_eq!(w.stats.wqebbs_lost, 0);
}

#[test]
fn malformed_wqe_is_counted_not_skipped_silently() {
    let mut q = SimSendQueue::new(3, 8);
    let mut w = SendWatcher::new(q.desc(), 0, None, &q.memory()).unwrap();
    // A WQE whose ctrl carries the wrong index (producer bug or torn write).
    let bad = WqeBuilder::new(opcode::SEND, 5, 3).data(0, 0, 1).finish();
    q.post(&bad);
    let good = WqeBuilder::new(opcode::SEND, 1, 3).data(0, 0, 1).finish();
    q.post(&good);
    let obs = collect(&mut w, &q);
    assert_eq!(w.stats.wqebbs_malformed, 1);
    assert!(
        matches!(obs[..], [Observation::Overrun(r), Observation::Wqe(x, _)] if r.lost == 1 && x.wqe_index == 1)
    );
}

fn cq_poll(w: &mut CqWatcher, cq: &SimCq) -> (Vec<u32>, u64) {
    let mut idx = Vec::new();
    let mut lost = 0;
    w.poll(&cq.memory(), 1, &mut |o| match o {
        Observation::Cqe(r) => idx.push(r.index),
        Observation::Overrun(r) => {
            assert_eq!(r.hdr.aux, queue_kind::CQ);
            lost += r.lost
        }
        o => panic!("{o:?}"),
    })
    .unwrap();
    (idx, lost)
}

fn cqe(n: u32) -> Cqe {
    Cqe {
        wqe_counter: n as u16,
        byte_cnt: n,
        qpn: 0x42,
        send_opcode: 8,
        timestamp: 1000 + n as u64,
        ..Default::default()
    }
}

#[test]
fn cq_phases_across_laps() {
    let mut cq = SimCq::new(7, 8, true);
    let mut w = CqWatcher::new(cq.desc(), 0, None, &cq.memory()).unwrap();
    let mut all = Vec::new();
    for round in 0..10u32 {
        for _ in 0..(1 + round % 5) {
            let n = cq.produced();
            cq.produce(&cqe(n));
        }
        let (idx, lost) = cq_poll(&mut w, &cq);
        assert_eq!(lost, 0);
        all.extend(idx);
        cq.consume(1 + round % 5);
    }
    assert_eq!(all, (0..cq.produced()).collect::<Vec<_>>());
    assert!(cq.produced() > 3 * 8, "several owner-bit phases exercised");
}

#[test]
fn cq_overrun_from_consumer_index() {
    let mut cq = SimCq::new(7, 8, true);
    let mut w = CqWatcher::new(cq.desc(), 0, None, &cq.memory()).unwrap();
    for n in 0..20 {
        cq.produce(&cqe(n));
        cq.consume(1);
    }
    let (idx, lost) = cq_poll(&mut w, &cq);
    assert_eq!(lost, 12);
    assert_eq!(idx, (12..20).collect::<Vec<_>>());
}

#[test]
fn cq_lap_detected_without_consumer_index() {
    // Overrun-ignore CQ: the DBR consumer index is never updated.
    let mut cq = SimCq::new(7, 8, false);
    let mut w = CqWatcher::new(cq.desc(), 0, None, &cq.memory()).unwrap();
    for n in 0..5 {
        cq.produce(&cqe(n));
    }
    assert_eq!(cq_poll(&mut w, &cq), ((0..5).collect(), 0));
    for n in 5..19 {
        cq.produce(&cqe(n));
    }
    // Ring holds 11..18; entries 5..10 were overwritten.
    let (idx, lost) = cq_poll(&mut w, &cq);
    assert_eq!(lost, 6);
    assert_eq!(idx, (11..19).collect::<Vec<_>>());
    // Quiet afterwards: no false overruns.
    assert_eq!(cq_poll(&mut w, &cq), (vec![], 0));
}

#[test]
fn cq_records_carry_fields() {
    let mut cq = SimCq::new(0x31, 4, true);
    let mut w = CqWatcher::new(cq.desc(), 0, None, &cq.memory()).unwrap();
    cq.produce(&Cqe {
        opcode: 13,
        wqe_counter: 0x77,
        byte_cnt: 0,
        qpn: 0x42,
        send_opcode: 8,
        timestamp: 5,
        syndrome: 5,
        vendor_syndrome: 0x81,
        imm_inval_pkey: 0,
        src_qp: 0,
        ..Cqe::default()
    });
    let mut recs = Vec::new();
    w.poll(&cq.memory(), 99, &mut |o| recs.push(o)).unwrap();
    let Observation::Cqe(r) = recs[0] else {
        panic!()
    };
    assert_eq!(
        (
            r.ts,
            r.cqn,
            r.index,
            r.qpn,
            r.wqe_counter,
            r.opcode,
            r.syndrome,
            r.vendor_syndrome,
            r.hw_ts
        ),
        (99, 0x31, 0, 0x42, 0x77, 13, 5, 0x81, 0)
    );
}

/// A watcher over a 16-deep ring that has seen 8 WQEBBs per ms for 4 ms (rate 8e-6 /ns).
fn warmed(qpn: u32) -> (SimSendQueue, SendWatcher, u64) {
    let mut q = SimSendQueue::new(qpn, 16);
    let mem = q.memory();
    let mut w = SendWatcher::new(q.desc(), 0, None, &mem).unwrap();
    let mut t = 1_000_000u64;
    w.poll_at(&mem, 0, t, &mut |_| {}).unwrap();
    for _ in 0..4 {
        for _ in 0..8 {
            let b = wqe_of(q.pi(), qpn, 1);
            q.post(&b);
        }
        t += 1_000_000;
        w.poll_at(&mem, 0, t, &mut |_| {}).unwrap();
    }
    assert_eq!((w.stats.wqes, w.stats.wqebbs_lost), (32, 0));
    (q, w, t)
}

#[test]
fn idle_gap_is_only_suspected() {
    // Idle for 10 s: the rate says a lap was possible, but nothing overran: suspected only.
    let (q, mut w, t) = warmed(4);
    w.poll_at(&q.memory(), 0, t + 10_000_000_000, &mut |_| {})
        .unwrap();
    assert_eq!((w.stats.wqebbs_lost, w.stats.alias_suspected_polls), (0, 1));
}

#[test]
fn pi_alias_estimated_from_rate_with_visible_overrun() {
    let (mut q, mut w, t) = warmed(5);
    // Busy gap at the same rate: 65536 + 40 WQEBBs in 8.2 s; the PI shows only +40.
    for _ in 0..65576u32 {
        let b = wqe_of(q.pi(), 5, 1);
        q.write_wqe(&b);
    }
    q.ring_doorbell();
    let mut wqes = 0;
    let mut overruns = Vec::new();
    w.poll_at(&q.memory(), 0, t + 8_200_000_000, &mut |o| match o {
        Observation::Wqe(..) => wqes += 1,
        Observation::Overrun(r) => overruns.push(r.lost),
        _ => {}
    })
    .unwrap();
    assert_eq!(wqes, 16);
    assert_eq!(
        overruns,
        vec![65536, 24],
        "estimated lap and exact overrun are separate records"
    );
    assert_eq!(w.stats.wqebbs_lost_estimated, 65536);
    assert_eq!(
        w.stats.wqebbs_lost,
        65536 + 24,
        "hidden lap + visible overrun: every WQEBB accounted"
    );
}

/// Memory whose first 64-byte read of one address returns the entry's new `op_own` with a
/// body from before the producer wrote it: what an x86 reader sees when it loads the body
/// words before the `op_own` word while the producer is publishing the entry.
struct StaleBodyOnce {
    inner: sigmatrace_observe::HostMemory,
    armed: std::sync::Mutex<Option<u64>>,
}

impl sigmatrace_observe::QueueMemory for StaleBodyOnce {
    fn load_u32_acquire(&self, addr: u64) -> Result<u32, sigmatrace_observe::mem::MemError> {
        self.inner.load_u32_acquire(addr)
    }
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), sigmatrace_observe::mem::MemError> {
        self.inner.read(addr, dst)?;
        let mut armed = self.armed.lock().unwrap();
        if dst.len() == 64 && *armed == Some(addr) {
            *armed = None;
            dst[..63].fill(0);
        }
        Ok(())
    }
}

#[test]
fn cq_entry_read_before_its_body_is_published_is_reread_not_lost() {
    let mut cq = SimCq::new(7, 8, true);
    let mut w = CqWatcher::new(cq.desc(), 0, None, &cq.memory()).unwrap();
    for n in 0..3 {
        cq.produce(&cqe(n));
    }
    let mem = StaleBodyOnce {
        inner: cq.memory(),
        armed: std::sync::Mutex::new(Some(cq.desc().base + 64)),
    };
    let mut got = Vec::new();
    w.poll(&mem, 1, &mut |o| match o {
        Observation::Cqe(r) => got.push((r.index, r.byte_cnt, r.wqe_counter)),
        o => panic!("nothing lost: {o:?}"),
    })
    .unwrap();
    assert_eq!(got, vec![(0, 0, 0), (1, 1, 1), (2, 2, 2)]);
}

/// Memory showing slot `addr` mid-write: body bytes changed, `op_own` still the old one (a
/// producer writes the body first). `reads` = how many 64-byte reads see it (then the old
/// content again, as if the write had not reached the reader yet).
struct MidWrite {
    inner: sigmatrace_observe::HostMemory,
    addr: u64,
    reads: std::sync::Mutex<u32>,
}

impl sigmatrace_observe::QueueMemory for MidWrite {
    fn load_u32_acquire(&self, addr: u64) -> Result<u32, sigmatrace_observe::mem::MemError> {
        self.inner.load_u32_acquire(addr)
    }
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), sigmatrace_observe::mem::MemError> {
        self.inner.read(addr, dst)?;
        let mut left = self.reads.lock().unwrap();
        if dst.len() == 64 && addr == self.addr && *left > 0 {
            *left -= 1;
            dst[..56].fill(0);
        }
        Ok(())
    }
}

fn entry_being_written_is_not_a_lap(ci_valid: bool, reads: u32) {
    let mut cq = SimCq::new(7, 8, ci_valid);
    let mut w = CqWatcher::new(cq.desc(), 0, None, &cq.memory()).unwrap();
    for n in 0..8 {
        cq.produce(&cqe(n));
    }
    assert_eq!(cq_poll(&mut w, &cq), ((0..8).collect(), 0));
    cq.consume(8);
    // Entry 8 is being written into slot 0: new body bytes under the old owner bit.
    let mem = MidWrite {
        inner: cq.memory(),
        addr: cq.desc().base,
        reads: std::sync::Mutex::new(reads),
    };
    w.poll(&mem, 1, &mut |o| panic!("nothing to report yet: {o:?}"))
        .unwrap();
    cq.produce(&cqe(8));
    assert_eq!(cq_poll(&mut w, &cq), (vec![8], 0));
}

#[test]
fn cq_entry_being_written_is_not_taken_for_a_lap() {
    // With a maintained consumer index the producer cannot be a lap ahead of entry 8 while the
    // consumer has not passed it, however long the write takes.
    entry_being_written_is_not_a_lap(true, u32::MAX);
    // Overrun-ignore CQ: a changed slot must read the same twice to count as a lap.
    entry_being_written_is_not_a_lap(false, 1);
}
