//! Flows: ids are global to the trace. The earliest event (in file order) carrying an id
//! starts the flow; a `terminating_flow_ids` entry ends it (the id may then start a new flow).
//! Every flow needs at least two events. A flow whose terminating event is earlier in time
//! than its first event is drawn backwards (an effect before its cause): not a format error,
//! counted as `backward_flows`.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub struct Flows {
    /// Open flow id → packet of its only event so far (`None` once it has two or more).
    open: BTreeMap<u64, Option<usize>>,
    /// Open or orphaned flow id → timestamp of its first event in the file.
    start: BTreeMap<u64, i128>,
    /// Flow id terminated with no earlier event in the file → that packet.
    orphans: BTreeMap<u64, usize>,
    pub count: u64,
    pub backward: u64,
    /// Every flow with a start and a terminating event: (id, start time, end time), in the
    /// order they were closed.
    pub spans: Vec<(u64, i128, i128)>,
}

/// A flow with a single event (a flow needs a start and an end).
pub struct SingleEnded {
    pub id: u64,
    pub packet: usize,
    pub terminated: bool,
}

impl Flows {
    /// One event's flow fields (packet `idx`, trace time `ts`).
    pub fn event(&mut self, flow_ids: &[u64], terminating: &[u64], idx: usize, ts: i128) {
        let term: BTreeSet<u64> = terminating.iter().copied().collect();
        let ids: BTreeSet<u64> = flow_ids
            .iter()
            .copied()
            .filter(|f| !term.contains(f))
            .collect();
        for fid in ids {
            if self.orphans.remove(&fid).is_some() {
                // Its terminating event came earlier in the file.
                self.count += 1;
                let end = self.start.remove(&fid).unwrap_or(ts);
                if end < ts {
                    self.backward += 1;
                }
                self.spans.push((fid, ts, end));
                continue;
            }
            match self.open.get_mut(&fid) {
                Some(first) => *first = None,
                None => {
                    self.open.insert(fid, Some(idx));
                    self.start.insert(fid, ts);
                }
            }
        }
        for fid in term {
            if self.open.remove(&fid).is_some() {
                self.count += 1;
                let start = self.start.remove(&fid).unwrap_or(ts);
                if ts < start {
                    self.backward += 1;
                }
                self.spans.push((fid, start, ts));
            } else if self.orphans.remove(&fid).is_some() {
                self.count += 1;
                self.start.remove(&fid);
            } else {
                self.orphans.insert(fid, idx);
                self.start.insert(fid, ts);
            }
        }
    }

    /// Closes the books: counts the flows still open, returns those with a single event.
    pub fn finish(&mut self) -> Vec<SingleEnded> {
        let mut bad = Vec::new();
        for (id, first) in std::mem::take(&mut self.open) {
            self.count += 1;
            if let Some(packet) = first {
                bad.push(SingleEnded {
                    id,
                    packet,
                    terminated: false,
                });
            }
        }
        for (id, packet) in std::mem::take(&mut self.orphans) {
            self.count += 1;
            bad.push(SingleEnded {
                id,
                packet,
                terminated: true,
            });
        }
        self.start.clear();
        bad
    }
}
