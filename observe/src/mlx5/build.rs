//! Encoders for the formats decoded in this module: used by tests, benchmarks and simulated
//! producers (CPU threads standing in for GPU threads that post WQEs IBGDA-style).

use super::cqe;
use super::prm::{self, CreateCqIn, CreateQpIn, ModifyQpIn};
use super::wqe::AddressVector;
use super::{put_be16, put_be32, put_be64, DS_BYTES, MAX_WQE_BYTES};

/// Builds one send WQE segment by segment; `finish` writes `ds` into the ctrl segment.
#[derive(Clone)]
pub struct WqeBuilder {
    buf: [u8; MAX_WQE_BYTES],
    len: usize,
}

impl WqeBuilder {
    /// Starts a WQE: ctrl with opcode, WQE index (PI) and QPN; fm_ce_se, imm and opmod zero.
    pub fn new(opcode: u8, wqe_index: u16, qpn: u32) -> WqeBuilder {
        let mut b = WqeBuilder {
            buf: [0; MAX_WQE_BYTES],
            len: DS_BYTES,
        };
        put_be32(&mut b.buf, 0, (wqe_index as u32) << 8 | opcode as u32);
        put_be32(&mut b.buf, 4, qpn << 8);
        b
    }

    /// Sets the opmod byte.
    pub fn opmod(mut self, v: u8) -> Self {
        self.buf[0] = v;
        self
    }

    /// Sets `fm_ce_se` (see [`super::wqe::flags`]).
    pub fn fm_ce_se(mut self, v: u8) -> Self {
        self.buf[11] = v;
        self
    }

    /// Sets the immediate / invalidate-rkey / mkey word.
    pub fn imm(mut self, v: u32) -> Self {
        put_be32(&mut self.buf, 12, v);
        self
    }

    fn seg(&mut self, n: usize) -> &mut [u8] {
        let start = self.len;
        self.len += n;
        assert!(self.len <= MAX_WQE_BYTES, "WQE larger than 16 WQEBBs");
        &mut self.buf[start..start + n]
    }

    /// Remote address segment.
    pub fn raddr(mut self, addr: u64, rkey: u32) -> Self {
        let s = self.seg(16);
        put_be64(s, 0, addr);
        put_be32(s, 8, rkey);
        self
    }

    /// Data (scatter/gather) segment.
    pub fn data(mut self, addr: u64, lkey: u32, byte_count: u32) -> Self {
        let s = self.seg(16);
        put_be32(s, 0, byte_count);
        put_be32(s, 4, lkey);
        put_be64(s, 8, addr);
        self
    }

    /// Inline data segment, padded to 16 bytes.
    pub fn inline(mut self, data: &[u8]) -> Self {
        let total = (4 + data.len()).next_multiple_of(DS_BYTES);
        let s = self.seg(total);
        put_be32(s, 0, data.len() as u32 | 0x8000_0000);
        s[4..4 + data.len()].copy_from_slice(data);
        self
    }

    /// Atomic segment (swap/add, compare).
    pub fn atomic(mut self, swap_add: u64, compare: u64) -> Self {
        let s = self.seg(16);
        put_be64(s, 0, swap_add);
        put_be64(s, 8, compare);
        self
    }

    /// Masked compare-and-swap operands of 4 or 8 bytes (set opmod `0x08 | log2(size)-2`).
    pub fn masked_cs(
        mut self,
        size: u16,
        swap: u64,
        compare: u64,
        swap_mask: u64,
        compare_mask: u64,
    ) -> Self {
        let vals = [swap, compare, swap_mask, compare_mask];
        let n = (4 * size as usize).next_multiple_of(DS_BYTES);
        let s = self.seg(n);
        for (i, v) in vals.iter().enumerate() {
            if size == 4 {
                put_be32(s, i * 4, *v as u32);
            } else {
                put_be64(s, i * 8, *v);
            }
        }
        self
    }

    /// Masked fetch-and-add operands of 4 or 8 bytes.
    pub fn masked_fa(mut self, size: u16, add: u64, field_boundary: u64) -> Self {
        let n = (2 * size as usize).next_multiple_of(DS_BYTES);
        let s = self.seg(n);
        if size == 4 {
            put_be32(s, 0, add as u32);
            put_be32(s, 4, field_boundary as u32);
        } else {
            put_be64(s, 0, add);
            put_be64(s, 8, field_boundary);
        }
        self
    }

