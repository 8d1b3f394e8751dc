//! Perfetto protobuf encoder for one packet sequence.
//!
//! Track descriptors, clock snapshots and interned data are encoded with the prost messages of
//! [`crate::proto`]. TrackEvent packets — the hot path, one or two per work request — are written
//! directly with the same field numbers (no allocation per event); a unit test checks that the
//! bytes are identical to what prost produces for the equivalent message.
//!
//! Size: a sequence can use an incremental sequence-scoped clock (id 64) so that each packet's
//! `timestamp` is the delta to the previous one, which typically takes 2–3 bytes instead of 9.

use std::collections::HashMap;

use crate::fastz::FastZ;
use crate::proto::{self, TracePacket};
use crate::{ArgKey, ArgValue, CounterUnit, Extra, Name, TraceSink, TrackDef, TrackKind};
pub(crate) use small::Tail;
use small::TemplateLine;
#[cfg(test)]
pub(crate) use small::{epoch_bits, template_kind, EPOCHS, KIND_TAIL};
use zlib::Fallback;
pub use zlib::{
    compress_block, frame_compressed, FASTZ_POOR_RATIO, LARGE_BLOCK, LARGE_POOR_RATIO_TENTHS,
    SLIDE_RATIO_TENTHS,
};

/// Sequence-scoped clock used for incremental timestamps.
pub const INCREMENTAL_CLOCK_ID: u32 = 64;

// Field tags (field number << 3 | wire type).
const TAG_PACKET: u8 = 0x0a; // Trace.packet, LEN
const TAG_TIMESTAMP: u8 = 0x40; // 8, VARINT
const TAG_SEQ_ID: u8 = 0x50; // 10, VARINT
/// TracePacket `timestamp_clock_id` (58, VARINT): the clock of this packet's `timestamp`.
const TAG_TIMESTAMP_CLOCK_ID: [u8; 2] = [0xd0, 0x03];
const TAG_TRACK_EVENT: u8 = 0x5a; // 11, LEN
const TAG_INTERNED: u8 = 0x62; // 12, LEN
                               // TrackEvent
const TE_DEBUG: u8 = 0x22; // 4, LEN
const TE_TYPE: u8 = 0x48; // 9, VARINT
const TE_NAME_IID: u8 = 0x50; // 10, VARINT
const TE_TRACK: u8 = 0x58; // 11, VARINT
const TE_COUNTER: [u8; 2] = [0xf0, 0x01]; // 30, VARINT
const TE_EXTRA_COUNTER_VALUE: u8 = 0x60; // 12, VARINT (repeated, not packed)
const TE_EXTRA_COUNTER_TRACK: [u8; 2] = [0xf8, 0x01]; // 31, VARINT (repeated, not packed)
const TE_FLOW: [u8; 2] = [0xf9, 0x02]; // 47, I64
const TE_TERM_FLOW: [u8; 2] = [0x81, 0x03]; // 48, I64
                                            // DebugAnnotation
const DA_NAME_IID: u8 = 0x08; // 1
const DA_BOOL: u8 = 0x10; // 2
const DA_UINT: u8 = 0x18; // 3
const DA_INT: u8 = 0x20; // 4
const DA_STRING: u8 = 0x32; // 6, LEN
const DA_POINTER: u8 = 0x38; // 7
                             // InternedData
const ID_EVENT_NAMES: u8 = 0x12; // 2
const ID_ANNOTATION_NAMES: u8 = 0x1a; // 3
/// TracePacket.track_descriptor (60, LEN) and the TrackDescriptor fields of a lane.
const TAG_TRACK_DESCRIPTOR: [u8; 2] = [0xe2, 0x03];
const TD_UUID: u8 = 0x08; // 1, VARINT
const TD_NAME: u8 = 0x12; // 2, LEN
const TD_PARENT: u8 = 0x28; // 5, VARINT
const TD_MERGE_BEHAVIOR: u8 = 0x78; // 15, VARINT
const TD_MERGE_KEY: [u8; 2] = [0x82, 0x01]; // 16, LEN
/// TracePacket.compressed_packets (50, LEN).
const TAG_COMPRESSED: [u8; 2] = [0x92, 0x03];

