//! Where ranks wait, on real programs (used by real_timelines.rs): the report's waits are the
//! logs' empty-poll runs, each charged to the peer whose completion ended it, and `--detail
//! full` draws every run as a slice at its recorded times.

use std::collections::BTreeMap;
use std::path::Path;

use sigmatrace_convert::model::emit::Detail;
use sigmatrace_convert::report::Waits;
use sigmatrace_convert::ConvertOptions;
use sigmatrace_schemas::reader::LogFile;
use sigmatrace_schemas::records::Record;

use super::{execute, pingpong};

/// Each log's empty-poll runs: per CQ, (runs, polls, first and last poll of each run).
type Runs = BTreeMap<u64, (u64, u64, Vec<(u64, u64)>)>;

fn runs_of(log: &Path) -> Runs {
    let f = LogFile::open(log).unwrap();
    let mut out = Runs::new();
    for c in f.chunks() {
        for r in f.records(c) {
            if let Ok(Record::EmptyPolls(e)) = r.unwrap().decode() {
                let x = out.entry(e.cq).or_default();
                x.0 += 1;
                x.1 += e.count;
                x.2.push((e.first_ts, e.ts));
            }
        }
    }
    out
}

/// ibv_rc_pingpong (rdma-core's, unmodified) busy-polls its one CQ for each message of the
/// other side: the report's waits per (process, CQ) are exactly the log's runs — count,
/// polls, and time as the converter maps each run's first and last poll — and every wait is
/// charged to the other process (the only peer whose completions end a run), but a run that
/// no completion followed. `--detail full` draws one "empty polls" slice per run.
#[test]
fn rc_pingpong_waits_are_its_empty_poll_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs, _) = execute(pingpong("ibv_rc_pingpong", "", 500), tmp.path(), false);
    let report =
        sigmatrace_convert::stats(std::slice::from_ref(&logs), &ConvertOptions::default()).unwrap();
    let waits = report.section::<Waits>().expect("a waits section");
    let procs = &report.topology.procs;
    assert_eq!(procs.len(), 2);
    let mut all_runs = 0;
    for p in procs {
        let logged = runs_of(&p.path);
        assert!(
            !logged.is_empty(),
            "{}: busy-polling leaves empty polls",
            p.label()
        );
        let other = 1 - p.index;
        for (&cq, (runs, polls, spans)) in &logged {
            let w = &waits.cqs[&(p.index, cq)];
            let ns: u64 = spans
                .iter()
                .map(|&(a, b)| (p.time(b) - p.time(a)) as u64)
                .sum();
            assert_eq!(
                (w.runs, w.polls, w.ns),
                (*runs, *polls, ns),
                "{} CQ {cq:#x}",
                p.label()
            );
            let charged: u64 = w.by_peer.values().sum();
            assert_eq!(charged, ns, "every wait charged once");
            let to_other = w.by_peer.get(&Some(other)).copied().unwrap_or(0);
            assert!(to_other > 0, "{}: {:?}", p.label(), w.by_peer);
            assert!(
                w.by_peer.keys().all(|k| *k == Some(other) || k.is_none()),
                "{}: {:?}",
                p.label(),
                w.by_peer
            );
            // At most the last run of the CQ goes uncharged (nothing completed after it).
            let last = spans
                .iter()
                .map(|&(a, b)| (p.time(b) - p.time(a)) as u64)
                .max();
            assert!(
                ns - to_other <= last.unwrap_or(0),
                "{}: {:?}",
                p.label(),
                w.by_peer
            );
            all_runs += runs;
        }
    }
    assert_eq!(report.summary.totals.poll_runs, all_runs);
    eprintln!("ibv_rc_pingpong waits: {:?}", waits.cqs);
    // Drawn at full detail only: one slice per run, on top of the default trace's.
    let default = tmp.path().join("normal.perfetto-trace");
    let s = sigmatrace_convert::convert(
        std::slice::from_ref(&logs),
        &default,
        &ConvertOptions::default(),
    )
    .unwrap();
    let full = tmp.path().join("full.perfetto-trace");
    let opts = ConvertOptions {
        detail: Detail::Full,
        ..Default::default()
    };
    let f = sigmatrace_convert::convert(std::slice::from_ref(&logs), &full, &opts).unwrap();
    assert_eq!(f.totals.slices, s.totals.slices + all_runs);
    let v = sigmatrace_testkit::trace::validate(&full, &["slices=1"]);
    assert_eq!(v["stats"]["slices"], f.totals.slices);
}
