//! mlx5 direct queues: softnic executes what programs write into mlx5-format rings.
//!
//! A QP exposed by `mlx5dv_init_obj` (or built with devx) gets a send ring of 64-byte WQEBBs, a
//! receive ring, a doorbell record and a UAR page; a CQ gets a CQE64 ring and a doorbell record.
//! The progress thread watches each QP's SQ doorbell record (`dbrec[1]`): every WQE between the
//! last executed producer index and the new one is parsed (ctrl, raddr, atomic, data, inline
//! segments) into softnic's own send queue, so transmission, ACKs, RNR retries and errors are
//! those of the verbs path. Completions of QPs whose CQ is exposed are written as CQE64s (owner
//! bit, wqe_counter, syndrome) instead of softnic's internal completion queue. Receives of an
//! exposed QP come from its receive ring (`dbrec[0]` = head). All ring fields are big-endian.

use crate::ffi::*;
use crate::wire::work::*;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Mutex;

/// `MLX5_INVALID_LKEY`: ends a receive WQE's scatter list.
pub const INVALID_LKEY: u32 = 0x100;
/// Internal opcode of an mlx5 NOP WQE.
pub const WR_NOP: u32 = 0xff;

/// Page-aligned, zeroed memory owned by softnic (rings it allocated for init_obj).
pub struct Owned {
    pub ptr: *mut u8,
    len: usize,
}

impl Owned {
    pub fn new(len: usize) -> Owned {
        let len = len.max(64);
        let mut p: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: posix_memalign with a power-of-two alignment and a valid out pointer.
        let r = unsafe { libc::posix_memalign(&mut p, 4096, len) };
        assert!(
            r == 0 && !p.is_null(),
            "softnic: out of memory for mlx5 rings"
        );
        // SAFETY: p points to len writable bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, len) };
        Owned {
            ptr: p as *mut u8,
            len,
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: allocated by posix_memalign above.
        unsafe { libc::free(self.ptr as *mut libc::c_void) };
        let _ = self.len;
    }
}

#[inline]
unsafe fn rd_be32(p: *const u8) -> u32 {
    u32::from_be((p as *const u32).read_volatile())
}
#[inline]
unsafe fn rd_be64(p: *const u8) -> u64 {
    u64::from_be((p as *const u64).read_unaligned())
}
#[inline]
unsafe fn wr_be32(p: *mut u8, v: u32) {
    (p as *mut u32).write_volatile(v.to_be())
}

/// An exposed CQ ring.
pub struct DvCq {
    pub buf: *mut u8,
    pub cnt: u32,
    pub dbrec: *mut u8,
    pub cqn: u32,
    pub state: Mutex<DvCqState>,
    pub _mem: Vec<Owned>,
}

pub struct DvCqState {
    /// Producer index (CQEs written).
    pub pi: u32,
    /// Full wr_id of each slot (the CQE has only a 16-bit wqe_counter), for ibv_poll_cq.
    pub wr_ids: Vec<u64>,
    /// CQEs waiting for ring space (the consumer index in dbrec[0] lags).
    pub pending: std::collections::VecDeque<Cqe>,
}

// SAFETY: the raw pointers address ring memory that lives as long as the DvCq (owned or the
// program's registered umem); writes are serialised by `state`.
unsafe impl Send for DvCq {}
// SAFETY: see above.
unsafe impl Sync for DvCq {}

/// mlx5 send opcode of a softnic WR opcode.
pub fn mlx5_opcode(wr_opcode: u32) -> u8 {
    (match wr_opcode {
        IBV_WR_RDMA_WRITE => MLX5_OPCODE_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM => MLX5_OPCODE_RDMA_WRITE_IMM,
        IBV_WR_SEND => MLX5_OPCODE_SEND,
        IBV_WR_SEND_WITH_IMM => MLX5_OPCODE_SEND_IMM,
        IBV_WR_RDMA_READ => MLX5_OPCODE_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP => MLX5_OPCODE_ATOMIC_CS,
        IBV_WR_ATOMIC_FETCH_AND_ADD => MLX5_OPCODE_ATOMIC_FA,
        _ => MLX5_OPCODE_NOP,
    }) as u8
}

fn syndrome(status: u32) -> u8 {
    (match status {
        IBV_WC_LOC_LEN_ERR => MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
        IBV_WC_LOC_QP_OP_ERR => MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
        IBV_WC_LOC_PROT_ERR => MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
        IBV_WC_WR_FLUSH_ERR => MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
        IBV_WC_REM_INV_REQ_ERR => MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
        IBV_WC_REM_ACCESS_ERR => MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
        IBV_WC_REM_OP_ERR => MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
        IBV_WC_RETRY_EXC_ERR => MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
        IBV_WC_RNR_RETRY_EXC_ERR => MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
        _ => MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
    }) as u8
}

fn status_of(synd: u8) -> u32 {
    match synd as u32 {
        MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR => IBV_WC_LOC_LEN_ERR,
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR => IBV_WC_LOC_PROT_ERR,
        MLX5_CQE_SYNDROME_WR_FLUSH_ERR => IBV_WC_WR_FLUSH_ERR,
        MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR => IBV_WC_REM_INV_REQ_ERR,
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR => IBV_WC_REM_ACCESS_ERR,
        MLX5_CQE_SYNDROME_REMOTE_OP_ERR => IBV_WC_REM_OP_ERR,
        MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR => IBV_WC_RETRY_EXC_ERR,
        MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR => IBV_WC_RNR_RETRY_EXC_ERR,
        _ => IBV_WC_LOC_QP_OP_ERR,
    }
}

fn is_responder(wc_opcode: u32) -> bool {
    wc_opcode & IBV_WC_RECV != 0
}

impl DvCq {
    pub fn new(buf: *mut u8, cnt: u32, dbrec: *mut u8, cqn: u32, mem: Vec<Owned>) -> DvCq {
        DvCq {
            buf,
            cnt,
            dbrec,
            cqn,
            state: Mutex::new(DvCqState {
                pi: 0,
                wr_ids: vec![0; cnt as usize],
                pending: Default::default(),
            }),
            _mem: mem,
        }
    }

