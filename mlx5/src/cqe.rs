//! CQE64 decoding and encoding, the owner-bit validity rule and CQE timestamp conversion
//! (README: "Completion queue entries" and "Clocks").

use crate::be;

/// CQE opcodes (`op_own >> 4`).
pub mod opcode {
    pub const REQ: u8 = 0;
    pub const RESP_WR_IMM: u8 = 1;
    pub const RESP_SEND: u8 = 2;
    pub const RESP_SEND_IMM: u8 = 3;
    pub const RESP_SEND_INV: u8 = 4;
    pub const RESIZE_CQ: u8 = 5;
    pub const SIG_ERR: u8 = 12;
    pub const REQ_ERR: u8 = 13;
    pub const RESP_ERR: u8 = 14;
    pub const INVALID: u8 = 15;
}

/// CQE format (`op_own` bits 3:2); 3 = compressed (mini-CQE array), not decoded further.
pub const FORMAT_COMPRESSED: u8 = 3;

/// A decoded 64-byte CQE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    pub opcode: u8,
    pub owner: u8,
    pub solicited: bool,
    pub format: u8,
    /// WQEBB index of the completed WQE (requester) or the receive WQE counter.
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    /// Local QPN (`sop_drop_qpn` bits 23:0).
    pub qpn: u32,
    /// Send opcode of the completed WQE for requester CQEs (`sop_drop_qpn` bits 31:24).
    pub send_opcode: u8,
    /// Raw 64-bit timestamp (free-running cycles or real-time, see [`TsFormat`]); 0 for
    /// error CQEs, whose bytes 48..55 carry syndromes instead.
    pub timestamp: u64,
    /// Error syndrome (error CQEs only, else 0).
    pub syndrome: u8,
    pub vendor_syndrome: u8,
    pub imm_inval_pkey: u32,
    /// Source QP of responder CQEs (`flags_rqpn` bits 23:0).
    pub src_qp: u32,
    pub srqn_uidx: u32,
    pub signature: u8,
}

impl Cqe {
    /// Whether this is an error CQE (REQ_ERR / RESP_ERR).
    pub fn is_error(&self) -> bool {
        is_error_opcode(self.opcode)
    }
}

/// REQ_ERR / RESP_ERR: the opcodes whose bytes 54..55 are syndromes, not timestamp.
fn is_error_opcode(op: u8) -> bool {
    op == opcode::REQ_ERR || op == opcode::RESP_ERR
}

/// Decodes the 64-byte CQE in `b` (`b.len() >= 64`). For 128-byte CQEs pass the second half
/// (see [`cqe64_offset`]).
pub fn decode(b: &[u8]) -> Cqe {
    let op_own = b[63];
    let opcode = op_own >> 4;
    let sop_qpn = be::get32(b, 56);
    let err = is_error_opcode(opcode);
    Cqe {
        opcode,
        owner: op_own & 1,
        solicited: op_own & 2 != 0,
        format: (op_own >> 2) & 3,
        wqe_counter: be::get16(b, 60),
        byte_cnt: be::get32(b, 44),
        qpn: sop_qpn & 0x00ff_ffff,
        send_opcode: (sop_qpn >> 24) as u8,
        timestamp: if err { 0 } else { be::get64(b, 48) },
        syndrome: if err { b[55] } else { 0 },
        vendor_syndrome: if err { b[54] } else { 0 },
        imm_inval_pkey: be::get32(b, 36),
        src_qp: be::get32(b, 24) & 0x00ff_ffff,
        srqn_uidx: be::get32(b, 32),
        signature: b[62],
    }
}

