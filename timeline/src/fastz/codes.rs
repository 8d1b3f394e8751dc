//! Deflate code tables of [`super::FastZ`]: the static length/distance tables, Huffman code
//! lengths under a limit, canonical codes, the run-length coding of a dynamic block header.

pub(super) const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
pub(super) const LEN_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
/// Distance codes' bases and extra bits (codes 30 and 31 do not occur: the tables have 32
/// entries so that a code masked with 31 indexes them without a bounds check).
pub(super) const DIST_BASE: [u16; 32] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577, 0, 0,
];
pub(super) const DIST_EXTRA: [u8; 32] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13, 0, 0,
];
/// Distance codes in use.
pub(super) const DIST_CODES: usize = 30;
/// Order in which code-length code lengths are sent.
pub(super) const CL_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

/// Static lookup tables: length → length code index, distance → distance code.
pub(super) struct Tables {
    /// Length code index of length `l` at `l − 3` (3..=258: a `u8` index).
    pub(super) len_code: [u8; 256],
    /// Distance code of d − 1 for d ≤ 256 ...
    pub(super) dist_lo: [u8; 256],
    /// ... and of (d − 1) >> 7 for larger distances.
    pub(super) dist_hi: [u8; 256],
}

/// Sets `out[(v - off) >> shift] = c` for every value `v` in `lo..=hi` whose code is `c`:
/// code `c` covers `base[c]` up to the next base (the last one up to `end`, exclusive).
const fn fill_codes(
    out: &mut [u8],
    base: &[u16],
    end: usize,
    (lo, hi): (usize, usize),
    (off, shift): (usize, u32),
) {
    let mut c = 0;
    while c < base.len() {
        let next = if c + 1 < base.len() {
            base[c + 1] as usize
        } else {
            end
        };
        let mut v = base[c] as usize;
        while v < next {
            if v >= lo && v <= hi {
                out[(v - off) >> shift] = c as u8;
            }
            v += 1;
        }
        c += 1;
    }
}

const fn tables() -> Tables {
    let mut t = Tables {
        len_code: [0; 256],
        dist_lo: [0; 256],
        dist_hi: [0; 256],
    };
    fill_codes(&mut t.len_code, &LEN_BASE, 259, (3, 258), (3, 0));
    // Length 258 has its own code (28), not the last range of code 27.
    t.len_code[258 - 3] = 28;
    let dist_base = DIST_BASE.split_at(DIST_CODES).0;
    fill_codes(&mut t.dist_lo, dist_base, 32769, (1, 256), (1, 0));
    fill_codes(&mut t.dist_hi, dist_base, 32769, (257, 32768), (1, 7));
    t
}

pub(super) static TABLES: Tables = tables();

/// The distance code of `d` (1..=32768), below 32.
#[inline(always)]
pub(super) fn dist_code(d: usize) -> usize {
    debug_assert!((1..=32768).contains(&d));
    // Both indexes are below 256 for distances in range: `u8` indexes need no bounds check.
    let c = if d <= 256 {
        TABLES.dist_lo[(d - 1) as u8 as usize]
    } else {
        TABLES.dist_hi[((d - 1) >> 7) as u8 as usize]
    };
    c as usize & 31
}

/// The length code index of match length `len` (3..=258).
#[inline(always)]
pub(super) fn len_code(len: usize) -> usize {
    debug_assert!((3..=MAX_MATCH).contains(&len));
    TABLES.len_code[(len - 3) as u8 as usize] as usize
}

/// A canonical Huffman code: per symbol (bit-reversed code, length).
pub(super) struct Code {
    pub(super) codes: Vec<(u16, u8)>,
}

/// Most symbols of an alphabet [`code_lengths`] codes (literals/lengths: 286 or 288).
const MAX_SYMBOLS: usize = 288;

/// Working arrays of [`code_lengths`], kept by the encoder between blocks: only the entries
/// a call writes are read (no allocation, no zeroing per block).
#[derive(Clone)]
pub(super) struct HuffmanScratch {
    /// (frequency, symbol) of the symbols coded, in one word each.
    syms: [u64; MAX_SYMBOLS],
    /// Per node (leaves 0..m, then internal nodes): weight, parent and depth.
    weight: [u64; 2 * MAX_SYMBOLS],
    parent: [u16; 2 * MAX_SYMBOLS],
    depth: [u16; 2 * MAX_SYMBOLS],
}

impl HuffmanScratch {
    pub(super) fn new() -> Box<Self> {
        Box::new(HuffmanScratch {
            syms: [0; MAX_SYMBOLS],
            weight: [0; 2 * MAX_SYMBOLS],
            parent: [0; 2 * MAX_SYMBOLS],
            depth: [0; 2 * MAX_SYMBOLS],
        })
    }
}

