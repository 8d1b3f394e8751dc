//! CQE64, doorbell records, PRM devx commands, umem resolution and discovery.

use sigmatrace_observe::discover::{
    CudaMemEvent, Discovery, InitObjCq, InitObjQp, UarInfo, CU_MEMHOSTREGISTER_IOMEMORY,
};
use sigmatrace_observe::mlx5::build::{self, CqeFields};
use sigmatrace_observe::mlx5::cqe::{self, ClockInfo, TsFormat};
use sigmatrace_observe::mlx5::prm::{
    self, AddressPath, Command, CreateCqIn, CreateQpIn, ModifyQpIn,
};
use sigmatrace_observe::mlx5::{dbr, wqe::Transport};
use sigmatrace_observe::umem::{Umem, UmemError, UmemRegistry};
use sigmatrace_observe::QueueDesc;
use sigmatrace_schemas::{discovery, mem_kind};

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
    let f = CqeFields {
        opcode: 13,
        wqe_counter: 0x42,
        byte_cnt: 8192,
        qpn: 0xabcdef,
        send_opcode: 8,
        timestamp: 0x0102_0304_0506_0708,
        syndrome: 5,
        vendor_syndrome: 0x88,
        imm: 0,
        src_qp: 0x1234,
    };
    assert_eq!(build::cqe64(&f, 0, 4), b);
}

#[test]
fn owner_bit_phases() {
    let cnt = 4;
    // Fresh buffer: INVALID, owner 0 → never valid.
    for n in 0..8 {
        assert!(!cqe::is_valid(build::INVALID_CQE_OP_OWN, n, cnt));
    }
    // Lap 0 entries carry owner 0, lap 1 owner 1, lap 2 owner 0 again.
    for n in 0..12u32 {
        let e = build::cqe64(&CqeFields::default(), n, cnt);
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
    let b = build::create_qp_in(&qp_in());
    // Spot-check the byte offsets of mlx5-queues.md §5 directly.
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
        prm::decode_create_qp(&build::create_qp_in(&regular))
            .unwrap()
            .rq_bytes(),
        16 * 64
    );
    assert!(prm::decode_create_qp(&b[..200]).is_err());
}

#[test]
fn prm_create_cq_and_outputs() {
    let b = build::create_cq_in(&cq_in());
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
    let d128 = prm::decode_create_cq(&build::create_cq_in(&CreateCqIn {
        cqe_size: 128,
        ..cq_in()
    }))
    .unwrap();
    assert_eq!(d128.cqe_size, 128);
    let out = prm::decode_output(&build::cmd_out(0x1234)).unwrap();
    assert_eq!((out.status, out.number), (0, 0x1234));
    assert_eq!(prm::decode_output(&[0; 4]), None);
}

