//! Simulated GPU timing for the TEST DOUBLE: every stream has a timeline on the host's
//! `CLOCK_MONOTONIC`; a launch occupies its stream for a fixed duration
//! (`SIGMATRACE_CUDA_DOUBLE_KERNEL_NS`, default 1 ms) starting when the stream is free; an event
//! recorded on a stream completes when the stream's earlier work does; synchronisation sleeps
//! until then. Streams are independent (no legacy-default-stream implicit synchronisation).

use std::collections::HashMap;

/// Default simulated kernel duration.
pub const DEFAULT_KERNEL_NS: u64 = 1_000_000;

/// `CLOCK_MONOTONIC` in ns.
pub fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `t`.
pub fn sleep_until(t: u64) {
    let now = now_ns();
    if t > now {
        std::thread::sleep(std::time::Duration::from_nanos(t - now));
    }
}

fn kernel_ns() -> u64 {
    std::env::var("SIGMATRACE_CUDA_DOUBLE_KERNEL_NS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_KERNEL_NS)
}

/// Stream timelines and events.
#[derive(Default)]
pub struct Timing {
    /// Stream → time its last queued work ends.
    free_at: HashMap<u64, u64>,
    /// Event → time it completes (None: created, never recorded).
    events: HashMap<u64, Option<u64>>,
}

/// Why an event query or elapsed-time request failed.
#[derive(Debug, PartialEq, Eq)]
pub enum EventError {
    Unknown,
    NotRecorded,
    NotReady,
}

impl Timing {
    /// A kernel launched on `stream` now; returns its (start, end).
    pub fn launch(&mut self, stream: u64) -> (u64, u64) {
        let start = self.ready_at(stream);
        let end = start + kernel_ns();
        self.free_at.insert(stream, end);
        (start, end)
    }

    fn ready_at(&self, stream: u64) -> u64 {
        now_ns().max(self.free_at.get(&stream).copied().unwrap_or(0))
    }

    /// When the stream's queued work ends.
    pub fn stream_end(&self, stream: u64) -> u64 {
        self.free_at.get(&stream).copied().unwrap_or(0)
    }

    /// When every stream's queued work ends.
    pub fn all_end(&self) -> u64 {
        self.free_at.values().copied().max().unwrap_or(0)
    }

    pub fn create_event(&mut self, h: u64) {
        self.events.insert(h, None);
    }

    pub fn destroy_event(&mut self, h: u64) -> bool {
        self.events.remove(&h).is_some()
    }

    /// Records `h` on `stream`: it completes when the stream's earlier work has.
    pub fn record(&mut self, h: u64, stream: u64) -> bool {
        let t = self.ready_at(stream);
        match self.events.get_mut(&h) {
            Some(e) => {
                *e = Some(t);
                true
            }
            None => false,
        }
    }

    /// The completion time of a recorded, completed event.
    pub fn completed(&self, h: u64) -> Result<u64, EventError> {
        match self.events.get(&h) {
            None => Err(EventError::Unknown),
            Some(None) => Err(EventError::NotRecorded),
            Some(Some(t)) if *t > now_ns() => Err(EventError::NotReady),
            Some(Some(t)) => Ok(*t),
        }
    }

    /// When a recorded event completes (for synchronisation).
    pub fn due(&self, h: u64) -> Result<Option<u64>, EventError> {
        self.events.get(&h).copied().ok_or(EventError::Unknown)
    }
}
