//! Recorded events, encoded later in batches: a producer feeds a [`Recorder`] (a
//! [`TraceSink`] that only appends each event to its group's list, 32 bytes, no encoding)
//! and hands the full [`EventBatch`] to [`PerfettoGroups::encode`], which encodes and
//! compresses each group's events into its own sequence — the groups in parallel (rayon),
//! while the producer records the next batch.
//!
//! The bytes do not depend on the number of threads: each group's sequence receives exactly
//! its events in order, and after every batch the groups whose block is full are taken in
//! group order ([`PerfettoGroups::encode`]) — the same as feeding the events to the groups
//! directly and calling [`TraceSink::take_ready`] at every batch boundary.

use std::collections::HashMap;

use rayon::prelude::*;

use crate::groups::PerfettoGroups;
use crate::perfetto::Tail;
use crate::{ArgKey, ArgValue, Extra, Name, TraceSink, TrackDef};

/// Event types of an [`Ev`] (its `meta`'s low byte).
const BEGIN: u8 = 1;
const END: u8 = 2;
const INSTANT: u8 = 3;
const COUNTER: u8 = 4;
/// A track declaration: `x` is its index in the group's side table.
const TRACK: u8 = 5;
/// A lane ([`TraceSink::lane`]): `x` is the parent, the side table holds the key.
const LANE: u8 = 6;
/// Two counter samples at one time, on track `track` and on track `track + 1`, recorded one
/// after the other: `x` holds both values (the first in its low 32 bits), each below 2³².
/// Written as one COUNTER packet whose extra counter value is the second
/// ([`crate::perfetto`]); other sinks get the two samples ([`replay_one`]).
pub(crate) const COUNTER_PAIR: u8 = 7;
/// `meta` flags: `x` is a flow the event starts, or one it terminates; `x` indexes the side
/// table (args, or more flows).
const FLOW: u64 = 1 << 8;
const TERM: u64 = 1 << 9;
/// The flags of an event's one flow ([`Ev::tail`]).
pub(crate) const TAIL_FLAGS: u64 = FLOW | TERM;
const SIDE: u64 = 1 << 10;

/// Events a group's list has room for at first (it grows as needed and is reused).
const FIRST_EVENTS: usize = 1024;

/// One recorded event: time, track, one value (counter value, flow id or side index) and
/// `meta` — type (low byte), flags, name index + 1 (high 32 bits; 0: none).
#[derive(Clone, Copy, Debug)]
pub struct Ev {
    pub ts: u64,
    pub track: u64,
    pub x: u64,
    pub meta: u64,
}

/// An argument value held by the batch.
#[derive(Clone, Debug)]
enum OwnedArg {
    U64(u64),
    I64(i64),
    Bool(bool),
    Str(String),
    Hex(u64),
}

