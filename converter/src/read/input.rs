//! Tokenize: finding and opening logs, and iterating their records.
//!
//! Logs are memory-mapped ([`MappedLog`]); nothing is copied, and what was read leaves the
//! resident set again: every [`RELEASE_WINDOW`] bytes of a chunk and at its end. A process's records come from
//! several per-thread chunk sequences in log order; a [`ThreadCursor`] sorts each by timestamp
//! (stable, within a window of [`REORDER_WINDOW`] records; times are never changed) and
//! [`MergedRecords`] merges the threads by timestamp (k-way).

use std::path::{Path, PathBuf};

use std::sync::{Arc, OnceLock};

use sigmatrace_schemas::reader::{ChunkInfo, RawRecord};
use sigmatrace_schemas::HEADER_SIZE;

use crate::error::ConvertError;
pub use crate::read::chunk::{
    chunk_end, record_ts, ChunkRecords, RecordIssue, JOIN_RELEASE_WINDOW, PROCESS_RELEASE_BUDGET,
    RELEASE_WINDOW,
};
use crate::read::map::MappedLog;
use crate::read::messages::{Spill, SpillCursor, ThreadPieces};

/// One opened log: the mapping and its chunks grouped by writer thread.
pub struct LogInput {
    pub path: PathBuf,
    pub file: MappedLog,
    /// Per thread (sorted by tid): its chunks in allocation order.
    pub threads: Vec<(u32, Vec<ChunkInfo>)>,
    /// Bytes of the file (input size).
    pub bytes: u64,
    /// Chunks the header counts as allocated that are not in the file (the file was cut short,
    /// possibly exactly at a chunk boundary): see [`MissingChunks`].
    pub missing_chunks: Option<MissingChunks>,
    /// Per thread (as `threads`): whether its records' timestamps never decrease, so that a
    /// [`ThreadCursor`] hands them out in log order without sorting; set by the scan
    /// ([`LogInput::set_in_order`]). Unset: none is known to be.
    in_order: OnceLock<Vec<bool>>,
    /// The scan's spill of this log's messages and, per thread, its pieces of it in log order
    /// ([`LogInput::set_spilled`]).
    spilled: OnceLock<(Arc<Spill>, ThreadPieces)>,
}

/// Chunk positions the header counts as allocated that lie beyond the end of the file and whose
/// chunk was not found elsewhere. With per-thread rings (format 1.2) a chunk's index is its
/// final position, but a chunk that was never drained (a thread's last, partly filled chunk)
/// is read from its ring slot while its final position lies past the end of the file: such a
/// position is not missing, nothing of it is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissingChunks {
    /// File offset of the first missing position.
    pub first: u64,
    /// End offset of the last missing position.
    pub end: u64,
    /// Missing positions.
    pub count: u64,
    /// Whether they are exactly the last `count` allocated positions.
    pub at_end: bool,
}

impl MissingChunks {
    /// Positions `in_file..allocated` (beyond the end of the file) whose index is not among
    /// `found` (the indices of the chunks read, wherever they sit); `None` when none is missing.
    fn find(
        in_file: u64,
        allocated: u64,
        chunk_size: u64,
        found: impl Iterator<Item = u64>,
    ) -> Option<MissingChunks> {
        if allocated <= in_file {
            return None;
        }
        let mut present: Vec<u64> = found.filter(|&i| i >= in_file && i < allocated).collect();
        present.sort_unstable();
        present.dedup();
        let count = allocated - in_file - present.len() as u64;
        if count == 0 {
            return None;
        }
        let mut missing = (in_file..allocated).filter(|i| present.binary_search(i).is_err());
        let first = missing.next().expect("count > 0");
        let last = missing.next_back().unwrap_or(first);
        let offset = |i: u64| HEADER_SIZE as u64 + i * chunk_size;
        Some(MissingChunks {
            first: offset(first),
            end: offset(last + 1),
            count,
            at_end: last + 1 == allocated && last + 1 - first == count,
        })
    }
}

