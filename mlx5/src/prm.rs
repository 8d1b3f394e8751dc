//! PRM devx commands, decoded and encoded: CREATE_QP / CREATE_CQ inputs and outputs, the QP
//! state transitions that arrive through `mlx5dv_devx_obj_modify`, and DESTROY commands.
//! Byte offsets: README "PRM commands" (the `mlx5_ifc.h` bit layouts of rdma-core and NVSHMEM).
//!
//! Every encoder writes exactly the fields its decoder reads, into a zeroed buffer of the
//! command's fixed length ([`CMD_IN_LEN`]); a decoder accepts any buffer that reaches its last
//! field.

use crate::be;
use crate::wqe::Transport;

/// Command opcodes (first be16 of a command input).
pub mod cmd {
    pub const CREATE_CQ: u16 = 0x400;
    pub const DESTROY_CQ: u16 = 0x401;
    pub const CREATE_QP: u16 = 0x500;
    pub const DESTROY_QP: u16 = 0x501;
    pub const RST2INIT_QP: u16 = 0x502;
    pub const INIT2RTR_QP: u16 = 0x503;
    pub const RTR2RTS_QP: u16 = 0x504;
    pub const RTS2RTS_QP: u16 = 0x505;
    pub const SQERR2RTS_QP: u16 = 0x506;
    pub const QP_2ERR: u16 = 0x507;
    pub const QP_2RST: u16 = 0x50a;
    pub const INIT2INIT_QP: u16 = 0x50e;
}

/// Fixed length of the CREATE_QP, CREATE_CQ and QP transition inputs (`mlx5_ifc.h`: the
/// command header, the context and the umem fields, without the trailing page list).
pub const CMD_IN_LEN: usize = 272;
/// Length of a command output (status, syndrome, object number, reserved).
pub const CMD_OUT_LEN: usize = 16;
/// Offset of the QP context in create/modify QP inputs.
pub const QPC: usize = 24;
/// Offset of the CQ context in CREATE_CQ input.
pub const CQC: usize = 16;
/// Minimum CREATE_QP input length decoded (through `wq_umem_valid`).
pub const CREATE_QP_IN_MIN: usize = 272;
/// Minimum CREATE_CQ input length decoded (through `cq_umem_valid`).
pub const CREATE_CQ_IN_MIN: usize = 96;
/// Minimum modify-QP input length decoded (through the primary address path).
pub const MODIFY_QP_IN_MIN: usize = QPC + 68;

/// `qpc.rq_type` values.
pub mod rq_type {
    pub const REGULAR: u8 = 0;
    pub const SRQ: u8 = 1;
    pub const ZERO_SIZE: u8 = 3;
}

/// Why a command could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrmError {
    #[error(
        "command buffer of {have} bytes is shorter than the {need} bytes opcode {opcode:#x} needs"
    )]
    Short {
        opcode: u16,
        need: usize,
        have: usize,
    },
}

fn need(b: &[u8], opcode: u16, n: usize) -> Result<(), PrmError> {
    if b.len() < n {
        Err(PrmError::Short {
            opcode,
            need: n,
            have: b.len(),
        })
    } else {
        Ok(())
    }
}

/// Decoded CREATE_QP input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateQpIn {
    /// `qpc.st` service type.
    pub st: u8,
    pub pd: u32,
    pub log_rq_size: u8,
    pub log_rq_stride: u8,
    pub no_sq: bool,
    pub log_sq_size: u8,
    pub ts_format: u8,
    pub uar_page: u32,
    pub cqn_snd: u32,
    pub cqn_rcv: u32,
    pub rq_type: u8,
    pub dbr_addr: u64,
    pub dbr_umem_valid: bool,
    pub dbr_umem_id: u32,
    pub wq_umem_offset: u64,
    pub wq_umem_id: u32,
    pub wq_umem_valid: bool,
}

impl CreateQpIn {
    /// The QP's transport.
    pub fn transport(&self) -> Option<Transport> {
        Transport::from_qpc_st(self.st)
    }

    /// SQ depth in WQEBBs (0 when `no_sq`).
    pub fn sq_wqebbs(&self) -> u32 {
        if self.no_sq {
            0
        } else {
            1 << self.log_sq_size
        }
    }

    /// Bytes of the receive queue, which precedes the SQ in the WQ buffer; zero for SRQ and
    /// zero-size RQ types.
    pub fn rq_bytes(&self) -> u64 {
        if self.rq_type == rq_type::REGULAR {
            (1u64 << self.log_rq_size) * (16u64 << self.log_rq_stride)
        } else {
            0
        }
    }

