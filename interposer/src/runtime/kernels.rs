//! Kernel tracks: `KernelLaunch` for every launch, and `KernelExec` start/end from two CUDA
//! events recorded on the launch's stream around it, resolved in the background.
//!
//! Clock: the GPU stamps an event when the stream reaches it; `cuEventElapsedTime` gives the
//! difference between two events of one context. Each context gets a non-blocking stream of
//! ours on which a *reference* event is recorded (bracketed by two host timestamps) when a
//! launch finds the last reference older than [`REFERENCE_PERIOD`]; a kernel's start/end are
//! the reference's host time plus the elapsed time from the reference. Accuracy: absolute
//! offset ≈ the time from the host's record call until the GPU front end processes the empty
//! stream's event (submission latency, typically a few µs on a real GPU) plus half the host
//! bracket; relative resolution ≈ the driver's event resolution (~0.5 µs) and the
//! f32-milliseconds format (< 1 µs for the ≤ 1 s spans that re-referencing keeps).
//!
//! Nothing disturbs the program: events come from our own pool (never the program's), are
//! recorded only on the launch's stream and our own reference stream, never while the stream
//! is being captured into a graph (the launch is then recorded untimed), and never wait on the
//! host. The background thread (`sigmatrace-kern`, all signals blocked) queries the oldest
//! pending event of each stream (completion is in stream order) and writes `KernelExec` with
//! its own writer. At most [`MAX_PENDING`] launches wait for resolution; later ones are
//! recorded untimed (counted in the `kernel_timing=` process attribute at exit).

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use sigmatrace_schemas::{launch_api, ChunkWriter};

use crate::ffi::{as_fn, dl};
use crate::record;
use crate::runtime::config;
use crate::runtime::internal::internal;
use crate::runtime::singleton::{self, Singleton};
use crate::sink;

/// A new reference event is recorded when the last one is older than this.
pub const REFERENCE_PERIOD: Duration = Duration::from_secs(1);
/// Launches waiting for their end event; beyond, launches are recorded untimed.
pub const MAX_PENDING: usize = 65536;
/// `CU_STREAM_PER_THREAD`.
const STREAM_PER_THREAD: u64 = 0x2;
/// `CUDA_ERROR_NOT_READY`.
const NOT_READY: c_int = 600;

type FnCtxGet = unsafe extern "C" fn(*mut u64) -> c_int;
type FnCtxSet = unsafe extern "C" fn(u64) -> c_int;
type FnCtxDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnStreamCreate = unsafe extern "C" fn(*mut u64, c_uint) -> c_int;
type FnCapturing = unsafe extern "C" fn(u64, *mut c_int) -> c_int;
type FnEventCreate = unsafe extern "C" fn(*mut u64, c_uint) -> c_int;
type FnEventRecord = unsafe extern "C" fn(u64, u64) -> c_int;
type FnEventQuery = unsafe extern "C" fn(u64) -> c_int;
type FnElapsed = unsafe extern "C" fn(*mut f32, u64, u64) -> c_int;
type FnFuncName = unsafe extern "C" fn(*mut *const c_char, u64) -> c_int;

/// Driver functions the timing uses (resolved from the loaded libcuda; none is hooked).
struct Fns {
    ctx_get_current: FnCtxGet,
    ctx_set_current: FnCtxSet,
    ctx_get_device: FnCtxDevice,
    stream_create: FnStreamCreate,
    stream_is_capturing: FnCapturing,
    event_create: FnEventCreate,
    event_record: FnEventRecord,
    event_query: FnEventQuery,
    elapsed: FnElapsed,
    func_get_name: Option<FnFuncName>,
}

fn fns() -> Option<&'static Fns> {
    static FNS: OnceLock<Option<Fns>> = OnceLock::new();
    FNS.get_or_init(|| {
        let get = |n: &CStr| {
            let p = dl::resolve_next(n, None, c"libcuda.so.1");
            (p != 0).then_some(p)
        };
        macro_rules! f {
            ($n:literal, $t:ty) => {
                // SAFETY: the driver's exported $n, whose C prototype is $t (CUDA 12 API).
                unsafe { as_fn::<$t>(get($n)?) }
            };
        }
        Some(Fns {
            ctx_get_current: f!(c"cuCtxGetCurrent", FnCtxGet),
            ctx_set_current: f!(c"cuCtxSetCurrent", FnCtxSet),
            ctx_get_device: f!(c"cuCtxGetDevice", FnCtxDevice),
            stream_create: f!(c"cuStreamCreate", FnStreamCreate),
            stream_is_capturing: f!(c"cuStreamIsCapturing", FnCapturing),
            event_create: f!(c"cuEventCreate", FnEventCreate),
            event_record: f!(c"cuEventRecord", FnEventRecord),
            event_query: f!(c"cuEventQuery", FnEventQuery),
            elapsed: f!(c"cuEventElapsedTime", FnElapsed),
            // SAFETY: cuFuncGetName(const char **, CUfunction), CUDA ≥ 12.3; optional.
            func_get_name: get(c"cuFuncGetName").map(|p| unsafe { as_fn(p) }),
        })
    })
    .as_ref()
}

