//! Rings the program writes itself, on softnic's mlx5 direct queues: `cprogs/ibgda.c` posts
//! WQEs IBGDA-style (WQE in the ring, doorbell record, 8-byte doorbell) and polls CQEs straight
//! from the CQ ring, on a QP made through `mlx5dv_create_qp` + `mlx5dv_init_obj` or through
//! devx (umem, UAR, PRM CREATE_CQ/CREATE_QP, devx QP transitions). Under LD_PRELOAD the log
//! must describe both rings (`QueueDiscovered`), hold every WQE the program posted exactly once
//! with the content the program wrote (`WqeObserved`) and every CQE it consumed
//! (`CqeObserved`), and, when the poller is held off while the program laps the rings, count
//! exactly what it could not see (`ObserveOverrun`). The program's output is the same traced
//! and untraced, and libcuda is never loaded.

mod common;
use common::*;

use std::path::Path;
use std::time::Duration;

use sigmatrace_schemas::{
    cq_variant, discovery, mem_kind, qp_variant, queue_kind, CqeObserved, WqeObserved,
};

const LIMIT: Duration = Duration::from_secs(120);

struct Run {
    out: Out,
    trace: Option<Trace>,
}

/// Runs `ibgda MODE N DEPTH` on softnic (traced into `logs` if given). The double's directory
/// is on the loader path, so a tracer that loaded libcuda would find one.
fn ibgda(mode: &str, n: u32, depth: u32, logs: Option<&Path>) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let cuda = cuda_double_dir();
    let mut c = Cmd::new(&[
        softnic_run().display().to_string(),
        "--fabric".into(),
        dir.path().join("fabric").display().to_string(),
        "--".into(),
        cprog("ibgda").display().to_string(),
        mode.into(),
        n.to_string(),
        depth.to_string(),
    ])
    .env("LD_LIBRARY_PATH", &cuda.path().display().to_string());
    if let Some(l) = logs {
        c = c.traced(l);
    }
    let out = c.run(LIMIT);
    assert!(out.ok(), "ibgda {mode}: {out:?}");
    assert!(out.stdout.contains("libcuda absent"), "{}", out.stdout);
    let trace = logs.map(only_log);
    Run { out, trace }
}

/// The WQE fields the program printed: qpn idx opcode ds fm_ce_se bytes raddr rkey imm cmp.
fn posted(out: &str) -> Vec<[u64; 10]> {
    tagged(out, "W")
        .iter()
        .map(|f| std::array::from_fn(|i| num(&f[i])))
        .collect()
}

fn observed_wqe(w: &WqeObserved) -> [u64; 10] {
    [
        w.qpn as u64,
        w.wqe_index as u64,
        w.opcode as u64,
        w.ds as u64,
        w.fm_ce_se as u64,
        w.bytes as u64,
        w.remote_addr,
        w.rkey as u64,
        w.imm as u64,
        w.compare_add,
    ]
}

/// The CQE fields the program printed: cqn index wqe_counter opcode byte_cnt qpn.
fn consumed(out: &str) -> Vec<[u64; 6]> {
    tagged(out, "C")
        .iter()
        .map(|f| std::array::from_fn(|i| num(&f[i])))
        .collect()
}

fn observed_cqe(c: &CqeObserved) -> [u64; 6] {
    [
        c.cqn as u64,
        c.index as u64,
        c.wqe_counter as u64,
        c.opcode as u64,
        c.byte_cnt as u64,
        c.qpn as u64,
    ]
}

fn wqes(t: &Trace) -> Vec<WqeObserved> {
    t.all(|r| match r {
        Rec::Wqe(w) => Some(*w),
        _ => None,
    })
}

fn cqes(t: &Trace) -> Vec<CqeObserved> {
    t.all(|r| match r {
        Rec::Cqe(c) => Some(*c),
        _ => None,
    })
}

/// The posting QP's description the program printed (`A qpn=… sq=… wqebbs=… …`).
fn queue_a(out: &str) -> std::collections::HashMap<String, String> {
    let line = out.lines().find(|l| l.starts_with("A ")).expect("A line");
    fields(line)
}

