//! Queue mechanics shared by the requester (engine) and the responder: checking local and
//! remote access against registered memory, gathering and scattering payload, completing send
//! WQEs in order, and moving a QP to the error state with both queues flushed.

use crate::ffi::*;
use crate::wire::state::*;
use crate::wire::work::*;
use std::sync::atomic::Ordering;

#[inline]
pub(crate) fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The pieces of `len` message bytes starting at offset `off` of a scatter/gather list: for
/// each, its host address, its offset in the `len` bytes and its length.
fn sge_pieces(
    sges: &[ibv_sge],
    off: usize,
    len: usize,
) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let (mut skip, mut done) = (off, 0usize);
    sges.iter()
        .map_while(move |s| {
            if done == len {
                return None;
            }
            let l = s.length as usize;
            if skip >= l {
                skip -= l;
                return Some(None);
            }
            let n = (l - skip).min(len - done);
            let piece = (s.addr as usize + skip, done, n);
            done += n;
            skip = 0;
            Some(Some(piece))
        })
        .flatten()
}

/// Copies `dst.len()` bytes starting at message offset `off` out of the WQE's data.
///
/// # Safety
/// SGE addresses must have been validated against registered memory.
pub(crate) unsafe fn gather(w: &SendWqe, off: u32, dst: &mut [u8]) {
    if w.is_inline() {
        dst.copy_from_slice(&w.inline_buf[off as usize..off as usize + dst.len()]);
        return;
    }
    let sges = &w.sge[..w.num_sge as usize];
    for (addr, at, n) in sge_pieces(sges, off as usize, dst.len()) {
        std::ptr::copy_nonoverlapping(addr as *const u8, dst[at..].as_mut_ptr(), n);
    }
}

/// Copies `src` into a scatter list at byte offset `off`, in ascending address order
/// ([`place`]).
///
/// # Safety
/// SGE addresses must have been validated against registered memory.
pub(crate) unsafe fn scatter(sges: &[ibv_sge], off: usize, src: &[u8]) {
    for (addr, at, n) in sge_pieces(sges, off, src.len()) {
        place(src[at..at + n].as_ptr(), addr as *mut u8, n);
    }
}

/// Bytes at the end of a placed range written in ascending order after the rest (aligned
/// 8-byte words of them in one store each).
const ORDERED_TAIL: usize = 64;

/// Copies `n` bytes from `src` to the program's memory at `dst` the way a NIC's DMA lands
/// them: no byte becomes visible before the bytes below it, and an aligned 8-byte word is
/// never seen half written. Programs rely on both — Open MPI's openib BTL polls the last bytes
/// of an eager RDMA fragment and then reads its header at the start; GPU-initiated code
/// (NVSHMEM signals, the examples' BFS barrier) polls an 8-byte word that one RDMA write
/// updates — and a plain `memcpy` breaks the first: glibc's copies above 256 bytes store the
/// first vector last (openib then read a zero tag and called a null callback, one run in ~75).
/// So everything but the last [`ORDERED_TAIL`] bytes is copied first, then a fence (which also
/// orders any non-temporal stores of the copy), then the tail upwards, each aligned 8-byte
/// word of it in one store and the bytes around them one by one (x86 makes ordinary stores
/// visible in program order). Byte by byte throughout, a reader saw the low half of a new
/// 8-byte word with the high half of the old one.
///
/// # Safety
/// `src` readable and `dst` writable for `n` bytes, not overlapping.
pub(crate) unsafe fn place(src: *const u8, dst: *mut u8, n: usize) {
    let head = n.saturating_sub(ORDERED_TAIL);
    // SAFETY: per the caller; head <= n.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    std::sync::atomic::fence(Ordering::SeqCst);
    let mut i = head;
    while i < n {
        let at = dst.wrapping_add(i);
        if (at as usize).is_multiple_of(8) && n - i >= 8 {
            // SAFETY: i + 8 <= n, inside both ranges; `at` is 8-byte aligned; volatile so that
            // the word is one store, in this order.
            unsafe {
                let word = src.add(i).cast::<u64>().read_unaligned();
                at.cast::<u64>().write_volatile(word);
            }
            i += 8;
        } else {
            // SAFETY: i < n, inside both ranges; volatile so that the stores stay single bytes
            // in this order.
            unsafe { at.write_volatile(src.add(i).read()) };
            i += 1;
        }
    }
}

