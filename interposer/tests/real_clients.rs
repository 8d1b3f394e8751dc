//! Unmodified Debian binaries on softnic under LD_PRELOAD=libsigmatrace.so: server on simulated
//! node 1, client on node 2. Each program runs untraced and traced; exit codes and the shape
//! of the output (digits masked: timings, PSNs) must match. The logs must hold exactly the work
//! requests and completions the program performs — derived from its iteration count and
//! options, and for the pingpongs by replaying the program's own posting rule over the
//! completions it polled — with the right opcodes and sizes, both sides' QPNs and the
//! connection between them.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use sigmatrace_schemas::{cq_event_kind, cq_variant, post_source, qp_variant};

const LIMIT: Duration = Duration::from_secs(180);
const SEND_WRID: u64 = 2;
const RECV_WRID: u64 = 1;
const WR_SEND: u8 = 2;
const WR_RDMA_WRITE: u8 = 0;
const WR_FETCH_ADD: u8 = 6;
const WC_SEND: u8 = 0;
const WC_RECV: u8 = 128;
const SIGNALED: u32 = 2;
const QPS_RTR: u8 = 2;
const QP_DEST_QPN: u32 = 1 << 20;
const WC_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;

struct Side {
    out: Out,
    trace: Option<Trace>,
}

/// Runs `bin` as server (node 1) and client (node 2) on softnic; traced into `logs` if given.
fn run_pair(bin: &str, args: &[&str], logs: Option<&Path>) -> (Side, Side) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let run = softnic_run().display().to_string();
    let fabric = dir.path().join("fabric").display().to_string();
    let argv = |node: &str, client: bool| {
        let mut v = vec![
            run.clone(),
            "--node".into(),
            node.into(),
            "--fabric".into(),
            fabric.clone(),
            "--".into(),
        ];
        v.push(system_bin(bin));
        v.extend(args.iter().map(|s| s.to_string()));
        v.extend(["-p".to_string(), port.clone()]);
        if client {
            v.push("localhost".into());
        }
        v
    };
    let mk = |node: &str, client: bool, sub: &str| {
        let c = Cmd::new(&argv(node, client));
        match logs {
            Some(l) => c.traced(&l.join(sub)),
            None => c,
        }
    };
    let server = mk("1", false, "server").spawn();
    let t0 = Instant::now();
    while !listening(port.parse().unwrap()) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = mk("2", true, "client").spawn();
    let c = client.wait(LIMIT);
    let s = server.wait(LIMIT);
    let trace = |sub: &str| logs.map(|l| only_log(&l.join(sub)));
    (
        Side {
            out: s,
            trace: trace("server"),
        },
        Side {
            out: c,
            trace: trace("client"),
        },
    )
}

/// Untraced and traced runs; returns the traced sides after comparing both.
fn traced_like_untraced(bin: &str, args: &[&str]) -> (Side, Side, tempfile::TempDir) {
    let (ps, pc) = run_pair(bin, args, None);
    assert!(
        ps.out.ok() && pc.out.ok(),
        "{bin} {args:?} untraced:\n{:?}\n{:?}",
        ps.out,
        pc.out
    );
    let logs = tempfile::tempdir().unwrap();
    let (ts, tc) = run_pair(bin, args, Some(logs.path()));
    assert!(
        ts.out.ok() && tc.out.ok(),
        "{bin} {args:?} traced:\n{:?}\n{:?}",
        ts.out,
        tc.out
    );
    for (p, t, who) in [(&ps, &ts, "server"), (&pc, &tc, "client")] {
        assert_eq!(
            shape(&p.out.stdout),
            shape(&t.out.stdout),
            "{bin} {args:?} {who} stdout"
        );
        assert_eq!(
            shape(&p.out.stderr),
            shape(&t.out.stderr),
            "{bin} {args:?} {who} stderr"
        );
    }
    (ts, tc, logs)
}