#[inline]
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// `v` (< 2⁵⁶) as a varint in the low bytes of a little-endian word, and its length: the 7-bit
/// groups spread into bytes without a loop, continuation bits on all bytes but the last.
#[inline(always)]
fn varint_word(v: u64) -> Option<(u64, usize)> {
    // The usual timestamp deltas and counter values take one to three bytes: those directly.
    if v < 1 << 7 {
        return Some((v, 1));
    }
    if v < 1 << 14 {
        return Some((v & 0x7f | 0x80 | (v >> 7) << 8, 2));
    }
    if v < 1 << 21 {
        return Some((v & 0x7f | (v << 1) & 0x7f00 | 0x8080 | (v >> 14) << 16, 3));
    }
    if v >= 1 << 56 {
        return None;
    }
    let mut w = v & 0x7f;
    w |= (v << 1) & 0x7f00;
    w |= (v << 2) & 0x7f_0000;
    w |= (v << 3) & 0x7f00_0000;
    w |= (v << 4) & 0x7f_0000_0000;
    w |= (v << 5) & 0x7f00_0000_0000;
    w |= (v << 6) & 0x7f_0000_0000_0000;
    w |= (v << 7) & 0x7f00_0000_0000_0000;
    let n = varint_len(v);
    // Bytes 0..n−1 carry the continuation bit (n ≥ 1, so the shift is at most 56).
    let cont = 0x8080_8080_8080_8080 & ((1u64 << (8 * (n - 1))) - 1);
    Some((w | cont, n))
}

/// Frames an encoded message as a `Trace.packet` entry.
pub fn frame_packet(out: &mut Vec<u8>, pkt: &TracePacket) {
    prost::encoding::message::encode(1, pkt, out);
}

/// The trace's clock packet: BOOTTIME == REALTIME at `t`, so epoch timestamps written in the
/// default (BOOTTIME) domain display as wall-clock time in the UI.
pub fn clock_snapshot_packet(t: u64) -> TracePacket {
    TracePacket {
        clock_snapshot: Some(proto::ClockSnapshot {
            clocks: vec![
                proto::Clock {
                    clock_id: Some(proto::CLOCK_BOOTTIME),
                    timestamp: Some(t),
                    ..Default::default()
                },
                proto::Clock {
                    clock_id: Some(proto::CLOCK_REALTIME),
                    timestamp: Some(t),
                    ..Default::default()
                },
            ],
            primary_trace_clock: Some(proto::CLOCK_BOOTTIME as i32),
        }),
        ..Default::default()
    }
}

/// Converts a [`TrackDef`] into its descriptor packet.
pub fn descriptor_packet(def: &TrackDef) -> TracePacket {
    let mut td = proto::TrackDescriptor {
        uuid: Some(def.uuid),
        parent_uuid: def.parent,
        name: Some(def.name.clone()),
        description: def.description.clone(),
        sibling_order_rank: def.order,
        child_ordering: def
            .explicit_child_order
            .then_some(proto::CHILD_ORDERING_EXPLICIT),
        ..Default::default()
    };
    match &def.kind {
        TrackKind::Process { pid, labels } => {
            td.process = Some(proto::ProcessDescriptor {
                pid: Some(*pid),
                process_name: Some(def.name.clone()),
                process_labels: labels.clone(),
                ..Default::default()
            });
        }
        TrackKind::Slices { merge_key } => match merge_key {
            Some(k) => {
                td.sibling_merge_behavior = Some(proto::MERGE_BY_SIBLING_MERGE_KEY);
                td.sibling_merge_key = Some(k.clone());
            }
            None => td.sibling_merge_behavior = Some(proto::MERGE_NONE),
        },
        TrackKind::Counter { unit } => {
            let (unit, unit_name) = match unit {
                CounterUnit::Count => (Some(proto::UNIT_COUNT), None),
                CounterUnit::Bytes => (Some(proto::UNIT_SIZE_BYTES), None),
                CounterUnit::Custom(s) => (None, Some(s.to_string())),
            };
            td.counter = Some(proto::CounterDescriptor {
                unit,
                unit_name,
                ..Default::default()
            });
            td.sibling_merge_behavior = Some(proto::MERGE_NONE);
        }
    }
    TracePacket {
        track_descriptor: Some(td),
        ..Default::default()
    }
}