    /// The umem holding the doorbell record and the offset in it: the DBR umem when
    /// `dbr_umem_valid`, else the WQ umem (older behaviour).
    pub fn dbr_location(&self) -> (u32, u64) {
        if self.dbr_umem_valid {
            (self.dbr_umem_id, self.dbr_addr)
        } else {
            (self.wq_umem_id, self.dbr_addr)
        }
    }
}

/// Decodes a CREATE_QP input.
pub fn decode_create_qp(b: &[u8]) -> Result<CreateQpIn, PrmError> {
    need(b, cmd::CREATE_QP, CREATE_QP_IN_MIN)?;
    let q = QPC;
    let d2 = be::get32(b, q + 8);
    Ok(CreateQpIn {
        st: b[q + 1],
        pd: be::get32(b, q + 4) & 0x00ff_ffff,
        log_rq_size: ((d2 >> 19) & 0xf) as u8,
        log_rq_stride: ((d2 >> 16) & 0x7) as u8,
        no_sq: d2 & (1 << 15) != 0,
        log_sq_size: ((d2 >> 11) & 0xf) as u8,
        ts_format: ((d2 >> 6) & 0x3) as u8,
        uar_page: be::get32(b, q + 12) & 0x00ff_ffff,
        cqn_snd: be::get32(b, 148) & 0x00ff_ffff,
        cqn_rcv: be::get32(b, 180) & 0x00ff_ffff,
        dbr_addr: be::get64(b, 184),
        rq_type: ((be::get32(b, q + 172) >> 24) & 0x7) as u8,
        dbr_umem_valid: be::get32(b, q + 208) & (1 << 28) != 0,
        dbr_umem_id: be::get32(b, 252),
        wq_umem_offset: be::get64(b, 256),
        wq_umem_id: be::get32(b, 264),
        wq_umem_valid: be::get32(b, 268) & 0x8000_0000 != 0,
    })
}

/// Decoded CREATE_CQ input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateCqIn {
    /// CQE size in bytes (64 or 128).
    pub cqe_size: u32,
    /// Overrun ignore: hardware never checks the consumer index.
    pub oi: bool,
    /// Collapsed CQ: every CQE goes to entry 0.
    pub cc: bool,
    pub dbr_umem_valid: bool,
    pub dbr_umem_id: u32,
    pub ts_format: u8,
    pub log_cq_size: u8,
    pub uar_page: u32,
    pub c_eqn: u32,
    pub dbr_addr: u64,
    pub cq_umem_offset: u64,
    pub cq_umem_id: u32,
    pub cq_umem_valid: bool,
}

impl CreateCqIn {
    /// Number of CQEs.
    pub fn cqe_cnt(&self) -> u32 {
        1 << self.log_cq_size
    }

    /// The umem holding the doorbell record and the offset in it.
    pub fn dbr_location(&self) -> (u32, u64) {
        if self.dbr_umem_valid {
            (self.dbr_umem_id, self.dbr_addr)
        } else {
            (self.cq_umem_id, self.dbr_addr)
        }
    }
}

/// Decodes a CREATE_CQ input.
pub fn decode_create_cq(b: &[u8]) -> Result<CreateCqIn, PrmError> {
    need(b, cmd::CREATE_CQ, CREATE_CQ_IN_MIN)?;
    let c = CQC;
    let d0 = be::get32(b, c);
    let d3 = be::get32(b, c + 12);
    Ok(CreateCqIn {
        cqe_size: if (d0 >> 21) & 0x7 == 1 { 128 } else { 64 },
        cc: d0 & (1 << 20) != 0,
        oi: d0 & (1 << 17) != 0,
        dbr_umem_valid: d0 & (1 << 25) != 0,
        dbr_umem_id: be::get32(b, c + 4),
        ts_format: (be::get32(b, c + 8) & 0x3) as u8,
        log_cq_size: ((d3 >> 24) & 0x1f) as u8,
        uar_page: d3 & 0x00ff_ffff,
        c_eqn: be::get32(b, c + 20) & 0xff,
        dbr_addr: be::get64(b, c + 56),
        cq_umem_offset: be::get64(b, 80),
        cq_umem_id: be::get32(b, 88),
        cq_umem_valid: be::get32(b, 92) & 0x8000_0000 != 0,
    })
}

