//! The writer's side of the compact encoding: the per-chunk time base and slot table, and the
//! [`ChunkWriter`] appends of the three hot kinds (see the parent module for the format).
//!
//! The slot table has one region per role — send posts (slots 0–63), completions (64–127),
//! receive posts (128–191) — each direct-mapped by queue, so a queue's sends, receives and
//! completions never evict each other, and a lookup is one or two compares: a send slot holds
//! `qpn | source << 32` (its object is always 0), a completion slot the CQ handle and the QPN,
//! a receive slot the SRQ handle and `qpn | source << 32`. The table is cleared at every new
//! chunk (a few hundred bytes per chunk, nothing per record).

use crate::records::{
    post_source, slot_role, CompletionCompact, CompletionShort, FixedRecord, PostRecv,
    PostRecvCompact, PostSend, PostSendCompact, RecordHeader, SlotBind, TimeBase, WorkCompletion,
};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::chunk::{CHUNK_HEADER_SIZE, COMMIT_OFFSET};
use crate::writer::ChunkWriter;

use super::{
    addr_op_fits, completion_is_short, event_kind, expand_post_send, pack_addr_op, pack_completion,
    pack_completion_short, post_recv_fits, put_addr_op, BoundSlot, CompletionBody, CompletionHead,
    CompletionSource, SendBody, SendHead, BOOKKEEPING, DTS_BITS, DTS_LIMIT, POST_RECV_C,
    POST_SEND_C,
};

/// A compact send placed at or after the append position, unpublished
/// ([`ChunkWriter::place_plain_send_at`]): where its record lies in the chunk, for the data its
/// caller learns after placing it ([`ChunkWriter::set_placed_sge`]). Valid until anything else
/// is written through its writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct PlacedSend(u32);

/// Slots per role in the writer's table (readers accept any slot 0–255).
pub const WRITER_SLOTS: usize = 64;
/// First slot of each role's region.
const SEND_REGION: usize = 0;
const COMPLETION_REGION: usize = WRITER_SLOTS;
const RECV_REGION: usize = 2 * WRITER_SLOTS;
/// A send or receive slot's key when it is not bound (`qpn | source << 32` never is this).
const UNBOUND: u64 = u64::MAX;
/// A completion slot's QPN when it is not bound (QPNs have 24 bits).
const UNBOUND_QPN: u32 = u32::MAX;

/// A writer's compact-encoding context for its current chunk.
pub(crate) struct SlotTable {
    /// Time base of the chunk's compact records.
    pub(crate) base: u64,
    /// The hot paths' one time check: a record at `ts` with `ts - base` (wrapping) below it
    /// needs no `TimeBase` and comes before the horizon ([`ChunkWriter::set_horizon`]).
    pub(crate) lim: u64,
    horizon: u64,
    /// Send slots: `qpn | source << 32`.
    pub(crate) send: [u64; WRITER_SLOTS],
    /// Completion slots: the CQ handle and the QPN.
    pub(crate) cq: [u64; WRITER_SLOTS],
    pub(crate) cq_qpn: [u32; WRITER_SLOTS],
    /// Receive slots: the queue's [`recv_word`] and its SRQ handle (0 if none), apart so
    /// that the hot path compares each with one scaled load — and a queue without an SRQ
    /// needs only the first.
    recv_key: [u64; WRITER_SLOTS],
    recv_srq: [u64; WRITER_SLOTS],
    /// Every slot's `tslot` bits (slot << 24), read by the hot paths.
    pub(crate) hi: [u32; 3 * WRITER_SLOTS],
}

impl SlotTable {
    pub(crate) fn new() -> SlotTable {
        SlotTable {
            base: 0,
            lim: DTS_LIMIT,
            horizon: u64::MAX,
            send: [UNBOUND; WRITER_SLOTS],
            cq: [0; WRITER_SLOTS],
            cq_qpn: [UNBOUND_QPN; WRITER_SLOTS],
            recv_key: [UNBOUND; WRITER_SLOTS],
            recv_srq: [0; WRITER_SLOTS],
            hi: std::array::from_fn(|i| (i as u32) << DTS_BITS),
        }
    }

