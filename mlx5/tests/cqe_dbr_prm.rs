//! CQE64, doorbell records and PRM devx commands: hand-built bytes at the README's offsets,
//! and every encoder decoded back to what it encoded.

use sigmatrace_mlx5::cqe::{self, ClockInfo, Cqe, TsFormat};
use sigmatrace_mlx5::prm::{
    self, AddressPath, CmdOut, Command, CreateCqIn, CreateQpIn, ModifyQpIn, RdmaParams,
};
use sigmatrace_mlx5::{dbr, wqe::Transport};

#[test]
fn hand_built_cqe() {
    let mut b = [0u8; 64];
    b[24..28].copy_from_slice(&0x0000_1234u32.to_be_bytes());
    b[44..48].copy_from_slice(&8192u32.to_be_bytes());
    b[48..56].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
    b[56..60].copy_from_slice(&0x08ab_cdefu32.to_be_bytes());
    b[60..62].copy_from_slice(&0x0042u16.to_be_bytes());
    b[63] = 0x01; // REQ, owner 1
    let c = cqe::decode(&b);
    assert_eq!(
        (
            c.opcode,
            c.owner,
            c.wqe_counter,
            c.byte_cnt,
            c.qpn,
            c.send_opcode
        ),
        (0, 1, 0x42, 8192, 0xabcdef, 0x08)
    );
    assert_eq!(
        (c.timestamp, c.src_qp, c.syndrome),
        (0x0102_0304_0506_0708, 0x1234, 0)
    );
    // Error CQE: syndromes at bytes 54/55.
    b[54] = 0x88;
    b[55] = 0x05;
    b[63] = 0xd0;
    let c = cqe::decode(&b);
    assert!(c.is_error());
    assert_eq!(
        (
            c.opcode,
            c.vendor_syndrome,
            c.syndrome,
            c.owner,
            c.timestamp
        ),
        (13, 0x88, 0x05, 0, 0)
    );
    let f = Cqe {
        opcode: 13,
        wqe_counter: 0x42,
        byte_cnt: 8192,
        qpn: 0xabcdef,
        send_opcode: 8,
        timestamp: 0x0102_0304_0506_0708,
        syndrome: 5,
        vendor_syndrome: 0x88,
        imm_inval_pkey: 0,
        src_qp: 0x1234,
        ..Cqe::default()
    };
    assert_eq!(cqe::encode(&f, 0, 4), b);
}

#[test]
fn owner_bit_phases() {
    let cnt = 4;
    // Fresh buffer: INVALID, owner 0 → never valid.
    for n in 0..8 {
        assert!(!cqe::is_valid(cqe::INVALID_OP_OWN, n, cnt));
    }
    // Lap 0 entries carry owner 0, lap 1 owner 1, lap 2 owner 0 again.
    for n in 0..12u32 {
        let e = cqe::encode(&Cqe::default(), n, cnt);
        assert!(cqe::is_valid(e[63], n, cnt));
        assert!(
            !cqe::is_valid(e[63], n + cnt, cnt),
            "previous-lap entry is not valid for the next lap"
        );
        assert_eq!(e[63] & 1, ((n / cnt) & 1) as u8);
    }
}

#[test]
fn timestamps() {
    let raw = (5u64 << 32) | 123;
    assert_eq!(cqe::real_time_to_ns(raw), 5_000_000_123);
    assert_eq!(
        cqe::timestamp_ns(raw, TsFormat::RealTime, None),
        Some(5_000_000_123)
    );
    assert_eq!(cqe::timestamp_ns(raw, TsFormat::FreeRunning, None), None);
    // 1 cycle = 2 ns (mult 2 << 10, shift 10), 48-bit counter.
    let ci = ClockInfo {
        nsec: 1_000_000,
        last_cycles: 1000,
        mult: 2 << 10,
        shift: 10,
        mask: (1 << 48) - 1,
    };
    assert_eq!(ci.cycles_to_ns(1500), 1_001_000);
    assert_eq!(ci.cycles_to_ns(500), 999_000);
    // Wrap of the counter: a cycle value just past the mask boundary is forward.
    let ci = ClockInfo {
        last_cycles: (1 << 48) - 10,
        ..ci
    };
    assert_eq!(ci.cycles_to_ns(10), 1_000_040);
    assert_eq!(TsFormat::from_prm(2), TsFormat::RealTime);
    assert_eq!(TsFormat::from_prm(0), TsFormat::FreeRunning);
}

