//! The device engine: requester transmit, responder execution, completions, progress thread.
//!
//! RC: every request message carries an MSN; the responder executes requests in order on its
//! own memory and answers with coalesced ACKs, read/atomic responses or NAKs (RNR, remote
//! access, invalid request, remote operation). The requester completes WQEs in order once
//! acknowledged; an RNR NAK rewinds transmission to the NAKed message (go-back-N) after the
//! responder's RNR timer, every message from it on (a partly pushed one too) resent from its
//! first packet; the responder acknowledges only messages whose first packet it accepted. UC/UD complete on transmission; the responder drops what it cannot
//! deliver (no receive WQE, bad rkey, UD Q_Key mismatch).

use crate::ffi::*;
use crate::wire::queues::*;
use crate::wire::shm::{kind, nak, pflag, PktHdr, PKT_MTU, SLEEPING};
use crate::wire::state::*;
use crate::wire::work::*;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

/// RNR timer encoding (IB spec table) in microseconds.
pub fn rnr_timer_us(code: u8) -> u64 {
    const T: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
        327_680, 491_520,
    ];
    T[(code & 31) as usize]
}

fn fill_req(h: &mut PktHdr, qp: &QpInner, w: &SendWqe, dst_qpn: u32, k: u8) {
    let g = global();
    *h = PktHdr {
        kind: k,
        src_node: g.node,
        src_qpn: qp.qpn,
        dst_qpn,
        msn: w.msn,
        total: w.len,
        imm: w.imm,
        rkey: w.rkey,
        raddr: w.raddr,
        compare: w.compare,
        swap: w.swap,
        sl: qp.sl.load(Ordering::Relaxed),
        // An XRC initiator's target SRQ (`state::xrc_srqn`); a UD send sets its Q_Key over it.
        qkey: w.ud_qkey,
        ..Default::default()
    };
    if matches!(w.opcode, IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM) {
        h.flags |= pflag::IMM;
    }
    if w.opcode == IBV_WR_SEND_WITH_INV {
        // `imm` carries the rkey the responder invalidates.
        h.flags |= pflag::INV;
    }
    if w.flags & IBV_SEND_SOLICITED != 0 {
        h.flags |= pflag::SOLICITED;
    }
}

/// Transmits queued WQEs as far as rings, read credits and fences allow.
pub fn tx_pump(qp: &QpInner, sq: &mut SendQueue) -> bool {
    if let Some(did) = tx_gate(qp, sq) {
        return did;
    }
    let mut did = false;
    let mut kicked: Option<std::sync::Arc<Peer>> = None;
    while sq.next != sq.tail {
        let idx = sq.next;
        if sq.at(idx).opcode == crate::mlx5::rings::WR_NOP || sq.at(idx).st == WQE_DONE {
            // mlx5 NOP (or a WQE that failed to parse): nothing goes on the wire.
            let failed = sq.at(idx).status != IBV_WC_SUCCESS;
            sq.at(idx).st = WQE_DONE;
            sq.next = idx.wrapping_add(1);
            if failed {
                qp_error(qp, sq);
                return true;
            }
            did = true;
            continue;
        }
        if matches!(sq.at(idx).opcode, IBV_WR_BIND_MW | IBV_WR_LOCAL_INV) {
            // A local operation: nothing goes on the wire; it takes effect now, in order
            // after the WQEs before it were transmitted.
            let ok = local_op(qp, sq.at(idx));
            let w = sq.at(idx);
            w.st = WQE_DONE;
            if !ok {
                w.status = IBV_WC_MW_BIND_ERR;
            }
            sq.next = idx.wrapping_add(1);
            if !ok {
                qp_error(qp, sq);
                return true;
            }
            did = true;
            continue;
        }
        let peer = wqe_peer(qp, sq, idx);
        let rd_limit = qp.max_rd_atomic.load(Ordering::Relaxed).max(1);
        let rd_out = sq.rd_outstanding;
        let w = sq.at(idx);
        if !validate_sges(w, qp.pd) {
            sq.next = idx.wrapping_add(1);
            qp_error(qp, sq);
            return true;
        }
        let Some(peer) = peer else {
            if qp.qp_type == IBV_QPT_RC {
                if !retries_exhausted(qp, sq) {
                    qp.backlog.store(true, Ordering::Relaxed);
                    break;
                }
                let w = sq.at(idx);
                w.status = IBV_WC_RETRY_EXC_ERR;
                w.st = WQE_DONE;
                sq.next = idx.wrapping_add(1);
                qp_error(qp, sq);
                return true;
            }
            // UC/UD: nobody is there; the packets are lost, the sender completes.
            w.st = WQE_DONE;
            sq.next = idx.wrapping_add(1);
            did = true;
            continue;
        };
        if qp.qp_type == IBV_QPT_RC && w.is_read_atomic() && rd_out >= rd_limit {
            break;
        }
        if w.flags & IBV_SEND_FENCE != 0 && rd_out > 0 {
            break;
        }
        let ok = transmit(qp, w, &peer);
        did = true;
        kick_on_change(&mut kicked, &peer);
        if !ok {
            qp.backlog.store(true, Ordering::Relaxed);
            break;
        }
        if qp.qp_type == IBV_QPT_RC {
            w.st = WQE_SENT;
            if w.is_read_atomic() {
                sq.rd_outstanding += 1;
            }
        } else {
            w.st = WQE_DONE;
        }
        sq.next = idx.wrapping_add(1);
    }
    if let Some(k) = kicked {
        k.kick();
    }
    if sq.next == sq.tail {
        qp.backlog.store(false, Ordering::Relaxed);
    }
    complete_in_order(qp, sq);
    did
}

