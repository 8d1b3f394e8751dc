//! Original-pointer slots for the swapped function pointers.
//!
//! Objects handed out by the same provider carry the same set of functions (a provider has a
//! handful of tables: one per context kind, QP type, CQ flavour). Each distinct set gets a
//! slot, and each slot has its own copy of every hook, monomorphised over the slot index
//! (`post_send::<S>`): the hook finds its original with one load at a constant address — no
//! lookup, no lock — and objects need no per-object registry. [`SLOTS`] sets per kind are
//! plenty for contexts, QPs and WQs ([`CQ_EX_SLOTS`] for extended CQs); an object whose set
//! does not fit stays uninstrumented and is reported on stderr at the default diagnostics
//! level — it is never broken.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sink::spin::SpinLock;

/// Distinct function sets per object kind.
pub const SLOTS: usize = 8;

/// Distinct extended-CQ sets: one per provider CQ flavour *and* set of requested `wc_flags`
/// (the getters a CQ may be read through depend on them), so many more than [`SLOTS`].
pub const CQ_EX_SLOTS: usize = 64;

/// `[f::<n> as T, …]` for the listed slot numbers: the per-slot copies of a hook.
macro_rules! slot_fns {
    ($f:ident as $t:ty; $($n:literal)*) => {
        [$($f::<$n> as $t),*]
    };
}
pub(crate) use slot_fns;

/// `[f::<0> as T, …, f::<7> as T]`: the per-slot copies of a hook ([`SLOTS`]).
macro_rules! variants {
    ($f:ident as $t:ty) => {
        $crate::swap::slots::slot_fns!($f as $t; 0 1 2 3 4 5 6 7)
    };
}
pub(crate) use variants;

/// [`variants`] for [`CQ_EX_SLOTS`] slots.
macro_rules! variants64 {
    ($f:ident as $t:ty) => {
        $crate::swap::slots::slot_fns!($f as $t;
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
            61 62 63)
    };
}
pub(crate) use variants64;

/// `N` slots of `W` words (original function addresses, or other identity words).
pub struct Slots<const W: usize, const N: usize = SLOTS> {
    lock: SpinLock,
    used: AtomicUsize,
    words: [[AtomicUsize; W]; N],
}

impl<const W: usize, const N: usize> Default for Slots<W, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize, const N: usize> Slots<W, N> {
    pub const fn new() -> Self {
        Slots {
            lock: SpinLock::new(),
            used: AtomicUsize::new(0),
            words: [const { [const { AtomicUsize::new(0) }; W] }; N],
        }
    }

    /// The slot holding exactly `words`, claiming a free one if needed; `None` when full.
    pub fn claim(&self, words: &[usize; W]) -> Option<usize> {
        let _g = self.lock.lock();
        let used = self.used.load(Ordering::Acquire);
        if let Some(s) = (0..used).find(|&s| (0..W).all(|i| self.word(s, i) == words[i])) {
            return Some(s);
        }
        if used == N {
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
