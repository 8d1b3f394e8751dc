//! Unmodified Debian ibverbs-utils binaries on softnic under LD_PRELOAD=libsigmatrace.so: the
//! pingpongs with server on simulated node 1 and client on node 2, the device tools on one
//! node. Each program runs untraced and traced; exit codes and the shape of the output (digits
//! masked: timings, PSNs) must match. The logs must hold exactly the work requests and
//! completions the program performs — for the pingpongs by replaying the program's own
//! posting rule over the completions it polled — with the right opcodes and sizes, both
//! sides' QPNs and the connection between them; the device tools' logs exactly the device
//! they opened and the events they read.

mod common;
mod pair;
use common::*;
use pair::*;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sigmatrace_schemas::{cq_event_kind, cq_variant, post_source, qp_variant};

const SEND_WRID: u64 = 2;
const RECV_WRID: u64 = 1;
const WC_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;

/// The pingpong examples' posting rule (rc/ud/srq_pingpong.c): after the initial receives
/// (and, on the client, one send per QP), each polled completion may trigger receive refills
/// (when the outstanding receives drop to `threshold`) and a send on its QP (when that QP has
/// nothing pending and fewer than `iters` sends completed). Replays it over the completions
/// in the log and checks the posts that follow each batch are exactly those.
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

/// What the replay counted: sends posted, completions polled (of them, send completions) and
/// sends still outstanding when the loop ended (their QP's pending SEND bit still set).
struct Replayed {
    sends: usize,
    wcs: usize,
    send_wcs: usize,
    in_flight: usize,
}

fn replay(t: &Trace, p: &Pingpong, client: bool) -> Replayed {
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
    Replayed {
        sends,
        wcs,
        send_wcs: scnt,
        in_flight: pending.values().filter(|&&v| v & SEND_WRID != 0).count(),
    }
}

fn pingpong(bin: &str, args: &[&str], p: Pingpong) -> (Side, Side, tempfile::TempDir) {
    let (s, c, dir) = traced_like_untraced(bin, args);
    check_connection(&s, &c);
    for (side, client) in [(&s, false), (&c, true)] {
        let t = side.trace.as_ref().unwrap();
        assert!(t.clean);
        let r = replay(t, &p, client);
        if p.threshold == 1 {
            assert_eq!(
                (r.sends, r.wcs),
                (p.iters, 2 * p.iters),
                "{bin}: one QP, strictly alternating"
            );
        }
        // A QP posts its next send only after its previous send and receive completed, and
        // only while fewer than `iters` sends completed (all QPs together): every send posted
        // completed or was the one its QP still had outstanding when the loop ended, and at
        // the last post at most iters - 1 had completed and at most one per QP was out.
        let qps = t.qps().len();
        assert_eq!(r.sends, r.send_wcs + r.in_flight, "{bin}: sends accounted");
        assert!(
            (p.iters..p.iters + qps).contains(&r.sends),
            "{bin}: {} sends, iters {} and {qps} QPs",
            r.sends,
            p.iters
        );
        assert_eq!(t.sends().len(), r.sends);
    }
    (s, c, dir)
}

/// ibv_rc_pingpong's and ibv_uc_pingpong's defaults: 500 receives, refilled when one is left.
fn rc_like(
    bin: &str,
    args: &[&str],
    iters: usize,
    send_source: u8,
) -> (Side, Side, tempfile::TempDir) {
    let p = Pingpong {
        rx_depth: 500,
        iters,
        threshold: 1,
        send_bytes: 4096,
        recv_bytes: 4096,
        send_source,
        recv_source: post_source::POST_RECV,
    };
    pingpong(bin, args, p)
}

