//! What the workload binaries share around their own logic: the command-line loop, the options
//! every GPU-initiated-style rank takes ([`RankOptions`], `bfs` and `moe`), numeric and list
//! argument parsing, `main`'s exit codes, the error type of a run, the first-error latch of a
//! rank's worker threads, and the self-observation report at the end of a run.

use std::fmt::Display;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Mutex;

use crate::cluster::Cluster;
use crate::dv::Mode;
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

/// Reads an option's value (the error names the option when there is none).
pub type Value<'a> = &'a mut dyn FnMut() -> Result<String, String>;

/// Feeds each command-line option to `take` with a [`Value`] that reads its value; `take`
/// returns false for an option it does not know.
pub fn parse_options(
    mut take: impl FnMut(&str, Value) -> Result<bool, String>,
) -> Result<(), String> {
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        if !take(&k, &mut v)? {
            return Err(format!("unknown argument {k}"));
        }
    }
    Ok(())
}

/// A rank binary's `main` after parsing: `name: error` and exit 2 on bad arguments, `name
/// rank R: error` and exit 1 when the run fails.
pub fn rank_main<A, E: Display>(
    name: &str,
    args: Result<A, String>,
    rank: impl Fn(&A) -> u32,
    run: impl FnOnce(&A) -> Result<(), E>,
) {
    let args = match args {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("{name} rank {}: {e}", rank(&args));
        std::process::exit(1);
    }
}

/// The options of every GPU-initiated-style rank (`bfs`, `moe`).
#[derive(Clone, Debug)]
pub struct RankOptions {
    pub rank: u32,
    pub ranks: u32,
    /// `--rendezvous`.
    pub dir: PathBuf,
    pub out: PathBuf,
    pub mode: Mode,
    /// Worker threads (with `--gpu`: the kernel's block size).
    pub threads: usize,
    /// Send queue depth (WQEBBs).
    pub depth: u32,
    pub self_observe: Option<PathBuf>,
    pub gpu: bool,
}

impl Default for RankOptions {
    fn default() -> RankOptions {
        RankOptions {
            rank: u32::MAX,
            ranks: 0,
            dir: PathBuf::new(),
            out: PathBuf::new(),
            mode: Mode::InitObj,
            threads: 2,
            depth: 256,
            self_observe: None,
            gpu: false,
        }
    }
}

impl RankOptions {
    /// Takes option `k` if it is one of these; false if it is not.
    pub fn take(&mut self, k: &str, v: Value) -> Result<bool, String> {
        match k {
            "--rank" => self.rank = num(k, v()?)?,
            "--ranks" => self.ranks = num(k, v()?)?,
            "--rendezvous" => self.dir = PathBuf::from(v()?),
            "--out" => self.out = PathBuf::from(v()?),
            "--mode" => self.mode = v()?.parse()?,
            "--threads" => self.threads = num(k, v()?)?,
            "--depth" => self.depth = num(k, v()?)?,
            "--self-observe" => self.self_observe = Some(PathBuf::from(v()?)),
            "--gpu" => self.gpu = true,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Starts self-observation when `--self-observe` asks for it, then sets up this rank's
    /// QPs to every other rank (`loopback`: and one pair to itself, see [`Cluster::setup`]).
    pub fn join(&self, loopback: bool) -> Res<Cluster> {
        if let Some(d) = &self.self_observe {
            selfobs::start(d)?;
        }
        let o = self;
        let c = Cluster::setup(o.rank, o.ranks, &o.dir, o.mode, o.depth, loopback)?;
        Ok(c)
    }

    /// After the workers stopped: the first error any of them hit, else the self-observer's
    /// final pass (every WQE completed, so it sees them all) and its counts printed.
    pub fn workers_done(&self, workload: &str, error: &FirstError) -> Res<()> {
        if let Some(e) = error.take() {
            return Err(e.into());
        }
        finish_self_observation(workload, self.rank);
        Ok(())
    }

    /// The rank, the rendezvous and output folders are given; self-observation and `--gpu`
    /// need mlx5 rings.
    pub fn check(&self) -> Result<(), String> {
        if self.ranks < 2
            || self.rank >= self.ranks
            || self.dir.as_os_str().is_empty()
            || self.out.as_os_str().is_empty()
        {
            return Err(
                "need --ranks N (>= 2), --rank R (< N), --rendezvous DIR and --out DIR".into(),
            );
        }
        if self.threads == 0 {
            return Err("--threads must be > 0".into());
        }
        if self.self_observe.is_some() && self.mode == Mode::Verbs {
            return Err("--self-observe watches mlx5 rings: use --mode initobj or devx".into());
        }
        if self.gpu && self.mode == Mode::Verbs {
            return Err("--gpu posts into mlx5 rings: use --mode initobj or devx".into());
        }
        Ok(())
    }
}

/// Parses the comma-separated list `s` of option `k`, the error naming the option.
pub fn list<T: FromStr>(k: &str, s: String) -> Result<Vec<T>, String>
where
    T::Err: Display,
{
    s.split(',').map(|x| num(k, x.trim().to_string())).collect()
}

/// Parses the value `s` of option `k`, the error naming the option.
pub fn num<T: FromStr>(k: &str, s: String) -> Result<T, String>
where
    T::Err: Display,
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
