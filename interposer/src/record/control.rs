//! Object lifecycle and connection records.

use sigmatrace_schemas::{
    mr_variant, AhCreate, AsyncEvent, CqCreate, CqEvent, DeviceOpen, MrReg, PdAlloc, QpCreate,
    QpDestroy, QpModify, RecordHeader, SrqCreate,
};

/// `DeviceOpen`; `name` is truncated to 31 bytes (NUL-padded).
pub fn device_open(ts: u64, context: u64, guid: u64, name: &[u8]) -> DeviceOpen {
    let mut n = [0u8; 32];
    let len = name
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(name.len())
        .min(31);
    n[..len].copy_from_slice(&name[..len]);
    DeviceOpen {
        hdr: RecordHeader::of::<DeviceOpen>(0),
        ts,
        context,
        guid,
        name: n,
    }
}

/// A destruction record (`DeviceClose`, `PdDealloc`, `MrDereg`, `CqDestroy`, `SrqDestroy`,
/// `AhDestroy`): aux = the call's return value.
macro_rules! destroy_fns {
    ($($fn_name:ident => $rec:ident),* $(,)?) => { $(
        #[doc = concat!("`", stringify!($rec), "` of `handle`; aux = the return value.")]
        pub fn $fn_name(ts: u64, handle: u64, result: i32) -> sigmatrace_schemas::$rec {
            sigmatrace_schemas::$rec {
                hdr: RecordHeader::of::<sigmatrace_schemas::$rec>(result as u32),
                ts,
                handle,
            }
        }
    )* };
}
destroy_fns!(
    device_close => DeviceClose,
    pd_dealloc => PdDealloc,
    mr_dereg => MrDereg,
    cq_destroy => CqDestroy,
    srq_destroy => SrqDestroy,
    ah_destroy => AhDestroy,
);

/// `PdAlloc`.
pub fn pd_alloc(ts: u64, pd: u64, context: u64) -> PdAlloc {
    PdAlloc {
        hdr: RecordHeader::of::<PdAlloc>(0),
        ts,
        pd,
        context,
    }
}

/// A registered memory region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrInfo {
    pub mr: u64,
    pub pd: u64,
    pub addr: u64,
    pub length: u64,
    pub iova: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub access: u32,
    /// [`mr_variant`] value.
    pub variant: u32,
}

/// `MrReg`: aux = access (bits 0..27) | variant << 28.
pub fn mr_reg(ts: u64, m: &MrInfo) -> MrReg {
    let aux = (m.access & mr_variant::ACCESS_MASK) | (m.variant << mr_variant::SHIFT);
    MrReg {
        hdr: RecordHeader::of::<MrReg>(aux),
        ts,
        mr: m.mr,
        pd: m.pd,
        addr: m.addr,
        length: m.length,
        iova: m.iova,
        lkey: m.lkey,
        rkey: m.rkey,
    }
}

/// A created completion queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqInfo {
    pub cq: u64,
    pub context: u64,
    pub channel: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    pub wc_flags: u64,
    /// `cq_variant` value.
    pub variant: u32,
}

/// `CqCreate`: aux = variant.
pub fn cq_create(ts: u64, c: &CqInfo) -> CqCreate {
    CqCreate {
        hdr: RecordHeader::of::<CqCreate>(c.variant),
        ts,
        cq: c.cq,
        context: c.context,
        channel: c.channel,
        cqe: c.cqe,
        comp_vector: c.comp_vector,
        wc_flags: c.wc_flags,
    }
}

/// `SrqCreate`.
pub fn srq_create(
    ts: u64,
    srq: u64,
    pd: u64,
    max_wr: u32,
    max_sge: u32,
    srq_limit: u32,
    srqn: u32,
) -> SrqCreate {
    SrqCreate {
        hdr: RecordHeader::of::<SrqCreate>(0),
        ts,
        srq,
        pd,
        max_wr,
        max_sge,
        srq_limit,
        srqn,
    }
}

/// A created queue pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpInfo {
    pub qp: u64,
    pub context: u64,
    pub srq: u64,
    pub qpn: u32,
    pub qp_type: u32,
    /// `qp_variant` value.
    pub variant: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline: u32,
}

/// Which CQs (and SRQ) a new QP completes into: the process attribute
/// `qp_cq=qp=0x…,qpn=0x…,send_cq=0x…,recv_cq=0x…,srq=0x…` (handles as in the records), so a
/// reader can attribute completions that do not carry their QP number.
pub fn qp_cqs(qp: u64, qpn: u32, send_cq: u64, recv_cq: u64, srq: u64) {
    super::process_attr(&format!(
        "qp_cq=qp={qp:#x},qpn={qpn:#x},send_cq={send_cq:#x},recv_cq={recv_cq:#x},srq={srq:#x}"
    ));
}

/// A context's own address on one of its ports: the process attribute
/// `port_addr=context=0x…,port=N,lid=0x…[,gid<index>=<32 hex digits>]…` (the non-zero GIDs
/// of the first entries of its GID table), so readers can tell which peer a QP's destination
/// (LID, or GID with a GRH) names even when QP numbers repeat across nodes.
pub fn port_addr(context: u64, port: u8, lid: u16, gids: &[(u32, [u8; 16])]) {
    let mut s = format!("port_addr=context={context:#x},port={port},lid={lid:#x}");
    for (i, g) in gids {
        s.push_str(&format!(",gid{i}="));
        for b in g {
            s.push_str(&format!("{b:02x}"));
        }
    }
    super::process_attr(&s);
}

