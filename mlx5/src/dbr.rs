//! Doorbell records and the 8-byte doorbell word, decoded and encoded (README: "Doorbell
//! records, UAR and BlueFlame").

use crate::be;

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
        rq_head: be::get32(b, 0) as u16,
        sq_pi: be::get32(b, 4) as u16,
    }
}

impl QpDbr {
    /// The record's 8 bytes.
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        be::put32(&mut b, 0, self.rq_head as u32);
        be::put32(&mut b, 4, self.sq_pi as u32);
        b
    }
}

/// SQ producer index from the raw be32 word as loaded from memory in native order.
#[inline]
pub fn sq_pi_from_raw(raw_native: u32) -> u16 {
    u32::from_be(raw_native) as u16
}

/// The native-order u32 to store (as one 32-bit store) into the SQ word of a QP doorbell
/// record so that memory holds `be32(pi)`: the inverse of [`sq_pi_from_raw`].
#[inline]
pub fn sq_pi_to_raw(pi: u16) -> u32 {
    (pi as u32).to_be()
}

/// The native-order u32 to store into the consumer-index word of a CQ doorbell record so that
/// memory holds `be32(ci & 0xffffff)`.
#[inline]
pub fn cq_ci_to_raw(ci: u32) -> u32 {
    (ci & 0x00ff_ffff).to_be()
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
    let arm = be::get32(b, 4);
    CqDbr {
        ci: be::get32(b, 0) & 0x00ff_ffff,
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

impl CqDbr {
    /// The record's 8 bytes.
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        be::put32(&mut b, 0, self.ci & 0x00ff_ffff);
        let arm = (self.arm_sn as u32 & 0xf) << 28
            | (self.arm_cmd as u32 & 0xf) << 24
            | (self.arm_ci & 0x00ff_ffff);
        be::put32(&mut b, 4, arm);
        b
    }
}

impl DoorbellWord {
    /// The word NVSHMEM IBGDA rings: `{be32(pi << 8), be32(qpn << 8)}` (opcode and ds zero).
    pub fn nvshmem(pi: u16, qpn: u32) -> DoorbellWord {
        DoorbellWord {
            wqe_index: pi,
            qpn,
            ..Default::default()
        }
    }

    /// The 8 bytes as stored (the inverse of [`parse_doorbell`]).
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        be::put32(&mut b, 0, (self.wqe_index as u32) << 8 | self.opcode as u32);
        be::put32(&mut b, 4, self.qpn << 8 | (self.ds as u32 & 0x3f));
        b
    }

    /// The 8 bytes as one native-order u64, for a single 64-bit store to the register.
    pub fn to_native_u64(&self) -> u64 {
        u64::from_ne_bytes(self.encode())
    }
}

/// Parses a doorbell word from its 8 bytes as stored (big-endian fields).
pub fn parse_doorbell(b: &[u8]) -> DoorbellWord {
    let w0 = be::get32(b, 0);
    let w1 = be::get32(b, 4);
    DoorbellWord {
        wqe_index: (w0 >> 8) as u16,
        opcode: w0 as u8,
        qpn: w1 >> 8,
        ds: (w1 & 0x3f) as u8,
    }
}
