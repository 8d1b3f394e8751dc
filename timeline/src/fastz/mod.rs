//! A fast, structure-aware zlib (RFC 1950 / RFC 1951) encoder for `compressed_packets`.
//!
//! Generic LZ77 spends most of its time *finding* matches (hashing every position, comparing
//! candidates). Trace packets do not need a search: the encoder that wrote a packet knows which
//! earlier packets look like it — the previous event on the same track with the same type, the
//! previous event of that type, the previous packet. [`FastZ::packet`] compares the new packet
//! byte-for-byte against those few candidates (eight bytes at a time), and emits runs of equal
//! bytes as matches and the rest (mostly timestamp deltas) as literals. Tokens are entropy-coded
//! with per-block dynamic Huffman codes built from their frequencies.
//!
//! The output is an ordinary zlib stream: any inflate (the trace processor's zlib, flate2)
//! decodes it; the tests decode every block and compare it with the raw bytes.

mod bits;
mod codes;
mod repeat;

use bits::{eq_mask, same, Bits};
use codes::*;

/// Tokens per deflate block (each block gets new Huffman codes).
const BLOCK_TOKENS: usize = 1 << 15;
/// Deflate window: the farthest distance a match may reach back.
pub const WINDOW: usize = 32768;
/// Candidate table size (direct-mapped, [`key_slot`]).
const KEY_SLOTS: usize = 4096;

/// The candidate slot of a packet key `(id << 3 | type) + 1` ([`FastZ::packet`]): ids that
/// differ in their low 32 bits only (a caller's consecutive tracks) take consecutive pairs of
/// slots, four to a cache line (2 048 ids before one wraps around; the high 32 bits hashed
/// into an offset), an id's odd and even types one each (a slice's begin and end). A track's
/// first packet in a block finds no candidate of its key; hashing each key alone made that
/// lookup a cache miss per new lane (perf: two thirds of `packet`'s samples on the 1024-rank
/// set), where consecutive lanes now read consecutive lines.
#[inline(always)]
fn key_slot(key: u64) -> usize {
    let k = key.wrapping_sub(1);
    (id_line(k >> 3) << 1 | (k & 1) as usize) & (KEY_SLOTS - 1)
}

/// The line of a direct-mapped table where a caller's id (a track uuid) goes: its low 32 bits
/// plus a hash of its high 32 bits, so that consecutive ids take consecutive lines and ids
/// differing in their high bits only (two processes' lanes) do not share theirs. The
/// encoder's template table and [`key_slot`] both use it (masked to their size).
#[inline(always)]
pub(crate) fn id_line(id: u64) -> usize {
    (id as u32).wrapping_add(((id >> 32) as u32).wrapping_mul(0x9e37_79b1)) as usize
}

/// Bytes compared per step (one equality mask).
const SEG: usize = 64;
/// Trailing bytes of a small packet that may differ from a candidate that is still taken at
/// once (the timestamp delta's tag and varint, written last).
const TAIL: usize = 3;

/// Encoder of a sequence's `compressed_packets` blocks: each [`FastZ::finish`] ends one zlib
/// stream. Tokens go straight to the bit writer: every deflate block is coded with Huffman
/// codes built from the symbol frequencies of the block before it (all symbols kept codable);
/// the very first block uses the fixed code.
#[cfg_attr(test, derive(Clone))]
pub struct FastZ {
    /// Symbol counts of the block: literal/length symbols (286 used; 512 entries, so that a
    /// length symbol indexes them without a bounds check) and distance codes (30 used).
    lit_freq: [u32; 512],
    dist_freq: [u32; 32],
    codes: Box<Tables2>,
    /// [`code_lengths`]'s working arrays.
    scratch: Box<HuffmanScratch>,
    tokens: usize,
    bits: Bits,
    /// Candidate table: (key, absolute packet start + 1).
    by_key: Box<[(u64, u64)]>,
    /// Last packet start + 1 (absolute) per event type.
    by_type: [u64; 8],
    prev: u64,
    /// Absolute offset of the current stream's first raw byte.
    stream: u64,
    /// Raw bytes of the current stream already tokenized.
    done: usize,
    /// Frequencies seen yet (else the next block uses the fixed code).
    trained: bool,
    /// Adler-32 of the stream's raw bytes before `summed` (an offset in the caller's buffer;
    /// bytes the caller dropped ([`FastZ::slide`]) included).
    adler: u32,
    summed: usize,
    /// The match in progress: `pend_len` bytes ending at `done` equal those `pend_dist`
    /// earlier; not yet written, so that the next packet can extend it.
    pend_len: usize,
    pend_dist: usize,
    /// Distance of the latest match (0: none in this stream): the first candidate.
    last_dist: usize,
    /// No stream started since the last one ended: the next packet starts one (a sequence
    /// that ends never pays for the code tables of a block it does not write).
    idle: bool,
    /// The code of the last match distance written in this block (repeats of a burst take
    /// the same distance match after match).
    dist: DistCode,
}

