//! The device-side poller (`gpu/poller.cu`): shared memory layout, the host drain that turns
//! its events into schemas records, GPU/host clock pairing, and a CPU reference of the
//! kernel's polling pass (used by tests to exercise the drain without a GPU).
//!
//! Layout (host-mapped pinned memory, allocated by [`crate::cuda::DevicePoller`]):
//! a 128-byte [`RingHeader`], then `capacity` 96-byte [`Event`]s; the watch list is a separate
//! array of 48-byte [`Watch`] entries. The kernel reserves an event slot, writes it, fences
//! (`__threadfence_system`) and stores `seq = n + 1` last; the drain consumes slots in order
//! while `seq` matches and publishes its `tail`, which the kernel reads to avoid overwriting.

use std::collections::HashMap;

use sigmatrace_schemas::{
    observer, queue_kind, GpuClockPair, ObserveOverrun, RecordHeader, Timestamper,
};

use crate::mem::{AlignedBuf, QueueMemory};
use crate::queue::QueueDesc;
use crate::watcher::{wqe_record, Observation};
use sigmatrace_mlx5::{cqe, wqe, MAX_WQE_BYTES, WQEBB};

/// The PTX shipped in `observe/gpu` (generated from the .cu sources; see `gpu/gen-ptx.py`).
pub mod ptx {
    /// The device-side poller (`sigmatrace_device_poller`).
    pub const POLLER: &str = include_str!("../gpu/poller.ptx");
    /// Entry point of the poller kernel.
    pub const POLLER_ENTRY: &str = "sigmatrace_device_poller";
}

/// Header magic ("STDEVPOL").
pub const MAGIC: u64 = u64::from_le_bytes(*b"STDEVPOL");
pub const VERSION: u32 = 1;
pub const HEADER_BYTES: usize = 128;
pub const EVENT_BYTES: usize = 96;
pub const WATCH_BYTES: usize = 48;

/// Byte offsets in the header.
pub mod hdr {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const CAPACITY: usize = 12;
    pub const RESERVED: usize = 16;
    pub const DROPPED: usize = 24;
    pub const TAIL: usize = 32;
    pub const STOP: usize = 40;
    pub const RUNNING: usize = 44;
    pub const CLOCK_REQ: usize = 48;
    pub const CLOCK_ACK: usize = 56;
    pub const CLOCK_GPU_NS: usize = 64;
    pub const HEARTBEAT: usize = 72;
}

/// Event kinds.
pub mod ev {
    pub const WQE: u16 = 1;
    pub const CQE: u16 = 2;
    pub const LOST: u16 = 3;
    pub const CLOCK: u16 = 4;
    pub const WQE_CONT: u16 = 5;
}

/// One watch-list entry, as the kernel reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    pub ring: u64,
    pub dbrec: u64,
    pub depth: u32,
    /// 1 send ring, 3 CQ.
    pub kind: u32,
    pub number: u32,
    pub cqe_size: u32,
    pub start: u32,
    /// Bit 0: CQ consumer index maintained.
    pub flags: u32,
    /// Written by the kernel: entries not delivered.
    pub lost: u64,
}

impl Watch {
    /// The watch entry for a queue (device addresses = the description's addresses).
    pub fn for_queue(q: &QueueDesc, start: u32) -> Option<Watch> {
        match q {
            QueueDesc::Send(s) => Some(Watch {
                ring: s.base,
                dbrec: s.dbrec,
                depth: s.wqebbs,
                kind: 1,
                number: s.qpn,
                cqe_size: 0,
                start,
                flags: 0,
                lost: 0,
            }),
            QueueDesc::Cq(c) => Some(Watch {
                ring: c.base,
                dbrec: c.dbrec,
                depth: c.cqe_cnt,
                kind: 3,
                number: c.cqn,
                cqe_size: c.cqe_size,
                start,
                flags: c.ci_valid as u32,
                lost: 0,
            }),
            QueueDesc::Uar(_) => None,
        }
    }

