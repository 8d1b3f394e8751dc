//! One chunk's records ([`ChunkRecords`]): checked like the schemas reader checks them, read in
//! the chunk's compact-record context, whole or at a glance; the pages read leave the resident
//! set every [`RELEASE_WINDOW`] bytes.

use std::sync::OnceLock;

use sigmatrace_schemas::chunk::CHUNK_HEADER_SIZE;
use sigmatrace_schemas::compact::{ChunkDecoder, Glance, Glimpse, Step};
use sigmatrace_schemas::reader::{ChunkInfo, RawRecord};
use sigmatrace_schemas::records::RecordKind;

use crate::read::hot::is_message;
use crate::read::map::{prefetch_ahead, MappedLog, PREFETCH_AHEAD};

/// How many consumed bytes of a chunk a reader keeps resident before it releases them: a
/// reader holds about this much, whatever the chunk size. The scan's readers (one per job)
/// and a process's model cursors (one per writer thread, one process per job) are few at a
/// time; each release is an `MADV_DONTNEED` that interrupts the other cores running our
/// threads to flush their TLBs. Measured against 512 KiB, alternating (64 ranks × 50 M WR
/// events, 2.9 GB of logs): `--jobs 2` 8.46 → 7.95 CPU-s (system time 1.40 → 1.18 s), peak
/// RSS 62 → 64 MB; 1024 ranks × 50 M `--jobs 2` 11.08 → 10.32 CPU-s, 88 → 87 MB; `--jobs 1`
/// within the noise.
pub const RELEASE_WINDOW: usize = 2 << 20;

/// [`RELEASE_WINDOW`] of the causality join's cursors, which read every log in lock-step
/// when the scan's spill is not there ([`crate::read::input::LogInput::message_cursors`]),
/// and the least of a process's model cursors.
pub const JOIN_RELEASE_WINDOW: usize = 512 << 10;

/// Consumed bytes a process's model cursors keep together at most: with more than two writer
/// threads each keeps its share (at least [`JOIN_RELEASE_WINDOW`]).
pub const PROCESS_RELEASE_BUDGET: usize = 2 * RELEASE_WINDOW;

/// Timestamp of a record: every record kind has its `ts` at offset 8.
#[inline]
pub fn record_ts(bytes: &[u8]) -> Option<u64> {
    bytes
        .get(8..16)
        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
}

/// A damaged record found while iterating (iteration of its chunk stops there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordIssue {
    pub offset: u64,
    pub what: String,
}

impl RecordIssue {
    /// A damaged record at `offset` whose chunk's readable bytes end at `end`: the message
    /// names the byte range that is not converted.
    pub fn skipping(offset: u64, end: u64, what: impl std::fmt::Display) -> RecordIssue {
        RecordIssue {
            offset,
            what: format!(
                "{what}; bytes {offset}..{end} ({} bytes) of the chunk not read",
                end.saturating_sub(offset)
            ),
        }
    }
}

/// The kind and bytes of the record at the start of `rest`, when its header describes a
/// whole record of a valid length (a multiple of 8, at least its header, within `rest`, and
/// the kind's own length where `heads` fixes one); `Ok(None)` when `rest` is empty, `Err`
/// when it holds a damaged record. The one header check of every reader of a chunk.
#[inline(always)]
fn record_header<'r>(rest: &'r [u8], heads: &FixedHeads) -> Result<Option<(u16, &'r [u8])>, ()> {
    let Some(h) = rest.first_chunk::<8>().map(|h| u64::from_ne_bytes(*h)) else {
        return if rest.is_empty() { Ok(None) } else { Err(()) };
    };
    let kind = h as u16;
    let len = (h >> 16) as u16 as usize;
    // Nearly every record is of a fixed-length kind, at that length: one compare of its
    // kind and length with the kind's expected ones (a valid length, see `fixed_heads`), and
    // the record's bytes taken with the one check that they are within `rest`.
    if heads[h as u8 as usize] == h & 0xffff_ffff {
        if let Some(record) = rest.get(..len) {
            return Ok(Some((kind, record)));
        }
    }
    let fixed = match heads[h as u8 as usize] {
        _ if kind >= 256 => 0,
        NOT_FIXED => 0,
        NEVER_VALID => return Err(()),
        e => (e >> 16) as usize,
    };
    match rest.get(..len) {
        Some(record) if len >= 8 && len.is_multiple_of(8) && (fixed == 0 || fixed == len) => {
            Ok(Some((kind, record)))
        }
        _ => Err(()),
    }
}

