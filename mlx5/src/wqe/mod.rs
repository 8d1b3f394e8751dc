//! Send WQE decoding: ctrl segment plus the opcode-specific segments of
//! README "Send WQEs" (raddr, data, inline, atomic, masked atomic, UD/DC address vector,
//! XRC, Ethernet, wait-enable, UMR, MMO).

use crate::{be, wqebbs_for_ds, DS_BYTES};

mod builder;
pub use builder::WqeBuilder;

/// mlx5 send opcodes (`mlx5dv.h`; WAIT and DUMP from DOCA / NVSHMEM).
pub mod opcode {
    pub const NOP: u8 = 0x00;
    pub const SEND_INVAL: u8 = 0x01;
    pub const RDMA_WRITE: u8 = 0x08;
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    pub const SEND: u8 = 0x0a;
    pub const SEND_IMM: u8 = 0x0b;
    pub const TSO: u8 = 0x0e;
    pub const WAIT: u8 = 0x0f;
    pub const RDMA_READ: u8 = 0x10;
    pub const ATOMIC_CS: u8 = 0x11;
    pub const ATOMIC_FA: u8 = 0x12;
    pub const ATOMIC_MASKED_CS: u8 = 0x14;
    pub const ATOMIC_MASKED_FA: u8 = 0x15;
    pub const LOCAL_INVAL: u8 = 0x1b;
    pub const DUMP: u8 = 0x23;
    pub const UMR: u8 = 0x25;
    pub const MMO: u8 = 0x2f;

    /// Every opcode of the reference table, in table order.
    pub const ALL: [u8; 17] = [
        NOP,
        SEND_INVAL,
        RDMA_WRITE,
        RDMA_WRITE_IMM,
        SEND,
        SEND_IMM,
        TSO,
        WAIT,
        RDMA_READ,
        ATOMIC_CS,
        ATOMIC_FA,
        ATOMIC_MASKED_CS,
        ATOMIC_MASKED_FA,
        LOCAL_INVAL,
        DUMP,
        UMR,
        MMO,
    ];

    /// Whether `op` is an RDMA atomic: compare-and-swap or fetch-and-add, plain or masked.
    pub fn is_atomic(op: u8) -> bool {
        matches!(
            op,
            ATOMIC_CS | ATOMIC_FA | ATOMIC_MASKED_CS | ATOMIC_MASKED_FA
        )
    }
}

/// Name of an mlx5 send opcode ("UNKNOWN" otherwise).
pub fn opcode_name(op: u8) -> &'static str {
    use opcode::*;
    match op {
        NOP => "NOP",
        SEND_INVAL => "SEND_INVAL",
        RDMA_WRITE => "RDMA_WRITE",
        RDMA_WRITE_IMM => "RDMA_WRITE_IMM",
        SEND => "SEND",
        SEND_IMM => "SEND_IMM",
        TSO => "TSO",
        WAIT => "WAIT",
        RDMA_READ => "RDMA_READ",
        ATOMIC_CS => "ATOMIC_CS",
        ATOMIC_FA => "ATOMIC_FA",
        ATOMIC_MASKED_CS => "ATOMIC_MASKED_CS",
        ATOMIC_MASKED_FA => "ATOMIC_MASKED_FA",
        LOCAL_INVAL => "LOCAL_INVAL",
        DUMP => "DUMP",
        UMR => "UMR",
        MMO => "MMO",
        _ => "UNKNOWN",
    }
}

/// `fm_ce_se` bits of the ctrl segment.
pub mod flags {
    /// Strong fence (bits 7:5 = 0b100).
    pub const FENCE: u8 = 0x80;
    /// Initiator small fence.
    pub const SMALL_FENCE: u8 = 0x20;
    /// Fence mode mask (bits 7:5).
    pub const FENCE_MASK: u8 = 0xe0;
    /// CE = 0b10: always generate a CQE.
    pub const CQ_UPDATE: u8 = 0x08;
    /// CE mask (bits 3:2).
    pub const CE_MASK: u8 = 0x0c;
    /// Solicited event.
    pub const SOLICITED: u8 = 0x02;
}

