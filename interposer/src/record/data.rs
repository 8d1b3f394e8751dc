//! Data-path records: posted work requests, completions, empty polls.
//!
//! The hot paths (one WR of `ibv_post_send` or `ibv_post_recv`, the completions of
//! `ibv_poll_cq`) write each record in place, into a slot reserved in the thread's chunk:
//! the caller hands a closure that decodes the program's structure only once the slot is
//! reserved, so nothing decoded has to survive a call and no intermediate record is copied.

use sigmatrace_schemas::{
    compact::{CompletionBody, CompletionHead, CompletionSource, SendBody, SendHead},
    post_source, FixedRecord, PostError, PostRecv, PostSend, RecordHeader, WorkCompletion,
};

use super::{empty, ThreadState};
use crate::sink::{self, Thread};

/// A send work request as posted (decoded from `ibv_send_wr` or built by `ibv_wr_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    /// `ibv_wr_opcode`.
    pub opcode: u8,
    /// `ibv_send_flags`.
    pub flags: u32,
    pub num_sge: u16,
    /// Sum of the SGE lengths.
    pub bytes: u32,
    /// Remote address; for UD the AH handle.
    pub remote_addr: u64,
    /// rkey; for UD the remote QPN.
    pub rkey: u32,
    /// Atomic compare/add operand; for UD the remote qkey.
    pub compare_add: u64,
    /// Immediate data in host order, or the rkey to invalidate.
    pub imm: u32,
}

/// The `PostSend` record of one WR.
#[inline(always)]
pub fn post_send(ts: u64, qpn: u32, source: u8, wr: &SendWr) -> PostSend {
    let mut r = PostSend::default();
    put_post_send(&mut r, ts, qpn, source, wr);
    r
}

/// Writes the `PostSend` record of one WR over `r` (every field: [`post_send`] in place).
#[inline(always)]
pub fn put_post_send(r: &mut PostSend, ts: u64, qpn: u32, source: u8, wr: &SendWr) {
    r.hdr = RecordHeader::of::<PostSend>(0);
    fill_post_send(r, ts, qpn, source, wr);
}

/// Writes every field of `r` but the header's kind and length (set by [`post_send`]).
#[inline(always)]
fn fill_post_send(r: &mut PostSend, ts: u64, qpn: u32, source: u8, wr: &SendWr) {
    r.hdr.aux = wr.flags;
    r.ts = ts;
    r.wr_id = wr.wr_id;
    r.qpn = qpn;
    r.num_sge = wr.num_sge;
    r.opcode = wr.opcode;
    r.source = source;
    r._pad = 0;
    r.bytes = wr.bytes;
    r.remote_addr = wr.remote_addr;
    r.rkey = wr.rkey;
    r.compare_add = wr.compare_add;
    r.imm = wr.imm;
}

/// One WR of a post call the provider accepted (the hot path). `wr` decodes it — (QPN, WR)
/// — once the thread is inside the sink; the writer stores it compact when it fits (the
/// record is assembled in registers, not copied).
#[inline(always)]
pub fn post_send_one(ts: u64, source: u8, wr: impl FnOnce() -> (u32, SendWr)) {
    if let Some(mut t) = sink::enter() {
        let (qpn, w) = wr();
        // `append` writes the record, then a due snapshot (taken later).
        t.append(&post_send(ts, qpn, source, &w));
    }
}

/// One RDMA write or send WR (no immediate data, no atomic operands) of a post call the
/// provider accepted: the message-rate path. Once the thread is inside the sink, `head`
/// decodes what decides the record's form and `body` the rest, read straight into the
/// compact record. Returns false when it has no compact form (nothing written: the caller
/// records it the general way, out of line).
#[inline(always)]
pub fn post_plain_send_one(
    ts: u64,
    head: impl FnOnce() -> SendHead,
    body: impl FnOnce() -> SendBody,
) -> bool {
    match sink::enter() {
        Some(mut t) => t.append_plain_send(ts, &head(), body),
        None => true,
    }
}

/// A post call that failed: its error and the wr_id of `*bad_wr` (0 when it did not say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostFailure {
    pub err: i32,
    pub bad_wr_id: u64,
}