/// A host timestamp paired with an event recorded on our idle reference stream.
struct Reference {
    event: u64,
    host_ts: u64,
    taken: Instant,
    users: u32,
}

/// Per-context timing state.
struct Ctx {
    device: u32,
    ref_stream: u64,
    refs: Vec<Reference>,
    pool: Vec<u64>,
}

/// A launch whose end event has not been resolved yet.
#[derive(Clone, Copy)]
struct Pending {
    correlation: u64,
    ctx: u64,
    device: u32,
    reference: usize,
    start: u64,
    end: u64,
}

#[derive(Default)]
struct Timing {
    ctxs: HashMap<u64, Ctx>,
    /// (context, stream) → launches in stream order.
    pending: HashMap<(u64, u64), VecDeque<Pending>>,
    pending_total: usize,
    names: HashSet<u64>,
    untimed: u64,
    resolved: u64,
    failed: u64,
    thread: bool,
}

struct State {
    timing: Mutex<Timing>,
    stop: AtomicBool,
    stopped: AtomicBool,
}

static STATE: Singleton<State> = Singleton::new();
static CORRELATION: AtomicU64 = AtomicU64::new(1);

fn state() -> &'static State {
    STATE.get_or_init(|| State {
        timing: Mutex::new(Timing::default()),
        stop: AtomicBool::new(false),
        stopped: AtomicBool::new(false),
    })
}

fn lock() -> MutexGuard<'static, Timing> {
    singleton::lock(&state().timing)
}

/// Fork child: the parent's state (and thread) is not ours.
pub fn after_fork_child() {
    STATE.forget_in_child();
}

/// Launch geometry.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
}

/// What the pre-launch hook prepared.
pub struct Launch {
    correlation: u64,
    ctx: u64,
    device: u32,
    stream: u64,
    /// Start event (recorded) and reference index, when timed.
    timed: Option<(u64, usize)>,
}

impl Ctx {
    fn new(f: &Fns) -> Option<Ctx> {
        let mut dev: c_int = 0;
        let mut stream: u64 = 0;
        // SAFETY: driver calls with valid out pointers, in the launching thread's context;
        // CU_STREAM_NON_BLOCKING (1): our reference stream never synchronises with the
        // program's legacy default stream.
        unsafe {
            if (f.ctx_get_device)(&mut dev) != 0 || (f.stream_create)(&mut stream, 1) != 0 {
                return None;
            }
        }
        Some(Ctx {
            device: dev.max(0) as u32,
            ref_stream: stream,
            refs: Vec::new(),
            pool: Vec::new(),
        })
    }

    fn event(&mut self, f: &Fns) -> Option<u64> {
        if let Some(e) = self.pool.pop() {
            return Some(e);
        }
        let mut e = 0u64;
        // SAFETY: valid out pointer; CU_EVENT_DEFAULT (timing enabled).
        (unsafe { (f.event_create)(&mut e, 0) } == 0).then_some(e)
    }

    /// The current reference (recording a new one when the last is stale).
    fn reference(&mut self, f: &Fns) -> Option<usize> {
        if let Some(i) = self.refs.len().checked_sub(1) {
            if self.refs[i].taken.elapsed() < REFERENCE_PERIOD {
                return Some(i);
            }
        }
        let ev = self.event(f)?;
        let t0 = sink::now();
        // SAFETY: our event on our stream.
        let rc = unsafe { (f.event_record)(ev, self.ref_stream) };
        let t1 = sink::now();
        if rc != 0 {
            self.pool.push(ev);
            return None;
        }
        if let Some(last) = self.refs.last_mut() {
            if last.users == 0 {
                self.pool.push(std::mem::take(&mut last.event));
            }
        }
        self.refs.push(Reference {
            event: ev,
            host_ts: t0 / 2 + t1 / 2 + (t0 & t1 & 1),
            taken: Instant::now(),
            users: 0,
        });
        Some(self.refs.len() - 1)
    }
}

