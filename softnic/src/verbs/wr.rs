//! The `ibv_qp_ex` work-request builder (`ibv_wr_start`, the `ibv_wr_*` opcode builders and
//! setters, `ibv_wr_complete`): each batch's WQEs are built aside ([`WrBuild`]) and enqueued
//! together at `wr_complete`, through the same checks as `ibv_post_send`
//! (`verbs::datapath::enqueue`).

use crate::ffi::*;
use crate::verbs::datapath::{after_post, enqueue, fill_sges, set_bind};
use crate::verbs::objects::SnAh;
use crate::verbs::qp::SnQp;
use crate::wire::work::*;
use std::ffi::{c_int, c_void};

unsafe fn wb<'a>(q: *mut ibv_qp_ex) -> (&'a SnQp, &'a mut crate::verbs::qp::WrBuild) {
    let s = &*(q as *mut SnQp);
    (s, &mut *s.wr.get())
}

/// Starts a new staged WQE with the QP's current wr_id/wr_flags.
unsafe fn wr_new(q: *mut ibv_qp_ex, opcode: u32) -> Option<&'static mut SendWqe> {
    let (s, b) = wb(q);
    if b.n == b.wqes.len() {
        b.wqes.push(SendWqe::new());
    }
    let w: *mut SendWqe = &mut b.wqes[b.n];
    b.n += 1;
    let w = &mut *w;
    w.wr_id = s.qpx.wr_id;
    w.flags = s.qpx.wr_flags;
    w.opcode = opcode;
    w.num_sge = 0;
    w.len = 0;
    w.imm = 0;
    w.ud_global = false;
    Some(w)
}

unsafe fn wr_last<'a>(q: *mut ibv_qp_ex) -> Option<&'a mut SendWqe> {
    let (_, b) = wb(q);
    if b.n == 0 {
        b.err = libc::EINVAL;
        return None;
    }
    Some(&mut b.wqes[b.n - 1])
}

unsafe extern "C" fn wr_start(q: *mut ibv_qp_ex) {
    let (_, b) = wb(q);
    b.n = 0;
    b.err = 0;
}

unsafe extern "C" fn wr_abort(q: *mut ibv_qp_ex) {
    let (_, b) = wb(q);
    b.n = 0;
    b.err = 0;
}

unsafe extern "C" fn wr_complete(q: *mut ibv_qp_ex) -> c_int {
    let (s, b) = wb(q);
    let inner = &*s.inner;
    let n = std::mem::take(&mut b.n);
    if b.err != 0 {
        return std::mem::take(&mut b.err);
    }
    if !matches!(inner.state(), IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_ERR) {
        return libc::EINVAL;
    }
    let mut sq = inner.sq.lock().unwrap_or_else(|e| e.into_inner());
    if sq.len() + n as u32 > sq.max_wr {
        return libc::ENOMEM;
    }
    let mut ret = 0;
    for src in &b.wqes[..n] {
        let e = enqueue(inner, &mut sq, |w| {
            w.wr_id = src.wr_id;
            w.opcode = src.opcode;
            w.flags = src.flags;
            w.imm = src.imm;
            w.raddr = src.raddr;
            w.rkey = src.rkey;
            w.compare = src.compare;
            w.swap = src.swap;
            w.ud_node = src.ud_node;
            w.ud_qpn = src.ud_qpn;
            w.ud_qkey = src.ud_qkey;
            w.ud_global = src.ud_global;
            w.ud_sl = src.ud_sl;
            w.len = src.len;
            w.num_sge = src.num_sge;
            w.sge = src.sge;
            if src.is_inline() {
                w.inline_mut()[..src.len as usize]
                    .copy_from_slice(&src.inline_buf[..src.len as usize]);
            }
            0
        });
        if e != 0 {
            ret = e;
            break;
        }
        crate::verbs::tally::sends(1);
    }
    after_post(inner, &mut sq);
    ret
}

