//! The hot paths (a one-WR `ibv_post_send` recorded before its provider call, a one-completion
//! `ibv_poll_cq` and a one-WR `ibv_post_recv` recorded after it without a call) hand every case they cannot hold to the ordinary
//! recording, and nothing is lost or recorded twice: cprogs/hot_paths.c prints what its
//! device returned, and the log must say exactly that.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::time::Duration;

use sigmatrace_schemas::{drop_reason, LogFile, Record, RecordKind};

const LIMIT: Duration = Duration::from_secs(120);

fn hot_paths(args: &[&str]) -> Vec<String> {
    let mut v = vec![cprog("hot_paths").display().to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
}

/// Completions of every shape — vendor errors, immediate data, an invalidated rkey, a source
/// QP or flags the compact record cannot hold, flags it can, a QP on a second CQ, a QP not
/// seen yet, completions after empty polls (whose run must be written first), several per
/// poll, short ones (successful send-side ones without flags) next to ones that differ from
/// them in one field — are recorded exactly as the program got them, in order: every field
/// verbs defines. A short one's source QP and LID (receive-side fields, undefined for it) are
/// not recorded: 0; every receive keeps its own. A successful completion's vendor error
/// (defined only for failed ones) is not recorded either: 0, and it keeps the short or
/// compact form.
#[test]
fn every_completion_is_recorded_as_returned_whichever_path_takes_it() {
    let (out, t, _dir) = traced_run(&hot_paths(&["polls"]), &[], LIMIT);
    assert!(out.ok(), "{out:?}");
    let mut want = Vec::new();
    let mut empties: BTreeMap<u64, u64> = BTreeMap::new();
    for line in out.stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[0] {
            "wc" => {
                let mut n: Vec<u64> = w[2..].iter().map(|s| s.parse().unwrap()).collect();
                // [wr_id, status, opcode, vendor_err, byte_len, imm, qpn, src_qp, flags, slid]
                let short = n[2] < 128 && n[1] == 0 && n[8] == 0;
                if short {
                    (n[7], n[9]) = (0, 0);
                }
                if n[1] == 0 {
                    n[3] = 0;
                }
                want.push((hex(w[1]), n));
            }
            "empty" => *empties.entry(hex(w[1])).or_default() += 1,
            other => panic!("{other}"),
        }
    }
    assert_eq!(want.len(), 36, "{}", out.stdout);
    // The program got source QPs and LIDs on send-side completions (64, 65, 69): not recorded.
    let printed = |id: &str| out.stdout.lines().find(|l| l.split(' ').nth(2) == Some(id));
    assert!(printed("69")
        .unwrap()
        .ends_with(&format!(" {} 0 {}", 0xdead_beef_u32, 0x1234)));
    assert!(t.clean);
    let got: Vec<(u64, Vec<u64>)> = t
        .wcs()
        .iter()
        .map(|w| {
            let f = [
                w.wr_id,
                w.status as u64,
                w.opcode as u64,
                w.vendor_err as u64,
            ];
            let g = [w.byte_len, w.imm, w.qpn, w.src_qp, w.hdr.aux, w.slid as u32];
            (w.cq, f.into_iter().chain(g.map(u64::from)).collect())
        })
        .collect();
    assert_eq!(got, want);
    assert!(t.wcs().iter().all(|w| w.hw_ts == 0));
    let rec = |id: u64| t.wcs().into_iter().find(|w| w.wr_id == id).unwrap();
    for id in [64, 65, 69] {
        assert_eq!((rec(id).src_qp, rec(id).slid), (0, 0), "completion {id}");
    }
    assert_eq!((rec(11).src_qp, rec(11).slid), (0x77, 5));
    // The successful send-side completions without flags (ids 60, 61, 63–65, 67–70), and only
    // those, were written short (24 bytes).
    let log = LogFile::open(&t.path).unwrap();
    let short: Vec<u64> = (log.chunks().iter())
        .flat_map(|c| log.records(c).map(Result::unwrap))
        .filter(|r| r.bytes.len() == 24 && r.kind == RecordKind::WorkCompletion as u16)
        .map(|r| match r.decode().unwrap() {
            Record::WorkCompletion(w) => w.wr_id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(short, [60, 61, 63, 64, 65, 67, 68, 69, 70]);
    // The program got vendor errors on successful completions (17, 70): not recorded, and the
    // receive stayed compact (32 bytes).
    for (id, vendor_err) in [("17", "90"), ("70", "165")] {
        let line = printed(id).unwrap();
        assert_eq!(line.split(' ').nth(5), Some(vendor_err), "{line}");
    }
    let len_of = |id: u64| {
        (log.chunks().iter())
            .flat_map(|c| log.records(c).map(Result::unwrap))
            .find(|r| matches!(r.decode(), Ok(Record::WorkCompletion(w)) if w.wr_id == id))
            .map(|r| r.bytes.len())
    };
    assert_eq!(len_of(17), Some(32));
    // Every empty poll counted, and each run written before the completion that closed it.
    let mut runs: BTreeMap<u64, u64> = BTreeMap::new();
    let mut open: BTreeMap<u64, u64> = BTreeMap::new();
    let mut last = 0;
    for (_, r) in &t.order {
        match r {
            Rec::Empty(e) => {
                *runs.entry(e.cq).or_default() += e.count;
                open.insert(e.cq, e.ts);
            }
            Rec::Wc(w) => {
                if let Some(run_end) = open.remove(&w.cq) {
                    assert!(run_end <= w.ts, "a run written after a later completion");
                }
                assert!(w.ts >= last, "completions in time order");
                last = w.ts;
            }
            _ => {}
        }
    }
    assert_eq!(runs, empties);
    // The run of the first CQ came right before the completion that ended it.
    let pos = |f: &dyn Fn(&Rec) -> bool| t.order.iter().position(|(_, r)| f(r)).unwrap();
    let run = pos(&|r| matches!(r, Rec::Empty(_)));
    let closing = pos(&|r| matches!(r, Rec::Wc(w) if w.wr_id == 30));
    assert!(run < closing, "the run is written before completion 30");
}

/// A signal handler that posts and polls while the program's thread is inside the tracer
/// (its records are refused and counted) or inside a provider call whose record is placed
/// (the placed record is recorded again after it): over many chunks (16 KiB) and time bases,
/// the program's own records are all there, in order, and the handler's recorded events
/// plus the counted refusals are exactly what it did. (And the exit line with the background
/// thread's CPU time, at `SIGMATRACE_DIAG=info`.)
#[test]
fn a_signal_storm_loses_nothing_uncounted() {
    let n = 200_000u64;
    let argv = hot_paths(&["storm", &n.to_string()]);
    let env = [
        ("SIGMATRACE_CHUNK_BYTES", "16K"),
        ("SIGMATRACE_DIAG", "info"),
    ];
    let (out, t, _dir) = traced_run(&argv, &env, LIMIT);
    assert!(out.ok(), "{out:?}");
    // The exit line the overhead bench reads: the background thread drained ~780 chunks.
    let bg: Vec<f64> = out
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("sigmatrace: background thread CPU "))
        .map(|v| v.trim_end_matches(" s").parse().unwrap())
        .collect();
    assert!(
        bg.len() == 1 && bg[0] > 0.0 && bg[0] < 60.0,
        "{}",
        out.stderr
    );
    let line = out.stdout.lines().find(|l| l.starts_with("storm")).unwrap();
    let handler: u64 = line.split_whitespace().last().unwrap().parse().unwrap();
    assert!(handler >= 100, "{line}: the timer must interrupt the loop");
    assert!(t.clean);
    let (mine, theirs): (Vec<_>, Vec<_>) = t.sends().into_iter().partition(|s| s.wr_id < 1 << 40);
    let ids = |v: &[sigmatrace_schemas::PostSend]| v.iter().map(|s| s.wr_id).collect::<Vec<_>>();
    assert_eq!(
        ids(&mine),
        (0..n).collect::<Vec<_>>(),
        "the program's writes"
    );
    let wcs: Vec<u64> = t.wcs().iter().map(|w| w.wr_id).collect();
    assert_eq!(wcs, (0..n).collect::<Vec<_>>(), "the program's completions");
    // Receives (the hot receive path, after the provider call) the same way.
    let (my_recvs, their_recvs): (Vec<_>, Vec<_>) =
        t.recvs().into_iter().partition(|r| r.wr_id < 1 << 40);
    let recv_ids: Vec<u64> = my_recvs.iter().map(|r| r.wr_id).collect();
    assert_eq!(
        recv_ids,
        (0..n).collect::<Vec<_>>(),
        "the program's receives"
    );
    let mut handler_recvs: Vec<u64> = their_recvs.iter().map(|r| r.wr_id).collect();
    handler_recvs.sort_unstable();
    handler_recvs.dedup();
    assert_eq!(
        handler_recvs.len(),
        their_recvs.len(),
        "no handler receive twice"
    );
    assert!(handler_recvs.iter().all(|&id| id - (1 << 40) < handler));
    let mut handler_ids = ids(&theirs);
    handler_ids.sort_unstable();
    handler_ids.dedup();
    assert_eq!(handler_ids.len(), theirs.len(), "no handler write twice");
    assert!(handler_ids.iter().all(|&id| id - (1 << 40) < handler));
    let empty: u64 = t.empties().iter().map(|e| e.count).sum();
    let log = LogFile::open(&t.path).unwrap();
    let refused: u64 = log
        .chunks()
        .iter()
        .flat_map(|c| log.records(c))
        .filter_map(|r| match r.unwrap().decode().unwrap() {
            Record::Dropped(d) if d.hdr.aux == drop_reason::INTERNAL_ERROR => Some(d.count),
            _ => None,
        })
        .sum();
    assert_eq!(log.header().dropped, 0, "nothing dropped for room");
    assert_eq!(
        theirs.len() as u64 + their_recvs.len() as u64 + empty + refused,
        3 * handler,
        "{} handler writes, {} receives, {empty} empty polls, {refused} refused: the handler did \
         {handler} of each",
        theirs.len(),
        their_recvs.len()
    );
    eprintln!("{handler} handler runs: {refused} events refused (inside the tracer)");
}

/// Receive posts of every shape — one WR with one SGE (the hot path), several SGEs, several
/// WRs, no SGE, one the device refuses, another QP, an SRQ, enough to fill several 16 KiB
/// chunks — are
/// recorded exactly as the device accepted them, in order; the refused one as its error; the
/// hot ones in 24-byte compact records.
#[test]
fn every_receive_post_is_recorded_as_accepted_whichever_path_takes_it() {
    let env = [("SIGMATRACE_CHUNK_BYTES", "16K")];
    let (out, t, _dir) = traced_run(&hot_paths(&["recvs"]), &env, LIMIT);
    assert!(out.ok(), "{out:?}");
    let (mut want, mut fails) = (Vec::new(), Vec::new());
    for line in out.stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let n: Vec<u64> = w[2..].iter().map(|s| s.parse().unwrap()).collect();
        match w[0] {
            "recv" => want.push((hex(w[1]) as u32, n[0], n[1] as u32, n[2] as u16)),
            "fail" => fails.push((hex(w[1]) as u32, n[0], n[1] as u32)),
            other => panic!("{other}"),
        }
    }
    assert_eq!(want.len(), 2011, "{}", out.stdout);
    assert!(t.clean);
    let got: Vec<_> = (t.recvs().iter())
        .map(|r| (r.qpn, r.wr_id, r.bytes, r.num_sge))
        .collect();
    assert_eq!(got, want);
    // A third of the bulk went to the SRQ: QPN 0 and its handle.
    let srq: Vec<u64> = (t.recvs().iter())
        .filter(|r| r.qpn == 0)
        .map(|r| r.srq)
        .collect();
    assert_eq!(srq.len(), 666);
    assert!(srq.iter().all(|&h| h != 0 && h == srq[0]));
    assert!(t.recvs().iter().all(|r| (r.qpn == 0) == (r.srq != 0)));
    let errors: Vec<_> = (t.errors().iter())
        .map(|e| (e.qpn, e.bad_wr_id, e.hdr.aux))
        .collect();
    assert_eq!(errors, fails);
    assert!(t.recvs().windows(2).all(|w| w[0].ts <= w[1].ts));
    // The one-WR, one-SGE posts after their queue's first in each chunk went compact.
    let log = LogFile::open(&t.path).unwrap();
    let compact = (log.chunks().iter())
        .flat_map(|c| log.records(c).map(Result::unwrap))
        .filter(|r| r.kind == RecordKind::PostRecv as u16 && r.bytes.len() == 24)
        .count();
    assert!(log.chunks().len() >= 3, "{} chunks", log.chunks().len());
    assert!(compact >= 2000, "{compact} compact");
}

