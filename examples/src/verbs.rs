//! A thin, owned wrapper over libibverbs for the example workloads.
//!
//! The data path (`post_send`, `post_recv`, `poll_cq`) goes through the per-context function
//! pointers exactly as the `static inline` functions of `<infiniband/verbs.h>` do, so a tracer
//! sees these programs the way it sees C programs.

use std::ffi::CStr;
use std::fmt;

/// The rdma-core bindings (`verbs-sys`: the installed `<infiniband/verbs.h>` and
/// `<infiniband/mlx5dv.h>`).
pub use verbs_sys as ffi;

use ffi::*;

/// A verbs call failed.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("no RDMA device found (run on softnic: softnic-run -- CMD)")]
    NoDevice,
    #[error("{call} failed: {err}")]
    Call {
        call: &'static str,
        err: std::io::Error,
    },
    #[error("work completion for wr_id {wr_id} failed with status {status} ({text})")]
    Completion {
        wr_id: u64,
        status: u32,
        text: String,
    },
}

fn check<T>(call: &'static str, p: *mut T) -> Result<*mut T, VerbsError> {
    if p.is_null() {
        Err(VerbsError::Call {
            call,
            err: std::io::Error::last_os_error(),
        })
    } else {
        Ok(p)
    }
}

fn check_rc(call: &'static str, rc: i32) -> Result<(), VerbsError> {
    if rc == 0 {
        Ok(())
    } else {
        let errno = if rc > 0 { rc } else { -rc };
        Err(VerbsError::Call {
            call,
            err: std::io::Error::from_raw_os_error(errno),
        })
    }
}

/// A queue pair created by [`Device::create_rc_qp`] (valid for the process lifetime).
#[derive(Clone, Copy, Debug)]
pub struct Qp(*mut ibv_qp);

/// A completion queue created by [`Device::create_cq`].
#[derive(Clone, Copy, Debug)]
pub struct Cq(*mut ibv_cq);

/// The local port's address as a peer needs it to connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAddress {
    pub lid: u16,
    pub gid: [u8; 16],
}

