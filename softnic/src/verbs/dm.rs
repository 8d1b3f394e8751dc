//! Device memory (`ibv_alloc_dm`, `ibv_memcpy_to/from_dm`, `ibv_reg_dm_mr`): a ConnectX's
//! on-chip memory (MEMIC), which programs use as a small buffer the NIC reads without a trip
//! to host memory. softnic's "device" is the process, so device memory is host memory the
//! library owns: allocated zeroed, reached only through the two copy functions and through
//! zero-based memory regions registered on it, and limited to [`MAX_DM_SIZE`] per process
//! as the chip's is.

use crate::ffi::*;
use crate::verbs::ctx::set_errno;
use crate::verbs::objects::pd_id;
use crate::wire::state::global;
use std::alloc::Layout;
use std::ffi::{c_int, c_uint, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};

/// Device memory of the device (`max_dm_size`): ConnectX-6's MEMIC, 256 KiB.
pub const MAX_DM_SIZE: u64 = 256 << 10;

/// Device memory allocated and not freed, in bytes.
static ALLOCATED: AtomicU64 = AtomicU64::new(0);

/// An allocation: the C object first (its address is the `ibv_dm *`), then the memory.
#[repr(C)]
pub(crate) struct SnDm {
    dm: ibv_dm,
    mem: *mut u8,
    layout: Layout,
    /// An imported handle (`ibv_import_dm`) of another allocation's memory: unimported, not
    /// freed.
    alias: bool,
}

/// Allocations by handle (`ibv_dm.handle`), for `ibv_import_dm`.
static BY_HANDLE: std::sync::Mutex<Vec<(u32, usize)>> = std::sync::Mutex::new(Vec::new());
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// `ibv_import_dm`: a second handle, on `ctx`, of the allocation numbered `handle`.
///
/// # Safety
/// `ctx` is a live context.
pub unsafe fn import(ctx: *mut ibv_context, handle: u32) -> *mut ibv_dm {
    let found = BY_HANDLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|e| e.0 == handle)
        .map(|e| e.1);
    let Some(orig) = found else {
        set_errno(libc::ENOENT);
        return null_mut();
    };
    // SAFETY: a live allocation (removed from the table before it is freed).
    let o = unsafe { &*(orig as *const SnDm) };
    Box::into_raw(Box::new(SnDm {
        dm: ibv_dm {
            context: ctx,
            ..o.dm
        },
        mem: o.mem,
        layout: o.layout,
        alias: true,
    })) as *mut ibv_dm
}

/// `ibv_unimport_dm`: drops an imported handle (the memory stays its allocation's).
///
/// # Safety
/// `dm` comes from [`import`].
pub unsafe fn unimport(dm: *mut ibv_dm) {
    if !dm.is_null() {
        // SAFETY: per the caller.
        let d = unsafe { Box::from_raw(dm as *mut SnDm) };
        debug_assert!(d.alias);
    }
}

/// The allocation behind `dm`.
///
/// # Safety
/// `dm` must come from [`vctx_alloc_dm`] and not be freed.
unsafe fn of(dm: *mut ibv_dm) -> &'static SnDm {
    // SAFETY: per the caller, `dm` is the first field of a live SnDm.
    unsafe { &*(dm as *const SnDm) }
}

/// Whether `[off, off + len)` lies inside the allocation.
fn inside(d: &SnDm, off: u64, len: u64) -> bool {
    off.checked_add(len)
        .is_some_and(|end| end <= d.layout.size() as u64)
}

