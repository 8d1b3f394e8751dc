//! A connected QP to post to, whichever way it was built: direct IBGDA-style posting
//! ([`DirectQp`]) or `ibv_post_send` / `ibv_poll_cq` ([`VerbsQp`]), with the same interface
//! and the same WQE bookkeeping.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::dv::QueueError;
use crate::mlx5::{self, DirectQp, PostBook, PostedWqe, WqeOp};
use crate::verbs::ffi::*;

fn rc_err(call: &'static str, rc: i32) -> QueueError {
    QueueError::Call {
        call,
        err: std::io::Error::from_raw_os_error(rc.abs()),
    }
}

/// The same QP interface through `ibv_post_send` / `ibv_poll_cq`.
pub struct VerbsQp {
    qp: *mut ibv_qp,
    cq: *mut ibv_cq,
    next: Mutex<u64>,
    cq_lock: Mutex<()>,
    failed: AtomicU32,
    /// WRs retired by completions, signalling, the log.
    book: PostBook,
}

// SAFETY: verbs objects are thread-safe to post/poll (posting is serialised by `next`, polling
// by `cq_lock`).
unsafe impl Send for VerbsQp {}
// SAFETY: see above.
unsafe impl Sync for VerbsQp {}

impl VerbsQp {
    pub(crate) fn new(qp: *mut ibv_qp, cq: *mut ibv_cq) -> VerbsQp {
        VerbsQp {
            qp,
            cq,
            next: Mutex::new(0),
            cq_lock: Mutex::new(()),
            failed: AtomicU32::new(0),
            book: PostBook::new(16),
        }
    }

    fn qpn(&self) -> u32 {
        // SAFETY: live QP.
        unsafe { (*self.qp).qp_num }
    }