    /// Marks every CQE invalid (opcode 15, owner 0), as a fresh hardware CQ reads.
    pub fn init_ring(&self) {
        for i in 0..self.cnt as usize {
            // SAFETY: buf holds cnt 64-byte CQEs.
            unsafe { *self.buf.add(i * 64 + 63) = (MLX5_CQE_INVALID << 4) as u8 };
        }
    }

    fn ci(&self) -> u32 {
        // SAFETY: dbrec points to the CQ's 8-byte doorbell record.
        unsafe { rd_be32(self.dbrec) & 0x00ff_ffff }
    }

    /// Writes one completion (or queues it while the ring is full).
    pub fn write(&self, e: Cqe) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.pending.push_back(e);
        self.drain(&mut st);
    }

    /// Writes queued completions while the ring has room.
    pub fn drain(&self, st: &mut DvCqState) {
        while let Some(e) = st.pending.front().copied() {
            if (st.pi.wrapping_sub(self.ci()) & 0x00ff_ffff) >= self.cnt {
                return;
            }
            st.pending.pop_front();
            let n = st.pi;
            let slot = (n & (self.cnt - 1)) as usize;
            st.wr_ids[slot] = e.wc.wr_id;
            // SAFETY: slot < cnt; the consumer released it (pi - ci < cnt).
            unsafe { self.fill(self.buf.add(slot * 64), &e, n) };
            st.pi = n.wrapping_add(1);
        }
    }

    unsafe fn fill(&self, c: *mut u8, e: &Cqe, n: u32) {
        let wc = &e.wc;
        std::ptr::write_bytes(c, 0, 63);
        let owner = ((n & self.cnt) != 0) as u8;
        let counter = e.counter.to_be_bytes();
        let op: u32;
        if wc.status != IBV_WC_SUCCESS {
            op = if is_responder(wc.opcode) {
                MLX5_CQE_RESP_ERR
            } else {
                MLX5_CQE_REQ_ERR
            };
            *c.add(54) = wc.vendor_err as u8;
            *c.add(55) = syndrome(wc.status);
            wr_be32(c.add(56), ((e.op as u32) << 24) | (wc.qp_num & 0x00ff_ffff));
        } else if is_responder(wc.opcode) {
            op = if wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM {
                MLX5_CQE_RESP_WR_IMM
            } else if wc.wc_flags & IBV_WC_WITH_IMM != 0 {
                MLX5_CQE_RESP_SEND_IMM
            } else {
                MLX5_CQE_RESP_SEND
            };
            wr_be32(c.add(24), wc.src_qp & 0x00ff_ffff);
            wr_be32(c.add(32), e.srqn & 0x00ff_ffff);
            (c.add(36) as *mut u32).write_unaligned(wc.__bindgen_anon_1.imm_data);
            wr_be32(c.add(44), wc.byte_len);
            wr_be32(c.add(56), wc.qp_num & 0x00ff_ffff);
        } else {
            op = MLX5_CQE_REQ;
            wr_be32(c.add(44), wc.byte_len);
            wr_be32(c.add(56), ((e.op as u32) << 24) | (wc.qp_num & 0x00ff_ffff));
        }
        if wc.status == IBV_WC_SUCCESS {
            // (error CQEs carry syndromes where the timestamp would be)
            let ts = if e.ts != 0 { e.ts } else { now_ns() };
            (c.add(48) as *mut u64).write_unaligned(ts.to_be());
        }
        *c.add(60) = counter[0];
        *c.add(61) = counter[1];
        fence(Ordering::Release);
        c.add(63).write_volatile(((op as u8) << 4) | owner);
    }