/// A match distance's code, extra bits appended, and its bit count.
#[derive(Clone, Copy, Default)]
struct DistCode {
    /// The distance (0: none).
    d: usize,
    bits: u64,
    n: u32,
    /// The distance code (< 30).
    code: usize,
}

impl Default for FastZ {
    fn default() -> Self {
        Self::new()
    }
}

impl FastZ {
    pub fn new() -> Self {
        let mut z = FastZ {
            lit_freq: [0; 512],
            dist_freq: [0; 32],
            codes: Box::new(Tables2::fixed().clone()),
            scratch: HuffmanScratch::new(),
            tokens: 0,
            bits: Bits {
                out: Vec::new(),
                pos: 0,
                acc: 0,
                n: 0,
            },
            by_key: vec![(0u64, 0u64); KEY_SLOTS].into_boxed_slice(),
            by_type: [0; 8],
            prev: 0,
            stream: 0,
            done: 0,
            trained: false,
            adler: 1,
            summed: 0,
            pend_len: 0,
            pend_dist: 0,
            last_dist: 0,
            idle: false,
            dist: DistCode::default(),
        };
        z.start_stream();
        z
    }

    /// Makes this encoder what [`FastZ::new`] makes, keeping its buffers: the candidate
    /// table's entries all lie before the next stream, where no packet ever takes them.
    pub fn renew(&mut self) {
        self.stream += self.done as u64 + WINDOW as u64 + 1;
        self.lit_freq = [0; 512];
        self.dist_freq = [0; 32];
        self.tokens = 0;
        self.bits.pos = 0;
        self.bits.acc = 0;
        self.bits.n = 0;
        self.by_type = [0; 8];
        self.prev = 0;
        self.done = 0;
        self.trained = false;
        self.pend_len = 0;
        self.pend_dist = 0;
        self.last_dist = 0;
        // `start_stream` puts the fixed code back (not trained) and resets the rest.
        self.start_stream();
    }

    /// Starts the stream if the last one ended (see `idle`).
    #[inline(always)]
    pub fn wake(&mut self) {
        if self.idle {
            self.start_stream();
        }
    }

    #[cold]
    fn start_stream(&mut self) {
        self.idle = false;
        self.bits.acc = 0;
        self.bits.n = 0;
        self.bits.pos = 0;
        // zlib header: deflate, 32 KiB window, fastest level, no dictionary.
        self.bits.room(2);
        self.bits.out[..2].copy_from_slice(&[0x78, 0x01]);
        self.bits.pos = 2;
        self.done = 0;
        self.adler = 1;
        self.summed = 0;
        self.pend_len = 0;
        self.last_dist = 0;
        self.start_block();
    }

    /// Starts a (non-final) block coded with codes from the frequencies counted so far.
    fn start_block(&mut self) {
        if !self.trained {
            self.codes.as_mut().clone_from(Tables2::fixed());
            self.bits.put(0b010, 3); // BFINAL 0, BTYPE 01
        } else {
            // Every symbol stays codable (+1): the block's own tokens are not known yet.
            let mut lf = [0u32; 286];
            for (f, &n) in lf.iter_mut().zip(&self.lit_freq) {
                *f = (n >> 1) + 1;
            }
            let mut df = [0u32; DIST_CODES];
            for (f, &n) in df.iter_mut().zip(&self.dist_freq) {
                *f = (n >> 1) + 1;
            }
            let ll = code_lengths(&lf, 15, &mut self.scratch);
            let dl = code_lengths(&df, 15, &mut self.scratch);
            self.write_dynamic_header(&ll, &dl);
            *self.codes = Tables2::from_lengths(&ll, &dl);
        }
        self.lit_freq = [0; 512];
        self.dist_freq = [0; 32];
        self.tokens = 0;
        // The codes changed.
        self.dist = DistCode::default();
    }

