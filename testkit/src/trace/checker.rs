//! The packet-by-packet pass: sequences and their incremental state (interning, defaults),
//! clocks, track descriptors, track events and flows.

use std::collections::{BTreeSet, HashMap, HashSet};

use prost::Message;

use super::clocks::{ClockIssue, Clocks};
use super::flows::Flows;
use super::proto::{self, TracePacket, TrackEvent};
use super::read::{self, Unreadable};
use super::tracks::Tracks;
use super::{Errors, Stats};

/// Incremental state of one `trusted_packet_sequence_id`.
#[derive(Default)]
struct Sequence {
    /// Seen SEQ_INCREMENTAL_STATE_CLEARED at least once.
    cleared: bool,
    /// Incremental state currently valid (cleared, and no packet dropped since).
    valid: bool,
    event_names: HashMap<u64, String>,
    categories: HashMap<u64, String>,
    annotation_names: HashSet<u64>,
    default_track: Option<u64>,
    default_clock: u32,
}

impl Sequence {
    fn clear(&mut self) {
        *self = Sequence {
            cleared: true,
            valid: true,
            ..Default::default()
        };
    }
}

#[derive(Default)]
pub struct Checker {
    pub errs: Errors,
    pub stats: Stats,
    seqs: HashMap<u32, Sequence>,
    seq_ids: BTreeSet<u32>,
    clocks: Clocks,
    pub tracks: Tracks,
    pub flows: Flows,
}