/// Before a launch: correlation id, context, device and (when timing) the start event.
pub fn before(stream: u64, ptsz: bool) -> Launch {
    let correlation = CORRELATION.fetch_add(1, Ordering::Relaxed);
    let stream = if ptsz && stream == 0 {
        STREAM_PER_THREAD
    } else {
        stream
    };
    let mut l = Launch {
        correlation,
        ctx: 0,
        device: 0,
        stream,
        timed: None,
    };
    let Some(f) = fns() else { return l };
    internal(|| {
        // SAFETY: valid out pointer.
        if unsafe { (f.ctx_get_current)(&mut l.ctx) } != 0 || l.ctx == 0 {
            return;
        }
        let timing = config::get().is_some_and(|c| c.observe.kernel_timing);
        let mut t = lock();
        if let std::collections::hash_map::Entry::Vacant(e) = t.ctxs.entry(l.ctx) {
            match Ctx::new(f) {
                Some(c) => e.insert(c),
                None => return,
            };
        }
        let full = t.pending_total >= MAX_PENDING;
        let c = t.ctxs.get_mut(&l.ctx).expect("inserted above");
        l.device = c.device;
        let mut capture: c_int = 0;
        // SAFETY: valid out pointer; the program's stream.
        let capturing =
            unsafe { (f.stream_is_capturing)(stream, &mut capture) } != 0 || capture != 0;
        if !timing || full || capturing {
            t.untimed += 1;
            return;
        }
        let Some(r) = c.reference(f) else { return };
        let Some(ev) = c.event(f) else { return };
        // SAFETY: our event, recorded on the launch's stream just before the launch.
        if unsafe { (f.event_record)(ev, stream) } != 0 {
            c.pool.push(ev);
            return;
        }
        c.refs[r].users += 1;
        l.timed = Some((ev, r));
    });
    l
}

/// After the launch: `KernelLaunch`, the kernel's name if not known yet, and the end event.
pub fn after(l: Launch, api: u32, function: u64, d: Dims, ret: c_int) {
    let Some(f) = fns() else { return };
    if ret != 0 {
        if let Some((ev, r)) = l.timed {
            release(l.ctx, &[ev], Some(r));
        }
        return;
    }
    record::gpu::kernel_launch(&record::gpu::Launch {
        api,
        correlation: l.correlation,
        function,
        stream: l.stream,
        grid: d.grid,
        block: d.block,
        shared_mem: d.shared_mem,
        device: l.device,
    });
    // A graph launch's "function" is the executable graph: not a CUfunction to name.
    if api != launch_api::CU_GRAPH_LAUNCH && !lock().names.contains(&function) {
        if let Some(get_name) = f.func_get_name {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: valid out pointer; the function the program just launched.
            let rc = internal(|| unsafe { get_name(&mut p, function) });
            if rc == 0 && !p.is_null() {
                // SAFETY: the driver returns a NUL-terminated name it owns.
                name_function(function, unsafe { CStr::from_ptr(p) }.to_bytes());
            }
        }
    }
    let Some((start, r)) = l.timed else { return };
    let mut t = lock();
    let Some(c) = t.ctxs.get_mut(&l.ctx) else {
        return;
    };
    let end = c.event(f).filter(|&ev| {
        // SAFETY: our event on the launch's stream, right after the launch.
        internal(|| unsafe { (f.event_record)(ev, l.stream) }) == 0
    });
    let Some(end) = end else {
        drop(t);
        release(l.ctx, &[start], Some(r));
        return;
    };
    t.pending
        .entry((l.ctx, l.stream))
        .or_default()
        .push_back(Pending {
            correlation: l.correlation,
            ctx: l.ctx,
            device: l.device,
            reference: r,
            start,
            end,
        });
    t.pending_total += 1;
    if !t.thread {
        t.thread = true;
        drop(t);
        start_thread();
    }
}

/// Returns events to their context's pool and drops a reference use.
fn release(ctx: u64, events: &[u64], reference: Option<usize>) {
    let mut t = lock();
    if let Some(c) = t.ctxs.get_mut(&ctx) {
        c.pool.extend_from_slice(events);
        if let Some(r) = reference.and_then(|r| c.refs.get_mut(r)) {
            r.users = r.users.saturating_sub(1);
        }
    }
}

/// Records a kernel's name once (`StringDef`, namespace FUNCTION, key = the handle).
pub fn name_function(function: u64, name: &[u8]) {
    if !lock().names.insert(function) {
        return;
    }
    record::gpu::function_name(function, name);
}

fn start_thread() {
    let spawned = sink::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("sigmatrace-kern".into())
            .spawn(|| internal(run))
    });
    if spawned.is_err() {
        lock().thread = false;
    }
}