/// Encoder state of one packet sequence.
pub struct PerfettoSeq {
    seq: u32,
    incremental: bool,
    last_ts: u64,
    started: bool,
    base_ts: u64,
    buf: Vec<u8>,
    interned: Vec<u8>,
    /// TrackEvent body of the event being written.
    scratch: Vec<u8>,
    names: Vec<(String, bool)>,
    name_ids: HashMap<String, u32>,
    keys: Vec<(String, bool)>,
    key_ids: HashMap<String, u32>,
    /// Structured compression of the packets as they are written ([`PerfettoSeq::compressed`]).
    z: Option<Box<FastZ>>,
    /// With `z`: the last small packet per (track, type) slot ([`Template`]), allocated
    /// on first use.
    templates: Vec<TemplateLine>,
    /// Current block's number (1 to [`small::EPOCHS`] − 1): templates of earlier blocks are
    /// stale.
    epoch: u32,
    /// Events written with an absolute timestamp ([`PerfettoSeq::earlier_events`]).
    earlier: u64,
    /// With `z`: zlib for its poorly compressed blocks, made on first use and kept (also by
    /// [`PerfettoSeq::renew`]).
    fallback: Option<Box<Fallback>>,
    /// The last lanes declared with a static key ([`small::LaneTemplate`]).
    lanes: [small::LaneTemplate; small::LANE_SLOTS],
    /// Raw bytes of the current block dropped from the front of `buf`: the block slides
    /// ([`PerfettoSeq::slide`]).
    slid: usize,
}

/// Candidate-table type slots of non-event packets (event types are 1..=4).
const TY_DESCRIPTOR: usize = 5;
const TY_START: usize = 6;

impl PerfettoSeq {
    /// A sequence with id `seq` (non-zero). With `incremental`, timestamps are deltas from the
    /// previous event of the sequence starting at `base_ts` (events must then be fed in
    /// timestamp order; an earlier timestamp is written as equal to the previous one).
    pub fn new(seq: u32, incremental: bool, base_ts: u64) -> Self {
        Self::new_in(seq, incremental, base_ts, Vec::with_capacity(1 << 18))
    }

    fn new_in(seq: u32, incremental: bool, base_ts: u64, buf: Vec<u8>) -> Self {
        PerfettoSeq {
            seq,
            incremental,
            last_ts: base_ts,
            started: false,
            base_ts,
            buf,
            interned: Vec::with_capacity(256),
            scratch: Vec::with_capacity(256),
            names: Vec::new(),
            name_ids: HashMap::new(),
            keys: Vec::new(),
            key_ids: HashMap::new(),
            z: None,
            templates: Vec::new(),
            epoch: 1,
            earlier: 0,
            fallback: None,
            lanes: Default::default(),
            slid: 0,
        }
    }

    /// A sequence like [`PerfettoSeq::new`]'s (compressed when `self` was) in the buffers of
    /// `self`, a sequence that is done: the same bytes as a new one, without allocating
    /// (and faulting in) its buffers again.
    pub fn renew(mut self, seq: u32, incremental: bool, base_ts: u64) -> Self {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        // Templates of a later epoch than any written: none of the old ones is current (the
        // slots are cleared only if the epochs would wrap).
        self.next_epoch();
        let (templates, epoch) = (std::mem::take(&mut self.templates), self.epoch);
        let z = self.z.take().map(|mut z| {
            z.renew();
            z
        });
        let mut fresh = PerfettoSeq::new_in(seq, incremental, base_ts, buf);
        fresh.templates = templates;
        fresh.epoch = epoch;
        fresh.z = z;
        fresh.fallback = self.fallback.take();
        fresh
    }