/// `ibv_wr_*` batches of every shape — one RDMA write with one SGE (the hot path: placed by
/// the opcode builder, published by `wr_complete`), no setter, a send, a read, inline data,
/// an SGE list, two and three WRs (placed one after the other; a poll between two of them),
/// 18 (more than are placed, and more than a batch keeps), two QPs' batches interleaved, a poll, a post, another QP's setter
/// (before or after the WR's own) or another QP's empty batch between a builder and its
/// `wr_complete` (or `wr_abort`), a refused and an aborted batch, flags or an
/// address without a compact form, immediate data, a time base out of reach, enough to fill
/// several 16 KiB chunks — are recorded exactly as the device accepted them at `wr_complete`,
/// in order (the refused batch as its `PostError`, the aborted one not at all), and the one-SGE
/// writes in 32-byte compact records.
#[test]
fn every_wr_batch_is_recorded_as_completed_whichever_path_takes_it() {
    use sigmatrace_schemas::post_source;
    let env = [("SIGMATRACE_CHUNK_BYTES", "16K")];
    let (out, t, _dir) = traced_run(&hot_paths(&["wrs"]), &env, LIMIT);
    assert!(out.ok(), "{out:?}");
    let (mut want, mut fails) = (Vec::new(), Vec::new());
    for line in out.stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let n: Vec<u64> = w[2..].iter().map(|s| s.parse().unwrap()).collect();
        match w[0] {
            // qpn, wr_id, opcode, flags, remote_addr, rkey, bytes, num_sge
            "wr" => want.push((hex(w[1]) as u32, n)),
            "wrfail" => fails.push((hex(w[1]) as u32, n[0], n[1] as u32)),
            "wc" | "empty" => {}
            other => panic!("{other}"),
        }
    }
    assert_eq!(want.len(), 25 + 3 + 18 + 2000, "{}", out.stdout);
    assert!(t.clean);
    let sends = t.sends();
    let got: Vec<_> = (sends.iter())
        .filter(|s| s.source == post_source::WR_API)
        .map(|s| {
            let f = [s.wr_id, s.opcode as u64, s.hdr.aux as u64, s.remote_addr];
            let g = [s.rkey as u64, s.bytes as u64, s.num_sge as u64];
            (s.qpn, f.into_iter().chain(g).collect::<Vec<_>>())
        })
        .collect();
    let first = got.iter().zip(&want).position(|(g, w)| g != w);
    assert!(
        first.is_none() && got.len() == want.len(),
        "{} recorded, {} accepted; first difference at {first:?}: {:?} / {:?}",
        got.len(),
        want.len(),
        first.map(|i| &got[i]),
        first.map(|i| &want[i])
    );
    // The one with immediate data kept it; no other has any, nor an atomic operand.
    let imm: Vec<(u64, u32)> = (sends.iter())
        .filter(|s| s.imm != 0 || s.compare_add != 0)
        .map(|s| (s.wr_id, s.imm))
        .collect();
    assert_eq!(imm, [(52, 7)]);
    let posts: Vec<u64> = (sends.iter())
        .filter(|s| s.source == post_source::POST_SEND)
        .map(|s| s.wr_id)
        .collect();
    assert_eq!(posts, [932, 933, 934]);
    let errors: Vec<_> = (t.errors().iter())
        .map(|e| (e.qpn, e.bad_wr_id, e.hdr.aux))
        .collect();
    assert_eq!(errors, fails);
    assert_eq!(fails.len(), 1);
    // The bulk's timestamps (each its builder's) in order, and those of the 18-WR batch.
    let bulk: Vec<u64> = (sends.iter())
        .filter(|s| (100..118).contains(&s.wr_id))
        .map(|s| s.ts)
        .collect();
    assert!(bulk.len() == 18 && bulk.windows(2).all(|w| w[0] <= w[1]));
    let bulk: Vec<u64> = (sends.iter())
        .filter(|s| s.wr_id >= 1000)
        .map(|s| s.ts)
        .collect();
    assert!(bulk.windows(2).all(|w| w[0] <= w[1]));
    let log = LogFile::open(&t.path).unwrap();
    let compact = (log.chunks().iter())
        .flat_map(|c| log.records(c).map(Result::unwrap))
        .filter(|r| r.kind == RecordKind::PostSend as u16 && r.bytes.len() == 32)
        .count();
    assert!(log.chunks().len() >= 4, "{} chunks", log.chunks().len());
    assert!(compact >= 2000, "{compact} compact");
}