/// (LID, QPN) pairs of the "local address" and "remote address" lines a program prints.
fn addresses(stdout: &str, which: &str) -> Vec<(u32, u32)> {
    let hex_after = |l: &str, key: &str| -> Option<u32> {
        let rest = &l[l.find(key)? + key.len()..];
        let tok = rest.trim_start().trim_start_matches("0x");
        let end = tok
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(tok.len());
        u32::from_str_radix(&tok[..end], 16).ok()
    };
    stdout
        .lines()
        .filter(|l| l.contains(which))
        .filter_map(|l| Some((hex_after(l, "LID")?, hex_after(l, "QPN")?)))
        .collect()
}

/// Each side's QPs are the ones it printed, connected (RTR) to the QPs the peer printed.
fn check_connection(server: &Side, client: &Side) {
    for (me, peer) in [(server, client), (client, server)] {
        let t = me.trace.as_ref().unwrap();
        let local = addresses(&me.out.stdout, "local address");
        let remote = addresses(&me.out.stdout, "remote address");
        assert!(
            !local.is_empty() && local.len() == remote.len(),
            "{}",
            me.out.stdout
        );
        assert_eq!(
            addresses(&peer.out.stdout, "remote address"),
            local,
            "the peer saw our addresses"
        );
        let qpns: Vec<u32> = t.qps().iter().map(|q| q.qpn).collect();
        assert_eq!(
            qpns,
            local.iter().map(|a| a.1).collect::<Vec<_>>(),
            "QpCreate QPNs = printed QPNs"
        );
        // The context's own port address, as queried through the provider, is the LID the
        // program printed for itself (what the peer addresses it with).
        let ctx = t.devices()[0].context;
        let port = t
            .defs(sigmatrace_schemas::string_ns::PROCESS_ATTR)
            .into_iter()
            .find_map(|(_, a)| {
                a.strip_prefix(&format!("port_addr=context={ctx:#x},port=1,lid="))
                    .map(|l| num(l.split(',').next().unwrap()) as u32)
            })
            .expect("port_addr attribute of port 1");
        assert!(local.iter().all(|a| a.0 == port), "own LID {port:#x}");
        let rtr: BTreeMap<u32, (u32, u16)> = t
            .modifies()
            .iter()
            .filter(|m| m.new_state == QPS_RTR && m.result == 0 && m.hdr.aux & QP_DEST_QPN != 0)
            .map(|m| (m.qpn, (m.dest_qpn, m.dlid)))
            .collect();
        let peer_qpns: Vec<u32> = peer
            .trace
            .as_ref()
            .unwrap()
            .qps()
            .iter()
            .map(|q| q.qpn)
            .collect();
        for (i, (_, qpn)) in local.iter().enumerate() {
            let (lid, rqpn) = remote[i];
            if let Some(&(dest, dlid)) = rtr.get(qpn) {
                assert_eq!(
                    (dest, dlid as u32),
                    (rqpn, lid),
                    "QP {qpn:#x} connected to the printed peer"
                );
                assert_eq!(
                    dest, peer_qpns[i],
                    "QP {qpn:#x} connected to the peer's QpCreate"
                );
            }
        }
    }
}

/// The pingpong examples' posting rule (rc/ud/srq_pingpong.c): after the initial receives
/// (and, on the client, one send per QP), each polled completion may trigger receive refills
/// (when the outstanding receives drop to `threshold`) and a send on its QP (when that QP has
/// nothing pending and fewer than `iters` sends completed). Replays it over the completions
/// in the log and checks the posts that follow each batch are exactly those. Returns
/// (sends, completions).
struct Pingpong {
    rx_depth: usize,
    iters: usize,
    threshold: usize,
    send_bytes: u32,
    recv_bytes: u32,
    send_source: u8,
    recv_source: u8,
}

#[derive(Debug, PartialEq)]
enum Post {
    Send(u32),
    Recv,
}