/// `tx_pump`'s answer when the QP state or an RNR wait stops it before any WQE: `Some(true)`
/// after flushing an errored QP, `Some(false)` when it may not send (yet), `None` to go on.
#[inline]
fn tx_gate(qp: &QpInner, sq: &mut SendQueue) -> Option<bool> {
    let st = qp.state();
    if st == IBV_QPS_ERR {
        flush_sq(qp, sq);
        return Some(true);
    }
    if st != IBV_QPS_RTS && st != IBV_QPS_SQD {
        return Some(false);
    }
    if let Some(t) = sq.rnr_until {
        if Instant::now() < t {
            qp.backlog.store(true, Ordering::Relaxed);
            return Some(false);
        }
        sq.rnr_until = None;
    }
    None
}

/// The peer WQE `idx` goes to: its address vector's (UD) or the connected QP's, looked up
/// again once the cached one has gone.
#[inline]
fn wqe_peer(qp: &QpInner, sq: &mut SendQueue, idx: u32) -> Option<std::sync::Arc<Peer>> {
    let g = global();
    if qp.qp_type == IBV_QPT_UD {
        let w = sq.at(idx);
        return g.peer(w.ud_node, w.ud_qpn);
    }
    match &sq.peer {
        Some(p) if p.alive() => Some(p.clone()),
        _ => {
            let p = g.peer(
                qp.dest_node.load(Ordering::Relaxed),
                qp.dest_qpn.load(Ordering::Relaxed),
            );
            if p.is_some() {
                sq.peer_lost_since = None;
            }
            sq.peer = p.clone();
            p
        }
    }
}

/// Longest a requester waits for a responder that has gone (the transport timeout of an
/// `IBV_QP_TIMEOUT` of 0, infinite on hardware): softnic reports a vanished peer rather than hang.
const MAX_TRANSPORT_WAIT: Duration = Duration::from_secs(4);

