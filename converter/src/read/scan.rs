//! Pass 1 (metadata scan): every chunk of every log is scanned in parallel (rayon) for the few
//! records that describe the run — clock snapshots, devices, QPs and their connection data,
//! names — and for per-QP message counts. The result is small (proportional to the number of
//! objects, not to the trace length).

use rayon::prelude::*;
use sigmatrace_schemas::records::{
    ClockSnapshot, DeviceOpen, GpuClockPair, QpCreate, QpModify, Record,
};

use std::sync::Arc;

use crate::read::chunk::Next;
use crate::read::hot::{is_message, message_of};
use crate::read::messages::{Spill, SpillWriter};
use sigmatrace_schemas::reader::RawRecord;
use sigmatrace_schemas::records::RecordKind;

const POST_SEND: u16 = RecordKind::PostSend as u16;
const POST_RECV: u16 = RecordKind::PostRecv as u16;
use crate::read::input::{chunk_end, record_ts, ChunkRecords, LogInput, RecordIssue};
use crate::read::verbs;

/// Per-QP counts needed before the emit pass (flow pairing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounts {
    /// Posted send WRs whose message consumes a receive on the peer.
    pub consuming_sends: u64,
    /// Successful receive completions (RECV / RECV_RDMA_WITH_IMM).
    pub recv_ok: u64,
    pub posts: u64,
    pub completions: u64,
}

/// What pass 1 found in one log.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    pub snapshots: Vec<ClockSnapshot>,
    pub gpu_pairs: Vec<GpuClockPair>,
    pub devices: Vec<DeviceOpen>,
    pub qp_creates: Vec<QpCreate>,
    pub qp_modifies: Vec<QpModify>,
    /// StringDef records: (namespace, key, text).
    pub strings: Vec<(u32, u64, String)>,
    pub thread_names: Vec<(u64, String)>,
    pub min_ts: u64,
    pub max_ts: u64,
    pub records: u64,
    /// PostSend, PostRecv, WorkCompletion, WqeObserved and CqeObserved records.
    pub wr_events: u64,
    pub per_qp: crate::fastmap::FastMap<u32, QpCounts>,
    /// Events the writer reported as dropped: the header's counter (size cap, write errors)
    /// plus the counts of `Dropped` records (refused re-entries, overruns).
    pub dropped: u64,
    /// The header's loss table: (record kind id, events dropped), for logs of format ≥ 1.1.
    pub dropped_by_kind: Vec<(u16, u64)>,
    /// When the first event was dropped (log timestamp), for logs of format ≥ 1.1.
    pub first_loss_ts: Option<u64>,
    /// Queue entries overwritten before the observer saw them.
    pub overrun: u64,
    /// Records of kinds this reader does not know (newer minor version); skipped.
    pub unknown_records: u64,
    pub issues: Vec<RecordIssue>,
}

impl Scan {
    fn empty() -> Self {
        Scan {
            min_ts: u64::MAX,
            ..Default::default()
        }
    }

    fn merge(mut self, o: Scan) -> Scan {
        self.snapshots.extend(o.snapshots);
        self.gpu_pairs.extend(o.gpu_pairs);
        self.devices.extend(o.devices);
        self.qp_creates.extend(o.qp_creates);
        self.qp_modifies.extend(o.qp_modifies);
        self.strings.extend(o.strings);
        self.thread_names.extend(o.thread_names);
        self.min_ts = self.min_ts.min(o.min_ts);
        self.max_ts = self.max_ts.max(o.max_ts);
        self.records += o.records;
        self.wr_events += o.wr_events;
        for (k, v) in o.per_qp {
            let e = self.per_qp.entry(k).or_default();
            e.consuming_sends += v.consuming_sends;
            e.recv_ok += v.recv_ok;
            e.posts += v.posts;
            e.completions += v.completions;
        }
        self.dropped += o.dropped;
        self.overrun += o.overrun;
        self.unknown_records += o.unknown_records;
        self.issues.extend(o.issues);
        self
    }

