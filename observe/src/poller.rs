//! The host poller: one background thread that watches a dynamic set of host-resident queues.
//!
//! Registration (from the interposer's hooks, on application threads) takes a mutex,
//! publishes a new queue list and bumps a generation counter. The poll loop never blocks:
//! it checks the generation with one atomic load per pass and adopts a new list with
//! `try_lock` (retrying next pass if a registration holds the lock). `unregister` waits until
//! the poller has polled the queue one last time and dropped it, so the caller may free the
//! queue's memory as soon as it returns.
//!
//! Adaptive polling: after a pass that found nothing the thread spins for `spin_passes`
//! passes, then sleeps (`park_timeout`) from `min_sleep` doubling up to `max_sleep`; any
//! activity resets it. Records go to a schemas [`ChunkWriter`] owned by the thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use sigmatrace_schemas::{observer, ChunkWriter, Timestamper};

use crate::mem::HostMemory;
use crate::queue::QueueDesc;
use crate::watcher::{CqWatcher, Observation, SendWatcher, WatchError};

/// Poller tuning.
#[derive(Clone, Copy, Debug)]
pub struct PollerConfig {
    /// Empty passes spent spinning before the first sleep.
    pub spin_passes: u32,
    /// First sleep after spinning.
    pub min_sleep: Duration,
    /// Longest sleep when idle.
    pub max_sleep: Duration,
}

impl Default for PollerConfig {
    fn default() -> Self {
        PollerConfig {
            spin_passes: 2000,
            min_sleep: Duration::from_micros(50),
            max_sleep: Duration::from_millis(1),
        }
    }
}

/// Identifies a registered queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueHandle(pub u64);

/// Why a queue could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("queue is not host-resident (memory kind {0}); use the device poller")]
    NotHostResident(u8),
    #[error("UAR descriptions are not watchable rings")]
    NotARing,
    #[error("cannot watch the queue: {0}")]
    Watch(#[from] WatchError),
    #[error("the poller has stopped")]
    Stopped,
}

/// Live counters (relaxed atomics; read any time).
#[derive(Debug, Default)]
pub struct PollerCounters {
    /// Passes over the queue list.
    pub passes: AtomicU64,
    /// Individual queue polls.
    pub polls: AtomicU64,
    pub wqes: AtomicU64,
    pub cqes: AtomicU64,
    /// Overrun records (ObserveOverrun) emitted.
    pub overruns: AtomicU64,
    pub wqebbs_lost: AtomicU64,
    pub cqes_lost: AtomicU64,
    pub mem_errors: AtomicU64,
    /// Of `wqebbs_lost`: 16-bit PI laps estimated from the peak post rate.
    pub wqebbs_lost_estimated: AtomicU64,
    /// Polls whose gap could have hidden a PI lap without a visible overrun.
    pub alias_suspected_polls: AtomicU64,
    /// Records the log writer refused (size cap).
    pub records_dropped: AtomicU64,
    pub sleeps: AtomicU64,
    /// CPU time of the poller thread (CLOCK_THREAD_CPUTIME_ID), ns, updated every pass.
    pub cpu_ns: AtomicU64,
    /// Wall time since start, ns, updated every pass.
    pub wall_ns: AtomicU64,
}

/// A snapshot of [`PollerCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollerStats {
    pub passes: u64,
    pub polls: u64,
    pub wqes: u64,
    pub cqes: u64,
    pub overruns: u64,
    pub wqebbs_lost: u64,
    pub cqes_lost: u64,
    pub mem_errors: u64,
    pub wqebbs_lost_estimated: u64,
    pub alias_suspected_polls: u64,
    pub records_dropped: u64,
    pub sleeps: u64,
    pub cpu_ns: u64,
    pub wall_ns: u64,
}

impl PollerStats {
    /// CPU utilisation of the poller thread (fraction of one core).
    pub fn cpu_fraction(&self) -> f64 {
        if self.wall_ns == 0 {
            0.0
        } else {
            self.cpu_ns as f64 / self.wall_ns as f64
        }
    }
}

