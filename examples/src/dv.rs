//! Queue construction for the GPU-initiated-style workloads, by the two paths real stacks use,
//! plus plain verbs posting for comparison:
//!
//! * [`Mode::InitObj`] — verbs QP and CQ, rings exposed by `mlx5dv_init_obj` (UCX, perftest,
//!   CPU-proxy IBGDA);
//! * [`Mode::Devx`] — rings, CQ and doorbell records in the program's own memory registered
//!   with `mlx5dv_devx_umem_reg`, a UAR from `mlx5dv_devx_alloc_uar`, the CQ and QP created with
//!   PRM `CREATE_CQ` / `CREATE_QP` and moved to RTS with `RST2INIT` / `INIT2RTR` / `RTR2RTS`
//!   through `mlx5dv_devx_obj_modify` (NVSHMEM IBGDA, DOCA GPUNetIO);
//! * [`Mode::Verbs`] — the same work requests through `ibv_post_send` / `ibv_poll_cq`.
//!
//! Either direct mode posts through [`crate::mlx5::DirectQp`].

use std::ffi::c_void;

pub use crate::poster::{Poster, VerbsQp};

use crate::mlx5::{CqRing, DirectError, DirectQp, SendRing};
use crate::prm;
use crate::selfobs;
use crate::verbs::{ffi::*, rc_connect_steps, Device, PortAddress, VerbsError};
use sigmatrace_mlx5::prm::{decode_output, CmdOut};
use sigmatrace_observe::discover::{InitObjCq, InitObjQp, UarInfo};
use sigmatrace_schemas::records::{QpModify, RecordHeader};
use verbs_sys as dv;

/// How queues are built and posted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    InitObj,
    Devx,
    Verbs,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "initobj" | "init_obj" | "init-obj" => Ok(Mode::InitObj),
            "devx" => Ok(Mode::Devx),
            "verbs" => Ok(Mode::Verbs),
            o => Err(format!("unknown mode {o} (initobj, devx or verbs)")),
        }
    }
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::InitObj => "initobj",
            Mode::Devx => "devx",
            Mode::Verbs => "verbs",
        }
    }
}

/// Construction or posting failures.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Direct(#[from] DirectError),
    #[error("{call} failed: {err}")]
    Call {
        call: &'static str,
        err: std::io::Error,
    },
    #[error("devx command {opcode:#x} failed: status {status:#x}, syndrome {syndrome:#x}")]
    Command {
        opcode: u16,
        status: u8,
        syndrome: u32,
    },
    #[error("QP {qpn:#x}: work completion for WQE {wr_id} failed with status {status}")]
    Completion { qpn: u32, wr_id: u64, status: u32 },
    #[error("QP {qpn:#x}: no completion for WQE {idx} within {secs} s")]
    Timeout { qpn: u32, idx: u64, secs: u64 },
}

fn os_err(call: &'static str) -> QueueError {
    QueueError::Call {
        call,
        err: std::io::Error::last_os_error(),
    }
}

fn rc_err(call: &'static str, rc: i32) -> QueueError {
    QueueError::Call {
        call,
        err: std::io::Error::from_raw_os_error(rc.abs()),
    }
}

/// `MLX5DV_UAR_ALLOC_TYPE_BF` / `_NC` (macros in `mlx5_api.h`, not bindgen-visible).
const UAR_ALLOC_TYPE_BF: u32 = 0;
const UAR_ALLOC_TYPE_NC: u32 = 1;

/// Page-aligned zeroed memory that stays put (ring memory of devx queues).
struct Pages {
    ptr: *mut u8,
    len: usize,
}

impl Pages {
    fn new(len: usize) -> Result<Pages, QueueError> {
        let len = len.div_ceil(4096) * 4096;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: posix_memalign with a power-of-two alignment and a valid out pointer.
        let rc = unsafe { libc::posix_memalign(&mut p, 4096, len) };
        if rc != 0 || p.is_null() {
            return Err(rc_err("posix_memalign", rc.max(libc::ENOMEM)));
        }
        // SAFETY: p addresses len writable bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, len) };
        Ok(Pages {
            ptr: p as *mut u8,
            len,
        })
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        let _ = self.len;
        // SAFETY: allocated by posix_memalign in Pages::new.
        unsafe { libc::free(self.ptr as *mut c_void) };
    }
}