/// The primary address path of a QP context (`mlx5_ifc_ads_bits`, 44 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddressPath {
    /// Local ACK timeout exponent (`ads` dword 2, bits 31:27).
    pub ack_timeout: u8,
    pub grh: bool,
    pub rlid: u16,
    pub src_addr_index: u8,
    pub hop_limit: u8,
    pub tclass: u8,
    pub flow_label: u32,
    pub rgid: [u8; 16],
    pub sl: u8,
    pub vhca_port: u8,
    pub rmac: [u8; 6],
    pub udp_sport: u16,
}

fn decode_ads(b: &[u8], a: usize) -> AddressPath {
    let d1 = be::get32(b, a + 4);
    let d2 = be::get32(b, a + 8);
    let d3 = be::get32(b, a + 12);
    let d9 = be::get32(b, a + 36);
    let mut rgid = [0u8; 16];
    rgid.copy_from_slice(&b[a + 16..a + 32]);
    let mut rmac = [0u8; 6];
    rmac.copy_from_slice(&b[a + 38..a + 44]);
    AddressPath {
        ack_timeout: (d2 >> 27) as u8,
        grh: d1 & (1 << 23) != 0,
        rlid: d1 as u16,
        src_addr_index: (d2 >> 16) as u8,
        hop_limit: d2 as u8,
        tclass: ((d3 >> 20) & 0xff) as u8,
        flow_label: d3 & 0x000f_ffff,
        rgid,
        sl: ((d9 >> 24) & 0xf) as u8,
        vhca_port: (d9 >> 16) as u8,
        rmac,
        udp_sport: be::get16(b, a + 34),
    }
}

/// Decoded QP state transition (RST2INIT, INIT2RTR, RTR2RTS, …).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifyQpIn {
    pub opcode: u16,
    pub qpn: u32,
    pub opt_param_mask: u32,
    /// Path MTU code (1 = 256 … 5 = 4096).
    pub mtu: u8,
    /// Remote QPN (meaningful from INIT2RTR on).
    pub remote_qpn: u32,
    pub path: AddressPath,
    pub next_send_psn: u32,
    pub next_rcv_psn: u32,
    /// Retry, RNR and outstanding-read settings (decoded from inputs reaching `next_rcv_psn`).
    pub rdma: RdmaParams,
}

/// The RC retry and outstanding-read settings of a QP context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RdmaParams {
    /// log2 of outstanding RDMA reads/atomics as requester (`qpc` dword 28, bits 23:21).
    pub log_sra_max: u8,
    /// Transport retries (dword 28, bits 18:16).
    pub retry_count: u8,
    /// RNR retries (dword 28, bits 15:13).
    pub rnr_retry: u8,
    /// log2 of outstanding RDMA reads/atomics as responder (dword 36, bits 23:21).
    pub log_rra_max: u8,
    /// Remote read / write / atomic enable (dword 36, bits 15 / 14 / 13).
    pub rre: bool,
    pub rwe: bool,
    pub rae: bool,
    /// Minimum RNR NAK timer code (dword 37, bits 28:24).
    pub min_rnr_nak: u8,
}

/// Target QP state of a transition opcode, as `ibv_qp_state` (INIT 1, RTR 2, RTS 3, ERR 6,
/// RESET 0).
pub fn transition_target_state(opcode: u16) -> Option<u8> {
    match opcode {
        cmd::RST2INIT_QP | cmd::INIT2INIT_QP => Some(1),
        cmd::INIT2RTR_QP => Some(2),
        cmd::RTR2RTS_QP | cmd::RTS2RTS_QP | cmd::SQERR2RTS_QP => Some(3),
        cmd::QP_2ERR => Some(6),
        cmd::QP_2RST => Some(0),
        _ => None,
    }
}