/// Checks a local scatter/gather list (`write` requires IBV_ACCESS_LOCAL_WRITE) and rewrites
/// each address from the MR's IOVA space to a host address.
pub(crate) fn check_local(sges: &mut [ibv_sge], pd: u32, write: bool) -> bool {
    let g = global();
    sges.iter_mut()
        .filter(|s| s.length > 0)
        .all(|s| match g.mr(s.lkey) {
            Some(m)
                if m.mw == 0
                    && m.pd == pd
                    && m.contains(s.addr, s.length as u64)
                    && (!write || m.access & IBV_ACCESS_LOCAL_WRITE != 0) =>
            {
                s.addr = m.host(s.addr);
                true
            }
            _ => false,
        })
}

/// Whether SGEs that [`check_local`] rewrote to host addresses still lie in registered MRs under
/// their lkeys: a region deregistered (or moved) since fails.
pub(crate) fn still_registered(sges: &[ibv_sge]) -> bool {
    let g = global();
    sges.iter().filter(|s| s.length > 0).all(|s| {
        g.mr(s.lkey).is_some_and(|m| {
            m.mw == 0 && s.addr >= m.addr && s.addr + s.length as u64 <= m.addr + m.len
        })
    })
}

/// Checks a remote access (rkey, range, MR and QP access flags) in protection domain `pd`
/// (the QP's, or an XRC target's request's SRQ's); returns the host address.
pub(crate) fn check_remote(
    qp: &QpInner,
    pd: u32,
    rkey: u32,
    addr: u64,
    len: u64,
    need: u32,
) -> Option<u64> {
    if len == 0 && need != IBV_ACCESS_REMOTE_ATOMIC {
        return Some(0);
    }
    global().mr(rkey).and_then(|m| {
        // A bound type 2 window is reached only through the QP it was bound by.
        (m.pd == pd
            && (m.mw != 2 || m.qpn == qp.qpn)
            && m.contains(addr, len)
            && m.access & need != 0
            && qp.access.load(Ordering::Relaxed) & need != 0)
            .then(|| m.host(addr))
    })
}

pub(crate) fn sge_capacity(r: &RecvWqe) -> u64 {
    r.sge[..r.num_sge as usize]
        .iter()
        .map(|s| s.length as u64)
        .sum()
}

fn send_wc_opcode(op: u32) -> u32 {
    match op {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
        IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP => IBV_WC_COMP_SWAP,
        IBV_WR_ATOMIC_FETCH_AND_ADD => IBV_WC_FETCH_ADD,
        IBV_WR_ATOMIC_WRITE => IBV_WC_ATOMIC_WRITE,
        IBV_WR_BIND_MW => IBV_WC_BIND_MW,
        IBV_WR_LOCAL_INV => IBV_WC_LOCAL_INV,
        _ => IBV_WC_SEND,
    }
}

/// Emits completions for finished WQEs at the head of the send queue, in order.
pub fn complete_in_order(qp: &QpInner, sq: &mut SendQueue) {
    let rc = qp.qp_type == IBV_QPT_RC;
    while sq.head != sq.next {
        let acked = sq.acked_msn;
        let sig_all = qp.sq_sig_all;
        let w = sq.at(sq.head);
        let done = w.st == WQE_DONE
            || (rc && w.st == WQE_SENT && !w.is_read_atomic() && before(w.msn, acked));
        if !done {
            break;
        }
        if sig_all || w.flags & IBV_SEND_SIGNALED != 0 || w.status != IBV_WC_SUCCESS {
            let mut wc = wc_for(qp.qpn, w.wr_id, w.status, send_wc_opcode(w.opcode));
            if w.status == IBV_WC_SUCCESS && w.is_read_atomic() {
                wc.byte_len = w.len;
            }
            qp.send_cq
                .push_op(wc, false, crate::mlx5::rings::mlx5_opcode(w.opcode));
        }
        sq.head = sq.head.wrapping_add(1);
    }
}