#[test]
fn doorbell_records() {
    let q = dbr::parse_qp(&[0, 0, 0x12, 0x34, 0, 0, 0xab, 0xcd]);
    assert_eq!((q.rq_head, q.sq_pi), (0x1234, 0xabcd));
    assert_eq!(
        dbr::sq_pi_from_raw(u32::from_ne_bytes([0, 0, 0x01, 0x02])),
        0x0102
    );
    let c = dbr::parse_cq(&[0xff, 0x00, 0x00, 0x10, 0x31, 0x00, 0x00, 0x10]);
    assert_eq!((c.ci, c.arm_sn, c.arm_cmd, c.arm_ci), (0x10, 3, 1, 0x10));
    // Encoders are the inverses.
    assert_eq!(dbr::parse_qp(&q.encode()), q);
    assert_eq!(dbr::parse_cq(&c.encode()), c);
    assert_eq!(dbr::sq_pi_from_raw(dbr::sq_pi_to_raw(0xbeef)), 0xbeef);
    assert_eq!(
        dbr::cq_ci_to_raw(0x0123_4567).to_ne_bytes(),
        [0, 0x23, 0x45, 0x67]
    );
    // The NVSHMEM doorbell: {be32(pi << 8), be32(qpn << 8)}, opcode and ds zero.
    let db = dbr::DoorbellWord::nvshmem(0x1234, 0xabcde);
    let bytes = [0x00, 0x12, 0x34, 0x00, 0x0a, 0xbc, 0xde, 0x00];
    assert_eq!(db.encode(), bytes);
    assert_eq!(db.to_native_u64().to_ne_bytes(), bytes);
    assert_eq!(dbr::parse_doorbell(&bytes), db);
}

fn qp_in() -> CreateQpIn {
    CreateQpIn {
        st: 0x5,
        pd: 0x12,
        log_rq_size: 0,
        log_rq_stride: 0,
        no_sq: false,
        log_sq_size: 7,
        ts_format: 2,
        uar_page: 0x77,
        cqn_snd: 0x401,
        cqn_rcv: 0x402,
        rq_type: prm::rq_type::SRQ,
        dbr_addr: 0x40,
        dbr_umem_valid: true,
        dbr_umem_id: 22,
        wq_umem_offset: 0x1000,
        wq_umem_id: 21,
        wq_umem_valid: true,
    }
}

fn cq_in() -> CreateCqIn {
    CreateCqIn {
        cqe_size: 64,
        oi: true,
        cc: false,
        dbr_umem_valid: true,
        dbr_umem_id: 22,
        ts_format: 0,
        log_cq_size: 8,
        uar_page: 0x77,
        c_eqn: 3,
        dbr_addr: 0x80,
        cq_umem_offset: 0,
        cq_umem_id: 23,
        cq_umem_valid: true,
    }
}

