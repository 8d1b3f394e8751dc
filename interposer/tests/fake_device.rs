//! The interposer on a program that carries its own no-op provider (cprogs/fake_verbs.c): every
//! data-path hook, the ibv_wr_* and ibv_cq_ex paths, threads, fork, exec, the panic guard,
//! unwritable directories, the size cap and the trace categories — no device or softnic
//! needed. The scenario and its expected records are spelled out in fake_verbs.c.

mod common;
use common::*;

use std::time::Duration;

use sigmatrace_schemas::{
    cq_event_kind, cq_variant, post_source, qp_variant, PostSend, RecordKind, WorkCompletion,
};

const LIMIT: Duration = Duration::from_secs(60);
const FAIL_ID: u64 = 0xdead;
const EINVAL: u32 = 22;
const ENOMEM: u32 = 12;
// ibv_wr_opcode / ibv_wc_opcode / ibv_send_flags values (verbs.h).
const WR_RDMA_WRITE: u8 = 0;
const WR_SEND_WITH_IMM: u8 = 3;
const WR_SEND: u8 = 2;
const WR_FETCH_ADD: u8 = 6;
const WC_SEND: u8 = 0;
const WC_RDMA_WRITE: u8 = 1;
const SIGNALED: u32 = 2;

fn fake(args: &[&str]) -> Vec<String> {
    let mut v = vec![cprog("fake_verbs").display().to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

/// Runs `args` untraced and traced; both must succeed with identical output.
fn both(args: &[&str], log_dir: &std::path::Path) -> Out {
    let plain = Cmd::new(&fake(args)).run(LIMIT);
    assert!(plain.ok(), "untraced {args:?}: {plain:?}");
    let traced = Cmd::new(&fake(args)).traced(log_dir).run(LIMIT);
    assert!(traced.ok(), "traced {args:?}: {traced:?}");
    assert_eq!(plain.stderr, traced.stderr, "stderr differs for {args:?}");
    if args[0] != "fork" {
        assert_eq!(plain.stdout, traced.stdout, "stdout differs for {args:?}");
    }
    traced
}

#[test]
fn basic_scenario_is_recorded_exactly() {
    let dir = tempfile::tempdir().unwrap();
    both(&["basic"], dir.path());
    let t = only_log(dir.path());
    assert!(t.clean);

    let dev = t.devices();
    assert_eq!(dev.len(), 1);
    assert_eq!(dev[0].name_str(), "fakedev0");

    let s = basic_sends(&t);
    basic_errors_and_receives(&t, &s);
    let wc = basic_completions(&t, &s);
    basic_objects(&t, &s, &wc);
}

/// The accepted WRs of the basic scenario: a chain of three and a UD send through
/// ibv_post_send, then an ibv_wr_* batch.
fn basic_sends(t: &Trace) -> Vec<PostSend> {
    let s = t.sends();
    let ids: Vec<u64> = s.iter().map(|w| w.wr_id).collect();
    assert_eq!(
        ids,
        vec![1, 2, 3, 4, 5, 20, 21],
        "every accepted WR, in order"
    );
    // The chain of three through ibv_post_send.
    assert_eq!(
        (
            s[0].opcode,
            s[0].bytes,
            s[0].remote_addr,
            s[0].rkey,
            s[0].hdr.aux
        ),
        (WR_RDMA_WRITE, 100, 0x1000, 0x11, SIGNALED)
    );
    assert_eq!(
        (s[1].opcode, s[1].bytes, s[1].num_sge, s[1].imm),
        (WR_SEND_WITH_IMM, 30, 2, 0xabcd)
    );
    assert_eq!(
        (
            s[2].opcode,
            s[2].remote_addr,
            s[2].rkey,
            s[2].compare_add,
            s[2].hdr.aux
        ),
        (WR_FETCH_ADD, 0x2000, 0x22, 5, 0)
    );
    assert_eq!((s[3].opcode, s[3].bytes), (WR_SEND, 7));
    assert!(
        s[..3].iter().all(|w| w.ts == s[0].ts),
        "one post call, one timestamp"
    );
    // UD: AH handle, remote QPN and qkey.
    assert_eq!(
        (s[4].remote_addr, s[4].rkey, s[4].compare_add),
        (0x5000, 0x77, 0x1111_1111)
    );
    assert_eq!(s[4].qpn, s[0].qpn + 1);
    assert!(s[..5].iter().all(|w| w.source == post_source::POST_SEND));
    // The ibv_wr_* batch.
    assert!(s[5..].iter().all(|w| w.source == post_source::WR_API));
    assert_eq!(
        (
            s[5].opcode,
            s[5].bytes,
            s[5].rkey,
            s[5].remote_addr,
            s[5].hdr.aux
        ),
        (WR_RDMA_WRITE, 4096, 0x33, 0x3000, SIGNALED)
    );
    assert_eq!(
        (s[6].opcode, s[6].bytes, s[6].imm),
        (WR_SEND_WITH_IMM, 16, 7)
    );
    s
}

/// The three failed posts (post_send, post_srq_recv, an ibv_wr_* batch) and the receives.
fn basic_errors_and_receives(t: &Trace, s: &[PostSend]) {
    let e = t.errors();
    assert_eq!(e.len(), 3);
    assert_eq!(
        (e[0].hdr.aux, e[0].bad_wr_id, e[0].source),
        (EINVAL, FAIL_ID, post_source::POST_SEND)
    );
    assert_eq!(
        (e[1].hdr.aux, e[1].bad_wr_id, e[1].source, e[1].qpn),
        (ENOMEM, FAIL_ID, post_source::POST_SRQ_RECV, 0)
    );
    assert_eq!(
        (e[2].hdr.aux, e[2].bad_wr_id, e[2].source),
        (EINVAL, 22, post_source::WR_API),
        "failed batch names its first WR"
    );

    let r = t.recvs();
    let rids: Vec<(u64, u32, u8)> = r.iter().map(|w| (w.wr_id, w.bytes, w.source)).collect();
    assert_eq!(
        rids,
        vec![
            (10, 256, post_source::POST_RECV),
            (11, 256, post_source::POST_RECV),
            (12, 512, post_source::POST_SRQ_RECV)
        ]
    );
    assert_eq!(r[0].qpn, s[0].qpn);
    assert!(r[2].srq != 0 && r[2].srq == e[1].object);
}

/// The completions, those of the extended CQ with their timestamps.
fn basic_completions(t: &Trace, s: &[PostSend]) -> Vec<WorkCompletion> {
    let wc = t.wcs();
    let w: Vec<(u64, u8, u32)> = wc.iter().map(|c| (c.wr_id, c.opcode, c.byte_len)).collect();
    assert_eq!(
        w,
        vec![
            (1, WC_RDMA_WRITE, 100),
            (2, WC_SEND, 30),
            (4, WC_SEND, 7),
            (20, WC_RDMA_WRITE, 4096),
            (21, WC_SEND, 16)
        ]
    );
    assert!(wc[..3].iter().all(|c| c.hw_ts == 0 && c.qpn == s[0].qpn));
    assert_eq!(
        (wc[3].hw_ts, wc[4].hw_ts),
        (1020, 1021),
        "completion timestamps read through the CQ"
    );
    assert!(wc[3..].iter().all(|c| c.qpn == s[5].qpn));
    wc
}

/// Empty polls, CQ events, the CQ and QP objects, and the exit snapshot.
fn basic_objects(t: &Trace, s: &[PostSend], wc: &[WorkCompletion]) {
    // Empty polls: 5 before any work, 3 on the extended CQ, 1 at the end (flushed at exit).
    let em: Vec<u64> = t.empties().iter().map(|e| e.count).collect();
    assert_eq!(em, vec![5, 3, 1]);
    assert_eq!(t.empties()[0].cq, wc[0].cq);
    assert_eq!(t.empties()[1].cq, wc[3].cq);

    let ev = t.cq_events();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].hdr.aux, ev[0].arg, ev[0].result, ev[0].cq),
        (cq_event_kind::REQ_NOTIFY, 1, 0, wc[0].cq)
    );

    let cq = t.cqs();
    assert_eq!(cq.len(), 1);
    assert_eq!(
        (cq[0].hdr.aux, cq[0].wc_flags, cq[0].cqe, cq[0].cq),
        (cq_variant::CREATE_CQ_EX, 0x85, 64, wc[3].cq)
    );
    let qp = t.qps();
    assert_eq!(qp.len(), 1);
    assert_eq!(
        qp[0].hdr.aux,
        2 | (qp_variant::CREATE_QP_EX << 8),
        "RC, ibv_create_qp_ex"
    );
    assert_eq!((qp[0].qpn, qp[0].max_send_wr), (s[5].qpn, 16));
    assert!(
        matches!(t.order.last(), Some((_, Rec::Snapshot(_)))),
        "exit snapshot last"
    );
}

