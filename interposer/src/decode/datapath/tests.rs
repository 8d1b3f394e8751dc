//! The hot completion paths' reading of a provider's completion ([`Wc`]: the opcode's bit 7
//! first, then one test of status and flags; one word for the source QP and flags, then the
//! vendor error of a failed completion) against the one definition of the compact
//! forms (schemas `compact`): for every field that decides it, the same form as the ordinary
//! path's ([`wc_head`], [`wc_body`], `ChunkWriter::try_append_plain_completion`).

use super::*;
use sigmatrace_schemas::compact::completion_is_short;

const CQ: u64 = 0x7000;

/// Send-side opcodes (bit 7 clear) and receive-side ones (bit 7 set).
const SEND_OPS: [u32; 9] = [
    IBV_WC_SEND,
    IBV_WC_RDMA_WRITE,
    IBV_WC_RDMA_READ,
    IBV_WC_COMP_SWAP,
    IBV_WC_FETCH_ADD,
    IBV_WC_BIND_MW,
    IBV_WC_LOCAL_INV,
    IBV_WC_TSO,
    IBV_WC_ATOMIC_WRITE,
];
const RECV_OPS: [u32; 10] = [
    IBV_WC_RECV,
    IBV_WC_RECV_RDMA_WITH_IMM,
    IBV_WC_TM_ADD,
    IBV_WC_TM_DEL,
    IBV_WC_TM_SYNC,
    IBV_WC_TM_RECV,
    IBV_WC_TM_NO_TAG,
    IBV_WC_DRIVER1,
    IBV_WC_DRIVER2,
    IBV_WC_DRIVER3,
];

/// Three completions and those that differ from each in one field: every flag bit in turn
/// (immediate data and an invalidated rkey with their value), source QPs below, at and above
/// 2^24, LIDs, every error status, vendor errors (of successful and of failed completions).
/// The three: a short one (an RDMA write's, its receive-side fields 0), the same with the
/// receive-side fields as the caller's array left them (mlx5 does not write them for
/// send-side completions), and a receive with its source QP and LID. Then the first with
/// every other opcode.
fn variants() -> Vec<ibv_wc> {
    let short = ibv_wc {
        wr_id: 9,
        opcode: IBV_WC_RDMA_WRITE,
        byte_len: 64,
        qp_num: 0x40,
        ..Default::default()
    };
    let unwritten = ibv_wc {
        src_qp: 0xdead_beef,
        slid: 0x1234,
        ..short
    };
    let recv = ibv_wc {
        opcode: IBV_WC_RECV,
        src_qp: 0x77,
        slid: 5,
        ..short
    };
    let mut v = Vec::new();
    for base in [short, unwritten, recv] {
        v.push(base);
        for bit in 0..32 {
            let mut w = ibv_wc {
                wc_flags: 1 << bit,
                ..base
            };
            w.__bindgen_anon_1.invalidated_rkey = 0x0102_0304;
            v.push(w);
        }
        for src_qp in [1, 0x77, 0xff_ffff, 1 << 24, u32::MAX] {
            v.push(ibv_wc { src_qp, ..base });
        }
        for slid in [1, 5, 0x100, u16::MAX] {
            v.push(ibv_wc { slid, ..base });
        }
        for status in 1..=IBV_WC_TM_RNDV_INCOMPLETE {
            v.push(ibv_wc { status, ..base });
        }
        for vendor_err in [1, 0x81, u32::MAX] {
            v.push(ibv_wc { vendor_err, ..base });
            // A failed one's vendor error is defined: recorded, so never compact.
            v.push(ibv_wc {
                vendor_err,
                status: IBV_WC_REM_ACCESS_ERR,
                ..base
            });
        }
    }
    for opcode in SEND_OPS.into_iter().chain(RECV_OPS) {
        v.push(ibv_wc { opcode, ..short });
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
        // Short: exactly the successful send-side ones without flags (a successful
        // completion's vendor error is undefined: not read).
        let send_side = SEND_OPS.contains(&w.opcode);
        let plain_send = send_side && w.status | w.wc_flags == 0;
        assert_eq!(short, plain_send, "variant {i}");
        assert_eq!(send_side, !RECV_OPS.contains(&w.opcode), "variant {i}");
        shorts += short as u32;
        compacts += compact.is_some() as u32;
    }
    // Short: of the two send-side bases, each with its source QP, LID and vendor error
    // variants (2 × 13: successful, so their vendor error is undefined), and the send-side
    // opcodes (9). Compact: of the short base and the receive, each itself, 6 flags below 256
    // (not 2, 8), 3 source QPs below 2^24, 4 LIDs, every error status, 3 vendor errors
    // (2 × (17 + statuses)); of the base with a 32-bit source QP only the 3 source QPs below
    // 2^24; every opcode (19).
    assert_eq!(shorts, 2 * 13 + 9);
    assert_eq!(compacts, 2 * (17 + IBV_WC_TM_RNDV_INCOMPLETE) + 3 + 19);
}

/// SGEs at an odd address, as programs keep them in packed structs (libiscsi's iSER
/// descriptors): the lengths are read without assuming alignment (a debug build aborted the
/// traced program on a misaligned-pointer check before).
#[test]
fn sge_lengths_are_read_at_any_alignment() {
    let sges = [(0x1000u64, 300u32, 7u32), (0x2000, 4096, 8), (0x3000, 5, 9)];
    let mut bytes = vec![0u8; 1 + sges.len() * std::mem::size_of::<ibv_sge>()];
    for (i, &(addr, length, lkey)) in sges.iter().enumerate() {
        let at = 1 + i * std::mem::size_of::<ibv_sge>();
        bytes[at..at + 8].copy_from_slice(&addr.to_ne_bytes());
        bytes[at + 8..at + 12].copy_from_slice(&length.to_ne_bytes());
        bytes[at + 12..at + 16].copy_from_slice(&lkey.to_ne_bytes());
    }
    let sg = bytes[1..].as_ptr().cast::<ibv_sge>();
    assert_ne!(sg as usize % std::mem::align_of::<ibv_sge>(), 0);
    // SAFETY: `bytes` holds the three SGEs from offset 1.
    unsafe {
        assert_eq!(sge_bytes(sg, 1), 300);
        assert_eq!(sge_bytes(sg, 3), 300 + 4096 + 5);
        assert_eq!(crate::decode::sge_length(sg, 2), 5);
    }
}
