//! Rings the program writes itself (UCX `rc_mlx5`, NVSHMEM IBGDA, DOCA GPUNetIO): the
//! discovery state (`sigmatrace-observe`'s [`Discovery`]), the process's one [`HostPoller`]
//! and which queue is watched where.
//!
//! Hooks report what they intercepted ([`discovered`], [`gone`], [`gone_range`],
//! [`cuda_mem`]); every discovered queue is logged as `QueueDiscovered` and, when the CPU can
//! read it (plain or pinned host memory), registered with the host poller, which is started
//! lazily on the first such queue. GPU-resident queues go to the device-side poller
//! ([`super::gpu`]). A queue is always unregistered *before* the call that releases its memory
//! is forwarded (destroy, umem dereg, CUDA frees): `HostPoller::unregister` returns only after
//! the poll thread has polled the queue a last time and dropped it.
//!
//! Process events: the fork child forgets the parent's state (its poller thread does not
//! exist in the child; the parent's locks may be held) and starts its own poller on its own
//! first queue; at exit the poller is stopped after a final pass and its counters are written
//! as a process attribute (`host_poller=…`).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sigmatrace_observe::discover::{CudaMemEvent, Discovery};
use sigmatrace_observe::{
    HostMemory, HostPoller, HostRegion, PollerConfig, PollerStats, QueueDesc, QueueHandle,
};
use sigmatrace_schemas::mem_kind;

use crate::record;
use crate::runtime::config::{self, ObserveConfig};
use crate::runtime::gpu;
use crate::runtime::singleton::{self, Singleton};
use crate::sink;
use crate::sink::{cat, Diag};

/// What a queue registration is keyed by: the object whose destruction releases it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// `struct ibv_qp *` (init_obj rings; released by `ibv_destroy_qp`).
    Qp(u64),
    /// `struct ibv_cq *` (released by `ibv_destroy_cq`).
    Cq(u64),
    /// `struct mlx5dv_devx_obj *` (released with the umem: destroy, then dereg).
    Devx(u64),
}

/// The discovery and poller state of the process.
pub struct Inner {
    pub disc: Discovery,
    /// `ibv_cq *` → CQN, learned from `mlx5dv_init_obj` (fills a QP's send CQN).
    pub cqns: HashMap<u64, u32>,
    /// devx umem handle → (address, size), to stop watching its memory at dereg.
    pub umems: HashMap<u64, (u64, u64)>,
    poller: Option<HostPoller>,
    poller_failed: bool,
    paused: bool,
    /// Every discovered queue, by key.
    known: HashMap<Key, QueueDesc>,
    /// Those registered with the host poller.
    host: HashMap<Key, QueueHandle>,
    /// Those handed to the device-side poller.
    device: HashMap<Key, QueueDesc>,
}

/// The state (leaked once, forgotten in a fork child).
static STATE: Singleton<Mutex<Inner>> = Singleton::new();

fn state() -> &'static Mutex<Inner> {
    STATE.get_or_init(|| {
        Mutex::new(Inner {
            disc: Discovery::new(),
            cqns: HashMap::new(),
            umems: HashMap::new(),
            poller: None,
            poller_failed: false,
            paused: false,
            known: HashMap::new(),
            host: HashMap::new(),
            device: HashMap::new(),
        })
    })
}

/// Locks the state (hooks run on the control path; the poll thread never takes this lock).
pub fn lock() -> MutexGuard<'static, Inner> {
    singleton::lock(state())
}

/// Fork child: forget the parent's state without touching it (its poller thread is gone,
/// its mutex may be held by a thread that does not exist here).
pub fn after_fork_child() {
    STATE.forget_in_child();
}

fn is_device_resident(q: &QueueDesc) -> bool {
    match q {
        QueueDesc::Send(s) => s.memory == mem_kind::GPU || s.dbr_memory == mem_kind::GPU,
        QueueDesc::Cq(c) => c.memory == mem_kind::GPU || c.dbr_memory == mem_kind::GPU,
        QueueDesc::Uar(_) => false,
    }
}