/// Decodes a QP transition input. 2ERR / 2RST carry only the QPN.
pub fn decode_modify_qp(b: &[u8]) -> Result<ModifyQpIn, PrmError> {
    let opcode = if b.len() >= 2 { be::get16(b, 0) } else { 0 };
    need(b, opcode, 12)?;
    let mut m = ModifyQpIn {
        opcode,
        qpn: be::get32(b, 8) & 0x00ff_ffff,
        ..Default::default()
    };
    if matches!(opcode, cmd::QP_2ERR | cmd::QP_2RST) {
        return Ok(m);
    }
    need(b, opcode, MODIFY_QP_IN_MIN)?;
    m.opt_param_mask = be::get32(b, 16);
    m.mtu = (be::get32(b, QPC + 8) >> 29) as u8;
    m.remote_qpn = be::get32(b, QPC + 20) & 0x00ff_ffff;
    m.path = decode_ads(b, QPC + 24);
    if b.len() >= QPC + 152 {
        m.next_send_psn = be::get32(b, QPC + 120) & 0x00ff_ffff;
        let d28 = be::get32(b, QPC + 112);
        let d36 = be::get32(b, QPC + 144);
        let d37 = be::get32(b, QPC + 148);
        m.next_rcv_psn = d37 & 0x00ff_ffff;
        m.rdma = RdmaParams {
            log_sra_max: ((d28 >> 21) & 0x7) as u8,
            retry_count: ((d28 >> 16) & 0x7) as u8,
            rnr_retry: ((d28 >> 13) & 0x7) as u8,
            log_rra_max: ((d36 >> 21) & 0x7) as u8,
            rre: d36 & (1 << 15) != 0,
            rwe: d36 & (1 << 14) != 0,
            rae: d36 & (1 << 13) != 0,
            min_rnr_nak: ((d37 >> 24) & 0x1f) as u8,
        };
    }
    Ok(m)
}

/// Status, syndrome and object number of a command output (create_qp_out.qpn,
/// create_cq_out.cqn: low 24 bits of the dword at byte 8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdOut {
    pub status: u8,
    pub syndrome: u32,
    pub number: u32,
}

/// Decodes a command output (`None` if shorter than 12 bytes).
pub fn decode_output(b: &[u8]) -> Option<CmdOut> {
    if b.len() < 12 {
        return None;
    }
    Some(CmdOut {
        status: b[0],
        syndrome: be::get32(b, 4),
        number: be::get32(b, 8) & 0x00ff_ffff,
    })
}

/// Any command SigmaTrace understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    CreateQp(CreateQpIn),
    CreateCq(CreateCqIn),
    ModifyQp(ModifyQpIn),
    DestroyQp {
        qpn: u32,
    },
    DestroyCq {
        cqn: u32,
    },
    /// Another opcode (not decoded).
    Other(u16),
}

/// Decodes a command input by its opcode.
pub fn decode_command(b: &[u8]) -> Result<Command, PrmError> {
    need(b, 0, 2)?;
    let op = be::get16(b, 0);
    Ok(match op {
        cmd::CREATE_QP => Command::CreateQp(decode_create_qp(b)?),
        cmd::CREATE_CQ => Command::CreateCq(decode_create_cq(b)?),
        cmd::DESTROY_QP => {
            need(b, op, 12)?;
            Command::DestroyQp {
                qpn: be::get32(b, 8) & 0x00ff_ffff,
            }
        }
        cmd::DESTROY_CQ => {
            need(b, op, 12)?;
            Command::DestroyCq {
                cqn: be::get32(b, 8) & 0x00ff_ffff,
            }
        }
        o if transition_target_state(o).is_some() => Command::ModifyQp(decode_modify_qp(b)?),
        o => Command::Other(o),
    })
}

fn command(opcode: u16) -> [u8; CMD_IN_LEN] {
    let mut b = [0u8; CMD_IN_LEN];
    be::put16(&mut b, 0, opcode);
    b
}

impl CreateQpIn {
    /// Encodes the command (the inverse of [`decode_create_qp`]).
    pub fn encode(&self) -> [u8; CMD_IN_LEN] {
        let mut b = command(cmd::CREATE_QP);
        let c = QPC;
        b[c + 1] = self.st;
        be::put32(&mut b, c + 4, self.pd & 0x00ff_ffff);
        let d2 = (self.log_rq_size as u32 & 0xf) << 19
            | (self.log_rq_stride as u32 & 0x7) << 16
            | (self.no_sq as u32) << 15
            | (self.log_sq_size as u32 & 0xf) << 11
            | (self.ts_format as u32 & 0x3) << 6;
        be::put32(&mut b, c + 8, d2);
        be::put32(&mut b, c + 12, self.uar_page & 0x00ff_ffff);
        be::put32(&mut b, 148, self.cqn_snd & 0x00ff_ffff);
        be::put32(&mut b, 180, self.cqn_rcv & 0x00ff_ffff);
        be::put64(&mut b, 184, self.dbr_addr);
        be::put32(&mut b, c + 172, (self.rq_type as u32 & 0x7) << 24);
        be::put32(&mut b, c + 208, (self.dbr_umem_valid as u32) << 28);
        be::put32(&mut b, 252, self.dbr_umem_id);
        be::put64(&mut b, 256, self.wq_umem_offset);
        be::put32(&mut b, 264, self.wq_umem_id);
        be::put32(&mut b, 268, (self.wq_umem_valid as u32) << 31);
        b
    }
}

