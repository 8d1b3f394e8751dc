//! The verbs this library needs, through the process's libibverbs: the device (opened once,
//! as librdmacm does), its port facts, and the QP state transitions the CM drives.

use crate::ffi::*;

/// The opened device and the port facts CM messages carry.
pub struct Dev {
    pub ctx: *mut ibv_context,
    /// Protection domain used when the caller passes none (rdma_create_qp with a NULL pd).
    pub pd: *mut ibv_pd,
    pub lid: u16,
    pub gid: [u8; 16],
    pub mtu: u32,
    pub max_rd_atom: u8,
    pub max_init_rd_atom: u8,
}

/// Why the device could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("no RDMA device")]
    NoDevice,
    #[error("{0} failed")]
    Call(&'static str),
}

impl Dev {
    /// Opens the first device (softnic has exactly one) and reads its port 1.
    pub fn open() -> Result<Dev, DevError> {
        let mut n = 0;
        // SAFETY: n is a valid out pointer; the returned list is freed below.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() || n < 1 {
            if !list.is_null() {
                // SAFETY: list came from ibv_get_device_list.
                unsafe { ibv_free_device_list(list) };
            }
            return Err(DevError::NoDevice);
        }
        // SAFETY: list holds n >= 1 device pointers.
        let ctx = unsafe { ibv_open_device(*list) };
        // SAFETY: list came from ibv_get_device_list; contexts outlive the list.
        unsafe { ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(DevError::Call("ibv_open_device"));
        }
        let mut dattr = ibv_device_attr::default();
        // SAFETY: ctx is open; dattr is a valid out struct.
        if unsafe { ibv_query_device(ctx, &mut dattr) } != 0 {
            return Err(DevError::Call("ibv_query_device"));
        }
        let port = query_port(ctx, 1)?;
        let mut gid = ibv_gid::default();
        // SAFETY: ctx is open; gid is a valid out union.
        if unsafe { ibv_query_gid(ctx, 1, 0, &mut gid) } != 0 {
            return Err(DevError::Call("ibv_query_gid"));
        }
        // SAFETY: ctx is open.
        let pd = unsafe { ibv_alloc_pd(ctx) };
        if pd.is_null() {
            return Err(DevError::Call("ibv_alloc_pd"));
        }
        Ok(Dev {
            ctx,
            pd,
            lid: port.lid,
            // SAFETY: every bit pattern of the union is a valid byte array.
            gid: unsafe { gid.raw },
            mtu: port.active_mtu,
            max_rd_atom: dattr.max_qp_rd_atom.clamp(0, 255) as u8,
            max_init_rd_atom: dattr.max_qp_init_rd_atom.clamp(0, 255) as u8,
        })
    }
}

/// The context's `verbs_context` when it has the operation at `op_offset` (rdma-core's
/// `verbs_get_ctx_op`).
pub fn ctx_op<'a>(ctx: *mut ibv_context, op_offset: usize) -> Option<&'a verbs_context> {
    let off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: ctx is an open context; when abi_compat is UINTPTR_MAX it is the `context`
    // member of a verbs_context whose `sz` says which operations exist.
    let v = unsafe {
        if (*ctx).abi_compat as usize != usize::MAX {
            return None;
        }
        &*((ctx as *mut u8).sub(off) as *const verbs_context)
    };
    (v.sz >= std::mem::size_of::<verbs_context>() - op_offset).then_some(v)
}

/// `ibv_query_port` as the inline of `<infiniband/verbs.h>` does it: through the context's
/// `query_port` operation (the exported compat symbol is the fallback for old providers).
pub fn query_port(ctx: *mut ibv_context, port: u8) -> Result<ibv_port_attr, DevError> {
    extern "C" {
        fn ibv_query_port(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> i32;
    }
    let mut attr = ibv_port_attr::default();
    let op =
        ctx_op(ctx, std::mem::offset_of!(verbs_context, query_port)).and_then(|v| v.query_port);
    // SAFETY: ctx is open; attr is a valid out struct of the size passed.
    let rc = unsafe {
        match op {
            Some(f) => f(ctx, port, &mut attr, std::mem::size_of::<ibv_port_attr>()),
            None => ibv_query_port(ctx, port, &mut attr),
        }
    };
    if rc != 0 {
        return Err(DevError::Call("ibv_query_port"));
    }
    Ok(attr)
}

/// Moves a QP to INIT the way rdma_cm does for its port space (UD QPs go on to RTS).
pub fn qp_init(qp: *mut ibv_qp, ud: bool) -> i32 {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        pkey_index: 0,
        port_num: 1,
        ..Default::default()
    };
    let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if ud {
        a.qkey = RDMA_UDP_QKEY;
        mask |= IBV_QP_QKEY;
    } else {
        a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE
            | IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_READ
            | IBV_ACCESS_REMOTE_ATOMIC;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    let rc = modify(qp, &mut a, mask);
    if rc != 0 || !ud {
        return rc;
    }
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RTR,
        ..Default::default()
    };
    let rc = modify(qp, &mut a, IBV_QP_STATE);
    if rc != 0 {
        return rc;
    }
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RTS,
        sq_psn: 0,
        ..Default::default()
    };
    modify(qp, &mut a, IBV_QP_STATE | IBV_QP_SQ_PSN)
}

/// Fills an address vector for a peer: by LID on InfiniBand; on RoCE (the peer reports LID
/// 0) by GID, with a GRH as Ethernet ports require.
pub fn set_av(ah: &mut ibv_ah_attr, lid: u16, gid: &[u8; 16]) {
    ah.dlid = lid;
    ah.port_num = 1;
    if lid == 0 {
        ah.is_global = 1;
        ah.grh.dgid.raw = *gid;
        ah.grh.sgid_index = 0;
        ah.grh.hop_limit = 64;
    }
}

/// What a connected RC QP needs from both sides.
pub struct Path {
    pub remote_qpn: u32,
    pub remote_psn: u32,
    pub local_psn: u32,
    pub dlid: u16,
    /// The peer's GID (the address on RoCE, where the peer has no LID).
    pub dgid: [u8; 16],
    pub mtu: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

/// INIT → RTR → RTS for a connected QP.
pub fn qp_connect(qp: *mut ibv_qp, p: &Path) -> i32 {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RTR,
        path_mtu: p.mtu,
        dest_qp_num: p.remote_qpn,
        rq_psn: p.remote_psn,
        max_dest_rd_atomic: p.responder_resources,
        min_rnr_timer: 12,
        ..Default::default()
    };
    set_av(&mut a.ah_attr, p.dlid, &p.dgid);
    let rc = modify(qp, &mut a, RC_RTR_ATTRS);
    if rc != 0 {
        return rc;
    }
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RTS,
        sq_psn: p.local_psn,
        timeout: 14,
        retry_cnt: p.retry_count.min(7),
        rnr_retry: p.rnr_retry_count.min(7),
        max_rd_atomic: p.initiator_depth,
        ..Default::default()
    };
    modify(qp, &mut a, RC_RTS_ATTRS)
}

/// Moves a QP to ERR (flushing its work requests), as rdma_disconnect does.
pub fn qp_error(qp: *mut ibv_qp) -> i32 {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_ERR,
        ..Default::default()
    };
    modify(qp, &mut a, IBV_QP_STATE)
}

fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: u32) -> i32 {
    // SAFETY: qp is a live QP of the caller's id; a is a valid attribute struct.
    unsafe { ibv_modify_qp(qp, a, mask as i32) }
}