#[test]
fn every_thread_writes_its_own_chunk_and_no_wr_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let out = both(&["threads", "4", "500"], dir.path());
    assert!(out.stdout.contains("sends=2000"));
    let t = only_log(dir.path());
    let mut by_qpn =
        std::collections::BTreeMap::<u32, (Vec<u64>, usize, std::collections::BTreeSet<u32>)>::new(
        );
    for (tid, r) in &t.order {
        match r {
            Rec::PostSend(s) => {
                let e = by_qpn.entry(s.qpn).or_default();
                e.0.push(s.wr_id);
                e.2.insert(*tid);
            }
            Rec::Wc(c) => by_qpn.entry(c.qpn).or_default().1 += 1,
            _ => {}
        }
    }
    assert_eq!(by_qpn.len(), 4);
    let mut tids = std::collections::BTreeSet::new();
    for (qpn, (ids, wcs, t)) in &by_qpn {
        assert_eq!(
            ids,
            &(0..500).collect::<Vec<u64>>(),
            "QP {qpn:#x}: every WR, in order"
        );
        assert_eq!(*wcs, 500);
        assert_eq!(t.len(), 1, "one QP, one thread");
        tids.extend(t.iter().copied());
    }
    assert_eq!(tids.len(), 4, "four writer threads");
}

