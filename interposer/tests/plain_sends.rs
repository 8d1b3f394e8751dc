//! The message-rate path for single-WR RDMA writes and sends (decoded straight into the
//! compact record) records exactly what the program posted, including the WRs whose fields
//! the compact record cannot hold (64-bit remote address, a send flag above bit 4: written
//! as full records by the general path), and their completions.

mod common;
use common::*;

use std::time::Duration;

const WR_RDMA_WRITE: u8 = 0;
const WR_SEND: u8 = 2;
/// The log of cprogs/fake_verbs.c `mode`, traced.
fn fake_verbs(mode: &str) -> Trace {
    let argv = [cprog("fake_verbs").display().to_string(), mode.into()];
    let (out, t, _dir) = traced_run(&argv, &[], Duration::from_secs(60));
    assert!(out.ok(), "{out:?}");
    t
}

const SIGNALED: u32 = 2;
const INLINE: u32 = 8;

#[test]
fn single_writes_and_sends_are_recorded_exactly_whether_or_not_they_fit_the_compact_form() {
    let t = fake_verbs("plain");
    let sends: Vec<_> = t
        .sends()
        .iter()
        .map(|s| {
            (
                s.wr_id,
                s.opcode,
                s.remote_addr,
                s.rkey,
                s.hdr.aux,
                s.bytes,
                s.num_sge,
                s.imm,
                s.compare_add,
            )
        })
        .collect();
    assert_eq!(
        sends,
        vec![
            (
                1,
                WR_RDMA_WRITE,
                0xfedc_ba98_7654_3210,
                0x33,
                SIGNALED,
                8,
                1,
                0,
                0
            ),
            (
                2,
                WR_RDMA_WRITE,
                0x1000,
                0x33,
                SIGNALED | 1 << 6,
                8,
                1,
                0,
                0
            ),
            (3, WR_RDMA_WRITE, 0x1000, 0x33, SIGNALED, 8, 1, 0, 0),
            (4, WR_SEND, 0, 0, SIGNALED | INLINE, 8, 1, 0, 0),
        ]
    );
    let qpn = t.sends()[0].qpn;
    assert!(t.sends().iter().all(|s| s.qpn == qpn && s.ts > 0));
    let wcs: Vec<_> = t
        .wcs()
        .iter()
        .map(|w| (w.wr_id, w.byte_len, w.qpn))
        .collect();
    assert_eq!(
        wcs,
        vec![(1, 8, qpn), (2, 8, qpn), (3, 8, qpn), (4, 8, qpn)]
    );
}

const FAIL_ID: u64 = 0xdead;
const EINVAL: u32 = 22;

/// Single writes are recorded before the provider call and published after it (the hook's
/// placed record): a WR the provider refuses leaves its `PostError` and no `PostSend`; a
/// signal handler that posts during the provider call is recorded, and so is the interrupted
/// WR, after it (as when recording after the call), whether the provider accepted it or not;
/// nothing is recorded twice or dropped, and plain writes after that are recorded as before.
#[test]
fn sends_recorded_before_the_provider_call_survive_refusals_and_signal_handlers() {
    let t = fake_verbs("placed");
    let sends: Vec<_> = t
        .sends()
        .iter()
        .map(|s| (s.wr_id, s.opcode, s.remote_addr, s.rkey, s.bytes))
        .collect();
    assert_eq!(
        sends,
        vec![
            (1, WR_RDMA_WRITE, 0x1000, 0x33, 8),
            (2, WR_RDMA_WRITE, 0x1000, 0x33, 8),
            (103, WR_RDMA_WRITE, 0x2000, 0x44, 8),
            (3, WR_RDMA_WRITE, 0x1000, 0x33, 8),
            (FAIL_ID + 100, WR_RDMA_WRITE, 0x2000, 0x44, 8),
            (4, WR_RDMA_WRITE, 0x1000, 0x33, 8),
            (5, WR_SEND, 0, 0, 8),
            (6, WR_RDMA_WRITE, 0x1000, 0x33, 8),
            (7, WR_RDMA_WRITE, 0x1000, 0x33, 8),
            (8, WR_RDMA_WRITE, 0x1000, 0x33, 8),
        ]
    );
    let qpn = t.sends()[0].qpn;
    let qpn2 = t.sends()[8].qpn;
    assert_ne!(qpn, qpn2);
    assert!(t
        .sends()
        .iter()
        .all(|s| (s.qpn == qpn) != (s.wr_id == 7) && s.ts > 0));
    // Each post's time is taken before its provider call: the handler's write, posted
    // during the provider call of WR 3, is later than WR 3's time.
    let ts = |id: u64| t.sends().iter().find(|s| s.wr_id == id).unwrap().ts;
    assert!(ts(3) <= ts(103) && ts(1) <= ts(2) && ts(2) <= ts(3));
    let errors: Vec<_> = t
        .errors()
        .iter()
        .map(|e| (e.bad_wr_id, e.hdr.aux, e.qpn))
        .collect();
    assert_eq!(errors, vec![(FAIL_ID, EINVAL, qpn), (FAIL_ID, EINVAL, qpn)]);
    // Completions, the last poll's taken partly by the hot path (a completion of the second
    // QP, whose slot is not bound yet, between two of the first QP's): all in order, exact.
    let wcs: Vec<_> = t
        .wcs()
        .iter()
        .map(|w| (w.wr_id, w.qpn, w.byte_len))
        .collect();
    let mut want: Vec<_> = [1, 2, 103, 3, FAIL_ID + 100, 4, 5, 6]
        .iter()
        .map(|&id| (id, qpn, 8))
        .collect();
    want.extend([(7, qpn2, 8), (8, qpn, 8)]);
    assert_eq!(wcs, want);
    let cq = t.wcs()[0].cq;
    assert!(t.wcs().iter().all(|w| w.cq == cq && w.status == 0));
}
