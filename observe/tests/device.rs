//! Device-side poller host path: events written exactly as the kernel writes them (CPU
//! reference pass over simulated queues) are drained into records; losses counted exactly;
//! GPU/host clock pairs map %globaltimer to the log clock.

use sigmatrace_mlx5::cqe::Cqe;
use sigmatrace_mlx5::wqe::{self, opcode, Transport, WqeBuilder};
use sigmatrace_observe::device::{
    self, cpu_reference_pass, ClockMap, DeviceDrain, EventBuffer, Watch,
};
use sigmatrace_observe::sim::{SimCq, SimSendQueue};
use sigmatrace_observe::{AlignedBuf, Observation, QueueDesc};
use sigmatrace_schemas::{observer, GpuClockPair, RecordHeader, TimestampSource, Timestamper};

struct Rig {
    buf: std::sync::Arc<AlignedBuf>,
    watches: std::sync::Arc<AlignedBuf>,
    watch: Vec<Watch>,
    next: Vec<u32>,
    lost: Vec<u64>,
}

impl Rig {
    fn new(queues: &[QueueDesc], cap: u32) -> Rig {
        let buf = AlignedBuf::new(device::ring_bytes(cap));
        device::init_header(&*buf, cap);
        let watch: Vec<Watch> = queues
            .iter()
            .map(|q| Watch::for_queue(q, 0).unwrap())
            .collect();
        let watches = AlignedBuf::new(watch.len() * device::WATCH_BYTES);
        for (i, w) in watch.iter().enumerate() {
            watches.write(i * device::WATCH_BYTES, &w.encode());
        }
        let n = watch.len();
        Rig {
            buf,
            watches,
            watch,
            next: vec![0; n],
            lost: vec![0; n],
        }
    }

    fn pass(&mut self, mem: &dyn sigmatrace_observe::QueueMemory, gpu_ns: u64) {
        cpu_reference_pass(
            &self.watch,
            &mut self.next,
            &mut self.lost,
            mem,
            &*self.buf,
            gpu_ns,
        );
        for (i, l) in self.lost.iter().enumerate() {
            EventBuffer::store_u64(&*self.watches, i * device::WATCH_BYTES + 40, *l);
        }
    }
}

/// Memory covering several simulated queues.
struct Both(
    sigmatrace_observe::HostMemory,
    sigmatrace_observe::HostMemory,
);
impl sigmatrace_observe::QueueMemory for Both {
    fn load_u32_acquire(&self, a: u64) -> Result<u32, sigmatrace_observe::mem::MemError> {
        self.0
            .load_u32_acquire(a)
            .or_else(|_| self.1.load_u32_acquire(a))
    }
    fn read(&self, a: u64, d: &mut [u8]) -> Result<(), sigmatrace_observe::mem::MemError> {
        self.0.read(a, d).or_else(|_| self.1.read(a, d))
    }
}

#[test]
fn drained_events_match_posted_wqes_and_cqes() {
    let mut sq = SimSendQueue::new(0x77, 32);
    let mut cq = SimCq::new(0x78, 16, true);
    let queues = vec![sq.as_queue(), QueueDesc::Cq(cq.desc())];
    let mut rig = Rig::new(&queues, 64);
    let mem = Both(sq.memory(), cq.memory());
    let mut drain = DeviceDrain::new(queues, 64, ClockMap::new(1.0));
    let mut posted = Vec::new();
    let mut got = Vec::new();
    let mut cqes = Vec::new();
    for round in 0..30u32 {
        let b = if round % 3 == 0 {
            // Two WQEBBs: exercises WQE_CONT assembly.
            WqeBuilder::new(opcode::RDMA_WRITE, sq.pi(), 0x77)
                .raddr(0x9000 + round as u64, 3)
                .data(0, 1, 100)
                .data(0, 1, 100)
                .data(0, 1, 100)
                .pad(2)
                .finish()
        } else {
            WqeBuilder::new(opcode::ATOMIC_FA, sq.pi(), 0x77)
                .raddr(0xa000, 4)
                .atomic(round as u64, 0)
                .data(0, 1, 8)
                .finish()
        };
        let mut p = b.clone();
        p.resize(p.len().next_multiple_of(64), 0);
        posted.push(wqe::decode(&p, Transport::Rc).unwrap());
        sq.post(&b);
        cq.produce(&Cqe {
            wqe_counter: round as u16,
            qpn: 0x77,
            byte_cnt: round,
            ..Default::default()
        });
        cq.consume(1);
        rig.pass(&mem, 1_000 + round as u64);
        drain.drain(&*rig.buf, &*rig.watches, &mut |o| match o {
            Observation::Wqe(r, d) => got.push((r, d)),
            Observation::Cqe(c) => cqes.push(c),
            o => panic!("{o:?}"),
        });
    }
    assert_eq!(got.len(), posted.len());
    for ((r, d), want) in got.iter().zip(&posted) {
        assert_eq!(d, want);
        assert_eq!(
            (r.observer, r.wqe_index, r.remote_addr, r.qpn),
            (
                observer::DEVICE_POLLER,
                want.ctrl.wqe_index,
                want.remote_addr,
                0x77
            )
        );
    }
    assert_eq!(cqes.len(), 30);
    assert!(cqes.iter().enumerate().all(|(i, c)| c.index == i as u32
        && c.byte_cnt == i as u32
        && c.observer == observer::DEVICE_POLLER));
    assert_eq!(drain.stats.lost, 0);
}

