//! Watchers read memory the traced program controls: a ring of arbitrary bytes must never
//! panic a watcher (the decoders' own robustness tests live in the mlx5 crate).

use proptest::prelude::*;
use sigmatrace_observe::sim::SimSendQueue;
use sigmatrace_observe::SendWatcher;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn watcher_survives_garbage_rings(garbage in proptest::collection::vec(any::<u8>(), 64 * 16)) {
        // A ring full of garbage published by one doorbell: the watcher never panics and
        // accounts for every WQEBB it was told about (observed or lost).
        let mut q = SimSendQueue::new(1, 16);
        let mut w = SendWatcher::new(q.desc(), 0, Some(0), &q.memory()).unwrap();
        for k in 0..16 {
            let chunk = &garbage[k * 64..(k + 1) * 64];
            // Write through the simulation's ring by posting raw 64-byte "WQEs".
            let mut c = chunk.to_vec();
            c[7] = (c[7] & !0x3f) | 4; // ds = 4 keeps write_wqe at one WQEBB
            q.write_wqe(&c);
        }
        q.ring_doorbell();
        let mut seen_bbs = 0u64;
        let _ = w.poll(&q.memory(), 0, &mut |o| if let sigmatrace_observe::Observation::Wqe(_, d) = o { seen_bbs += d.wqebbs as u64 });
        prop_assert_eq!(seen_bbs + w.stats.wqebbs_lost, 16);
    }
}
