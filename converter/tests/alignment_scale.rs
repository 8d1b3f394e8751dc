//! Clock alignment at scale with exact ground truth: 1024 ranks on 128 hosts (8 per host),
//! each host with its own clock offset (up to ±2 ms) and drift (up to ±50 ppm), connected by a
//! ring of ranks plus chords between hosts. Prints the distribution of estimate error over
//! reported uncertainty; each recovered offset must lie within its uncertainty, and the
//! errors must not pile up at the interval's edge (±1).

mod common;

use sigmatrace_convert::{stats, ConvertOptions};
use sigmatrace_synth::{LinkSpec, Pattern, Scenario, T_START};

const HOSTS: usize = 128;
const PER_HOST: usize = 8;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A pseudo-random value in [−1, 1) fixed by `seed`.
fn unit(seed: u64) -> f64 {
    (mix(seed) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

fn err(offset: i64, ppm: f64, t: u64) -> f64 {
    offset as f64 + ppm * 1e-6 * (t + 10_000_000 - T_START) as f64
}

#[test]
fn ranks_1024_recover_every_offset_within_its_uncertainty() {
    let mut sc = Scenario::ring(HOSTS, PER_HOST, Pattern::SendRecv, 150);
    sc.interval_ns = 20_000;
    sc.snapshot_every_ns = 1_000_000;
    sc.chunk_size = 1 << 16;
    for (h, spec) in sc.hosts.iter_mut().enumerate().skip(1) {
        spec.offset_ns = (unit(h as u64) * 2_000_000.0) as i64;
        spec.drift_ppm = unit(h as u64 + 1000) * 50.0;
    }
    // Chords: rank 3 of host h talks to rank 5 of host h + 11 (mod 128).
    for h in 0..HOSTS {
        sc.links.push(LinkSpec {
            a: h * PER_HOST + 3,
            b: ((h + 11) % HOSTS) * PER_HOST + 5,
            pattern: Pattern::SendRecv,
            messages: 150,
            bytes: 256,
        });
    }
    let (dir, truth) = common::generate(&sc);
    let opts = ConvertOptions {
        jobs: 2,
        ..Default::default()
    };
    let rep = stats(&[dir.path().to_owned()], &opts).unwrap();
    let a = &rep.summary.alignment;
    eprintln!("phases: {:?}", rep.summary.phases);
    assert_eq!(a.domains.len(), HOSTS);
    assert_eq!(a.pairs, truth.flows, "every message matched");
    assert!(a.inverted_before > 0);
    assert_eq!(a.inverted_after, 0, "no receive before its send");
    assert_eq!(a.dropped_constraints, 0);
    let e0 = (sc.hosts[0].offset_ns, sc.hosts[0].drift_ppm);
    let t_true = (a.t0 as f64 - err(e0.0, e0.1, T_START)) as u64;
    let mut ratios = Vec::new();
    let mut uncs = Vec::new();
    for (h, spec) in sc.hosts.iter().enumerate().skip(1) {
        let d = &a.domains[h];
        let want = -(err(spec.offset_ns, spec.drift_ppm, t_true) - err(e0.0, e0.1, t_true));
        let u = d.uncertainty_ns.expect("every host is bounded both ways");
        let e = d.offset_ns - want;
        assert!(
            e.abs() <= u + 1.0,
            "host {h}: error {e:.0} ns outside ±{u:.0} ns"
        );
        ratios.push(e / u);
        uncs.push(u);
    }
    let mut hist = [0usize; 10];
    for r in &ratios {
        hist[(((r + 1.0) * 5.0).floor() as usize).min(9)] += 1;
    }
    uncs.sort_by(f64::total_cmp);
    eprintln!(
        "error / uncertainty over {} hosts, bins of 0.2 from −1 to 1: {hist:?}",
        ratios.len()
    );
    eprintln!(
        "uncertainty ns: min {:.0} median {:.0} max {:.0}",
        uncs[0],
        uncs[uncs.len() / 2],
        uncs[uncs.len() - 1]
    );
    let edge = ratios.iter().filter(|r| r.abs() > 0.9).count();
    assert!(
        edge * 10 <= ratios.len(),
        "{edge} of {} estimates within 10% of their interval's edge: {hist:?}",
        ratios.len()
    );
    let centre = ratios.iter().filter(|r| r.abs() <= 0.5).count();
    assert!(
        centre * 2 >= ratios.len(),
        "only {centre} of {} estimates in the inner half: {hist:?}",
        ratios.len()
    );
}

/// 300 hosts of one rank each (more hosts than a byte counts): every host is its own machine
/// with its own clock, and the alignment recovers each offset within its uncertainty. The
/// generator once gave hosts 250 apart one boot id, which made them one machine: 512 hosts
/// converted as 250, with uncertainties of seconds.
#[test]
fn hosts_300_are_300_machines() {
    const MANY: usize = 300;
    let mut sc = Scenario::ring(MANY, 1, Pattern::SendRecv, 40);
    sc.interval_ns = 20_000;
    sc.snapshot_every_ns = 1_000_000;
    sc.chunk_size = 1 << 16;
    for (h, spec) in sc.hosts.iter_mut().enumerate().skip(1) {
        spec.offset_ns = (unit(h as u64 + 7) * 2_000_000.0) as i64;
    }
    let (dir, truth) = common::generate(&sc);
    let rep = stats(&[dir.path().to_owned()], &ConvertOptions::default()).unwrap();
    assert_eq!(rep.summary.hosts, MANY);
    let a = &rep.summary.alignment;
    assert_eq!(a.domains.len(), MANY);
    assert_eq!(a.pairs, truth.flows, "every message matched");
    assert_eq!(a.inverted_after, 0, "no receive before its send");
    let e0 = sc.hosts[0].offset_ns;
    for (h, spec) in sc.hosts.iter().enumerate().skip(1) {
        let d = &a.domains[h];
        let want = -((spec.offset_ns - e0) as f64);
        let u = d.uncertainty_ns.expect("every host is bounded both ways");
        let e = d.offset_ns - want;
        assert!(
            e.abs() <= u + 1.0,
            "host {h}: error {e:.0} ns outside ±{u:.0} ns"
        );
    }
}