    /// A new chunk: base 0, no slot bound.
    pub(crate) fn new_chunk(&mut self) {
        self.send = [UNBOUND; WRITER_SLOTS];
        self.cq_qpn = [UNBOUND_QPN; WRITER_SLOTS];
        self.recv_key = [UNBOUND; WRITER_SLOTS];
        self.set_base(0);
    }

    fn set_base(&mut self, base: u64) {
        self.base = base;
        self.lim = self.horizon.saturating_sub(base).min(DTS_LIMIT);
    }

    /// The slot (in the whole table) of the queue (`object`, `key` = qpn | source << 32) in
    /// `role`'s region, and whether it is bound to that queue.
    #[inline(always)]
    fn lookup(&self, role: u8, object: u64, key: u64) -> (usize, bool) {
        let qpn = key as u32;
        match role {
            slot_role::SEND => {
                let i = qpn as usize % WRITER_SLOTS;
                (SEND_REGION + i, self.send[i] == key)
            }
            slot_role::COMPLETION => {
                let i = slot_of(object, qpn);
                let bound = self.cq[i] == object && self.cq_qpn[i] == qpn;
                (COMPLETION_REGION + i, bound)
            }
            _ => {
                let i = slot_of(object, qpn);
                (
                    RECV_REGION + i,
                    self.recv_bound(i, object, recv_word_of_key(key, object)),
                )
            }
        }
    }

    /// Whether receive slot `i` is bound to the queue (`object`, its [`recv_word`]).
    #[inline(always)]
    fn recv_bound(&self, i: usize, object: u64, word: u64) -> bool {
        self.recv_key[i] == word && (object == 0 || self.recv_srq[i] == object)
    }

    /// Binds `slot` (from `lookup`) to the queue; returns its role.
    fn bind(&mut self, slot: usize, object: u64, key: u64) -> u8 {
        let i = slot % WRITER_SLOTS;
        match slot / WRITER_SLOTS {
            0 => {
                self.send[i] = key;
                slot_role::SEND
            }
            1 => {
                (self.cq[i], self.cq_qpn[i]) = (object, key as u32);
                slot_role::COMPLETION
            }
            _ => {
                (self.recv_key[i], self.recv_srq[i]) = (recv_word_of_key(key, object), object);
                slot_role::RECV
            }
        }
    }
}

/// `ChunkWriter::place_limit` for a chunk of capacity `cap`: positions below it have room for
/// a compact `PostSend` or `WorkCompletion` and its bookkeeping; 0 when the writer does not
/// compact.
pub(crate) const fn place_limit(cap: u32, compact: bool) -> u32 {
    let need = size_of::<PostSendCompact>() as u32 + BOOKKEEPING;
    if compact && cap >= need {
        cap - need + 1
    } else {
        0
    }
}

/// A queue's slot in its role's region.
#[inline(always)]
fn slot_of(object: u64, qpn: u32) -> usize {
    ((object >> 6) as usize ^ qpn as usize) % WRITER_SLOTS
}

/// A receive queue's word in the slot table: its key (`qpn | source << 32`) with the source
/// XORed with `POST_RECV` — so that an `ibv_post_recv` queue's word is its QPN, which the hot
/// path has at hand — and bit 40 set when it has an SRQ handle (`object`), so that a queue
/// without one is told from every queue with one by this word alone. One-to-one on (key,
/// whether object is 0); never [`UNBOUND`].
#[inline(always)]
fn recv_word(qpn: u32, source: u8, object: u64) -> u64 {
    qpn as u64 | ((source ^ post_source::POST_RECV) as u64) << 32 | ((object != 0) as u64) << 40
}

/// [`recv_word`] of a key (`qpn | source << 32`).
#[inline(always)]
fn recv_word_of_key(key: u64, object: u64) -> u64 {
    recv_word(key as u32, (key >> 32) as u8, object)
}