/// What does not fit an [`Ev`]: a track declaration, or an event's args and flows.
#[derive(Clone, Debug)]
enum Side {
    Track(Box<TrackDef>),
    Lane(&'static str),
    Extra {
        args: Vec<(ArgKey, OwnedArg)>,
        flows: Vec<u64>,
        terminating: Vec<u64>,
    },
}

/// One group's events of a batch.
#[derive(Clone, Debug, Default)]
pub struct GroupEvents {
    evs: Vec<Ev>,
    side: Vec<Side>,
}

/// The events recorded since the last batch: per group its events, and the names and arg
/// keys interned meanwhile (in interning order).
#[derive(Clone, Debug, Default)]
pub struct EventBatch {
    groups: Vec<GroupEvents>,
    names: Vec<String>,
    keys: Vec<String>,
}

impl EventBatch {
    /// Events in the batch (all groups).
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.evs.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A [`TraceSink`] that records events into an [`EventBatch`] per group (see the module
/// documentation). Names and arg keys are interned here, in the order the encoders will
/// intern them.
pub struct Recorder {
    batch: EventBatch,
    /// An encoded batch to record the next one into.
    spare: Option<EventBatch>,
    /// The group events go to (below the batch's group count).
    cur: usize,
    name_ids: HashMap<String, u32>,
    key_ids: HashMap<String, u32>,
}

impl Recorder {
    /// A recorder of `groups` groups (group `g` ≥ `groups` records into the last).
    pub fn new(groups: usize) -> Recorder {
        assert!(groups > 0, "at least one group");
        Recorder {
            batch: EventBatch {
                groups: (0..groups)
                    .map(|_| GroupEvents {
                        evs: Vec::with_capacity(FIRST_EVENTS),
                        side: Vec::new(),
                    })
                    .collect(),
                ..Default::default()
            },
            spare: None,
            cur: 0,
            name_ids: HashMap::new(),
            key_ids: HashMap::new(),
        }
    }

    /// A recorder like [`Recorder::new`]'s in the buffers of `self` (a recorder that is done):
    /// its batches' lists keep their capacity.
    pub fn renew(mut self, groups: usize) -> Recorder {
        let groups = groups.max(1);
        let fit = |mut b: EventBatch| {
            b.groups.resize_with(groups, GroupEvents::default);
            for g in &mut b.groups {
                g.evs.clear();
                g.side.clear();
            }
            b.names.clear();
            b.keys.clear();
            b
        };
        self.name_ids.clear();
        self.key_ids.clear();
        Recorder {
            batch: fit(std::mem::take(&mut self.batch)),
            spare: self.spare.take().map(fit),
            cur: 0,
            name_ids: self.name_ids,
            key_ids: self.key_ids,
        }
    }

    /// Takes the events recorded so far; the recorder goes on with the batch given back
    /// last ([`Recorder::give_back`]), or a new one.
    pub fn take_batch(&mut self) -> EventBatch {
        let fresh = match self.spare.take() {
            Some(b) => b,
            None => EventBatch {
                groups: (0..self.batch.groups.len())
                    .map(|_| GroupEvents {
                        evs: Vec::with_capacity(FIRST_EVENTS),
                        side: Vec::new(),
                    })
                    .collect(),
                ..Default::default()
            },
        };
        std::mem::replace(&mut self.batch, fresh)
    }

    /// Takes back an encoded batch ([`PerfettoGroups::encode`] empties it) to record into
    /// again: its buffers keep their capacity.
    pub fn give_back(&mut self, mut batch: EventBatch) {
        if batch.groups.len() == self.batch.groups.len() {
            for g in &mut batch.groups {
                g.evs.clear();
                g.side.clear();
            }
            batch.names.clear();
            batch.keys.clear();
            self.spare = Some(batch);
        }
    }

    #[inline(always)]
    fn push(&mut self, ev: Ev) {
        self.cur_evs().push(ev);
    }

    /// The current group's events.
    #[inline(always)]
    fn cur_evs(&mut self) -> &mut Vec<Ev> {
        &mut self.batch.groups[self.cur].evs
    }

    #[inline(always)]
    fn event(&mut self, ts: u64, ty: u8, track: u64, name: Option<Name>, extra: &Extra<'_>) {
        let plain = Ev::plain(ts, ty, track, name);
        // The slices are taken out of `extra` (and handed to the cold path by value), so that
        // a caller's `Extra` built for this call need not be stored in memory.
        let Extra {
            args,
            flows,
            terminating,
        } = *extra;
        let (x, flag) = match (args, flows, terminating) {
            ([], [], []) => (0, 0),
            ([], [f], []) => (*f, FLOW),
            ([], [], [f]) => (*f, TERM),
            _ => (self.side(args, flows, terminating), SIDE),
        };
        self.push(Ev {
            x,
            meta: plain.meta | flag,
            ..plain
        });
    }

    #[cold]
    #[inline(never)]
    fn side(&mut self, args: &[(ArgKey, ArgValue<'_>)], flows: &[u64], terminating: &[u64]) -> u64 {
        let args = args
            .iter()
            .map(|&(k, v)| {
                let v = match v {
                    ArgValue::U64(x) => OwnedArg::U64(x),
                    ArgValue::I64(x) => OwnedArg::I64(x),
                    ArgValue::Bool(b) => OwnedArg::Bool(b),
                    ArgValue::Str(s) => OwnedArg::Str(s.to_string()),
                    ArgValue::Hex(x) => OwnedArg::Hex(x),
                };
                (k, v)
            })
            .collect();
        let side = &mut self.batch.groups[self.cur].side;
        side.push(Side::Extra {
            args,
            flows: flows.to_vec(),
            terminating: terminating.to_vec(),
        });
        side.len() as u64 - 1
    }
}

/// Interns `s` in `ids`, queueing a new one in `queue`.
fn intern(ids: &mut HashMap<String, u32>, queue: &mut Vec<String>, s: &str) -> u32 {
    if let Some(&i) = ids.get(s) {
        return i;
    }
    let i = ids.len() as u32;
    ids.insert(s.to_string(), i);
    queue.push(s.to_string());
    i
}

impl TraceSink for Recorder {
    fn as_dyn(&mut self) -> &mut dyn TraceSink {
        self
    }

    fn name(&mut self, s: &str) -> Name {
        Name(intern(&mut self.name_ids, &mut self.batch.names, s))
    }

    fn arg_key(&mut self, s: &str) -> ArgKey {
        ArgKey(intern(&mut self.key_ids, &mut self.batch.keys, s))
    }

    fn track(&mut self, def: &TrackDef) {
        let side = &mut self.batch.groups[self.cur].side;
        side.push(Side::Track(Box::new(def.clone())));
        let x = side.len() as u64 - 1;
        self.push(Ev {
            ts: 0,
            track: def.uuid,
            x,
            meta: TRACK as u64,
        });
    }

    fn lane(&mut self, uuid: u64, parent: u64, key: &'static str) {
        let side = &mut self.batch.groups[self.cur].side;
        side.push(Side::Lane(key));
        let at = side.len() as u64 - 1;
        self.push(Ev {
            ts: at,
            track: uuid,
            x: parent,
            meta: LANE as u64,
        });
    }

    #[inline]
    fn begin(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>) {
        self.event(ts, BEGIN, track, Some(name), extra);
    }

    #[inline]
    fn end(&mut self, ts: u64, track: u64, extra: &Extra<'_>) {
        self.event(ts, END, track, None, extra);
    }

    /// Both events pushed at once (one capacity check).
    #[inline]
    fn begin_two(&mut self, ts: u64, a: (u64, Name), b: (u64, Name)) {
        let ev = |(track, name)| Ev::plain(ts, BEGIN, track, Some(name));
        self.cur_evs().extend([ev(a), ev(b)]);
    }

    /// Both events pushed at once (one capacity check).
    #[inline]
    fn end_two(&mut self, ts: u64, a: u64, b: u64) {
        let ev = |track| Ev::plain(ts, END, track, None);
        self.cur_evs().extend([ev(a), ev(b)]);
    }

    #[inline]
    fn instant(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>) {
        self.event(ts, INSTANT, track, Some(name), extra);
    }

    /// A sample right after one on the track before this one at the same time (a caller's
    /// counters of one object, sampled together) joins it as a [`COUNTER_PAIR`] when both
    /// values fit in 32 bits.
    #[inline]
    fn counter(&mut self, ts: u64, track: u64, value: i64) {
        if let Some(last) = self.cur_evs().last_mut() {
            if last.meta == COUNTER as u64
                && last.ts == ts
                && last.track.wrapping_add(1) == track
                && (last.x | value as u64) >> 32 == 0
            {
                last.x |= (value as u64) << 32;
                last.meta = COUNTER_PAIR as u64;
                return;
            }
        }
        self.push(Ev {
            ts,
            track,
            x: value as u64,
            meta: COUNTER as u64,
        });
    }

    /// Nothing is encoded here: the batch's events are pending.
    fn pending_bytes(&self) -> usize {
        0
    }

    /// Events recorded since the last [`Recorder::take_batch`]: those of the batch (it starts
    /// empty), counted here rather than at every event (this is asked every few hundred).
    fn recorded(&self) -> usize {
        self.batch.len()
    }

    /// Nothing is encoded here ([`PerfettoGroups::encode`] encodes the batches).
    fn take(&mut self) -> Vec<u8> {
        Vec::new()
    }

    #[inline]
    fn group(&mut self, g: u32) {
        self.cur = (g as usize).min(self.batch.groups.len() - 1);
    }
}

/// Feeds one group's recorded events to `sink`, in order.
pub fn replay(events: &GroupEvents, sink: &mut dyn TraceSink) {
    for ev in &events.evs {
        replay_one(events, ev, sink);
    }
}

/// Feeds one recorded event of `events` to `sink`.
#[inline(never)]
pub(crate) fn replay_one(events: &GroupEvents, ev: &Ev, sink: &mut dyn TraceSink) {
    let ty = ev.meta as u8;
    let name = match ev.meta >> 32 {
        0 => None,
        n => Some(Name(n as u32 - 1)),
    };
    if ty == TRACK {
        if let Side::Track(def) = &events.side[ev.x as usize] {
            sink.track(def);
        }
        return;
    }
    if ty == LANE {
        if let Side::Lane(key) = events.side[ev.ts as usize] {
            sink.lane(ev.track, ev.x, key);
        }
        return;
    }
    if ty == COUNTER {
        sink.counter(ev.ts, ev.track, ev.x as i64);
        return;
    }
    if ty == COUNTER_PAIR {
        sink.counter(ev.ts, ev.track, (ev.x & 0xffff_ffff) as i64);
        sink.counter(ev.ts, ev.track + 1, (ev.x >> 32) as i64);
        return;
    }
    let one = [ev.x];
    let owned;
    let extra = if ev.meta & FLOW != 0 {
        Extra {
            flows: &one,
            ..Extra::NONE
        }
    } else if ev.meta & TERM != 0 {
        Extra {
            terminating: &one,
            ..Extra::NONE
        }
    } else if ev.meta & SIDE != 0 {
        owned = side_extra(&events.side[ev.x as usize]);
        owned.as_extra()
    } else {
        Extra::NONE
    };
    match (ty, name) {
        (BEGIN, Some(n)) => sink.begin(ev.ts, ev.track, n, &extra),
        (END, _) => sink.end(ev.ts, ev.track, &extra),
        (INSTANT, Some(n)) => sink.instant(ev.ts, ev.track, n, &extra),
        _ => debug_assert!(false, "recorded event of type {ty}"),
    }
}

impl Ev {
    /// An event of type `ty` without args, flows or value: the type and the name (index + 1)
    /// packed into `meta`.
    #[inline(always)]
    fn plain(ts: u64, ty: u8, track: u64, name: Option<Name>) -> Ev {
        Ev {
            ts,
            track,
            x: 0,
            meta: ty as u64 | name.map_or(0, |n| (n.0 as u64 + 1) << 32),
        }
    }

    /// The event's type (a Perfetto TrackEvent type: slice begin 1, end 2, instant 3) when it
    /// is one without args, flows or value.
    #[inline(always)]
    pub(crate) fn plain_type(&self) -> Option<u8> {
        let ty = self.meta as u8;
        (self.meta & 0xff00 == 0 && ty < COUNTER).then_some(ty)
    }

    /// The event's type (counter 4, counter pair 7, or slice begin 1, end 2, instant 3) and
    /// its counter value(s) or its one flow, when it is a counter or an event with one flow and
    /// no args.
    #[inline(always)]
    pub(crate) fn with_tail(&self) -> Option<(u8, Tail)> {
        let ty = self.meta as u8;
        if ty == COUNTER {
            Some((ty, Tail::Value(self.x)))
        } else if ty == COUNTER_PAIR {
            Some((ty, Tail::Pair(self.x)))
        } else if ty >= COUNTER || self.meta & SIDE != 0 {
            None
        } else if self.meta & FLOW != 0 {
            Some((ty, Tail::Flow(self.x)))
        } else if self.meta & TERM != 0 {
            Some((ty, Tail::Term(self.x)))
        } else {
            None
        }
    }

    /// The tail of an event with at most a counter value or one flow (its flags without
    /// [`SIDE`]): the value(s) of a counter or pair, the flow it starts or terminates, or none.
    #[inline(always)]
    pub(crate) fn tail(&self) -> Tail {
        if self.meta as u8 == COUNTER {
            Tail::Value(self.x)
        } else if self.meta as u8 == COUNTER_PAIR {
            Tail::Pair(self.x)
        } else if self.meta & FLOW != 0 {
            Tail::Flow(self.x)
        } else if self.meta & TERM != 0 {
            Tail::Term(self.x)
        } else {
            Tail::None
        }
    }

    /// The event's name + 1 (0: none).
    #[inline(always)]
    pub(crate) fn name1(&self) -> u64 {
        self.meta >> 32
    }
}

impl GroupEvents {
    pub(crate) fn evs(&self) -> &[Ev] {
        &self.evs
    }
}

/// A side entry's args and flows, borrowed as [`Extra`] by [`Held::as_extra`].
struct Held<'a> {
    args: Vec<(ArgKey, ArgValue<'a>)>,
    flows: &'a [u64],
    terminating: &'a [u64],
}

impl Held<'_> {
    fn as_extra(&self) -> Extra<'_> {
        Extra {
            args: &self.args,
            flows: self.flows,
            terminating: self.terminating,
        }
    }
}

fn side_extra(side: &Side) -> Held<'_> {
    match side {
        Side::Extra {
            args,
            flows,
            terminating,
        } => Held {
            args: args
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        OwnedArg::U64(x) => ArgValue::U64(*x),
                        OwnedArg::I64(x) => ArgValue::I64(*x),
                        OwnedArg::Bool(b) => ArgValue::Bool(*b),
                        OwnedArg::Str(s) => ArgValue::Str(s),
                        OwnedArg::Hex(x) => ArgValue::Hex(*x),
                    };
                    (*k, v)
                })
                .collect(),
            flows,
            terminating,
        },
        Side::Track(_) | Side::Lane(_) => Held {
            args: Vec::new(),
            flows: &[],
            terminating: &[],
        },
    }
}

