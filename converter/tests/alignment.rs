//! Clock alignment on synthetic logs with known clock error: the converter must recover each
//! clock domain's correction within the interval it reports, never rewrite event times, leave
//! no message whose receive precedes its send, treat one machine's clock as one domain, and
//! give the same answer every time.

mod common;

use sigmatrace_convert::align::solve::{self, Con};
use sigmatrace_convert::align::Alignment;
use sigmatrace_convert::{stats, ConvertOptions};
use sigmatrace_synth::{Pattern, Scenario, Truth, T_START};

/// Clock error of a synthetic host at true time t (as synth applies it).
fn err(offset: i64, ppm: f64, t: u64) -> f64 {
    offset as f64 + ppm * 1e-6 * (t + 10_000_000 - T_START) as f64
}

fn run_stats(sc: &Scenario) -> (Alignment, Truth) {
    let (dir, truth) = common::generate(sc);
    let opts = ConvertOptions {
        jobs: 2,
        verify_alignment: true,
        ..Default::default()
    };
    let rep = stats(&[dir.path().to_owned()], &opts).unwrap();
    (rep.summary.alignment.clone(), truth)
}

fn scenario(pattern: Pattern, errs: &[(i64, f64)], messages: u64, interval_ns: u64) -> Scenario {
    let mut sc = Scenario::ring(errs.len(), 2, pattern, messages);
    sc.interval_ns = interval_ns;
    for (h, &(o, d)) in errs.iter().enumerate() {
        sc.hosts[h].offset_ns = o;
        sc.hosts[h].drift_ppm = d;
    }
    sc
}

/// Checks the alignment of a scenario whose host h has clock error `errs[h]`: every message
/// matched, none inverted after, each host's true correction inside its reported interval
/// (`|estimate − truth| ≤ uncertainty` at the reference time) and the uncertainty no wider
/// than `max_unc` ns. Returns the alignment.
fn check(sc: &Scenario, errs: &[(i64, f64)], max_unc: f64) -> Alignment {
    let (a, truth) = run_stats(sc);
    assert_eq!(a.reference_domain, 0);
    let (pairs, bad) = a.verified.unwrap();
    assert_eq!(pairs, truth.flows, "every message matched");
    assert_eq!(a.pairs, truth.flows, "the metric covers every message pair");
    assert_eq!(bad, 0, "no receive precedes its send after alignment");
    assert_eq!(a.inverted_after, 0);
    assert_eq!(a.dropped_constraints, 0, "consistent logs drop nothing");
    assert_eq!(a.note, None);
    assert_eq!(a.domains.len(), errs.len(), "one clock domain per host");
    // The reference time t0 is on the reference host's uncorrected clock; the true time there
    // differs by its clock error, which changes the drift term by well under 1 ns.
    let t_true = (a.t0 as f64 - err(errs[0].0, errs[0].1, T_START)) as u64;
    for (h, &(o, d)) in errs.iter().enumerate().skip(1) {
        let da = &a.domains[h];
        let want = -(err(o, d, t_true) - err(errs[0].0, errs[0].1, t_true));
        let u = da
            .uncertainty_ns
            .expect("two-way traffic bounds every host");
        assert!(
            (da.offset_ns - want).abs() <= u + 1.0,
            "host {h}: offset {:.0} ns, true {want:.0} ns, uncertainty ±{u:.0} ns",
            da.offset_ns
        );
        assert!(u <= max_unc, "host {h}: uncertainty ±{u:.0} ns > {max_unc}");
        let (lo, hi) = (da.offset_min_ns.unwrap(), da.offset_max_ns.unwrap());
        assert!(
            lo <= da.offset_ns && da.offset_ns <= hi,
            "estimate inside its interval"
        );
        assert!(hi - lo > 0.0, "an interval, never ±0: {lo}..{hi}");
    }
    if errs.iter().any(|e| e.0.abs() > 5_000) {
        assert!(a.inverted_before > 0, "the shifted clocks did invert pairs");
    }
    a
}

