//! `SIGMATRACE_*` environment configuration, parsed once per process (see README.md), and
//! kept for the process ([`install`], [`get`]). The categories, diagnostics levels and clock
//! choices it parses into are the sink's switches ([`crate::sink::cat`], [`Diag`],
//! [`ClockChoice`]); the sink gets its part as [`LogSettings`] ([`Config::log_settings`]).

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::sink::{cat, ClockChoice, ClockSkew, Diag, LogSettings};

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Keeps `config` for the process (the first call wins) and returns the kept one.
pub fn install(config: Config) -> &'static Config {
    CONFIG.get_or_init(|| config)
}

/// The process's configuration, once [`install`] ran.
pub fn get() -> Option<&'static Config> {
    CONFIG.get()
}

/// The parsed configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `SIGMATRACE_DISABLE`: forward every call untraced.
    pub disabled: bool,
    /// `SIGMATRACE_DIR`: where logs go.
    pub output_dir: PathBuf,
    /// `SIGMATRACE_MAX_BYTES`: size cap of one process's log.
    pub max_bytes: u64,
    /// `SIGMATRACE_CHUNK_BYTES`: per-thread chunk size.
    pub chunk_size: u32,
    /// `SIGMATRACE_TRACE`: [`cat`] bits.
    pub trace: u32,
    /// `SIGMATRACE_DIAG`.
    pub diag: Diag,
    /// `SIGMATRACE_CLOCK`.
    pub clock: ClockChoice,
    /// `SIGMATRACE_SNAPSHOT_MS`: clock snapshot period.
    pub snapshot_ms: u64,
    /// `SIGMATRACE_PREFAULT_CHUNKS`: chunks in each thread's ring, faulted in once and
    /// reused; the background thread drains finished ones to the file (0 = no rings: chunks
    /// are written in place and the background thread only hands them back).
    pub prefault_chunks: u32,
    /// `SIGMATRACE_DIRECT_IO`: the background thread drains ring chunks with direct I/O where
    /// the file system has it (falls back to buffered writes where it has not).
    pub direct_io: bool,
    /// `SIGMATRACE_MODE=ring`: flight recorder (keep the last `ring_mb` MiB per thread).
    pub flight: bool,
    /// `SIGMATRACE_RING_MB`: the flight recorder's ring per thread, in MiB.
    pub ring_mb: u32,
    /// `SIGMATRACE_DEBUG_PANIC` (debug builds only): hook name to panic in, or "any".
    pub debug_panic: Option<String>,
    /// `SIGMATRACE_DEBUG_CLOCK_SKEW=<offset_ns>,<drift_ppb>`: a clock error added to every
    /// timestamp and clock reading the log records (testing alignment on real runs).
    pub clock_skew: Option<ClockSkew>,
    /// Queue pollers and CUDA kernel timing.
    pub observe: ObserveConfig,
    /// Settings that could not be used, one line each naming the variable, the bad value
    /// and the value used instead (printed at the default level, `Diag::Error`).
    pub warnings: Vec<String>,
}

/// Default output directory (relative to the working directory).
pub const DEFAULT_DIR: &str = "sigmatrace-out";
/// Default size cap: 4 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;
/// Default chunk size: 1 MiB.
pub const DEFAULT_CHUNK: u32 = 1 << 20;
/// Default snapshot period.
pub const DEFAULT_SNAPSHOT_MS: u64 = 100;
/// Default number of chunks prepared ahead.
pub const DEFAULT_PREFAULT_CHUNKS: u32 = 4;
/// Default flight-recorder ring per thread, in MiB.
pub const DEFAULT_RING_MB: u32 = 64;
/// Largest flight-recorder ring per thread, in MiB.
pub const MAX_RING_MB: u32 = 65_536;

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            output_dir: PathBuf::from(DEFAULT_DIR),
            max_bytes: DEFAULT_MAX_BYTES,
            chunk_size: DEFAULT_CHUNK,
            trace: cat::ALL,
            diag: Diag::Error,
            clock: ClockChoice::Auto,
            snapshot_ms: DEFAULT_SNAPSHOT_MS,
            prefault_chunks: DEFAULT_PREFAULT_CHUNKS,
            direct_io: true,
            flight: false,
            ring_mb: DEFAULT_RING_MB,
            debug_panic: None,
            clock_skew: None,
            observe: ObserveConfig::default(),
            warnings: Vec::new(),
        }
    }
}

