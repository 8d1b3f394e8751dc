//! Data path: ibv_context.ops entry points, ibv_cq_ex polling, ibv_qp_ex builder (ibv_wr_*).

use crate::ffi::*;
use crate::verbs::objects::{SnAh, SnCq, SnSrq};
use crate::verbs::qp::sn_qp;
use crate::verbs::wc;
use crate::wire::state::*;
use crate::wire::work::*;
use crate::wire::{engine, queues};
use std::ffi::c_int;
use std::sync::atomic::Ordering;

const MAX_MSG: u64 = 1 << 30;

fn op_allowed(qp_type: u32, op: u32) -> bool {
    match qp_type {
        IBV_QPT_RC => matches!(
            op,
            IBV_WR_SEND
                | IBV_WR_SEND_WITH_IMM
                | IBV_WR_SEND_WITH_INV
                | IBV_WR_RDMA_WRITE
                | IBV_WR_RDMA_WRITE_WITH_IMM
                | IBV_WR_RDMA_READ
                | IBV_WR_ATOMIC_CMP_AND_SWP
                | IBV_WR_ATOMIC_FETCH_AND_ADD
                | IBV_WR_ATOMIC_WRITE
                | IBV_WR_BIND_MW
                | IBV_WR_LOCAL_INV
        ),
        IBV_QPT_UC => matches!(
            op,
            IBV_WR_SEND
                | IBV_WR_SEND_WITH_IMM
                | IBV_WR_RDMA_WRITE
                | IBV_WR_RDMA_WRITE_WITH_IMM
                | IBV_WR_BIND_MW
                | IBV_WR_LOCAL_INV
        ),
        IBV_QPT_UD => matches!(op, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM),
        _ => false,
    }
}

/// Checks a filled WQE (before it is made visible by advancing the tail); returns an errno.
fn validate(q: &QpInner, w: &SendWqe) -> c_int {
    if !op_allowed(q.qp_type, w.opcode) {
        return libc::EINVAL;
    }
    if w.is_inline() {
        if w.is_read_atomic() || w.len > q.max_inline {
            return libc::EINVAL;
        }
    } else if w.num_sge > q.max_send_sge.max(1) || w.num_sge as usize > MAX_SGE {
        return libc::EINVAL;
    }
    if matches!(
        w.opcode,
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
    ) && w.len != 8
    {
        return libc::EINVAL;
    }
    if w.len as u64 > MAX_MSG {
        return libc::EINVAL;
    }
    0
}

/// Appends a WQE filled by `fill`; returns an errno when the WR is rejected.
pub(crate) fn enqueue(
    q: &QpInner,
    sq: &mut SendQueue,
    fill: impl FnOnce(&mut SendWqe) -> c_int,
) -> c_int {
    if sq.len() >= sq.max_wr {
        return libc::ENOMEM;
    }
    let tail = sq.tail;
    let msn = sq.next_msn;
    let w = sq.at(tail);
    w.num_sge = 0;
    w.flags = 0;
    w.imm = 0;
    w.len = 0;
    w.ud_global = false;
    let e = fill(w);
    if e != 0 {
        return e;
    }
    let e = validate(q, w);
    if e != 0 {
        return e;
    }
    if q.qp_type == IBV_QPT_UD && w.len as usize > crate::wire::shm::PKT_MTU {
        w.status = IBV_WC_LOC_LEN_ERR;
        w.st = WQE_DONE;
    } else {
        w.status = IBV_WC_SUCCESS;
        w.st = WQE_QUEUED;
    }
    w.msn = msn;
    w.sent = 0;
    w.resp_bytes = 0;
    w.validated = false;
    // A local operation (bind, local invalidate) sends no message: it takes no MSN.
    if !matches!(w.opcode, IBV_WR_BIND_MW | IBV_WR_LOCAL_INV) {
        sq.next_msn = msn.wrapping_add(1);
    }
    sq.tail = tail.wrapping_add(1);
    0
}

/// The program's `n` (at most [`MAX_SGE`]) scatter/gather entries at `sg`, each read
/// unaligned: programs may keep them at any address (libiscsi's iSER descriptors are packed
/// structs), which libmlx5's plain loads accept on x86.
///
/// # Safety
/// `sg` points to `n` readable `ibv_sge`s when `n` > 0.
unsafe fn copy_sges(sg: *const ibv_sge, n: usize) -> [ibv_sge; MAX_SGE] {
    let mut out = [ibv_sge::default(); MAX_SGE];
    for (i, o) in out.iter_mut().take(n).enumerate() {
        // SAFETY: entry i of the caller's n; read_unaligned accepts any alignment.
        *o = unsafe { sg.add(i).read_unaligned() };
    }
    out
}

