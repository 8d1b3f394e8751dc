//! libibverbs / mlx5 enum values the converter interprets, and their display names.

/// `ibv_wr_opcode`.
pub mod wr {
    pub const RDMA_WRITE: u8 = 0;
    pub const RDMA_WRITE_WITH_IMM: u8 = 1;
    pub const SEND: u8 = 2;
    pub const SEND_WITH_IMM: u8 = 3;
    pub const RDMA_READ: u8 = 4;
    pub const ATOMIC_CMP_AND_SWP: u8 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u8 = 6;
    pub const LOCAL_INV: u8 = 7;
    pub const BIND_MW: u8 = 8;
    pub const SEND_WITH_INV: u8 = 9;
    pub const TSO: u8 = 10;
    pub const FLUSH: u8 = 14;
    pub const ATOMIC_WRITE: u8 = 15;
}

/// `ibv_wc_opcode` receive values.
pub mod wc {
    pub const RECV: u8 = 128;
    pub const RECV_RDMA_WITH_IMM: u8 = 129;
}

/// Which queue a *failed* completion can come from, by its status alone (its opcode is
/// undefined: `ibv_poll_cq(3)` defines only `wr_id`, `status`, `vendor_err` and `qp_num` of a
/// failed completion, and providers leave the caller's bytes there). `Some(false)`: only a
/// requester (send queue) reports it — bad response, MW bind, remote invalid request, remote
/// access, remote operation, retry and RNR retry exceeded, remote abort (statuses 6, 7, 9–13,
/// 16) — the errors of a request the remote side refused or never answered; `None`: either
/// queue (length, QP operation, protection and access errors, flushes, fatal and general
/// errors).
#[inline]
pub fn failed_status_on_recv(status: u8) -> Option<bool> {
    match status {
        6 | 7 | 9..=13 | 16 => Some(false),
        _ => None,
    }
}

/// `ibv_send_flags`: IBV_SEND_SIGNALED.
pub const SEND_SIGNALED: u32 = 2;

/// `ibv_qp_type`.
pub mod qp_type {
    pub const RC: u8 = 2;
    pub const UC: u8 = 3;
    pub const UD: u8 = 4;
}

/// `ibv_qp_state` RTR.
pub const QPS_RTR: u8 = 2;
/// `ibv_qp_attr_mask` bits.
pub const QP_PORT: u32 = 1 << 5;
pub const QP_AV: u32 = 1 << 7;
pub const QP_DEST_QPN: u32 = 1 << 20;

/// Send-queue WR opcodes whose message consumes a receive WR on the peer.
#[inline]
pub fn consumes_recv(op: u8) -> bool {
    matches!(
        op,
        wr::SEND | wr::SEND_WITH_IMM | wr::SEND_WITH_INV | wr::RDMA_WRITE_WITH_IMM
    )
}

/// One-sided opcodes whose effect on the target is only inferred.
#[inline]
pub fn one_sided(op: u8) -> bool {
    matches!(
        op,
        wr::RDMA_WRITE
            | wr::RDMA_READ
            | wr::ATOMIC_CMP_AND_SWP
            | wr::ATOMIC_FETCH_AND_ADD
            | wr::ATOMIC_WRITE
    )
}

/// Short name of an `ibv_wr_opcode`.
pub fn wr_name(op: u8) -> &'static str {
    match op {
        wr::RDMA_WRITE => "WRITE",
        wr::RDMA_WRITE_WITH_IMM => "WRITE_IMM",
        wr::SEND => "SEND",
        wr::SEND_WITH_IMM => "SEND_IMM",
        wr::RDMA_READ => "READ",
        wr::ATOMIC_CMP_AND_SWP => "CAS",
        wr::ATOMIC_FETCH_AND_ADD => "FAA",
        wr::LOCAL_INV => "LOCAL_INV",
        wr::BIND_MW => "BIND_MW",
        wr::SEND_WITH_INV => "SEND_INV",
        wr::TSO => "TSO",
        wr::FLUSH => "FLUSH",
        wr::ATOMIC_WRITE => "ATOMIC_WRITE",
        _ => "WR?",
    }
}

/// Name of an `ibv_wc_status`.
pub fn status_name(s: u8) -> &'static str {
    const N: [&str; 24] = [
        "SUCCESS",
        "LOC_LEN_ERR",
        "LOC_QP_OP_ERR",
        "LOC_EEC_OP_ERR",
        "LOC_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOC_ACCESS_ERR",
        "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR",
        "REM_OP_ERR",
        "RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR",
        "REM_ABORT_ERR",
        "INV_EECN_ERR",
        "INV_EEC_STATE_ERR",
        "FATAL_ERR",
        "RESP_TIMEOUT_ERR",
        "GENERAL_ERR",
        "TM_ERR",
        "TM_RNDV_INCOMPLETE",
    ];
    N.get(s as usize).copied().unwrap_or("UNKNOWN_STATUS")
}

/// Name of an `ibv_qp_type`.
pub fn qp_type_name(t: u8) -> &'static str {
    match t {
        qp_type::RC => "RC",
        qp_type::UC => "UC",
        qp_type::UD => "UD",
        8 => "RAW",
        9 => "XRC_SEND",
        10 => "XRC_RECV",
        0xff => "DRIVER",
        _ => "QP",
    }
}

/// Whether an mlx5 WQE opcode acts on the responder's memory without a receive WR there
/// (RDMA write, with or without immediate, read and atomics): its arrival on the target is
/// inferred.
pub fn mlx5_one_sided(op: u8) -> bool {
    use sigmatrace_mlx5::wqe::opcode::*;
    matches!(
        op,
        RDMA_WRITE
            | RDMA_WRITE_IMM
            | RDMA_READ
            | ATOMIC_CS
            | ATOMIC_FA
            | ATOMIC_MASKED_CS
            | ATOMIC_MASKED_FA
    )
}

/// Short display name of an mlx5 WQE opcode (the values are `sigmatrace-mlx5`'s).
pub fn mlx5_name(op: u8) -> &'static str {
    use sigmatrace_mlx5::wqe::opcode::*;
    match op {
        NOP => "NOP",
        SEND_INVAL => "SEND_INVAL",
        RDMA_WRITE => "WRITE",
        RDMA_WRITE_IMM => "WRITE_IMM",
        SEND => "SEND",
        SEND_IMM => "SEND_IMM",
        TSO => "TSO",
        WAIT => "WAIT",
        RDMA_READ => "READ",
        ATOMIC_CS => "CAS",
        ATOMIC_FA => "FAA",
        ATOMIC_MASKED_CS => "MASKED_CS",
        ATOMIC_MASKED_FA => "MASKED_FA",
        LOCAL_INVAL => "LOCAL_INV",
        DUMP => "DUMP",
        UMR => "UMR",
        MMO => "MMO",
        _ => "WQE?",
    }
}

/// Human size: "64 B", "4 KiB", "1.5 MiB".
pub fn size_label(b: u64) -> String {
    const K: u64 = 1024;
    if b < K {
        format!("{b} B")
    } else if b < K * K {
        if b.is_multiple_of(K) {
            format!("{} KiB", b / K)
        } else {
            format!("{:.1} KiB", b as f64 / K as f64)
        }
    } else if b.is_multiple_of(K * K) {
        format!("{} MiB", b / (K * K))
    } else {
        format!("{:.1} MiB", b as f64 / (K * K) as f64)
    }
}
