//! XRC (extended reliable connected transport): XRC domains (`ibv_open_xrcd`), XRC SRQs
//! (`ibv_create_srq_ex` with `IBV_SRQT_XRC`, `ibv_get_srq_num`), and the two XRC QP types
//! (`verbs::qp`): an initiator (`IBV_QPT_XRC_SEND`) is an RC requester whose work requests
//! name the XRC SRQ they go to (`qp_type.xrc.remote_srqn`); a target (`IBV_QPT_XRC_RECV`) is
//! an RC responder with no queues, PD or CQ of its own — each request takes its receive WQE,
//! CQ and protection domain from the SRQ it names, which must be in the target's domain
//! (`wire::responder`).
//!
//! Domains are this process's: an XRC domain opened on a file (`IBV_XRCD_INIT_ATTR_FD`) is
//! shared by the opens of that file in this process (the kernel shares it between processes
//! too; softnic's SRQs live in the process that created them, so targets and their SRQs must
//! be in one process).

use crate::ffi::*;
use crate::verbs::ctx::set_errno;
use crate::verbs::objects::{SnCq, SnSrq};
use crate::wire::state::XrcSrq;
use std::collections::HashMap;
use std::ffi::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// `struct verbs_xrcd` as libibverbs lays it out (`ibv_xrcd` first), and softnic's domain
/// number after it.
#[repr(C)]
pub struct SnXrcd {
    pub xrcd: ibv_xrcd,
    pub comp_mask: u32,
    pub handle: u32,
    /// The domain's number (never 0), and the file it was opened on (inode), if any.
    pub id: u32,
    file: Option<FileKey>,
}

/// A file an XRC domain was opened on: (device, inode).
type FileKey = (u64, u64);

/// Domains opened on files: file → (domain number, opens).
static BY_FILE: Mutex<Option<HashMap<FileKey, (u32, u32)>>> = Mutex::new(None);
static NEXT: AtomicU32 = AtomicU32::new(1);

/// The domain number of an `ibv_xrcd` softnic made.
///
/// # Safety
/// `x` is null or an XRC domain from [`vctx_open_xrcd`].
pub unsafe fn xrcd_id(x: *mut ibv_xrcd) -> u32 {
    // SAFETY: per the caller.
    unsafe { x.cast::<SnXrcd>().as_ref() }.map_or(0, |d| d.id)
}

/// `ibv_open_xrcd`: with a file (`fd`), the domain of that file — opened now when `O_CREAT`
/// is among `oflags`, else `ENOENT` when it has none yet (`O_EXCL` with one: `EEXIST`); with
/// no file (`fd` −1), a new domain.
pub unsafe extern "C" fn vctx_open_xrcd(
    ctx: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    let Some(a) = (unsafe { attr.as_ref() }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    if a.comp_mask & !(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS) != 0
        || a.comp_mask & IBV_XRCD_INIT_ATTR_FD == 0
        || a.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS == 0
    {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let (id, file) = if a.fd == -1 {
        (NEXT.fetch_add(1, Ordering::Relaxed), None)
    } else {
        // SAFETY: fstat of the caller's descriptor into a local.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(a.fd, &mut st) } != 0 {
            set_errno(libc::EBADF);
            return null_mut();
        }
        let key = (st.st_dev, st.st_ino);
        let mut g = BY_FILE.lock().unwrap_or_else(|e| e.into_inner());
        let m = g.get_or_insert_with(HashMap::new);
        match m.get_mut(&key) {
            Some(_) if a.oflags & libc::O_EXCL != 0 && a.oflags & libc::O_CREAT != 0 => {
                set_errno(libc::EEXIST);
                return null_mut();
            }
            Some((id, opens)) => {
                *opens += 1;
                (*id, Some(key))
            }
            None if a.oflags & libc::O_CREAT == 0 => {
                set_errno(libc::ENOENT);
                return null_mut();
            }
            None => {
                let id = NEXT.fetch_add(1, Ordering::Relaxed);
                m.insert(key, (id, 1));
                (id, Some(key))
            }
        }
    };
    Box::into_raw(Box::new(SnXrcd {
        xrcd: ibv_xrcd { context: ctx },
        comp_mask: 0,
        handle: id,
        id,
        file,
    })) as *mut ibv_xrcd
}

/// `ibv_close_xrcd`.
pub unsafe extern "C" fn vctx_close_xrcd(x: *mut ibv_xrcd) -> c_int {
    if x.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an XRC domain from `vctx_open_xrcd`, closed once.
    let d = unsafe { Box::from_raw(x.cast::<SnXrcd>()) };
    if let Some(key) = d.file {
        let mut g = BY_FILE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = g.as_mut() {
            if let Some((_, opens)) = m.get_mut(&key) {
                *opens -= 1;
                if *opens == 0 {
                    m.remove(&key);
                }
            }
        }
    }
    0
}

/// `ibv_create_srq_ex` of an XRC SRQ: a PD, an XRC domain and the CQ its receives complete
/// on are required.
///
/// # Safety
/// `a` is the caller's attribute, its `srq_type` `IBV_SRQT_XRC`.
pub unsafe fn create_xrc_srq(a: &mut ibv_srq_init_attr_ex) -> *mut ibv_srq {
    let need = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if a.comp_mask & need != need || a.pd.is_null() || a.xrcd.is_null() || a.cq.is_null() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: the caller's CQ and XRC domain, softnic's.
    let xrc = unsafe {
        XrcSrq {
            xrcd: xrcd_id(a.xrcd),
            cq: (*(a.cq as *mut SnCq)).inner.clone(),
        }
    };
    // SAFETY: the caller's PD and attribute.
    unsafe { crate::verbs::objects::create_srq(a.pd, a.srq_context, &mut a.attr, Some(xrc)) }
}

/// `ibv_get_srq_num`: the number requests to XRC targets name the SRQ by.
pub unsafe extern "C" fn vctx_get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    if srq.is_null() || num.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's softnic SRQ and out pointer.
    unsafe { *num = (&*(srq as *mut SnSrq)).inner.srqn };
    0
}