impl PollerCounters {
    fn snapshot(&self) -> PollerStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PollerStats {
            passes: l(&self.passes),
            polls: l(&self.polls),
            wqes: l(&self.wqes),
            cqes: l(&self.cqes),
            overruns: l(&self.overruns),
            wqebbs_lost: l(&self.wqebbs_lost),
            cqes_lost: l(&self.cqes_lost),
            mem_errors: l(&self.mem_errors),
            wqebbs_lost_estimated: l(&self.wqebbs_lost_estimated),
            alias_suspected_polls: l(&self.alias_suspected_polls),
            records_dropped: l(&self.records_dropped),
            sleeps: l(&self.sleeps),
            cpu_ns: l(&self.cpu_ns),
            wall_ns: l(&self.wall_ns),
        }
    }
}

/// What the poll thread does with each observation besides logging it (tests, integration).
pub type ObservationSink = Box<dyn FnMut(&Observation) + Send>;

#[derive(Clone)]
struct Spec {
    handle: QueueHandle,
    desc: QueueDesc,
    mem: HostMemory,
    /// The watcher created at registration (its start index and CQ shadow are taken then);
    /// the poll thread takes it when it adopts the list.
    init: Arc<Mutex<Option<Watcher>>>,
}

struct Shared {
    list: Mutex<Arc<Vec<Spec>>>,
    /// Unregistered queues awaiting their final poll (taken by the poll thread on adoption).
    retired: Mutex<Vec<Spec>>,
    generation: AtomicU64,
    /// Generation whose list the poll thread has adopted (after finishing a pass).
    adopted: AtomicU64,
    stop: AtomicBool,
    paused: AtomicBool,
    next_handle: AtomicU64,
    counters: PollerCounters,
    thread: Mutex<Option<Thread>>,
}

/// A running host poller.
pub struct HostPoller {
    shared: Arc<Shared>,
    join: Option<JoinHandle<Option<ChunkWriter>>>,
}

enum Watcher {
    Send(SendWatcher),
    Cq(CqWatcher),
}

impl HostPoller {
    /// Starts the poll thread. `writer` receives the records; `sink` sees every observation.
    pub fn start(
        config: PollerConfig,
        timestamper: Timestamper,
        writer: Option<ChunkWriter>,
        sink: Option<ObservationSink>,
    ) -> std::io::Result<HostPoller> {
        let shared = Arc::new(Shared {
            list: Mutex::new(Arc::new(Vec::new())),
            retired: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            adopted: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            next_handle: AtomicU64::new(1),
            counters: PollerCounters::default(),
            thread: Mutex::new(None),
        });
        let s2 = shared.clone();
        let join = thread::Builder::new()
            .name("sigmatrace-poll".into())
            .spawn(move || run(s2, config, timestamper, writer, sink))?;
        *lock(&shared.thread) = Some(join.thread().clone());
        Ok(HostPoller {
            shared,
            join: Some(join),
        })
    }

