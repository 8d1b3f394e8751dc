//! The data path's reads: the program's work-request lists and the provider's completions,
//! decoded into `record::data` values. Runs after the provider call returned, on the caller's
//! thread, inside a guard. Timestamps: a post carries the time read *before* the provider call
//! (its message cannot be received earlier); a completion the time read after the poll
//! returned it (it cannot have been seen earlier).
//!
//! Every post call is read the same way ([`accepted`]): the WRs the provider accepted — all
//! of them when it returned 0, those before `*bad_wr` when it failed, none when it failed
//! without saying where — then the failure. The hot cases (one WR with one SGE, the entries
//! of one poll) are decoded straight into a reserved chunk slot.

use std::ffi::c_int;

use sigmatrace_schemas::{
    compact::{CompletionBody, CompletionHead, CompletionSource, SendBody, SendHead, WC_RECV},
    post_source,
};

use crate::ffi::*;
use crate::record::data::{self, Completion, PostFailure, RecvWr, SendWr};
use crate::sink::{self, cat};

/// Longest WR list walked (a corrupt, cyclic list must not hang the program).
const MAX_WRS: usize = 1 << 16;
/// Most SGEs summed per WR.
const MAX_SGE: usize = 1 << 10;

/// A node of a work-request list (`ibv_send_wr`, `ibv_recv_wr`, `ibv_ops_wr`).
trait WrNode {
    fn wr_id(&self) -> u64;
    fn next(&self) -> *mut Self;
}

macro_rules! wr_node {
    ($($t:ty),*) => { $(
        impl WrNode for $t {
            fn wr_id(&self) -> u64 {
                self.wr_id
            }
            fn next(&self) -> *mut Self {
                self.next
            }
        }
    )* };
}
wr_node!(ibv_send_wr, ibv_recv_wr, ibv_ops_wr);

/// The accepted prefix of a WR list: its nodes, up to (not including) `stop`, at most
/// [`MAX_WRS`].
struct Accepted<'a, T> {
    at: *mut T,
    stop: *mut T,
    left: usize,
    _list: std::marker::PhantomData<&'a T>,
}

impl<'a, T: WrNode> Iterator for Accepted<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        if self.at.is_null() || self.at == self.stop || self.left == 0 {
            return None;
        }
        // SAFETY: `at` is a node of the program's list, valid for 'a (see `accepted`).
        let node = unsafe { &*self.at };
        self.at = node.next();
        self.left -= 1;
        Some(node)
    }
}

/// What a post call that returned `rc` says about its list `wr`: the nodes the provider
/// accepted, and the failure (with the wr_id of `*bad`, 0 when the provider did not set it).
///
/// # Safety
/// `wr` the program's list, valid for 'a; `bad` null or its out-pointer, set by the provider
/// on failure.
unsafe fn accepted<'a, T: WrNode>(
    wr: *mut T,
    bad: *mut *mut T,
    rc: c_int,
) -> (Accepted<'a, T>, Option<PostFailure>) {
    // SAFETY: bad is the program's out-pointer; on failure the provider set it.
    let stop = if rc != 0 && !bad.is_null() {
        unsafe { *bad }
    } else {
        std::ptr::null_mut()
    };
    // On failure without a bad_wr nothing is known to be accepted.
    let at = if rc != 0 && stop.is_null() {
        std::ptr::null_mut()
    } else {
        wr
    };
    let failed = (rc != 0).then(|| PostFailure {
        err: rc,
        // SAFETY: stop is null or a node of the program's list.
        bad_wr_id: if stop.is_null() {
            0
        } else {
            unsafe { (*stop).wr_id() }
        },
    });
    let list = Accepted {
        at,
        stop,
        left: MAX_WRS,
        _list: std::marker::PhantomData,
    };
    (list, failed)
}

