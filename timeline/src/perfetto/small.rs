//! Small packets (no args, no interned data): the hot path of the encoder, one packet per
//! recorded event. Each becomes its track's template ([`Template`]) for the next packet of the
//! same track and type in the block, which is written from it: copied up to its timestamp
//! (plain repeats) or up to its value and flow fields ([`Tail`]), the rest written, and
//! compressed against it at the known distance without a search.

use super::{lane_packet, TY_DESCRIPTOR};
use super::{
    put_varint, varint_len, varint_word, PerfettoSeq, TAG_PACKET, TAG_SEQ_ID, TAG_TIMESTAMP,
    TAG_TRACK_EVENT, TE_COUNTER, TE_EXTRA_COUNTER_TRACK, TE_EXTRA_COUNTER_VALUE, TE_FLOW,
    TE_NAME_IID, TE_TERM_FLOW, TE_TRACK, TE_TYPE,
};
use crate::fastz::{FastZ, WINDOW};
use crate::{Extra, Name};

/// Where the last small packet (no args) of a track and event type is in the current block,
/// and its layout: a packet of the same track, type and name is the same bytes up to its
/// value and flow fields (the tail, from `vat`) and its timestamp delta. A plain repeat (no
/// tail) is copied instead of encoded and handed to [`FastZ::repeat`] as a match at a known
/// distance; one with a tail is copied up to it, its tail and delta written and compressed
/// against it ([`FastZ::against`]).
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub(super) struct Template {
    pub(super) track: u64,
    /// [`template_kind`] of its type and name, with [`KIND_TAIL`] when it has a tail, and its
    /// block's epoch ([`epoch_bits`]).
    pub(super) kind: u64,
    /// Its timestamp delta.
    pub(super) ts: u64,
    /// Offset of the packet in the block, in 32 bits so that a template takes half a cache
    /// line: a block is taken once it holds the caller's block size (or, sliding, once it
    /// passes [`SLIDE_AT`]), so it holds less than 4 GiB unless one packet does.
    at32: u32,
    /// Bytes before the timestamp varint (its tag included), and the varint's length.
    plen: u8,
    tlen: u8,
    /// Where its value and flow fields start (`plen − 1` when it has none), and where its
    /// TrackEvent length byte is.
    vat: u8,
    te: u8,
}

impl Template {
    /// Offset of the packet in the block.
    #[inline(always)]
    pub(super) fn at(&self) -> usize {
        self.at32 as usize
    }

    #[inline(always)]
    pub(super) fn set_at(&mut self, at: usize) {
        debug_assert!(at <= u32::MAX as usize);
        self.at32 = at as u32;
    }

    /// The packet's length.
    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        self.plen as usize + self.tlen as usize
    }
}

/// A template's kind: type (low byte) and name + 1 (high 32 bits; 0: none) — the layout of a
/// recorded plain event's `meta` ([`crate::batch::Ev`]), so that the replay compares the two
/// words directly ([`super::replay`]; a counter's template, whose kind would equal a
/// recorded counter's `meta`, always has [`KIND_TAIL`]).
#[inline(always)]
pub(crate) fn template_kind(ty: i32, name1: u64) -> u64 {
    ty as u64 & 0xff | name1 << 32
}

/// A template's kind flag: the packet has a tail (a value or a flow). Bits 8..11, where a
/// recorded event's `meta` has its flags, are clear in a kind: no kind equals the `meta` of
/// an event with flags, whatever the epoch.
pub(crate) const KIND_TAIL: u64 = 1 << 11;

/// Where a template's kind holds the epoch of its block (bits 12..32, clear in an event's
/// `meta`); epochs run from 1 to `EPOCHS − 1`, then the slots are cleared.
const EPOCH_SHIFT: u32 = 12;
pub(crate) const EPOCHS: u32 = 1 << 20;

/// Epoch `epoch` as a template kind holds it.
#[inline(always)]
pub(crate) fn epoch_bits(epoch: u32) -> u64 {
    (epoch as u64) << EPOCH_SHIFT
}

/// The type of a template's packet.
#[inline(always)]
fn kind_type(kind: u64) -> u64 {
    kind & 0xff
}

