//! Helpers for the workload tests: multi-rank runs under softnic-run with a timeout,
//! ground-truth and bookkeeping readers (artifact lookup from `sigmatrace-testkit`).

#![allow(dead_code)]
// Each test binary uses a subset of the re-exported helpers.
#![allow(unused_imports)]

pub mod observed;
pub mod workloads;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sigmatrace_examples::cluster::Bookkeeping;
pub use sigmatrace_testkit::{artifact, build_dir};

/// Whether and how the run is traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracing {
    /// Untraced.
    Off,
    /// The workload records itself (`--self-observe DIR`), as the interposer will.
    SelfRecorded,
    /// Under `LD_PRELOAD=libsigmatrace.so` (`SIGMATRACE_DIR`).
    Interposer,
}

/// What a multi-rank run left behind.
pub struct Run {
    pub dir: tempfile::TempDir,
    pub out: PathBuf,
    pub logs: Vec<String>,
}

impl Run {
    /// Where the SigmaTrace logs of a traced run are.
    pub fn log_dir(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    pub fn truth(&self, name: &str) -> serde_json::Value {
        let p = self.out.join(name);
        let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        serde_json::from_str(&s).expect("truth JSON")
    }

    pub fn books(&self, ranks: u32) -> Vec<Bookkeeping> {
        (0..ranks)
            .map(|r| {
                let p = self.out.join(format!("wqes.{r}.json"));
                let s =
                    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                serde_json::from_str(&s).expect("bookkeeping JSON")
            })
            .collect()
    }
}

/// Runs `workload` on `ranks` simulated nodes (rank r on node r+1), each under softnic-run,
/// with `args` after the common ones and `env` added to every rank's environment. Panics
/// (with every rank's output) if a rank fails or the run exceeds `limit`.
pub fn run_ranks(
    workload: &str,
    mode: &str,
    ranks: u32,
    args: &[&str],
    tracing: Tracing,
    limit: Duration,
    env: &[(&str, &str)],
) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    let preload = (tracing == Tracing::Interposer).then(|| artifact("libsigmatrace.so"));
    let out = dir.path().join("out");
    let runner = artifact("softnic-run");
    let bin = artifact(workload);
    let mut kids: Vec<(Child, PathBuf)> = Vec::new();
    for r in 0..ranks {
        let log = dir.path().join(format!("rank{r}.log"));
        let f = std::fs::File::create(&log).expect("log file");
        let mut c = Command::new(&runner);
        c.arg("--node")
            .arg((r + 1).to_string())
            .arg("--fabric")
            .arg(dir.path().join("fabric"))
            .arg("--")
            .arg(&bin)
            .args(["--rank", &r.to_string(), "--ranks", &ranks.to_string()])
            .arg("--rendezvous")
            .arg(dir.path().join("rendezvous"))
            .arg("--out")
            .arg(&out)
            .args(["--mode", mode])
            .args(args)
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", ranks.to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f);
        match tracing {
            Tracing::Off => {}
            Tracing::SelfRecorded => {
                c.arg("--self-observe").arg(&logs);
            }
            Tracing::Interposer => {
                c.env("LD_PRELOAD", preload.as_ref().expect("interposer"))
                    .env("SIGMATRACE_DIR", &logs);
            }
        }
        kids.push((c.spawn().expect("spawn softnic-run"), log));
    }
    let start = Instant::now();
    let mut codes = vec![None; kids.len()];
    let mut timed_out = false;
    while codes.iter().any(|c| c.is_none()) {
        for (i, (k, _)) in kids.iter_mut().enumerate() {
            if codes[i].is_none() {
                if let Ok(Some(st)) = k.try_wait() {
                    codes[i] = Some(st.code().unwrap_or(-1));
                }
            }
        }
        if start.elapsed() > limit {
            timed_out = true;
            for (i, (k, _)) in kids.iter_mut().enumerate() {
                if codes[i].is_none() {
                    let _ = k.kill();
                    let _ = k.wait();
                    codes[i] = Some(-9);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let logs: Vec<String> = kids
        .iter()
        .map(|(_, l)| std::fs::read_to_string(l).unwrap_or_default())
        .collect();
    if timed_out || codes.iter().any(|&c| c != Some(0)) {
        let mut msg =
            format!("{workload} --mode {mode}: exit codes {codes:?} (timed out: {timed_out})\n");
        for (r, l) in logs.iter().enumerate() {
            msg.push_str(&format!("--- rank {r}\n{l}\n"));
        }
        panic!("{msg}");
    }
    Run { dir, out, logs }
}
