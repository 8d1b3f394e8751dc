//! Mapping export timestamps to CLOCK_REALTIME nanoseconds since the Unix epoch, the time domain
//! of `sigmatrace-convert`'s output.
//!
//! Export times are integer ns since the session start, unless the export was made with
//! `--ts-normalize=true`, in which case they are already UTC epoch ns. Either way, an export
//! made with a time shift has the shift (`EXPORT_PARAM_TIME_SHIFT`) added to every time.
//!
//! Anchors, best first:
//! 1. **System clock** (only with a host clock snapshot from the same host, e.g. a SigmaTrace
//!    log header, and an export that has `systemClockNs`): `systemClockNs` is the target's
//!    system clock at capture start. Its POSIX clock is not documented (boot-relative in
//!    magnitude), so it is matched against the snapshot's MONOTONIC_RAW, MONOTONIC and BOOTTIME
//!    readings: the clock whose implied UTC start agrees with `utcEpochNs` within
//!    [`SYSTEM_CLOCK_TOLERANCE_NS`] (closest wins) is used, and nsys times then go through the
//!    same snapshot as SigmaTrace's own events. The residual is reported.
//! 2. **UTC epoch**: `realtime = utcEpochNs + (t − shift)`.
//! 3. **Normalized**: `realtime = t − shift`.
//!
//! A manual offset is added on top; with no anchor at all it is required and is the whole offset.

use serde::Serialize;

/// Largest disagreement between the system-clock anchor and `utcEpochNs` for which the
/// system-clock anchor is used (10 ms); above it the snapshot is assumed to be of another clock,
/// another host or a time across a REALTIME step, and `utcEpochNs` is used.
pub const SYSTEM_CLOCK_TOLERANCE_NS: i64 = 10_000_000;

/// What the export says about its time base.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TimeBase {
    /// `TARGET_INFO_SESSION_START_TIME.utcEpochNs`: UTC (CLOCK_REALTIME) ns at session start.
    pub utc_epoch_ns: Option<i64>,
    /// `TARGET_INFO_SESSION_START_TIME.systemClockNs`: the target's system clock at capture
    /// start (newer exports only).
    pub system_clock_ns: Option<i64>,
    /// `EXPORT_PARAM_TIME_NORMALIZE` = true: times are already UTC epoch ns.
    pub normalized: bool,
    /// `EXPORT_PARAM_TIME_SHIFT` (ns) added to every time at export.
    pub time_shift_ns: i64,
}

/// One instant read on several host clocks (ns), e.g. the start snapshot of a SigmaTrace log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HostClockSnapshot {
    pub realtime_ns: i64,
    pub monotonic_ns: Option<i64>,
    pub monotonic_raw_ns: Option<i64>,
    pub boottime_ns: Option<i64>,
}

/// The host clock `systemClockNs` was matched with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostClock {
    MonotonicRaw,
    Monotonic,
    Boottime,
}

/// Which anchor a [`ClockMapping`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Anchor {
    /// Through `systemClockNs` and a host snapshot; `residual_ns` = implied UTC start −
    /// `utcEpochNs`.
    SystemClock { clock: HostClock, residual_ns: i64 },
    /// `utcEpochNs` + session-relative time.
    UtcEpoch,
    /// Times already normalized to UTC at export.
    Normalized,
    /// No anchor: only the manual offset.
    ManualOnly,
}

/// `realtime_ns = export_time + offset_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClockMapping {
    /// Total offset added to every export time (anchor + manual).
    pub offset_ns: i64,
    /// The manual part of `offset_ns`.
    pub manual_offset_ns: i64,
    pub anchor: Anchor,
}

/// Why no mapping could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error(
        "the export has no session start time (TARGET_INFO_SESSION_START_TIME) and its times are \
         not normalized to UTC; pass a manual offset (--nsys-offset NS) to place them"
    )]
    NoAnchor,
}

impl ClockMapping {
    /// Maps an export time to CLOCK_REALTIME ns (saturating).
    pub fn to_realtime(&self, t: i64) -> i64 {
        t.saturating_add(self.offset_ns)
    }

    /// One line for trace metadata and logs.
    pub fn describe(&self) -> String {
        let anchor = match self.anchor {
            Anchor::SystemClock { clock, residual_ns } => format!(
                "systemClockNs via host {clock:?} snapshot (disagrees with utcEpochNs by {residual_ns} ns)"
            ),
            Anchor::UtcEpoch => "utcEpochNs + session time".to_string(),
            Anchor::Normalized => "times normalized to UTC at export".to_string(),
            Anchor::ManualOnly => "manual offset only (no session start time)".to_string(),
        };
        format!(
            "realtime = nsys time + {} ns ({anchor}; manual offset {} ns)",
            self.offset_ns, self.manual_offset_ns
        )
    }
}

impl TimeBase {
    /// Builds the mapping to CLOCK_REALTIME. `host` is a clock snapshot of the same host (used
    /// only with `systemClockNs`); `manual_offset_ns` is added on top and is required when the
    /// export has no anchor.
    pub fn mapping(
        &self,
        manual_offset_ns: Option<i64>,
        host: Option<&HostClockSnapshot>,
    ) -> Result<ClockMapping, TimeError> {
        let manual = manual_offset_ns.unwrap_or(0);
        let shift = self.time_shift_ns;
        let (base, anchor) = if self.normalized {
            (0i64.saturating_sub(shift), Anchor::Normalized)
        } else if let Some(utc) = self.utc_epoch_ns {
            match self.system_clock_anchor(utc, host) {
                Some((offset, clock, residual_ns)) => (
                    offset.saturating_sub(shift),
                    Anchor::SystemClock { clock, residual_ns },
                ),
                None => (utc.saturating_sub(shift), Anchor::UtcEpoch),
            }
        } else if manual_offset_ns.is_some() {
            (0, Anchor::ManualOnly)
        } else {
            return Err(TimeError::NoAnchor);
        };
        Ok(ClockMapping {
            offset_ns: base.saturating_add(manual),
            manual_offset_ns: manual,
            anchor,
        })
    }

