//! Packets the caller knows to repeat an earlier one (its track's last packet of the same type
//! and name, written from it as a template): tokenized from what the caller says is equal,
//! nothing compared or searched.

use super::bits::{eq_mask, eq_mask_last_word, same};
use super::codes::MAX_MATCH;
use super::{FastZ, BLOCK_TOKENS, SEG, WINDOW};

impl FastZ {
    /// Makes the packet at `start` the last of type `ty` (< 8) and the previous packet:
    /// [`FastZ::packet`]'s candidates.
    #[inline(always)]
    fn seen(&mut self, start: usize, ty: usize) {
        let abs = self.stream + start as u64 + 1;
        self.by_type[ty & 7] = abs;
        self.prev = abs;
    }

    /// Tokenizes one packet `buf[start..]` equal throughout to the bytes `d` earlier (at most
    /// [`SEG`] bytes): the match in progress goes on over it when it is at `d`, else it is
    /// written and the packet starts one. The stream is started ([`FastZ::wake`]). `ty` as in
    /// [`FastZ::packet`]. Whether the match in progress went on.
    #[inline(always)]
    pub fn repeat_same(&mut self, buf: &[u8], start: usize, d: usize, ty: usize) -> bool {
        debug_assert!(!self.idle && start == self.done);
        let end = buf.len();
        debug_assert!(end - start <= SEG && 0 < d && d <= start && d <= WINDOW);
        debug_assert!(buf[start..] == buf[start - d..end - d]);
        self.seen(start, ty);
        if self.pend_len > 0 && self.pend_dist == d {
            self.pend_len += end - start;
            self.done = end;
            if self.pend_len > MAX_MATCH {
                self.long_match(buf, end);
            }
            true
        } else {
            self.flush(buf, start);
            self.pend_dist = d;
            self.last_dist = d;
            self.pend_len = end - start;
            self.packet_done(buf, end);
            false
        }
    }

