//! `sigmatrace run`: trace one command (and its children) and convert what it wrote.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::{artifacts, LaunchError};

/// What `run` should do.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Output directory for logs and the trace.
    pub out_dir: PathBuf,
    /// Convert after the command exits: `None` = automatically (not when the environment says
    /// this is one rank of a multi-rank job).
    pub convert: Option<bool>,
    /// `SIGMATRACE_TRACE` categories.
    pub trace: Option<String>,
    /// `SIGMATRACE_MAX_BYTES` per process log.
    pub max_bytes: Option<String>,
    /// Run on softnic as this simulated node.
    pub softnic_node: Option<u32>,
    /// Print nothing of our own except errors.
    pub quiet: bool,
}

/// How the traced command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Code(i32),
    Signal(i32),
}

/// Result of a traced run.
#[derive(Debug)]
pub struct RunOutcome {
    pub ended: Ended,
    pub logs: Vec<PathBuf>,
    pub trace: Option<PathBuf>,
}

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    let pid = CHILD.load(Ordering::Relaxed);
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let code = unsafe { (*info).si_code };
    // Terminal-generated signals (si_code > 0, from the kernel) already reached the child,
    // which shares our foreground process group; forward only signals sent to us explicitly.
    if pid > 0 && code <= 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

const FORWARDED: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

fn install_forwarding() {
    for &sig in FORWARDED {
        // SAFETY: a zeroed sigaction with an SA_SIGINFO handler that only calls kill.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Ends this process the way the child ended (same signal, or same exit code).
pub fn exit_like(ended: Ended) -> ! {
    match ended {
        Ended::Code(c) => std::process::exit(c),
        Ended::Signal(sig) => {
            // SAFETY: restoring the default disposition and re-raising is the standard way to
            // report death by signal to our parent.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
            std::process::exit(128 + sig)
        }
    }
}

fn list_logs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sigmalog"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether the environment says this process is one rank of a larger job.
pub fn is_one_rank_of_many() -> bool {
    sigmatrace_schemas::RankInfo::from_env()
        .world_size
        .is_some_and(|n| n > 1)
}

/// Builds the command: the program, optionally under softnic-run, with the tracer preloaded.
pub fn traced_command(opts: &RunOptions, cmd: &[OsString]) -> Result<Command, LaunchError> {
    let (program, args) = cmd.split_first().ok_or(LaunchError::NoCommand)?;
    let lib = artifacts::interposer()?;
    let mut c = match opts.softnic_node {
        Some(node) => {
            let mut c = Command::new(artifacts::softnic_run()?);
            c.arg("--node")
                .arg(node.to_string())
                .arg("--")
                .arg(program)
                .args(args);
            c
        }
        None => {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
    };
    c.env(
        "LD_PRELOAD",
        artifacts::preload_value(&lib, std::env::var_os("LD_PRELOAD").as_deref()),
    );
    c.env("SIGMATRACE_DIR", &opts.out_dir);
    if let Some(t) = &opts.trace {
        c.env("SIGMATRACE_TRACE", t);
    }
    if let Some(m) = &opts.max_bytes {
        c.env("SIGMATRACE_MAX_BYTES", m);
    }
    Ok(c)
}

/// Runs `cmd` traced, forwarding signals, then converts the logs it wrote.
pub fn run(opts: &RunOptions, cmd: &[OsString]) -> Result<RunOutcome, LaunchError> {
    std::fs::create_dir_all(&opts.out_dir).map_err(|e| LaunchError::Io(opts.out_dir.clone(), e))?;
    let before = list_logs(&opts.out_dir);
    let mut command = traced_command(opts, cmd)?;
    install_forwarding();
    let mut child = command
        .spawn()
        .map_err(|e| LaunchError::Spawn(cmd[0].clone(), e))?;
    CHILD.store(child.id() as i32, Ordering::Relaxed);
    let status = child
        .wait()
        .map_err(|e| LaunchError::Spawn(cmd[0].clone(), e))?;
    CHILD.store(0, Ordering::Relaxed);
    let ended = match (status.code(), status.signal()) {
        (Some(c), _) => Ended::Code(c),
        (None, Some(s)) => Ended::Signal(s),
        _ => Ended::Code(1),
    };
    let logs: Vec<PathBuf> = list_logs(&opts.out_dir)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    let convert = opts.convert.unwrap_or(!is_one_rank_of_many());
    let mut trace = None;
    if logs.is_empty() {
        eprintln!(
            "sigmatrace: the command wrote no log to {} (did it use RDMA verbs?)",
            opts.out_dir.display()
        );
    } else if convert {
        let out = opts.out_dir.join("trace.perfetto-trace");
        let report = crate::convert(&logs, &out)?;
        if !opts.quiet {
            eprintln!("{}", report.text());
            eprintln!(
                "sigmatrace: {} log(s), {} work requests -> {}\nsigmatrace: open it in https://ui.perfetto.dev (Open trace file)",
                logs.len(),
                report.summary.wr_events,
                out.display()
            );
        }
        trace = Some(out);
    } else if !opts.quiet {
        eprintln!(
            "sigmatrace: {} log(s) in {}; after all ranks finish, convert them once: sigmatrace-convert {} -o trace.perfetto-trace",
            logs.len(),
            opts.out_dir.display(),
            opts.out_dir.display()
        );
    }
    Ok(RunOutcome { ended, logs, trace })
}
