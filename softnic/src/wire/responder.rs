//! Responder role: executes inbound requests on this process's own memory (SEND delivery into
//! receive WQEs, RDMA WRITE/READ, atomics), answers with coalesced ACKs, read/atomic responses
//! and NAKs (RNR, remote access, invalid request, remote operation), and drops what UC/UD
//! cannot deliver.

use crate::ffi::*;
use crate::wire::queues::{
    before, check_local, check_remote, place, qp_error, scatter, sge_capacity, still_registered,
};
use crate::wire::shm::{kind, nak, pflag, PktHdr, Slot, PKT_MTU};
use crate::wire::state::*;
use crate::wire::work::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Outcome of handling one request packet.
enum Step {
    Consumed,
    Blocked,
}

/// Pushes a response to the requester (flushing a pending coalesced ACK first).
fn push_resp(
    qp: &QpInner,
    r: &mut Responder,
    fill: impl FnOnce(&mut PktHdr, &mut [u8; PKT_MTU]),
) -> bool {
    let Some(peer) = r.peer.clone() else {
        return false;
    };
    let ring = peer.file.resp();
    if let Some(m) = r.ack_pending {
        let dst = qp.dest_qpn.load(Ordering::Relaxed);
        if !ring.push(|h, _| ack_hdr(h, qp, dst, m)) {
            return false;
        }
        r.ack_pending = None;
    }
    let ok = ring.push(fill);
    peer.kick();
    ok
}

fn ack_hdr(h: &mut PktHdr, qp: &QpInner, dst: u32, msn: u32) {
    *h = PktHdr {
        kind: kind::ACK,
        src_node: global().node,
        src_qpn: qp.qpn,
        dst_qpn: dst,
        msn,
        ..Default::default()
    };
}

fn nak_hdr(h: &mut PktHdr, qp: &QpInner, msn: u32, code: u8) {
    *h = PktHdr {
        kind: kind::NAK,
        code,
        rnr_timer: qp.min_rnr_timer.load(Ordering::Relaxed) as u8,
        src_node: global().node,
        src_qpn: qp.qpn,
        dst_qpn: qp.dest_qpn.load(Ordering::Relaxed),
        msn,
        ..Default::default()
    };
}

fn recv_complete(qp: &QpInner, rw: &RecvWqe, h: &PktHdr, status: u32, with_imm_write: bool) {
    // A SEND with invalidate invalidates the type 2 window it names (on this QP's PD) as it
    // completes; naming none, the receive fails (local protection error).
    let status = if status == IBV_WC_SUCCESS
        && h.flags & pflag::INV != 0
        && !global().invalidate_mw(h.imm, remote_pd(qp, h))
    {
        IBV_WC_LOC_PROT_ERR
    } else {
        status
    };
    let mut wc = wc_for(
        qp.qpn,
        rw.wr_id,
        status,
        if with_imm_write {
            IBV_WC_RECV_RDMA_WITH_IMM
        } else {
            IBV_WC_RECV
        },
    );
    if status == IBV_WC_SUCCESS {
        wc.byte_len = h.total;
        if h.flags & pflag::IMM != 0 {
            wc.wc_flags |= IBV_WC_WITH_IMM;
            wc.__bindgen_anon_1.imm_data = h.imm;
        }
        if h.flags & pflag::INV != 0 {
            wc.wc_flags |= IBV_WC_WITH_INV;
            wc.__bindgen_anon_1.invalidated_rkey = h.imm;
        }
        wc.src_qp = h.src_qpn;
        wc.slid = node_lid(h.src_node);
        wc.sl = h.sl as u8;
        if qp.qp_type == IBV_QPT_UD {
            wc.byte_len = h.total + 40;
            if h.flags & pflag::GRH != 0 {
                wc.wc_flags |= IBV_WC_GRH;
            }
        }
    }
    let solicited = h.flags & pflag::SOLICITED != 0;
    if qp.xrcd != 0 {
        // An XRC target's receives complete on the CQ of the XRC SRQ they came from.
        if let Some((s, x)) =
            xrc_target(qp, h).and_then(|s| s.xrc.as_ref().map(|x| (s.srqn, x.cq.clone())))
        {
            x.push_full(wc, solicited, 0, s, rw.idx as u16);
        }
        return;
    }
    let srqn = qp.srq.as_ref().map_or(0, |s| s.srqn);
    qp.recv_cq.push_full(wc, solicited, 0, srqn, rw.idx as u16);
}