/// QP transport, which decides the segments between ctrl and the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected (also the default when unknown).
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram: ctrl + address vector.
    Ud,
    /// XRC initiator: ctrl + XRC segment.
    Xrc,
    /// DC initiator: ctrl + address vector (half or full).
    Dci,
    /// Raw packet / Ethernet: SEND and TSO carry an Ethernet segment.
    RawPacket,
}

impl Transport {
    /// From the PRM `qpc.st` service type.
    pub fn from_qpc_st(st: u8) -> Option<Transport> {
        match st {
            0x0 => Some(Transport::Rc),
            0x1 => Some(Transport::Uc),
            0x2 | 0x7 | 0x8 => Some(Transport::Ud),
            0x3 => Some(Transport::Xrc),
            0x5 => Some(Transport::Dci),
            0x9 => Some(Transport::RawPacket),
            _ => None,
        }
    }

    /// From `ibv_qp_type` (RC 2, UC 3, UD 4, RAW_PACKET 8, XRC_SEND 9, DRIVER 0xff = DC).
    pub fn from_ibv_qp_type(t: u32) -> Option<Transport> {
        match t {
            2 => Some(Transport::Rc),
            3 => Some(Transport::Uc),
            4 => Some(Transport::Ud),
            8 => Some(Transport::RawPacket),
            9 => Some(Transport::Xrc),
            0xff => Some(Transport::Dci),
            _ => None,
        }
    }
}

/// The 16-byte control segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ctrl {
    pub opmod: u8,
    /// WQE index (the producer counter in WQEBBs, 16 bits).
    pub wqe_index: u16,
    pub opcode: u8,
    pub qpn: u32,
    /// WQE size in 16-byte units, ctrl included.
    pub ds: u8,
    pub signature: u8,
    pub dci_stream_channel_id: u16,
    pub fm_ce_se: u8,
    /// Immediate data, or the rkey to invalidate (SEND_INVAL, LOCAL_INVAL), or the mkey (UMR),
    /// in host order.
    pub imm: u32,
}

impl Ctrl {
    /// Parses the first 16 bytes of `b` (caller guarantees `b.len() >= 16`).
    pub fn parse(b: &[u8]) -> Ctrl {
        let w0 = be::get32(b, 0);
        let w1 = be::get32(b, 4);
        Ctrl {
            opmod: (w0 >> 24) as u8,
            wqe_index: (w0 >> 8) as u16,
            opcode: w0 as u8,
            qpn: w1 >> 8,
            ds: (w1 & 0x3f) as u8,
            signature: b[8],
            dci_stream_channel_id: be::get16(b, 9),
            fm_ce_se: b[11],
            imm: be::get32(b, 12),
        }
    }

    /// WQEBBs this WQE occupies.
    pub fn wqebbs(&self) -> u16 {
        wqebbs_for_ds(self.ds)
    }

    /// Fence mode bits (7:5) present.
    pub fn fence(&self) -> bool {
        self.fm_ce_se & flags::FENCE_MASK != 0
    }

    /// Completion requested (CE = always).
    pub fn completion(&self) -> bool {
        self.fm_ce_se & flags::CE_MASK == flags::CQ_UPDATE
    }

    /// Solicited event requested.
    pub fn solicited(&self) -> bool {
        self.fm_ce_se & flags::SOLICITED != 0
    }
}

/// Datagram address vector (`mlx5_wqe_av`), UD and DC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddressVector {
    /// UD qkey (low 32 bits) or DC access key.
    pub key: u64,
    /// Remote QPN (UD) or DCT number (DC).
    pub dqpn: u32,
    /// Extended (48-byte) AV; otherwise the 16-byte half AV.
    pub extended: bool,
    pub stat_rate_sl: u8,
    pub rlid: u16,
    /// Remote GID (extended AV only).
    pub rgid: [u8; 16],
}

