//! End-to-end conversion of synthetic multi-rank log sets, checked against ground truth and
//! validated by the repository's trace checker (sigmatrace-testkit).

mod common;

use sigmatrace_convert::report::{QpTable, Traffic};
use sigmatrace_convert::{convert_with_report, ConvertOptions, Detail, Format};
use sigmatrace_synth::{Pattern, Scenario};

fn opts(detail: Detail) -> ConvertOptions {
    ConvertOptions {
        jobs: 2,
        detail,
        ..Default::default()
    }
}

#[test]
fn send_recv_ring_counts_flows_and_matrices_are_exact() {
    let sc = Scenario::ring(2, 2, Pattern::SendRecv, 300);
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("out.perfetto-trace");
    let rep = convert_with_report(&[dir.path().to_owned()], &out, &opts(Detail::Normal)).unwrap();
    let s = &rep.summary;
    assert_eq!(s.processes, 4);
    assert_eq!(s.hosts, 2);
    assert_eq!(s.records, truth.records);
    assert_eq!(s.wr_events, truth.wr_events);
    assert_eq!(s.totals.wr_completed, truth.send_wrs);
    assert_eq!(s.totals.wr_failed, 0);
    assert_eq!(s.totals.recv_completed, truth.recv_completions);
    assert_eq!(s.totals.flows_out, truth.flows);
    assert_eq!(s.totals.flows_in, truth.flows);
    assert_eq!(s.totals.orphan_completions, 0);
    assert_eq!(s.totals.incomplete_wrs, 0);
    let t = rep.section::<Traffic>().unwrap();
    let n = 4;
    for i in 0..n {
        for j in 0..n {
            assert_eq!(t.bytes(i, j), truth.bytes(i, j), "bytes {i}->{j}");
            assert_eq!(t.ops(i, j), truth.ops(i, j), "ops {i}->{j}");
        }
    }
    let q = rep.section::<QpTable>().unwrap();
    assert_eq!(q.rows.iter().map(|r| r.ops).sum::<u64>(), truth.send_wrs);
    // Latency of every WR lies in the simulated bounds (one-way + ack + poll).
    for r in &q.rows {
        if r.ops > 0 {
            assert!(r.max_ns >= 1500 && r.max_ns < 10_000, "{}", r.max_ns);
        }
    }
    let v = common::validate(&out, &["slices=1", "flows=1"]);
    assert_eq!(v["stats"]["flows"], truth.flows);
    // Send slices + receive slices (pre-posted receives still open at the end are closed too).
    assert!(v["stats"]["slices"].as_u64().unwrap() >= truth.send_wrs + truth.recv_completions);
}

#[test]
fn write_pattern_with_selective_signalling_and_all_detail_levels() {
    let mut sc = Scenario::ring(2, 2, Pattern::Write { signal_every: 16 }, 200);
    sc.threads = 1;
    let (dir, truth) = common::generate(&sc);
    for detail in [Detail::Compact, Detail::Normal, Detail::Full] {
        let out = dir.path().join(format!("out-{detail:?}.perfetto-trace"));
        let rep = convert_with_report(&[dir.path().to_owned()], &out, &opts(detail)).unwrap();
        let s = &rep.summary;
        assert_eq!(s.totals.wr_completed, truth.send_wrs, "{detail:?}");
        assert_eq!(s.totals.flows_out, truth.flows, "{detail:?}");
        assert_eq!(s.totals.orphan_completions, 0);
        if detail >= Detail::Normal {
            assert_eq!(s.totals.inferred, truth.one_sided, "{detail:?}");
        } else {
            assert_eq!(s.totals.inferred, 0);
        }
        let v = common::validate(&out, &["slices=1"]);
        assert_eq!(v["stats"]["flows"], truth.flows, "{detail:?}");
    }
}

