//! Compact hot records (format 2): the one definition of how `PostSend`, `PostRecv` and
//! `WorkCompletion` are packed into 24–32 bytes by the writer and expanded back by readers
//! (a `WorkCompletion` into a [`CompletionCompact`], or a [`CompletionShort`] — id, length
//! and opcode — when it is a successful send-side completion without flags; format 2.1).
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
//! commit-word store). Slots come from a direct-mapped table of [`WRITER_SLOTS`] entries per
//! role keyed by (object, QPN, source); a collision rebinds the slot ([`slots`]).
//!
//! Reader ([`ChunkDecoder`]): consumes `TimeBase` and `SlotBind` and hands out every compact
//! record as a [`RawRecord`] of the full kind with the full record's bytes
//! ([`RawRecord::record_bytes`]), equal bit for bit to what the writer was given — but for
//! a [`CompletionShort`]'s `src_qp` and `slid`, which verbs leaves undefined for send-side
//! completions: not recorded, 0 ([`completion_is_short`]).

use bytemuck::Pod;

use crate::reader::RawRecord;
use crate::records::{
    slot_role, CompletionCompact, CompletionShort, FixedRecord, PostRecv, PostRecvCompact,
    PostSend, PostSendCompact, RecordHeader, RecordKind, SlotBind, TimeBase, WorkCompletion,
};
#[cfg(doc)]
use crate::writer::ChunkWriter;

mod slots;
pub(crate) use slots::{place_limit, SlotTable};
pub use slots::{PlacedSend, WRITER_SLOTS};

/// Bits of a compact record's time offset (the low bits of its `tslot` word).
pub const DTS_BITS: u32 = 24;
/// Time offsets must be below this.
pub const DTS_LIMIT: u64 = 1 << DTS_BITS;
/// Largest bookkeeping a compact append may add before its record (`TimeBase` + `SlotBind`).
pub(crate) const BOOKKEEPING: u32 = (size_of::<TimeBase>() + size_of::<SlotBind>()) as u32;

const POST_SEND: u16 = RecordKind::PostSend as u16;
const POST_RECV: u16 = RecordKind::PostRecv as u16;
const WORK_COMPLETION: u16 = RecordKind::WorkCompletion as u16;
const TIME_BASE: u16 = RecordKind::TimeBase as u16;
const SLOT_BIND: u16 = RecordKind::SlotBind as u16;
const POST_SEND_C: u16 = RecordKind::PostSendCompact as u16;
const POST_RECV_C: u16 = RecordKind::PostRecvCompact as u16;
const COMPLETION_C: u16 = RecordKind::CompletionCompact as u16;
const COMPLETION_S: u16 = RecordKind::CompletionShort as u16;

/// The event kind a record of `kind` stands for: a compact kind's full kind, `None` for the
/// context kinds (`TimeBase`, `SlotBind`: no event), any other kind itself. Drops and
/// flight-recorder losses are counted under it.
pub const fn event_kind(kind: u16) -> Option<u16> {
    match kind {
        POST_SEND_C => Some(RecordKind::PostSend as u16),
        POST_RECV_C => Some(RecordKind::PostRecv as u16),
        COMPLETION_C | COMPLETION_S => Some(RecordKind::WorkCompletion as u16),
        TIME_BASE | SLOT_BIND => None,
        k => Some(k),
    }
}

// ---------------------------------------------------------------------------------------------
// Packing (writer) and expansion (reader), kind by kind

/// `addr_op` of a [`PostSendCompact`] — remote address (48 bits), opcode, send flags (5
/// bits) and SGE count (3 bits) — or `None` when they do not fit.
#[inline(always)]
pub fn pack_addr_op(remote_addr: u64, opcode: u8, flags: u32, num_sge: u16) -> Option<u64> {
    let word = remote_addr | (opcode as u64) << 48 | (flags as u64) << 56 | (num_sge as u64) << 61;
    addr_op_fits(remote_addr, flags, num_sge).then_some(word)
}