/// Sum of the lengths of `n` SGEs (at most `MAX_SGE` of them), read unaligned
/// ([`super::sge_length`]).
///
/// # Safety
/// `sg` must point to `n` readable SGEs (or be null), at any alignment.
#[inline(always)]
unsafe fn sge_bytes(sg: *const ibv_sge, n: c_int) -> u32 {
    if n == 1 {
        // SAFETY: one SGE (the common case); the provider already read it.
        return unsafe { super::sge_length(sg, 0) };
    }
    // SAFETY: per caller.
    unsafe { sge_bytes_list(sg, n) }
}

/// # Safety
/// As [`sge_bytes`].
#[inline(never)]
unsafe fn sge_bytes_list(sg: *const ibv_sge, n: c_int) -> u32 {
    if n <= 0 {
        return 0;
    }
    // SAFETY: per caller (null gives 0).
    unsafe { super::sge_sum(sg, (n as usize).min(MAX_SGE)) }
}

const fn bits(ops: &[u32]) -> u32 {
    let mut m = 0;
    let mut i = 0;
    while i < ops.len() {
        m |= 1 << ops[i];
        i += 1;
    }
    m
}
/// Opcodes carrying immediate data (big-endian).
const IMM_OPS: u32 = bits(&[IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM]);
/// Opcodes carrying an rkey to invalidate.
const INV_OPS: u32 = bits(&[IBV_WR_SEND_WITH_INV, IBV_WR_LOCAL_INV]);

/// A send WR's operands: (remote address, rkey, compare/add, immediate).
type Operands = (u64, u32, u64, u32);

/// Decodes one send WR whose operands are `ops` ([`send_operands`]) and SGE sum `bytes`.
#[inline(always)]
fn send_wr(w: &ibv_send_wr, ops: Operands, bytes: u32) -> SendWr {
    let (remote_addr, rkey, compare_add, imm) = ops;
    SendWr {
        wr_id: w.wr_id,
        opcode: w.opcode as u8,
        flags: w.send_flags,
        num_sge: w.num_sge as u16,
        bytes,
        remote_addr,
        rkey,
        compare_add,
        imm,
    }
}

/// The operands of one send WR. `ud`: the QP is UD (the `wr.ud` arm is valid).
#[inline(always)]
fn send_operands(w: &ibv_send_wr, ud: bool) -> Operands {
    let op = w.opcode;
    // The message-rate opcodes inline (compares, no jump table); the others out of line.
    if ud {
        ud_operands(w)
    } else if op == IBV_WR_RDMA_WRITE {
        // SAFETY: the `rdma` arm is the one an RDMA write fills (as the provider reads it).
        unsafe { (w.wr.rdma.remote_addr, w.wr.rdma.rkey, 0, 0) }
    } else if op == IBV_WR_SEND {
        (0, 0, 0, 0)
    } else {
        operands(w)
    }
}

/// [`send_operands`] of the other opcodes on a connected QP.
#[inline(never)]
fn operands(w: &ibv_send_wr) -> Operands {
    // SAFETY: each union arm is read only for the opcodes whose arm it is (as the provider
    // reads it).
    unsafe {
        match w.opcode {
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_READ => (w.wr.rdma.remote_addr, w.wr.rdma.rkey, 0, 0),
            IBV_WR_RDMA_WRITE_WITH_IMM => (
                w.wr.rdma.remote_addr,
                w.wr.rdma.rkey,
                0,
                u32::from_be(w.__bindgen_anon_1.imm_data),
            ),
            IBV_WR_SEND_WITH_IMM => (0, 0, 0, u32::from_be(w.__bindgen_anon_1.imm_data)),
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => (
                w.wr.atomic.remote_addr,
                w.wr.atomic.rkey,
                w.wr.atomic.compare_add,
                0,
            ),
            IBV_WR_SEND_WITH_INV | IBV_WR_LOCAL_INV => {
                (0, 0, 0, w.__bindgen_anon_1.invalidate_rkey)
            }
            _ => (0, 0, 0, 0),
        }
    }
}

