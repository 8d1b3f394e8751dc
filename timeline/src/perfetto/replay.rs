//! Encoding recorded events ([`crate::batch`]) into a sequence: runs of events with at most a
//! counter value or one flow whose track's last packet of their type and name is in the block
//! are written from those templates in one loop ([`repeats`]), other such events written as
//! new packets ([`PerfettoSeq::new_small`]); every other event (args, declarations) goes
//! through the sink interface ([`crate::batch::replay_one`]).

use super::small::{
    epoch_bits, repeat_plain, repeat_tail, slots, slots_ref, template_slot, Tail, Template,
    KIND_TAIL, REPEAT_COPY, TEMPLATE_SLOTS,
};
use super::PerfettoSeq;
use crate::batch::{replay_one, Ev, GroupEvents, TAIL_FLAGS};
use crate::fastz::{FastZ, WINDOW};
use crate::proto;
use crate::{Extra, Name};

impl PerfettoSeq {
    /// Encodes one group's recorded events, in order.
    pub fn replay(&mut self, events: &GroupEvents) {
        let evs = events.evs();
        let mut i = 0;
        while i < evs.len() {
            // The loop when the next event may be a repeat (else it would return at once).
            if let (true, Some(z), Ok(templates), true) = (
                self.may_repeat(&evs[i]),
                self.z.as_deref_mut(),
                <&mut [Template; TEMPLATE_SLOTS]>::try_from(slots(&mut self.templates)),
                self.incremental,
            ) {
                let epoch = epoch_bits(self.epoch);
                let last = &mut self.last_ts;
                i += repeats(&mut self.buf, templates, z, last, epoch, &evs[i..]);
                if i == evs.len() {
                    break;
                }
            }
            let ev = &evs[i];
            // Events with at most a counter value or one flow (a template too far back or
            // less than a copy back, the first of its track in the block, an earlier one), then
            // the rest.
            let small = match ev.plain_type() {
                Some(ty) => Some((ty, Tail::None)),
                None => ev.with_tail(),
            };
            match small {
                Some((ty, tail)) => {
                    if !self.templated(ty as i32, ev.track, ev.name1(), tail, ev.ts) {
                        self.new_small(ev, ty, tail);
                    }
                }
                None => replay_one(events, ev, self),
            }
            i += 1;
        }
        if let Some(z) = self.z.as_deref_mut() {
            z.checksum(&self.buf);
        }
        self.slide();
    }

    /// Whether `ev`'s template slot holds a template of its track, type and name in this block
    /// (the first test of [`repeats`]; the others are left to it).
    #[inline(always)]
    fn may_repeat(&self, ev: &Ev) -> bool {
        let slot = template_slot(ev.track, ev.meta as u8 as i32);
        let Some(t) = slots_ref(&self.templates).get(slot) else {
            return false;
        };
        let key = ev.meta | epoch_bits(self.epoch);
        t.kind & !KIND_TAIL == key & !TAIL_FLAGS && t.track == ev.track
    }

    /// Writes a recorded event of type `ty` with at most a counter value or one flow (`tail`)
    /// that no template wrote: what the sink interface writes for it
    /// ([`crate::batch::replay_one`], [`PerfettoSeq::new_event`]), without the interface.
    #[inline(never)]
    fn new_small(&mut self, ev: &Ev, ty: u8, tail: Tail) {
        if let Tail::Pair(x) = tail {
            return self.new_pair(ev, x);
        }
        // Slice ends have no name.
        let name = match ev.name1() {
            n if n != 0 && ty as i32 != proto::TYPE_SLICE_END => Some(Name(n as u32 - 1)),
            _ => None,
        };
        let one = [ev.x];
        let (value, extra) = match tail {
            Tail::None | Tail::Pair(_) => (None, Extra::NONE),
            Tail::Value(v) => (Some(v as i64), Extra::NONE),
            Tail::Flow(_) => (
                None,
                Extra {
                    flows: &one,
                    ..Extra::NONE
                },
            ),
            Tail::Term(_) => (
                None,
                Extra {
                    terminating: &one,
                    ..Extra::NONE
                },
            ),
        };
        let small = self.z.is_some();
        self.new_event(ev.ts, ty as i32, ev.track, name, value, &extra, small);
    }