pub(crate) unsafe fn fill_sges(w: &mut SendWqe, sg: *const ibv_sge, n: usize) -> c_int {
    if n > MAX_SGE {
        return libc::EINVAL;
    }
    let copied = copy_sges(sg, n);
    let sges = &copied[..n];
    let len: u64 = sges.iter().map(|s| s.length as u64).sum();
    if len > MAX_MSG {
        return libc::EINVAL;
    }
    w.len = len as u32;
    if w.is_inline() {
        if len as usize > MAX_INLINE {
            return libc::EINVAL;
        }
        let mut off = 0;
        for s in sges {
            std::ptr::copy_nonoverlapping(
                s.addr as usize as *const u8,
                w.inline_mut()[off..].as_mut_ptr(),
                s.length as usize,
            );
            off += s.length as usize;
        }
        w.num_sge = 0;
    } else {
        w.sge[..n].copy_from_slice(sges);
        w.num_sge = n as u32;
    }
    0
}

/// Fills a BIND_MW WQE: the window's new key in `rkey`, the region's `lkey` in `swap`'s low
/// half and the access rights in its high half, the range in `raddr` and `compare`
/// (`engine::local_op` executes it).
pub(crate) fn set_bind(w: &mut SendWqe, rkey: u32, lkey: u32, addr: u64, len: u64, access: u32) {
    w.rkey = rkey;
    w.raddr = addr;
    w.compare = len;
    w.swap = lkey as u64 | (access as u64) << 32;
    w.flags &= !IBV_SEND_INLINE;
}

/// Runs the transmit engine after posting (or flushes in the error state).
pub(crate) fn after_post(q: &QpInner, sq: &mut SendQueue) {
    engine::tx_pump(q, sq);
    if q.backlog.load(Ordering::Relaxed) {
        global().proc.word().kick();
    }
}

pub unsafe extern "C" fn op_post_send(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let s = sn_qp(qp);
    let q = &*s.inner;
    let st = q.state();
    // Rule: once mlx5dv_init_obj exposed the send ring, the program owns its producer index
    // and posts by writing WQEs; mixing in ibv_post_send is rejected.
    if !matches!(st, IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_ERR) || q.dv.get().is_some() {
        *bad = wr;
        return libc::EINVAL;
    }
    let xrc_send = (*qp).qp_type == IBV_QPT_XRC_SEND;
    let mut sq = q.sq.lock().unwrap_or_else(|e| e.into_inner());
    let mut ret = 0;
    let mut accepted = 0;
    while !wr.is_null() {
        let r = &*wr;
        let e = enqueue(q, &mut sq, |w| {
            w.wr_id = r.wr_id;
            w.opcode = r.opcode;
            w.flags = r.send_flags;
            w.imm = r.__bindgen_anon_1.imm_data;
            if xrc_send {
                // The XRC SRQ the request goes to (`wire::state::xrc_srqn`).
                w.ud_qkey = r.qp_type.xrc.remote_srqn;
            }
            if r.opcode == IBV_WR_ATOMIC_WRITE {
                // Only through `ibv_wr_atomic_write`, as with mlx5.
                return libc::EINVAL;
            }
            match r.opcode {
                IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                    w.raddr = r.wr.rdma.remote_addr;
                    w.rkey = r.wr.rdma.rkey;
                }
                IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                    w.raddr = r.wr.atomic.remote_addr;
                    w.rkey = r.wr.atomic.rkey;
                    w.compare = r.wr.atomic.compare_add;
                    w.swap = r.wr.atomic.swap;
                    w.flags &= !IBV_SEND_INLINE;
                }
                IBV_WR_BIND_MW => {
                    let b = &r.__bindgen_anon_2.bind_mw;
                    let i = &b.bind_info;
                    let lkey = if i.mr.is_null() { 0 } else { (*i.mr).lkey };
                    set_bind(w, b.rkey, lkey, i.addr, i.length, i.mw_access_flags);
                    return 0;
                }
                IBV_WR_LOCAL_INV => {
                    w.flags &= !IBV_SEND_INLINE;
                    return 0;
                }
                _ => {}
            }
            if q.qp_type == IBV_QPT_UD {
                let ah = r.wr.ud.ah;
                if ah.is_null() {
                    return libc::EINVAL;
                }
                let a = &*(ah as *mut SnAh);
                w.ud_node = a.node;
                w.ud_global = a.global;
                w.ud_sl = a.sl;
                w.ud_qpn = r.wr.ud.remote_qpn;
                w.ud_qkey = r.wr.ud.remote_qkey;
            }
            if r.num_sge < 0 {
                return libc::EINVAL;
            }
            fill_sges(w, r.sg_list, r.num_sge as usize)
        });
        if e != 0 {
            *bad = wr;
            ret = e;
            break;
        }
        accepted += 1;
        wr = r.next;
    }
    crate::verbs::tally::sends(accepted);
    after_post(q, &mut sq);
    ret
}