    /// Sorts the collected metadata by time (chunks were scanned in any order).
    fn finish(mut self, losses: sigmatrace_schemas::Losses) -> Scan {
        self.snapshots.sort_by_key(|s| s.ts);
        self.gpu_pairs.sort_by_key(|p| (p.hdr.aux, p.ts));
        self.qp_creates.sort_by_key(|q| q.ts);
        self.qp_modifies.sort_by_key(|q| q.ts);
        self.issues.sort_by_key(|i| i.offset);
        // Count-0 `Dropped` records are loss markers: their events are in the header's counter.
        self.dropped += losses.total;
        self.dropped_by_kind = losses.by_kind;
        self.first_loss_ts = losses.first_ts;
        if self.min_ts == u64::MAX {
            self.min_ts = 0;
        }
        self
    }
}

/// The timestamps of one chunk's records, in log order: whether they never decrease, and the
/// first and the last (`None`: no record carries one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkOrder {
    pub in_order: bool,
    pub first_last: Option<(u64, u64)>,
}

impl ChunkOrder {
    /// Whether a thread whose chunks have these orders (in its chunk order) has all its
    /// records in timestamp order: each chunk's are, and no chunk starts before the one
    /// before it (with a timestamp) ends.
    pub fn thread_in_order(chunks: impl IntoIterator<Item = ChunkOrder>) -> bool {
        let mut last = 0u64;
        for c in chunks {
            if !c.in_order {
                return false;
            }
            if let Some((first, end)) = c.first_last {
                if first < last {
                    return false;
                }
                last = end;
            }
        }
        true
    }
}

/// Per-QP counters of one chunk: a few QPs are hot, so a small direct-mapped cache in
/// front of the map avoids hashing every record.
struct QpTally {
    /// The QP counted last (`u64::MAX`: none) and its slot: a run of one QP's records (the
    /// common case) counts without hashing.
    last: (u64, usize),
    cache: [(u32, u32); 64],
    slots: Vec<(u32, QpCounts)>,
    index: crate::fastmap::FastMap<u32, u32>,
}

impl Default for QpTally {
    fn default() -> Self {
        QpTally {
            last: (u64::MAX, 0),
            cache: [(0, 0); 64],
            slots: Vec::new(),
            index: Default::default(),
        }
    }
}

impl QpTally {
    /// The counters of `qpn`: a cache hit inline (no call, no registers saved), a miss in
    /// [`QpTally::look_up`].
    #[inline(always)]
    fn get(&mut self, qpn: u32) -> &mut QpCounts {
        if self.last.0 == qpn as u64 {
            return &mut self.slots[self.last.1].1;
        }
        let c = (qpn.wrapping_mul(0x9e37_79b1) >> 26) as usize;
        let (k, i) = self.cache[c];
        // Slot indices are stored + 1 so that the zeroed cache never matches.
        let i = if k == qpn && i != 0 {
            i as usize - 1
        } else {
            self.look_up(qpn, c)
        };
        self.last = (qpn as u64, i);
        &mut self.slots[i].1
    }

    /// The slot of a QP not in cache slot `c`: from the map (added when new), cached.
    #[inline(never)]
    fn look_up(&mut self, qpn: u32, c: usize) -> usize {
        let n = self.slots.len() as u32;
        let i = *self.index.entry(qpn).or_insert(n);
        if i == n {
            self.slots.push((qpn, QpCounts::default()));
        }
        self.cache[c] = (qpn, i + 1);
        i as usize
    }
}

/// The timestamps of a chunk's records as its scan goes: the least and the greatest, and
/// whether one was below one before it. A record costs a compare with the one before it;
/// the least and the greatest are found where the times go back (rare): the least is the
/// first or one below the one before it, the greatest the last or one above the one after it.
#[derive(Clone, Copy, Debug)]
struct Times {
    /// The last timestamp; `u64::MAX` before the first.
    prev: u64,
    /// The least timestamp of those where the times went back, and the first.
    lo: u64,
    /// The greatest timestamp before the times went back.
    hi: u64,
    /// A timestamp was below one before it.
    inversions: bool,
}

