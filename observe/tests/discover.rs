//! Umem resolution and queue discovery: PRM commands, `mlx5dv_init_obj` outputs and CUDA
//! memory events become queue descriptions (the commands' codec is tested in the mlx5 crate).

use sigmatrace_mlx5::prm::{self, CmdOut, CreateCqIn, CreateQpIn, ModifyQpIn};
use sigmatrace_mlx5::wqe::Transport;
use sigmatrace_observe::discover::{
    CudaMemEvent, Discovery, InitObjCq, InitObjQp, UarInfo, CU_MEMHOSTREGISTER_IOMEMORY,
};
use sigmatrace_observe::umem::{Umem, UmemError, UmemRegistry};
use sigmatrace_observe::QueueDesc;
use sigmatrace_schemas::{discovery, mem_kind};

/// A DCI's CREATE_QP with what discovery reads: the send ring (size, umem 21 at 0x1000, no
/// receive queue), its doorbell record (umem 22 at 0x40), CQ, UAR page and timestamp format
/// (the command's full codec is tested in the mlx5 crate).
fn qp_in() -> CreateQpIn {
    CreateQpIn {
        st: 0x5,
        rq_type: prm::rq_type::SRQ,
        log_sq_size: 7,
        wq_umem_id: 21,
        wq_umem_offset: 0x1000,
        wq_umem_valid: true,
        dbr_umem_id: 22,
        dbr_addr: 0x40,
        dbr_umem_valid: true,
        cqn_snd: 0x401,
        uar_page: 0x77,
        ts_format: 2,
        ..Default::default()
    }
}

/// A CREATE_CQ of 256 64-byte CQEs in umem 23, doorbell record in umem 22 at 0x80, overrun
/// ignored (so its consumer index is not kept valid).
fn cq_in() -> CreateCqIn {
    CreateCqIn {
        oi: true,
        log_cq_size: 8,
        cqe_size: 64,
        cq_umem_id: 23,
        cq_umem_valid: true,
        dbr_umem_id: 22,
        dbr_addr: 0x80,
        dbr_umem_valid: true,
        uar_page: 0x77,
        ..Default::default()
    }
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
        .on_devx_obj_create(0xc1, &cq_in().encode(), &CmdOut::ok(0x401).encode())
        .unwrap()
        .unwrap();
    let QueueDesc::Cq(c) = cq else { panic!() };
    assert_eq!(
        (c.cqn, c.base, c.cqe_cnt, c.dbrec, c.memory, c.ci_valid),
        (0x401, 0x7009_0000, 256, 0x7008_0080, mem_kind::GPU, false)
    );
    assert_eq!(c.doorbell, 0x5555_0800);
    let qp = d
        .on_devx_obj_create(0xc2, &qp_in().encode(), &CmdOut::ok(0x99).encode())
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
    let mut bad = CmdOut::ok(0x98).encode();
    bad[0] = 1;
    assert_eq!(
        d.on_devx_obj_create(0xc3, &qp_in().encode(), &bad).unwrap(),
        None
    );
    assert!(d
        .on_devx_obj_create(0xc4, &[0x05, 0x00, 0, 0], &CmdOut::ok(1).encode())
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
        .on_devx_obj_modify(0xc2, &m.encode(), &CmdOut::ok(0).encode())
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
        .on_devx_obj_modify(0xc2, &m2.encode(), &CmdOut::ok(0).encode())
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
