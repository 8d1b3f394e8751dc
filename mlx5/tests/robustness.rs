//! The decoders read memory the traced program controls: arbitrary bytes must never panic,
//! and encoder output must decode back to what was encoded.

use proptest::prelude::*;
use sigmatrace_mlx5::wqe::{self, opcode, Segment, Transport, WqeBuilder};
use sigmatrace_mlx5::{cqe, prm};

const TRANSPORTS: [Transport; 6] = [
    Transport::Rc,
    Transport::Uc,
    Transport::Ud,
    Transport::Xrc,
    Transport::Dci,
    Transport::RawPacket,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1100), t in 0usize..6) {
        let _ = wqe::decode(&bytes, TRANSPORTS[t]);
        if bytes.len() >= 64 {
            let _ = cqe::decode(&bytes[..64]);
        }
        let _ = prm::decode_command(&bytes);
        let _ = prm::decode_output(&bytes);
    }

    #[test]
    fn rdma_write_roundtrip(idx in any::<u16>(), qpn in 0u32..(1 << 24), raddr in any::<u64>(), rkey in any::<u32>(),
                            sges in proptest::collection::vec((any::<u64>(), any::<u32>(), 0u32..(1 << 31)), 1..6), flags in any::<u8>()) {
        let mut b = WqeBuilder::new(opcode::RDMA_WRITE, idx, qpn).fm_ce_se(flags).raddr(raddr, rkey);
        for (a, k, n) in &sges {
            b = b.data(*a, *k, *n);
        }
        let mut bytes = b.finish();
        bytes.resize(bytes.len().next_multiple_of(64), 0);
        let w = wqe::decode(&bytes, Transport::Rc).unwrap();
        prop_assert_eq!((w.ctrl.wqe_index, w.ctrl.qpn, w.ctrl.fm_ce_se, w.remote_addr, w.rkey), (idx, qpn, flags, raddr, rkey));
        prop_assert_eq!(w.bytes, sges.iter().map(|s| s.2 as u64).sum::<u64>());
        prop_assert_eq!(w.segments().len(), 1 + sges.len());
        for (seg, (a, k, n)) in w.segments()[1..].iter().zip(&sges) {
            prop_assert_eq!(*seg, Segment::Data { addr: *a, lkey: *k, byte_count: *n });
        }
    }
}
