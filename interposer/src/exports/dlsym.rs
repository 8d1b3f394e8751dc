//! `dlsym` / `dlvsym` interposition: NCCL and NVSHMEM `dlopen` libibverbs (often
//! `RTLD_LOCAL`) and resolve verbs with `dlvsym(handle, name, "IBVERBS_1.1")`; those lookups
//! search the handle's own tree and would bypass the preloaded shims. Any name of the hook
//! table looked up in a real handle, with the table's version (or none), is answered with our
//! shim, whose real function becomes the definition the lookup found.
//!
//! Everything else is forwarded with the caller's identity intact: on x86_64 the exported
//! entry points are naked trampolines that ask [`decide_dlsym`]/[`decide_dlvsym`] first and
//! otherwise *tail-jump* to libc's function with the original return address, so
//! `RTLD_NEXT` and `RTLD_DEFAULT` keep meaning "relative to the caller" (a plain wrapper would
//! make them relative to libsigmatrace and break other interposers).

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;

use super::table;
use crate::ffi::dl::{self, REAL_DLSYM, REAL_DLVSYM};
use crate::runtime::guard;
use crate::sink;

/// Decision for one lookup: 0 = forward to libc unchanged, 1 = return `*out`.
///
/// # Safety
/// `name` null or NUL-terminated, `out` writable.
unsafe extern "C" fn decide_dlsym(
    handle: *mut c_void,
    name: *const c_char,
    out: *mut *mut c_void,
) -> u32 {
    // SAFETY: per caller.
    unsafe { decide(handle, name, std::ptr::null(), out, false) }
}

/// As [`decide_dlsym`], for `dlvsym`.
///
/// # Safety
/// As [`decide_dlsym`]; `version` null or NUL-terminated.
unsafe extern "C" fn decide_dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
    out: *mut *mut c_void,
) -> u32 {
    // SAFETY: per caller.
    unsafe { decide(handle, name, version, out, true) }
}

unsafe fn decide(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
    out: *mut *mut c_void,
    versioned: bool,
) -> u32 {
    let real = if versioned { &REAL_DLVSYM } else { &REAL_DLSYM };
    if real.load(Ordering::Acquire) == 0 && !dl::init() {
        // Without libc's function there is nothing to forward to: fail the lookup.
        // SAFETY: out is the trampoline's stack slot.
        unsafe { *out = std::ptr::null_mut() };
        return 1;
    }
    if handle == libc::RTLD_NEXT || name.is_null() || !sink::tracing(crate::sink::cat::ALL) {
        return 0;
    }
    // SAFETY: name (and version if given) are NUL-terminated strings of the caller.
    let (name, version) = unsafe {
        (
            CStr::from_ptr(name),
            (!version.is_null()).then(|| CStr::from_ptr(version)),
        )
    };
    if handle == libc::RTLD_DEFAULT {
        // SAFETY: out is the trampoline's stack slot.
        return unsafe { hide_unloaded(name, version, out) };
    }
    let redirect = guard::run("dlsym", || {
        let entry = table::find(name.to_bytes(), version.map(CStr::to_bytes))?;
        // SAFETY: the program passed this handle to dlsym/dlvsym, so it is open.
        let found = unsafe {
            match version {
                Some(v) => dl::dlvsym(handle, name, v),
                None => dl::dlsym(handle, name),
            }
        };
        if found.is_null() {
            return None;
        }
        (found as usize == entry.shim() || entry.adopt(found as usize)).then(|| entry.shim())
    });
    match redirect.flatten() {
        Some(shim) => {
            // SAFETY: out is the trampoline's stack slot.
            unsafe { *out = shim as *mut c_void };
            1
        }
        None => 0,
    }
}

/// `dlsym(RTLD_DEFAULT, name)` of a table name whose library is not loaded: our exports are
/// global, so a probe such as `dlsym(RTLD_DEFAULT, "mlx5dv_create_qp")` would otherwise find
/// them. Answers "not found" (leaving the error a failed lookup leaves); otherwise forwards.
///
/// # Safety
/// `out` writable.
unsafe fn hide_unloaded(name: &CStr, version: Option<&CStr>, out: *mut *mut c_void) -> u32 {
    let hidden = guard::run("dlsym", || {
        table::find(name.to_bytes(), version.map(CStr::to_bytes))
            .is_some_and(|e| e.real::<usize>().is_none())
    });
    if hidden != Some(true) {
        return 0;
    }
    let mut missing = name.to_bytes().to_vec();
    missing.extend_from_slice(b"@sigmatrace-not-loaded\0");
    if let Ok(m) = CStr::from_bytes_with_nul(&missing) {
        // SAFETY: pseudo-handle lookup of a name that does not exist (sets dlerror).
        unsafe { dl::dlsym(libc::RTLD_DEFAULT, m) };
    }
    // SAFETY: per contract.
    unsafe { *out = std::ptr::null_mut() };
    1
}

