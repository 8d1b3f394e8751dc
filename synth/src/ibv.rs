//! The libibverbs ABI values the generator writes into its records, stated here independently
//! of the converter's interpretation (`sigmatrace_convert::read::verbs`): a log written from
//! these values and read back by the converter checks that reading, not a shared copy of it.

/// `ibv_wr_opcode`.
pub mod wr {
    pub const RDMA_WRITE: u8 = 0;
    pub const RDMA_WRITE_WITH_IMM: u8 = 1;
    pub const SEND: u8 = 2;
    pub const RDMA_READ: u8 = 4;
    pub const ATOMIC_FETCH_AND_ADD: u8 = 6;
}

/// `ibv_wc_opcode`.
pub mod wc {
    pub const SEND: u8 = 0;
    pub const RDMA_WRITE: u8 = 1;
    pub const RDMA_READ: u8 = 2;
    pub const FETCH_ADD: u8 = 4;
    pub const RECV: u8 = 128;
    pub const RECV_RDMA_WITH_IMM: u8 = 129;
}

/// `ibv_wc_status` IBV_WC_REM_ACCESS_ERR.
pub const WC_REM_ACCESS_ERR: u8 = 10;
/// `ibv_wc_flags` IBV_WC_WITH_IMM (the record header's flags of a receive completion).
pub const WC_WITH_IMM: u32 = 2;
/// `ibv_send_flags` IBV_SEND_SIGNALED.
pub const SEND_SIGNALED: u32 = 2;

/// `ibv_qp_type`.
pub mod qp_type {
    pub const RC: u8 = 2;
    pub const UD: u8 = 4;
}

/// `ibv_qp_state`: INIT, RTR, RTS.
pub const QPS_INIT: u8 = 1;
pub const QPS_RTR: u8 = 2;
pub const QPS_RTS: u8 = 3;
/// `ibv_qp_attr_mask` bits: STATE, PORT, AV, DEST_QPN.
pub const QP_STATE: u32 = 1;
pub const QP_PORT: u32 = 1 << 5;
pub const QP_AV: u32 = 1 << 7;
pub const QP_DEST_QPN: u32 = 1 << 20;

/// Whether a send-queue opcode's message consumes a receive WR on the peer.
pub fn consumes_recv(op: u8) -> bool {
    matches!(op, wr::SEND | wr::RDMA_WRITE_WITH_IMM)
}

/// Whether a send-queue opcode is one-sided (its effect on the target is not recorded there).
pub fn one_sided(op: u8) -> bool {
    matches!(
        op,
        wr::RDMA_WRITE | wr::RDMA_READ | wr::ATOMIC_FETCH_AND_ADD
    )
}