/// Whether an RC requester with no responder would by now have spent its retries: a NIC resends
/// an unacknowledged request `retry_cnt` times, each after the local ACK timeout (4.096 us ·
/// 2^`timeout`), before it completes the WQE with `IBV_WC_RETRY_EXC_ERR`. softnic knows at once
/// that nobody is there, but fails the WQE no earlier than a NIC would, so that a program which
/// posts past its peer's exit (ibv_srq_pingpong can post one send per QP more than it needs)
/// first collects its outstanding completions, as it does on hardware.
fn retries_exhausted(qp: &QpInner, sq: &mut SendQueue) -> bool {
    let since = *sq.peer_lost_since.get_or_insert_with(Instant::now);
    let exp = qp.timeout.load(Ordering::Relaxed).min(31);
    let tries = qp.retry_cnt.load(Ordering::Relaxed).min(7) + 1;
    let wait = if exp == 0 {
        MAX_TRANSPORT_WAIT
    } else {
        Duration::from_nanos(4096u64 << exp)
            .saturating_mul(tries)
            .min(MAX_TRANSPORT_WAIT)
    };
    since.elapsed() >= wait
}

/// Checks a WQE's SGEs against the PD once (inline data has none); false, with the WQE done
/// in `IBV_WC_LOC_PROT_ERR`, when one is not a registered local range.
#[inline]
fn validate_sges(w: &mut SendWqe, pd: u32) -> bool {
    if w.validated || w.is_inline() {
        return true;
    }
    let write = w.is_read_atomic();
    let n = w.num_sge as usize;
    w.validated = true;
    if !check_local(&mut w.sge[..n], pd, write) {
        w.status = IBV_WC_LOC_PROT_ERR;
        w.st = WQE_DONE;
        return false;
    }
    true
}

/// Kicks the previous peer when the WQEs move on to another one; the last is kicked after
/// the loop.
#[inline]
fn kick_on_change(kicked: &mut Option<std::sync::Arc<Peer>>, peer: &std::sync::Arc<Peer>) {
    if kicked
        .as_ref()
        .is_none_or(|k| !std::sync::Arc::ptr_eq(k, peer))
    {
        if let Some(k) = kicked.take() {
            k.kick();
        }
        *kicked = Some(peer.clone());
    }
}

/// Executes a BIND_MW (`datapath::set_bind` filled it) or LOCAL_INV (`imm`: the rkey) WQE on
/// the key table; false when the device refuses it (a memory-management error).
fn local_op(qp: &QpInner, w: &SendWqe) -> bool {
    let g = global();
    if w.opcode == IBV_WR_LOCAL_INV {
        return g.invalidate_mw(w.imm, qp.pd);
    }
    g.bind_mw(&MwBind {
        rkey: w.rkey,
        qpn: qp.qpn,
        qp_pd: qp.pd,
        lkey: w.swap as u32,
        addr: w.raddr,
        len: w.compare,
        access: (w.swap >> 32) as u32,
    })
}

/// Pushes what is left of a WQE onto the peer's request ring: one packet for a read or an
/// atomic, MTU-sized packets from `w.sent` on for a send or write. False when the ring is
/// full (`w.sent` says how far it got).
#[inline]
fn transmit(qp: &QpInner, w: &mut SendWqe, peer: &Peer) -> bool {
    let dst_qpn = if qp.qp_type == IBV_QPT_UD {
        w.ud_qpn
    } else {
        qp.dest_qpn.load(Ordering::Relaxed)
    };
    let ring = peer.file.req();
    match w.opcode {
        IBV_WR_RDMA_READ
        | IBV_WR_ATOMIC_CMP_AND_SWP
        | IBV_WR_ATOMIC_FETCH_AND_ADD
        | IBV_WR_ATOMIC_WRITE => {
            let k = match w.opcode {
                IBV_WR_RDMA_READ => kind::READ,
                IBV_WR_ATOMIC_CMP_AND_SWP => kind::CMP_SWP,
                IBV_WR_ATOMIC_WRITE => kind::ATOMIC_WRITE,
                _ => kind::FETCH_ADD,
            };
            let w: &SendWqe = w;
            ring.push(|h, _| {
                fill_req(h, qp, w, dst_qpn, k);
                h.flags |= pflag::FIRST | pflag::LAST;
            })
        }
        _ => {
            let k = if matches!(
                w.opcode,
                IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_SEND_WITH_INV
            ) {
                kind::SEND
            } else {
                kind::WRITE
            };
            let qkey = if w.ud_qkey & 0x8000_0000 != 0 {
                qp.qkey.load(Ordering::Relaxed)
            } else {
                w.ud_qkey
            };
            loop {
                let off = w.sent;
                let n = (w.len - off).min(PKT_MTU as u32);
                let wr: &SendWqe = w;
                let pushed = ring.push(|h, data| {
                    fill_req(h, qp, wr, dst_qpn, k);
                    h.offset = off;
                    h.len = n;
                    h.qkey = qkey;
                    if wr.ud_global {
                        h.flags |= pflag::GRH;
                    }
                    if off == 0 {
                        h.flags |= pflag::FIRST;
                    }
                    if off + n == wr.len {
                        h.flags |= pflag::LAST;
                    }
                    // SAFETY: the SGEs were validated (or the data is inline).
                    unsafe { gather(wr, off, &mut data[..n as usize]) };
                });
                if !pushed {
                    return false;
                }
                w.sent = off + n;
                if w.sent == w.len {
                    return true;
                }
            }
        }
    }
}

