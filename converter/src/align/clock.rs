//! Per-process clock fits: log timestamps (TSC ticks or MONOTONIC_RAW ns) → host time.
//!
//! Each log has a start snapshot in its header and periodic `ClockSnapshot` records pairing the
//! timestamp source with the system clocks. The converter fits `ts → CLOCK_MONOTONIC` by least
//! squares over all snapshots (slope = rate and drift of the source), then adds the host's
//! `REALTIME − MONOTONIC` offset. Fitting against MONOTONIC (not REALTIME) keeps NTP steps of the
//! wall clock out of the fit, and all processes of one host share MONOTONIC exactly.
//! GPU `%globaltimer` values map to the log's timestamp source the same way, from
//! `GpuClockPair` records.

use sigmatrace_schemas::clock::TimestampSource;
use sigmatrace_schemas::records::{ClockSnapshot, GpuClockPair};

/// Largest output time (keeps all arithmetic on times inside i64).
pub const MAX_TIME: i64 = 1 << 62;

/// `out = out0 + (x − x0) · slope`, in integer nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearMap {
    pub x0: u64,
    pub out0: i64,
    pub slope: f64,
}

impl LinearMap {
    pub const IDENTITY: LinearMap = LinearMap {
        x0: 0,
        out0: 0,
        slope: 1.0,
    };

    /// Maps `x`. Results are clamped to [0, 2^62] so that differences and sums of mapped
    /// times never overflow, whatever a damaged log contains.
    #[inline]
    pub fn map(&self, x: u64) -> i64 {
        let v = x.wrapping_sub(self.x0) as i64 as f64 * self.slope;
        let r = self
            .out0
            .saturating_add((if v >= 0.0 { v + 0.5 } else { v - 0.5 }) as i64);
        r.clamp(0, MAX_TIME)
    }

    /// This map on the inputs `lo..=hi` alone where it provably needs none of what keeps
    /// [`LinearMap::map`] in range (none of them maps before `x0`, saturates or clamps):
    /// `None` when it might (a map that does not increase, a range reaching past the map's
    /// limits or before its origin). See [`RangeMap`].
    pub fn on_range(&self, lo: u64, hi: u64) -> Option<RangeMap> {
        if !(self.slope > 0.0 && self.slope.is_finite()) || lo > hi || hi - lo == u64::MAX {
            return None;
        }
        // Distances from x0 that are i64 and not negative (then every input's between them
        // is, and `wrapping_sub` as i64 gives it).
        let d = |x: u64| x as i128 - self.x0 as i128;
        if d(lo) < 0 || d(hi) > i64::MAX as i128 {
            return None;
        }
        // The map increases (each of its steps rounds monotonically), so its values on the
        // range lie between those at its ends: inside i64 with room (no saturating cast) and,
        // added to `out0`, inside [0, MAX_TIME] (nothing clamped).
        let rounded = |x: u64| d(x) as i64 as f64 * self.slope + 0.5;
        let (a, b) = (rounded(lo), rounded(hi));
        if !(a >= 0.0 && b < (1u64 << 62) as f64) {
            return None;
        }
        let inside =
            |r: f64| (0..=MAX_TIME as i128).contains(&(self.out0 as i128 + r as i64 as i128));
        (inside(a) && inside(b)).then_some(RangeMap {
            lo,
            len: hi - lo + 1,
            map: *self,
        })
    }

    /// The smallest x with `map(x) >= out` (for increasing maps).
    pub fn inverse_ceil(&self, out: i64) -> u64 {
        if self.slope <= 0.0 {
            return u64::MAX;
        }
        let dx = (out.wrapping_sub(self.out0) as f64 / self.slope).floor() as i64;
        let mut x = self.x0.wrapping_add(dx as u64);
        // Rounding leaves x within a step or two; bounded so odd maps cannot loop.
        for _ in 0..64 {
            if self.map(x) >= out && x > 0 {
                x -= 1;
            } else {
                break;
            }
        }
        for _ in 0..64 {
            if self.map(x) < out && x < u64::MAX {
                x += 1;
            } else {
                break;
            }
        }
        x
    }

