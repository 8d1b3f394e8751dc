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
        let hz = t.header.as_ref().expect("header").tsc_hz;
        check_cadence(&t, hz / 1000, clock);
    }
}

/// The snapshot cadence (one thread): a periodic snapshot follows the first record at or
/// after the due time, and the next one is due one period after that record's time — so
/// every record after a snapshot is earlier than its trigger's time plus the period, except
/// the next snapshot's own trigger, which is not. (The hot paths take no record past their
/// horizon, which must never be later than the due time.)
fn check_cadence(t: &Trace, period: u64, clock: &str) {
    let hot = |r: &Rec| match r {
        Rec::PostSend(s) => Some(s.ts),
        Rec::Wc(w) => Some(w.ts),
        _ => None,
    };
    let order: Vec<&Rec> = t.order.iter().map(|(_, r)| r).collect();
    let snaps: Vec<usize> = (0..order.len())
        .filter(|&i| matches!(order[i], Rec::Snapshot(_)))
        .collect();
    let mut checked = 0;
    for w in snaps.windows(2) {
        let (a, b) = (w[0], w[1]);
        let trigger = a.checked_sub(1).and_then(|i| hot(order[i]));
        let (Some(trigger), Some(next)) = (trigger, hot(order[b - 1])) else {
            continue;
        };
        let due = trigger + period;
        for r in &order[a + 1..b - 1] {
            if let Some(ts) = hot(r) {
                assert!(
                    ts < due,
                    "{clock}: a record at {ts}, due {due}, before a snapshot"
                );
            }
        }
        let last = b + 1 == order.len() || snaps.last() == Some(&b);
        assert!(
            last || next >= due,
            "{clock}: a snapshot after {next}, due only at {due}"
        );
        checked += 1;
    }
    assert!(checked >= 2, "{clock}: {checked} periods checked");
}

/// The log's map from its timestamp scale to the true (de-skewed) `CLOCK_MONOTONIC_RAW`, taken
/// through two of its own clock snapshots, and how far that map can be off at a given time.
///
/// A snapshot read `CLOCK_MONOTONIC_RAW` somewhere between its `ts` and `ts_after`: taking the
/// bracket's middle errs by at most half its width, and a line through two such points errs at
/// `t` by at most the two half-widths weighted by where `t` lies between them. The log's
/// clocks are affine in the true ones (skewed or not), so that bound is all the uncertainty.
struct SnapshotMap {
    a: (f64, f64, f64),
    b: (f64, f64, f64),
}

impl SnapshotMap {
    /// The tightest snapshot of the first third and of the last third (by time);
    /// `true_raw` de-skews a snapshot's `CLOCK_MONOTONIC_RAW` reading.
    fn new(
        snaps: &[sigmatrace_schemas::ClockSnapshot],
        true_raw: impl Fn(f64) -> f64,
    ) -> SnapshotMap {
        let mut by_time = snaps.to_vec();
        by_time.sort_by_key(|s| s.ts);
        let third = by_time.len() / 3;
        let point = |s: &sigmatrace_schemas::ClockSnapshot| {
            let mid = s.ts as f64 + (s.ts_after - s.ts) as f64 / 2.0;
            (
                mid,
                true_raw(s.monotonic_raw as f64),
                (s.ts_after - s.ts) as f64 / 2.0,
            )
        };
        let tightest = |part: &[sigmatrace_schemas::ClockSnapshot]| {
            point(part.iter().min_by_key(|s| s.ts_after - s.ts).unwrap())
        };
        SnapshotMap {
            a: tightest(&by_time[..third]),
            b: tightest(&by_time[by_time.len() - third..]),
        }
    }

    /// True ns at log time `t`, and the bound on its error (ns).
    fn at(&self, t: f64) -> (f64, f64) {
        let ((ta, na, ea), (tb, nb, eb)) = (self.a, self.b);
        let ns_per_tick = (nb - na) / (tb - ta);
        let l = (t - ta) / (tb - ta);
        let err_ticks = (1.0 - l).abs() * ea + l.abs() * eb;
        (na + (t - ta) * ns_per_tick, err_ticks * ns_per_tick)
    }
}

#[test]
fn the_debug_clock_skew_shifts_every_time_by_its_offset_and_drift() {
    // Rounding of the skew's integer arithmetic and of the fit's floating point, ns. Every
    // other uncertainty is measured: the program's bracket around its post call and the
    // snapshots' brackets around their clock readings.
    const EPSILON_NS: f64 = 50.0;
    for clock in ["tsc", "monotonic_raw"] {
        for (offset, drift) in [(2_000_000i64, 500_000i64), (-2_000_000, -500_000)] {
            let dir = tempfile::tempdir().unwrap();
            let out = Cmd::new(&fake(&["clock", "24", "50"]))
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
            // Inverse of t' = t + offset + drift·(t − origin) on CLOCK_MONOTONIC_RAW.
            let d = drift as f64 / 1e9;
            let true_raw = |skewed: f64| (skewed - offset as f64 + d * origin) / (1.0 + d);
            let mut snaps: Vec<_> = t.all(|r| match r {
                Rec::Snapshot(s) => Some(*s),
                _ => None,
            });
            snaps.push(h.start);
            assert!(snaps.len() >= 12, "{clock}: {} snapshots", snaps.len());
            let map = SnapshotMap::new(&snaps, true_raw);
            let sends = t.sends();
            let lines = tagged(&out.stdout, "post");
            assert_eq!(lines.len(), 24);
            assert_eq!(sends.len(), 24);
            // Posts whose check is sharper than the drift it would miss without drift (the
            // drift grows by 25 µs per post; load widens brackets, so a few suffice). A debug
            // build's traced post after a 50 ms sleep, all caches cold, takes 20–70 µs on the
            // 2-vCPU VMs: at 50 ppm (2.5 µs per post) no post was sharp enough there.
            let mut sharp = 0;
            for (l, s) in lines.iter().zip(&sends) {
                let (i, before, after) = (num(&l[0]), num(&l[1]) as f64, num(&l[2]) as f64);
                assert_eq!(s.wr_id, i);
                let (logged, conversion) = map.at(s.ts as f64);
                let slack = conversion + EPSILON_NS;
                assert!(
                    logged >= before - slack && logged <= after + slack,
                    "{clock} skew {offset},{drift}: post {i} logged at {logged:.0} (de-skewed, \
                     ±{conversion:.0} from the snapshots), the program read the clock at \
                     {before:.0} before and {after:.0} after the call"
                );
                let without_drift = (d * (before - origin)).abs();
                sharp += (after - before + 2.0 * slack < without_drift) as usize;
            }
            assert!(
                sharp >= 2,
                "{clock}: only {sharp} posts could tell a missing drift from noise"
            );
        }
    }
}