    /// The 48 bytes the kernel reads.
    pub fn encode(&self) -> [u8; WATCH_BYTES] {
        let mut b = [0u8; WATCH_BYTES];
        b[0..8].copy_from_slice(&self.ring.to_ne_bytes());
        b[8..16].copy_from_slice(&self.dbrec.to_ne_bytes());
        b[16..20].copy_from_slice(&self.depth.to_ne_bytes());
        b[20..24].copy_from_slice(&self.kind.to_ne_bytes());
        b[24..28].copy_from_slice(&self.number.to_ne_bytes());
        b[28..32].copy_from_slice(&self.cqe_size.to_ne_bytes());
        b[32..36].copy_from_slice(&self.start.to_ne_bytes());
        b[36..40].copy_from_slice(&self.flags.to_ne_bytes());
        b[40..48].copy_from_slice(&self.lost.to_ne_bytes());
        b
    }
}

/// Host access to the host-mapped event buffer (header + events) and watch list.
pub trait EventBuffer: Send + Sync {
    fn load_u64(&self, off: usize) -> u64;
    fn load_u32(&self, off: usize) -> u32;
    fn read(&self, off: usize, dst: &mut [u8]);
    fn store_u64(&self, off: usize, v: u64);
    fn store_u32(&self, off: usize, v: u32);
}

impl EventBuffer for AlignedBuf {
    fn load_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        AlignedBuf::read(self, off, &mut b);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        u64::from_ne_bytes(b)
    }
    fn load_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        AlignedBuf::read(self, off, &mut b);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        u32::from_ne_bytes(b)
    }
    fn read(&self, off: usize, dst: &mut [u8]) {
        AlignedBuf::read(self, off, dst)
    }
    fn store_u64(&self, off: usize, v: u64) {
        self.store_u64_release(off, v.to_ne_bytes())
    }
    fn store_u32(&self, off: usize, v: u32) {
        self.store_u32_release(off, v)
    }
}

/// Initialises a header for `capacity` events (a power of two).
pub fn init_header(buf: &dyn EventBuffer, capacity: u32) {
    assert!(capacity.is_power_of_two());
    for off in (0..HEADER_BYTES).step_by(8) {
        buf.store_u64(off, 0);
    }
    buf.store_u64(hdr::MAGIC, MAGIC);
    buf.store_u32(hdr::VERSION, VERSION);
    buf.store_u32(hdr::CAPACITY, capacity);
}

/// Bytes of header + events for `capacity` events.
pub fn ring_bytes(capacity: u32) -> usize {
    HEADER_BYTES + capacity as usize * EVENT_BYTES
}

/// Maps `%globaltimer` ns to the log's timestamp source from [`GpuClockPair`]s.
#[derive(Clone, Debug)]
pub struct ClockMap {
    /// Ticks of the log's timestamp source per ns, used until two pairs give a slope.
    nominal: f64,
    pairs: Vec<(f64, u64)>,
}

impl ClockMap {
    pub fn new(ticks_per_ns: f64) -> ClockMap {
        ClockMap {
            nominal: ticks_per_ns,
            pairs: Vec::new(),
        }
    }

    /// Adds a pair (the midpoint of `ts`, `ts_after` is taken as the host time).
    pub fn add(&mut self, p: &GpuClockPair) {
        let mid = p.ts as f64 + (p.ts_after.saturating_sub(p.ts)) as f64 / 2.0;
        self.pairs.push((mid, p.gpu_ns));
        if self.pairs.len() > 64 {
            self.pairs.remove(1);
        }
    }

    /// Host timestamp for a GPU time (None before the first pair).
    pub fn to_host(&self, gpu_ns: u64) -> Option<u64> {
        let &(h0, g0) = self.pairs.first()?;
        let slope = match self.pairs.last() {
            Some(&(h1, g1)) if g1 > g0 + 1_000_000 => (h1 - h0) / (g1 - g0) as f64,
            _ => self.nominal,
        };
        let h = h0 + (gpu_ns as f64 - g0 as f64) * slope;
        Some(h.max(0.0) as u64)
    }
}

