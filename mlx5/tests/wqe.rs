//! Send WQE decoding for every opcode and segment type of the README's "Send WQEs".

use sigmatrace_mlx5::wqe::WqeBuilder;
use sigmatrace_mlx5::wqe::{self, flags, opcode, AddressVector, Segment, Transport, WqeError};

#[test]
fn hand_built_rdma_write_bytes() {
    // RC RDMA_WRITE, wqe_idx 0x1234, qpn 0xabcdef, ds 3, CE always + fence, 1 SGE of 4096 B.
    let mut b = [0u8; 64];
    b[0..4].copy_from_slice(&[0x00, 0x12, 0x34, 0x08]);
    b[4..8].copy_from_slice(&[0xab, 0xcd, 0xef, 0x03]);
    b[11] = 0x88;
    b[16..24].copy_from_slice(&0x7f00_1122_3344_5566u64.to_be_bytes());
    b[24..28].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    b[32..36].copy_from_slice(&4096u32.to_be_bytes());
    b[36..40].copy_from_slice(&0x0101_0101u32.to_be_bytes());
    b[40..48].copy_from_slice(&0x1000u64.to_be_bytes());
    let w = wqe::decode(&b, Transport::Rc).unwrap();
    assert_eq!(w.ctrl.opcode, opcode::RDMA_WRITE);
    assert_eq!(w.ctrl.wqe_index, 0x1234);
    assert_eq!(w.ctrl.qpn, 0xabcdef);
    assert_eq!(w.ctrl.ds, 3);
    assert_eq!(w.wqebbs, 1);
    assert!(w.ctrl.fence() && w.ctrl.completion() && !w.ctrl.solicited());
    assert_eq!(w.remote_addr, 0x7f00_1122_3344_5566);
    assert_eq!(w.rkey, 0xdead_beef);
    assert_eq!(w.bytes, 4096);
    assert_eq!(
        w.segments(),
        &[
            Segment::Raddr {
                addr: 0x7f00_1122_3344_5566,
                rkey: 0xdead_beef
            },
            Segment::Data {
                addr: 0x1000,
                lkey: 0x0101_0101,
                byte_count: 4096
            }
        ]
    );
    // And the builder produces exactly these bytes.
    let built = WqeBuilder::new(opcode::RDMA_WRITE, 0x1234, 0xabcdef)
        .fm_ce_se(0x88)
        .raddr(0x7f00_1122_3344_5566, 0xdead_beef)
        .data(0x1000, 0x0101_0101, 4096)
        .finish();
    assert_eq!(&built[..], &b[..48]);
}

fn dec(b: &[u8], t: Transport) -> wqe::Wqe {
    let mut padded = b.to_vec();
    padded.resize(b.len().next_multiple_of(64), 0);
    wqe::decode(&padded, t).unwrap()
}

/// `(opcode, WQE, expected bytes, remote address, rkey)`.
type Case = (u8, Vec<u8>, u64, u64, u32);

/// NOP, the sends, the writes, TSO and WAIT.
fn send_write_and_control_cases() -> Vec<Case> {
    use opcode::*;
    vec![
        (NOP, WqeBuilder::new(NOP, 1, 7).pad(3).finish(), 0, 0, 0),
        (
            SEND_INVAL,
            WqeBuilder::new(SEND_INVAL, 2, 7)
                .imm(0x55)
                .data(0x10, 1, 100)
                .finish(),
            100,
            0,
            0,
        ),
        (
            RDMA_WRITE,
            WqeBuilder::new(RDMA_WRITE, 3, 7)
                .raddr(0xa000, 9)
                .data(0x10, 1, 64)
                .data(0x20, 1, 64)
                .finish(),
            128,
            0xa000,
            9,
        ),
        (
            RDMA_WRITE_IMM,
            WqeBuilder::new(RDMA_WRITE_IMM, 4, 7)
                .imm(0x1234)
                .raddr(0xb000, 8)
                .inline(&[1, 2, 3, 4, 5])
                .finish(),
            5,
            0xb000,
            8,
        ),
        (
            SEND,
            WqeBuilder::new(SEND, 5, 7).inline(&[0u8; 40]).finish(),
            40,
            0,
            0,
        ),
        (
            SEND_IMM,
            WqeBuilder::new(SEND_IMM, 6, 7)
                .imm(77)
                .data(0x30, 2, 12)
                .finish(),
            12,
            0,
            0,
        ),
        (
            TSO,
            WqeBuilder::new(TSO, 7, 7)
                .eth(1400, &[0xaa; 42])
                .data(0x40, 3, 9000)
                .finish(),
            9042,
            0,
            0,
        ),
        (
            WAIT,
            WqeBuilder::new(WAIT, 8, 7).wait_en(99, 0x321).finish(),
            0,
            0,
            0,
        ),
    ]
}

