//! `--from/--to` windows over real programs (used by real_timelines.rs): the flows of a window
//! are exactly the whole trace's flows whose both ends lie inside it.

use sigmatrace_convert::ConvertOptions;
use sigmatrace_testkit::trace::check;

use super::{execute, pingpong};

/// ibv_ud_pingpong (rdma-core's, unmodified) over softnic, converted whole and then with a
/// window over the middle of its datagrams: the window's flows are the whole trace's datagrams whose
/// send and receive both lie inside it — the same ids at the same times, none missing, none
/// more — and none ends before it starts. (Before UD streams took part in windows, a window
/// drew no UD flow at all.)
#[test]
fn ud_pingpong_in_a_time_window() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs, _) = execute(pingpong("ibv_ud_pingpong", "", 400), tmp.path(), false);
    let inputs = [logs];
    let whole = tmp.path().join("whole.perfetto-trace");
    sigmatrace_convert::convert(&inputs, &whole, &ConvertOptions::default()).unwrap();
    let all = check(&whole);
    assert!(all.ok, "{:#}", all.json());
    assert_eq!(all.flow_spans.len(), 800, "every datagram has its flow");
    // The window's zero is the earliest record's output time (as the converter defines it).
    let report = sigmatrace_convert::stats(&inputs, &ConvertOptions::default()).unwrap();
    let procs = &report.topology.procs;
    let t0 = procs.iter().map(|p| p.time(p.min_ts)).min().unwrap().max(0);
    // The middle of the datagrams' time (the run's start is connection setup).
    let first = all.flow_spans.iter().map(|f| f.1).min().unwrap();
    let last = all.flow_spans.iter().map(|f| f.2).max().unwrap();
    let at = |part: f64| (first - t0 as i128) as f64 / 1e9 + part * (last - first) as f64 / 1e9;
    let (from, to) = (at(0.3), at(0.7));
    let opts = ConvertOptions {
        window_s: Some((from, to)),
        ..Default::default()
    };
    let windowed = tmp.path().join("window.perfetto-trace");
    let s = sigmatrace_convert::convert(&inputs, &windowed, &opts).unwrap();
    let w = check(&windowed);
    assert!(w.ok, "{:#}", w.json());
    assert_eq!(w.stats.backward_flows, 0);
    let (a, b) = (
        t0.saturating_add((from * 1e9) as i64) as i128,
        t0.saturating_add((to * 1e9) as i64) as i128,
    );
    let inside = |x: i128| x >= a && x < b;
    let mut want: Vec<_> = all
        .flow_spans
        .iter()
        .filter(|&&(_, x, y)| inside(x) && inside(y))
        .copied()
        .collect();
    let mut got = w.flow_spans.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert!(
        !got.is_empty() && got.len() < all.flow_spans.len(),
        "{} of {} flows in the window",
        got.len(),
        all.flow_spans.len()
    );
    assert_eq!(got, want);
    assert_eq!(
        (s.totals.flows_out, s.totals.flows_in),
        (got.len() as u64, got.len() as u64)
    );
}
