//! The interposer's own CUDA driver calls (device poller, kernel timing) run *internal*: the
//! CUDA hooks reached from them record nothing and `cuGetProcAddress` hands out real
//! addresses, so the tracer never traces or wraps itself.

use std::cell::Cell;

thread_local! {
    static INTERNAL: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f` as the interposer's own CUDA work.
pub fn internal<R>(f: impl FnOnce() -> R) -> R {
    INTERNAL.with(|c| c.set(c.get() + 1));
    let r = f();
    INTERNAL.with(|c| c.set(c.get() - 1));
    r
}

/// Whether this thread is inside [`internal`].
pub fn is_internal() -> bool {
    INTERNAL.try_with(|c| c.get() != 0).unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_scopes_nest() {
        assert!(!is_internal());
        internal(|| {
            assert!(is_internal());
            internal(|| assert!(is_internal()));
            assert!(is_internal());
        });
        assert!(!is_internal());
    }
}
