//! Records for the `ibv_wr_*` post API (and `mlx5dv_wr_*`).
//!
//! A batch is built between `wr_start` and `wr_complete`: each opcode builder (`wr_send`,
//! `wr_rdma_write`, …) starts a work request, the setters that follow (`wr_set_sge`,
//! `wr_set_ud_addr`, …) fill it in. Here a batch begins with its first opcode builder after
//! the QP's last `wr_complete` or `wr_abort` (`wr_start` is not hooked). The interposer keeps the batch's `PostSend` records here
//! and writes them when `wr_complete` succeeds, so the log has exactly the WRs the provider
//! accepted; a failed `wr_complete` becomes one `PostError`, `wr_abort` writes nothing. Each
//! record's `ts` is the time of its opcode builder call.
//!
//! The state is per thread (the API requires one thread to build a QP's batch, the provider
//! holds the QP's lock from `wr_start` to `wr_complete`). A batch's first WR is kept in the
//! thread's one *stage* while no other batch is there (the common one-WR batch: no builder
//! is claimed, nothing is searched or copied); its second WR moves it to one of [`BUILDERS`]
//! builders, so that one stage and that many builders hold batches of as many QPs at once. A
//! batch longer than [`PENDING`] WRs is written as it goes (if such a batch then fails, its
//! `PostError` follows the WRs already written).
//!
//! The hooks' hot path places a batch's first WR in the chunk instead, without passing here,
//! while no batch is open here (see the per-thread API below).

use bytemuck::{Pod, Zeroable};
use sigmatrace_schemas::{PostSend, RecordHeader};

use super::data::{post_error, put_post_send, SendWr};
use super::ThreadState;
use crate::sink;

/// QPs whose batches one thread can build at the same time.
pub const BUILDERS: usize = 2;
/// WRs kept per batch before they are written early.
pub const PENDING: usize = 16;
// A batch's WRs displaced together fit one builder (none is written early for them).
const _: () = assert!(PENDING >= sink::MAX_PLACED as usize);

const ZERO: PostSend = PostSend {
    hdr: RecordHeader {
        kind: 0,
        len: 0,
        aux: 0,
    },
    ts: 0,
    wr_id: 0,
    remote_addr: 0,
    compare_add: 0,
    qpn: 0,
    bytes: 0,
    rkey: 0,
    imm: 0,
    num_sge: 0,
    opcode: 0,
    source: 0,
    _pad: 0,
};

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
struct Builder {
    /// The QP (its `ibv_qp_ex` address); 0 = free.
    qp: u64,
    /// Last use, for eviction.
    stamp: u32,
    n: u8,
    _pad: [u8; 3],
    pending: [PostSend; PENDING],
}

impl Builder {
    const FREE: Builder = Builder {
        qp: 0,
        stamp: 0,
        n: 0,
        _pad: [0; 3],
        pending: [ZERO; PENDING],
    };
}

/// What `complete` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    /// WRs of the batch (written or, on failure, discarded).
    pub wrs: usize,
    /// wr_id of the first WR of the batch still pending (for `PostError`).
    pub first_wr_id: u64,
}

/// One thread's batches in progress (plain data: kept in the sink's per-thread scratch area).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Builders {
    /// The QP whose batch is its first WR, in `stage`; 0 = none. No builder holds a batch of
    /// this QP.
    stage_qp: u64,
    /// `[0]` the stage; `[1]` where an opcode builder writes its WR while the stage is taken
    /// (for [`Builders::begin_in_builder`] to copy).
    slots: [PostSend; 2],
    b: [Builder; BUILDERS],
    clock: u32,
    _pad: u32,
}

impl Default for Builders {
    fn default() -> Self {
        Self::new()
    }
}

impl Builders {
    pub const fn new() -> Self {
        Builders {
            stage_qp: 0,
            slots: [ZERO; 2],
            b: [Builder::FREE; BUILDERS],
            clock: 0,
            _pad: 0,
        }
    }

