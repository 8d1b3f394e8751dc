//! Unmodified Debian perftest binaries on softnic under LD_PRELOAD=libsigmatrace.so, server on
//! simulated node 1 and client on node 2. Each runs untraced and traced; exit codes and the
//! shape of the output (digits masked) must match, and the logs must hold exactly the work
//! requests and completions perftest's loops post for the options given (`-n`, `-Q`, its
//! default receive depth), with the right opcodes, sizes, QPs and remote memory.

mod common;
mod pair;
use common::*;
use pair::*;

use sigmatrace_schemas::{LogFile, MrReg, RecordKind};

/// A perftest bandwidth run: `-n iters -Q cq_mod`, WRs of `opcode` carrying `bytes` each,
/// completing with `wc_opcode`.
struct Bw {
    iters: usize,
    cq_mod: usize,
    opcode: u8,
    wc_opcode: u8,
    bytes: u32,
}

/// perftest's bandwidth client (run_iter_bw, one QP, post list 1): `-n` WRs, the one of
/// index i signaled when i % cq_mod == cq_mod - 1 or it is the last; one completion per
/// signaled WR, each written short.
fn perftest_bw(bin: &str, args: &[&str], bw: &Bw) -> (Side, Side, tempfile::TempDir) {
    let (s, c, d) = traced_like_untraced(bin, args);
    check_connection(&s, &c);
    let ct = c.trace.as_ref().unwrap();
    let qpn = ct.qps()[0].qpn;
    let sends = ct.sends();
    assert_eq!(sends.len(), bw.iters, "{bin}: one WR per iteration");
    for w in &sends {
        assert_eq!(
            (w.opcode, w.bytes, w.qpn),
            (bw.opcode, bw.bytes, qpn),
            "{w:?}"
        );
    }
    let signaled: Vec<usize> = (0..sends.len())
        .filter(|&i| sends[i].hdr.aux & SIGNALED != 0)
        .collect();
    let want: Vec<usize> = (0..bw.iters)
        .filter(|i| i % bw.cq_mod == bw.cq_mod - 1 || i + 1 == bw.iters)
        .collect();
    assert_eq!(signaled, want, "{bin}: every -Q-th WR and the last");
    let wcs = ct.wcs();
    assert_eq!(
        wcs.len(),
        want.len(),
        "{bin}: one completion per signaled WR"
    );
    assert!(
        wcs.iter()
            .all(|w| (w.status, w.opcode, w.qpn) == (0, bw.wc_opcode, qpn)),
        "{wcs:?}"
    );
    assert!(ct.recvs().is_empty(), "{bin}: the client receives nothing");
    // Send-side completions of a connected QP (successful; no source QP, LID or flags): each
    // written as a 24-byte `CompletionShort` (format 2.1).
    let log = LogFile::open(&ct.path).unwrap();
    let short = (log.chunks().iter())
        .flat_map(|c| log.raw_records(c).map(Result::unwrap))
        .filter(|r| r.kind == RecordKind::CompletionShort as u16)
        .count();
    assert_eq!(short, wcs.len(), "{bin}: every completion short");
    (s, c, d)
}

/// One-sided operations: the server posts nothing; every WR targets the server's MR.
fn one_sided_bw(bin: &str, args: &[&str], bw: Bw) -> Trace {
    let (s, c, _d) = perftest_bw(bin, args, &bw);
    let st = s.trace.unwrap();
    assert_eq!(
        (st.sends().len(), st.recvs().len(), st.wcs().len()),
        (0, 0, 0),
        "the server posts nothing"
    );
    let mr = st.mrs()[0];
    let ct = c.trace.unwrap();
    for w in ct.sends() {
        assert_eq!(w.rkey, mr.rkey, "{w:?}");
        assert!(
            w.remote_addr >= mr.addr && w.remote_addr + bw.bytes as u64 <= mr.addr + mr.length,
            "inside the server's MR"
        );
    }
    ct
}

#[test]
fn ib_write_bw() {
    one_sided_bw(
        "ib_write_bw",
        &["-n", "2000", "-Q", "25"],
        Bw {
            iters: 2000,
            cq_mod: 25,
            opcode: WR_RDMA_WRITE,
            wc_opcode: WC_RDMA_WRITE,
            bytes: 65536,
        },
    );
}

#[test]
fn ib_read_bw() {
    one_sided_bw(
        "ib_read_bw",
        &["-n", "200", "-Q", "10"],
        Bw {
            iters: 200,
            cq_mod: 10,
            opcode: WR_RDMA_READ,
            wc_opcode: WC_RDMA_READ,
            bytes: 65536,
        },
    );
}

#[test]
fn ib_atomic_bw() {
    let c = one_sided_bw(
        "ib_atomic_bw",
        &["-n", "500", "-Q", "50"],
        Bw {
            iters: 500,
            cq_mod: 50,
            opcode: WR_FETCH_ADD,
            wc_opcode: WC_FETCH_ADD,
            bytes: 8,
        },
    );
    assert!(
        c.sends().iter().all(|w| w.compare_add == 1),
        "fetch-and-add of 1"
    );
}

