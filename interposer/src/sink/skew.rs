//! The debug clock skew (`SIGMATRACE_DEBUG_CLOCK_SKEW=<offset_ns>,<drift_ppb>`): a known clock
//! error given to one process, so alignment can be tested on real runs.
//!
//! Every timestamp the process records (hot records, metadata, the header's start snapshot,
//! `ClockSnapshot`s) is taken through [`super::now`] / [`super::snapshot`], which apply
//! `t' = t + offset + drift·(t − origin)` on the timestamp scale *and* on every clock reading
//! of a snapshot (`CLOCK_MONOTONIC`, `_RAW`, `BOOTTIME`, `REALTIME`): the log then describes a
//! process whose clocks all run `drift` fast and sit `offset` ahead at `origin` (the
//! unskewed `CLOCK_MONOTONIC_RAW` when tracing was configured), and a reader's per-process
//! fit cannot tell it from a genuinely skewed machine. The header says so
//! (`clock_skew=<offset_ns>,<drift_ppb>`, `clock_skew_origin=<ns>`).
//!
//! Costs nothing when unset: the hot path's TSC branch is taken only when no skew is active.

use std::sync::OnceLock;

use sigmatrace_schemas::clock::{clock_ns, rdtsc};
use sigmatrace_schemas::{ClockSnapshot, TimestampSource, Timestamper};

/// An injected clock error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSkew {
    /// Offset at the origin, ns (positive: the process's clock is ahead).
    pub offset_ns: i64,
    /// Rate error, parts per billion (positive: the process's clock runs fast).
    pub drift_ppb: i64,
}

/// Largest accepted |offset| (1000 s) and |drift| (1e6 ppb = 0.1 %).
const MAX_OFFSET_NS: i64 = 1_000_000_000_000;
const MAX_DRIFT_PPB: i64 = 1_000_000;

impl ClockSkew {
    /// `<offset_ns>,<drift_ppb>` (signed integers).
    pub fn parse(v: &str) -> Option<ClockSkew> {
        let (o, d) = v.split_once(',')?;
        let offset_ns: i64 = o.trim().parse().ok()?;
        let drift_ppb: i64 = d.trim().parse().ok()?;
        (offset_ns.abs() <= MAX_OFFSET_NS && drift_ppb.abs() <= MAX_DRIFT_PPB).then_some(
            ClockSkew {
                offset_ns,
                drift_ppb,
            },
        )
    }
}

/// The skew in effect.
#[derive(Clone, Copy, Debug)]
struct Active {
    skew: ClockSkew,
    source: TimestampSource,
    /// The origin on the timestamp scale and in `CLOCK_MONOTONIC_RAW` ns.
    origin_ts: u64,
    origin_ns: u64,
    /// The offset in timestamp units.
    offset_ts: i128,
}

static ACTIVE: OnceLock<Active> = OnceLock::new();

/// Turns the skew on for timestamps of `source` (first call wins). For the TSC the rate is
/// measured here (20 ms) to express the offset in ticks.
pub(super) fn activate(skew: ClockSkew, source: TimestampSource) {
    ACTIVE.get_or_init(|| {
        let t = Timestamper::with_source(source);
        let hz = t.estimate_hz(std::time::Duration::from_millis(20)).max(1);
        let s = t.snapshot();
        Active {
            skew,
            source,
            origin_ts: s.ts,
            origin_ns: s.monotonic_raw,
            offset_ts: skew.offset_ns as i128 * hz as i128 / 1_000_000_000,
        }
    });
}

/// The active skew and its origin (unskewed `CLOCK_MONOTONIC_RAW` ns), if any.
pub fn active() -> Option<(ClockSkew, u64)> {
    ACTIVE.get().map(|a| (a.skew, a.origin_ns))
}

fn shift(v: u64, offset: i128, since_origin: i128, drift_ppb: i64) -> u64 {
    let d = since_origin * drift_ppb as i128 / 1_000_000_000;
    (v as i128 + offset + d).clamp(0, u64::MAX as i128) as u64
}

/// The current skewed timestamp (the raw source read here).
pub(super) fn now() -> u64 {
    match ACTIVE.get() {
        Some(a) => {
            let raw = match a.source {
                TimestampSource::Tsc => rdtsc(),
                TimestampSource::MonotonicRaw => clock_ns(libc::CLOCK_MONOTONIC_RAW),
            };
            shift(
                raw,
                a.offset_ts,
                raw as i128 - a.origin_ts as i128,
                a.skew.drift_ppb,
            )
        }
        None => clock_ns(libc::CLOCK_MONOTONIC_RAW),
    }
}

/// A snapshot as the skewed process would have taken it.
pub(super) fn snapshot(mut s: ClockSnapshot) -> ClockSnapshot {
    let Some(a) = ACTIVE.get() else { return s };
    let drift = a.skew.drift_ppb;
    let since_ns = s.monotonic_raw as i128 - a.origin_ns as i128;
    let off_ns = a.skew.offset_ns as i128;
    for v in [
        &mut s.monotonic,
        &mut s.monotonic_raw,
        &mut s.boottime,
        &mut s.realtime,
    ] {
        *v = shift(*v, off_ns, since_ns, drift);
    }
    for v in [&mut s.ts, &mut s.ts_after] {
        *v = shift(*v, a.offset_ts, *v as i128 - a.origin_ts as i128, drift);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_signed_pairs_within_bounds() {
        assert_eq!(
            ClockSkew::parse(" 2000000 , -50000 "),
            Some(ClockSkew {
                offset_ns: 2_000_000,
                drift_ppb: -50_000
            })
        );
        assert_eq!(ClockSkew::parse("1,2,3"), None);
        assert_eq!(ClockSkew::parse("1"), None);
        assert_eq!(ClockSkew::parse("0,1000001"), None);
    }

    #[test]
    fn shift_adds_offset_and_drift_since_the_origin() {
        // 1 s after the origin at +50 ppm: 50 µs more than the offset.
        assert_eq!(
            shift(10_000_000_000, 2_000_000, 1_000_000_000, 50_000),
            10_002_050_000
        );
        assert_eq!(
            shift(10_000_000_000, -2_000_000, 1_000_000_000, -50_000),
            9_997_950_000
        );
        assert_eq!(shift(5, -10, 0, 0), 0, "clamped at 0");
    }
}