/// One decoded segment after the ctrl segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    Raddr {
        addr: u64,
        rkey: u32,
    },
    Data {
        addr: u64,
        lkey: u32,
        byte_count: u32,
    },
    Inline {
        byte_count: u32,
    },
    Atomic {
        swap_add: u64,
        compare: u64,
    },
    /// Masked compare-and-swap, `size` bytes operands (4 or 8 decoded; larger: operands 0).
    MaskedCs {
        size: u16,
        swap: u64,
        compare: u64,
        swap_mask: u64,
        compare_mask: u64,
    },
    /// Masked fetch-and-add.
    MaskedFa {
        size: u16,
        add: u64,
        field_boundary: u64,
    },
    Av(AddressVector),
    Xrc {
        srqn: u32,
    },
    Eth {
        mss: u16,
        inline_hdr_sz: u16,
    },
    WaitEn {
        pi: u32,
        obj_num: u32,
    },
    UmrCtrl {
        flags: u8,
        klm_octowords: u16,
        mkey_mask: u64,
    },
    MkeyContext {
        access_flags: u8,
        qpn_mkey: u32,
        start_addr: u64,
        len: u64,
    },
    MmoMeta {
        control: u32,
        lkey: u32,
        addr: u64,
    },
    /// Bytes the decoder does not interpret (NOP padding, UMR translations, unknown opcodes).
    Opaque {
        bytes: u16,
    },
}

/// Maximum segments kept per WQE; more are summarised in [`Wqe::bytes`] only.
pub const MAX_SEGS: usize = 10;

/// A decoded send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wqe {
    pub ctrl: Ctrl,
    /// WQEBBs spanned: ⌈ds/4⌉.
    pub wqebbs: u16,
    /// Payload bytes: sum of data / inline segment byte counts (plus inline Ethernet headers).
    pub bytes: u64,
    pub remote_addr: u64,
    pub rkey: u32,
    /// Atomic operand: add value (FA) or compare value (CS).
    pub compare_add: u64,
    /// Atomic swap value (CS only).
    pub swap: u64,
    /// UD/DC destination QPN / DCT number.
    pub dqpn: Option<u32>,
    pub known_opcode: bool,
    segs: [Segment; MAX_SEGS],
    nsegs: u8,
    /// Segments that did not fit in the list (still counted in `bytes`).
    pub segs_dropped: u16,
}

impl Wqe {
    /// The decoded segments after ctrl, in WQE order.
    pub fn segments(&self) -> &[Segment] {
        &self.segs[..self.nsegs as usize]
    }

    fn push(&mut self, s: Segment) {
        if (self.nsegs as usize) < MAX_SEGS {
            self.segs[self.nsegs as usize] = s;
            self.nsegs += 1;
        } else {
            self.segs_dropped += 1;
        }
    }
}

/// Why a WQE could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WqeError {
    #[error("WQE buffer holds {0} bytes, fewer than a ctrl segment")]
    Short(usize),
    #[error("ctrl segment has ds = 0")]
    ZeroDs,
    #[error("ds = {ds} needs {needed} bytes but the buffer holds {have}")]
    Truncated { ds: u8, needed: usize, have: usize },
    #[error("segment at byte {at} runs past ds = {ds}")]
    SegmentOverrun { at: usize, ds: u8 },
}

