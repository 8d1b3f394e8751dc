//! The alignment of a converted run checked against the clock errors injected into it
//! (`SIGMATRACE_DEBUG_CLOCK_SKEW`, recorded in each log's `clock_skew=` and
//! `clock_skew_origin=`): used by real_timelines.rs and open_mpi.rs.

use std::path::Path;

use sigmatrace_convert::read::input::LogInput;
use sigmatrace_convert::Report;

use super::round_trips::RoundTrips;

pub fn header_attr<'a>(attrs: &'a [String], key: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
}

/// The injected error of a process at true REALTIME `t` (ns; 0 unskewed).
pub fn injected(input: &LogInput, t: f64) -> f64 {
    let h = input.file.header();
    let Some(v) = header_attr(&h.attrs, "clock_skew") else {
        return 0.0;
    };
    let (o, d) = v.split_once(',').unwrap();
    let (o, d): (f64, f64) = (o.parse().unwrap(), d.parse().unwrap());
    let origin: f64 = header_attr(&h.attrs, "clock_skew_origin")
        .unwrap()
        .parse()
        .unwrap();
    // REALTIME − MONOTONIC_RAW is the same skewed or not (both readings are shifted alike).
    let rt_minus_raw = h.start.realtime as f64 - h.start.monotonic_raw as f64;
    let m = t - rt_minus_raw;
    o + d * 1e-9 * (m - origin)
}

/// What [`check_alignment`] measured.
#[derive(Debug, Default)]
pub struct AlignmentErrors {
    /// Per non-reference domain at t0: (offset error ns, uncertainty ns, half tightest round
    /// trip with the reference).
    pub offsets: Vec<(f64, Option<f64>, Option<f64>)>,
    /// Per pair of domains with messages both ways, at its best time: (error of the pair's
    /// estimate ns, uncertainty ns, half its tightest round trip ns).
    pub links: Vec<(f64, f64, f64)>,
}

/// Checks the alignment against the injected clock errors (panics where it is off).
pub fn check_alignment(logs: &Path, report: &Report) -> AlignmentErrors {
    let mut m = AlignmentErrors::default();
    let a = &report.summary.alignment;
    let topo = &report.topology;
    let inputs: Vec<LogInput> = topo
        .procs
        .iter()
        .map(|p| LogInput::open(&p.path).unwrap())
        .collect();
    let rt = RoundTrips::new(&inputs, topo, a);
    let half_rt = |x: usize, y: usize| rt.half(x, y);
    // The output time line is the reference's clock: true time = output time − its error.
    let r = a.reference_domain;
    let error_at = |d: usize, t: i64| {
        let of = |d: usize, t: f64| injected(&inputs[a.domains[d].procs[0]], t);
        let true_t = t as f64 - of(r, t as f64 - of(r, t as f64));
        of(d, true_t)
    };
    let truth_of = |d: usize| error_at(d, a.t0);
    let e_ref = truth_of(r);
    for (d, da) in a.domains.iter().enumerate() {
        if d == r {
            continue;
        }
        let truth = e_ref - truth_of(d);
        let err = da.offset_ns - truth;
        let hrt = half_rt(r, d);
        m.offsets.push((err, da.uncertainty_ns, hrt));
        if let Some(u) = da.uncertainty_ns {
            assert!(
                err.abs() <= u + 1.0,
                "{}: domain {} offset {} ns, injected {truth:.0} ns: error {err:.0} outside ±{u:.0} ({})",
                logs.display(),
                da.name,
                da.offset_ns,
                a.method
            );
        } else {
            // Unbounded only where messages do not go both ways between it and the reference.
            assert!(
                hrt.is_none(),
                "domain {} unbounded although linked both ways: {a:#?}",
                da.name
            );
        }
    }
    // Every pair of domains with messages both ways: at the time its own messages bound its
    // clock difference best, the truth within the pair's uncertainty of its estimate, the
    // correction inside that range, and the uncertainty no wider than half the tightest
    // round trip between the two.
    for l in &a.links {
        let h = half_rt(l.a, l.b);
        let (Some(u), Some(at), Some(est), Some(corr)) = (
            l.uncertainty_ns,
            l.best_at_ns,
            l.pair_skew_ns,
            l.corrected_skew_ns,
        ) else {
            assert!(
                h.is_none() && (l.pairs_ab == 0 || l.pairs_ba == 0),
                "link {}–{} unbounded although linked both ways: {a:#?}",
                l.a,
                l.b
            );
            continue;
        };
        let truth = error_at(l.b, at) - error_at(l.a, at);
        let what = format!(
            "{}: link {} – {} at t0{:+.0} ns",
            logs.display(),
            a.domains[l.a].name,
            a.domains[l.b].name,
            at - a.t0
        );
        assert!(
            (est - truth).abs() <= u + 1.0,
            "{what}: pair estimate {est:.0} ns, injected {truth:.0} ns, outside ±{u:.0}"
        );
        assert!(
            (corr - est).abs() <= u + 1.0,
            "{what}: correction {corr:.0} ns outside the pair's range {est:.0} ± {u:.0} ns"
        );
        // A round trip x1 → y1, x2 → y2 (x2 − y1 = p on b's clock) bounds the difference at
        // the instant of x1 to a width of RTT − p plus what the drifts (each within ±B,
        // B = MAX_DRIFT) can add over the round trip: at most B·(2·L1 + p) for b and B·RTT
        // for a, L1 ≤ RTT − p — so half-width ≤ h·(1 + 3B). The instant b's clock is read
        // at comes from the global estimate of the lead; its error e moves each extreme by at
        // most B·e. Measured: well below h (see `links`); what is asserted is what is proven.
        let h = h.expect("a bounded link has messages both ways");
        let b = sigmatrace_convert::align::solve::MAX_DRIFT;
        let bound = h * (1.0 + 3.0 * b) + b * (corr - truth).abs() + 1.0;
        assert!(
            u <= bound,
            "{what}: uncertainty ±{u:.0} ns wider than half the tightest round trip ({h:.0} ns; proven bound {bound:.0} ns)"
        );
        m.links.push((est - truth, u, h));
    }
    m
}
