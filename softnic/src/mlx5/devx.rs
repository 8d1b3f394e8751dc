//! The devx subset GPU-initiated stacks use: umem registration, UAR pages, and raw PRM
//! commands CREATE_CQ, CREATE_QP (RC) and the QP transitions (RST2INIT, INIT2RTR, RTR2RTS,
//! 2ERR, 2RST) on rings in the program's own memory. Command outputs carry the PRM
//! status/syndrome; a failed command returns NULL/errno EREMOTEIO with that output (as the
//! kernel's devx does), a command too short to carry its opcode fails with EINVAL.

use crate::ffi::*;
use crate::mlx5::rings::{DvCq, DvQp, Owned};
use crate::verbs::by_number;
use crate::verbs::ctx::set_errno;
use crate::verbs::objects::SnPd;
use crate::verbs::qp::sn_qp;
use crate::wire::state::*;
use crate::wire::work::*;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

pub const OP_CREATE_CQ: u16 = 0x400;
pub const OP_CREATE_QP: u16 = 0x500;
pub const OP_RST2INIT: u16 = 0x502;
pub const OP_INIT2RTR: u16 = 0x503;
pub const OP_RTR2RTS: u16 = 0x504;
pub const OP_2ERR: u16 = 0x507;
pub const OP_2RST: u16 = 0x50a;

pub const STAT_OK: u8 = 0x0;
pub const STAT_BAD_OP: u8 = 0x2;
pub const STAT_BAD_PARAM: u8 = 0x3;
pub const STAT_BAD_RES_STATE: u8 = 0x9;
pub const STAT_BAD_QP_STATE: u8 = 0x10;
pub const STAT_BAD_INP_LEN: u8 = 0x50;

/// Syndromes softnic reports (distinct per cause, documented in README.md).
pub mod synd {
    pub const UNKNOWN_OPCODE: u32 = 0x5f_0001;
    pub const SHORT_INPUT: u32 = 0x5f_0002;
    pub const BAD_UMEM: u32 = 0x5f_0003;
    pub const UMEM_RANGE: u32 = 0x5f_0004;
    pub const BAD_UAR: u32 = 0x5f_0005;
    pub const BAD_SIZE: u32 = 0x5f_0006;
    pub const BAD_CQE_SIZE: u32 = 0x5f_0007;
    pub const BAD_SERVICE_TYPE: u32 = 0x5f_0008;
    pub const BAD_PD: u32 = 0x5f_0009;
    pub const BAD_CQN: u32 = 0x5f_000a;
    pub const BAD_QPN: u32 = 0x5f_000b;
    pub const BAD_TRANSITION: u32 = 0x5f_000c;
}

#[derive(Default)]
struct Registry {
    umems: HashMap<u32, (u64, u64)>,
    uars: HashMap<u32, usize>,
    next: u32,
}

fn reg() -> std::sync::MutexGuard<'static, Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Registry::default()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

#[repr(C)]
struct Umem {
    pub umem: mlx5dv_devx_umem,
}

#[repr(C)]
struct Uar {
    pub uar: mlx5dv_devx_uar,
    page: Owned,
}

enum Obj {
    Cq(*mut ibv_cq),
    Qp(*mut ibv_qp),
}

struct DevxObj {
    kind: Obj,
}

unsafe fn be16(p: *const u8, off: usize) -> u16 {
    u16::from_be_bytes([*p.add(off), *p.add(off + 1)])
}
unsafe fn be32(p: *const u8, off: usize) -> u32 {
    u32::from_be((p.add(off) as *const u32).read_unaligned())
}
unsafe fn be64(p: *const u8, off: usize) -> u64 {
    u64::from_be((p.add(off) as *const u64).read_unaligned())
}

/// Writes status/syndrome (and an object number at dword 2) into a command output.
unsafe fn set_out(out: *mut u8, outlen: usize, status: u8, syndrome: u32, id: u32) {
    if outlen >= 16 {
        std::ptr::write_bytes(out, 0, 16);
        *out = status;
        (out.add(4) as *mut u32).write_unaligned(syndrome.to_be());
        (out.add(8) as *mut u32).write_unaligned((id & 0x00ff_ffff).to_be());
    }
}

/// A command that failed with a PRM status.
struct CmdErr(u8, u32);