    fn write_dynamic_header(&mut self, ll: &[u8], dl: &[u8]) {
        let mut all = ll.to_vec();
        all.extend_from_slice(dl);
        let runs = rle(&all);
        let mut cl_freq = [0u32; 19];
        for &(s, _) in &runs {
            cl_freq[s as usize] += 1;
        }
        let cll = code_lengths(&cl_freq, 7, &mut self.scratch);
        let cl = canonical(&cll);
        let hclen = (4..=19)
            .rev()
            .find(|&n| cll[CL_ORDER[n - 1]] != 0)
            .unwrap_or(4);
        let b = &mut self.bits;
        b.put(0b100, 3); // BFINAL 0, BTYPE 10
        b.put((ll.len() - 257) as u64, 5);
        b.put((dl.len() - 1) as u64, 5);
        b.put((hclen - 4) as u64, 4);
        for &s in &CL_ORDER[..hclen] {
            b.put(cll[s] as u64, 3);
        }
        for &(s, x) in &runs {
            let (c, l) = cl.codes[s as usize];
            b.put(c as u64, l as u32);
            match s {
                16 => b.put(x as u64, 2),
                17 => b.put(x as u64, 3),
                18 => b.put(x as u64, 7),
                _ => {}
            }
        }
    }

    /// Ends the current block (end-of-block symbol).
    fn end_block(&mut self) {
        let e = self.codes.lit[256];
        self.bits.put((e & 0xffff) as u64, e >> 16);
        self.lit_freq[256] += 1;
        self.trained = true;
    }

    /// Writes `bytes` as literals (their count not added to `tokens`): their codes gathered
    /// in a local word, written three at a time or more (codes are at most 15 bits); up to
    /// three (a timestamp delta's bytes, mostly) in one word without a check between them.
    #[inline(always)]
    fn put_lits(&mut self, bytes: &[u8]) {
        let codes = &self.codes.lit;
        let (mut acc, mut n) = (0u64, 0u32);
        if bytes.len() <= 3 {
            for &b in bytes {
                let e = codes[b as usize];
                acc |= ((e & 0xffff) as u64) << n;
                n += e >> 16;
                self.lit_freq[b as usize] += 1;
            }
            return self.bits.put(acc, n);
        }
        for &b in bytes {
            let e = codes[b as usize];
            acc |= ((e & 0xffff) as u64) << n;
            n += e >> 16;
            self.lit_freq[b as usize] += 1;
            if n > 56 - 15 {
                self.bits.put(acc, n);
                (acc, n) = (0, 0);
            }
        }
        self.bits.put(acc, n);
    }

    /// Writes a match of `len` bytes (3..=258) at distance `dist`.
    #[inline(always)]
    fn matched(&mut self, len: usize, dist: usize) {
        debug_assert!((3..=MAX_MATCH).contains(&len));
        let le = self.codes.len[(len - 3) as u8 as usize];
        if dist != self.dist.d {
            self.dist = self.dist_code(dist);
        }
        let dist = self.dist;
        let ln = (le >> 32) as u32 & 0xff;
        self.bits
            .put(le & 0xffff_ffff | dist.bits << ln, ln + dist.n);
        self.lit_freq[(257 + (le >> 40) as usize) & 511] += 1;
        self.dist_freq[dist.code & 31] += 1;
    }

    /// Distance `d`'s code in the current block ([`FastZ::dist`]).
    #[inline]
    fn dist_code(&self, d: usize) -> DistCode {
        let dc = dist_code(d);
        let de = self.codes.dist[dc];
        let dl = de >> 16 & 0xff;
        DistCode {
            d,
            bits: (de & 0xffff) as u64 | ((d - DIST_BASE[dc] as usize) as u64) << dl,
            n: dl + (de >> 24),
            code: dc,
        }
    }