/// [`send_operands`] of a WR on a UD QP: the `wr.ud` arm (AH, remote QPN, qkey).
#[inline(always)]
fn ud_operands(w: &ibv_send_wr) -> Operands {
    let op = w.opcode;
    let bit = if op < 32 { 1u32 << op } else { 0 };
    // SAFETY: the QP is UD, so the program filled the `ud` arm; the immediate / invalidate
    // arm is read only for the opcodes that carry it.
    unsafe {
        let imm = if bit & IMM_OPS != 0 {
            u32::from_be(w.__bindgen_anon_1.imm_data)
        } else if bit & INV_OPS != 0 {
            w.__bindgen_anon_1.invalidate_rkey
        } else {
            0
        };
        (
            w.wr.ud.ah as u64,
            w.wr.ud.remote_qpn,
            w.wr.ud.remote_qkey as u64,
            imm,
        )
    }
}

const _: () = assert!(IBV_WR_RDMA_WRITE == 0 && IBV_WR_SEND == 2);

/// An `ibv_post_send` about to be handed to the provider: when it is one RDMA write
/// or send WR with one SGE on a connected QP, places its record *before* the provider call
/// (`sink::place_plain_send`, which keeps the three arguments for the call; the hook
/// publishes the record after the call with `sink::publish_placed`). `Err` with the
/// arguments when it placed nothing (another shape, or `sink::place_plain_send` refused):
/// the hook then records the call after it ([`sends_ok`] / [`sends_list`]). It makes no call and cannot panic (no indexing that is
/// not proven in bounds, no arithmetic that can overflow-check), so the hook needs no
/// `guard::run` around it, and no landing pad keeps registers busy there.
///
/// # Safety
/// `qp` live, `wr` the program's list (null or valid), `bad` its out-pointer, all as passed
/// to the provider.
#[inline(always)]
pub unsafe fn place_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> Result<(), [usize; 3]> {
    let args = [qp as usize, wr as usize, bad as usize];
    if wr.is_null() {
        return Err(args);
    }
    // One SGE and an RDMA write (0) or send (2); one WR; not UD (whose sends use the `ud`
    // arm). `num_sge` and `opcode` are read as the two words they are: the program has just
    // stored them one by one, and one 8-byte load of both cannot be forwarded from those two
    // stores (it waits for them to reach the cache: a fifth of the hook's time at softnic's
    // message rate).
    // SAFETY: wr is the program's non-null first WR; qp is live.
    if unsafe {
        (*wr).num_sge != 1
            || (*wr).opcode & !(IBV_WR_RDMA_WRITE ^ IBV_WR_SEND) != IBV_WR_RDMA_WRITE
            || !(*wr).next.is_null()
            || (*qp).qp_type == IBV_QPT_UD
    } {
        return Err(args);
    }
    // All ones for an RDMA write (0), zero for a send (2): the `rdma` arm's operands are
    // taken only for a write (a send's record has address and rkey 0), without a branch (a
    // copy of the placing per opcode costs more: the compiler merges their tails).
    // SAFETY: wr is the program's non-null WR (checked above).
    let write_mask = (unsafe { (*wr).opcode } as u64 >> 1).wrapping_sub(1);
    // SAFETY (both closures): qp is a live QP of an instrumented context; wr the program's
    // single WR with one SGE (the provider reads the same); the `rdma` arm lies inside the
    // WR whatever the opcode (for a send its bytes are masked off).
    let head = || unsafe {
        SendHead {
            qpn: (*qp).qp_num,
            source: post_source::POST_SEND,
            remote_addr: (*wr).wr.rdma.remote_addr & write_mask,
            flags: (*wr).send_flags,
            num_sge: 1,
            opcode: (*wr).opcode as u8,
        }
    };
    let body = || unsafe {
        SendBody {
            wr_id: (*wr).wr_id,
            rkey: (*wr).wr.rdma.rkey & write_mask as u32,
            bytes: super::sge_length((*wr).sg_list, 0),
        }
    };
    sink::place_plain_send(head, body, args)
}

