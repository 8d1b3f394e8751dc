//! The device-side poller for GPU-resident rings (`sigmatrace-observe`'s `DevicePoller`: one
//! persistent block on its own low-priority non-blocking stream), managed by one background
//! thread (`sigmatrace-gpu`, all signals blocked, every driver call [`internal`]).
//!
//! Only in processes that already loaded libcuda (`Driver::if_loaded` uses `RTLD_NOLOAD`).
//! The thread owns the kernel: it (re)starts it with the current set of GPU-resident queues
//! (10 ms after the last change, so a burst of queue creations costs one launch), drains its
//! events into `WqeObserved`/`CqeObserved`/`ObserveOverrun` (observer 1), and takes a
//! GPU/host clock pair every 100 ms (`GpuClockPair`). The kernel's watch list is fixed at
//! launch: a change stops the old kernel and launches a new one, which starts from the rings'
//! current doorbell state (WQEs posted in between are not observed; `device_poller=launches:N`
//! at exit says how many times that happened: N − 1). Removing a queue (its memory is about to
//! be freed) waits until the kernel that watched it has stopped. The driver calls, including
//! the context it makes current, happen on this thread only, never on the program's.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sigmatrace_observe::cuda::{libcuda_loaded, DevicePoller, DevicePollerConfig, Driver};
use sigmatrace_observe::device::ClockMap;
use sigmatrace_observe::QueueDesc;
use sigmatrace_schemas::ChunkWriter;

use crate::record;
use crate::runtime::internal::internal;
use crate::runtime::singleton::{self, Singleton};
use crate::sink;
use crate::sink::{cat, Diag};

/// Quiet time after a change before the kernel is (re)launched.
const DEBOUNCE: Duration = Duration::from_millis(10);
/// Clock pair period.
const CLOCK_PERIOD: Duration = Duration::from_millis(100);
/// Bounded waits on the kernel (spin iterations).
const STOP_SPINS: u64 = 2_000_000;
const CLOCK_SPINS: u64 = 200_000;

#[derive(Default)]
struct Mgr {
    want: Vec<QueueDesc>,
    generation: u64,
    applied: u64,
    changed_at: Option<Instant>,
    stop: bool,
    stopped: bool,
    thread: bool,
    launches: u64,
    failures: u64,
}

struct Shared {
    m: Mutex<Mgr>,
    cv: Condvar,
}

static STATE: Singleton<Shared> = Singleton::new();

fn shared() -> &'static Shared {
    STATE.get_or_init(|| Shared {
        m: Mutex::new(Mgr::default()),
        cv: Condvar::new(),
    })
}

fn lock() -> MutexGuard<'static, Mgr> {
    singleton::lock(&shared().m)
}

/// Fork child: the parent's thread and kernel are not ours.
pub fn after_fork_child() {
    STATE.forget_in_child();
}

/// The GPU-resident queues to watch now. Starts the manager thread when needed; never loads
/// libcuda (without it loaded, nothing happens).
pub fn set_queues(queues: Vec<QueueDesc>) -> u64 {
    if !libcuda_loaded() {
        if !queues.is_empty() {
            sink::diag(
                Diag::Info,
                "sigmatrace: GPU-resident queue found but libcuda is not loaded; not polled",
            );
        }
        return 0;
    }
    let s = shared();
    let mut m = lock();
    m.want = queues;
    m.generation += 1;
    m.changed_at = Some(Instant::now());
    let g = m.generation;
    if !m.thread && !m.want.is_empty() {
        m.thread = true;
        let spawned = sink::with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("sigmatrace-gpu".into())
                .spawn(|| internal(run))
        });
        if spawned.is_err() {
            m.thread = false;
            m.failures += 1;
        }
    }
    s.cv.notify_all();
    g
}

/// Like [`set_queues`], and waits (bounded) until the kernel that watched removed queues has
/// stopped — before their memory is released.
pub fn set_queues_and_wait(queues: Vec<QueueDesc>) {
    let g = set_queues(queues);
    let s = shared();
    let mut m = lock();
    let t0 = Instant::now();
    while m.thread && m.applied < g && !m.stopped && t0.elapsed() < Duration::from_secs(5) {
        m =
            s.cv.wait_timeout(m, Duration::from_millis(10))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
    }
}

