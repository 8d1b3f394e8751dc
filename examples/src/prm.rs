//! PRM command inputs for devx queue construction (CREATE_CQ, CREATE_QP, RST2INIT, INIT2RTR,
//! RTR2RTS), written as NVSHMEM IBGDA and DOCA GPUNetIO write them. Layouts: the `mlx5_ifc.h`
//! bit layouts summarised in `shared/reference/mlx5-queues.md` §5; all fields big-endian.

/// Command opcodes.
pub mod cmd {
    pub const CREATE_CQ: u16 = 0x400;
    pub const CREATE_QP: u16 = 0x500;
    pub const RST2INIT_QP: u16 = 0x502;
    pub const INIT2RTR_QP: u16 = 0x503;
    pub const RTR2RTS_QP: u16 = 0x504;
}

/// Input length of every command built here (header, context, umem fields).
pub const IN_LEN: usize = 272;
/// Output length (status, syndrome, object number, reserved).
pub const OUT_LEN: usize = 16;
/// QP context offset in create/modify QP inputs.
pub const QPC: usize = 24;
/// CQ context offset in CREATE_CQ.
pub const CQC: usize = 16;

/// `qpc.st` for RC.
pub const ST_RC: u8 = 0x0;
/// `qpc.rq_type` zero-size RQ (no receive queue).
pub const RQ_ZERO_SIZE: u32 = 3;
/// MTU code 1024 bytes.
pub const MTU_1024: u32 = 3;

fn set32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn or32(b: &mut [u8], at: usize, v: u32) {
    let cur = u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    set32(b, at, cur | v);
}

fn set64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

fn header(op: u16) -> [u8; IN_LEN] {
    let mut b = [0u8; IN_LEN];
    b[0..2].copy_from_slice(&op.to_be_bytes());
    b
}

/// CREATE_CQ on a umem: CQEs at `(cq_umem_id, cq_off)`, doorbell record at
/// `(dbr_umem_id, dbr_off)`, 64-byte CQEs, `log_cq_size`, UAR page, EQ.
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
        let mut b = header(cmd::CREATE_CQ);
        let c = CQC;
        // dbr_umem_valid (bit 25); cqe_sz = 0 (64 B); oi = 0 (the consumer index is kept).
        set32(&mut b, c, 1 << 25);
        set32(&mut b, c + 4, self.dbr_umem_id);
        set32(
            &mut b,
            c + 12,
            ((self.log_cq_size as u32 & 0x1f) << 24) | (self.uar_page & 0x00ff_ffff),
        );
        set32(&mut b, c + 20, self.c_eqn & 0xff);
        set64(&mut b, c + 56, self.dbr_offset);
        set64(&mut b, 80, self.cq_umem_offset);
        set32(&mut b, 88, self.cq_umem_id);
        set32(&mut b, 92, 0x8000_0000);
        b
    }
}

/// CREATE_QP (RC, send queue only) on a umem.
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
        let mut b = header(cmd::CREATE_QP);
        let q = QPC;
        b[q + 1] = ST_RC;
        set32(&mut b, q + 4, self.pd & 0x00ff_ffff);
        // log_rq_size 0, log_rq_stride 0, no_sq 0, log_sq_size.
        set32(&mut b, q + 8, (self.log_sq_size as u32 & 0xf) << 11);
        set32(&mut b, q + 12, self.uar_page & 0x00ff_ffff);
        set32(&mut b, q + 124, self.cqn & 0x00ff_ffff); // cqn_snd
        set32(&mut b, q + 156, self.cqn & 0x00ff_ffff); // cqn_rcv
        set64(&mut b, q + 160, self.dbr_offset); // dbr_addr
        set32(&mut b, q + 172, RQ_ZERO_SIZE << 24); // rq_type
        set32(&mut b, q + 208, 1 << 28); // dbr_umem_valid
        set32(&mut b, 252, self.dbr_umem_id);
        set64(&mut b, 256, self.wq_umem_offset);
        set32(&mut b, 264, self.wq_umem_id);
        set32(&mut b, 268, 0x8000_0000); // wq_umem_valid
        b
    }
}

/// Remote access enabled on the responder side of a QP (`qpc.rre/rwe/rae`).
pub const ACCESS_ALL: u32 = (1 << 15) | (1 << 14) | (1 << 13);

/// RST2INIT: port, P_Key index 0, remote read/write/atomic enabled.
pub fn rst2init(qpn: u32, port: u8) -> [u8; IN_LEN] {
    let mut b = header(cmd::RST2INIT_QP);
    set32(&mut b, 8, qpn & 0x00ff_ffff);
    let a = QPC + 24;
    // primary_address_path.vhca_port_num (ads dword 9, bits 23:16).
    set32(&mut b, a + 36, (port as u32) << 16);
    set32(&mut b, QPC + 144, ACCESS_ALL);
    b
}

/// The peer a QP is connected to in INIT2RTR.
#[derive(Clone, Copy, Debug)]
pub struct RemotePath {
    pub qpn: u32,
    pub lid: u16,
    /// Global route (GRH) to this GID, if the port has one.
    pub gid: Option<[u8; 16]>,
}

/// INIT2RTR: MTU 1024, remote QPN and address path, receive PSN 0, 16 responder reads/atomics.
pub fn init2rtr(qpn: u32, port: u8, remote: &RemotePath) -> [u8; IN_LEN] {
    let mut b = header(cmd::INIT2RTR_QP);
    set32(&mut b, 8, qpn & 0x00ff_ffff);
    set32(&mut b, QPC + 8, MTU_1024 << 29);
    set32(&mut b, QPC + 20, remote.qpn & 0x00ff_ffff);
    let a = QPC + 24;
    let mut d1 = remote.lid as u32;
    if let Some(gid) = remote.gid {
        d1 |= 1 << 23;
        b[a + 16..a + 32].copy_from_slice(&gid);
        set32(&mut b, a + 8, 1); // src_addr_index 0, hop_limit 1
    }
    set32(&mut b, a + 4, d1);
    set32(&mut b, a + 36, (port as u32) << 16);
    // log_rra_max = 4 (16 outstanding), access kept; min_rnr_nak 12, next_rcv_psn 0.
    set32(&mut b, QPC + 144, (4 << 21) | ACCESS_ALL);
    or32(&mut b, QPC + 148, 12 << 24);
    b
}

/// RTR2RTS: send PSN 0, 16 outstanding reads/atomics, retry 7, RNR retry 7, ack timeout 14.
pub fn rtr2rts(qpn: u32) -> [u8; IN_LEN] {
    let mut b = header(cmd::RTR2RTS_QP);
    set32(&mut b, 8, qpn & 0x00ff_ffff);
    set32(&mut b, QPC + 24 + 8, 14 << 27); // ads.ack_timeout
    set32(&mut b, QPC + 112, (4 << 21) | (7 << 16) | (7 << 13));
    set32(&mut b, QPC + 120, 0); // next_send_psn
    b
}

/// A command output: status (0 = OK), syndrome and object number (qpn/cqn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out {
    pub status: u8,
    pub syndrome: u32,
    pub number: u32,
}

pub fn decode_out(b: &[u8; OUT_LEN]) -> Out {
    Out {
        status: b[0],
        syndrome: u32::from_be_bytes(b[4..8].try_into().expect("4 bytes")),
        number: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")) & 0x00ff_ffff,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