impl Times {
    fn new() -> Times {
        Times {
            prev: u64::MAX,
            lo: u64::MAX,
            hi: 0,
            inversions: false,
        }
    }

    /// The next timestamp, `seen` timestamps after the first (the caller counts them anyway;
    /// read only when the times go back).
    #[inline(always)]
    fn add(&mut self, ts: u64, seen: impl FnOnce() -> u64) {
        if ts < self.prev {
            self.back(ts, seen());
        }
        self.prev = ts;
    }

    /// `ts` is below the last timestamp, or the first one (below the initial `prev`), `seen`
    /// timestamps before it.
    #[cold]
    #[inline(never)]
    fn back(&mut self, ts: u64, seen: u64) {
        // Before the first timestamp `prev` is u64::MAX: a first timestamp of u64::MAX does not
        // come here, and the one after it that does (below it) is no first.
        if seen > 0 {
            self.inversions = true;
            self.hi = self.hi.max(self.prev);
        }
        self.lo = self.lo.min(ts);
    }

    /// The least and the greatest of the `seen` timestamps (`(u64::MAX, 0)` without any), and
    /// whether one was below one before it.
    fn finish(&self, seen: u64) -> (u64, u64, bool) {
        if seen == 0 {
            return (u64::MAX, 0, false);
        }
        (self.lo, self.hi.max(self.prev), self.inversions)
    }
}

/// A chunk's record counts, times and messages as its scan goes.
struct ChunkCounts<'s> {
    /// Their order: when they never go back, the first and last are the least and greatest.
    times: Times,
    hot: u64,
    other: u64,
    /// Other records with a timestamp.
    other_timed: u64,
    /// Observed WQEs and CQEs.
    observed: u64,
    /// The chunk's messages, for the causality join.
    messages: SpillWriter<'s>,
}

impl ChunkCounts<'_> {
    /// The next record's timestamp (before it is counted).
    #[inline(always)]
    fn time(&mut self, ts: u64) {
        let seen = self.hot + self.other_timed;
        self.times.add(ts, || seen);
    }
}

/// What a record that is not hot adds to a chunk's scan; 1 for an observed WQE or CQE (a WR
/// event), else 0.
#[inline(never)]
fn other(s: &mut Scan, rec: Record<'_>) -> u64 {
    match rec {
        Record::WqeObserved(_) | Record::CqeObserved(_) => return 1,
        Record::ClockSnapshot(c) => s.snapshots.push(*c),
        Record::GpuClockPair(p) => s.gpu_pairs.push(*p),
        Record::DeviceOpen(d) => s.devices.push(*d),
        Record::QpCreate(q) => s.qp_creates.push(*q),
        Record::QpModify(q) if q.result == 0 => s.qp_modifies.push(*q),
        Record::StringDef(m) => s.strings.push((m.aux, m.key, m.text().into_owned())),
        Record::ThreadName(m) => s.thread_names.push((m.key, m.text().into_owned())),
        Record::Dropped(d) => s.dropped += d.count,
        Record::ObserveOverrun(o) => s.overrun += o.lost,
        Record::Unknown { .. } => s.unknown_records += 1,
        _ => {}
    }
    0
}

/// A chunk's scan: what it found, its timestamps' order, and where its messages went in
/// `spill` (`None`: not spilled).
type ChunkScan = (Scan, ChunkOrder, Option<Vec<crate::read::messages::Piece>>);