    /// ibv_poll_cq on an exposed CQ: reads the next valid CQE at the consumer index.
    pub fn poll(&self) -> Option<ibv_wc> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.drain(&mut st);
        let ci = self.ci();
        let slot = (ci & (self.cnt - 1)) as usize;
        // SAFETY: slot < cnt.
        let c = unsafe { self.buf.add(slot * 64) };
        // SAFETY: reading a CQE the device wrote; op_own is read first, the rest after an
        // acquire fence, as a consumer of a hardware ring does.
        unsafe {
            let op_own = (c.add(63) as *const u8).read_volatile();
            let op = (op_own >> 4) as u32;
            if op == MLX5_CQE_INVALID || (op_own & 1) != ((ci & self.cnt) != 0) as u8 {
                return None;
            }
            fence(Ordering::Acquire);
            let mut wc = ibv_wc {
                wr_id: st.wr_ids[slot],
                qp_num: rd_be32(c.add(56)) & 0x00ff_ffff,
                ..Default::default()
            };
            match op {
                MLX5_CQE_REQ_ERR | MLX5_CQE_RESP_ERR => {
                    wc.status = status_of(*c.add(55));
                    wc.vendor_err = *c.add(54) as u32;
                    wc.opcode = if op == MLX5_CQE_RESP_ERR {
                        IBV_WC_RECV
                    } else {
                        IBV_WC_SEND
                    };
                }
                MLX5_CQE_REQ => {
                    wc.byte_len = rd_be32(c.add(44));
                    wc.opcode = match rd_be32(c.add(56)) >> 24 {
                        MLX5_OPCODE_RDMA_WRITE | MLX5_OPCODE_RDMA_WRITE_IMM => IBV_WC_RDMA_WRITE,
                        MLX5_OPCODE_RDMA_READ => IBV_WC_RDMA_READ,
                        MLX5_OPCODE_ATOMIC_CS => IBV_WC_COMP_SWAP,
                        MLX5_OPCODE_ATOMIC_FA => IBV_WC_FETCH_ADD,
                        _ => IBV_WC_SEND,
                    };
                }
                _ => {
                    wc.byte_len = rd_be32(c.add(44));
                    wc.src_qp = rd_be32(c.add(24)) & 0x00ff_ffff;
                    wc.opcode = if op == MLX5_CQE_RESP_WR_IMM {
                        IBV_WC_RECV_RDMA_WITH_IMM
                    } else {
                        IBV_WC_RECV
                    };
                    if op != MLX5_CQE_RESP_SEND {
                        wc.wc_flags |= IBV_WC_WITH_IMM;
                        wc.__bindgen_anon_1.imm_data = (c.add(36) as *const u32).read_unaligned();
                    }
                }
            }
            wr_be32(self.dbrec, ci.wrapping_add(1) & 0x00ff_ffff);
            Some(wc)
        }
    }
}

/// An exposed QP's rings.
pub struct DvQp {
    pub sq_buf: *mut u8,
    pub sq_cnt: u32,
    pub rq_buf: *mut u8,
    pub rq_cnt: u32,
    pub rq_stride: u32,
    pub dbrec: *mut u8,
    pub uar: *mut u8,
    /// SQ producer index up to which WQEs were taken (16 bits, wrapping).
    pub sq_seen: AtomicU32,
    /// RQ consumer index.
    pub rq_ci: AtomicU32,
    /// wr_id of receives posted through ibv_post_recv, per RQ slot (u64::MAX: posted directly).
    pub rq_wrid: Vec<std::sync::atomic::AtomicU64>,
    pub _mem: Vec<Owned>,
}

