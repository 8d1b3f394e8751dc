//! Decoding of the program's work-request lists and the provider's completions into records.
//! Runs after the provider call returned, on the caller's thread, inside a guard.

use std::ffi::c_int;

use sigmatrace_schemas::{post_source, PostSend, WorkCompletion};

use crate::ffi::*;
use crate::record::data::{self, Completion, SendWr};
use crate::sink;
use crate::sink::cat;

/// Longest WR list walked (a corrupt, cyclic list must not hang the program).
const MAX_WRS: usize = 1 << 16;
/// Most SGEs summed per WR.
const MAX_SGE: usize = 1 << 10;

/// Sum of the lengths of `n` SGEs.
///
/// # Safety
/// `sg` must point to `n` readable SGEs (or be null).
#[inline(always)]
unsafe fn sge_bytes(sg: *const ibv_sge, n: c_int) -> u32 {
    if n == 1 {
        // SAFETY: one SGE (the common case); the provider already read it.
        return unsafe { (*sg).length };
    }
    // SAFETY: per caller.
    unsafe { sge_bytes_list(sg, n) }
}

/// # Safety
/// As [`sge_bytes`].
#[inline(never)]
unsafe fn sge_bytes_list(sg: *const ibv_sge, n: c_int) -> u32 {
    if sg.is_null() || n <= 0 {
        return 0;
    }
    let n = (n as usize).min(MAX_SGE);
    let mut total = 0u32;
    for i in 0..n {
        // SAFETY: i < n SGEs the program passed.
        total = total.wrapping_add(unsafe { (*sg.add(i)).length });
    }
    total
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

/// Decodes one send WR into `r`, writing every field (`r` may be an uninitialised chunk
/// slot). `ud`: the QP is UD (the `wr.ud` arm is valid); `bytes`: its SGE sum.
///
/// # Safety
/// `w` must point to a valid `ibv_send_wr`.
#[inline(always)]
unsafe fn fill_send(
    r: &mut PostSend,
    w: *const ibv_send_wr,
    ud: bool,
    ts: u64,
    qpn: u32,
    bytes: u32,
) {
    // SAFETY: w is valid (caller); each union arm is read only when the opcode / QP type
    // says it is the one the program filled (as the provider reads it).
    unsafe {
        let w = &*w;
        let op = w.opcode;
        // Kind and length are set by `commit` / `append`.
        r.hdr.aux = w.send_flags;
        r.ts = ts;
        r.wr_id = w.wr_id;
        r.qpn = qpn;
        r.num_sge = w.num_sge as u16;
        r.opcode = op as u8;
        r.source = post_source::POST_SEND;
        r._pad = 0;
        r.bytes = bytes;
        if ud {
            return fill_ud(r, w);
        }
        // The message-rate opcodes inline (compares, no jump table); the others out of line.
        if op == IBV_WR_RDMA_WRITE {
            r.remote_addr = w.wr.rdma.remote_addr;
            r.rkey = w.wr.rdma.rkey;
            r.compare_add = 0;
            r.imm = 0;
        } else if op == IBV_WR_SEND {
            r.remote_addr = 0;
            r.rkey = 0;
            r.compare_add = 0;
            r.imm = 0;
        } else {
            fill_operands(r, w);
        }
    }
}

/// [`fill_send`]'s operands of the other opcodes on a connected QP: each arm writes the
/// operands its opcode has and zeroes the rest.
#[inline(never)]
fn fill_operands(r: &mut PostSend, w: &ibv_send_wr) {
    let (mut remote_addr, mut rkey, mut compare_add, mut imm) = (0u64, 0u32, 0u64, 0u32);
    // SAFETY: each union arm is read only for the opcodes whose arm it is (as the provider
    // reads it).
    unsafe {
        match w.opcode {
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_READ => {
                remote_addr = w.wr.rdma.remote_addr;
                rkey = w.wr.rdma.rkey;
            }
            IBV_WR_RDMA_WRITE_WITH_IMM => {
                remote_addr = w.wr.rdma.remote_addr;
                rkey = w.wr.rdma.rkey;
                imm = u32::from_be(w.__bindgen_anon_1.imm_data);
            }
            IBV_WR_SEND_WITH_IMM => imm = u32::from_be(w.__bindgen_anon_1.imm_data),
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                remote_addr = w.wr.atomic.remote_addr;
                rkey = w.wr.atomic.rkey;
                compare_add = w.wr.atomic.compare_add;
            }
            IBV_WR_SEND_WITH_INV | IBV_WR_LOCAL_INV => imm = w.__bindgen_anon_1.invalidate_rkey,
            _ => {}
        }
    }
    r.remote_addr = remote_addr;
    r.rkey = rkey;
    r.compare_add = compare_add;
    r.imm = imm;
}