    /// Datagram address vector: 48 bytes when `extended`, else the 16-byte half AV.
    pub fn av(mut self, av: &AddressVector) -> Self {
        let s = self.seg(if av.extended { 48 } else { 16 });
        put_be64(s, 0, av.key);
        put_be32(s, 8, av.dqpn | if av.extended { 0x8000_0000 } else { 0 });
        s[12] = av.stat_rate_sl;
        put_be16(s, 14, av.rlid);
        if av.extended {
            s[32..48].copy_from_slice(&av.rgid);
        }
        self
    }

    /// XRC segment.
    pub fn xrc(mut self, srqn: u32) -> Self {
        let s = self.seg(16);
        put_be32(s, 0, srqn);
        self
    }

    /// Ethernet segment with an inline header.
    pub fn eth(mut self, mss: u16, header: &[u8]) -> Self {
        let extra = header.len().saturating_sub(2).next_multiple_of(DS_BYTES);
        let s = self.seg(16 + extra);
        put_be16(s, 6, mss);
        put_be16(s, 12, header.len() as u16);
        let first = header.len().min(2);
        s[14..14 + first].copy_from_slice(&header[..first]);
        if header.len() > 2 {
            s[16..16 + header.len() - 2].copy_from_slice(&header[2..]);
        }
        self
    }

    /// Wait-enable segment.
    pub fn wait_en(mut self, pi: u32, obj_num: u32) -> Self {
        let s = self.seg(16);
        put_be32(s, 8, pi);
        put_be32(s, 12, obj_num);
        self
    }

    /// UMR control segment (48 bytes).
    pub fn umr_ctrl(mut self, flags: u8, klm_octowords: u16, mkey_mask: u64) -> Self {
        let s = self.seg(48);
        s[0] = flags;
        put_be16(s, 4, klm_octowords);
        put_be64(s, 8, mkey_mask);
        self
    }

    /// Mkey context segment (64 bytes).
    pub fn mkey_ctx(mut self, access_flags: u8, qpn_mkey: u32, start_addr: u64, len: u64) -> Self {
        let s = self.seg(64);
        s[2] = access_flags;
        put_be32(s, 4, qpn_mkey);
        put_be64(s, 16, start_addr);
        put_be64(s, 24, len);
        self
    }

    /// MMO metadata segment.
    pub fn mmo_meta(mut self, control: u32, lkey: u32, addr: u64) -> Self {
        let s = self.seg(16);
        put_be32(s, 0, control);
        put_be32(s, 4, lkey);
        put_be64(s, 8, addr);
        self
    }

    /// `n` zero 16-byte units (opaque padding, e.g. NOP).
    pub fn pad(mut self, n: usize) -> Self {
        self.seg(n * DS_BYTES);
        self
    }

    /// Writes ds and returns the WQE bytes (a multiple of 16, not padded to 64).
    pub fn finish(mut self) -> Vec<u8> {
        let ds = (self.len / DS_BYTES) as u32;
        let w1 = u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]);
        put_be32(&mut self.buf, 4, (w1 & !0xff) | ds);
        self.buf[..self.len].to_vec()
    }
}

/// Fields of a CQE to encode.
#[derive(Clone, Copy, Debug, Default)]
pub struct CqeFields {
    pub opcode: u8,
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    pub qpn: u32,
    pub send_opcode: u8,
    pub timestamp: u64,
    pub syndrome: u8,
    pub vendor_syndrome: u8,
    pub imm: u32,
    pub src_qp: u32,
}

/// Encodes a 64-byte CQE for free-running index `n` of a ring of `cqe_cnt` entries (the owner
/// bit is set for that index).
pub fn cqe64(f: &CqeFields, n: u32, cqe_cnt: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    put_be32(&mut b, 24, f.src_qp & 0x00ff_ffff);
    put_be32(&mut b, 36, f.imm);
    put_be32(&mut b, 44, f.byte_cnt);
    put_be64(&mut b, 48, f.timestamp);
    if f.opcode == cqe::opcode::REQ_ERR || f.opcode == cqe::opcode::RESP_ERR {
        b[54] = f.vendor_syndrome;
        b[55] = f.syndrome;
    }
    put_be32(
        &mut b,
        56,
        (f.send_opcode as u32) << 24 | (f.qpn & 0x00ff_ffff),
    );
    put_be16(&mut b, 60, f.wqe_counter);
    b[63] = f.opcode << 4 | cqe::expected_owner(n, cqe_cnt);
    b
}

/// An empty CQE slot as hardware expects buffers to start: opcode INVALID, owner 0.
pub const INVALID_CQE_OP_OWN: u8 = cqe::opcode::INVALID << 4;