/// Asks the running kernel for its `%globaltimer` (host writes a request, the kernel answers)
/// and brackets the exchange with the host clock. `spins` bounds the wait.
pub fn sample_clock(
    buf: &dyn EventBuffer,
    ts: &Timestamper,
    device: u32,
    spins: u64,
) -> Option<GpuClockPair> {
    let req = buf.load_u64(hdr::CLOCK_REQ) + 1;
    let t0 = ts.now();
    buf.store_u64(hdr::CLOCK_REQ, req);
    for _ in 0..spins {
        if buf.load_u64(hdr::CLOCK_ACK) == req {
            let t1 = ts.now();
            let gpu_ns = buf.load_u64(hdr::CLOCK_GPU_NS);
            return Some(GpuClockPair {
                hdr: RecordHeader::of::<GpuClockPair>(device),
                ts: t0,
                ts_after: t1,
                gpu_ns,
            });
        }
        std::hint::spin_loop();
    }
    None
}

/// Drain counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainStats {
    pub events: u64,
    pub wqes: u64,
    pub cqes: u64,
    pub lost: u64,
    pub clock_events: u64,
    pub malformed: u64,
}

struct Pending {
    nbb: u16,
    have: u16,
    gpu_ns: u64,
    bytes: [u8; MAX_WQE_BYTES],
}

/// Converts device-poller events to observations (schemas records, `observer` = device).
pub struct DeviceDrain {
    queues: Vec<QueueDesc>,
    capacity: u32,
    tail: u64,
    lost_seen: Vec<u64>,
    pending: HashMap<u16, Pending>,
    pub clock: ClockMap,
    pub stats: DrainStats,
}

impl DeviceDrain {
    /// `queues[i]` is the queue of watch entry `i`.
    pub fn new(queues: Vec<QueueDesc>, capacity: u32, clock: ClockMap) -> DeviceDrain {
        let n = queues.len();
        DeviceDrain {
            queues,
            capacity,
            tail: 0,
            lost_seen: vec![0; n],
            pending: HashMap::new(),
            clock,
            stats: DrainStats::default(),
        }
    }

    fn ts(&self, gpu_ns: u64) -> u64 {
        self.clock.to_host(gpu_ns).unwrap_or(gpu_ns)
    }

    /// Consumes every published event; `watches` is the watch list (for per-queue loss
    /// counters), read with [`EventBuffer::load_u64`] at `40 + 48·i`.
    pub fn drain(
        &mut self,
        buf: &dyn EventBuffer,
        watches: &dyn EventBuffer,
        out: &mut dyn FnMut(Observation),
    ) -> usize {
        let mut n = 0;
        loop {
            let slot =
                HEADER_BYTES + (self.tail & (self.capacity as u64 - 1)) as usize * EVENT_BYTES;
            if buf.load_u32(slot + 8) != (self.tail + 1) as u32 {
                break;
            }
            let mut e = [0u8; EVENT_BYTES];
            buf.read(slot, &mut e);
            self.tail += 1;
            n += 1;
            self.stats.events += 1;
            self.event(&e, out);
        }
        buf.store_u64(hdr::TAIL, self.tail);
        // Losses: the kernel's per-queue counters are authoritative (overwritten entries and
        // events dropped because this buffer was full).
        for (i, q) in self.queues.iter().enumerate() {
            let lost = watches.load_u64(i * WATCH_BYTES + 40);
            if lost > self.lost_seen[i] {
                let d = lost - self.lost_seen[i];
                self.lost_seen[i] = lost;
                self.stats.lost += d;
                let (kind, number) = match q {
                    QueueDesc::Send(s) => (queue_kind::SEND, s.qpn),
                    QueueDesc::Cq(c) => (queue_kind::CQ, c.cqn),
                    QueueDesc::Uar(u) => (queue_kind::UAR, u.page_id),
                };
                out(Observation::Overrun(ObserveOverrun {
                    hdr: RecordHeader::of::<ObserveOverrun>(kind),
                    ts: self
                        .clock
                        .to_host(buf.load_u64(hdr::HEARTBEAT))
                        .unwrap_or(0),
                    lost: d,
                    number,
                    observer: observer::DEVICE_POLLER,
                    _pad: [0; 3],
                }));
            }
        }
        n
    }