    /// Writes a recorded counter pair ([`crate::batch::COUNTER_PAIR`], values `x`) that no
    /// template wrote: one COUNTER packet with an extra counter value, the template of the
    /// pairs of its track — or, where that packet is not small (no compressor, interned data to
    /// attach, an event earlier than the packet before it, or a prefix longer than a repeat
    /// copies), its two samples as two counters.
    #[cold]
    #[inline(never)]
    fn new_pair(&mut self, ev: &Ev, x: u64) {
        use super::varint_len;
        let prefix = varint_len(self.seq as u64) + varint_len(ev.track) + varint_len(ev.track + 1);
        if !self.started {
            self.start();
        }
        if self.z.is_none() || !self.interned.is_empty() || self.is_earlier(ev.ts) || prefix > 20 {
            let sink: &mut dyn crate::TraceSink = self;
            sink.counter(ev.ts, ev.track, (x & 0xffff_ffff) as i64);
            sink.counter(ev.ts, ev.track + 1, (x >> 32) as i64);
            return;
        }
        let tsf = self.ts_field(ev.ts);
        let ty = crate::batch::COUNTER_PAIR as i32;
        self.small_event((ty, ev.track, tsf), None, None, &Extra::NONE, Some(x));
    }
}

/// Writes the events at the start of `evs` that repeat their templates into `buf` and `z` —
/// the template in the current block (`epoch`: [`epoch_bits`]) of the same track, type and
/// name, within the window — up to the first that does not; returns how many. Plain events of
/// plain templates are [`repeat_plain`]s; counters, events with one flow and plain events of
/// templates with a tail are [`repeat_tail`]s (the template at least [`REPEAT_COPY`] back).
/// `last_ts`: the incremental clock. The same bytes and tokens as the sink's path
/// ([`PerfettoSeq::templated`]).
#[inline(never)]
fn repeats(
    buf: &mut Vec<u8>,
    templates: &mut [Template; TEMPLATE_SLOTS],
    z: &mut FastZ,
    last_ts: &mut u64,
    epoch: u64,
    evs: &[Ev],
) -> usize {
    z.wake();
    let mut now = *last_ts;
    let mut rest = evs.iter();
    while let Some(ev) = rest.clone().next() {
        if ev.ts < now {
            break;
        }
        let ty = ev.meta as u8;
        let t = &mut templates[template_slot(ev.track, ty as i32)];
        let start = buf.len();
        // The kind (type, name, no tail, epoch) of a template equals a recorded plain event's
        // `meta` with the epoch ([`super::small::template_kind`]); a counter's or an event's
        // with a flow equals it without their flags and the template's tail flag; an event
        // with other flags (args, more flows) or a track or lane declaration never does.
        let key = ev.meta | epoch;
        if t.kind == key {
            if t.track != ev.track || start - t.at() > WINDOW {
                break;
            }
            match repeat_plain(buf, z, t, ev.ts - now, ty as usize) {
                None => break,
                Some(false) => {}
                Some(true) => {
                    // A packet that went on with the match in progress: the next ones may.
                    now = ev.ts;
                    rest.next();
                    let evs = rest.as_slice();
                    let n = run(buf, templates, z, &mut now, epoch, evs);
                    rest = evs[n..].iter();
                    continue;
                }
            }
        } else if t.kind & !KIND_TAIL == key & !TAIL_FLAGS {
            if t.track != ev.track || start - t.at() > WINDOW || t.at() + REPEAT_COPY > start {
                break;
            }
            tail_repeat(buf, z, t, ev, ev.ts - now);
        } else {
            break;
        }
        now = ev.ts;
        rest.next();
    }
    *last_ts = now;
    evs.len() - rest.len()
}