unsafe fn post_recv_common(
    rq: &mut RecvQueue,
    max_sge: u32,
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    while !wr.is_null() {
        let r = &*wr;
        if r.num_sge < 0 || r.num_sge as u32 > max_sge.max(1) || r.num_sge as usize > MAX_SGE {
            *bad = wr;
            return libc::EINVAL;
        }
        if rq.q.len() as u32 >= rq.max {
            *bad = wr;
            return libc::ENOMEM;
        }
        let mut rw = RecvWqe {
            wr_id: r.wr_id,
            idx: 0,
            num_sge: r.num_sge as u32,
            sge: [ibv_sge::default(); MAX_SGE],
        };
        rw.sge = copy_sges(r.sg_list, r.num_sge as usize);
        rq.q.push_back(rw);
        crate::verbs::tally::recvs(1);
        wr = r.next;
    }
    0
}

pub unsafe extern "C" fn op_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let s = sn_qp(qp);
    let q = &*s.inner;
    if q.srq.is_some() || q.state() == IBV_QPS_RESET {
        *bad = wr;
        return libc::EINVAL;
    }
    if let Some(d) = q.dv.get() {
        // Exposed receive ring: write the WQE into it, as libmlx5 does.
        let mut w = wr;
        while !w.is_null() {
            let r = &*w;
            let n = r.num_sge.max(0) as usize;
            if n > MAX_SGE {
                *bad = w;
                return libc::EINVAL;
            }
            let copied = copy_sges(r.sg_list, n);
            if let Err(e) = d.post_recv(&copied[..n], Some(r.wr_id)) {
                *bad = w;
                return e;
            }
            crate::verbs::tally::recvs(1);
            w = r.next;
        }
        return 0;
    }
    let ret = {
        let mut rq = q.rq.lock().unwrap_or_else(|e| e.into_inner());
        post_recv_common(&mut rq, q.max_recv_sge, wr, bad)
    };
    if q.state() == IBV_QPS_ERR {
        queues::flush_rq(q);
    }
    ret
}

pub unsafe extern "C" fn op_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let s = &*(srq as *mut SnSrq);
    if s.inner.dv.get().is_some() {
        // Rule: an exposed SRQ ring is owned by the program (it links freed WQEs back).
        *bad = wr;
        return libc::EINVAL;
    }
    let mut rq = s.inner.rq.lock().unwrap_or_else(|e| e.into_inner());
    post_recv_common(&mut rq, s.inner.max_sge, wr, bad)
}

/// Drives the QPs feeding this CQ (the calling thread acts as the device) and stamps them as
/// "polled now", so peers skip waking our progress thread while the application polls.
fn progress_cq(c: &CqInner) {
    let qps = c.qps.lock().unwrap_or_else(|e| e.into_inner());
    let now = now_ns();
    for q in qps.iter() {
        q.file.hdr().poll_stamp.store(now, Ordering::Relaxed);
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    for q in qps.iter() {
        engine::progress_qp(q);
    }
}

/// After a poll that returned completions the application may stop polling (and spin on its
/// memory, as ib_write_lat does): execute what arrived meanwhile right away. Work arriving in
/// the remaining freshness window is picked up by the progress thread's short timeout.
fn progress_after_hit(c: &CqInner) {
    let qps = c.qps.lock().unwrap_or_else(|e| e.into_inner());
    for q in qps.iter() {
        if q.file.req().has_data() || q.file.resp().has_data() {
            engine::progress_qp(q);
        }
    }
}

pub unsafe extern "C" fn op_poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    let c = &*(cq as *mut SnCq);
    let inner = &*c.inner;
    progress_cq(inner);
    if let Some(d) = inner.dv.get() {
        let mut got = 0;
        while got < n.max(0) as usize {
            let Some(w) = d.poll() else { break };
            wc::deliver(wc.add(got), &w);
            crate::verbs::tally::delivered(&w);
            got += 1;
        }
        return got as c_int;
    }
    if n <= 0 || inner.count.load(Ordering::Acquire) == 0 {
        return 0;
    }
    let mut q = inner.q.lock().unwrap_or_else(|e| e.into_inner());
    let mut got = 0;
    while got < n as usize {
        let Some(e) = q.pop_front() else { break };
        wc::deliver(wc.add(got), &e.wc);
        crate::verbs::tally::delivered(&e.wc);
        got += 1;
    }
    inner.count.fetch_sub(got, Ordering::AcqRel);
    drop(q);
    if got > 0 {
        progress_after_hit(inner);
    }
    got as c_int
}