/// Checks the QueueDiscovered records of A's send ring and CQ; returns (send, cq) aux words.
fn check_discovered(t: &Trace, a: &std::collections::HashMap<String, String>) -> (u32, u32) {
    let q = t.all(|r| match r {
        Rec::Queue(q) => Some(*q),
        _ => None,
    });
    let send = q
        .iter()
        .find(|q| q.hdr.aux & 0xff == queue_kind::SEND)
        .expect("send ring discovered");
    assert_eq!(send.number as u64, num(&a["qpn"]));
    assert_eq!(send.base, num(&a["sq"]));
    assert_eq!(send.depth as u64, num(&a["wqebbs"]));
    assert_eq!(send.dbrec, num(&a["dbrec"]));
    assert_eq!(send.stride, 64);
    let cq = q
        .iter()
        .find(|q| q.hdr.aux & 0xff == queue_kind::CQ)
        .expect("CQ discovered");
    assert_eq!(cq.number as u64, num(&a["cqn"]));
    assert_eq!(cq.base, num(&a["cq"]));
    assert_eq!(cq.depth as u64, num(&a["cqes"]));
    assert_eq!(cq.stride, 64);
    assert_eq!(send.cqn, cq.number, "the send ring completes to A's CQ");
    for aux in [send.hdr.aux, cq.hdr.aux] {
        assert_eq!((aux >> 8) & 0xff, mem_kind::HOST as u32, "host memory");
    }
    (send.hdr.aux, cq.hdr.aux)
}

/// Every WQE and CQE of the program, exactly once, in order, with its content.
fn check_exact(run: &Run, wqes_posted: usize) {
    let t = run.trace.as_ref().unwrap();
    let posted = posted(&run.out.stdout);
    assert_eq!(posted.len(), wqes_posted);
    let seen: Vec<[u64; 10]> = wqes(t).iter().map(observed_wqe).collect();
    assert_eq!(seen.len(), posted.len(), "every WQE observed exactly once");
    for (k, (s, p)) in seen.iter().zip(&posted).enumerate() {
        assert_eq!(s, p, "WQE #{k}");
    }
    assert!(wqes(t)
        .iter()
        .all(|w| w.observer == 0 && w.memory == mem_kind::HOST));
    let consumed = consumed(&run.out.stdout);
    let seen: Vec<[u64; 6]> = cqes(t).iter().map(observed_cqe).collect();
    assert_eq!(
        seen, consumed,
        "every CQE observed, in order, with its content"
    );
    assert_eq!(t.count(|r| matches!(r, Rec::Overrun(_))), 0);
    let stats = t.attr("host_poller").expect("poller counters at exit");
    assert!(
        stats.contains(&format!(",wqes:{wqes_posted},")) && stats.contains(",overruns:0,"),
        "{stats}"
    );
}

#[test]
fn init_obj_rings_every_wqe_and_cqe_observed_once() {
    let logs = tempfile::tempdir().unwrap();
    // 1500 WQEs of 8 opcodes (one of 3 WQEBBs) lap softnic's 512-WQEBB ring 3.6 times.
    let run = ibgda("initobj", 1500, 64, Some(logs.path()));
    let plain = ibgda("initobj", 1500, 64, None);
    assert_eq!(shape(&run.out.stdout), shape(&plain.out.stdout));
    assert_eq!(run.out.stderr, "");
    check_exact(&run, 1500);
    let t = run.trace.as_ref().unwrap();
    let a = queue_a(&run.out.stdout);
    let (send, cq) = check_discovered(t, &a);
    assert_eq!(send >> 16, discovery::INIT_OBJ);
    assert_eq!(cq >> 16, discovery::INIT_OBJ);
    let qps = t.qps();
    let qa = qps
        .iter()
        .find(|q| q.qpn as u64 == num(&a["qpn"]))
        .expect("QpCreate of A");
    assert_eq!(qa.hdr.aux >> 8, qp_variant::MLX5DV_CREATE_QP);
    assert!(t
        .cqs()
        .iter()
        .any(|c| c.hdr.aux == cq_variant::MLX5DV_CREATE_CQ));
    // Opcodes: write, write-imm, send, read, fetch-add, compare-swap, inline write, send-imm.
    let ops: std::collections::BTreeSet<u8> = wqes(t).iter().map(|w| w.opcode).collect();
    assert_eq!(
        ops.into_iter().collect::<Vec<_>>(),
        vec![0x08, 0x09, 0x0a, 0x0b, 0x10, 0x11, 0x12]
    );
    assert!(wqes(t).iter().any(|w| w.ds == 9), "3-WQEBB inline WQEs");
}

