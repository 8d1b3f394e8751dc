//! Data-path records: posted work requests, completions, empty polls.

use sigmatrace_schemas::{PostError, PostRecv, PostSend, RecordHeader, WorkCompletion};

use crate::sink::Thread;

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
    PostSend {
        hdr: RecordHeader::of::<PostSend>(wr.flags),
        ts,
        wr_id: wr.wr_id,
        remote_addr: wr.remote_addr,
        compare_add: wr.compare_add,
        qpn,
        bytes: wr.bytes,
        rkey: wr.rkey,
        imm: wr.imm,
        num_sge: wr.num_sge,
        opcode: wr.opcode,
        source,
        _pad: 0,
    }
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

impl Thread<'_> {
    /// A poll of `cq` returned nothing.
    #[inline(always)]
    pub fn empty_poll(&mut self, cq: u64, ts: u64) {
        let span = self.period();
        if let Some(rec) = self.state.runs.empty(cq, ts, span) {
            self.append(&rec);
        }
    }

    /// A poll of `cq` returned work: closes its empty run first.
    #[inline(always)]
    pub fn work_returned(&mut self, cq: u64) {
        if let Some(rec) = self.state.runs.work(cq) {
            self.append(&rec);
        }
    }

    /// `wr_start` on `qp`.
    pub fn wr_start(&mut self, qp: u64) {
        self.state.builders.start(qp);
    }

    /// An `ibv_wr_*` opcode builder: a new WR in `qp`'s batch.
    #[inline]
    pub fn wr_begin(&mut self, qp: u64, rec: PostSend) {
        let Thread { out, state, .. } = self;
        state
            .builders
            .begin(qp, rec, &mut |r: &PostSend| out.append(r));
    }

    /// A setter of the WR being built on `qp`.
    #[inline(always)]
    pub fn wr_current(&mut self, qp: u64) -> Option<&mut PostSend> {
        self.state.builders.current(qp)
    }

    /// `wr_complete` returned `rc`: writes the batch, or a `PostError` naming its first WR.
    #[inline]
    pub fn wr_complete(&mut self, qp: u64, qpn: u32, rc: i32, ts: u64, source: u8) {
        let Thread { out, state, .. } = self;
        let done = state
            .builders
            .complete(qp, rc == 0, &mut |r: &PostSend| out.append(r));
        if rc != 0 {
            let first = done.map(|d| d.first_wr_id).unwrap_or(0);
            out.append(&post_error(ts, rc, first, qp, qpn, source));
        }
    }

    /// `wr_abort` on `qp`.
    pub fn wr_abort(&mut self, qp: u64) {
        self.state.builders.abort(qp);
    }
}
