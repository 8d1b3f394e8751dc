//! The devx commands the workloads issue to build an RC send queue on a umem (CREATE_CQ,
//! CREATE_QP, RST2INIT, INIT2RTR, RTR2RTS) with the settings NVSHMEM IBGDA and DOCA GPUNetIO
//! choose. The byte layouts are the `sigmatrace-mlx5` codec's (`mlx5/README.md`, "PRM
//! commands"); this module only picks the field values.

use sigmatrace_mlx5::prm::{
    self, AddressPath, CreateCqIn, CreateQpIn, ModifyQpIn, RdmaParams, CMD_IN_LEN, CMD_OUT_LEN,
};

pub use sigmatrace_mlx5::prm::cmd;

/// Input length of every command built here (header, context, umem fields).
pub const IN_LEN: usize = CMD_IN_LEN;
/// Output length (status, syndrome, object number, reserved).
pub const OUT_LEN: usize = CMD_OUT_LEN;

/// `qpc.st` for RC.
pub const ST_RC: u8 = 0x0;
/// MTU code 1024 bytes.
pub const MTU_1024: u8 = 3;

/// CREATE_CQ on a umem: CQEs at `(cq_umem_id, cq_umem_offset)`, doorbell record at
/// `(dbr_umem_id, dbr_offset)`, 64-byte CQEs, the consumer index kept (`oi` = 0).
pub struct CreateCq {
    pub log_cq_size: u8,
    pub uar_page: u32,
    pub c_eqn: u32,
    pub cq_umem_id: u32,
    pub cq_umem_offset: u64,
    pub dbr_umem_id: u32,
    pub dbr_offset: u64,
}

impl CreateCq {
    pub fn encode(&self) -> [u8; IN_LEN] {
        CreateCqIn {
            cqe_size: 64,
            dbr_umem_valid: true,
            dbr_umem_id: self.dbr_umem_id,
            log_cq_size: self.log_cq_size,
            uar_page: self.uar_page,
            c_eqn: self.c_eqn,
            dbr_addr: self.dbr_offset,
            cq_umem_offset: self.cq_umem_offset,
            cq_umem_id: self.cq_umem_id,
            cq_umem_valid: true,
            ..Default::default()
        }
        .encode()
    }
}

/// CREATE_QP (RC, send queue only: zero-size RQ, one CQ for both directions) on a umem.
pub struct CreateQp {
    pub pd: u32,
    pub log_sq_size: u8,
    pub uar_page: u32,
    pub cqn: u32,
    pub wq_umem_id: u32,
    pub wq_umem_offset: u64,
    pub dbr_umem_id: u32,
    pub dbr_offset: u64,
}

impl CreateQp {
    pub fn encode(&self) -> [u8; IN_LEN] {
        CreateQpIn {
            st: ST_RC,
            pd: self.pd,
            log_sq_size: self.log_sq_size,
            uar_page: self.uar_page,
            cqn_snd: self.cqn,
            cqn_rcv: self.cqn,
            rq_type: prm::rq_type::ZERO_SIZE,
            dbr_addr: self.dbr_offset,
            dbr_umem_valid: true,
            dbr_umem_id: self.dbr_umem_id,
            wq_umem_offset: self.wq_umem_offset,
            wq_umem_id: self.wq_umem_id,
            wq_umem_valid: true,
            ..Default::default()
        }
        .encode()
    }
}

/// Remote read, write and atomics enabled on the responder side.
fn access_all() -> RdmaParams {
    RdmaParams {
        rre: true,
        rwe: true,
        rae: true,
        ..Default::default()
    }
}

/// RST2INIT: port, P_Key index 0, remote read/write/atomic enabled.
pub fn rst2init(qpn: u32, port: u8) -> [u8; IN_LEN] {
    ModifyQpIn {
        opcode: cmd::RST2INIT_QP,
        qpn,
        path: AddressPath {
            vhca_port: port,
            ..Default::default()
        },
        rdma: access_all(),
        ..Default::default()
    }
    .encode()
}

/// The peer a QP is connected to in INIT2RTR.
#[derive(Clone, Copy, Debug)]
pub struct RemotePath {
    pub qpn: u32,
    pub lid: u16,
    /// Global route (GRH) to this GID, if the port has one.
    pub gid: Option<[u8; 16]>,
}

/// INIT2RTR: MTU 1024, remote QPN and address path, receive PSN 0, 16 responder
/// reads/atomics, RNR NAK timer code 12.
pub fn init2rtr(qpn: u32, port: u8, remote: &RemotePath) -> [u8; IN_LEN] {
    ModifyQpIn {
        opcode: cmd::INIT2RTR_QP,
        qpn,
        mtu: MTU_1024,
        remote_qpn: remote.qpn,
        path: AddressPath {
            grh: remote.gid.is_some(),
            rlid: remote.lid,
            hop_limit: if remote.gid.is_some() { 1 } else { 0 },
            rgid: remote.gid.unwrap_or_default(),
            vhca_port: port,
            ..Default::default()
        },
        rdma: RdmaParams {
            log_rra_max: 4,
            min_rnr_nak: 12,
            ..access_all()
        },
        ..Default::default()
    }
    .encode()
}