    /// Composes `self` after a shift: `out + offset + rate · (out − at)`.
    pub fn then_correct(&self, offset_ns: f64, rate: f64, at: i64) -> LinearMap {
        // Keep absolute times (~1.7e18 ns) out of f64: only the correction is fractional.
        let delta = offset_ns + rate * self.out0.wrapping_sub(at) as f64;
        LinearMap {
            x0: self.x0,
            out0: self.out0.saturating_add(delta.round() as i64),
            slope: self.slope * (1.0 + rate),
        }
    }
}

/// A [`LinearMap`] with the inputs where its checks do nothing ([`LinearMap::on_range`]):
/// there it maps with the same floating-point operations, less the checks; elsewhere as the
/// map itself (out of line). The same results, bit for bit, for every input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeMap {
    /// The inputs `lo..lo + len` (none when `len` is 0).
    lo: u64,
    len: u64,
    map: LinearMap,
}

impl RangeMap {
    /// `map` on `lo..=hi` where [`LinearMap::on_range`] allows it, else everywhere as `map`.
    pub fn new(map: LinearMap, lo: u64, hi: u64) -> RangeMap {
        map.on_range(lo, hi)
            .unwrap_or(RangeMap { lo: 0, len: 0, map })
    }

    /// [`LinearMap::map`] of `x`.
    #[inline(always)]
    pub fn map(&self, x: u64) -> i64 {
        if x.wrapping_sub(self.lo) >= self.len {
            return self.outside(x);
        }
        let v = x.wrapping_sub(self.map.x0) as i64 as f64 * self.map.slope;
        // SAFETY: on the range, `v + 0.5` lies in [0, 2^62) (`LinearMap::on_range`): finite
        // and inside i64, where this is the `as` cast without its checks (the same result).
        self.map.out0 + unsafe { (v + 0.5).to_int_unchecked::<i64>() }
    }

    #[cold]
    #[inline(never)]
    fn outside(&self, x: u64) -> i64 {
        self.map.map(x)
    }
}

/// Least-squares line through (x, y) points, x relative to `x0`.
fn fit(points: &[(u64, i64)], default_slope: f64) -> (LinearMap, f64) {
    let x0 = points[0].0;
    let y0 = points[0].1;
    if points.len() == 1 {
        return (
            LinearMap {
                x0,
                out0: y0,
                slope: default_slope,
            },
            0.0,
        );
    }
    let n = points.len() as f64;
    let (mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0);
    for &(x, y) in points {
        let dx = x.wrapping_sub(x0) as i64 as f64;
        let dy = y.wrapping_sub(y0) as f64;
        sx += dx;
        sy += dy;
        sxx += dx * dx;
        sxy += dx * dy;
    }
    let den = n * sxx - sx * sx;
    let slope = (n * sxy - sx * sy) / den;
    // Degenerate or nonsensical fits (damaged snapshots) fall back to the nominal rate.
    let (slope, icpt) = if den.abs() < 1e-9 || !slope.is_finite() || slope <= 0.0 {
        (default_slope, sy / n - default_slope * sx / n)
    } else {
        (slope, (sy - slope * sx) / n)
    };
    placed(points, x0, y0, icpt, slope)
}

/// The map of `slope` through (`x0`, `y0` + `icpt`) and its largest residual over `points`.
fn placed(points: &[(u64, i64)], x0: u64, y0: i64, icpt: f64, slope: f64) -> (LinearMap, f64) {
    let map = LinearMap {
        x0,
        out0: y0.saturating_add(icpt.round() as i64),
        slope,
    };
    let resid = points
        .iter()
        .map(|&(x, y)| map.map(x).wrapping_sub(y).unsigned_abs() as f64)
        .fold(0.0, f64::max);
    (map, resid)
}

