//! Every completion on its QP, every peer resolved: hand-written logs of the cases real
//! programs produce and the synthetic scenarios do not — completions without a QPN on CQs
//! shared by several QPs (`qp_cq=`), a QPN reused after destroy, identical QPNs with LID-only
//! addressing on many nodes, a peer reached with and without a GRH, UD with repeated QPNs —
//! resolved through each process's own port addresses (`port_addr=`).

mod common;

use std::path::Path;

use sigmatrace_convert::{stats, ConvertOptions, Report};
use sigmatrace_schemas::header::{FileHeader, RankInfo};
use sigmatrace_schemas::records::*;
use sigmatrace_schemas::writer::{ChunkWriter, LogWriter, WriterOptions};

const RT: u64 = 1_700_000_000_000_000_000;
const T0: u64 = 1_000_000_000;
const SEND: u8 = 2;
const WC_SEND: u8 = 0;
const WC_RECV: u8 = 128;
const WC_WR_FLUSH_ERR: u8 = 5;

/// One process's log on a simulated node of one machine (MONOTONIC_RAW timestamps).
struct Node {
    w: LogWriter,
    t: ChunkWriter,
    ctx: u64,
    lid: u16,
    gid: [u8; 16],
}

fn snapshot(t: u64) -> ClockSnapshot {
    common::snapshot(t, RT)
}

fn gid_of(lid: u16) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&(0x1234_0000_0000u64 + lid as u64).to_be_bytes());
    g
}