/// Whether [`pack_addr_op`] holds these.
#[inline(always)]
fn addr_op_fits(remote_addr: u64, flags: u32, num_sge: u16) -> bool {
    (remote_addr >> 48) | (flags >> 5) as u64 | (num_sge >> 3) as u64 == 0
}

/// Writes [`pack_addr_op`]'s word at `dst` (it must fit): on little-endian machines as the
/// address and two bytes over its top two (fewer operations than assembling the word).
///
/// # Safety
/// `dst` writable and aligned; `addr_op_fits` holds.
#[inline(always)]
unsafe fn put_addr_op(dst: *mut u64, remote_addr: u64, opcode: u8, flags: u32, num_sge: u16) {
    // SAFETY: per caller.
    unsafe {
        if cfg!(target_endian = "little") {
            dst.write(remote_addr);
            let top = dst.cast::<u8>();
            top.add(6).write(opcode);
            top.add(7).write(flags as u8 | (num_sge as u8) << 5);
        } else {
            let word =
                remote_addr | (opcode as u64) << 48 | (flags as u64) << 56 | (num_sge as u64) << 61;
            dst.write(word);
        }
    }
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

impl CompletionHead {
    /// Whether `src_qp` and `flags` fit the compact record.
    #[inline(always)]
    pub fn fits(&self) -> bool {
        self.src_qp >> 24 == 0 && self.flags >> 8 == 0
    }
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

/// The lowest receive-side `ibv_wc_opcode` (`IBV_WC_RECV`): completions of send-queue work
/// (send, RDMA write and read, atomics, bind, local invalidate, TSO) have opcodes below it,
/// receive-side ones (receives, tag matching) at or above it — bit 7 set.
pub const WC_RECV: u8 = 0x80;

/// Whether a completion without hardware time or vendor error has a [`CompletionShort`]: a
/// successful send-side completion (opcode bit 7 clear) without flags (and so without
/// immediate data). Its receive-side fields — `src_qp`, `slid` (and `sl`, `pkey_index`,
/// `dlid_path_bits`, which no record holds) — are defined by verbs for receive completions
/// only (providers leave them as the caller's array held them): they are not consulted and
/// not recorded (the expansion gives 0).
#[inline(always)]
pub fn completion_is_short(head: &CompletionHead, body: &CompletionBody) -> bool {
    body.opcode & WC_RECV == 0 && head.flags | body.imm | body.status as u32 == 0
}

/// The `CompletionCompact` of a completion whose head [`fits`](CompletionHead::fits), at
/// `tslot`.
#[inline(always)]
pub fn pack_completion(tslot: u32, head: &CompletionHead, b: &CompletionBody) -> CompletionCompact {
    CompletionCompact {
        kind: CompletionCompact::KIND as u16,
        len: size_of::<CompletionCompact>() as u16,
        tslot,
        wr_id: b.wr_id,
        byte_len: b.byte_len,
        imm: b.imm,
        src_qp_flags: head.src_qp | head.flags << 24,
        slid: b.slid,
        status: b.status,
        opcode: b.opcode,
    }
}

/// The `CompletionShort` of a completion that [`completion_is_short`], at `tslot` (its
/// `src_qp` and `slid` are not recorded).
#[inline(always)]
pub fn pack_completion_short(tslot: u32, b: &CompletionBody) -> CompletionShort {
    CompletionShort {
        kind: CompletionShort::KIND as u16,
        len: size_of::<CompletionShort>() as u16,
        tslot,
        wr_id: b.wr_id,
        byte_len: b.byte_len,
        opcode: b.opcode as u32,
    }
}

/// The `WorkCompletion` a short one stands for: that of the compact one with its fields and
/// nothing else (the `opcode` word's low 8 bits): `src_qp`, `slid`, flags, `imm`, `status` 0.
pub fn expand_completion_short(c: &CompletionShort, base: u64, s: &BoundSlot) -> WorkCompletion {
    let (tslot, wr_id, byte_len, opcode) = (c.tslot, c.wr_id, c.byte_len, c.opcode as u8);
    let compact = CompletionCompact {
        tslot,
        wr_id,
        byte_len,
        opcode,
        ..CompletionCompact::default()
    };
    expand_completion(&compact, base, s)
}

/// A completion as the hot completion path reads it, straight from where the provider wrote
/// it ([`ChunkWriter::append_bound_completion`]): each method reads only what it returns, so
/// that the writer reads each field as it stores it.
pub trait CompletionSource {
    /// The completion's QPN (with the CQ, its slot's key).
    fn qpn(&self) -> u32;
    /// Whether it has a [`CompletionShort`]: a send-side opcode (bit 7 clear), status,
    /// vendor error and flags 0 (and so no immediate data), whatever its `src_qp` and `slid`
    /// — [`completion_is_short`] of its head and body.
    fn is_short(&self) -> bool;
    /// What decides its [`CompletionCompact`]; `None` when it has none (a vendor error, or
    /// fields the caller's hot path does not take).
    fn head(&self) -> Option<CompletionHead>;
    /// The rest of its compact form.
    fn body(&self) -> CompletionBody;
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
    /// A compact record whose slot is not bound (for its kind) in this chunk, or a `TimeBase`
    /// whose base leaves no room for a time offset.
    Damaged(String),
}

/// What [`ChunkDecoder::accept_into`] read: a record (written to its `out`), a context
/// record (consumed), or damage ([`Decoded::Damaged`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Record,
    Context,
    Damaged,
}

/// The fields of a hot record (`PostSend`, `PostRecv`, `WorkCompletion`, full or compact) that
/// decide what a pass does with it, read without expanding a compact one
/// ([`ChunkDecoder::glance`]): each equals the field of the full record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Glance {
    /// The full record's kind.
    pub kind: u16,
    pub ts: u64,
    pub qpn: u32,
    /// A send's or a completion's opcode (0 for a receive WR).
    pub opcode: u8,
    /// A completion's status (0 otherwise).
    pub status: u8,
}