#[test]
fn mixed_ops_failure_and_chrome_json() {
    let mut sc = Scenario::ring(3, 1, Pattern::Mixed, 100);
    sc.fail = Some((0, 0, 50));
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("out.perfetto-trace");
    let rep = convert_with_report(&[dir.path().to_owned()], &out, &opts(Detail::Full)).unwrap();
    let s = &rep.summary;
    assert_eq!(s.totals.wr_failed, 1);
    assert_eq!(s.totals.wr_completed, truth.send_wrs);
    let t = rep.section::<Traffic>().unwrap();
    for i in 0..3 {
        for j in 0..3 {
            assert_eq!(t.bytes(i, j), truth.bytes(i, j), "bytes {i}->{j}");
        }
    }
    let q = rep.section::<QpTable>().unwrap();
    assert_eq!(q.rows.iter().map(|r| r.errors).sum::<u64>(), 1);
    common::validate(&out, &["slices=1", "instants=1"]);
    let json = dir.path().join("out.json");
    let o = ConvertOptions {
        format: Format::ChromeJson,
        ..opts(Detail::Normal)
    };
    convert_with_report(&[dir.path().to_owned()], &json, &o).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let evs = doc["traceEvents"].as_array().unwrap();
    let begins = evs.iter().filter(|e| e["ph"] == "B").count();
    let ends = evs.iter().filter(|e| e["ph"] == "E").count();
    assert_eq!(begins, ends);
    assert!(begins as u64 >= truth.send_wrs);
    assert_eq!(
        evs.iter().filter(|e| e["ph"] == "s").count() as u64,
        truth.flows
    );
    assert_eq!(
        evs.iter().filter(|e| e["ph"] == "f").count() as u64,
        truth.flows
    );
}

/// Four nodes, two disjoint pairs with identical QPNs on both sides (as fresh HCAs assign
/// them): QPN matching alone is ambiguous. With GRH routes the GUID in the destination GID
/// decides; with LID-only routes the converter must refuse to guess.
#[test]
fn identical_qpns_on_several_nodes() {
    use sigmatrace_synth::LinkSpec;
    let mut sc = Scenario::ring(4, 1, Pattern::SendRecv, 50);
    sc.links = vec![
        LinkSpec {
            a: 0,
            b: 1,
            pattern: Pattern::SendRecv,
            messages: 50,
            bytes: 256,
        },
        LinkSpec {
            a: 2,
            b: 3,
            pattern: Pattern::SendRecv,
            messages: 50,
            bytes: 256,
        },
    ];
    let (dir, truth) = common::generate(&sc);
    let rep = sigmatrace_convert::stats(&[dir.path().to_owned()], &opts(Detail::Normal)).unwrap();
    for (p, peer) in [(0, 1), (1, 0), (2, 3), (3, 2)] {
        let q = &rep.topology.procs[p].qps[0];
        assert_eq!(q.qpn, 0x100);
        assert_eq!(q.peer, Some((peer, 0x100)), "rank {p}");
    }
    let t = rep.section::<Traffic>().unwrap();
    assert_eq!(t.ops(0, 1), truth.ops(0, 1));
    assert_eq!(t.ops(2, 3), truth.ops(2, 3));
    assert_eq!(rep.summary.totals.flows_out, truth.flows);

    sc.global_routes = false;
    let (dir, _) = common::generate(&sc);
    let out = dir.path().join("lid.perfetto-trace");
    let rep = convert_with_report(&[dir.path().to_owned()], &out, &opts(Detail::Normal)).unwrap();
    assert_eq!(rep.topology.ambiguous_qps.len(), 4);
    assert!(rep.topology.procs.iter().all(|p| p.qps[0].peer.is_none()));
    assert_eq!(rep.summary.totals.flows_out, 0);
    assert!(rep.summary.warnings.iter().any(|w| w.contains("ambiguous")));
    common::validate(&out, &["slices=1"]);
}