/// The XRC SRQ a request to an XRC target QP names, in the QP's XRC domain (None: not an XRC
/// target, or no such SRQ).
fn xrc_target(qp: &QpInner, h: &PktHdr) -> Option<std::sync::Arc<SrqInner>> {
    if qp.xrcd == 0 {
        return None;
    }
    global().xrc_srq(xrc_srqn(h), qp.xrcd)
}

/// The protection domain a request's remote access is checked in, and a receive's local
/// SGEs: an XRC target QP has none of its own — its request's XRC SRQ gives it (none fits
/// when there is no such SRQ); a QP on an SRQ, the SRQ's for receives.
fn remote_pd(qp: &QpInner, h: &PktHdr) -> u32 {
    if qp.xrcd != 0 {
        return xrc_target(qp, h).map_or(u32::MAX, |s| s.pd);
    }
    qp.pd
}

/// [`check_remote`] of the range a request names (`len` bytes at its `raddr` under its
/// `rkey`), in the protection domain it is checked in ([`remote_pd`]).
fn check_request(qp: &QpInner, h: &PktHdr, len: u64, need: u32) -> Option<u64> {
    check_remote(qp, remote_pd(qp, h), h.rkey, h.raddr, len, need)
}

fn recv_pd(qp: &QpInner, h: &PktHdr) -> u32 {
    if qp.xrcd != 0 {
        return remote_pd(qp, h);
    }
    qp.srq.as_ref().map_or(qp.pd, |s| s.pd)
}

/// A responder-side fatal error: NAK the requester (RC), error the QP and flush.
fn responder_fatal(qp: &QpInner, r: &mut Responder, h: &PktHdr, code: u8) -> Step {
    if qp.qp_type == IBV_QPT_RC && !push_resp(qp, r, |o, _| nak_hdr(o, qp, h.msn, code)) {
        return Step::Blocked;
    }
    r.cur = None;
    // The responder QP's error is an affiliated asynchronous event, as hardware raises it.
    let event = match code {
        nak::REM_ACCESS => IBV_EVENT_QP_ACCESS_ERR,
        nak::INV_REQ => IBV_EVENT_QP_REQ_ERR,
        _ => IBV_EVENT_QP_FATAL,
    };
    if qp.state.load(Ordering::Acquire) != IBV_QPS_ERR {
        raise_async(event, AsyncObj::Qp(qp.qp_ptr));
    }
    let mut sq = qp.sq.lock().unwrap_or_else(|e| e.into_inner());
    qp_error(qp, &mut sq);
    Step::Consumed
}

/// Takes the receive WQE for a new inbound message; on none: RNR NAK (RC) or drop (UC).
/// Returns Err(step) when the caller must stop with that step.
fn begin_recv(qp: &QpInner, r: &mut Responder, h: &PktHdr) -> Result<Option<RecvWqe>, Step> {
    let taken = if qp.xrcd != 0 {
        match xrc_target(qp, h) {
            Some(s) => s.take(),
            // Naming no XRC SRQ of the target's domain: an invalid request.
            None => return Err(responder_fatal(qp, r, h, nak::INV_REQ)),
        }
    } else {
        qp.take_recv()
    };
    match taken {
        Some(rw) => Ok(Some(rw)),
        None if qp.qp_type == IBV_QPT_RC => {
            if !push_resp(qp, r, |o, _| nak_hdr(o, qp, h.msn, nak::RNR)) {
                return Err(Step::Blocked);
            }
            r.nak_sent = true;
            Err(Step::Consumed)
        }
        None => {
            r.cur = Some(CurMsg {
                msn: h.msn,
                recv: None,
                drop: true,
                host: 0,
            });
            Err(Step::Consumed)
        }
    }
}