impl LogInput {
    /// Opens and validates a log. Fatal header problems are errors; damaged chunks are kept in
    /// the file's salvage report.
    pub fn open(path: &Path) -> Result<LogInput, ConvertError> {
        let file = MappedLog::open(path).map_err(ConvertError::Read)?;
        let bytes = file.len();
        let h = file.header();
        let cs = h.chunk_size as u64;
        let in_file = bytes.saturating_sub(HEADER_SIZE as u64).div_ceil(cs);
        let missing_chunks = MissingChunks::find(
            in_file,
            u64::from(h.chunks_allocated),
            cs,
            file.chunks().iter().map(|c| u64::from(c.header.index)),
        );
        let mut threads: Vec<(u32, Vec<ChunkInfo>)> = Vec::new();
        let mut chunks: Vec<ChunkInfo> = file.chunks().to_vec();
        chunks.sort_by_key(|c| (c.header.tid, c.header.index));
        for c in chunks {
            match threads.last_mut() {
                Some((tid, v)) if *tid == c.header.tid => v.push(c),
                _ => threads.push((c.header.tid, vec![c])),
            }
        }
        Ok(LogInput {
            path: path.to_owned(),
            file,
            threads,
            bytes,
            missing_chunks,
            in_order: OnceLock::new(),
            spilled: OnceLock::new(),
        })
    }

    /// Records which threads' records are in timestamp order already (per thread, as
    /// `threads`; from the scan, which reads every record the cursors read): their cursors skip
    /// the reorder window, which hands such records out in log order anyway. Set once.
    pub fn set_in_order(&self, in_order: Vec<bool>) {
        debug_assert_eq!(in_order.len(), self.threads.len());
        let _ = self.in_order.set(in_order);
    }

    /// Records where the scan spilled this log's messages: per thread (as `threads`), its
    /// pieces of `spill` in log order. Set once.
    pub fn set_spilled(&self, spill: Arc<Spill>, pieces: ThreadPieces) {
        debug_assert_eq!(pieces.len(), self.threads.len());
        let _ = self.spilled.set((spill, pieces));
    }

    /// Thread `t`'s messages ([`is_message`]) from the scan's spill, in the order its record
    /// cursor would hand them out: for a thread in timestamp order whose messages were spilled.
    ///
    /// [`is_message`]: crate::read::hot::is_message
    pub fn spilled_messages(&self, t: usize) -> Option<SpillCursor<'_>> {
        let (spill, pieces) = self.spilled.get()?;
        let pieces = pieces.get(t).filter(|_| self.thread_in_order(t))?;
        Some(SpillCursor::new(spill, pieces))
    }

    /// Whether thread `t`'s records are known to be in timestamp order.
    pub fn thread_in_order(&self, t: usize) -> bool {
        self.in_order
            .get()
            .is_some_and(|v| v.get(t).copied().unwrap_or(false))
    }

    /// One cursor per writer thread (records of each thread in order).
    pub fn thread_cursors(&self) -> Vec<ThreadCursor<'_>> {
        let mut issues = Vec::new();
        self.threads
            .iter()
            .enumerate()
            .map(|(t, (_, chunks))| ThreadCursor::new(self, t, chunks, &mut issues))
            .collect()
    }

    /// [`LogInput::thread_cursors`] for a pass that wants the messages only ([`is_message`]:
    /// the causality join): the cursors of threads in order pass over the other records at a
    /// glance (they hand out the messages in the order they would anyway); the others hand
    /// out every record.
    ///
    /// [`is_message`]: crate::read::hot::is_message
    pub fn message_cursors(&self) -> Vec<ThreadCursor<'_>> {
        (0..self.threads.len())
            .map(|t| self.message_cursor(t))
            .collect()
    }

    /// Thread `t`'s cursor of [`LogInput::message_cursors`].
    fn message_cursor(&self, t: usize) -> ThreadCursor<'_> {
        let mut c = ThreadCursor::unfilled(self, t, &self.threads[t].1);
        c.messages_only = c.in_order;
        c.window = JOIN_RELEASE_WINDOW;
        c.fill(&mut Vec::new());
        c
    }

    /// Every thread's messages for the causality join: from the scan's spill where it has them
    /// ([`LogInput::spilled_messages`]), else from its records ([`LogInput::message_cursors`]).
    pub fn thread_messages(&self) -> Vec<ThreadMessages<'_>> {
        (0..self.threads.len())
            .map(|t| match self.spilled_messages(t) {
                Some(spilled) => ThreadMessages::Spilled(spilled),
                None => ThreadMessages::Records(self.message_cursor(t)),
            })
            .collect()
    }

    /// Records of this process in timestamp order.
    pub fn merged(&self) -> MergedRecords<'_> {
        MergedRecords::new(self)
    }
}

