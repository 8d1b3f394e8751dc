//! Empty-poll runs ([`EmptyPolls`]): a thread polled a CQ that returned nothing from
//! `first_ts` to `ts`, `count` times — where a rank waits for work. The tracer aggregates them
//! (`interposer/src/record/empty.rs`: one record per run, written when the CQ returns work).
//!
//! Each run is counted (runs, polls, time; the report's "Waits" says whom each process waited
//! for), and drawn at full detail as one slice "empty polls" (arg `polls`) from its first poll
//! to its last on the process's "CQ 0x… empty polls" track — runs of several threads on one CQ that overlap go to further lanes of it
//! (same name and merge key, one track in the UI). The slices go to the process's sequence
//! with absolute times (the kernels'): a run's record comes at its end. Times are drawn as
//! recorded, never moved; a run whose end maps before its start is damaged and only counted.
//!
//! Not drawn at normal detail: MPI progress engines poll without pause, so the runs are as
//! many as the messages, and each slice holds two absolute times that do not compress (the
//! real HPC Challenge trace: 11.85 → 13.36 output bytes per WR event with every run drawn,
//! 12.30 with only the runs of 1 ms or more).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use sigmatrace_schemas::records::EmptyPolls;
use sigmatrace_timeline::{ArgValue, Extra, TraceSink, TrackDef, TrackKind};

use crate::align::topology::Process;
use crate::model::emit::Detail;

/// A process's empty-poll runs: their counts, and the lanes of each CQ's track.
#[derive(Default)]
pub struct PollRuns {
    /// Per CQ: its lanes (track, end of the lane's last run).
    lanes: HashMap<u64, Vec<(u64, i64)>>,
    /// Runs, polls and time (output ns) counted.
    pub runs: u64,
    pub polls: u64,
    pub ns: u64,
    /// Runs whose end maps before their start: not drawn, not counted above.
    pub malformed: u64,
    /// Runs drawn as slices.
    pub drawn: u64,
}

impl PollRuns {
    /// One run of process `p`; drawn on `sink` at full `detail` when its start lies in
    /// `window`. Returns its duration (output ns) unless it is damaged.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        p: &Process,
        sink: &mut dyn TraceSink,
        uuids: &AtomicU64,
        detail: Detail,
        window: Option<(i64, i64)>,
        e: &EmptyPolls,
    ) -> Option<u64> {
        let (start, end) = (p.time(e.first_ts), p.time(e.ts));
        if end < start {
            self.malformed += 1;
            return None;
        }
        // Saturating: a damaged log's times may map anywhere in i64.
        let ns = end.saturating_sub(start) as u64;
        self.runs += 1;
        self.polls = self.polls.saturating_add(e.count);
        self.ns = self.ns.saturating_add(ns);
        if detail < Detail::Full || !window.is_none_or(|(a, b)| start >= a && start < b) {
            return Some(ns);
        }
        let lanes = self.lanes.entry(e.cq).or_default();
        let lane = match lanes.iter().position(|l| l.1 <= start) {
            Some(i) => i,
            None => {
                let u = uuids.fetch_add(1, Ordering::Relaxed);
                let name = format!("CQ {:#x} empty polls", e.cq);
                sink.track(&TrackDef {
                    kind: TrackKind::Slices {
                        merge_key: Some(name.clone()),
                    },
                    ..TrackDef::slices(u, Some(p.track), name)
                });
                lanes.push((u, i64::MIN));
                lanes.len() - 1
            }
        };
        lanes[lane].1 = end;
        let track = lanes[lane].0;
        let name = sink.name("empty polls");
        let args = [(sink.arg_key("polls"), ArgValue::U64(e.count))];
        let extra = Extra {
            args: &args,
            ..Extra::NONE
        };
        sink.begin(start as u64, track, name, &extra);
        sink.end(end as u64, track, &Extra::NONE);
        self.drawn += 1;
        Some(ns)
    }
}