/// Mask of a kind's epoch.
const EPOCH_MASK: u64 = (EPOCHS as u64 - 1) << EPOCH_SHIFT;

/// The last lane descriptor declared with a static key in one of [`LANE_SLOTS`] slots
/// (direct-mapped by parent and key; [`PerfettoSeq::static_lane`]): where it is in the block
/// (reset when the block is taken), its parent and key, and where its uuid's varint is. A lane
/// of the same parent and key with a uuid of as many varint bytes has the same bytes but the
/// uuid's.
#[derive(Clone, Copy, Default)]
pub(super) struct LaneTemplate {
    parent: u64,
    key: &'static str,
    at: usize,
    len: usize,
    uuid_at: u8,
    /// 0: none.
    uuid_len: u8,
}

/// Lane template slots per sequence: a group's queue pairs declare lanes of a few keys each.
pub(super) const LANE_SLOTS: usize = 16;

/// The lane template slot of `parent` and `key` (a key's address: the keys are static).
#[inline(always)]
fn lane_slot(parent: u64, key: &'static str) -> usize {
    let k = parent ^ (key.as_ptr() as u64).rotate_left(17) ^ key.len() as u64;
    (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60) as usize
}

/// A block whose raw bytes reach this many slides ([`PerfettoSeq::slide`]) when it is dense
/// ([`super::zlib::dense_enough_to_slide`]); a block that slid is no longer retried with zlib.
pub(super) const SLIDE_AT: usize = 384 << 10;

/// Raw bytes a sliding block keeps (the compressor's window, and more: a template farther back
/// than the window is not used).
const SLIDE_KEEP: usize = 40 << 10;

/// How many times a block that slid counts its zlib data as pending: the encoder's output
/// buffer grows by doubling (a block of the caller's block size or more holds that much).
pub(super) const SLID_ZLIB_WEIGHT: usize = 2;

/// A block that slid counts at least this fraction of its raw bytes as pending
/// ([`PerfettoSeq::pending_bytes`](crate::TraceSink::pending_bytes)), so that no block's
/// packets decompress into more than this many times the caller's block size.
pub(super) const SLID_BLOCK_RATIO: usize = 32;

impl PerfettoSeq {
    /// Lets a dense block go on past [`SLIDE_AT`] raw bytes without holding them: its first
    /// bytes — all but the last [`SLIDE_KEEP`], which hold every template and match candidate
    /// still in the compressor's reach — are dropped (the compressor has them in its checksum),
    /// the offsets of what is kept move back, and templates and lane templates in what was
    /// dropped are forgotten. Until the block is taken, its zlib data counts as pending
    /// ([`crate::TraceSink::pending_bytes`], [`SLID_ZLIB_WEIGHT`]): a dense block goes on to
    /// many times the caller's block size, and starts over (each track's first packet written
    /// without a template, the code tables sent again) that much less often — the real
    /// `ib_write_bw -q 16` log: 445 → 66 blocks, 3.850 → 3.704 G instructions, 16.49 → 15.58
    /// MB, the packets of each sequence the same. Only with the compressor,
    /// when every byte is tokenized and the block is dense ([`SLIDE_AT`]; a sparse block
    /// stays whole, for the zlib retry at [`crate::TraceSink::take`]).
    pub(super) fn slide(&mut self) {
        let len = self.buf.len();
        let Some(z) = self.z.as_deref_mut() else {
            return;
        };
        if len < SLIDE_AT
            || !super::zlib::dense_enough_to_slide(self.slid + len, z.compressed_len())
            || !z.caught_up(&self.buf)
        {
            return;
        }
        let k = len - SLIDE_KEEP;
        z.slide(&self.buf, k);
        self.buf.copy_within(k.., 0);
        self.buf.truncate(SLIDE_KEEP);
        for t in slots(&mut self.templates) {
            if t.at() < k {
                // No kind matches 0 (its epoch bits are 0).
                t.kind = 0;
            } else {
                t.set_at(t.at() - k);
            }
        }
        for l in &mut self.lanes {
            if l.at < k {
                l.uuid_len = 0;
            } else {
                l.at -= k;
            }
        }
        self.slid += k;
    }
}

