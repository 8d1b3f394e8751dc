//! Helpers for softnic's integration tests: per-test fabric directories, two-process runs
//! under softnic-run with timeouts (artifact lookup and ports from `sigmatrace-testkit`).

#![allow(dead_code)]
// Each test binary uses a subset of the re-exported helpers.
#![allow(unused_imports)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use sigmatrace_testkit::{build_dir, free_port, listening, softnic_run};

/// The C test programs compiled by build.rs.
pub fn cprog(name: &str) -> PathBuf {
    PathBuf::from(env!("SOFTNIC_CPROGS")).join(name)
}

pub struct Done {
    pub code: Option<i32>,
    pub out: String,
    pub timed_out: bool,
}

impl Done {
    pub fn ok(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }
}

/// A program started by `spawn`, leader of its own process group: a timeout, or a test that
/// panics before waiting, kills the whole group (nothing keeps running after the test).
pub struct Proc {
    child: Child,
    out: PathBuf,
    reaped: bool,
}

/// Starts `cmd` under softnic-run as simulated `node` on `fabric`, output to a file in `dir`.
pub fn spawn(dir: &Path, tag: &str, node: u32, cmd: &[OsString]) -> Proc {
    use std::os::unix::process::CommandExt;
    let out = dir.join(format!("{tag}.out"));
    let f = std::fs::File::create(&out).expect("output file");
    let child = Command::new(softnic_run())
        .arg("--node")
        .arg(node.to_string())
        .arg("--fabric")
        .arg(dir.join("fabric"))
        .arg("--")
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(f.try_clone().expect("dup"))
        .stderr(f)
        .process_group(0)
        .spawn()
        .expect("spawn softnic-run");
    Proc {
        child,
        out,
        reaped: false,
    }
}

impl Proc {
    /// SIGKILLs the process group and reaps the leader.
    fn kill_group(&mut self) {
        // SAFETY: signalling the process group our unreaped child leads (its id cannot have
        // been reused while the child is not reaped).
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
        self.reaped = true;
    }

    /// Waits up to `limit`, killing the process when it runs longer.
    pub fn wait(mut self, limit: Duration) -> Done {
        let t0 = Instant::now();
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                self.reaped = true;
                break Some(s);
            }
            if t0.elapsed() > limit {
                self.kill_group();
                timed_out = true;
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Done {
            code: status.and_then(|s| s.code()),
            out: std::fs::read_to_string(&self.out).unwrap_or_default(),
            timed_out,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_group();
        }
    }
}

/// Runs a server (node 1) and, once it listens on `port`, a client (node 2).
pub fn run_pair(
    dir: &Path,
    port: u16,
    server: &[OsString],
    client: &[OsString],
    limit: Duration,
) -> (Done, Done) {
    let s = spawn(dir, "server", 1, server);
    let t0 = Instant::now();
    while !listening(port) && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = spawn(dir, "client", 2, client);
    let cd = c.wait(limit);
    let sd = s.wait(limit);
    (sd, cd)
}

/// Runs the C test program `prog` in mode `m` as server (node 1) and client (node 2) at once
/// (the programs' clients retry their TCP connect); both must print `OK <m> <role>` and exit 0
/// within a minute.
pub fn c_pair(prog: &str, m: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port().to_string();
    let prog = cprog(prog).display().to_string();
    let s = spawn(dir.path(), "server", 1, &os(&[&prog, m, "server", &port]));
    let c = spawn(dir.path(), "client", 2, &os(&[&prog, m, "client", &port]));
    let cd = c.wait(Duration::from_secs(60));
    let sd = s.wait(Duration::from_secs(60));
    for (role, d) in [("server", &sd), ("client", &cd)] {
        assert!(
            d.ok(),
            "{role} {m}: {:?} timed_out={} {}",
            d.code,
            d.timed_out,
            d.out
        );
    }
    for (role, d) in [("server", &sd), ("client", &cd)] {
        assert!(d.out.contains(&format!("OK {m} {role}")), "{}", d.out);
    }
}

pub fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}
