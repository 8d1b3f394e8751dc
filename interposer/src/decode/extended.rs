//! Reads of the extended verbs APIs: the `ibv_qp_ex` fields the `ibv_wr_*` (and
//! `mlx5dv_wr_*`) builders act on, the lists their setters pass, and the current entry of an
//! extended CQ, read through the provider's own getters (`read_*`, pure functions of the
//! current entry) whose addresses the caller kept when it swapped the CQ's pointers.

use std::ffi::c_int;

use crate::ffi::*;
use crate::record::data::{self, Completion, SendWr};
use crate::record::wr_builder;
use crate::runtime::cq_owners;
use crate::sink::{self, cat};

/// An opcode builder was called on `qp` at `ts`: a new WR of its batch, with the `wr_id` and
/// flags the program set on the QP; `fill` adds the builder's own arguments.
///
/// # Safety
/// `qp` the live QP the program passed to the builder.
#[inline(always)]
pub unsafe fn wr_begin(
    qp: *mut ibv_qp_ex,
    ts: u64,
    opcode: u32,
    source: u8,
    fill: impl FnOnce(&mut SendWr),
) {
    // SAFETY: per caller.
    let (wr_id, flags, qpn) = unsafe { ((*qp).wr_id, (*qp).wr_flags, (*qp).qp_base.qp_num) };
    let mut w = SendWr {
        wr_id,
        flags,
        opcode: opcode as u8,
        ..SendWr::default()
    };
    fill(&mut w);
    wr_builder::begin(qp as u64, ts, qpn, source, &w);
}

/// `wr_complete` on `qp` returned `rc`.
///
/// # Safety
/// `qp` live (`wr_complete` does not destroy it).
pub unsafe fn wr_complete(qp: *mut ibv_qp_ex, rc: c_int, source: u8) {
    // SAFETY: per caller.
    let qpn = unsafe { (*qp).qp_base.qp_num };
    wr_builder::complete(qp as u64, qpn, rc, source);
}

/// Sum of the lengths of the first `n` of `sg` (0 when null; see [`super::sge_sum`]).
///
/// # Safety
/// `sg` null or `n` readable SGEs (any alignment).
pub unsafe fn sge_sum(sg: *const ibv_sge, n: usize) -> u32 {
    // SAFETY: per caller.
    unsafe { super::sge_sum(sg, n) }
}

/// Sum of the lengths of the first `n` of `bufs` (0 when null).
///
/// # Safety
/// `bufs` null or `n` readable buffers.
pub unsafe fn data_buf_sum(bufs: *const ibv_data_buf, n: usize) -> usize {
    if bufs.is_null() {
        return 0;
    }
    // SAFETY: i < n buffers the program passed.
    (0..n).fold(0usize, |t, i| {
        t.wrapping_add(unsafe { (*bufs.add(i)).length })
    })
}

/// (address, length) of a memory-window bind (0, 0 when null).
///
/// # Safety
/// `info` null or the program's bind description.
pub unsafe fn bind_info(info: *const ibv_mw_bind_info) -> (u64, u64) {
    if info.is_null() {
        (0, 0)
    } else {
        // SAFETY: per caller.
        unsafe { ((*info).addr, (*info).length) }
    }
}

/// The provider's `read_*` getters of an extended CQ (0 = not provided: reads as 0).
#[derive(Clone, Copy, Debug, Default)]
pub struct CqExReaders {
    pub opcode: usize,
    pub vendor_err: usize,
    pub byte_len: usize,
    pub imm: usize,
    pub qp_num: usize,
    pub src_qp: usize,
    pub wc_flags: usize,
    pub slid: usize,
    pub completion_ts: usize,
}

/// Calls getter `f` (prototype `fn(cq) -> T`) if the CQ provides it.
///
/// # Safety
/// `f` 0 or a getter of `cq`'s provider returning `T`; `cq` has a current entry.
#[inline(always)]
unsafe fn read<T: Default>(cq: *mut ibv_cq_ex, f: usize) -> T {
    if f == 0 {
        return T::default();
    }
    // SAFETY: per caller.
    unsafe { as_fn::<unsafe extern "C" fn(*mut ibv_cq_ex) -> T>(f)(cq) }
}

/// `start_poll` / `next_poll` of `cq` returned `rc`: a completion (0), an empty poll
/// (`ENOENT`, from `start_poll`), or nothing to record.
///
/// # Safety
/// `cq` live; `r` its provider's getters.
pub unsafe fn cq_ex_polled(cq: *mut ibv_cq_ex, rc: c_int, r: &CqExReaders) {
    let ts = sink::now();
    let id = cq as u64;
    if rc == libc::ENOENT {
        if sink::tracing(cat::EMPTY_POLLS) {
            data::empty_poll(id, ts);
        }
        return;
    }
    if rc != 0 || !sink::tracing(cat::COMPLETIONS) {
        return;
    }
    // SAFETY: rc == 0: the CQ has a current entry; status and wr_id are fields.
    let c = unsafe {
        let wc_flags: u32 = read(cq, r.wc_flags);
        let imm = if wc_flags & IBV_WC_WITH_IMM != 0 {
            u32::from_be(read(cq, r.imm))
        } else {
            0
        };
        Completion {
            wr_id: (*cq).wr_id,
            status: (*cq).status as u8,
            opcode: read::<u32>(cq, r.opcode) as u8,
            // Defined for failed completions only (as `datapath::defined_vendor_err`): not
            // read for a successful one.
            vendor_err: if (*cq).status == IBV_WC_SUCCESS {
                0
            } else {
                read(cq, r.vendor_err)
            },
            byte_len: read(cq, r.byte_len),
            imm,
            // Without IBV_WC_EX_WITH_QP_NUM: the CQ's QP when it serves exactly one.
            qpn: if r.qp_num != 0 {
                read(cq, r.qp_num)
            } else {
                cq_owners::sole_qpn(id as usize).unwrap_or(0)
            },
            src_qp: read(cq, r.src_qp),
            wc_flags,
            slid: read::<u32>(cq, r.slid) as u16,
            hw_ts: read(cq, r.completion_ts),
        }
    };
    data::completion_ex(id, ts, &c);
}