#[test]
fn recovers_offset_and_drift_of_a_shifted_node() {
    let errs = [(0, 0.0), (250_000, 40.0)];
    // One-way latencies lie in [1.5, 2.5] µs: the pair's interval is at most a round trip.
    check(
        &scenario(Pattern::SendRecv, &errs, 3000, 1000),
        &errs,
        5000.0,
    );
}

/// Over 200 ms, 40 ppm moves the clock by 8 µs — several message latencies — so an offset
/// alone cannot satisfy causality: the drift must be recovered.
#[test]
fn recovers_drift_over_a_long_run() {
    let errs = [(0, 0.0), (-40_000, 40.0)];
    let a = check(
        &scenario(Pattern::SendRecv, &errs, 2000, 100_000),
        &errs,
        5000.0,
    );
    assert!(
        (a.domains[1].drift_ppm + 40.0).abs() < 2.0,
        "drift correction {} ppm, want ≈ −40",
        a.domains[1].drift_ppm
    );
}

#[test]
fn recovers_three_nodes_with_write_imm_traffic() {
    let errs = [(0, 0.0), (-80_000, -15.0), (1_500_000, 25.0)];
    check(
        &scenario(Pattern::Write { signal_every: 4 }, &errs, 4000, 1000),
        &errs,
        10_000.0,
    );
}

#[test]
fn aligned_clocks_need_no_correction() {
    let errs = [(0, 0.0), (0, 0.0)];
    let a = check(
        &scenario(Pattern::SendRecv, &errs, 1000, 1000),
        &errs,
        5000.0,
    );
    assert_eq!(a.inverted_before, 0);
}

/// a→b takes 20 µs longer than b→a: the interval must still hold the truth (the midpoint is
/// off by half the asymmetry, which no causality method can see) and be as wide as the
/// round trip says.
#[test]
fn asymmetric_latencies_keep_the_truth_inside_the_interval() {
    let errs = [(0, 0.0), (300_000, 10.0)];
    // One rank per host and one link, so a→b is the only way from host 0 to host 1.
    let mut sc = Scenario::ring(2, 1, Pattern::SendRecv, 3000);
    sc.hosts[1].offset_ns = errs[1].0;
    sc.hosts[1].drift_ppm = errs[1].1;
    sc.asym_latency_ns = 20_000;
    let a = check(&sc, &errs, 15_000.0);
    let u = a.domains[1].uncertainty_ns.unwrap();
    assert!(u >= 10_000.0, "the asymmetry widens the interval: ±{u:.0}");
}

/// Snapshots written before the event that made them due, with a later time (as the
/// interposer does): event times must stay as recorded, so no pair becomes inverted.
#[test]
fn snapshots_written_out_of_time_order_change_no_event_time() {
    for hosts in [1, 2] {
        let mut sc = Scenario::ring(hosts, 4 / hosts, Pattern::SendRecv, 5000);
        sc.threads = 1;
        sc.snapshot_every_ns = 50_000;
        // Later than a whole one-way latency: a clamped post would land after its receive.
        sc.snapshot_lead_ns = 4_000;
        let (a, truth) = run_stats(&sc);
        assert_eq!(a.pairs, truth.flows);
        assert_eq!(
            a.inverted_before, 0,
            "{hosts} host(s): times kept as recorded"
        );
        assert_eq!(a.inverted_after, 0);
        assert_eq!(a.domains.len(), hosts);
    }
}

