//! The per-process log and the per-thread writers.
//!
//! The log is created lazily by the first record of the process (so processes that never
//! touch verbs leave no file), named by [`naming`], through the schemas crate's
//! [`LogWriter`] (0600, `O_EXCL | O_NOFOLLOW`). Each thread appends through its own
//! [`ChunkWriter`] kept in a thread-local: no lock, no allocation, no system call per record.
//! The only synchronised steps are creating the log and a thread's first record.
//!
//! Fork: the `pthread_atfork` child handler forgets the parent's log and the forking thread's
//! writer (writing through them would corrupt the parent's file, it is a shared mapping); the
//! child's first record creates its own log. Exit: committed records are already in the page
//! cache; the exit handler adds a final clock snapshot and flushes the exiting thread's
//! aggregated empty polls. A record being appended when a signal kills the process is simply
//! not committed (the reader never sees it).

pub mod naming;
mod skew;
pub mod spin;
mod switches;
mod thread;

pub use skew::ClockSkew;
pub use switches::{
    cat, current_timestamper, diag, diag_enabled, disable, fast, fast_poll_rc, is_disabled,
    is_fast, is_fast_poll_rc, is_fast_recv, is_fast_send, mask, now, snapshot, tracing, tsc,
    ClockChoice, Diag,
};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use sigmatrace_schemas::clock::clock_ns;
use sigmatrace_schemas::{
    ChunkWriter, FileHeader, FixedRecord, LogWriter, RecordKind, TimestampSource, Timestamper,
    WriteError, WriterOptions,
};

use spin::SpinLock;

// ---------------------------------------------------------------------------------------------
// Settings

/// What the sink needs to know to create and write the log (from the runtime's
/// configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// Directory for the logs (created if missing).
    pub output_dir: PathBuf,
    /// Size cap of one process's log.
    pub max_bytes: u64,
    /// Per-thread chunk size.
    pub chunk_size: u32,
    /// The configured categories, written into the header (`trace_mask=`).
    pub trace: u32,
    /// The categories traced from the start (0 when tracing is disabled).
    pub initial_mask: u32,
    /// Diagnostics level.
    pub diag: Diag,
    /// Timestamp source.
    pub clock: ClockChoice,
    /// Clock-snapshot period.
    pub snapshot_ms: u64,
    /// Chunks in each thread's ring, drained by the background thread (0 = no rings: chunks
    /// are written in place, the background thread prepares them ahead).
    pub prefault_chunks: u32,
    /// Flight recorder (`SIGMATRACE_MODE=ring`): the rings (`prefault_chunks` each) are the
    /// log — never drained, each thread's oldest chunk reused when its ring is full (its
    /// records counted as dropped); dumps on request ([`request_dump`]).
    pub flight_recorder: bool,
    /// Drain ring chunks with direct I/O where the file system has it.
    pub direct_io: bool,
    /// `SIGMATRACE_DEBUG_CLOCK_SKEW`: the clock error to inject.
    pub clock_skew: Option<ClockSkew>,
}

/// Timestamp at or after which the next clock snapshot is due.
static NEXT_SNAPSHOT: AtomicU64 = AtomicU64::new(0);
/// Snapshot period in timestamp units (0 until the log exists).
static PERIOD: AtomicU64 = AtomicU64::new(u64::MAX);
/// Rate of the timestamp source in Hz, as written in the log header (0 until the log exists).
static HZ: AtomicU64 = AtomicU64::new(0);
static SETTINGS: OnceLock<LogSettings> = OnceLock::new();

/// Installs the settings (first call wins) and turns tracing on as they say.
pub fn configure(settings: LogSettings) {
    let s = SETTINGS.get_or_init(|| settings);
    switches::set(s.diag, s.clock, s.clock_skew, s.initial_mask);
}

// ---------------------------------------------------------------------------------------------
// The process log

struct Process {
    writer: LogWriter,
}

static PROCESS: AtomicPtr<Process> = AtomicPtr::new(std::ptr::null_mut());
static CREATE_LOCK: SpinLock = SpinLock::new();
/// Set when creating the log failed (tracing is then disabled).
static CREATE_FAILED: AtomicBool = AtomicBool::new(false);