fn umem_range(id: u32, off: u64, len: u64) -> Result<u64, CmdErr> {
    let r = reg();
    let &(addr, size) = r
        .umems
        .get(&id)
        .ok_or(CmdErr(STAT_BAD_PARAM, synd::BAD_UMEM))?;
    if off.checked_add(len).is_none_or(|e| e > size) {
        return Err(CmdErr(STAT_BAD_PARAM, synd::UMEM_RANGE));
    }
    Ok(addr + off)
}

fn uar_ptr(page: u32) -> Result<*mut u8, CmdErr> {
    reg()
        .uars
        .get(&page)
        .map(|&p| p as *mut u8)
        .ok_or(CmdErr(STAT_BAD_PARAM, synd::BAD_UAR))
}

unsafe fn create_cq_cmd(
    ctx: *mut ibv_context,
    i: *const u8,
    inlen: usize,
) -> Result<(Obj, u32), CmdErr> {
    if inlen < 96 {
        return Err(CmdErr(STAT_BAD_INP_LEN, synd::SHORT_INPUT));
    }
    if (be32(i, 16) >> 21) & 7 != 0 {
        return Err(CmdErr(STAT_BAD_PARAM, synd::BAD_CQE_SIZE));
    }
    let dbr_umem = be32(i, 20);
    let log = (be32(i, 28) >> 24) & 0x1f;
    let uar_page = be32(i, 28) & 0x00ff_ffff;
    let dbr_addr = be64(i, 72);
    let off = be64(i, 80);
    let umem = be32(i, 88);
    if log > 22 {
        return Err(CmdErr(STAT_BAD_PARAM, synd::BAD_SIZE));
    }
    let cnt = 1u32 << log;
    let buf = umem_range(umem, off, cnt as u64 * 64)?;
    let dbr = umem_range(dbr_umem, dbr_addr, 8)?;
    uar_ptr(uar_page)?;
    let cq = crate::verbs::objects::create_cq(ctx, cnt.max(2) - 1, null_mut(), null_mut(), 0, 0);
    if cq.is_null() {
        return Err(CmdErr(STAT_BAD_PARAM, synd::BAD_SIZE));
    }
    let c = &*cq;
    let cqn = c.cq.handle;
    let _ = c.inner.dv.set(DvCq::new(
        buf as *mut u8,
        cnt,
        dbr as *mut u8,
        cqn,
        Vec::new(),
    ));
    Ok((Obj::Cq(cq as *mut ibv_cq), cqn))
}

