//! The one fork-aware, leak-once singleton the background components share (the queue
//! discovery state with its host poller, the device-poller manager, kernel timing).
//!
//! Each lives in a leaked box reached through one atomic pointer: made on first use, never
//! freed (a background thread may still hold it at exit), and *forgotten* — not dropped — in
//! a fork child, where the parent's threads do not exist and its locks may be held by one of
//! them; the child makes a fresh one on its own first use.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard};

/// A lazily made, never freed, fork-resettable `T`.
pub struct Singleton<T> {
    ptr: AtomicPtr<T>,
}

impl<T: Send + Sync + 'static> Singleton<T> {
    pub const fn new() -> Self {
        Singleton {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The instance, made by `make` on first use (when threads race, one instance wins and
    /// the others are dropped unused).
    pub fn get_or_init(&self, make: impl FnOnce() -> T) -> &'static T {
        if let Some(t) = self.get() {
            return t;
        }
        let fresh = Box::into_raw(Box::new(make()));
        match self.ptr.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: just leaked; never freed.
            Ok(_) => unsafe { &*fresh },
            // SAFETY: `fresh` was never shared; `cur` is a leaked box, never freed.
            Err(cur) => unsafe {
                drop(Box::from_raw(fresh));
                &*cur
            },
        }
    }

    /// The instance, if one was made (in this process).
    pub fn get(&self) -> Option<&'static T> {
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: the pointer only ever holds leaked boxes, never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Fork child: forget the parent's instance without touching it (leaked).
    pub fn forget_in_child(&self) {
        self.ptr.store(std::ptr::null_mut(), Ordering::Release);
    }
}

impl<T: Send + Sync + 'static> Default for Singleton<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Locks `m`, taking over a lock poisoned by a panic (the state stays usable: every update
/// under these locks is a plain field or map change).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn made_once_and_forgotten_in_a_fork_child() {
        static S: Singleton<AtomicU32> = Singleton::new();
        assert!(S.get().is_none());
        let a = S.get_or_init(|| AtomicU32::new(7));
        a.store(8, Ordering::Relaxed);
        let b = S.get_or_init(|| AtomicU32::new(1));
        assert!(std::ptr::eq(a, b));
        assert_eq!(b.load(Ordering::Relaxed), 8);
        S.forget_in_child();
        assert!(S.get().is_none());
        let c = S.get_or_init(|| AtomicU32::new(1));
        assert_eq!(c.load(Ordering::Relaxed), 1, "a fresh instance");
        assert_eq!(
            a.load(Ordering::Relaxed),
            8,
            "the old one is leaked, still valid"
        );
    }
}
