//! Clock alignment: nodes with known clock offset and drift; the converter must recover the
//! corrections within the bound the message latencies imply and leave no causality violation.

mod common;

use sigmatrace_convert::synth::{Pattern, Scenario, T_START};
use sigmatrace_convert::{stats, ConvertOptions};

/// Clock error of a synthetic host at true time t (as synth applies it).
fn err(offset: i64, ppm: f64, t: u64) -> f64 {
    offset as f64 + ppm * 1e-6 * (t + 10_000_000 - T_START) as f64
}

fn check(pattern: Pattern, errs: &[(i64, f64)], messages: u64) -> Vec<f64> {
    check_with(pattern, errs, messages, 1000)
}

/// Returns the recovered drift (ppm) of each host.
fn check_with(pattern: Pattern, errs: &[(i64, f64)], messages: u64, interval_ns: u64) -> Vec<f64> {
    let mut sc = Scenario::ring(errs.len(), 2, pattern, messages);
    sc.interval_ns = interval_ns;
    for (h, &(o, d)) in errs.iter().enumerate() {
        sc.hosts[h].offset_ns = o;
        sc.hosts[h].drift_ppm = d;
    }
    let (dir, truth) = common::generate(&sc);
    let opts = ConvertOptions {
        jobs: 2,
        verify_alignment: true,
        ..Default::default()
    };
    let rep = stats(&[dir.path().to_owned()], &opts).unwrap();
    let a = &rep.summary.alignment;
    assert_eq!(a.reference_host, 0);
    let (pairs, bad) = a.verified.unwrap();
    assert_eq!(pairs, truth.flows, "every message matched");
    assert_eq!(bad, 0, "no receive precedes its send after alignment");
    assert_eq!(a.violations_after, 0);
    // Bound: with one-way latencies in [lo, hi], causality pins the relative clock error to
    // an interval no wider than the largest one-way latency.
    let bound = sc.latency_ns.1 as f64;
    for (h, &(o, d)) in errs.iter().enumerate() {
        let ha = &a.hosts[h];
        for t in [truth.t_first, truth.t_last] {
            let true_rel = err(o, d, t) - err(errs[0].0, errs[0].1, t);
            let host_t = (t as f64 + err(o, d, t)) as i64;
            let corr = ha.offset_ns + ha.drift_ppm * 1e-6 * (host_t - a.t0) as f64;
            assert!(
                (corr + true_rel).abs() <= bound,
                "host {h} at {t}: correction {corr:.0} ns vs clock error {true_rel:.0} ns (bound {bound})"
            );
        }
        if h > 0 {
            let u = ha
                .uncertainty_ns
                .expect("two-way traffic bounds every host");
            assert!(u <= bound, "uncertainty {u}");
        }
    }
    if errs.iter().any(|e| e.0.abs() > 5_000) {
        assert!(
            a.violations_before > 0,
            "the shifted clocks did violate causality before"
        );
    }
    a.hosts.iter().map(|h| h.drift_ppm).collect()
}

#[test]
fn recovers_offset_and_drift_of_a_shifted_node() {
    check(Pattern::SendRecv, &[(0, 0.0), (250_000, 40.0)], 3000);
}

/// Over 200 ms, 40 ppm moves the clock by 8 µs — several message latencies — so an offset
/// alone cannot satisfy causality: the drift must be recovered.
#[test]
fn recovers_drift_over_a_long_run() {
    let drift = check_with(
        Pattern::SendRecv,
        &[(0, 0.0), (-40_000, 40.0)],
        2000,
        100_000,
    );
    assert!(
        (drift[1] + 40.0).abs() < 10.0,
        "drift correction {} ppm, want ≈ −40",
        drift[1]
    );
}

/// A short run cannot tell drift from offset: the correction must stay a plain offset
/// instead of an extrapolated slope.
#[test]
fn short_runs_do_not_invent_drift() {
    let drift = check(Pattern::SendRecv, &[(0, 0.0), (120_000, 20.0)], 300);
    assert!(drift[1].abs() < 60.0, "drift {} ppm", drift[1]);
}

#[test]
fn recovers_three_nodes_with_write_imm_traffic() {
    check(
        Pattern::Write { signal_every: 4 },
        &[(0, 0.0), (-80_000, -15.0), (1_500_000, 25.0)],
        4000,
    );
}

#[test]
fn aligned_clocks_need_no_correction() {
    check(Pattern::SendRecv, &[(0, 0.0), (0, 0.0)], 1000);
}

/// The corrections are visible in the trace itself: every process track's labels carry its
/// host's offset, drift and uncertainty, and an instant on the alignment track lists all hosts.
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
    assert!(
        a.hosts[1].offset_ns.abs() > 100_000.0,
        "host 1 was corrected"
    );
    common::validate(&out, &[]);
}