fn replay(t: &Trace, p: &Pingpong, client: bool) -> (usize, usize) {
    let qpns: Vec<u32> = t.qps().iter().map(|q| q.qpn).collect();
    let mut data = t.order.iter().filter_map(|(_, r)| match r {
        Rec::PostSend(s) => {
            assert_eq!(
                (s.opcode, s.bytes, s.source),
                (WR_SEND, p.send_bytes, p.send_source),
                "{s:?}"
            );
            assert_eq!((s.wr_id, s.hdr.aux & SIGNALED), (SEND_WRID, SIGNALED));
            Some(Err(Post::Send(s.qpn)))
        }
        Rec::PostRecv(r) => {
            assert_eq!(
                (r.wr_id, r.bytes, r.source),
                (RECV_WRID, p.recv_bytes, p.recv_source),
                "{r:?}"
            );
            Some(Err(Post::Recv))
        }
        Rec::Wc(w) => Some(Ok(*w)),
        _ => None,
    });
    let next_posts = |n: usize, it: &mut dyn Iterator<Item = Result<_, Post>>| -> Vec<Post> {
        (0..n)
            .map(|_| {
                it.next()
                    .expect("more records")
                    .expect_err("a post, not a completion")
            })
            .collect()
    };
    assert!(
        next_posts(p.rx_depth, &mut data)
            .iter()
            .all(|x| *x == Post::Recv),
        "initial receives"
    );
    let mut pending: BTreeMap<u32, u64> = qpns.iter().map(|&q| (q, RECV_WRID)).collect();
    let mut sends = 0;
    if client {
        let first = next_posts(qpns.len(), &mut data);
        assert_eq!(
            first,
            qpns.iter().map(|&q| Post::Send(q)).collect::<Vec<_>>(),
            "initial sends"
        );
        pending.values_mut().for_each(|v| *v |= SEND_WRID);
        sends += qpns.len();
    }
    let (mut scnt, mut rcnt, mut routs, mut wcs) = (0usize, 0usize, p.rx_depth, 0usize);
    let mut it = data.peekable();
    while it.peek().is_some() {
        let mut batch = Vec::new();
        while let Some(Ok(w)) = it.peek() {
            batch.push(*w);
            it.next();
        }
        let mut want = Vec::new();
        for w in &batch {
            assert_eq!(w.status, 0, "{w:?}");
            match w.wr_id {
                SEND_WRID => {
                    assert_eq!(w.opcode, WC_SEND);
                    scnt += 1;
                }
                RECV_WRID => {
                    assert_eq!(w.opcode, WC_RECV);
                    routs -= 1;
                    if routs <= p.threshold {
                        want.extend((0..p.rx_depth - routs).map(|_| Post::Recv));
                        routs = p.rx_depth;
                    }
                    rcnt += 1;
                }
                other => panic!("unexpected wr_id {other}"),
            }
            // Every completion on its QP, also from a CQ created without
            // IBV_WC_EX_WITH_QP_NUM (rc_pingpong -t: the interposer names the CQ's one QP).
            let qpn = w.qpn;
            let pend = pending
                .get_mut(&qpn)
                .unwrap_or_else(|| panic!("completion of unknown QP {w:?}"));
            *pend &= !w.wr_id;
            if scnt < p.iters && *pend == 0 {
                want.push(Post::Send(qpn));
                *pend = RECV_WRID | SEND_WRID;
            }
        }
        wcs += batch.len();
        let mut got = Vec::new();
        while let Some(Err(_)) = it.peek() {
            got.push(it.next().unwrap().unwrap_err());
        }
        sends += got.iter().filter(|x| matches!(x, Post::Send(_))).count();
        assert_eq!(
            got,
            want,
            "posts after completions {:?}",
            batch.iter().map(|w| w.wr_id).collect::<Vec<_>>()
        );
    }
    assert!(
        scnt >= p.iters && rcnt >= p.iters,
        "the loop ends after {} sends/receives (got {scnt}/{rcnt})",
        p.iters
    );
    (sends, wcs)
}