// SAFETY: ring memory lives as long as the DvQp; SQ parsing runs under the QP's SQ lock and RQ
// consumption under its responder lock.
unsafe impl Send for DvQp {}
// SAFETY: see above.
unsafe impl Sync for DvQp {}

impl DvQp {
    /// The SQ producer index the program published in dbrec[1].
    #[inline]
    pub fn sq_pi(&self) -> u32 {
        // SAFETY: dbrec points to the QP's 8-byte doorbell record.
        unsafe { rd_be32(self.dbrec.add(4)) & 0xffff }
    }

    #[inline]
    pub fn has_new_wqes(&self) -> bool {
        self.sq_pi() != self.sq_seen.load(Ordering::Relaxed)
    }

    /// Pops the next receive WQE the program (or ibv_post_recv) published.
    pub fn take_recv(&self) -> Option<RecvWqe> {
        if self.rq_cnt == 0 {
            return None;
        }
        // SAFETY: dbrec[0] is the RQ head the program publishes.
        let head = unsafe { rd_be32(self.dbrec) } & 0xffff;
        let ci = self.rq_ci.load(Ordering::Relaxed);
        if ci & 0xffff == head {
            return None;
        }
        fence(Ordering::Acquire);
        let slot = (ci & (self.rq_cnt - 1)) as usize;
        let wr_id = self.rq_wrid[slot].swap(u64::MAX, Ordering::Relaxed);
        let mut r = RecvWqe {
            wr_id: if wr_id == u64::MAX {
                (ci & 0xffff) as u64
            } else {
                wr_id
            },
            idx: ci & 0xffff,
            num_sge: 0,
            sge: [ibv_sge::default(); MAX_SGE],
        };
        let base = ((ci & (self.rq_cnt - 1)) * self.rq_stride) as usize;
        for k in 0..(self.rq_stride as usize / 16).min(MAX_SGE) {
            // SAFETY: the WQE lies inside the RQ ring.
            let (bc, lkey, addr) = unsafe {
                let s = self.rq_buf.add(base + k * 16);
                (rd_be32(s), rd_be32(s.add(4)), rd_be64(s.add(8)))
            };
            if lkey == INVALID_LKEY {
                break;
            }
            r.sge[k] = ibv_sge {
                addr,
                length: bc,
                lkey,
            };
            r.num_sge += 1;
        }
        self.rq_ci.store(ci.wrapping_add(1), Ordering::Relaxed);
        Some(r)
    }

    /// ibv_post_recv on an exposed QP: writes the WQE into the ring and publishes dbrec[0].
    pub fn post_recv(&self, sges: &[ibv_sge], wr_id: Option<u64>) -> Result<(), i32> {
        // SAFETY: dbrec[0] is the RQ head.
        let head = unsafe { rd_be32(self.dbrec) } & 0xffff;
        let ci = self.rq_ci.load(Ordering::Relaxed) & 0xffff;
        if self.rq_cnt == 0 || (head.wrapping_sub(ci) & 0xffff) >= self.rq_cnt {
            return Err(libc::ENOMEM);
        }
        let max = (self.rq_stride / 16) as usize;
        if sges.len() > max {
            return Err(libc::EINVAL);
        }
        let base = ((head & (self.rq_cnt - 1)) * self.rq_stride) as usize;
        self.rq_wrid[(head & (self.rq_cnt - 1)) as usize]
            .store(wr_id.unwrap_or(u64::MAX), Ordering::Relaxed);
        for k in 0..max {
            // SAFETY: inside the RQ ring.
            unsafe {
                let s = self.rq_buf.add(base + k * 16);
                match sges.get(k) {
                    Some(g) => {
                        wr_be32(s, g.length);
                        wr_be32(s.add(4), g.lkey);
                        (s.add(8) as *mut u64).write_unaligned(g.addr.to_be());
                    }
                    None => {
                        wr_be32(s, 0);
                        wr_be32(s.add(4), INVALID_LKEY);
                        (s.add(8) as *mut u64).write_unaligned(0);
                    }
                }
            }
        }
        fence(Ordering::Release);
        // SAFETY: as above.
        unsafe { wr_be32(self.dbrec, head.wrapping_add(1) & 0xffff) };
        Ok(())
    }

