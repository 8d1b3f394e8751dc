//! IBGDA-style direct posting on mlx5 queues: what a GPU thread of NVSHMEM IBGDA or DOCA
//! GPUNetIO does, run by CPU threads standing in for GPU threads.
//!
//! A poster reserves a WQEBB slot with an atomic add, writes the WQE into the send ring with
//! plain big-endian stores, waits until every earlier slot has been published, then issues a
//! release fence, stores `be32(PI & 0xffff)` to the doorbell record's send word (`dbrec[1]`),
//! fences again and rings the 8-byte doorbell `{be32(PI << 8), be32(QPN << 8)}` at the UAR /
//! BlueFlame register, and finally lets the next slot go. Completions are read straight from
//! the CQE64 ring by the owner-bit rule; the consumer index goes to the CQ doorbell record.
//! Every byte written or read goes through the `sigmatrace-mlx5` codec (WQEs, doorbell words
//! and records, CQEs; layouts in `mlx5/README.md`); this module is the posting protocol and
//! the workload's bookkeeping.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sigmatrace_mlx5::cqe::{self, Cqe};
use sigmatrace_mlx5::dbr::{self, DoorbellWord};
use sigmatrace_mlx5::wqe::WqeBuilder;

/// `fm_ce_se`: always generate a CQE.
pub use sigmatrace_mlx5::wqe::flags::CQ_UPDATE as CE_CQE_ALWAYS;
/// mlx5 send opcodes.
pub use sigmatrace_mlx5::wqe::opcode as op;

/// A local buffer reference (one data segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sge {
    pub addr: u64,
    pub lkey: u32,
    pub len: u32,
}

/// One work request, as the workloads post it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeOp {
    /// RDMA WRITE of `local` to `raddr`.
    Write {
        local: Sge,
        raddr: u64,
        rkey: u32,
    },
    /// RDMA READ of `local.len` bytes from `raddr` into `local`.
    Read {
        local: Sge,
        raddr: u64,
        rkey: u32,
    },
    /// 8-byte fetch-and-add; the old value lands in `local`.
    FetchAdd {
        local: Sge,
        raddr: u64,
        rkey: u32,
        add: u64,
    },
    /// 8-byte compare-and-swap; the old value lands in `local`.
    CompSwap {
        local: Sge,
        raddr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    Nop,
}

impl WqeOp {
    /// The mlx5 opcode.
    pub fn opcode(&self) -> u8 {
        match self {
            WqeOp::Write { .. } => op::RDMA_WRITE,
            WqeOp::Read { .. } => op::RDMA_READ,
            WqeOp::FetchAdd { .. } => op::ATOMIC_FA,
            WqeOp::CompSwap { .. } => op::ATOMIC_CS,
            WqeOp::Nop => op::NOP,
        }
    }

    /// WQE size in 16-byte units, ctrl included.
    pub fn ds(&self) -> u8 {
        match self {
            WqeOp::Write { .. } | WqeOp::Read { .. } => 3,
            WqeOp::FetchAdd { .. } | WqeOp::CompSwap { .. } => 4,
            WqeOp::Nop => 1,
        }
    }

    /// Data-segment bytes (what a WQE decoder reports as the WQE's bytes).
    pub fn bytes(&self) -> u32 {
        match self {
            WqeOp::Write { local, .. }
            | WqeOp::Read { local, .. }
            | WqeOp::FetchAdd { local, .. }
            | WqeOp::CompSwap { local, .. } => local.len,
            WqeOp::Nop => 0,
        }
    }

    /// (remote address, rkey); zero for NOP.
    pub fn remote(&self) -> (u64, u32) {
        match *self {
            WqeOp::Write { raddr, rkey, .. }
            | WqeOp::Read { raddr, rkey, .. }
            | WqeOp::FetchAdd { raddr, rkey, .. }
            | WqeOp::CompSwap { raddr, rkey, .. } => (raddr, rkey),
            WqeOp::Nop => (0, 0),
        }
    }

    /// Atomic operand: the add value (FA) or the compare value (CS); else 0.
    pub fn compare_add(&self) -> u64 {
        match *self {
            WqeOp::FetchAdd { add, .. } => add,
            WqeOp::CompSwap { compare, .. } => compare,
            _ => 0,
        }
    }
}