    /// The next block's epoch: the templates written so far are stale.
    fn next_epoch(&mut self) {
        self.epoch += 1;
        if self.epoch == small::EPOCHS {
            // Epochs wrapped: no slot may look current.
            self.templates.fill(TemplateLine::default());
            self.epoch = 1;
        }
    }

    /// Whether the packets are compressed while written ([`PerfettoSeq::compressed`]).
    pub fn is_compressed(&self) -> bool {
        self.z.is_some()
    }

    /// Compresses the packets while they are written ([`crate::fastz`]): [`TraceSink::take`]
    /// then returns one framed `compressed_packets` packet per call.
    pub fn compressed(mut self) -> Self {
        self.z = Some(Box::new(FastZ::new()));
        self
    }

    fn start(&mut self) {
        self.started = true;
        let mut pkt = TracePacket {
            trusted_packet_sequence_id: Some(self.seq),
            sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
            ..Default::default()
        };
        if self.incremental {
            pkt.trace_packet_defaults = Some(proto::TracePacketDefaults {
                timestamp_clock_id: Some(INCREMENTAL_CLOCK_ID),
                track_event_defaults: None,
            });
            pkt.clock_snapshot = Some(proto::ClockSnapshot {
                clocks: vec![
                    proto::Clock {
                        clock_id: Some(INCREMENTAL_CLOCK_ID),
                        timestamp: Some(self.base_ts),
                        is_incremental: Some(true),
                        unit_multiplier_ns: None,
                    },
                    proto::Clock {
                        clock_id: Some(proto::CLOCK_BOOTTIME),
                        timestamp: Some(self.base_ts),
                        ..Default::default()
                    },
                ],
                primary_trace_clock: None,
            });
        }
        let at = self.buf.len();
        frame_packet(&mut self.buf, &pkt);
        if let Some(z) = &mut self.z {
            z.packet(&self.buf, at, 0, TY_START);
        }
    }

    /// The `timestamp` field of the next in-order packet: its delta to the previous one on an
    /// incremental sequence. A packet earlier than the previous one is never given another time:
    /// [`PerfettoSeq::is_earlier`] sends it to [`PerfettoSeq::new_event`], which writes its
    /// absolute time on BOOTTIME.
    #[inline]
    fn ts_field(&mut self, ts: u64) -> u64 {
        if self.incremental {
            debug_assert!(ts >= self.last_ts, "earlier events take the absolute path");
            let d = ts - self.last_ts;
            self.last_ts = ts;
            d
        } else {
            ts
        }
    }

    /// Whether an event at `ts` is earlier than the previous packet of this incremental
    /// sequence (a delta cannot be negative): such an event is written with its absolute time.
    #[inline(always)]
    fn is_earlier(&self, ts: u64) -> bool {
        self.incremental && ts < self.last_ts
    }

    /// Events written with an absolute timestamp because they were earlier than the packet
    /// before them (their times are exact; the sink's callers feed time order, so this stays 0
    /// unless one does not).
    pub fn earlier_events(&self) -> u64 {
        self.earlier
    }

    #[cold]
    fn intern_name(&mut self, n: Name) {
        let e = &mut self.names[n.0 as usize];
        e.1 = true;
        let s = e.0.as_bytes();
        let body = 2 + varint_len(n.0 as u64 + 1) + varint_len(s.len() as u64) + s.len();
        self.interned.push(ID_EVENT_NAMES);
        put_varint(&mut self.interned, body as u64);
        self.interned.push(0x08);
        put_varint(&mut self.interned, n.0 as u64 + 1);
        self.interned.push(0x12);
        put_varint(&mut self.interned, s.len() as u64);
        self.interned.extend_from_slice(s);
    }

