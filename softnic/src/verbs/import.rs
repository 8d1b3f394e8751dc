//! Sharing a device context's objects through its command descriptor (`ibv_import_device`,
//! `ibv_import_pd`, `ibv_import_mr`, `ibv_import_dm` and the `ibv_unimport_*` calls): a
//! program (or another library in it) duplicates a context's `cmd_fd`, opens a context of
//! the same device on it and takes handles of that context's PD, regions and device memory by
//! their numbers. softnic's objects live in the process, so an imported object is a second
//! handle of the same one: an imported PD protects as its original, an imported region has its
//! keys, range and access, imported device memory is the same memory. Unimporting drops the
//! handle; the object stays its owner's.

use crate::ffi::*;
use crate::verbs::ctx::set_errno;
use crate::verbs::objects::{pd_id, SnPd};
use crate::wire::state::global;
use std::ffi::c_int;
use std::ptr::null_mut;
use std::sync::Mutex;

/// The files (device, inode) of this device's contexts' command descriptors.
static CMD_FILES: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

fn file_of(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: fstat of a descriptor into a local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// A new context's command descriptor: a memfd of its own (so that [`sv_ibv_import_device`]
/// recognises it and its duplicates), `/dev/null` if none can be made.
pub fn new_cmd_fd() -> c_int {
    // SAFETY: memfd_create with a static name; the descriptor is the new context's.
    let fd = unsafe { libc::memfd_create(c"softnic-context".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        // SAFETY: open of a static path.
        return unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    }
    if let Some(f) = file_of(fd) {
        CMD_FILES.lock().unwrap_or_else(|e| e.into_inner()).push(f);
    }
    fd
}

/// `ibv_import_device`: a context of this device on `fd`, a duplicate of one of its contexts'
/// command descriptors (`EOPNOTSUPP` for any other descriptor, as for a device whose kernel
/// driver cannot import). The context owns `fd` from now on.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_import_device(fd: c_int) -> *mut ibv_context {
    let known = file_of(fd).is_some_and(|f| {
        CMD_FILES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&f)
    });
    if !known {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    // SAFETY: this device, and a descriptor of one of its contexts.
    unsafe { crate::verbs::ctx::open_context(crate::verbs::ctx::device(), Some(fd)) }
}

/// `ibv_import_pd`: a handle, on `ctx`, of the live PD numbered `handle`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_import_pd(ctx: *mut ibv_context, handle: u32) -> *mut ibv_pd {
    let Some(orig) = crate::verbs::by_number::pd(handle) else {
        set_errno(libc::ENOENT);
        return null_mut();
    };
    Box::into_raw(Box::new(SnPd {
        pd: ibv_pd {
            context: ctx,
            handle,
        },
        // SAFETY: a live PD of ours (registered until deallocated).
        id: unsafe { pd_id(orig) },
        // A second handle: deallocating or unimporting it leaves the PD registered.
        parent: true,
    })) as *mut ibv_pd
}

/// `ibv_unimport_pd`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_unimport_pd(pd: *mut ibv_pd) {
    if !pd.is_null() {
        // SAFETY: a handle from `sv_ibv_import_pd`, dropped once.
        drop(unsafe { Box::from_raw(pd as *mut SnPd) });
    }
}

/// `ibv_import_mr`: a handle, on `pd`, of the live region whose handle is `handle` (its
/// keys; `addr` is not known to the importer: NULL, as the kernel gives it).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr {
    // SAFETY: the caller's PD (null checked).
    let Some(pd_ref) = (unsafe { pd.as_ref() }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    match global().mr(handle) {
        // SAFETY: a softnic PD.
        Some(m) if m.mw == 0 && m.pd == unsafe { pd_id(pd) } => Box::into_raw(Box::new(ibv_mr {
            context: pd_ref.context,
            pd,
            addr: null_mut(),
            length: m.len as usize,
            handle,
            lkey: m.key,
            rkey: m.key,
        })),
        _ => {
            set_errno(libc::ENOENT);
            null_mut()
        }
    }
}

/// `ibv_unimport_mr`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_unimport_mr(mr: *mut ibv_mr) {
    if !mr.is_null() {
        // SAFETY: a handle from `sv_ibv_import_mr`, dropped once.
        drop(unsafe { Box::from_raw(mr) });
    }
}

/// `ibv_import_dm` (`verbs::dm::import`).
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_import_dm(ctx: *mut ibv_context, handle: u32) -> *mut ibv_dm {
    // SAFETY: the caller's context.
    unsafe { crate::verbs::dm::import(ctx, handle) }
}

/// `ibv_unimport_dm`.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_unimport_dm(dm: *mut ibv_dm) {
    // SAFETY: a handle from `sv_ibv_import_dm`.
    unsafe { crate::verbs::dm::unimport(dm) }
}