/// Queue pollers and CUDA kernel timing (`SIGMATRACE_POLL*`, `SIGMATRACE_DEVICE_POLL`,
/// `SIGMATRACE_KERNEL_TIMING`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObserveConfig {
    /// `SIGMATRACE_POLL`: run the host poller on host-resident rings.
    pub host_poll: bool,
    /// `SIGMATRACE_POLL_SPIN`: empty passes spent spinning before the poller sleeps.
    pub spin_passes: u32,
    /// `SIGMATRACE_POLL_MIN_SLEEP_US`: first sleep after spinning (doubles while idle).
    pub min_sleep_us: u64,
    /// `SIGMATRACE_POLL_MAX_SLEEP_US`: longest idle sleep.
    pub max_sleep_us: u64,
    /// `SIGMATRACE_POLL_CPU`: pin the host poller thread to this CPU.
    pub poll_cpu: Option<u32>,
    /// `SIGMATRACE_DEVICE_POLL`: run the device-side poller on GPU-resident rings.
    pub device_poll: bool,
    /// `SIGMATRACE_KERNEL_TIMING` = `events`: time kernels with events around each launch.
    pub kernel_timing: bool,
}

impl Default for ObserveConfig {
    fn default() -> Self {
        ObserveConfig {
            host_poll: true,
            spin_passes: 2000,
            min_sleep_us: 50,
            max_sleep_us: 1000,
            poll_cpu: None,
            device_poll: true,
            kernel_timing: true,
        }
    }
}

impl ObserveConfig {
    /// The longest idle sleep cannot be below the first: it is raised to it (one line).
    fn fit_sleeps(&mut self, warn: &mut impl FnMut(&str, &str, &str, &str)) {
        if self.max_sleep_us < self.min_sleep_us {
            let (was, used) = (self.max_sleep_us.to_string(), self.min_sleep_us.to_string());
            warn(
                "SIGMATRACE_POLL_MAX_SLEEP_US",
                &was,
                "below the minimum sleep",
                &used,
            );
            self.max_sleep_us = self.min_sleep_us;
        }
    }
}

/// One `SIGMATRACE_*` variable: how its value is stored into the configuration, and the
/// value used instead of one that cannot be used (for its stderr line, [`invalid`]).
struct Setting {
    var: &'static str,
    /// Stores the value; `Err(what was expected)` leaves the configuration as it was.
    parse: fn(&str, &mut Config) -> Result<(), String>,
    /// The value used instead, as the line names it (the default).
    used: fn() -> String,
}