/// `QpCreate`: aux = qp_type | variant << 8.
pub fn qp_create(ts: u64, q: &QpInfo) -> QpCreate {
    QpCreate {
        hdr: RecordHeader::of::<QpCreate>((q.qp_type & 0xff) | (q.variant << 8)),
        ts,
        qp: q.qp,
        context: q.context,
        srq: q.srq,
        qpn: q.qpn,
        max_send_wr: q.max_send_wr,
        max_recv_wr: q.max_recv_wr,
        max_send_sge: q.max_send_sge.min(u16::MAX as u32) as u16,
        max_recv_sge: q.max_recv_sge.min(u16::MAX as u32) as u16,
        max_inline: q.max_inline,
        _pad: 0,
    }
}

/// `QpDestroy`.
pub fn qp_destroy(ts: u64, qp: u64, qpn: u32, result: i32) -> QpDestroy {
    QpDestroy {
        hdr: RecordHeader::of::<QpDestroy>(0),
        ts,
        qp,
        qpn,
        result,
    }
}

/// The attributes of an `ibv_modify_qp` call that the mask covers (others zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpModifyInfo {
    pub qpn: u32,
    pub mask: u32,
    pub new_state: u8,
    pub path_mtu: u8,
    pub port: u8,
    pub sl: u8,
    pub dest_qpn: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub dlid: u16,
    pub is_global: u8,
    pub sgid_index: u8,
    pub qkey: u32,
    pub dgid: [u8; 16],
    pub result: i32,
}

/// `QpModify`: aux = the attribute mask.
pub fn qp_modify(ts: u64, m: &QpModifyInfo) -> QpModify {
    QpModify {
        hdr: RecordHeader::of::<QpModify>(m.mask),
        ts,
        qpn: m.qpn,
        new_state: m.new_state,
        path_mtu: m.path_mtu,
        port: m.port,
        sl: m.sl,
        dest_qpn: m.dest_qpn,
        sq_psn: m.sq_psn,
        rq_psn: m.rq_psn,
        dlid: m.dlid,
        is_global: m.is_global,
        sgid_index: m.sgid_index,
        qkey: m.qkey,
        result: m.result,
        dgid: m.dgid,
    }
}

/// An address handle's attributes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhInfo {
    pub ah: u64,
    pub pd: u64,
    pub dlid: u16,
    pub sl: u8,
    pub is_global: u8,
    pub port: u8,
    pub sgid_index: u8,
    pub dgid: [u8; 16],
}

/// `AhCreate`.
pub fn ah_create(ts: u64, a: &AhInfo) -> AhCreate {
    AhCreate {
        hdr: RecordHeader::of::<AhCreate>(0),
        ts,
        ah: a.ah,
        pd: a.pd,
        dlid: a.dlid,
        sl: a.sl,
        is_global: a.is_global,
        port: a.port,
        sgid_index: a.sgid_index,
        _pad: 0,
        dgid: a.dgid,
    }
}

/// `CqEvent`: aux = `cq_event_kind`.
pub fn cq_event(ts: u64, kind: u32, cq: u64, arg: u32, result: i32) -> CqEvent {
    CqEvent {
        hdr: RecordHeader::of::<CqEvent>(kind),
        ts,
        cq,
        arg,
        result,
    }
}

/// `AsyncEvent`: aux = `ibv_event_type`.
pub fn async_event(ts: u64, context: u64, event_type: u32, element: u64) -> AsyncEvent {
    AsyncEvent {
        hdr: RecordHeader::of::<AsyncEvent>(event_type),
        ts,
        context,
        element,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigmatrace_schemas::{Record, RecordKind};

    fn roundtrip<R: sigmatrace_schemas::FixedRecord>(r: &R) -> RecordKind {
        match Record::decode(bytemuck::bytes_of(r)).expect("decodes") {
            Record::Unknown { .. } => panic!("unknown kind"),
            _ => RecordKind::from_id(u16::from_ne_bytes([
                bytemuck::bytes_of(r)[0],
                bytemuck::bytes_of(r)[1],
            ]))
            .unwrap(),
        }
    }

    #[test]
    fn device_names_are_truncated_and_padded() {
        let d = device_open(1, 2, 3, b"mlx5_0\0garbage");
        assert_eq!(d.name_str(), "mlx5_0");
        let long = device_open(1, 2, 3, &[b'x'; 80]);
        assert_eq!(long.name_str().len(), 31);
        assert_eq!(roundtrip(&d), RecordKind::DeviceOpen);
    }

    #[test]
    fn aux_words_pack_as_format_md_says() {
        let m = mr_reg(
            5,
            &MrInfo {
                access: 0x7,
                variant: mr_variant::REG_MR_IOVA2,
                ..Default::default()
            },
        );
        assert_eq!(m.hdr.aux, 0x7 | (2 << 28));
        let q = qp_create(
            1,
            &QpInfo {
                qp_type: 4,
                variant: 1,
                max_send_sge: 70000,
                ..Default::default()
            },
        );
        assert_eq!(q.hdr.aux, 4 | (1 << 8));
        assert_eq!(q.max_send_sge, u16::MAX);
        assert_eq!(pd_dealloc(1, 2, -5).hdr.aux, (-5i32) as u32);
        assert_eq!(roundtrip(&q), RecordKind::QpCreate);
        assert_eq!(roundtrip(&pd_dealloc(1, 2, 0)), RecordKind::PdDealloc);
    }
}
