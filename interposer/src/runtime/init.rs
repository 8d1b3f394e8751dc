//! Process integration: configuration (once), the real `dlsym`, the panic hook, `fork` and
//! exit handlers. Runs from the library constructor, or lazily from the first hook if another
//! library's constructor calls verbs before ours ran.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use crate::ffi::dl;
use crate::record;
use crate::runtime::config::{self, Config};
use crate::runtime::{cq_owners, flight, gpu, guard, kernels, queues};
use crate::sink::{self, Diag};

static DONE: AtomicBool = AtomicBool::new(false);
static ONCE: Once = Once::new();

/// Initialises the interposer once.
#[inline]
pub fn ensure() {
    if !DONE.load(Ordering::Acquire) {
        init_once();
    }
}

#[cold]
fn init_once() {
    ONCE.call_once(|| {
        dl::init();
        guard::install_panic_hook();
        let ok = guard::run("init", || {
            let config = config::install(Config::from_env());
            sink::configure(config.log_settings());
            for w in &config.warnings {
                sink::diag(Diag::Error, w);
            }
            if config.flight && !config.disabled {
                flight::install();
            }
            // SAFETY: registering plain extern "C" handlers without arguments.
            unsafe {
                libc::pthread_atfork(None, None, Some(after_fork_child));
                libc::atexit(at_exit);
            }
        });
        if ok.is_none() {
            sink::disable("initialisation failed");
        }
        DONE.store(true, Ordering::Release);
    });
}

extern "C" fn after_fork_child() {
    guard::run("fork", || {
        sink::after_fork_in_child();
        // The parent's poller threads do not exist here: forget their state; the child starts
        // its own on its own first queue.
        queues::after_fork_child();
        gpu::after_fork_child();
        kernels::after_fork_child();
        cq_owners::reset_in_child();
    });
}

extern "C" fn at_exit() {
    guard::run("exit", || {
        gpu::at_exit();
        kernels::at_exit();
        queues::at_exit();
        record::at_exit();
        if let Some(ns) = sink::background_cpu_ns().filter(|_| sink::diag_enabled(Diag::Info)) {
            let s = ns as f64 / 1e9;
            let line = format!("sigmatrace: background thread CPU {s:.6} s");
            sink::diag(Diag::Info, &line);
        }
    });
}

extern "C" fn constructor() {
    ensure();
}

/// Runs [`constructor`] when the library is loaded (not in unit-test binaries).
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

#[cfg(test)]
#[test]
fn constructor_symbol_is_callable() {
    // In tests the constructor is not registered; calling it must be harmless.
    constructor();
    assert!(DONE.load(Ordering::Acquire));
}