/// The [`SendHead`] and [`SendBody`] of a `PostSend` without immediate data or atomic
/// operands (`None` for one with them: no compact form).
#[inline(always)]
fn plain_send_parts(r: &PostSend) -> Option<(SendHead, impl FnOnce() -> SendBody + '_)> {
    if r.imm != 0 || r.compare_add != 0 || r._pad != 0 {
        return None;
    }
    let head = SendHead {
        qpn: r.qpn,
        source: r.source,
        remote_addr: r.remote_addr,
        flags: r.hdr.aux,
        num_sge: r.num_sge,
        opcode: r.opcode,
    };
    let body = || SendBody {
        wr_id: r.wr_id,
        rkey: r.rkey,
        bytes: r.bytes,
    };
    Some((head, body))
}

/// A send queue's key (`qpn | source << 32`).
#[inline(always)]
fn send_key(head: &SendHead) -> u64 {
    head.qpn as u64 | (head.source as u64) << 32
}

impl ChunkWriter {
    /// Lowers the hot paths' time horizon ([`place_plain_send`](Self::place_plain_send),
    /// [`append_bound_completion`](Self::append_bound_completion)) to `ts`: they write nothing
    /// for a record at or after it (the caller's own bookkeeping is due then, e.g. a clock
    /// snapshot). Default: no horizon.
    pub fn set_horizon(&mut self, ts: u64) {
        self.slots.horizon = ts;
        self.slots.set_base(self.slots.base);
    }

    /// The horizon [`set_horizon`](Self::set_horizon) set.
    #[inline(always)]
    pub fn horizon(&self) -> u64 {
        self.slots.horizon
    }

    /// `append` of a `PostSend`: compact when it fits.
    #[inline(always)]
    pub(crate) fn append_post_send(&mut self, r: &PostSend) -> bool {
        if let Some((head, body)) = plain_send_parts(r) {
            if let Some(ok) = self.try_append_plain_send(r.ts, &head, body) {
                return ok;
            }
        }
        self.append_full(r)
    }

    /// Writes and publishes the compact form of `r` when it has one and needs no bookkeeping
    /// (as [`place_plain_send`](Self::place_plain_send), then
    /// [`publish_placed_send`](Self::publish_placed_send)): what `append` writes then, on a
    /// path with no call. False when nothing was written: the caller appends `r`.
    #[inline(always)]
    pub fn append_post_send_placed(&mut self, r: &PostSend) -> bool {
        let placed = match plain_send_parts(r) {
            Some((head, body)) => self.place_plain_send(r.ts, &head, body),
            None => false,
        };
        if placed {
            self.publish_placed_send();
        }
        placed
    }

    /// Appends the compact form of the `PostSend` at `ts` of `head` and `body()` — what
    /// `append` of that full record writes when it fits — and returns whether it was
    /// recorded (false: dropped and counted, as `append`); `None` when it has no compact
    /// form or the writer does not compact: nothing was written or counted, and the caller
    /// appends the full record. The hot path's way to skip assembling the full record:
    /// `body` is called only once the record's place is ready, so its fields are read
    /// straight into the record.
    #[inline(always)]
    pub fn try_append_plain_send(
        &mut self,
        ts: u64,
        head: &SendHead,
        body: impl FnOnce() -> SendBody,
    ) -> Option<bool> {
        let addr_op = pack_addr_op(head.remote_addr, head.opcode, head.flags, head.num_sge)
            .filter(|_| self.compact)?;
        Some(
            self.append_slotted(ts, 0, send_key(head), |c: &mut PostSendCompact, tslot| {
                let b = body();
                *c = PostSendCompact {
                    kind: PostSendCompact::KIND as u16,
                    len: size_of::<PostSendCompact>() as u16,
                    tslot,
                    wr_id: b.wr_id,
                    addr_op,
                    rkey: b.rkey,
                    bytes: b.bytes,
                }
            }),
        )
    }

    /// Writes the compact `PostSend` at `ts` of `head` and `body()` at the append position
    /// *without publishing it* — for a caller that records a send before handing it to the
    /// provider and publishes it ([`publish_placed_send`](Self::publish_placed_send)) only
    /// once the provider accepted it. Only when it fits the compact form and needs no
    /// bookkeeping — the current chunk has room, `ts` is within reach of its time base and
    /// before the horizon, and the queue has its slot — so that nothing but the record's own
    /// bytes is written: returns false otherwise (nothing written, nothing counted; the caller
    /// records the send the ordinary way, which writes the bookkeeping for the next one). No
    /// call, so the caller's scratch registers are enough.
    #[inline(always)]
    pub fn place_plain_send(
        &mut self,
        ts: u64,
        head: &SendHead,
        body: impl FnOnce() -> SendBody,
    ) -> bool {
        self.place_plain_send_at(0, ts, head, body).is_some()
    }