/// Where the causality join reads one thread's messages.
pub enum ThreadMessages<'a> {
    /// The scan's spill: the messages alone.
    Spilled(SpillCursor<'a>),
    /// The records (the join takes the messages among them).
    Records(ThreadCursor<'a>),
}

/// Drops a consumed chunk's pages from this process's resident set (they stay in the page
/// cache), so resident memory does not grow with the amount of input read.
pub fn release_chunk(input: &LogInput, chunk: &ChunkInfo) {
    // Reads near a chunk's ends map neighbouring pages as well (the kernel's fault-around,
    // up to 64 KiB): those are released too, even if they belong to a chunk another reader
    // has already released (a later access only faults them back in).
    const FAULT_AROUND: u64 = 64 << 10;
    let end = chunk.offset + u64::from(input.file.header().chunk_size);
    input.file.release(
        chunk.offset.saturating_sub(FAULT_AROUND),
        end + FAULT_AROUND,
    );
}

/// How far back in a thread's log a record's time may lie behind an earlier record's: a
/// writer appends a due clock snapshot (a fresh, later time) before the record it is
/// reserving, and flushes buffered records (earlier times) behind it. A cursor sorts a window
/// of this many records (stable: equal times keep their log order); timestamps are never
/// changed. See schemas/FORMAT.md, "Record order".
pub const REORDER_WINDOW: usize = 8;
// A cursor keeps the window's order in one word, a byte per slot.
const _: () = assert!(REORDER_WINDOW <= 8);

/// Ring slots of a cursor: the window's records, the one handed out last (valid until the
/// next pop) and room to spare.
const RING: usize = 16;
const _: () = assert!(RING.is_power_of_two());

/// Records a cursor of a thread in order reads at once: half the ring (the other half holds
/// the record lent).
const HALF: usize = RING / 2;

/// A slot number (always below [`RING`]: the order word's bytes and the free mask's bits
/// name slots) as a ring index the compiler knows is in bounds: no bounds check per access.
#[inline(always)]
fn slot_index(slot: usize) -> usize {
    debug_assert!(slot < RING);
    slot & (RING - 1)
}

/// One writer thread's records in time order (its chunks one after another, sorted within a
/// window of [`REORDER_WINDOW`] records). The records read ahead stay in a ring of slots where
/// they were decoded; only their slot numbers are sorted, and [`ThreadCursor::pop`] lends the
/// record in place (no copy of the record).
pub struct ThreadCursor<'a> {
    input: &'a LogInput,
    chunks: &'a [ChunkInfo],
    next_chunk: usize,
    iter: Option<ChunkRecords<'a>>,
    ring: Box<[(u64, RawRecord<'a>); RING]>,
    /// Slots of the records read ahead, sorted by time (stable), one per byte from the low
    /// byte (the head's); bytes from `len` on are unused. A word, so that taking the head or
    /// inserting is a shift, not a move of bytes.
    order: u64,
    len: usize,
    /// Free slots (bit i: slot i).
    free: u16,
    /// The slot lent by the last pop, freed by the next.
    lent: Option<u8>,
    /// Timestamp of the record read last (for a record too short to carry one).
    last_ts: u64,
    /// The last chunk is read to its end and was released (the next reads find nothing
    /// without releasing it again).
    ended: bool,
    /// A record was taken since the last [`ThreadCursor::park`] (which has nothing to release
    /// otherwise: only taking a record touches the mapping after the window is filled).
    touched: bool,
    /// The thread's records are in timestamp order ([`LogInput::thread_in_order`]): no window;
    /// `order` is the head's slot and `len` the records from it to the end of its half of the
    /// ring ([`ThreadCursor::take_head_in_order`]).
    in_order: bool,
    /// Only messages are read ([`LogInput::message_cursors`]; threads in order only).
    messages_only: bool,
    /// Consumed bytes of a chunk kept before they are released ([`RELEASE_WINDOW`], a share
    /// of [`PROCESS_RELEASE_BUDGET`] with more than two threads; the causality join's cursors:
    /// [`JOIN_RELEASE_WINDOW`]).
    window: usize,
}

impl<'a> ThreadCursor<'a> {
    fn new(
        input: &'a LogInput,
        thread: usize,
        chunks: &'a [ChunkInfo],
        issues: &mut Vec<RecordIssue>,
    ) -> Self {
        let mut c = ThreadCursor::unfilled(input, thread, chunks);
        c.fill(issues);
        c
    }

    /// A cursor of thread `thread` that has read nothing yet.
    fn unfilled(input: &'a LogInput, thread: usize, chunks: &'a [ChunkInfo]) -> Self {
        let none = (0, RawRecord::new(0, 0, &[]));
        ThreadCursor {
            input,
            chunks,
            next_chunk: 0,
            iter: None,
            ring: Box::new([none; RING]),
            order: 0,
            len: 0,
            free: u16::MAX,
            lent: None,
            last_ts: 0,
            ended: false,
            touched: true,
            in_order: input.thread_in_order(thread),
            messages_only: false,
            window: (PROCESS_RELEASE_BUDGET / input.threads.len().max(1))
                .clamp(JOIN_RELEASE_WINDOW, RELEASE_WINDOW),
        }
    }

    /// The thread's next record in its current chunk into `out` (the next message when it
    /// reads messages only); false at the chunk's end or damage, or without a chunk.
    #[inline(always)]
    fn read_into(&mut self, issues: &mut Vec<RecordIssue>, slot: usize) -> bool {
        let (out, messages) = (&mut self.ring[slot].1, self.messages_only);
        match self.iter.as_mut() {
            Some(it) if messages => it.next_message_into(issues, out),
            Some(it) => it.next_into(issues, out),
            None => false,
        }
    }

    /// Timestamp of the next record.
    #[inline]
    pub fn head_ts(&self) -> Option<u64> {
        (self.len > 0).then(|| self.ring[slot_index(self.order as u8 as usize)].0)
    }

    /// Releases every page of the chunk being read from the resident set, the head's included
    /// (it faults back in when touched). A reader that visits many logs in turn (the causality
    /// join's epochs) parks each cursor after its turn, so that resident memory is one turn's
    /// pages, not a window per log.
    pub fn park(&mut self) {
        if !std::mem::take(&mut self.touched) {
            return;
        }
        if let Some(c) = self.next_chunk.checked_sub(1).map(|i| &self.chunks[i]) {
            release_chunk(self.input, c);
        }
    }

    /// Takes the next record (lent until the next call).
    #[inline]
    pub fn pop(&mut self, issues: &mut Vec<RecordIssue>) -> Option<(u64, &RawRecord<'a>)> {
        let h = self.take_head(issues)?;
        let (ts, r) = &self.ring[h];
        Some((*ts, r))
    }

    /// Takes the head out of the window (its slot stays lent), refills the window and returns
    /// the head's slot.
    #[inline(always)]
    fn take_head(&mut self, issues: &mut Vec<RecordIssue>) -> Option<usize> {
        if self.in_order {
            return self.take_head_in_order(issues);
        }
        if let Some(l) = self.lent.take() {
            self.free |= 1 << l;
        }
        if self.len == 0 {
            return None;
        }
        self.touched = true;
        let h = slot_index(self.order as u8 as usize);
        self.order >>= 8;
        self.len -= 1;
        self.lent = Some(h as u8);
        self.fill(issues);
        Some(h)
    }

    /// [`ThreadCursor::take_head`] of a thread whose records are in timestamp order: the window
    /// sorts nothing (every record goes after the ones before it), so the records are read
    /// [`HALF`] at a time into one half of the ring and handed out in turn; the next half is
    /// read when the last record of this one is taken (it stays lent meanwhile).
    #[inline(always)]
    fn take_head_in_order(&mut self, issues: &mut Vec<RecordIssue>) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        self.touched = true;
        let head = slot_index(self.order as usize);
        if self.len > 1 {
            self.order += 1;
            self.len -= 1;
        } else {
            let other = (head & HALF) ^ HALF;
            self.len = self.fill_half(issues, other);
            self.order = other as u64;
        }
        Some(head)
    }

    /// The head of a thread in order that has another record read after it (`len` > 1): taken
    /// without reading.
    #[inline(always)]
    fn take_read_ahead(&mut self) -> (u64, &RawRecord<'a>) {
        debug_assert!(self.in_order && self.len > 1);
        let head = slot_index(self.order as usize);
        self.order += 1;
        self.len -= 1;
        self.touched = true;
        let (ts, r) = &self.ring[head];
        (*ts, r)
    }

    /// Reads up to [`HALF`] records (of a thread in order) into the ring from slot `base` on;
    /// returns how many. Out of line (called once per [`HALF`] records): the decoding loop
    /// and the model loop it was inlined into (`ProcessModel::records`) each keep their own
    /// registers. Measured (callgrind, real `ib_write_bw` log): 3,850.2 -> 3,841.8 M
    /// instructions; 64-rank set 3,352.8 -> 3,349.3 M.
    #[inline(never)]
    fn fill_half(&mut self, issues: &mut Vec<RecordIssue>, base: usize) -> usize {
        let mut n = 0;
        while n < HALF {
            if !self.messages_only {
                if let Some(it) = self.iter.as_mut() {
                    let out = &mut self.ring[base + n..base + HALF];
                    n += it.fill_into(issues, out, &mut self.last_ts);
                    if n == HALF {
                        break;
                    }
                }
            }
            // The chunk ended (or a message is wanted): the next record, from the next
            // chunks if need be.
            let slot = base + n;
            if !self.next_chunk_record(issues, slot) {
                break;
            }
            let ts = self.ring[slot].1.ts().unwrap_or(self.last_ts);
            self.last_ts = ts;
            self.ring[slot].0 = ts;
            n += 1;
        }
        n
    }

    /// Reads records until the window holds [`REORDER_WINDOW`] (one for a thread in order; or
    /// the thread ends), each decoded into a free slot and inserted after every record with a
    /// time ≤ its own (usually at the end).
    #[inline(always)]
    fn fill(&mut self, issues: &mut Vec<RecordIssue>) {
        if self.in_order {
            self.order = 0;
            self.len = self.fill_half(issues, 0);
            return;
        }
        while self.len < REORDER_WINDOW {
            let slot = slot_index(self.free.trailing_zeros() as usize);
            if !self.read_into(issues, slot) && !self.next_chunk_record(issues, slot) {
                break;
            }
            let ts = self.ring[slot].1.ts().unwrap_or(self.last_ts);
            self.last_ts = ts;
            self.ring[slot].0 = ts;
            self.free &= !(1 << slot);
            let mut at = self.len;
            while at > 0
                && self.ring[slot_index((self.order >> (8 * (at - 1))) as u8 as usize)].0 > ts
            {
                at -= 1;
            }
            // The slots from `at` on move up one byte (at < REORDER_WINDOW = 8: the shifts
            // stay below 64).
            let below = (1u64 << (8 * at)) - 1;
            self.order =
                (self.order & below) | (self.order & !below) << 8 | (slot as u64) << (8 * at);
            self.len += 1;
        }
    }

    /// The thread's next record in log order from its next chunks, into ring slot `slot`.
    #[cold]
    fn next_chunk_record(&mut self, issues: &mut Vec<RecordIssue>, slot: usize) -> bool {
        if self.ended {
            return false;
        }
        loop {
            if self.read_into(issues, slot) {
                return true;
            }
            self.iter = None;
            if self.next_chunk > 0 {
                release_chunk(self.input, &self.chunks[self.next_chunk - 1]);
            }
            if self.next_chunk >= self.chunks.len() {
                self.ended = true;
                return false;
            }
            let c = &self.chunks[self.next_chunk];
            self.next_chunk += 1;
            self.iter = Some(
                ChunkRecords::new(&self.input.file, c, issues).with_release_window(self.window),
            );
        }
    }
}

impl Drop for MergedRecords<'_> {
    fn drop(&mut self) {
        if let Some(mut done) = self.exhausted.take() {
            done.park();
        }
    }
}