unsafe fn create_qp_cmd(
    ctx: *mut ibv_context,
    i: *const u8,
    inlen: usize,
) -> Result<(Obj, u32), CmdErr> {
    if inlen < 272 {
        return Err(CmdErr(STAT_BAD_INP_LEN, synd::SHORT_INPUT));
    }
    if *i.add(25) != 0 {
        return Err(CmdErr(STAT_BAD_PARAM, synd::BAD_SERVICE_TYPE));
    }
    let pd =
        by_number::pd(be32(i, 28) & 0x00ff_ffff).ok_or(CmdErr(STAT_BAD_PARAM, synd::BAD_PD))?;
    let scq =
        by_number::cq(be32(i, 148) & 0x00ff_ffff).ok_or(CmdErr(STAT_BAD_PARAM, synd::BAD_CQN))?;
    let rcq =
        by_number::cq(be32(i, 180) & 0x00ff_ffff).ok_or(CmdErr(STAT_BAD_PARAM, synd::BAD_CQN))?;
    let w = be32(i, 32);
    let (log_rq, log_stride, log_sq) = ((w >> 19) & 0xf, (w >> 16) & 7, (w >> 11) & 0xf);
    let uar = uar_ptr(be32(i, 36) & 0x00ff_ffff)?;
    let zero_rq = (be32(i, 196) >> 24) & 7 == 3;
    if be32(i, 268) >> 31 == 0 {
        return Err(CmdErr(STAT_BAD_PARAM, synd::BAD_UMEM));
    }
    let (rq_cnt, rq_stride) = if zero_rq {
        (0, 16)
    } else {
        (1u32 << log_rq, 16u32 << log_stride)
    };
    let sq_cnt = 1u32 << log_sq;
    let wq = umem_range(
        be32(i, 264),
        be64(i, 256),
        (rq_cnt * rq_stride + sq_cnt * 64) as u64,
    )?;
    let dbr = umem_range(be32(i, 252), be64(i, 184), 8)?;
    let mut attr = ibv_qp_init_attr {
        qp_context: null_mut(),
        send_cq: scq,
        recv_cq: rcq,
        srq: null_mut(),
        cap: ibv_qp_cap {
            max_send_wr: sq_cnt,
            max_recv_wr: rq_cnt,
            max_send_sge: MAX_SGE as u32,
            max_recv_sge: (rq_stride / 16).min(MAX_SGE as u32),
            max_inline_data: 0,
        },
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
    };
    let qp = crate::verbs::qp::create_qp(ctx, pd, &mut attr, false);
    if qp.is_null() {
        return Err(CmdErr(STAT_BAD_PARAM, synd::BAD_SIZE));
    }
    let q = &sn_qp(qp).inner;
    q.sq.lock()
        .unwrap_or_else(|e| e.into_inner())
        .resize(sq_cnt);
    let _ = q.dv.set(DvQp {
        sq_buf: (wq + (rq_cnt * rq_stride) as u64) as *mut u8,
        sq_cnt,
        rq_buf: wq as *mut u8,
        rq_cnt,
        rq_stride,
        dbrec: dbr as *mut u8,
        uar,
        sq_seen: AtomicU32::new(0),
        rq_ci: AtomicU32::new(0),
        rq_wrid: crate::mlx5::rings::wrid_table(rq_cnt),
        _mem: Vec::new(),
    });
    global().has_dv.store(true, Ordering::Release);
    Ok((Obj::Qp(qp), q.qpn))
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_obj_create(
    ctx: *mut ibv_context,
    inp: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> *mut c_void {
    let (i, o) = (inp as *const u8, out as *mut u8);
    if inp.is_null() || out.is_null() || inlen < 8 || outlen < 16 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let r = match be16(i, 0) {
        OP_CREATE_CQ => create_cq_cmd(ctx, i, inlen),
        OP_CREATE_QP => create_qp_cmd(ctx, i, inlen),
        _ => Err(CmdErr(STAT_BAD_OP, synd::UNKNOWN_OPCODE)),
    };
    match r {
        Ok((kind, id)) => {
            set_out(o, outlen, STAT_OK, 0, id);
            Box::into_raw(Box::new(DevxObj { kind })) as *mut c_void
        }
        Err(CmdErr(st, sy)) => {
            set_out(o, outlen, st, sy, 0);
            set_errno(libc::EREMOTEIO);
            null_mut()
        }
    }
}

unsafe fn modify_qp_cmd(qp: *mut ibv_qp, i: *const u8, inlen: usize) -> Result<(), CmdErr> {
    if inlen < 200 {
        return Err(CmdErr(STAT_BAD_INP_LEN, synd::SHORT_INPUT));
    }
    if be32(i, 8) & 0x00ff_ffff != (*qp).qp_num {
        return Err(CmdErr(STAT_BAD_PARAM, synd::BAD_QPN));
    }
    let mut a: ibv_qp_attr = Default::default();
    let mask = match be16(i, 0) {
        OP_RST2INIT => {
            let f = be32(i, 168);
            a.qp_state = IBV_QPS_INIT;
            a.port_num = 1;
            a.pkey_index = 0;
            a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE
                | if f & (1 << 15) != 0 {
                    IBV_ACCESS_REMOTE_READ
                } else {
                    0
                }
                | if f & (1 << 14) != 0 {
                    IBV_ACCESS_REMOTE_WRITE
                } else {
                    0
                }
                | if f & (1 << 13) != 0 {
                    IBV_ACCESS_REMOTE_ATOMIC
                } else {
                    0
                };
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
        }
        OP_INIT2RTR => {
            a.qp_state = IBV_QPS_RTR;
            let mtu = be32(i, 32) >> 29;
            a.path_mtu = if (IBV_MTU_256..=IBV_MTU_4096).contains(&mtu) {
                mtu
            } else {
                IBV_MTU_4096
            };
            a.dest_qp_num = be32(i, 44) & 0x00ff_ffff;
            let p = be32(i, 52);
            a.ah_attr.dlid = (p & 0xffff) as u16;
            a.ah_attr.is_global = ((p >> 23) & 1) as u8;
            std::ptr::copy_nonoverlapping(i.add(64), a.ah_attr.grh.dgid.raw.as_mut_ptr(), 16);
            a.ah_attr.sl = ((be32(i, 84) >> 24) & 0xf) as u8;
            a.ah_attr.port_num = 1;
            let r = be32(i, 172);
            a.rq_psn = r & 0x00ff_ffff;
            a.min_rnr_timer = ((r >> 24) & 0x1f) as u8;
            a.max_dest_rd_atomic = (1u32 << ((be32(i, 168) >> 21) & 7)).min(MAX_RD_ATOMIC) as u8;
            RC_RTR_ATTRS
        }
        OP_RTR2RTS => {
            a.qp_state = IBV_QPS_RTS;
            a.sq_psn = be32(i, 144) & 0x00ff_ffff;
            a.timeout = (be32(i, 56) >> 27) as u8;
            let r = be32(i, 136);
            a.retry_cnt = ((r >> 16) & 7) as u8;
            a.rnr_retry = ((r >> 13) & 7) as u8;
            a.max_rd_atomic = (1u32 << ((r >> 21) & 7)).min(MAX_RD_ATOMIC) as u8;
            RC_RTS_ATTRS
        }
        OP_2ERR => {
            a.qp_state = IBV_QPS_ERR;
            IBV_QP_STATE
        }
        OP_2RST => {
            a.qp_state = IBV_QPS_RESET;
            IBV_QP_STATE
        }
        _ => return Err(CmdErr(STAT_BAD_OP, synd::UNKNOWN_OPCODE)),
    };
    if crate::verbs::qp::sv_ibv_modify_qp(qp, &mut a, mask as c_int) != 0 {
        return Err(CmdErr(STAT_BAD_QP_STATE, synd::BAD_TRANSITION));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_obj_modify(
    obj: *mut c_void,
    inp: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> c_int {
    let (i, o) = (inp as *const u8, out as *mut u8);
    if obj.is_null() || inp.is_null() || out.is_null() || inlen < 8 || outlen < 16 {
        return libc::EINVAL;
    }
    let r = match (*(obj as *mut DevxObj)).kind {
        Obj::Qp(qp) => modify_qp_cmd(qp, i, inlen),
        Obj::Cq(_) => Err(CmdErr(STAT_BAD_OP, synd::UNKNOWN_OPCODE)),
    };
    match r {
        Ok(()) => {
            set_out(o, outlen, STAT_OK, 0, 0);
            0
        }
        Err(CmdErr(st, sy)) => {
            set_out(o, outlen, st, sy, 0);
            libc::EREMOTEIO
        }
    }
}

/// `mlx5dv_devx_qp_modify`: the QP transition commands of `obj_modify`, on a verbs QP.
#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_qp_modify(
    qp: *mut ibv_qp,
    inp: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> c_int {
    if qp.is_null() || inp.is_null() || out.is_null() || inlen < 8 || outlen < 16 {
        return libc::EINVAL;
    }
    match modify_qp_cmd(qp, inp as *const u8, inlen) {
        Ok(()) => {
            set_out(out as *mut u8, outlen, STAT_OK, 0, 0);
            0
        }
        Err(CmdErr(st, sy)) => {
            set_out(out as *mut u8, outlen, st, sy, 0);
            libc::EREMOTEIO
        }
    }
}

/// `mlx5dv_devx_obj_query` (also the queries of verbs objects, `mlx5dv_devx_{qp,cq,srq,wq,
/// ind_tbl}_query`, and the modify commands of non-QP verbs objects): PRM status BAD_OP.
#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_obj_query(
    obj: *mut c_void,
    _inp: *const c_void,
    _inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> c_int {
    if obj.is_null() || out.is_null() {
        return libc::EINVAL;
    }
    set_out(out as *mut u8, outlen, STAT_BAD_OP, synd::UNKNOWN_OPCODE, 0);
    libc::EREMOTEIO
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_obj_destroy(obj: *mut c_void) -> c_int {
    if obj.is_null() {
        return libc::EINVAL;
    }
    let r = match (*(obj as *mut DevxObj)).kind {
        Obj::Qp(qp) => crate::verbs::qp::sv_ibv_destroy_qp(qp),
        Obj::Cq(cq) => crate::verbs::objects::sv_ibv_destroy_cq(cq),
    };
    if r == 0 {
        drop(Box::from_raw(obj as *mut DevxObj));
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_general_cmd(
    _ctx: *mut ibv_context,
    inp: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> c_int {
    if inp.is_null() || out.is_null() || inlen < 8 || outlen < 16 {
        return libc::EINVAL;
    }
    // SAFETY: `inlen` ≥ 8 bytes of the caller's input: the opcode (bytes 0–1) and op_mod
    // (bytes 6–7), big-endian.
    let (opcode, op_mod) = unsafe {
        let b = std::slice::from_raw_parts(inp as *const u8, 8);
        (
            u16::from_be_bytes([b[0], b[1]]),
            u16::from_be_bytes([b[6], b[7]]),
        )
    };
    if opcode == OP_QUERY_HCA_CAP && NONE_CAPS.contains(&(op_mod >> 1)) {
        // A capability page of a feature softnic does not have: every field 0 (not
        // supported). `set_out` clears the 16-byte header; the page after it is cleared here.
        // SAFETY: `outlen` bytes of the caller's output buffer.
        unsafe { std::ptr::write_bytes(out as *mut u8, 0, outlen) };
        set_out(out as *mut u8, outlen, STAT_OK, 0, 0);
        return 0;
    }
    // Other general commands (the general device capabilities included) are not answered:
    // capabilities come from the verbs queries.
    set_out(out as *mut u8, outlen, STAT_BAD_OP, synd::UNKNOWN_OPCODE, 0);
    libc::EREMOTEIO
}

/// `QUERY_HCA_CAP`.
pub const OP_QUERY_HCA_CAP: u16 = 0x100;

/// The `QUERY_HCA_CAP` capability types (op_mod bits 1–15) softnic answers, with a page of
/// zeros: features it does not have, which a program checks for before it uses them — the
/// NIC flow tables (0x7: steering, packet reformat) and device memory's MEMIC operations
/// (0xF: atomic increment / test-and-set on device memory). rdma-core's own tests query
/// these and skip what is not supported; an error instead fails them.
const NONE_CAPS: [u16; 2] = [0x7, 0xF];

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_query_eqn(
    _ctx: *mut ibv_context,
    _vector: u32,
    eqn: *mut u32,
) -> c_int {
    *eqn = 0;
    0
}

unsafe fn umem_new(addr: *mut c_void, size: usize) -> *mut mlx5dv_devx_umem {
    if addr.is_null() || size == 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let id = {
        let mut r = reg();
        r.next += 1;
        let id = r.next;
        r.umems.insert(id, (addr as u64, size as u64));
        id
    };
    Box::into_raw(Box::new(Umem {
        umem: mlx5dv_devx_umem { umem_id: id },
    })) as *mut mlx5dv_devx_umem
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_umem_reg(
    _ctx: *mut ibv_context,
    addr: *mut c_void,
    size: usize,
    _access: u32,
) -> *mut mlx5dv_devx_umem {
    umem_new(addr, size)
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_umem_reg_ex(
    _ctx: *mut ibv_context,
    inp: *mut mlx5dv_devx_umem_in,
) -> *mut mlx5dv_devx_umem {
    let a = &*inp;
    if a.comp_mask & MLX5DV_UMEM_MASK_DMABUF as u64 != 0 {
        // dma-buf memory (GPU) is not reachable by softnic's CPU engine.
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    umem_new(a.addr, a.size)
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_umem_dereg(umem: *mut mlx5dv_devx_umem) -> c_int {
    if umem.is_null() {
        return libc::EINVAL;
    }
    let b = Box::from_raw(umem as *mut Umem);
    reg().umems.remove(&b.umem.umem_id);
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_alloc_uar(
    _ctx: *mut ibv_context,
    flags: u32,
) -> *mut mlx5dv_devx_uar {
    // MLX5DV_UAR_ALLOC_TYPE_BF (0) and _NC (1).
    if flags > 1 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let page = Owned::new(4096);
    let id = {
        let mut r = reg();
        r.next += 1;
        let id = r.next;
        r.uars.insert(id, page.ptr as usize);
        id
    };
    let base = page.ptr;
    Box::into_raw(Box::new(Uar {
        uar: mlx5dv_devx_uar {
            reg_addr: base.add(0x800) as *mut c_void,
            base_addr: base as *mut c_void,
            page_id: id,
            mmap_off: 0,
            comp_mask: 0,
        },
        page,
    })) as *mut mlx5dv_devx_uar
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_free_uar(uar: *mut mlx5dv_devx_uar) {
    if uar.is_null() {
        return;
    }
    let b = Box::from_raw(uar as *mut Uar);
    reg().uars.remove(&b.uar.page_id);
}

/// The PD number devx commands use for `pd` (also what mlx5dv_init_obj reports).
pub fn pdn(pd: &SnPd) -> u32 {
    pd.id
}
