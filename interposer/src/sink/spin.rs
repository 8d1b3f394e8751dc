//! A minimal spin lock for the rare synchronised steps (creating the log, claiming slots).
//!
//! Not `std::sync::Mutex` because a fork child must be able to reset it: if another thread
//! of the parent held it at fork time, that thread does not exist in the child.

use std::sync::atomic::{AtomicBool, Ordering};

/// A test-and-test-and-set lock that yields the CPU while contended.
pub struct SpinLock {
    held: AtomicBool,
}

/// Releases the lock when dropped.
pub struct SpinGuard<'a> {
    lock: &'a SpinLock,
}

impl SpinLock {
    pub const fn new() -> Self {
        SpinLock {
            held: AtomicBool::new(false),
        }
    }

    /// Acquires the lock.
    pub fn lock(&self) -> SpinGuard<'_> {
        let mut spins = 0u32;
        loop {
            if !self.held.load(Ordering::Relaxed)
                && self
                    .held
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return SpinGuard { lock: self };
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Forces the lock free. Only for the fork child, where no other thread exists.
    pub fn reset_in_child(&self) {
        self.held.store(false, Ordering::Release);
    }
}

impl Default for SpinLock {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.lock.held.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn excludes_concurrent_holders() {
        static LOCK: SpinLock = SpinLock::new();
        static INSIDE: AtomicU64 = AtomicU64::new(0);
        static TOTAL: AtomicU64 = AtomicU64::new(0);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..2000 {
                        let _g = LOCK.lock();
                        assert_eq!(INSIDE.fetch_add(1, Ordering::SeqCst), 0);
                        TOTAL.fetch_add(1, Ordering::Relaxed);
                        INSIDE.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(TOTAL.load(Ordering::Relaxed), 8000);
    }

    #[test]
    fn reset_frees_a_held_lock() {
        let lock = SpinLock::new();
        let g = lock.lock();
        std::mem::forget(g);
        lock.reset_in_child();
        let _g = lock.lock();
    }
}