    /// Tokenizes raw bytes `buf[start..]` (one packet, written after everything tokenized so
    /// far). Candidates are the distance of the latest match (the packets before repeat
    /// earlier ones: the match runs on across packets, up to 258 bytes a token), then the
    /// first there is of: the last packet with the same `key` (0: none), the last of event
    /// type `ty` (< 8), the previous packet; of the two, the one whose equal bytes in the
    /// packet's first 64 cost fewer bits is used. Comparing the later candidates too (the best
    /// of four) made the real logs' output 0.001–0.3 % smaller (LAMMPS's 0.3 %, HPC
    /// Challenge's 161 bytes) and the 1024-rank set's 0.3 %, for 2 % of that conversion's
    /// instructions (a lane's or track's first packet: most of its packets).
    #[inline]
    pub fn packet(&mut self, buf: &[u8], start: usize, key: u64, ty: usize) {
        self.wake();
        debug_assert_eq!(start, self.done);
        let end = buf.len();
        let abs = self.stream + start as u64;
        let ty = ty & 7;
        let lo = self.stream + 1;
        let dist = |c: u64| {
            if c >= lo && abs + 1 - c <= WINDOW as u64 {
                (abs + 1 - c) as usize
            } else {
                0
            }
        };
        // The candidates' packets (absolute start + 1); the tables now point at this packet.
        let mut ck = 0;
        if key != 0 {
            let slot = key_slot(key);
            let e = self.by_key[slot];
            if e.0 == key {
                ck = e.1;
            }
            self.by_key[slot] = (key, abs + 1);
        }
        let (ct, cp) = (self.by_type[ty], self.prev);
        self.by_type[ty] = abs + 1;
        self.prev = abs + 1;
        let seg = (end - start).min(SEG);
        // The mask of a packet equal throughout; packets longer than a segment (or empty)
        // are never taken as a whole.
        let full = (seg == end - start && seg > 0).then(|| u64::MAX >> (64 - seg));
        // (mask of the first segment, distance); its estimated cost in bits is computed only
        // when another candidate is compared with it (the count of ones takes a dozen
        // instructions without the target's population count).
        let mut best = (0u64, 0usize);
        // The latest distance first: it continues the pending match, and is taken without
        // looking further when at most one byte differs or only the packet's last `TAIL`
        // bytes (where small packets keep their timestamp delta: no other candidate can do
        // better than one match and those literals).
        let dr = if self.last_dist <= start {
            self.last_dist
        } else {
            0
        };
        if dr != 0 {
            let m = eq_mask(buf, start, start - dr, seg);
            if Some(m) == full {
                self.run(buf, start, seg, dr);
                self.packet_done(buf, end);
                return;
            }
            best = (m, dr);
        }
        // At most one byte of the segment differs, or only the last `TAIL` ones.
        let differ = !best.0 & u64::MAX.checked_shr(64 - seg as u32).unwrap_or(0);
        let good = differ & differ.wrapping_sub(1) == 0
            || (full.is_some() && (!best.0).trailing_zeros() as usize + TAIL >= seg);
        if best.1 == 0 || !good {
            for d in [dist(ck), dist(ct), dist(cp)] {
                if d == 0 || d == best.1 || d == dr {
                    continue;
                }
                let m = eq_mask(buf, start, start - d, seg);
                if Some(m) == full {
                    // The whole packet repeats (the common case in bursts): one match, or
                    // the pending one extended.
                    self.run(buf, start, seg, d);
                    self.packet_done(buf, end);
                    return;
                }
                if best.1 == 0 || self.cost(m, seg, d) < self.cost(best.0, seg, best.1) {
                    best = (m, d);
                }
                // The first candidate there is: the others are not compared.
                break;
            }
        }
        let (mask, d) = best;
        self.tokens_at(buf, start, mask, d);
    }

    /// Tokenizes one small packet `buf[start..]` (at most 64 bytes) against the packet the
    /// caller knows it resembles most, `d` bytes earlier (the last one of its track and type):
    /// no other candidate is tried. `ty` as in [`FastZ::packet`].
    #[inline(always)]
    pub fn against(&mut self, buf: &[u8], start: usize, d: usize, ty: usize) {
        self.wake();
        debug_assert_eq!(start, self.done);
        let end = buf.len();
        debug_assert!(0 < d && d <= start && d <= WINDOW && end - start <= SEG);
        let abs = self.stream + start as u64;
        self.by_type[ty & 7] = abs + 1;
        self.prev = abs + 1;
        let seg = end - start;
        let full = u64::MAX >> (64 - seg.max(1));
        // A packet equal throughout to the one at the latest match distance (the same place
        // in the burst before) goes on with that match.
        let dr = self.last_dist;
        if dr != 0 && dr != d && dr <= start && seg > 0 && same(buf, start, start - dr, seg) {
            self.run(buf, start, seg, dr);
            return self.packet_done(buf, end);
        }
        let m = eq_mask(buf, start, start - d, seg);
        if seg > 0 && m == full {
            self.run(buf, start, seg, d);
            self.packet_done(buf, end);
        } else {
            self.tokens_at(buf, start, m, d);
        }
    }

