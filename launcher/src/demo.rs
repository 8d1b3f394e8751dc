//! `sigmatrace demo`: an embedded multi-rank workload on softnic, traced and converted.
//!
//! N processes, each a simulated node of softnic, run a ring all-reduce over RC queue pairs
//! (RDMA_WRITE_WITH_IMM + SEND credits); every rank is traced by the interposer; the logs are
//! converted into one clock-aligned Perfetto trace and summarised.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{artifacts, LaunchError};

/// Demo parameters.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub out_dir: PathBuf,
    pub ranks: u32,
    pub iters: u32,
    pub elems: usize,
    pub timeout: Duration,
    pub quiet: bool,
}

/// What the demo produced.
#[derive(Debug)]
pub struct DemoOutcome {
    pub trace: PathBuf,
    pub logs: Vec<PathBuf>,
    pub rank_output: Vec<String>,
    pub report_text: String,
    pub wr_events: u64,
    pub moe: MoeOutcome,
}

fn clear_previous(dir: &Path) -> Result<(), LaunchError> {
    std::fs::create_dir_all(dir).map_err(|e| LaunchError::Io(dir.to_owned(), e))?;
    for e in std::fs::read_dir(dir)
        .map_err(|e| LaunchError::Io(dir.to_owned(), e))?
        .flatten()
    {
        let p = e.path();
        let ours = p.extension().is_some_and(|x| x == "sigmalog")
            || p.file_name().is_some_and(|n| n == "demo.perfetto-trace");
        if ours {
            std::fs::remove_file(&p).map_err(|e| LaunchError::Io(p.clone(), e))?;
        }
    }
    Ok(())
}