    /// [`place_plain_send`](Self::place_plain_send) of the `k`-th (from 0) of sends placed
    /// one after the other — `k` are placed already, right after the append position, and
    /// nothing else was written since — for a caller that publishes them together
    /// ([`publish_placed_sends`](Self::publish_placed_sends)), as the `ibv_wr_*` API posts a
    /// batch of WRs at once. The placed record, for the data a caller learns later
    /// ([`set_placed_sge`](Self::set_placed_sge)); `None` where `place_plain_send` returns false.
    #[inline(always)]
    pub fn place_plain_send_at(
        &mut self,
        k: u32,
        ts: u64,
        head: &SendHead,
        body: impl FnOnce() -> SendBody,
    ) -> Option<PlacedSend> {
        const SIZE: u32 = size_of::<PostSendCompact>() as u32;
        let h = head;
        if !addr_op_fits(h.remote_addr, h.flags, h.num_sge) {
            return None;
        }
        let dts = ts.wrapping_sub(self.slots.base);
        let i = h.qpn as usize % WRITER_SLOTS;
        // `k` is small (the caller's run of WRs): this cannot wrap (and makes no panic path).
        let at = self.pos().wrapping_add(k.wrapping_mul(SIZE));
        if dts >= self.slots.lim || at >= self.place_limit || self.slots.send[i] != send_key(h) {
            return None;
        }
        let c = self.record_at(at);
        let tslot = dts as u32 | self.slots.hi[SEND_REGION + i];
        // SAFETY: `place_limit` leaves room for this record inside our exclusively owned
        // chunk; the position is 8-aligned; each field is written once.
        unsafe {
            std::ptr::addr_of_mut!((*c).kind)
                .cast::<u32>()
                .write(kind_len::<PostSendCompact>());
            std::ptr::addr_of_mut!((*c).tslot).write(tslot);
            let addr_op = std::ptr::addr_of_mut!((*c).addr_op);
            put_addr_op(addr_op, h.remote_addr, h.opcode, h.flags, h.num_sge);
            let b = body();
            std::ptr::addr_of_mut!((*c).wr_id).write(b.wr_id);
            std::ptr::addr_of_mut!((*c).rkey).write(b.rkey);
            std::ptr::addr_of_mut!((*c).bytes).write(b.bytes);
        }
        Some(PlacedSend(at))
    }

    /// The compact send at position `at` of the current chunk.
    #[inline(always)]
    fn record_at(&self, at: u32) -> *mut PostSendCompact {
        self.base.wrapping_add(CHUNK_HEADER_SIZE + at as usize) as *mut PostSendCompact
    }

    /// Gives a placed send one SGE of `bytes`: its `bytes`, and an SGE count of 1 (the
    /// `ibv_wr_*` API's setters give a WR its data after its opcode). Two stores.
    ///
    /// # Safety
    /// `placed` is still placed — nothing was written through this writer since it was — and
    /// its SGE count is 0 or 1.
    #[inline(always)]
    pub unsafe fn set_placed_sge(&mut self, placed: PlacedSend, bytes: u32) {
        let c = self.record_at(placed.0);
        // SAFETY: per caller, a placed record (inside our exclusively owned chunk, 8-aligned)
        // is at `c`; its SGE count bits are 0 or 1, so setting the lowest of them makes it 1.
        unsafe {
            std::ptr::addr_of_mut!((*c).bytes).write(bytes);
            let addr_op = std::ptr::addr_of_mut!((*c).addr_op);
            if cfg!(target_endian = "little") {
                // The top byte: flags | SGE count << 5 (`put_addr_op`).
                let top = addr_op.cast::<u8>().add(7);
                top.write(top.read() | 1 << 5);
            } else {
                addr_op.write(addr_op.read() | 1 << 61);
            }
        }
    }