/// Every variable [`Config::from_lookup`] reads, in the order their lines are printed.
/// `SIGMATRACE_DIR` and `SIGMATRACE_DEBUG_PANIC` take any value (empty: unset).
const SETTINGS: &[Setting] = &[
    Setting {
        var: "SIGMATRACE_DISABLE",
        parse: |v, c| set(&mut c.disabled, flag(v)),
        used: || "0".into(),
    },
    Setting {
        var: "SIGMATRACE_DIR",
        parse: |v, c| {
            if !v.is_empty() {
                c.output_dir = PathBuf::from(v);
            }
            Ok(())
        },
        used: || DEFAULT_DIR.into(),
    },
    Setting {
        var: "SIGMATRACE_MAX_BYTES",
        parse: |v, c| {
            let n = parse_size(v).filter(|&n| n >= 64 << 10);
            set(&mut c.max_bytes, n.ok_or("expected a size >= 64K".into()))
        },
        used: || format_size(DEFAULT_MAX_BYTES),
    },
    Setting {
        var: "SIGMATRACE_CHUNK_BYTES",
        parse: |v, c| {
            let ok = |n: &u64| n.is_power_of_two() && (16 << 10..=64 << 20).contains(n);
            let n = parse_size(v).filter(ok).map(|n| n as u32);
            let expected = "expected a power of two between 16K and 64M";
            set(&mut c.chunk_size, n.ok_or(expected.into()))
        },
        used: || format_size(DEFAULT_CHUNK as u64),
    },
    Setting {
        var: "SIGMATRACE_TRACE",
        parse: |v, c| {
            let bits = parse_trace(v).map_err(|bad| format!("unknown category {bad:?}"));
            set(&mut c.trace, bits)
        },
        used: || "all".into(),
    },
    Setting {
        var: "SIGMATRACE_DIAG",
        parse: |v, c| {
            let words = [
                (Diag::Off, &["off", "0", "none"][..]),
                (Diag::Error, &["error", "1"]),
                (Diag::Info, &["info", "2"]),
                (Diag::Debug, &["debug", "3"]),
            ];
            let diag = keyword(v, &words, "expected off/error/info/debug");
            set(&mut c.diag, diag)
        },
        used: || "error".into(),
    },
    Setting {
        var: "SIGMATRACE_CLOCK",
        parse: |v, c| {
            let words = [
                (ClockChoice::Auto, &["auto"][..]),
                (ClockChoice::Tsc, &["tsc"]),
                (ClockChoice::MonotonicRaw, &["monotonic_raw", "monotonic"]),
            ];
            let clock = keyword(v, &words, "expected auto/tsc/monotonic_raw");
            set(&mut c.clock, clock)
        },
        used: || "auto".into(),
    },
    Setting {
        var: "SIGMATRACE_SNAPSHOT_MS",
        parse: |v, c| set(&mut c.snapshot_ms, number(v, 1..=60_000)),
        used: || DEFAULT_SNAPSHOT_MS.to_string(),
    },
    Setting {
        var: "SIGMATRACE_PREFAULT_CHUNKS",
        parse: |v, c| {
            set(
                &mut c.prefault_chunks,
                number(v, 0..=1024).map(|n| n as u32),
            )
        },
        used: || DEFAULT_PREFAULT_CHUNKS.to_string(),
    },
    Setting {
        var: "SIGMATRACE_DIRECT_IO",
        parse: |v, c| set(&mut c.direct_io, flag(v)),
        used: || "1".into(),
    },
    Setting {
        var: "SIGMATRACE_MODE",
        parse: |v, c| {
            let words = [(false, &["log"][..]), (true, &["ring"])];
            set(&mut c.flight, keyword(v, &words, "expected log/ring"))
        },
        used: || "log".into(),
    },
    Setting {
        var: "SIGMATRACE_RING_MB",
        parse: |v, c| {
            let n = number(v, 1..=MAX_RING_MB as u64).map(|n| n as u32);
            let expected = || format!("expected whole MiB, 1..{MAX_RING_MB}");
            set(&mut c.ring_mb, n.map_err(|_| expected()))
        },
        used: || DEFAULT_RING_MB.to_string(),
    },
    Setting {
        var: "SIGMATRACE_DEBUG_PANIC",
        parse: |v, c| {
            if !v.is_empty() {
                c.debug_panic = Some(v.to_string());
            }
            Ok(())
        },
        used: || "none".into(),
    },
    Setting {
        var: "SIGMATRACE_DEBUG_CLOCK_SKEW",
        parse: |v, c| {
            if v.trim().is_empty() {
                return Ok(());
            }
            let expected =
                "expected <offset_ns>,<drift_ppb> (|offset| <= 1000 s, |drift| <= 1e6 ppb)";
            let skew = ClockSkew::parse(v).map(Some).ok_or(expected.into());
            set(&mut c.clock_skew, skew)
        },
        used: || "no skew".into(),
    },
    Setting {
        var: "SIGMATRACE_POLL",
        parse: |v, c| set(&mut c.observe.host_poll, flag(v)),
        used: || bool_text(ObserveConfig::default().host_poll),
    },
    Setting {
        var: "SIGMATRACE_DEVICE_POLL",
        parse: |v, c| set(&mut c.observe.device_poll, flag(v)),
        used: || bool_text(ObserveConfig::default().device_poll),
    },
    Setting {
        var: "SIGMATRACE_POLL_SPIN",
        parse: |v, c| {
            let n = number(v, 0..=10_000_000).map(|n| n as u32);
            set(&mut c.observe.spin_passes, n)
        },
        used: || ObserveConfig::default().spin_passes.to_string(),
    },
    Setting {
        var: "SIGMATRACE_POLL_MIN_SLEEP_US",
        parse: |v, c| set(&mut c.observe.min_sleep_us, number(v, 1..=1_000_000)),
        used: || ObserveConfig::default().min_sleep_us.to_string(),
    },
    Setting {
        var: "SIGMATRACE_POLL_MAX_SLEEP_US",
        parse: |v, c| set(&mut c.observe.max_sleep_us, number(v, 1..=10_000_000)),
        used: || ObserveConfig::default().max_sleep_us.to_string(),
    },
    Setting {
        var: "SIGMATRACE_POLL_CPU",
        parse: |v, c| {
            let cpu = number(v, 0..=4095).map(|n| Some(n as u32));
            set(&mut c.observe.poll_cpu, cpu)
        },
        used: || "no pinning".into(),
    },
    Setting {
        var: "SIGMATRACE_KERNEL_TIMING",
        parse: |v, c| {
            let words = [
                (true, &["events", "1", "on"][..]),
                (false, &["off", "0", "none"]),
            ];
            let timing = keyword(v, &words, "expected events/off");
            set(&mut c.observe.kernel_timing, timing)
        },
        used: || "events".into(),
    },
];