/// The read, the atomics, local invalidate, dump, UMR and MMO.
fn read_atomic_and_memory_cases() -> Vec<Case> {
    use opcode::*;
    vec![
        (
            RDMA_READ,
            WqeBuilder::new(RDMA_READ, 9, 7)
                .raddr(0xc000, 6)
                .data(0x50, 4, 256)
                .finish(),
            256,
            0xc000,
            6,
        ),
        (
            ATOMIC_CS,
            WqeBuilder::new(ATOMIC_CS, 10, 7)
                .raddr(0xd000, 5)
                .atomic(111, 222)
                .data(0x60, 5, 8)
                .finish(),
            8,
            0xd000,
            5,
        ),
        (
            ATOMIC_FA,
            WqeBuilder::new(ATOMIC_FA, 11, 7)
                .raddr(0xe000, 4)
                .atomic(1, 0)
                .data(0x70, 6, 8)
                .finish(),
            8,
            0xe000,
            4,
        ),
        (
            ATOMIC_MASKED_CS,
            WqeBuilder::new(ATOMIC_MASKED_CS, 12, 7)
                .opmod(0x09)
                .raddr(0xf000, 3)
                .masked_cs(8, 1, 2, 3, 4)
                .data(0x80, 7, 8)
                .finish(),
            8,
            0xf000,
            3,
        ),
        (
            ATOMIC_MASKED_FA,
            WqeBuilder::new(ATOMIC_MASKED_FA, 13, 7)
                .opmod(0x08)
                .raddr(0xf100, 2)
                .masked_fa(4, 5, 0x80)
                .data(0x90, 8, 4)
                .finish(),
            4,
            0xf100,
            2,
        ),
        (
            LOCAL_INVAL,
            WqeBuilder::new(LOCAL_INVAL, 14, 7).imm(0xabc).finish(),
            0,
            0,
            0,
        ),
        (
            DUMP,
            WqeBuilder::new(DUMP, 15, 7).data(0xa0, 9, 1).finish(),
            1,
            0,
            0,
        ),
        (
            UMR,
            WqeBuilder::new(UMR, 16, 7)
                .imm(0x4400)
                .umr_ctrl(0x80, 4, 0x40)
                .mkey_ctx(0x1c, 0x44, 0x7000_0000, 1 << 20)
                .pad(4)
                .finish(),
            1 << 20,
            0x7000_0000,
            0,
        ),
        (
            MMO,
            WqeBuilder::new(MMO, 17, 7)
                .opmod(1)
                .mmo_meta(0x1, 0x11, 0)
                .data(0xb0, 0x12, 512)
                .data(0xc0, 0x13, 512)
                .finish(),
            512,
            0xc0,
            0x13,
        ),
    ]
}

#[test]
fn every_opcode_decodes() {
    let mut cases = send_write_and_control_cases();
    cases.extend(read_atomic_and_memory_cases());
    let mut seen = std::collections::HashSet::new();
    for (op, bytes, bytes_expect, raddr, rkey) in cases {
        let w = dec(&bytes, Transport::Rc);
        assert_eq!(w.ctrl.opcode, op, "{}", wqe::opcode_name(op));
        assert!(w.known_opcode);
        assert_eq!(
            w.ctrl.ds as usize * 16,
            bytes.len(),
            "{}",
            wqe::opcode_name(op)
        );
        assert_eq!(w.bytes, bytes_expect, "{}", wqe::opcode_name(op));
        assert_eq!(w.remote_addr, raddr, "{}", wqe::opcode_name(op));
        assert_eq!(w.rkey, rkey, "{}", wqe::opcode_name(op));
        assert_eq!(w.ctrl.qpn, 7);
        seen.insert(op);
    }
    assert_eq!(
        seen.len(),
        opcode::ALL.len(),
        "every opcode of the table is covered"
    );
}

#[test]
fn segment_details() {
    atomic_segments();
    wait_inline_and_invalidate_segments();
    umr_eth_and_xrc_segments();
}