    /// Whether no batch is being built.
    pub fn is_idle(&self) -> bool {
        self.stage_qp == 0 && self.b.iter().all(|b| b.qp == 0)
    }

    #[inline(always)]
    fn slot(&self, qp: u64) -> Option<usize> {
        self.b.iter().position(|b| b.qp == qp)
    }

    /// The builder of `qp`, claiming (and if needed evicting) one. Returns its index and the
    /// number of WRs lost by an eviction.
    fn claim(&mut self, qp: u64) -> (usize, usize) {
        self.clock = self.clock.wrapping_add(1);
        if let Some(i) = self.slot(qp) {
            self.b[i].stamp = self.clock;
            return (i, 0);
        }
        let i = self.b.iter().position(|b| b.qp == 0).unwrap_or_else(|| {
            (0..BUILDERS)
                .max_by_key(|&i| self.clock.wrapping_sub(self.b[i].stamp))
                .unwrap_or(0)
        });
        let lost = self.b[i].n as usize;
        self.b[i].qp = qp;
        self.b[i].n = 0;
        self.b[i].stamp = self.clock;
        (i, lost)
    }

    /// An opcode builder: starts a WR. When the batch is full, its WRs so far are passed to
    /// `emit` first. (The hooks use [`Builders::begin_with`].)
    #[cfg(test)]
    pub fn begin(&mut self, qp: u64, rec: PostSend, emit: &mut impl FnMut(&PostSend)) {
        self.begin_with(qp, |r| *r = rec, emit);
    }

    /// An opcode builder: starts a WR, written in place by `put` (every field: the slot holds
    /// a previous WR), so that it is neither assembled nor copied. When the batch is full, its
    /// WRs so far are passed to `emit` first.
    #[inline(always)]
    pub fn begin_with(
        &mut self,
        qp: u64,
        put: impl FnOnce(&mut PostSend),
        emit: &mut impl FnMut(&PostSend),
    ) {
        if !self.stage_with(qp, put) {
            self.begin_in_builder(qp, emit);
        }
    }

    /// The first half of [`Builders::begin_with`], inline (the one-WR batch's path: no call,
    /// nothing kept for the second half): writes the WR with `put` and stages it when it is its
    /// batch's first and the stage is free. False when it is not staged: the caller then calls
    /// [`Builders::begin_in_builder`].
    #[inline(always)]
    pub fn stage_with(&mut self, qp: u64, put: impl FnOnce(&mut PostSend)) -> bool {
        let taken = self.stage_qp != 0;
        put(&mut self.slots[taken as usize]);
        let staged = !taken && self.slot(qp).is_none();
        if staged {
            self.stage_qp = qp;
        }
        staged
    }

    /// The second half of [`Builders::begin_with`] for a WR [`Builders::stage_with`] did not
    /// stage: a WR after its batch's first (the staged first WR moves to the builder), or a
    /// first while another QP's batch is staged. When the batch is full, its WRs so far are
    /// passed to `emit` first.
    #[inline]
    pub fn begin_in_builder(&mut self, qp: u64, emit: &mut impl FnMut(&PostSend)) {
        // Where `stage_with` wrote it (`stage_qp` is as it was then).
        let new = (self.stage_qp != 0) as usize;
        let (i, _) = self.claim(qp);
        if self.stage_qp == qp {
            // The batch's second WR: the claim found no builder of this QP (see `stage_qp`).
            self.stage_qp = 0;
            self.b[i].pending[0] = self.slots[0];
            self.b[i].n = 1;
        }
        let b = &mut self.b[i];
        if b.n as usize == PENDING {
            for r in &b.pending {
                emit(r);
            }
            b.n = 0;
        }
        b.pending[b.n as usize] = self.slots[new];
        b.n += 1;
    }