/// One past the last WQE with packets on the wire: `sq.next`, or the WQE after it when a
/// full ring stopped `transmit` part way through it (`w.sent > 0`).
fn wire_end(sq: &mut SendQueue) -> u32 {
    let next = sq.next;
    if next != sq.tail && sq.at(next).sent > 0 {
        next.wrapping_add(1)
    } else {
        next
    }
}

fn find_wqe(sq: &mut SendQueue, msn: u32) -> Option<u32> {
    let end = wire_end(sq);
    if sq.head == end {
        return None;
    }
    let head_msn = sq.at(sq.head).msn;
    let idx = sq.head.wrapping_add(msn.wrapping_sub(head_msn));
    if idx.wrapping_sub(sq.head) < end.wrapping_sub(sq.head) && sq.at(idx).msn == msn {
        Some(idx)
    } else {
        None
    }
}

/// Requester side: consumes ACKs, NAKs and read/atomic responses.
pub fn process_resp(qp: &QpInner, sq: &mut SendQueue) -> bool {
    let ring = qp.file.resp();
    let mut did = false;
    while let Some(slot) = ring.peek() {
        did = true;
        let h = slot.hdr;
        match h.kind {
            kind::ACK => {
                let a = h.msn.wrapping_add(1);
                if before(sq.acked_msn, a) {
                    sq.acked_msn = a;
                    sq.rnr_left = qp.rnr_retry.load(Ordering::Relaxed);
                }
            }
            kind::READ_RESP | kind::ATOMIC_RESP => {
                if before(sq.acked_msn, h.msn) {
                    sq.acked_msn = h.msn;
                }
                if let Some(idx) = find_wqe(sq, h.msn) {
                    let w = sq.at(idx);
                    if w.st == WQE_SENT {
                        let sges = &w.sge[..w.num_sge as usize];
                        if h.kind == kind::READ_RESP {
                            // SAFETY: the SGEs were validated (LOCAL_WRITE) before sending.
                            unsafe {
                                scatter(sges, h.offset as usize, &slot.data[..h.len as usize])
                            };
                            w.resp_bytes += h.len;
                        } else {
                            let v = h.swap.to_ne_bytes();
                            let n = (w.len as usize).min(8);
                            // SAFETY: as above.
                            unsafe { scatter(sges, 0, &v[..n]) };
                        }
                        if h.flags & pflag::LAST != 0 {
                            w.st = WQE_DONE;
                            sq.rd_outstanding = sq.rd_outstanding.saturating_sub(1);
                        }
                    }
                }
            }
            kind::NAK => {
                if before(sq.acked_msn, h.msn) {
                    sq.acked_msn = h.msn;
                }
                if let Some(idx) = find_wqe(sq, h.msn) {
                    if h.code == nak::RNR {
                        handle_rnr(qp, sq, idx, h.rnr_timer);
                    } else {
                        let w = sq.at(idx);
                        w.status = match h.code {
                            nak::REM_ACCESS => IBV_WC_REM_ACCESS_ERR,
                            nak::INV_REQ => IBV_WC_REM_INV_REQ_ERR,
                            nak::REM_OP => IBV_WC_REM_OP_ERR,
                            _ => IBV_WC_RETRY_EXC_ERR,
                        };
                        w.st = WQE_DONE;
                        complete_in_order(qp, sq);
                        ring.pop();
                        qp_error(qp, sq);
                        continue;
                    }
                }
            }
            _ => {}
        }
        // The completions a response finishes are visible before the response leaves the
        // ring: another thread that finds the ring empty may then take the peer's requests
        // (`progress_qp`), and their receive completions must come after these.
        complete_in_order(qp, sq);
        ring.pop();
    }
    did
}

