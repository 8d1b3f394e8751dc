//! The `ibv_wr_*` post API: the builders are pointers in `struct ibv_qp_ex`, swapped on every
//! extended QP (created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, or returned by
//! `ibv_qp_to_qp_ex`). Records are kept per batch and written at `wr_complete` (see
//! `record::wr_builder`). The hot path — a batch's first WR an RDMA write, send or RDMA read
//! (with one SGE or inline data, or none), sends traced with TSC timestamps — writes the WR's
//! compact record into the chunk at its opcode builder, unpublished, sets its data at
//! `wr_set_sge` / `wr_set_inline_data`, and publishes it at a successful `wr_complete`
//! (`sink::place_wr`, `placed_wr_sge`, `publish_placed_wr`): the builders and setters record
//! before forwarding and forward with a tail call; every other call (and the hot ones' ordinary
//! paths, `*_recorded`, out of line) records the batch through `record::wr_builder`, which
//! takes in a placed WR that something recorded meanwhile displaced. `wr_start` is left alone: a batch begins with its first opcode
//! builder after the last `wr_complete` or `wr_abort` (which end every batch), so a hook there
//! would add a call per batch and record nothing. `wr_set_xrc_srqn` is left alone too (no
//! record field for it). `wr_atomic_write` is the last field of `ibv_qp_ex` and exists only
//! in rdma-core ≥ 44: writing it on an older provider's QP would overrun its struct, so it is
//! swapped only on QPs created with `IBV_QP_EX_WITH_ATOMIC_WRITE` (a provider that accepted
//! that flag has the field: older ones refuse flags they do not know) — before, the atomic
//! writes of such QPs went unrecorded (rdma-core's own suite, against softnic's count).

use std::ffi::{c_int, c_void};
use std::mem::offset_of;

use sigmatrace_schemas::compact::{SendBody, SendHead};
use sigmatrace_schemas::post_source;

use super::slots::{variants, Slots, SLOTS};
use crate::decode::extended as dx;
use crate::ffi::{self, *};
use crate::record::data::SendWr;
use crate::record::wr_builder;
use crate::runtime::guard;
use crate::sink::{self, cat, Diag};

const COMPLETE: usize = 0;
const ABORT: usize = 1;
const CMP_SWP: usize = 2;
const FETCH_ADD: usize = 3;
const BIND_MW: usize = 4;
const LOCAL_INV: usize = 5;
const RDMA_READ: usize = 6;
const RDMA_WRITE: usize = 7;
const RDMA_WRITE_IMM: usize = 8;
const SEND: usize = 9;
const SEND_IMM: usize = 10;
const SEND_INV: usize = 11;
const SEND_TSO: usize = 12;
const SET_UD_ADDR: usize = 13;
const SET_INLINE: usize = 14;
const SET_INLINE_LIST: usize = 15;
const SET_SGE: usize = 16;
const SET_SGE_LIST: usize = 17;
/// Swapped only where the QP was created with `IBV_QP_EX_WITH_ATOMIC_WRITE` (module doc).
const ATOMIC_WRITE: usize = 18;
const WORDS: usize = 19;

static WR: Slots<WORDS> = Slots::new();

type Qp = *mut ibv_qp_ex;