/// Code lengths (≤ `limit`) for the frequencies (at most [`MAX_SYMBOLS`]); symbols with
/// frequency 0 get length 0. At least two symbols always get a code (inflate rejects a
/// one-symbol code for literals).
pub(super) fn code_lengths(freq: &[u32], limit: u32, scratch: &mut HuffmanScratch) -> Vec<u8> {
    let n = freq.len();
    assert!(n <= MAX_SYMBOLS, "{n} symbols");
    let HuffmanScratch {
        syms,
        weight,
        parent,
        depth,
    } = scratch;
    // (frequency, symbol) packed in one word: sorted as the pairs are, with cheaper compares.
    // The symbols of frequency 1 (most of a block's: every symbol gets one more than half its
    // count in the block before) come first, in symbol order already: only the others are
    // sorted.
    let mut m = 0;
    for (i, &f) in freq.iter().enumerate() {
        if f == 1 {
            syms[m] = 1 << 32 | i as u64;
            m += 1;
        }
    }
    let ones = m;
    for (i, &f) in freq.iter().enumerate() {
        if f > 1 {
            syms[m] = (f as u64) << 32 | i as u64;
            m += 1;
        }
    }
    syms[ones..m].sort_unstable();
    let mut lens = vec![0u8; n];
    if m < 2 {
        // Pad to two used symbols.
        let mut i = 0;
        while m < 2 && i < n {
            if freq[i] == 0 {
                syms[m] = 1 << 32 | i as u64;
                m += 1;
            }
            i += 1;
        }
        syms[..m].sort_unstable();
    }
    let syms = &syms[..m];
    // Huffman tree by the two-queue method over the sorted leaves.
    // Nodes 0..m are leaves, m.. internal; parent links give depths.
    for (w, s) in weight.iter_mut().zip(syms) {
        *w = s >> 32;
    }
    let (mut leaf, mut inner) = (0usize, m);
    for next in m..2 * m - 1 {
        let pick = |leaf: &mut usize, inner: &mut usize, weight: &[u64]| -> usize {
            if *leaf < m && (*inner >= next || weight[*leaf] <= weight[*inner]) {
                *leaf += 1;
                *leaf - 1
            } else {
                *inner += 1;
                *inner - 1
            }
        };
        let a = pick(&mut leaf, &mut inner, &weight[..]);
        let b = pick(&mut leaf, &mut inner, &weight[..]);
        weight[next] = weight[a] + weight[b];
        parent[a] = next as u16;
        parent[b] = next as u16;
    }
    let root = 2 * m - 2;
    depth[root] = 0;
    for v in (0..root).rev() {
        depth[v] = depth[parent[v] as usize] + 1;
    }
    // Count leaves per length; fold lengths over the limit back (Kraft repair).
    let mut count = [0u32; 64];
    for &d in &depth[..m] {
        count[(d as usize).min(63)] += 1;
    }
    let lim = limit as usize;
    for l in lim + 1..64 {
        count[lim] += count[l];
        count[l] = 0;
    }
    let mut kraft: u64 = (1..=lim).map(|l| (count[l] as u64) << (lim - l)).sum();
    while kraft > 1u64 << lim {
        count[lim] -= 1;
        for l in (1..lim).rev() {
            if count[l] > 0 {
                count[l] -= 1;
                count[l + 1] += 2;
                break;
            }
        }
        kraft -= 1;
    }
    // The most frequent symbols (end of `syms`) get the shortest lengths.
    let mut it = syms.iter().rev();
    for (l, &c) in count.iter().enumerate().take(lim + 1).skip(1) {
        for _ in 0..c {
            if let Some(&s) = it.next() {
                lens[(s & 0xffff_ffff) as usize] = l as u8;
            }
        }
    }
    lens
}

/// Each byte's bits in reverse order.
static REVERSED_BYTES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).reverse_bits();
        i += 1;
    }
    t
};

/// `c.reverse_bits()` by table (without the target's bit-reversal instructions, the library's
/// takes some twenty instructions).
#[inline(always)]
fn reverse16(c: u16) -> u16 {
    (REVERSED_BYTES[(c & 0xff) as usize] as u16) << 8 | REVERSED_BYTES[(c >> 8) as usize] as u16
}