fn stop_kernel(dp: Option<DevicePoller>) {
    if let Some(mut dp) = dp {
        if !dp.stop(STOP_SPINS) {
            sink::diag(
                Diag::Info,
                "sigmatrace: device poller did not confirm its exit; its buffers are left allocated",
            );
        }
    }
}

fn start_kernel(queues: &[QueueDesc]) -> Option<DevicePoller> {
    let tpn = sink::ticks_per_ns()?;
    let drv = match Driver::if_loaded() {
        Ok(d) => d,
        Err(e) => {
            sink::diag(Diag::Info, &format!("sigmatrace: no device poller: {e}"));
            return None;
        }
    };
    match DevicePoller::start(
        &drv,
        queues.to_vec(),
        DevicePollerConfig::default(),
        ClockMap::new(tpn),
    ) {
        Ok(dp) => Some(dp),
        Err(e) => {
            sink::diag(Diag::Info, &format!("sigmatrace: no device poller: {e}"));
            lock().failures += 1;
            None
        }
    }
}

fn drain(dp: &mut DevicePoller, w: &mut Option<ChunkWriter>) -> usize {
    let traced = sink::tracing(cat::OBSERVE);
    dp.drain(&mut |o| {
        if let Some(w) = w.as_mut().filter(|_| traced) {
            record::gpu::observation(w, &o);
        }
    })
}

/// The manager thread.
fn run() {
    let s = shared();
    let ts = sink::current_timestamper();
    let mut w = sink::background_writer(sink::background::DEVICE_POLLER, "sigmatrace-gpu");
    let mut dp: Option<DevicePoller> = None;
    let mut running: Vec<QueueDesc> = Vec::new();
    let mut last_clock = Instant::now() - CLOCK_PERIOD;
    loop {
        let m = lock();
        if m.stop {
            break;
        }
        if m.generation != m.applied {
            let quiet = m.changed_at.is_none_or(|t| t.elapsed() >= DEBOUNCE);
            // Removals are applied at once (a caller waits to free memory); additions after
            // the quiet time.
            let removal = running.iter().any(|q| !m.want.contains(q));
            if quiet || removal {
                let (want, g) = (m.want.clone(), m.generation);
                drop(m);
                stop_kernel(dp.take());
                running.clear();
                if !want.is_empty() {
                    dp = start_kernel(&want);
                    if dp.is_some() {
                        running = want;
                    }
                }
                let mut m = lock();
                m.applied = g;
                if dp.is_some() {
                    m.launches += 1;
                }
                s.cv.notify_all();
                continue;
            }
        }
        drop(m);
        let mut found = 0;
        if let Some(d) = dp.as_mut() {
            found = drain(d, &mut w);
            if last_clock.elapsed() >= CLOCK_PERIOD {
                last_clock = Instant::now();
                if let Some(pair) = d.sample_clock(&ts, CLOCK_SPINS) {
                    if let Some(w) = w.as_mut() {
                        record::gpu::clock_pair(w, &pair);
                    }
                }
            }
        }
        let pending = {
            let m = lock();
            (m.generation != m.applied)
                .then(|| m.changed_at.map_or(Duration::ZERO, |t| t.elapsed()))
        };
        let wait = if found > 0 {
            Duration::ZERO
        } else if let Some(since) = pending {
            DEBOUNCE
                .saturating_sub(since)
                .max(Duration::from_micros(100))
        } else if dp.is_some() {
            Duration::from_micros(200)
        } else {
            Duration::from_millis(50)
        };
        if !wait.is_zero() {
            let m = lock();
            let _ = s.cv.wait_timeout(m, wait);
        }
    }
    if let Some(d) = dp.as_mut() {
        drain(d, &mut w);
    }
    stop_kernel(dp);
    lock().stopped = true;
    s.cv.notify_all();
}

/// Exit: stop the kernel (bounded) and log the manager's counters.
pub fn at_exit() {
    if STATE.get().is_none() {
        return;
    }
    let s = shared();
    let mut m = lock();
    if !m.thread {
        return;
    }
    m.stop = true;
    s.cv.notify_all();
    let t0 = Instant::now();
    while !m.stopped && t0.elapsed() < Duration::from_secs(1) {
        m =
            s.cv.wait_timeout(m, Duration::from_millis(10))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
    }
    let attr = format!(
        "device_poller=launches:{},failures:{}",
        m.launches, m.failures
    );
    drop(m);
    record::process_attr(&attr);
}
