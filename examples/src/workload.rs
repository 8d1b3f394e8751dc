//! What the GPU-initiated-style workload binaries (`bfs`, `moe`) share around their own logic:
//! the error type of a run, the first-error latch of a rank's worker threads, numeric
//! argument parsing, and the self-observation report at the end of a run.

use std::sync::Mutex;

use crate::selfobs;

/// Result of a workload's run and of its workers' steps.
pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The first error any worker thread of a rank hit; the others see it and stop.
#[derive(Debug, Default)]
pub struct FirstError(Mutex<Option<String>>);

impl FirstError {
    pub fn new() -> FirstError {
        FirstError(Mutex::new(None))
    }

    /// Records `e` unless an earlier error was recorded.
    pub fn set(&self, e: String) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(e);
        }
    }

    /// Whether an error was recorded.
    pub fn is_set(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// The recorded error, if any (cleared).
    pub fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Parses the value `s` of option `k`, the error naming the option.
pub fn num<T: std::str::FromStr>(k: &str, s: String) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    s.parse().map_err(|e| format!("{k}: {e}"))
}

/// After every WQE completed: the self-observer's final pass (when `--self-observe` started
/// one), and its counts printed.
pub fn finish_self_observation(workload: &str, rank: u32) {
    if let Some(st) = selfobs::get().and_then(|o| o.finish()) {
        println!(
            "{} rank {}: self-observed {} WQEs, {} CQEs, {} WQEBBs and {} CQEs lost",
            workload, rank, st.wqes, st.cqes, st.wqebbs_lost, st.cqes_lost
        );
    }
}