    /// Publishes the record [`place_plain_send`](Self::place_plain_send) placed; nothing may
    /// have been written through this writer since.
    #[inline(always)]
    pub fn publish_placed_send(&mut self) {
        self.publish(size_of::<PostSendCompact>() as u32);
    }

    /// Publishes the `n` records [`place_plain_send_at`](Self::place_plain_send_at) placed
    /// (with `k` from 0 to `n - 1`); nothing else may have been written through this writer
    /// since.
    #[inline(always)]
    pub fn publish_placed_sends(&mut self, n: u32) {
        const ONE: u64 = 1 << 32 | size_of::<PostSendCompact>() as u64;
        self.commit += n as u64 * ONE;
        // SAFETY: as in `publish`.
        unsafe {
            (*(self.base.add(COMMIT_OFFSET) as *const AtomicU64))
                .store(self.commit, Ordering::Release)
        };
    }

    /// The full `PostSend` the `k`-th send [`place_plain_send_at`](Self::place_plain_send_at)
    /// placed stands for (its compact record read back in the chunk's context), for a caller
    /// that must write something else before publishing it (the placed bytes are then written
    /// over; it appends this record later instead). `None` when the writer has no room for
    /// that record (nothing can be placed there).
    ///
    /// The caller must know that it placed that record and that nothing was written through
    /// this writer since; otherwise the result is meaningless (but reading it is sound).
    pub fn placed_send(&self, k: u32) -> Option<PostSend> {
        let at = self
            .pos()
            .checked_add(k.checked_mul(size_of::<PostSendCompact>() as u32)?)?;
        if at >= self.place_limit {
            return None;
        }
        // SAFETY: below `place_limit` a whole compact send lies inside our chunk (which is
        // mapped and initialised: every byte below the capacity was written or zero-filled).
        let c = unsafe { self.record_at(at).read() };
        let i = (c.tslot >> DTS_BITS) as usize % WRITER_SLOTS;
        let key = self.slots.send[i];
        let slot = BoundSlot {
            object: 0,
            qpn: key as u32,
            source: (key >> 32) as u8,
            role: slot_role::SEND,
        };
        Some(expand_post_send(&c, self.slots.base, &slot))
    }

    /// `append` of a `PostRecv`: compact when it fits.
    #[inline(always)]
    pub(crate) fn append_post_recv(&mut self, r: &PostRecv) -> bool {
        if !self.compact || !post_recv_fits(r) {
            return self.append_full(r);
        }
        let key = r.qpn as u64 | (r.source as u64) << 32;
        self.append_slotted(r.ts, r.srq, key, |c: &mut PostRecvCompact, tslot| {
            *c = PostRecvCompact {
                kind: PostRecvCompact::KIND as u16,
                len: size_of::<PostRecvCompact>() as u16,
                tslot,
                wr_id: r.wr_id,
                bytes: r.bytes,
                num_sge: r.num_sge,
                _pad: 0,
            }
        })
    }

    /// `append` of a `WorkCompletion`: compact when it fits.
    #[inline(always)]
    pub(crate) fn append_completion(&mut self, r: &WorkCompletion) -> bool {
        if r.hw_ts == 0 && r.vendor_err == 0 {
            let head = CompletionHead {
                cq: r.cq,
                qpn: r.qpn,
                src_qp: r.src_qp,
                flags: r.hdr.aux,
            };
            let body = || CompletionBody {
                wr_id: r.wr_id,
                byte_len: r.byte_len,
                imm: r.imm,
                slid: r.slid,
                status: r.status,
                opcode: r.opcode,
            };
            if let Some(ok) = self.try_append_plain_completion(r.ts, &head, body) {
                return ok;
            }
        }
        self.append_full(r)
    }