impl CreateCqIn {
    /// Encodes the command (the inverse of [`decode_create_cq`]; `cqe_size` 128 selects
    /// 128-byte CQEs, anything else 64).
    pub fn encode(&self) -> [u8; CMD_IN_LEN] {
        let mut b = command(cmd::CREATE_CQ);
        let c = CQC;
        let d0 = (self.dbr_umem_valid as u32) << 25
            | (if self.cqe_size == 128 { 1u32 } else { 0 }) << 21
            | (self.cc as u32) << 20
            | (self.oi as u32) << 17;
        be::put32(&mut b, c, d0);
        be::put32(&mut b, c + 4, self.dbr_umem_id);
        be::put32(&mut b, c + 8, self.ts_format as u32 & 0x3);
        be::put32(
            &mut b,
            c + 12,
            (self.log_cq_size as u32 & 0x1f) << 24 | (self.uar_page & 0x00ff_ffff),
        );
        be::put32(&mut b, c + 20, self.c_eqn & 0xff);
        be::put64(&mut b, c + 56, self.dbr_addr);
        be::put64(&mut b, 80, self.cq_umem_offset);
        be::put32(&mut b, 88, self.cq_umem_id);
        be::put32(&mut b, 92, (self.cq_umem_valid as u32) << 31);
        b
    }
}

fn encode_ads(b: &mut [u8], a: usize, p: &AddressPath) {
    be::put32(b, a + 4, (p.grh as u32) << 23 | p.rlid as u32);
    let d2 = (p.ack_timeout as u32 & 0x1f) << 27 | (p.src_addr_index as u32) << 16;
    be::put32(b, a + 8, d2 | p.hop_limit as u32);
    be::put32(
        b,
        a + 12,
        (p.tclass as u32) << 20 | (p.flow_label & 0x000f_ffff),
    );
    b[a + 16..a + 32].copy_from_slice(&p.rgid);
    be::put16(b, a + 34, p.udp_sport);
    be::put32(
        b,
        a + 36,
        (p.sl as u32 & 0xf) << 24 | (p.vhca_port as u32) << 16,
    );
    b[a + 38..a + 44].copy_from_slice(&p.rmac);
}

impl ModifyQpIn {
    /// Encodes the transition (`self.opcode` selects the command; the inverse of
    /// [`decode_modify_qp`]).
    pub fn encode(&self) -> [u8; CMD_IN_LEN] {
        let mut b = command(self.opcode);
        let c = QPC;
        let r = &self.rdma;
        be::put32(&mut b, 8, self.qpn & 0x00ff_ffff);
        be::put32(&mut b, 16, self.opt_param_mask);
        be::put32(&mut b, c + 8, (self.mtu as u32 & 0x7) << 29);
        be::put32(&mut b, c + 20, self.remote_qpn & 0x00ff_ffff);
        encode_ads(&mut b, c + 24, &self.path);
        let d28 = (r.log_sra_max as u32 & 0x7) << 21
            | (r.retry_count as u32 & 0x7) << 16
            | (r.rnr_retry as u32 & 0x7) << 13;
        be::put32(&mut b, c + 112, d28);
        be::put32(&mut b, c + 120, self.next_send_psn & 0x00ff_ffff);
        let d36 = (r.log_rra_max as u32 & 0x7) << 21
            | (r.rre as u32) << 15
            | (r.rwe as u32) << 14
            | (r.rae as u32) << 13;
        be::put32(&mut b, c + 144, d36);
        let d37 = (r.min_rnr_nak as u32 & 0x1f) << 24 | (self.next_rcv_psn & 0x00ff_ffff);
        be::put32(&mut b, c + 148, d37);
        b
    }
}

impl CmdOut {
    /// Encodes the output (the inverse of [`decode_output`]).
    pub fn encode(&self) -> [u8; CMD_OUT_LEN] {
        let mut b = [0u8; CMD_OUT_LEN];
        b[0] = self.status;
        be::put32(&mut b, 4, self.syndrome);
        be::put32(&mut b, 8, self.number & 0x00ff_ffff);
        b
    }

    /// A successful output carrying object number `number`.
    pub fn ok(number: u32) -> CmdOut {
        CmdOut {
            number,
            ..Default::default()
        }
    }
}