/// `verbs_context.alloc_dm`: `attr.length` zeroed bytes aligned to `2^log_align_req` (at
/// least 64), while the device has them (`ENOMEM` beyond [`MAX_DM_SIZE`] in all).
///
/// # Safety
/// `attr` is the caller's attribute.
pub unsafe extern "C" fn vctx_alloc_dm(
    ctx: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    // SAFETY: the caller's attribute (checked non-null).
    let Some(a) = (unsafe { attr.as_ref() }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    let len = a.length as u64;
    if a.comp_mask != 0 || len == 0 || a.log_align_req > 12 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    if len > MAX_DM_SIZE {
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    let Ok(layout) = Layout::from_size_align(a.length, 64.max(1usize << a.log_align_req)) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    let fits = ALLOCATED.fetch_add(len, Ordering::Relaxed) + len <= MAX_DM_SIZE;
    // SAFETY: a non-zero size (checked above).
    let mem = if fits {
        unsafe { std::alloc::alloc_zeroed(layout) }
    } else {
        null_mut()
    };
    if mem.is_null() {
        ALLOCATED.fetch_sub(len, Ordering::Relaxed);
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed) as u32;
    let b = Box::new(SnDm {
        dm: ibv_dm {
            context: ctx,
            memcpy_to_dm: Some(memcpy_to_dm),
            memcpy_from_dm: Some(memcpy_from_dm),
            comp_mask: 0,
            handle,
        },
        mem,
        layout,
        alias: false,
    });
    let p = Box::into_raw(b);
    BY_HANDLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((handle, p as usize));
    p as *mut ibv_dm
}

/// `verbs_context.free_dm`.
///
/// # Safety
/// `dm` comes from [`vctx_alloc_dm`]; no region is registered on it any more.
pub unsafe extern "C" fn vctx_free_dm(dm: *mut ibv_dm) -> c_int {
    if dm.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: per the caller, a live allocation of ours.
    if unsafe { (*(dm as *const SnDm)).alias } {
        // An imported handle is unimported, not freed.
        return libc::EINVAL;
    }
    // SAFETY: per the caller, a live allocation of ours, freed once.
    let d = unsafe { Box::from_raw(dm as *mut SnDm) };
    BY_HANDLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|e| e.0 != d.dm.handle);
    // SAFETY: allocated with this layout in vctx_alloc_dm.
    unsafe { std::alloc::dealloc(d.mem, d.layout) };
    ALLOCATED.fetch_sub(d.layout.size() as u64, Ordering::Relaxed);
    0
}

/// Why a copy of `[off, off + len)` is refused, as mlx5's: `EFAULT` outside the allocation,
/// then `EINVAL` for an offset or length that is not a multiple of 4 (the chip's MEMIC is
/// reached in 4-byte words).
fn copy_refused(d: &SnDm, off: u64, len: u64) -> Option<c_int> {
    if !inside(d, off, len) {
        return Some(libc::EFAULT);
    }
    ((off | len) & 3 != 0).then_some(libc::EINVAL)
}

/// `ibv_memcpy_to_dm` (through `dm->memcpy_to_dm`), refused as [`copy_refused`] says.
unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    off: u64,
    host: *const c_void,
    len: usize,
) -> c_int {
    // SAFETY: the program hands back the dm we gave it.
    let d = unsafe { of(dm) };
    if let Some(e) = copy_refused(d, off, len as u64) {
        return e;
    }
    // SAFETY: `len` bytes of the caller's memory into the allocation (bounds checked).
    unsafe { std::ptr::copy(host.cast::<u8>(), d.mem.add(off as usize), len) };
    0
}

/// `ibv_memcpy_from_dm`.
unsafe extern "C" fn memcpy_from_dm(
    host: *mut c_void,
    dm: *mut ibv_dm,
    off: u64,
    len: usize,
) -> c_int {
    // SAFETY: the program hands back the dm we gave it.
    let d = unsafe { of(dm) };
    if let Some(e) = copy_refused(d, off, len as u64) {
        return e;
    }
    // SAFETY: `len` bytes of the allocation (bounds checked) into the caller's memory.
    unsafe { std::ptr::copy(d.mem.add(off as usize), host.cast::<u8>(), len) };
    0
}

/// `verbs_context.reg_dm_mr`: a zero-based region (`IBV_ACCESS_ZERO_BASED` required, as
/// mlx5 requires it) over `[off, off + len)` of the allocation: work requests address it
/// from 0.
///
/// # Safety
/// `pd` and `dm` are the program's live objects.
pub unsafe extern "C" fn vctx_reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    off: u64,
    len: usize,
    access: c_uint,
) -> *mut ibv_mr {
    let plain = access & !IBV_ACCESS_ZERO_BASED;
    if pd.is_null()
        || dm.is_null()
        || access & IBV_ACCESS_ZERO_BASED == 0
        || plain & !crate::verbs::objects::ACCESS_SUPPORTED != 0
    {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: per the caller.
    let d = unsafe { of(dm) };
    if !inside(d, off, len as u64) {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: `off` lies inside the allocation (checked).
    let host = unsafe { d.mem.add(off as usize) } as u64;
    // SAFETY: per the caller, a live PD of ours.
    let key = global().reg_mr(0, host, len as u64, plain, unsafe { pd_id(pd) });
    let mr = Box::new(ibv_mr {
        // SAFETY: per the caller.
        context: unsafe { (*pd).context },
        pd,
        addr: null_mut(),
        length: len,
        handle: key,
        lkey: key,
        rkey: key,
    });
    Box::into_raw(mr)
}