    /// Reads the 16-byte unit `u` of the WQE starting at WQEBB `idx` (wrapping at the ring end).
    unsafe fn unit(&self, idx: u32, u: u32) -> *const u8 {
        let ring = self.sq_cnt as usize * 64;
        let off = ((idx & (self.sq_cnt - 1)) as usize * 64 + u as usize * 16) % ring;
        self.sq_buf.add(off)
    }
}

/// A WQE parse failure: the WQE completes with this status and the QP moves to error.
pub struct BadWqe(pub u32);

/// Parses the WQE at WQEBB index `idx` into `w`; returns its size in WQEBBs.
///
/// # Safety
/// The SQ ring must be mapped; the program published the WQE through dbrec[1].
pub unsafe fn parse_wqe(d: &DvQp, idx: u32, w: &mut SendWqe) -> Result<u32, (u32, BadWqe)> {
    let ctrl = d.unit(idx, 0);
    let w0 = rd_be32(ctrl);
    let w1 = rd_be32(ctrl.add(4));
    let fm_ce_se = *ctrl.add(11);
    let ds = w1 & 0x3f;
    let bbs = ds.div_ceil(4).max(1);
    let mlx5_op = w0 & 0xff;
    w.wr_id = (idx & 0xffff) as u64;
    w.flags = 0;
    if fm_ce_se & 0x0c == 0x08 {
        w.flags |= IBV_SEND_SIGNALED;
    }
    if fm_ce_se & 0x02 != 0 {
        w.flags |= IBV_SEND_SOLICITED;
    }
    if fm_ce_se & 0xe0 != 0 {
        w.flags |= IBV_SEND_FENCE;
    }
    w.imm = (ctrl.add(12) as *const u32).read_unaligned();
    w.num_sge = 0;
    w.len = 0;
    w.ud_global = false;
    w.opcode = match mlx5_op {
        MLX5_OPCODE_NOP => WR_NOP,
        MLX5_OPCODE_RDMA_WRITE => IBV_WR_RDMA_WRITE,
        MLX5_OPCODE_RDMA_WRITE_IMM => IBV_WR_RDMA_WRITE_WITH_IMM,
        MLX5_OPCODE_SEND => IBV_WR_SEND,
        MLX5_OPCODE_SEND_IMM => IBV_WR_SEND_WITH_IMM,
        MLX5_OPCODE_RDMA_READ => IBV_WR_RDMA_READ,
        MLX5_OPCODE_ATOMIC_CS => IBV_WR_ATOMIC_CMP_AND_SWP,
        MLX5_OPCODE_ATOMIC_FA => IBV_WR_ATOMIC_FETCH_AND_ADD,
        _ => {
            w.opcode = WR_NOP;
            return Err((bbs, BadWqe(IBV_WC_LOC_QP_OP_ERR)));
        }
    };
    if ds == 0 {
        return Err((1, BadWqe(IBV_WC_LOC_QP_OP_ERR)));
    }
    let mut u = 1;
    if matches!(
        mlx5_op,
        MLX5_OPCODE_RDMA_WRITE
            | MLX5_OPCODE_RDMA_WRITE_IMM
            | MLX5_OPCODE_RDMA_READ
            | MLX5_OPCODE_ATOMIC_CS
            | MLX5_OPCODE_ATOMIC_FA
    ) {
        let r = d.unit(idx, u);
        w.raddr = rd_be64(r);
        w.rkey = rd_be32(r.add(8));
        u += 1;
    }
    if matches!(mlx5_op, MLX5_OPCODE_ATOMIC_CS | MLX5_OPCODE_ATOMIC_FA) {
        let a = d.unit(idx, u);
        let swap_add = rd_be64(a);
        let compare = rd_be64(a.add(8));
        if mlx5_op == MLX5_OPCODE_ATOMIC_CS {
            w.swap = swap_add;
            w.compare = compare;
        } else {
            w.compare = swap_add;
        }
        u += 1;
    }
    let mut inline_len = 0usize;
    while u < ds {
        let s = d.unit(idx, u);
        let bc = rd_be32(s);
        if bc & 0x8000_0000 != 0 {
            // Inline segment: byte count, then the data, padded to 16 bytes.
            let n = (bc & 0x7fff_ffff) as usize;
            if inline_len + n > w.inline_mut().len() {
                return Err((bbs, BadWqe(IBV_WC_LOC_LEN_ERR)));
            }
            for i in 0..n {
                let b = d.unit(idx, u + ((4 + i) / 16) as u32).add((4 + i) % 16);
                w.inline_buf[inline_len + i] = *b;
            }
            inline_len += n;
            w.flags |= IBV_SEND_INLINE;
            u += (4 + n as u32).div_ceil(16);
        } else {
            if w.num_sge as usize == MAX_SGE {
                return Err((bbs, BadWqe(IBV_WC_LOC_LEN_ERR)));
            }
            let k = w.num_sge as usize;
            w.sge[k] = ibv_sge {
                length: bc,
                lkey: rd_be32(s.add(4)),
                addr: rd_be64(s.add(8)),
            };
            w.num_sge += 1;
            w.len += bc;
            u += 1;
        }
    }
    if w.flags & IBV_SEND_INLINE != 0 {
        if w.num_sge != 0 {
            return Err((bbs, BadWqe(IBV_WC_LOC_QP_OP_ERR)));
        }
        w.len = inline_len as u32;
    }
    if matches!(mlx5_op, MLX5_OPCODE_ATOMIC_CS | MLX5_OPCODE_ATOMIC_FA) && w.len != 8 {
        return Err((bbs, BadWqe(IBV_WC_LOC_LEN_ERR)));
    }
    Ok(bbs)
}