/// Stores a parsed value; an error leaves `dst` as it was.
fn set<T>(dst: &mut T, value: Result<T, String>) -> Result<(), String> {
    *dst = value?;
    Ok(())
}

/// [`parse_bool`], or what was expected.
fn flag(v: &str) -> Result<bool, String> {
    parse_bool(v).ok_or_else(|| "expected 1/0/true/false".into())
}

/// A flag's value as a setting's line names it.
fn bool_text(b: bool) -> String {
    (if b { "1" } else { "0" }).into()
}

/// A whole number in `range`, or what was expected.
fn number(v: &str, range: std::ops::RangeInclusive<u64>) -> Result<u64, String> {
    match v.trim().parse::<u64>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(format!("expected {}..{}", range.start(), range.end())),
    }
}

/// The value one of `words` (case-insensitive) stands for, or `expected`.
fn keyword<T: Copy>(v: &str, words: &[(T, &[&str])], expected: &str) -> Result<T, String> {
    let v = v.trim().to_ascii_lowercase();
    let hit = words.iter().find(|(_, names)| names.contains(&v.as_str()));
    hit.map(|&(value, _)| value).ok_or_else(|| expected.into())
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Config {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Parses with an explicit lookup (testable): each of [`SETTINGS`] that is set, then the
    /// checks of settings against each other (a flight-recorder ring that does not fit the
    /// size cap, a longest poller sleep below the first), one line each in
    /// [`Config::warnings`].
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        let mut c = Config::default();
        let mut warnings = Vec::new();
        for s in SETTINGS {
            if let Some(v) = get(s.var) {
                if let Err(expected) = (s.parse)(&v, &mut c) {
                    warnings.push(invalid(s.var, &v, &expected, &(s.used)()));
                }
            }
        }
        let mut warn = |var: &str, v: &str, expected: &str, used: &str| {
            warnings.push(invalid(var, v, expected, used))
        };
        if c.flight {
            c.fit_ring(&mut warn);
        }
        c.observe.fit_sleeps(&mut warn);
        c.warnings = warnings;
        c
    }

    /// What the sink needs: where and how to write the log, what to trace, what to say.
    pub fn log_settings(&self) -> LogSettings {
        LogSettings {
            output_dir: self.output_dir.clone(),
            max_bytes: self.max_bytes,
            chunk_size: self.chunk_size,
            trace: self.trace,
            initial_mask: self.initial_mask(),
            diag: self.diag,
            clock: self.clock,
            snapshot_ms: self.snapshot_ms,
            prefault_chunks: self.ring_chunks(),
            flight_recorder: self.flight,
            direct_io: self.direct_io,
            clock_skew: self.clock_skew,
        }
    }

    /// Flight recorder: the size cap must hold one ring (and a chunk): else the ring is made
    /// smaller (one warning naming `SIGMATRACE_RING_MB`), or, when not even 1 MiB fits, the
    /// mode falls back to `log` (one warning naming `SIGMATRACE_MODE`).
    fn fit_ring(&mut self, warn: &mut impl FnMut(&str, &str, &str, &str)) {
        let chunk = self.chunk_size as u64;
        let fits = |c: &Config| (c.ring_chunks() as u64 + 1) * chunk + 4096 <= c.max_bytes;
        if fits(self) {
            return;
        }
        let why = format!(
            "a ring does not fit SIGMATRACE_MAX_BYTES={}",
            format_size(self.max_bytes)
        );
        let was = self.ring_mb.to_string();
        self.ring_mb =
            (self.max_bytes.saturating_sub(4096 + chunk) >> 20).min(MAX_RING_MB as u64) as u32;
        if self.ring_mb >= 1 && fits(self) {
            warn("SIGMATRACE_RING_MB", &was, &why, &self.ring_mb.to_string());
        } else {
            self.ring_mb = DEFAULT_RING_MB;
            self.flight = false;
            warn("SIGMATRACE_MODE", "ring", &why, "log");
        }
    }

    /// Chunks in each thread's ring: `SIGMATRACE_PREFAULT_CHUNKS`, or for the flight
    /// recorder `SIGMATRACE_RING_MB` in chunks (at least 2).
    pub fn ring_chunks(&self) -> u32 {
        if self.flight {
            ((self.ring_mb as u64 * (1 << 20)) / self.chunk_size as u64).clamp(2, 1 << 20) as u32
        } else {
            self.prefault_chunks
        }
    }

    /// The [`cat`] mask tracing starts with (0 when disabled).
    pub fn initial_mask(&self) -> u32 {
        if self.disabled {
            0
        } else {
            self.trace
        }
    }
}