// The opcode test in `place_send`: a write and a send differ in one bit.
const _: () =
    assert!(IBV_WR_RDMA_WRITE == 0 && (IBV_WR_RDMA_WRITE ^ IBV_WR_SEND).count_ones() == 1);

/// Records the WRs of an `ibv_post_send` the provider accepted (it returned 0).
///
/// # Safety
/// `qp` live, `wr` the program's list (still valid).
#[inline(always)]
pub unsafe fn sends_ok(qp: *mut ibv_qp, wr: *mut ibv_send_wr, ts: u64) {
    // SAFETY: wr is the program's list.
    if wr.is_null() || unsafe { !(*wr).next.is_null() || (*wr).num_sge != 1 } {
        // SAFETY: per caller.
        return unsafe { sends_list(qp, wr, std::ptr::null_mut(), 0, ts) };
    }
    // One WR with one SGE: the common case, decoded straight from the program's WR into the
    // chunk (no intermediate record, no copy, no call). RDMA writes and sends on connected
    // QPs (the message-rate opcodes) straight into the compact record.
    // SAFETY: qp is live, wr the program's single WR.
    let (op, ud) = unsafe { ((*wr).opcode, (*qp).qp_type == IBV_QPT_UD) };
    if !ud && (op == IBV_WR_RDMA_WRITE || op == IBV_WR_SEND) {
        let write = op == IBV_WR_RDMA_WRITE;
        // SAFETY (both closures): qp is a live QP of an instrumented context; wr the
        // program's single WR, whose one SGE the provider already read; the `rdma` arm is
        // the one an RDMA write fills (as the provider reads it).
        let head = || unsafe {
            SendHead {
                qpn: (*qp).qp_num,
                source: post_source::POST_SEND,
                remote_addr: if write { (*wr).wr.rdma.remote_addr } else { 0 },
                flags: (*wr).send_flags,
                num_sge: 1,
                opcode: op as u8,
            }
        };
        let body = || unsafe {
            SendBody {
                wr_id: (*wr).wr_id,
                rkey: if write { (*wr).wr.rdma.rkey } else { 0 },
                bytes: super::sge_length((*wr).sg_list, 0),
            }
        };
        let recorded = data::post_plain_send_one(ts, head, body);
        if !recorded {
            // SAFETY: per caller.
            unsafe { sends_list(qp, wr, std::ptr::null_mut(), 0, ts) };
        }
        return;
    }
    data::post_send_one(ts, post_source::POST_SEND, || {
        // SAFETY: qp is a live QP of an instrumented context; wr the program's single WR,
        // whose one SGE the provider already read. The operands first: the other fields are
        // read after the out-of-line cases, so none of them lives across a call.
        unsafe {
            let w = &*wr;
            let ops = send_operands(w, (*qp).qp_type == IBV_QPT_UD);
            (
                (*qp).qp_num,
                send_wr(w, ops, super::sge_length(w.sg_list, 0)),
            )
        }
    });
}

/// The WRs of an `ibv_post_send` that returned `rc` (see [`accepted`]). Chains and failures.
///
/// # Safety
/// `qp` live, `wr` the program's list (still valid), `bad` the program's out-pointer (or null
/// when `rc` is 0).
#[inline(never)]
pub unsafe fn sends_list(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
    rc: c_int,
    ts: u64,
) {
    // SAFETY: qp is live (caller).
    let (qpn, ud) = unsafe { ((*qp).qp_num, (*qp).qp_type == IBV_QPT_UD) };
    // SAFETY: per caller.
    let (list, failed) = unsafe { accepted(wr, bad, rc) };
    let wrs = list.map(|w| {
        // SAFETY: w's SGE list is the program's, valid for the call.
        let bytes = unsafe { sge_bytes(w.sg_list, w.num_sge) };
        send_wr(w, send_operands(w, ud), bytes)
    });
    data::sends(ts, qpn, qp as u64, post_source::POST_SEND, wrs, failed);
}