fn fields() -> [(usize, usize, [usize; SLOTS]); WORDS] {
    macro_rules! f {
        ($w:ident, $field:ident, $hook:ident : $ty:ty) => {
            (
                $w,
                offset_of!(ibv_qp_ex, $field),
                variants!($hook as $ty).map(|f| f as usize),
            )
        };
    }
    [
        f!(COMPLETE, wr_complete, wr_complete: unsafe extern "C" fn(Qp) -> c_int),
        f!(ABORT, wr_abort, wr_abort: unsafe extern "C" fn(Qp)),
        f!(CMP_SWP, wr_atomic_cmp_swp, wr_atomic_cmp_swp: unsafe extern "C" fn(Qp, u32, u64, u64, u64)),
        f!(FETCH_ADD, wr_atomic_fetch_add, wr_atomic_fetch_add: unsafe extern "C" fn(Qp, u32, u64, u64)),
        f!(BIND_MW, wr_bind_mw, wr_bind_mw: unsafe extern "C" fn(Qp, *mut ibv_mw, u32, *const ibv_mw_bind_info)),
        f!(LOCAL_INV, wr_local_inv, wr_local_inv: unsafe extern "C" fn(Qp, u32)),
        f!(RDMA_READ, wr_rdma_read, wr_rdma_read: unsafe extern "C" fn(Qp, u32, u64)),
        f!(RDMA_WRITE, wr_rdma_write, wr_rdma_write: unsafe extern "C" fn(Qp, u32, u64)),
        f!(RDMA_WRITE_IMM, wr_rdma_write_imm, wr_rdma_write_imm: unsafe extern "C" fn(Qp, u32, u64, u32)),
        f!(SEND, wr_send, wr_send: unsafe extern "C" fn(Qp)),
        f!(SEND_IMM, wr_send_imm, wr_send_imm: unsafe extern "C" fn(Qp, u32)),
        f!(SEND_INV, wr_send_inv, wr_send_inv: unsafe extern "C" fn(Qp, u32)),
        f!(SEND_TSO, wr_send_tso, wr_send_tso: unsafe extern "C" fn(Qp, *mut c_void, u16, u16)),
        f!(SET_UD_ADDR, wr_set_ud_addr, wr_set_ud_addr: unsafe extern "C" fn(Qp, *mut ibv_ah, u32, u32)),
        f!(SET_INLINE, wr_set_inline_data, wr_set_inline_data: unsafe extern "C" fn(Qp, *mut c_void, usize)),
        f!(SET_INLINE_LIST, wr_set_inline_data_list, wr_set_inline_data_list: unsafe extern "C" fn(Qp, usize, *const ibv_data_buf)),
        f!(SET_SGE, wr_set_sge, wr_set_sge: unsafe extern "C" fn(Qp, u32, u64, u32)),
        f!(SET_SGE_LIST, wr_set_sge_list, wr_set_sge_list: unsafe extern "C" fn(Qp, usize, *const ibv_sge)),
        f!(ATOMIC_WRITE, wr_atomic_write, wr_atomic_write: unsafe extern "C" fn(Qp, u32, u64, *const c_void)),
    ]
}

static LOCK: sink::spin::SpinLock = sink::spin::SpinLock::new();

/// Swaps the `wr_*` pointers of an extended QP (idempotent), not `wr_atomic_write`. Returns
/// whether they are ours.
///
/// # Safety
/// `qp` must be null or a live `ibv_qp_ex` of the provider.
pub unsafe fn instrument(qp: Qp) -> bool {
    // SAFETY: per caller.
    unsafe { instrument_ops(qp, false) }
}

/// [`instrument`], and `wr_atomic_write` too when `atomic_write` (the QP was created with
/// `IBV_QP_EX_WITH_ATOMIC_WRITE`, so its `ibv_qp_ex` has the field).
///
/// # Safety
/// As [`instrument`]; `atomic_write` only as said.
pub unsafe fn instrument_ops(qp: Qp, atomic_write: bool) -> bool {
    if qp.is_null() {
        return false;
    }
    let _g = LOCK.lock();
    let fields = fields();
    let mut orig = [0usize; WORDS];
    for (word, off, hooks) in &fields {
        if *word == ATOMIC_WRITE && !atomic_write {
            // Not read: the provider's struct may end before it.
            continue;
        }
        // SAFETY: every field of the table lies inside the live ibv_qp_ex.
        let cur = unsafe { ffi::load_ptr((qp as *const u8).add(*off) as *const usize) };
        if hooks.contains(&cur) {
            return true;
        }
        orig[*word] = cur;
    }
    // SAFETY: `wr_start` lies inside the live ibv_qp_ex.
    let start = unsafe { ffi::load_ptr(std::ptr::addr_of!((*qp).wr_start) as *const usize) };
    if start == 0 || orig[COMPLETE] == 0 {
        return false;
    }
    let Some(slot) = WR.claim(&orig) else {
        sink::diag(
            Diag::Error,
            "sigmatrace: too many distinct ibv_qp_ex tables; a QP's ibv_wr_* calls stay untraced",
        );
        return false;
    };
    for (word, off, hooks) in &fields {
        if orig[*word] != 0 {
            // SAFETY: writable provider field of the live QP; hooks[slot] forwards to it.
            unsafe { ffi::store_ptr((qp as *mut u8).add(*off) as *mut usize, hooks[slot]) };
        }
    }
    true
}

