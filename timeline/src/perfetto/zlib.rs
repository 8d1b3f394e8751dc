//! zlib for `compressed_packets`: whole blocks (`compress_block`), and the retry of blocks
//! fastz compressed poorly ([`Fallback`]).

use super::{put_varint, varint_len, TAG_COMPRESSED, TAG_PACKET};

/// Wraps already framed packets into one `compressed_packets` packet (zlib, as the Perfetto
/// tracing service writes it), framed and ready to append to a trace.
pub fn compress_block(framed: &[u8], level: u32) -> Vec<u8> {
    let mut z = flate2::Compress::new(flate2::Compression::new(level), true);
    let mut data = Vec::with_capacity(framed.len() / 3 + 64);
    zlib_into(&mut z, framed, &mut data);
    frame_compressed(&data)
}

/// The zlib stream of `raw` from compressor `z` (reset first) into `out` (cleared first).
fn zlib_into(z: &mut flate2::Compress, raw: &[u8], out: &mut Vec<u8>) {
    z.reset();
    out.clear();
    loop {
        out.reserve(64.max(raw.len() / 4));
        let rest = &raw[z.total_in() as usize..];
        match z.compress_vec(rest, out, flate2::FlushCompress::Finish) {
            Ok(flate2::Status::StreamEnd) => return,
            Ok(_) => {}
            Err(e) => unreachable!("zlib into memory: {e}"),
        }
    }
}

/// A fastz block that compresses its raw bytes less than this many times over is compressed
/// again with zlib ([`Fallback::zlib_if_smaller`]). Measured (zlib level 3 against fastz, per
/// block): sparse real traces' blocks (LAMMPS, HPC Challenge, NetPIPE over openib and UCX)
/// come out of fastz 1-6× smaller and zlib's are 25-75 % smaller again; dense real ones
/// (ib_write_bw) beyond 12× (zlib's larger). Blocks fastz shrinks 6-7× gain little from zlib
/// for what it costs (zlib level 3 takes ~4 ns per raw byte, several times fastz's whole
/// encoding): the synthetic 1024-rank set with ~3 000 events per rank has 8 700 of its 10 240
/// blocks there, zlib 8 % smaller — retrying them took 45 % of that conversion's CPU time.
/// Not retrying them: 1024 ranks × 3 k events 3.74 → 2.05 CPU-s, 15.5 → 16.9 B/WR event;
/// 1024 ranks × 49 k events −3 % CPU, 6.40 → 6.57 B/WR event; HPC Challenge 10.7 → 11.3;
/// LAMMPS, NetPIPE and ib_write_bw unchanged (their blocks are below 6× or above 7×).
/// Blocks of at least [`LARGE_BLOCK`] bytes are retried below 6.5×
/// ([`LARGE_POOR_RATIO_TENTHS`]) when taken whole (a dense one slides instead).
pub const FASTZ_POOR_RATIO: usize = 6;

/// A block of at least this many raw bytes taken whole is retried with zlib when fastz
/// compressed it less than [`LARGE_POOR_RATIO_TENTHS`] / 10 times over, and a dense one slides
/// instead of being taken whole ([`SLIDE_RATIO_TENTHS`]).
pub const LARGE_BLOCK: usize = 64 << 10;

/// The ratio (in tenths) below which a block of at least [`LARGE_BLOCK`] bytes taken whole is
/// retried. Measured per block (zlib level 3): HPC Challenge's (4 ranks over openib) large
/// blocks, 290-390 KiB each, come out of fastz 5.5-7.7× smaller; zlib saves 26-33 % of the
/// five below 6.5× (5.51, 5.75, 6.05, 6.21, 6.40×: one per rank and one more, 75 KB of the
/// trace's 727 KB: 12.19 → 10.92 bytes per WR event) and 0-4 % of those above 7×. Retried
/// below 5.5× only (as until round 11) the trace was at issue 15's 12-byte limit. The
/// synthetic 64- and 1024-rank 50 M sets' dense blocks slide at [`small::SLIDE_AT`] and are
/// never retried: their traces and CPU time are unchanged. Short traces have whole blocks in
/// the band, which zlib also makes ~24 % smaller: 1024 ranks × 5.18 M 12.85 → 12.59 B/WR event
/// for +9 % instructions, 64 ranks × 2 M −0.2 % output for +1 %.
///
/// [`small::SLIDE_AT`]: super::small::SLIDE_AT
pub const LARGE_POOR_RATIO_TENTHS: usize = 65;