    /// Registers a host-resident send ring or CQ. WQEs/CQEs from the current doorbell state
    /// on are reported. `mem` must cover the ring and its doorbell record.
    pub fn register(&self, desc: QueueDesc, mem: HostMemory) -> Result<QueueHandle, RegisterError> {
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(RegisterError::Stopped);
        }
        if !desc.host_watchable() {
            return Err(match desc {
                QueueDesc::Uar(_) => RegisterError::NotARing,
                d => RegisterError::NotHostResident(d.memory()),
            });
        }
        let w = match &desc {
            QueueDesc::Send(s) => {
                Watcher::Send(SendWatcher::new(*s, observer::HOST_POLLER, None, &mem)?)
            }
            QueueDesc::Cq(c) => Watcher::Cq(CqWatcher::new(*c, observer::HOST_POLLER, None, &mem)?),
            QueueDesc::Uar(_) => return Err(RegisterError::NotARing),
        };
        let handle = QueueHandle(self.shared.next_handle.fetch_add(1, Ordering::Relaxed));
        let init = Arc::new(Mutex::new(Some(w)));
        self.publish(|v| {
            v.push(Spec {
                handle,
                desc,
                mem,
                init,
            })
        });
        Ok(handle)
    }

    /// Unregisters a queue. Returns once the poll thread has polled it a last time and will
    /// not read its memory again (false if the handle was unknown).
    pub fn unregister(&self, handle: QueueHandle) -> bool {
        let mut found = false;
        let retired = &self.shared.retired;
        let generation = self.publish(|v| {
            let (gone, keep): (Vec<Spec>, Vec<Spec>) =
                v.drain(..).partition(|s| s.handle == handle);
            *v = keep;
            found = !gone.is_empty();
            // Queued before the generation bump, so the adoption that acknowledges it has
            // done the final poll.
            lock(retired).extend(gone);
        });
        if found {
            self.wait_adopted(generation);
        }
        found
    }

    fn publish(&self, f: impl FnOnce(&mut Vec<Spec>)) -> u64 {
        let mut guard = lock(&self.shared.list);
        let mut v: Vec<Spec> = (**guard).clone();
        f(&mut v);
        *guard = Arc::new(v);
        let g = self.shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        drop(guard);
        if let Some(t) = lock(&self.shared.thread).as_ref() {
            t.unpark();
        }
        g
    }

    fn wait_adopted(&self, generation: u64) {
        while self.shared.adopted.load(Ordering::Acquire) < generation && !self.finished() {
            if let Some(t) = lock(&self.shared.thread).as_ref() {
                t.unpark();
            }
            thread::sleep(Duration::from_micros(20));
        }
    }

    fn finished(&self) -> bool {
        self.join.as_ref().is_none_or(|j| j.is_finished())
    }

    /// Pauses polling (registrations are still adopted, and unregistering still does the
    /// final poll). For tests that need a deterministic gap between polls, and for callers
    /// that must quiesce the thread briefly.
    pub fn pause(&self) {
        self.shared.paused.store(true, Ordering::Release);
    }

    /// Resumes polling after [`HostPoller::pause`].
    pub fn resume(&self) {
        self.shared.paused.store(false, Ordering::Release);
        if let Some(t) = lock(&self.shared.thread).as_ref() {
            t.unpark();
        }
    }

    /// Counters now.
    pub fn stats(&self) -> PollerStats {
        self.shared.counters.snapshot()
    }

    /// The registered queues.
    pub fn queues(&self) -> Vec<(QueueHandle, QueueDesc)> {
        lock(&self.shared.list)
            .iter()
            .map(|s| (s.handle, s.desc))
            .collect()
    }

    /// Stops the thread after a final pass over every queue; returns the writer and the
    /// final counters.
    pub fn stop(mut self) -> (Option<ChunkWriter>, PollerStats) {
        let w = self.stop_inner();
        (w, self.stats())
    }

    fn stop_inner(&mut self) -> Option<ChunkWriter> {
        self.shared.stop.store(true, Ordering::Release);
        let j = self.join.take()?;
        j.thread().unpark();
        j.join().ok().flatten()
    }
}

impl Drop for HostPoller {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn thread_cpu_ns() -> u64 {
    sigmatrace_schemas::clock::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

struct Loop {
    watchers: HashMap<QueueHandle, (Watcher, HostMemory)>,
    writer: Option<ChunkWriter>,
    sink: Option<ObservationSink>,
    ts: Timestamper,
    /// The pass's CQ observations, handed over once its send rings were scanned.
    held: Vec<Observation>,
}

impl Loop {
    fn adopt(&mut self, list: &[Spec]) {
        for s in list {
            if self.watchers.contains_key(&s.handle) {
                continue;
            }
            if let Some(w) = lock(&s.init).take() {
                self.watchers.insert(s.handle, (w, s.mem.clone()));
            }
        }
    }