/// A signal handler that posts a write and a receive, polls an empty CQ and builds and
/// completes a one-WR `ibv_wr_*` batch on another QP, while the program's thread builds one-WR
/// batches: inside the tracer (the handler's calls are refused and counted: six — the two
/// posts, the poll, the builder, the setter, `wr_complete`), between a placed WR's builder and its `wr_complete` (the
/// handler's records displace it; it is written by the ordinary path) or anywhere else. Over
/// many chunks the program's WRs are all there, once, in order, and the handler's runs are
/// either wholly recorded or wholly counted.
#[test]
fn a_signal_storm_over_wr_batches_loses_nothing_uncounted() {
    use sigmatrace_schemas::post_source;
    let n = 200_000u64;
    let env = [("SIGMATRACE_CHUNK_BYTES", "16K")];
    let (out, t, _dir) = traced_run(&hot_paths(&["wrstorm", &n.to_string()]), &env, LIMIT);
    assert!(out.ok(), "{out:?}");
    let line = (out.stdout.lines())
        .find(|l| l.starts_with("wrstorm"))
        .unwrap();
    let handler: u64 = line.split_whitespace().last().unwrap().parse().unwrap();
    assert!(handler >= 100, "{line}: the timer must interrupt the loop");
    assert!(t.clean);
    let sends = t.sends();
    let mine: Vec<u64> = (sends.iter())
        .filter(|s| s.wr_id < 1 << 40)
        .map(|s| {
            assert_eq!(
                (s.qpn, s.source, s.bytes, s.num_sge),
                (0x70, post_source::WR_API, 8, 1)
            );
            s.wr_id
        })
        .collect();
    assert_eq!(mine, (0..n).collect::<Vec<_>>(), "the program's batches");
    let wcs: Vec<u64> = t.wcs().iter().map(|w| w.wr_id).collect();
    assert_eq!(wcs, (0..n).collect::<Vec<_>>(), "the program's completions");
    let theirs = |source: u8| {
        let mut ids: Vec<u64> = (sends.iter())
            .filter(|s| s.wr_id >= 1 << 40 && s.source == source)
            .map(|s| s.wr_id - (1 << 40))
            .collect();
        let all = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), all, "no handler WR twice");
        assert!(ids.iter().all(|&id| id < handler));
        ids
    };
    let (posts, batches) = (theirs(post_source::POST_SEND), theirs(post_source::WR_API));
    assert_eq!(
        posts, batches,
        "each handler run recorded wholly or not at all"
    );
    let recvs: Vec<u64> = (t.recvs().iter()).map(|r| r.wr_id - (1 << 40)).collect();
    assert_eq!(recvs, posts);
    let empty: u64 = t.empties().iter().map(|e| e.count).sum();
    let log = LogFile::open(&t.path).unwrap();
    let refused: u64 = log
        .chunks()
        .iter()
        .flat_map(|c| log.records(c))
        .filter_map(|r| match r.unwrap().decode().unwrap() {
            Record::Dropped(d) if d.hdr.aux == drop_reason::INTERNAL_ERROR => Some(d.count),
            _ => None,
        })
        .sum();
    assert_eq!(log.header().dropped, 0, "nothing dropped for room");
    let free = posts.len() as u64;
    assert_eq!(empty, free, "{free} runs recorded");
    assert_eq!(
        refused,
        6 * (handler - free),
        "{handler} runs, {free} recorded"
    );
    eprintln!(
        "{handler} handler runs: {} inside the tracer",
        handler - free
    );
}
