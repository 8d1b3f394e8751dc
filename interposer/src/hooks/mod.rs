//! The C side: exported shims (generated from the one table in [`table`]), the pointers
//! swapped on provider objects ([`ctx`], [`qp_ex`], [`cq_ex`], [`mlx5`]), `dlsym`/`dlvsym`
//! ([`dlsym`]), process integration ([`init`]) and the public C API ([`api`]).

pub mod api;
pub mod control;
pub mod cq_ex;
pub mod ctx;
pub mod datapath;
pub mod dlsym;
pub mod guard;
pub mod init;
pub mod mlx5;
pub mod qp_ex;
pub mod slots;
pub mod table;

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ffi::dl;

/// The library a hooked symbol belongs to (where its real definition is looked up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    Ibverbs,
    Mlx5,
    Cuda,
}

impl Lib {
    /// The soname the real definition comes from.
    pub fn soname(self) -> &'static CStr {
        match self {
            Lib::Ibverbs => c"libibverbs.so.1",
            Lib::Mlx5 => c"libmlx5.so.1",
            Lib::Cuda => c"libcuda.so.1",
        }
    }
}

/// One row of the hook table: the exported shim and where its real function is.
pub struct Entry {
    /// NUL-terminated symbol name.
    name: &'static str,
    /// NUL-terminated symbol version ("\0" = unversioned).
    version: &'static str,
    pub lib: Lib,
    /// Address of our exported shim.
    shim: *const (),
    /// The real function (0 = not resolved yet).
    real: AtomicUsize,
}

// SAFETY: `shim` is the address of a function (immutable code); everything else is immutable
// or atomic.
unsafe impl Sync for Entry {}

impl Entry {
    pub const fn new(
        name: &'static str,
        version: &'static str,
        lib: Lib,
        shim: *const (),
    ) -> Entry {
        Entry {
            name,
            version,
            lib,
            shim,
            real: AtomicUsize::new(0),
        }
    }

    /// The symbol name.
    pub fn name(&self) -> &'static CStr {
        CStr::from_bytes_with_nul(self.name.as_bytes()).unwrap_or(c"?")
    }

    /// The symbol version, if the symbol is versioned.
    pub fn version(&self) -> Option<&'static CStr> {
        CStr::from_bytes_with_nul(self.version.as_bytes())
            .ok()
            .filter(|v| !v.is_empty())
    }

    /// Address of the exported shim.
    pub fn shim(&self) -> usize {
        self.shim as usize
    }

    /// The real function, resolved on first use. `F` must be the symbol's C prototype.
    #[inline(always)]
    pub fn real<F: Copy>(&self) -> Option<F> {
        let mut p = self.real.load(Ordering::Acquire);
        if p == 0 {
            p = self.resolve();
            if p == 0 {
                return None;
            }
        }
        // SAFETY: p is the address of the real definition of this symbol, whose prototype the
        // table declares as F (a function pointer type, pointer-sized).
        Some(unsafe { as_fn::<F>(p) })
    }

    #[cold]
    fn resolve(&self) -> usize {
        let found = dl::resolve_next(self.name(), self.version(), self.lib.soname());
        if found != 0 && found != self.shim() {
            self.adopt(found);
        }
        self.real.load(Ordering::Acquire)
    }

    /// Records `real` as this entry's real function if none is known yet. Returns whether the
    /// entry's real function is now `real` (a lookup returning another definition of the same
    /// name, e.g. from a second library, is then not redirected).
    pub fn adopt(&self, real: usize) -> bool {
        if real == 0 || real == self.shim() {
            return false;
        }
        match self
            .real
            .compare_exchange(0, real, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(cur) => cur == real,
        }
    }
}

/// What a shim returns when the real function cannot be found (never expected: the program
/// called a function of a library it has loaded).
pub trait Fallback {
    fn fallback() -> Self;
}

impl<T> Fallback for *mut T {
    fn fallback() -> Self {
        set_errno(libc::ENOSYS);
        std::ptr::null_mut()
    }
}

impl Fallback for c_int {
    fn fallback() -> Self {
        set_errno(libc::ENOSYS);
        -1
    }
}

impl Fallback for () {
    fn fallback() -> Self {}
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
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