/// A receive WR.
///
/// # Safety
/// `w.sg_list` must hold `w.num_sge` readable SGEs (the program's list, valid for the call).
unsafe fn recv_wr(w: &ibv_recv_wr) -> RecvWr {
    RecvWr {
        wr_id: w.wr_id,
        num_sge: w.num_sge.clamp(0, u16::MAX as c_int) as u16,
        // SAFETY: per caller.
        bytes: unsafe { sge_bytes(w.sg_list, w.num_sge) },
    }
}

/// The WRs of a receive post that returned `rc` on (`qpn`, `srq`, `object`).
///
/// # Safety
/// `wr` the program's list, `bad` its out-pointer.
unsafe fn recvs(
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    rc: c_int,
    target: (u32, u64, u64),
    source: u8,
    ts: u64,
) {
    // SAFETY: per caller.
    let (list, failed) = unsafe { accepted(wr, bad, rc) };
    // SAFETY: every node of the accepted list is the program's, with its SGE list.
    let wrs = list.map(|w| unsafe { recv_wr(w) });
    data::recvs(ts, target, source, wrs, failed);
}

/// `ibv_post_recv` (called at `ts`, before the provider).
///
/// # Safety
/// As [`recvs`]; `qp` live.
pub unsafe fn recvs_qp(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    rc: c_int,
    ts: u64,
) {
    // SAFETY: live QP; list per caller.
    unsafe {
        let target = ((*qp).qp_num, 0, qp as u64);
        recvs(wr, bad, rc, target, post_source::POST_RECV, ts)
    }
}

/// `ibv_post_srq_recv`.
///
/// # Safety
/// As [`recvs`].
pub unsafe fn recvs_srq(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    rc: c_int,
    ts: u64,
) {
    let target = (0, srq as u64, srq as u64);
    // SAFETY: per caller.
    unsafe { recvs(wr, bad, rc, target, post_source::POST_SRQ_RECV, ts) }
}

/// `ibv_post_wq_recv`.
///
/// # Safety
/// As [`recvs`]; `wq` live.
pub unsafe fn recvs_wq(
    wq: *mut ibv_wq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    rc: c_int,
    ts: u64,
) {
    // SAFETY: live WQ; list per caller.
    unsafe {
        let target = ((*wq).wq_num, 0, wq as u64);
        recvs(wr, bad, rc, target, post_source::WQ_RECV, ts)
    }
}

/// `ibv_post_srq_ops`: each `IBV_WR_TAG_ADD` posts a tagged receive buffer (recorded as a
/// `PostRecv` of the SRQ); tag removals and syncs are not recorded.
///
/// # Safety
/// `op` the program's list, `bad` its out-pointer.
pub unsafe fn srq_ops(
    srq: *mut ibv_srq,
    op: *mut ibv_ops_wr,
    bad: *mut *mut ibv_ops_wr,
    rc: c_int,
    ts: u64,
) {
    // SAFETY: per caller.
    let (list, failed) = unsafe { accepted(op, bad, rc) };
    let adds = list.filter(|w| w.opcode == IBV_WR_TAG_ADD).map(|w| {
        let add = &w.tm.add;
        RecvWr {
            wr_id: w.wr_id,
            num_sge: add.num_sge.clamp(0, u16::MAX as c_int) as u16,
            // SAFETY: tm.add is valid for TAG_ADD; its SGE list is the program's.
            bytes: unsafe { sge_bytes(add.sg_list, add.num_sge as c_int) },
        }
    });
    let target = (0, srq as u64, srq as u64);
    data::recvs(ts, target, post_source::POST_SRQ_RECV, adds, failed);
}