/// [`fill_send`]'s operands of a WR on a UD QP: the `wr.ud` arm (AH, remote QPN, qkey).
#[inline(always)]
fn fill_ud(r: &mut PostSend, w: &ibv_send_wr) {
    let op = w.opcode;
    let bit = if op < 32 { 1u32 << op } else { 0 };
    // SAFETY: the QP is UD, so the program filled the `ud` arm; the immediate / invalidate
    // arm is read only for the opcodes that carry it.
    unsafe {
        r.remote_addr = w.wr.ud.ah as u64;
        r.rkey = w.wr.ud.remote_qpn;
        r.compare_add = w.wr.ud.remote_qkey as u64;
        r.imm = if bit & IMM_OPS != 0 {
            u32::from_be(w.__bindgen_anon_1.imm_data)
        } else if bit & INV_OPS != 0 {
            w.__bindgen_anon_1.invalidate_rkey
        } else {
            0
        };
    }
}

/// Decodes one send WR into its record (see [`fill_send`]).
///
/// # Safety
/// As [`fill_send`].
#[inline]
unsafe fn decode_send(w: *const ibv_send_wr, ud: bool, ts: u64, qpn: u32) -> PostSend {
    let mut r = PostSend::default();
    // SAFETY: per caller.
    unsafe {
        let bytes = sge_bytes((*w).sg_list, (*w).num_sge);
        fill_send(&mut r, w, ud, ts, qpn, bytes)
    };
    r
}

/// Records the WRs of an `ibv_post_send` the provider accepted (it returned 0).
///
/// # Safety
/// `qp` live, `wr` the program's list (still valid).
#[inline(always)]
pub unsafe fn sends_ok(qp: *mut ibv_qp, wr: *mut ibv_send_wr, ts: u64) {
    // SAFETY: qp is a live QP of an instrumented context; wr the program's list.
    unsafe {
        if wr.is_null() || !(*wr).next.is_null() || (*wr).num_sge != 1 {
            return sends_list(qp, wr, std::ptr::null_mut(), 0, ts);
        }
        // One WR with one SGE: the common case, decoded straight from the program's WR into a
        // reserved chunk slot (no intermediate record, no copy, no call).
        if let Some(mut t) = sink::enter() {
            if let Some(mut r) = t.reserve::<PostSend>(ts) {
                let ud = (*qp).qp_type == IBV_QPT_UD;
                // num_sge is 1: the provider already read this SGE.
                let bytes = (*(*wr).sg_list).length;
                fill_send(&mut r, wr, ud, ts, (*qp).qp_num, bytes);
                r.commit();
            }
        }
    }
}

/// The WRs of an `ibv_post_send` that returned `rc`: every accepted one (all when `rc` is 0,
/// those before `*bad` otherwise), then a `PostError` on failure. Chains and failures.
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
    // SAFETY: bad is the program's out-pointer; on failure the provider set it.
    let stop = if rc != 0 {
        unsafe { failed_at(bad) }
    } else {
        std::ptr::null_mut()
    };
    sink::with_thread(|t| {
        let mut w = wr;
        let mut n = 0;
        // On failure without a bad_wr nothing is known to be accepted.
        while !w.is_null() && w != stop && n < MAX_WRS && !(rc != 0 && stop.is_null()) {
            // SAFETY: w is a node of the program's list.
            t.append(&unsafe { decode_send(w, ud, ts, qpn) });
            // SAFETY: as above.
            w = unsafe { (*w).next };
            n += 1;
        }
        if rc != 0 {
            // SAFETY: stop is null or a node of the program's list.
            let bad_id = if stop.is_null() {
                0
            } else {
                unsafe { (*stop).wr_id }
            };
            t.append(&data::post_error(
                ts,
                rc,
                bad_id,
                qp as u64,
                qpn,
                post_source::POST_SEND,
            ));
        }
    });
}

/// `*bad` if the pointer is set.
///
/// # Safety
/// `bad` null or a valid out-pointer.
unsafe fn failed_at<T>(bad: *mut *mut T) -> *mut T {
    if bad.is_null() {
        std::ptr::null_mut()
    } else {
        // SAFETY: valid out-pointer (caller).
        unsafe { *bad }
    }
}

/// Common walk of receive lists.
///
/// # Safety
/// `wr` the program's list, `bad` its out-pointer.
unsafe fn recvs(
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    rc: c_int,
    qpn: u32,
    srq: u64,
    object: u64,
    source: u8,
) {
    let ts = sink::now();
    // SAFETY: as in `sends`.
    let stop = if rc != 0 {
        unsafe { failed_at(bad) }
    } else {
        std::ptr::null_mut()
    };
    sink::with_thread(|t| {
        let mut w = wr;
        let mut n = 0;
        while !w.is_null() && w != stop && n < MAX_WRS && !(rc != 0 && stop.is_null()) {
            // SAFETY: w is a node of the program's list.
            let (id, nsge, bytes, next) = unsafe {
                let r = &*w;
                (r.wr_id, r.num_sge, sge_bytes(r.sg_list, r.num_sge), r.next)
            };
            let nsge = nsge.clamp(0, u16::MAX as c_int) as u16;
            t.append(&data::post_recv(ts, qpn, srq, source, id, nsge, bytes));
            w = next;
            n += 1;
        }
        if rc != 0 {
            // SAFETY: stop is null or a node of the program's list.
            let bad_id = if stop.is_null() {
                0
            } else {
                unsafe { (*stop).wr_id }
            };
            t.append(&data::post_error(ts, rc, bad_id, object, qpn, source));
        }
    });
}

