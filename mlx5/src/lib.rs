//! The mlx5 queue formats, encoded and decoded over byte slices.
//!
//! One definition of each format SigmaTrace reads or writes (see `README.md` for the byte
//! layouts and where they come from). Everything is safe, allocation-free on the decode path
//! and big-endian as the hardware reads it:
//!
//! * [`wqe`]: send WQEs — the ctrl segment and every segment after it; [`wqe::WqeBuilder`]
//!   encodes them.
//! * [`cqe`]: CQE64, the owner-bit validity rule and CQE timestamps.
//! * [`dbr`]: QP and CQ doorbell records, and the 8-byte doorbell word rung at the UAR /
//!   BlueFlame register.
//! * [`prm`]: the devx PRM commands that create and connect queues (CREATE_CQ, CREATE_QP, the
//!   QP state transitions, DESTROY) and their outputs.
//!
//! Users: `sigmatrace-observe` (decoding what it watches), the example workloads (encoding what
//! they post), the converter (opcode classes). softnic keeps an independent decoder on purpose:
//! it is the device the codec is tested against.

#![forbid(unsafe_code)]

pub mod cqe;
pub mod dbr;
pub mod prm;
pub mod wqe;

/// Size of a send WQE basic block (WQEBB).
pub const WQEBB: usize = 64;
/// Size of one WQE "DS" unit.
pub const DS_BYTES: usize = 16;
/// Largest WQE: ds is 6 bits (63 × 16 B), i.e. at most 16 WQEBBs.
pub const MAX_WQE_BYTES: usize = 16 * WQEBB;

/// Number of WQEBBs a WQE of `ds` 16-byte units occupies: ⌈ds/4⌉ (at least 1).
#[inline]
pub fn wqebbs_for_ds(ds: u8) -> u16 {
    (ds as u16).div_ceil(4).max(1)
}

/// Big-endian field access shared by the format modules (callers check lengths).
pub(crate) mod be {
    #[inline]
    pub fn get16(b: &[u8], off: usize) -> u16 {
        u16::from_be_bytes([b[off], b[off + 1]])
    }

    #[inline]
    pub fn get32(b: &[u8], off: usize) -> u32 {
        u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
    }

    #[inline]
    pub fn get64(b: &[u8], off: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[off..off + 8]);
        u64::from_be_bytes(a)
    }

    #[inline]
    pub fn put16(b: &mut [u8], off: usize, v: u16) {
        b[off..off + 2].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn put32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn put64(b: &mut [u8], off: usize, v: u64) {
        b[off..off + 8].copy_from_slice(&v.to_be_bytes());
    }
}