fn process() -> Option<&'static Process> {
    let p = PROCESS.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: PROCESS only ever holds leaked `Box<Process>`es, never freed.
        return Some(unsafe { &*p });
    }
    if CREATE_FAILED.load(Ordering::Relaxed) || !tracing(cat::ALL) {
        return None;
    }
    let _g = CREATE_LOCK.lock();
    let p = PROCESS.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: as above.
        return Some(unsafe { &*p });
    }
    let config = SETTINGS.get()?;
    match create_log(config) {
        Ok(writer) => {
            diag(
                Diag::Info,
                &format!(
                    "sigmatrace: writing {}{}",
                    writer.path().display(),
                    if writer.drains_direct() {
                        " (ring chunks drained with direct I/O)"
                    } else {
                        ""
                    }
                ),
            );
            start_background(
                writer.clone(),
                config.prefault_chunks,
                config.flight_recorder,
            );
            let p = Box::into_raw(Box::new(Process { writer }));
            PROCESS.store(p, Ordering::Release);
            // SAFETY: just leaked, never freed.
            Some(unsafe { &*p })
        }
        Err(e) => {
            CREATE_FAILED.store(true, Ordering::Relaxed);
            disable(&format!("cannot create the log: {e}"));
            None
        }
    }
}

/// Starts the background thread. With rings (`ring_chunks` > 0, see the schemas crate's
/// `ring` module) it drains the threads' finished ring chunks to their final positions
/// (`LogWriter::drain`), so the program's threads only reuse pages they faulted once; without,
/// it keeps chunks prepared ahead (file blocks and page tables, `prefault_ahead`) with the
/// same count. Either way it hands back the memory of plain chunks whose writers moved on
/// (`LogWriter::release_retired`), so the program's resident memory does not grow with the
/// log. It blocks every signal (process-directed signals keep going to the program's
/// threads), polls every 200 µs while chunks are being finished and backs off to 20 ms when
/// idle — woken at once when a thread finishes a ring chunk ([`wake_drainer`]), so that a
/// burst after an idle period does not fill the ring while it sleeps — and stops preparing on
/// an I/O error (the appending thread then meets and reports it). Flight recorder: the drain
/// only hands back idle rings' pages, and a requested dump ([`request_dump`]) is done within
/// one idle period (≤ 20 ms).
fn start_background(writer: LogWriter, ring_chunks: u32, flight: bool) {
    let mut ahead = if writer.has_rings() { 0 } else { ring_chunks };
    if writer.has_rings() && !flight {
        writer.set_drain_waker(wake_drainer);
    }
    let body = move || {
        let mut idle_us = 200;
        loop {
            if flight {
                dump_if_requested(&writer);
            }
            let mut busy = writer.drain().chunks > 0;
            busy |= match writer.prefault_ahead(ahead) {
                Ok(n) => n < ahead,
                Err(_) => {
                    ahead = 0;
                    false
                }
            };
            busy |= writer.release_retired() > 0;
            idle_us = if busy { 200 } else { (idle_us * 2).min(20_000) };
            std::thread::park_timeout(std::time::Duration::from_micros(idle_us));
        }
    };
    // SAFETY: sigset_t is plain data; the masks only change the calling thread's signal mask,
    // which is restored right after the spawn (the new thread inherits the full mask).
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let spawned = std::thread::Builder::new()
            .name("sigmatrace-prep".into())
            .spawn(body);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        match spawned {
            Ok(h) => {
                use std::os::unix::thread::JoinHandleExt;
                let _ = DRAINER.set(h.thread().clone());
                BACKGROUND.store(h.as_pthread_t() as usize, Ordering::Relaxed);
            }
            Err(_) => diag(
                Diag::Info,
                "sigmatrace: no background chunk preparer (thread creation failed)",
            ),
        }
    }
}

/// The background thread (`pthread_t`, 0 until it runs).
static BACKGROUND: AtomicUsize = AtomicUsize::new(0);

/// The background thread's handle, for [`wake_drainer`].
static DRAINER: OnceLock<std::thread::Thread> = OnceLock::new();