#[test]
fn device_losses_counted_exactly() {
    // Ring overrun: 100 WQEBBs posted into a 32-deep ring between two passes → 68 lost.
    let mut sq = SimSendQueue::new(1, 32);
    let queues = vec![sq.as_queue()];
    let mut rig = Rig::new(&queues, 256);
    let mut drain = DeviceDrain::new(queues.clone(), 256, ClockMap::new(1.0));
    for _ in 0..100 {
        let b = WqeBuilder::new(opcode::SEND, sq.pi(), 1)
            .data(0, 0, 1)
            .finish();
        sq.write_wqe(&b);
    }
    sq.ring_doorbell();
    rig.pass(&sq.memory(), 5);
    let (mut wqes, mut lost) = (0, 0);
    drain.drain(&*rig.buf, &*rig.watches, &mut |o| match o {
        Observation::Wqe(..) => wqes += 1,
        Observation::Overrun(r) => lost += r.lost,
        _ => {}
    });
    assert_eq!((wqes, lost), (32, 68));
    // Event buffer full: capacity 8 and no drain between two passes of 20 WQEs → 12 + 20
    // events cannot be written; each is counted against its queue.
    let mut sq2 = SimSendQueue::new(2, 64);
    let queues = vec![sq2.as_queue()];
    let mut rig = Rig::new(&queues, 8);
    let mut drain = DeviceDrain::new(queues, 8, ClockMap::new(1.0));
    for _ in 0..20 {
        let b = WqeBuilder::new(opcode::SEND, sq2.pi(), 2)
            .data(0, 0, 1)
            .finish();
        sq2.post(&b);
    }
    rig.pass(&sq2.memory(), 6);
    let (mut wqes, mut lost) = (0, 0);
    drain.drain(&*rig.buf, &*rig.watches, &mut |o| match o {
        Observation::Wqe(..) => wqes += 1,
        Observation::Overrun(r) => lost += r.lost,
        _ => {}
    });
    assert_eq!((wqes, lost), (8, 12));
    assert_eq!(EventBuffer::load_u64(&*rig.buf, device::hdr::DROPPED), 12);
}

#[test]
fn clock_pairs_map_globaltimer_to_host_time() {
    let mut m = ClockMap::new(1.0);
    assert_eq!(m.to_host(5), None);
    m.add(&GpuClockPair {
        hdr: RecordHeader::of::<GpuClockPair>(0),
        ts: 1_000,
        ts_after: 1_010,
        gpu_ns: 50_000,
    });
    assert_eq!(m.to_host(50_100), Some(1_105));
    // A second pair 10 ms later with host ticks at 3/ns (TSC-like) sets the slope.
    m.add(&GpuClockPair {
        hdr: RecordHeader::of::<GpuClockPair>(0),
        ts: 1_005 + 30_000_000,
        ts_after: 1_005 + 30_000_000,
        gpu_ns: 10_050_000,
    });
    assert_eq!(m.to_host(5_050_000), Some(1_005 + 15_000_000));
    // sample_clock against a simulated kernel thread answering requests.
    let buf = AlignedBuf::new(device::ring_bytes(8));
    device::init_header(&*buf, 8);
    let b2 = buf.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let t = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let req = EventBuffer::load_u64(&*b2, device::hdr::CLOCK_REQ);
            if req != EventBuffer::load_u64(&*b2, device::hdr::CLOCK_ACK) {
                EventBuffer::store_u64(&*b2, device::hdr::CLOCK_GPU_NS, 777 * req);
                EventBuffer::store_u64(&*b2, device::hdr::CLOCK_ACK, req);
            }
            std::hint::spin_loop();
        }
    });
    let ts = Timestamper::with_source(TimestampSource::MonotonicRaw);
    let p1 = device::sample_clock(&*buf, &ts, 3, u64::MAX).unwrap();
    let p2 = device::sample_clock(&*buf, &ts, 3, u64::MAX).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    t.join().unwrap();
    assert_eq!((p1.gpu_ns, p2.gpu_ns, p1.hdr.aux), (777, 1554, 3));
    assert!(p1.ts <= p1.ts_after && p1.ts_after <= p2.ts);
    // No kernel: bounded wait, no pair.
    assert!(device::sample_clock(&*buf, &ts, 3, 1000).is_none());
}