/// File offset where the readable record bytes of `chunk` end.
pub fn chunk_end(chunk: &ChunkInfo) -> u64 {
    chunk.offset + CHUNK_HEADER_SIZE as u64 + u64::from(chunk.readable)
}

/// Per kind below 256, the first 4 bytes of its records' header (kind, and its length in the
/// high 16 bits) as a word, when the kind has a fixed length; [`NOT_FIXED`] otherwise.
type FixedHeads = [u64; 256];

/// A [`FixedHeads`] entry of a kind of variable length or unknown: never a header's 4 bytes.
const NOT_FIXED: u64 = 1 << 32;
/// A [`FixedHeads`] entry of a kind whose fixed length is not a valid record length (none is):
/// its records are all damaged.
const NEVER_VALID: u64 = 2 << 32;

/// The expected header of each fixed-size record kind below 256 ([`FixedHeads`]).
fn fixed_heads() -> &'static FixedHeads {
    static T: OnceLock<FixedHeads> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = [NOT_FIXED; 256];
        for (k, v) in t.iter_mut().enumerate() {
            if let Some(len) = RecordKind::from_id(k as u16).and_then(|k| k.fixed_size()) {
                // A fixed length is a valid record length (the fast path of `record_header`
                // checks nothing else); a kind whose length were not would never read.
                let valid = len >= 8 && len.is_multiple_of(8) && len <= u16::MAX as usize;
                *v = if valid {
                    k as u64 | (len as u64) << 16
                } else {
                    NEVER_VALID
                };
            }
        }
        t
    })
}

/// What [`ChunkRecords::glance_each`] does after a hot record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Goes on with the next record.
    Go,
    /// Reads this one whole first.
    Whole,
    /// Stops after this one.
    Stop,
}

/// Why [`ChunkRecords::fill_into`] stopped reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Its `out` is full.
    Full,
    /// At the end of the chunk.
    End,
    /// At a damaged record.
    Damaged,
}

/// A record as it is in the file: its offset, kind and bytes.
pub type Raw<'a> = (u64, u16, &'a [u8]);

/// One chunk's records, validated like the schemas reader's `RecordIter` (same checks; a
/// damaged record ends the chunk with the reader's own message) but without per-record
/// decoding: the hot loop reads the 8-byte header and checks the length.
pub struct ChunkRecords<'a> {
    file: &'a MappedLog,
    chunk: &'a ChunkInfo,
    bytes: &'a [u8],
    /// File offset of `bytes[0]`.
    base: u64,
    pos: usize,
    /// `pos` at the last release of consumed bytes.
    released: usize,
    /// Consumed bytes kept before they are released ([`RELEASE_WINDOW`]).
    window: usize,
    heads: &'static FixedHeads,
    /// The chunk's compact-record context (schemas FORMAT.md, "Compact records").
    context: ChunkDecoder,
}

