//! Pure decoders (and test encoders) for the mlx5 queue formats SigmaTrace watches.
//!
//! Everything here is safe, allocation-free on the hot path and big-endian as the PRM
//! (see `shared/reference/mlx5-queues.md`): send WQEs ([`wqe`]), CQE64 ([`cqe`]), doorbell
//! records ([`dbr`]), PRM devx commands ([`prm`]), and encoders used by tests and simulated
//! producers ([`build`]).

pub mod build;
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

#[inline]
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[inline]
pub(crate) fn be64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_be_bytes(a)
}

#[inline]
pub(crate) fn put_be16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put_be32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put_be64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// Number of WQEBBs a WQE of `ds` 16-byte units occupies: ⌈ds/4⌉ (at least 1).
#[inline]
pub fn wqebbs_for_ds(ds: u8) -> u16 {
    (ds as u16).div_ceil(4).max(1)
}