    #[cold]
    fn intern_key(&mut self, k: ArgKey) {
        let e = &mut self.keys[k.0 as usize];
        e.1 = true;
        let s = e.0.as_bytes();
        let body = 2 + varint_len(k.0 as u64 + 1) + varint_len(s.len() as u64) + s.len();
        self.interned.push(ID_ANNOTATION_NAMES);
        put_varint(&mut self.interned, body as u64);
        self.interned.push(0x08);
        put_varint(&mut self.interned, k.0 as u64 + 1);
        self.interned.push(0x12);
        put_varint(&mut self.interned, s.len() as u64);
        self.interned.extend_from_slice(s);
    }

    /// Writes one TrackEvent packet. Any field order is valid protobuf; for the structured
    /// compressor small packets put what repeats from event to event first and what varies
    /// last — sequence id, then the track event (type, track, name, counter value, flows), then
    /// the timestamp delta — so the invariant part matches the previous packet of the same kind
    /// on the same track in one run. Otherwise fields go in field-number order.
    fn event(
        &mut self,
        ts: u64,
        ty: i32,
        track: u64,
        name: Option<Name>,
        value: Option<i64>,
        extra: &Extra<'_>,
    ) {
        let small = self.z.is_some()
            && extra.args.is_empty()
            && extra.flows.len() + extra.terminating.len() <= 2;
        if small {
            let name1 = name.map_or(0, |n| n.0 as u64 + 1);
            if let Some(tail) = small::tail_of(value, extra) {
                if self.templated(ty, track, name1, tail, ts) {
                    return;
                }
            }
        }
        self.new_event(ts, ty, track, name, value, extra, small);
    }

    /// Writes one TrackEvent packet that is not written from a template ([`PerfettoSeq::event`];
    /// `small`: with fastz, no args and at most two flows).
    #[allow(clippy::too_many_arguments)]
    fn new_event(
        &mut self,
        ts: u64,
        ty: i32,
        track: u64,
        name: Option<Name>,
        value: Option<i64>,
        extra: &Extra<'_>,
        small: bool,
    ) {
        if !self.started {
            self.start();
        }
        if let Some(n) = name {
            if !self.names[n.0 as usize].1 {
                self.intern_name(n);
            }
        }
        for (k, _) in extra.args {
            if !self.keys[k.0 as usize].1 {
                self.intern_key(*k);
            }
        }
        // An event earlier than the packet before it keeps its time: absolute, on BOOTTIME
        // (the clock the sequence's incremental clock is defined against), in the general
        // layout; the incremental clock goes on from the packet before it.
        let earlier = self.is_earlier(ts);
        let tsf = if earlier {
            self.earlier += 1;
            ts
        } else {
            self.ts_field(ts)
        };
        // With fastz the layout puts what varies last (see `small_packet`); plain and zlib
        // output keep field-number order, which zlib matches best.
        if small && !earlier && self.interned.is_empty() {
            return self.small_event((ty, track, tsf), name, value, extra, None);
        }
        let te = &mut self.scratch;
        te.clear();
        // Packets with args (full detail) are compressed by zlib, which matches them best in
        // field-number order: timestamp, sequence, args, type, name, track, ...
        for (k, v) in extra.args {
            write_arg(te, *k, v);
        }
        te.push(TE_TYPE);
        te.push(ty as u8);
        if let Some(n) = name {
            te.push(TE_NAME_IID);
            put_varint(te, n.0 as u64 + 1);
        }
        te.push(TE_TRACK);
        put_varint(te, track);
        if let Some(v) = value {
            te.extend_from_slice(&TE_COUNTER);
            put_varint(te, v as u64);
        }
        for &f in extra.flows {
            te.extend_from_slice(&TE_FLOW);
            te.extend_from_slice(&f.to_le_bytes());
        }
        for &f in extra.terminating {
            te.extend_from_slice(&TE_TERM_FLOW);
            te.extend_from_slice(&f.to_le_bytes());
        }
        let il = self.interned.len();
        let mut body = 1
            + varint_len(self.seq as u64)
            + 1
            + varint_len(te.len() as u64)
            + te.len()
            + 1
            + varint_len(tsf);
        if il > 0 {
            body += 1 + varint_len(il as u64) + il;
        }
        if earlier {
            body += TAG_TIMESTAMP_CLOCK_ID.len() + 1;
        }
        let buf = &mut self.buf;
        buf.reserve(body + 16);
        let start = buf.len();
        buf.push(TAG_PACKET);
        put_varint(buf, body as u64);
        buf.push(TAG_TIMESTAMP);
        put_varint(buf, tsf);
        if earlier {
            buf.extend_from_slice(&TAG_TIMESTAMP_CLOCK_ID);
            buf.push(proto::CLOCK_BOOTTIME as u8);
        }
        buf.push(TAG_SEQ_ID);
        put_varint(buf, self.seq as u64);
        buf.push(TAG_TRACK_EVENT);
        put_varint(buf, te.len() as u64);
        buf.extend_from_slice(te);
        if il > 0 {
            buf.push(TAG_INTERNED);
            put_varint(buf, il as u64);
            buf.extend_from_slice(&self.interned);
            self.interned.clear();
        }
        if let Some(z) = &mut self.z {
            z.packet(buf, start, (track << 3 | ty as u64) + 1, ty as usize);
        }
    }
}