fn pingpong(bin: &str, args: &[&str], p: Pingpong) -> (Side, Side, tempfile::TempDir) {
    let (s, c, dir) = traced_like_untraced(bin, args);
    check_connection(&s, &c);
    for (side, client) in [(&s, false), (&c, true)] {
        let t = side.trace.as_ref().unwrap();
        assert!(t.clean);
        let (sends, wcs) = replay(t, &p, client);
        if p.threshold == 1 {
            assert_eq!(
                (sends, wcs),
                (p.iters, 2 * p.iters),
                "{bin}: one QP, strictly alternating"
            );
        }
        assert_eq!(t.sends().len(), sends);
    }
    (s, c, dir)
}

fn rc(args: &[&str], iters: usize, send_source: u8) -> (Side, Side, tempfile::TempDir) {
    let p = Pingpong {
        rx_depth: 500,
        iters,
        threshold: 1,
        send_bytes: 4096,
        recv_bytes: 4096,
        send_source,
        recv_source: post_source::POST_RECV,
    };
    pingpong("ibv_rc_pingpong", args, p)
}

#[test]
fn ibv_rc_pingpong_default() {
    let (s, c, _d) = rc(&[], 1000, post_source::POST_SEND);
    for side in [&s, &c] {
        let t = side.trace.as_ref().unwrap();
        assert_eq!(
            t.recvs().len(),
            1498,
            "500 + two refills of 499 (rc_pingpong's routs rule)"
        );
        assert_eq!(t.qps()[0].hdr.aux, 2 | (qp_variant::CREATE_QP << 8));
        assert_eq!(t.cqs()[0].hdr.aux, cq_variant::CREATE_CQ);
        assert_eq!(t.mrs()[0].length, 4096);
    }
}

#[test]
fn ibv_rc_pingpong_new_post_api() {
    let (s, c, _d) = rc(&["-N", "-n", "300"], 300, post_source::WR_API);
    for side in [&s, &c] {
        let t = side.trace.as_ref().unwrap();
        assert_eq!(t.qps()[0].hdr.aux, 2 | (qp_variant::CREATE_QP_EX << 8));
        assert!(t.errors().is_empty());
    }
}

#[test]
fn ibv_rc_pingpong_timestamps() {
    let (s, c, _d) = rc(&["-t", "-n", "300"], 300, post_source::POST_SEND);
    for side in [&s, &c] {
        let t = side.trace.as_ref().unwrap();
        let cq = t.cqs()[0];
        assert_eq!(
            (cq.hdr.aux, cq.wc_flags),
            (cq_variant::CREATE_CQ_EX, WC_WITH_COMPLETION_TIMESTAMP)
        );
        assert!(
            t.wcs().iter().all(|w| w.hw_ts != 0 && w.cq == cq.cq),
            "device timestamps via ibv_cq_ex"
        );
        let qpn = t.qps()[0].qpn;
        let wcs = t.wcs();
        assert_eq!(wcs.len(), 600, "300 sends and 300 receives completed");
        assert!(
            wcs.iter().all(|w| w.qpn == qpn),
            "every completion on QP {qpn:#x}, none on QP 0 (the CQ has no QP_NUM)"
        );
    }
}