    /// Appends the compact form of the `WorkCompletion` at `ts` of `head` and `body()` — as
    /// [`try_append_plain_send`](Self::try_append_plain_send) does for a send: a
    /// [`CompletionShort`] when [`completion_is_short`], else a [`CompletionCompact`] when
    /// the head [`fits`](CompletionHead::fits); `None` when it has no compact form.
    #[inline(always)]
    pub fn try_append_plain_completion(
        &mut self,
        ts: u64,
        head: &CompletionHead,
        body: impl FnOnce() -> CompletionBody,
    ) -> Option<bool> {
        if !self.compact {
            return None;
        }
        let b = body();
        let (cq, key) = (head.cq, head.qpn as u64);
        // Short first: a send-side completion's `src_qp` is not consulted (nor its fit).
        if completion_is_short(head, &b) {
            return Some(self.append_slotted(ts, cq, key, |r, tslot| {
                *r = pack_completion_short(tslot, &b)
            }));
        }
        head.fits().then(|| {
            self.append_slotted(ts, cq, key, |r, tslot| {
                *r = pack_completion(tslot, head, &b)
            })
        })
    }

    /// Appends and publishes the compact `WorkCompletion` at `ts` of the completion `wc` of
    /// the CQ `cq` — what [`try_append_plain_completion`](Self::try_append_plain_completion)
    /// appends: a [`CompletionShort`] when `wc.is_short()`, else a [`CompletionCompact`] when
    /// `wc.head()` has one — only when it needs no bookkeeping: the current chunk has room,
    /// `ts` is within reach of its time base and before the horizon, and the queue has its
    /// slot. Returns false otherwise (nothing written, nothing counted: the caller appends it
    /// the ordinary way, which writes the bookkeeping for the next one). No call, so the
    /// caller's scratch registers are enough.
    #[inline(always)]
    pub fn append_bound_completion(
        &mut self,
        ts: u64,
        cq: u64,
        wc: &impl CompletionSource,
    ) -> bool {
        let dts = ts.wrapping_sub(self.slots.base);
        let qpn = wc.qpn();
        let i = slot_of(cq, qpn);
        // `place_limit` is 0 when the writer does not compact, and leaves room for a record
        // of either size and more.
        if dts >= self.slots.lim
            || self.pos() >= self.place_limit
            || self.slots.cq[i] != cq
            || self.slots.cq_qpn[i] != qpn
        {
            return false;
        }
        let tslot = dts as u32 | self.slots.hi[COMPLETION_REGION + i];
        let at = self.at_pos();
        if wc.is_short() {
            // SAFETY: `place_limit` leaves room for this record inside our exclusively owned
            // chunk; the position is 8-aligned.
            unsafe { fill_short(at.cast(), tslot, wc) };
            self.publish(size_of::<CompletionShort>() as u32);
            return true;
        }
        let Some(head) = wc.head().filter(CompletionHead::fits) else {
            return false;
        };
        // SAFETY: as above.
        unsafe { fill_completion(at.cast(), tslot, &head, || wc.body()) };
        self.publish(size_of::<CompletionCompact>() as u32);
        true
    }

    /// Appends and publishes the compact `PostRecv` at `ts` of one receive WR with one SGE
    /// (`body()`: its wr_id and length) posted to the receive queue (`object` = its SRQ handle,
    /// 0 when none; its QPN and the post's source) — what `append` of that full record writes —
    /// only when it needs no bookkeeping: the current chunk has room, `ts` is within reach of
    /// its time base and before the horizon, and the queue has its slot. Returns false
    /// otherwise (nothing written, nothing counted: the caller appends it the ordinary way,
    /// which writes the bookkeeping for the next one). No call, so the caller's scratch
    /// registers are enough.
    #[inline(always)]
    pub fn append_bound_recv(
        &mut self,
        ts: u64,
        object: u64,
        (qpn, source): (u32, u8),
        body: impl FnOnce() -> (u64, u32),
    ) -> bool {
        let dts = ts.wrapping_sub(self.slots.base);
        let i = slot_of(object, qpn);
        // `place_limit` is 0 when the writer does not compact, and leaves room for a
        // `PostSendCompact`, larger than this record.
        if dts >= self.slots.lim
            || self.pos() >= self.place_limit
            || !self
                .slots
                .recv_bound(i, object, recv_word(qpn, source, object))
        {
            return false;
        }
        let tslot = dts as u32 | self.slots.hi[RECV_REGION + i];
        let c = self.at_pos() as *mut PostRecvCompact;
        let (wr_id, bytes) = body();
        // SAFETY: `place_limit` leaves room for this record inside our exclusively owned
        // chunk; the position is 8-aligned; each field is written once.
        unsafe {
            std::ptr::addr_of_mut!((*c).kind)
                .cast::<u32>()
                .write(kind_len::<PostRecvCompact>());
            std::ptr::addr_of_mut!((*c).tslot).write(tslot);
            std::ptr::addr_of_mut!((*c).wr_id).write(wr_id);
            std::ptr::addr_of_mut!((*c).bytes).write(bytes);
            // `num_sge` 1 and the padding: one constant store.
            std::ptr::addr_of_mut!((*c).num_sge)
                .cast::<u32>()
                .write(ONE_SGE);
        }
        self.publish(size_of::<PostRecvCompact>() as u32);
        true
    }