#[inline(always)]
fn orig<F: Copy>(s: usize, word: usize) -> F {
    // SAFETY: slot s holds the provider's function for `word`, prototype F.
    unsafe { as_fn::<F>(WR.word(s, word)) }
}

/// Starts a WR of the batch (see `decode::extended::wr_begin`).
#[inline(always)]
fn begin(qp: Qp, ts: u64, opcode: u32, fill: impl FnOnce(&mut SendWr)) {
    begin_from(qp, ts, opcode, post_source::WR_API, fill)
}

/// [`begin`] for another post API (`mlx5dv_wr_*`) building on the same `ibv_qp_ex` batch.
#[inline(always)]
pub(crate) fn begin_from(qp: Qp, ts: u64, opcode: u32, source: u8, fill: impl FnOnce(&mut SendWr)) {
    if !sink::tracing(cat::SEND) {
        return;
    }
    // SAFETY: qp is the live QP the program passed to the builder.
    guard::run("ibv_wr builder", || unsafe {
        dx::wr_begin(qp, ts, opcode, source, fill)
    });
}

/// Applies a setter to the WR being built (when sends are traced).
#[inline(always)]
pub(crate) fn set(f: impl FnOnce()) {
    if sink::tracing(cat::SEND) {
        guard::run("ibv_wr setter", f);
    }
}

/// Timestamp for a builder call (0 when sends are not traced).
#[inline(always)]
pub(crate) fn stamp() -> u64 {
    if sink::tracing(cat::SEND) {
        sink::now()
    } else {
        0
    }
}

/// The hot path of the opcode builders whose WR has no immediate data and no atomic operands
/// (RDMA write, send, RDMA read), when sends are on the hot path: the WR is placed — as its
/// batch's first (`sink::place_wr`), or, with `NEXT`, after those placed of its batch
/// (`sink::place_next_wr`) — before the provider's builder runs (the program set `wr_id` and
/// `wr_flags` before the call, the builder reads them as they are now), so that the hook needs
/// nothing after the call and forwards with a tail call. False when nothing was placed. No
/// call, nothing that can panic.
///
/// # Safety
/// `qp` is the live QP the program passed to the builder.
#[inline(always)]
unsafe fn place<const NEXT: bool>(qp: Qp, opcode: u32, rkey: u32, raddr: u64) -> bool {
    if !sink::is_fast_send() {
        return false;
    }
    // SAFETY (both closures): per caller, the QP's fields as the provider reads them.
    let head = || unsafe {
        SendHead {
            qpn: (*qp).qp_base.qp_num,
            source: post_source::WR_API,
            remote_addr: raddr,
            flags: (*qp).wr_flags,
            num_sge: 0,
            opcode: opcode as u8,
        }
    };
    let body = || SendBody {
        // SAFETY: as above.
        wr_id: unsafe { (*qp).wr_id },
        rkey,
        bytes: 0,
    };
    if NEXT {
        sink::place_next_wr(qp as u64, head, body)
    } else {
        sink::place_wr(qp as u64, head, body)
    }
}

/// `wr_complete`. The hot path — the batch's one WR placed by its opcode builder ([`place`])
/// — publishes it (`sink::publish_placed_wr`); every other call is recorded by
/// [`wr_complete_recorded`] (`extern "C"`, a tail call).
unsafe extern "C" fn wr_complete<const S: usize>(qp: Qp) -> c_int {
    // SAFETY: as above.
    let rc = unsafe { orig::<unsafe extern "C" fn(Qp) -> c_int>(S, COMPLETE)(qp) };
    if rc == 0 && sink::publish_placed_wr(qp as u64) {
        return 0;
    }
    // SAFETY: qp is live (wr_complete does not destroy it).
    unsafe { wr_complete_recorded(qp, rc) }
}

