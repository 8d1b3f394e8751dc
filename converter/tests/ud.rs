//! UD datagrams: flows from each SEND on a UD QP to the receive completion it produced on the
//! other rank, paired by (destination QPN, AH) ↔ (source QPN, SLID) streams.

mod common;

use sigmatrace_convert::{convert, ConvertOptions};
use sigmatrace_synth::{Pattern, Scenario};

#[test]
fn ud_datagrams_get_flows_to_their_receives() {
    // QPNs repeat on the two hosts (both count from 0x100), so only the source QPN and the
    // LIDs tell the receivers apart.
    let sc = Scenario::ring(2, 2, Pattern::Ud, 300);
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("ud.perfetto-trace");
    let opts = ConvertOptions {
        jobs: 2,
        ..Default::default()
    };
    let s = convert(&[dir.path().to_owned()], &out, &opts).unwrap();
    assert!(truth.flows > 0);
    assert_eq!(s.totals.flows_out, truth.flows);
    assert_eq!(s.totals.flows_in, truth.flows);
    assert!(
        !s.warnings.iter().any(|w| w.contains("UD")),
        "{:?}",
        s.warnings
    );
    // Every flow id leaves exactly one send slice and ends at exactly one arrival.
    let packets = common::decode(&out);
    let mut starts: Vec<u64> = Vec::new();
    let mut ends: Vec<u64> = Vec::new();
    for e in packets.iter().filter_map(|p| p.track_event.as_ref()) {
        starts.extend(&e.flow_ids);
        ends.extend(&e.terminating_flow_ids);
    }
    starts.sort_unstable();
    ends.sort_unstable();
    assert_eq!(starts.len() as u64, truth.flows);
    assert_eq!(starts, ends);
    let v = common::validate(&out, &["flows=1"]);
    assert_eq!(v["stats"]["flows"], truth.flows);
}

#[test]
fn ud_streams_with_lost_datagrams_get_no_flows() {
    // The 11th datagram of one direction fails on the sender: that stream has one send more
    // than receives, so pairing by order would be wrong from there on — it gets no flows.
    let mut sc = Scenario::ring(2, 2, Pattern::Ud, 100);
    sc.fail = Some((0, 0, 10));
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("ud.perfetto-trace");
    let s = convert(&[dir.path().to_owned()], &out, &ConvertOptions::default()).unwrap();
    let warned = s
        .warnings
        .iter()
        .filter(|w| w.contains("UD") && w.contains("no flows drawn"))
        .count();
    assert_eq!(warned, 1, "{:?}", s.warnings);
    // The damaged stream had 10 delivered datagrams; every other one is drawn.
    assert_eq!(s.totals.flows_out, truth.flows - 10);
    assert_eq!(s.totals.flows_in, s.totals.flows_out);
    common::validate(&out, &[]);
}

#[test]
fn ud_stream_short_only_at_its_end_is_paired_where_proven() {
    // The last datagram of one direction fails: 100 sent, 99 received. Each host is its own
    // machine clock here, so nothing proves the missing datagram is the last one (a clock
    // could be off by more than the spacing): the stream gets no flows, the warning says so.
    let mut sc = Scenario::ring(2, 2, Pattern::Ud, 100);
    sc.fail = Some((0, 0, 99));
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("ud.perfetto-trace");
    let s = convert(&[dir.path().to_owned()], &out, &ConvertOptions::default()).unwrap();
    let w: Vec<&String> = s.warnings.iter().filter(|w| w.contains("UD")).collect();
    assert_eq!(w.len(), 1, "{:?}", s.warnings);
    assert!(w[0].contains("100 datagrams sent, 99 received"), "{w:?}");
    assert!(w[0].ends_with("no flows drawn"), "{w:?}");
    assert_eq!(s.totals.flows_out, truth.flows - 99);
    common::validate(&out, &[]);
    // One machine clock (softnic-style nodes), datagrams 1 µs apart, 1.5–2.5 µs on the way:
    // the 100th left before the 99th arrived, so it could have been received instead of an
    // earlier one — nothing proven, no flows.
    sc.shared_machine = true;
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("ud.perfetto-trace");
    let s = convert(&[dir.path().to_owned()], &out, &ConvertOptions::default()).unwrap();
    let w: Vec<&String> = s.warnings.iter().filter(|w| w.contains("UD")).collect();
    assert!(w.len() == 1 && w[0].ends_with("no flows drawn"), "{w:?}");
    assert_eq!(s.totals.flows_out, truth.flows - 99);
    // 10 µs apart: the 100th datagram was sent after the 99th receive completed, so the 99
    // received are the first 99 — all paired, the last reported as sent after the last
    // receive.
    sc.interval_ns = 10_000;
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("ud.perfetto-trace");
    let s = convert(&[dir.path().to_owned()], &out, &ConvertOptions::default()).unwrap();
    let w: Vec<&String> = s.warnings.iter().filter(|w| w.contains("UD")).collect();
    assert_eq!(w.len(), 1, "{:?}", s.warnings);
    assert!(
        w[0].contains("100 datagrams sent, 99 received; the first 99 paired, the last 1 sent after the last receive"),
        "{w:?}"
    );
    assert_eq!(
        (s.totals.flows_out, s.totals.flows_in),
        (truth.flows, truth.flows)
    );
    common::validate(&out, &[]);
}

/// In a `--from/--to` window a datagram is drawn with its flow when both its send and its
/// receive lie inside (as RC messages are): every flow drawn starts at one send and ends at
/// one receive, none backwards, and the ones cut by the window's edges are left out on both
/// sides.
#[test]
fn ud_datagrams_inside_a_time_window_keep_their_flows() {
    let sc = Scenario::ring(2, 2, Pattern::Ud, 2000);
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("ud-window.perfetto-trace");
    let opts = ConvertOptions {
        window_s: Some((0.0055, 0.0062)),
        jobs: 2,
        ..Default::default()
    };
    let s = convert(&[dir.path().to_owned()], &out, &opts).unwrap();
    let drawn = s.totals.flows_out;
    assert!(
        drawn > 0 && drawn < truth.flows / 2,
        "{drawn} of {}",
        truth.flows
    );
    assert_eq!(s.totals.flows_in, drawn);
    let packets = common::decode(&out);
    let (mut starts, mut ends): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    for e in packets.iter().filter_map(|p| p.track_event.as_ref()) {
        starts.extend(&e.flow_ids);
        ends.extend(&e.terminating_flow_ids);
    }
    starts.sort_unstable();
    ends.sort_unstable();
    assert_eq!(starts.len() as u64, drawn);
    assert_eq!(starts, ends);
    let v = common::validate(&out, &["flows=1"]);
    assert_eq!(v["stats"]["flows"], drawn);
    assert_eq!(v["stats"]["backward_flows"], 0);
}