    /// Appends the compact record `C` (filled whole by `fill`, given its `tslot` word) of the
    /// queue (`object`, `key` = qpn | source << 32), after the `TimeBase` and `SlotBind` it
    /// needs; all published with one store. Drops are counted as the full kind's.
    #[inline(always)]
    fn append_slotted<C: FixedRecord>(
        &mut self,
        ts: u64,
        object: u64,
        key: u64,
        fill: impl FnOnce(&mut C, u32),
    ) -> bool {
        let size = size_of::<C>() as u32;
        if self.pos() + size + BOOKKEEPING > self.cap && !self.roll(full_kind::<C>()) {
            return false;
        }
        self.fill_slotted(ts, object, key, fill);
        self.publish(size);
        true
    }

    /// Writes the compact record `C` of [`append_slotted`](Self::append_slotted) after the
    /// bookkeeping it needs, unpublished; the caller checked the room.
    #[inline(always)]
    fn fill_slotted<C: FixedRecord>(
        &mut self,
        ts: u64,
        object: u64,
        key: u64,
        fill: impl FnOnce(&mut C, u32),
    ) {
        let mut dts = ts.wrapping_sub(self.slots.base);
        if dts >= DTS_LIMIT {
            self.put_time_base(ts);
            dts = 0;
        }
        let (slot, bound) = self.slots.lookup(role::<C>(), object, key);
        if !bound {
            self.put_slot_bind(slot, object, key);
        }
        // SAFETY: the caller's room check covers the bookkeeping and this record inside our
        // exclusively owned chunk; the position is 8-aligned and C is Pod.
        let rec = unsafe { &mut *(self.at_pos() as *mut C) };
        // Unpublished until `publish`: the order of its stores does not matter.
        fill(rec, dts as u32 | (slot as u32) << DTS_BITS);
    }

    /// Appends a `TimeBase` (unpublished: the next record's publish covers it).
    #[cold]
    #[inline(never)]
    fn put_time_base(&mut self, ts: u64) {
        self.slots.set_base(ts);
        self.put_unpublished(&TimeBase {
            hdr: RecordHeader::of::<TimeBase>(0),
            base: ts,
        });
    }

    /// Binds `slot` and appends its `SlotBind` (unpublished).
    #[cold]
    #[inline(never)]
    fn put_slot_bind(&mut self, slot: usize, object: u64, key: u64) {
        let role = self.slots.bind(slot, object, key);
        self.put_unpublished(&SlotBind {
            hdr: RecordHeader::of::<SlotBind>(slot as u32),
            object,
            qpn: key as u32,
            source: (key >> 32) as u8,
            role,
            _pad: 0,
        });
    }
}