/// What [`ChunkDecoder::glance`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glimpse {
    /// A hot record, full or compact.
    Hot(Glance),
    /// Any other record: not compact, its bytes are the record.
    Other,
    /// A `TimeBase` or `SlotBind`: context, taken in.
    Context,
    /// A compact record whose slot is not bound (for its kind) in this chunk, or a `TimeBase`
    /// whose base leaves no room for a time offset.
    Damaged,
}

/// The decoding context of one chunk, fed its records in order.
pub struct ChunkDecoder {
    base: u64,
    /// Indexed by slot (every slot number has one: no bounds check per record); none bound
    /// (role 0) at the chunk's start.
    slots: Box<[BoundSlot; 256]>,
}

impl Default for ChunkDecoder {
    fn default() -> ChunkDecoder {
        let slots: Box<[BoundSlot]> = vec![BoundSlot::default(); 256].into_boxed_slice();
        ChunkDecoder {
            base: 0,
            slots: slots.try_into().expect("256 slots"),
        }
    }
}

impl ChunkDecoder {
    /// The context at the start of a chunk.
    pub fn new() -> ChunkDecoder {
        ChunkDecoder::default()
    }

    /// Reads one record (its file offset, kind and bytes, of the length of its kind).
    #[inline(always)]
    pub fn accept<'a>(&mut self, offset: u64, kind: u16, bytes: &'a [u8]) -> Decoded<'a> {
        let mut r = RawRecord::new(offset, kind, bytes);
        match self.accept_into(offset, kind, bytes, &mut r) {
            Step::Record => Decoded::Record(r),
            Step::Context => Decoded::Context,
            Step::Damaged => Decoded::Damaged(damage(kind, bytes)),
        }
    }

    /// [`ChunkDecoder::accept`] into `out`: a record that is not compact is written field by
    /// field, a compact one expanded in place (the expanded storage past the full record is
    /// not cleared); `out` is unchanged unless the step is [`Step::Record`].
    #[inline(always)]
    pub fn accept_into<'a>(
        &mut self,
        offset: u64,
        kind: u16,
        bytes: &'a [u8],
        out: &mut RawRecord<'a>,
    ) -> Step {
        // One switch over every kind (a range check and a jump table), not a range check for
        // the compact and context kinds and then a second switch among them. Measured on the
        // converter (callgrind, real `ib_write_bw` log, 3.23 M compact records): its ring
        // refill 317.6 -> 305.6 M instructions.
        let base = self.base;
        match kind {
            POST_SEND_C => {
                let c = read::<PostSendCompact>(bytes);
                let Some(s) = self.slot(c.tslot, slot_role::SEND) else {
                    return Step::Damaged;
                };
                out.set_expanded(offset, bytes, &expand_post_send(&c, base, s));
                Step::Record
            }
            COMPLETION_S => {
                let c = read::<CompletionShort>(bytes);
                let Some(s) = self.slot(c.tslot, slot_role::COMPLETION) else {
                    return Step::Damaged;
                };
                out.set_expanded(offset, bytes, &expand_completion_short(&c, base, s));
                Step::Record
            }
            COMPLETION_C => {
                let c = read::<CompletionCompact>(bytes);
                let Some(s) = self.slot(c.tslot, slot_role::COMPLETION) else {
                    return Step::Damaged;
                };
                out.set_expanded(offset, bytes, &expand_completion(&c, base, s));
                Step::Record
            }
            POST_RECV_C => {
                let c = read::<PostRecvCompact>(bytes);
                let Some(s) = self.slot(c.tslot, slot_role::RECV) else {
                    return Step::Damaged;
                };
                out.set_expanded(offset, bytes, &expand_post_recv(&c, base, s));
                Step::Record
            }
            TIME_BASE | SLOT_BIND => self.context(kind, bytes),
            _ => {
                out.set_raw(offset, kind, bytes);
                Step::Record
            }
        }
    }

    /// A first look at a record (its kind and bytes, of the length of its kind), in place of
    /// [`ChunkDecoder::accept_into`] for the records a pass does not need whole: a hot one's
    /// [`Glance`]; context taken in and damage found as `accept_into` would. A record it
    /// glanced at is then read whole with [`ChunkDecoder::expand_into`].
    #[inline(always)]
    pub fn glance(&mut self, kind: u16, bytes: &[u8]) -> Glimpse {
        let hot = |kind: RecordKind, ts, qpn, opcode, status| {
            Glimpse::Hot(Glance {
                kind: kind as u16,
                ts,
                qpn,
                opcode,
                status,
            })
        };
        let base = self.base;
        let dts = |tslot: u32| base + (tslot as u64 & (DTS_LIMIT - 1));
        match kind {
            POST_SEND => match bytemuck::try_from_bytes::<PostSend>(bytes) {
                Ok(p) => hot(RecordKind::PostSend, p.ts, p.qpn, p.opcode, 0),
                Err(_) => Glimpse::Other,
            },
            POST_RECV => match bytemuck::try_from_bytes::<PostRecv>(bytes) {
                Ok(p) => hot(RecordKind::PostRecv, p.ts, p.qpn, 0, 0),
                Err(_) => Glimpse::Other,
            },
            WORK_COMPLETION => match bytemuck::try_from_bytes::<WorkCompletion>(bytes) {
                Ok(c) => hot(RecordKind::WorkCompletion, c.ts, c.qpn, c.opcode, c.status),
                Err(_) => Glimpse::Other,
            },
            TIME_BASE | SLOT_BIND => match self.context(kind, bytes) {
                Step::Context => Glimpse::Context,
                _ => Glimpse::Damaged,
            },
            POST_SEND_C => {
                let c = read::<PostSendCompact>(bytes);
                match self.slot(c.tslot, slot_role::SEND) {
                    Some(s) => {
                        let opcode = (c.addr_op >> 48) as u8;
                        hot(RecordKind::PostSend, dts(c.tslot), s.qpn, opcode, 0)
                    }
                    None => Glimpse::Damaged,
                }
            }
            POST_RECV_C => {
                let c = read::<PostRecvCompact>(bytes);
                match self.slot(c.tslot, slot_role::RECV) {
                    Some(s) => hot(RecordKind::PostRecv, dts(c.tslot), s.qpn, 0, 0),
                    None => Glimpse::Damaged,
                }
            }
            COMPLETION_C => {
                let c = read::<CompletionCompact>(bytes);
                match self.slot(c.tslot, slot_role::COMPLETION) {
                    Some(s) => {
                        let (ts, op) = (dts(c.tslot), c.opcode);
                        hot(RecordKind::WorkCompletion, ts, s.qpn, op, c.status)
                    }
                    None => Glimpse::Damaged,
                }
            }
            COMPLETION_S => {
                let c = read::<CompletionShort>(bytes);
                match self.slot(c.tslot, slot_role::COMPLETION) {
                    Some(s) => {
                        let (ts, op) = (dts(c.tslot), c.opcode as u8);
                        hot(RecordKind::WorkCompletion, ts, s.qpn, op, 0)
                    }
                    None => Glimpse::Damaged,
                }
            }
            _ => Glimpse::Other,
        }
    }

    /// The record [`ChunkDecoder::glance`] just saw (a hot or other record, not context or
    /// damage) into `out`, as [`ChunkDecoder::accept_into`] would have read it.
    #[inline(always)]
    pub fn expand_into<'a>(
        &mut self,
        offset: u64,
        kind: u16,
        bytes: &'a [u8],
        out: &mut RawRecord<'a>,
    ) {
        let step = self.accept_into(offset, kind, bytes, out);
        debug_assert_eq!(step, Step::Record);
    }

    /// A context record (a time base or a slot binding), taken in: rare, out of line, so that
    /// the record arms inlined in every reader keep their registers.
    #[cold]
    #[inline(never)]
    fn context(&mut self, kind: u16, bytes: &[u8]) -> Step {
        if kind == TIME_BASE {
            let base = read::<TimeBase>(bytes).base;
            // A base from which a time offset overflows is damage (a writer's times are
            // clock readings): refused here, so that `base + dts` never overflows below.
            if base > MAX_BASE {
                return Step::Damaged;
            }
            self.base = base;
            return Step::Context;
        }
        let b = read::<SlotBind>(bytes);
        self.slots[b.hdr.aux as usize & 255] = BoundSlot {
            object: b.object,
            qpn: b.qpn,
            source: b.source,
            role: b.role,
        };
        Step::Context
    }

    /// The slot `tslot` names, when this chunk bound it for slot role `role`.
    #[inline(always)]
    fn slot(&self, tslot: u32, role: u8) -> Option<&BoundSlot> {
        let s = &self.slots[(tslot >> DTS_BITS) as usize];
        (s.role == role).then_some(s)
    }
}