/// `ibv_bind_mw` through `ops.bind_mw`: one `PostSend` with opcode `IBV_WR_BIND_MW`.
///
/// # Safety
/// `qp`, `mw` live; `bind` the program's bind description.
pub unsafe fn bind(qp: *mut ibv_qp, mw: *mut ibv_mw, bind: *mut ibv_mw_bind, rc: c_int, ts: u64) {
    if bind.is_null() {
        return;
    }
    // SAFETY: live objects (caller).
    let (qpn, d) = unsafe {
        let b = &*bind;
        let d = SendWr {
            wr_id: b.wr_id,
            opcode: IBV_WR_BIND_MW as u8,
            flags: b.send_flags,
            bytes: b.bind_info.length.min(u32::MAX as u64) as u32,
            remote_addr: b.bind_info.addr,
            rkey: if mw.is_null() { 0 } else { (*mw).rkey },
            ..SendWr::default()
        };
        ((*qp).qp_num, d)
    };
    data::bind_mw(ts, qp as u64, qpn, &d, rc);
}

/// Records what `ibv_poll_cq` returned: one `WorkCompletion` per entry, or an empty poll.
/// `mask`: the traced categories as the hook read them.
///
/// # Safety
/// `wc` must hold `rc` completions written by the provider.
#[inline(always)]
pub unsafe fn polled(cq: *mut ibv_cq, wc: *const ibv_wc, rc: c_int, mask: u32) {
    let ts = sink::now();
    let cq_id = cq as u64;
    if rc > 0 {
        if mask & cat::COMPLETIONS == 0 {
            return;
        }
        let n = rc as usize;
        let mut first = 0;
        // SAFETY: first < n entries the provider filled.
        while first < n && unsafe { polled_one(cq_id, wc.add(first), ts) } {
            first += 1;
        }
        if first == n {
            return;
        }
        data::completions(
            cq_id,
            ts,
            first,
            n,
            // SAFETY (all three): i < rc entries the provider filled.
            |i| wc_head(cq_id, unsafe { &*wc.add(i) }),
            |i| wc_body(unsafe { &*wc.add(i) }),
            |i| decode_wc(unsafe { &*wc.add(i) }),
        );
    } else if rc == 0 && mask & cat::EMPTY_POLLS != 0 {
        data::empty_poll(cq_id, ts);
    }
}

/// One completion recorded on the hot path (`data::bound_completion`); false when nothing
/// was written. Out of line and without calls, so the scratch registers are enough for it.
///
/// # Safety
/// `w` must be a completion written by the provider.
#[inline(never)]
unsafe fn polled_one(cq: u64, w: *const ibv_wc, ts: u64) -> bool {
    // SAFETY: per caller.
    let wc = Wc::<false> {
        w: unsafe { &*w },
        cq,
    };
    data::bound_completion(cq, ts, &wc)
}

/// The hook's hot path for an `ibv_post_recv` the provider accepted, when
/// `sink::fast::RECV` is on: records it (`data::bound_recv`, at `ts`, the TSC read before the
/// call) when it is one WR with one SGE, the thread is ready and its compact record needs no
/// bookkeeping; false when nothing was written (the hook then records the post the ordinary
/// way, [`recvs_qp`]). No call, nothing that can panic (as [`place_send`]).
///
/// # Safety
/// `qp` live, `wr` the program's list (null or valid), as passed to the provider.
#[inline(always)]
pub unsafe fn recv_fast(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, ts: u64) -> bool {
    // SAFETY: wr per caller; qp is live (read only once the WR has one SGE).
    unsafe { one_sge_recv(wr, || ((*qp).qp_num, 0, post_source::POST_RECV), ts) }
}

/// [`recv_fast`] for an `ibv_post_srq_recv` (its records: QPN 0, the SRQ's handle).
///
/// # Safety
/// `srq` live, `wr` the program's list (null or valid), as passed to the provider.
#[inline(always)]
pub unsafe fn srq_recv_fast(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, ts: u64) -> bool {
    // SAFETY: per caller.
    unsafe { one_sge_recv(wr, || (0, srq as u64, post_source::POST_SRQ_RECV), ts) }
}