impl Checker {
    /// Checks every packet of a (decompressed) trace file.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), Unreadable> {
        match data.first() {
            None => return Err(Unreadable::Empty),
            Some(&first) if first != 0x0a => return Err(Unreadable::NotATrace { first }),
            _ => {}
        }
        let mut index = 0;
        for f in read::fields(data) {
            let f = f?;
            let Some(payload) = f.payload.filter(|_| f.number == 1) else {
                self.errs.add(
                    "unknown-field",
                    index,
                    format!(
                        "unknown top-level Trace field {} ({}) at byte offset {}",
                        f.number,
                        read::wire_name(f.wire),
                        f.offset
                    ),
                );
                continue;
            };
            let pkt = TracePacket::decode(payload).map_err(|reason| Unreadable::Packet {
                index,
                offset: f.offset,
                reason,
            })?;
            self.packet(&pkt, payload, index)?;
            index += 1;
        }
        Ok(())
    }

    fn packet(&mut self, pkt: &TracePacket, payload: &[u8], idx: usize) -> Result<(), Unreadable> {
        for what in read::not_understood(payload, pkt) {
            self.errs.add("unknown-field", idx, what);
        }
        if let Some(blob) = &pkt.compressed_packets {
            return self.compressed(blob, idx);
        }
        self.stats.packets += 1;
        let seq_id = pkt.trusted_packet_sequence_id.unwrap_or(0);
        if seq_id != 0 {
            self.seq_ids.insert(seq_id);
        }
        self.sequence_state(pkt, seq_id, idx);
        if let Some(cs) = &pkt.clock_snapshot {
            for issue in self.clocks.snapshot(cs, seq_id, idx) {
                self.clock_issue(issue, idx);
            }
        }
        if let Some(td) = &pkt.track_descriptor {
            self.check_enums(td, idx);
            self.tracks.define(td, idx, &mut self.errs);
        }
        if let Some(te) = &pkt.track_event {
            self.track_event(pkt, te, seq_id, idx);
        }
        Ok(())
    }

    fn compressed(&mut self, blob: &[u8], idx: usize) -> Result<(), Unreadable> {
        if self.errs.inner.is_some() {
            self.errs
                .add("framing", idx, "nested compressed_packets".into());
            return Ok(());
        }
        self.stats.compressed_blocks += 1;
        let data = read::inflate(blob, idx)?;
        for (n, f) in read::fields(&data).enumerate() {
            let f = f?;
            self.errs.inner = Some(n);
            let Some(payload) = f.payload.filter(|_| f.number == 1) else {
                self.errs.add(
                    "unknown-field",
                    idx,
                    format!("unknown field {} inside compressed_packets", f.number),
                );
                continue;
            };
            let inner = TracePacket::decode(payload).map_err(|reason| Unreadable::Packet {
                index: idx,
                offset: f.offset,
                reason,
            })?;
            let r = self.packet(&inner, payload, idx);
            self.errs.inner = None;
            r?;
        }
        self.errs.inner = None;
        Ok(())
    }

    fn sequence_state(&mut self, pkt: &TracePacket, seq_id: u32, idx: usize) {
        let seq = self.seqs.entry(seq_id).or_default();
        if pkt.previous_packet_dropped == Some(true) {
            seq.valid = false;
        }
        let flags = pkt.sequence_flags.unwrap_or(0);
        if flags & proto::SEQ_INCREMENTAL_STATE_CLEARED != 0
            || pkt.incremental_state_cleared == Some(true)
        {
            seq.clear();
        }
        if flags & proto::SEQ_NEEDS_INCREMENTAL_STATE != 0 && !seq.valid {
            self.errs.add(
                "incremental-state",
                idx,
                format!(
                    "packet has SEQ_NEEDS_INCREMENTAL_STATE but sequence {seq_id} has no valid \
                     incremental state (no SEQ_INCREMENTAL_STATE_CLEARED yet, or a packet was \
                     dropped): trace processor discards it"
                ),
            );
        }
        if let Some(d) = &pkt.trace_packet_defaults {
            seq.default_clock = d.timestamp_clock_id.unwrap_or(0);
            seq.default_track = d.track_event_defaults.as_ref().and_then(|t| t.track_uuid);
        }
        if let Some(data) = &pkt.interned_data {
            if !seq.cleared {
                self.errs.add(
                    "interning",
                    idx,
                    format!(
                        "interned_data on sequence {seq_id} before any packet with \
                         SEQ_INCREMENTAL_STATE_CLEARED on that sequence"
                    ),
                );
            }
            for e in &data.event_names {
                let name = e.name.clone().unwrap_or_default();
                seq.event_names.insert(e.iid.unwrap_or(0), name);
            }
            for e in &data.event_categories {
                let name = e.name.clone().unwrap_or_default();
                seq.categories.insert(e.iid.unwrap_or(0), name);
            }
            for e in &data.debug_annotation_names {
                seq.annotation_names.insert(e.iid.unwrap_or(0));
            }
        }
    }

    fn clock_issue(&mut self, issue: ClockIssue, idx: usize) {
        let msg = match issue {
            ClockIssue::Backwards {
                clock,
                ts,
                last,
                at,
            } => format!(
                "ClockSnapshot: clock {clock} goes backwards: {ts} < {last} in the snapshot at packet {at}"
            ),
            ClockIssue::NoPath { clock, trace_clock } => format!(
                "timestamp_clock_id {clock} has no ClockSnapshot path to the trace clock \
                 {trace_clock} (a snapshot relating them must come before the first packet using it)"
            ),
        };
        self.errs.add("clock", idx, msg);
    }

    fn check_enums(&mut self, td: &proto::TrackDescriptor, idx: usize) {
        let checks = [
            (
                "child_ordering",
                td.child_ordering,
                proto::MAX_CHILD_ORDERING,
            ),
            (
                "sibling_merge_behavior",
                td.sibling_merge_behavior,
                proto::MAX_SIBLING_MERGE_BEHAVIOR,
            ),
            (
                "counter.unit",
                td.counter.as_ref().and_then(|c| c.unit),
                proto::MAX_COUNTER_UNIT,
            ),
        ];
        for (field, value, max) in checks {
            if let Some(v) = value.filter(|&v| !(0..=max).contains(&v)) {
                self.errs.add(
                    "unknown-field",
                    idx,
                    format!("TrackDescriptor.{field}: unknown enum value {v}"),
                );
            }
        }
    }

    /// The event's time in trace time (None, with an error, when it has none).
    fn timestamp(&mut self, pkt: &TracePacket, seq_id: u32, idx: usize) -> Option<i128> {
        let Some(ts) = pkt.timestamp else {
            self.errs.add(
                "timestamp",
                idx,
                "TrackEvent packet has no timestamp".into(),
            );
            return None;
        };
        if ts > i64::MAX as u64 {
            self.errs.add(
                "timestamp",
                idx,
                format!("negative timestamp {} (as int64)", ts as i64),
            );
            return Some(ts as i64 as i128);
        }
        let default = self.seqs.get(&seq_id).map_or(0, |s| s.default_clock);
        let clock = pkt.timestamp_clock_id.unwrap_or(default);
        let (t, issue) = self.clocks.trace_time(clock, ts, seq_id);
        if let Some(i) = issue {
            self.clock_issue(i, idx);
        }
        if t < 0 {
            self.errs.add(
                "timestamp",
                idx,
                format!("timestamp converts to negative trace time {t}"),
            );
        }
        Some(t)
    }

    fn track_event(&mut self, pkt: &TracePacket, te: &TrackEvent, seq_id: u32, idx: usize) {
        self.stats.track_events += 1;
        let ts = self.timestamp(pkt, seq_id, idx);
        if let Some(t) = ts {
            let t = t.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
            self.stats.min_timestamp = Some(self.stats.min_timestamp.map_or(t, |m| m.min(t)));
            self.stats.max_timestamp = Some(self.stats.max_timestamp.map_or(t, |m| m.max(t)));
        }
        let track = te
            .track_uuid
            .or_else(|| self.seqs.get(&seq_id).and_then(|s| s.default_track))
            .filter(|&u| u != 0);
        if track.is_none() {
            self.errs.add(
                "track-ref",
                idx,
                "TrackEvent has no track_uuid (and its sequence has no trace_packet_defaults track_uuid)"
                    .into(),
            );
        }
        let (name, category) = self.interned_refs(te, seq_id, idx);
        let ty = te.r#type.unwrap_or(0);
        match ty {
            proto::TYPE_SLICE_BEGIN | proto::TYPE_SLICE_END => {
                if let Some(u) = track {
                    self.tracks.slice(u, idx, ty, ts, name, category);
                }
            }
            proto::TYPE_INSTANT => {
                self.stats.instants += 1;
                if let Some(u) = track {
                    self.tracks.other(u, idx);
                }
            }
            proto::TYPE_COUNTER => {
                self.stats.counter_events += 1;
                if let Some(u) = track {
                    self.tracks.counter(u, idx, te.counter_value.unwrap_or(0));
                }
                if te.counter_value.is_none() && te.double_counter_value.is_none() {
                    self.errs.add(
                        "track-event",
                        idx,
                        "TYPE_COUNTER event without counter_value or double_counter_value".into(),
                    );
                }
            }
            other => self.errs.add(
                "track-event",
                idx,
                format!(
                    "TrackEvent type {other} is not SLICE_BEGIN, SLICE_END, INSTANT or COUNTER"
                ),
            ),
        }
        // Extra counter values: samples of other counter tracks at this event's time, each
        // counted as a counter event of its track.
        let (uuids, values) = (&te.extra_counter_track_uuids, &te.extra_counter_values);
        if uuids.len() != values.len() {
            self.errs.add(
                "track-event",
                idx,
                format!(
                    "{} extra counter values for {} extra counter track uuids",
                    values.len(),
                    uuids.len()
                ),
            );
        }
        for (&u, &v) in uuids.iter().zip(values) {
            self.stats.counter_events += 1;
            self.tracks.counter(u, idx, v);
        }
        if !te.flow_ids.is_empty() || !te.terminating_flow_ids.is_empty() {
            let t = ts.unwrap_or(0);
            self.flows
                .event(&te.flow_ids, &te.terminating_flow_ids, idx, t);
        }
    }

    /// Resolves the event's name and category (interned or inline) and checks that every iid
    /// it uses was defined earlier on its sequence.
    fn interned_refs(
        &mut self,
        te: &TrackEvent,
        seq_id: u32,
        idx: usize,
    ) -> (Option<String>, Option<String>) {
        let seq = self.seqs.entry(seq_id).or_default();
        let mut missing = Vec::new();
        let name = match te.name_iid {
            Some(iid) => {
                let n = seq.event_names.get(&iid).cloned();
                if n.is_none() {
                    missing.push(("name_iid", "event_names", iid));
                }
                n
            }
            None => te.name.clone(),
        };
        let mut cats = Vec::new();
        for &iid in &te.category_iids {
            match seq.categories.get(&iid) {
                Some(c) => cats.push(c.clone()),
                None => {
                    missing.push(("category_iid", "event_categories", iid));
                    cats.push("?".into());
                }
            }
        }
        if te.category_iids.is_empty() {
            cats.clone_from(&te.categories);
        }
        for da in &te.debug_annotations {
            if let Some(iid) = da.name_iid {
                if !seq.annotation_names.contains(&iid) {
                    missing.push(("debug annotation name_iid", "debug_annotation_names", iid));
                }
            }
        }
        for (what, table, iid) in missing {
            self.errs.add(
                "interning",
                idx,
                format!(
                    "{what} {iid} is not defined in interned_data.{table} earlier on sequence {seq_id}"
                ),
            );
        }
        let category = (!cats.is_empty()).then(|| cats.join(","));
        (name, category)
    }

    /// End of trace: flows, tracks, slices; fills the stats.
    pub fn finish(&mut self) {
        for s in self.flows.finish() {
            let msg = if s.terminated {
                format!(
                    "flow id {} is terminated here but appears on no other event (a flow needs at least 2)",
                    s.id
                )
            } else {
                format!(
                    "flow id {} is single-ended: only 1 event carries it (a flow needs at least 2; \
                     an id starts a new flow after terminating_flow_ids)",
                    s.id
                )
            };
            self.errs.add("flow", s.packet, msg);
        }
        self.stats.slices = self.tracks.finish(&mut self.errs);
        let (p, t, c, o) = self.tracks.kinds();
        self.stats.tracks = p + t + c + o;
        self.stats.process_tracks = p;
        self.stats.thread_tracks = t;
        self.stats.counter_tracks = c;
        self.stats.other_tracks = o;
        self.stats.flows = self.flows.count;
        self.stats.backward_flows = self.flows.backward;
        self.stats.sequences = self.seq_ids.len() as u64;
    }
}