/// A time window keeps only WRs posted inside it and only flows whose both ends are inside.
#[test]
fn time_window_filters_events_and_keeps_flows_paired() {
    let sc = Scenario::ring(2, 2, Pattern::SendRecv, 2000);
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("w.perfetto-trace");
    let o = ConvertOptions {
        window_s: Some((0.0055, 0.0062)),
        ..opts(Detail::Normal)
    };
    let rep = convert_with_report(&[dir.path().to_owned()], &out, &o).unwrap();
    let s = &rep.summary;
    assert!(
        s.totals.flows_out > 0 && s.totals.flows_out < truth.flows / 2,
        "{}",
        s.totals.flows_out
    );
    assert_eq!(s.totals.flows_out, s.totals.flows_in);
    let v = common::validate(&out, &["slices=1", "flows=1"]);
    assert_eq!(v["stats"]["flows"], s.totals.flows_out);
    // Ranks filter: only ranks 0 and 1 (one host); flows between them only.
    let o = ConvertOptions {
        ranks: Some(vec![0, 1]),
        ..opts(Detail::Normal)
    };
    let rep = convert_with_report(&[dir.path().to_owned()], &out, &o).unwrap();
    assert_eq!(rep.summary.processes, 2);
    assert_eq!(rep.summary.totals.flows_out, 2 * 2000);
    common::validate(&out, &["flows=1"]); // Host filter: node1 holds ranks 2 and 3.
    let o = ConvertOptions {
        hosts: Some(vec!["node1".into()]),
        ..opts(Detail::Compact)
    };
    let rep = convert_with_report(&[dir.path().to_owned()], &out, &o).unwrap();
    let ranks: Vec<_> = rep.topology.procs.iter().map(|p| p.rank).collect();
    assert_eq!(ranks, vec![Some(2), Some(3)]);
    assert_eq!(rep.summary.hosts, 1);
    common::validate(&out, &["flows=1"]);
}

/// perftest-style posting: every WR has wr_id 0 and one in four is signaled. Each completion
/// must retire exactly the WRs up to the signaled one, not just the oldest WR.
#[test]
fn reused_wr_ids_with_selective_signalling() {
    let mut sc = Scenario::ring(2, 1, Pattern::Write { signal_every: 4 }, 400);
    sc.constant_wr_id = true;
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("perftest.perfetto-trace");
    let rep = convert_with_report(&[dir.path().to_owned()], &out, &opts(Detail::Normal)).unwrap();
    let s = &rep.summary;
    assert_eq!(s.totals.wr_completed, truth.send_wrs);
    assert_eq!(s.totals.incomplete_wrs, 0);
    assert_eq!(s.totals.orphan_completions, 0);
    let q = rep.section::<QpTable>().unwrap();
    for r in &q.rows {
        // Post → completion of the signaled WR ≤ 4 message intervals + latencies.
        assert!(
            r.max_ns < 4 * sc.interval_ns + 2 * sc.latency_ns.1 + 1000,
            "{}",
            r.max_ns
        );
    }
    common::validate(&out, &["slices=1"]);
}

/// The benchmark's record mix: many QPs of unsignaled RDMA WRITEs with selective signalling
/// and SEND/RECV ping-pongs, on hosts with clock errors — counts, flows and matrices exact.
#[test]
fn bulk_writes_and_ping_pongs_are_exact() {
    use sigmatrace_synth::LinkSpec;
    let mut sc = Scenario::ring(2, 2, Pattern::SendRecv, 1);
    let link = |a, b, pattern| LinkSpec {
        a,
        b,
        pattern,
        messages: 300,
        bytes: 4096,
    };
    sc.links = vec![
        link(0, 2, Pattern::Bulk { signal_every: 100 }),
        link(1, 3, Pattern::Bulk { signal_every: 100 }),
        link(0, 3, Pattern::Bulk { signal_every: 100 }),
        link(0, 3, Pattern::PingPong),
        link(1, 2, Pattern::PingPong),
    ];
    sc.interval_ns = 8_000;
    sc.hosts[1].offset_ns = 40_000;
    sc.hosts[1].drift_ppm = 5.0;
    let (dir, truth) = common::generate(&sc);
    let out = dir.path().join("out.perfetto-trace");
    let rep = convert_with_report(&[dir.path().to_owned()], &out, &opts(Detail::Normal)).unwrap();
    let s = &rep.summary;
    assert_eq!(s.records, truth.records);
    assert_eq!(s.wr_events, truth.wr_events);
    assert_eq!(s.totals.wr_completed, truth.send_wrs);
    assert_eq!(s.totals.recv_completed, truth.recv_completions);
    assert_eq!(truth.flows, 2 * 2 * 300, "ping-pongs in both directions");
    assert_eq!(s.totals.flows_out, truth.flows);
    assert_eq!(s.totals.flows_in, truth.flows);
    assert_eq!(s.totals.orphan_completions, 0);
    assert_eq!(s.totals.incomplete_wrs, 0);
    let t = rep.section::<Traffic>().unwrap();
    for i in 0..4 {
        for j in 0..4 {
            assert_eq!(t.bytes(i, j), truth.bytes(i, j), "bytes {i}->{j}");
            assert_eq!(t.ops(i, j), truth.ops(i, j), "ops {i}->{j}");
        }
    }
    let v = common::validate(&out, &["slices=1", "flows=1"]);
    assert_eq!(v["stats"]["flows"], truth.flows);
}

