//! The process-wide switches every layer reads on its fast path: what is traced ([`cat`]
//! bits in one atomic mask), the timestamp source, the diagnostics level, and whether tracing
//! disabled itself. Plain atomics: reading them costs one load, setting them never blocks.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU8, Ordering};

use sigmatrace_schemas::clock::{clock_ns, rdtsc};
use sigmatrace_schemas::{TimestampSource, Timestamper};

/// What to trace: the bits of the mask [`tracing`] tests (`SIGMATRACE_TRACE`).
pub mod cat {
    /// Object lifecycle and connection data (devices, PDs, MRs, CQs, SRQs, QPs, AHs).
    pub const CONTROL: u32 = 1 << 0;
    /// Posted send-queue work requests (`PostSend`, send-side `PostError`).
    pub const SEND: u32 = 1 << 1;
    /// Posted receive work requests (`PostRecv`, receive-side `PostError`).
    pub const RECV: u32 = 1 << 2;
    /// Work completions returned to the program.
    pub const COMPLETIONS: u32 = 1 << 3;
    /// Aggregated empty polls.
    pub const EMPTY_POLLS: u32 = 1 << 4;
    /// Completion-channel and asynchronous events.
    pub const EVENTS: u32 = 1 << 5;
    /// Queues the program writes itself: `QueueDiscovered`, and the host and device pollers
    /// (`WqeObserved`, `CqeObserved`, `ObserveOverrun`, `GpuClockPair`).
    pub const OBSERVE: u32 = 1 << 6;
    /// CUDA: `GpuMemory`, kernel names, `KernelLaunch`, `KernelExec`.
    pub const GPU: u32 = 1 << 7;
    /// Everything.
    pub const ALL: u32 = CONTROL | SEND | RECV | COMPLETIONS | EMPTY_POLLS | EVENTS | OBSERVE | GPU;

    /// (name, bits) accepted by `SIGMATRACE_TRACE`.
    pub const NAMES: &[(&str, u32)] = &[
        ("all", ALL),
        ("control", CONTROL),
        ("send", SEND),
        ("recv", RECV),
        ("completions", COMPLETIONS),
        ("empty_polls", EMPTY_POLLS),
        ("events", EVENTS),
        ("observe", OBSERVE),
        ("gpu", GPU),
        ("data", SEND | RECV | COMPLETIONS | EMPTY_POLLS),
    ];
}

/// How much the interposer says on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Diag {
    /// Nothing, not even when tracing disables itself.
    Off = 0,
    /// One line when tracing disables itself (default).
    Error = 1,
    /// Also the log path, size-cap and configuration warnings.
    Info = 2,
    /// Also per-object instrumentation details.
    Debug = 3,
}

/// Timestamp source choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockChoice {
    /// TSC when invariant, else CLOCK_MONOTONIC_RAW.
    Auto,
    Tsc,
    MonotonicRaw,
}

/// Categories currently traced ([`cat`] bits); 0 = forward everything untraced.
static MASK: AtomicU32 = AtomicU32::new(0);
/// Timestamp source: 0 before initialisation, else `TimestampSource as u8`, | [`SKEWED`] while
/// the debug clock skew is active (so the hot path's TSC test fails and [`now_other`] runs).
static CLOCK: AtomicU8 = AtomicU8::new(0);
/// Bit of `CLOCK`: timestamps go through [`super::skew`].
const SKEWED: u8 = 0x80;
/// Diagnostics level (`Diag as u8`).
static DIAG: AtomicU8 = AtomicU8::new(Diag::Error as u8);
/// Set once tracing disabled itself (the stderr line is printed once).
static DISABLED: AtomicBool = AtomicBool::new(false);
/// The hot paths' switches ([`fast`]), derived from `MASK` and `CLOCK` whenever they
/// change: one load and test decides a hot path.
static FAST: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];

/// The hot paths' switches ([`is_fast`]).
pub mod fast {
    /// Sends are traced and timestamps are plain TSC reads ([`super::tsc`]).
    pub const SEND: usize = 0;
    /// Completions are traced and timestamps are plain TSC reads.
    pub const POLL: usize = 1;
    /// Receive posts are traced and timestamps are plain TSC reads.
    pub const RECV: usize = 2;
}