fn rc(args: &[&str], iters: usize, send_source: u8) -> (Side, Side, tempfile::TempDir) {
    rc_like("ibv_rc_pingpong", args, iters, send_source)
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

/// On-demand paging with prefetch (`-o -P`): the buffer is registered with
/// `IBV_ACCESS_ON_DEMAND` (softnic reports ODP for RC) and traced like any other region.
#[test]
fn ibv_rc_pingpong_on_demand_paging() {
    const IBV_ACCESS_ON_DEMAND: u32 = 1 << 6;
    let (s, c, _d) = rc(&["-o", "-P", "-n", "300"], 300, post_source::POST_SEND);
    for side in [&s, &c] {
        let t = side.trace.as_ref().unwrap();
        let mr = t.mrs()[0];
        assert_ne!(
            mr.hdr.aux & IBV_ACCESS_ON_DEMAND,
            0,
            "aux {:#x}",
            mr.hdr.aux
        );
        assert_eq!(mr.length, 4096);
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
        iters: 600,
        threshold: 4,
        send_bytes: 4096,
        recv_bytes: 4096,
        send_source: post_source::POST_SEND,
        recv_source: post_source::POST_SRQ_RECV,
    };
    let (s, c, _d) = pingpong("ibv_srq_pingpong", &["-q", "4", "-n", "600"], p);
    for side in [&s, &c] {
        let t = side.trace.as_ref().unwrap();
        assert_eq!(t.qps().len(), 4);
        let srq = t.qps()[0].srq;
        assert!(
            srq != 0 && t.qps().iter().all(|q| q.srq == srq),
            "all QPs share the SRQ"
        );
        assert!(t.recvs().iter().all(|r| r.srq == srq && r.qpn == 0));
        assert_eq!(
            t.recvs().len(),
            500 + 496,
            "500, then one refill of 496 when 4 are left (after 496 of the ~600 receives)"
        );
    }
}

#[test]
fn ibv_uc_pingpong() {
    let (s, c, _d) = rc_like(
        "ibv_uc_pingpong",
        &["-n", "300"],
        300,
        post_source::POST_SEND,
    );
    for side in [&s, &c] {
        let t = side.trace.as_ref().unwrap();
        assert_eq!(t.qps()[0].hdr.aux & 0xff, 3, "IBV_QPT_UC");
        assert_eq!(t.recvs().len(), 500, "no refill before 499 receives");
    }
}

/// A one-node program (`prog[0]` from /usr/bin) as node 7 of a fresh fabric, with `env`,
/// untraced and traced: exit status and timeout must be equal, the output identical (`exact`:
/// the device tools print no measurement) or of the same shape (digits masked). Returns the
/// untraced outcome and the traced log.
fn one_node(prog: &[&str], env: &[(&str, &str)], limit: Duration, exact: bool) -> (Out, Trace) {
    let run = |logs: Option<&Path>| {
        let dir = tempfile::tempdir().unwrap();
        let mut argv = vec![
            softnic_run().display().to_string(),
            "--node".into(),
            "7".into(),
            "--fabric".into(),
            dir.path().join("fabric").display().to_string(),
            "--".into(),
            system_bin(prog[0]),
        ];
        argv.extend(prog[1..].iter().map(|s| s.to_string()));
        let mut c = Cmd::new(&argv);
        for (k, v) in env {
            c = c.env(k, v);
        }
        match logs {
            Some(l) => c.traced(l),
            None => c,
        }
        .run(limit)
    };
    let plain = run(None);
    let logs = tempfile::tempdir().unwrap();
    let traced = run(Some(logs.path()));
    let text = |s: &str| match exact {
        true => vec![s.to_string()],
        false => shape(s),
    };
    let key = |o: &Out| (o.code, o.timed_out, text(&o.stdout), text(&o.stderr));
    assert_eq!(key(&traced), key(&plain), "{prog:?}: traced as untraced");
    (plain, only_log(logs.path()))
}

/// Kinds of the records other than string definitions and clock snapshots, in order.
fn kinds(t: &Trace) -> Vec<String> {
    t.order
        .iter()
        .filter(|(_, r)| !matches!(r, Rec::Def(..) | Rec::Snapshot(_)))
        .map(|(_, r)| match r {
            Rec::Other(name) => name.clone(),
            r => format!("{r:?}").split('(').next().unwrap().to_string(),
        })
        .collect()
}

const NODE7_GUID: u64 = 0x5346_4e00_0000_0007;

#[test]
fn ibv_devices() {
    let (out, t) = one_node(&["ibv_devices"], &[], LIMIT, true);
    assert!(out.ok(), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("    softnic0        \t{NODE7_GUID:016x}\n")),
        "{out:?}"
    );
    assert_eq!(
        t.attr("ibv_devices").as_deref(),
        Some("softnic0"),
        "the list it got"
    );
    assert!(kinds(&t).is_empty(), "it opens nothing: {:?}", kinds(&t));
}

/// ibv_devinfo -v opens the device, queries it and closes it: the log holds that device and
/// its port address (LID, GID 0) exactly as the program printed them.
fn devinfo(env: &[(&str, &str)], lid: u32, gid0: &str) -> Out {
    let (out, t) = one_node(&["ibv_devinfo", "-v"], env, LIMIT, true);
    assert!(out.ok(), "{out:?}");
    assert_eq!(kinds(&t), ["DeviceOpen", "DeviceClose"]);
    let d = t.devices()[0];
    assert_eq!((d.name_str(), d.guid), ("softnic0", NODE7_GUID));
    assert_eq!(
        t.attr("port_addr"),
        Some(format!(
            "context={:#x},port=1,lid={lid:#x},gid0={gid0}",
            d.context
        ))
    );
    assert!(
        out.stdout.contains(&format!("port_lid:\t\t{lid}\n")),
        "{out:?}"
    );
    out
}

#[test]
fn ibv_devinfo() {
    let out = devinfo(&[], 8, &format!("fe80000000000000{NODE7_GUID:016x}"));
    assert!(out.stdout.contains("link_layer:\t\tInfiniBand"), "{out:?}");
}

#[test]
fn roce_ibv_devinfo() {
    let env = [("SOFTNIC_LINK_LAYER", "ethernet")];
    let out = devinfo(&env, 0, "00000000000000000000ffff7f000107");
    assert!(out.stdout.contains("link_layer:\t\tEthernet"), "{out:?}");
    assert!(out.stdout.contains("::ffff:127.0.1.7, RoCE v2"), "{out:?}");
}

/// ibv_asyncwatch blocks in ibv_get_async_event until killed; softnic raises PORT_ACTIVE (9)
/// on port 1 when the device opens, which it prints and the log holds once.
#[test]
fn ibv_asyncwatch() {
    // Line-buffered so the event line is written before the kill. The event channel's FD
    // number differs traced (the log file is open), hence shapes.
    let prog = ["stdbuf", "-oL", "ibv_asyncwatch"];
    let (out, t) = one_node(&prog, &[], Duration::from_secs(5), false);
    assert!(out.timed_out, "ibv_asyncwatch exited: {out:?}");
    assert!(
        out.stdout
            .contains("event_type IBV_EVENT_PORT_ACTIVE (9), port 1"),
        "{out:?}"
    );
    assert_eq!(kinds(&t), ["DeviceOpen", "AsyncEvent"]);
    let ctx = t.devices()[0].context;
    let ev = t.all(|r| match r {
        Rec::AsyncEvent(e) => Some((e.hdr.aux, e.context, e.element)),
        _ => None,
    });
    assert_eq!(ev, [(9, ctx, 1)], "PORT_ACTIVE of port 1 on its context");
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