/// Wakes the background thread if it is parked between drains (`LogWriter::set_drain_waker`:
/// a program thread, or a signal handler on one, has just finished a ring chunk). Unparking
/// is an atomic swap, plus a `futex` wake when the thread was parked: no lock, no allocation,
/// nothing that blocks; once per chunk (1 MiB by default).
fn wake_drainer() {
    if let Some(t) = DRAINER.get() {
        t.unpark();
    }
}

/// CPU time the background thread has used so far, in ns (`None` without one).
pub fn background_cpu_ns() -> Option<u64> {
    let t = BACKGROUND.load(Ordering::Relaxed);
    if t == 0 {
        return None;
    }
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is the running background thread (it never exits); both out-pointers are
    // valid locals.
    let ok = unsafe {
        libc::pthread_getcpuclockid(t as libc::pthread_t, &mut clock) == 0
            && libc::clock_gettime(clock, &mut ts) == 0
    };
    ok.then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Dumps requested ([`request_dump`]) and dumps done, since the process (or fork child)
/// started.
static DUMPS_REQUESTED: AtomicU64 = AtomicU64::new(0);
static DUMPS_DONE: AtomicU64 = AtomicU64::new(0);

/// Asks the background thread for a flight-recorder dump (copy every thread's ring into the
/// log, `LogWriter::dump_rings`). Async-signal-safe: one atomic add (the SIGUSR2 handler).
pub fn request_dump() {
    DUMPS_REQUESTED.fetch_add(1, Ordering::Relaxed);
}

/// Dumps done so far (for tests and the C API).
pub fn dumps_done() -> u64 {
    DUMPS_DONE.load(Ordering::Acquire)
}

/// Background thread: one dump for any number of requests since the last one.
fn dump_if_requested(writer: &LogWriter) {
    let requested = DUMPS_REQUESTED.load(Ordering::Relaxed);
    if requested == DUMPS_DONE.load(Ordering::Relaxed) {
        return;
    }
    let d = writer.dump_rings();
    DUMPS_DONE.store(requested, Ordering::Release);
    let level = if d.refused > 0 {
        Diag::Error
    } else {
        Diag::Info
    };
    diag(
        level,
        &format!(
            "sigmatrace: flight recorder dump: {} chunks ({} bytes) copied into the log{}",
            d.chunks,
            d.bytes,
            if d.refused > 0 {
                format!(
                    ", {} not copied (size cap SIGMATRACE_MAX_BYTES reached or write error)",
                    d.refused
                )
            } else {
                String::new()
            }
        ),
    );
}

/// The process's log writer (creating the log if needed), for components that write from
/// their own threads (e.g. a queue poller: `writer.thread_writer(tid)`).
pub fn process_writer() -> Option<LogWriter> {
    process().map(|p| p.writer.clone())
}

/// Writer ids of the interposer's own background writers. They are above any Linux tid
/// (`pid_max` ≤ 2^22), so their chunks never merge with an application thread's; each writer
/// names itself with a `ThreadName` record.
pub mod background {
    /// The host queue poller (`sigmatrace-poll`).
    pub const HOST_POLLER: u32 = 0xffff_ff01;
    /// The device-poller drain (`sigmatrace-gpu`).
    pub const DEVICE_POLLER: u32 = 0xffff_ff02;
    /// Kernel timing (`sigmatrace-kern`).
    pub const KERNELS: u32 = 0xffff_ff03;
}

/// A chunk writer for a background component (creates the log if needed), introduced by a
/// `ThreadName` record.
pub fn background_writer(id: u32, name: &str) -> Option<ChunkWriter> {
    let mut w = process_writer()?.thread_writer(id);
    w.append_meta(RecordKind::ThreadName, 0, now(), id as u64, name.as_bytes());
    Some(w)
}

/// Runs `f` (which spawns threads) with the calling thread's CPU affinity set to `cpu` (when
/// given), so the threads it starts inherit it; the caller's affinity is restored. If the
/// affinity cannot be set, `f` runs unpinned.
pub fn with_affinity<R>(cpu: Option<u32>, f: impl FnOnce() -> R) -> R {
    let Some(cpu) = cpu else { return f() };
    // SAFETY: cpu_set_t is plain data; the calls only read/write the calling thread's own
    // affinity mask through valid pointers of the right size.
    unsafe {
        let mut old: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut old) != 0
            || cpu as usize >= libc::CPU_SETSIZE as usize
        {
            return f();
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut one);
        let pinned = libc::sched_setaffinity(0, size, &one) == 0;
        if !pinned {
            diag(
                Diag::Info,
                &format!("sigmatrace: cannot pin the poller to CPU {cpu}"),
            );
        }
        let r = f();
        if pinned {
            libc::sched_setaffinity(0, size, &old);
        }
        r
    }
}