/// An exposed SRQ ring: a linked list of WQEs (16-byte next segment, then data segments). The
/// program fills WQEs along the list and publishes a counter in dbrec[0]; softnic consumes them
/// in the same order by following `next_wqe_index` from the initial head; the program links
/// WQEs back at its tail after their completions (wqe_counter = WQE index).
pub struct DvSrq {
    pub buf: *mut u8,
    pub cnt: u32,
    pub stride: u32,
    pub dbrec: *mut u8,
    /// (next WQE index to consume, WQEs consumed)
    pub hw: Mutex<(u32, u32)>,
    pub _mem: Vec<Owned>,
}

// SAFETY: ring memory lives as long as the DvSrq; consumption is serialised by `hw`.
unsafe impl Send for DvSrq {}
// SAFETY: see above.
unsafe impl Sync for DvSrq {}

impl DvSrq {
    /// Builds the free list 0 -> 1 -> ... -> cnt-1 (head 0, tail cnt-1).
    pub fn init_list(&self) {
        for i in 0..self.cnt {
            // SAFETY: WQE i lies inside the ring.
            unsafe {
                let w = self.buf.add((i * self.stride) as usize);
                let next = ((i + 1) & (self.cnt - 1)) as u16;
                *w.add(2) = (next >> 8) as u8;
                *w.add(3) = next as u8;
            }
        }
    }

    pub fn take_recv(&self) -> Option<RecvWqe> {
        let mut hw = self.hw.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: dbrec[0] is the program's posted-WQE counter.
        let posted = unsafe { rd_be32(self.dbrec) } & 0xffff;
        if posted == hw.1 & 0xffff {
            return None;
        }
        fence(Ordering::Acquire);
        let idx = hw.0 & (self.cnt - 1);
        // SAFETY: WQE idx lies inside the ring.
        let w = unsafe { self.buf.add((idx * self.stride) as usize) };
        let mut r = RecvWqe {
            wr_id: idx as u64,
            idx,
            num_sge: 0,
            sge: [ibv_sge::default(); MAX_SGE],
        };
        for k in 1..(self.stride as usize / 16).min(MAX_SGE + 1) {
            // SAFETY: inside the WQE.
            let (bc, lkey, addr) = unsafe {
                let s = w.add(k * 16);
                (rd_be32(s), rd_be32(s.add(4)), rd_be64(s.add(8)))
            };
            if lkey == INVALID_LKEY {
                break;
            }
            r.sge[k - 1] = ibv_sge {
                addr,
                length: bc,
                lkey,
            };
            r.num_sge += 1;
        }
        // SAFETY: the next segment's next_wqe_index (be16 at byte 2).
        let next = unsafe { u16::from_be_bytes([*w.add(2), *w.add(3)]) } as u32;
        *hw = (next, hw.1.wrapping_add(1));
        Some(r)
    }
}

/// A fresh per-slot wr_id table for an RQ of `n` WQEs.
pub fn wrid_table(n: u32) -> Vec<std::sync::atomic::AtomicU64> {
    (0..n)
        .map(|_| std::sync::atomic::AtomicU64::new(u64::MAX))
        .collect()
}