    /// Polls one watcher. With `hold`, what it finds is kept for [`Loop::release_held`]
    /// instead of handed over now.
    fn poll_one(
        &mut self,
        w: &mut Watcher,
        mem: &HostMemory,
        c: &SharedCountersRef,
        hold: bool,
    ) -> usize {
        let stamper = self.ts;
        // The poll's own time (hidden laps and overruns); every WQE and CQE is stamped when it
        // is handed over, after it was read: a time read before the producer index would put
        // an entry produced between the two before its producer wrote it.
        let ts = stamper.now();
        let Loop {
            writer, sink, held, ..
        } = self;
        let mut found = 0usize;
        let mut emit = |o: Observation| {
            found += 1;
            if hold {
                held.push(o);
            } else {
                hand_over(writer, sink, stamper, c, o);
            }
        };
        let r = match w {
            Watcher::Send(s) => {
                let (e0, a0) = (s.stats.wqebbs_lost_estimated, s.stats.alias_suspected_polls);
                let r = s.poll(mem, ts, &mut emit);
                c.add(
                    |k| &k.wqebbs_lost_estimated,
                    s.stats.wqebbs_lost_estimated - e0,
                );
                c.add(
                    |k| &k.alias_suspected_polls,
                    s.stats.alias_suspected_polls - a0,
                );
                r
            }
            Watcher::Cq(q) => q.poll(mem, ts, &mut emit),
        };
        c.add(|k| &k.polls, 1);
        if r.is_err() {
            c.add(|k| &k.mem_errors, 1);
        }
        found
    }