unsafe extern "C" fn wr_send(q: *mut ibv_qp_ex) {
    wr_new(q, IBV_WR_SEND);
}
unsafe extern "C" fn wr_send_imm(q: *mut ibv_qp_ex, imm: __be32) {
    if let Some(w) = wr_new(q, IBV_WR_SEND_WITH_IMM) {
        w.imm = imm;
    }
}
/// A new WR of `opcode` to `raddr` under `rkey` (RDMA and atomic operations).
unsafe fn wr_remote(
    q: *mut ibv_qp_ex,
    opcode: u32,
    rkey: u32,
    raddr: u64,
) -> Option<&'static mut SendWqe> {
    let w = wr_new(q, opcode)?;
    w.rkey = rkey;
    w.raddr = raddr;
    Some(w)
}
unsafe extern "C" fn wr_rdma_write(q: *mut ibv_qp_ex, rkey: u32, raddr: u64) {
    wr_remote(q, IBV_WR_RDMA_WRITE, rkey, raddr);
}
unsafe extern "C" fn wr_rdma_write_imm(q: *mut ibv_qp_ex, rkey: u32, raddr: u64, imm: __be32) {
    if let Some(w) = wr_remote(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr) {
        w.imm = imm;
    }
}
unsafe extern "C" fn wr_rdma_read(q: *mut ibv_qp_ex, rkey: u32, raddr: u64) {
    wr_remote(q, IBV_WR_RDMA_READ, rkey, raddr);
}
unsafe extern "C" fn wr_atomic_cmp_swp(
    q: *mut ibv_qp_ex,
    rkey: u32,
    raddr: u64,
    cmp: u64,
    swp: u64,
) {
    if let Some(w) = wr_remote(q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, raddr) {
        w.compare = cmp;
        w.swap = swp;
    }
}
unsafe extern "C" fn wr_atomic_fetch_add(q: *mut ibv_qp_ex, rkey: u32, raddr: u64, add: u64) {
    if let Some(w) = wr_remote(q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, raddr) {
        w.compare = add;
    }
}
unsafe extern "C" fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    wr_set_sge_list(q, 1, &sge);
}
unsafe extern "C" fn wr_set_sge_list(q: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    if let Some(w) = wr_last(q) {
        w.flags &= !IBV_SEND_INLINE;
        if fill_sges(w, list, n) != 0 {
            wb(q).1.err = libc::EINVAL;
        }
    }
}
unsafe extern "C" fn wr_set_inline_data(q: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    wr_set_inline_data_list(q, 1, &buf);
}
unsafe extern "C" fn wr_set_inline_data_list(
    q: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    let Some(w) = wr_last(q) else { return };
    let bufs = std::slice::from_raw_parts(list, n);
    let total: usize = bufs.iter().map(|b| b.length).sum();
    if total > MAX_INLINE {
        wb(q).1.err = libc::EINVAL;
        return;
    }
    let mut off = 0;
    for b in bufs {
        std::ptr::copy_nonoverlapping(
            b.addr as *const u8,
            w.inline_mut()[off..].as_mut_ptr(),
            b.length,
        );
        off += b.length;
    }
    w.flags |= IBV_SEND_INLINE;
    w.len = total as u32;
    w.num_sge = 0;
}
unsafe extern "C" fn wr_set_ud_addr(q: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    if let Some(w) = wr_last(q) {
        if ah.is_null() {
            wb(q).1.err = libc::EINVAL;
            return;
        }
        let a = &*(ah as *mut SnAh);
        w.ud_node = a.node;
        w.ud_global = a.global;
        w.ud_sl = a.sl;
        w.ud_qpn = qpn;
        w.ud_qkey = qkey;
    }
}
unsafe extern "C" fn wr_unsupported(q: *mut ibv_qp_ex) {
    wb(q).1.err = libc::EOPNOTSUPP;
}
unsafe extern "C" fn wr_send_inv(q: *mut ibv_qp_ex, rkey: u32) {
    if let Some(w) = wr_new(q, IBV_WR_SEND_WITH_INV) {
        w.imm = rkey;
    }
}
unsafe extern "C" fn wr_local_inv(q: *mut ibv_qp_ex, rkey: u32) {
    if let Some(w) = wr_new(q, IBV_WR_LOCAL_INV) {
        w.imm = rkey;
    }
}
/// `ibv_wr_set_xrc_srqn`: the XRC SRQ the batch's last WR goes to.
unsafe extern "C" fn wr_set_xrc_srqn(q: *mut ibv_qp_ex, srqn: u32) {
    if let Some(w) = wr_last(q) {
        w.ud_qkey = srqn;
    }
}
/// `ibv_wr_bind_mw`: a type 2 window bound with key `rkey` (as `IBV_WR_BIND_MW`).
unsafe extern "C" fn wr_bind_mw(
    q: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    b: *const ibv_mw_bind_info,
) {
    if mw.is_null() || b.is_null() {
        wb(q).1.err = libc::EINVAL;
        return;
    }
    if let Some(w) = wr_new(q, IBV_WR_BIND_MW) {
        let i = &*b;
        let lkey = if i.mr.is_null() { 0 } else { (*i.mr).lkey };
        set_bind(w, rkey, lkey, i.addr, i.length, i.mw_access_flags);
    }
}
unsafe extern "C" fn wr_send_tso(q: *mut ibv_qp_ex, _h: *mut c_void, _hs: u16, _mss: u16) {
    wr_unsupported(q)
}
/// `ibv_wr_atomic_write`: the 8 bytes at `d` written at `raddr` at once.
unsafe extern "C" fn wr_atomic_write(q: *mut ibv_qp_ex, rkey: u32, raddr: u64, d: *const c_void) {
    if d.is_null() {
        wb(q).1.err = libc::EINVAL;
        return;
    }
    if let Some(w) = wr_remote(q, IBV_WR_ATOMIC_WRITE, rkey, raddr) {
        // SAFETY: the caller's 8 bytes (any alignment).
        w.swap = unsafe { d.cast::<u64>().read_unaligned() };
        w.len = 8;
        w.flags &= !IBV_SEND_INLINE;
    }
}

pub fn fill_qp_ex_ops(q: &mut ibv_qp_ex) {
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_bind_mw = Some(wr_bind_mw);
    q.wr_local_inv = Some(wr_local_inv);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_send_tso = Some(wr_send_tso);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_atomic_write = Some(wr_atomic_write);
}