/// Resources of a devx QP that must outlive its use.
struct DevxParts {
    qp: *mut dv::mlx5dv_devx_obj,
    cq: *mut dv::mlx5dv_devx_obj,
    umem: *mut dv::mlx5dv_devx_umem,
    uar: *mut dv::mlx5dv_devx_uar,
    _mem: Pages,
}

/// A QP created but not yet connected.
pub struct NewQp {
    pub qpn: u32,
    mode: Mode,
    verbs_qp: Option<(*mut ibv_qp, *mut ibv_cq)>,
    direct: Option<(SendRing, CqRing)>,
    devx: Option<DevxParts>,
}

/// Creates one RC QP (and its own CQ) on `dev` with room for `depth` WQEs.
pub fn create_qp(dev: &Device, mode: Mode, depth: u32) -> Result<NewQp, QueueError> {
    let depth = depth.next_power_of_two().max(8);
    match mode {
        Mode::InitObj | Mode::Verbs => {
            let (qp, cq) = create_verbs_qp(dev, depth)?;
            let direct = if mode == Mode::InitObj {
                Some(init_obj(qp, cq)?)
            } else {
                None
            };
            Ok(NewQp {
                // SAFETY: live QP.
                qpn: unsafe { (*qp).qp_num },
                mode,
                verbs_qp: Some((qp, cq)),
                direct,
                devx: None,
            })
        }
        Mode::Devx => create_devx(dev, depth),
    }
}