    fn post(&self, w: &WqeOp, signaled: bool) -> Result<u64, QueueError> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let idx = *next;
        let room = |retired| idx + 1 - retired <= 64;
        let timeout = || self.timeout(idx);
        self.book
            .wait_until(Instant::now(), room, || self.progress(), timeout)?;
        let signaled = self.book.signaled(idx, signaled);
        // SAFETY: the WR and SGE live across the call; the provider copies them.
        unsafe {
            let mut wr: ibv_send_wr = std::mem::zeroed();
            let mut sge: ibv_sge = std::mem::zeroed();
            wr.wr_id = idx;
            wr.send_flags = if signaled { IBV_SEND_SIGNALED } else { 0 };
            let (raddr, rkey) = w.remote();
            let local = match *w {
                WqeOp::Write { local, .. } => {
                    wr.opcode = IBV_WR_RDMA_WRITE;
                    Some(local)
                }
                WqeOp::Read { local, .. } => {
                    wr.opcode = IBV_WR_RDMA_READ;
                    Some(local)
                }
                WqeOp::FetchAdd { local, add, .. } => {
                    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
                    wr.wr.atomic.remote_addr = raddr;
                    wr.wr.atomic.rkey = rkey;
                    wr.wr.atomic.compare_add = add;
                    Some(local)
                }
                WqeOp::CompSwap {
                    local,
                    compare,
                    swap,
                    ..
                } => {
                    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
                    wr.wr.atomic.remote_addr = raddr;
                    wr.wr.atomic.rkey = rkey;
                    wr.wr.atomic.compare_add = compare;
                    wr.wr.atomic.swap = swap;
                    Some(local)
                }
                WqeOp::Nop => {
                    wr.opcode = IBV_WR_RDMA_WRITE;
                    None
                }
            };
            if matches!(w, WqeOp::Write { .. } | WqeOp::Read { .. }) {
                wr.wr.rdma.remote_addr = raddr;
                wr.wr.rdma.rkey = rkey;
            }
            if let Some(l) = local {
                sge.addr = l.addr;
                sge.length = l.len;
                sge.lkey = l.lkey;
                wr.sg_list = &mut sge;
                wr.num_sge = 1;
            }
            let mut bad = std::ptr::null_mut();
            let post = (*(*self.qp).context)
                .ops
                .post_send
                .expect("provider has post_send");
            let rc = post(self.qp, &mut wr, &mut bad);
            if rc != 0 {
                return Err(rc_err("ibv_post_send", rc));
            }
            let fm_ce_se = if signaled { mlx5::CE_CQE_ALWAYS } else { 0 };
            self.book.record(idx, w, fm_ce_se);
        }
        *next += 1;
        Ok(idx)
    }

    fn timeout(&self, idx: u64) -> QueueError {
        QueueError::Timeout {
            qpn: self.qpn(),
            idx,
            secs: mlx5::WAIT_LIMIT.as_secs(),
        }
    }

    fn progress(&self) -> Result<(), QueueError> {
        let Ok(_g) = self.cq_lock.try_lock() else {
            return Ok(());
        };
        if self.failed.load(Ordering::Acquire) != 0 {
            return Err(QueueError::Completion {
                qpn: self.qpn(),
                wr_id: 0,
                status: self.failed.load(Ordering::Acquire),
            });
        }
        // SAFETY: wc is a valid output array for 16 entries; the CQ is live.
        unsafe {
            let poll = (*(*self.cq).context)
                .ops
                .poll_cq
                .expect("provider has poll_cq");
            let mut wc: [ibv_wc; 16] = std::mem::zeroed();
            let n = poll(self.cq, 16, wc.as_mut_ptr());
            if n < 0 {
                return Err(rc_err("ibv_poll_cq", n));
            }
            for c in &wc[..n as usize] {
                if c.status != IBV_WC_SUCCESS {
                    self.failed.store(c.status.max(1), Ordering::Release);
                    return Err(QueueError::Completion {
                        qpn: self.qpn(),
                        wr_id: c.wr_id,
                        status: c.status,
                    });
                }
                self.book.retired.fetch_max(c.wr_id + 1, Ordering::AcqRel);
            }
        }
        Ok(())
    }

    fn wait(&self, idx: u64) -> Result<(), QueueError> {
        let done = |retired| retired > idx;
        let timeout = || self.timeout(idx);
        self.book
            .wait_until(Instant::now(), done, || self.progress(), timeout)
    }
}

/// A connected QP to post to, whichever way it was built.
pub enum Poster {
    Direct(DirectQp),
    Verbs(VerbsQp),
}

impl Poster {
    pub fn qpn(&self) -> u32 {
        match self {
            Poster::Direct(q) => q.qpn(),
            Poster::Verbs(q) => q.qpn(),
        }
    }

    /// The direct-posting QP (None for verbs).
    pub fn direct(&self) -> Option<&DirectQp> {
        match self {
            Poster::Direct(q) => Some(q),
            Poster::Verbs(_) => None,
        }
    }

    /// Posts one WQE (thread-safe); returns its index.
    pub fn post(&self, w: &WqeOp, signaled: bool) -> Result<u64, QueueError> {
        match self {
            Poster::Direct(q) => Ok(q.post(w, signaled)?),
            Poster::Verbs(q) => q.post(w, signaled),
        }
    }

    /// Waits until WQE `idx` and every earlier one completed.
    pub fn wait(&self, idx: u64) -> Result<(), QueueError> {
        match self {
            Poster::Direct(q) => Ok(q.wait(idx)?),
            Poster::Verbs(q) => q.wait(idx),
        }
    }

    /// Posts and waits for a signalled WQE.
    pub fn post_wait(&self, w: &WqeOp) -> Result<u64, QueueError> {
        let i = self.post(w, true)?;
        self.wait(i)?;
        Ok(i)
    }

    /// The workload's bookkeeping of this QP: every WQE posted, in index order.
    pub fn posted(&self) -> Vec<PostedWqe> {
        match self {
            Poster::Direct(q) => q.posted(),
            Poster::Verbs(q) => q.book.posted(),
        }
    }
}