/// The message in progress for this packet: Ok(recv) to deliver, Err(()) to drop the packet.
fn cur_for(r: &mut Responder, h: &PktHdr) -> Result<(Option<RecvWqe>, u64), ()> {
    match r.cur.as_ref() {
        Some(c) if c.msn == h.msn && !c.drop => Ok((c.recv, c.host)),
        Some(c) if c.msn == h.msn => {
            if h.flags & pflag::LAST != 0 {
                r.cur = None;
            }
            Err(())
        }
        _ => Err(()),
    }
}

/// Handles a SEND packet (RC/UC).
fn rx_send(qp: &QpInner, r: &mut Responder, slot: &Slot) -> Step {
    let h = slot.hdr;
    if h.flags & pflag::FIRST != 0 {
        let mut rw = match begin_recv(qp, r, &h) {
            Ok(rw) => rw.expect("receive WQE"),
            Err(step) => return step,
        };
        let pd = recv_pd(qp, &h);
        let n = rw.num_sge as usize;
        let (status, code) = if sge_capacity(&rw) < h.total as u64 {
            (IBV_WC_LOC_LEN_ERR, nak::INV_REQ)
        } else if !check_local(&mut rw.sge[..n], pd, true) {
            (IBV_WC_LOC_PROT_ERR, nak::REM_OP)
        } else {
            (IBV_WC_SUCCESS, 0)
        };
        if status != IBV_WC_SUCCESS {
            recv_complete(qp, &rw, &h, status, false);
            return responder_fatal(qp, r, &h, code);
        }
        r.cur = Some(CurMsg {
            msn: h.msn,
            recv: Some(rw),
            drop: false,
            host: 0,
        });
    }
    let Ok((Some(rw), _)) = cur_for(r, &h) else {
        return Step::Consumed;
    };
    if h.flags & pflag::FIRST == 0 {
        // Deregistered since the message's first packet (an earlier pass)?
        if !still_registered(&rw.sge[..rw.num_sge as usize]) {
            recv_complete(qp, &rw, &h, IBV_WC_LOC_PROT_ERR, false);
            r.cur = None;
            return responder_fatal(qp, r, &h, nak::REM_OP);
        }
    }
    // SAFETY: the receive SGEs were validated in this pass (the first packet's, or above).
    unsafe {
        scatter(
            &rw.sge[..rw.num_sge as usize],
            h.offset as usize,
            &slot.data[..h.len as usize],
        )
    };
    if h.flags & pflag::LAST != 0 {
        ack_before_completion(qp, r, &h);
        recv_complete(qp, &rw, &h, IBV_WC_SUCCESS, false);
        r.cur = None;
    }
    Step::Consumed
}

/// RC: acknowledges the message `h` ends now, before its receive completion becomes visible,
/// as a NIC acknowledges on receipt — so the requester has the ACK before the program here can
/// act on the message (answer it, or disconnect: a coalesced ACK sent at the end of the pass
/// could come after the peer's move to ERR, which would flush a WR that was delivered).
/// Messages without a receive completion (RDMA writes) stay coalesced.
fn ack_before_completion(qp: &QpInner, r: &mut Responder, h: &PktHdr) {
    if qp.qp_type != IBV_QPT_RC {
        return;
    }
    r.ack_pending = Some(h.msn);
    flush_ack(qp, r);
    if r.ack_pending.is_none() {
        r.acked_early = Some(h.msn);
    }
}

