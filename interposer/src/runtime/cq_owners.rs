//! Which QPs complete into which CQ, so a completion that does not say its QP (an extended CQ
//! created without `IBV_WC_EX_WITH_QP_NUM`, as `ibv_rc_pingpong -t` makes) can be attributed
//! when the answer is certain: the CQ serves exactly one live QP.
//!
//! The control path (QP and CQ creation and destruction) keeps the full picture under a
//! fork-resettable spin lock and publishes, per CQ, its sole QP number (0 = none or several)
//! into a fixed lock-free table the data path reads with atomic loads only. CQs served by
//! several QPs are left to the converter, which attributes their completions through the QPs'
//! outstanding work requests (the `qp_cq=` process attributes say which QPs use which CQ).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::sink::spin::SpinLock;
use crate::sink::{self, Diag};

/// Entries of the lock-free table (CQs ever seen with a QP; keys are never removed).
const TABLE: usize = 4096;
/// Probes before giving up (the table is nearly full).
const PROBES: usize = 64;

struct Entry {
    cq: AtomicUsize,
    sole_qpn: AtomicU64,
}

static ENTRIES: [Entry; TABLE] = [const {
    Entry {
        cq: AtomicUsize::new(0),
        sole_qpn: AtomicU64::new(0),
    }
}; TABLE];

/// The control path's picture: CQ → QPs (handle, QPN) completing into it.
struct Owners {
    by_cq: HashMap<usize, Vec<(usize, u32)>>,
}

static LOCK: SpinLock = SpinLock::new();
static mut OWNERS: Option<Owners> = None;

fn slot_of(cq: usize, insert: bool) -> Option<&'static Entry> {
    let start = (cq >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) % TABLE;
    for i in 0..PROBES {
        let e = &ENTRIES[(start + i) % TABLE];
        let k = e.cq.load(Ordering::Acquire);
        if k == cq {
            return Some(e);
        }
        if k == 0 {
            if !insert {
                return None;
            }
            // Inserts happen under LOCK only: no race between writers.
            e.cq.store(cq, Ordering::Release);
            return Some(e);
        }
    }
    None
}

fn with_owners<R>(f: impl FnOnce(&mut Owners) -> R) -> R {
    let _g = LOCK.lock();
    // SAFETY: OWNERS is only ever accessed here, under LOCK, which serialises every access;
    // the reference does not outlive `f`.
    let o = unsafe { &mut *std::ptr::addr_of_mut!(OWNERS) };
    f(o.get_or_insert_with(|| Owners {
        by_cq: HashMap::new(),
    }))
}

fn publish(cq: usize, qps: &[(usize, u32)]) {
    let sole = match qps {
        [(_, qpn)] => *qpn as u64 | 1 << 32,
        _ => 0,
    };
    match slot_of(cq, true) {
        Some(e) => e.sole_qpn.store(sole, Ordering::Release),
        None => sink::diag(
            Diag::Error,
            "sigmatrace: CQ table full; completions of a CQ without QP numbers stay unattributed",
        ),
    }
}

/// A QP (`qp` handle, number `qpn`) was created completing into `send_cq` and `recv_cq`.
pub fn qp_created(qp: usize, qpn: u32, send_cq: usize, recv_cq: usize) {
    with_owners(|o| {
        let recv_cq = if recv_cq == send_cq { 0 } else { recv_cq };
        for cq in [send_cq, recv_cq] {
            if cq == 0 {
                continue;
            }
            let v = o.by_cq.entry(cq).or_default();
            if !v.iter().any(|&(h, _)| h == qp) {
                v.push((qp, qpn));
            }
            publish(cq, v);
        }
    });
}

/// QP `qp` was destroyed.
pub fn qp_destroyed(qp: usize) {
    with_owners(|o| {
        for (cq, v) in o.by_cq.iter_mut() {
            let n = v.len();
            v.retain(|&(h, _)| h != qp);
            if v.len() != n {
                publish(*cq, v);
            }
        }
    });
}

/// A CQ was created at `cq` (an address a destroyed CQ may have had): it serves no QP yet.
pub fn cq_created(cq: usize) {
    with_owners(|o| {
        o.by_cq.remove(&cq);
        if let Some(e) = slot_of(cq, false) {
            e.sole_qpn.store(0, Ordering::Release);
        }
    });
}

/// The QP number of the one QP completing into `cq`, if exactly one does (data path: atomic
/// loads only).
#[inline]
pub fn sole_qpn(cq: usize) -> Option<u32> {
    let v = slot_of(cq, false)?.sole_qpn.load(Ordering::Acquire);
    (v >> 32 != 0).then_some(v as u32)
}

/// Fork child: the lock may have been held by a thread that does not exist there.
pub fn reset_in_child() {
    LOCK.reset_in_child();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cq_of_one_qp_names_it_and_a_shared_one_does_not() {
        qp_created(0x1000, 0x100, 0xa000, 0xa000);
        assert_eq!(sole_qpn(0xa000), Some(0x100));
        qp_created(0x2000, 0x101, 0xb000, 0xa000);
        assert_eq!(sole_qpn(0xa000), None, "two QPs complete into it");
        assert_eq!(sole_qpn(0xb000), Some(0x101));
        qp_destroyed(0x1000);
        assert_eq!(sole_qpn(0xa000), Some(0x101), "one left");
        cq_created(0xb000);
        assert_eq!(sole_qpn(0xb000), None, "a new CQ at an old address");
        assert_eq!(sole_qpn(0xc000), None, "never seen");
        // QPN reuse: a new QP with the old number on the same CQ.
        qp_destroyed(0x2000);
        qp_created(0x3000, 0x101, 0xa000, 0xa000);
        assert_eq!(sole_qpn(0xa000), Some(0x101));
    }
}
