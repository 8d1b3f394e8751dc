//! The records every layer exchanges: device limits, send and receive work requests as softnic
//! queues them, completions as it stores them, and the completion clock.

use crate::ffi::*;

pub const MAX_SGE: usize = 16;
pub const MAX_INLINE: usize = 256;
/// Inline buffer per send WQE: mlx5 inline segments of direct-posted WQEs may exceed MAX_INLINE.
pub const INLINE_BUF: usize = 1024;
pub const MAX_WR: u32 = 16384;
pub const MAX_CQE: u32 = 4 * 1024 * 1024;
pub const MAX_RD_ATOMIC: u32 = 16;

/// A completion as softnic stores it.
#[derive(Clone, Copy)]
pub struct Cqe {
    pub wc: ibv_wc,
    pub ts: u64,
    /// mlx5 send opcode of a requester completion (for CQE64 rings).
    pub op: u8,
    /// SRQ number of a responder completion taken from an SRQ (0: none).
    pub srqn: u32,
    /// The CQE64's wqe_counter.
    pub counter: u16,
}

pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[derive(Clone, Copy)]
pub struct RecvWqe {
    pub wr_id: u64,
    /// Index of the WQE in an mlx5 receive/SRQ ring (the CQE's wqe_counter).
    pub idx: u32,
    pub num_sge: u32,
    pub sge: [ibv_sge; MAX_SGE],
}

pub const WQE_QUEUED: u8 = 0;
pub const WQE_SENT: u8 = 1;
pub const WQE_DONE: u8 = 2;

pub struct SendWqe {
    pub wr_id: u64,
    pub opcode: u32,
    pub flags: u32,
    pub num_sge: u32,
    pub sge: [ibv_sge; MAX_SGE],
    /// Inline payload; allocated (INLINE_BUF bytes) the first time the slot carries inline data.
    pub inline_buf: Vec<u8>,
    pub len: u32,
    pub raddr: u64,
    pub rkey: u32,
    pub compare: u64,
    pub swap: u64,
    pub imm: u32,
    pub ud_node: u32,
    pub ud_qpn: u32,
    pub ud_qkey: u32,
    pub ud_global: bool,
    pub ud_sl: u8,
    pub msn: u32,
    pub sent: u32,
    pub resp_bytes: u32,
    pub st: u8,
    pub status: u32,
    pub validated: bool,
}

impl SendWqe {
    pub fn new() -> SendWqe {
        SendWqe {
            wr_id: 0,
            opcode: 0,
            flags: 0,
            num_sge: 0,
            sge: [ibv_sge::default(); MAX_SGE],
            inline_buf: Vec::new(),
            len: 0,
            raddr: 0,
            rkey: 0,
            compare: 0,
            swap: 0,
            imm: 0,
            ud_node: 0,
            ud_qpn: 0,
            ud_qkey: 0,
            ud_global: false,
            ud_sl: 0,
            msn: 0,
            sent: 0,
            resp_bytes: 0,
            st: WQE_QUEUED,
            status: IBV_WC_SUCCESS,
            validated: false,
        }
    }
    pub fn is_read_atomic(&self) -> bool {
        matches!(
            self.opcode,
            IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
        )
    }
    /// The inline buffer, allocated on first use.
    pub fn inline_mut(&mut self) -> &mut [u8] {
        if self.inline_buf.is_empty() {
            self.inline_buf = vec![0u8; INLINE_BUF];
        }
        &mut self.inline_buf
    }
    pub fn is_inline(&self) -> bool {
        self.flags & IBV_SEND_INLINE != 0
    }
}

impl Default for SendWqe {
    fn default() -> Self {
        Self::new()
    }
}

/// A zeroed ibv_wc for this QP.
pub fn wc_for(qpn: u32, wr_id: u64, status: u32, opcode: u32) -> ibv_wc {
    let mut wc = ibv_wc {
        wr_id,
        status,
        opcode,
        ..Default::default()
    };
    wc.qp_num = qpn;
    wc
}