/// Encodes `w` as one 64-byte WQEBB: ctrl, then raddr, atomic and data segments.
pub fn encode(w: &WqeOp, wqe_index: u16, qpn: u32, fm_ce_se: u8) -> [u8; 64] {
    let mut b = WqeBuilder::new(w.opcode(), wqe_index, qpn).fm_ce_se(fm_ce_se);
    let (raddr, rkey) = w.remote();
    b = match *w {
        WqeOp::Nop => b,
        WqeOp::Write { .. } | WqeOp::Read { .. } => b.raddr(raddr, rkey),
        WqeOp::FetchAdd { add, .. } => b.raddr(raddr, rkey).atomic(add, 0),
        WqeOp::CompSwap { compare, swap, .. } => b.raddr(raddr, rkey).atomic(swap, compare),
    };
    if let WqeOp::Write { local, .. }
    | WqeOp::Read { local, .. }
    | WqeOp::FetchAdd { local, .. }
    | WqeOp::CompSwap { local, .. } = *w
    {
        b = b.data(local.addr, local.lkey, local.len);
    }
    let mut out = [0u8; 64];
    let len = b.finish_into(&mut out);
    debug_assert_eq!(len, w.ds() as usize * 16);
    out
}

/// The 8-byte doorbell value NVSHMEM IBGDA writes: `{be32(pi << 8), be32(qpn << 8)}` in memory
/// order, returned as the native u64 whose bytes are that sequence.
pub fn doorbell_word(pi: u16, qpn: u32) -> u64 {
    DoorbellWord::nvshmem(pi, qpn).to_native_u64()
}

/// A send ring as `mlx5dv_init_obj` or devx describes it.
#[derive(Clone, Copy, Debug)]
pub struct SendRing {
    pub buf: *mut u8,
    /// Depth in WQEBBs (power of two).
    pub wqe_cnt: u32,
    /// The QP doorbell record (2 × be32).
    pub dbrec: *mut u32,
    /// The doorbell (UAR / BlueFlame) register.
    pub bf: *mut u64,
    pub qpn: u32,
}

/// A CQE ring.
#[derive(Clone, Copy, Debug)]
pub struct CqRing {
    pub buf: *mut u8,
    pub cqe_cnt: u32,
    /// 64 or 128 (the CQE64 is the last 64 bytes of each entry).
    pub cqe_size: u32,
    /// The CQ doorbell record (2 × be32; `[0]` = consumer index).
    pub dbrec: *mut u32,
}

/// Direct-posting failures.
#[derive(Debug, thiserror::Error)]
pub enum DirectError {
    #[error("QP {qpn:#x}: error CQE (opcode {opcode}, syndrome {syndrome:#x}, vendor {vendor:#x}) for WQE {wqe_counter}")]
    Cqe {
        qpn: u32,
        opcode: u8,
        syndrome: u8,
        vendor: u8,
        wqe_counter: u16,
    },
    #[error("QP {qpn:#x}: no completion for WQE {idx} within {secs} s")]
    Timeout { qpn: u32, idx: u64, secs: u64 },
    #[error("QP {qpn:#x} failed earlier: {what}")]
    Failed { qpn: u32, what: String },
}

/// How long any wait may take before it is an error.
pub const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// Spin, then yield, then sleep: waiting threads leave CPU to the device and the tracer.
pub struct Backoff(u32);

impl Backoff {
    pub fn new() -> Backoff {
        Backoff(0)
    }
    pub fn snooze(&mut self) {
        self.0 = self.0.saturating_add(1);
        if self.0 < 64 {
            std::hint::spin_loop();
        } else if self.0 < 256 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

/// Reads the CQE at free-running index `n` if hardware has written it (owner-bit rule).
///
/// # Safety
/// `cq` must describe live CQ memory.
pub unsafe fn read_cqe(cq: &CqRing, n: u64) -> Option<Cqe> {
    let slot = (n & (cq.cqe_cnt as u64 - 1)) as usize;
    let size = cq.cqe_size as usize;
    let e = cq.buf.add(slot * size + cqe::cqe64_offset(cq.cqe_size));
    if !cqe::is_valid(e.add(63).read_volatile(), n as u32, cq.cqe_cnt) {
        return None;
    }
    fence(Ordering::Acquire);
    let bytes = std::ptr::read_volatile(e as *const [u8; 64]);
    Some(cqe::decode(&bytes))
}

/// One WQE as the workload posted it (its own bookkeeping).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PostedWqe {
    /// Free-running WQEBB index (the ctrl's `wqe_index` is its low 16 bits).
    pub index: u64,
    pub wqe_index: u16,
    pub opcode: u8,
    pub bytes: u32,
    pub raddr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub fm_ce_se: u8,
    pub ds: u8,
}

/// What both ways of posting (direct, [`DirectQp`]; verbs, `poster::VerbsQp`) keep per QP:
/// the WQEs retired by completions, the signalling of every `signal_every`-th WQE, and the
/// workload's log of what it posted.
pub(crate) struct PostBook {
    /// WQEs retired by completions (free-running).
    pub(crate) retired: AtomicU64,
    /// Every `signal_every`-th WQE asks for a CQE even when the caller did not, so the ring
    /// never fills with unsignalled WQEs.
    signal_every: u64,
    log: Mutex<Vec<PostedWqe>>,
}

impl PostBook {
    pub(crate) fn new(signal_every: u64) -> PostBook {
        PostBook {
            retired: AtomicU64::new(0),
            signal_every,
            log: Mutex::new(Vec::new()),
        }
    }