    /// Writes a packet `buf[start..]` of at most [`SEG`] bytes as runs of the bytes `d`
    /// earlier where `mask` says they are equal — runs of at least 3 bytes, or any run at its
    /// start that goes on with the pending match — and literals elsewhere: the same tokens as
    /// [`FastZ::tokens_at`], one step per run and stretch of literals.
    #[inline(always)]
    fn tokens_small(&mut self, buf: &[u8], start: usize, mask: u64, d: usize) {
        let end = buf.len();
        let n = end - start;
        debug_assert!(0 < n && n <= SEG);
        let valid = u64::MAX >> (64 - n);
        let m = mask & valid;
        // Bytes inside runs of at least 3 equal bytes.
        let r3 = m & (m >> 1) & (m >> 2);
        let mut long = r3 | (r3 << 1) | (r3 << 2);
        if self.pend_len > 0 && self.pend_dist == d {
            // The leading equal bytes continue the match in progress (all 64 equal are a
            // run of 3 already: the shift stays below 64).
            let lead = (!m).trailing_zeros();
            long |= (1u64 << lead.min(63)) - 1;
        }
        long &= valid;
        let mut i = 0;
        loop {
            let r = (!(long >> i)).trailing_zeros() as usize;
            if r > 0 {
                self.run(buf, start + i, r, d);
                i += r;
                if i >= n {
                    break;
                }
            }
            let l = ((long >> i).trailing_zeros() as usize).min(n - i);
            self.flush(buf, start + i);
            self.put_lits(&buf[start + i..start + i + l]);
            self.tokens += l;
            i += l;
            if i >= n {
                break;
            }
        }
        self.packet_done(buf, end);
    }

    /// Writes `buf[start..]` as runs of the bytes `d` earlier where `mask` (the equal bytes of
    /// the first segment) says they are equal, and literals elsewhere.
    #[inline(always)]
    fn tokens_at(&mut self, buf: &[u8], start: usize, mask: u64, d: usize) {
        if buf.len() - start <= SEG && buf.len() > start {
            self.tokens_small(buf, start, mask, d)
        } else {
            self.tokens_long(buf, start, mask, d)
        }
    }

    /// [`FastZ::tokens_at`] segment by segment, byte run by byte run (any packet length).
    #[inline]
    fn tokens_long(&mut self, buf: &[u8], start: usize, mut mask: u64, d: usize) {
        let end = buf.len();
        let mut pos = start;
        loop {
            let seg = (end - pos).min(SEG);
            let mut i = 0;
            while i < seg {
                let run = ((!(mask >> i)).trailing_zeros() as usize).min(seg - i);
                if run >= 3 || (run > 0 && self.pend_len > 0 && self.pend_dist == d) {
                    self.run(buf, pos + i, run, d);
                    i += run;
                } else {
                    // Literals up to the next equal byte (at least one).
                    self.flush(buf, pos + i);
                    let lits = ((mask >> i).trailing_zeros() as usize).clamp(1, seg - i);
                    self.put_lits(&buf[pos + i..pos + i + lits]);
                    self.tokens += lits;
                    i += lits;
                }
            }
            pos += seg;
            if pos >= end {
                break;
            }
            let seg = (end - pos).min(SEG);
            mask = if d == 0 {
                0
            } else {
                eq_mask(buf, pos, pos - d, seg)
            };
        }
        self.packet_done(buf, end);
    }

    /// Estimated bits of the first `seg` bytes of a packet coded against distance `d` whose
    /// equal bytes are `m`: literals ≈ 8 bits, each match ≈ 10 bits plus the distance's extra
    /// bits, none for the pending match continued.
    #[inline]
    fn cost(&self, m: u64, seg: usize, d: usize) -> u32 {
        let runs = (m & !(m << 1)).count_ones();
        let cont = (m & 1 != 0 && self.pend_len > 0 && self.pend_dist == d) as u32;
        8 * (seg as u32 - m.count_ones()) + (runs - cont) * (10 + DIST_EXTRA[dist_code(d)] as u32)
    }

    /// `n` bytes at `at` equal those `d` earlier: extends the pending match or starts one.
    #[inline(always)]
    fn run(&mut self, buf: &[u8], at: usize, n: usize, d: usize) {
        if self.pend_len == 0 || self.pend_dist != d {
            self.flush(buf, at);
            self.pend_dist = d;
            self.last_dist = d;
        }
        self.pend_len += n;
        if self.pend_len > MAX_MATCH {
            // n ≤ 64: one full-length token leaves the rest pending (it may be < 3 bytes, then
            // written as literals unless the match goes on).
            self.matched(MAX_MATCH, d);
            self.tokens += 1;
            self.pend_len -= MAX_MATCH;
        }
    }