/// [`wr_complete`] off its hot path: the batch written from the builders, or its `PostError`.
///
/// # Safety
/// `qp` live.
#[inline(never)]
unsafe extern "C" fn wr_complete_recorded(qp: Qp, rc: c_int) -> c_int {
    if sink::tracing(cat::SEND) {
        // SAFETY: per caller.
        guard::run("wr_complete", || unsafe {
            dx::wr_complete(qp, rc, post_source::WR_API)
        });
    }
    // Opaque, so that the hook keeps no `rc` across this call but jumps here.
    std::hint::black_box(rc)
}

unsafe extern "C" fn wr_abort<const S: usize>(qp: Qp) {
    // SAFETY: as above.
    unsafe { orig::<unsafe extern "C" fn(Qp)>(S, ABORT)(qp) };
    if sink::tracing(cat::SEND) {
        guard::run("wr_abort", || wr_builder::abort(qp as u64));
    }
}

unsafe extern "C" fn wr_atomic_cmp_swp<const S: usize>(
    qp: Qp,
    rkey: u32,
    raddr: u64,
    compare: u64,
    swap: u64,
) {
    let ts = stamp();
    // SAFETY: as above.
    unsafe {
        orig::<unsafe extern "C" fn(Qp, u32, u64, u64, u64)>(S, CMP_SWP)(
            qp, rkey, raddr, compare, swap,
        )
    };
    begin(qp, ts, IBV_WR_ATOMIC_CMP_AND_SWP, |w| {
        (w.rkey, w.remote_addr, w.compare_add) = (rkey, raddr, compare)
    });
}

unsafe extern "C" fn wr_atomic_fetch_add<const S: usize>(qp: Qp, rkey: u32, raddr: u64, add: u64) {
    let ts = stamp();
    // SAFETY: as above.
    unsafe { orig::<unsafe extern "C" fn(Qp, u32, u64, u64)>(S, FETCH_ADD)(qp, rkey, raddr, add) };
    begin(qp, ts, IBV_WR_ATOMIC_FETCH_AND_ADD, |w| {
        (w.rkey, w.remote_addr, w.compare_add) = (rkey, raddr, add)
    });
}

/// `ibv_wr_atomic_write` (only swapped where the field exists, [`instrument_ops`]).
unsafe extern "C" fn wr_atomic_write<const S: usize>(
    qp: Qp,
    rkey: u32,
    raddr: u64,
    data: *const c_void,
) {
    let ts = stamp();
    // SAFETY: as above.
    unsafe {
        orig::<unsafe extern "C" fn(Qp, u32, u64, *const c_void)>(S, ATOMIC_WRITE)(
            qp, rkey, raddr, data,
        )
    };
    // An atomic write moves 8 bytes, from the builder's argument (no SGE follows).
    begin(qp, ts, IBV_WR_ATOMIC_WRITE, |w| {
        (w.rkey, w.remote_addr, w.bytes) = (rkey, raddr, 8)
    });
}

unsafe extern "C" fn wr_bind_mw<const S: usize>(
    qp: Qp,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    let ts = stamp();
    // SAFETY: as above.
    unsafe {
        orig::<unsafe extern "C" fn(Qp, *mut ibv_mw, u32, *const ibv_mw_bind_info)>(S, BIND_MW)(
            qp, mw, rkey, info,
        )
    };
    // SAFETY: info is the program's bind description (or null).
    let (addr, len) = unsafe { dx::bind_info(info) };
    begin(qp, ts, IBV_WR_BIND_MW, |w| {
        (w.rkey, w.remote_addr, w.bytes) = (rkey, addr, len.min(u32::MAX as u64) as u32)
    });
}

unsafe extern "C" fn wr_local_inv<const S: usize>(qp: Qp, rkey: u32) {
    let ts = stamp();
    // SAFETY: as above.
    unsafe { orig::<unsafe extern "C" fn(Qp, u32)>(S, LOCAL_INV)(qp, rkey) };
    begin(qp, ts, IBV_WR_LOCAL_INV, |w| w.imm = rkey);
}

