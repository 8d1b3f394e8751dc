//! Compact hot records (format 2): the one definition of how `PostSend`, `PostRecv` and
//! `WorkCompletion` are packed into 24–32 bytes by the writer and expanded back by readers.
//!
//! A compact record carries a 24-bit time offset and an 8-bit slot instead of a 64-bit time
//! and the per-queue constants (QPN, source, CQ or SRQ handle). Both refer to context set
//! earlier *in the same chunk*: the time base of the last [`TimeBase`] (0 at the chunk's
//! start) and the per-queue constants of the slot's last [`SlotBind`]. A chunk therefore
//! decodes on its own, whatever happened to the others (salvage, rings, truncation).
//!
//! Writer ([`ChunkWriter`]'s `append` of the three kinds): when a record's fields fit, it
//! appends — after a `TimeBase` when the time is not within 2^24 units after the base, and a
//! `SlotBind` when the queue has no slot in this chunk yet — the compact form; otherwise the
//! full record. The bookkeeping records and the compact record are published together (one
//! commit-word store). Slots come from a direct-mapped table of [`WRITER_SLOTS`] entries keyed
//! by (object, QPN, source, role); a collision rebinds the slot.
//!
//! Reader ([`ChunkDecoder`]): consumes `TimeBase` and `SlotBind` and hands out every compact
//! record as a [`RawRecord`] of the full kind with the full record's bytes
//! ([`RawRecord::record_bytes`]), equal bit for bit to what the writer was given.

use bytemuck::Pod;

use crate::reader::RawRecord;
use crate::records::{
    slot_role, CompletionCompact, FixedRecord, PostRecv, PostRecvCompact, PostSend,
    PostSendCompact, RecordHeader, RecordKind, SlotBind, TimeBase, WorkCompletion,
};
use crate::writer::ChunkWriter;

/// Bits of a compact record's time offset (the low bits of its `tslot` word).
pub const DTS_BITS: u32 = 24;
/// Time offsets must be below this.
pub const DTS_LIMIT: u64 = 1 << DTS_BITS;
/// Slots the writer's table has (readers accept any slot 0–255).
pub const WRITER_SLOTS: usize = 64;
/// Largest bookkeeping a compact append may add before its record (`TimeBase` + `SlotBind`).
pub(crate) const BOOKKEEPING: u32 = (size_of::<TimeBase>() + size_of::<SlotBind>()) as u32;

const TIME_BASE: u16 = RecordKind::TimeBase as u16;
const SLOT_BIND: u16 = RecordKind::SlotBind as u16;
const POST_SEND_C: u16 = RecordKind::PostSendCompact as u16;
const POST_RECV_C: u16 = RecordKind::PostRecvCompact as u16;
const COMPLETION_C: u16 = RecordKind::CompletionCompact as u16;

// ---------------------------------------------------------------------------------------------
// Packing (writer) and expansion (reader), kind by kind

/// `addr_op` of a [`PostSendCompact`] — remote address (48 bits), opcode, send flags (5
/// bits) and SGE count (3 bits) — or `None` when they do not fit.
#[inline(always)]
pub fn pack_addr_op(remote_addr: u64, opcode: u8, flags: u32, num_sge: u16) -> Option<u64> {
    let fits = remote_addr >> 48 == 0 && flags < 32 && num_sge < 8;
    let word = remote_addr | (opcode as u64) << 48 | (flags as u64) << 56 | (num_sge as u64) << 61;
    fits.then_some(word)
}

/// What decides whether a send WR without immediate data or atomic operands (RDMA write,
/// send) has a compact `PostSend` ([`ChunkWriter::try_append_plain_send`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendHead {
    pub qpn: u32,
    pub source: u8,
    pub remote_addr: u64,
    /// `ibv_send_flags` (the full record's `hdr.aux`).
    pub flags: u32,
    pub num_sge: u16,
    pub opcode: u8,
}

/// The rest of such a WR's `PostSend` (`imm`, `compare_add` and `_pad` are 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendBody {
    pub wr_id: u64,
    pub rkey: u32,
    pub bytes: u32,
}