/// perftest's SEND bandwidth server (ctx_set_recv_wqes, run_iter_bw_server): min(rx_depth,
/// iters) receives up front, then one more per receive completion while fewer than `iters`
/// were posted; it sends nothing. Replays that over the log's completions.
fn check_send_bw_server(t: &Trace, rx_depth: usize, iters: usize, bytes: u32) {
    let qpn = t.qps()[0].qpn;
    let mut seq = t
        .order
        .iter()
        .filter_map(|(_, r)| match r {
            Rec::PostRecv(p) => {
                assert_eq!((p.qpn, p.bytes), (qpn, bytes), "{p:?}");
                Some(None)
            }
            Rec::Wc(w) => Some(Some(*w)),
            Rec::PostSend(s) => panic!("the server sends nothing: {s:?}"),
            _ => None,
        })
        .peekable();
    let mut posted = 0;
    while let Some(None) = seq.peek() {
        seq.next();
        posted += 1;
    }
    assert_eq!(
        posted,
        rx_depth.min(iters),
        "receives before any completion"
    );
    let mut completed = 0;
    while seq.peek().is_some() {
        let mut batch = 0;
        while let Some(Some(w)) = seq.peek() {
            assert_eq!(
                (w.status, w.opcode, w.byte_len, w.qpn),
                (0, WC_RECV, bytes, qpn),
                "{w:?}"
            );
            seq.next();
            batch += 1;
        }
        let mut refills = 0;
        while let Some(None) = seq.peek() {
            seq.next();
            refills += 1;
        }
        assert_eq!(
            refills,
            batch.min(iters - posted),
            "refills after completions {completed}..{}",
            completed + batch
        );
        posted += refills;
        completed += batch;
    }
    assert_eq!((posted, completed), (iters, iters));
}

#[test]
fn ib_send_bw() {
    let bw = Bw {
        iters: 200,
        cq_mod: 10,
        opcode: WR_SEND,
        wc_opcode: WC_SEND,
        bytes: 65536,
    };
    let (s, _c, _d) = perftest_bw("ib_send_bw", &["-n", "200", "-Q", "10"], &bw);
    // perftest's default receive depth, 512 (at most -n).
    check_send_bw_server(s.trace.as_ref().unwrap(), 512, bw.iters, bw.bytes);
}

/// perftest's RDMA latency loops (run_iter_lat_write, run_iter_lat): one signaled WR of
/// `bytes` into the peer's MR per iteration, its completion polled before the next: strictly
/// WR, completion, WR, … `iters` times; no receives.
fn one_at_a_time(t: &Trace, peer_mr: &MrReg, opcode: u8, wc_opcode: u8, bytes: u32, iters: usize) {
    let qpn = t.qps()[0].qpn;
    let seq: String = t
        .order
        .iter()
        .filter_map(|(_, r)| match r {
            Rec::PostSend(w) => {
                assert_eq!(
                    (w.opcode, w.bytes, w.qpn, w.rkey, w.hdr.aux & SIGNALED),
                    (opcode, bytes, qpn, peer_mr.rkey, SIGNALED),
                    "{w:?}"
                );
                assert!(
                    w.remote_addr >= peer_mr.addr
                        && w.remote_addr + bytes as u64 <= peer_mr.addr + peer_mr.length,
                    "inside the peer's MR: {w:?}"
                );
                Some('S')
            }
            Rec::Wc(w) => {
                assert_eq!((w.status, w.opcode, w.qpn), (0, wc_opcode, qpn), "{w:?}");
                Some('C')
            }
            Rec::PostRecv(r) => panic!("no receives: {r:?}"),
            _ => None,
        })
        .collect();
    assert_eq!(
        seq,
        "SC".repeat(iters),
        "one WR and its completion per iteration"
    );
}

/// ib_write_lat: both sides write into each other's MR (each polls for the peer's write).
#[test]
fn ib_write_lat() {
    let (s, c, _d) = traced_like_untraced("ib_write_lat", &["-n", "200"]);
    check_connection(&s, &c);
    for (me, peer) in [(&s, &c), (&c, &s)] {
        let mr = peer.trace.as_ref().unwrap().mrs()[0];
        one_at_a_time(
            me.trace.as_ref().unwrap(),
            &mr,
            WR_RDMA_WRITE,
            WC_RDMA_WRITE,
            2,
            200,
        );
    }
}

/// ib_read_lat / ib_atomic_lat: only the client posts; the server waits for the end.
fn client_only_lat(bin: &str, opcode: u8, wc_opcode: u8, bytes: u32) -> Trace {
    let (s, c, _d) = traced_like_untraced(bin, &["-n", "200"]);
    check_connection(&s, &c);
    let st = s.trace.unwrap();
    assert_eq!(
        (st.sends().len(), st.recvs().len(), st.wcs().len()),
        (0, 0, 0),
        "the server posts nothing"
    );
    let ct = c.trace.unwrap();
    one_at_a_time(&ct, &st.mrs()[0], opcode, wc_opcode, bytes, 200);
    ct
}

#[test]
fn ib_read_lat() {
    client_only_lat("ib_read_lat", WR_RDMA_READ, WC_RDMA_READ, 2);
}

#[test]
fn ib_atomic_lat() {
    let ct = client_only_lat("ib_atomic_lat", WR_FETCH_ADD, WC_FETCH_ADD, 8);
    assert!(
        ct.sends().iter().all(|w| w.compare_add == 1),
        "fetch-and-add of 1"
    );
}

#[test]
fn ib_send_lat() {
    let (s, c, _d) = traced_like_untraced("ib_send_lat", &["-n", "400"]);
    check_connection(&s, &c);
    for side in [&s, &c] {
        let t = side.trace.as_ref().unwrap();
        let qpn = t.qps()[0].qpn;
        let sends = t.sends();
        assert_eq!(sends.len(), 400, "one send per iteration");
        assert_eq!(t.recvs().len(), 400, "one receive per iteration");
        assert!(sends
            .iter()
            .all(|w| (w.opcode, w.bytes, w.qpn) == (WR_SEND, 2, qpn)));
        let wcs = t.wcs();
        let n = |op: u8| wcs.iter().filter(|w| w.opcode == op).count();
        assert_eq!((n(WC_SEND), n(WC_RECV)), (400, 400));
        assert!(wcs
            .iter()
            .filter(|w| w.opcode == WC_RECV)
            .all(|w| w.byte_len == 2));
    }
}