/// Handles an RDMA WRITE packet (RC/UC), with immediate when flagged.
fn rx_write(qp: &QpInner, r: &mut Responder, slot: &Slot) -> Step {
    let h = slot.hdr;
    let imm = h.flags & pflag::IMM != 0;
    if h.flags & pflag::FIRST != 0 {
        let Some(host) = check_request(qp, &h, h.total as u64, IBV_ACCESS_REMOTE_WRITE) else {
            if qp.qp_type != IBV_QPT_RC {
                r.cur = Some(CurMsg {
                    msn: h.msn,
                    recv: None,
                    drop: true,
                    host: 0,
                });
                return Step::Consumed;
            }
            return responder_fatal(qp, r, &h, nak::REM_ACCESS);
        };
        let recv = if imm {
            match begin_recv(qp, r, &h) {
                Ok(rw) => rw,
                Err(step) => return step,
            }
        } else {
            None
        };
        r.cur = Some(CurMsg {
            msn: h.msn,
            recv,
            drop: false,
            host,
        });
    }
    let Ok((recv, host)) = cur_for(r, &h) else {
        return Step::Consumed;
    };
    if h.flags & pflag::FIRST == 0
        && host != 0
        && check_request(qp, &h, h.total as u64, IBV_ACCESS_REMOTE_WRITE) != Some(host)
    {
        // Deregistered since the message's first packet (an earlier pass).
        return responder_fatal(qp, r, &h, nak::REM_ACCESS);
    }
    if h.len > 0 {
        // SAFETY: the range was validated against a registered MR with REMOTE_WRITE.
        unsafe {
            place(
                slot.data.as_ptr(),
                (host + h.offset as u64) as usize as *mut u8,
                h.len as usize,
            )
        };
    }
    if h.flags & pflag::LAST != 0 {
        if let Some(rw) = recv {
            ack_before_completion(qp, r, &h);
            recv_complete(qp, &rw, &h, IBV_WC_SUCCESS, true);
        }
        r.cur = None;
    }
    Step::Consumed
}

fn continue_read(qp: &QpInner, r: &mut Responder) -> bool {
    while let Some(job) = r.read.as_ref() {
        let (msn, raddr, total, off) = (job.msn, job.raddr, job.total, job.offset);
        // The region may have been deregistered since the request (a later pass): then the
        // rest of the read fails as a NIC's would, with a remote access error.
        let range = (job.rkey, job.iova, total as u64);
        if check_remote(
            qp,
            job.pd,
            range.0,
            range.1,
            range.2,
            IBV_ACCESS_REMOTE_READ,
        ) != Some(raddr)
        {
            r.read = None;
            let h = PktHdr {
                msn,
                ..Default::default()
            };
            responder_fatal(qp, r, &h, nak::REM_ACCESS);
            return true;
        }
        let n = (total - off).min(PKT_MTU as u32);
        let dst = qp.dest_qpn.load(Ordering::Relaxed);
        let ok = push_resp(qp, r, |h, data| {
            *h = PktHdr {
                kind: kind::READ_RESP,
                src_node: global().node,
                src_qpn: qp.qpn,
                dst_qpn: dst,
                msn,
                offset: off,
                len: n,
                total,
                ..Default::default()
            };
            if off + n == total {
                h.flags = pflag::LAST;
            }
            if n > 0 {
                // SAFETY: validated against a registered MR with REMOTE_READ.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (raddr + off as u64) as usize as *const u8,
                        data.as_mut_ptr(),
                        n as usize,
                    )
                };
            }
        });
        if !ok {
            return false;
        }
        let job = r.read.as_mut().expect("read job");
        job.offset += n;
        if job.offset == job.total {
            r.read = None;
        }
    }
    true
}