/// The `PostSend` a compact one stands for.
pub fn expand_post_send(c: &PostSendCompact, base: u64, s: &BoundSlot) -> PostSend {
    PostSend {
        hdr: RecordHeader::of::<PostSend>((c.addr_op >> 56) as u32 & 31),
        ts: base + (c.tslot as u64 & (DTS_LIMIT - 1)),
        wr_id: c.wr_id,
        remote_addr: c.addr_op & ((1 << 48) - 1),
        compare_add: 0,
        qpn: s.qpn,
        bytes: c.bytes,
        rkey: c.rkey,
        imm: 0,
        num_sge: (c.addr_op >> 61) as u16,
        opcode: (c.addr_op >> 48) as u8,
        source: s.source,
        _pad: 0,
    }
}

/// Whether `r` has a compact form.
#[inline(always)]
pub fn post_recv_fits(r: &PostRecv) -> bool {
    r.hdr.aux == 0 && r._pad == [0; 5]
}

/// The `PostRecv` a compact one stands for.
pub fn expand_post_recv(c: &PostRecvCompact, base: u64, s: &BoundSlot) -> PostRecv {
    PostRecv {
        hdr: RecordHeader::of::<PostRecv>(0),
        ts: base + (c.tslot as u64 & (DTS_LIMIT - 1)),
        wr_id: c.wr_id,
        qpn: s.qpn,
        bytes: c.bytes,
        srq: s.object,
        num_sge: c.num_sge,
        source: s.source,
        _pad: [0; 5],
    }
}

/// What decides whether a completion without hardware time or vendor error has a compact
/// `WorkCompletion` ([`ChunkWriter::try_append_plain_completion`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletionHead {
    pub cq: u64,
    pub qpn: u32,
    pub src_qp: u32,
    /// `ibv_wc_flags` (the full record's `hdr.aux`).
    pub flags: u32,
}

/// The rest of such a completion's `WorkCompletion` (`hw_ts` and `vendor_err` are 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletionBody {
    pub wr_id: u64,
    pub byte_len: u32,
    pub imm: u32,
    pub slid: u16,
    pub status: u8,
    pub opcode: u8,
}