impl<'a> ChunkRecords<'a> {
    /// The records of `chunk`; a damaged first record is reported into `issues`.
    pub fn new(file: &'a MappedLog, chunk: &'a ChunkInfo, issues: &mut Vec<RecordIssue>) -> Self {
        let mut it = file.raw_records(chunk);
        let bytes: &'a [u8] = match it.next() {
            Some(Ok(first)) => {
                // SAFETY: the reader's raw iterator covers exactly the chunk's `readable`
                // record bytes starting at its first record (as in the file), inside the file mapping owned by
                // `file` (alive for 'a); this is the same slice, whole.
                unsafe { std::slice::from_raw_parts(first.bytes.as_ptr(), chunk.readable as usize) }
            }
            Some(Err(e)) => {
                issues.push(RecordIssue::skipping(e.offset, chunk_end(chunk), e.what));
                &[]
            }
            None => &[],
        };
        ChunkRecords {
            file,
            chunk,
            bytes,
            base: chunk.offset + CHUNK_HEADER_SIZE as u64,
            pos: 0,
            released: 0,
            window: RELEASE_WINDOW,
            heads: fixed_heads(),
            context: ChunkDecoder::new(),
        }
    }

    /// These records with `window` consumed bytes kept before they are released (instead of
    /// [`RELEASE_WINDOW`]).
    pub fn with_release_window(mut self, window: usize) -> Self {
        self.window = window;
        self
    }

    /// The next record (its file offset, kind and bytes), or `None` at the end of the chunk or
    /// at a damaged record (then reported into `issues`).
    #[inline]
    pub fn next(&mut self, issues: &mut Vec<RecordIssue>) -> Option<RawRecord<'a>> {
        let mut r = RawRecord::new(0, 0, &[]);
        self.next_into(issues, &mut r).then_some(r)
    }

    /// [`ChunkRecords::next`] into `out` (false: none, `out` unchanged).
    #[inline(always)]
    pub fn next_into(&mut self, issues: &mut Vec<RecordIssue>, out: &mut RawRecord<'a>) -> bool {
        loop {
            // Compact records come out expanded, their context records are consumed.
            match self.next_in_file(issues, out) {
                Some(Step::Record) => return true,
                Some(Step::Context) => continue,
                Some(Step::Damaged) => {
                    self.damaged(issues);
                    return false;
                }
                None => return false,
            }
        }
    }

    /// The next record of the file into `out` (unchanged unless [`Step::Record`]).
    #[inline(always)]
    fn next_in_file(
        &mut self,
        issues: &mut Vec<RecordIssue>,
        out: &mut RawRecord<'a>,
    ) -> Option<Step> {
        let (offset, kind, bytes) = self.next_raw(issues)?;
        Some(self.context.accept_into(offset, kind, bytes, out))
    }

    /// The next record as it is in the file (its offset, kind and bytes, checked), or `None`
    /// at the end of the chunk or at a damaged record (then reported into `issues`).
    #[inline(always)]
    fn next_raw(&mut self, issues: &mut Vec<RecordIssue>) -> Option<(u64, u16, &'a [u8])> {
        let rest = self.bytes.get(self.pos..)?;
        match record_header(rest, self.heads) {
            Ok(Some((kind, record))) => {
                let offset = self.base + self.pos as u64;
                self.pos += record.len();
                if self.pos - self.released >= self.window {
                    self.release_consumed();
                }
                Some((offset, kind, record))
            }
            Ok(None) => None,
            Err(()) => {
                self.damaged(issues);
                None
            }
        }
    }

    /// The next record at a glance ([`ChunkDecoder::glance`]: a hot record's deciding fields,
    /// any other record as it is in the file; context records taken in): its offset, kind,
    /// bytes and what the glance saw, never [`Glimpse::Context`] or [`Glimpse::Damaged`] —
    /// `None` at the end of the chunk or at a damaged record (reported into `issues`), as
    /// [`ChunkRecords::next`]. Read a record whole with [`ChunkRecords::expand_into`].
    #[inline(always)]
    pub fn next_glance(
        &mut self,
        issues: &mut Vec<RecordIssue>,
    ) -> Option<(u64, u16, &'a [u8], Glimpse)> {
        loop {
            let (offset, kind, bytes) = self.next_raw(issues)?;
            match self.context.glance(kind, bytes) {
                Glimpse::Context => continue,
                Glimpse::Damaged => {
                    self.damaged(issues);
                    return None;
                }
                seen => return Some((offset, kind, bytes, seen)),
            }
        }
    }

    /// Every record at a glance, in turn, with `state`: a hot one's [`Glance`] into `hot`,
    /// which says what next ([`Next`]: read it whole into `whole` first, or stop after it); any
    /// other one (as it is in the file) into `other`, which may stop the reading (false). The
    /// records, checks and reports of [`ChunkRecords::next_glance`], the reading position kept
    /// in a register.
    #[inline(always)]
    pub fn glance_each<T>(
        &mut self,
        issues: &mut Vec<RecordIssue>,
        state: &mut T,
        mut hot: impl FnMut(&mut T, Glance) -> Next,
        mut whole: impl FnMut(&mut T, &RawRecord<'a>, Glance),
        mut other: impl FnMut(&mut T, Raw<'a>) -> bool,
    ) {
        let bytes = self.bytes;
        let mut pos = self.pos;
        while let Some(rest) = bytes.get(pos..) {
            prefetch_ahead(bytes, pos + PREFETCH_AHEAD);
            let (kind, record) = match record_header(rest, self.heads) {
                Ok(Some(header)) => header,
                end => {
                    self.pos = pos;
                    if end.is_err() {
                        self.damaged(issues);
                    }
                    return;
                }
            };
            let offset = self.base + pos as u64;
            pos += record.len();
            if pos - self.released >= self.window {
                self.pos = pos;
                self.release_consumed();
            }
            let go_on = match self.context.glance(kind, record) {
                Glimpse::Hot(g) => match hot(state, g) {
                    Next::Go => true,
                    Next::Whole => {
                        let mut r = RawRecord::new(0, 0, &[]);
                        self.expand_into((offset, kind, record), &mut r);
                        whole(state, &r, g);
                        true
                    }
                    Next::Stop => false,
                },
                Glimpse::Other => other(state, (offset, kind, record)),
                Glimpse::Context => true,
                Glimpse::Damaged => {
                    self.pos = pos;
                    self.damaged(issues);
                    return;
                }
            };
            if !go_on {
                self.pos = pos;
                return;
            }
        }
    }

    /// [`ChunkRecords::next_into`] of the next `out.len()` records, each with its timestamp
    /// (a record too short to carry one gets the one before it, `last_ts`); returns how many
    /// it read, fewer at the end of the chunk or at a damaged record (reported into `issues`).
    /// The reading position is kept in a register.
    #[inline(always)]
    pub fn fill_into(
        &mut self,
        issues: &mut Vec<RecordIssue>,
        out: &mut [(u64, RawRecord<'a>)],
        last_ts: &mut u64,
    ) -> usize {
        let bytes = self.bytes;
        let mut pos = self.pos;
        // The last time is kept in a register and stored once, at the end (callgrind, real
        // `ib_write_bw` log: 3,812.2 -> 3,808.8 M instructions in all).
        let mut last = *last_ts;
        let mut n = 0;
        let mut stop = Stop::Full;
        // The lines the next call reads (a call reads a few hundred bytes).
        for line in 0..4 {
            prefetch_ahead(bytes, pos + PREFETCH_AHEAD + 64 * line);
        }
        while n < out.len() {
            let Some(rest) = bytes.get(pos..) else {
                stop = Stop::End;
                break;
            };
            let (kind, record) = match record_header(rest, self.heads) {
                Ok(Some(header)) => header,
                Ok(None) => {
                    stop = Stop::End;
                    break;
                }
                Err(()) => {
                    stop = Stop::Damaged;
                    break;
                }
            };
            let offset = self.base + pos as u64;
            pos += record.len();
            let (ts, r) = &mut out[n];
            match self.context.accept_into(offset, kind, record, r) {
                Step::Record => {
                    last = r.ts().unwrap_or(last);
                    *ts = last;
                    n += 1;
                }
                Step::Context => {}
                Step::Damaged => {
                    stop = Stop::Damaged;
                    break;
                }
            }
        }
        *last_ts = last;
        self.pos = pos;
        match stop {
            // The consumed pages are released once per call, not checked for per record: at
            // most `out.len()` records later (a few hundred bytes past the release window).
            // Measured (callgrind, real `ib_write_bw` log): `fill_half` 335.0 -> 317.6 M
            // instructions.
            Stop::Full if pos - self.released >= self.window => self.release_consumed(),
            Stop::Damaged => self.damaged(issues),
            _ => {}
        }
        n
    }

    /// The record [`ChunkRecords::next_glance`] returned last, whole, into `out` (as
    /// [`ChunkRecords::next_into`] would have read it).
    #[inline(always)]
    pub fn expand_into(
        &mut self,
        (offset, kind, bytes): (u64, u16, &'a [u8]),
        out: &mut RawRecord<'a>,
    ) {
        self.context.expand_into(offset, kind, bytes, out);
    }

    /// The next message ([`is_message`]: a message-consuming send or a successful receive
    /// completion) into `out`, the records before it passed over at a glance; false at the
    /// end of the chunk or at a damaged record (reported into `issues`).
    #[inline(always)]
    pub fn next_message_into(
        &mut self,
        issues: &mut Vec<RecordIssue>,
        out: &mut RawRecord<'a>,
    ) -> bool {
        while let Some((offset, kind, bytes, seen)) = self.next_glance(issues) {
            if let Glimpse::Hot(g) = seen {
                if is_message(&g) {
                    self.expand_into((offset, kind, bytes), out);
                    return true;
                }
            }
        }
        false
    }

    /// Releases the consumed pages of the chunk but the last one (records still held in a
    /// reorder window fault back in if touched).
    #[cold]
    fn release_consumed(&mut self) {
        let upto = self.pos.saturating_sub(4096);
        self.file
            .release(self.base + self.released as u64, self.base + upto as u64);
        self.released = upto;
    }

    #[cold]
    fn damaged(&mut self, issues: &mut Vec<RecordIssue>) {
        let at = self.base + self.pos as u64;
        let err = self
            .file
            .records(self.chunk)
            .find_map(|r| r.err())
            .map(|e| RecordIssue::skipping(e.offset, chunk_end(self.chunk), e.what))
            .unwrap_or_else(|| RecordIssue::skipping(at, chunk_end(self.chunk), "damaged record"));
        issues.push(err);
        self.pos = self.bytes.len() + 1;
    }
}
