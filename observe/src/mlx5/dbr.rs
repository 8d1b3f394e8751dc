//! Doorbell records and the 8-byte doorbell word (`mlx5-queues.md` §2).

use super::be32;

/// Byte offset of the send-queue word in a QP doorbell record.
pub const QP_DBR_SQ_OFFSET: u64 = 4;
/// Byte offset of the consumer-index word in a CQ doorbell record.
pub const CQ_DBR_CI_OFFSET: u64 = 0;
/// Byte offset of the arm word in a CQ doorbell record.
pub const CQ_DBR_ARM_OFFSET: u64 = 4;

/// A QP doorbell record (2 × be32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpDbr {
    /// `[0]` RQ head (16 bits).
    pub rq_head: u16,
    /// `[1]` SQ producer index: next free WQEBB (16 bits).
    pub sq_pi: u16,
}

/// Parses a QP doorbell record from its 8 bytes.
pub fn parse_qp(b: &[u8]) -> QpDbr {
    QpDbr {
        rq_head: be32(b, 0) as u16,
        sq_pi: be32(b, 4) as u16,
    }
}

/// SQ producer index from the raw be32 word as loaded from memory in native order.
#[inline]
pub fn sq_pi_from_raw(raw_native: u32) -> u16 {
    u32::from_be(raw_native) as u16
}

/// A CQ doorbell record (2 × be32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqDbr {
    /// `[0]` consumer index (24 bits).
    pub ci: u32,
    /// `[1]` arm sequence number (bits 31:28).
    pub arm_sn: u8,
    /// `[1]` arm command (bits 27:24: 0 next completion, 1 solicited only).
    pub arm_cmd: u8,
    /// `[1]` consumer index at arm time (24 bits).
    pub arm_ci: u32,
}

/// Parses a CQ doorbell record from its 8 bytes.
pub fn parse_cq(b: &[u8]) -> CqDbr {
    let arm = be32(b, 4);
    CqDbr {
        ci: be32(b, 0) & 0x00ff_ffff,
        arm_sn: (arm >> 28) as u8,
        arm_cmd: ((arm >> 24) & 0xf) as u8,
        arm_ci: arm & 0x00ff_ffff,
    }
}

/// The 8-byte doorbell written to the UAR / BlueFlame register: the ctrl segment's first
/// 8 bytes (NVSHMEM writes `{pi << 8, qpn << 8}` with opcode and ds zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoorbellWord {
    pub wqe_index: u16,
    pub opcode: u8,
    pub qpn: u32,
    pub ds: u8,
}

/// Parses a doorbell word from its 8 bytes as stored (big-endian fields).
pub fn parse_doorbell(b: &[u8]) -> DoorbellWord {
    let w0 = be32(b, 0);
    let w1 = be32(b, 4);
    DoorbellWord {
        wqe_index: (w0 >> 8) as u16,
        opcode: w0 as u8,
        qpn: w1 >> 8,
        ds: (w1 & 0x3f) as u8,
    }
}