/// Writes a compact `WorkCompletion`: the words at hand first, then `body`'s fields as they
/// are read (it may read memory the record could alias as far as the compiler knows, so its
/// reads stay after these stores and fewer values are held in registers at once).
///
/// # Safety
/// `r` must be a writable, aligned record slot the caller owns.
#[inline(always)]
unsafe fn fill_completion(
    r: *mut CompletionCompact,
    tslot: u32,
    head: &CompletionHead,
    body: impl FnOnce() -> CompletionBody,
) {
    // SAFETY: per caller; each field is written once.
    unsafe {
        let kind_len = kind_len::<CompletionCompact>();
        std::ptr::addr_of_mut!((*r).kind)
            .cast::<u32>()
            .write(kind_len);
        std::ptr::addr_of_mut!((*r).tslot).write(tslot);
        // `src_qp_flags` (they fit): on little-endian machines `src_qp` and the flags byte
        // over its top byte (fewer operations than assembling the word).
        let sqf = std::ptr::addr_of_mut!((*r).src_qp_flags);
        if cfg!(target_endian = "little") {
            sqf.write(head.src_qp);
            sqf.cast::<u8>().add(3).write(head.flags as u8);
        } else {
            sqf.write(head.src_qp | head.flags << 24);
        }
        let b = body();
        std::ptr::addr_of_mut!((*r).wr_id).write(b.wr_id);
        // `byte_len` and `imm` as one word (a constant `imm` costs nothing then).
        let (n, i) = (b.byte_len.to_ne_bytes(), b.imm.to_ne_bytes());
        let pair = u64::from_ne_bytes([n[0], n[1], n[2], n[3], i[0], i[1], i[2], i[3]]);
        std::ptr::addr_of_mut!((*r).byte_len)
            .cast::<u64>()
            .write(pair);
        std::ptr::addr_of_mut!((*r).slid).write(b.slid);
        std::ptr::addr_of_mut!((*r).status).write(b.status);
        std::ptr::addr_of_mut!((*r).opcode).write(b.opcode);
    }
}

/// Writes a [`CompletionShort`] of `wc` (which `is_short`), each field as it is read.
///
/// # Safety
/// `r` must be a writable, aligned record slot the caller owns.
#[inline(always)]
unsafe fn fill_short(r: *mut CompletionShort, tslot: u32, wc: &impl CompletionSource) {
    // SAFETY: per caller; each field is written once.
    unsafe {
        std::ptr::addr_of_mut!((*r).kind)
            .cast::<u32>()
            .write(kind_len::<CompletionShort>());
        std::ptr::addr_of_mut!((*r).tslot).write(tslot);
        let b = wc.body();
        std::ptr::addr_of_mut!((*r).wr_id).write(b.wr_id);
        std::ptr::addr_of_mut!((*r).byte_len).write(b.byte_len);
        std::ptr::addr_of_mut!((*r).opcode).write(b.opcode as u32);
    }
}

const _: () = assert!(
    std::mem::offset_of!(CompletionCompact, imm)
        == std::mem::offset_of!(CompletionCompact, byte_len) + 4
        && std::mem::offset_of!(CompletionCompact, byte_len) % 8 == 0
);

/// The first word of a compact record `C`: `kind` and `len` (u16 each, in this order).
/// A `PostRecvCompact`'s `num_sge` (1) and `_pad` (0) as the one 4-byte word they occupy.
const ONE_SGE: u32 = {
    let n = 1u16.to_ne_bytes();
    u32::from_ne_bytes([n[0], n[1], 0, 0])
};
const _: () = assert!(
    std::mem::offset_of!(PostRecvCompact, _pad)
        == std::mem::offset_of!(PostRecvCompact, num_sge) + 2
        && std::mem::offset_of!(PostRecvCompact, num_sge) % 4 == 0
        && size_of::<PostRecvCompact>() == std::mem::offset_of!(PostRecvCompact, num_sge) + 4
);

const fn kind_len<C: FixedRecord>() -> u32 {
    let (k, l) = (
        (C::KIND as u16).to_ne_bytes(),
        (size_of::<C>() as u16).to_ne_bytes(),
    );
    u32::from_ne_bytes([k[0], k[1], l[0], l[1]])
}

/// The role of a compact kind's slots.
const fn role<C: FixedRecord>() -> u8 {
    match C::KIND as u16 {
        POST_SEND_C => slot_role::SEND,
        POST_RECV_C => slot_role::RECV,
        _ => slot_role::COMPLETION,
    }
}

/// The full kind a compact kind stands for (the kind its drops are counted as).
const fn full_kind<C: FixedRecord>() -> u16 {
    match event_kind(C::KIND as u16) {
        Some(k) => k,
        None => C::KIND as u16,
    }
}
