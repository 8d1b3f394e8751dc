//! Foreign layouts and loader access: the rdma-core bindings, the layout checks the hooks rely
//! on, atomic access to swappable function-pointer fields, the real `dlsym`/`dlvsym` and the
//! lookup of real functions. Used by the C-facing layers (`exports`, `swap`, `decode`,
//! `runtime`); never by `record` or `sink`.

pub mod bindings;
pub mod dl;
pub mod elf;

use std::sync::atomic::{AtomicUsize, Ordering};

pub use bindings::*;

/// The `verbs_context` around `ctx` when the provider uses the extended layout
/// (`abi_compat == UINTPTR_MAX`, as `verbs_get_ctx` checks).
///
/// # Safety
/// `ctx` must point to a live `ibv_context`.
pub unsafe fn verbs_context_of(ctx: *mut ibv_context) -> Option<*mut verbs_context> {
    // SAFETY: the caller guarantees ctx is a live ibv_context.
    if unsafe { (*ctx).abi_compat } as usize != usize::MAX {
        return None;
    }
    let off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: abi_compat says ctx is the last member of a verbs_context.
    Some(unsafe { (ctx as *mut u8).sub(off) } as *mut verbs_context)
}

/// Whether the provider's `verbs_context` is large enough to hold the member at `offset`
/// (the `sz` test of `verbs_get_ctx_op`).
///
/// # Safety
/// `vctx` must come from [`verbs_context_of`] on a live context.
pub unsafe fn verbs_context_has(vctx: *mut verbs_context, offset: usize) -> bool {
    // SAFETY: sz is always present (it precedes the embedded ibv_context).
    let sz = unsafe { (*vctx).sz };
    sz >= std::mem::size_of::<verbs_context>() - offset
}

/// Reads a function-pointer field atomically (it may be swapped concurrently by us).
///
/// # Safety
/// `field` must point to a live, aligned, pointer-sized field.
#[inline(always)]
pub unsafe fn load_ptr<T>(field: *const T) -> usize {
    const { assert!(std::mem::size_of::<T>() == std::mem::size_of::<usize>()) };
    // SAFETY: pointer-sized, aligned, live (caller); AtomicUsize has the same layout.
    unsafe { (*(field as *const AtomicUsize)).load(Ordering::Acquire) }
}

/// Writes a function-pointer field atomically (readers see the old or the new pointer).
///
/// # Safety
/// `field` must point to a live, aligned, writable pointer-sized field, and `value` must be
/// a function with the field's signature.
#[inline(always)]
pub unsafe fn store_ptr<T>(field: *mut T, value: usize) {
    const { assert!(std::mem::size_of::<T>() == std::mem::size_of::<usize>()) };
    // SAFETY: as in load_ptr, plus writable (caller).
    unsafe { (*(field as *const AtomicUsize)).store(value, Ordering::Release) }
}

/// Reinterprets a code address as a function pointer of type `F`.
///
/// # Safety
/// `addr` must be a function whose prototype is `F`.
#[inline(always)]
pub unsafe fn as_fn<F: Copy>(addr: usize) -> F {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
    // SAFETY: F is pointer-sized (checked above) and the caller vouches for the prototype.
    unsafe { std::mem::transmute_copy::<usize, F>(&addr) }
}

// The layouts the hooks rely on (verbs-abi.md, x86_64, rdma-core v44).
#[cfg(target_arch = "x86_64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ibv_context>() == 328);
    assert!(offset_of!(ibv_context, ops) == 8);
    assert!(offset_of!(ibv_context_ops, poll_cq) == 88);
    assert!(offset_of!(ibv_context_ops, post_send) == 200);
    assert!(offset_of!(ibv_context_ops, post_recv) == 208);
    assert!(offset_of!(ibv_context_ops, post_srq_recv) == 160);
    assert!(size_of::<verbs_context>() == 648);
    assert!(offset_of!(verbs_context, context) == 320);
    assert!(offset_of!(verbs_context, create_qp_ex) == 264);
    assert!(offset_of!(verbs_context, create_cq_ex) == 200);
    assert!(offset_of!(ibv_qp_ex, wr_id) == 168);
    assert!(offset_of!(ibv_qp_ex, wr_flags) == 176);
    assert!(offset_of!(ibv_cq_ex, status) == 132);
    assert!(offset_of!(ibv_cq_ex, wr_id) == 136);
    assert!(offset_of!(ibv_cq_ex, start_poll) == 144);
};