#[test]
fn ibv_rc_pingpong_events() {
    let (s, c, _d) = rc(&["-e", "-n", "300"], 300, post_source::POST_SEND);
    for side in [&s, &c] {
        let t = side.trace.as_ref().unwrap();
        let ev = t.cq_events();
        let n = |k: u32| ev.iter().filter(|e| e.hdr.aux == k).count();
        let gets = n(cq_event_kind::GET_EVENT);
        assert!(gets > 0);
        assert_eq!(
            n(cq_event_kind::REQ_NOTIFY),
            gets + 1,
            "one request up front, one per event"
        );
        let ack: Vec<u32> = ev
            .iter()
            .filter(|e| e.hdr.aux == cq_event_kind::ACK_EVENTS)
            .map(|e| e.arg)
            .collect();
        assert_eq!(ack, vec![gets as u32], "acks every event it got");
        assert_eq!(
            (
                n(cq_event_kind::CREATE_CHANNEL),
                n(cq_event_kind::DESTROY_CHANNEL)
            ),
            (1, 1)
        );
        let ch = ev
            .iter()
            .find(|e| e.hdr.aux == cq_event_kind::CREATE_CHANNEL)
            .unwrap()
            .cq;
        assert_eq!(t.cqs()[0].channel, ch);
    }
}

#[test]
fn ibv_ud_pingpong() {
    let p = Pingpong {
        rx_depth: 500,
        iters: 500,
        threshold: 1,
        send_bytes: 1024,
        recv_bytes: 1024 + 40, // room for the GRH
        send_source: post_source::POST_SEND,
        recv_source: post_source::POST_RECV,
    };
    let (s, c, _d) = pingpong("ibv_ud_pingpong", &["-n", "500", "-s", "1024"], p);
    for (me, peer) in [(&s, &c), (&c, &s)] {
        let t = me.trace.as_ref().unwrap();
        let peer_qpn = peer.trace.as_ref().unwrap().qps()[0].qpn;
        let remote = addresses(&me.out.stdout, "remote address")[0];
        let ah = t.ahs();
        assert_eq!(ah.len(), 1);
        assert_eq!(ah[0].dlid as u32, remote.0, "AH towards the peer's LID");
        for w in t.sends() {
            assert_eq!(
                (w.remote_addr, w.rkey, w.compare_add),
                (ah[0].ah, peer_qpn, 0x1111_1111),
                "UD address"
            );
        }
        assert_eq!(t.qps()[0].hdr.aux & 0xff, 4, "IBV_QPT_UD");
        assert!(t.modifies().iter().any(|m| m.qkey == 0x1111_1111));
    }
}

#[test]
fn ibv_srq_pingpong() {
    let p = Pingpong {
        rx_depth: 500,
        iters: 1000,
        threshold: 4,
        send_bytes: 4096,
        recv_bytes: 4096,
        send_source: post_source::POST_SEND,
        recv_source: post_source::POST_SRQ_RECV,
    };
    let (s, c, _d) = pingpong("ibv_srq_pingpong", &["-q", "4"], p);
    for side in [&s, &c] {
        let t = side.trace.as_ref().unwrap();
        assert_eq!(t.qps().len(), 4);
        let srq = t.qps()[0].srq;
        assert!(
            srq != 0 && t.qps().iter().all(|q| q.srq == srq),
            "all QPs share the SRQ"
        );
        assert!(t.recvs().iter().all(|r| r.srq == srq && r.qpn == 0));
        assert!(t.sends().len() >= 1000, "at least iters sends");
    }
}

/// perftest: a bandwidth client posts `-n` WRs, signals one in `-Q`; the server only serves.
fn perftest_bw(
    bin: &str,
    args: &[&str],
    iters: usize,
    cq_mod: usize,
    opcode: u8,
    bytes: u32,
) -> (Side, Side) {
    let (s, c, _d) = traced_like_untraced(bin, args);
    check_connection(&s, &c);
    let (st, ct) = (s.trace.as_ref().unwrap(), c.trace.as_ref().unwrap());
    assert_eq!(
        (st.sends().len(), st.wcs().len()),
        (0, 0),
        "the server posts nothing"
    );
    let sends = ct.sends();
    assert_eq!(sends.len(), iters);
    assert_eq!(ct.wcs().len(), iters / cq_mod);
    assert_eq!(
        sends.iter().filter(|w| w.hdr.aux & SIGNALED != 0).count(),
        iters / cq_mod
    );
    let mr = st.mrs()[0];
    let qpn = ct.qps()[0].qpn;
    for w in &sends {
        assert_eq!(
            (w.opcode, w.bytes, w.rkey, w.qpn),
            (opcode, bytes, mr.rkey, qpn),
            "{w:?}"
        );
        assert!(
            w.remote_addr >= mr.addr && w.remote_addr + bytes as u64 <= mr.addr + mr.length,
            "inside the server's MR"
        );
    }
    assert!(ct.wcs().iter().all(|w| w.status == 0 && w.qpn == qpn));
    (s, c)
}