/// The hot receive record of `wr` when it is one WR with one SGE (`target()`: QPN, SRQ
/// handle, source).
///
/// # Safety
/// `wr` the program's list (null or valid).
#[inline(always)]
unsafe fn one_sge_recv(
    wr: *mut ibv_recv_wr,
    target: impl FnOnce() -> (u32, u64, u8),
    ts: u64,
) -> bool {
    // SAFETY: wr is the program's list, valid for the call; checked non-null first.
    if wr.is_null() || unsafe { !(*wr).next.is_null() || (*wr).num_sge != 1 } {
        return false;
    }
    // SAFETY: wr has one SGE (the provider read the same).
    data::bound_recv(ts, target(), || unsafe {
        ((*wr).wr_id, super::sge_length((*wr).sg_list, 0))
    })
}

/// The hook's hot path for a poll that returned one completion `wc` of `cq`, when
/// `sink::fast::POLL` is on: records it (`data::bound_completion`, at the TSC read now) when
/// it needs nothing but its compact record — no vendor error, no immediate data or
/// invalidated rkey, its queue's slot bound, no bookkeeping due; false when nothing was
/// written (the hook then records the poll the ordinary way, [`polled`]). No call, nothing
/// that can panic (as [`place_send`]).
///
/// # Safety
/// `wc` must be a completion written by the provider.
#[inline(always)]
pub unsafe fn polled_fast(cq: *mut ibv_cq, wc: *const ibv_wc) -> bool {
    // SAFETY: per caller.
    let (w, cq) = (unsafe { &*wc }, cq as u64);
    data::bound_completion(cq, sink::tsc(), &Wc::<true> { w, cq })
}

/// A completion the provider wrote, as the hot completion paths read it. `HOT`: the hook's
/// own hot path ([`polled_fast`]), which takes no completion with immediate data or an
/// invalidated rkey (so that `imm` is the constant 0 there).
struct Wc<'a, const HOT: bool> {
    w: &'a ibv_wc,
    cq: u64,
}

impl<const HOT: bool> CompletionSource for Wc<'_, HOT> {
    #[inline(always)]
    fn qpn(&self) -> u32 {
        self.w.qp_num
    }

    #[inline(always)]
    fn is_short(&self) -> bool {
        let w = self.w;
        // The opcode's bit 7 first, alone: a receive completion fails here, at one test of
        // one byte. Then one test of the rest (no branch per field): success, no flags (so
        // no immediate data either). The vendor error is defined only for failed completions,
        // the source QP and LID only for receive-side ones: undefined here, not read (a
        // short record does not hold them; see [`defined_vendor_err`]).
        const _: () = assert!(IBV_WC_SUCCESS == 0 && IBV_WC_RECV == WC_RECV as u32);
        w.opcode as u8 & WC_RECV == 0 && (w.status | w.wc_flags) == 0
    }

    #[inline(always)]
    fn head(&self) -> Option<CompletionHead> {
        let w = self.w;
        // The source QP (24 bits) and the flags a compact record holds (below 256) but for
        // immediate data and invalidation (the hot path's `imm` is 0), as one test of one
        // word.
        const PLAIN_FLAGS: u32 = 0xff & !(IBV_WC_WITH_IMM | IBV_WC_WITH_INV);
        const NOT_PLAIN: u64 = qp_flags_word(0xff00_0000, !PLAIN_FLAGS);
        if !HOT {
            return wc_head(self.cq, w);
        }
        // Then the vendor error (of a failed completion: a successful one has none).
        (wc_qp_flags(w) & NOT_PLAIN == 0 && defined_vendor_err(w) == 0).then(|| head_of(self.cq, w))
    }

    #[inline(always)]
    fn body(&self) -> CompletionBody {
        let b = wc_body(self.w);
        // Without immediate data or an invalidated rkey (checked in `head`) `imm` is 0.
        if HOT {
            CompletionBody { imm: 0, ..b }
        } else {
            b
        }
    }
}