/// The nominal ns per tick of a timestamp source.
fn nominal_slope(source: TimestampSource, hz: u64) -> f64 {
    match source {
        TimestampSource::MonotonicRaw => 1.0,
        TimestampSource::Tsc if hz > 0 => 1e9 / hz as f64,
        TimestampSource::Tsc => 1.0,
    }
}

/// A snapshot's bracket (ticks between the two timestamp reads around the clock reads) more
/// than this many times the process's tightest bracket, and more than
/// [`PREEMPTED_SLACK_NS`] wider than it, means the snapshot was preempted: its midpoint may be
/// off by half the bracket, so it is left out of the fit.
const PREEMPTED_BRACKET: u64 = 4;

/// Brackets within this much of the tightest are kept whatever the ratio (a 40-tick bracket
/// next to an 8-tick one is timer noise, not preemption).
const PREEMPTED_SLACK_NS: f64 = 250.0;

/// Usable points of one process's snapshots: (middle of the bracket, MONOTONIC), sorted.
/// Snapshots whose bracket is preempted against the process's tightest one (see
/// [`PREEMPTED_BRACKET`]) are left out; the tightest is always kept. The tightest, not the
/// median: a short run has two snapshots, and the median of two is the wider one, so a
/// preempted start snapshot would never be dropped and would move the process's whole time
/// line by half its bracket. A reversed bracket (a damaged snapshot) is used, at its first
/// read, only when no snapshot has a bracket.
fn snapshot_points(snaps: &[ClockSnapshot], ns_per_tick: f64) -> Vec<(u64, i64)> {
    let usable = snaps.iter().filter(|s| s.monotonic != 0);
    let bracketed: Vec<(u64, i64, u64)> = usable
        .clone()
        .filter(|s| s.ts_after >= s.ts)
        .map(|s| {
            let w = s.ts_after - s.ts;
            (s.ts + w / 2, s.monotonic as i64, w)
        })
        .collect();
    let mut pts: Vec<(u64, i64)> = match bracketed.iter().map(|p| p.2).min() {
        None => usable.map(|s| (s.ts, s.monotonic as i64)).collect(),
        Some(tightest) => {
            let slack = if ns_per_tick > 0.0 && ns_per_tick.is_finite() {
                (PREEMPTED_SLACK_NS / ns_per_tick) as u64
            } else {
                0
            };
            // Saturating: a damaged log's brackets can be any 64-bit value.
            let limit = tightest
                .saturating_mul(PREEMPTED_BRACKET)
                .max(tightest.saturating_add(slack));
            bracketed
                .into_iter()
                .filter(|p| p.2 <= limit)
                .map(|p| (p.0, p.1))
                .collect()
        }
    };
    pts.sort_unstable();
    pts.dedup_by_key(|p| p.0);
    pts
}

/// `ts → CLOCK_MONOTONIC` for one or more processes whose timestamp counters run at one rate
/// (one machine: the TSC and MONOTONIC_RAW tick alike for every process): one slope by least
/// squares over all their snapshots, each process with its own intercept (its counter's
/// origin may differ). Returns per set the map, its largest residual (ns) and its points.
pub fn fit_snapshots(
    sets: &[&[ClockSnapshot]],
    source: TimestampSource,
    hz: u64,
) -> Vec<(LinearMap, f64, usize)> {
    let default_slope = nominal_slope(source, hz);
    let pts: Vec<Vec<(u64, i64)>> = sets
        .iter()
        .map(|v| snapshot_points(v, default_slope))
        .collect();
    // Common slope: Σ (x − x̄_p)(y − ȳ_p) / Σ (x − x̄_p)² over every process p.
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for p in pts.iter().filter(|p| p.len() > 1) {
        let (x0, y0) = p[0];
        let n = p.len() as f64;
        let rel: Vec<(f64, f64)> = p
            .iter()
            .map(|&(x, y)| (x.wrapping_sub(x0) as i64 as f64, y.wrapping_sub(y0) as f64))
            .collect();
        let (mx, my) = (
            rel.iter().map(|r| r.0).sum::<f64>() / n,
            rel.iter().map(|r| r.1).sum::<f64>() / n,
        );
        for (x, y) in rel {
            sxy += (x - mx) * (y - my);
            sxx += (x - mx) * (x - mx);
        }
    }
    let slope = sxy / sxx;
    let slope = if sxx < 1e-9 || !slope.is_finite() || slope <= 0.0 {
        default_slope
    } else {
        slope
    };
    pts.iter()
        .map(|p| {
            let Some(&(x0, y0)) = p.first() else {
                // No usable snapshot: the source as ns since an unknown origin.
                let map = LinearMap {
                    x0: 0,
                    out0: 0,
                    slope: default_slope,
                };
                return (map, 0.0, 0);
            };
            let n = p.len() as f64;
            let icpt = p
                .iter()
                .map(|&(x, y)| y.wrapping_sub(y0) as f64 - slope * x.wrapping_sub(x0) as i64 as f64)
                .sum::<f64>()
                / n;
            let (map, resid) = placed(p, x0, y0, icpt, slope);
            (map, resid, p.len())
        })
        .collect()
}