    /// Whether WQE `idx` asks for a CQE (`asked`: the caller's wish).
    pub(crate) fn signaled(&self, idx: u64, asked: bool) -> bool {
        asked || idx % self.signal_every == self.signal_every - 1
    }

    /// Logs WQE `idx` as posted.
    pub(crate) fn record(&self, idx: u64, w: &WqeOp, fm_ce_se: u8) {
        let (raddr, rkey) = w.remote();
        let posted = PostedWqe {
            index: idx,
            wqe_index: idx as u16,
            opcode: w.opcode(),
            bytes: w.bytes(),
            raddr,
            rkey,
            compare_add: w.compare_add(),
            fm_ce_se,
            ds: w.ds(),
        };
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(posted);
    }

    /// Every WQE posted so far, in index order.
    pub(crate) fn posted(&self) -> Vec<PostedWqe> {
        let mut v = self.log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v.sort_by_key(|w| w.index);
        v
    }

    /// Makes `progress` until `done(retired)` holds, backing off between tries; `timeout`'s
    /// error once [`WAIT_LIMIT`] has passed since `start`.
    pub(crate) fn wait_until<E>(
        &self,
        start: Instant,
        done: impl Fn(u64) -> bool,
        progress: impl Fn() -> Result<(), E>,
        timeout: impl Fn() -> E,
    ) -> Result<(), E> {
        let mut bo = Backoff::new();
        while !done(self.retired.load(Ordering::Acquire)) {
            progress()?;
            if start.elapsed() > WAIT_LIMIT {
                return Err(timeout());
            }
            bo.snooze();
        }
        Ok(())
    }
}

/// A QP posted IBGDA-style by any number of threads.
pub struct DirectQp {
    sq: SendRing,
    cq: CqRing,
    /// Next WQEBB to reserve.
    resv: AtomicU64,
    /// WQEBBs published (doorbell rung); the next poster waits for its turn here.
    ready: AtomicU64,
    cq_ci: Mutex<u64>,
    failed: Mutex<Option<String>>,
    failed_flag: AtomicU32,
    /// WQEBBs retired by CQEs, signalling, the log.
    book: PostBook,
}

// SAFETY: the raw pointers address queue memory that lives as long as the QP (softnic's rings
// or the program's umem); concurrent access follows the IBGDA protocol above (slots are owned
// by their reserver, DBR/doorbell stores are ordered by `ready`, the CQ by `cq_ci`'s mutex).
unsafe impl Send for DirectQp {}
// SAFETY: see above.
unsafe impl Sync for DirectQp {}

impl DirectQp {
    /// Wraps rings that a construction path produced (nothing posted yet).
    pub fn new(sq: SendRing, cq: CqRing) -> DirectQp {
        DirectQp {
            sq,
            cq,
            resv: AtomicU64::new(0),
            ready: AtomicU64::new(0),
            cq_ci: Mutex::new(0),
            failed: Mutex::new(None),
            failed_flag: AtomicU32::new(0),
            book: PostBook::new((sq.wqe_cnt as u64 / 4).max(1)),
        }
    }

    pub fn qpn(&self) -> u32 {
        self.sq.qpn
    }

    pub fn depth(&self) -> u32 {
        self.sq.wqe_cnt
    }

    /// The rings this QP posts to (for a GPU kernel that posts instead of this struct).
    pub fn rings(&self) -> (SendRing, CqRing) {
        (self.sq, self.cq)
    }

    fn check_failed(&self) -> Result<(), DirectError> {
        if self.failed_flag.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let what = self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        Err(DirectError::Failed {
            qpn: self.sq.qpn,
            what,
        })
    }