/// `ibv_post_recv`.
///
/// # Safety
/// As [`recvs`]; `qp` live.
pub unsafe fn recvs_qp(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    rc: c_int,
) {
    // SAFETY: live QP; list per caller.
    unsafe {
        recvs(
            wr,
            bad,
            rc,
            (*qp).qp_num,
            0,
            qp as u64,
            post_source::POST_RECV,
        )
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
) {
    // SAFETY: per caller.
    unsafe {
        recvs(
            wr,
            bad,
            rc,
            0,
            srq as u64,
            srq as u64,
            post_source::POST_SRQ_RECV,
        )
    }
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
) {
    // SAFETY: live WQ; list per caller.
    unsafe {
        recvs(
            wr,
            bad,
            rc,
            (*wq).wq_num,
            0,
            wq as u64,
            post_source::WQ_RECV,
        )
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
) {
    let ts = sink::now();
    // SAFETY: as in `sends`.
    let stop = if rc != 0 {
        unsafe { failed_at(bad) }
    } else {
        std::ptr::null_mut()
    };
    sink::with_thread(|t| {
        let mut w = op;
        let mut n = 0;
        while !w.is_null() && w != stop && n < MAX_WRS && !(rc != 0 && stop.is_null()) {
            // SAFETY: w is a node of the program's list; tm.add is valid for TAG_ADD.
            let (id, opcode, nsge, bytes, next) = unsafe {
                let r = &*w;
                let add = &r.tm.add;
                (
                    r.wr_id,
                    r.opcode,
                    add.num_sge,
                    sge_bytes(add.sg_list, add.num_sge as c_int),
                    r.next,
                )
            };
            if opcode == IBV_WR_TAG_ADD {
                let nsge = nsge.clamp(0, u16::MAX as c_int) as u16;
                t.append(&data::post_recv(
                    ts,
                    0,
                    srq as u64,
                    post_source::POST_SRQ_RECV,
                    id,
                    nsge,
                    bytes,
                ));
            }
            w = next;
            n += 1;
        }
        if rc != 0 {
            // SAFETY: stop is null or a node of the program's list.
            let bad_id = if stop.is_null() {
                0
            } else {
                unsafe { (*stop).wr_id }
            };
            t.append(&data::post_error(
                ts,
                rc,
                bad_id,
                srq as u64,
                0,
                post_source::POST_SRQ_RECV,
            ));
        }
    });
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
    sink::with_thread(|t| {
        if rc == 0 {
            t.append(&data::post_send(ts, qpn, post_source::POST_SEND, &d));
        } else {
            t.append(&data::post_error(
                ts,
                rc,
                d.wr_id,
                qp as u64,
                qpn,
                post_source::POST_SEND,
            ));
        }
    });
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
        if let Some(mut t) = sink::enter() {
            t.work_returned(cq_id);
            for i in 0..rc as usize {
                // Written straight into a reserved chunk slot (every field assigned).
                if let Some(mut r) = t.reserve::<WorkCompletion>(ts) {
                    // SAFETY: i < rc entries the provider filled.
                    *r = data::completion(ts, cq_id, &decode_wc(unsafe { &*wc.add(i) }));
                    r.commit();
                }
            }
        }
    } else if rc == 0 && mask & cat::EMPTY_POLLS != 0 {
        if let Some(mut t) = sink::enter() {
            t.empty_poll(cq_id, ts);
        }
    }
}

#[inline(always)]
fn decode_wc(w: &ibv_wc) -> Completion {
    let imm = if w.wc_flags & IBV_WC_WITH_IMM != 0 {
        // SAFETY: IBV_WC_WITH_IMM says the imm_data arm is valid.
        u32::from_be(unsafe { w.__bindgen_anon_1.imm_data })
    } else if w.wc_flags & IBV_WC_WITH_INV != 0 {
        // SAFETY: IBV_WC_WITH_INV says the invalidated_rkey arm is valid.
        unsafe { w.__bindgen_anon_1.invalidated_rkey }
    } else {
        0
    };
    Completion {
        wr_id: w.wr_id,
        status: w.status as u8,
        opcode: w.opcode as u8,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm,
        qpn: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags,
        slid: w.slid,
        hw_ts: 0,
    }
}