/// K-way merge of a process's per-thread record streams by timestamp.
pub struct MergedRecords<'a> {
    cursors: Vec<ThreadCursor<'a>>,
    /// The cursor that ran out last (its last record is the one lent), parked at the next
    /// step.
    exhausted: Option<ThreadCursor<'a>>,
    /// Damaged records met so far.
    pub issues: Vec<RecordIssue>,
}

impl<'a> MergedRecords<'a> {
    fn new(input: &'a LogInput) -> Self {
        let mut issues = Vec::new();
        let mut cursors: Vec<ThreadCursor<'a>> = input
            .threads
            .iter()
            .enumerate()
            .map(|(t, (_, chunks))| ThreadCursor::new(input, t, chunks, &mut issues))
            .collect();
        cursors.retain(|c| c.len > 0);
        MergedRecords {
            cursors,
            exhausted: None,
            issues,
        }
    }

    /// Parks the cursor that ran out at the last step.
    #[cold]
    fn park_exhausted(&mut self) {
        if let Some(mut done) = self.exhausted.take() {
            done.park();
        }
    }

    /// Timestamp of the next record without consuming it.
    pub fn peek_ts(&self) -> Option<u64> {
        self.cursors.iter().filter_map(|c| c.head_ts()).min()
    }

    /// The next record of the process in time order (lent until the next call).
    #[inline(always)]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(u64, &RawRecord<'a>)> {
        // Looked at, not taken (a store per record), until a cursor ran out.
        if self.exhausted.is_some() {
            self.park_exhausted();
        }
        // One thread in order, its next record already read: no merge, no refill.
        if let [c] = &self.cursors[..] {
            if c.in_order && c.len > 1 {
                return Some(self.cursors[0].take_read_ahead());
            }
        }
        let best = match self.cursors.len() {
            0 => return None,
            1 => 0,
            2 => {
                let a = self.cursors[0].head_ts().unwrap_or(u64::MAX);
                let b = self.cursors[1].head_ts().unwrap_or(u64::MAX);
                (b < a) as usize
            }
            _ => {
                let mut best = 0;
                let mut best_ts = u64::MAX;
                for (i, c) in self.cursors.iter().enumerate() {
                    if let Some(ts) = c.head_ts() {
                        if ts < best_ts {
                            best_ts = ts;
                            best = i;
                        }
                    }
                }
                best
            }
        };
        if self.cursors[best].in_order && self.cursors[best].len > 1 {
            return Some(self.cursors[best].take_read_ahead());
        }
        let c = &mut self.cursors[best];
        let slot = c.take_head(&mut self.issues)?;
        let cur = if c.len == 0 {
            // The caller reads the record returned now from the chunk's pages: the exhausted
            // cursor releases them at the next call (or when the merge is dropped).
            self.exhausted.insert(self.cursors.swap_remove(best))
        } else {
            &self.cursors[best]
        };
        let (ts, r) = &cur.ring[slot_index(slot)];
        Some((*ts, r))
    }
}

