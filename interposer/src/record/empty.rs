//! Aggregation of empty polls: never one record per empty poll.
//!
//! Each thread keeps a few open runs (one per CQ it polls). A run is closed and written as one
//! `EmptyPolls` record when its CQ returns work, when it spans a whole snapshot period, when
//! it is evicted by a fifth CQ, or when the thread writes a clock snapshot.

use bytemuck::{Pod, Zeroable};
use sigmatrace_schemas::{EmptyPolls, RecordHeader};

/// Open runs per thread.
pub const RUNS: usize = 4;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Run {
    cq: u64,
    first: u64,
    last: u64,
    count: u64,
}

impl Run {
    const EMPTY: Run = Run {
        cq: 0,
        first: 0,
        last: 0,
        count: 0,
    };

    fn record(&self) -> EmptyPolls {
        EmptyPolls {
            hdr: RecordHeader::of::<EmptyPolls>(0),
            ts: self.last,
            first_ts: self.first,
            cq: self.cq,
            count: self.count,
        }
    }
}

/// A thread's open runs (plain data: kept in the sink's per-thread scratch area).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Runs {
    runs: [Run; RUNS],
    /// Round-robin eviction cursor.
    next: u8,
    /// Runs open (lets a poll that returned work skip the search when there are none).
    open: u8,
    _pad: [u8; 6],
}

impl Default for Runs {
    fn default() -> Self {
        Self::new()
    }
}

impl Runs {
    pub const fn new() -> Self {
        Runs {
            runs: [Run::EMPTY; RUNS],
            next: 0,
            open: 0,
            _pad: [0; 6],
        }
    }

    /// Runs open.
    pub fn open(&self) -> usize {
        self.open as usize
    }

    /// An empty poll of `cq` at `ts`. Returns a closed run to write, if one had to be closed
    /// (the run of `cq` reached `max_span`, or another CQ's run was evicted).
    #[inline]
    pub fn empty(&mut self, cq: u64, ts: u64, max_span: u64) -> Option<EmptyPolls> {
        if let Some(r) = self.runs.iter_mut().find(|r| r.count != 0 && r.cq == cq) {
            if ts.wrapping_sub(r.first) >= max_span {
                let out = r.record();
                *r = Run {
                    cq,
                    first: ts,
                    last: ts,
                    count: 1,
                };
                return Some(out);
            }
            r.last = ts;
            r.count += 1;
            return None;
        }
        let fresh = Run {
            cq,
            first: ts,
            last: ts,
            count: 1,
        };
        if let Some(r) = self.runs.iter_mut().find(|r| r.count == 0) {
            *r = fresh;
            self.open += 1;
            return None;
        }
        let i = self.next as usize % RUNS;
        self.next = self.next.wrapping_add(1);
        let out = self.runs[i].record();
        self.runs[i] = fresh;
        Some(out)
    }

    /// Whether any run is open (a poll that returned work may have one to close).
    #[inline(always)]
    pub fn any_open(&self) -> bool {
        self.open != 0
    }

    /// `cq` returned work: closes its run, if any.
    #[inline]
    pub fn work(&mut self, cq: u64) -> Option<EmptyPolls> {
        if self.open == 0 {
            return None;
        }
        self.work_slow(cq)
    }

    #[inline(never)]
    fn work_slow(&mut self, cq: u64) -> Option<EmptyPolls> {
        let r = self.runs.iter_mut().find(|r| r.count != 0 && r.cq == cq)?;
        let out = r.record();
        *r = Run::EMPTY;
        self.open -= 1;
        Some(out)
    }

    /// The [`bucket`]s of the CQs with an open run: a completion of a CQ outside them has no
    /// run to close first.
    pub fn open_buckets(&self) -> u8 {
        self.runs
            .iter()
            .filter(|r| r.count != 0)
            .fold(0, |m, r| m | bucket(r.cq))
    }

    /// Closes every run.
    pub fn drain(&mut self) -> impl Iterator<Item = EmptyPolls> + '_ {
        self.open = 0;
        self.runs.iter_mut().filter(|r| r.count != 0).map(|r| {
            let out = r.record();
            *r = Run::EMPTY;
            out
        })
    }
}

/// `cq`'s bit among 8 buckets of CQ handles ([`Runs::open_buckets`]).
#[inline(always)]
pub fn bucket(cq: u64) -> u8 {
    1 << ((cq >> 6) & 7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_buckets_are_the_buckets_of_the_open_runs() {
        let mut r = Runs::new();
        let (a, b) = (0x1000, 0x1040); // buckets 0 and 1
        assert_eq!(r.open_buckets(), 0);
        r.empty(a, 1, 1000);
        r.empty(b, 2, 1000);
        assert_eq!(r.open_buckets(), bucket(a) | bucket(b));
        assert_ne!(bucket(a), bucket(b));
        r.work(a);
        assert_eq!(r.open_buckets(), bucket(b));
        r.drain().for_each(drop);
        assert_eq!(r.open_buckets(), 0);
    }

    #[test]
    fn a_run_closes_when_its_cq_returns_work() {
        let mut r = Runs::new();
        for ts in 10..15 {
            assert_eq!(r.empty(7, ts, 1000), None);
        }
        let rec = r.work(7).expect("run closed");
        assert_eq!((rec.cq, rec.first_ts, rec.ts, rec.count), (7, 10, 14, 5));
        assert_eq!(r.work(7), None, "nothing left open");
    }

    #[test]
    fn runs_of_different_cqs_are_independent() {
        let mut r = Runs::new();
        for ts in 0..6 {
            assert_eq!(r.empty(1 + ts % 2, ts, 1000), None);
        }
        assert_eq!(r.work(1).map(|e| e.count), Some(3));
        assert_eq!(r.work(2).map(|e| e.count), Some(3));
    }

    #[test]
    fn long_runs_are_split_at_max_span() {
        let mut r = Runs::new();
        assert_eq!(r.empty(3, 0, 100), None);
        assert_eq!(r.empty(3, 50, 100), None);
        let out = r.empty(3, 100, 100).expect("span reached");
        assert_eq!((out.first_ts, out.ts, out.count), (0, 50, 2));
        assert_eq!(r.work(3).map(|e| (e.first_ts, e.count)), Some((100, 1)));
    }

    #[test]
    fn a_fifth_cq_evicts_a_run_and_nothing_is_lost() {
        let mut r = Runs::new();
        for cq in 1..=4 {
            assert_eq!(r.empty(cq, cq, 1000), None);
        }
        let evicted = r.empty(5, 9, 1000).expect("evicted");
        let mut total = evicted.count;
        total += r.drain().map(|e| e.count).sum::<u64>();
        assert_eq!(total, 5);
        assert_eq!(r.drain().count(), 0);
    }
}
