//! Original-pointer slots for the swapped function pointers.
//!
//! Objects handed out by the same provider carry the same set of functions (a provider has a
//! handful of tables: one per context kind, QP type, CQ flavour). Each distinct set gets a
//! slot, and each slot has its own copy of every hook, monomorphised over the slot index
//! (`post_send::<S>`): the hook finds its original with one load at a constant address — no
//! lookup, no lock — and objects need no per-object registry. [`SLOTS`] sets per kind are
//! plenty; an object whose set does not fit stays uninstrumented (and is reported at
//! `SIGMATRACE_DIAG=info`), it is never broken.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sink::spin::SpinLock;

/// Distinct function sets per object kind.
pub const SLOTS: usize = 8;

/// `[f::<0> as T, …, f::<7> as T]`: the per-slot copies of a hook.
macro_rules! variants {
    ($f:ident as $t:ty) => {
        [
            $f::<0> as $t,
            $f::<1> as $t,
            $f::<2> as $t,
            $f::<3> as $t,
            $f::<4> as $t,
            $f::<5> as $t,
            $f::<6> as $t,
            $f::<7> as $t,
        ]
    };
}
pub(crate) use variants;

/// [`SLOTS`] slots of `W` words (original function addresses, or other identity words).
pub struct Slots<const W: usize> {
    lock: SpinLock,
    used: AtomicUsize,
    words: [[AtomicUsize; W]; SLOTS],
}

impl<const W: usize> Default for Slots<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize> Slots<W> {
    pub const fn new() -> Self {
        Slots {
            lock: SpinLock::new(),
            used: AtomicUsize::new(0),
            words: [const { [const { AtomicUsize::new(0) }; W] }; SLOTS],
        }
    }

    /// The slot holding exactly `words`, claiming a free one if needed; `None` when full.
    pub fn claim(&self, words: &[usize; W]) -> Option<usize> {
        let _g = self.lock.lock();
        let used = self.used.load(Ordering::Acquire);
        if let Some(s) = (0..used).find(|&s| (0..W).all(|i| self.word(s, i) == words[i])) {
            return Some(s);
        }
        if used == SLOTS {
            return None;
        }
        for (slot, w) in self.words[used].iter().zip(words) {
            slot.store(*w, Ordering::Relaxed);
        }
        self.used.store(used + 1, Ordering::Release);
        Some(used)
    }

    /// Word `i` of slot `s`.
    #[inline(always)]
    pub fn word(&self, s: usize, i: usize) -> usize {
        self.words[s][i].load(Ordering::Acquire)
    }

    /// Slots in use.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_sets_share_a_slot_and_slots_run_out() {
        let s: Slots<2> = Slots::new();
        assert_eq!(s.claim(&[1, 2]), Some(0));
        assert_eq!(s.claim(&[1, 3]), Some(1));
        assert_eq!(s.claim(&[1, 2]), Some(0));
        assert_eq!((s.word(1, 0), s.word(1, 1)), (1, 3));
        for i in 2..SLOTS {
            assert_eq!(s.claim(&[9, i]), Some(i));
        }
        assert_eq!(s.claim(&[7, 7]), None);
        assert_eq!(
            s.claim(&[1, 3]),
            Some(1),
            "known sets still resolve when full"
        );
        assert_eq!(s.used(), SLOTS);
    }
}