#[cfg(target_arch = "x86_64")]
mod entry {
    use super::*;

    /// `dlsym`: asks [`decide_dlsym`], else tail-jumps to libc's `dlsym`.
    ///
    /// # Safety
    /// Same contract as libc's `dlsym`.
    #[unsafe(naked)]
    #[cfg_attr(not(test), no_mangle)]
    pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
        // Entry rsp ≡ 8 (mod 16); two pushes and 24 bytes (the out slot at [rsp]) realign it.
        core::arch::naked_asm!(
            "push rdi",
            "push rsi",
            "sub rsp, 24",
            "mov rdx, rsp",
            "call {decide}",
            "mov r11, qword ptr [rsp]",
            "add rsp, 24",
            "pop rsi",
            "pop rdi",
            "test eax, eax",
            "jnz 2f",
            "jmp qword ptr [rip + {real}]",
            "2:",
            "mov rax, r11",
            "ret",
            decide = sym decide_dlsym,
            real = sym REAL_DLSYM,
        )
    }

    /// `dlvsym`: asks [`decide_dlvsym`], else tail-jumps to libc's `dlvsym`.
    ///
    /// # Safety
    /// Same contract as libc's `dlvsym`.
    #[unsafe(naked)]
    #[cfg_attr(not(test), no_mangle)]
    pub unsafe extern "C" fn dlvsym(
        handle: *mut c_void,
        name: *const c_char,
        version: *const c_char,
    ) -> *mut c_void {
        // Three pushes and 16 bytes (out slot at [rsp]) keep rsp 16-byte aligned at the call.
        core::arch::naked_asm!(
            "push rdi",
            "push rsi",
            "push rdx",
            "sub rsp, 16",
            "mov rcx, rsp",
            "call {decide}",
            "mov r11, qword ptr [rsp]",
            "add rsp, 16",
            "pop rdx",
            "pop rsi",
            "pop rdi",
            "test eax, eax",
            "jnz 2f",
            "jmp qword ptr [rip + {real}]",
            "2:",
            "mov rax, r11",
            "ret",
            decide = sym decide_dlvsym,
            real = sym REAL_DLVSYM,
        )
    }
}

/// Other architectures: plain wrappers (the caller-relative meaning of `RTLD_NEXT` is lost).
#[cfg(not(target_arch = "x86_64"))]
mod entry {
    use super::*;

    /// `dlsym`.
    ///
    /// # Safety
    /// Same contract as libc's `dlsym`.
    #[cfg_attr(not(test), no_mangle)]
    pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
        let mut out = std::ptr::null_mut();
        // SAFETY: per contract.
        if unsafe { decide_dlsym(handle, name, &mut out) } == 1 {
            return out;
        }
        // SAFETY: libc's dlsym, known after decide.
        unsafe {
            std::mem::transmute::<
                usize,
                unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void,
            >(REAL_DLSYM.load(Ordering::Acquire))(handle, name)
        }
    }

    /// `dlvsym`.
    ///
    /// # Safety
    /// Same contract as libc's `dlvsym`.
    #[cfg_attr(not(test), no_mangle)]
    pub unsafe extern "C" fn dlvsym(
        handle: *mut c_void,
        name: *const c_char,
        version: *const c_char,
    ) -> *mut c_void {
        let mut out = std::ptr::null_mut();
        // SAFETY: per contract.
        if unsafe { decide_dlvsym(handle, name, version, &mut out) } == 1 {
            return out;
        }
        // SAFETY: libc's dlvsym, known after decide.
        unsafe {
            std::mem::transmute::<
                usize,
                unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void,
            >(REAL_DLVSYM.load(Ordering::Acquire))(handle, name, version)
        }
    }
}

pub use entry::{dlsym, dlvsym};