/// How one process's timestamps map to its host's clocks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessClock {
    /// ts → CLOCK_MONOTONIC ns.
    pub to_monotonic: LinearMap,
    /// REALTIME − MONOTONIC at the log's start.
    pub realtime_offset: i64,
    /// Largest residual of the fit (ns): how well the snapshots agree with one line.
    pub fit_residual_ns: f64,
    pub snapshots: usize,
}

impl ProcessClock {
    /// Fits the process's snapshots (the header's start snapshot first).
    pub fn fit(
        start: &ClockSnapshot,
        snaps: &[ClockSnapshot],
        source: TimestampSource,
        hz: u64,
    ) -> Self {
        let usable = |s: &ClockSnapshot| s.monotonic != 0;
        let all: Vec<ClockSnapshot> = std::iter::once(*start)
            .chain(snaps.iter().copied())
            .collect();
        let (to_monotonic, fit_residual_ns, snapshots) = fit_snapshots(&[&all], source, hz)[0];
        let base = if usable(start) {
            Some(start)
        } else {
            snaps.iter().find(|s| usable(s))
        };
        ProcessClock {
            to_monotonic,
            realtime_offset: base
                .map_or(0, |b| (b.realtime as i64).wrapping_sub(b.monotonic as i64)),
            fit_residual_ns,
            snapshots,
        }
    }

    /// ts → host REALTIME using `rt_offset` (the host's REALTIME − MONOTONIC).
    pub fn to_realtime(&self, rt_offset: i64) -> LinearMap {
        LinearMap {
            out0: self.to_monotonic.out0.saturating_add(rt_offset),
            ..self.to_monotonic
        }
    }
}

/// Per-device `%globaltimer` → log timestamp maps.
#[derive(Clone, Debug, Default)]
pub struct GpuClocks {
    /// (device ordinal, map globaltimer ns → log ts).
    pub devices: Vec<(u32, LinearMap)>,
}

impl GpuClocks {
    /// Fits each device's pairs (sorted by device, then ts).
    pub fn fit(pairs: &[GpuClockPair], ts_per_ns: f64) -> Self {
        let mut devices = Vec::new();
        let mut i = 0;
        while i < pairs.len() {
            let dev = pairs[i].hdr.aux;
            let mut pts = Vec::new();
            while i < pairs.len() && pairs[i].hdr.aux == dev {
                let p = &pairs[i];
                let mid = p.ts + p.ts_after.saturating_sub(p.ts) / 2;
                pts.push((p.gpu_ns, mid as i64));
                i += 1;
            }
            pts.sort_by_key(|p| p.0);
            pts.dedup_by_key(|p| p.0);
            let (m, _) = fit(&pts, ts_per_ns);
            devices.push((dev, m));
        }
        GpuClocks { devices }
    }