#[test]
fn prm_modify_and_destroy() {
    let path = AddressPath {
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
    };
    let b = build::modify_qp_in(&m);
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
        let b = build::modify_qp_in(&ModifyQpIn { opcode: op, ..m });
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

#[test]
fn umem_registry_resolves() {
    let mut r = UmemRegistry::new();
    r.register(Umem {
        id: 5,
        addr: 0x10000,
        size: 0x1000,
        dmabuf_fd: None,
        handle: 0xa,
    });
    assert_eq!(r.resolve(5, 0x100, 8), Ok(0x10100));
    assert_eq!(r.resolve(5, 0xff8, 8), Ok(0x10ff8));
    assert!(matches!(
        r.resolve(5, 0xffc, 8),
        Err(UmemError::OutOfRange { .. })
    ));
    assert_eq!(r.resolve(6, 0, 8), Err(UmemError::Unknown(6)));
    assert_eq!(r.deregister_handle(0xa).map(|u| u.id), Some(5));
    assert!(r.is_empty());
}

#[test]
fn discovery_devx_path() {
    let mut d = Discovery::new();
    // Rings in GPU memory (cuMemAlloc), DBR umem in GPU memory too.
    d.on_cuda_mem(&CudaMemEvent::DeviceAlloc {
        ptr: 0x7000_0000,
        size: 0x10_0000,
    });
    d.on_devx_umem_reg(0xa1, 21, 0x7000_0000, 0x4_0000, None);
    d.on_devx_umem_reg(0xa2, 22, 0x7008_0000, 0x1000, Some(9));
    d.on_devx_umem_reg(0xa3, 23, 0x7009_0000, 0x4000, None);
    let uar = d.on_alloc_uar(&UarInfo {
        handle: 0xb0,
        page_id: 0x77,
        reg_addr: 0x5555_0800,
        base_addr: 0x5555_0000,
        mmap_off: 0,
    });
    assert!(matches!(uar, QueueDesc::Uar(u) if u.device_alias == 0));
    d.on_cuda_mem(&CudaMemEvent::HostRegister {
        ptr: 0x5555_0000,
        size: 0x1000,
        flags: CU_MEMHOSTREGISTER_IOMEMORY,
    });
    let changed = d.on_cuda_mem(&CudaMemEvent::DevicePointer {
        host: 0x5555_0000,
        device: 0x9000_0000,
    });
    assert!(matches!(changed[..], [QueueDesc::Uar(u)] if u.device_alias == 0x9000_0800));
    let cq = d
        .on_devx_obj_create(0xc1, &build::create_cq_in(&cq_in()), &build::cmd_out(0x401))
        .unwrap()
        .unwrap();
    let QueueDesc::Cq(c) = cq else { panic!() };
    assert_eq!(
        (c.cqn, c.base, c.cqe_cnt, c.dbrec, c.memory, c.ci_valid),
        (0x401, 0x7009_0000, 256, 0x7008_0080, mem_kind::GPU, false)
    );
    assert_eq!(c.doorbell, 0x5555_0800);
    let qp = d
        .on_devx_obj_create(0xc2, &build::create_qp_in(&qp_in()), &build::cmd_out(0x99))
        .unwrap()
        .unwrap();
    let QueueDesc::Send(s) = qp else { panic!() };
    assert_eq!(
        (s.qpn, s.base, s.wqebbs, s.dbrec, s.cqn, s.transport),
        (0x99, 0x7000_1000, 128, 0x7008_0040, 0x401, Transport::Dci)
    );
    assert_eq!((s.memory, s.discovery), (mem_kind::GPU, discovery::DEVX));
    let rec = qp.to_record(1);
    assert_eq!(
        (rec.number, rec.depth, rec.stride, rec.hdr.aux),
        (0x99, 128, 64, 1 | 1 << 8 | 2 << 16)
    );
    // A failed command (status != 0) discovers nothing; a short buffer is an error.
    let mut bad = build::cmd_out(0x98);
    bad[0] = 1;
    assert_eq!(
        d.on_devx_obj_create(0xc3, &build::create_qp_in(&qp_in()), &bad)
            .unwrap(),
        None
    );
    assert!(d
        .on_devx_obj_create(0xc4, &[0x05, 0x00, 0, 0], &build::cmd_out(1))
        .is_err());
    // Connection from INIT2RTR survives RTR2RTS.
    let m = ModifyQpIn {
        opcode: prm::cmd::INIT2RTR_QP,
        qpn: 0x99,
        remote_qpn: 0x1aa,
        mtu: 5,
        ..Default::default()
    };
    let t = d
        .on_devx_obj_modify(0xc2, &build::modify_qp_in(&m), &build::cmd_out(0))
        .unwrap()
        .unwrap();
    assert_eq!((t.state, t.cmd.remote_qpn), (2, 0x1aa));
    let m2 = ModifyQpIn {
        opcode: prm::cmd::RTR2RTS_QP,
        qpn: 0x99,
        next_send_psn: 7,
        ..Default::default()
    };
    let t = d
        .on_devx_obj_modify(0xc2, &build::modify_qp_in(&m2), &build::cmd_out(0))
        .unwrap()
        .unwrap();
    assert_eq!(
        (t.state, t.cmd.remote_qpn, t.cmd.next_send_psn),
        (3, 0x1aa, 7)
    );
    assert_eq!(d.on_devx_obj_destroy(0xc2), Some(qp));
    assert!(d.send_queue(0x99).is_none());
    assert_eq!(d.on_devx_obj_destroy(0xc1), Some(cq));
    assert_eq!(d.on_devx_obj_destroy(0xc1), None);
}

#[test]
fn discovery_init_obj_path_and_cuda_records() {
    let mut d = Discovery::new();
    d.on_cuda_mem(&CudaMemEvent::HostAlloc {
        ptr: 0x10_0000,
        size: 0x10000,
        flags: 1,
    });
    let q = d
        .on_init_obj_qp(&InitObjQp {
            qpn: 7,
            qp_type: 2,
            dbrec: 0x20_0000,
            sq_buf: 0x10_0000,
            sq_wqe_cnt: 64,
            sq_stride: 64,
            bf_reg: 0x30_0800,
            bf_size: 256,
            send_cqn: 3,
        })
        .unwrap();
    let QueueDesc::Send(s) = q else { panic!() };
    assert_eq!(
        (s.memory, s.dbr_memory, s.wqebbs, s.transport),
        (mem_kind::HOST_PINNED, mem_kind::HOST, 64, Transport::Rc)
    );
    assert!(q.host_watchable());
    let c = d
        .on_init_obj_cq(&InitObjCq {
            cqn: 3,
            buf: 0x40_0000,
            dbrec: 0x20_0040,
            cqe_cnt: 128,
            cqe_size: 64,
            cq_uar: 0,
        })
        .unwrap();
    assert!(matches!(c, QueueDesc::Cq(c) if c.ci_valid && c.memory == mem_kind::HOST));
    let r = CudaMemEvent::DevicePointer {
        host: 0x10_0000,
        device: 0xd000,
    }
    .to_record(5, 0);
    assert_eq!((r.hdr.aux, r.addr, r.alias), (6, 0x10_0000, 0xd000));
    d.on_cuda_mem(&CudaMemEvent::DeviceFree { ptr: 0x10_0000 });
    assert_eq!(d.memory().kind_of(0x10_0000), mem_kind::HOST);
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
    assert!(
        sigmatrace_observe::mlx5::prm::decode_create_cq(&cmd)
            .unwrap()
            .oi
    );
    cmd[16..20].copy_from_slice(&(1u32 << 16).to_be_bytes());
    assert!(
        !sigmatrace_observe::mlx5::prm::decode_create_cq(&cmd)
            .unwrap()
            .oi
    );
}
