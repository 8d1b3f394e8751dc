//! The data path (posts, completions) and queue memory observation.

use super::*;

// ---------------------------------------------------------------------------------------------
// Data path

/// Which API posted a work request (byte `source` of [`PostSend`] / [`PostRecv`]).
pub mod post_source {
    pub const POST_SEND: u8 = 0;
    pub const WR_API: u8 = 1;
    pub const MLX5DV_WR: u8 = 2;
    pub const POST_RECV: u8 = 3;
    pub const POST_SRQ_RECV: u8 = 4;
    pub const WQ_RECV: u8 = 5;
}

timed_records! {
    /// One posted send-queue work request. aux = `ibv_send_flags`.
    /// For UD QPs `remote_addr` holds the AH handle, `rkey` the remote QPN and `compare_add`'s low
    /// 32 bits the remote qkey.
    pub struct PostSend {
        pub wr_id: u64,
        pub remote_addr: u64,
        /// Atomic compare (CAS) or add (FAA) operand.
        pub compare_add: u64,
        pub qpn: u32,
        /// Sum of SGE lengths (or inline data length).
        pub bytes: u32,
        pub rkey: u32,
        /// Immediate data (host order) or invalidate rkey.
        pub imm: u32,
        pub num_sge: u16,
        /// `ibv_wr_opcode`.
        pub opcode: u8,
        /// [`post_source`].
        pub source: u8,
        pub _pad: u32,
    }

    /// One posted receive work request (QP receive queue, SRQ or WQ). aux = 0.
    pub struct PostRecv {
        pub wr_id: u64,
        /// QPN for QP receive queues, 0 for SRQ receives.
        pub qpn: u32,
        pub bytes: u32,
        /// SRQ handle for SRQ receives, 0 otherwise.
        pub srq: u64,
        pub num_sge: u16,
        pub source: u8,
        pub _pad: [u8; 5],
    }

    /// A post call that failed. aux = the error number returned.
    pub struct PostError {
        /// wr_id of `*bad_wr` (0 if none).
        pub bad_wr_id: u64,
        /// QP handle or SRQ handle.
        pub object: u64,
        pub qpn: u32,
        pub source: u8,
        pub _pad: [u8; 3],
    }

    /// One work completion returned to the program. aux = `wc_flags`.
    pub struct WorkCompletion {
        pub wr_id: u64,
        /// Hardware completion timestamp (device clock), 0 when absent.
        pub hw_ts: u64,
        pub cq: u64,
        pub qpn: u32,
        pub src_qp: u32,
        pub byte_len: u32,
        /// Immediate data (host order) when `IBV_WC_WITH_IMM`.
        pub imm: u32,
        /// `ibv_wc_status`.
        pub status: u8,
        /// `ibv_wc_opcode` (numeric, 128 and above are receive opcodes).
        pub opcode: u8,
        pub slid: u16,
        pub vendor_err: u32,
    }

    /// Polls that returned nothing, aggregated (never one record per empty poll); `ts` is the
    /// time of the run's last empty poll.
    pub struct EmptyPolls {
        /// Time of the first empty poll of the run.
        pub first_ts: u64,
        pub cq: u64,
        pub count: u64,
    }
}

// ---------------------------------------------------------------------------------------------
// Queue memory observation (mlx5 rings, GPU-initiated RDMA)

/// Queue kinds (bits 0..7 of [`QueueDiscovered`]'s aux).
pub mod queue_kind {
    pub const SEND: u32 = 1;
    pub const RECV: u32 = 2;
    pub const CQ: u32 = 3;
    pub const UAR: u32 = 4;
}

/// Where memory lives (bits 8..15 of [`QueueDiscovered`]'s aux, `memory` fields).
pub mod mem_kind {
    pub const HOST: u8 = 0;
    pub const GPU: u8 = 1;
    pub const HOST_PINNED: u8 = 2;
    pub const IO: u8 = 3;
    pub const UNKNOWN: u8 = 255;
}

/// How a queue was found (bits 16..23 of [`QueueDiscovered`]'s aux).
pub mod discovery {
    pub const INIT_OBJ: u32 = 1;
    pub const DEVX: u32 = 2;
    pub const MLX5DV_CREATE: u32 = 3;
}

/// Who observed a WQE/CQE in queue memory.
pub mod observer {
    pub const HOST_POLLER: u8 = 0;
    pub const DEVICE_POLLER: u8 = 1;
}

/// Bits of [`CqeObserved`]'s aux word.
pub mod cqe_flags {
    /// `hw_ts` is real-time nanoseconds (CQ in real-time timestamp mode), not device cycles.
    pub const HW_TS_NANOS: u32 = 1;
}

/// Set in [`ObserveOverrun`]'s aux when `lost` is an estimate (e.g. whole 16-bit producer
/// index laps inferred from the post rate) rather than an exact count.
pub const OVERRUN_ESTIMATED: u32 = 1 << 8;

timed_records! {
    /// A ring whose memory the tracer watches. aux = kind | memory << 8 | discovery << 16.
    pub struct QueueDiscovered {
        pub base: u64,
        pub dbrec: u64,
        /// Doorbell / BlueFlame register or UAR address.
        pub doorbell: u64,
        /// QPN for send/receive rings, CQN for CQs.
        pub number: u32,
        /// Entries (WQEBBs or CQEs).
        pub depth: u32,
        pub stride: u32,
        /// The CQN a send ring completes to (0 if unknown).
        pub cqn: u32,
    }

    /// A WQE seen in a send ring. aux = 0.
    pub struct WqeObserved {
        pub remote_addr: u64,
        pub compare_add: u64,
        pub qpn: u32,
        pub bytes: u32,
        pub rkey: u32,
        pub imm: u32,
        /// WQE index (producer counter, 16 bits).
        pub wqe_index: u16,
        /// mlx5 opcode.
        pub opcode: u8,
        /// Size in 16-byte units.
        pub ds: u8,
        pub fm_ce_se: u8,
        /// [`observer`].
        pub observer: u8,
        pub memory: u8,
        pub _pad: u8,
    }

    /// A CQE seen in a completion ring. aux = [`cqe_flags`].
    pub struct CqeObserved {
        pub hw_ts: u64,
        pub cqn: u32,
        /// Free-running consumer index of the entry.
        pub index: u32,
        pub qpn: u32,
        pub byte_cnt: u32,
        pub wqe_counter: u16,
        /// CQE opcode (op_own >> 4).
        pub opcode: u8,
        pub syndrome: u8,
        pub vendor_syndrome: u8,
        pub observer: u8,
        pub _pad: u16,
    }

    /// Entries overwritten before the observer saw them. aux = [`queue_kind`] | [`OVERRUN_ESTIMATED`].
    pub struct ObserveOverrun {
        pub lost: u64,
        pub number: u32,
        pub observer: u8,
        pub _pad: [u8; 3],
    }
}