/// Encodes a 64-byte CQE, the inverse of [`decode`], for free-running index `n` of a ring of
/// `cqe_cnt` entries: the owner bit is the one for that index (`c.owner` is not used); the
/// syndromes are written for error CQEs only, over bytes 54 and 55 of the timestamp.
pub fn encode(c: &Cqe, n: u32, cqe_cnt: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    be::put32(&mut b, 24, c.src_qp & 0x00ff_ffff);
    be::put32(&mut b, 32, c.srqn_uidx);
    be::put32(&mut b, 36, c.imm_inval_pkey);
    be::put32(&mut b, 44, c.byte_cnt);
    be::put64(&mut b, 48, c.timestamp);
    if c.is_error() {
        b[54] = c.vendor_syndrome;
        b[55] = c.syndrome;
    }
    be::put32(
        &mut b,
        56,
        (c.send_opcode as u32) << 24 | (c.qpn & 0x00ff_ffff),
    );
    be::put16(&mut b, 60, c.wqe_counter);
    b[62] = c.signature;
    b[63] =
        c.opcode << 4 | (c.format & 3) << 2 | (c.solicited as u8) << 1 | expected_owner(n, cqe_cnt);
    b
}

/// An empty CQE slot as hardware expects buffers to start: opcode INVALID, owner 0.
pub const INVALID_OP_OWN: u8 = opcode::INVALID << 4;

/// Offset of the 64-byte CQE inside a CQE slot of `cqe_size` bytes (libmlx5: the last 64).
pub fn cqe64_offset(cqe_size: u32) -> usize {
    if cqe_size == 128 {
        64
    } else {
        0
    }
}

/// Owner value a valid entry at free-running index `n` carries: `!!(n & cqe_cnt)`.
#[inline]
pub fn expected_owner(n: u32, cqe_cnt: u32) -> u8 {
    (n & cqe_cnt != 0) as u8
}

/// The owner-bit validity rule: the entry at free-running index `n` (slot `n & (cqe_cnt-1)`)
/// is valid iff its opcode is not INVALID and its owner bit equals `!!(n & cqe_cnt)`.
#[inline]
pub fn is_valid(op_own: u8, n: u32, cqe_cnt: u32) -> bool {
    (op_own >> 4) != opcode::INVALID && (op_own & 1) == expected_owner(n, cqe_cnt)
}

/// CQE timestamp format (`cqc.cq_timestamp_format` / `qpc.ts_format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TsFormat {
    /// Free-running HCA cycle counter (convert with [`ClockInfo`]).
    #[default]
    FreeRunning,
    /// Real time: `seconds << 32 | nanoseconds`.
    RealTime,
}

impl TsFormat {
    /// From the PRM 2-bit field: 0 free running, 1 default (free running), 2 real time.
    pub fn from_prm(v: u8) -> TsFormat {
        if v == 2 {
            TsFormat::RealTime
        } else {
            TsFormat::FreeRunning
        }
    }
}

/// Converts a real-time CQE timestamp (`sec << 32 | nsec`) to nanoseconds.
#[inline]
pub fn real_time_to_ns(raw: u64) -> u64 {
    (raw >> 32)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(raw & 0xffff_ffff)
}

/// `mlx5dv_clock_info` fields needed to convert free-running cycles to ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockInfo {
    pub nsec: u64,
    pub last_cycles: u64,
    pub mult: u32,
    pub shift: u32,
    pub mask: u64,
}

impl ClockInfo {
    /// Cycles → ns relative to the snapshot (`mlx5dv_ts_to_ns` semantics: deltas within half
    /// the counter range are taken forward, larger ones backward).
    pub fn cycles_to_ns(&self, cycles: u64) -> u64 {
        let delta = cycles.wrapping_sub(self.last_cycles) & self.mask;
        if delta > self.mask / 2 {
            let back = self.last_cycles.wrapping_sub(cycles) & self.mask;
            self.nsec
                .wrapping_sub(((back as u128 * self.mult as u128) >> self.shift) as u64)
        } else {
            self.nsec
                .wrapping_add(((delta as u128 * self.mult as u128) >> self.shift) as u64)
        }
    }
}

/// Converts a raw CQE timestamp to ns: real-time directly, free-running through `clock`
/// (None when no clock info is known).
pub fn timestamp_ns(raw: u64, fmt: TsFormat, clock: Option<&ClockInfo>) -> Option<u64> {
    match fmt {
        TsFormat::RealTime => Some(real_time_to_ns(raw)),
        TsFormat::FreeRunning => clock.map(|c| c.cycles_to_ns(raw)),
    }
}
