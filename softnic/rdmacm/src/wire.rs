//! The CM messages exchanged between ids (one datagram each): the IB CM's REQ/REP/RTU/REJ/
//! DREQ/DREP and SIDR REQ/REP, carrying what the peer needs to bring its QP up.
//!
//! Layout (little endian): magic "SNCM", kind u8, status u8, qp_type u8, resp_res u8,
//! init_depth u8, retry u8, rnr_retry u8, srq u8, ps u32, src ip u32 + port u16, dst ip u32 +
//! port u16, qpn u32, psn u32, qkey u32, lid u16, mtu u8, pad u8, gid [16], private len u16,
//! private bytes.

use crate::addr::V4;
use std::net::Ipv4Addr;

const MAGIC: &[u8; 4] = b"SNCM";
const HEADER: usize = 4 + 8 + 4 + 6 + 6 + 12 + 4 + 16 + 2;

/// Message kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Req = 1,
    Rep = 2,
    Rtu = 3,
    Rej = 4,
    Dreq = 5,
    Drep = 6,
    SidrReq = 7,
    SidrRep = 8,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Req,
            2 => Kind::Rep,
            3 => Kind::Rtu,
            4 => Kind::Rej,
            5 => Kind::Dreq,
            6 => Kind::Drep,
            7 => Kind::SidrReq,
            8 => Kind::SidrRep,
            _ => return None,
        })
    }

    /// Private-data bytes the IB CM carries for the consumer in this message (what the peer's
    /// event reports as `private_data_len`).
    pub fn private_capacity(self) -> usize {
        match self {
            Kind::Req => 56,
            Kind::Rep => 196,
            Kind::Rtu => 224,
            Kind::Rej => 148,
            Kind::Dreq => 220,
            Kind::Drep => 224,
            Kind::SidrReq => 180,
            Kind::SidrRep => 136,
        }
    }
}

/// IB CM reject reason: no listener for the service.
pub const REJ_INVALID_SERVICE_ID: u8 = 8;
/// IB CM reject reason: rejected by the consumer (rdma_reject).
pub const REJ_CONSUMER_DEFINED: u8 = 28;

/// One CM message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub kind: Kind,
    pub status: u8,
    pub qp_type: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub ps: u32,
    pub src: V4,
    pub dst: V4,
    pub qpn: u32,
    pub psn: u32,
    pub qkey: u32,
    pub lid: u16,
    pub mtu: u8,
    pub gid: [u8; 16],
    pub private: Vec<u8>,
}

impl Msg {
    /// A message of `kind` with every other field zero.
    pub fn new(kind: Kind) -> Msg {
        Msg {
            kind,
            status: 0,
            qp_type: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            srq: 0,
            ps: 0,
            src: V4::UNSPECIFIED,
            dst: V4::UNSPECIFIED,
            qpn: 0,
            psn: 0,
            qkey: 0,
            lid: 0,
            mtu: 0,
            gid: [0; 16],
            private: Vec::new(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER + self.private.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&[
            self.kind as u8,
            self.status,
            self.qp_type,
            self.responder_resources,
            self.initiator_depth,
            self.retry_count,
            self.rnr_retry_count,
            self.srq,
        ]);
        b.extend_from_slice(&self.ps.to_le_bytes());
        for a in [self.src, self.dst] {
            b.extend_from_slice(&u32::from(a.ip).to_le_bytes());
            b.extend_from_slice(&a.port.to_le_bytes());
        }
        for v in [self.qpn, self.psn, self.qkey] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.lid.to_le_bytes());
        b.extend_from_slice(&[self.mtu, 0]);
        b.extend_from_slice(&self.gid);
        b.extend_from_slice(&(self.private.len() as u16).to_le_bytes());
        b.extend_from_slice(&self.private);
        b
    }

    pub fn decode(b: &[u8]) -> Option<Msg> {
        if b.len() < HEADER || &b[..4] != MAGIC {
            return None;
        }
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let v4_at = |o: usize| V4 {
            ip: Ipv4Addr::from(u32_at(o)),
            port: u16_at(o + 4),
        };
        let plen = u16_at(HEADER - 2) as usize;
        if b.len() != HEADER + plen {
            return None;
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[44..60]);
        debug_assert_eq!(HEADER, 62);
        Some(Msg {
            kind: Kind::from_u8(b[4])?,
            status: b[5],
            qp_type: b[6],
            responder_resources: b[7],
            initiator_depth: b[8],
            retry_count: b[9],
            rnr_retry_count: b[10],
            srq: b[11],
            ps: u32_at(12),
            src: v4_at(16),
            dst: v4_at(22),
            qpn: u32_at(28),
            psn: u32_at(32),
            qkey: u32_at(36),
            lid: u16_at(40),
            mtu: b[42],
            gid,
            private: b[HEADER..].to_vec(),
        })
    }
}