/// Runs `f` (which spawns threads) with every signal blocked, so the threads it starts inherit
/// a full mask: process-directed signals keep going to the program's threads.
pub fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sigset_t is plain data; the masks change only the calling thread's signal mask,
    // which is restored before returning.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// Path of this process's log, if it exists yet.
pub fn log_path() -> Option<PathBuf> {
    let p = PROCESS.load(Ordering::Acquire);
    // SAFETY: leaked Box<Process>, never freed.
    (!p.is_null()).then(|| unsafe { &*p }.writer.path().to_owned())
}

/// Why the log could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("cannot create directory {dir}: {source}")]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("no free log name in {0} (tried 1000 sequence numbers)")]
    Names(PathBuf),
}

fn create_log(config: &LogSettings) -> Result<LogWriter, CreateError> {
    let dir = &config.output_dir;
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(dir)
        .map_err(|source| CreateError::Dir {
            dir: dir.clone(),
            source,
        })?;
    let ts = current_timestamper();
    let source = ts.source();
    let hz = estimate_hz(ts);
    let start = snapshot();
    let mut header = FileHeader::for_current_process(source, hz, start, config.chunk_size);
    header
        .attrs
        .push(format!("sigmatrace_version={}", env!("CARGO_PKG_VERSION")));
    header.attrs.push(format!("trace_mask={:#x}", config.trace));
    if config.flight_recorder {
        let ring = config.prefault_chunks as u64 * config.chunk_size as u64;
        header
            .attrs
            .push(format!("flight_recorder=ring_bytes:{ring}"));
    }
    if let Some((k, origin)) = skew::active() {
        header
            .attrs
            .push(format!("clock_skew={},{}", k.offset_ns, k.drift_ppb));
        header.attrs.push(format!("clock_skew_origin={origin}"));
    }
    let options = WriterOptions {
        chunk_size: config.chunk_size,
        max_bytes: config.max_bytes,
        ring_chunks: config.prefault_chunks,
        flight_recorder: config.flight_recorder,
        direct_io: config.direct_io,
        ..Default::default()
    };
    let period = (hz as u128 * config.snapshot_ms as u128 / 1000).max(1) as u64;
    let writer = create_unique(dir, &header, options)?;
    // The first loss is timestamped like the records (skew included).
    writer.set_clock(now);
    HZ.store(hz, Ordering::Relaxed);
    PERIOD.store(period, Ordering::Relaxed);
    NEXT_SNAPSHOT.store(start.ts.wrapping_add(period), Ordering::Relaxed);
    Ok(writer)
}

/// The timestamp source's rate. Unlike a plain two-snapshot ratio it survives preemption
/// between the TSC read and the clock read of a snapshot (common on a loaded machine): each
/// end point is the tightest of several snapshots, using the middle of its TSC bracket.
fn estimate_hz(ts: Timestamper) -> u64 {
    if ts.source() == TimestampSource::MonotonicRaw {
        return 1_000_000_000;
    }
    let tight = || ts.tight_snapshot(8);
    let mut best = 0u64;
    for _ in 0..3 {
        let a = tight();
        while clock_ns(libc::CLOCK_MONOTONIC_RAW) < a.monotonic_raw + 2_000_000 {
            std::hint::spin_loop();
        }
        let b = tight();
        let mid = |s: &sigmatrace_schemas::ClockSnapshot| s.ts / 2 + s.ts_after / 2;
        let dns = b.monotonic_raw.saturating_sub(a.monotonic_raw);
        let err = (a.ts_after - a.ts) + (b.ts_after - b.ts);
        let dts = mid(&b).saturating_sub(mid(&a));
        if dns == 0 {
            continue;
        }
        let hz = (dts as u128 * 1_000_000_000 / dns as u128) as u64;
        // Accept once both brackets are small against the window (under 1 %).
        if err < dts / 100 {
            return hz;
        }
        best = best.max(hz);
    }
    best
}

