//! Panic containment at every FFI boundary.
//!
//! Hook bodies run inside [`run`]: a panic is caught, tracing disables itself with one
//! stderr line, and the hook still returns the real function's result (the real call is
//! always made outside the guarded part, exactly once). The panic hook of this library's copy
//! of std is replaced by a silent one that keeps the message for that line; a Rust program
//! being traced has its own std and its own panic hook, untouched.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::sink;

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the silent panic hook (once, at initialisation).
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info.to_string().replace('\n', " ");
        let _ = LAST_PANIC.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut() {
                *p = Some(msg);
            }
        });
    }));
}

/// Runs a hook body; on panic disables tracing and returns `None`.
#[inline(always)]
pub fn run<R>(what: &'static str, f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(|| {
        inject(what);
        f()
    })) {
        Ok(r) => Some(r),
        Err(_) => {
            panicked(what);
            None
        }
    }
}

/// Like [`run`] for control-path hooks: also performs lazy initialisation and skips the body
/// when tracing is off.
#[inline]
pub fn control<R>(what: &'static str, f: impl FnOnce() -> R) -> Option<R> {
    super::init::ensure();
    if !sink::tracing(sink::cat::ALL) {
        return None;
    }
    run(what, f)
}

#[cold]
fn panicked(what: &str) {
    let msg = LAST_PANIC
        .try_with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.take()))
        .ok()
        .flatten()
        .unwrap_or_else(|| "unknown panic".into());
    sink::disable(&format!("internal error in the {what} hook ({msg})"));
}

/// `SIGMATRACE_DEBUG_PANIC=<hook>|any` makes that hook panic (debug builds only), to test
/// the containment above.
#[inline(always)]
fn inject(what: &str) {
    #[cfg(debug_assertions)]
    if let Some(target) = super::config::get().and_then(|c| c.debug_panic.as_deref()) {
        if target == what || target == "any" {
            panic!("injected by SIGMATRACE_DEBUG_PANIC={target}");
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = what;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_caught_and_reported() {
        install_panic_hook();
        assert_eq!(run("test_ok", || 5), Some(5));
        let r: Option<u32> = run("test_panic", || panic!("boom"));
        assert_eq!(r, None);
        assert!(sink::is_disabled());
    }
}