/// Decodes a WQE laid out contiguously in `b` (the watcher unwraps ring wrap-around first).
pub fn decode(b: &[u8], transport: Transport) -> Result<Wqe, WqeError> {
    if b.len() < DS_BYTES {
        return Err(WqeError::Short(b.len()));
    }
    let ctrl = Ctrl::parse(b);
    if ctrl.ds == 0 {
        return Err(WqeError::ZeroDs);
    }
    let end = ctrl.ds as usize * DS_BYTES;
    if b.len() < end {
        return Err(WqeError::Truncated {
            ds: ctrl.ds,
            needed: end,
            have: b.len(),
        });
    }
    let mut w = Wqe {
        ctrl,
        wqebbs: ctrl.wqebbs(),
        bytes: 0,
        remote_addr: 0,
        rkey: 0,
        compare_add: 0,
        swap: 0,
        dqpn: None,
        known_opcode: opcode::ALL.contains(&ctrl.opcode),
        segs: [Segment::Opaque { bytes: 0 }; MAX_SEGS],
        nsegs: 0,
        segs_dropped: 0,
    };
    let mut c = Cursor {
        b: &b[..end],
        pos: DS_BYTES,
        ds: ctrl.ds,
    };
    decode_body(&mut w, &mut c, transport)?;
    if c.pos < end {
        w.push(Segment::Opaque {
            bytes: (end - c.pos) as u16,
        });
    }
    Ok(w)
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
    ds: u8,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], WqeError> {
        if self.remaining() < n {
            return Err(WqeError::SegmentOverrun {
                at: self.pos,
                ds: self.ds,
            });
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
}

fn decode_body(w: &mut Wqe, c: &mut Cursor, transport: Transport) -> Result<(), WqeError> {
    use opcode::*;
    let op = w.ctrl.opcode;
    if !w.known_opcode || op == NOP {
        return Ok(());
    }
    // Transport segments come right after ctrl for work requests that go on the wire.
    let wire = !matches!(op, LOCAL_INVAL | UMR | WAIT | MMO | NOP);
    if wire {
        match transport {
            Transport::Ud | Transport::Dci => {
                let av = decode_av(c)?;
                w.dqpn = Some(av.dqpn);
                w.push(Segment::Av(av));
            }
            Transport::Xrc => {
                let s = c.take(16)?;
                w.push(Segment::Xrc {
                    srqn: be::get32(s, 0) & 0x00ff_ffff,
                });
            }
            _ => {}
        }
    }
    match op {
        RDMA_WRITE | RDMA_WRITE_IMM | RDMA_READ => {
            raddr(w, c)?;
            data_segments(w, c)
        }
        ATOMIC_CS | ATOMIC_FA => {
            raddr(w, c)?;
            let s = c.take(16)?;
            let (swap_add, compare) = (be::get64(s, 0), be::get64(s, 8));
            if op == ATOMIC_CS {
                w.swap = swap_add;
                w.compare_add = compare;
            } else {
                w.compare_add = swap_add;
            }
            w.push(Segment::Atomic { swap_add, compare });
            data_segments(w, c)
        }
        ATOMIC_MASKED_CS | ATOMIC_MASKED_FA => {
            raddr(w, c)?;
            masked_atomic(w, c)?;
            data_segments(w, c)
        }
        SEND | SEND_IMM | SEND_INVAL | TSO => {
            if transport == Transport::RawPacket || op == TSO {
                eth_segment(w, c)?;
            }
            data_segments(w, c)
        }
        DUMP => data_segments(w, c),
        WAIT => {
            let s = c.take(16)?;
            w.push(Segment::WaitEn {
                pi: be::get32(s, 8),
                obj_num: be::get32(s, 12),
            });
            Ok(())
        }
        UMR => {
            let s = c.take(48)?;
            w.push(Segment::UmrCtrl {
                flags: s[0],
                klm_octowords: be::get16(s, 4),
                mkey_mask: be::get64(s, 8),
            });
            if c.remaining() >= 64 {
                let m = c.take(64)?;
                let (start_addr, len) = (be::get64(m, 16), be::get64(m, 24));
                w.remote_addr = start_addr;
                w.bytes = len;
                w.push(Segment::MkeyContext {
                    access_flags: m[2],
                    qpn_mkey: be::get32(m, 4),
                    start_addr,
                    len,
                });
            }
            Ok(())
        }
        MMO => {
            let s = c.take(16)?;
            w.push(Segment::MmoMeta {
                control: be::get32(s, 0),
                lkey: be::get32(s, 4),
                addr: be::get64(s, 8),
            });
            // Memcpy MMO: source then destination data segment; bytes = the source length.
            let before = w.nsegs;
            data_segments(w, c)?;
            if let Some(Segment::Data { byte_count, .. }) = w.segs.get(before as usize).copied() {
                w.bytes = byte_count as u64;
            }
            if let Some(Segment::Data { addr, lkey, .. }) = w.segs.get(before as usize + 1).copied()
            {
                w.remote_addr = addr;
                w.rkey = lkey;
            }
            Ok(())
        }
        // LOCAL_INVAL: ctrl only (imm = rkey); anything after is opaque.
        _ => Ok(()),
    }
}

fn decode_av(c: &mut Cursor) -> Result<AddressVector, WqeError> {
    let s = c.take(16)?;
    let dqp_dct = be::get32(s, 8);
    let mut av = AddressVector {
        key: be::get64(s, 0),
        dqpn: dqp_dct & 0x00ff_ffff,
        extended: dqp_dct & 0x8000_0000 != 0,
        stat_rate_sl: s[12],
        rlid: be::get16(s, 14),
        rgid: [0; 16],
    };
    if av.extended {
        let x = c.take(32)?;
        av.rgid.copy_from_slice(&x[16..32]);
    }
    Ok(av)
}

fn raddr(w: &mut Wqe, c: &mut Cursor) -> Result<(), WqeError> {
    let s = c.take(16)?;
    w.remote_addr = be::get64(s, 0);
    w.rkey = be::get32(s, 8);
    w.push(Segment::Raddr {
        addr: w.remote_addr,
        rkey: w.rkey,
    });
    Ok(())
}

fn masked_atomic(w: &mut Wqe, c: &mut Cursor) -> Result<(), WqeError> {
    // Extended atomics: opmod = 0x08 | (log2(size) - 2).
    let size: u16 = if w.ctrl.opmod & 0x08 != 0 {
        1 << ((w.ctrl.opmod & 0x07) + 2)
    } else {
        8
    };
    let cs = w.ctrl.opcode == opcode::ATOMIC_MASKED_CS;
    let operands = if cs { 4 } else { 2 } * size as usize;
    let seg_len = operands.next_multiple_of(DS_BYTES);
    let s = c.take(seg_len)?;
    let rd = |i: usize| -> u64 {
        match size {
            4 => be::get32(s, i * 4) as u64,
            8 => be::get64(s, i * 8),
            _ => 0,
        }
    };
    if cs {
        let (swap, compare, swap_mask, compare_mask) = (rd(0), rd(1), rd(2), rd(3));
        w.swap = swap;
        w.compare_add = compare;
        w.push(Segment::MaskedCs {
            size,
            swap,
            compare,
            swap_mask,
            compare_mask,
        });
    } else {
        let (add, field_boundary) = (rd(0), rd(1));
        w.compare_add = add;
        w.push(Segment::MaskedFa {
            size,
            add,
            field_boundary,
        });
    }
    Ok(())
}

fn eth_segment(w: &mut Wqe, c: &mut Cursor) -> Result<(), WqeError> {
    let s = c.take(16)?;
    let mss = be::get16(s, 6);
    let inline_hdr_sz = be::get16(s, 12);
    // The first 2 header bytes sit in the segment; the rest follows, padded to 16 bytes.
    let extra = (inline_hdr_sz as usize)
        .saturating_sub(2)
        .next_multiple_of(DS_BYTES);
    c.take(extra)?;
    w.bytes += inline_hdr_sz as u64;
    w.push(Segment::Eth { mss, inline_hdr_sz });
    Ok(())
}

fn data_segments(w: &mut Wqe, c: &mut Cursor) -> Result<(), WqeError> {
    while c.remaining() >= DS_BYTES {
        let first = be::get32(c.b, c.pos);
        if first & 0x8000_0000 != 0 {
            let len = first & 0x7fff_ffff;
            let total = (4 + len as usize).next_multiple_of(DS_BYTES);
            c.take(total)?;
            w.bytes += len as u64;
            w.push(Segment::Inline { byte_count: len });
        } else {
            let s = c.take(16)?;
            let (byte_count, lkey, addr) = (be::get32(s, 0), be::get32(s, 4), be::get64(s, 8));
            w.bytes += byte_count as u64;
            w.push(Segment::Data {
                addr,
                lkey,
                byte_count,
            });
        }
    }
    Ok(())
}