    /// Ends the batch of `qp` if it is staged (its one WR), returning that WR.
    #[inline(always)]
    pub fn take_staged(&mut self, qp: u64) -> Option<&PostSend> {
        if self.stage_qp == qp {
            self.stage_qp = 0;
            Some(&self.slots[0])
        } else {
            None
        }
    }

    /// The WR being built on `qp` (for the setters), if any.
    #[inline(always)]
    pub fn current(&mut self, qp: u64) -> Option<&mut PostSend> {
        if self.stage_qp == qp {
            return Some(&mut self.slots[0]);
        }
        let i = self.slot(qp)?;
        let b = &mut self.b[i];
        b.n.checked_sub(1).map(|last| &mut b.pending[last as usize])
    }

    /// `wr_complete`: on success the batch's WRs go to `emit`; on failure they are discarded.
    /// `None` when no batch was being built on `qp` by this thread.
    pub fn complete(
        &mut self,
        qp: u64,
        ok: bool,
        emit: &mut impl FnMut(&PostSend),
    ) -> Option<Completed> {
        if let Some(r) = self.take_staged(qp) {
            if ok {
                emit(r);
            }
            return Some(Completed {
                wrs: 1,
                first_wr_id: r.wr_id,
            });
        }
        let i = self.slot(qp)?;
        let b = &mut self.b[i];
        let n = b.n as usize;
        let done = Completed {
            wrs: n,
            first_wr_id: if n > 0 { b.pending[0].wr_id } else { 0 },
        };
        if ok {
            for r in &b.pending[..n] {
                emit(r);
            }
        }
        b.n = 0;
        b.qp = 0;
        Some(done)
    }

    /// `wr_abort`: discards the batch. Returns the WRs discarded.
    pub fn abort(&mut self, qp: u64) -> usize {
        if self.stage_qp == qp {
            self.stage_qp = 0;
            return 1;
        }
        match self.slot(qp) {
            Some(i) => {
                let n = self.b[i].n as usize;
                self.b[i].n = 0;
                self.b[i].qp = 0;
                n
            }
            None => 0,
        }
    }
}

// --- the per-thread API the `ibv_wr_*` hooks call --------------------------------------------
//
// A batch's first WR may instead be *placed* by the hooks (`sink::place_wr`: written into the
// chunk by the opcode builder, published by `wr_complete`, without passing here). When this
// thread records anything else meanwhile, the sink reads it back (*displaces* it), and the
// next call here takes it in as its batch's first WR ([`batches`]). Placing is held off while
// any batch is open here, so that a placed WR is always its batch's first.