    /// Posts one WQE; returns its free-running index.
    pub fn post(&self, w: &WqeOp, signaled: bool) -> Result<u64, DirectError> {
        self.check_failed()?;
        let idx = self.resv.fetch_add(1, Ordering::Relaxed);
        let depth = self.sq.wqe_cnt as u64;
        let start = Instant::now();
        let room = |retired| idx + 1 - retired <= depth;
        let timeout = || self.timeout(idx);
        self.book
            .wait_until(start, room, || self.progress(), timeout)?;
        let signaled = self.book.signaled(idx, signaled);
        let fm_ce_se = if signaled { CE_CQE_ALWAYS } else { 0 };
        let bytes = encode(w, idx as u16, self.sq.qpn, fm_ce_se);
        let slot = (idx & (depth - 1)) as usize;
        // SAFETY: the slot lies in the ring; it is ours (reserved, and retired by the device).
        unsafe {
            let dst = self.sq.buf.add(slot * 64) as *mut u32;
            for (k, word) in bytes.chunks_exact(4).enumerate() {
                dst.add(k)
                    .write_volatile(u32::from_ne_bytes(word.try_into().expect("4 bytes")));
            }
        }
        let mut bo = Backoff::new();
        while self.ready.load(Ordering::Acquire) != idx {
            if start.elapsed() > WAIT_LIMIT {
                return Err(self.timeout(idx));
            }
            bo.snooze();
        }
        self.book.record(idx, w, fm_ce_se);
        let pi = (idx + 1) as u16;
        fence(Ordering::SeqCst);
        // SAFETY: dbrec points to the QP's 8-byte doorbell record; [1] is the send word. The
        // doorbell register stays mapped while the QP lives.
        unsafe {
            AtomicU32::from_ptr(self.sq.dbrec.add(1))
                .store(dbr::sq_pi_to_raw(pi), Ordering::Release);
            fence(Ordering::SeqCst);
            self.sq.bf.write_volatile(doorbell_word(pi, self.sq.qpn));
        }
        fence(Ordering::SeqCst);
        self.ready.store(idx + 1, Ordering::Release);
        Ok(idx)
    }

    fn timeout(&self, idx: u64) -> DirectError {
        DirectError::Timeout {
            qpn: self.sq.qpn,
            idx,
            secs: WAIT_LIMIT.as_secs(),
        }
    }

    /// Consumes every CQE present (if no other thread is doing so) and advances `retired`.
    pub fn progress(&self) -> Result<(), DirectError> {
        let Ok(mut ci) = self.cq_ci.try_lock() else {
            return self.check_failed();
        };
        // SAFETY: the CQ ring is live; only the holder of `cq_ci` consumes it.
        while let Some(c) = unsafe { read_cqe(&self.cq, *ci) } {
            *ci += 1;
            // SAFETY: CQ doorbell record, word 0 = consumer index.
            unsafe {
                AtomicU32::from_ptr(self.cq.dbrec)
                    .store(dbr::cq_ci_to_raw(*ci as u32), Ordering::Release)
            };
            if c.is_error() {
                let e = DirectError::Cqe {
                    qpn: self.sq.qpn,
                    opcode: c.opcode,
                    syndrome: c.syndrome,
                    vendor: c.vendor_syndrome,
                    wqe_counter: c.wqe_counter,
                };
                *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                self.failed_flag.store(1, Ordering::Release);
                return Err(e);
            }
            let r = self.book.retired.load(Ordering::Relaxed);
            let done = r + (c.wqe_counter.wrapping_sub(r as u16)) as u64 + 1;
            if done > r {
                self.book.retired.store(done, Ordering::Release);
            }
        }
        drop(ci);
        self.check_failed()
    }

    /// Waits until WQE `idx` (and every earlier one) completed. `idx` must be signalled or
    /// followed by a signalled WQE.
    pub fn wait(&self, idx: u64) -> Result<(), DirectError> {
        let done = |retired| retired > idx;
        let timeout = || self.timeout(idx);
        self.book
            .wait_until(Instant::now(), done, || self.progress(), timeout)
    }