/// `ibv_create_cq` + `ibv_create_qp` (RC, send queue of `depth`, one receive WQE, no inline).
fn create_verbs_qp(dev: &Device, depth: u32) -> Result<(*mut ibv_qp, *mut ibv_cq), QueueError> {
    // SAFETY: plain verbs calls on a live context and PD; the attr is fully initialised.
    unsafe {
        let cq = ibv_create_cq(
            dev.ctx,
            depth as i32,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
        if cq.is_null() {
            return Err(os_err("ibv_create_cq"));
        }
        let mut attr: ibv_qp_init_attr = std::mem::zeroed();
        attr.send_cq = cq;
        attr.recv_cq = cq;
        attr.qp_type = IBV_QPT_RC;
        attr.cap.max_send_wr = depth;
        attr.cap.max_recv_wr = 1;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        let qp = ibv_create_qp(dev.pd, &mut attr);
        if qp.is_null() {
            return Err(os_err("ibv_create_qp"));
        }
        if let Some(o) = selfobs::get() {
            o.qp_create(qp as u64, dev.ctx as u64, (*qp).qp_num, 0, depth);
        }
        Ok((qp, cq))
    }
}

/// `ibv_modify_qp` INIT → RTR → RTS towards `remote_qpn` at `remote` (PSNs 0, 16 outstanding
/// reads/atomics, remote read/write/atomic access).
fn connect_verbs(
    dev: &Device,
    qp: *mut ibv_qp,
    remote: PortAddress,
    remote_qpn: u32,
) -> Result<(), QueueError> {
    for (call, mut a, m) in rc_connect_steps(dev.port, remote, remote_qpn, 16) {
        // SAFETY: qp is live; `a` is initialised for the fields `m` names.
        let rc = unsafe { ibv_modify_qp(qp, &mut a, m as i32) };
        if rc != 0 {
            return Err(rc_err(call, rc));
        }
        record_modify(qp, &a, m);
    }
    Ok(())
}

/// `mlx5dv_init_obj` on a verbs QP and CQ → the rings to post to.
fn init_obj(qp: *mut ibv_qp, cq: *mut ibv_cq) -> Result<(SendRing, CqRing), QueueError> {
    // SAFETY: zeroed outputs are valid; the inputs are live verbs objects.
    unsafe {
        let mut dqp: dv::mlx5dv_qp = std::mem::zeroed();
        let mut dcq: dv::mlx5dv_cq = std::mem::zeroed();
        let mut obj: dv::mlx5dv_obj = std::mem::zeroed();
        obj.qp.in_ = qp as *mut _;
        obj.qp.out = &mut dqp;
        obj.cq.in_ = cq as *mut _;
        obj.cq.out = &mut dcq;
        let rc = dv::mlx5dv_init_obj(&mut obj, (dv::MLX5DV_OBJ_QP | dv::MLX5DV_OBJ_CQ) as u64);
        if rc != 0 {
            return Err(rc_err("mlx5dv_init_obj", rc));
        }
        if dqp.sq.stride != 64 || !dqp.sq.wqe_cnt.is_power_of_two() || dqp.bf.reg.is_null() {
            return Err(rc_err(
                "mlx5dv_init_obj (unexpected SQ geometry)",
                libc::EINVAL,
            ));
        }
        if let Some(o) = selfobs::get() {
            o.on_init_obj(InitObjQp::of(&*qp, &dqp, dcq.cqn), InitObjCq::of(&dcq));
        }
        Ok((
            SendRing {
                buf: dqp.sq.buf as *mut u8,
                wqe_cnt: dqp.sq.wqe_cnt,
                dbrec: dqp.dbrec,
                bf: dqp.bf.reg as *mut u64,
                qpn: (*qp).qp_num,
            },
            CqRing {
                buf: dcq.buf as *mut u8,
                cqe_cnt: dcq.cqe_cnt,
                cqe_size: dcq.cqe_size,
                dbrec: dcq.dbrec,
            },
        ))
    }
}

fn devx_cmd(
    call: &'static str,
    input: &[u8; prm::IN_LEN],
    f: impl FnOnce(*const c_void, *mut c_void) -> Result<(), QueueError>,
) -> Result<(CmdOut, [u8; prm::OUT_LEN]), QueueError> {
    let mut out = [0u8; prm::OUT_LEN];
    let r = f(
        input.as_ptr() as *const c_void,
        out.as_mut_ptr() as *mut c_void,
    );
    // A 16-byte output always decodes.
    let o = decode_output(&out).unwrap_or_default();
    let opcode = u16::from_be_bytes([input[0], input[1]]);
    if o.status != 0 {
        return Err(QueueError::Command {
            opcode,
            status: o.status,
            syndrome: o.syndrome,
        });
    }
    r.map_err(|e| match e {
        QueueError::Call { err, .. } => QueueError::Call { call, err },
        other => other,
    })?;
    Ok((o, out))
}

/// Devx construction: rings and doorbell records on one umem, UAR, CREATE_CQ, CREATE_QP,
/// RST2INIT.
fn create_devx(dev: &Device, depth: u32) -> Result<NewQp, QueueError> {
    let ctx = dev.ctx;
    // SAFETY: all calls get a live context/PD and buffers that outlive them; every object
    // created here is kept in DevxParts for the process lifetime.
    unsafe {
        let pdn = pd_number(dev)?;
        let uar = alloc_uar(dev)?;
        let cqe_cnt = depth;
        let sq_bytes = depth as usize * 64;
        let cq_off = sq_bytes;
        let dbr_off = cq_off + cqe_cnt as usize * 64;
        // Doorbell records: QP at dbr_off, CQ at dbr_off + 64 (separate cache lines).
        let mem = Pages::new(dbr_off + 128)?;
        for i in 0..cqe_cnt as usize {
            *mem.ptr.add(cq_off + i * 64 + 63) = sigmatrace_mlx5::cqe::INVALID_OP_OWN;
        }
        let umem =
            dv::mlx5dv_devx_umem_reg(ctx, mem.ptr as *mut c_void, mem.len, IBV_ACCESS_LOCAL_WRITE);
        if umem.is_null() {
            return Err(os_err("mlx5dv_devx_umem_reg"));
        }
        let umem_id = (*umem).umem_id;
        if let Some(o) = selfobs::get() {
            o.on_umem_reg(umem as u64, umem_id, mem.ptr as u64, mem.len as u64);
        }
        let mut eqn = 0u32;
        if dv::mlx5dv_devx_query_eqn(ctx, 0, &mut eqn) != 0 {
            eqn = 0;
        }
        let log = |n: u32| n.trailing_zeros() as u8;
        let cq_in = prm::CreateCq {
            log_cq_size: log(cqe_cnt),
            uar_page: (*uar).page_id,
            c_eqn: eqn,
            cq_umem_id: umem_id,
            cq_umem_offset: cq_off as u64,
            dbr_umem_id: umem_id,
            dbr_offset: dbr_off as u64 + 64,
        }
        .encode();
        let (cq_obj, cq_out, raw) = obj_create(dev, "mlx5dv_devx_obj_create(CREATE_CQ)", &cq_in)?;
        if let Some(o) = selfobs::get() {
            o.on_obj_create(cq_obj as u64, &cq_in, &raw);
        }
        let qp_in = prm::CreateQp {
            pd: pdn,
            log_sq_size: log(depth),
            uar_page: (*uar).page_id,
            cqn: cq_out.number,
            wq_umem_id: umem_id,
            wq_umem_offset: 0,
            dbr_umem_id: umem_id,
            dbr_offset: dbr_off as u64,
        }
        .encode();
        let (qp_obj, qp_out, raw) = obj_create(dev, "mlx5dv_devx_obj_create(CREATE_QP)", &qp_in)?;
        let qpn = qp_out.number;
        if let Some(o) = selfobs::get() {
            o.qp_create(qp_obj as u64, ctx as u64, qpn, 3, depth);
            o.on_obj_create(qp_obj as u64, &qp_in, &raw);
        }
        modify(qp_obj, &prm::rst2init(qpn, dev.port), "RST2INIT", dev.port)?;
        let sq = SendRing {
            buf: mem.ptr,
            wqe_cnt: depth,
            dbrec: mem.ptr.add(dbr_off) as *mut u32,
            bf: (*uar).reg_addr as *mut u64,
            qpn,
        };
        let cq = CqRing {
            buf: mem.ptr.add(cq_off),
            cqe_cnt,
            cqe_size: 64,
            dbrec: mem.ptr.add(dbr_off + 64) as *mut u32,
        };
        Ok(NewQp {
            qpn,
            mode: Mode::Devx,
            verbs_qp: None,
            direct: Some((sq, cq)),
            devx: Some(DevxParts {
                qp: qp_obj,
                cq: cq_obj,
                umem,
                uar,
                _mem: mem,
            }),
        })
    }
}

/// The PD's number (`mlx5dv_init_obj`), which CREATE_QP names.
fn pd_number(dev: &Device) -> Result<u32, QueueError> {
    let mut dpd = dv::mlx5dv_pd::default();
    let mut obj = dv::mlx5dv_obj::default();
    obj.pd.in_ = dev.pd as *mut _;
    obj.pd.out = &mut dpd;
    // SAFETY: dev.pd is the device's live PD; obj and dpd outlive the call.
    let rc = unsafe { dv::mlx5dv_init_obj(&mut obj, dv::MLX5DV_OBJ_PD as u64) };
    if rc != 0 {
        return Err(rc_err("mlx5dv_init_obj(PD)", rc));
    }
    Ok(dpd.pdn)
}

/// A UAR page (non-cached, else blue-flame), reported to self-observation; kept for the
/// process lifetime.
fn alloc_uar(dev: &Device) -> Result<*mut dv::mlx5dv_devx_uar, QueueError> {
    // SAFETY: dev.ctx is the device's live context.
    let mut uar = unsafe { dv::mlx5dv_devx_alloc_uar(dev.ctx, UAR_ALLOC_TYPE_NC) };
    if uar.is_null() {
        // SAFETY: as above.
        uar = unsafe { dv::mlx5dv_devx_alloc_uar(dev.ctx, UAR_ALLOC_TYPE_BF) };
    }
    if uar.is_null() {
        return Err(os_err("mlx5dv_devx_alloc_uar"));
    }
    // SAFETY: a non-null UAR from mlx5dv_devx_alloc_uar, never freed.
    let u = unsafe { &*uar };
    if let Some(o) = selfobs::get() {
        o.on_alloc_uar(UarInfo {
            handle: uar as u64,
            page_id: u.page_id,
            reg_addr: u.reg_addr as u64,
            base_addr: u.base_addr as u64,
            mmap_off: u.mmap_off as u64,
        });
    }
    Ok(uar)
}

/// `mlx5dv_devx_obj_create` of one PRM command: the object, its decoded output and the raw
/// output bytes.
fn obj_create(
    dev: &Device,
    call: &'static str,
    input: &[u8; prm::IN_LEN],
) -> Result<(*mut dv::mlx5dv_devx_obj, CmdOut, [u8; prm::OUT_LEN]), QueueError> {
    let mut obj = std::ptr::null_mut();
    let (out, raw) = devx_cmd(call, input, |i, o| {
        // SAFETY: dev.ctx is live; the input/output buffers have the lengths passed.
        obj = unsafe { dv::mlx5dv_devx_obj_create(dev.ctx, i, prm::IN_LEN, o, prm::OUT_LEN) };
        if obj.is_null() {
            Err(os_err("mlx5dv_devx_obj_create"))
        } else {
            Ok(())
        }
    })?;
    Ok((obj, out, raw))
}

fn modify(
    obj: *mut dv::mlx5dv_devx_obj,
    input: &[u8; prm::IN_LEN],
    what: &'static str,
    port: u8,
) -> Result<(), QueueError> {
    let (_, raw) = devx_cmd(what, input, |i, o| {
        // SAFETY: obj is a live devx QP; input/output buffers have the lengths passed.
        let rc = unsafe { dv::mlx5dv_devx_obj_modify(obj, i, prm::IN_LEN, o, prm::OUT_LEN) };
        if rc != 0 {
            Err(rc_err("mlx5dv_devx_obj_modify", rc))
        } else {
            Ok(())
        }
    })?;
    if let Some(o) = selfobs::get() {
        o.on_obj_modify(obj as u64, input, &raw, port);
    }
    Ok(())
}

/// Self-observation of a successful `ibv_modify_qp` (the fields its mask names).
fn record_modify(qp: *mut ibv_qp, a: &ibv_qp_attr, m: u32) {
    let Some(o) = selfobs::get() else { return };
    let mut r = QpModify {
        hdr: RecordHeader::of::<QpModify>(m),
        // SAFETY: live QP.
        qpn: unsafe { (*qp).qp_num },
        new_state: a.qp_state as u8,
        ..Default::default()
    };
    if m & IBV_QP_PORT != 0 {
        r.port = a.port_num;
    }
    if m & IBV_QP_PATH_MTU != 0 {
        r.path_mtu = a.path_mtu as u8;
    }
    if m & IBV_QP_DEST_QPN != 0 {
        r.dest_qpn = a.dest_qp_num;
    }
    if m & IBV_QP_RQ_PSN != 0 {
        r.rq_psn = a.rq_psn;
    }
    if m & IBV_QP_SQ_PSN != 0 {
        r.sq_psn = a.sq_psn;
    }
    if m & IBV_QP_AV != 0 {
        r.dlid = a.ah_attr.dlid;
        r.sl = a.ah_attr.sl;
        r.port = a.ah_attr.port_num;
        r.is_global = a.ah_attr.is_global;
        if a.ah_attr.is_global != 0 {
            r.sgid_index = a.ah_attr.grh.sgid_index;
            // SAFETY: the GID union is plain bytes.
            r.dgid = unsafe { a.ah_attr.grh.dgid.raw };
        }
    }
    o.qp_modify(r);
}

/// Connects `q` to `remote_qpn` at `remote` and returns the poster for it.
pub fn connect(
    dev: &Device,
    q: NewQp,
    remote: PortAddress,
    remote_qpn: u32,
) -> Result<Poster, QueueError> {
    match q.mode {
        Mode::InitObj | Mode::Verbs => {
            let (raw_qp, raw_cq) = q.verbs_qp.expect("verbs QP");
            connect_verbs(dev, raw_qp, remote, remote_qpn)?;
            Ok(match q.direct {
                Some((sq, cq)) => Poster::Direct(DirectQp::new(sq, cq)),
                None => Poster::Verbs(VerbsQp::new(raw_qp, raw_cq)),
            })
        }
        Mode::Devx => {
            let parts = q.devx.expect("devx parts");
            let path = prm::RemotePath {
                qpn: remote_qpn,
                lid: remote.lid,
                gid: (remote.gid != [0; 16]).then_some(remote.gid),
            };
            modify(
                parts.qp,
                &prm::init2rtr(q.qpn, dev.port, &path),
                "INIT2RTR",
                dev.port,
            )?;
            modify(parts.qp, &prm::rtr2rts(q.qpn), "RTR2RTS", dev.port)?;
            let (sq, cq) = q.direct.expect("devx rings");
            // The objects, umem and UAR stay alive for the process lifetime (as NVSHMEM keeps
            // them until finalize); leak the handles with the poster.
            std::mem::forget(parts);
            Ok(Poster::Direct(DirectQp::new(sq, cq)))
        }
    }
}

// Devx handles are only kept to be leaked deliberately; name the fields so they count as used.
impl DevxParts {
    #[allow(dead_code)]
    fn handles(&self) -> [*mut c_void; 4] {
        [
            self.qp as *mut c_void,
            self.cq as *mut c_void,
            self.umem as *mut c_void,
            self.uar as *mut c_void,
        ]
    }
}