impl PerfettoGroups {
    /// Encodes a recorded batch: every group's events into its sequence (the groups in
    /// parallel), then takes the blocks of the groups holding at least the group block, in
    /// group order (framed, compressed when the sequences compress).
    pub fn encode(&mut self, batch: &EventBatch) -> Vec<u8> {
        crate::groups::join(self.encode_blocks(batch))
    }

    /// [`PerfettoGroups::encode`], each group's blocks apart (empty for a group with none
    /// ready): the caller writes them in turn, not joined into one copy first.
    pub fn encode_blocks(&mut self, batch: &EventBatch) -> Vec<Vec<u8>> {
        let EventBatch {
            groups,
            names,
            keys,
        } = batch;
        let block = self.group_block();
        let seqs = self.seqs_mut();
        seqs.par_iter_mut()
            .zip(groups.par_iter())
            .map(|(seq, events)| {
                for s in names {
                    seq.name(s);
                }
                for k in keys {
                    seq.arg_key(k);
                }
                if !events.evs.is_empty() {
                    seq.replay(events);
                }
                if seq.pending_bytes() >= block {
                    seq.take()
                } else {
                    Vec::new()
                }
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::perfetto::PerfettoSeq;

    /// A producer's events: three groups, flows, args, a counter, track declarations.
    fn feed(s: &mut dyn TraceSink, round: u64) {
        let n = s.name("WRITE 8 B");
        let k = s.arg_key("status");
        for i in 0..3000u64 {
            let g = (i % 3) as u32;
            let t = 1000 + 10 * i + round * 100_000;
            s.group(g);
            if i < 3 {
                s.track(&TrackDef::slices(100 + g as u64 + round * 10, None, "lane"));
            }
            let track = 100 + g as u64 + round * 10;
            let flows = [i];
            let extra = Extra {
                flows: &flows,
                ..Extra::NONE
            };
            s.begin(t, track, n, if i % 7 == 0 { &extra } else { &Extra::NONE });
            let args = [(k, ArgValue::Str("REM_ACCESS_ERR"))];
            let failed = Extra {
                args: &args,
                ..Extra::NONE
            };
            s.end(
                t + 5,
                track,
                if i % 11 == 0 { &failed } else { &Extra::NONE },
            );
            s.instant(
                t + 5,
                track,
                n,
                &Extra {
                    terminating: &flows,
                    ..Extra::NONE
                },
            );
            s.counter(t + 5, 7 + g as u64, i as i64);
            if i % 5 == 0 {
                s.begin_two(t + 6, (track, n), (track, n));
                s.end_two(t + 7, track, track);
            }
        }
    }

    /// The replay compares a template's kind with a recorded event's `meta` directly
    /// (`perfetto::replay`): a plain event's `meta` is the kind of its type and name, and an
    /// event with a flow, args or a value never equals any kind a template can have (with or
    /// without a tail, at any epoch; a counter's always has its value).
    #[test]
    fn plain_events_meta_is_their_template_kind() {
        use crate::perfetto::{epoch_bits, template_kind, EPOCHS, KIND_TAIL};
        let mut rec = Recorder::new(1);
        let n = rec.name("WRITE 8 B");
        let k = rec.arg_key("status");
        let flow = Extra {
            flows: &[7],
            ..Extra::NONE
        };
        let args = [(k, ArgValue::U64(1))];
        rec.begin(10, 5, n, &Extra::NONE);
        rec.end(11, 5, &Extra::NONE);
        rec.instant(12, 5, n, &Extra::NONE);
        rec.begin(13, 5, n, &flow);
        rec.end(14, 5, &flow);
        rec.instant(
            15,
            5,
            n,
            &Extra {
                terminating: &[7],
                ..Extra::NONE
            },
        );
        rec.end(
            16,
            5,
            &Extra {
                args: &args,
                ..Extra::NONE
            },
        );
        rec.counter(17, 5, 3);
        let batch = rec.take_batch();
        let evs = batch.groups[0].evs();
        let name1 = n.0 as u64 + 1;
        assert_eq!(evs[0].meta, template_kind(1, name1));
        assert_eq!(evs[1].meta, template_kind(2, 0));
        assert_eq!(evs[2].meta, template_kind(3, name1));
        for ev in &evs[3..] {
            for ty in 1..=4 {
                for name1 in [0, name1] {
                    for epoch in [1, 2, EPOCHS - 1] {
                        let kind = template_kind(ty, name1) | epoch_bits(epoch);
                        let e = epoch_bits(epoch);
                        if ty != 4 {
                            assert_ne!(ev.meta | e, kind, "{ev:?}");
                        }
                        assert_ne!(ev.meta | e, kind | KIND_TAIL, "{ev:?}");
                    }
                }
            }
        }
    }

    /// The current group's events are out of the batch while it is current: taking the batch,
    /// counting it and renewing the recorder see them in their group all the same.
    #[test]
    fn current_group_events_are_in_their_group_when_taken() {
        let mut rec = Recorder::new(3);
        let n = rec.name("WRITE 8 B");
        rec.group(2);
        rec.begin(10, 5, n, &Extra::NONE);
        rec.group(1);
        rec.begin(11, 6, n, &Extra::NONE);
        rec.end(12, 6, &Extra::NONE);
        rec.group(9);
        rec.counter(13, 7, 1);
        assert_eq!(rec.recorded(), 4);
        let batch = rec.take_batch();
        let lens: Vec<usize> = batch.groups.iter().map(|g| g.evs().len()).collect();
        assert_eq!(lens, [0, 2, 2]);
        assert_eq!(rec.recorded(), 0);
        rec.give_back(batch);
        rec.begin(14, 5, n, &Extra::NONE);
        let mut rec = rec.renew(2);
        assert_eq!(rec.recorded(), 0);
        rec.group(1);
        rec.end(15, 5, &Extra::NONE);
        let batch = rec.take_batch();
        let lens: Vec<usize> = batch.groups.iter().map(|g| g.evs().len()).collect();
        assert_eq!(lens, [0, 1]);
        assert_eq!(batch.groups[1].evs()[0].ts, 15);
    }

    fn groups() -> PerfettoGroups {
        let seqs = (0..3)
            .map(|g| PerfettoSeq::new(1 + g, true, 1000).compressed())
            .collect();
        PerfettoGroups::new(seqs, 4096)
    }

    /// The bytes of `rounds` rounds of `feed` fed to fresh groups (`make`) directly, taking
    /// the ready blocks at every round's end, and the bytes of the same rounds recorded (a
    /// recorder of `groups` groups; `recorded` sees it after each round's feed) and encoded
    /// batch by batch: (direct, recorded).
    pub(crate) fn direct_and_recorded(
        make: impl Fn() -> PerfettoGroups,
        groups: usize,
        rounds: u64,
        feed: impl Fn(&mut dyn TraceSink, u64),
        recorded: impl Fn(&Recorder),
    ) -> (Vec<u8>, Vec<u8>) {
        let mut direct = make();
        let mut want = Vec::new();
        for round in 0..rounds {
            feed(&mut direct, round);
            want.extend(direct.take_ready(usize::MAX));
        }
        want.extend(direct.take());
        let mut enc = make();
        let mut rec = Recorder::new(groups);
        let mut got = Vec::new();
        for round in 0..rounds {
            feed(&mut rec, round);
            recorded(&rec);
            let b = rec.take_batch();
            got.extend(enc.encode(&b));
            rec.give_back(b);
        }
        got.extend(enc.take());
        (want, got)
    }

    /// Recording and encoding in batches writes the same bytes as feeding the groups
    /// directly and taking the ready blocks at every batch boundary.
    #[test]
    fn batches_encode_as_the_events_fed_directly() {
        let (want, got) = direct_and_recorded(groups, 3, 4, feed, |rec| {
            assert_eq!(rec.recorded(), 3000 * 4 + 3 + 600 * 4)
        });
        assert!(want.len() > 1000);
        assert_eq!(got, want);
    }
}