/// An opcode builder with a hot path ([`place`]): the hook for a batch's first WR, then
/// (`extern "C"`, out of line) one for the next WRs of a batch and the ordinary recording;
/// every forward is a tail call.
macro_rules! placed_builder {
    ($hook:ident, $next:ident, $other:ident, $word:ident, $opcode:ident, ($($arg:ident: $ty:ty),*), $rkey:expr, $raddr:expr, $fill:expr) => {
        unsafe extern "C" fn $hook<const S: usize>(qp: Qp, $($arg: $ty),*) {
            // SAFETY: qp is the program's live QP.
            if !unsafe { place::<false>(qp, $opcode, $rkey, $raddr) } {
                // SAFETY: the program's arguments.
                return unsafe { $next::<S>(qp, $($arg),*) };
            }
            // SAFETY: forwarding the program's own arguments to the provider.
            unsafe { orig::<unsafe extern "C" fn(Qp, $($ty),*)>(S, $word)(qp, $($arg),*) }
        }

        #[inline(never)]
        unsafe extern "C" fn $next<const S: usize>(qp: Qp, $($arg: $ty),*) {
            // SAFETY: as above.
            if !unsafe { place::<true>(qp, $opcode, $rkey, $raddr) } {
                // SAFETY: the program's arguments.
                return unsafe { $other::<S>(qp, $($arg),*) };
            }
            // SAFETY: as above.
            unsafe { orig::<unsafe extern "C" fn(Qp, $($ty),*)>(S, $word)(qp, $($arg),*) }
        }

        #[inline(never)]
        unsafe extern "C" fn $other<const S: usize>(qp: Qp, $($arg: $ty),*) {
            let ts = stamp();
            // SAFETY: as above.
            unsafe { orig::<unsafe extern "C" fn(Qp, $($ty),*)>(S, $word)(qp, $($arg),*) };
            begin(qp, ts, $opcode, $fill);
        }
    };
}

placed_builder!(wr_rdma_read, wr_rdma_read_next, wr_rdma_read_recorded, RDMA_READ,
    IBV_WR_RDMA_READ, (rkey: u32, raddr: u64), rkey, raddr,
    |w| (w.rkey, w.remote_addr) = (rkey, raddr));
placed_builder!(wr_rdma_write, wr_rdma_write_next, wr_rdma_write_recorded, RDMA_WRITE,
    IBV_WR_RDMA_WRITE, (rkey: u32, raddr: u64), rkey, raddr,
    |w| (w.rkey, w.remote_addr) = (rkey, raddr));
placed_builder!(
    wr_send,
    wr_send_next,
    wr_send_recorded,
    SEND,
    IBV_WR_SEND,
    (),
    0,
    0,
    |_| {}
);

unsafe extern "C" fn wr_rdma_write_imm<const S: usize>(qp: Qp, rkey: u32, raddr: u64, imm: u32) {
    let ts = stamp();
    // SAFETY: as above.
    unsafe {
        orig::<unsafe extern "C" fn(Qp, u32, u64, u32)>(S, RDMA_WRITE_IMM)(qp, rkey, raddr, imm)
    };
    begin(qp, ts, IBV_WR_RDMA_WRITE_WITH_IMM, |w| {
        (w.rkey, w.remote_addr, w.imm) = (rkey, raddr, u32::from_be(imm))
    });
}

unsafe extern "C" fn wr_send_imm<const S: usize>(qp: Qp, imm: u32) {
    let ts = stamp();
    // SAFETY: as above.
    unsafe { orig::<unsafe extern "C" fn(Qp, u32)>(S, SEND_IMM)(qp, imm) };
    begin(qp, ts, IBV_WR_SEND_WITH_IMM, |w| w.imm = u32::from_be(imm));
}

unsafe extern "C" fn wr_send_inv<const S: usize>(qp: Qp, rkey: u32) {
    let ts = stamp();
    // SAFETY: as above.
    unsafe { orig::<unsafe extern "C" fn(Qp, u32)>(S, SEND_INV)(qp, rkey) };
    begin(qp, ts, IBV_WR_SEND_WITH_INV, |w| w.imm = rkey);
}