/// Bytes a repeat copies from its template in one fixed-size copy (a template packet's bytes
/// before the timestamp are fewer: at most 30).
pub(super) const REPEAT_COPY: usize = 32;

/// Template slots per sequence (direct-mapped by track and type, [`template_slot`]).
pub(super) const TEMPLATE_SLOTS: usize = 8192;

/// Two template slots in one cache line (the table's storage, for its alignment): a track's
/// slice begin and end ([`template_slot`]).
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(super) struct TemplateLine([Template; 2]);

/// A sequence's template table as slots (empty until its first small packet).
#[inline(always)]
pub(super) fn slots(lines: &mut [TemplateLine]) -> &mut [Template] {
    bytemuck::cast_slice_mut(lines)
}

/// The same, read only.
#[inline(always)]
pub(super) fn slots_ref(lines: &[TemplateLine]) -> &[Template] {
    bytemuck::cast_slice(lines)
}

/// The slot of a track's template of type `ty`. A track's four slots are together, its slice
/// begin and end (types 1 and 2) in one cache line, and tracks whose uuids differ in their low
/// 32 bits only (a caller's consecutive tracks: the lanes of a queue, say) are in consecutive
/// lines (2 048 of them before one wraps around), the high 32 bits hashed into an offset. A
/// sequence's templates in use stay few lines, mostly in the first-level cache; hashing each
/// (track, type) alone spread them over the whole table (320 KiB), a cache miss per packet
/// (measured: −16 % CPU converting the real `ib_write_bw` log, whose 4 129 lane tracks'
/// slices interleave).
#[inline(always)]
pub(super) fn template_slot(track: u64, ty: i32) -> usize {
    (crate::fastz::id_line(track) << 2 | (ty as usize + 3) & 3) & (TEMPLATE_SLOTS - 1)
}

/// What follows the name of a small packet before its timestamp: nothing, a counter value,
/// a counter value and one extra counter value (a [`crate::batch::COUNTER_PAIR`]: the first in
/// the low 32 bits), or one flow it starts or terminates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    None,
    Value(u64),
    Pair(u64),
    Flow(u64),
    Term(u64),
}

/// The tail of a small packet with counter value `value` and flows `extra` (no args), when it
/// has one of [`Tail`]'s shapes.
#[inline(always)]
pub(super) fn tail_of(value: Option<i64>, extra: &Extra<'_>) -> Option<Tail> {
    match (value, extra.flows, extra.terminating) {
        (None, [], []) => Some(Tail::None),
        (Some(v), [], []) => Some(Tail::Value(v as u64)),
        (None, [f], []) => Some(Tail::Flow(*f)),
        (None, [], [f]) => Some(Tail::Term(*f)),
        _ => None,
    }
}

/// Writes `v` as a varint at `a[*p..]`: one byte, or up to eight in one word store (`a` has
/// room for 8 bytes past `*p`).
#[inline(always)]
fn var(a: &mut [u8], p: &mut usize, v: u64) {
    if v < 0x80 {
        a[*p] = v as u8;
        *p += 1;
    } else if let Some((w, n)) = varint_word(v) {
        a[*p..*p + 8].copy_from_slice(&w.to_le_bytes());
        *p += n;
    } else {
        let mut v = v;
        while v >= 0x80 {
            a[*p] = v as u8 | 0x80;
            v >>= 7;
            *p += 1;
        }
        a[*p] = v as u8;
        *p += 1;
    }
}

/// Writes a tail's fields at `a[*p..]`.
#[inline(always)]
fn put_tail(a: &mut [u8], p: &mut usize, tail: Tail) {
    let (tag, f) = match tail {
        Tail::None => return,
        Tail::Value(v) => {
            a[*p..*p + 2].copy_from_slice(&TE_COUNTER);
            *p += 2;
            return var(a, p, v);
        }
        Tail::Pair(x) => {
            a[*p..*p + 2].copy_from_slice(&TE_COUNTER);
            *p += 2;
            var(a, p, x & 0xffff_ffff);
            a[*p] = TE_EXTRA_COUNTER_VALUE;
            *p += 1;
            return var(a, p, x >> 32);
        }
        Tail::Flow(f) => (TE_FLOW, f),
        Tail::Term(f) => (TE_TERM_FLOW, f),
    };
    a[*p..*p + 2].copy_from_slice(&tag);
    a[*p + 2..*p + 10].copy_from_slice(&f.to_le_bytes());
    *p += 10;
}

