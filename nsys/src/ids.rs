//! Nsight Systems "serialized GlobalId" values (`globalTid`, `globalPid`, `globalVid`).
//!
//! Layout (Nsight's documented global-id packing, checked against the fixtures in fixtures/nsys):
//! bits 0–23 = tid, bits 24–47 = pid, bits 48 and up = VM/host id. A `globalPid` has tid 0.
//! Example from report1: `globalTid` 281761330250412 = 2^48 + 17068·2^24 + 17068
//! → VM 1, pid 17068, tid 17068.

use serde::Serialize;

const FIELD_MASK: i64 = 0xFF_FFFF;

/// A decoded `globalTid` / `globalPid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct GlobalId(pub i64);

impl GlobalId {
    /// Process id: `(globalTid >> 24) & 0xFFFFFF`.
    pub fn pid(self) -> u32 {
        ((self.0 >> 24) & FIELD_MASK) as u32
    }

    /// Thread id: `globalTid & 0xFFFFFF` (0 for a `globalPid`).
    pub fn tid(self) -> u32 {
        (self.0 & FIELD_MASK) as u32
    }

    /// VM/host id: the bits above the pid.
    pub fn vm(self) -> u32 {
        ((self.0 as u64) >> 48) as u32
    }

    /// The `globalPid` of this thread: the tid bits cleared.
    pub fn global_pid(self) -> GlobalId {
        GlobalId(self.0 & !FIELD_MASK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_reference_examples() {
        let pid = GlobalId(281_761_330_233_344);
        assert_eq!((pid.pid(), pid.tid(), pid.vm()), (17068, 0, 1));
        let tid = GlobalId(281_761_330_250_412);
        assert_eq!((tid.pid(), tid.tid(), tid.vm()), (17068, 17068, 1));
        assert_eq!(tid.global_pid(), pid);
        // A worker thread of the same process (report1 "CUPTI worker thread").
        let worker = GlobalId(281_761_330_250_436);
        assert_eq!((worker.pid(), worker.tid()), (17068, 17092));
    }

    #[test]
    fn negative_ids_do_not_panic() {
        let g = GlobalId(-1);
        assert_eq!((g.pid(), g.tid(), g.vm()), (0xFF_FFFF, 0xFF_FFFF, 0xFFFF));
    }
}