fn create_unique(
    dir: &Path,
    header: &FileHeader,
    options: WriterOptions,
) -> Result<LogWriter, CreateError> {
    for n in 0..1000 {
        let name = naming::log_name(&header.hostname, header.pid, header.rank.rank, n);
        match LogWriter::create(&dir.join(name), header, options) {
            Ok(w) => return Ok(w),
            Err(WriteError::Create { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                continue
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(CreateError::Names(dir.to_owned()))
}

// ---------------------------------------------------------------------------------------------
// Per-thread writer (thread.rs holds the thread-local block)

pub use thread::{
    abandon_placed, enter, enter_ready, place_next_wr, place_plain_send, place_wr, placed_args,
    placed_ts, placed_wr_sge, publish_placed, publish_placed_wr, with_existing_thread, with_thread,
    Out, Thread, MAX_PLACED, STATE_BYTES,
};

/// Set once the disk-full line was printed.
static REPORTED_WRITE_ERROR: AtomicBool = AtomicBool::new(false);

/// A writer ran dry: disk full or I/O error (one line at the default level) or size cap
/// reached (one line at info level). Recording stays on: every further event is counted,
/// per record kind, in the header's loss table (see FORMAT.md, "Losses"), so recorded +
/// dropped stays what the program did.
fn report_full() {
    let p = PROCESS.load(Ordering::Acquire);
    // SAFETY: leaked Box<Process>, never freed.
    let failed = !p.is_null() && unsafe { &*p }.writer.failed();
    if failed {
        if !REPORTED_WRITE_ERROR.swap(true, Ordering::Relaxed) {
            diag(
                Diag::Error,
                "sigmatrace: cannot extend the log (disk full or I/O error): recording stopped; \
                 further events are only counted (dropped, per kind, in the log header)",
            );
        }
    } else {
        diag(
            Diag::Info,
            "sigmatrace: log size cap reached (SIGMATRACE_MAX_BYTES); further events are counted as dropped",
        );
    }
}

/// Timestamp units per nanosecond, as the log header records them (creates the log if
/// needed; `None` when there is no log).
pub fn ticks_per_ns() -> Option<f64> {
    process()?;
    let hz = HZ.load(Ordering::Relaxed);
    (hz != 0).then(|| hz as f64 / 1e9)
}

#[inline(always)]
fn ts_of<R: FixedRecord>(rec: &R) -> u64 {
    let b = bytemuck::bytes_of(rec);
    u64::from_ne_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]])
}

// ---------------------------------------------------------------------------------------------
// Process events

/// `pthread_atfork` child handler: the child must never write through the parent's log.
pub fn after_fork_in_child() {
    PROCESS.store(std::ptr::null_mut(), Ordering::Release);
    CREATE_LOCK.reset_in_child();
    NEXT_SNAPSHOT.store(0, Ordering::Relaxed);
    PERIOD.store(u64::MAX, Ordering::Relaxed);
    HZ.store(0, Ordering::Relaxed);
    REPORTED_WRITE_ERROR.store(false, Ordering::Relaxed);
    DUMPS_REQUESTED.store(0, Ordering::Relaxed);
    DUMPS_DONE.store(0, Ordering::Relaxed);
    BACKGROUND.store(0, Ordering::Relaxed);
    thread::reset_in_child();
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigmatrace_schemas::PostSend;

    #[test]
    fn ts_is_read_from_offset_8() {
        let r = PostSend {
            ts: 0x1122_3344_5566_7788,
            ..Default::default()
        };
        assert_eq!(ts_of(&r), 0x1122_3344_5566_7788);
    }
}