/// Encodes a CREATE_QP input (all fields decoded by [`prm::decode_create_qp`]).
pub fn create_qp_in(q: &CreateQpIn) -> Vec<u8> {
    let mut b = vec![0u8; prm::CREATE_QP_IN_MIN];
    let c = prm::QPC;
    put_be16(&mut b, 0, prm::cmd::CREATE_QP);
    b[c + 1] = q.st;
    put_be32(&mut b, c + 4, q.pd & 0x00ff_ffff);
    let d2 = (q.log_rq_size as u32 & 0xf) << 19
        | (q.log_rq_stride as u32 & 0x7) << 16
        | (q.no_sq as u32) << 15
        | (q.log_sq_size as u32 & 0xf) << 11
        | (q.ts_format as u32 & 0x3) << 6;
    put_be32(&mut b, c + 8, d2);
    put_be32(&mut b, c + 12, q.uar_page & 0x00ff_ffff);
    put_be32(&mut b, 148, q.cqn_snd & 0x00ff_ffff);
    put_be32(&mut b, 180, q.cqn_rcv & 0x00ff_ffff);
    put_be64(&mut b, 184, q.dbr_addr);
    put_be32(&mut b, c + 172, (q.rq_type as u32 & 0x7) << 24);
    put_be32(&mut b, c + 208, (q.dbr_umem_valid as u32) << 28);
    put_be32(&mut b, 252, q.dbr_umem_id);
    put_be64(&mut b, 256, q.wq_umem_offset);
    put_be32(&mut b, 264, q.wq_umem_id);
    put_be32(&mut b, 268, (q.wq_umem_valid as u32) << 31);
    b
}

/// Encodes a CREATE_CQ input.
pub fn create_cq_in(q: &CreateCqIn) -> Vec<u8> {
    let mut b = vec![0u8; prm::CREATE_CQ_IN_MIN];
    let c = prm::CQC;
    put_be16(&mut b, 0, prm::cmd::CREATE_CQ);
    let d0 = (q.dbr_umem_valid as u32) << 25
        | (if q.cqe_size == 128 { 1u32 } else { 0 }) << 21
        | (q.cc as u32) << 20
        | (q.oi as u32) << 17;
    put_be32(&mut b, c, d0);
    put_be32(&mut b, c + 4, q.dbr_umem_id);
    put_be32(&mut b, c + 8, q.ts_format as u32 & 0x3);
    put_be32(
        &mut b,
        c + 12,
        (q.log_cq_size as u32 & 0x1f) << 24 | (q.uar_page & 0x00ff_ffff),
    );
    put_be32(&mut b, c + 20, q.c_eqn & 0xff);
    put_be64(&mut b, c + 56, q.dbr_addr);
    put_be64(&mut b, 80, q.cq_umem_offset);
    put_be32(&mut b, 88, q.cq_umem_id);
    put_be32(&mut b, 92, (q.cq_umem_valid as u32) << 31);
    b
}

/// Encodes a QP transition input (`m.opcode` selects the command).
pub fn modify_qp_in(m: &ModifyQpIn) -> Vec<u8> {
    let mut b = vec![0u8; prm::QPC + 232];
    let c = prm::QPC;
    put_be16(&mut b, 0, m.opcode);
    put_be32(&mut b, 8, m.qpn & 0x00ff_ffff);
    put_be32(&mut b, 16, m.opt_param_mask);
    put_be32(&mut b, c + 8, (m.mtu as u32 & 0x7) << 29);
    put_be32(&mut b, c + 20, m.remote_qpn & 0x00ff_ffff);
    let a = c + 24;
    let p = &m.path;
    put_be32(&mut b, a + 4, (p.grh as u32) << 23 | p.rlid as u32);
    put_be32(
        &mut b,
        a + 8,
        (p.src_addr_index as u32) << 16 | p.hop_limit as u32,
    );
    put_be32(
        &mut b,
        a + 12,
        (p.tclass as u32) << 20 | (p.flow_label & 0x000f_ffff),
    );
    b[a + 16..a + 32].copy_from_slice(&p.rgid);
    put_be16(&mut b, a + 34, p.udp_sport);
    put_be32(
        &mut b,
        a + 36,
        (p.sl as u32 & 0xf) << 24 | (p.vhca_port as u32) << 16,
    );
    b[a + 38..a + 44].copy_from_slice(&p.rmac);
    put_be32(&mut b, c + 120, m.next_send_psn & 0x00ff_ffff);
    put_be32(&mut b, c + 148, m.next_rcv_psn & 0x00ff_ffff);
    b
}

/// Encodes a command output with status 0 and the object number.
pub fn cmd_out(number: u32) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    put_be32(&mut b, 8, number & 0x00ff_ffff);
    b
}
