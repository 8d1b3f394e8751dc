//! A row of the hook table: an exported shim and where its real function is (resolved lazily,
//! or adopted from a `dlsym`/`dlvsym`/`cuGetProcAddress` answer), with the alternative
//! wrappers of CUDA entry points.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ffi::{as_fn, dl};

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
    /// For entry points handed out by `cuGetProcAddress`: wrappers for other real addresses.
    alts: Option<&'static AltReals>,
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
            alts: None,
        }
    }

    /// The same entry with alternative wrappers (CUDA entry points).
    pub const fn with_alts(mut self, alts: &'static AltReals) -> Entry {
        self.alts = Some(alts);
        self
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

impl Entry {
    /// A wrapper for `real`, an address a driver handed out for this entry point (e.g. from
    /// `cuGetProcAddress`): our shim when `real` is the entry's own real function (or already
    /// our shim), else an alternative wrapper bound to `real`. `None` when every alternative
    /// is taken (the caller then keeps the unwrapped address: untraced, never broken).
    pub fn wrap(&self, real: usize) -> Option<usize> {
        if real == 0 {
            return None;
        }
        if self.is_wrapper(real) {
            return Some(real);
        }
        if self.real::<usize>() == Some(real) || self.adopt(real) {
            return Some(self.shim());
        }
        self.alts?.wrap(real)
    }

    /// Whether `addr` is this entry's shim or one of its alternative wrappers.
    pub fn is_wrapper(&self, addr: usize) -> bool {
        addr == self.shim()
            || self
                .alts
                .is_some_and(|a| a.shims.iter().any(|s| *s as usize == addr))
    }
}

/// Alternative wrappers of one entry point: copies of its shim, each calling its own real
/// address. The CUDA driver may hand out several implementations under one name (per CUDA
/// version, per-thread default stream); each distinct address gets its own copy.
pub struct AltReals {
    reals: [AtomicUsize; ALT_WRAPPERS],
    shims: [*const (); ALT_WRAPPERS],
}

/// Alternative wrappers per entry point.
pub const ALT_WRAPPERS: usize = 4;

// SAFETY: `shims` are function addresses (immutable code); `reals` are atomics.
unsafe impl Sync for AltReals {}

impl AltReals {
    pub const fn new(shims: [*const (); ALT_WRAPPERS]) -> AltReals {
        AltReals {
            reals: [const { AtomicUsize::new(0) }; ALT_WRAPPERS],
            shims,
        }
    }

    /// The real function of alternative `i`. `F` must be the entry's C prototype.
    #[inline(always)]
    pub fn real<F: Copy>(&self, i: usize) -> Option<F> {
        let p = self.reals[i].load(Ordering::Acquire);
        // SAFETY: p was bound by `wrap` to an address the driver handed out for this entry
        // point, whose prototype is F.
        (p != 0).then(|| unsafe { as_fn::<F>(p) })
    }

    /// The wrapper bound to `real`, binding a free alternative if needed.
    fn wrap(&self, real: usize) -> Option<usize> {
        for (slot, shim) in self.reals.iter().zip(self.shims) {
            match slot.compare_exchange(0, real, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(shim as usize),
                Err(cur) if cur == real => return Some(shim as usize),
                Err(_) => continue,
            }
        }
        None
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
