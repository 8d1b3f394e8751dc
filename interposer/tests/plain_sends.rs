//! The message-rate path for single-WR RDMA writes and sends (decoded straight into the
//! compact record) records exactly what the program posted, including the WRs whose fields
//! the compact record cannot hold (64-bit remote address, a send flag above bit 4: written
//! as full records by the general path), and their completions.

mod common;
use common::*;

use std::time::Duration;

const WR_RDMA_WRITE: u8 = 0;
const WR_SEND: u8 = 2;
const SIGNALED: u32 = 2;
const INLINE: u32 = 8;

#[test]
fn single_writes_and_sends_are_recorded_exactly_whether_or_not_they_fit_the_compact_form() {
    let dir = tempfile::tempdir().unwrap();
    let argv = vec![cprog("fake_verbs").display().to_string(), "plain".into()];
    let out = Cmd::new(&argv)
        .traced(dir.path())
        .run(Duration::from_secs(60));
    assert!(out.ok(), "{out:?}");
    let t = only_log(dir.path());
    let sends: Vec<_> = t
        .sends()
        .iter()
        .map(|s| {
            (
                s.wr_id,
                s.opcode,
                s.remote_addr,
                s.rkey,
                s.hdr.aux,
                s.bytes,
                s.num_sge,
                s.imm,
                s.compare_add,
            )
        })
        .collect();
    assert_eq!(
        sends,
        vec![
            (
                1,
                WR_RDMA_WRITE,
                0xfedc_ba98_7654_3210,
                0x33,
                SIGNALED,
                8,
                1,
                0,
                0
            ),
            (
                2,
                WR_RDMA_WRITE,
                0x1000,
                0x33,
                SIGNALED | 1 << 6,
                8,
                1,
                0,
                0
            ),
            (3, WR_RDMA_WRITE, 0x1000, 0x33, SIGNALED, 8, 1, 0, 0),
            (4, WR_SEND, 0, 0, SIGNALED | INLINE, 8, 1, 0, 0),
        ]
    );
    let qpn = t.sends()[0].qpn;
    assert!(t.sends().iter().all(|s| s.qpn == qpn && s.ts > 0));
    let wcs: Vec<_> = t
        .wcs()
        .iter()
        .map(|w| (w.wr_id, w.byte_len, w.qpn))
        .collect();
    assert_eq!(
        wcs,
        vec![(1, 8, qpn), (2, 8, qpn), (3, 8, qpn), (4, 8, qpn)]
    );
}