#[test]
fn prm_create_qp_offsets() {
    let b = qp_in().encode();
    // Spot-check the byte offsets of the README directly.
    assert_eq!(&b[0..2], &[0x05, 0x00]);
    assert_eq!(b[25], 0x5);
    assert_eq!(
        u32::from_be_bytes(b[32..36].try_into().unwrap()) >> 11 & 0xf,
        7
    );
    assert_eq!(
        u32::from_be_bytes(b[36..40].try_into().unwrap()) & 0xffffff,
        0x77
    );
    assert_eq!(u32::from_be_bytes(b[148..152].try_into().unwrap()), 0x401);
    assert_eq!(u64::from_be_bytes(b[184..192].try_into().unwrap()), 0x40);
    assert_eq!(u32::from_be_bytes(b[252..256].try_into().unwrap()), 22);
    assert_eq!(u64::from_be_bytes(b[256..264].try_into().unwrap()), 0x1000);
    assert_eq!(u32::from_be_bytes(b[264..268].try_into().unwrap()), 21);
    assert_eq!(b[268] & 0x80, 0x80);
    let d = prm::decode_create_qp(&b).unwrap();
    assert_eq!(d, qp_in());
    assert_eq!(d.transport(), Some(Transport::Dci));
    assert_eq!((d.sq_wqebbs(), d.rq_bytes()), (128, 0));
    assert_eq!(d.dbr_location(), (22, 0x40));
    let regular = CreateQpIn {
        rq_type: 0,
        log_rq_size: 4,
        log_rq_stride: 2,
        ..qp_in()
    };
    assert_eq!(
        prm::decode_create_qp(&regular.encode()).unwrap().rq_bytes(),
        16 * 64
    );
    assert!(prm::decode_create_qp(&b[..200]).is_err());
}

#[test]
fn prm_create_cq_and_outputs() {
    let b = cq_in().encode();
    assert_eq!(&b[0..2], &[0x04, 0x00]);
    assert_eq!(
        u32::from_be_bytes(b[28..32].try_into().unwrap()) >> 24 & 0x1f,
        8
    );
    assert_eq!(u64::from_be_bytes(b[72..80].try_into().unwrap()), 0x80);
    assert_eq!(u32::from_be_bytes(b[88..92].try_into().unwrap()), 23);
    let d = prm::decode_create_cq(&b).unwrap();
    assert_eq!(d, cq_in());
    assert_eq!(d.cqe_cnt(), 256);
    let d128 = prm::decode_create_cq(
        &CreateCqIn {
            cqe_size: 128,
            ..cq_in()
        }
        .encode(),
    )
    .unwrap();
    assert_eq!(d128.cqe_size, 128);
    let out = prm::decode_output(&CmdOut::ok(0x1234).encode()).unwrap();
    assert_eq!((out.status, out.number), (0, 0x1234));
    assert_eq!(prm::decode_output(&[0; 4]), None);
}