/// The address ranges a queue's watcher reads: ring and doorbell record.
fn ranges(q: &QueueDesc) -> [(u64, u64); 2] {
    match q {
        QueueDesc::Send(s) => [(s.base, q.ring_bytes()), (s.dbrec, 8)],
        QueueDesc::Cq(c) => [(c.base, q.ring_bytes()), (c.dbrec, 8)],
        QueueDesc::Uar(_) => [(0, 0), (0, 0)],
    }
}

/// A queue became known (or was described again). Logs it and starts watching it.
pub fn discovered(inner: &mut Inner, key: Key, q: QueueDesc) {
    if inner.known.get(&key) == Some(&q) {
        return;
    }
    forget(inner, key);
    inner.known.insert(key, q);
    record::gpu::queue_discovered(&q);
    let Some(cfg) = config::get().map(|c| c.observe.clone()) else {
        return;
    };
    if !sink::tracing(cat::OBSERVE) {
        return;
    }
    if q.host_watchable() && cfg.host_poll {
        register_host(inner, key, q, &cfg);
    } else if is_device_resident(&q) && cfg.device_poll {
        inner.device.insert(key, q);
        gpu::set_queues(inner.device.values().copied().collect());
    }
}

fn register_host(inner: &mut Inner, key: Key, q: QueueDesc, cfg: &ObserveConfig) {
    if inner.poller.is_none() && !inner.poller_failed {
        let config = PollerConfig {
            spin_passes: cfg.spin_passes,
            min_sleep: Duration::from_micros(cfg.min_sleep_us),
            max_sleep: Duration::from_micros(cfg.max_sleep_us),
        };
        let writer = sink::background_writer(sink::background::HOST_POLLER, "sigmatrace-poll");
        let ts = sink::current_timestamper();
        let start = || HostPoller::start(config, ts, writer, None);
        match sink::with_affinity(cfg.poll_cpu, || sink::with_signals_blocked(start)) {
            Ok(p) => inner.poller = Some(p),
            Err(e) => {
                inner.poller_failed = true;
                sink::diag(
                    Diag::Info,
                    &format!("sigmatrace: no host poller (thread creation failed: {e})"),
                );
            }
        }
    }
    let Some(poller) = inner.poller.as_ref() else {
        return;
    };
    let [(ring, ring_len), (dbr, dbr_len)] = ranges(&q);
    // SAFETY: the ring and doorbell record stay mapped while registered: the hooks that
    // release them (ibv_destroy_qp/cq, mlx5dv_devx_obj_destroy, mlx5dv_devx_umem_dereg,
    // cuMemFree/cuMemFreeHost/cuMemHostUnregister) unregister the queue before forwarding.
    let mem = unsafe {
        HostMemory::new(vec![
            HostRegion::new(ring, ring_len),
            HostRegion::new(dbr, dbr_len),
        ])
    };
    match poller.register(q, mem) {
        Ok(h) => {
            inner.host.insert(key, h);
        }
        Err(e) => sink::diag(Diag::Info, &format!("sigmatrace: queue not watched ({e})")),
    }
}

/// Stops watching the queue of `key` (final poll included). Returns its description.
pub fn forget(inner: &mut Inner, key: Key) -> Option<QueueDesc> {
    if let Some(h) = inner.host.remove(&key) {
        if let Some(p) = inner.poller.as_ref() {
            p.unregister(h);
        }
    }
    if inner.device.remove(&key).is_some() {
        gpu::set_queues_and_wait(inner.device.values().copied().collect());
    }
    inner.known.remove(&key)
}

/// The object of `key` is about to be destroyed.
pub fn gone(key: Key) -> Option<QueueDesc> {
    forget(&mut lock(), key)
}