impl PerfettoSeq {
    /// Writes a small packet from the last one of its track, type and name in this block
    /// ([`Template`]) when there is one within the compressor's window: a plain repeat
    /// ([`PerfettoSeq::repeat`]) when neither has a tail, else a copy up to the tail
    /// ([`PerfettoSeq::repeat_tail`]). False (nothing written, the timestamp not taken) when
    /// there is none, or when the event is earlier than the packet before it. `name1`: the
    /// name + 1 (0: none); a template of this track, type and name in the block means the name
    /// is interned already.
    #[inline(always)]
    pub(super) fn templated(
        &mut self,
        ty: i32,
        track: u64,
        name1: u64,
        tail: Tail,
        ts: u64,
    ) -> bool {
        if self.is_earlier(ts) {
            // Written with its absolute time ([`PerfettoSeq::new_event`]).
            return false;
        }
        let slot = template_slot(track, ty);
        let Some(&t) = slots_ref(&self.templates).get(slot) else {
            return false;
        };
        let start = self.buf.len();
        let want = template_kind(ty, name1) | epoch_bits(self.epoch);
        if t.kind & !KIND_TAIL != want
            || t.track != track
            || start - t.at() > WINDOW
            || self.z.is_none()
        {
            return false;
        }
        if tail == Tail::None && t.kind & KIND_TAIL == 0 {
            self.repeat(slot, t, ty, ts);
            return true;
        }
        if t.at() + REPEAT_COPY > start {
            return false;
        }
        self.repeat_tail(slot, ty, tail, ts);
        true
    }

    /// Writes a plain small packet as a repeat of its template `t` (in slot `slot`; neither
    /// has a tail): its bytes up to the timestamp copied, the frame length and the timestamp
    /// delta written, compressed as a match at the known distance.
    #[inline(always)]
    fn repeat(&mut self, slot: usize, t: Template, ty: i32, ts: u64) {
        let tsf = self.ts_field(ts);
        let Some(z) = &mut self.z else {
            return;
        };
        z.wake();
        if repeat_plain(
            &mut self.buf,
            z,
            &mut slots(&mut self.templates)[slot],
            tsf,
            ty as usize,
        )
        .is_some()
        {
            return;
        }
        // The template is less than a copy back, or the delta takes more than 8 bytes.
        let start = self.buf.len();
        let plen = t.plen as usize;
        let tlen = varint_len(tsf);
        self.buf.extend_from_within(t.at()..t.at() + plen);
        put_varint(&mut self.buf, tsf);
        self.buf[start + 1] = (plen - 2 + tlen) as u8;
        let (same_len, tail_eq) = delta_equal(t, tsf, tlen);
        z.repeat(
            &self.buf,
            start,
            start - t.at(),
            plen,
            same_len,
            tail_eq,
            ty as usize,
        );
        let s = &mut slots(&mut self.templates)[slot];
        s.set_at(start);
        s.tlen = tlen as u8;
        s.ts = tsf;
    }