fn scan_chunk(
    input: &LogInput,
    chunk: &sigmatrace_schemas::reader::ChunkInfo,
    spill: Option<&Spill>,
) -> ChunkScan {
    let mut s = Scan::empty();
    let mut tally = QpTally::default();
    let mut recs = ChunkRecords::new(&input.file, chunk, &mut s.issues);
    // Times (least, greatest, whether one went back) and hot and other records.
    let mut c = ChunkCounts {
        times: Times::new(),
        hot: 0,
        other: 0,
        other_timed: 0,
        observed: 0,
        messages: SpillWriter::new(spill),
    };
    let mut broken = None;
    let mut issues = std::mem::take(&mut s.issues);
    // Hot records are counted at a glance; the others are read whole.
    recs.glance_each(
        &mut issues,
        &mut c,
        |c, g| {
            c.time(g.ts);
            c.hot += 1;
            let message = match g.kind {
                POST_SEND => {
                    let q = tally.get(g.qpn);
                    let consuming = verbs::consumes_recv(g.opcode);
                    q.posts += 1;
                    q.consuming_sends += consuming as u64;
                    consuming
                }
                POST_RECV => {
                    if g.qpn != 0 {
                        tally.get(g.qpn).posts += 1;
                    }
                    false
                }
                _ => {
                    let q = tally.get(g.qpn);
                    let received = is_message(&g);
                    q.completions += 1;
                    q.recv_ok += received as u64;
                    received
                }
            };
            if message {
                Next::Whole
            } else {
                Next::Go
            }
        },
        |c, r, g| {
            if let Some(m) = message_of(r, g.ts) {
                c.messages.push(m);
            }
        },
        |c, (offset, kind, bytes)| {
            if let Some(ts) = record_ts(bytes) {
                c.time(ts);
                c.other_timed += 1;
            }
            c.other += 1;
            match RawRecord::new(offset, kind, bytes).decode() {
                Ok(rec) => {
                    c.observed += other(&mut s, rec);
                    true
                }
                Err(e) => {
                    broken = Some(RecordIssue::skipping(offset, chunk_end(chunk), e));
                    false
                }
            }
        },
    );
    let (min_ts, max_ts, mut inversions) = c.times.finish(c.hot + c.other_timed);
    if let Some(issue) = broken {
        issues.push(issue);
        // The records after it are not scanned (but read by the cursors).
        inversions = true;
    }
    s.issues = issues;
    let records = c.hot + c.other;
    let wr_events = c.hot + c.observed;
    s.min_ts = min_ts;
    s.max_ts = max_ts;
    s.records = records;
    s.wr_events = wr_events;
    s.per_qp = tally.slots.into_iter().collect();
    let order = ChunkOrder {
        in_order: !inversions,
        first_last: (min_ts <= max_ts).then_some((min_ts, max_ts)),
    };
    (s, order, c.messages.finish())
}

/// Scans all logs in parallel (files × chunks), and tells each log which of its threads
/// have their records in timestamp order ([`LogInput::set_in_order`]) and where their
/// messages are ([`LogInput::set_spilled`]: when they could all be spilled).
pub fn scan_all(inputs: &[LogInput]) -> Vec<Scan> {
    scan_spilling(inputs, Spill::create())
}

/// [`scan_all`], the messages spilled to `spill` (none without).
pub fn scan_spilling(inputs: &[LogInput], spill: Option<Spill>) -> Vec<Scan> {
    let spill = spill.map(Arc::new);
    let jobs: Vec<(usize, usize)> = inputs
        .iter()
        .enumerate()
        .flat_map(|(i, inp)| {
            inp.threads
                .iter()
                .enumerate()
                .flat_map(move |(t, (_, cs))| (0..cs.len()).map(move |c| (i, t << 32 | c)))
        })
        .collect();
    let parts: Vec<ChunkScan> = jobs
        .par_iter()
        .map(|&(i, tc)| {
            let inp = &inputs[i];
            let chunk = &inp.threads[tc >> 32].1[tc & 0xffff_ffff];
            let s = scan_chunk(inp, chunk, spill.as_deref());
            crate::read::input::release_chunk(inp, chunk);
            s
        })
        .collect();
    // Per log, per thread: its chunks' orders and message pieces (jobs list them by log,
    // thread, chunk).
    let mut orders: Vec<Vec<Vec<ChunkOrder>>> = per_thread(inputs);
    let mut pieces: Vec<Vec<Vec<crate::read::messages::Piece>>> = per_thread(inputs);
    let mut spilled = spill.is_some();
    let mut out: Vec<Scan> = (0..inputs.len()).map(|_| Scan::empty()).collect();
    for (&(i, tc), (s, order, chunk_pieces)) in jobs.iter().zip(parts) {
        orders[i][tc >> 32].push(order);
        match chunk_pieces {
            Some(p) => pieces[i][tc >> 32].extend(p),
            None => spilled = false,
        }
        let cur = std::mem::take(&mut out[i]);
        out[i] = cur.merge(s);
    }
    for (inp, threads) in inputs.iter().zip(orders) {
        inp.set_in_order(
            threads
                .into_iter()
                .map(ChunkOrder::thread_in_order)
                .collect(),
        );
    }
    if let Some(spill) = spill.filter(|s| spilled && !s.failed()) {
        for (inp, p) in inputs.iter().zip(pieces) {
            inp.set_spilled(spill.clone(), p);
        }
    }
    out.into_iter()
        .zip(inputs)
        .map(|(s, inp)| {
            let s = s.finish(inp.file.losses());
            // Whatever the scan's last reads left mapped (a page near a released chunk, the
            // kernel's fault-around of 64 KiB) leaves now: with 4 096 logs that was 266 MB
            // held until the end of the conversion.
            inp.file.release(0, inp.file.len());
            s
        })
        .collect()
}

