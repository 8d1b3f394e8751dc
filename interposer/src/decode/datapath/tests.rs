//! The hot completion paths' reading of a provider's completion ([`Wc`]: one word for the
//! source QP and flags, one test of all fields) against the one definition of the compact
//! forms (schemas `compact`): for every field that decides it, the same form as the ordinary
//! path's ([`wc_head`], [`wc_body`], `ChunkWriter::try_append_plain_completion`).

use super::*;
use sigmatrace_schemas::compact::completion_is_short;

const CQ: u64 = 0x7000;

/// A short completion (an RDMA write's, as providers write it) and completions that differ
/// from it in one field each: every flag bit in turn (immediate data and an invalidated rkey
/// with their value), source QPs below, at and above 2^24, LIDs, every error status, vendor
/// errors.
fn variants() -> Vec<ibv_wc> {
    let short = ibv_wc {
        wr_id: 9,
        opcode: IBV_WC_RDMA_WRITE,
        byte_len: 64,
        qp_num: 0x40,
        ..Default::default()
    };
    let mut v = vec![short];
    for bit in 0..32 {
        let mut w = ibv_wc {
            wc_flags: 1 << bit,
            ..short
        };
        w.__bindgen_anon_1.invalidated_rkey = 0x0102_0304;
        v.push(w);
    }
    for src_qp in [1, 0x77, 0xff_ffff, 1 << 24, u32::MAX] {
        v.push(ibv_wc { src_qp, ..short });
    }
    for slid in [1, 5, 0x100, u16::MAX] {
        v.push(ibv_wc { slid, ..short });
    }
    for status in 1..=IBV_WC_TM_RNDV_INCOMPLETE {
        v.push(ibv_wc { status, ..short });
    }
    for vendor_err in [1, 0x81, u32::MAX] {
        v.push(ibv_wc {
            vendor_err,
            ..short
        });
    }
    v
}

#[test]
fn the_hot_paths_choose_the_form_the_ordinary_path_chooses() {
    let (mut shorts, mut compacts) = (0, 0);
    for (i, w) in variants().iter().enumerate() {
        // What the ordinary path hands the writer: nothing compact with a vendor error.
        let plain = wc_head(CQ, w);
        let short = plain.is_some_and(|h| completion_is_short(&h, &wc_body(w)));
        let (hot, ordinary) = (Wc::<true> { w, cq: CQ }, Wc::<false> { w, cq: CQ });
        assert_eq!(ordinary.is_short(), short, "variant {i}");
        assert_eq!(hot.is_short(), short, "variant {i}");
        assert_eq!(ordinary.head(), plain, "variant {i}");
        assert_eq!(ordinary.body(), wc_body(w), "variant {i}");
        // The hook's own hot path: compact only without immediate data or an invalidated
        // rkey (its body's `imm` is 0), else the same form.
        let imm_or_inv = w.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV) != 0;
        let compact = plain.filter(|h| h.fits() && !imm_or_inv);
        assert_eq!(
            hot.head().filter(CompletionHead::fits),
            compact,
            "variant {i}"
        );
        if compact.is_some() {
            assert_eq!(hot.body(), wc_body(w), "variant {i}");
        }
        shorts += short as u32;
        compacts += compact.is_some() as u32;
    }
    // The short one; the compact ones: 6 flags below 256 (not 2, 8), 3 source QPs below
    // 2^24, 4 LIDs, every error status, the short one.
    assert_eq!(shorts, 1);
    assert_eq!(compacts, 6 + 3 + 4 + IBV_WC_TM_RNDV_INCOMPLETE + 1);
}