    /// A packet without args or interned data (at most two flows), written in one piece
    /// ([`small_packet`]) and compressed against the last packet of its track and type when
    /// there is one in the block (else against the compressor's own candidates); it becomes
    /// its track's template.
    /// `pair`: a [`crate::batch::COUNTER_PAIR`]'s values (type 7, written as a COUNTER with
    /// one extra counter value on track `track + 1`; `value` is then `None`).
    #[inline]
    pub(super) fn small_event(
        &mut self,
        (ty, track, tsf): (i32, u64, u64),
        name: Option<Name>,
        value: Option<i64>,
        extra: &Extra<'_>,
        pair: Option<u64>,
    ) {
        let name1 = name.map_or(0, |n| n.0 as u64 + 1);
        if self.templates.is_empty() {
            self.templates = vec![TemplateLine::default(); TEMPLATE_SLOTS / 2];
        }
        let start = self.buf.len();
        let (len, te, vat) = small_packet(
            &mut self.buf,
            self.seq,
            (ty, track),
            name,
            value,
            extra,
            pair,
            tsf,
        );
        debug_assert_eq!(self.buf.len(), start + len);
        let slot = template_slot(track, ty);
        let t = slots_ref(&self.templates)[slot];
        let shaped = (t.kind ^ epoch_bits(self.epoch)) & EPOCH_MASK == 0
            && t.track == track
            && kind_type(t.kind) == ty as u64
            && start - t.at() <= WINDOW;
        if let Some(z) = &mut self.z {
            if shaped {
                // The last packet of its track and type: the same layout.
                z.against(&self.buf, start, start - t.at(), ty as usize);
            } else {
                z.packet(&self.buf, start, (track << 3 | ty as u64) + 1, ty as usize);
            }
        }
        let tlen = varint_len(tsf);
        let tail = if vat + tlen + 1 == len { 0 } else { KIND_TAIL };
        // A counter's template always has its value: no kind of type 4 equals a recorded
        // counter's `meta` ([`super::replay`]).
        debug_assert!(tail != 0 || ty != super::proto::TYPE_COUNTER);
        let new = Template {
            track,
            kind: template_kind(ty, name1) | tail | epoch_bits(self.epoch),
            at32: start as u32,
            plen: (len - tlen) as u8,
            tlen: tlen as u8,
            vat: vat as u8,
            te: te as u8,
            ts: tsf,
        };
        slots(&mut self.templates)[slot] = new;
    }

    /// A lane's descriptor ([`lane_packet`]); the last descriptor of a lane of the same parent
    /// (the same bytes but the uuid) is the compressor's first candidate.
    pub(super) fn lane_descriptor(&mut self, uuid: u64, parent: u64, key: &str) {
        let at = self.buf.len();
        lane_packet(&mut self.buf, uuid, parent, key);
        self.lane_written(at, parent);
    }

    /// A lane's descriptor with a static key: a copy of the last one's of its parent and key
    /// ([`LaneTemplate`]) with the new uuid when its uuid is as long, else written
    /// ([`lane_packet`]); the same bytes either way.
    pub(super) fn static_lane(&mut self, uuid: u64, parent: u64, key: &'static str) {
        let at = self.buf.len();
        let slot = lane_slot(parent, key);
        let l = self.lanes[slot];
        let ulen = varint_len(uuid);
        if l.uuid_len != 0
            && l.parent == parent
            && std::ptr::eq(l.key, key)
            && l.uuid_len as usize == ulen
        {
            self.buf.extend_from_within(l.at..l.at + l.len);
            let u = at + l.uuid_at as usize;
            let mut v = uuid;
            for b in &mut self.buf[u..u + ulen] {
                *b = v as u8 | 0x80;
                v >>= 7;
            }
            self.buf[u + ulen - 1] &= 0x7f;
            self.lanes[slot].at = at;
        } else {
            let uuid_at = lane_packet(&mut self.buf, uuid, parent, key);
            self.lanes[slot] = LaneTemplate {
                parent,
                key,
                at,
                len: self.buf.len() - at,
                uuid_at: uuid_at as u8,
                uuid_len: ulen as u8,
            };
        }
        self.lane_written(at, parent);
    }

    /// Compresses the lane descriptor just written at `at`.
    fn lane_written(&mut self, at: usize, parent: u64) {
        if let Some(z) = &mut self.z {
            z.packet(
                &self.buf,
                at,
                (parent << 3 | TY_DESCRIPTOR as u64) + 1,
                TY_DESCRIPTOR,
            );
        }
    }