fn handle_rnr(qp: &QpInner, sq: &mut SendQueue, idx: u32, timer: u8) {
    let retry = qp.rnr_retry.load(Ordering::Relaxed);
    if retry != 7 {
        if sq.rnr_left == 0 {
            let w = sq.at(idx);
            w.status = IBV_WC_RNR_RETRY_EXC_ERR;
            w.st = WQE_DONE;
            complete_in_order(qp, sq);
            qp_error(qp, sq);
            return;
        }
        sq.rnr_left -= 1;
    }
    // Every WQE from the NAKed one on goes again from its first packet, including one that a
    // full ring stopped part way (resuming it at `w.sent` would send a message without its
    // FIRST packet, which the responder cannot place).
    let end = wire_end(sq);
    let mut i = idx;
    while i != end {
        let w = sq.at(i);
        w.st = WQE_QUEUED;
        w.sent = 0;
        w.resp_bytes = 0;
        i = i.wrapping_add(1);
    }
    sq.next = idx;
    let mut out = 0;
    let mut i = sq.head;
    while i != idx {
        let w = sq.at(i);
        if w.st == WQE_SENT && w.is_read_atomic() {
            out += 1;
        }
        i = i.wrapping_add(1);
    }
    sq.rd_outstanding = out;
    sq.rnr_until = Some(Instant::now() + Duration::from_micros(rnr_timer_us(timer)));
    qp.backlog.store(true, Ordering::Relaxed);
}

/// Runs both roles of one QP if there is work and nobody else holds them.
pub fn progress_qp(qp: &QpInner) -> bool {
    let mut did = false;
    if let Some(d) = qp.dv.get() {
        if d.has_new_wqes() {
            if let Ok(mut sq) = qp.sq.try_lock() {
                did |= dv_fetch(d, &mut sq);
                did |= tx_pump(qp, &mut sq);
            }
        }
        for cq in [&qp.send_cq, &qp.recv_cq] {
            if let Some(dc) = cq.dv.get() {
                if let Ok(mut st) = dc.state.try_lock() {
                    if !st.pending.is_empty() {
                        dc.drain(&mut st);
                    }
                }
            }
        }
    }
    // Responses (ACKs) before requests: a peer acknowledges a message on receipt, before its
    // program can answer it, so an ACK waiting here was sent before any request that answers
    // the acknowledged message, and a NIC meets them in that order on the wire. Taking the
    // request first completed the answer's receive before the acknowledged send — tgtd took a
    // SCSI command for a protocol error because the send completion of its login response,
    // which moves its connection to the full-feature phase, came after the command. So
    // requests also wait while a response is left (another thread holds the send queue, or
    // one arrived meanwhile): whoever runs this next takes it first.
    if qp.file.resp().has_data() || qp.backlog.load(Ordering::Relaxed) {
        if let Ok(mut sq) = qp.sq.try_lock() {
            did |= process_resp(qp, &mut sq);
            if qp.backlog.load(Ordering::Relaxed) || sq.next != sq.tail {
                did |= tx_pump(qp, &mut sq);
            }
        }
    }
    if qp.file.resp().has_data() {
        return true;
    }
    let pass =
        |r: &mut Responder| global().responder_pass(|| crate::wire::responder::process_req(qp, r));
    if qp.file.req().has_data() {
        if let Ok(mut r) = qp.resp.try_lock() {
            did |= pass(&mut r);
        }
    } else if let Ok(mut r) = qp.resp.try_lock() {
        if r.read.is_some() || r.ack_pending.is_some() {
            did |= pass(&mut r);
        }
    }
    did
}