/// Moves the QP to the error state and flushes both queues (caller holds the SQ lock).
pub fn qp_error(qp: &QpInner, sq: &mut SendQueue) {
    let was = qp.state.swap(IBV_QPS_ERR, Ordering::AcqRel);
    if was != IBV_QPS_ERR && qp.srq.is_some() {
        // A QP on an SRQ that enters ERR takes no further receive WQEs.
        raise_async(IBV_EVENT_QP_LAST_WQE_REACHED, AsyncObj::Qp(qp.qp_ptr));
    }
    // SAFETY: qp_ptr is the live ibv_qp that owns this QpInner.
    unsafe { (*(qp.qp_ptr as *mut ibv_qp)).state = IBV_QPS_ERR };
    complete_in_order(qp, sq);
    flush_sq(qp, sq);
    flush_rq(qp);
}

/// Completes every queued send WQE with IBV_WC_WR_FLUSH_ERR.
pub fn flush_sq(qp: &QpInner, sq: &mut SendQueue) {
    while sq.head != sq.tail {
        let w = sq.at(sq.head);
        let st = if w.st == WQE_DONE && w.status != IBV_WC_SUCCESS {
            w.status
        } else {
            IBV_WC_WR_FLUSH_ERR
        };
        let wc = wc_for(qp.qpn, w.wr_id, st, send_wc_opcode(w.opcode));
        qp.send_cq
            .push_op(wc, false, crate::mlx5::rings::mlx5_opcode(w.opcode));
        sq.head = sq.head.wrapping_add(1);
    }
    sq.next = sq.head;
    sq.rd_outstanding = 0;
    qp.backlog.store(false, Ordering::Relaxed);
}

/// Completes every receive WQE of the QP's own receive queue with IBV_WC_WR_FLUSH_ERR.
pub fn flush_rq(qp: &QpInner) {
    if qp.srq.is_some() {
        return;
    }
    if let Some(d) = qp.dv.get() {
        // Receive WQEs in an exposed ring flush too (wqe_counter = their index).
        while let Some(r) = d.take_recv() {
            let wc = wc_for(qp.qpn, r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
            qp.recv_cq.push_full(wc, false, 0, 0, r.idx as u16);
        }
        return;
    }
    let mut rq = qp.rq.lock().unwrap_or_else(|e| e.into_inner());
    while let Some(r) = rq.q.pop_front() {
        qp.recv_cq.push(
            wc_for(qp.qpn, r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV),
            false,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::place;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// An aligned 8-byte word placed again and again is never read half written: a reader
    /// polling it sees only values that were placed (byte-wise placing showed the low half of
    /// one value with the high half of another within a few thousand reads).
    #[test]
    fn an_aligned_word_is_never_seen_torn() {
        let cell = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        let values = [0u64, u64::MAX, 0x0000_0001_0000_0001, 0xffff_fffe_ffff_fffe];
        let torn = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut torn = 0u64;
                while !done.load(Ordering::Acquire) {
                    let v = cell.load(Ordering::Relaxed);
                    torn += u64::from(!values.contains(&v));
                }
                torn
            });
            for k in 0..400_000usize {
                let v = values[k % values.len()];
                // SAFETY: 8 readable bytes to 8 writable, aligned ones (the cell's).
                unsafe { place((&v as *const u64).cast(), cell.as_ptr().cast(), 8) };
            }
            done.store(true, Ordering::Release);
            reader.join().expect("reader")
        });
        assert_eq!(torn, 0, "reads of a half-written word");
    }

    /// Bytes around the aligned words still land (an unaligned start and a short end).
    #[test]
    fn unaligned_ranges_are_placed_whole() {
        let src: Vec<u8> = (0..200u8).collect();
        for (off, n) in [(0, 200), (3, 61), (5, 8), (1, 7), (7, 130)] {
            let mut dst = vec![0u8; 256];
            // SAFETY: n bytes of src to dst[off..off + n], both in bounds.
            unsafe { place(src.as_ptr(), dst.as_mut_ptr().add(off), n) };
            assert_eq!(&dst[off..off + n], &src[..n], "off {off} n {n}");
            assert!(dst[..off].iter().chain(&dst[off + n..]).all(|&b| b == 0));
        }
    }
}