/// An empty list per thread of every log.
fn per_thread<T>(inputs: &[LogInput]) -> Vec<Vec<Vec<T>>> {
    inputs
        .iter()
        .map(|inp| inp.threads.iter().map(|_| Vec::new()).collect())
        .collect()
}

impl Scan {
    /// "N events (PostSend 4263, WorkCompletion 8527, …)": what the tracer dropped, per record
    /// kind where the log says (format ≥ 1.1); `None` when nothing was dropped.
    pub fn loss_summary(&self) -> Option<String> {
        if self.dropped == 0 {
            return None;
        }
        let kinds: Vec<String> = self
            .dropped_by_kind
            .iter()
            .map(|&(k, n)| {
                let name =
                    sigmatrace_schemas::RecordKind::from_id(k).map_or("kind ?", |k| k.name());
                format!("{name} {n}")
            })
            .collect();
        Some(if kinds.is_empty() {
            format!("{} events", self.dropped)
        } else {
            format!("{} events ({})", self.dropped, kinds.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{ChunkOrder, Times};

    /// `Times` finds what comparing every timestamp with the least and the greatest so far
    /// finds, on sequences with repeats, steps back and the extreme values.
    #[test]
    fn times_agree_with_the_running_least_and_greatest() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let pick = [0, 1, 5, 6, 7, 100, u64::MAX - 1, u64::MAX];
        for _ in 0..20_000 {
            let n = (next() % 7) as usize;
            let seq: Vec<u64> = (0..n).map(|_| pick[(next() % 8) as usize]).collect();
            let (mut min, mut max, mut inv) = (u64::MAX, 0u64, false);
            let mut t = Times::new();
            for (seen, &ts) in seq.iter().enumerate() {
                inv |= ts < max;
                min = min.min(ts);
                max = max.max(ts);
                t.add(ts, || seen as u64);
            }
            assert_eq!(t.finish(seq.len() as u64), (min, max, inv), "{seq:?}");
        }
    }

    fn c(in_order: bool, first_last: Option<(u64, u64)>) -> ChunkOrder {
        ChunkOrder {
            in_order,
            first_last,
        }
    }

    #[test]
    fn a_thread_is_in_order_when_its_chunks_are_and_follow_each_other() {
        let ok = [c(true, Some((5, 9))), c(true, None), c(true, Some((9, 12)))];
        assert!(ChunkOrder::thread_in_order(ok));
        assert!(ChunkOrder::thread_in_order([]));
        // A chunk that starts before the last timestamp (of a chunk with one) before it.
        let back = [c(true, Some((5, 9))), c(true, None), c(true, Some((8, 12)))];
        assert!(!ChunkOrder::thread_in_order(back));
        assert!(!ChunkOrder::thread_in_order([
            c(true, Some((1, 2))),
            c(false, Some((3, 4)))
        ]));
    }
}