/// Above `DENSE_RANKS` ranks the traffic matrices are kept and reported as the pairs with
/// traffic (a dense rank × rank matrix grows with the square of the ranks: 268 MB at 4 096):
/// every pair's bytes and operations still equal the ground truth, the JSON lists exactly
/// the non-zero pairs (no dense rows), and the text names the pairs with the most bytes.
#[test]
fn many_ranks_report_traffic_as_pairs() {
    use sigmatrace_convert::report::DENSE_RANKS;
    let sc = Scenario::ring(9, 8, Pattern::SendRecv, 20);
    let n = sc.ranks.len();
    assert!(n > DENSE_RANKS);
    let (dir, truth) = common::generate(&sc);
    let rep = sigmatrace_convert::stats(&[dir.path().to_owned()], &opts(Detail::Normal)).unwrap();
    let t = rep.section::<Traffic>().unwrap();
    let mut want = Vec::new();
    for i in 0..n {
        for j in 0..n {
            assert_eq!(t.bytes(i, j), truth.bytes(i, j), "bytes {i}->{j}");
            assert_eq!(t.ops(i, j), truth.ops(i, j), "ops {i}->{j}");
            if truth.bytes(i, j) != 0 || truth.ops(i, j) != 0 {
                want.push(serde_json::json!([
                    i,
                    j,
                    truth.bytes(i, j),
                    truth.ops(i, j)
                ]));
            }
        }
    }
    assert!(want.len() >= n, "a ring: every rank sends");
    let v = rep.json();
    assert_eq!(v["traffic"]["rank_pairs"], serde_json::Value::from(want));
    assert!(v["traffic"].get("rank_bytes").is_none());
    assert!(v["skew"].get("rank_bytes").is_none());
    let text = rep.text();
    let line = format!("== Traffic rank × rank: {n} ranks, ");
    assert!(text.contains(&line), "{text}");
}

#[test]
fn without_report_sections_the_trace_and_summary_are_the_same_and_no_section_is_made() {
    let sc = Scenario::ring(2, 2, Pattern::SendRecv, 300);
    let (dir, _) = common::generate(&sc);
    let (with, without) = (
        dir.path().join("with.pftrace"),
        dir.path().join("without.pftrace"),
    );
    let a = convert_with_report(&[dir.path().to_owned()], &with, &opts(Detail::Normal)).unwrap();
    let o = ConvertOptions {
        report_sections: false,
        ..opts(Detail::Normal)
    };
    let b = convert_with_report(&[dir.path().to_owned()], &without, &o).unwrap();
    assert_eq!(
        std::fs::read(&with).unwrap(),
        std::fs::read(&without).unwrap()
    );
    assert_eq!(
        serde_json::to_value(&a.summary.totals).unwrap(),
        serde_json::to_value(&b.summary.totals).unwrap()
    );
    assert_eq!(a.summary.warnings, b.summary.warnings);
    assert!(a.section::<Traffic>().is_some() && a.section::<QpTable>().is_some());
    assert!(b.sections.is_empty(), "{} sections", b.sections.len());
}
