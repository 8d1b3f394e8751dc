//! Timestamps to trace time, as trace processor does it: the trace clock is BOOTTIME unless a
//! ClockSnapshot names another `primary_trace_clock` before the first conversion; a packet's
//! clock is its `timestamp_clock_id`, else its sequence's `trace_packet_defaults`, else
//! BOOTTIME. Ids 64–127 are scoped to their sequence. An incremental clock
//! (`is_incremental` in a snapshot) makes each timestamp a delta to the previous one. A clock
//! converts through the latest snapshot at or before the value (the first one for earlier
//! values) with a constant offset — no drift interpolation.

use std::collections::{HashMap, HashSet};

use super::proto::{ClockSnapshot, CLOCK_BOOTTIME};

/// A clock, with the sequence it belongs to for sequence-scoped ids (64–127).
pub type ClockKey = (u32, u32);

pub fn key(clock_id: u32, seq: u32) -> ClockKey {
    if (64..=127).contains(&clock_id) {
        (seq, clock_id)
    } else {
        (0, clock_id)
    }
}

#[derive(Default)]
pub struct Clocks {
    trace_clock: Option<u32>,
    fixed: bool,
    /// Per clock: (value in that clock's ns, the same instant in trace time), sorted by value.
    anchors: HashMap<ClockKey, Vec<(i128, i128)>>,
    last: HashMap<ClockKey, (u64, usize)>,
    mult: HashMap<ClockKey, u64>,
    incremental: HashMap<ClockKey, u64>,
    failed: HashSet<ClockKey>,
}

/// A problem found while converting or recording clocks.
pub enum ClockIssue {
    Backwards {
        clock: u32,
        ts: u64,
        last: u64,
        at: usize,
    },
    NoPath {
        clock: u32,
        trace_clock: u32,
    },
}

impl Clocks {
    fn trace_key(&self) -> ClockKey {
        (0, self.trace_clock.unwrap_or(CLOCK_BOOTTIME))
    }

    /// Records a snapshot seen in packet `idx` on sequence `seq`.
    pub fn snapshot(&mut self, cs: &ClockSnapshot, seq: u32, idx: usize) -> Vec<ClockIssue> {
        let mut issues = Vec::new();
        if let Some(p) = cs.primary_trace_clock {
            if !self.fixed {
                self.trace_clock = Some(p as u32);
            }
        }
        let mut entries = Vec::new();
        for c in &cs.clocks {
            let id = c.clock_id.unwrap_or(0);
            let k = key(id, seq);
            let ts = c.timestamp.unwrap_or(0);
            if let Some(&(last, at)) = self.last.get(&k) {
                if ts < last {
                    issues.push(ClockIssue::Backwards {
                        clock: id,
                        ts,
                        last,
                        at,
                    });
                }
            }
            self.last.insert(k, (ts, idx));
            let m = c.unit_multiplier_ns.unwrap_or(1).max(1);
            if m != 1 {
                self.mult.insert(k, m);
            }
            if c.is_incremental == Some(true) {
                self.incremental.insert(k, ts);
            }
            entries.push((k, ts as i128 * m as i128));
        }
        let tk = self.trace_key();
        // The instant of this snapshot in trace time: directly, or through a clock that
        // already converts.
        let anchor = entries
            .iter()
            .find(|(k, _)| *k == tk)
            .map(|&(_, v)| v)
            .or_else(|| entries.iter().find_map(|&(k, v)| self.lookup(k, v)));
        if let Some(t) = anchor {
            for (k, v) in entries {
                if k != tk {
                    let list = self.anchors.entry(k).or_default();
                    let at = list.partition_point(|&(x, _)| x <= v);
                    list.insert(at, (v, t));
                }
            }
        }
        issues
    }

    fn lookup(&self, k: ClockKey, v: i128) -> Option<i128> {
        let list = self.anchors.get(&k)?;
        let i = list.partition_point(|&(x, _)| x <= v).saturating_sub(1);
        list.get(i).map(|&(x, t)| t + (v - x))
    }

    /// `ts` of a packet on `seq` in clock `clock_id` (0 = default), in trace time.
    pub fn trace_time(&mut self, clock_id: u32, ts: u64, seq: u32) -> (i128, Option<ClockIssue>) {
        let clock = if clock_id == 0 {
            CLOCK_BOOTTIME
        } else {
            clock_id
        };
        let k = key(clock, seq);
        self.fixed = true;
        let mut v = ts as i128;
        if let Some(base) = self.incremental.get_mut(&k) {
            *base = base.wrapping_add(ts);
            v = *base as i128;
        }
        v *= *self.mult.get(&k).unwrap_or(&1) as i128;
        let tk = self.trace_key();
        if k == tk {
            return (v, None);
        }
        match self.lookup(k, v) {
            Some(t) => (t, None),
            None if self.failed.insert(k) => (
                v,
                Some(ClockIssue::NoPath {
                    clock,
                    trace_clock: tk.1,
                }),
            ),
            None => (v, None),
        }
    }
}
