//! Running programs from tests: [`Cmd`] runs one traced (`LD_PRELOAD=libsigmatrace.so`,
//! logs into a directory) or untraced, with a time limit; [`Guarded`] is a child in its own
//! process group, killed with everything it started when dropped — also when a test panics —
//! so that no process outlives a failed test.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::artifacts::libsigmatrace;

/// SIGKILLs the process group led by `child` (which must not have been reaped yet).
#[allow(unsafe_code)]
fn kill_group(child: &Child) {
    // SAFETY: kill(2) reads no memory of ours; the group is led by our unreaped child, so its
    // id cannot have been reused.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
}

/// Runs `cmd` to its end and returns its output; panics with the command and its stderr
/// unless it exits 0.
pub fn output_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} did not start: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A finished process's stdout followed by its stderr, as text.
pub fn output_text(out: &Output) -> String {
    let (o, e) = (&out.stdout, &out.stderr);
    format!(
        "{}{}",
        String::from_utf8_lossy(o),
        String::from_utf8_lossy(e)
    )
}

/// Converts the logs in `dir` into `trace` with the built `sigmatrace-convert` (`--stats
/// --quiet`); returns its stdout and stderr, panics with them unless it succeeds.
pub fn convert_logs(dir: &Path, trace: &Path) -> String {
    let out = Command::new(crate::artifact("sigmatrace-convert"))
        .arg(dir)
        .arg("-o")
        .arg(trace)
        .args(["--stats", "--quiet"])
        .output()
        .expect("sigmatrace-convert runs");
    let text = output_text(&out);
    assert!(out.status.success(), "sigmatrace-convert failed:\n{text}");
    text
}

/// A child process leading its own process group, killed (with the group) when dropped.
pub struct Guarded(pub Option<Child>);

impl Guarded {
    /// Spawns `cmd` as the leader of a new process group.
    pub fn spawn(cmd: &mut Command) -> Guarded {
        use std::os::unix::process::CommandExt;
        Guarded(Some(cmd.process_group(0).spawn().expect("spawn")))
    }

    /// Waits up to `timeout`; returns (success, stdout+stderr). Panics on timeout.
    pub fn finish(mut self, what: &str, timeout: Duration) -> (bool, String) {
        let start = Instant::now();
        let child = self.0.as_mut().expect("not finished yet");
        loop {
            if child.try_wait().expect("try_wait").is_some() {
                let out = self
                    .0
                    .take()
                    .expect("not finished yet")
                    .wait_with_output()
                    .expect("output");
                return (out.status.success(), output_text(&out));
            }
            assert!(
                start.elapsed() < timeout,
                "{what} did not finish within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Guarded {
    /// Kills the process group now and returns what it wrote (stdout+stderr), for the message
    /// of a failure elsewhere.
    pub fn kill(mut self) -> String {
        let mut child = self.0.take().expect("not finished yet");
        // How it had ended, if it had, before the kill.
        let before = child.try_wait().ok().flatten();
        kill_group(&child);
        let out = child.wait_with_output().expect("output");
        let state = before.map_or("running (killed now)".to_string(), |s| format!("{s}"));
        format!("[{state}]\n{}", output_text(&out))
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            kill_group(c);
            let _ = c.wait();
        }
    }
}

/// Outcome of one process.
#[derive(Debug, Clone)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }
}

/// A command to run, traced (`LD_PRELOAD=libsigmatrace.so`, logs to a directory) or not. The
/// test's own `SIGMATRACE_*` and `LD_PRELOAD` variables are not passed on.
pub struct Cmd {
    pub argv: Vec<OsString>,
    pub env: Vec<(String, String)>,
    pub trace_to: Option<PathBuf>,
}

impl Cmd {
    pub fn new<S: AsRef<std::ffi::OsStr>>(argv: &[S]) -> Cmd {
        Cmd {
            argv: argv.iter().map(|s| s.as_ref().to_owned()).collect(),
            env: Vec::new(),
            trace_to: None,
        }
    }

    pub fn env(mut self, k: &str, v: &str) -> Cmd {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Traced, logs into `dir`.
    pub fn traced(mut self, dir: &Path) -> Cmd {
        self.trace_to = Some(dir.to_owned());
        self
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.argv[0]);
        c.args(&self.argv[1..]);
        for (k, _) in std::env::vars() {
            if k.starts_with("SIGMATRACE_") || k == "LD_PRELOAD" {
                c.env_remove(k);
            }
        }
        if let Some(dir) = &self.trace_to {
            c.env("LD_PRELOAD", libsigmatrace());
            c.env("SIGMATRACE_DIR", dir);
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c.stdin(Stdio::null());
        c
    }

    /// Runs to completion (or `limit`).
    pub fn run(&self, limit: Duration) -> Out {
        self.spawn().wait(limit)
    }

    /// Starts the command, its output going to files.
    pub fn spawn(&self) -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        let so = dir.path().join("stdout");
        let se = dir.path().join("stderr");
        let child = self
            .command()
            .stdout(std::fs::File::create(&so).expect("stdout file"))
            .stderr(std::fs::File::create(&se).expect("stderr file"))
            .spawn()
            .expect("spawn");
        Running {
            child,
            _dir: dir,
            so,
            se,
        }
    }
}

/// A started [`Cmd`].
pub struct Running {
    child: Child,
    _dir: tempfile::TempDir,
    so: PathBuf,
    se: PathBuf,
}

impl Running {
    /// Waits up to `limit`, killing the process when it runs longer.
    pub fn wait(mut self, limit: Duration) -> Out {
        let t0 = Instant::now();
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break Some(s);
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                timed_out = true;
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        Out {
            code: status.and_then(|s| s.code()),
            stdout: std::fs::read_to_string(&self.so).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.se).unwrap_or_default(),
            timed_out,
        }
    }
}