/// A block reaching [`super::small::SLIDE_AT`] raw bytes slides (and is then never retried)
/// when fastz compressed it at least `SLIDE_RATIO_TENTHS` / 10 times over. Measured: the 64-rank set's
/// dense 390 KiB blocks come out of fastz 5.8-5.9× smaller and zlib saves 24 % of that, 43
/// bytes per raw KiB — 13 MB of zlib input, 590 M instructions (a quarter of that
/// conversion's encoding) for 4 % of its output; sliding them instead also writes each
/// track's first packet and the code tables less often.
pub const SLIDE_RATIO_TENTHS: usize = 55;

/// Whether fastz compressed `raw` bytes to `fast` bytes less than `tenths` / 10 times over.
fn below(raw: usize, fast: usize, tenths: usize) -> bool {
    fast.saturating_mul(tenths) > raw.saturating_mul(10)
}

/// Whether a block of `raw` bytes taken whole, which fastz compressed to `fast` bytes, is
/// compressed again with zlib ([`FASTZ_POOR_RATIO`], [`LARGE_POOR_RATIO_TENTHS`]).
pub(super) fn worth_zlib(raw: usize, fast: usize) -> bool {
    let tenths = if raw >= LARGE_BLOCK {
        LARGE_POOR_RATIO_TENTHS
    } else {
        FASTZ_POOR_RATIO * 10
    };
    below(raw, fast, tenths)
}

/// Whether a block of `raw` bytes (at least [`super::small::SLIDE_AT`]) that fastz compressed to
/// `fast` bytes so far is dense enough to slide ([`SLIDE_RATIO_TENTHS`]).
pub(super) fn dense_enough_to_slide(raw: usize, fast: usize) -> bool {
    !below(raw, fast, SLIDE_RATIO_TENTHS)
}

/// zlib's level for a block fastz compressed poorly (zlib-rs; its level 1 does not search
/// and gave 11.5 bytes per WR event on the LAMMPS trace, level 2 9.5, level 3 8.9).
const FALLBACK_LEVEL: u32 = 3;

/// zlib for the blocks of one sequence that fastz compressed poorly: one compressor and
/// output buffer, reset for each block (a new compressor allocates and clears its window and
/// hash tables: at 1024 ranks, with a few small blocks per sequence, that was a quarter of
/// the fallback's instructions).
pub(crate) struct Fallback {
    z: flate2::Compress,
    out: Vec<u8>,
}

impl Fallback {
    pub(super) fn new() -> Self {
        Fallback {
            z: flate2::Compress::new(flate2::Compression::new(FALLBACK_LEVEL), true),
            out: Vec::new(),
        }
    }

    /// The zlib stream of the framed packets `raw`, when fastz's stream `fast` of them is
    /// longer than a [`FASTZ_POOR_RATIO`]th of them (a large block's: [`LARGE_BLOCK`]) and
    /// zlib's is shorter. fastz matches
    /// each packet against a few earlier packets it is told of; where packets repeat in longer
    /// cycles than that (sparse traffic: many lanes and counters each touched now and then) a
    /// match search finds runs of several packets that it cannot. LAMMPS's trace (4 ranks
    /// over openib): 17.9 → 8.9 bytes per WR event; HPC Challenge's 18.2 → 11.6.
    pub(super) fn zlib_if_smaller(&mut self, raw: &[u8], fast: &[u8]) -> Option<&[u8]> {
        if !worth_zlib(raw.len(), fast.len()) {
            return None;
        }
        zlib_into(&mut self.z, raw, &mut self.out);
        (self.out.len() < fast.len()).then_some(&self.out[..])
    }
}

/// Frames zlib data as one `compressed_packets` packet, ready to append to a trace.
pub fn frame_compressed(data: &[u8]) -> Vec<u8> {
    let inner = 2 + varint_len(data.len() as u64) + data.len();
    let mut out = Vec::with_capacity(inner + 12);
    out.push(TAG_PACKET);
    put_varint(&mut out, inner as u64);
    out.extend_from_slice(&TAG_COMPRESSED);
    put_varint(&mut out, data.len() as u64);
    out.extend_from_slice(data);
    out
}