/// Appends the framed descriptor packet of a lane — a slice track `key` under `parent`,
/// merged by the sibling merge key `key` — with the bytes prost writes for that
/// [`TrackDef`] ([`descriptor_packet`]: fields in tag order), without building it.
/// Returns where the uuid's varint starts in the packet.
pub(super) fn lane_packet(buf: &mut Vec<u8>, uuid: u64, parent: u64, key: &str) -> usize {
    let at = buf.len();
    let k = key.len() as u64;
    let td = 1 + varint_len(uuid) + 1 + varint_len(k) + key.len() + 1 + varint_len(parent) + 2;
    let td = td + 2 + varint_len(k) + key.len();
    buf.push(TAG_PACKET);
    put_varint(buf, (2 + varint_len(td as u64) + td) as u64);
    buf.extend_from_slice(&TAG_TRACK_DESCRIPTOR);
    put_varint(buf, td as u64);
    buf.push(TD_UUID);
    let uuid_at = buf.len() - at;
    put_varint(buf, uuid);
    buf.push(TD_NAME);
    put_varint(buf, k);
    buf.extend_from_slice(key.as_bytes());
    buf.push(TD_PARENT);
    put_varint(buf, parent);
    buf.extend_from_slice(&[TD_MERGE_BEHAVIOR, proto::MERGE_BY_SIBLING_MERGE_KEY as u8]);
    buf.extend_from_slice(&TD_MERGE_KEY);
    put_varint(buf, k);
    buf.extend_from_slice(key.as_bytes());
    uuid_at
}

/// Appends one DebugAnnotation (field 4 of TrackEvent).
fn write_arg(te: &mut Vec<u8>, k: ArgKey, v: &ArgValue<'_>) {
    te.push(TE_DEBUG);
    let da_len_at = te.len();
    te.push(0);
    te.push(DA_NAME_IID);
    put_varint(te, k.0 as u64 + 1);
    match *v {
        ArgValue::U64(x) => {
            te.push(DA_UINT);
            put_varint(te, x);
        }
        ArgValue::I64(x) => {
            te.push(DA_INT);
            put_varint(te, x as u64);
        }
        ArgValue::Bool(b) => {
            te.push(DA_BOOL);
            put_varint(te, b as u64);
        }
        ArgValue::Hex(x) => {
            te.push(DA_POINTER);
            put_varint(te, x);
        }
        ArgValue::Str(st) => {
            te.push(DA_STRING);
            put_varint(te, st.len() as u64);
            te.extend_from_slice(st.as_bytes());
        }
    }
    fix_len(te, da_len_at);
}

/// Sets the one-byte length placeholder at `at` to the length of what follows it, widening
/// it to a multi-byte varint when needed.
#[inline]
fn fix_len(buf: &mut Vec<u8>, at: usize) {
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
    } else {
        let mut v = Vec::with_capacity(3);
        put_varint(&mut v, len as u64);
        buf.splice(at..at + 1, v);
    }
}