/// Whether the hot path `which` ([`fast`]) is on: its category is traced and [`now`] is a
/// plain TSC read ([`tsc`]).
#[inline(always)]
pub fn is_fast(which: usize) -> bool {
    FAST[which].load(Ordering::Relaxed)
}

/// [`is_fast`]`(fast::SEND)` as one compare of the switch's byte in memory and its branch
/// (an atomic load feeding a compare takes a load, a test and a branch).
#[inline(always)]
pub fn is_fast_send() -> bool {
    is_fast_in_memory::<{ fast::SEND }>()
}

/// [`is_fast`]`(fast::RECV)`, as [`is_fast_send`].
#[inline(always)]
pub fn is_fast_recv() -> bool {
    is_fast_in_memory::<{ fast::RECV }>()
}

/// [`is_fast`]`(W)` as one compare of the switch's byte in memory and its branch.
#[inline(always)]
fn is_fast_in_memory<const W: usize>() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: reads the switch's byte, an `AtomicBool` (a plain byte load is an atomic
        // relaxed load on x86_64); no stores, no stack, branches to one of two labels.
        unsafe {
            core::arch::asm!(
                "cmp byte ptr [rip + {switch} + {which}], 0",
                "jne {on}",
                switch = sym FAST,
                which = const W,
                on = label { return true },
                options(nostack, readonly),
            );
        }
        false
    }
    #[cfg(not(target_arch = "x86_64"))]
    is_fast(W)
}

/// What `ibv_poll_cq` returns when its hot path may take the poll: 1 when
/// `is_fast(fast::POLL)` (one completion), else `i32::MIN` (no provider returns that), so
/// that one compare decides it.
#[inline(always)]
pub fn fast_poll_rc() -> i32 {
    FAST_POLL_RC.load(Ordering::Relaxed)
}

/// `rc == fast_poll_rc()` as one compare against the switch in memory and its branch.
#[inline(always)]
pub fn is_fast_poll_rc(rc: i32) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: reads the switch, an `AtomicI32` (a plain aligned 4-byte load is an atomic
        // relaxed load on x86_64); no stores, no stack, branches to one of two labels.
        unsafe {
            core::arch::asm!(
                "cmp {rc:e}, dword ptr [rip + {switch}]",
                "je {on}",
                rc = in(reg) rc,
                switch = sym FAST_POLL_RC,
                on = label { return true },
                options(nostack, readonly),
            );
        }
        false
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        rc == fast_poll_rc()
    }
}

/// [`fast_poll_rc`].
static FAST_POLL_RC: AtomicI32 = AtomicI32::new(i32::MIN);

/// The TSC: [`now`] when a [`fast`] bit is on.
#[inline(always)]
pub fn tsc() -> u64 {
    rdtsc()
}

/// Derives `FAST` from `MASK` and `CLOCK`.
fn set_fast() {
    let tsc = CLOCK.load(Ordering::Relaxed) == TimestampSource::Tsc as u8;
    FAST[fast::SEND].store(tsc && tracing(cat::SEND), Ordering::Relaxed);
    FAST[fast::POLL].store(tsc && tracing(cat::COMPLETIONS), Ordering::Relaxed);
    FAST[fast::RECV].store(tsc && tracing(cat::RECV), Ordering::Relaxed);
    let rc = if tsc && tracing(cat::COMPLETIONS) {
        1
    } else {
        i32::MIN
    };
    FAST_POLL_RC.store(rc, Ordering::Relaxed);
}

/// Whether any of the `cat` bits is being traced.
#[inline(always)]
pub fn tracing(cat: u32) -> bool {
    MASK.load(Ordering::Relaxed) & cat != 0
}

/// The categories being traced ([`cat`] bits), for hooks that test several with one load.
#[inline(always)]
pub fn mask() -> u32 {
    MASK.load(Ordering::Relaxed)
}

