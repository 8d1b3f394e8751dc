//! The bit writer of [`super::FastZ`] and the byte comparisons that find its matches.

/// LSB-first bit writer with a 64-bit buffer: `acc` holds the `n` (< 64) bits after
/// `out[..pos]`, written as a whole word when it fills ([`Bits::put`] grows `out` as needed;
/// bytes written directly need [`Bits::room`] first).
#[cfg_attr(test, derive(Clone))]
pub(super) struct Bits {
    pub(super) out: Vec<u8>,
    pub(super) pos: usize,
    pub(super) acc: u64,
    pub(super) n: u32,
}

impl Bits {
    /// Room for `bytes` more bytes (and the buffered word).
    #[inline(always)]
    pub(super) fn room(&mut self, bytes: usize) {
        let need = self.pos + bytes + 16;
        if self.out.len() < need {
            self.grow(need);
        }
    }

    #[cold]
    fn grow(&mut self, need: usize) {
        self.out.resize(need.max(2 * self.out.len()), 0);
    }

    /// Writes the word `w` at `pos` after growing `out` ([`Bits::put`]'s rare case).
    #[cold]
    #[inline(never)]
    fn grow_put(&mut self, w: u64) {
        self.grow(self.pos + 1024);
        self.out[self.pos..self.pos + 8].copy_from_slice(&w.to_le_bytes());
    }

    /// Appends the low `n` bits of `v` (n ≤ 56, no bits above them).
    #[inline(always)]
    pub(super) fn put(&mut self, v: u64, n: u32) {
        let k = self.n + n;
        if k < 64 {
            self.acc |= v << self.n;
            self.n = k;
        } else {
            // The buffer fills (self.n ≥ 8: the shifts stay below 64): one word out, the
            // rest of `v` kept.
            let w = self.acc | v << self.n;
            match self.out.get_mut(self.pos..self.pos + 8) {
                Some(o) => o.copy_from_slice(&w.to_le_bytes()),
                None => self.grow_put(w),
            }
            self.pos += 8;
            self.acc = v >> (64 - self.n);
            self.n = k - 64;
        }
    }

    /// Writes the buffered bits, the last byte padded with zeros.
    pub(super) fn align(&mut self) {
        self.room(8);
        self.out[self.pos..self.pos + 8].copy_from_slice(&self.acc.to_le_bytes());
        self.pos += self.n.div_ceil(8) as usize;
        self.acc = 0;
        self.n = 0;
    }
}

/// The little-endian word of an 8-byte chunk.
#[inline(always)]
fn word(c: &[u8]) -> u64 {
    u64::from_le_bytes(c.try_into().expect("8 bytes"))
}

/// Whether `buf[a..a + n] == buf[b..b + n]` (b < a, 0 < n ≤ 64): `eq_mask(buf, a, b, n)` all
/// ones, without building the mask.
#[inline(always)]
pub(super) fn same(buf: &[u8], a: usize, b: usize, n: usize) -> bool {
    // Both ranges sliced once: the word reads within them need no checks.
    let (x, y) = (&buf[a..a + n], &buf[b..b + n]);
    if n < 8 {
        return x == y;
    }
    // The word ending at n first (a small packet's timestamp delta and value: where packets
    // of a burst differ), then the words at 0, 8, … (the last overlapping it).
    word(&x[n - 8..]) == word(&y[n - 8..])
        && x.chunks_exact(8)
            .zip(y.chunks_exact(8))
            .all(|(p, q)| word(p) == word(q))
}

/// 8-bit mask of the zero bytes of x.
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    const LO7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HI: u64 = 0x8080_8080_8080_8080;
    // High bit of each byte set when the byte is non-zero.
    let nz = (((x & LO7) + LO7) | x) & HI;
    ((!nz & HI) >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
}

/// Bits `n − 8 .. n` of [`eq_mask`]`(buf, a, b, n)` (8 ≤ n ≤ 64): the equal bytes of the
/// last word.
#[inline(always)]
pub(super) fn eq_mask_last_word(buf: &[u8], a: usize, b: usize, n: usize) -> u64 {
    let (x, y) = (&buf[a + n - 8..a + n], &buf[b + n - 8..b + n]);
    zero_bytes(word(x) ^ word(y)) << (n - 8)
}

/// Bit i (i < n ≤ 64) set when `buf[a + i] == buf[b + i]` (b < a, `a + n ≤ buf.len()`).
#[inline(always)]
pub(super) fn eq_mask(buf: &[u8], a: usize, b: usize, n: usize) -> u64 {
    let (x, y) = (&buf[a..a + n], &buf[b..b + n]);
    let mut m = 0u64;
    let mut i = 0;
    for (p, q) in x.chunks_exact(8).zip(y.chunks_exact(8)) {
        m |= zero_bytes(word(p) ^ word(q)) << i;
        i += 8;
    }
    if i < n {
        let r = n - i;
        if n >= 8 {
            // The last r bytes: a word ending at the segment end, its first 8 − r bytes dropped.
            let d = word(&x[n - 8..]) ^ word(&y[n - 8..]);
            m |= (zero_bytes(d) >> (8 - r)) << i;
        } else {
            for (k, (p, q)) in x.iter().zip(y).enumerate() {
                m |= ((p == q) as u64) << k;
            }
        }
    }
    m
}