unsafe extern "C" fn wr_send_tso<const S: usize>(qp: Qp, hdr: *mut c_void, hdr_sz: u16, mss: u16) {
    let ts = stamp();
    // SAFETY: as above.
    unsafe {
        orig::<unsafe extern "C" fn(Qp, *mut c_void, u16, u16)>(S, SEND_TSO)(qp, hdr, hdr_sz, mss)
    };
    begin(qp, ts, IBV_WR_TSO, |_| {});
}

unsafe extern "C" fn wr_set_ud_addr<const S: usize>(qp: Qp, ah: *mut ibv_ah, rqpn: u32, qkey: u32) {
    // SAFETY: as above.
    unsafe {
        orig::<unsafe extern "C" fn(Qp, *mut ibv_ah, u32, u32)>(S, SET_UD_ADDR)(qp, ah, rqpn, qkey)
    };
    set(|| wr_builder::set_address(qp as u64, ah as u64, rqpn, qkey as u64));
}

/// A setter that gives the WR one piece of data, with a hot path (`sink::placed_wr_sge`: the
/// WR placed by its opcode builder gets it before the provider call, then a tail call) and
/// its ordinary recording (`extern "C"`, out of line).
macro_rules! placed_setter {
    ($hook:ident, $other:ident, $word:ident, ($($arg:ident: $ty:ty),*), $bytes:expr) => {
        unsafe extern "C" fn $hook<const S: usize>(qp: Qp, $($arg: $ty),*) {
            if !sink::placed_wr_sge(qp as u64, $bytes) {
                // SAFETY: the program's arguments.
                return unsafe { $other::<S>(qp, $($arg),*) };
            }
            // SAFETY: forwarding the program's own arguments to the provider.
            unsafe { orig::<unsafe extern "C" fn(Qp, $($ty),*)>(S, $word)(qp, $($arg),*) }
        }

        #[inline(never)]
        unsafe extern "C" fn $other<const S: usize>(qp: Qp, $($arg: $ty),*) {
            // SAFETY: as above.
            unsafe { orig::<unsafe extern "C" fn(Qp, $($ty),*)>(S, $word)(qp, $($arg),*) };
            set(|| wr_builder::set_data(qp as u64, $bytes, 1));
        }
    };
}

placed_setter!(wr_set_inline_data, wr_set_inline_data_recorded, SET_INLINE,
    (addr: *mut c_void, len: usize), len.min(u32::MAX as usize) as u32);
placed_setter!(wr_set_sge, wr_set_sge_recorded, SET_SGE, (lkey: u32, addr: u64, len: u32), len);

unsafe extern "C" fn wr_set_inline_data_list<const S: usize>(
    qp: Qp,
    n: usize,
    bufs: *const ibv_data_buf,
) {
    // SAFETY: as above.
    unsafe {
        orig::<unsafe extern "C" fn(Qp, usize, *const ibv_data_buf)>(S, SET_INLINE_LIST)(
            qp, n, bufs,
        )
    };
    set(|| {
        // SAFETY: the program passed n buffers (or null).
        let total = unsafe { dx::data_buf_sum(bufs, n.min(1024)) };
        let (bytes, pieces) = (total.min(u32::MAX as usize), n.min(u16::MAX as usize));
        wr_builder::set_data(qp as u64, bytes as u32, pieces as u16)
    });
}

unsafe extern "C" fn wr_set_sge_list<const S: usize>(qp: Qp, n: usize, sg: *const ibv_sge) {
    // SAFETY: as above.
    unsafe { orig::<unsafe extern "C" fn(Qp, usize, *const ibv_sge)>(S, SET_SGE_LIST)(qp, n, sg) };
    set(|| {
        // SAFETY: the program passed n SGEs (or null).
        let total = unsafe { dx::sge_sum(sg, n.min(1024)) };
        wr_builder::set_data(qp as u64, total, n.min(u16::MAX as usize) as u16)
    });
}
