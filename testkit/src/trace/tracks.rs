//! Track descriptors and the events that reference each track: uuids nonzero and unique,
//! parents defined and acyclic, every referenced track defined, counter tracks receiving only
//! counter events (and only counter tracks receiving them), and slice nesting per track.

use std::collections::{BTreeMap, HashMap};

use prost::Message;

use super::proto::{TrackDescriptor, TYPE_SLICE_BEGIN};
use super::slices::{self, Names, SliceEvent};
use super::Errors;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Process,
    Thread,
    Counter,
    Other,
}

pub struct Track {
    pub kind: Kind,
    pub name: String,
    parent: Option<u64>,
    packet: usize,
    encoded: Vec<u8>,
}

/// The events that reference one track uuid.
#[derive(Default)]
struct Use {
    first: usize,
    counters: usize,
    counter_packet: usize,
    others: usize,
    other_packet: usize,
    /// Sum of its integer counter values.
    counter_sum: i128,
    slice_events: Vec<SliceEvent>,
    last_ts: Option<i128>,
    unsorted: bool,
}

pub struct Tracks {
    pub defs: HashMap<u64, Track>,
    /// Set by [`Tracks::finish`]: per counter track name, the sum of its integer values.
    pub totals: BTreeMap<String, i128>,
    uses: BTreeMap<u64, Use>,
    names: Names,
    name_ids: HashMap<(Option<String>, Option<String>), u32>,
}

impl Default for Tracks {
    fn default() -> Self {
        Tracks {
            defs: HashMap::new(),
            totals: BTreeMap::new(),
            uses: BTreeMap::new(),
            names: vec![(None, None)],
            name_ids: HashMap::from([((None, None), 0)]),
        }
    }
}

impl Tracks {
    /// A TrackDescriptor in packet `idx`.
    pub fn define(&mut self, td: &TrackDescriptor, idx: usize, errs: &mut Errors) {
        let uuid = td.uuid.unwrap_or(0);
        if uuid == 0 {
            errs.add(
                "track-uuid",
                idx,
                "TrackDescriptor has no uuid or uuid 0".into(),
            );
            return;
        }
        let encoded = td.encode_to_vec();
        if let Some(prev) = self.defs.get(&uuid) {
            let how = if prev.encoded == encoded {
                "identical re-emission"
            } else {
                "conflicting definition"
            };
            errs.add(
                "track-uuid",
                idx,
                format!(
                    "duplicate TrackDescriptor uuid {uuid} (first defined at packet {}; {how})",
                    prev.packet
                ),
            );
            return;
        }
        let kind = if td.counter.is_some() {
            Kind::Counter
        } else if td.thread.is_some() {
            Kind::Thread
        } else if td.process.is_some() {
            Kind::Process
        } else {
            Kind::Other
        };
        let name = td
            .name
            .clone()
            .or_else(|| td.thread.as_ref().and_then(|t| t.thread_name.clone()))
            .or_else(|| td.process.as_ref().and_then(|p| p.process_name.clone()))
            .unwrap_or_default();
        let parent = td.parent_uuid.filter(|&p| p != 0);
        self.defs.insert(
            uuid,
            Track {
                kind,
                name,
                parent,
                packet: idx,
                encoded,
            },
        );
    }

    fn use_of(&mut self, uuid: u64, idx: usize) -> &mut Use {
        self.uses.entry(uuid).or_insert_with(|| Use {
            first: idx,
            ..Default::default()
        })
    }

    /// A COUNTER event on `uuid` (`value`: its integer value, 0 for a double).
    pub fn counter(&mut self, uuid: u64, idx: usize, value: i64) {
        let u = self.use_of(uuid, idx);
        if u.counters == 0 {
            u.counter_packet = idx;
        }
        u.counters += 1;
        u.counter_sum += value as i128;
    }

    /// Per track name, the sum of the integer counter values of every track of that name
    /// (before [`Tracks::finish`], which takes the events).
    fn counter_totals(&self) -> BTreeMap<String, i128> {
        let mut totals = BTreeMap::new();
        for (uuid, u) in &self.uses {
            if u.counters > 0 {
                let name = self
                    .defs
                    .get(uuid)
                    .map(|t| t.name.clone())
                    .unwrap_or_default();
                *totals.entry(name).or_default() += u.counter_sum;
            }
        }
        totals
    }

    /// An INSTANT (or other non-counter, non-slice) event on `uuid`.
    pub fn other(&mut self, uuid: u64, idx: usize) {
        let u = self.use_of(uuid, idx);
        if u.others == 0 {
            u.other_packet = idx;
        }
        u.others += 1;
    }