    /// Every WQE posted so far, in index order.
    pub fn posted(&self) -> Vec<PostedWqe> {
        self.book.posted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_wqe_layout() {
        let w = WqeOp::Write {
            local: Sge {
                addr: 0x1122_3344_5566_7788,
                lkey: 0xaabb,
                len: 4096,
            },
            raddr: 0x0102_0304_0506_0708,
            rkey: 0xccdd,
        };
        let b = encode(&w, 0xfffe, 0x12345, CE_CQE_ALWAYS);
        assert_eq!(&b[0..4], &[0x00, 0xff, 0xfe, 0x08]);
        assert_eq!(&b[4..8], &[0x01, 0x23, 0x45, 0x03]);
        assert_eq!(b[11], 0x08);
        assert_eq!(&b[16..24], &0x0102_0304_0506_0708u64.to_be_bytes());
        assert_eq!(&b[24..28], &0xccddu32.to_be_bytes());
        assert_eq!(&b[32..36], &4096u32.to_be_bytes());
        assert_eq!(&b[36..40], &0xaabbu32.to_be_bytes());
        assert_eq!(&b[40..48], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert!(b[48..].iter().all(|&x| x == 0));
    }

    #[test]
    fn atomic_wqe_layout() {
        let local = Sge {
            addr: 0x1000,
            lkey: 7,
            len: 8,
        };
        let fa = encode(
            &WqeOp::FetchAdd {
                local,
                raddr: 0x2000,
                rkey: 9,
                add: 0x1_0000_0001,
            },
            3,
            0x99,
            0,
        );
        assert_eq!(fa[3], op::ATOMIC_FA);
        assert_eq!(fa[7], 4);
        assert_eq!(&fa[32..40], &0x1_0000_0001u64.to_be_bytes());
        assert_eq!(&fa[48..52], &8u32.to_be_bytes());
        let cs = encode(
            &WqeOp::CompSwap {
                local,
                raddr: 0x2000,
                rkey: 9,
                compare: 5,
                swap: 6,
            },
            4,
            0x99,
            0,
        );
        assert_eq!(cs[3], op::ATOMIC_CS);
        assert_eq!(&cs[32..40], &6u64.to_be_bytes(), "swap first");
        assert_eq!(&cs[40..48], &5u64.to_be_bytes(), "then compare");
    }

    #[test]
    fn doorbell_is_nvshmem_order() {
        let w = doorbell_word(0x1234, 0xabcde);
        assert_eq!(
            w.to_ne_bytes(),
            [0x00, 0x12, 0x34, 0x00, 0x0a, 0xbc, 0xde, 0x00]
        );
    }

    /// A fake device on plain memory: checks the posting protocol and the CQE owner rule.
    #[test]
    fn post_publishes_dbr_doorbell_and_retires_by_cqe() {
        let depth = 8u32;
        let mut ring = vec![0u8; depth as usize * 64];
        let mut dbr = [0u32; 2];
        let mut bf = 0u64;
        let mut cqbuf = vec![0u8; 4 * 64];
        for e in cqbuf.chunks_mut(64) {
            e[63] = cqe::opcode::INVALID << 4;
        }
        let mut cqdbr = [0u32; 2];
        let qp = DirectQp::new(
            SendRing {
                buf: ring.as_mut_ptr(),
                wqe_cnt: depth,
                dbrec: dbr.as_mut_ptr(),
                bf: &mut bf,
                qpn: 0x42,
            },
            CqRing {
                buf: cqbuf.as_mut_ptr(),
                cqe_cnt: 4,
                cqe_size: 64,
                dbrec: cqdbr.as_mut_ptr(),
            },
        );
        let w = WqeOp::Nop;
        for i in 0..3 {
            assert_eq!(qp.post(&w, i == 2).unwrap(), i);
        }
        // SAFETY: the QP wrote these while we only hold shared references through it.
        let (d1, db) = unsafe {
            (
                std::ptr::read_volatile(&dbr[1]),
                std::ptr::read_volatile(&bf),
            )
        };
        assert_eq!(u32::from_be(d1), 3);
        assert_eq!(db, doorbell_word(3, 0x42));
        assert_eq!(ring[64 * 2 + 11], CE_CQE_ALWAYS);
        assert_eq!(ring[64 + 2], 1, "wqe_index 1 in ctrl");
        // The "device" completes WQE 2: one CQE at index 0 with owner 0.
        cqbuf[60..62].copy_from_slice(&2u16.to_be_bytes());
        cqbuf[56..60].copy_from_slice(&(0x42u32 | (op::NOP as u32) << 24).to_be_bytes());
        cqbuf[63] = cqe::opcode::REQ << 4;
        qp.wait(2).unwrap();
        // SAFETY: as above.
        assert_eq!(
            u32::from_be(unsafe { std::ptr::read_volatile(&cqdbr[0]) }),
            1
        );
        let posted = qp.posted();
        assert_eq!(posted.len(), 3);
        assert_eq!(posted[2].fm_ce_se, CE_CQE_ALWAYS);
        assert_eq!(posted[0].fm_ce_se, 0);
        // An error CQE fails the QP.
        let e = &mut cqbuf[64..128];
        e[55] = 0x04;
        e[63] = cqe::opcode::REQ_ERR << 4;
        assert!(matches!(
            qp.progress(),
            Err(DirectError::Cqe { syndrome: 4, .. })
        ));
        assert!(qp.post(&w, true).is_err());
    }
}