    fn event(&mut self, e: &[u8; EVENT_BYTES], out: &mut dyn FnMut(Observation)) {
        let gpu_ns = u64::from_ne_bytes(e[0..8].try_into().expect("8"));
        let kind = u16::from_ne_bytes([e[12], e[13]]);
        let queue = u16::from_ne_bytes([e[14], e[15]]);
        let aux = u32::from_ne_bytes(e[16..20].try_into().expect("4"));
        let data = &e[32..96];
        match kind {
            ev::WQE => {
                let nbb = (aux >> 16) as u16;
                let mut p = Pending {
                    nbb: nbb.max(1),
                    have: 1,
                    gpu_ns,
                    bytes: [0; MAX_WQE_BYTES],
                };
                p.bytes[..WQEBB].copy_from_slice(data);
                if p.have >= p.nbb {
                    self.finish_wqe(queue, &p, out);
                } else {
                    self.pending.insert(queue, p);
                }
            }
            ev::WQE_CONT => {
                let k = (aux >> 16) as usize;
                let done = match self.pending.get_mut(&queue) {
                    Some(p) if k < p.nbb as usize => {
                        p.bytes[k * WQEBB..(k + 1) * WQEBB].copy_from_slice(data);
                        p.have += 1;
                        p.have >= p.nbb
                    }
                    _ => {
                        self.stats.malformed += 1;
                        false
                    }
                };
                if done {
                    if let Some(p) = self.pending.remove(&queue) {
                        self.finish_wqe(queue, &p, out);
                    }
                }
            }
            ev::CQE => {
                let Some(QueueDesc::Cq(c)) = self.queues.get(queue as usize).copied() else {
                    self.stats.malformed += 1;
                    return;
                };
                let d = cqe::decode(data);
                self.stats.cqes += 1;
                out(Observation::Cqe(sigmatrace_schemas::CqeObserved {
                    hdr: RecordHeader::of::<sigmatrace_schemas::CqeObserved>(0),
                    ts: self.ts(gpu_ns),
                    hw_ts: match c.ts_format {
                        cqe::TsFormat::RealTime => cqe::real_time_to_ns(d.timestamp),
                        cqe::TsFormat::FreeRunning => d.timestamp,
                    },
                    cqn: c.cqn,
                    index: aux,
                    qpn: d.qpn,
                    byte_cnt: d.byte_cnt,
                    wqe_counter: d.wqe_counter,
                    opcode: d.opcode,
                    syndrome: d.syndrome,
                    vendor_syndrome: d.vendor_syndrome,
                    observer: observer::DEVICE_POLLER,
                    _pad: 0,
                }));
            }
            ev::LOST => {}
            ev::CLOCK => self.stats.clock_events += 1,
            _ => self.stats.malformed += 1,
        }
    }

    fn finish_wqe(&mut self, queue: u16, p: &Pending, out: &mut dyn FnMut(Observation)) {
        let Some(QueueDesc::Send(s)) = self.queues.get(queue as usize).copied() else {
            self.stats.malformed += 1;
            return;
        };
        let Ok(w) = wqe::decode(&p.bytes[..p.nbb as usize * WQEBB], s.transport) else {
            self.stats.malformed += 1;
            return;
        };
        self.stats.wqes += 1;
        let record = wqe_record(&w, self.ts(p.gpu_ns), &s, observer::DEVICE_POLLER);
        out(Observation::Wqe(record, w));
    }
}

