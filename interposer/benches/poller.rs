//! The host poller's CPU cost and capture rate at the highest direct-post rate softnic
//! sustains (interposer/README.md, "Host poller cost"). One command:
//!
//! ```text
//! cargo build --release -p softnic -p softnic-mlx5 -p softnic-efa
//! cargo bench -p sigmatrace-interposer --bench poller
//! ```
//!
//! `cprogs/ibgda.c rate`: one process posts 8-byte RDMA writes IBGDA-style (WQE in the ring,
//! doorbell record, 8-byte doorbell) as fast as softnic executes them, one doorbell per 1 or
//! per 16 WQEs, one WQE in 32 signaled, CQEs polled straight from the ring. For each doorbell
//! batch: untraced, traced with the host poller off (`SIGMATRACE_POLL=0`: discovery only), and
//! traced with the default poller. From the log: WQEs observed, WQEs counted lost
//! (`ObserveOverrun`), unaccounted = posted − observed − lost (0 unless a 16-bit PI lap hid
//! posts), and the poller thread's CPU time (`host_poller=` attribute: `cpu_ns`, `wall_ns`).
//! Then the same with the program (and softnic's threads) on CPU 0 (`taskset -c 0`) and the
//! poller on CPU 1 (`SIGMATRACE_POLL_CPU=1`): the poller's cost and capture when it is not
//! competing for the program's cores. Then the idle cost: rings registered, no traffic, 1 s.
//!
//! Environment: `POLLER_ROUNDS` (default 5), `POLLER_WRITES` (default 1000000).

mod common;

use common::{env_num, fresh_lib, median};
use std::path::{Path, PathBuf};
use std::process::Command;

use sigmatrace_schemas::{queue_kind, string_ns, LogFile, Record};

/// What one traced run's log says.
#[derive(Default, Debug, Clone, Copy)]
struct Capture {
    observed: u64,
    lost: u64,
    estimated: u64,
    cpu_ns: u64,
    wall_ns: u64,
}