#[test]
fn a_fork_child_gets_its_own_log_and_the_parents_stays_intact() {
    let dir = tempfile::tempdir().unwrap();
    let out = both(&["fork", "10"], dir.path());
    let child: u32 = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("child "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let logs = logs_in(dir.path());
    assert_eq!(logs.len(), 2, "{logs:?}");
    let traces: Vec<Trace> = logs.iter().map(|p| Trace::open(p)).collect();
    let c = traces.iter().find(|t| t.pid() == child).expect("child log");
    let p = traces
        .iter()
        .find(|t| t.pid() != child)
        .expect("parent log");
    assert_eq!(c.header.as_ref().unwrap().ppid, p.pid());
    let ids = |t: &Trace| t.sends().iter().map(|s| s.wr_id).collect::<Vec<_>>();
    assert_eq!(
        ids(c),
        (0..11).collect::<Vec<u64>>(),
        "child: its 11 WRs only"
    );
    let mut want: Vec<u64> = (0..10).collect();
    want.extend(0..12);
    assert_eq!(
        ids(p),
        want,
        "parent: 10 before the fork, 12 after, none of the child's"
    );
    assert!(p.clean && c.clean);
    assert!(c.chunk_pids.iter().all(|&x| x == child));
    assert!(
        p.chunk_pids.iter().all(|&x| x == p.pid()),
        "the child never wrote into the parent's file"
    );
    // The child left with _exit: no exit snapshot, yet every committed record is there.
    assert!(!matches!(c.order.last(), Some((_, Rec::Snapshot(_)))));
}

#[test]
fn exec_starts_a_second_log_for_the_same_pid() {
    let dir = tempfile::tempdir().unwrap();
    both(&["exec", "5"], dir.path());
    let logs = logs_in(dir.path());
    assert_eq!(logs.len(), 2, "{logs:?}");
    let names: Vec<String> = logs
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        names[0].ends_with("-0.sigmalog") && names[1].ends_with("-1.sigmalog"),
        "{names:?}"
    );
    let (a, b) = (Trace::open(&logs[0]), Trace::open(&logs[1]));
    assert_eq!(a.pid(), b.pid());
    assert_eq!((a.sends().len(), b.sends().len()), (5, 6));
}