impl fmt::Display for PortAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.lid)?;
        for b in self.gid {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// An open device context with one PD and its port-1 address.
pub struct Device {
    pub ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub name: String,
    pub addr: PortAddress,
    pub port: u8,
}

impl Device {
    /// Opens the device named by `$SIGMATRACE_EXAMPLE_DEVICE`, else the first one.
    pub fn open() -> Result<Device, VerbsError> {
        let want = std::env::var("SIGMATRACE_EXAMPLE_DEVICE").ok();
        let mut n = 0;
        // SAFETY: plain verbs calls; the list is freed after the chosen device is opened.
        unsafe {
            let list = ibv_get_device_list(&mut n);
            if list.is_null() || n == 0 {
                return Err(VerbsError::NoDevice);
            }
            let mut chosen = std::ptr::null_mut();
            let mut name = String::new();
            for i in 0..n as usize {
                let dev = *list.add(i);
                let dn = CStr::from_ptr(ibv_get_device_name(dev))
                    .to_string_lossy()
                    .into_owned();
                if want.as_deref().is_none_or(|w| w == dn) {
                    chosen = dev;
                    name = dn;
                    break;
                }
            }
            if chosen.is_null() {
                ibv_free_device_list(list);
                return Err(VerbsError::NoDevice);
            }
            let ctx = ibv_open_device(chosen);
            ibv_free_device_list(list);
            let ctx = check("ibv_open_device", ctx)?;
            let pd = check("ibv_alloc_pd", ibv_alloc_pd(ctx))?;
            let port = 1u8;
            let mut pattr: ibv_port_attr = std::mem::zeroed();
            check_rc(
                "ibv_query_port",
                ibv_query_port(ctx, port, &mut pattr as *mut ibv_port_attr as *mut _),
            )?;
            let mut gid: ibv_gid = std::mem::zeroed();
            check_rc("ibv_query_gid", ibv_query_gid(ctx, port, 0, &mut gid))?;
            Ok(Device {
                ctx,
                pd,
                name,
                addr: PortAddress {
                    lid: pattr.lid,
                    gid: gid.raw,
                },
                port,
            })
        }
    }

    /// Creates a completion queue with room for `cqe` entries.
    pub fn create_cq(&self, cqe: i32) -> Result<Cq, VerbsError> {
        // SAFETY: ctx is open.
        check("ibv_create_cq", unsafe {
            ibv_create_cq(self.ctx, cqe, std::ptr::null_mut(), std::ptr::null_mut(), 0)
        })
        .map(Cq)
    }

    /// Registers `buf` with local/remote read/write/atomic access.
    pub fn register(&self, buf: &mut [u8]) -> Result<*mut ibv_mr, VerbsError> {
        let access = IBV_ACCESS_LOCAL_WRITE
            | IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_READ
            | IBV_ACCESS_REMOTE_ATOMIC;
        // SAFETY: buf outlives the registration (the caller deregisters or leaks both).
        check("ibv_reg_mr", unsafe {
            ibv_reg_mr(
                self.pd,
                buf.as_mut_ptr() as *mut _,
                buf.len(),
                access as i32,
            )
        })
    }

    /// Creates an RC QP on `cq` (send and receive).
    pub fn create_rc_qp(&self, cq: Cq, depth: u32) -> Result<Qp, VerbsError> {
        // SAFETY: zeroed init attr is valid; the fields set below are the ones verbs reads.
        unsafe {
            let mut attr: ibv_qp_init_attr = std::mem::zeroed();
            attr.send_cq = cq.0;
            attr.recv_cq = cq.0;
            attr.qp_type = IBV_QPT_RC;
            attr.cap.max_send_wr = depth;
            attr.cap.max_recv_wr = depth;
            attr.cap.max_send_sge = 1;
            attr.cap.max_recv_sge = 1;
            attr.cap.max_inline_data = 64;
            check("ibv_create_qp", ibv_create_qp(self.pd, &mut attr)).map(Qp)
        }
    }

    /// Moves an RC QP through INIT → RTR → RTS towards `remote_qpn` at `remote`.
    pub fn connect_rc(
        &self,
        qp: Qp,
        remote: PortAddress,
        remote_qpn: u32,
    ) -> Result<(), VerbsError> {
        for (call, mut a, mask) in rc_connect_steps(self.port, remote, remote_qpn, 1) {
            // SAFETY: qp was created by this device; `a` is initialised for `mask`.
            check_rc(call, unsafe { ibv_modify_qp(qp.0, &mut a, mask as i32) })?;
        }
        Ok(())
    }
}

/// The three `ibv_modify_qp` calls that connect an RC QP through local `port` to `remote_qpn`
/// at `remote`, as (call name, attributes, mask) for INIT, RTR and RTS: PSNs 0, `rd_atomic`
/// reads/atomics outstanding each way, remote read/write/atomic access, MTU 1024.
pub fn rc_connect_steps(
    port: u8,
    remote: PortAddress,
    remote_qpn: u32,
    rd_atomic: u8,
) -> [(&'static str, ibv_qp_attr, ibv_qp_attr_mask); 3] {
    // SAFETY: ibv_qp_attr is plain C data for which all zeroes is a valid value.
    let zeroed = || -> ibv_qp_attr { unsafe { std::mem::zeroed() } };
    let mut init = zeroed();
    init.qp_state = IBV_QPS_INIT;
    init.port_num = port;
    init.qp_access_flags = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC;
    let init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    let mut rtr = zeroed();
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = IBV_MTU_1024;
    rtr.dest_qp_num = remote_qpn;
    rtr.max_dest_rd_atomic = rd_atomic;
    rtr.min_rnr_timer = 12;
    rtr.ah_attr.dlid = remote.lid;
    rtr.ah_attr.port_num = port;
    if remote.gid != [0; 16] {
        rtr.ah_attr.is_global = 1;
        rtr.ah_attr.grh.dgid.raw = remote.gid;
        rtr.ah_attr.grh.hop_limit = 1;
    }
    let rtr_mask = RC_RTR_ATTRS;
    let mut rts = zeroed();
    rts.qp_state = IBV_QPS_RTS;
    rts.timeout = 14;
    rts.retry_cnt = 7;
    rts.rnr_retry = 7;
    rts.max_rd_atomic = rd_atomic;
    let rts_mask = RC_RTS_ATTRS;
    [
        ("ibv_modify_qp(INIT)", init, init_mask),
        ("ibv_modify_qp(RTR)", rtr, rtr_mask),
        ("ibv_modify_qp(RTS)", rts, rts_mask),
    ]
}

/// The QP number of `qp`.
pub fn qp_num(qp: Qp) -> u32 {
    // SAFETY: qp is a live QP.
    unsafe { (*qp.0).qp_num }
}

/// A one-SGE send-queue work request.
#[derive(Clone, Copy, Debug)]
pub struct SendOp {
    pub wr_id: u64,
    pub opcode: ibv_wr_opcode,
    pub local: (u64, u32, u32),
    pub remote: (u64, u32),
    pub imm: u32,
    pub signaled: bool,
}

/// Posts one send WR through `qp->context->ops.post_send` (what `ibv_post_send` does).
pub fn post_send(qp: Qp, op: SendOp) -> Result<(), VerbsError> {
    // SAFETY: the WR and SGE live across the call; the provider copies them.
    unsafe {
        let mut sge = ibv_sge {
            addr: op.local.0,
            length: op.local.1,
            lkey: op.local.2,
        };
        let mut wr: ibv_send_wr = std::mem::zeroed();
        wr.wr_id = op.wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = if op.local.1 == 0 { 0 } else { 1 };
        wr.opcode = op.opcode;
        wr.send_flags = if op.signaled { IBV_SEND_SIGNALED } else { 0 };
        wr.__bindgen_anon_1.imm_data = op.imm.to_be();
        wr.wr.rdma.remote_addr = op.remote.0;
        wr.wr.rdma.rkey = op.remote.1;
        let mut bad = std::ptr::null_mut();
        let post = (*(*qp.0).context)
            .ops
            .post_send
            .expect("provider has post_send");
        check_rc("ibv_post_send", post(qp.0, &mut wr, &mut bad))
    }
}

/// Posts one receive WR (`ibv_post_recv`).
pub fn post_recv(qp: Qp, wr_id: u64, local: (u64, u32, u32)) -> Result<(), VerbsError> {
    // SAFETY: as for post_send.
    unsafe {
        let mut sge = ibv_sge {
            addr: local.0,
            length: local.1,
            lkey: local.2,
        };
        let mut wr: ibv_recv_wr = std::mem::zeroed();
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = if local.1 == 0 { 0 } else { 1 };
        let mut bad = std::ptr::null_mut();
        let post = (*(*qp.0).context)
            .ops
            .post_recv
            .expect("provider has post_recv");
        check_rc("ibv_post_recv", post(qp.0, &mut wr, &mut bad))
    }
}

/// A successful completion, reduced to what the workloads use.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    pub wr_id: u64,
    pub qp_num: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub imm: Option<u32>,
}

/// Polls `cq` (`ibv_poll_cq`) until one completion arrives; error completions are errors.
pub fn wait_one(cq: Cq) -> Result<Completion, VerbsError> {
    // SAFETY: wc is a valid output buffer for one entry.
    unsafe {
        let poll = (*(*cq.0).context)
            .ops
            .poll_cq
            .expect("provider has poll_cq");
        let mut wc: ibv_wc = std::mem::zeroed();
        let mut spins = 0u32;
        loop {
            let n = poll(cq.0, 1, &mut wc);
            if n < 0 {
                return check_rc("ibv_poll_cq", n).map(|_| unreachable!());
            }
            if n == 1 {
                break;
            }
            spins += 1;
            if spins > 1000 {
                std::thread::yield_now();
            }
        }
        if wc.status != IBV_WC_SUCCESS {
            return Err(VerbsError::Completion {
                wr_id: wc.wr_id,
                status: wc.status,
                text: CStr::from_ptr(ibv_wc_status_str(wc.status))
                    .to_string_lossy()
                    .into_owned(),
            });
        }
        let with_imm = wc.wc_flags & IBV_WC_WITH_IMM != 0;
        Ok(Completion {
            wr_id: wc.wr_id,
            qp_num: wc.qp_num,
            opcode: wc.opcode,
            byte_len: wc.byte_len,
            imm: with_imm.then(|| u32::from_be(wc.__bindgen_anon_1.imm_data)),
        })
    }
}