/// The one stderr line for a setting that cannot be used: the variable, its bad value, what
/// was expected and the value used instead.
fn invalid(var: &str, value: &str, expected: &str, used: &str) -> String {
    format!("sigmatrace: {var}={value:?} is invalid ({expected}); using {used}")
}

/// A byte count as [`parse_size`] reads it back: the largest binary suffix that divides it.
pub fn format_size(n: u64) -> String {
    for (shift, suffix) in [(40, 'T'), (30, 'G'), (20, 'M'), (10, 'K')] {
        if n != 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

/// 1/0, true/false, yes/no, on/off.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// A byte count with an optional K/M/G/T suffix (binary units, optional trailing "B"/"iB").
pub fn parse_size(v: &str) -> Option<u64> {
    let s = v.trim().to_ascii_uppercase();
    let s = s
        .strip_suffix("IB")
        .or_else(|| s.strip_suffix('B'))
        .unwrap_or(&s);
    let (num, shift) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 10),
        'M' => (&s[..s.len() - 1], 20),
        'G' => (&s[..s.len() - 1], 30),
        'T' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: u64 = num.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// Comma-separated categories; a leading `-` removes one (`all,-empty_polls`). An empty list
/// traces nothing.
pub fn parse_trace(v: &str) -> Result<u32, String> {
    let mut bits = 0u32;
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (neg, name) = match item.strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, item.strip_prefix('+').unwrap_or(item)),
        };
        let name = name.to_ascii_lowercase();
        let Some(&(_, b)) = cat::NAMES.iter().find(|(n, _)| *n == name) else {
            return Err(item.to_string());
        };
        if neg {
            bits &= !b;
        } else {
            bits |= b;
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Config {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn a_malformed_clock_skew_is_ignored_with_a_warning() {
        for bad in ["5", "1,2,3", "x,1", "2000000000000,0", "0,2000000"] {
            let c = cfg(&[("SIGMATRACE_DEBUG_CLOCK_SKEW", bad)]);
            assert_eq!(c.clock_skew, None, "{bad}");
            assert_eq!(c.warnings.len(), 1, "{bad}");
        }
    }

    #[test]
    fn defaults_without_variables() {
        let c = cfg(&[]);
        assert_eq!(c, Config::default());
        assert_eq!(c.initial_mask(), cat::ALL);
        assert_eq!(c.output_dir, PathBuf::from("sigmatrace-out"));
        assert_eq!(c.diag, Diag::Error);
        let empty = [
            ("SIGMATRACE_DIR", ""),
            ("SIGMATRACE_DEBUG_PANIC", ""),
            ("SIGMATRACE_DEBUG_CLOCK_SKEW", " "),
        ];
        assert_eq!(
            cfg(&empty),
            Config::default(),
            "empty values count as unset"
        );
    }

    #[test]
    fn every_variable_is_parsed() {
        let c = cfg(&[
            ("SIGMATRACE_DIR", "/tmp/x"),
            ("SIGMATRACE_MAX_BYTES", "256M"),
            ("SIGMATRACE_CHUNK_BYTES", "64KiB"),
            ("SIGMATRACE_TRACE", "all,-empty_polls"),
            ("SIGMATRACE_DIAG", "info"),
            ("SIGMATRACE_CLOCK", "monotonic_raw"),
            ("SIGMATRACE_SNAPSHOT_MS", "250"),
            ("SIGMATRACE_DEBUG_PANIC", "post_send"),
            ("SIGMATRACE_PREFAULT_CHUNKS", "0"),
            ("SIGMATRACE_POLL", "0"),
            ("SIGMATRACE_POLL_SPIN", "10"),
            ("SIGMATRACE_POLL_MIN_SLEEP_US", "20"),
            ("SIGMATRACE_POLL_MAX_SLEEP_US", "5000"),
            ("SIGMATRACE_POLL_CPU", "1"),
            ("SIGMATRACE_DEVICE_POLL", "off"),
            ("SIGMATRACE_KERNEL_TIMING", "off"),
            ("SIGMATRACE_DEBUG_CLOCK_SKEW", "-2000000, 50000"),
        ]);
        assert_eq!(c.output_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.max_bytes, 256 << 20);
        assert_eq!(c.chunk_size, 64 << 10);
        assert_eq!(c.trace, cat::ALL & !cat::EMPTY_POLLS);
        assert_eq!(c.diag, Diag::Info);
        assert_eq!(c.clock, ClockChoice::MonotonicRaw);
        assert_eq!(c.snapshot_ms, 250);
        assert_eq!(c.debug_panic.as_deref(), Some("post_send"));
        assert_eq!(c.prefault_chunks, 0);
        assert_eq!(
            c.clock_skew,
            Some(ClockSkew {
                offset_ns: -2_000_000,
                drift_ppb: 50_000
            })
        );
        assert_eq!(
            c.observe,
            ObserveConfig {
                host_poll: false,
                spin_passes: 10,
                min_sleep_us: 20,
                max_sleep_us: 5000,
                poll_cpu: Some(1),
                device_poll: false,
                kernel_timing: false,
            }
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn disable_zeroes_the_mask() {
        assert_eq!(cfg(&[("SIGMATRACE_DISABLE", "1")]).initial_mask(), 0);
        assert_eq!(cfg(&[("SIGMATRACE_DISABLE", "0")]).initial_mask(), cat::ALL);
    }

    #[test]
    fn bad_values_keep_defaults_and_warn() {
        let c = cfg(&[
            ("SIGMATRACE_MAX_BYTES", "lots"),
            ("SIGMATRACE_CHUNK_BYTES", "3000"),
            ("SIGMATRACE_TRACE", "send,bogus"),
            ("SIGMATRACE_DIAG", "loud"),
            ("SIGMATRACE_SNAPSHOT_MS", "0"),
            ("SIGMATRACE_DISABLE", "maybe"),
            ("SIGMATRACE_POLL_SPIN", "-1"),
            ("SIGMATRACE_KERNEL_TIMING", "cupti"),
        ]);
        assert_eq!(c.max_bytes, DEFAULT_MAX_BYTES);
        assert_eq!(c.chunk_size, DEFAULT_CHUNK);
        assert_eq!(c.trace, cat::ALL);
        assert_eq!(c.diag, Diag::Error);
        assert_eq!(c.snapshot_ms, DEFAULT_SNAPSHOT_MS);
        assert!(!c.disabled);
        assert_eq!(c.observe, ObserveConfig::default());
        assert_eq!(c.warnings.len(), 8, "{:?}", c.warnings);
        assert!(c.warnings.iter().any(|w| w.contains("bogus")));
    }

    #[test]
    fn each_bad_value_names_the_variable_the_value_and_what_is_used_instead() {
        let cases = [
            ("SIGMATRACE_MAX_BYTES", "abc", "using 4G"),
            ("SIGMATRACE_CHUNK_BYTES", "3", "using 1M"),
            ("SIGMATRACE_TRACE", "bogus", "using all"),
            ("SIGMATRACE_DIAG", "bogus", "using error"),
            ("SIGMATRACE_CLOCK", "sundial", "using auto"),
            ("SIGMATRACE_SNAPSHOT_MS", "0", "using 100"),
            ("SIGMATRACE_PREFAULT_CHUNKS", "many", "using 4"),
            ("SIGMATRACE_DIRECT_IO", "fast", "using 1"),
            ("SIGMATRACE_DISABLE", "maybe", "using 0"),
            ("SIGMATRACE_POLL", "sometimes", "using 1"),
            ("SIGMATRACE_POLL_SPIN", "-1", "using 2000"),
            ("SIGMATRACE_KERNEL_TIMING", "cupti", "using events"),
            ("SIGMATRACE_MODE", "flight", "using log"),
            ("SIGMATRACE_RING_MB", "0", "using 64"),
            ("SIGMATRACE_RING_MB", "1.5", "using 64"),
            ("SIGMATRACE_DEVICE_POLL", "gpu", "using 1"),
            ("SIGMATRACE_POLL_MIN_SLEEP_US", "0", "using 50"),
            ("SIGMATRACE_POLL_MAX_SLEEP_US", "10000001", "using 1000"),
            ("SIGMATRACE_POLL_CPU", "4096", "using no pinning"),
            ("SIGMATRACE_DEBUG_CLOCK_SKEW", "1,2,3", "using no skew"),
        ];
        // Every setting that can be invalid has a case (the two that take any value aside).
        let covered: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.0).collect();
        let settings: std::collections::BTreeSet<&str> = SETTINGS
            .iter()
            .map(|s| s.var)
            .filter(|v| !matches!(*v, "SIGMATRACE_DIR" | "SIGMATRACE_DEBUG_PANIC"))
            .collect();
        assert_eq!(covered, settings);
        for (var, value, used) in cases {
            let c = cfg(&[(var, value)]);
            assert_eq!(c.warnings.len(), 1, "{var}: {:?}", c.warnings);
            let line = &c.warnings[0];
            assert!(
                line.starts_with(&format!("sigmatrace: {var}=\"{value}\" is invalid (")),
                "{line}"
            );
            assert!(line.ends_with(&format!("); {used}")), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
        let c = cfg(&[
            ("SIGMATRACE_POLL_MIN_SLEEP_US", "500"),
            ("SIGMATRACE_POLL_MAX_SLEEP_US", "100"),
        ]);
        assert_eq!(c.observe.max_sleep_us, 500);
        assert_eq!(
            c.warnings,
            vec!["sigmatrace: SIGMATRACE_POLL_MAX_SLEEP_US=\"100\" is invalid (below the minimum sleep); using 500"]
        );
        assert_eq!(format_size(DEFAULT_MAX_BYTES), "4G");
        assert_eq!(format_size(3 << 20), "3M");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(parse_size(&format_size(1536 << 10)), Some(1536 << 10));
    }

    #[test]
    fn flight_recorder_mode_and_ring_size() {
        let c = cfg(&[]);
        assert!(!c.flight);
        assert_eq!(c.log_settings().prefault_chunks, DEFAULT_PREFAULT_CHUNKS);
        let c = cfg(&[("SIGMATRACE_MODE", "Ring")]);
        assert!(c.flight && c.warnings.is_empty());
        let s = c.log_settings();
        assert!(s.flight_recorder);
        assert_eq!(s.prefault_chunks, 64, "64 MiB of 1 MiB chunks");
        let c = cfg(&[
            ("SIGMATRACE_MODE", "ring"),
            ("SIGMATRACE_RING_MB", "3"),
            ("SIGMATRACE_CHUNK_BYTES", "64K"),
        ]);
        assert_eq!(c.log_settings().prefault_chunks, 48);
        let c = cfg(&[
            ("SIGMATRACE_MODE", "ring"),
            ("SIGMATRACE_RING_MB", "1"),
            ("SIGMATRACE_CHUNK_BYTES", "64M"),
        ]);
        assert_eq!(c.log_settings().prefault_chunks, 2, "at least two chunks");
        // The size cap must hold a ring: a smaller ring, or log mode when not even 1 MiB fits.
        let c = cfg(&[("SIGMATRACE_MODE", "ring"), ("SIGMATRACE_MAX_BYTES", "16M")]);
        assert_eq!((c.flight, c.ring_mb), (true, 14));
        assert_eq!(
            c.warnings,
            vec!["sigmatrace: SIGMATRACE_RING_MB=\"64\" is invalid (a ring does not fit SIGMATRACE_MAX_BYTES=16M); using 14"]
        );
        let c = cfg(&[
            ("SIGMATRACE_MODE", "ring"),
            ("SIGMATRACE_MAX_BYTES", "1M"),
            ("SIGMATRACE_CHUNK_BYTES", "64K"),
        ]);
        assert!(!c.flight);
        assert_eq!(
            c.warnings,
            vec!["sigmatrace: SIGMATRACE_MODE=\"ring\" is invalid (a ring does not fit SIGMATRACE_MAX_BYTES=1M); using log"]
        );
        let c = cfg(&[("SIGMATRACE_MODE", "ring"), ("SIGMATRACE_MAX_BYTES", "66M")]);
        assert!(
            c.flight && c.ring_mb == 64 && c.warnings.is_empty(),
            "{:?}",
            c.warnings
        );
        let c = cfg(&[("SIGMATRACE_MODE", "log"), ("SIGMATRACE_RING_MB", "8")]);
        assert!(!c.log_settings().flight_recorder);
        assert_eq!(c.log_settings().prefault_chunks, DEFAULT_PREFAULT_CHUNKS);
    }

    #[test]
    fn sizes_and_categories() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("1k"), Some(1024));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("3MB"), Some(3 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999T"), None);
        assert_eq!(parse_trace("send,recv"), Ok(cat::SEND | cat::RECV));
        assert_eq!(parse_trace(""), Ok(0));
        assert_eq!(
            parse_trace("data,-empty_polls"),
            Ok(cat::SEND | cat::RECV | cat::COMPLETIONS)
        );
        assert_eq!(parse_trace("nope"), Err("nope".into()));
        assert_eq!(
            parse_trace("all,-gpu,-observe"),
            Ok(cat::ALL & !(cat::GPU | cat::OBSERVE))
        );
    }
}
