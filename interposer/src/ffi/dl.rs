//! The real `dlsym` / `dlvsym` (found by [`super::elf`]) and resolution of the functions the
//! hooks forward to.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// libc's `dlsym` (0 until [`init`] found it). The exported `dlsym` shim jumps through it.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
/// libc's `dlvsym`.
pub static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);

/// Finds libc's `dlsym` and `dlvsym`. Idempotent; returns whether both are known.
pub fn init() -> bool {
    if REAL_DLSYM.load(Ordering::Acquire) != 0 && REAL_DLVSYM.load(Ordering::Acquire) != 0 {
        return true;
    }
    let s = super::elf::lookup(c"libc.so.6", c"dlsym").unwrap_or(0);
    let v = super::elf::lookup(c"libc.so.6", c"dlvsym").unwrap_or(0);
    REAL_DLSYM.store(s, Ordering::Release);
    REAL_DLVSYM.store(v, Ordering::Release);
    s != 0 && v != 0
}

/// libc's `dlsym(handle, name)`, called from this library (so `RTLD_NEXT` means "after
/// libsigmatrace"). Null if the real `dlsym` is unknown.
///
/// # Safety
/// `handle` must be a pseudo-handle or a handle from `dlopen` that is still open.
pub unsafe fn dlsym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    let f = REAL_DLSYM.load(Ordering::Acquire);
    if f == 0 && !init() {
        return std::ptr::null_mut();
    }
    let f = REAL_DLSYM.load(Ordering::Acquire);
    // SAFETY: f is libc's dlsym (found by name in libc's symbol table); its arguments are a
    // handle the caller got from the loader (or a pseudo-handle) and a NUL-terminated name.
    unsafe { std::mem::transmute::<usize, DlsymFn>(f)(handle, name.as_ptr()) }
}

/// libc's `dlvsym(handle, name, version)`, called from this library.
///
/// # Safety
/// As [`dlsym`].
pub unsafe fn dlvsym(handle: *mut c_void, name: &CStr, version: &CStr) -> *mut c_void {
    let f = REAL_DLVSYM.load(Ordering::Acquire);
    if f == 0 && !init() {
        return std::ptr::null_mut();
    }
    let f = REAL_DLVSYM.load(Ordering::Acquire);
    // SAFETY: as in `dlsym`, for libc's dlvsym.
    unsafe { std::mem::transmute::<usize, DlvsymFn>(f)(handle, name.as_ptr(), version.as_ptr()) }
}

/// Where the real `name` lives: the next definition after this library (`RTLD_NEXT`, with
/// `version` if given), else in the already loaded `soname` (libraries opened with
/// `RTLD_LOCAL`, as NCCL does). 0 if not found. Never loads anything.
pub fn resolve_next(name: &CStr, version: Option<&CStr>, soname: &CStr) -> usize {
    // SAFETY: RTLD_NEXT is a pseudo-handle.
    let found = unsafe { lookup_in(libc::RTLD_NEXT, name, version) };
    if found != 0 {
        return found;
    }
    // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already loaded.
    let h = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        clear_dlerror();
        return 0;
    }
    // SAFETY: h is open until the dlclose below.
    let found = unsafe { lookup_in(h, name, version) };
    // SAFETY: balances the reference RTLD_NOLOAD took.
    unsafe { libc::dlclose(h) };
    if found == 0 {
        clear_dlerror();
    }
    found
}

/// A function of an already loaded library that the interposer calls itself (not a hook),
/// found with [`resolve_next`] on first use and kept once found.
pub struct NextFn {
    name: &'static CStr,
    version: Option<&'static CStr>,
    soname: &'static CStr,
    addr: AtomicUsize,
}

impl NextFn {
    pub const fn new(
        name: &'static CStr,
        version: Option<&'static CStr>,
        soname: &'static CStr,
    ) -> NextFn {
        NextFn {
            name,
            version,
            soname,
            addr: AtomicUsize::new(0),
        }
    }

    /// The function's address, or 0 when it is not loaded (looked up again next time).
    pub fn get(&self) -> usize {
        let p = self.addr.load(Ordering::Acquire);
        if p != 0 {
            return p;
        }
        let found = resolve_next(self.name, self.version, self.soname);
        self.addr.store(found, Ordering::Release);
        found
    }
}

/// # Safety
/// As [`dlsym`].
unsafe fn lookup_in(handle: *mut c_void, name: &CStr, version: Option<&CStr>) -> usize {
    // SAFETY: handle per caller.
    unsafe {
        if let Some(v) = version {
            let p = dlvsym(handle, name, v);
            if !p.is_null() {
                return p as usize;
            }
        }
        dlsym(handle, name) as usize
    }
}

/// Forgets the error our own failed lookup left (the program's next `dlerror()` must not see
/// it).
fn clear_dlerror() {
    // SAFETY: dlerror has no preconditions; it only resets this thread's error state.
    unsafe { libc::dlerror() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_dl_functions_resolve_libc_symbols() {
        assert!(init());
        // SAFETY: pseudo-handle lookups.
        let (p, v) = unsafe {
            (
                dlsym(libc::RTLD_DEFAULT, c"getpid"),
                dlvsym(libc::RTLD_DEFAULT, c"dlopen", c"GLIBC_2.34"),
            )
        };
        assert_eq!(p as usize, libc::getpid as *const () as usize);
        assert!(!v.is_null());
    }

    #[test]
    fn resolve_next_finds_loaded_libraries_and_nothing_else() {
        // libc is loaded: found via RTLD_NEXT from this test binary.
        assert_ne!(
            resolve_next(c"getpid", Some(c"GLIBC_2.2.5"), c"libc.so.6"),
            0
        );
        // Not loaded: RTLD_NOLOAD refuses, nothing is loaded.
        assert_eq!(
            resolve_next(c"ibv_fake_fn", None, c"libsigmatrace-never.so"),
            0
        );
    }
}
