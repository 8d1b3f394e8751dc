//! Memory windows (`ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw`): windows live in the
//! region key table (`wire::state::Global::{alloc_mw, bind_mw, invalidate_mw, dealloc_mw}`);
//! binds and invalidations are work requests the engine executes in send-queue order
//! (`wire::engine::local_op`).

use crate::ffi::*;
use crate::verbs::ctx::set_errno;
use crate::verbs::objects::pd_id;
use crate::wire::state::global;
use std::ffi::c_int;
use std::ptr::null_mut;

/// `ibv_alloc_mw`: a memory window of type 1 or 2 (EINVAL for another type), unbound; its
/// `rkey` names it in the key table (each bind gives it a new one, [`op_bind_mw`], or the
/// BIND_MW work request's).
pub unsafe extern "C" fn op_alloc_mw(pd: *mut ibv_pd, t: ibv_mw_type) -> *mut ibv_mw {
    if pd.is_null() || !matches!(t, IBV_MW_TYPE_1 | IBV_MW_TYPE_2) {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let key = global().alloc_mw(pd_id(pd), t as u8);
    Box::into_raw(Box::new(ibv_mw {
        context: (*pd).context,
        pd,
        rkey: key,
        handle: key >> 8,
        type_: t,
    }))
}

/// `ibv_dealloc_mw`: the window leaves the key table (an access under any of its keys fails
/// from then on; one in flight ends first, as for `ibv_dereg_mr`).
pub unsafe extern "C" fn op_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    if mw.is_null() {
        return libc::EINVAL;
    }
    global().dealloc_mw((*mw).handle);
    drop(Box::from_raw(mw));
    0
}

/// The next key of a window: same index, next tag (verbs' `ibv_inc_rkey`).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// `ibv_bind_mw` (a type 1 window; verbs checked the type): posts a BIND_MW work request with
/// the window's next key, as mlx5 does, and gives the window that key once it is posted. The
/// bind takes effect in order on the send queue; its completion (signaled as `send_flags`
/// say) is the program's to poll.
pub unsafe extern "C" fn op_bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    b: *mut ibv_mw_bind,
) -> c_int {
    if qp.is_null() || mw.is_null() || b.is_null() {
        return libc::EINVAL;
    }
    let mut wr: ibv_send_wr = std::mem::zeroed();
    wr.wr_id = (*b).wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = (*b).send_flags;
    wr.__bindgen_anon_2.bind_mw.mw = mw;
    wr.__bindgen_anon_2.bind_mw.rkey = inc_rkey((*mw).rkey);
    wr.__bindgen_anon_2.bind_mw.bind_info = (*b).bind_info;
    let mut bad = null_mut();
    let rc = crate::verbs::datapath::op_post_send(qp, &mut wr, &mut bad);
    if rc == 0 {
        (*mw).rkey = wr.__bindgen_anon_2.bind_mw.rkey;
    }
    rc
}