/// CPU reference of one pass of the kernel (`sigmatrace_device_poller`), reading queues
/// through `mem` and writing events exactly as the kernel does. `next[i]` is the per-queue
/// index the kernel keeps in shared memory; `watches` holds the encoded watch list.
pub fn cpu_reference_pass(
    watch: &[Watch],
    next: &mut [u32],
    lost: &mut [u64],
    mem: &dyn QueueMemory,
    buf: &dyn EventBuffer,
    gpu_ns: u64,
) {
    let cap = buf.load_u32(hdr::CAPACITY) as u64;
    let emit = |kind: u16, queue: u16, aux: u32, src: Option<&[u8]>| -> bool {
        let old = buf.load_u64(hdr::RESERVED);
        if old - buf.load_u64(hdr::TAIL) >= cap {
            buf.store_u64(hdr::DROPPED, buf.load_u64(hdr::DROPPED) + 1);
            return false;
        }
        buf.store_u64(hdr::RESERVED, old + 1);
        let slot = HEADER_BYTES + (old & (cap - 1)) as usize * EVENT_BYTES;
        let mut e = [0u8; EVENT_BYTES];
        e[0..8].copy_from_slice(&gpu_ns.to_ne_bytes());
        e[12..14].copy_from_slice(&kind.to_ne_bytes());
        e[14..16].copy_from_slice(&queue.to_ne_bytes());
        e[16..20].copy_from_slice(&aux.to_ne_bytes());
        if let Some(s) = src {
            e[32..96].copy_from_slice(s);
        }
        // Everything but `seq` (bytes 8..12 stay zero here), then `seq` last.
        for k in (0..EVENT_BYTES).step_by(8) {
            buf.store_u64(
                slot + k,
                u64::from_ne_bytes(e[k..k + 8].try_into().expect("8")),
            );
        }
        buf.store_u32(slot + 8, (old + 1) as u32);
        true
    };
    for (q, w) in watch.iter().enumerate() {
        let qi = q as u16;
        let mut nx = next[q];
        if w.kind == 1 {
            let Ok(raw) = mem.load_u32_acquire(w.dbrec + 4) else {
                continue;
            };
            let pi = u32::from_be(raw) & 0xffff;
            let avail = pi.wrapping_sub(nx) & 0xffff;
            if avail > w.depth {
                let l = avail - w.depth;
                emit(ev::LOST, qi, l, None);
                lost[q] += l as u64;
                nx = pi.wrapping_sub(w.depth) & 0xffff;
            }
            while nx != pi {
                let mut slot = [0u8; 64];
                if mem
                    .read(w.ring + ((nx & (w.depth - 1)) as u64) * 64, &mut slot)
                    .is_err()
                {
                    break;
                }
                let ctrl = wqe::Ctrl::parse(&slot);
                let nbb = sigmatrace_mlx5::wqebbs_for_ds(ctrl.ds) as u32;
                if ctrl.ds == 0
                    || ctrl.wqe_index as u32 != nx
                    || nbb > (pi.wrapping_sub(nx) & 0xffff)
                {
                    emit(ev::LOST, qi, 1, None);
                    lost[q] += 1;
                    nx = (nx + 1) & 0xffff;
                    continue;
                }
                if !emit(ev::WQE, qi, nx | nbb << 16, Some(&slot)) {
                    lost[q] += nbb as u64;
                } else {
                    for k in 1..nbb {
                        let i = (nx + k) & 0xffff;
                        let mut more = [0u8; 64];
                        let _ = mem.read(w.ring + ((i & (w.depth - 1)) as u64) * 64, &mut more);
                        emit(ev::WQE_CONT, qi, nx | k << 16, Some(&more));
                    }
                }
                nx = (nx + nbb) & 0xffff;
            }
        } else if w.kind == 3 {
            if w.flags & 1 != 0 {
                if let Ok(raw) = mem.load_u32_acquire(w.dbrec) {
                    let ci = u32::from_be(raw) & 0xff_ffff;
                    let ahead = ci.wrapping_sub(nx) & 0xff_ffff;
                    if ahead < 1 << 23 && ahead > w.depth {
                        let l = ahead - w.depth;
                        emit(ev::LOST, qi, l, None);
                        lost[q] += l as u64;
                        nx = nx.wrapping_add(l);
                    }
                }
            }
            for _ in 0..w.depth {
                let off = (nx & (w.depth - 1)) as u64 * w.cqe_size as u64
                    + cqe::cqe64_offset(w.cqe_size) as u64;
                let mut e = [0u8; 64];
                if mem.read(w.ring + off, &mut e).is_err() || !cqe::is_valid(e[63], nx, w.depth) {
                    break;
                }
                if !emit(ev::CQE, qi, nx, Some(&e)) {
                    lost[q] += 1;
                }
                nx = nx.wrapping_add(1);
            }
        }
        next[q] = nx;
    }
}