/// Starts the process's progress thread (once), with every signal blocked: a NIC adds no
/// thread to the program, so none of the program's process-directed signals may land on ours
/// (tgtd blocks SIGUSR2 in its threads and reads it from a signalfd; delivered to a softnic
/// thread that had it unblocked, its default action ended the process).
pub fn start(g: &'static Global) {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        // SAFETY: sigset_t is plain data; only the calling thread's mask changes, and it is
        // restored right after the spawn (the new thread inherits the full mask).
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let spawned = std::thread::Builder::new()
                .name("softnic-engine".into())
                .spawn(move || engine_thread(g));
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            spawned.expect("spawn softnic engine");
        }
    });
}

/// The per-process progress thread: spins briefly after work, then sleeps on its futex word.
pub fn engine_thread(g: &'static Global) {
    short_slice();
    let word = g.proc.word();
    let mut last_work = Instant::now();
    let mut idle_since = last_work;
    let mut last_check = Instant::now();
    let spin = Duration::from_micros(
        std::env::var("SOFTNIC_SPIN_US")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(500),
    );
    let mut n: u32 = 0;
    loop {
        let mut did = false;
        let mut pending = false;
        let mut dv_busy = false;
        {
            let qps = g.qps.read().unwrap_or_else(|e| e.into_inner());
            for qp in qps.iter() {
                did |= progress_qp(qp);
                pending |= qp.backlog.load(Ordering::Relaxed);
                // Direct-posted QPs with WQEs in flight: their program polls ring memory and
                // never calls in, so keep serving them instead of sleeping.
                if qp.dv.get().is_some() {
                    dv_busy |= qp.sq.try_lock().map_or(true, |sq| !sq.is_empty());
                }
            }
        }
        if last_check.elapsed() > Duration::from_millis(50) {
            last_check = Instant::now();
            let qps = g.qps.read().unwrap_or_else(|e| e.into_inner());
            for qp in qps.iter() {
                did |= reap_dead_peer(qp);
            }
        }
        if did {
            last_work = Instant::now();
            idle_since = last_work;
            continue;
        }
        // While the application busy-polls its CQs it drives progress itself: do not compete
        // for the CPU, sleep (briefly, in case it stops polling).
        let now = now_ns();
        let app_polling = {
            let qps = g.qps.read().unwrap_or_else(|e| e.into_inner());
            qps.iter()
                .map(|q| q.file.hdr().poll_stamp.load(Ordering::Relaxed))
                .any(|s| s != 0 && now.wrapping_sub(s) < 10_000_000)
        };
        n = n.wrapping_add(1);
        if n.is_multiple_of(16) && !dv_busy {
            // (a program busy-polling its CQE ring keeps the CPU for a whole time slice after
            // a yield: do not yield while its WQEs are in flight)
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        if dv_busy || (!app_polling && (!n.is_multiple_of(64) || last_work.elapsed() < spin)) {
            continue;
        }
        word.state.store(SLEEPING, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let work = {
            let qps = g.qps.read().unwrap_or_else(|e| e.into_inner());
            qps.iter()
                .any(|q| q.file.req().has_data() || q.file.resp().has_data())
        };
        if !work {
            let t = if pending {
                50_000
            } else if g.has_dv.load(Ordering::Relaxed) {
                // Doorbell records are plain memory: poll them, every 100 us while direct
                // posting is active, backing off to 2 ms after 20 ms of silence.
                if idle_since.elapsed() < Duration::from_millis(20) {
                    100_000
                } else {
                    2_000_000
                }
            } else if app_polling {
                200_000
            } else {
                500_000_000
            };
            crate::wire::shm::futex_wait(&word.state, SLEEPING, Some(t));
        }
        word.state.store(crate::wire::shm::AWAKE, Ordering::SeqCst);
        last_work = Instant::now();
    }
}

/// Asks the (EEVDF) scheduler for a short time slice (sched_attr.sched_runtime, unprivileged for
/// SCHED_OTHER since Linux 6.12): a woken engine thread then gets an earlier virtual deadline and
/// preempts an application thread that busy-polls its memory (ib_write_lat) instead of waiting
/// for the end of that thread's slice. Best effort: older kernels ignore or reject it.
pub fn short_slice() {
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
        util_min: u32,
        util_max: u32,
    }
    let us: u64 = std::env::var("SOFTNIC_ENGINE_SLICE_US")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    if us == 0 {
        return;
    }
    let a = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice: 0,
        priority: 0,
        runtime: us * 1000,
        deadline: 0,
        period: 0,
        util_min: 0,
        util_max: 0,
    };
    // SAFETY: sched_setattr on the calling thread with a valid, fully initialised attribute.
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &a as *const SchedAttr, 0) };
}