fn wait_all(children: &mut [(u32, Child)], timeout: Duration) -> Result<Vec<String>, LaunchError> {
    let start = Instant::now();
    let mut done = vec![None; children.len()];
    while done.iter().any(Option::is_none) {
        let mut failed = None;
        for (i, (rank, c)) in children.iter_mut().enumerate() {
            if done[i].is_some() {
                continue;
            }
            let st = c
                .try_wait()
                .map_err(|e| LaunchError::Io(PathBuf::from("wait"), e))?;
            if let Some(st) = st {
                if !st.success() {
                    let mut err = String::new();
                    if let Some(mut e) = c.stderr.take() {
                        use std::io::Read;
                        let _ = e.read_to_string(&mut err);
                    }
                    failed = Some(format!("rank {rank} failed ({st}): {}", err.trim()));
                    break;
                }
                done[i] = Some(*rank);
            }
        }
        if let Some(msg) = failed {
            for (_, other) in children.iter_mut() {
                let _ = other.kill();
                let _ = other.wait();
            }
            return Err(LaunchError::Workload(msg));
        }
        if start.elapsed() > timeout {
            for (_, c) in children.iter_mut() {
                let _ = c.kill();
            }
            return Err(LaunchError::Workload(format!(
                "ranks did not finish within {} s",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut out = Vec::new();
    for (_, c) in children.iter_mut() {
        let mut s = String::new();
        if let Some(mut o) = c.stdout.take() {
            use std::io::Read;
            let _ = o.read_to_string(&mut s);
        }
        out.push(s.trim().to_string());
    }
    Ok(out)
}

/// Runs the demo.
pub fn demo(opts: &DemoOptions) -> Result<DemoOutcome, LaunchError> {
    if opts.ranks < 2 {
        return Err(LaunchError::Usage("--ranks must be at least 2".into()));
    }
    let lib = artifacts::interposer()?;
    let softnic = artifacts::softnic_run()?;
    let workload = artifacts::ring_allreduce()?;
    let elems = opts.elems.div_ceil(opts.ranks as usize) * opts.ranks as usize;
    if !opts.quiet {
        eprintln!(
            "sigmatrace demo: {} simulated nodes on softnic run a ring all-reduce of {} x u64 ({} iterations), traced",
            opts.ranks, elems, opts.iters
        );
    }
    let ring_args = |_: &Path| {
        let iters = opts.iters.to_string();
        vec!["--elems".into(), elems.to_string(), "--iters".into(), iters]
    };
    let out = &opts.out_dir;
    let (rank_output, logs) = run_ranks(opts, &softnic, &lib, out, &workload, ring_args)?;
    if !opts.quiet {
        for line in &rank_output {
            eprintln!("  {line}");
        }
    }
    if logs.len() != opts.ranks as usize {
        return Err(LaunchError::Workload(format!(
            "expected {} logs in {}, found {}",
            opts.ranks,
            opts.out_dir.display(),
            logs.len()
        )));
    }
    let trace = opts.out_dir.join("demo.perfetto-trace");
    let report = crate::convert(&logs, &trace)?;
    let report_text = report.text();
    let moe = moe_phase(opts, &softnic, &lib)?;
    Ok(DemoOutcome {
        trace,
        logs,
        rank_output,
        report_text,
        wr_events: report.summary.wr_events,
        moe,
    })
}

/// What the MoE phase produced.
#[derive(Debug)]
pub struct MoeOutcome {
    pub trace: PathBuf,
    pub rank_output: Vec<String>,
    pub report_text: String,
}

/// One phase's ranks: the previous run's logs in `dir` removed, one process per rank under
/// softnic with the tracer preloaded (`--rank R --ranks N --rendezvous DIR`, then `extra`
/// given the phase's scratch folder), all waited for, the scratch folder removed; returns each
/// rank's stdout and the logs the ranks wrote into `dir`, sorted.
fn run_ranks(
    opts: &DemoOptions,
    softnic: &Path,
    lib: &Path,
    dir: &Path,
    workload: &Path,
    extra: impl Fn(&Path) -> Vec<String>,
) -> Result<(Vec<String>, Vec<PathBuf>), LaunchError> {
    clear_previous(dir)?;
    let scratch = dir.join(format!(".demo-{}", std::process::id()));
    let rendezvous = scratch.join("rendezvous");
    let fabric = scratch.join("fabric");
    std::fs::create_dir_all(&fabric).map_err(|e| LaunchError::Io(fabric.clone(), e))?;
    let args = |r: u32| -> Vec<String> {
        let mut v = vec![
            "--rank".into(),
            r.to_string(),
            "--ranks".into(),
            opts.ranks.to_string(),
            "--rendezvous".into(),
            rendezvous.display().to_string(),
        ];
        v.extend(extra(&scratch));
        v
    };
    let rank_output = spawn_ranks(opts, softnic, lib, &fabric, dir, workload, args)
        .and_then(|mut children| wait_all(&mut children, opts.timeout));
    let _ = std::fs::remove_dir_all(&scratch);
    let rank_output = rank_output?;
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| LaunchError::Io(dir.to_owned(), e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sigmalog"))
        .collect();
    logs.sort();
    Ok((rank_output, logs))
}

/// One process per rank under softnic with the tracer preloaded, logs into `log_dir`.
fn spawn_ranks(
    opts: &DemoOptions,
    softnic: &Path,
    lib: &Path,
    fabric: &Path,
    log_dir: &Path,
    workload: &Path,
    args: impl Fn(u32) -> Vec<String>,
) -> Result<Vec<(u32, Child)>, LaunchError> {
    let mut children = Vec::new();
    for r in 0..opts.ranks {
        let mut c = Command::new(softnic);
        c.arg("--node")
            .arg((r + 1).to_string())
            .arg("--fabric")
            .arg(fabric)
            .arg("--")
            .arg(workload)
            .args(args(r))
            .env("LD_PRELOAD", artifacts::preload_value(lib, None))
            .env("SIGMATRACE_DIR", log_dir)
            .env("RANK", r.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("WORLD_SIZE", opts.ranks.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match c.spawn() {
            Ok(child) => children.push((r, child)),
            Err(e) => {
                for (_, mut other) in children {
                    let _ = other.kill();
                    let _ = other.wait();
                }
                return Err(LaunchError::Spawn(softnic.as_os_str().to_owned(), e));
            }
        }
    }
    Ok(children)
}

/// The GPU-initiated-style phase: a Mixture-of-Experts dispatch/combine all-to-all whose CPU
/// threads post mlx5 WQEs straight into the send rings (IBGDA algorithm); SigmaTrace sees them
/// only by watching queue memory. Its logs and trace go to `<out>/moe/`.
fn moe_phase(opts: &DemoOptions, softnic: &Path, lib: &Path) -> Result<MoeOutcome, LaunchError> {
    let workload = artifacts::locate("moe", "SIGMATRACE_DEMO_MOE")?;
    let dir = opts.out_dir.join("moe");
    if !opts.quiet {
        eprintln!(
            "sigmatrace demo: the same {} nodes run a skewed Mixture-of-Experts all-to-all, posting mlx5 WQEs directly (GPU-initiated style), traced by watching the rings",
            opts.ranks
        );
    }
    let truth = |scratch: &Path| vec!["--out".into(), scratch.join("truth").display().to_string()];
    let (rank_output, logs) = run_ranks(opts, softnic, lib, &dir, &workload, truth)?;
    if !opts.quiet {
        for line in rank_output.iter().flat_map(|o| o.lines().last()) {
            eprintln!("  {line}");
        }
    }
    let trace = dir.join("moe.perfetto-trace");
    let report = crate::convert(&logs, &trace)?;
    // The skew section is what this phase is about.
    let text = report.text();
    let report_text = text
        .split("\n== ")
        .filter(|s| s.starts_with("Inter-node traffic skew"))
        .map(|s| format!("== {s}"))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(MoeOutcome {
        trace,
        rank_output,
        report_text,
    })
}
