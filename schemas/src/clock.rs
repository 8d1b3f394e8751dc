//! Clocks: the timestamp source used by hot records and the snapshots that map it to the
//! system clocks.
//!
//! The timestamp source is the TSC on x86_64 when it is invariant (constant rate, not stopped
//! in deep C-states), otherwise `CLOCK_MONOTONIC_RAW` in nanoseconds. The choice is recorded
//! in the file header ([`TimestampSource`]).

use crate::records::{ClockSnapshot, RecordHeader};

/// What unit the `ts` fields of a log are in.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampSource {
    /// Raw TSC ticks; `tsc_hz` in the header gives the rate estimate.
    Tsc = 1,
    /// `CLOCK_MONOTONIC_RAW` nanoseconds.
    MonotonicRaw = 2,
}

impl TimestampSource {
    /// From its numeric id in the header.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(TimestampSource::Tsc),
            2 => Some(TimestampSource::MonotonicRaw),
            _ => None,
        }
    }
}

/// Reads one POSIX clock in nanoseconds.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes to it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Whether the CPU has an invariant TSC (CPUID 0x8000_0007 EDX bit 8).
#[cfg(target_arch = "x86_64")]
pub fn tsc_is_invariant() -> bool {
    // Leaf 0x8000_0000 reports the max extended leaf, checked before querying 0x8000_0007.
    let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
    if max < 0x8000_0007 {
        return false;
    }
    core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
}

/// Non-x86_64 targets use CLOCK_MONOTONIC_RAW.
#[cfg(not(target_arch = "x86_64"))]
pub fn tsc_is_invariant() -> bool {
    false
}

/// Reads the TSC.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no preconditions and no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Fallback for non-x86_64 targets.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn rdtsc() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_RAW)
}

/// A chosen timestamp source; `now()` is what hot paths call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timestamper {
    source: TimestampSource,
}

impl Timestamper {
    /// Picks the TSC when invariant, else CLOCK_MONOTONIC_RAW.
    pub fn detect() -> Self {
        let source = if tsc_is_invariant() {
            TimestampSource::Tsc
        } else {
            TimestampSource::MonotonicRaw
        };
        Timestamper { source }
    }

    /// A timestamper with an explicit source.
    pub fn with_source(source: TimestampSource) -> Self {
        Timestamper { source }
    }

    /// The source in use.
    pub fn source(&self) -> TimestampSource {
        self.source
    }

    /// Current timestamp.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        match self.source {
            TimestampSource::Tsc => rdtsc(),
            TimestampSource::MonotonicRaw => clock_ns(libc::CLOCK_MONOTONIC_RAW),
        }
    }

    /// Takes a clock snapshot record (the source bracketed around the system clocks).
    pub fn snapshot(&self) -> ClockSnapshot {
        let ts = self.now();
        let monotonic = clock_ns(libc::CLOCK_MONOTONIC);
        let monotonic_raw = clock_ns(libc::CLOCK_MONOTONIC_RAW);
        let boottime = clock_ns(libc::CLOCK_BOOTTIME);
        let realtime = clock_ns(libc::CLOCK_REALTIME);
        let ts_after = self.now();
        ClockSnapshot {
            hdr: RecordHeader::of::<ClockSnapshot>(0),
            ts,
            monotonic,
            monotonic_raw,
            boottime,
            realtime,
            ts_after,
        }
    }

    /// The tightest of `n` snapshots (the one whose bracket around the clock reads is
    /// narrowest): a snapshot preempted between its reads is off by up to half its bracket,
    /// so a few tries make the one kept almost surely unpreempted (`n` of 0 counts as 1).
    pub fn tight_snapshot(&self, n: usize) -> ClockSnapshot {
        let mut best = self.snapshot();
        for _ in 1..n {
            let s = self.snapshot();
            if s.ts_after.wrapping_sub(s.ts) < best.ts_after.wrapping_sub(best.ts) {
                best = s;
            }
        }
        best
    }

    /// Estimates the source's rate in Hz by comparing it with CLOCK_MONOTONIC_RAW over
    /// `window`. Returns exactly 1e9 for the MONOTONIC_RAW source.
    pub fn estimate_hz(&self, window: std::time::Duration) -> u64 {
        if self.source == TimestampSource::MonotonicRaw {
            return 1_000_000_000;
        }
        let a = self.snapshot();
        let deadline = a.monotonic_raw + window.as_nanos() as u64;
        let mut b = self.snapshot();
        while b.monotonic_raw < deadline {
            std::hint::spin_loop();
            b = self.snapshot();
        }
        let dts = b.ts.wrapping_sub(a.ts) as f64;
        let dns = (b.monotonic_raw - a.monotonic_raw) as f64;
        if dns <= 0.0 {
            return 0;
        }
        (dts * 1e9 / dns) as u64
    }
}