/// The current timestamp (TSC or CLOCK_MONOTONIC_RAW, as recorded in the header).
#[inline(always)]
pub fn now() -> u64 {
    if CLOCK.load(Ordering::Relaxed) == TimestampSource::Tsc as u8 {
        rdtsc()
    } else {
        now_other()
    }
}

/// [`now`] without an invariant TSC, or with the debug clock skew (out of line: keeps the TSC
/// path straight).
#[cold]
#[inline(never)]
fn now_other() -> u64 {
    if CLOCK.load(Ordering::Relaxed) & SKEWED != 0 {
        super::skew::now()
    } else {
        clock_ns(libc::CLOCK_MONOTONIC_RAW)
    }
}

/// Sets the switches: diagnostics level, clock (resolving `Auto`; skewed when `skew` is
/// given), and — unless tracing already disabled itself — the traced categories.
pub(super) fn set(
    diag_level: Diag,
    clock: ClockChoice,
    skew: Option<super::ClockSkew>,
    initial_mask: u32,
) {
    DIAG.store(diag_level as u8, Ordering::Relaxed);
    let ts = match clock {
        ClockChoice::Auto => Timestamper::detect(),
        ClockChoice::Tsc => Timestamper::with_source(TimestampSource::Tsc),
        ClockChoice::MonotonicRaw => Timestamper::with_source(TimestampSource::MonotonicRaw),
    };
    let mut c = ts.source() as u8;
    if let Some(k) = skew {
        super::skew::activate(k, ts.source());
        c |= SKEWED;
    }
    CLOCK.store(c, Ordering::Relaxed);
    if !DISABLED.load(Ordering::Relaxed) {
        MASK.store(initial_mask, Ordering::Release);
    }
    set_fast();
}

/// The timestamp source of the log's records (unskewed: for readings that go through
/// [`snapshot`], or that components outside the sink take themselves).
pub fn current_timestamper() -> Timestamper {
    Timestamper::with_source(
        TimestampSource::from_u8(CLOCK.load(Ordering::Relaxed) & !SKEWED)
            .unwrap_or(TimestampSource::MonotonicRaw),
    )
}

/// Snapshots taken for each one logged (about 0.1 µs each): a start or exit snapshot
/// preempted between its reads would misplace the process's whole time line.
const SNAPSHOT_TRIES: usize = 4;

/// A clock snapshot of the log's timestamp source, the tightest of [`SNAPSHOT_TRIES`]
/// (skewed like [`now`] when the debug skew is active). Off the hot path: start, exit and
/// the periodic snapshots.
pub fn snapshot() -> sigmatrace_schemas::ClockSnapshot {
    super::skew::snapshot(current_timestamper().tight_snapshot(SNAPSHOT_TRIES))
}

/// Stops tracing for good: prints one stderr line (at `Diag::Error`) and makes every hook
/// forward untraced from now on.
pub fn disable(reason: &str) {
    for f in &FAST {
        f.store(false, Ordering::Relaxed);
    }
    FAST_POLL_RC.store(i32::MIN, Ordering::Relaxed);
    MASK.store(0, Ordering::Release);
    if !DISABLED.swap(true, Ordering::AcqRel) {
        diag(
            Diag::Error,
            &format!("sigmatrace: tracing disabled: {reason}; calls continue untraced"),
        );
    }
}

/// Whether tracing disabled itself.
pub fn is_disabled() -> bool {
    DISABLED.load(Ordering::Relaxed)
}

/// Writes one line to stderr if the level is enabled (raw `write(2)`: no lock, fork-safe).
pub fn diag(level: Diag, msg: &str) {
    if !diag_enabled(level) {
        return;
    }
    let mut line = Vec::with_capacity(msg.len() + 1);
    line.extend_from_slice(msg.as_bytes());
    line.push(b'\n');
    let mut rest: &[u8] = &line;
    while !rest.is_empty() {
        // SAFETY: writes initialised bytes of `rest` to fd 2; no memory is retained.
        let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            break;
        }
        rest = &rest[n as usize..];
    }
}

/// Whether messages of `level` are printed.
pub fn diag_enabled(level: Diag) -> bool {
    (level as u8) <= DIAG.load(Ordering::Relaxed)
}