fn atomic_segments() {
    use opcode::*;
    let w = dec(
        &WqeBuilder::new(ATOMIC_CS, 0, 1)
            .raddr(8, 1)
            .atomic(0x11, 0x22)
            .data(0, 0, 8)
            .finish(),
        Transport::Rc,
    );
    assert_eq!((w.swap, w.compare_add), (0x11, 0x22));
    assert_eq!(
        w.segments()[1],
        Segment::Atomic {
            swap_add: 0x11,
            compare: 0x22
        }
    );
    let w = dec(
        &WqeBuilder::new(ATOMIC_FA, 0, 1)
            .raddr(8, 1)
            .atomic(5, 0)
            .data(0, 0, 8)
            .finish(),
        Transport::Rc,
    );
    assert_eq!(w.compare_add, 5);
    let w = dec(
        &WqeBuilder::new(ATOMIC_MASKED_CS, 0, 1)
            .opmod(0x09)
            .raddr(8, 1)
            .masked_cs(8, 1, 2, 3, 4)
            .finish(),
        Transport::Rc,
    );
    assert_eq!(
        w.segments()[1],
        Segment::MaskedCs {
            size: 8,
            swap: 1,
            compare: 2,
            swap_mask: 3,
            compare_mask: 4
        }
    );
    assert_eq!(w.ctrl.ds, 1 + 1 + 2);
    let w = dec(
        &WqeBuilder::new(ATOMIC_MASKED_CS, 0, 1)
            .opmod(0x08)
            .raddr(8, 1)
            .masked_cs(4, 1, 2, 3, 4)
            .finish(),
        Transport::Rc,
    );
    assert_eq!(
        w.segments()[1],
        Segment::MaskedCs {
            size: 4,
            swap: 1,
            compare: 2,
            swap_mask: 3,
            compare_mask: 4
        }
    );
    let w = dec(
        &WqeBuilder::new(ATOMIC_MASKED_FA, 0, 1)
            .opmod(0x09)
            .raddr(8, 1)
            .masked_fa(8, 9, 0xff00)
            .finish(),
        Transport::Rc,
    );
    assert_eq!(
        w.segments()[1],
        Segment::MaskedFa {
            size: 8,
            add: 9,
            field_boundary: 0xff00
        }
    );
}

fn wait_inline_and_invalidate_segments() {
    use opcode::*;
    let w = dec(
        &WqeBuilder::new(WAIT, 0, 1).wait_en(42, 0x77).finish(),
        Transport::Rc,
    );
    assert_eq!(
        w.segments(),
        &[Segment::WaitEn {
            pi: 42,
            obj_num: 0x77
        }]
    );
    let w = dec(
        &WqeBuilder::new(SEND, 0, 1)
            .inline(&[9; 13])
            .inline(&[1; 30])
            .data(0x5, 6, 7)
            .finish(),
        Transport::Rc,
    );
    assert_eq!(
        w.segments(),
        &[
            Segment::Inline { byte_count: 13 },
            Segment::Inline { byte_count: 30 },
            Segment::Data {
                addr: 5,
                lkey: 6,
                byte_count: 7
            }
        ]
    );
    assert_eq!(w.bytes, 50);
    let w = dec(
        &WqeBuilder::new(LOCAL_INVAL, 0, 1).imm(0xfeed).finish(),
        Transport::Rc,
    );
    assert_eq!(w.ctrl.imm, 0xfeed);
}

fn umr_eth_and_xrc_segments() {
    use opcode::*;
    let w = dec(
        &WqeBuilder::new(UMR, 0, 1)
            .umr_ctrl(0x80, 4, 0x4000)
            .mkey_ctx(0x1c, 0x55, 0x1000, 0x2000)
            .finish(),
        Transport::Rc,
    );
    assert_eq!(
        w.segments()[0],
        Segment::UmrCtrl {
            flags: 0x80,
            klm_octowords: 4,
            mkey_mask: 0x4000
        }
    );
    assert_eq!(
        w.segments()[1],
        Segment::MkeyContext {
            access_flags: 0x1c,
            qpn_mkey: 0x55,
            start_addr: 0x1000,
            len: 0x2000
        }
    );
    let w = dec(
        &WqeBuilder::new(TSO, 0, 1).eth(1400, &[1; 18]).finish(),
        Transport::Rc,
    );
    assert_eq!(
        w.segments(),
        &[Segment::Eth {
            mss: 1400,
            inline_hdr_sz: 18
        }]
    );
    let w = dec(
        &WqeBuilder::new(SEND, 0, 1)
            .eth(0, &[1; 14])
            .data(1, 2, 100)
            .finish(),
        Transport::RawPacket,
    );
    assert_eq!(w.bytes, 114);
    let w = dec(
        &WqeBuilder::new(SEND, 0, 1).xrc(0x42).data(1, 2, 3).finish(),
        Transport::Xrc,
    );
    assert_eq!(w.segments()[0], Segment::Xrc { srqn: 0x42 });
}