/// Runs `f` inside the sink with this thread's batches, after taking in a WR the sink
/// displaced; then holds placing off while a batch is open (see above).
#[inline(always)]
fn batches<R>(f: impl FnOnce(&mut sink::Out<'_>, &mut Builders) -> R) -> Option<R> {
    // (`enter`, not `with_thread`: its closure would be a call of its own.)
    let mut t = sink::enter()?;
    t.take_displaced(|out, st: &mut ThreadState, qp, rec| {
        take_displaced(out.reborrow(), &mut st.builders, qp, rec)
    });
    let (out, st) = t.parts::<ThreadState>();
    let b = &mut st.builders;
    let r = f(out, b);
    let open = !b.is_idle();
    t.hold_placing(open);
    Some(r)
}

/// [`batches`]: a displaced WR (its batch's first ones are displaced together, in order).
fn take_displaced(mut out: sink::Out<'_>, b: &mut Builders, qp: u64, rec: &PostSend) {
    b.begin_with(qp, |r| *r = *rec, &mut |r: &PostSend| out.append(r));
}

/// An opcode builder on `qp` (the QP numbered `qpn`): a new WR in its batch, stamped `ts`.
#[inline(always)]
pub fn begin(qp: u64, ts: u64, qpn: u32, source: u8, wr: &SendWr) {
    batches(|out, b| {
        if !b.stage_with(qp, |r| put_post_send(r, ts, qpn, source, wr)) {
            begin_in_builder(out.reborrow(), b, qp);
        }
    });
}

/// [`begin`] of a WR that was not staged (out of line).
#[inline(never)]
fn begin_in_builder(mut out: sink::Out<'_>, b: &mut Builders, qp: u64) {
    b.begin_in_builder(qp, &mut |r: &PostSend| out.append(r));
}

/// A setter of the WR being built on `qp`: the remote address, rkey (UD: remote QPN, DC: DCT
/// number) and compare/add operand (UD: qkey, DC: DC key).
#[inline(always)]
pub fn set_address(qp: u64, remote_addr: u64, rkey: u32, compare_add: u64) {
    batches(|_, b| {
        if let Some(r) = b.current(qp) {
            (r.remote_addr, r.rkey, r.compare_add) = (remote_addr, rkey, compare_add);
        }
    });
}

/// A setter of the WR being built on `qp`: its data (`bytes` in `num_sge` pieces).
#[inline(always)]
pub fn set_data(qp: u64, bytes: u32, num_sge: u16) {
    batches(|_, b| {
        if let Some(r) = b.current(qp) {
            (r.bytes, r.num_sge) = (bytes, num_sge);
        }
    });
}

/// `wr_complete` returned `rc`: writes the batch, or a `PostError` naming its first WR (at
/// the time `wr_complete` returned: a successful one needs no timestamp).
#[inline(always)]
pub fn complete(qp: u64, qpn: u32, rc: i32, source: u8) {
    batches(|out, b| {
        if rc == 0 {
            if let Some(r) = b.take_staged(qp) {
                return out.append_post_send(r);
            }
        }
        complete_in_builder(out.reborrow(), b, qp, qpn, rc, source);
    });
}

/// [`complete`] of a batch in a builder, or of a failed one.
#[inline(never)]
fn complete_in_builder(
    mut out: sink::Out<'_>,
    b: &mut Builders,
    qp: u64,
    qpn: u32,
    rc: i32,
    source: u8,
) {
    let done = b.complete(qp, rc == 0, &mut |r: &PostSend| out.append(r));
    if rc != 0 {
        let first = done.map(|d| d.first_wr_id).unwrap_or(0);
        out.append(&post_error(sink::now(), rc, first, qp, qpn, source));
    }
}

/// `wr_abort` on `qp`.
pub fn abort(qp: u64) {
    batches(|_, b| b.abort(qp));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wr(id: u64) -> PostSend {
        PostSend { wr_id: id, ..ZERO }
    }

    fn collect(b: &mut Builders, qp: u64, ok: bool) -> (Vec<u64>, Option<Completed>) {
        let mut out = Vec::new();
        let c = b.complete(qp, ok, &mut |r: &PostSend| out.push(r.wr_id));
        (out, c)
    }

    #[test]
    fn a_completed_batch_is_written_in_order_with_setter_changes() {
        let mut b = Builders::new();
        let mut none = |_: &PostSend| panic!("nothing is written before complete");
        b.begin(0x100, wr(1), &mut none);
        b.current(0x100).unwrap().bytes = 64;
        b.begin(0x100, wr(2), &mut none);
        b.current(0x100).unwrap().bytes = 128;
        let mut got = Vec::new();
        let c = b.complete(0x100, true, &mut |r: &PostSend| {
            got.push((r.wr_id, r.bytes))
        });
        assert_eq!(got, vec![(1, 64), (2, 128)]);
        assert_eq!(
            c,
            Some(Completed {
                wrs: 2,
                first_wr_id: 1
            })
        );
        assert!(b.current(0x100).is_none());
    }

    #[test]
    fn failed_and_aborted_batches_write_nothing() {
        let mut b = Builders::new();
        b.begin(1, wr(7), &mut |_: &PostSend| {});
        b.begin(1, wr(8), &mut |_: &PostSend| {});
        let (out, c) = collect(&mut b, 1, false);
        assert!(out.is_empty());
        assert_eq!(
            c,
            Some(Completed {
                wrs: 2,
                first_wr_id: 7
            })
        );
        b.begin(1, wr(9), &mut |_: &PostSend| {});
        assert_eq!(b.abort(1), 1);
        assert_eq!(collect(&mut b, 1, true).1, None, "aborted batch is gone");
    }

    #[test]
    fn long_batches_are_written_early_and_none_is_lost() {
        let mut b = Builders::new();
        let mut early = Vec::new();
        for id in 0..(PENDING as u64 * 2 + 3) {
            b.begin(5, wr(id), &mut |r: &PostSend| early.push(r.wr_id));
        }
        let (rest, _) = collect(&mut b, 5, true);
        early.extend(rest);
        assert_eq!(early, (0..(PENDING as u64 * 2 + 3)).collect::<Vec<_>>());
    }

    #[test]
    fn two_qps_build_independently() {
        let mut b = Builders::new();
        b.begin(1, wr(10), &mut |_: &PostSend| {});
        b.begin(2, wr(20), &mut |_: &PostSend| {});
        b.begin(1, wr(11), &mut |_: &PostSend| {});
        assert_eq!(collect(&mut b, 2, true).0, vec![20]);
        assert_eq!(collect(&mut b, 1, true).0, vec![10, 11]);
    }

    #[test]
    fn a_fourth_qp_evicts_the_least_recent_builder() {
        let mut b = Builders::new();
        let mut none = |_: &PostSend| panic!("nothing is written before complete");
        b.begin(1, wr(1), &mut none); // the stage
        b.begin(2, wr(2), &mut none); // builder
        b.begin(3, wr(3), &mut none); // builder
        b.begin(2, wr(4), &mut none);
        // QP 3's builder was used least recently.
        b.begin(4, wr(5), &mut none);
        assert_eq!(collect(&mut b, 3, true).1, None);
        assert_eq!(collect(&mut b, 2, true).0, vec![2, 4]);
        assert_eq!(collect(&mut b, 1, true).0, vec![1]);
        assert_eq!(collect(&mut b, 4, true).0, vec![5]);
        assert!(b.is_idle());
    }

    #[test]
    fn a_staged_wr_moves_to_a_builder_with_its_setter_changes() {
        let mut b = Builders::new();
        let mut none = |_: &PostSend| panic!("nothing is written before complete");
        b.begin(7, wr(1), &mut none);
        b.current(7).unwrap().bytes = 10;
        b.begin(8, wr(50), &mut none);
        b.begin(7, wr(2), &mut none);
        b.current(7).unwrap().bytes = 20;
        let mut got = Vec::new();
        b.complete(7, true, &mut |r: &PostSend| got.push((r.wr_id, r.bytes)));
        assert_eq!(got, vec![(1, 10), (2, 20)]);
        assert_eq!(collect(&mut b, 8, true).0, vec![50]);
        // The stage is free again: a new batch's first WR goes there.
        b.begin(9, wr(60), &mut none);
        assert_eq!(b.stage_qp, 9);
    }

    #[test]
    fn abort_discards_a_staged_or_built_batch() {
        let mut b = Builders::new();
        b.begin(1, wr(1), &mut |_: &PostSend| {});
        assert_eq!(b.abort(1), 1);
        b.begin(1, wr(2), &mut |_: &PostSend| {});
        b.begin(1, wr(3), &mut |_: &PostSend| {});
        assert_eq!(b.abort(1), 2);
        b.begin(1, wr(4), &mut |_: &PostSend| {});
        assert_eq!(collect(&mut b, 1, true).0, vec![4]);
        assert!(b.is_idle());
    }

    #[test]
    fn builders_without_start_still_record() {
        let mut b = Builders::new();
        b.begin(9, wr(4), &mut |_: &PostSend| {});
        assert_eq!(collect(&mut b, 9, true).0, vec![4]);
    }
}