fn read_log(dir: &Path) -> Capture {
    let mut c = Capture::default();
    let logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("log dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert_eq!(logs.len(), 1, "one log: {logs:?}");
    let log = LogFile::open(&logs[0]).expect("log");
    for ch in log.chunks() {
        for raw in log.records(ch) {
            match raw.expect("record").decode().expect("decode") {
                Record::WqeObserved(_) => c.observed += 1,
                Record::ObserveOverrun(o) if o.hdr.aux & 0xff == queue_kind::SEND => {
                    c.lost += o.lost;
                    if o.hdr.aux & 0x100 != 0 {
                        c.estimated += o.lost;
                    }
                }
                Record::StringDef(m) if m.aux == string_ns::PROCESS_ATTR => {
                    let t = m.text();
                    if let Some(s) = t.strip_prefix("host_poller=") {
                        for kv in s.split(',') {
                            match kv.split_once(':') {
                                Some(("cpu_ns", v)) => c.cpu_ns = v.parse().unwrap_or(0),
                                Some(("wall_ns", v)) => c.wall_ns = v.parse().unwrap_or(0),
                                _ => {}
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    c
}

struct Runner {
    run: PathBuf,
    prog: PathBuf,
    lib: PathBuf,
    tmp: tempfile::TempDir,
}

impl Runner {
    /// One `ibgda` run; returns (stdout, log directory if traced).
    fn go(&self, args: &[String], env: &[(&str, &str)], traced: bool) -> (String, Option<PathBuf>) {
        self.go_on(None, args, env, traced)
    }

    /// As [`Runner::go`], the program (and softnic's threads) restricted to `cpu` if given.
    fn go_on(
        &self,
        cpu: Option<u32>,
        args: &[String],
        env: &[(&str, &str)],
        traced: bool,
    ) -> (String, Option<PathBuf>) {
        let logs = self.tmp.path().join(format!("logs-{}", rand_suffix()));
        let mut cmd = match cpu {
            Some(c) => {
                let mut t = Command::new("taskset");
                t.args(["-c", &c.to_string()]).arg(&self.run);
                t
            }
            None => Command::new(&self.run),
        };
        cmd.arg("--fabric")
            .arg(self.tmp.path().join("fabric"))
            .arg("--")
            .arg(&self.prog)
            .args(args);
        for (k, _) in std::env::vars() {
            if k.starts_with("SIGMATRACE_") || k == "LD_PRELOAD" {
                cmd.env_remove(k);
            }
        }
        if traced {
            cmd.env("LD_PRELOAD", &self.lib)
                .env("SIGMATRACE_DIR", &logs);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(
            out.status.success(),
            "{cmd:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            traced.then_some(logs),
        )
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The rate an `ibgda rate` run printed (WQEs per second).
fn rate_of(out: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix("rate: "))
        .and_then(|l| l.split(" = ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no rate in {out:?}"))
}

fn main() {
    let dir = sigmatrace_testkit::build_dir();
    fresh_lib(&dir.join("libsigmatrace.so"));
    let r = Runner {
        run: dir.join("softnic-run"),
        prog: Path::new(env!("OUT_DIR")).join("cprogs").join("ibgda"),
        lib: dir.join("libsigmatrace.so"),
        tmp: tempfile::tempdir().expect("tempdir"),
    };
    for p in [&r.run, &r.lib, &r.prog] {
        assert!(
            p.exists(),
            "{} missing (see the command above)",
            p.display()
        );
    }
    let rounds = env_num("POLLER_ROUNDS", 5);
    let n = env_num("POLLER_WRITES", 1_000_000);
    println!("== host poller at softnic's direct-post rate: {n} 8-byte writes, {rounds} rounds, medians (min–max)");
    for db in [1u32, 16] {
        let args: Vec<String> = ["rate", &n.to_string(), "256", &db.to_string()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (mut plain, mut nopoll, mut polled) = (Vec::new(), Vec::new(), Vec::new());
        let (mut capture, mut cpu, mut ns_per) = (Vec::new(), Vec::new(), Vec::new());
        let (mut plain0, mut polled0) = (Vec::new(), Vec::new());
        let (mut capture0, mut cpu0, mut ns_per0) = (Vec::new(), Vec::new(), Vec::new());
        let mut worst_unaccounted = 0i64;
        let mut worst_estimated = 0u64;
        let mut account = |c: &Capture| {
            let unaccounted = n as i64 - c.observed as i64 - c.lost as i64;
            if unaccounted.abs() > worst_unaccounted.abs() {
                worst_unaccounted = unaccounted;
            }
            worst_estimated = worst_estimated.max(c.estimated);
        };
        for _ in 0..rounds {
            plain.push(rate_of(&r.go(&args, &[], false).0));
            nopoll.push(rate_of(&r.go(&args, &[("SIGMATRACE_POLL", "0")], true).0));
            let (out, logs) = r.go(&args, &[], true);
            polled.push(rate_of(&out));
            let c = read_log(&logs.expect("traced"));
            capture.push(c.observed as f64 / n as f64 * 100.0);
            cpu.push(c.cpu_ns as f64 / c.wall_ns.max(1) as f64 * 100.0);
            ns_per.push(c.cpu_ns as f64 / c.observed.max(1) as f64);
            account(&c);
            plain0.push(rate_of(&r.go_on(Some(0), &args, &[], false).0));
            let (out, logs) = r.go_on(Some(0), &args, &[("SIGMATRACE_POLL_CPU", "1")], true);
            polled0.push(rate_of(&out));
            let c = read_log(&logs.expect("traced"));
            capture0.push(c.observed as f64 / n as f64 * 100.0);
            cpu0.push(c.cpu_ns as f64 / c.wall_ns.max(1) as f64 * 100.0);
            ns_per0.push(c.cpu_ns as f64 / c.observed.max(1) as f64);
            account(&c);
        }
        let span = |v: &[f64]| {
            let (lo, hi) = v
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
            format!("({lo:.1}–{hi:.1})")
        };
        let k = |v: &[f64]| v.iter().map(|x| x / 1e3).collect::<Vec<_>>();
        println!("-- doorbell per {db} WQE(s)");
        println!(
            "   untraced             {:>8.0} k WQE/s {}",
            median(&mut plain.clone()) / 1e3,
            span(&k(&plain))
        );
        println!(
            "   traced, poller off   {:>8.0} k WQE/s {}",
            median(&mut nopoll.clone()) / 1e3,
            span(&k(&nopoll))
        );
        println!(
            "   traced, poller on    {:>8.0} k WQE/s {}",
            median(&mut polled.clone()) / 1e3,
            span(&k(&polled))
        );
        println!(
            "   capture {:.1} % {}  poller CPU {:.1} % of a core {}  {:.0} ns CPU per observed WQE {}",
            median(&mut capture.clone()),
            span(&capture),
            median(&mut cpu.clone()),
            span(&cpu),
            median(&mut ns_per.clone()),
            span(&ns_per)
        );
        println!(
            "   program on CPU 0: untraced {:.0} k WQE/s {}, traced with the poller on CPU 1 {:.0} k WQE/s {}",
            median(&mut plain0.clone()) / 1e3,
            span(&k(&plain0)),
            median(&mut polled0.clone()) / 1e3,
            span(&k(&polled0))
        );
        println!(
            "   capture {:.1} % {}  poller CPU {:.1} % of a core {}  {:.0} ns CPU per observed WQE {}",
            median(&mut capture0.clone()),
            span(&capture0),
            median(&mut cpu0.clone()),
            span(&cpu0),
            median(&mut ns_per0.clone()),
            span(&ns_per0)
        );
        println!(
            "   accounting: worst posted − observed − counted lost = {worst_unaccounted} WQEs; largest estimated loss {worst_estimated}"
        );
    }
    let (_, logs) = r.go(&["idle".into(), "1000".into(), "256".into()], &[], true);
    let c = read_log(&logs.expect("traced"));
    println!(
        "== idle (send ring + CQ registered, no traffic, 1 s): poller CPU {:.2} % of a core",
        c.cpu_ns as f64 / c.wall_ns.max(1) as f64 * 100.0
    );
}