/// Only a→b carries messages (b→a fails at its first WR): one side of the interval is open.
/// The correction is the smallest one that keeps causality; its uncertainty is unbounded.
#[test]
fn single_direction_link_is_unbounded_and_still_causal() {
    let mut sc = Scenario::ring(2, 1, Pattern::SendRecv, 2000);
    sc.hosts[1].offset_ns = -100_000;
    sc.fail = Some((0, 1, 0));
    let (a, _) = run_stats(&sc);
    assert!(a.inverted_before > 1000, "{}", a.inverted_before);
    assert_eq!(a.inverted_after, 0);
    let d = &a.domains[1];
    assert_eq!(d.uncertainty_ns, None, "unbounded, never ±0");
    assert_eq!(d.offset_max_ns, None);
    let lo = d.offset_min_ns.expect("a→b bounds host 1 from below");
    assert!(
        (98_000.0..100_000.0).contains(&lo),
        "lower bound {lo} (true correction 100 µs minus a latency)"
    );
    // Smallest causal correction at the drift chosen (0: nothing pins it); the bound also
    // allows any drift of the box (500 ppm over the half-run of about 1 ms).
    assert!(
        lo <= d.offset_ns && d.offset_ns <= lo + 1_000.0,
        "estimate {} vs lower bound {lo}",
        d.offset_ns
    );
    assert_eq!(a.links.len(), 1);
    assert_eq!(a.links[0].uncertainty_ns, None);
    assert!(a.links[0].pairs_ab > 0 && a.links[0].pairs_ba == 0);
}

/// Simulated nodes on one machine (one boot id and hostname, different `node=`) read one
/// clock: one domain, no correction at all, whatever the traffic says.
#[test]
fn nodes_of_one_machine_form_one_domain_with_zero_correction() {
    let mut sc = Scenario::ring(4, 2, Pattern::SendRecv, 2000);
    sc.shared_machine = true;
    sc.asym_latency_ns = 7_000;
    let (a, truth) = run_stats(&sc);
    assert_eq!(a.domains.len(), 1, "{:?}", a.domains);
    assert_eq!(a.hosts.len(), 4, "four nodes");
    assert_eq!(a.domains[0].procs.len(), 8);
    for h in &a.hosts {
        assert_eq!((h.offset_ns, h.drift_ppm, h.domain), (0.0, 0.0, 0));
    }
    assert_eq!((a.cross_domain_pairs, a.constraints), (0, 0));
    assert_eq!(a.pairs, truth.flows);
    assert_eq!((a.inverted_before, a.inverted_after), (0, 0));
}

/// Contradictory constraints (a cycle of messages that cannot all be causal under any
/// linear correction) are found, the fewest dropped and reported, and the rest satisfied.
#[test]
fn infeasible_constraints_are_dropped_and_reported() {
    let half = 1e6;
    let mut cons = Vec::new();
    // Domain 1 is 50 µs ahead of domain 0; latencies 2..3 µs both ways.
    for i in 0..40i64 {
        let x = -900_000 + i * 45_000;
        cons.push(Con {
            a: 0,
            b: 1,
            x,
            d: 50_000 + 2_000 + (i * 37) % 1000,
        });
        cons.push(Con {
            a: 1,
            b: 0,
            x: x + 50_000,
            d: -50_000 + 2_000 + (i * 53) % 1000,
        });
    }
    // Two injected messages that would need domain 1 to be 30 µs behind: impossible.
    cons.push(Con {
        a: 1,
        b: 0,
        x: 10_000,
        d: -80_000,
    });
    cons.push(Con {
        a: 1,
        b: 0,
        x: 20_000,
        d: -80_500,
    });
    cons.sort();
    let s = solve::solve(2, 0, half, &cons).expect("resolved by dropping");
    assert_eq!(
        s.dropped.len(),
        2,
        "exactly the injected ones: {:?}",
        s.dropped
    );
    for &i in &s.dropped {
        assert!(cons[i].d <= -80_000, "{:?}", cons[i]);
    }
    // The kept constraints hold at the solution.
    for (i, c) in cons.iter().enumerate() {
        if s.dropped.contains(&i) {
            continue;
        }
        let (tx, ty) = (c.x as f64 / half, (c.x + c.d) as f64 / half);
        let (o, r) = (&s.offset, &s.drift);
        let lhs = o[c.a] - o[c.b] + r[c.a] * half * tx - r[c.b] * half * ty;
        assert!(lhs <= c.d as f64 + 1e-3, "{c:?}: {lhs}");
    }
    let (lo, hi) = (s.lo[1].unwrap(), s.hi[1].unwrap());
    assert!(
        lo <= -50_000.0 && -50_000.0 <= hi,
        "truth inside [{lo}, {hi}]"
    );
}