#[test]
fn ud_and_dc_address_vectors() {
    // UD SEND (libmlx5: full 48-byte AV with the extended bit).
    let av = AddressVector {
        key: 0x1111_2222,
        dqpn: 0x00ab_cdef,
        extended: true,
        stat_rate_sl: 3,
        rlid: 9,
        rgid: [7; 16],
    };
    let w = dec(
        &WqeBuilder::new(opcode::SEND, 0, 1)
            .av(&av)
            .data(1, 2, 64)
            .finish(),
        Transport::Ud,
    );
    assert_eq!(w.ctrl.ds, 1 + 3 + 1);
    assert_eq!(w.dqpn, Some(0xabcdef));
    assert_eq!(w.segments()[0], Segment::Av(av));
    assert_eq!(w.bytes, 64);
    // NVSHMEM DCI RDMA write with a half AV: ds = 4.
    let half = AddressVector {
        key: 0xdc,
        dqpn: 0x77,
        extended: false,
        stat_rate_sl: 0,
        rlid: 3,
        rgid: [0; 16],
    };
    let w = dec(
        &WqeBuilder::new(opcode::RDMA_WRITE, 5, 1)
            .av(&half)
            .raddr(0x9000, 4)
            .data(1, 2, 8)
            .finish(),
        Transport::Dci,
    );
    assert_eq!(w.ctrl.ds, 4);
    assert_eq!(
        (w.dqpn, w.remote_addr, w.rkey, w.bytes),
        (Some(0x77), 0x9000, 4, 8)
    );
    // Full AV: ds = 6, two WQEBBs.
    let w = dec(
        &WqeBuilder::new(opcode::RDMA_WRITE, 5, 1)
            .av(&av)
            .raddr(0x9000, 4)
            .data(1, 2, 8)
            .finish(),
        Transport::Dci,
    );
    assert_eq!((w.ctrl.ds, w.wqebbs), (6, 2));
    assert_eq!(w.remote_addr, 0x9000);
}

#[test]
fn atomic_class_is_the_four_atomic_opcodes() {
    let atomics: Vec<u8> = opcode::ALL
        .into_iter()
        .filter(|&op| opcode::is_atomic(op))
        .collect();
    assert_eq!(
        atomics,
        [
            opcode::ATOMIC_CS,
            opcode::ATOMIC_FA,
            opcode::ATOMIC_MASKED_CS,
            opcode::ATOMIC_MASKED_FA
        ]
    );
    assert_eq!(
        atomics
            .iter()
            .map(|&op| wqe::opcode_name(op))
            .collect::<Vec<_>>(),
        [
            "ATOMIC_CS",
            "ATOMIC_FA",
            "ATOMIC_MASKED_CS",
            "ATOMIC_MASKED_FA"
        ]
    );
}

#[test]
fn flags_and_errors() {
    let w = dec(
        &WqeBuilder::new(opcode::SEND, 0, 1)
            .fm_ce_se(flags::SMALL_FENCE | flags::SOLICITED)
            .finish(),
        Transport::Rc,
    );
    assert!(w.ctrl.fence() && w.ctrl.solicited() && !w.ctrl.completion());
    assert_eq!(
        wqe::decode(&[0u8; 8], Transport::Rc),
        Err(WqeError::Short(8))
    );
    assert_eq!(
        wqe::decode(&[0u8; 64], Transport::Rc).unwrap_err(),
        WqeError::ZeroDs
    );
    let mut b = WqeBuilder::new(opcode::SEND, 0, 1).pad(7).finish();
    assert!(matches!(
        wqe::decode(&b[..64], Transport::Rc),
        Err(WqeError::Truncated { ds: 8, .. })
    ));
    // An inline segment claiming more bytes than ds holds.
    b = WqeBuilder::new(opcode::SEND, 0, 1).data(0, 0, 0).finish();
    b[16..20].copy_from_slice(&(0x8000_0000u32 | 100).to_be_bytes());
    assert!(matches!(
        wqe::decode(
            &{
                let mut p = b.clone();
                p.resize(64, 0);
                p
            },
            Transport::Rc
        ),
        Err(WqeError::SegmentOverrun { .. })
    ));
    // Unknown opcode: ctrl decoded, body opaque.
    let w = dec(&WqeBuilder::new(0x3e, 0, 1).pad(2).finish(), Transport::Rc);
    assert!(!w.known_opcode);
    assert_eq!(w.segments(), &[Segment::Opaque { bytes: 32 }]);
    // Doorbell word parsing = ctrl's first 8 bytes.
    let wq = WqeBuilder::new(opcode::RDMA_WRITE, 0xbeef, 0x123456)
        .raddr(0, 0)
        .data(0, 0, 0)
        .finish();
    let db = sigmatrace_mlx5::dbr::parse_doorbell(&wq[..8]);
    assert_eq!(
        (db.wqe_index, db.opcode, db.qpn, db.ds),
        (0xbeef, opcode::RDMA_WRITE, 0x123456, 3)
    );
}
