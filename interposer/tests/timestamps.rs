//! Timestamps as recorded: a thread's records keep their event times in append order around
//! the periodic clock snapshots, and the debug clock skew (`SIGMATRACE_DEBUG_CLOCK_SKEW`)
//! shifts every time the log gives by exactly the offset and drift asked for, measured
//! against the program's own untraced `CLOCK_MONOTONIC_RAW` (cprogs/fake_verbs.c `clock`).

mod common;
use common::*;

use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn fake(args: &[&str]) -> Vec<String> {
    let mut v = vec![cprog("fake_verbs").display().to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

#[test]
fn a_threads_records_are_in_time_order_around_clock_snapshots() {
    for clock in ["tsc", "monotonic_raw"] {
        let dir = tempfile::tempdir().unwrap();
        let out = Cmd::new(&fake(&["post", "20000"]))
            .env("SIGMATRACE_SNAPSHOT_MS", "1")
            .env("SIGMATRACE_CLOCK", clock)
            .traced(dir.path())
            .run(LIMIT);
        assert!(out.ok(), "{out:?}");
        let t = only_log(dir.path());
        let (mut last, mut snapshots, mut hot) = (0u64, 0, 0);
        for (_, r) in &t.order {
            let ts = match r {
                Rec::PostSend(s) => s.ts,
                Rec::Wc(w) => w.ts,
                Rec::Snapshot(s) => {
                    snapshots += 1;
                    s.ts
                }
                _ => continue,
            };
            hot += 1;
            assert!(
                ts >= last,
                "{clock}: record {hot} at {ts} follows one at {last} ({r:?})"
            );
            last = ts;
        }
        assert_eq!(t.sends().len(), 20000);
        assert!(
            snapshots >= 3,
            "{clock}: {snapshots} snapshots: the periodic ones must fall among the posts"
        );
    }
}

/// Least-squares line through (x, y).
fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in points {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
    }
    let slope = sxy / sxx;
    (slope, my - slope * mx)
}

#[test]
fn the_debug_clock_skew_shifts_every_time_by_its_offset_and_drift() {
    // Tolerance of one comparison: the log's own ts → CLOCK_MONOTONIC_RAW fit (snapshots with
    // tight brackets only) and the rounding of the injected offset to ticks.
    const TOL_NS: f64 = 3_000.0;
    for clock in ["tsc", "monotonic_raw"] {
        for (offset, drift) in [(2_000_000i64, 50_000i64), (-2_000_000, -50_000)] {
            let dir = tempfile::tempdir().unwrap();
            let out = Cmd::new(&fake(&["clock", "16", "50"]))
                .env("SIGMATRACE_CLOCK", clock)
                .env("SIGMATRACE_SNAPSHOT_MS", "20")
                .env("SIGMATRACE_DEBUG_CLOCK_SKEW", &format!("{offset},{drift}"))
                .traced(dir.path())
                .run(LIMIT);
            assert!(out.ok(), "{out:?}");
            let t = only_log(dir.path());
            let h = t.header.as_ref().unwrap();
            assert!(
                h.attrs.contains(&format!("clock_skew={offset},{drift}")),
                "{:?}",
                h.attrs
            );
            let origin: f64 = h
                .attrs
                .iter()
                .find_map(|a| a.strip_prefix("clock_skew_origin="))
                .expect("clock_skew_origin attribute")
                .parse()
                .unwrap();
            // The log's own map ts → (skewed) CLOCK_MONOTONIC_RAW, from its snapshots.
            let mut snaps: Vec<_> = t.all(|r| match r {
                Rec::Snapshot(s) => Some(*s),
                _ => None,
            });
            snaps.push(h.start);
            let width = |s: &sigmatrace_schemas::ClockSnapshot| s.ts_after - s.ts;
            let mut widths: Vec<u64> = snaps.iter().map(width).collect();
            widths.sort();
            let tight = widths[widths.len() / 2] * 2;
            let points: Vec<(f64, f64)> = snaps
                .iter()
                .filter(|s| width(s) <= tight)
                .map(|s| ((s.ts / 2 + s.ts_after / 2) as f64, s.monotonic_raw as f64))
                .collect();
            assert!(points.len() >= 10, "{clock}: {} snapshots", points.len());
            let (slope, icpt) = fit(&points);
            let skewed = |t: f64| t + offset as f64 + drift as f64 * (t - origin) / 1e9;
            let sends = t.sends();
            let lines = tagged(&out.stdout, "post");
            assert_eq!(lines.len(), 16);
            assert_eq!(sends.len(), 16);
            let mut checked = 0;
            let mut unskewed_miss: f64 = 0.0;
            for (l, s) in lines.iter().zip(&sends) {
                let (i, before, after) = (num(&l[0]), num(&l[1]) as f64, num(&l[2]) as f64);
                assert_eq!(s.wr_id, i);
                // A wide bracket (the first post creates the log; preemption) is a looser
                // check, never skipped.
                checked += (after - before <= 20_000.0) as usize;
                let logged = slope * s.ts as f64 + icpt;
                assert!(
                    logged >= skewed(before) - TOL_NS && logged <= skewed(after) + TOL_NS,
                    "{clock} skew {offset},{drift}: post {i} logged at {logged:.0}, expected \
                     within [{:.0}, {:.0}] ± {TOL_NS}",
                    skewed(before),
                    skewed(after)
                );
                // Without the drift term the same check would be off by this much.
                unskewed_miss = unskewed_miss.max((drift as f64 * (before - origin) / 1e9).abs());
            }
            assert!(checked >= 8, "{clock}: only {checked} tight brackets");
            assert!(
                unskewed_miss > 10.0 * TOL_NS,
                "{clock}: the run is long enough for the drift to be measured \
                 ({unskewed_miss:.0} ns)"
            );
        }
    }
}
