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

/// [`variants`] for [`CQ_EX_SLOTS`] slots.
macro_rules! variants64 {
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
            $f::<8> as $t,
            $f::<9> as $t,
            $f::<10> as $t,
            $f::<11> as $t,
            $f::<12> as $t,
            $f::<13> as $t,
            $f::<14> as $t,
            $f::<15> as $t,
            $f::<16> as $t,
            $f::<17> as $t,
            $f::<18> as $t,
            $f::<19> as $t,
            $f::<20> as $t,
            $f::<21> as $t,
            $f::<22> as $t,
            $f::<23> as $t,
            $f::<24> as $t,
            $f::<25> as $t,
            $f::<26> as $t,
            $f::<27> as $t,
            $f::<28> as $t,
            $f::<29> as $t,
            $f::<30> as $t,
            $f::<31> as $t,
            $f::<32> as $t,
            $f::<33> as $t,
            $f::<34> as $t,
            $f::<35> as $t,
            $f::<36> as $t,
            $f::<37> as $t,
            $f::<38> as $t,
            $f::<39> as $t,
            $f::<40> as $t,
            $f::<41> as $t,
            $f::<42> as $t,
            $f::<43> as $t,
            $f::<44> as $t,
            $f::<45> as $t,
            $f::<46> as $t,
            $f::<47> as $t,
            $f::<48> as $t,
            $f::<49> as $t,
            $f::<50> as $t,
            $f::<51> as $t,
            $f::<52> as $t,
            $f::<53> as $t,
            $f::<54> as $t,
            $f::<55> as $t,
            $f::<56> as $t,
            $f::<57> as $t,
            $f::<58> as $t,
            $f::<59> as $t,
            $f::<60> as $t,
            $f::<61> as $t,
            $f::<62> as $t,
            $f::<63> as $t,
        ]
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