    /// The map of a device, if it has clock pairs.
    pub fn device(&self, dev: u32) -> Option<&LinearMap> {
        self.devices.iter().find(|d| d.0 == dev).map(|d| &d.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigmatrace_schemas::records::RecordHeader;

    fn snap(ts: u64, mono: u64, rt: u64) -> ClockSnapshot {
        ClockSnapshot {
            hdr: RecordHeader::of::<ClockSnapshot>(0),
            ts,
            monotonic: mono,
            monotonic_raw: mono,
            boottime: mono,
            realtime: rt,
            ts_after: ts + 20,
        }
    }

    /// A map on a range gives what the map gives, bit for bit, on the range, at its edges and
    /// outside it (random maps: TSC-like and ns slopes, origins before, inside and after the
    /// range, realistic and extreme intercepts); a range where clamping would act gets none.
    #[test]
    fn range_maps_map_as_their_maps_everywhere() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut fast = 0;
        for i in 0..2_000 {
            let lo = next() >> (8 + i % 24);
            let hi = lo + (next() >> (20 + i % 30));
            let x0 = match i % 3 {
                0 => lo.saturating_sub(next() >> 30),
                1 => lo + (hi - lo) / 2,
                _ => hi.saturating_add(next() >> 34),
            };
            let slope = [0.4, 1.0, 1.0 + 3e-5, 0.384_615_384_615_384_6, 1e-9, 7.5][i % 6];
            let out0 = match i % 4 {
                0 => 1_700_000_000_000_000_000,
                1 => (next() >> 2) as i64,
                2 => -((next() >> 40) as i64),
                _ => MAX_TIME - (next() >> 44) as i64,
            };
            let map = LinearMap { x0, out0, slope };
            let r = RangeMap::new(map, lo, hi);
            fast += (r.len > 0) as u32;
            let span = hi - lo;
            let probes = [
                lo,
                hi,
                lo.wrapping_sub(1),
                hi.wrapping_add(1),
                0,
                u64::MAX,
                x0,
            ];
            for x in probes
                .into_iter()
                .chain((0..50).map(|_| lo + next() % (span + 1)))
            {
                assert_eq!(r.map(x), map.map(x), "{map:?} on {lo}..={hi} at {x}");
            }
        }
        assert!(fast > 300, "{fast} maps with a fast range");
        // Clamped at the top end, before the origin, or a decreasing map: no fast range.
        let top = LinearMap {
            x0: 0,
            out0: MAX_TIME - 10,
            slope: 1.0,
        };
        assert_eq!(top.on_range(0, 100), None);
        let later = LinearMap {
            x0: 50,
            out0: 1 << 40,
            slope: 1.0,
        };
        assert_eq!(later.on_range(0, 100), None);
        let down = LinearMap {
            x0: 0,
            out0: 1 << 40,
            slope: -1.0,
        };
        assert_eq!(down.on_range(0, 100), None);
    }

    #[test]
    fn tsc_fit_recovers_rate_and_drift() {
        // 2.5 GHz nominal, running 30 ppm fast relative to MONOTONIC.
        let hz = 2.5e9 * (1.0 + 30e-6);
        let snaps: Vec<_> = (0..20)
            .map(|i| {
                let mono = 1_000_000_000u64 + i * 100_000_000;
                let ts = 5_000_000 + ((mono - 1_000_000_000) as f64 * hz / 1e9) as u64;
                snap(ts - 10, mono, mono + 1_700_000_000_000_000_000)
            })
            .collect();
        let c = ProcessClock::fit(&snaps[0], &snaps[1..], TimestampSource::Tsc, 2_500_000_000);
        assert!((c.to_monotonic.slope - 1e9 / hz).abs() < 1e-12);
        assert!(c.fit_residual_ns <= 2.0, "{}", c.fit_residual_ns);
        let rt = c.to_realtime(c.realtime_offset);
        let ts = 5_000_000 + (1.5e9 * hz / 1e9) as u64;
        let want = 1_700_000_000_000_000_000i64 + 2_500_000_000;
        assert!((rt.map(ts) - want).abs() <= 2, "{} vs {want}", rt.map(ts));
    }

    /// A damaged log's snapshots may have brackets near 2^64 ticks: the preemption limit
    /// (4 × the tightest bracket) saturates instead of overflowing (found by fuzzing: a panic
    /// in debug builds, a wrapped limit in release ones), and all of them stay usable.
    #[test]
    fn huge_brackets_saturate_the_preemption_limit() {
        let snaps: Vec<_> = (0..3)
            .map(|i| ClockSnapshot {
                ts_after: u64::MAX - i,
                ..snap(i * 1000, 5000 + i * 1000, 9000)
            })
            .collect();
        assert_eq!(snapshot_points(&snaps, 1.0).len(), 3);
    }

    /// A TSC snapshot at `mono` ns of a machine whose TSC reads `mono × 2.5` (2.5 GHz), with
    /// the clock reads `late` ns after the first timestamp read and a 50-tick bracket besides.
    fn tsc_snap(mono: u64, late: u64) -> ClockSnapshot {
        let ts = mono * 5 / 2;
        ClockSnapshot {
            ts,
            ts_after: ts + late * 5 / 2 + 50,
            ..snap(0, mono + late, mono)
        }
    }

    /// Two processes on one TSC, each with a start and an exit snapshot (a short run); one
    /// start snapshot was preempted for 400 µs between its timestamp read and its clock reads.
    /// The old rule (4 × the median bracket: the median of two is the wider) kept it and moved
    /// that process's time line by about 100 µs; now both lines agree within 20 ns.
    #[test]
    fn a_preempted_snapshot_of_two_does_not_move_a_time_line() {
        let a = [tsc_snap(1_000_000_000, 0), tsc_snap(1_200_000_000, 0)];
        let b = [tsc_snap(1_050_000_000, 400_000), tsc_snap(1_150_000_000, 0)];
        let fits = fit_snapshots(&[&a, &b], TimestampSource::Tsc, 2_500_000_000);
        assert_eq!((fits[0].2, fits[1].2), (2, 1), "points used per process");
        for mono in [1_000_000_000u64, 1_100_000_000, 1_300_000_000] {
            let ts = mono * 5 / 2;
            let (ma, mb) = (fits[0].0.map(ts), fits[1].0.map(ts));
            assert!((ma - mb).abs() <= 20, "at {mono}: {ma} vs {mb}");
            assert!((ma - mono as i64).abs() <= 20, "at {mono}: {ma}");
        }
    }

    /// Brackets a few ticks apart are timer noise, not preemption: a 40-tick bracket next to
    /// an 8-tick one is kept (16 ns at 2.5 GHz), a 1000-tick one (400 ns) is not.
    #[test]
    fn near_brackets_are_kept() {
        let with = |ts: u64, w: u64| ClockSnapshot {
            ts_after: ts + w,
            ..snap(ts, ts * 2 / 5 + 1000, 9000)
        };
        let snaps = [with(1000, 8), with(500_000, 40), with(900_000, 1000)];
        let pts = snapshot_points(&snaps, 0.4);
        assert_eq!(pts.iter().map(|p| p.0).collect::<Vec<_>>(), [1004, 500_020]);
    }

    /// Reversed brackets (damaged) are used only when no snapshot has a bracket.
    #[test]
    fn reversed_brackets_are_a_last_resort() {
        let rev = |ts: u64| ClockSnapshot {
            ts_after: ts - 1,
            ..snap(ts, ts + 1000, 9000)
        };
        assert_eq!(snapshot_points(&[rev(100), rev(200)], 1.0).len(), 2);
        let pts = snapshot_points(&[rev(100), snap(200, 1200, 9000)], 1.0);
        assert_eq!(pts, [(210, 1200)]);
    }

    #[test]
    fn single_snapshot_uses_nominal_rate() {
        let s = snap(1000, 5000, 9000);
        let c = ProcessClock::fit(&s, &[], TimestampSource::MonotonicRaw, 1_000_000_000);
        assert_eq!(c.to_realtime(c.realtime_offset).map(2010), 9000 + 1000);
    }
}