    /// Hands over what the pass's CQ polls held, each stamped now (after the send rings were
    /// scanned).
    fn release_held(&mut self, c: &SharedCountersRef) {
        let Loop {
            writer,
            sink,
            held,
            ts,
            ..
        } = self;
        for o in held.drain(..) {
            hand_over(writer, sink, *ts, c, o);
        }
    }
}

/// One observation to the sink and the log, counted; a WQE or CQE stamped now.
fn hand_over(
    writer: &mut Option<ChunkWriter>,
    sink: &mut Option<ObservationSink>,
    stamper: Timestamper,
    c: &SharedCountersRef,
    mut o: Observation,
) {
    match &mut o {
        Observation::Wqe(r, _) => r.ts = stamper.now(),
        Observation::Cqe(r) => r.ts = stamper.now(),
        Observation::Overrun(_) => {}
    }
    if let Some(s) = sink.as_mut() {
        s(&o);
    }
    if let Some(w) = writer.as_mut() {
        let ok = match &o {
            Observation::Wqe(r, _) => w.append(r),
            Observation::Cqe(r) => w.append(r),
            Observation::Overrun(r) => w.append(r),
        };
        if !ok {
            c.add(|k| &k.records_dropped, 1);
        }
    }
    match &o {
        Observation::Wqe(..) => c.add(|k| &k.wqes, 1),
        Observation::Cqe(_) => c.add(|k| &k.cqes, 1),
        Observation::Overrun(r) => {
            c.add(|k| &k.overruns, 1);
            if r.hdr.aux == sigmatrace_schemas::queue_kind::SEND {
                c.add(|k| &k.wqebbs_lost, r.lost)
            } else {
                c.add(|k| &k.cqes_lost, r.lost)
            }
        }
    }
}

/// Counter access that also works for final polls after the counters were detached.
struct SharedCountersRef<'a>(Option<&'a PollerCounters>);

impl<'a> SharedCountersRef<'a> {
    fn add(&self, f: impl Fn(&PollerCounters) -> &AtomicU64, n: u64) {
        if let Some(c) = self.0 {
            f(c).fetch_add(n, Ordering::Relaxed);
        }
    }
}

fn run(
    shared: Arc<Shared>,
    config: PollerConfig,
    ts: Timestamper,
    writer: Option<ChunkWriter>,
    sink: Option<ObservationSink>,
) -> Option<ChunkWriter> {
    let start = Instant::now();
    let cpu0 = thread_cpu_ns();
    let mut lp = Loop {
        watchers: HashMap::new(),
        writer,
        sink,
        ts,
        held: Vec::new(),
    };
    let mut seen_gen = 0u64;
    let mut idle = 0u32;
    let mut sleep = config.min_sleep;
    loop {
        let stopping = shared.stop.load(Ordering::Acquire);
        let g = shared.generation.load(Ordering::Acquire);
        if g != seen_gen {
            // Never block: a registration holding the lock just delays adoption one pass.
            let list = if stopping {
                Some(lock(&shared.list).clone())
            } else {
                shared.list.try_lock().ok().map(|l| l.clone())
            };
            if let Some(list) = list {
                let retired: Vec<Spec> = std::mem::take(&mut *lock(&shared.retired));
                lp.retire(&retired, &shared.counters);
                lp.adopt_counted(&list, &shared.counters);
                seen_gen = g;
                shared.adopted.store(g, Ordering::Release);
            }
        }
        if !stopping && shared.paused.load(Ordering::Acquire) {
            thread::park_timeout(config.max_sleep);
            continue;
        }
        let mut found = 0usize;
        let c = SharedCountersRef(Some(&shared.counters));
        // Taken out for the pass (no allocation), so each watcher is polled in place. CQs
        // first, held; then the send rings; then the CQs' entries, stamped after the send
        // rings' scan. A WQE is written before its CQE, so every CQE of the pass comes after
        // its WQE in the log and in time. (Polled in map order, a CQ before its send ring
        // showed completions of WQEs not yet seen: 715 of 12 336 in the demo's MoE run, and
        // 15-110 with send rings first.)
        let mut watchers = std::mem::take(&mut lp.watchers);
        for cqs in [true, false] {
            for (w, mem) in watchers.values_mut() {
                if matches!(w, Watcher::Cq(_)) == cqs {
                    found += lp.poll_one(w, mem, &c, cqs);
                }
            }
        }
        lp.release_held(&c);
        lp.watchers = watchers;
        let passes = shared.counters.passes.fetch_add(1, Ordering::Relaxed) + 1;
        // The thread's CPU time is a system call: refreshed every 64 passes, before sleeping
        // and at the end, not on every pass.
        let sleeping = found == 0 && idle >= config.spin_passes;
        if passes.is_multiple_of(64) || sleeping || stopping {
            shared
                .counters
                .cpu_ns
                .store(thread_cpu_ns() - cpu0, Ordering::Relaxed);
            shared
                .counters
                .wall_ns
                .store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        if stopping {
            break;
        }
        if found > 0 {
            idle = 0;
            sleep = config.min_sleep;
        } else if idle < config.spin_passes {
            idle += 1;
            std::hint::spin_loop();
        } else {
            shared.counters.sleeps.fetch_add(1, Ordering::Relaxed);
            thread::park_timeout(sleep);
            sleep = (sleep * 2).min(config.max_sleep);
        }
    }
    shared.adopted.store(u64::MAX, Ordering::Release);
    lp.writer
}

impl Loop {
    /// Final poll of unregistered queues, including ones never adopted.
    fn retire(&mut self, retired: &[Spec], counters: &PollerCounters) {
        let c = SharedCountersRef(Some(counters));
        for s in retired {
            let w = self
                .watchers
                .remove(&s.handle)
                .map(|(w, _)| w)
                .or_else(|| lock(&s.init).take());
            if let Some(mut w) = w {
                self.poll_one(&mut w, &s.mem, &c, false);
            }
        }
    }

    fn adopt_counted(&mut self, list: &[Spec], counters: &PollerCounters) {
        let gone: Vec<QueueHandle> = self
            .watchers
            .keys()
            .filter(|h| !list.iter().any(|s| s.handle == **h))
            .copied()
            .collect();
        let c = SharedCountersRef(Some(counters));
        for h in gone {
            if let Some((mut w, mem)) = self.watchers.remove(&h) {
                self.poll_one(&mut w, &mem, &c, false);
            }
        }
        self.adopt(list);
    }
}