/// The send WRs of one post call on `object` (the QP numbered `qpn`) that the provider
/// accepted, then its `PostError` if it failed.
pub fn sends(
    ts: u64,
    qpn: u32,
    object: u64,
    source: u8,
    wrs: impl Iterator<Item = SendWr>,
    failed: Option<PostFailure>,
) {
    let error = failed.map(|f| post_error(ts, f.err, f.bad_wr_id, object, qpn, source));
    posted(wrs.map(|w| post_send(ts, qpn, source, &w)), error);
}

/// A receive work request as posted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub num_sge: u16,
    /// Sum of the SGE lengths.
    pub bytes: u32,
}

/// The receive WRs of one post call on `object` (QP `qpn`, or SRQ `srq`) that the provider
/// accepted, then its `PostError` if it failed.
pub fn recvs(
    ts: u64,
    (qpn, srq, object): (u32, u64, u64),
    source: u8,
    wrs: impl Iterator<Item = RecvWr>,
    failed: Option<PostFailure>,
) {
    let error = failed.map(|f| post_error(ts, f.err, f.bad_wr_id, object, qpn, source));
    let records = wrs.map(|w| post_recv(ts, qpn, srq, source, w.wr_id, w.num_sge, w.bytes));
    posted(records, error);
}

/// Writes the records of one post call (the list is decoded as it is written).
fn posted<R: FixedRecord>(records: impl Iterator<Item = R>, error: Option<PostError>) {
    sink::with_thread(|t| {
        for r in records {
            t.append(&r);
        }
        if let Some(e) = error {
            t.append(&e);
        }
    });
}

/// `ibv_bind_mw` on `qp` (QP number `qpn`) returned `rc`: its `PostSend`, or a `PostError`.
pub fn bind_mw(ts: u64, qp: u64, qpn: u32, wr: &SendWr, rc: i32) {
    let source = post_source::POST_SEND;
    sink::with_thread(|t| {
        if rc == 0 {
            t.append(&post_send(ts, qpn, source, wr));
        } else {
            t.append(&post_error(ts, rc, wr.wr_id, qp, qpn, source));
        }
    });
}

/// The `PostRecv` record of one receive WR (`srq` = 0 for QP receive queues).
#[inline(always)]
pub fn post_recv(
    ts: u64,
    qpn: u32,
    srq: u64,
    source: u8,
    wr_id: u64,
    num_sge: u16,
    bytes: u32,
) -> PostRecv {
    PostRecv {
        hdr: RecordHeader::of::<PostRecv>(0),
        ts,
        wr_id,
        qpn,
        bytes,
        srq,
        num_sge,
        source,
        _pad: [0; 5],
    }
}

/// A failed post call: `err` is the returned error, `bad_wr_id` the wr_id of `*bad_wr`.
pub fn post_error(
    ts: u64,
    err: i32,
    bad_wr_id: u64,
    object: u64,
    qpn: u32,
    source: u8,
) -> PostError {
    PostError {
        hdr: RecordHeader::of::<PostError>(err as u32),
        ts,
        bad_wr_id,
        object,
        qpn,
        source,
        _pad: [0; 3],
    }
}

/// A completion as returned to the program (decoded from `ibv_wc` or read from `ibv_cq_ex`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: u8,
    /// `ibv_wc_opcode`.
    pub opcode: u8,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Immediate data in host order (or invalidated rkey).
    pub imm: u32,
    pub qpn: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub slid: u16,
    /// Device timestamp, 0 if the CQ has none.
    pub hw_ts: u64,
}

/// The `WorkCompletion` record of one completion of `cq`.
#[inline(always)]
pub fn completion(ts: u64, cq: u64, c: &Completion) -> WorkCompletion {
    WorkCompletion {
        hdr: RecordHeader::of::<WorkCompletion>(c.wc_flags),
        ts,
        wr_id: c.wr_id,
        hw_ts: c.hw_ts,
        cq,
        qpn: c.qpn,
        src_qp: c.src_qp,
        byte_len: c.byte_len,
        imm: c.imm,
        status: c.status,
        opcode: c.opcode,
        slid: c.slid,
        vendor_err: c.vendor_err,
    }
}