/// The `WorkCompletion` a compact one stands for.
pub fn expand_completion(c: &CompletionCompact, base: u64, s: &BoundSlot) -> WorkCompletion {
    WorkCompletion {
        hdr: RecordHeader::of::<WorkCompletion>(c.src_qp_flags >> 24),
        ts: base + (c.tslot as u64 & (DTS_LIMIT - 1)),
        wr_id: c.wr_id,
        hw_ts: 0,
        cq: s.object,
        qpn: s.qpn,
        src_qp: c.src_qp_flags & 0xff_ffff,
        byte_len: c.byte_len,
        imm: c.imm,
        status: c.status,
        opcode: c.opcode,
        slid: c.slid,
        vendor_err: 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Writer

/// A writer's compact-encoding context for its current chunk.
pub(crate) struct SlotTable {
    /// Time base of the chunk's compact records.
    pub(crate) base: u64,
    /// The chunk's generation, in bits 48–63 of every key bound in it (never 0).
    gen: u64,
    /// `gen | slot_role::SEND << 40`: the part of a send slot's key that is the same for
    /// every queue of the chunk.
    send_tag: u64,
    /// Per slot: (object, qpn | source << 32 | role << 40 | generation).
    keys: [[u64; 2]; WRITER_SLOTS],
}

impl SlotTable {
    pub(crate) fn new() -> SlotTable {
        SlotTable {
            base: 0,
            gen: 1 << 48,
            send_tag: 1 << 48 | (slot_role::SEND as u64) << 40,
            keys: [[0; 2]; WRITER_SLOTS],
        }
    }

    /// A new chunk: base 0, no slot bound.
    pub(crate) fn new_chunk(&mut self) {
        self.base = 0;
        self.gen = self.gen.wrapping_add(1 << 48);
        if self.gen == 0 {
            self.keys = [[0; 2]; WRITER_SLOTS];
            self.gen = 1 << 48;
        }
        self.send_tag = self.gen | (slot_role::SEND as u64) << 40;
    }
}

/// `ChunkWriter::place_limit` for a chunk of capacity `cap`: positions below it have room for
/// a compact `PostSend` and its bookkeeping; 0 when the writer does not compact.
pub(crate) const fn place_limit(cap: u32, compact: bool) -> u32 {
    let need = size_of::<PostSendCompact>() as u32 + BOOKKEEPING;
    if compact && cap >= need {
        cap - need + 1
    } else {
        0
    }
}

/// The table slot of a queue.
#[inline(always)]
fn slot_of(object: u64, qpn: u32) -> usize {
    ((object >> 6) as usize ^ qpn as usize) % WRITER_SLOTS
}

impl ChunkWriter {
    /// `append` of a `PostSend`: compact when it fits.
    #[inline(always)]
    pub(crate) fn append_post_send(&mut self, r: &PostSend) -> bool {
        if r.imm == 0 && r.compare_add == 0 && r._pad == 0 {
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
            if let Some(ok) = self.try_append_plain_send(r.ts, &head, body) {
                return ok;
            }
        }
        self.append_full(r)
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
        let key = head.qpn as u64 | (head.source as u64) << 32 | (slot_role::SEND as u64) << 40;
        Some(
            self.append_slotted(ts, 0, key, |c: &mut PostSendCompact, tslot| {
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
    /// bookkeeping — the current chunk has room, its time base is within reach and the queue
    /// has its slot — so that nothing but the record's own bytes is written: returns false
    /// otherwise (nothing written, nothing counted; the caller records the send the ordinary
    /// way, which writes the bookkeeping for the next one). No call, so the caller's scratch
    /// registers are enough.
    #[inline(always)]
    pub fn place_plain_send(
        &mut self,
        ts: u64,
        head: &SendHead,
        body: impl FnOnce() -> SendBody,
    ) -> bool {
        const SIZE: u32 = size_of::<PostSendCompact>() as u32;
        let Some(addr_op) = pack_addr_op(head.remote_addr, head.opcode, head.flags, head.num_sge)
        else {
            return false;
        };
        let dts = ts.wrapping_sub(self.slots.base);
        // SEND slots are always bound with object 0: the key alone identifies the binding.
        let key = head.qpn as u64 | (head.source as u64) << 32 | self.slots.send_tag;
        let i = slot_of(0, head.qpn);
        if self.pos() >= self.place_limit || dts >= DTS_LIMIT || self.slots.keys[i][1] != key {
            return false;
        }
        // SAFETY: `place_limit` leaves room for this record inside our exclusively owned
        // chunk; the position is 8-aligned and the record is Pod.
        let c = unsafe { &mut *(self.at_pos() as *mut PostSendCompact) };
        let b = body();
        *c = PostSendCompact {
            kind: PostSendCompact::KIND as u16,
            len: SIZE as u16,
            tslot: dts as u32 | (i as u32) << DTS_BITS,
            wr_id: b.wr_id,
            addr_op,
            rkey: b.rkey,
            bytes: b.bytes,
        };
        true
    }

    /// Publishes the record [`place_plain_send`](Self::place_plain_send) placed; nothing may
    /// have been written through this writer since.
    #[inline(always)]
    pub fn publish_placed_send(&mut self) {
        self.publish(size_of::<PostSendCompact>() as u32);
    }

    /// `append` of a `PostRecv`: compact when it fits.
    #[inline(always)]
    pub(crate) fn append_post_recv(&mut self, r: &PostRecv) -> bool {
        if !self.compact || !post_recv_fits(r) {
            return self.append_full(r);
        }
        let key = r.qpn as u64 | (r.source as u64) << 32 | (slot_role::RECV as u64) << 40;
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
    /// [`try_append_plain_send`](Self::try_append_plain_send) does for a send.
    #[inline(always)]
    pub fn try_append_plain_completion(
        &mut self,
        ts: u64,
        head: &CompletionHead,
        body: impl FnOnce() -> CompletionBody,
    ) -> Option<bool> {
        if !self.compact || head.src_qp >> 24 != 0 || head.flags >= 256 {
            return None;
        }
        let key = head.qpn as u64 | (slot_role::COMPLETION as u64) << 40;
        let src_qp_flags = head.src_qp | head.flags << 24;
        Some(
            self.append_slotted(ts, head.cq, key, |r: &mut CompletionCompact, tslot| {
                let b = body();
                *r = CompletionCompact {
                    kind: CompletionCompact::KIND as u16,
                    len: size_of::<CompletionCompact>() as u16,
                    tslot,
                    wr_id: b.wr_id,
                    byte_len: b.byte_len,
                    imm: b.imm,
                    src_qp_flags,
                    slid: b.slid,
                    status: b.status,
                    opcode: b.opcode,
                }
            }),
        )
    }

    /// Appends and publishes the compact `WorkCompletion` at `ts` of `head` and `body()` —
    /// what [`try_append_plain_completion`](Self::try_append_plain_completion) appends — only
    /// when it needs no bookkeeping: the current chunk has room, its time base is within
    /// reach and the queue has its slot. Returns false otherwise (nothing written, nothing
    /// counted: the caller appends it the ordinary way, which writes the bookkeeping for the
    /// next one). No call, so the caller's scratch registers are enough.
    #[inline(always)]
    pub fn append_bound_completion(
        &mut self,
        ts: u64,
        cq: u64,
        head: &CompletionHead,
        body: impl FnOnce() -> CompletionBody,
    ) -> bool {
        const SIZE: u32 = size_of::<CompletionCompact>() as u32;
        let dts = ts.wrapping_sub(self.slots.base);
        let key = head.qpn as u64 | (slot_role::COMPLETION as u64) << 40 | self.slots.gen;
        let i = slot_of(cq, head.qpn);
        // `place_limit` is 0 when the writer does not compact, and leaves room for a record
        // of this size and more.
        if self.pos() >= self.place_limit
            || dts >= DTS_LIMIT
            || head.src_qp >> 24 != 0
            || head.flags >= 256
            || self.slots.keys[i] != [cq, key]
        {
            return false;
        }
        // SAFETY: `place_limit` leaves room for this record inside our exclusively owned
        // chunk; the position is 8-aligned and the record is Pod.
        let r = unsafe { &mut *(self.at_pos() as *mut CompletionCompact) };
        let b = body();
        *r = CompletionCompact {
            kind: CompletionCompact::KIND as u16,
            len: SIZE as u16,
            tslot: dts as u32 | (i as u32) << DTS_BITS,
            wr_id: b.wr_id,
            byte_len: b.byte_len,
            imm: b.imm,
            src_qp_flags: head.src_qp | head.flags << 24,
            slid: b.slid,
            status: b.status,
            opcode: b.opcode,
        };
        self.publish(SIZE);
        true
    }

    /// Appends the compact record `C` (filled whole by `fill`, given its `tslot` word) of the
    /// queue (`object`, `key` = qpn | source | role), after the
    /// `TimeBase` and `SlotBind` it needs; all published with one store. Drops are counted
    /// as the full kind's.
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
        let key = key | self.slots.gen;
        let i = slot_of(object, key as u32);
        if self.slots.keys[i] != [object, key] {
            self.put_slot_bind(i, object, key);
        }
        // SAFETY: the caller's room check covers the bookkeeping and this record inside our
        // exclusively owned chunk; the position is 8-aligned and C is Pod.
        let rec = unsafe { &mut *(self.at_pos() as *mut C) };
        // Unpublished until `publish`: the order of its stores does not matter.
        fill(rec, dts as u32 | (i as u32) << DTS_BITS);
    }

    /// Appends a `TimeBase` (unpublished: the next record's publish covers it).
    #[cold]
    #[inline(never)]
    fn put_time_base(&mut self, ts: u64) {
        self.slots.base = ts;
        self.put_unpublished(&TimeBase {
            hdr: RecordHeader::of::<TimeBase>(0),
            base: ts,
        });
    }

    /// Binds slot `i` and appends its `SlotBind` (unpublished).
    #[cold]
    #[inline(never)]
    fn put_slot_bind(&mut self, i: usize, object: u64, key: u64) {
        self.slots.keys[i] = [object, key];
        self.put_unpublished(&SlotBind {
            hdr: RecordHeader::of::<SlotBind>(i as u32),
            object,
            qpn: key as u32,
            source: (key >> 32) as u8,
            role: (key >> 40) as u8,
            _pad: 0,
        });
    }
}

/// The full kind a compact kind stands for (the kind its drops are counted as).
const fn full_kind<C: FixedRecord>() -> u16 {
    match C::KIND as u16 {
        POST_SEND_C => RecordKind::PostSend as u16,
        POST_RECV_C => RecordKind::PostRecv as u16,
        COMPLETION_C => RecordKind::WorkCompletion as u16,
        k => k,
    }
}

// ---------------------------------------------------------------------------------------------
// Reader

/// The per-queue constants a slot stands for (from its [`SlotBind`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BoundSlot {
    pub object: u64,
    pub qpn: u32,
    pub source: u8,
    /// [`slot_role`]; 0 = not bound in this chunk.
    pub role: u8,
}

/// What one record of a chunk is, read in its chunk's context.
#[derive(Debug)]
pub enum Decoded<'a> {
    /// A record for consumers (a compact one expanded).
    Record(RawRecord<'a>),
    /// A `TimeBase` or `SlotBind`: context, consumed.
    Context,
    /// A compact record whose slot is not bound (for its kind) in this chunk.
    Damaged(String),
}

/// The decoding context of one chunk, fed its records in order.
#[derive(Default)]
pub struct ChunkDecoder {
    base: u64,
    /// Indexed by slot; allocated at the chunk's first `SlotBind`.
    slots: Vec<BoundSlot>,
}

impl ChunkDecoder {
    /// The context at the start of a chunk.
    pub fn new() -> ChunkDecoder {
        ChunkDecoder::default()
    }

    /// Reads one record (its file offset, kind and bytes, of the length of its kind).
    #[inline(always)]
    pub fn accept<'a>(&mut self, offset: u64, kind: u16, bytes: &'a [u8]) -> Decoded<'a> {
        if !(TIME_BASE..=COMPLETION_C).contains(&kind) {
            return Decoded::Record(RawRecord::new(offset, kind, bytes));
        }
        self.compact(offset, kind, bytes)
    }

    fn compact<'a>(&mut self, offset: u64, kind: u16, bytes: &'a [u8]) -> Decoded<'a> {
        match kind {
            TIME_BASE => {
                self.base = read::<TimeBase>(bytes).base;
                Decoded::Context
            }
            SLOT_BIND => {
                let b = read::<SlotBind>(bytes);
                if self.slots.is_empty() {
                    self.slots = vec![BoundSlot::default(); 256];
                }
                self.slots[b.hdr.aux as usize & 255] = BoundSlot {
                    object: b.object,
                    qpn: b.qpn,
                    source: b.source,
                    role: b.role,
                };
                Decoded::Context
            }
            POST_SEND_C => {
                let c = read::<PostSendCompact>(bytes);
                self.expand(offset, bytes, c.tslot, slot_role::SEND, |s| {
                    expand_post_send(&c, self.base, s)
                })
            }
            POST_RECV_C => {
                let c = read::<PostRecvCompact>(bytes);
                self.expand(offset, bytes, c.tslot, slot_role::RECV, |s| {
                    expand_post_recv(&c, self.base, s)
                })
            }
            _ => {
                let c = read::<CompletionCompact>(bytes);
                self.expand(offset, bytes, c.tslot, slot_role::COMPLETION, |s| {
                    expand_completion(&c, self.base, s)
                })
            }
        }
    }

    fn expand<'a, R: FixedRecord>(
        &self,
        offset: u64,
        bytes: &'a [u8],
        tslot: u32,
        role: u8,
        full: impl FnOnce(&BoundSlot) -> R,
    ) -> Decoded<'a> {
        let slot = (tslot >> DTS_BITS) as usize;
        match self.slots.get(slot) {
            Some(s) if s.role == role => Decoded::Record(RawRecord::expanded(offset, bytes, &full(s))),
            _ => Decoded::Damaged(format!(
                "compact record (kind {}) uses slot {slot}, which no earlier SlotBind of its chunk binds for it",
                u16::from_ne_bytes([bytes[0], bytes[1]])
            )),
        }
    }
}

fn read<R: Pod>(bytes: &[u8]) -> R {
    bytemuck::pod_read_unaligned(&bytes[..size_of::<R>()])
}
