//! Flight recorder (`SIGMATRACE_MODE=ring`): the SIGUSR2 dump request.
//!
//! The rings are inside the log file, so the last `SIGMATRACE_RING_MB` per thread are in the
//! file at exit, after a fatal signal and after `SIGKILL` with nothing to copy: no handler is
//! installed for fatal signals (the program's own dispositions stay untouched). SIGUSR2 asks
//! for a *dump*: the background thread copies every ring into the log (`sink::request_dump`),
//! so that what the rings hold now survives the overwriting that goes on while the program
//! keeps running. The handler does one atomic add and then chains to the handler that was
//! installed before it (if any); the work is done off the signal.
//!
//! Installed once, at initialisation, when SIGUSR2's disposition is not "ignore" (a program
//! started with SIGUSR2 ignored keeps ignoring it: no dumps). SIGUSR2's default action
//! (terminate) is replaced by "dump": that is what the mode asks for. A handler the program
//! installs later replaces ours (then SIGUSR2 is the program's, and no dump is made).

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

use crate::sink::{self, Diag};

/// The disposition found before ours: handler address (or `SIG_DFL`) and its `sa_flags`.
static PREVIOUS: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREVIOUS_FLAGS: AtomicI32 = AtomicI32::new(0);
/// SIGUSR2s handled (dump requests).
static HANDLED: AtomicU64 = AtomicU64::new(0);

/// Whether the SIGUSR2 dump handler was installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Installed {
    Yes,
    /// SIGUSR2 was ignored: left so.
    Ignored,
    /// `sigaction` failed.
    Failed,
}

/// Installs the SIGUSR2 handler (see the module documentation).
pub fn install() -> Installed {
    // SAFETY: sigaction with valid pointers to plain-data structs; the handler below only
    // does async-signal-safe work.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut old) != 0 {
            return Installed::Failed;
        }
        if old.sa_sigaction == libc::SIG_IGN {
            return Installed::Ignored;
        }
        PREVIOUS.store(old.sa_sigaction, Ordering::Relaxed);
        PREVIOUS_FLAGS.store(old.sa_flags, Ordering::Relaxed);
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_sigusr2 as *const () as usize;
        new.sa_mask = old.sa_mask;
        // The previous handler's flags where they change what the program sees (restarted
        // system calls, alternate stack, nesting); with no previous handler, system calls
        // the signal interrupts are restarted (the program never sees an EINTR of ours).
        let kept = libc::SA_RESTART | libc::SA_ONSTACK | libc::SA_NODEFER;
        new.sa_flags = libc::SA_SIGINFO
            | (old.sa_flags & kept)
            | if old.sa_sigaction == libc::SIG_DFL {
                libc::SA_RESTART
            } else {
                0
            };
        if libc::sigaction(libc::SIGUSR2, &new, std::ptr::null_mut()) != 0 {
            return Installed::Failed;
        }
    }
    sink::diag(
        Diag::Info,
        "sigmatrace: flight recorder: SIGUSR2 dumps the rings into the log",
    );
    Installed::Yes
}

/// The SIGUSR2 handler: requests a dump (one atomic add), then runs the previous handler.
extern "C" fn on_sigusr2(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    sink::request_dump();
    HANDLED.fetch_add(1, Ordering::Relaxed);
    let prev = PREVIOUS.load(Ordering::Relaxed);
    if prev == libc::SIG_DFL || prev == libc::SIG_IGN {
        return;
    }
    let flags = PREVIOUS_FLAGS.load(Ordering::Relaxed);
    if flags & libc::SA_RESETHAND != 0 {
        PREVIOUS.store(libc::SIG_DFL, Ordering::Relaxed); // a one-shot handler runs once
    }
    if flags & libc::SA_SIGINFO != 0 {
        type Action = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
        // SAFETY: the address was installed by the program as an SA_SIGINFO handler.
        let f: Action = unsafe { std::mem::transmute::<usize, Action>(prev) };
        f(sig, info, ctx);
    } else {
        type Handler = extern "C" fn(libc::c_int);
        // SAFETY: the address was installed by the program as a plain handler.
        let f: Handler = unsafe { std::mem::transmute::<usize, Handler>(prev) };
        f(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PREVIOUS_RAN: AtomicU64 = AtomicU64::new(0);

    extern "C" fn previous(sig: libc::c_int) {
        assert_eq!(sig, libc::SIGUSR2);
        PREVIOUS_RAN.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn the_handler_requests_a_dump_and_chains_to_the_one_before() {
        // SAFETY: installing a plain handler that only does an atomic add; raise() delivers
        // the signal to this thread, which runs both handlers before raise returns.
        unsafe {
            let mut prev: libc::sigaction = std::mem::zeroed();
            prev.sa_sigaction = previous as *const () as usize;
            prev.sa_flags = 0; // no SA_RESTART: calls it interrupts fail with EINTR
            libc::sigaction(libc::SIGUSR2, &prev, std::ptr::null_mut());
            assert_eq!(install(), Installed::Yes);
            let before = HANDLED.load(Ordering::Relaxed);
            libc::raise(libc::SIGUSR2);
            libc::raise(libc::SIGUSR2);
            assert_eq!(HANDLED.load(Ordering::Relaxed) - before, 2);
            assert_eq!(PREVIOUS_RAN.load(Ordering::Relaxed), 2, "chained each time");
            let mut now: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut now);
            assert_eq!(now.sa_sigaction, on_sigusr2 as *const () as usize);
            assert_eq!(
                now.sa_flags & libc::SA_RESTART,
                0,
                "the previous handler's flags"
            );
        }
    }
}