impl TraceSink for PerfettoSeq {
    fn as_dyn(&mut self) -> &mut dyn TraceSink {
        self
    }

    fn name(&mut self, s: &str) -> Name {
        if let Some(&i) = self.name_ids.get(s) {
            return Name(i);
        }
        let i = self.names.len() as u32;
        self.names.push((s.to_string(), false));
        self.name_ids.insert(s.to_string(), i);
        Name(i)
    }

    fn arg_key(&mut self, s: &str) -> ArgKey {
        if let Some(&i) = self.key_ids.get(s) {
            return ArgKey(i);
        }
        let i = self.keys.len() as u32;
        self.keys.push((s.to_string(), false));
        self.key_ids.insert(s.to_string(), i);
        ArgKey(i)
    }

    fn track(&mut self, def: &TrackDef) {
        let lane = match &def.kind {
            TrackKind::Slices { merge_key: Some(k) }
                if *k == def.name
                    && def.description.is_none()
                    && def.order.is_none()
                    && !def.explicit_child_order =>
            {
                def.parent
            }
            _ => None,
        };
        if let Some(parent) = lane {
            return self.lane_descriptor(def.uuid, parent, &def.name);
        }
        let at = self.buf.len();
        frame_packet(&mut self.buf, &descriptor_packet(def));
        if let Some(z) = &mut self.z {
            z.packet(&self.buf, at, 0, TY_DESCRIPTOR);
        }
    }

    fn lane(&mut self, uuid: u64, parent: u64, key: &'static str) {
        self.static_lane(uuid, parent, key);
    }

    #[inline]
    fn begin(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>) {
        self.event(ts, proto::TYPE_SLICE_BEGIN, track, Some(name), None, extra);
    }

    #[inline]
    fn end(&mut self, ts: u64, track: u64, extra: &Extra<'_>) {
        self.event(ts, proto::TYPE_SLICE_END, track, None, None, extra);
    }

    fn instant(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>) {
        self.event(ts, proto::TYPE_INSTANT, track, Some(name), None, extra);
    }

    fn counter(&mut self, ts: u64, track: u64, value: i64) {
        self.event(
            ts,
            proto::TYPE_COUNTER,
            track,
            None,
            Some(value),
            &Extra::NONE,
        );
    }

    /// The raw bytes of the block; once the block slides ([`PerfettoSeq::slide`]), its zlib
    /// data so far counted [`small::SLID_ZLIB_WEIGHT`] times (the raw bytes it keeps are at
    /// most what an unslid block holds), or a [`small::SLID_BLOCK_RATIO`]th of its raw bytes if
    /// more.
    fn pending_bytes(&self) -> usize {
        if self.slid == 0 {
            return self.buf.len();
        }
        let zlib = self.z.as_ref().map_or(0, |z| z.compressed_len());
        (zlib * small::SLID_ZLIB_WEIGHT).max((self.slid + self.buf.len()) / small::SLID_BLOCK_RATIO)
    }

    fn take(&mut self) -> Vec<u8> {
        // The lane templates' bytes leave with the block.
        self.lanes = Default::default();
        match &mut self.z {
            Some(z) => {
                if self.buf.is_empty() {
                    return Vec::new();
                }
                let (buf, fallback) = (&self.buf, &mut self.fallback);
                // A block that slid is dense: not retried (its first bytes are gone).
                let whole = self.slid == 0;
                let out = z.finish_with(buf, |fast| {
                    let zlib = fallback.get_or_insert_with(|| Box::new(Fallback::new()));
                    let retried = whole.then(|| zlib.zlib_if_smaller(buf, fast)).flatten();
                    frame_compressed(retried.unwrap_or(fast))
                });
                self.buf.clear();
                self.slid = 0;
                self.next_epoch();
                out
            }
            None => std::mem::replace(&mut self.buf, Vec::with_capacity(1 << 20)),
        }
    }
}

mod replay;
mod small;
#[cfg(test)]
mod tests;
mod zlib;