#[cfg(test)]
mod tests {
    use super::{LogInput, MissingChunks};

    /// A synthetic log of one rank with two threads and 20 000 WRITEs (many chunks), in a
    /// temporary directory that lives as long as the first value.
    fn two_thread_log() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let mut sc = sigmatrace_synth::Scenario::ring(
            1,
            2,
            sigmatrace_synth::Pattern::Write { signal_every: 4 },
            20_000,
        );
        sc.threads = 2;
        sigmatrace_synth::write(dir.path(), &sc).unwrap();
        let log = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "sigmatrace"))
            .unwrap();
        (dir, log)
    }

    /// Reading a log releases each chunk's pages once when it is done, and once more per
    /// thread at its end (the records still in its window touch its last pages again) — not
    /// once per record taken after its last chunk ran out, and a cursor parked again without
    /// taking a record releases nothing (each release is a `madvise` that may interrupt every
    /// other core running the converter).
    #[test]
    fn pages_are_released_once_per_chunk_not_per_record_or_idle_park() {
        let (_dir, log) = two_thread_log();
        let input = LogInput::open(&log).unwrap();
        let chunks: u64 = input.threads.iter().map(|(_, c)| c.len() as u64).sum();
        let threads = input.threads.len() as u64;
        assert!(
            threads == 2 && chunks >= 8,
            "{threads} threads, {chunks} chunks"
        );

        let before = input.file.releases();
        let mut merged = input.merged();
        let mut records = 0u64;
        while merged.next().is_some() {
            records += 1;
        }
        drop(merged);
        let released = input.file.releases() - before;
        assert!(records > 10_000, "{records} records");
        assert!(
            released <= chunks + threads,
            "{released} releases for {chunks} chunks of {threads} threads"
        );

        let mut cursors = input.thread_cursors();
        let mut issues = Vec::new();
        cursors[0].pop(&mut issues).unwrap();
        cursors[0].park();
        let before = input.file.releases();
        cursors[0].park();
        cursors[1].park();
        cursors[1].park();
        assert_eq!(
            input.file.releases() - before,
            1,
            "only the fresh cursor releases"
        );
    }

    /// A log of two writer threads (tids 1 and 2) whose `PostSend`s have the timestamps
    /// given, in log order.
    fn log_of_threads(dir: &std::path::Path, times: [&[u64]; 2]) -> std::path::PathBuf {
        use sigmatrace_schemas::records::{PostSend, RecordHeader};
        use sigmatrace_schemas::{FileHeader, LogWriter, Timestamper, WriterOptions};
        let path = dir.join("order.sigmatrace");
        let ts = Timestamper::detect();
        let header =
            FileHeader::for_current_process(ts.source(), 1_000_000_000, ts.snapshot(), 4096);
        let w = LogWriter::create(&path, &header, WriterOptions::default()).unwrap();
        for (tid, times) in [(1, times[0]), (2, times[1])] {
            let mut tw = w.thread_writer(tid);
            for (i, &t) in times.iter().enumerate() {
                let ps = PostSend {
                    hdr: RecordHeader::of::<PostSend>(2),
                    ts: t,
                    qpn: 0x40 + tid,
                    wr_id: i as u64,
                    bytes: 8,
                    num_sge: 1,
                    ..Default::default()
                };
                assert!(tw.append(&ps));
            }
        }
        drop(w);
        path
    }

    /// (ts, file offset, record bytes) of every record `next` hands out.
    fn drain(next: impl FnMut() -> Option<(u64, u64, Vec<u8>)>) -> Vec<(u64, u64, Vec<u8>)> {
        std::iter::from_fn(next).collect()
    }

    fn merged_all(input: &LogInput) -> Vec<(u64, u64, Vec<u8>)> {
        let mut m = input.merged();
        drain(|| {
            m.next()
                .map(|(ts, r)| (ts, r.offset, r.record_bytes().to_vec()))
        })
    }

    /// The scan marks a thread whose records go back in time as not in order (its cursor
    /// sorts them in its window), and one whose records never do as in order.
    #[test]
    fn scan_marks_threads_in_order_and_cursors_sort_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let base = 1u64 << 40;
        let t1: Vec<u64> = [10, 20, 15, 30, 30, 40].iter().map(|d| base + d).collect();
        let t2: Vec<u64> = [12, 12, 25, 50].iter().map(|d| base + d).collect();
        let path = log_of_threads(dir.path(), [&t1, &t2]);
        let input = LogInput::open(&path).unwrap();
        let unmarked = merged_all(&input);
        crate::read::scan::scan_all(std::slice::from_ref(&input));
        assert!(!input.thread_in_order(0) && input.thread_in_order(1));
        let marked = merged_all(&input);
        assert_eq!(marked, unmarked);
        let times: Vec<u64> = marked.iter().map(|r| r.0 - base).collect();
        assert_eq!(times, [10, 12, 12, 15, 20, 25, 30, 30, 40, 50]);
    }

    /// A thread in order reads the same records in the same order whether its cursor knows it
    /// (no window) or not, merged and on its own, over many chunks.
    #[test]
    fn threads_in_order_read_the_same_without_the_window() {
        let (_dir, log) = two_thread_log();
        let plain = LogInput::open(&log).unwrap();
        let known = LogInput::open(&log).unwrap();
        crate::read::scan::scan_all(std::slice::from_ref(&known));
        assert!((0..known.threads.len()).all(|t| known.thread_in_order(t)));
        assert!(known.threads.iter().any(|(_, c)| c.len() > 2));
        let all = merged_all(&known);
        assert!(all.len() > 10_000);
        assert_eq!(all, merged_all(&plain));
        let mut issues = Vec::new();
        for (mut a, mut b) in plain
            .thread_cursors()
            .into_iter()
            .zip(known.thread_cursors())
        {
            let mut take = |c: &mut super::ThreadCursor<'_>| {
                c.pop(&mut issues)
                    .map(|(ts, r)| (ts, r.offset, r.record_bytes().to_vec()))
            };
            assert_eq!(drain(|| take(&mut a)), drain(|| take(&mut b)));
        }
    }

    const CS: u64 = 1 << 20;
    const H: u64 = 4096;

    #[test]
    fn positions_past_the_end_are_missing_unless_their_chunk_was_found() {
        // 5 positions in the file, 8 allocated: 5 and 7 read from ring slots, 6 lost.
        let m = MissingChunks::find(5, 8, CS, [0, 1, 5, 7].into_iter()).unwrap();
        assert_eq!(
            (m.first, m.end, m.count, m.at_end),
            (H + 6 * CS, H + 7 * CS, 1, false)
        );
        // The last chunk in its ring slot: nothing missing.
        assert_eq!(
            MissingChunks::find(4, 5, CS, [0, 1, 2, 4].into_iter()),
            None
        );
        assert_eq!(MissingChunks::find(5, 5, CS, [].into_iter()), None);
        // Cut at a chunk boundary: the last 3 missing.
        let m = MissingChunks::find(2, 5, CS, [0, 1].into_iter()).unwrap();
        assert_eq!(
            (m.first, m.end, m.count, m.at_end),
            (H + 2 * CS, H + 5 * CS, 3, true)
        );
    }
}