/// Takes the WQEs a program published in an exposed SQ (dbrec[1]) into the send queue.
fn dv_fetch(d: &crate::mlx5::rings::DvQp, sq: &mut SendQueue) -> bool {
    let pi = d.sq_pi();
    let mut idx = d.sq_seen.load(Ordering::Relaxed);
    let mut bad = false;
    while idx != pi && sq.len() < sq.max_wr && !bad {
        let tail = sq.tail;
        let msn = sq.next_msn;
        let w = sq.at(tail);
        // SAFETY: the program published this WQE through the doorbell record.
        let r = unsafe { crate::mlx5::rings::parse_wqe(d, idx, w) };
        let bbs = match r {
            Ok(bbs) => {
                w.status = IBV_WC_SUCCESS;
                w.st = WQE_QUEUED;
                bbs
            }
            Err((bbs, crate::mlx5::rings::BadWqe(status))) => {
                w.status = status;
                w.st = WQE_DONE;
                bad = true;
                bbs
            }
        };
        w.msn = msn;
        w.sent = 0;
        w.resp_bytes = 0;
        w.validated = false;
        // A NOP (or a WQE that failed to parse) never goes on the wire: it must not take a
        // message sequence number, or the responder would wait forever for the missing one.
        if w.st != WQE_DONE && w.opcode != crate::mlx5::rings::WR_NOP {
            sq.next_msn = msn.wrapping_add(1);
        }
        sq.tail = tail.wrapping_add(1);
        idx = (idx + bbs) & 0xffff;
    }
    d.sq_seen.store(idx, Ordering::Relaxed);
    true
}

/// True when the process owning a peer QP no longer exists (or the QP was destroyed).
fn peer_gone(p: &Peer) -> bool {
    if !p.alive() {
        return true;
    }
    crate::wire::shm::pid_gone(p.file.hdr().owner_pid.load(Ordering::Relaxed))
}

/// An RC requester whose responder vanished (process exited, QP destroyed) can never be
/// acknowledged: as a NIC's retry counter would, complete with IBV_WC_RETRY_EXC_ERR.
fn reap_dead_peer(qp: &QpInner) -> bool {
    if qp.qp_type != IBV_QPT_RC || qp.state() == IBV_QPS_ERR {
        return false;
    }
    let Ok(mut sq) = qp.sq.try_lock() else {
        return false;
    };
    if sq.head == sq.next || !sq.peer.as_ref().is_some_and(|p| peer_gone(p)) {
        return false;
    }
    // A responder acknowledges, then exits: its last ACKs may have arrived since this pass
    // looked at the response ring. They count before the peer's absence does.
    let acked = qp.file.resp().has_data() && process_resp(qp, &mut sq);
    if sq.head == sq.next || !retries_exhausted(qp, &mut sq) {
        return acked;
    }
    let head = sq.head;
    let w = sq.at(head);
    w.status = IBV_WC_RETRY_EXC_ERR;
    w.st = WQE_DONE;
    qp_error(qp, &mut sq);
    true
}