/// A completion's `src_qp` and `wc_flags` (adjacent, 8-aligned) as one word
/// ([`qp_flags_word`]).
#[inline(always)]
fn wc_qp_flags(w: &ibv_wc) -> u64 {
    const _: () = assert!(
        std::mem::offset_of!(ibv_wc, wc_flags) == std::mem::offset_of!(ibv_wc, src_qp) + 4
            && std::mem::offset_of!(ibv_wc, src_qp) % 8 == 0
    );
    // SAFETY: both fields of the provider's completion, read as one aligned word.
    unsafe { std::ptr::addr_of!(w.src_qp).cast::<u64>().read() }
}

/// The word [`wc_qp_flags`] reads of a completion with this `src_qp` and `wc_flags`.
const fn qp_flags_word(src_qp: u32, flags: u32) -> u64 {
    let (q, f) = (src_qp.to_ne_bytes(), flags.to_ne_bytes());
    u64::from_ne_bytes([q[0], q[1], q[2], q[3], f[0], f[1], f[2], f[3]])
}

/// What decides a completion's compact form (`None`: it has a vendor error).
#[inline(always)]
fn wc_head(cq: u64, w: &ibv_wc) -> Option<CompletionHead> {
    (defined_vendor_err(w) == 0).then(|| head_of(cq, w))
}

/// A completion's vendor error as verbs defines it: only a failed completion has one
/// (`ibv_poll_cq(3)`: "valid only if status != IBV_WC_SUCCESS"); 0 for a successful one,
/// whose `vendor_err` holds whatever the caller's array held (rdma-core's mlx5 writes the
/// field only when it parses an error CQE).
#[inline(always)]
pub fn defined_vendor_err(w: &ibv_wc) -> u32 {
    if w.status == IBV_WC_SUCCESS {
        0
    } else {
        w.vendor_err
    }
}

/// A completion's [`CompletionHead`] (of the CQ `cq`).
#[inline(always)]
fn head_of(cq: u64, w: &ibv_wc) -> CompletionHead {
    CompletionHead {
        cq,
        qpn: w.qp_num,
        src_qp: w.src_qp,
        flags: w.wc_flags,
    }
}

/// The rest of a completion's compact form.
#[inline(always)]
fn wc_body(w: &ibv_wc) -> CompletionBody {
    CompletionBody {
        wr_id: w.wr_id,
        byte_len: w.byte_len,
        imm: wc_imm(w),
        slid: w.slid,
        status: w.status as u8,
        opcode: w.opcode as u8,
    }
}

/// The immediate data (host order) or invalidated rkey of a completion that has one, else 0.
#[inline(always)]
fn wc_imm(w: &ibv_wc) -> u32 {
    if w.wc_flags & IBV_WC_WITH_IMM != 0 {
        // SAFETY: IBV_WC_WITH_IMM says the imm_data arm is valid.
        u32::from_be(unsafe { w.__bindgen_anon_1.imm_data })
    } else if w.wc_flags & IBV_WC_WITH_INV != 0 {
        // SAFETY: IBV_WC_WITH_INV says the invalidated_rkey arm is valid.
        unsafe { w.__bindgen_anon_1.invalidated_rkey }
    } else {
        0
    }
}

#[inline(always)]
fn decode_wc(w: &ibv_wc) -> Completion {
    Completion {
        wr_id: w.wr_id,
        status: w.status as u8,
        opcode: w.opcode as u8,
        vendor_err: defined_vendor_err(w),
        byte_len: w.byte_len,
        imm: wc_imm(w),
        qpn: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags,
        slid: w.slid,
        hw_ts: 0,
    }
}

#[cfg(test)]
mod tests;