pub(super) fn canonical(lens: &[u8]) -> Code {
    let mut bl_count = [0u16; 16];
    for &l in lens {
        bl_count[l as usize] += 1;
    }
    bl_count[0] = 0;
    let mut next = [0u16; 16];
    let mut code = 0u16;
    for b in 1..16 {
        code = (code + bl_count[b - 1]) << 1;
        next[b] = code;
    }
    let codes = lens
        .iter()
        .map(|&l| {
            if l == 0 {
                return (0, 0);
            }
            let c = next[l as usize];
            next[l as usize] += 1;
            (reverse16(c) >> (16 - l as u32), l)
        })
        .collect();
    Code { codes }
}

/// Run-length codes of a code-length sequence: (symbol 0..18, extra value).
pub(super) fn rle(lens: &[u8]) -> Vec<(u8, u8)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lens.len() {
        let l = lens[i];
        let mut run = 1;
        while i + run < lens.len() && lens[i + run] == l {
            run += 1;
        }
        i += run;
        if l == 0 {
            while run >= 11 {
                let r = run.min(138);
                out.push((18, (r - 11) as u8));
                run -= r;
            }
            if run >= 3 {
                out.push((17, (run - 3) as u8));
                run = 0;
            }
            for _ in 0..run {
                out.push((0, 0));
            }
        } else {
            out.push((l, 0));
            run -= 1;
            while run >= 3 {
                let r = run.min(6);
                out.push((16, (r - 3) as u8));
                run -= r;
            }
            for _ in 0..run {
                out.push((l, 0));
            }
        }
    }
    out
}

/// Huffman codes of the current block, packed as `code | length << 16` (code bit-reversed).
#[derive(Clone)]
pub(super) struct Tables2 {
    pub(super) lit: [u32; 286],
    /// Per distance code: its code, its length << 16 and its extra bits << 24 (32 entries:
    /// [`dist_code`] indexes them without a bounds check).
    pub(super) dist: [u32; 32],
    /// Match length `l` (3..=MAX_MATCH) at `l − 3` → its length symbol's code with the extra
    /// bits appended (bits 0..32), their count (bits 32..40) and its length code index (bits
    /// 40..48: the symbol is 257 + it).
    pub(super) len: [u64; 256],
}

/// Longest deflate match.
pub(super) const MAX_MATCH: usize = 258;

impl Tables2 {
    pub(super) fn from_lengths(ll: &[u8], dl: &[u8]) -> Self {
        // Canonical codes depend on the count of codes per length over the whole alphabet
        // given (the fixed code has 288 literal/length symbols, two of them unused).
        let lit = canonical(ll);
        let dist = canonical(dl);
        let mut t = Tables2 {
            lit: [0; 286],
            dist: [0; 32],
            len: [0; 256],
        };
        for (o, &(c, l)) in t.lit.iter_mut().zip(&lit.codes) {
            *o = c as u32 | (l as u32) << 16;
        }
        for (i, (o, &(c, l))) in t.dist.iter_mut().zip(&dist.codes).enumerate() {
            *o = c as u32 | (l as u32) << 16 | (DIST_EXTRA[i] as u32) << 24;
        }
        for len in 3..=MAX_MATCH {
            let lc = len_code(len);
            let (c, l) = lit.codes[257 + lc];
            let e = LEN_EXTRA[lc] as u32;
            let v = c as u32 | (len as u32 - LEN_BASE[lc] as u32) << l;
            // Fits: 15 code bits + 5 extra bits.
            t.len[len - 3] = v as u64 | ((l as u32 + e) as u64) << 32 | (lc as u64) << 40;
        }
        t
    }

    /// The fixed Huffman code of RFC 1951 (BTYPE 01).
    /// The fixed code (RFC 1951, 3.2.6), built once.
    pub(super) fn fixed() -> &'static Self {
        static FIXED: std::sync::OnceLock<Tables2> = std::sync::OnceLock::new();
        FIXED.get_or_init(|| {
            let mut ll = [8u8; 288];
            ll[144..256].fill(9);
            ll[256..280].fill(7);
            Self::from_lengths(&ll, &[5u8; 32])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length and distance maps to the code whose range holds it (RFC 1951, 3.2.5).
    #[test]
    fn length_and_distance_codes_cover_their_ranges() {
        for len in 3..=258usize {
            let c = len_code(len);
            let span = 1usize << LEN_EXTRA[c];
            assert!(
                (LEN_BASE[c] as usize..LEN_BASE[c] as usize + span).contains(&len),
                "length {len}: code {c}"
            );
        }
        assert_eq!(len_code(258), 28);
        assert_eq!(len_code(257), 27);
        for d in 1..=32768usize {
            let c = dist_code(d);
            let span = 1usize << DIST_EXTRA[c];
            assert!(
                (DIST_BASE[c] as usize..DIST_BASE[c] as usize + span).contains(&d),
                "distance {d}: code {c}"
            );
        }
    }
}
