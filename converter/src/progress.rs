//! A progress bar on stderr, shown only when stderr is a terminal and the conversion is long.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records at or above which a conversion counts as long enough for a progress bar.
const MIN_RECORDS: u64 = 2_000_000;

/// Progress reporting (a no-op when disabled).
pub struct Progress {
    done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn stderr_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(2) == 1 }
}

impl Progress {
    /// Starts a bar for `total` records when `wanted`, stderr is a TTY and the job is long.
    pub fn start(wanted: bool, total: u64) -> Progress {
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = (wanted && total >= MIN_RECORDS && stderr_is_tty()).then(|| {
            let (done, stop) = (done.clone(), stop.clone());
            std::thread::spawn(move || {
                let t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    let d = done.load(Ordering::Relaxed).min(total);
                    let f = d as f64 / total.max(1) as f64;
                    let bar = (f * 30.0) as usize;
                    let rate = d as f64 / t0.elapsed().as_secs_f64().max(1e-3) / 1e6;
                    let _ = write!(
                        std::io::stderr(),
                        "\r[{}{}] {:5.1}%  {:.1} M records/s ",
                        "#".repeat(bar),
                        " ".repeat(30 - bar),
                        f * 100.0,
                        rate
                    );
                }
                let _ = write!(std::io::stderr(), "\r{}\r", " ".repeat(60));
            })
        });
        Progress { done, stop, thread }
    }

    /// Counts finished records.
    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// The shared count of finished records.
    pub fn counter(&self) -> &AtomicU64 {
        &self.done
    }

    /// Stops and clears the bar.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