/// Same logs, one and two worker threads, twice: byte-identical trace and report.
#[test]
fn same_logs_give_identical_traces_and_reports_whatever_the_jobs() {
    let errs = [(0, 0.0), (-120_000, 12.0), (2_000_000, -30.0)];
    let mut sc = scenario(Pattern::SendRecv, &errs, 1500, 2000);
    sc.asym_latency_ns = 3_000;
    let (dir, _) = common::generate(&sc);
    let mut outs = Vec::new();
    for jobs in [1, 2, 1, 2, 3, 8] {
        let out = dir.path().join(format!("t{}.perfetto-trace", outs.len()));
        let opts = ConvertOptions {
            jobs,
            ..Default::default()
        };
        let rep =
            sigmatrace_convert::convert_with_report(&[dir.path().to_owned()], &out, &opts).unwrap();
        let mut json = rep.json();
        json["summary"]["elapsed_s"] = serde_json::Value::Null;
        json["summary"]["phases"] = serde_json::Value::Null;
        let text: String = rep
            .text()
            .lines()
            .filter(|l| !l.contains("elapsed") && !l.contains(" s)") && !l.contains("phases"))
            .collect();
        outs.push((
            std::fs::read(&out).unwrap(),
            json["summary"]["alignment"].to_string(),
            text,
        ));
    }
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.1, outs[0].1, "alignment of run {i} differs");
    }
    // The trace bytes repeat exactly whatever the number of worker threads (blocks in process
    // order, track ids from each process's own range), and so does the whole report.
    for (i, o) in outs.iter().enumerate() {
        assert!(o.0 == outs[0].0, "trace of run {i} differs from run 0");
        assert_eq!(o.2, outs[0].2, "report text of run {i} differs");
    }
    let (a0, a1) = (&outs[0].2, &outs[1].2);
    let line = |t: &str| {
        t.split("== Clock alignment")
            .nth(1)
            .map(|s| s.split("==").next().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    assert!(!line(a0).is_empty());
    assert_eq!(line(a0), line(a1), "report's alignment section differs");
}

/// The corrections are visible in the trace itself: every process track's labels carry its
/// domain's offset, drift and uncertainty, and an instant on the alignment track lists all
/// hosts and the before/after counts of inverted message pairs.
#[test]
fn alignment_is_shown_in_the_trace() {
    let mut sc = Scenario::ring(2, 2, Pattern::SendRecv, 500);
    sc.hosts[1].offset_ns = 200_000;
    let (dir, _) = common::generate(&sc);
    let out = dir.path().join("t.perfetto-trace");
    let opts = ConvertOptions {
        jobs: 2,
        ..Default::default()
    };
    let s = sigmatrace_convert::convert(&[dir.path().to_owned()], &out, &opts).unwrap();
    let a = &s.alignment;
    let packets = common::decode(&out);
    let mut labelled = 0;
    let mut align_track = None;
    for p in &packets {
        let Some(td) = &p.track_descriptor else {
            continue;
        };
        if td.name.as_deref() == Some("SigmaTrace clock alignment") {
            let desc = td.description.as_deref().unwrap_or("");
            assert!(desc.contains("node1: offset"), "{desc}");
            align_track = td.uuid;
        }
        if let Some(pd) = &td.process {
            let label = pd
                .process_labels
                .iter()
                .find(|l| l.starts_with("clock offset"))
                .unwrap_or_else(|| panic!("no clock label in {:?}", pd.process_labels));
            let host = if td.name.as_deref().unwrap_or("").contains("node1") {
                1
            } else {
                0
            };
            let want = format!("{:+.3} µs", a.hosts[host].offset_ns / 1e3);
            assert!(label.contains(&want), "{label} vs {want}");
            labelled += 1;
        }
    }
    assert_eq!(labelled, 4, "every process track is labelled");
    let align_track = align_track.expect("alignment track");
    let instant = packets
        .iter()
        .filter_map(|p| p.track_event.as_ref())
        .find(|e| e.track_uuid == Some(align_track))
        .expect("an event on the alignment track");
    let texts: Vec<&str> = instant
        .debug_annotations
        .iter()
        .filter_map(|d| d.string_value.as_deref())
        .collect();
    assert!(
        texts.iter().filter(|t| t.starts_with("offset ")).count() == 2,
        "one arg per host: {texts:?}"
    );
    let counts: Vec<u64> = instant
        .debug_annotations
        .iter()
        .filter_map(|d| d.uint_value)
        .collect();
    assert!(
        counts.contains(&a.inverted_before) && a.inverted_before > 0,
        "before count in the instant: {counts:?}"
    );
    assert!(
        a.hosts[1].offset_ns.abs() > 100_000.0,
        "host 1 was corrected"
    );
    common::validate(&out, &[]);
}

/// Every linked pair's correction lies inside the range its own messages allow at the time
/// they bound it best (what the report prints as "correction's value in brackets"): rings of
/// four clock domains with offsets of milliseconds, drifts of tens of ppm, short runs (the
/// drifts the LP picks reach the box) and loaded latencies, as the ring all-reduce run under
/// a clock error per rank. Fails when the range at t0 is that of the offsets (b's clock read
/// at the same τ) instead of the clock difference (b's read σ later): there the correction
/// was outside by up to MAX_DRIFT·σ (1.3 µs at a 2.6 ms lead).
#[test]
fn each_link_correction_lies_in_its_pair_range() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut bounded, mut at_t0) = (0, 0);
    for _ in 0..60 {
        let half = 2e6 + (next() % 8_000_000) as f64;
        // Domain k's clock reads t + off_k + drift_k·t at true time t (domain 0: the truth).
        let clocks: Vec<(f64, f64)> = (0..4)
            .map(|k| match k {
                0 => (0.0, 0.0),
                _ => (
                    (next() % 8_000_000) as f64 - 4e6,
                    ((next() % 100_000) as f64 - 5e4) * 1e-9,
                ),
            })
            .collect();
        let read = |k: usize, t: f64| t + clocks[k].0 + clocks[k].1 * t;
        let mut cons = Vec::new();
        for (a, b) in [(0, 1), (1, 2), (2, 3), (3, 0)] {
            for (from, to, n) in [(a, b, 30), (b, a, 5)] {
                for _ in 0..n {
                    let sent = (next() % (2 * half as u64)) as f64 - half;
                    let latency = 2_000.0 + (next() % 800_000) as f64;
                    let x = read(from, sent).round() as i64;
                    let d = read(to, sent + latency).round() as i64 - x;
                    cons.push(Con {
                        a: from,
                        b: to,
                        x,
                        d,
                    });
                }
            }
        }
        cons.sort();
        let s = solve::solve(4, 0, half, &cons).expect("the truth satisfies every constraint");
        assert!(s.dropped.is_empty(), "{:?}", s.dropped);
        for (&(a, b), r) in &s.pairs {
            let Some((at, lead, lo, hi)) = r.best else {
                continue;
            };
            bounded += 1;
            at_t0 += (at == 0.0) as u32;
            let corr = s.offset[a] + s.drift[a] * at - s.offset[b] - s.drift[b] * (at + lead);
            assert!(
                lo - 1.0 <= corr && corr <= hi + 1.0,
                "pair {a}–{b} at {at:.0} ns (b's lead {lead:.0} ns): correction {corr:.0} ns \
                 outside [{lo:.0}, {hi:.0}]; drifts {:?}",
                s.drift
            );
        }
    }
    assert!(
        bounded >= 200 && at_t0 >= 10,
        "{bounded} bounded, {at_t0} at t0"
    );
}