    /// A SLICE_BEGIN / SLICE_END on `uuid`; `ts` is None when the event had no timestamp.
    pub fn slice(
        &mut self,
        uuid: u64,
        idx: usize,
        ty: i32,
        ts: Option<i128>,
        name: Option<String>,
        category: Option<String>,
    ) {
        let key = if ty != TYPE_SLICE_BEGIN && name.is_none() && category.is_none() {
            0
        } else {
            let next = self.names.len() as u32;
            let k = (name, category);
            *self.name_ids.entry(k.clone()).or_insert_with(|| {
                self.names.push(k);
                next
            })
        };
        self.other(uuid, idx);
        let u = self.use_of(uuid, idx);
        let Some(ts) = ts else { return };
        if u.last_ts.is_some_and(|l| ts < l) {
            u.unsorted = true;
        }
        u.last_ts = Some(ts);
        u.slice_events.push(SliceEvent {
            ts,
            packet: idx,
            name: key,
            ty,
        });
    }

    fn label(&self, uuid: u64) -> String {
        match self.defs.get(&uuid) {
            Some(t) if !t.name.is_empty() => format!("track {uuid} '{}'", t.name),
            _ => format!("track {uuid}"),
        }
    }

    /// End of trace: parents, references, counter tracks and slices. Returns the number of
    /// completed slices.
    pub fn finish(&mut self, errs: &mut Errors) -> u64 {
        self.totals = self.counter_totals();
        self.check_parents(errs);
        let mut slices = 0;
        let uses = std::mem::take(&mut self.uses);
        for (uuid, u) in uses {
            let label = self.label(uuid);
            let kind = self.defs.get(&uuid).map(|t| t.kind);
            match kind {
                None => errs.add(
                    "track-ref",
                    u.first,
                    format!(
                        "track_uuid {uuid} used by {} event(s) is not defined by any TrackDescriptor",
                        u.counters + u.others
                    ),
                ),
                Some(Kind::Counter) if u.others > 0 => errs.add(
                    "counter-track",
                    u.other_packet,
                    format!("counter {label} receives {} non-counter event(s)", u.others),
                ),
                Some(k) if k != Kind::Counter && u.counters > 0 => errs.add(
                    "counter-track",
                    u.counter_packet,
                    format!(
                        "{label} is not a counter track but receives {} TYPE_COUNTER event(s)",
                        u.counters
                    ),
                ),
                _ => {}
            }
            if kind != Some(Kind::Counter) && !u.slice_events.is_empty() {
                slices += slices::check(&u.slice_events, !u.unsorted, &self.names, &label, errs);
            }
        }
        slices
    }

    fn check_parents(&self, errs: &mut Errors) {
        let mut uuids: Vec<u64> = self.defs.keys().copied().collect();
        uuids.sort_unstable();
        // 1 = on the chain being walked, 2 = known to reach the root.
        let mut state: HashMap<u64, u8> = HashMap::new();
        for &uuid in &uuids {
            let t = &self.defs[&uuid];
            match t.parent {
                Some(p) if p == uuid => errs.add(
                    "track-parent",
                    t.packet,
                    format!("track {uuid} is its own parent"),
                ),
                Some(p) if !self.defs.contains_key(&p) => errs.add(
                    "track-parent",
                    t.packet,
                    format!("track {uuid} has parent_uuid {p} which no TrackDescriptor defines"),
                ),
                _ => {}
            }
        }
        for &uuid in &uuids {
            let mut chain = Vec::new();
            let mut cur = uuid;
            while let Some(t) = self.defs.get(&cur) {
                if state.contains_key(&cur) {
                    break;
                }
                state.insert(cur, 1);
                chain.push(cur);
                match t.parent {
                    Some(p) if p != cur => {
                        if state.get(&p) == Some(&1) {
                            errs.add(
                                "track-parent",
                                self.defs[&p].packet,
                                format!("parent_uuid cycle through track {p}"),
                            );
                            break;
                        }
                        cur = p;
                    }
                    _ => break,
                }
            }
            for c in chain {
                state.insert(c, 2);
            }
        }
    }

    /// Track counts by kind: (process, thread, counter, other).
    pub fn kinds(&self) -> (u64, u64, u64, u64) {
        let mut k = (0, 0, 0, 0);
        for t in self.defs.values() {
            match t.kind {
                Kind::Process => k.0 += 1,
                Kind::Thread => k.1 += 1,
                Kind::Counter => k.2 += 1,
                Kind::Other => k.3 += 1,
            }
        }
        k
    }
}