    /// Writes a small packet with a tail (a counter value or one flow; [`Tail::None`] too) from
    /// its template `t` (in slot `slot`, at least [`REPEAT_COPY`] bytes back):
    /// [`repeat_tail`].
    #[inline(never)]
    fn repeat_tail(&mut self, slot: usize, ty: i32, tail: Tail, ts: u64) {
        let tsf = self.ts_field(ts);
        let Some(z) = &mut self.z else {
            return;
        };
        z.wake();
        repeat_tail(
            &mut self.buf,
            z,
            &mut slots(&mut self.templates)[slot],
            tail,
            tsf,
            ty as usize,
        );
    }
}

/// Writes a packet without args or interned data (at most two flow ids) into a stack buffer
/// and appends it in one fixed-size copy; returns its length, where its TrackEvent length byte
/// is and where its value and flow fields start. Same layout as the general path.
/// A counter pair (`pair`, type [`crate::batch::COUNTER_PAIR`]) is a COUNTER on `track` with
/// the extra counter track `track + 1` before its value fields and its two values as the tail
/// ([`Tail::Pair`]).
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) fn small_packet(
    buf: &mut Vec<u8>,
    seq: u32,
    (ty, track): (i32, u64),
    name: Option<Name>,
    value: Option<i64>,
    extra: &Extra<'_>,
    pair: Option<u64>,
    tsf: u64,
) -> (usize, usize, usize) {
    // Worst case: 2 + 6 + 2 + (2 + 11 + 6 + 12 + 2 × 10) + 11 = 72 bytes (a pair: 2 + 6 + 2 +
    // (2 + 11 + 12 + 7 + 6) + 11 = 59), so both length fields take one byte.
    let mut a = [0u8; 112];
    a[0] = TAG_PACKET;
    a[2] = TAG_SEQ_ID;
    let mut p = 3;
    var(&mut a, &mut p, seq as u64);
    a[p] = TAG_TRACK_EVENT;
    let te_at = p + 1;
    p += 2;
    a[p] = TE_TYPE;
    a[p + 1] = if pair.is_some() {
        super::proto::TYPE_COUNTER as u8
    } else {
        ty as u8
    };
    a[p + 2] = TE_TRACK;
    p += 3;
    var(&mut a, &mut p, track);
    if let Some(n) = name {
        a[p] = TE_NAME_IID;
        p += 1;
        var(&mut a, &mut p, n.0 as u64 + 1);
    }
    if pair.is_some() {
        a[p..p + 2].copy_from_slice(&TE_EXTRA_COUNTER_TRACK);
        p += 2;
        var(&mut a, &mut p, track + 1);
    }
    let vat = p;
    if let Some(x) = pair {
        put_tail(&mut a, &mut p, Tail::Pair(x));
    }
    if let Some(v) = value {
        a[p..p + 2].copy_from_slice(&TE_COUNTER);
        p += 2;
        var(&mut a, &mut p, v as u64);
    }
    for &f in extra.flows {
        a[p..p + 2].copy_from_slice(&TE_FLOW);
        a[p + 2..p + 10].copy_from_slice(&f.to_le_bytes());
        p += 10;
    }
    for &f in extra.terminating {
        a[p..p + 2].copy_from_slice(&TE_TERM_FLOW);
        a[p + 2..p + 10].copy_from_slice(&f.to_le_bytes());
        p += 10;
    }
    a[te_at] = (p - te_at - 1) as u8;
    a[p] = TAG_TIMESTAMP;
    p += 1;
    var(&mut a, &mut p, tsf);
    a[1] = (p - 2) as u8;
    let start = buf.len();
    buf.extend_from_slice(&a);
    buf.truncate(start + p);
    (p, te_at, vat)
}

