//! mlx5 direct verbs (exported here as `sv_mlx5dv_*`; softnic's libmlx5.so.1 holds the
//! versioned names): device query, mlx5dv_init_obj (QP, CQ, PD), clock info, QP/CQ creation.
//! The devx subset lives in devx.rs; ring execution in dv.rs.
//!
//! What softnic reports: `mlx5dv_is_supported` is true for softnic0; `mlx5dv_query_device`
//! gives version 1, flags `CQE_V1` and no optional capability (comp_mask 0): no striding RQ, no
//! compression, no DC, no signature/crypto offload. DV QPs are RC or UC; QPs, CQs, SRQs and
//! PDs can be exposed; RWQ, DM and AH objects cannot (`EOPNOTSUPP`).

use crate::ffi::*;
use crate::mlx5::rings::{DvCq, DvQp, DvSrq, Owned};
use crate::verbs::ctx::{device, set_errno};
use crate::verbs::objects::{SnCq, SnPd};
use crate::verbs::qp::sn_qp;
use crate::wire::state::*;
use crate::wire::work::*;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};

fn unsup_ptr<T>() -> *mut T {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

macro_rules! unsup_int {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            $(let _ = $a;)*
            libc::EOPNOTSUPP
        }
    )*};
}
macro_rules! unsup_ptr {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> *mut c_void {
            $(let _ = $a;)*
            unsup_ptr()
        }
    )*};
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_is_supported(dev: *mut ibv_device) -> bool {
    dev == device()
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_query_device(
    _ctx: *mut ibv_context,
    attr: *mut mlx5dv_context,
) -> c_int {
    let a = &mut *attr;
    a.version = 1;
    a.flags = MLX5DV_CONTEXT_FLAGS_CQE_V1 as u64;
    a.comp_mask = 0;
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_open_device(
    dev: *mut ibv_device,
    attr: *mut mlx5dv_context_attr,
) -> *mut ibv_context {
    if !attr.is_null() && (*attr).flags & !MLX5DV_CONTEXT_FLAGS_DEVX != 0 {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    crate::verbs::ctx::sv_ibv_open_device(dev)
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_get_clock_info(
    _ctx: *mut ibv_context,
    info: *mut mlx5dv_clock_info,
) -> c_int {
    // CQE timestamps are CLOCK_MONOTONIC nanoseconds: the conversion is the identity.
    let now = now_ns();
    *info = mlx5dv_clock_info {
        nsec: now,
        last_cycles: now,
        frac: 0,
        mult: 1,
        shift: 0,
        mask: u64::MAX,
    };
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_create_qp(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
    mlx5_attr: *mut mlx5dv_qp_init_attr,
) -> *mut ibv_qp {
    if !mlx5_attr.is_null() && (*mlx5_attr).comp_mask != 0 {
        // DC, create flags and mlx5 send ops are not simulated.
        return unsup_ptr();
    }
    crate::verbs::qp::vctx_create_qp_ex(ctx, attr)
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_create_cq(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
    mlx5_attr: *mut mlx5dv_cq_init_attr,
) -> *mut ibv_cq_ex {
    if !mlx5_attr.is_null() {
        let m = &*mlx5_attr;
        let sized = m.comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE as u64 != 0;
        if m.comp_mask & !(MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE as u64) != 0
            || (sized && m.cqe_size != 64)
        {
            return unsup_ptr();
        }
    }
    crate::verbs::objects::vctx_create_cq_ex(ctx, attr)
}

/// Gives a verbs QP mlx5 rings (once) and describes them.
unsafe fn expose_qp(qp: *mut ibv_qp, out: &mut mlx5dv_qp) -> c_int {
    let s = sn_qp(qp);
    let q = &s.inner;
    if !matches!(q.qp_type, IBV_QPT_RC | IBV_QPT_UC) {
        return libc::EOPNOTSUPP;
    }
    if q.dv.get().is_none() {
        let cap = s.init.cap;
        let inline = (4 + cap.max_inline_data).div_ceil(16) * 16;
        let wqe_bytes = 48 + (16 * cap.max_send_sge.max(1)).max(inline);
        let bbs = wqe_bytes.div_ceil(64);
        let sq_cnt = (cap.max_send_wr.max(1) * bbs).next_power_of_two();
        let (rq_cnt, rq_stride) = if q.srq.is_some() {
            (0, 16)
        } else {
            (
                cap.max_recv_wr.max(1).next_power_of_two(),
                (16 * cap.max_recv_sge.max(1)).next_power_of_two(),
            )
        };
        let wq = Owned::new((rq_cnt * rq_stride + sq_cnt * 64) as usize);
        let db = Owned::new(64);
        let uar = Owned::new(4096);
        let d = DvQp {
            sq_buf: wq.ptr.add((rq_cnt * rq_stride) as usize),
            sq_cnt,
            rq_buf: wq.ptr,
            rq_cnt,
            rq_stride,
            dbrec: db.ptr,
            uar: uar.ptr,
            sq_seen: AtomicU32::new(0),
            rq_ci: AtomicU32::new(0),
            rq_wrid: crate::mlx5::rings::wrid_table(rq_cnt),
            _mem: vec![wq, db, uar],
        };
        {
            let mut sq = q.sq.lock().unwrap_or_else(|e| e.into_inner());
            if !sq.is_empty() {
                return libc::EBUSY;
            }
            sq.resize(sq_cnt);
        }
        if q.dv.set(d).is_err() {
            return libc::EBUSY;
        }
        // Receives posted through verbs so far move into the ring.
        let d = q.dv.get().expect("just set");
        let mut rq = q.rq.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(r) = rq.q.pop_front() {
            let _ = d.post_recv(&r.sge[..r.num_sge as usize], Some(r.wr_id));
        }
        global().has_dv.store(true, Ordering::Release);
    }
    let d = q.dv.get().expect("exposed");
    *out = mlx5dv_qp {
        dbrec: d.dbrec as *mut __be32,
        sq: mlx5dv_qp__bindgen_ty_1 {
            buf: d.sq_buf as *mut c_void,
            wqe_cnt: d.sq_cnt,
            stride: 64,
        },
        rq: mlx5dv_qp__bindgen_ty_2 {
            buf: d.rq_buf as *mut c_void,
            wqe_cnt: d.rq_cnt,
            stride: d.rq_stride,
        },
        bf: mlx5dv_qp__bindgen_ty_3 {
            reg: d.uar.add(0x800) as *mut c_void,
            size: 256,
        },
        comp_mask: 0,
        uar_mmap_offset: 0,
        tirn: 0,
        tisn: 0,
        rqn: q.qpn,
        sqn: q.qpn,
        tir_icm_addr: 0,
    };
    0
}

/// Gives a CQ a CQE64 ring (once) and describes it.
unsafe fn expose_cq(cq: *mut ibv_cq, out: &mut mlx5dv_cq) -> c_int {
    let c = &mut *(cq as *mut SnCq);
    let inner = c.inner.clone();
    if inner.dv.get().is_none() {
        let cnt = (c.cq.cqe as u32 + 1).next_power_of_two();
        let ring = Owned::new(cnt as usize * 64);
        let db = Owned::new(64);
        let uar = Owned::new(4096);
        let d = DvCq::new(ring.ptr, cnt, db.ptr, c.cq.handle, vec![ring, db, uar]);
        d.init_ring();
        let mut q = inner.q.lock().unwrap_or_else(|e| e.into_inner());
        if inner.dv.set(d).is_err() {
            return libc::EBUSY;
        }
        let d = inner.dv.get().expect("just set");
        while let Some(e) = q.pop_front() {
            d.write(e);
        }
        inner.count.store(0, Ordering::Release);
    }
    let d = inner.dv.get().expect("exposed");
    *out = mlx5dv_cq {
        buf: d.buf as *mut c_void,
        dbrec: d.dbrec as *mut __be32,
        cqe_cnt: d.cnt,
        cqe_size: 64,
        cq_uar: d._mem.get(2).map_or(null_mut(), |u| u.ptr as *mut c_void),
        cqn: d.cqn,
        comp_mask: 0,
    };
    0
}

/// Gives an SRQ an mlx5 SRQ ring (once) and describes it.
unsafe fn expose_srq(srq: *mut ibv_srq, out: &mut mlx5dv_srq) -> c_int {
    let s = &*(srq as *mut crate::verbs::objects::SnSrq);
    let inner = &s.inner;
    if inner.dv.get().is_none() {
        if !inner
            .rq
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .q
            .is_empty()
        {
            return libc::EBUSY;
        }
        let stride = (16 + 16 * s.attr.max_sge.max(1)).next_power_of_two();
        let cnt = s.attr.max_wr.max(2).next_power_of_two();
        let ring = Owned::new((cnt * stride) as usize);
        let db = Owned::new(64);
        let d = DvSrq {
            buf: ring.ptr,
            cnt,
            stride,
            dbrec: db.ptr,
            hw: std::sync::Mutex::new((0, 0)),
            _mem: vec![ring, db],
        };
        d.init_list();
        if inner.dv.set(d).is_err() {
            return libc::EBUSY;
        }
    }
    let d = inner.dv.get().expect("exposed");
    *out = mlx5dv_srq {
        buf: d.buf as *mut c_void,
        dbrec: d.dbrec as *mut __be32,
        stride: d.stride,
        head: 0,
        tail: d.cnt - 1,
        comp_mask: 0,
        srqn: inner.srqn,
    };
    0
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_init_obj(obj: *mut mlx5dv_obj, mask: u64) -> c_int {
    let o = &mut *obj;
    let supported = (MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_SRQ | MLX5DV_OBJ_PD) as u64;
    if mask & !supported != 0 {
        return libc::EOPNOTSUPP;
    }
    if mask & MLX5DV_OBJ_QP as u64 != 0 {
        let r = expose_qp(o.qp.in_, &mut *o.qp.out);
        if r != 0 {
            return r;
        }
    }
    if mask & MLX5DV_OBJ_CQ as u64 != 0 {
        let r = expose_cq(o.cq.in_, &mut *o.cq.out);
        if r != 0 {
            return r;
        }
    }
    if mask & MLX5DV_OBJ_SRQ as u64 != 0 {
        let r = expose_srq(o.srq.in_, &mut *o.srq.out);
        if r != 0 {
            return r;
        }
    }
    if mask & MLX5DV_OBJ_PD as u64 != 0 {
        let pd = &*(o.pd.in_ as *mut SnPd);
        (*o.pd.out).pdn = pd.id;
        (*o.pd.out).comp_mask = 0;
    }
    0
}

/// `mlx5dv_query_port`: port 1's mlx5 extras — none (`flags` 0: no vport, e-switch owner,
/// steering ICM or metadata register field is valid: softnic's port is no e-switch vport).
#[no_mangle]
pub unsafe extern "C" fn sv__mlx5dv_query_port(
    ctx: *mut ibv_context,
    port: u32,
    info: *mut c_void,
    len: usize,
) -> c_int {
    if ctx.is_null() || info.is_null() || port != 1 {
        return libc::EINVAL;
    }
    // SAFETY: `len` bytes of the caller's `struct mlx5dv_port` (its size, from the inline
    // wrapper).
    unsafe { std::ptr::write_bytes(info.cast::<u8>(), 0, len) };
    0
}

unsup_int! {
    sv_mlx5dv_set_context_attr(ctx: *mut ibv_context, t: u32, attr: *mut c_void);
    sv_mlx5dv_destroy_mkey(mkey: *mut c_void);
    sv_mlx5dv_devx_subscribe_devx_event(ch: *mut c_void, obj: *mut c_void, n: u16, list: *mut u16, cookie: u64);
    sv_mlx5dv_crypto_login(ctx: *mut ibv_context, attr: *mut c_void);
    sv_mlx5dv_dek_destroy(dek: *mut c_void);
}

unsup_ptr! {
    sv_mlx5dv_qp_ex_from_ibv_qp_ex(qp: *mut ibv_qp_ex);
    sv_mlx5dv_create_mkey(attr: *mut c_void);
    sv_mlx5dv_devx_create_event_channel(ctx: *mut ibv_context, flags: u32);
    sv_mlx5dv_dek_create(ctx: *mut ibv_context, attr: *mut c_void);
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_destroy_event_channel(_ch: *mut c_void) {}
#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_get_event(
    _ch: *mut c_void,
    _d: *mut c_void,
    _l: usize,
) -> isize {
    -(libc::EOPNOTSUPP as isize)
}
