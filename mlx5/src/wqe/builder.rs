//! Send WQE encoding, segment by segment: the inverse of [`super::decode`]. Used by the
//! example workloads that post WQEs directly, by tests, benchmarks and simulated producers.

use super::AddressVector;
use crate::{be, DS_BYTES, MAX_WQE_BYTES};

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
        be::put32(&mut b.buf, 0, (wqe_index as u32) << 8 | opcode as u32);
        be::put32(&mut b.buf, 4, qpn << 8);
        b
    }

    /// Sets the opmod byte.
    pub fn opmod(mut self, v: u8) -> Self {
        self.buf[0] = v;
        self
    }

    /// Sets `fm_ce_se` (see [`super::flags`]).
    pub fn fm_ce_se(mut self, v: u8) -> Self {
        self.buf[11] = v;
        self
    }

    /// Sets the immediate / invalidate-rkey / mkey word.
    pub fn imm(mut self, v: u32) -> Self {
        be::put32(&mut self.buf, 12, v);
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
        be::put64(s, 0, addr);
        be::put32(s, 8, rkey);
        self
    }

    /// Data (scatter/gather) segment.
    pub fn data(mut self, addr: u64, lkey: u32, byte_count: u32) -> Self {
        let s = self.seg(16);
        be::put32(s, 0, byte_count);
        be::put32(s, 4, lkey);
        be::put64(s, 8, addr);
        self
    }

    /// Inline data segment, padded to 16 bytes.
    pub fn inline(mut self, data: &[u8]) -> Self {
        let total = (4 + data.len()).next_multiple_of(DS_BYTES);
        let s = self.seg(total);
        be::put32(s, 0, data.len() as u32 | 0x8000_0000);
        s[4..4 + data.len()].copy_from_slice(data);
        self
    }

    /// Atomic segment (swap/add, compare).
    pub fn atomic(mut self, swap_add: u64, compare: u64) -> Self {
        let s = self.seg(16);
        be::put64(s, 0, swap_add);
        be::put64(s, 8, compare);
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
                be::put32(s, i * 4, *v as u32);
            } else {
                be::put64(s, i * 8, *v);
            }
        }
        self
    }

    /// Masked fetch-and-add operands of 4 or 8 bytes.
    pub fn masked_fa(mut self, size: u16, add: u64, field_boundary: u64) -> Self {
        let n = (2 * size as usize).next_multiple_of(DS_BYTES);
        let s = self.seg(n);
        if size == 4 {
            be::put32(s, 0, add as u32);
            be::put32(s, 4, field_boundary as u32);
        } else {
            be::put64(s, 0, add);
            be::put64(s, 8, field_boundary);
        }
        self
    }

    /// Datagram address vector: 48 bytes when `extended`, else the 16-byte half AV.
    pub fn av(mut self, av: &AddressVector) -> Self {
        let s = self.seg(if av.extended { 48 } else { 16 });
        be::put64(s, 0, av.key);
        be::put32(s, 8, av.dqpn | if av.extended { 0x8000_0000 } else { 0 });
        s[12] = av.stat_rate_sl;
        be::put16(s, 14, av.rlid);
        if av.extended {
            s[32..48].copy_from_slice(&av.rgid);
        }
        self
    }

    /// XRC segment.
    pub fn xrc(mut self, srqn: u32) -> Self {
        let s = self.seg(16);
        be::put32(s, 0, srqn);
        self
    }

    /// Ethernet segment with an inline header.
    pub fn eth(mut self, mss: u16, header: &[u8]) -> Self {
        let extra = header.len().saturating_sub(2).next_multiple_of(DS_BYTES);
        let s = self.seg(16 + extra);
        be::put16(s, 6, mss);
        be::put16(s, 12, header.len() as u16);
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
        be::put32(s, 8, pi);
        be::put32(s, 12, obj_num);
        self
    }

    /// UMR control segment (48 bytes).
    pub fn umr_ctrl(mut self, flags: u8, klm_octowords: u16, mkey_mask: u64) -> Self {
        let s = self.seg(48);
        s[0] = flags;
        be::put16(s, 4, klm_octowords);
        be::put64(s, 8, mkey_mask);
        self
    }

    /// Mkey context segment (64 bytes).
    pub fn mkey_ctx(mut self, access_flags: u8, qpn_mkey: u32, start_addr: u64, len: u64) -> Self {
        let s = self.seg(64);
        s[2] = access_flags;
        be::put32(s, 4, qpn_mkey);
        be::put64(s, 16, start_addr);
        be::put64(s, 24, len);
        self
    }

    /// MMO metadata segment.
    pub fn mmo_meta(mut self, control: u32, lkey: u32, addr: u64) -> Self {
        let s = self.seg(16);
        be::put32(s, 0, control);
        be::put32(s, 4, lkey);
        be::put64(s, 8, addr);
        self
    }

    /// `n` zero 16-byte units (opaque padding, e.g. NOP).
    pub fn pad(mut self, n: usize) -> Self {
        self.seg(n * DS_BYTES);
        self
    }

    /// Writes ds and returns the WQE bytes (a multiple of 16, not padded to 64).
    pub fn finish(self) -> Vec<u8> {
        let (buf, len) = self.sealed();
        buf[..len].to_vec()
    }

    /// Writes ds and copies the WQE into the start of `dst` without allocating; returns its
    /// length in bytes. Panics if `dst` is shorter than the WQE.
    pub fn finish_into(self, dst: &mut [u8]) -> usize {
        let (buf, len) = self.sealed();
        dst[..len].copy_from_slice(&buf[..len]);
        len
    }

    fn sealed(mut self) -> ([u8; MAX_WQE_BYTES], usize) {
        let ds = (self.len / DS_BYTES) as u32;
        let w1 = be::get32(&self.buf, 4);
        be::put32(&mut self.buf, 4, (w1 & !0xff) | ds);
        (self.buf, self.len)
    }
}