fn rx_rc(qp: &QpInner, r: &mut Responder, slot: &Slot) -> Step {
    let h = slot.hdr;
    if before(h.msn, r.expected_msn) {
        r.ack_pending = Some(r.expected_msn.wrapping_sub(1));
        return Step::Consumed;
    }
    if h.msn != r.expected_msn {
        return Step::Consumed;
    }
    if r.nak_sent {
        if h.flags & pflag::FIRST == 0 {
            return Step::Consumed;
        }
        r.nak_sent = false;
    }
    if matches!(h.kind, kind::SEND | kind::WRITE)
        && h.flags & pflag::FIRST == 0
        && r.cur.as_ref().is_none_or(|c| c.msn != h.msn)
    {
        // The middle or end of a message whose FIRST packet was not accepted: nothing of it
        // was placed, so it must not be acknowledged (the requester retransmits it whole).
        return Step::Consumed;
    }
    let step = match h.kind {
        kind::SEND => rx_send(qp, r, slot),
        kind::WRITE => rx_write(qp, r, slot),
        kind::READ => {
            let Some(host) = check_request(qp, &h, h.total as u64, IBV_ACCESS_REMOTE_READ) else {
                return responder_fatal(qp, r, &h, nak::REM_ACCESS);
            };
            r.read = Some(ReadJob {
                pd: remote_pd(qp, &h),
                msn: h.msn,
                rkey: h.rkey,
                iova: h.raddr,
                raddr: host,
                total: h.total,
                offset: 0,
            });
            r.expected_msn = h.msn.wrapping_add(1);
            return Step::Consumed;
        }
        kind::CMP_SWP | kind::FETCH_ADD => {
            if !h.raddr.is_multiple_of(8) {
                return responder_fatal(qp, r, &h, nak::INV_REQ);
            }
            let Some(host) = check_request(qp, &h, 8, IBV_ACCESS_REMOTE_ATOMIC) else {
                return responder_fatal(qp, r, &h, nak::REM_ACCESS);
            };
            let dst = qp.dest_qpn.load(Ordering::Relaxed);
            let ok = push_resp(qp, r, |o, _| {
                // SAFETY: 8-byte aligned, inside a registered MR with REMOTE_ATOMIC.
                let a = unsafe { AtomicU64::from_ptr(host as usize as *mut u64) };
                let old = if h.kind == kind::CMP_SWP {
                    match a.compare_exchange(h.compare, h.swap, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(v) | Err(v) => v,
                    }
                } else {
                    a.fetch_add(h.compare, Ordering::AcqRel)
                };
                *o = PktHdr {
                    kind: kind::ATOMIC_RESP,
                    flags: pflag::LAST,
                    src_node: global().node,
                    src_qpn: qp.qpn,
                    dst_qpn: dst,
                    msn: h.msn,
                    swap: old,
                    total: 8,
                    ..Default::default()
                };
            });
            if !ok {
                return Step::Blocked;
            }
            r.expected_msn = h.msn.wrapping_add(1);
            return Step::Consumed;
        }
        kind::ATOMIC_WRITE => rx_atomic_write(qp, r, &h),
        _ => Step::Consumed,
    };
    if let Step::Consumed = step {
        if h.flags & pflag::LAST != 0 && !r.nak_sent && qp.state() != IBV_QPS_ERR {
            r.expected_msn = h.msn.wrapping_add(1);
            if r.acked_early != Some(h.msn) {
                r.ack_pending = Some(h.msn);
            }
        }
    }
    step
}

/// An RDMA atomic write: 8 bytes at an 8-byte aligned address of a region the requester may
/// write, stored at once (no reader sees half of them); acknowledged as a write.
fn rx_atomic_write(qp: &QpInner, r: &mut Responder, h: &PktHdr) -> Step {
    if !h.raddr.is_multiple_of(8) {
        return responder_fatal(qp, r, h, nak::INV_REQ);
    }
    let Some(host) = check_request(qp, h, 8, IBV_ACCESS_REMOTE_WRITE) else {
        return responder_fatal(qp, r, h, nak::REM_ACCESS);
    };
    // SAFETY: 8-byte aligned, inside a registered region with REMOTE_WRITE (checked now, in
    // this responder pass: a deregistration waits for it).
    unsafe { AtomicU64::from_ptr(host as usize as *mut u64) }.store(h.swap, Ordering::Release);
    Step::Consumed
}