#[test]
fn ib_write_bw() {
    perftest_bw(
        "ib_write_bw",
        &["-n", "2000", "-Q", "25"],
        2000,
        25,
        WR_RDMA_WRITE,
        65536,
    );
}

#[test]
fn ib_atomic_bw() {
    let (_, c) = perftest_bw(
        "ib_atomic_bw",
        &["-n", "500", "-Q", "50"],
        500,
        50,
        WR_FETCH_ADD,
        8,
    );
    assert!(
        c.trace
            .as_ref()
            .unwrap()
            .sends()
            .iter()
            .all(|w| w.compare_add == 1),
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

fn loopback(which: &str, logs: &Path) -> Trace {
    let fabric = logs.join("fabric");
    let out = Cmd::new(&[
        softnic_run().display().to_string(),
        "--fabric".into(),
        fabric.display().to_string(),
        "--".into(),
        cprog(which).display().to_string(),
        "40".into(),
    ])
    .traced(&logs.join(which))
    .run(LIMIT);
    assert!(out.ok(), "{which}: {out:?}");
    assert_eq!(out.stdout, "loopback: 40 sends, 80 completions\n");
    only_log(&logs.join(which))
}

/// Kind names with counts and the data records without addresses or times.
fn fingerprint(t: &Trace) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut kinds = BTreeMap::new();
    let mut data = Vec::new();
    for (_, r) in &t.order {
        let kind = match r {
            Rec::Other(name) => name.clone(),
            _ => format!("{r:?}").split('(').next().unwrap().to_string(),
        };
        if kind == "Empty" || kind == "Snapshot" {
            continue;
        }
        *kinds.entry(kind).or_default() += 1;
        match r {
            Rec::PostSend(s) => data.push(format!(
                "send {} {} {} {}",
                s.wr_id, s.opcode, s.bytes, s.source
            )),
            Rec::PostRecv(s) => data.push(format!("recv {} {}", s.wr_id, s.bytes)),
            Rec::QpModify(m) => data.push(format!(
                "modify {} {:#x} {}",
                m.new_state, m.hdr.aux, m.result
            )),
            _ => {}
        }
    }
    (kinds, data)
}

#[test]
fn nccl_style_dlopen_and_dlvsym_is_traced_like_linking() {
    let dir = tempfile::tempdir().unwrap();
    let linked = loopback("loopback_linked", dir.path());
    let dlopen = loopback("loopback_dlopen", dir.path());
    let (lk, ld) = fingerprint(&linked);
    let (dk, dd) = fingerprint(&dlopen);
    assert_eq!(lk, dk, "same records, kind by kind");
    assert_eq!(ld, dd, "same work requests and state changes");
    assert_eq!(
        (
            lk["PostSend"],
            lk["PostRecv"],
            lk["Wc"],
            lk["QpCreate"],
            lk["QpModify"]
        ),
        (40, 40, 80, 2, 6)
    );
    for k in [
        "DeviceOpen",
        "PdAlloc",
        "MrReg",
        "CqCreate",
        "QpDestroy",
        "CqDestroy",
        "MrDereg",
        "PdDealloc",
    ] {
        assert!(dk.contains_key(k), "dlopen run records {k}");
    }
}