#[test]
fn a_process_killed_by_a_signal_leaves_every_committed_record() {
    let (out, t, _dir) = traced_run(&fake(&["killed", "3000"]), &[], LIMIT);
    assert_eq!(out.code, None, "killed by SIGKILL: {out:?}");
    assert!(t.clean, "nothing torn");
    assert_eq!(
        t.sends().iter().map(|s| s.wr_id).collect::<Vec<_>>(),
        (0..3000).collect::<Vec<u64>>()
    );
    assert_eq!(t.wcs().len(), 3000);
}

#[test]
fn a_panic_inside_a_hook_disables_tracing_with_one_line_and_changes_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Cmd::new(&fake(&["basic"])).run(LIMIT);
    let traced = Cmd::new(&fake(&["basic"]))
        .traced(dir.path())
        .env("SIGMATRACE_DEBUG_PANIC", "post_send")
        .run(LIMIT);
    assert!(traced.ok(), "{traced:?}");
    assert_eq!(plain.stdout, traced.stdout);
    let t = only_log(dir.path());
    if cfg!(debug_assertions) {
        let lines: Vec<&str> = traced.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{:?}", traced.stderr);
        assert!(
            lines[0]
                .starts_with("sigmatrace: tracing disabled: internal error in the post_send hook"),
            "{}",
            lines[0]
        );
        assert_eq!(t.devices().len(), 1, "recorded until the panic");
        assert_eq!(
            t.sends().len() + t.wcs().len() + t.recvs().len(),
            0,
            "nothing after it"
        );
    } else {
        // Release builds ignore the knob.
        assert_eq!(traced.stderr, plain.stderr);
        assert_eq!(t.sends().len(), 7);
    }
}

#[test]
fn an_unwritable_directory_disables_tracing_with_one_line() {
    let plain = Cmd::new(&fake(&["basic"])).run(LIMIT);
    let traced = Cmd::new(&fake(&["basic"]))
        .traced(std::path::Path::new("/dev/null/sigmatrace"))
        .run(LIMIT);
    assert!(traced.ok(), "{traced:?}");
    assert_eq!(plain.stdout, traced.stdout);
    let lines: Vec<&str> = traced.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{:?}", traced.stderr);
    assert!(
        lines[0].contains("cannot create directory /dev/null/sigmatrace"),
        "{}",
        lines[0]
    );
}

#[test]
fn the_size_cap_stops_recording_and_counts_every_drop() {
    let dir = tempfile::tempdir().unwrap();
    let out = Cmd::new(&fake(&["post", "2000"]))
        .traced(dir.path())
        .env("SIGMATRACE_MAX_BYTES", "64K")
        .env("SIGMATRACE_CHUNK_BYTES", "16K")
        .env("SIGMATRACE_SNAPSHOT_MS", "60000")
        .run(LIMIT);
    assert!(out.ok() && out.stderr.is_empty(), "{out:?}");
    let t = only_log(dir.path());
    assert!(t.clean);
    // The one loss marker (a count-0 Dropped record) is not an event of the program.
    let markers = t.count(|r| matches!(r, Rec::Other(k) if k == "Dropped"));
    assert_eq!(markers, 1);
    let written = t.order.len() as u64 - markers as u64;
    let dropped = t.header.as_ref().unwrap().dropped;
    assert!(dropped > 0 && written < 4000);
    // DeviceOpen + 2000 PostSend + 2000 WorkCompletion + the exit snapshot.
    assert_eq!(
        written + dropped,
        4002,
        "written {written} + dropped {dropped}"
    );
    // Per kind, exactly.
    let losses = sigmatrace_schemas::LogFile::open(&t.path).unwrap().losses();
    let kind = |k: RecordKind| losses.of(k as u16);
    assert_eq!(t.sends().len() as u64 + kind(RecordKind::PostSend), 2000);
    assert_eq!(
        t.wcs().len() as u64 + kind(RecordKind::WorkCompletion),
        2000
    );
    assert!(losses.first_ts.is_some());
    let ids: Vec<u64> = t.sends().iter().map(|s| s.wr_id).collect();
    assert_eq!(
        ids,
        (0..ids.len() as u64).collect::<Vec<_>>(),
        "a prefix, nothing torn"
    );
}