/// Writes a plain small packet as a repeat of its template `t` (neither has a tail) at the end
/// of `buf`: the template's bytes up to its timestamp and the frame length and timestamp delta
/// `tsf` in one fixed-size copy, compressed as a match at the known distance
/// ([`FastZ::repeat`]); `t` becomes the new packet. None (nothing written) when the template
/// is less than [`REPEAT_COPY`] bytes back or the delta takes more than 8 bytes, else whether
/// the packet is its template's bytes and went on with the match in progress
/// ([`FastZ::repeat_same`]).
#[inline(always)]
pub(super) fn repeat_plain(
    buf: &mut Vec<u8>,
    z: &mut FastZ,
    t: &mut Template,
    tsf: u64,
    ty: usize,
) -> Option<bool> {
    let start = buf.len();
    let at = t.at();
    if at + REPEAT_COPY > start {
        return None;
    }
    if tsf == t.ts {
        // The same delta: the packet is its template's bytes (the rest of the copy is cut).
        buf.extend_from_within(at..at + REPEAT_COPY);
        buf.truncate(start + t.len());
        let went_on = z.repeat_same(buf, start, start - at, ty);
        t.set_at(start);
        return Some(went_on);
    }
    let (w, tlen) = varint_word(tsf)?;
    // A template's bytes before the timestamp are at most 30 (`& 31` drops nothing; it keeps
    // the delta's word inside the copy without a check).
    let plen = t.plen as usize & (REPEAT_COPY - 1);
    let mut a = [0u8; REPEAT_COPY + 8];
    a[..REPEAT_COPY].copy_from_slice(&buf[at..at + REPEAT_COPY]);
    buf.extend_from_slice(&a);
    buf[start + plen..start + plen + 8].copy_from_slice(&w.to_le_bytes());
    buf[start + 1] = (plen - 2 + tlen) as u8;
    buf.truncate(start + plen + tlen);
    let (same_len, tail_eq) = delta_equal(*t, tsf, tlen);
    z.repeat(buf, start, start - at, plen, same_len, tail_eq, ty);
    t.set_at(start);
    t.tlen = tlen as u8;
    t.ts = tsf;
    Some(false)
}

/// Whether a repeat of template `t` with timestamp delta `tsf` (`tlen` varint bytes) has the
/// template's frame length (its delta as long), and then how many of its delta's leading
/// bytes equal the template's: of equal length, their bytes differ where their 7-bit groups
/// do.
#[inline(always)]
fn delta_equal(t: Template, tsf: u64, tlen: usize) -> (bool, usize) {
    let same_len = t.tlen as usize == tlen;
    let tail_eq = if same_len {
        ((t.ts ^ tsf).trailing_zeros() as usize / 7).min(tlen)
    } else {
        0
    };
    (same_len, tail_eq)
}

/// Writes a small packet with a tail (a counter value or one flow; [`Tail::None`] too) and
/// timestamp delta `tsf` from its template `t` (at least [`REPEAT_COPY`] bytes back) at the
/// end of `buf`: its bytes up to the tail copied, the tail, the timestamp delta and both
/// lengths written, compressed against the template ([`FastZ::against`]; the stream started)
/// — the bytes and tokens [`PerfettoSeq::small_event`] writes for it, without encoding its
/// head; `t` becomes the new packet.
#[inline(always)]
pub(super) fn repeat_tail(
    buf: &mut Vec<u8>,
    z: &mut FastZ,
    t: &mut Template,
    tail: Tail,
    tsf: u64,
    ty: usize,
) {
    let start = buf.len();
    // At most 30 bytes before the tail, 12 of tail (a negative value: 2 + 10), 11 of
    // timestamp: written in place (built on the stack and copied, the copy's loads waited for
    // the bytes just stored there: perf put a fifth of `repeats`' samples on it).
    buf.extend_from_within(t.at()..t.at() + REPEAT_COPY);
    buf.extend_from_slice(&[0u8; 64 - REPEAT_COPY]);
    let a = &mut buf[start..start + 64];
    let mut p = t.vat as usize;
    put_tail(a, &mut p, tail);
    a[t.te as usize] = (p - t.te as usize - 1) as u8;
    a[p] = TAG_TIMESTAMP;
    p += 1;
    let plen = p;
    var(a, &mut p, tsf);
    a[1] = (p - 2) as u8;
    buf.truncate(start + p);
    // Its bytes before the tail are the template's but for both lengths.
    z.against_template(
        buf,
        start,
        (start - t.at(), t.vat as usize, t.te as usize),
        ty,
    );
    t.set_at(start);
    t.plen = plen as u8;
    t.tlen = (p - plen) as u8;
    t.ts = tsf;
    t.kind = if tail == Tail::None {
        t.kind & !KIND_TAIL
    } else {
        t.kind | KIND_TAIL
    };
}