/// Memory `[start, start + len)` is about to be released: stop watching every queue in it.
pub fn gone_range(inner: &mut Inner, start: u64, len: u64) {
    let end = start.saturating_add(len.max(1));
    let hit: Vec<Key> = inner
        .known
        .iter()
        .filter(|(_, q)| {
            ranges(q)
                .iter()
                .any(|&(a, n)| n != 0 && a < end && a.saturating_add(n) > start)
        })
        .map(|(k, _)| *k)
        .collect();
    for k in hit {
        forget(inner, k);
    }
}

/// A CUDA memory call: updates the memory map (where later queues live).
pub fn cuda_mem(e: &CudaMemEvent) {
    lock().disc.on_cuda_mem(e);
}

/// `sigmatrace_poller_sync`: waits until the host poller has completed a full pass that
/// started after this call (so everything posted before the call has been seen). `true` when
/// there is no poller (nothing to wait for); `false` when paused or after `timeout`.
pub fn sync(timeout: Duration) -> bool {
    let inner = lock();
    let Some(p) = inner.poller.as_ref() else {
        return true;
    };
    if inner.paused {
        return false;
    }
    let want = p.stats().passes + 2;
    let t0 = Instant::now();
    while p.stats().passes < want {
        if t0.elapsed() > timeout {
            return false;
        }
        p.resume(); // wakes a sleeping poll thread (it is not paused)
        std::thread::sleep(Duration::from_micros(20));
    }
    true
}

/// `sigmatrace_poller_pause`: pauses (or resumes) the host poller. `false` without one.
pub fn pause(on: bool) -> bool {
    let mut inner = lock();
    let Some(p) = inner.poller.as_ref() else {
        return false;
    };
    if on {
        p.pause();
    } else {
        p.resume();
    }
    inner.paused = on;
    true
}

/// The poller's counters as a process attribute (`host_poller=passes:…,…`).
pub fn stats_attr(s: &PollerStats) -> String {
    format!(
        "host_poller=passes:{},polls:{},wqes:{},cqes:{},overruns:{},wqebbs_lost:{},cqes_lost:{},\
         wqebbs_lost_estimated:{},mem_errors:{},records_dropped:{},sleeps:{},cpu_ns:{},wall_ns:{}",
        s.passes,
        s.polls,
        s.wqes,
        s.cqes,
        s.overruns,
        s.wqebbs_lost,
        s.cqes_lost,
        s.wqebbs_lost_estimated,
        s.mem_errors,
        s.records_dropped,
        s.sleeps,
        s.cpu_ns,
        s.wall_ns
    )
}

/// Exit: stop the poller after a final pass over every queue and log its counters.
pub fn at_exit() {
    if STATE.get().is_none() {
        return;
    }
    let poller = lock().poller.take();
    let Some(poller) = poller else {
        return;
    };
    let (_, stats) = poller.stop();
    let attr = stats_attr(&stats);
    sink::diag(Diag::Info, &format!("sigmatrace: {attr}"));
    record::process_attr(&attr);
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigmatrace_observe::queue::SendQueueDesc;

    #[test]
    fn ranges_cover_ring_and_doorbell_record() {
        let s = SendQueueDesc {
            qpn: 1,
            transport: sigmatrace_observe::mlx5::wqe::Transport::Rc,
            base: 0x10000,
            wqebbs: 64,
            dbrec: 0x20000,
            doorbell: 0,
            uar_page: 0,
            cqn: 0,
            memory: mem_kind::GPU,
            dbr_memory: mem_kind::HOST,
            discovery: 2,
        };
        let q = QueueDesc::Send(s);
        assert_eq!(ranges(&q), [(0x10000, 64 * 64), (0x20000, 8)]);
        assert!(is_device_resident(&q));
        assert!(!q.host_watchable());
    }

    #[test]
    fn stats_attribute_names_every_counter() {
        let s = PollerStats {
            wqes: 7,
            cpu_ns: 9,
            ..Default::default()
        };
        let a = stats_attr(&s);
        assert!(a.starts_with("host_poller=passes:0,"));
        assert!(a.contains(",wqes:7,") && a.ends_with(",cpu_ns:9,wall_ns:0"));
    }
}