    /// Tokenizes one packet `buf[start..]` that the caller knows repeats the packet `d` bytes
    /// earlier (the last one of its track and type) in its first byte, its bytes `2..plen`,
    /// the `tail_eq` bytes after them and, when `same_len`, its second byte (the frame
    /// length): nothing is compared or searched. A pending match at `d` goes on, else the
    /// packet is one match at `d` and literals. The stream is started ([`FastZ::wake`]).
    /// `ty` (< 8) as in [`FastZ::packet`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn repeat(
        &mut self,
        buf: &[u8],
        start: usize,
        d: usize,
        plen: usize,
        same_len: bool,
        tail_eq: usize,
        ty: usize,
    ) {
        debug_assert!(!self.idle && start == self.done);
        let end = buf.len();
        let n = end - start;
        debug_assert!(2 <= plen && plen + tail_eq <= n && n <= SEG && d <= start && d <= WINDOW);
        self.seen(start, ty);
        let cont = self.pend_len > 0 && self.pend_dist == d;
        if same_len {
            // The first `eq` bytes repeat: they go on with the match in progress at `d`, or
            // start one; the rest (some of the delta) are literals.
            let eq = plen + tail_eq;
            debug_assert!(eq >= 3);
            let mut len = eq;
            if cont {
                len += self.pend_len;
            } else {
                self.flush(buf, start);
                self.pend_dist = d;
                self.last_dist = d;
            }
            if len > MAX_MATCH {
                self.matched(MAX_MATCH, d);
                self.tokens += 1;
                len -= MAX_MATCH;
            }
            self.pend_len = len;
            if eq < n {
                self.flush(buf, start + eq);
                self.put_lits(&buf[start + eq..end]);
                self.tokens += n - eq;
            }
            return self.packet_done(buf, end);
        }
        // The first byte joins a pending match at `d`, else it is a literal (as is the frame
        // length).
        if cont {
            self.run(buf, start, 1, d);
        } else {
            self.lits(buf, start, start + 1);
        }
        self.lits(buf, start + 1, start + 2);
        let head = 2;
        let eq = plen - head + tail_eq;
        if eq >= 3 || (eq > 0 && self.pend_len > 0 && self.pend_dist == d) {
            self.run(buf, start + head, eq, d);
            self.lits(buf, start + head + eq, end);
        } else {
            self.lits(buf, start + head, end);
        }
        self.packet_done(buf, end);
    }

    /// Tokenizes one small packet `buf[start..]` written from the packet `d` bytes earlier (the
    /// last one of its track and type) whose bytes `0..known` it repeats but for its frame
    /// length (byte 1) and byte `te` (its TrackEvent's length): the tokens of
    /// [`FastZ::against`], only those two bytes and the ones from `known` on compared. The
    /// stream is started ([`FastZ::wake`]); `ty` as in [`FastZ::packet`].
    #[inline(always)]
    pub fn against_template(
        &mut self,
        buf: &[u8],
        start: usize,
        (d, known, te): (usize, usize, usize),
        ty: usize,
    ) {
        debug_assert!(!self.idle && start == self.done);
        let end = buf.len();
        let seg = end - start;
        debug_assert!(0 < d && d <= start && d <= WINDOW && seg <= SEG);
        debug_assert!(1 < te && te < known && known < seg);
        let b = start - d;
        debug_assert!((2..known).all(|i| i == te || buf[start + i] == buf[b + i]));
        self.seen(start, ty);
        let full = u64::MAX >> (64 - seg);
        // A packet equal throughout to the one at the latest match distance (the same place
        // in the burst before) goes on with that match.
        let dr = self.last_dist;
        if dr != 0 && dr != d && dr <= start && same(buf, start, start - dr, seg) {
            self.run(buf, start, seg, dr);
            return self.packet_done(buf, end);
        }
        let m = if seg - known <= 8 && seg >= 8 {
            // The bytes from `known` on lie in the last word; the rest are known equal (the
            // bytes of the word before `known` equal too: both agree).
            let mut m = ((1u64 << known) - 1) & !(1 << 1 | 1 << te);
            m |= ((buf[start + 1] == buf[b + 1]) as u64) << 1;
            m |= ((buf[start + te] == buf[b + te]) as u64) << te;
            m | eq_mask_last_word(buf, start, b, seg)
        } else {
            eq_mask(buf, start, b, seg)
        };
        debug_assert_eq!(m, eq_mask(buf, start, b, seg));
        if m == full {
            self.run(buf, start, seg, d);
            self.packet_done(buf, end);
        } else {
            self.tokens_at(buf, start, m, d);
        }
    }

    /// The distance of the match in progress (0: none), which packets equal throughout to
    /// the bytes that far back extend ([`FastZ::extend_run`]), and how many bytes those may
    /// take before the match's full-length tokens fill the block (the packet that passes it
    /// ends the block).
    #[inline(always)]
    pub fn run_at(&self) -> (usize, usize) {
        if self.pend_len == 0 {
            return (0, 0);
        }
        let tokens = BLOCK_TOKENS.saturating_sub(self.tokens);
        (
            self.pend_dist,
            (MAX_MATCH * tokens).saturating_sub(self.pend_len),
        )
    }

    /// Tokenizes the packets `buf[done..]` (tokenized so far: `done`), each equal throughout
    /// to the bytes [`FastZ::run_at`]'s distance earlier and together at most its room
    /// longer, or the last of them the first to pass it: the match in progress goes on over
    /// them, its full-length tokens written (then the block ends when they fill it). The same
    /// tokens as [`FastZ::repeat_same`] for each packet in turn, which writes a full-length
    /// token when the match passes one and ends the block only then. `last`: start + 1 of the
    /// last of those packets of each type (0: none; the types of [`FastZ::packet`], below
    /// 4), `prev` that of the last.
    #[inline]
    pub fn extend_run(&mut self, buf: &[u8], last: &[usize; 4], prev: usize) {
        debug_assert!(!self.idle && self.pend_len > 0 && prev > self.done);
        let end = buf.len();
        debug_assert!(buf[self.done..] == buf[self.done - self.pend_dist..end - self.pend_dist]);
        for (ty, &l) in last.iter().enumerate() {
            if l != 0 {
                self.by_type[ty] = self.stream + l as u64;
            }
        }
        self.prev = self.stream + prev as u64;
        self.pend_len += end - self.done;
        self.done = end;
        if self.pend_len > MAX_MATCH {
            self.long_match(buf, end);
        }
    }

    /// A pending match longer than one token: the full-length tokens it holds are written
    /// (the rest stays pending), and the block ends when it is full.
    #[cold]
    #[inline(never)]
    fn long_match(&mut self, buf: &[u8], end: usize) {
        while self.pend_len > MAX_MATCH {
            self.matched(MAX_MATCH, self.pend_dist);
            self.tokens += 1;
            self.pend_len -= MAX_MATCH;
        }
        self.packet_done(buf, end);
    }
}