/// Resolves completed launches until asked to stop (then one final pass).
fn run() {
    let st = state();
    let mut w = sink::background_writer(sink::background::KERNELS, "sigmatrace-kern");
    let mut idle = Duration::from_micros(200);
    loop {
        let stopping = st.stop.load(Ordering::Acquire);
        let n = resolve(&mut w);
        if stopping {
            break;
        }
        idle = if n > 0 {
            Duration::from_micros(200)
        } else {
            (idle * 2).min(Duration::from_millis(5))
        };
        std::thread::park_timeout(idle);
    }
    st.stopped.store(true, Ordering::Release);
}

/// (context, stream).
type StreamKey = (u64, u64);
/// A pending launch with its reference's event and host time.
type Snapshot = (Pending, u64, u64);

/// One pass: for each stream, the launches whose end event completed, oldest first.
fn resolve(w: &mut Option<ChunkWriter>) -> usize {
    let Some(f) = fns() else { return 0 };
    let Some(tpn) = sink::ticks_per_ns() else {
        return 0;
    };
    // Snapshot the heads (the lock is not held across driver calls).
    let work: Vec<(StreamKey, Vec<Snapshot>)> = {
        let t = lock();
        t.pending
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .filter_map(|(k, q)| {
                let refs = &t.ctxs.get(&k.0)?.refs;
                let items = q
                    .iter()
                    .take(256)
                    .filter_map(|p| {
                        let r = refs.get(p.reference)?;
                        Some((*p, r.event, r.host_ts))
                    })
                    .collect();
                Some((*k, items))
            })
            .collect()
    };
    let mut done = 0;
    let mut finished: Vec<(StreamKey, usize, u64)> = Vec::new();
    let mut current_ctx = 0;
    for (key, items) in work {
        let mut n = 0;
        let mut failed = 0;
        for (p, ref_ev, ref_ts) in items {
            if p.ctx != current_ctx {
                // SAFETY: our own thread's current context (never the program's threads).
                unsafe { (f.ctx_set_current)(p.ctx) };
                current_ctx = p.ctx;
            }
            // SAFETY: our recorded event.
            let q = unsafe { (f.event_query)(p.end) };
            if q == NOT_READY {
                break;
            }
            n += 1;
            let (mut ms0, mut ms1) = (0f32, 0f32);
            // SAFETY: valid out pointers, our events of one context.
            let ok = q == 0
                && unsafe { (f.elapsed)(&mut ms0, ref_ev, p.start) } == 0
                && unsafe { (f.elapsed)(&mut ms1, ref_ev, p.end) } == 0;
            if !ok {
                failed += 1;
                continue;
            }
            let at = |ms: f32| (ref_ts as i64 + (ms as f64 * 1e6 * tpn) as i64).max(0) as u64;
            if let Some(w) = w.as_mut() {
                record::gpu::kernel_exec(w, p.correlation, at(ms0), at(ms1), p.device);
            }
        }
        if n > 0 {
            finished.push((key, n, failed));
            done += n;
        }
    }
    let mut t = lock();
    for (key, n, failed) in finished {
        let Some(q) = t.pending.get_mut(&key) else {
            continue;
        };
        let gone: Vec<Pending> = q.drain(..n.min(q.len())).collect();
        t.pending_total -= gone.len();
        t.resolved += gone.len() as u64 - failed;
        t.failed += failed;
        if let Some(c) = t.ctxs.get_mut(&key.0) {
            let last = c.refs.len().saturating_sub(1);
            for p in gone {
                c.pool.push(p.start);
                c.pool.push(p.end);
                if let Some(r) = c.refs.get_mut(p.reference) {
                    r.users = r.users.saturating_sub(1);
                    // An older reference nobody uses any more: recycle its event.
                    if r.users == 0 && p.reference != last && r.event != 0 {
                        c.pool.push(std::mem::take(&mut r.event));
                    }
                }
            }
        }
    }
    done
}

/// Exit: a final resolution pass (bounded wait for the thread), then the counters as a
/// process attribute (`kernel_timing=resolved:…,unresolved:…,untimed:…,failed:…`).
pub fn at_exit() {
    let Some(st) = STATE.get() else {
        return;
    };
    let running = lock().thread;
    if running {
        st.stop.store(true, Ordering::Release);
        let t0 = Instant::now();
        while !st.stopped.load(Ordering::Acquire) && t0.elapsed() < Duration::from_millis(500) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let t = lock();
    if t.ctxs.is_empty() {
        return;
    }
    let attr = format!(
        "kernel_timing=resolved:{},unresolved:{},untimed:{},failed:{}",
        t.resolved, t.pending_total, t.untimed, t.failed
    );
    drop(t);
    record::process_attr(&attr);
}