fn rx_ud(qp: &QpInner, slot: &Slot) {
    let h = slot.hdr;
    if h.qkey != qp.qkey.load(Ordering::Relaxed) || h.kind != kind::SEND {
        return;
    }
    let Some(mut rw) = qp.take_recv() else {
        return;
    };
    let pd = qp.srq.as_ref().map_or(qp.pd, |s| s.pd);
    let n = rw.num_sge as usize;
    if sge_capacity(&rw) < h.total as u64 + 40 {
        recv_complete(qp, &rw, &h, IBV_WC_LOC_LEN_ERR, false);
    } else if !check_local(&mut rw.sge[..n], pd, true) {
        recv_complete(qp, &rw, &h, IBV_WC_LOC_PROT_ERR, false);
    } else {
        let mut grh = [0u8; 40];
        if h.flags & pflag::GRH != 0 {
            grh[0] = 0x60;
            grh[4..6].copy_from_slice(&((h.total as u16).to_be_bytes()));
            grh[6] = 0x1b;
            grh[7] = 64;
            grh[8..24].copy_from_slice(&node_gid(h.src_node));
            grh[24..40].copy_from_slice(&node_gid(global().node));
        }
        let sges = &rw.sge[..n];
        // SAFETY: validated receive SGEs with enough capacity.
        unsafe {
            scatter(sges, 0, &grh);
            scatter(sges, 40, &slot.data[..h.len as usize]);
        }
        recv_complete(qp, &rw, &h, IBV_WC_SUCCESS, false);
    }
}

/// Responder side: executes requests waiting in the QP's request ring.
pub fn process_req(qp: &QpInner, r: &mut Responder) -> bool {
    let ring = qp.file.req();
    let mut did = false;
    if qp.qp_type == IBV_QPT_RC && r.peer.as_ref().is_none_or(|p| !p.alive()) {
        r.peer = global().peer(
            qp.dest_node.load(Ordering::Relaxed),
            qp.dest_qpn.load(Ordering::Relaxed),
        );
    }
    loop {
        if r.read.is_some() && !continue_read(qp, r) {
            break;
        }
        let Some(slot) = ring.peek() else { break };
        let st = qp.state();
        if st == IBV_QPS_RESET || st == IBV_QPS_INIT {
            break;
        }
        did = true;
        if st == IBV_QPS_ERR {
            if qp.qp_type == IBV_QPT_RC && slot.hdr.flags & pflag::FIRST != 0 {
                let h = slot.hdr;
                if !push_resp(qp, r, |o, _| nak_hdr(o, qp, h.msn, nak::FATAL)) {
                    break;
                }
            }
            ring.pop();
            continue;
        }
        let step = match qp.qp_type {
            IBV_QPT_RC => rx_rc(qp, r, slot),
            IBV_QPT_UD => {
                rx_ud(qp, slot);
                Step::Consumed
            }
            _ => match slot.hdr.kind {
                kind::SEND => rx_send(qp, r, slot),
                kind::WRITE => rx_write(qp, r, slot),
                _ => Step::Consumed,
            },
        };
        match step {
            Step::Consumed => ring.pop(),
            Step::Blocked => break,
        }
    }
    flush_ack(qp, r);
    did
}

/// Sends a coalesced ACK still pending (if the requester's response ring has room).
pub fn flush_ack(qp: &QpInner, r: &mut Responder) {
    if let Some(m) = r.ack_pending {
        if let Some(peer) = r.peer.clone() {
            let dst = qp.dest_qpn.load(Ordering::Relaxed);
            if peer.file.resp().push(|h, _| ack_hdr(h, qp, dst, m)) {
                r.ack_pending = None;
                peer.kick();
            }
        }
    }
}