impl Node {
    fn new(dir: &Path, rank: u32, lid: u16, port_addr: bool) -> Node {
        let header = FileHeader {
            rank: RankInfo {
                rank: Some(rank),
                local_rank: None,
                world_size: None,
                source: "RANK".into(),
            },
            hostname: "machine".into(),
            cmdline: vec!["hand-written".into()],
            exe: "/bin/hand-written".into(),
            attrs: vec![format!("node={rank}")],
            ..common::log_header(100 + rank, rank, snapshot(T0 - 1_000_000))
        };
        let path = dir.join(format!("rank{rank:04}.sigmatrace"));
        let w = LogWriter::create(&path, &header, WriterOptions::default()).unwrap();
        let mut t = w.thread_writer(rank + 1);
        let ctx = 0x5000_0000 + rank as u64 * 0x100;
        t.append(&snapshot(T0 - 500_000));
        t.append(&DeviceOpen {
            hdr: RecordHeader::of::<DeviceOpen>(0),
            ts: T0 - 400_000,
            context: ctx,
            guid: 0,
            name: *b"softnic0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        });
        let gid = gid_of(lid);
        if port_addr {
            let hex: String = gid.iter().map(|b| format!("{b:02x}")).collect();
            let a = format!("port_addr=context={ctx:#x},port=1,lid={lid:#x},gid0={hex}");
            t.append_meta(
                RecordKind::StringDef,
                string_ns::PROCESS_ATTR,
                0,
                0,
                a.as_bytes(),
            );
        }
        Node {
            w,
            t,
            ctx,
            lid,
            gid,
        }
    }

    /// Creates QP `qpn` (handle `qp`) on CQ `cq`, connected to `dest_qpn` at (`dlid`, `dgid`).
    #[allow(clippy::too_many_arguments)]
    fn qp(
        &mut self,
        ts: u64,
        qp: u64,
        qpn: u32,
        qp_type: u8,
        cq: u64,
        dest: Option<(u32, u16, Option<[u8; 16]>)>,
    ) {
        self.t.append(&QpCreate {
            hdr: RecordHeader::of::<QpCreate>(qp_type as u32),
            ts,
            qp,
            context: self.ctx,
            qpn,
            max_send_wr: 64,
            max_recv_wr: 64,
            ..Default::default()
        });
        let a = format!("qp_cq=qp={qp:#x},qpn={qpn:#x},send_cq={cq:#x},recv_cq={cq:#x},srq=0x0");
        self.t.append_meta(
            RecordKind::StringDef,
            string_ns::PROCESS_ATTR,
            0,
            0,
            a.as_bytes(),
        );
        self.t.append(&QpModify {
            hdr: RecordHeader::of::<QpModify>((1 << 5) | 1),
            ts: ts + 1,
            qpn,
            new_state: 1,
            port: 1,
            ..Default::default()
        });
        if let Some((dq, dlid, dgid)) = dest {
            self.t.append(&QpModify {
                hdr: RecordHeader::of::<QpModify>((1 << 7) | (1 << 20) | 1),
                ts: ts + 2,
                qpn,
                new_state: 2,
                dest_qpn: dq,
                dlid,
                is_global: dgid.is_some() as u8,
                dgid: dgid.unwrap_or([0; 16]),
                ..Default::default()
            });
        }
    }

    fn destroy(&mut self, ts: u64, qp: u64, qpn: u32) {
        self.t.append(&QpDestroy {
            hdr: RecordHeader::of::<QpDestroy>(0),
            ts,
            qp,
            qpn,
            result: 0,
        });
    }

    fn post_send(&mut self, ts: u64, qpn: u32, wr_id: u64, rkey: u32, ah: u64) {
        self.t.append(&PostSend {
            hdr: RecordHeader::of::<PostSend>(2),
            ts,
            wr_id,
            qpn,
            opcode: SEND,
            bytes: 64,
            rkey,
            remote_addr: ah,
            ..Default::default()
        });
    }

    fn post_recv(&mut self, ts: u64, qpn: u32, wr_id: u64) {
        self.t.append(&PostRecv {
            hdr: RecordHeader::of::<PostRecv>(0),
            ts,
            wr_id,
            qpn,
            bytes: 4096,
            num_sge: 1,
            ..Default::default()
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn wc(&mut self, ts: u64, cq: u64, qpn: u32, wr_id: u64, opcode: u8, src: (u32, u16)) {
        self.t.append(&WorkCompletion {
            hdr: RecordHeader::of::<WorkCompletion>(0),
            ts,
            wr_id,
            cq,
            qpn,
            src_qp: src.0,
            slid: src.1,
            byte_len: 64,
            opcode,
            ..Default::default()
        });
    }

    /// A failed completion of `wr_id` whose record carries `opcode` (verbs leaves a failed
    /// completion's opcode undefined: mlx5 writes none, so it is what the array held).
    fn failed(&mut self, ts: u64, cq: u64, qpn: u32, wr_id: u64, opcode: u8) {
        self.failed_with(ts, cq, qpn, wr_id, opcode, WC_WR_FLUSH_ERR);
    }

    /// [`Node::failed`] with its status.
    fn failed_with(&mut self, ts: u64, cq: u64, qpn: u32, wr_id: u64, opcode: u8, status: u8) {
        self.t.append(&WorkCompletion {
            hdr: RecordHeader::of::<WorkCompletion>(0),
            ts,
            wr_id,
            cq,
            qpn,
            opcode,
            status,
            vendor_err: 0xf5,
            ..Default::default()
        });
    }

    fn close(mut self, ts: u64) {
        self.t.append(&snapshot(ts));
        drop(self.t);
        self.w.flush().unwrap();
    }
}

/// One message from (node a, QP qa) to (node b, QP qb) at time `t`: b posts a receive, a
/// posts the send, b's receive completes, then a's send. Completions carry their QPN only
/// when `with_qpn`. Every send has wr_id 1 and every receive wr_id 2 (as the pingpongs do).
fn message(
    nodes: &mut [Node],
    (a, qa): (usize, u32),
    (b, qb): (usize, u32),
    t: u64,
    with_qpn: bool,
) {
    let (cq_a, cq_b) = (0xc000 + a as u64, 0xc000 + b as u64);
    nodes[b].post_recv(t, qb, 2);
    nodes[a].post_send(t + 100, qa, 1, 0, 0);
    nodes[b].wc(
        t + 2_000,
        cq_b,
        if with_qpn { qb } else { 0 },
        2,
        WC_RECV,
        (0, 0),
    );
    nodes[a].wc(
        t + 3_000,
        cq_a,
        if with_qpn { qa } else { 0 },
        1,
        WC_SEND,
        (0, 0),
    );
}

fn report(dir: &Path) -> Report {
    stats(&[dir.to_owned()], &ConvertOptions::default()).unwrap()
}

fn no_ambiguity(r: &Report) {
    let bad: Vec<&String> = r
        .summary
        .warnings
        .iter()
        .filter(|w| w.contains("ambiguous") || w.contains("not found"))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn completions_without_qpn_on_shared_cqs_go_to_their_qps() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (0..2)
        .map(|r| Node::new(dir.path(), r, r as u16 + 1, true))
        .collect();
    // Two QPs per node on one CQ, the same QPNs on both nodes, LID-only addressing.
    for (n, peer_lid) in [(0usize, 2u16), (1, 1)] {
        for j in 0..2u32 {
            let qpn = 0x100 + j;
            let cq = 0xc000 + n as u64;
            nodes[n].qp(
                T0 + j as u64 * 10,
                0x9000 + j as u64,
                qpn,
                2,
                cq,
                Some((qpn, peer_lid, None)),
            );
        }
    }
    let per_dir = 40u64;
    let mut t = T0 + 100_000;
    for k in 0..per_dir {
        let j = (k % 2) as u32;
        // Messages on both QPs overlap: the second is posted before the first completes.
        message(&mut nodes, (0, 0x100 + j), (1, 0x100 + j), t, false);
        message(&mut nodes, (1, 0x100 + j), (0, 0x100 + j), t + 500, false);
        t += 10_000;
    }
    for n in nodes {
        n.close(t + 100_000);
    }
    let r = report(dir.path());
    let tot = &r.summary.totals;
    assert_eq!(tot.orphan_completions, 0, "{tot:?}");
    assert_eq!(tot.wr_completed, 2 * per_dir, "{tot:?}");
    assert_eq!(tot.recv_completed, 2 * per_dir, "{tot:?}");
    assert_eq!(tot.flows_out, 2 * per_dir, "{tot:?}");
    assert_eq!(tot.flows_in, 2 * per_dir, "{tot:?}");
    assert_eq!(tot.incomplete_wrs, 0, "{tot:?}");
    for p in &r.topology.procs {
        assert_eq!(p.qps.len(), 2, "{:?}", p.qps);
        for q in &p.qps {
            // Half the messages each way on each QP: sends and receives.
            assert_eq!(q.counts.completions, per_dir, "QP {:#x}", q.qpn);
            assert_eq!(q.counts.recv_ok, per_dir / 2, "QP {:#x}", q.qpn);
            assert_eq!(q.peer.map(|x| x.1), Some(q.qpn), "QP {:#x}", q.qpn);
        }
    }
    no_ambiguity(&r);
    // The trace: every message a flow, none backwards, valid.
    let trace = dir.path().join("t.perfetto-trace");
    sigmatrace_convert::convert(&[dir.path().to_owned()], &trace, &ConvertOptions::default())
        .unwrap();
    let v = sigmatrace_testkit::trace::validate(&trace, &[&format!("flows={}", 2 * per_dir)]);
    assert_eq!(v["stats"]["flows"], 2 * per_dir, "{v:#}");
    assert_eq!(v["stats"]["backward_flows"], 0, "{v:#}");
}

#[test]
fn a_qpn_created_again_after_destroy_is_a_new_qp() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (0..2)
        .map(|r| Node::new(dir.path(), r, r as u16 + 1, true))
        .collect();
    let n = 10u64;
    // Generation 1: node 0 QP 0x200 ↔ node 1 QP 0x300.
    nodes[0].qp(T0, 0x9000, 0x200, 2, 0xc000, Some((0x300, 2, None)));
    nodes[1].qp(T0, 0x9100, 0x300, 2, 0xc001, Some((0x200, 1, None)));
    let mut t = T0 + 100_000;
    for _ in 0..n {
        message(&mut nodes, (0, 0x200), (1, 0x300), t, true);
        t += 10_000;
    }
    nodes[0].destroy(t, 0x9000, 0x200);
    nodes[1].destroy(t, 0x9100, 0x300);
    // Generation 2: node 0's QPN 0x200 again (same handle, as malloc often gives), now with
    // node 1's new QP 0x301.
    t += 10_000;
    nodes[0].qp(t, 0x9000, 0x200, 2, 0xc000, Some((0x301, 2, None)));
    nodes[1].qp(t, 0x9200, 0x301, 2, 0xc001, Some((0x200, 1, None)));
    t += 100_000;
    for _ in 0..2 * n {
        message(&mut nodes, (0, 0x200), (1, 0x301), t, true);
        t += 10_000;
    }
    for nd in nodes {
        nd.close(t + 100_000);
    }
    let r = report(dir.path());
    let p0 = &r.topology.procs[0];
    assert_eq!(p0.qps.len(), 2, "two QPs with QPN 0x200: {:?}", p0.qps);
    let peers: Vec<Option<u32>> = p0.qps.iter().map(|q| q.peer.map(|x| x.1)).collect();
    assert_eq!(peers, [Some(0x300), Some(0x301)]);
    let sends: Vec<u64> = p0.qps.iter().map(|q| q.counts.consuming_sends).collect();
    assert_eq!(sends, [n, 2 * n]);
    let tot = &r.summary.totals;
    assert_eq!(
        (tot.flows_out, tot.orphan_completions),
        (3 * n, 0),
        "{tot:?}"
    );
    no_ambiguity(&r);
}

/// 2 × `pairs` processes, each one QP 0x100 talking to QP 0x100 of its partner by LID only
/// (as concurrent `ibv_rc_pingpong` pairs on softnic).
fn pingpong_pairs(dir: &Path, pairs: u32, port_addr: bool, msgs: u64) {
    let mut nodes: Vec<Node> = (0..2 * pairs)
        .map(|r| Node::new(dir, r, r as u16 + 1, port_addr))
        .collect();
    for (r, node) in nodes.iter_mut().enumerate() {
        let peer_lid = (r ^ 1) as u16 + 1;
        node.qp(
            T0,
            0x9000,
            0x100,
            2,
            0xc000 + r as u64,
            Some((0x100, peer_lid, None)),
        );
    }
    let mut t = T0 + 100_000;
    for _ in 0..msgs {
        for p in 0..pairs as usize {
            message(&mut nodes, (2 * p, 0x100), (2 * p + 1, 0x100), t, true);
            message(
                &mut nodes,
                (2 * p + 1, 0x100),
                (2 * p, 0x100),
                t + 4_000,
                true,
            );
        }
        t += 10_000;
    }
    for n in nodes {
        n.close(t + 100_000);
    }
}

#[test]
fn many_pairs_with_one_qpn_and_lid_only_addressing_pair_through_own_port_addresses() {
    let (pairs, msgs) = (128u32, 3u64);
    let dir = tempfile::tempdir().unwrap();
    pingpong_pairs(dir.path(), pairs, true, msgs);
    let r = report(dir.path());
    no_ambiguity(&r);
    for p in &r.topology.procs {
        let rank = p.rank.unwrap();
        let peer = &r.topology.procs[p.qps[0].peer.expect("paired").0];
        assert_eq!(peer.rank, Some(rank ^ 1), "rank {rank}");
    }
    assert_eq!(r.summary.totals.flows_out, 2 * pairs as u64 * msgs);
    // Without the own addresses (older logs) the same logs cannot be told apart.
    let dir2 = tempfile::tempdir().unwrap();
    pingpong_pairs(dir2.path(), 4, false, 1);
    let r2 = report(dir2.path());
    assert!(
        r2.summary.warnings.iter().any(|w| w.contains("ambiguous")),
        "{:#?}",
        r2.summary.warnings
    );
}

#[test]
fn a_peer_reached_with_and_without_a_grh_is_one_peer() {
    let dir = tempfile::tempdir().unwrap();
    // Two pairs of nodes with the same QPNs; each first node reaches its partner once with a
    // GRH (DGID = the partner's GID 0) and once by LID only.
    let mut nodes: Vec<Node> = (0..4)
        .map(|r| Node::new(dir.path(), r, r as u16 + 1, true))
        .collect();
    for pair in 0..2usize {
        let (a, b) = (2 * pair, 2 * pair + 1);
        let (la, lb) = (nodes[a].lid, nodes[b].lid);
        let (ga, gb) = (nodes[a].gid, nodes[b].gid);
        nodes[a].qp(T0, 0x9000, 0x10, 2, 0xc000, Some((0x20, lb, Some(gb))));
        nodes[a].qp(T0 + 10, 0x9001, 0x11, 2, 0xc000, Some((0x21, lb, None)));
        nodes[b].qp(T0, 0x9000, 0x20, 2, 0xc001, Some((0x10, la, Some(ga))));
        nodes[b].qp(T0 + 10, 0x9001, 0x21, 2, 0xc001, Some((0x11, la, None)));
    }
    let mut t = T0 + 100_000;
    for _ in 0..5 {
        for pair in 0..2usize {
            let (a, b) = (2 * pair, 2 * pair + 1);
            message(&mut nodes, (a, 0x10), (b, 0x20), t, true);
            message(&mut nodes, (b, 0x21), (a, 0x11), t + 4_000, true);
        }
        t += 10_000;
    }
    for n in nodes {
        n.close(t + 100_000);
    }
    let r = report(dir.path());
    no_ambiguity(&r);
    for p in &r.topology.procs {
        for q in &p.qps {
            let (pp, _) = q
                .peer
                .unwrap_or_else(|| panic!("{} QP {:#x} unpaired", p.label(), q.qpn));
            assert_eq!(r.topology.procs[pp].rank, Some(p.rank.unwrap() ^ 1));
        }
    }
    assert_eq!(r.summary.totals.flows_out, 20);
}

#[test]
fn ud_datagrams_with_qpns_repeated_on_every_node_pair_by_own_lids() {
    let dir = tempfile::tempdir().unwrap();
    let n = 4usize;
    let mut nodes: Vec<Node> = (0..n as u32)
        .map(|r| Node::new(dir.path(), r, r as u16 + 10, true))
        .collect();
    for (r, node) in nodes.iter_mut().enumerate() {
        node.qp(T0, 0x9000, 0x50, 4, 0xc000 + r as u64, None);
        // An address handle to the right neighbour.
        node.t.append(&AhCreate {
            hdr: RecordHeader::of::<AhCreate>(0),
            ts: T0 + 50,
            ah: 0xa000,
            dlid: ((r + 1) % n) as u16 + 10,
            port: 1,
            ..Default::default()
        });
    }
    let msgs = 6u64;
    let mut t = T0 + 100_000;
    for _ in 0..msgs {
        for a in 0..n {
            let b = (a + 1) % n;
            let slid = nodes[a].lid;
            nodes[b].post_recv(t, 0x50, 2);
            nodes[a].post_send(t + 100, 0x50, 1, 0x50, 0xa000);
            nodes[b].wc(t + 2_000, 0xc000 + b as u64, 0x50, 2, WC_RECV, (0x50, slid));
            nodes[a].wc(t + 3_000, 0xc000 + a as u64, 0x50, 1, WC_SEND, (0, 0));
            t += 5_000;
        }
    }
    for nd in nodes {
        nd.close(t + 100_000);
    }
    let r = report(dir.path());
    no_ambiguity(&r);
    assert_eq!(
        r.summary.totals.flows_out,
        n as u64 * msgs,
        "{:#?}",
        r.summary.warnings
    );
    assert_eq!(r.summary.totals.flows_in, n as u64 * msgs);
}

/// Two nodes (LIDs 1 and 2, port addresses logged) with one RC QP 0x100 each (CQ 0xc000 + node),
/// connected to each other.
fn rc_pair(dir: &Path) -> Vec<Node> {
    let mut nodes: Vec<Node> = (0..2)
        .map(|r| Node::new(dir, r, r as u16 + 1, true))
        .collect();
    for (r, node) in nodes.iter_mut().enumerate() {
        let peer = Some((0x100, (r ^ 1) as u16 + 1, None));
        node.qp(T0, 0x9000, 0x100, 2, 0xc000 + r as u64, peer);
    }
    nodes
}

/// Flushed WRs land on the queue that has them, whatever opcode their completion's record
/// carries (a failed completion's opcode is undefined; a program that polls into a reused
/// array hands the tracer the last successful completion's opcode there): a receive flushed
/// with a send's opcode ends that receive, a send flushed with a receive's opcode that send.
#[test]
fn failed_completions_go_to_the_queue_of_their_wr_whatever_their_opcode() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = rc_pair(dir.path());
    let mut t = T0 + 100_000;
    for _ in 0..3 {
        message(&mut nodes, (0, 0x100), (1, 0x100), t, true);
        t += 10_000;
    }
    // Then both QPs fail: node 1's posted receive (wr_id 2) is flushed with a send's opcode in
    // its record, node 0's posted send (wr_id 1) with a receive's.
    nodes[1].post_recv(t, 0x100, 2);
    nodes[0].post_send(t + 100, 0x100, 1, 0, 0);
    nodes[1].failed(t + 5_000, 0xc001, 0x100, 2, WC_SEND);
    nodes[0].failed(t + 5_000, 0xc000, 0x100, 1, WC_RECV);
    for n in nodes {
        n.close(t + 100_000);
    }
    let r = report(dir.path());
    no_ambiguity(&r);
    let tt = &r.summary.totals;
    assert_eq!(tt.orphan_completions, 0, "{tt:?}");
    assert_eq!((tt.wr_completed, tt.wr_failed), (3, 1), "{tt:?}");
    assert_eq!((tt.recv_completed, tt.flows_in), (4, 3), "{tt:?}");
    assert_eq!(tt.incomplete_wrs, 0, "{tt:?}");
}

/// When both queues of a QP hold a WR with the failed completion's `wr_id` (rdma-core's own
/// tests post every WR with wr_id 0), a status only a requester reports puts it on the send
/// queue whatever its undefined opcode byte says: a remote access error (10) recorded with a
/// receive's opcode (the bytes the program's array held — they differed run to run in the
/// traced suite and so did the counts) ends the send, and the receive stays posted.
#[test]
fn a_requester_only_status_puts_a_failed_completion_on_the_send_queue() {
    const WC_REM_ACCESS_ERR: u8 = 10;
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = rc_pair(dir.path());
    let t = T0 + 100_000;
    nodes[0].post_recv(t, 0x100, 0);
    nodes[0].post_send(t + 100, 0x100, 0, 0, 0);
    nodes[0].failed_with(t + 5_000, 0xc000, 0x100, 0, WC_RECV + 40, WC_REM_ACCESS_ERR);
    for n in nodes {
        n.close(t + 100_000);
    }
    let r = report(dir.path());
    let tt = &r.summary.totals;
    assert_eq!(tt.orphan_completions, 0, "{tt:?}");
    assert_eq!((tt.wr_completed, tt.wr_failed), (0, 1), "{tt:?}");
    assert_eq!(tt.recv_completed, 0, "{tt:?}");
}
