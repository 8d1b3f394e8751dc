//! C structures → Rust values: the handlers that read what the program passed and what the
//! provider or driver returned (work-request lists, completions, object attributes, devx
//! command buffers, CUDA arguments) — the only reads of the program's and the provider's
//! memory — and hand plain values to `record` (and to `runtime`'s discovery and kernel
//! timing). Every read is bounded (list and SGE caps) and made only where the C API says the
//! field is valid.
//!
//! - [`control`]: object lifecycle, connection data, events.
//! - [`datapath`]: `ibv_post_*` lists (one walk for all of them), `ibv_poll_cq` entries.
//! - [`extended`]: the `ibv_wr_*` builders' QP fields and lists, extended-CQ entries.
//! - [`dv`]: libmlx5 calls that reveal rings (`mlx5dv_init_obj`, devx).
//! - [`cuda`]: CUDA memory and launch calls.
//!
//! Called by `exports` (the table's handlers) and `swap` (the swapped hooks); calls only
//! `runtime`, `record` and `sink` below.

use crate::ffi::ibv_sge;

pub mod control;
pub mod cuda;
pub mod datapath;
pub mod dv;
pub mod extended;

/// The `length` of SGE `i` of the program's list at `sg`, read unaligned: programs may keep
/// their SGEs at any address (libiscsi's iSER descriptors are packed structs; libmlx5 reads
/// them with plain loads, which x86 allows), and a Rust reference to a misaligned SGE is
/// undefined behaviour (a debug build aborts the program). On x86 the same one load.
///
/// # Safety
/// `sg` points to at least `i + 1` readable SGEs, at any alignment.
#[inline(always)]
pub(crate) unsafe fn sge_length(sg: *const ibv_sge, i: usize) -> u32 {
    let field = std::mem::offset_of!(ibv_sge, length);
    // SAFETY: per the caller, entry i is readable; the field's 4 bytes lie inside it, read
    // without assuming alignment.
    unsafe {
        sg.add(i)
            .cast::<u8>()
            .add(field)
            .cast::<u32>()
            .read_unaligned()
    }
}

/// Sum of the lengths of the first `n` SGEs at `sg` (0 when null), each read as
/// [`sge_length`] reads it.
///
/// # Safety
/// `sg` null or pointing to `n` readable SGEs, at any alignment.
pub(crate) unsafe fn sge_sum(sg: *const ibv_sge, n: usize) -> u32 {
    if sg.is_null() {
        return 0;
    }
    // SAFETY: i < n SGEs the program passed.
    (0..n).fold(0u32, |t, i| t.wrapping_add(unsafe { sge_length(sg, i) }))
}