#[test]
fn devx_umem_rings_every_wqe_and_cqe_observed_once() {
    let logs = tempfile::tempdir().unwrap();
    // A 64-WQEBB ring and a 64-entry CQ, lapped many times.
    let run = ibgda("devx", 600, 64, Some(logs.path()));
    check_exact(&run, 600);
    let t = run.trace.as_ref().unwrap();
    let a = queue_a(&run.out.stdout);
    let (send, cq) = check_discovered(t, &a);
    assert_eq!(send >> 16, discovery::DEVX);
    assert_eq!(cq >> 16, discovery::DEVX);
    let uar = t
        .all(|r| match r {
            Rec::Queue(q) if q.hdr.aux & 0xff == queue_kind::UAR => Some(*q),
            _ => None,
        })
        .pop()
        .expect("UAR discovered");
    assert_eq!(
        uar.doorbell,
        uar.base + 0x800,
        "softnic: reg_addr = page + 0x800"
    );
    // The devx QP and CQ also appear as control records, with the connection.
    let qpn_a = num(&a["qpn"]) as u32;
    let qps = t.qps();
    let qa = qps.iter().find(|q| q.qpn == qpn_a).expect("devx QpCreate");
    assert_eq!(qa.hdr.aux, 2 | qp_variant::DEVX << 8, "RC, devx");
    assert_eq!(qa.max_send_wr, 64);
    let qpn_b = qps.iter().find(|q| q.qpn != qpn_a).expect("B").qpn;
    assert!(t
        .cqs()
        .iter()
        .any(|c| c.hdr.aux == cq_variant::DEVX && c.cqe == 64));
    let mods = t.modifies();
    let rtr = |qpn: u32| {
        mods.iter()
            .find(|m| m.qpn == qpn && m.new_state == 2)
            .unwrap_or_else(|| panic!("RTR of {qpn}"))
    };
    assert_eq!(rtr(qpn_a).dest_qpn, qpn_b, "devx INIT2RTR: remote QPN");
    assert_eq!(rtr(qpn_b).dest_qpn, qpn_a);
    assert_eq!(rtr(qpn_a).dlid, rtr(qpn_b).dlid, "same port, same LID");
    assert_eq!(rtr(qpn_a).rq_psn, 0x77);
    let rts = mods
        .iter()
        .find(|m| m.qpn == qpn_a && m.new_state == 3)
        .expect("devx RTR2RTS");
    assert_eq!(rts.sq_psn, 0x77);
    assert!(mods.iter().any(|m| m.qpn == qpn_a && m.new_state == 1));
    assert_eq!(
        t.count(
            |r| matches!(r, Rec::QpDestroy(d) if d.qpn == qpn_a && d.result == 0 && d.qp == qa.qp)
        ),
        1,
        "devx destroy"
    );
    assert_eq!(
        t.count(|r| matches!(r, Rec::Other(n) if n == "CqDestroy")),
        2,
        "devx CQ and B's CQ"
    );
}