    /// The offset (session time → realtime) through `systemClockNs` and the host snapshot,
    /// with the clock used and the residual against `utcEpochNs`.
    fn system_clock_anchor(
        &self,
        utc: i64,
        host: Option<&HostClockSnapshot>,
    ) -> Option<(i64, HostClock, i64)> {
        let sys = self.system_clock_ns?;
        let host = host?;
        let candidates = [
            (HostClock::MonotonicRaw, host.monotonic_raw_ns),
            (HostClock::Monotonic, host.monotonic_ns),
            (HostClock::Boottime, host.boottime_ns),
        ];
        candidates
            .into_iter()
            .filter_map(|(clock, reading)| {
                // realtime(session start) = host.realtime + (sys − host.clock)
                let offset = host.realtime_ns.checked_add(sys.checked_sub(reading?)?)?;
                let residual = offset.checked_sub(utc)?;
                (residual.checked_abs()? <= SYSTEM_CLOCK_TOLERANCE_NS)
                    .then_some((offset, clock, residual))
            })
            .min_by_key(|&(_, _, residual)| residual.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report1_base() -> TimeBase {
        TimeBase {
            utc_epoch_ns: Some(1_769_308_002_162_486_533),
            system_clock_ns: Some(6_324_391_262_083),
            normalized: false,
            time_shift_ns: 0,
        }
    }

    #[test]
    fn utc_anchor_adds_session_start_and_manual_offset() {
        let m = report1_base().mapping(None, None).unwrap();
        assert_eq!(m.anchor, Anchor::UtcEpoch);
        assert_eq!(m.to_realtime(1_453_545_934), 1_769_308_003_616_032_467);
        let m = report1_base().mapping(Some(-500), None).unwrap();
        assert_eq!(m.offset_ns, 1_769_308_002_162_486_033);
        assert_eq!(m.manual_offset_ns, -500);
    }

    #[test]
    fn time_shift_is_undone() {
        let mut b = report1_base();
        b.time_shift_ns = 1_000;
        assert_eq!(
            b.mapping(None, None).unwrap().offset_ns,
            1_769_308_002_162_485_533
        );
        b.normalized = true;
        let m = b.mapping(None, None).unwrap();
        assert_eq!((m.anchor, m.offset_ns), (Anchor::Normalized, -1_000));
    }

    #[test]
    fn system_clock_anchor_picks_the_matching_host_clock() {
        let b = report1_base();
        // A snapshot taken 3 s after capture start, whose MONOTONIC agrees with utcEpochNs to
        // 700 ns and whose MONOTONIC_RAW is 2 s off (NTP-slewed host).
        let host = HostClockSnapshot {
            realtime_ns: 1_769_308_005_162_487_233,
            monotonic_ns: Some(6_327_391_262_083),
            monotonic_raw_ns: Some(6_325_391_262_083),
            boottime_ns: Some(6_400_000_000_000),
        };
        let m = b.mapping(None, Some(&host)).unwrap();
        assert_eq!(
            m.anchor,
            Anchor::SystemClock {
                clock: HostClock::Monotonic,
                residual_ns: 700
            }
        );
        assert_eq!(m.offset_ns, 1_769_308_002_162_487_233);
    }

    #[test]
    fn system_clock_anchor_falls_back_to_utc_when_no_clock_agrees() {
        let host = HostClockSnapshot {
            realtime_ns: 1_769_308_005_162_487_233,
            monotonic_ns: Some(1),
            monotonic_raw_ns: None,
            boottime_ns: Some(2),
        };
        let m = report1_base().mapping(None, Some(&host)).unwrap();
        assert_eq!(m.anchor, Anchor::UtcEpoch);
        let mut no_sys = report1_base();
        no_sys.system_clock_ns = None;
        let host_ok = HostClockSnapshot {
            monotonic_ns: Some(6_327_391_262_083),
            ..host
        };
        assert_eq!(
            no_sys.mapping(None, Some(&host_ok)).unwrap().anchor,
            Anchor::UtcEpoch
        );
    }

    #[test]
    fn no_anchor_needs_a_manual_offset() {
        let b = TimeBase::default();
        assert_eq!(b.mapping(None, None), Err(TimeError::NoAnchor));
        let m = b.mapping(Some(42), None).unwrap();
        assert_eq!((m.anchor, m.offset_ns), (Anchor::ManualOnly, 42));
    }

    #[test]
    fn extreme_values_saturate() {
        let b = TimeBase {
            utc_epoch_ns: Some(i64::MAX),
            system_clock_ns: Some(i64::MIN),
            normalized: false,
            time_shift_ns: i64::MIN,
        };
        let host = HostClockSnapshot {
            realtime_ns: i64::MAX,
            monotonic_ns: Some(i64::MAX),
            monotonic_raw_ns: Some(i64::MIN),
            boottime_ns: None,
        };
        let m = b.mapping(Some(i64::MAX), Some(&host)).unwrap();
        assert_eq!(m.to_realtime(i64::MAX), i64::MAX);
    }
}