#[test]
fn disable_forwards_everything_untraced() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("never");
    let out = Cmd::new(&fake(&["basic"]))
        .traced(&log_dir)
        .env("SIGMATRACE_DISABLE", "1")
        .run(LIMIT);
    assert!(out.ok() && out.stderr.is_empty(), "{out:?}");
    assert!(!log_dir.exists(), "no log directory when disabled");
}

#[test]
fn trace_categories_select_records() {
    let dir = tempfile::tempdir().unwrap();
    let out = Cmd::new(&fake(&["basic"]))
        .traced(dir.path())
        .env("SIGMATRACE_TRACE", "send")
        .run(LIMIT);
    assert!(out.ok(), "{out:?}");
    let t = only_log(dir.path());
    assert_eq!(t.sends().len(), 7);
    assert_eq!(
        t.errors()
            .iter()
            .filter(|e| e.source != post_source::POST_SRQ_RECV)
            .count(),
        2
    );
    let others = t.count(|r| !matches!(r, Rec::PostSend(_) | Rec::PostError(_) | Rec::Snapshot(_)));
    assert_eq!(others, 0, "only send-side records");
}

#[test]
fn rtld_next_and_versioned_lookups_keep_their_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let out = both(&["dlsym"], dir.path());
    assert!(out.stdout.contains("dlvsym 1.1"), "{out:?}");
}

/// `cqx N`: the CQ lines the program printed: (QPN, wr_id) per CQ.
fn cq_lines(stdout: &str) -> Vec<(u32, u64)> {
    tagged(stdout, "cq")
        .iter()
        .map(|f| (num(&f[2]) as u32, num(&f[4])))
        .collect()
}

#[test]
fn extended_cqs_beyond_eight_tables_are_traced_and_completions_without_qp_num_find_their_qp() {
    let dir = tempfile::tempdir().unwrap();
    let out = both(&["cqx", "12"], dir.path());
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let printed = cq_lines(&out.stdout);
    assert_eq!(printed.len(), 12);
    let t = only_log(dir.path());
    let cqs = t.cqs();
    assert_eq!(cqs.len(), 12);
    let flags: std::collections::BTreeSet<u64> = cqs.iter().map(|c| c.wc_flags).collect();
    assert_eq!(flags.len(), 12, "twelve distinct wc_flags sets");
    assert!(
        cqs.iter().all(|c| c.wc_flags & 4 == 0),
        "no IBV_WC_EX_WITH_QP_NUM"
    );
    let wcs = t.wcs();
    let got: Vec<(u32, u64)> = wcs.iter().map(|w| (w.qpn, w.wr_id)).collect();
    assert_eq!(got, printed, "every completion recorded, on its own QP");
    // Each completion belongs to the CQ its QP was created with.
    let qps = t.qps();
    for (w, c) in wcs.iter().zip(&cqs) {
        assert_eq!(w.cq, c.cq);
        assert!(qps.iter().any(|q| q.qpn == w.qpn));
        let attr = format!("qpn={:#x},send_cq={:#x},recv_cq={:#x}", w.qpn, c.cq, c.cq);
        assert!(
            t.defs(sigmatrace_schemas::string_ns::PROCESS_ATTR)
                .iter()
                .any(|(_, s)| s.starts_with("qp_cq=") && s.contains(&attr)),
            "qp_cq attribute for {attr}"
        );
    }
}

#[test]
fn extended_cq_tables_beyond_the_limit_are_reported_at_the_default_level() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Cmd::new(&fake(&["cqx", "70"])).run(LIMIT);
    let traced = Cmd::new(&fake(&["cqx", "70"]))
        .traced(dir.path())
        .run(LIMIT);
    assert!(plain.ok() && traced.ok(), "{traced:?}");
    assert_eq!(plain.stdout, traced.stdout);
    let lines: Vec<&str> = traced.stderr.lines().collect();
    assert_eq!(lines.len(), 6, "one line per untraced CQ: {lines:?}");
    assert!(lines.iter().all(|l| l.contains("more than 64 distinct")));
    let t = only_log(dir.path());
    assert_eq!(t.wcs().len(), 64, "the first 64 CQs are traced");
}