/// The largest time base a `TimeBase` may set: every time offset (< [`DTS_LIMIT`]) added to
/// it fits in 64 bits.
const MAX_BASE: u64 = u64::MAX - (DTS_LIMIT - 1);

/// What is wrong with a record (of kind `kind`, `bytes` in the file) that
/// [`ChunkDecoder::accept_into`] found damaged: a compact record's slot is not bound, or a
/// `TimeBase` sets a base no time offset can be added to.
#[cold]
fn damage(kind: u16, bytes: &[u8]) -> String {
    if kind == TIME_BASE {
        return format!(
            "TimeBase sets base {:#x}, above {MAX_BASE:#x}: a time offset from it overflows",
            read::<TimeBase>(bytes).base
        );
    }
    let tslot = match kind {
        POST_SEND_C => read::<PostSendCompact>(bytes).tslot,
        POST_RECV_C => read::<PostRecvCompact>(bytes).tslot,
        COMPLETION_C => read::<CompletionCompact>(bytes).tslot,
        _ => read::<CompletionShort>(bytes).tslot,
    };
    format!(
        "compact record (kind {}) uses slot {}, which no earlier SlotBind of its chunk binds for it",
        u16::from_ne_bytes([bytes[0], bytes[1]]),
        tslot >> DTS_BITS
    )
}

fn read<R: Pod>(bytes: &[u8]) -> R {
    bytemuck::pod_read_unaligned(&bytes[..size_of::<R>()])
}
