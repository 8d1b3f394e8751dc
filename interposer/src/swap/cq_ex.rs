//! Extended CQs (`ibv_create_cq_ex`, `mlx5dv_create_cq`): `start_poll` and `next_poll` are
//! swapped; each call that yields a completion records it, reading the fields through the
//! provider's own `read_*` functions (pure getters of the current entry; only those the CQ
//! was created to provide, per its `wc_flags`). `ENOENT` from `start_poll` is an empty poll.
//! `end_poll` and the `read_*` pointers the program calls are left untouched: they add
//! nothing to the record.

use std::ffi::c_int;
use std::mem::offset_of;

use super::slots::{variants64, Slots, CQ_EX_SLOTS};
use crate::decode::extended::{self as dx, CqExReaders};
use crate::ffi::{self, *};
use crate::runtime::guard;
use crate::sink::{self, cat, Diag};

const START: usize = 0;
const NEXT: usize = 1;
const OPCODE: usize = 2;
const VENDOR_ERR: usize = 3;
const BYTE_LEN: usize = 4;
const IMM: usize = 5;
const QP_NUM: usize = 6;
const SRC_QP: usize = 7;
const WC_FLAGS: usize = 8;
const SLID: usize = 9;
const COMPLETION_TS: usize = 10;
/// Not a function: the `wc_flags` the CQ was created with.
const REQUESTED: usize = 11;
const WORDS: usize = 12;

static CQX: Slots<WORDS, CQ_EX_SLOTS> = Slots::new();

type Cq = *mut ibv_cq_ex;
type StartFn = unsafe extern "C" fn(Cq, *mut ibv_poll_cq_attr) -> c_int;
type NextFn = unsafe extern "C" fn(Cq) -> c_int;

/// (word, offset in ibv_cq_ex, wc_flags bit that makes the reader valid; 0 = always).
macro_rules! readers {
    ($(($word:ident, $field:ident, $bit:expr)),* $(,)?) => {
        [$(($word, offset_of!(ibv_cq_ex, $field), $bit as u64)),*]
    };
}
const READERS: [(usize, usize, u64); 9] = readers![
    (OPCODE, read_opcode, 0),
    (VENDOR_ERR, read_vendor_err, 0),
    (WC_FLAGS, read_wc_flags, 0),
    (BYTE_LEN, read_byte_len, IBV_WC_EX_WITH_BYTE_LEN),
    (IMM, read_imm_data, IBV_WC_EX_WITH_IMM),
    (QP_NUM, read_qp_num, IBV_WC_EX_WITH_QP_NUM),
    (SRC_QP, read_src_qp, IBV_WC_EX_WITH_SRC_QP),
    (SLID, read_slid, IBV_WC_EX_WITH_SLID),
    (
        COMPLETION_TS,
        read_completion_ts,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    ),
];

static LOCK: sink::spin::SpinLock = sink::spin::SpinLock::new();

/// Swaps `start_poll`/`next_poll` of an extended CQ created with `wc_flags` (idempotent).
///
/// # Safety
/// `cq` must be null or a live `ibv_cq_ex` of the provider.
pub unsafe fn instrument(cq: Cq, wc_flags: u64) -> bool {
    if cq.is_null() {
        return false;
    }
    let _g = LOCK.lock();
    let starts = variants64!(start_poll as StartFn).map(|f| f as usize);
    let nexts = variants64!(next_poll as NextFn).map(|f| f as usize);
    let field = |off: usize| (cq as *mut u8).wrapping_add(off) as *mut usize;
    let mut words = [0usize; WORDS];
    // SAFETY: start_poll / next_poll / read_* are pointer-sized fields of the live CQ.
    unsafe {
        words[START] = ffi::load_ptr(field(offset_of!(ibv_cq_ex, start_poll)));
        words[NEXT] = ffi::load_ptr(field(offset_of!(ibv_cq_ex, next_poll)));
        for (w, off, bit) in READERS {
            if bit == 0 || wc_flags & bit != 0 {
                words[w] = ffi::load_ptr(field(off));
            }
        }
    }
    if starts.contains(&words[START]) {
        return true;
    }
    if words[START] == 0 || words[NEXT] == 0 {
        return false;
    }
    words[REQUESTED] = wc_flags as usize;
    let Some(s) = CQX.claim(&words) else {
        sink::diag(
            Diag::Error,
            &format!(
                "sigmatrace: more than {CQ_EX_SLOTS} distinct extended-CQ function sets \
                 (provider CQ kinds × requested wc_flags); CQ {cq:p} stays untraced"
            ),
        );
        return false;
    };
    // SAFETY: writable provider fields of the live CQ; the hooks forward through slot s.
    unsafe {
        ffi::store_ptr(field(offset_of!(ibv_cq_ex, start_poll)), starts[s]);
        ffi::store_ptr(field(offset_of!(ibv_cq_ex, next_poll)), nexts[s]);
    }
    true
}

unsafe extern "C" fn start_poll<const S: usize>(cq: Cq, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: slot S word START is the provider's start_poll.
    let real: StartFn = unsafe { as_fn(CQX.word(S, START)) };
    // SAFETY: forwarding the program's arguments.
    let rc = unsafe { real(cq, attr) };
    if sink::tracing(cat::COMPLETIONS | cat::EMPTY_POLLS) {
        // SAFETY: cq is live; rc == 0 means a current entry exists.
        guard::run("start_poll", || unsafe { polled::<S>(cq, rc) });
    }
    rc
}

unsafe extern "C" fn next_poll<const S: usize>(cq: Cq) -> c_int {
    // SAFETY: slot S word NEXT is the provider's next_poll.
    let real: NextFn = unsafe { as_fn(CQX.word(S, NEXT)) };
    // SAFETY: forwarding the program's arguments.
    let rc = unsafe { real(cq) };
    if rc == 0 && sink::tracing(cat::COMPLETIONS) {
        // SAFETY: as above.
        guard::run("next_poll", || unsafe { polled::<S>(cq, rc) });
    }
    rc
}

/// The getters of slot `S` (those its CQs were created to provide; 0 for the others).
#[inline(always)]
fn readers<const S: usize>() -> CqExReaders {
    let w = |i| CQX.word(S, i);
    CqExReaders {
        opcode: w(OPCODE),
        vendor_err: w(VENDOR_ERR),
        byte_len: w(BYTE_LEN),
        imm: w(IMM),
        qp_num: w(QP_NUM),
        src_qp: w(SRC_QP),
        wc_flags: w(WC_FLAGS),
        slid: w(SLID),
        completion_ts: w(COMPLETION_TS),
    }
}

/// # Safety
/// `cq` live; `rc` what start/next_poll returned.
unsafe fn polled<const S: usize>(cq: Cq, rc: c_int) {
    // SAFETY: per caller; slot S's reader words are the provider's getters of this CQ kind
    // (READERS), prototype fn(cq) -> value.
    unsafe { dx::cq_ex_polled(cq, rc, &readers::<S>()) }
}