/// Writes the plain events at the start of `evs` that repeat their templates with the same
/// timestamp delta where those lie as far back as the match in progress ([`FastZ::run_at`]),
/// up to the first that does not; returns how many. Their bytes are those that far back: the
/// packets are copied and tokenized together ([`FastZ::extend_run`]) at the end and where one
/// ends the block — the bytes and tokens of [`repeat_plain`]s ([`FastZ::repeat_same`] going
/// on with the match). `now`: the incremental clock.
#[inline(never)]
fn run(
    buf: &mut Vec<u8>,
    templates: &mut [Template; TEMPLATE_SLOTS],
    z: &mut FastZ,
    now: &mut u64,
    epoch: u64,
    evs: &[Ev],
) -> usize {
    let (d, room) = z.run_at();
    if d < REPEAT_COPY {
        return 0;
    }
    // The packets not yet copied: `buf.len()..end`; past `limit` the match's full-length
    // tokens fill the block. Start + 1 of the last packet of each type.
    let mut end = buf.len();
    let mut limit = end + room;
    let mut last = [0usize; 4];
    let mut clock = *now;
    let mut rest = evs.iter();
    while let Some(ev) = rest.next() {
        let ty = ev.meta as u8;
        let t = &mut templates[template_slot(ev.track, ty as i32)];
        if ev.ts < clock
            || t.kind != ev.meta | epoch
            || t.track != ev.track
            || t.at() + d != end
            || t.ts != ev.ts - clock
        {
            // Not taken.
            rest = evs[evs.len() - rest.len() - 1..].iter();
            break;
        }
        t.set_at(end);
        last[ty as usize & 3] = end + 1;
        end += t.len();
        clock = ev.ts;
        if end > limit {
            // The packet ends the block ([`FastZ::repeat_same`]).
            match run_write(buf, z, d, end, &mut last) {
                Some(l) => limit = l,
                None => break,
            }
        }
    }
    if end > buf.len() {
        run_write(buf, z, d, end, &mut last);
    }
    *now = clock;
    evs.len() - rest.len()
}

/// Copies the packets of a [`run`] not yet copied, up to `end`, and tokenizes them
/// ([`FastZ::extend_run`]; `last`: start + 1 of the last one of each type, cleared). The
/// limit of the next packets when the match goes on at `d`.
#[inline(never)]
fn run_write(
    buf: &mut Vec<u8>,
    z: &mut FastZ,
    d: usize,
    end: usize,
    last: &mut [usize; 4],
) -> Option<usize> {
    copy_back(buf, d, end);
    let prev = *last.iter().max().unwrap_or(&0);
    z.extend_run(buf, last, prev);
    *last = [0; 4];
    let (e, room) = z.run_at();
    (e == d).then_some(end + room)
}

/// Extends `buf` to `end` with the bytes `d` earlier, in copies of at most `d` bytes.
fn copy_back(buf: &mut Vec<u8>, d: usize, end: usize) {
    buf.reserve(end - buf.len());
    while buf.len() < end {
        let from = buf.len() - d;
        buf.extend_from_within(from..from + d.min(end - buf.len()));
    }
}

/// [`repeat_tail`] of event `ev` with timestamp delta `tsf` (inlined: out of line it took more
/// instructions — 1 % of the real ib_write_bw log's conversion, 2 % of the 64-rank set's —
/// now that the plain repeats' longest stretches are written by [`run`]).
#[inline(always)]
fn tail_repeat(buf: &mut Vec<u8>, z: &mut FastZ, t: &mut Template, ev: &Ev, tsf: u64) {
    repeat_tail(buf, z, t, ev.tail(), tsf, ev.meta as u8 as usize);
}