    /// Writes the pending match, which ends at `at` (as literals when shorter than 3).
    #[inline(always)]
    fn flush(&mut self, buf: &[u8], at: usize) {
        let len = self.pend_len;
        if len >= 3 {
            self.matched(len, self.pend_dist);
            self.tokens += 1;
            self.pend_len = 0;
        } else if len > 0 {
            self.flush_short(buf, at);
        }
    }

    /// A pending match of 1 or 2 bytes, written as literals.
    #[cold]
    #[inline(never)]
    fn flush_short(&mut self, buf: &[u8], at: usize) {
        let len = self.pend_len;
        self.put_lits(&buf[at - len..at]);
        self.tokens += len;
        self.pend_len = 0;
    }

    #[inline(always)]
    fn packet_done(&mut self, buf: &[u8], end: usize) {
        self.done = end;
        if self.tokens >= BLOCK_TOKENS {
            self.next_block(buf, end);
        }
    }

    /// The block is full: the pending match written, the next block started.
    #[cold]
    #[inline(never)]
    fn next_block(&mut self, buf: &[u8], end: usize) {
        self.flush(buf, end);
        self.end_block();
        self.start_block();
    }

    /// Writes the pending match (which ends at `from`), then `buf[from..to]` as literals.
    #[inline(always)]
    fn lits(&mut self, buf: &[u8], from: usize, to: usize) {
        if from == to {
            return;
        }
        self.flush(buf, from);
        self.put_lits(&buf[from..to]);
        self.tokens += to - from;
    }

    /// Tokenizes bytes that have no useful candidates (literals and plain runs).
    pub fn raw(&mut self, buf: &[u8], start: usize) {
        self.packet(buf, start, 0, 7);
    }

    /// Bytes of the current stream's zlib data written so far (0 between streams).
    pub fn compressed_len(&self) -> usize {
        if self.idle {
            0
        } else {
            self.bits.pos
        }
    }

    /// Whether every byte of `buf` (the caller's raw bytes) is tokenized.
    pub fn caught_up(&self, buf: &[u8]) -> bool {
        !self.idle && self.done == buf.len()
    }

    /// The caller drops its first `k` raw bytes (a stream longer than the caller keeps, see
    /// [`crate::perfetto`]'s sliding blocks): they are added to the checksum, and offsets
    /// move `k` back. The candidates in the dropped bytes are forgotten (the stream's start
    /// moves on to the first byte kept). Only when [`FastZ::caught_up`], and `k` at least a
    /// window back from the end (later packets never reach what was dropped).
    pub fn slide(&mut self, buf: &[u8], k: usize) {
        debug_assert!(self.caught_up(buf) && k + WINDOW <= buf.len());
        self.checksum(buf);
        self.summed -= k;
        self.done -= k;
        self.stream += k as u64;
    }

    /// Adds the raw bytes tokenized since the last call to the stream's checksum. The caller
    /// may call it at any time (bytes tokenized are final): right after writing a batch of
    /// packets their bytes are still in the cache, where a block's whole checksum at its end
    /// read them back from memory.
    pub fn checksum(&mut self, buf: &[u8]) {
        if self.done > self.summed {
            self.adler = zlib_rs::adler32::adler32(self.adler, &buf[self.summed..self.done]);
            self.summed = self.done;
        }
    }

    /// Ends the stream over raw bytes `buf` (everything given to [`FastZ::packet`] but what
    /// [`FastZ::slide`] dropped) and returns
    /// the zlib bytes; the encoder starts a new stream.
    pub fn finish(&mut self, buf: &[u8]) -> Vec<u8> {
        self.finish_with(buf, |z| z.to_vec())
    }

    /// Like [`FastZ::finish`], handing the zlib bytes to `f` without copying them first.
    pub fn finish_with<R>(&mut self, buf: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
        self.wake();
        debug_assert_eq!(buf.len(), self.done);
        self.flush(buf, buf.len());
        self.end_block();
        // A final, empty block with the fixed code: BFINAL 1, BTYPE 01, end of block (7 zeros).
        self.bits.put(0b011, 3);
        self.bits.put(0, 7);
        self.bits.align();
        self.checksum(buf);
        let adler = self.adler;
        self.bits.room(4);
        let p = self.bits.pos;
        self.bits.out[p..p + 4].copy_from_slice(&adler.to_be_bytes());
        let r = f(&self.bits.out[..p + 4]);
        self.stream += buf.len() as u64 + WINDOW as u64;
        self.idle = true;
        r
    }
}

#[cfg(test)]
mod tests;