/// RTR2RTS: send PSN 0, 16 outstanding reads/atomics, retry 7, RNR retry 7, ack timeout 14.
pub fn rtr2rts(qpn: u32) -> [u8; IN_LEN] {
    ModifyQpIn {
        opcode: cmd::RTR2RTS_QP,
        qpn,
        path: AddressPath {
            ack_timeout: 14,
            ..Default::default()
        },
        rdma: RdmaParams {
            log_sra_max: 4,
            retry_count: 7,
            rnr_retry: 7,
            ..Default::default()
        },
        ..Default::default()
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigmatrace_mlx5::prm::{decode_command, Command, QPC};
    use sigmatrace_mlx5::wqe::Transport;

    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn create_qp_fields_at_reference_offsets() {
        let b = CreateQp {
            pd: 0x12,
            log_sq_size: 7,
            uar_page: 0x33,
            cqn: 0x456,
            wq_umem_id: 9,
            wq_umem_offset: 0x1000,
            dbr_umem_id: 10,
            dbr_offset: 0x40,
        }
        .encode();
        assert_eq!(u16::from_be_bytes([b[0], b[1]]), 0x500);
        assert_eq!(
            (be32(&b, 32) >> 11) & 0xf,
            7,
            "log_sq_size dword @32 bits 14:11"
        );
        assert_eq!(be32(&b, 36) & 0xffffff, 0x33, "uar_page @36");
        assert_eq!(be32(&b, 148) & 0xffffff, 0x456, "cqn_snd @148");
        assert_eq!(be32(&b, 180) & 0xffffff, 0x456, "cqn_rcv @180");
        assert_eq!(u64::from_be_bytes(b[184..192].try_into().unwrap()), 0x40);
        assert_eq!(be32(&b, 252), 10, "dbr_umem_id @252");
        assert_eq!(u64::from_be_bytes(b[256..264].try_into().unwrap()), 0x1000);
        assert_eq!(be32(&b, 264), 9, "wq_umem_id @264");
        assert_eq!(be32(&b, 268) >> 31, 1, "wq_umem_valid");
    }

    #[test]
    fn create_cq_fields_at_reference_offsets() {
        let b = CreateCq {
            log_cq_size: 6,
            uar_page: 0x21,
            c_eqn: 3,
            cq_umem_id: 4,
            cq_umem_offset: 0x80,
            dbr_umem_id: 5,
            dbr_offset: 8,
        }
        .encode();
        assert_eq!(u16::from_be_bytes([b[0], b[1]]), 0x400);
        assert_eq!(be32(&b, 16 + 4), 5, "dbr_umem_id cqc+4");
        assert_eq!((be32(&b, 16 + 12) >> 24) & 0x1f, 6);
        assert_eq!(be32(&b, 16 + 12) & 0xffffff, 0x21);
        assert_eq!(be32(&b, 16 + 20) & 0xff, 3);
        assert_eq!(
            u64::from_be_bytes(b[72..80].try_into().unwrap()),
            8,
            "dbr_addr cqc+56"
        );
        assert_eq!(u64::from_be_bytes(b[80..88].try_into().unwrap()), 0x80);
        assert_eq!(be32(&b, 88), 4);
    }

    #[test]
    fn init2rtr_carries_remote_qpn_and_path() {
        let gid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        let b = init2rtr(
            0x77,
            1,
            &RemotePath {
                qpn: 0xabcde,
                lid: 5,
                gid: Some(gid),
            },
        );
        assert_eq!(u16::from_be_bytes([b[0], b[1]]), 0x503);
        assert_eq!(be32(&b, 8) & 0xffffff, 0x77);
        assert_eq!(be32(&b, QPC + 20) & 0xffffff, 0xabcde);
        assert_eq!(be32(&b, QPC + 28) & 0xffff, 5, "rlid");
        assert_ne!(be32(&b, QPC + 28) & (1 << 23), 0, "grh");
        assert_eq!(&b[QPC + 40..QPC + 56], &gid);
    }

    /// The workload's commands, read back by the codec's decoders (what softnic and the
    /// tracer see): an RC send-only QP, connected, with the responder and retry settings.
    #[test]
    fn commands_decode_to_the_workload_settings() {
        let Command::CreateQp(q) = decode_command(
            &CreateQp {
                pd: 1,
                log_sq_size: 6,
                uar_page: 2,
                cqn: 0x33,
                wq_umem_id: 4,
                wq_umem_offset: 0,
                dbr_umem_id: 4,
                dbr_offset: 0x1000,
            }
            .encode(),
        )
        .unwrap() else {
            panic!("not CREATE_QP")
        };
        assert_eq!(q.transport(), Some(Transport::Rc));
        assert_eq!((q.sq_wqebbs(), q.rq_bytes()), (64, 0));
        assert_eq!(
            (q.cqn_snd, q.cqn_rcv, q.dbr_location()),
            (0x33, 0x33, (4, 0x1000))
        );
        let Command::ModifyQp(r) = decode_command(&rst2init(5, 1)).unwrap() else {
            panic!("not a transition")
        };
        assert!(r.rdma.rre && r.rdma.rwe && r.rdma.rae && r.path.vhca_port == 1);
        let remote = RemotePath {
            qpn: 9,
            lid: 3,
            gid: None,
        };
        let Command::ModifyQp(m) = decode_command(&init2rtr(5, 1, &remote)).unwrap() else {
            panic!("not a transition")
        };
        assert_eq!(
            (m.remote_qpn, m.mtu, m.path.rlid, m.path.grh),
            (9, MTU_1024, 3, false)
        );
        assert_eq!((m.rdma.log_rra_max, m.rdma.min_rnr_nak), (4, 12));
        let Command::ModifyQp(t) = decode_command(&rtr2rts(5)).unwrap() else {
            panic!("not a transition")
        };
        let r = t.rdma;
        assert_eq!(
            (
                r.log_sra_max,
                r.retry_count,
                r.rnr_retry,
                t.path.ack_timeout
            ),
            (4, 7, 7, 14)
        );
    }
}