#[test]
fn a_forced_overrun_is_counted_exactly() {
    let logs = tempfile::tempdir().unwrap();
    // With the poller paused, 4 x 512 signaled writes lap the ring and the 128-entry CQ.
    let run = ibgda("overrun", 0, 64, Some(logs.path()));
    let t = run.trace.as_ref().unwrap();
    let posted = posted(&run.out.stdout);
    let consumed = consumed(&run.out.stdout);
    assert_eq!(
        posted.len(),
        4 * num(&queue_a(&run.out.stdout)["wqebbs"]) as usize
    );
    assert_eq!(consumed.len(), posted.len(), "every write signaled");
    let overruns = t.all(|r| match r {
        Rec::Overrun(o) => Some(*o),
        _ => None,
    });
    assert!(
        overruns.iter().all(|o| o.hdr.aux & 0x100 == 0),
        "exact, not estimated"
    );
    let lost = |kind: u32| -> u64 {
        overruns
            .iter()
            .filter(|o| o.hdr.aux & 0xff == kind)
            .map(|o| o.lost)
            .sum()
    };
    let (wqe_lost, cqe_lost) = (lost(queue_kind::SEND), lost(queue_kind::CQ));
    let seen: Vec<[u64; 10]> = wqes(t).iter().map(observed_wqe).collect();
    assert!(
        wqe_lost > 0 && cqe_lost > 0,
        "lost {wqe_lost} WQEs, {cqe_lost} CQEs"
    );
    assert_eq!(
        seen.len() as u64 + wqe_lost,
        posted.len() as u64,
        "never a silent miss"
    );
    assert_eq!(cqes(t).len() as u64 + cqe_lost, consumed.len() as u64);
    // What was seen is what was posted, in order (a subsequence).
    let mut it = posted.iter();
    for s in &seen {
        assert!(
            it.any(|p| p == s),
            "observed WQE {s:?} was not posted in this order"
        );
    }
    let mut it = consumed.iter();
    for c in cqes(t).iter().map(observed_cqe) {
        assert!(
            it.any(|p| *p == c),
            "observed CQE {c:?} not consumed in this order"
        );
    }
    let stats = t.attr("host_poller").expect("poller counters");
    assert!(
        stats.contains(&format!(",wqebbs_lost:{wqe_lost},")),
        "{stats}"
    );
}

#[test]
fn a_fork_child_gets_its_own_poller_and_log() {
    let logs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = Cmd::new(&[
        softnic_run().display().to_string(),
        "--fabric".into(),
        dir.path().join("fabric").display().to_string(),
        "--".into(),
        cprog("ibgda").display().to_string(),
        "fork".into(),
        "200".into(),
        "64".into(),
    ])
    .traced(logs.path())
    .run(LIMIT);
    assert!(out.ok(), "{out:?}");
    let child_pid = num(&fields(
        out.stderr
            .lines()
            .find(|l| l.starts_with("child "))
            .expect("child line"),
    )["pid"]) as u32;
    let traces: Vec<Trace> = logs_in(logs.path())
        .iter()
        .map(|p| Trace::open(p))
        .collect();
    assert_eq!(traces.len(), 2, "parent and child logs");
    let (child, parent): (Vec<&Trace>, Vec<&Trace>) =
        traces.iter().partition(|t| t.pid() == child_pid);
    let (child, parent) = (child[0], parent[0]);
    // The parent's poller saw exactly the parent's WQEs (the child's went to its own copy of
    // the ring), before and after the fork.
    let p_seen: Vec<[u64; 10]> = wqes(parent).iter().map(observed_wqe).collect();
    assert_eq!(p_seen, posted(&out.stdout));
    assert_eq!(p_seen.len(), 200);
    // The child discovered the queue again (fresh state), started its own poller and saw its 50.
    let c_seen: Vec<[u64; 10]> = wqes(child).iter().map(observed_wqe).collect();
    let c_posted = posted(&out.stderr);
    assert_eq!(c_posted.len(), 50);
    assert_eq!(c_seen, c_posted);
    assert_eq!(child.count(|r| matches!(r, Rec::Queue(_))), 2);
    assert!(
        child.order.iter().all(|(tid, _)| *tid != parent.pid()),
        "no parent writer used"
    );
}