pub unsafe extern "C" fn op_req_notify_cq(cq: *mut ibv_cq, solicited: c_int) -> c_int {
    let c = &*(cq as *mut SnCq);
    if c.inner.channel.is_none() {
        return libc::EINVAL;
    }
    c.inner.armed.store(
        if solicited != 0 {
            ARM_SOLICITED
        } else {
            ARM_ALL
        },
        Ordering::Release,
    );
    0
}

// ---- ibv_cq_ex -------------------------------------------------------------------------

unsafe fn cqx<'a>(c: *mut ibv_cq_ex) -> &'a mut SnCq {
    &mut *(c as *mut SnCq)
}

unsafe fn cqx_pop(c: &mut SnCq) -> c_int {
    let inner = c.inner.clone();
    if let Some(d) = inner.dv.get() {
        return match d.poll() {
            Some(w) => {
                crate::verbs::tally::delivered(&w);
                c.cur = Cqe {
                    wc: w,
                    ts: now_ns(),
                    op: 0,
                    srqn: 0,
                    counter: 0,
                };
                c.cq.status = w.status;
                c.cq.wr_id = w.wr_id;
                0
            }
            None => libc::ENOENT,
        };
    }
    let e = {
        let mut q = inner.q.lock().unwrap_or_else(|e| e.into_inner());
        q.pop_front()
    };
    match e {
        Some(e) => {
            inner.count.fetch_sub(1, Ordering::AcqRel);
            crate::verbs::tally::delivered(&e.wc);
            c.cur = e;
            c.cq.status = e.wc.status;
            c.cq.wr_id = e.wc.wr_id;
            0
        }
        None => libc::ENOENT,
    }
}

unsafe extern "C" fn cq_start_poll(c: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    let s = cqx(c);
    progress_cq(&s.inner);
    cqx_pop(s)
}
unsafe extern "C" fn cq_next_poll(c: *mut ibv_cq_ex) -> c_int {
    cqx_pop(cqx(c))
}
unsafe extern "C" fn cq_end_poll(_c: *mut ibv_cq_ex) {}
unsafe extern "C" fn cq_read_slid(c: *mut ibv_cq_ex) -> u32 {
    cqx(c).cur.wc.slid as u32
}
unsafe extern "C" fn cq_read_completion_ts(c: *mut ibv_cq_ex) -> u64 {
    cqx(c).cur.ts
}
unsafe extern "C" fn cq_read_completion_wallclock_ns(c: *mut ibv_cq_ex) -> u64 {
    let mono = cqx(c).cur.ts;
    let mut rt = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    libc::clock_gettime(libc::CLOCK_REALTIME, &mut rt);
    let real = rt.tv_sec as u64 * 1_000_000_000 + rt.tv_nsec as u64;
    real.wrapping_sub(now_ns().wrapping_sub(mono))
}
unsafe extern "C" fn cq_read_cvlan(_c: *mut ibv_cq_ex) -> u16 {
    0
}
unsafe extern "C" fn cq_read_flow_tag(_c: *mut ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn cq_read_tm_info(_c: *mut ibv_cq_ex, info: *mut ibv_wc_tm_info) {
    std::ptr::write_bytes(info, 0, 1);
}

/// Installs the `ibv_cq_ex` readers that return a field of the current completion as it is:
/// `slot: type = field path`, one `unsafe extern "C" fn` each.
macro_rules! wc_field_readers {
    ($c:ident; $($slot:ident: $ty:ty = $($field:ident).+;)*) => { $(
        $c.$slot = {
            unsafe extern "C" fn read(c: *mut ibv_cq_ex) -> $ty {
                cqx(c).cur.wc.$($field).+
            }
            Some(read)
        };
    )* };
}

pub fn fill_cq_ex_ops(c: &mut ibv_cq_ex) {
    c.start_poll = Some(cq_start_poll);
    c.next_poll = Some(cq_next_poll);
    c.end_poll = Some(cq_end_poll);
    wc_field_readers! { c;
        read_opcode: ibv_wc_opcode = opcode;
        read_vendor_err: u32 = vendor_err;
        read_byte_len: u32 = byte_len;
        read_imm_data: __be32 = __bindgen_anon_1.imm_data;
        read_qp_num: u32 = qp_num;
        read_src_qp: u32 = src_qp;
        read_wc_flags: u32 = wc_flags;
        read_sl: u8 = sl;
        read_dlid_path_bits: u8 = dlid_path_bits;
    }
    c.read_slid = Some(cq_read_slid);
    c.read_completion_ts = Some(cq_read_completion_ts);
    c.read_completion_wallclock_ns = Some(cq_read_completion_wallclock_ns);
    c.read_cvlan = Some(cq_read_cvlan);
    c.read_flow_tag = Some(cq_read_flow_tag);
    c.read_tm_info = Some(cq_read_tm_info);
}