#[test]
fn prm_modify_and_destroy() {
    let path = AddressPath {
        ack_timeout: 14,
        grh: true,
        rlid: 0x55,
        src_addr_index: 1,
        hop_limit: 64,
        tclass: 0x20,
        flow_label: 0xabcde,
        rgid: [0xfe; 16],
        sl: 3,
        vhca_port: 1,
        rmac: [1, 2, 3, 4, 5, 6],
        udp_sport: 0xc000,
    };
    let m = ModifyQpIn {
        opcode: prm::cmd::INIT2RTR_QP,
        qpn: 0x111,
        opt_param_mask: 0,
        mtu: 5,
        remote_qpn: 0x222,
        path,
        next_send_psn: 0,
        next_rcv_psn: 0x333,
        rdma: RdmaParams {
            log_sra_max: 4,
            retry_count: 7,
            rnr_retry: 6,
            log_rra_max: 3,
            rre: true,
            rwe: false,
            rae: true,
            min_rnr_nak: 12,
        },
    };
    let b = m.encode();
    let be32 = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
    // qpc at 24: ads at qpc+24 (ack_timeout in dword 2 bits 31:27), retry settings at
    // qpc+112, responder settings at qpc+144, min_rnr_nak and next_rcv_psn at qpc+148.
    assert_eq!(be32(24 + 24 + 8) >> 27, 14);
    assert_eq!(be32(24 + 112), (4 << 21) | (7 << 16) | (6 << 13));
    assert_eq!(be32(24 + 144), (3 << 21) | (1 << 15) | (1 << 13));
    assert_eq!(be32(24 + 148), (12 << 24) | 0x333);
    assert_eq!(b.len(), prm::CMD_IN_LEN);
    assert_eq!(
        u32::from_be_bytes(b[8..12].try_into().unwrap()) & 0xffffff,
        0x111
    );
    assert_eq!(
        u32::from_be_bytes(b[44..48].try_into().unwrap()) & 0xffffff,
        0x222
    );
    assert_eq!(prm::decode_command(&b).unwrap(), Command::ModifyQp(m));
    for (op, st) in [
        (prm::cmd::RST2INIT_QP, 1),
        (prm::cmd::INIT2RTR_QP, 2),
        (prm::cmd::RTR2RTS_QP, 3),
        (prm::cmd::QP_2ERR, 6),
    ] {
        let b = ModifyQpIn { opcode: op, ..m }.encode();
        let Command::ModifyQp(d) = prm::decode_command(&b).unwrap() else {
            panic!()
        };
        assert_eq!(
            (d.opcode, d.qpn, prm::transition_target_state(op)),
            (op, 0x111, Some(st))
        );
    }
    let mut d = vec![0u8; 16];
    d[0..2].copy_from_slice(&prm::cmd::DESTROY_QP.to_be_bytes());
    d[8..12].copy_from_slice(&0x111u32.to_be_bytes());
    assert_eq!(
        prm::decode_command(&d).unwrap(),
        Command::DestroyQp { qpn: 0x111 }
    );
    d[0..2].copy_from_slice(&prm::cmd::DESTROY_CQ.to_be_bytes());
    assert_eq!(
        prm::decode_command(&d).unwrap(),
        Command::DestroyCq { cqn: 0x111 }
    );
    d[0..2].copy_from_slice(&0x0100u16.to_be_bytes());
    assert_eq!(prm::decode_command(&d).unwrap(), Command::Other(0x100));
}

/// `oi` (overrun ignore) is bit 0x0e of the cqc, i.e. bit 17 of its first big-endian dword
/// (mlx5_ifc.h: status[4], reserved[2], dbr_umem_valid, apu_cq, cqe_sz[3], cc, reserved,
/// scqe_break_moderation_en, oi, ...); cqe_sz sits at bits 23:21.
#[test]
fn create_cq_oi_bit_is_bit_17_of_the_first_cqc_dword() {
    let mut cmd = vec![0u8; 256];
    cmd[0..2].copy_from_slice(&0x400u16.to_be_bytes());
    // log_cq_size = 6 so the command is otherwise well formed.
    cmd[16 + 12..16 + 16].copy_from_slice(&(6u32 << 24).to_be_bytes());
    cmd[16..20].copy_from_slice(&(1u32 << 17).to_be_bytes());
    assert!(prm::decode_create_cq(&cmd).unwrap().oi);
    cmd[16..20].copy_from_slice(&(1u32 << 16).to_be_bytes());
    assert!(!prm::decode_create_cq(&cmd).unwrap().oi);
}

#[test]
fn encode_is_the_inverse_of_decode() {
    let ok = Cqe {
        opcode: cqe::opcode::RESP_SEND_IMM,
        owner: 1,
        solicited: true,
        format: 1,
        wqe_counter: 0xbeef,
        byte_cnt: 4096,
        qpn: 0x12_3456,
        send_opcode: 0,
        timestamp: 0x0102_0304_0506_0708,
        syndrome: 0,
        vendor_syndrome: 0,
        imm_inval_pkey: 0xdead_beef,
        src_qp: 0xab_cdef,
        srqn_uidx: 0x77,
        signature: 0x5a,
    };
    // Index 4 of a 4-entry ring is in lap 1: owner 1.
    assert_eq!(cqe::decode(&cqe::encode(&ok, 4, 4)), ok);
    let err = Cqe {
        opcode: cqe::opcode::REQ_ERR,
        owner: 0,
        timestamp: 0,
        syndrome: 0x05,
        vendor_syndrome: 0x88,
        ..ok
    };
    assert_eq!(cqe::decode(&cqe::encode(&err, 0, 4)), err);
}