/// One receive WR with one SGE (`body()`: its wr_id and length) that a receive post
/// accepted, to (`qpn`, `srq` handle, `source`) as its `PostRecv` names them, recorded at
/// `ts` on the hot path (no call) when the thread is ready and its compact record needs no
/// bookkeeping (a due clock snapshot included); false when nothing was written: the caller
/// records the post the ordinary way.
#[inline(always)]
pub fn bound_recv(
    ts: u64,
    (qpn, srq, source): (u32, u64, u8),
    body: impl FnOnce() -> (u64, u32),
) -> bool {
    match sink::enter_ready(0) {
        Some(mut t) => t.append_bound_recv(ts, srq, (qpn, source), body),
        None => false,
    }
}

/// One completion `wc` of a poll of `cq` at `ts`, recorded on the hot path (no call) when the
/// thread is ready, no empty-poll run of `cq` may be open (its bucket is not held) and its
/// compact record needs no bookkeeping (a due clock snapshot included); false when nothing
/// was written: [`completions`] records it and the rest of the poll.
#[inline(always)]
pub fn bound_completion(cq: u64, ts: u64, wc: &impl CompletionSource) -> bool {
    // Not while the CQ may have an open empty-poll run (`hold_hot`: it is closed first).
    match sink::enter_ready(empty::bucket(cq)) {
        Some(mut t) => t.append_bound_completion(ts, cq, wc),
        None => false,
    }
}

/// The completions a poll of `cq` returned (the hot path). For the `i`-th, `head(i)`
/// decodes what decides its compact form (`None`: it has a vendor error) and `body(i)` the
/// rest, read straight into the compact record; `entry(i)` decodes the full record (out of
/// line, when the compact form does not hold it), from the `first`-th on (those before were
/// recorded by [`bound_completion`]). Closes the CQ's empty-poll run first.
#[inline(always)]
pub fn completions(
    cq: u64,
    ts: u64,
    first: usize,
    n: usize,
    mut head: impl FnMut(usize) -> Option<CompletionHead>,
    mut body: impl FnMut(usize) -> CompletionBody,
    mut entry: impl FnMut(usize) -> Completion,
) {
    if let Some(mut t) = sink::enter() {
        work_returned(&mut t, cq);
        for i in first..n {
            let recorded = match head(i) {
                Some(h) => t.append_plain_completion_raw(ts, &h, || body(i)),
                None => false,
            };
            if !recorded {
                completion_full(&mut t, ts, cq, &mut entry, i);
            }
        }
        // A due snapshot follows the completions (taken now, after their time).
        t.snapshot_check(ts);
    }
}

/// [`completions`]' full record of the `i`-th completion.
#[cold]
#[inline(never)]
fn completion_full(
    t: &mut Thread<'_>,
    ts: u64,
    cq: u64,
    entry: &mut impl FnMut(usize) -> Completion,
    i: usize,
) {
    t.out.append_raw(&completion(ts, cq, &entry(i)));
}

/// One completion of an extended CQ (`start_poll`/`next_poll`).
pub fn completion_ex(cq: u64, ts: u64, c: &Completion) {
    sink::with_thread(|t| {
        work_returned(t, cq);
        t.append(&completion(ts, cq, c));
    });
}

/// A poll of `cq` returned nothing (aggregated, see `empty`).
#[inline(always)]
pub fn empty_poll(cq: u64, ts: u64) {
    if let Some(mut t) = sink::enter() {
        let span = t.period();
        let runs = &mut t.state::<ThreadState>().runs;
        let closed = runs.empty(cq, ts, span);
        let open = runs.open_buckets();
        t.hold_hot(open);
        if let Some(rec) = closed {
            t.append(&rec);
        }
    }
}

/// A poll of `cq` returned work: closes its empty run first.
#[inline(always)]
fn work_returned(t: &mut Thread<'_>, cq: u64) {
    let runs = &mut t.state::<ThreadState>().runs;
    let closed = runs.work(cq);
    let open = runs.open_buckets();
    t.hold_hot(open);
    if let Some(rec) = closed {
        t.append(&rec);
    }
}
