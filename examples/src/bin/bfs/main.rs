//! Level-synchronous BFS across ranks, GPU-initiated style: a persistent "kernel" of worker
//! threads per rank (CPU threads standing in for GPU threads) posts its own RDMA WRITEs
//! IBGDA-style (see `sigmatrace_examples::mlx5`), with a barrier built from RDMA atomics.
//!
//! ```text
//! bfs --rank R --ranks N --rendezvous DIR --out DIR [--mode initobj|devx|verbs]
//!     [--threads T] [--vertices V] [--degree D] [--span S] [--seed X]
//!     [--delays-us D0,D1,...] [--rotate] [--depth Q] [--self-observe DIR] [--gpu]
//! ```
//!
//! `--gpu`: the persistent "kernel" is a real one (`gpu/bfs.cu`, one block of `--threads`
//! threads) posting into the same rings (mapped into the GPU); see `gpu.rs`.
//!
//! Graph: V vertices (multiple of N); vertex u has D edges to `u + 1 + rand % S` (mod V) and,
//! with probability 1/512 each, a long-range edge instead; undirected. Rank r owns the vertices
//! `v ≡ r (mod N)` (local index v / N), so every level's frontier spans all ranks. Source
//! vertex 0.
//!
//! Each level: the workers expand the local frontier into per-destination bitmaps (outbox);
//! each worker RDMA-writes its share of every non-empty peer bitmap into that peer's inbox slot
//! for this rank (inbox double-buffered by level parity); then the barrier; then the workers
//! merge the inbox into the next frontier.
//!
//! Barrier: every rank (rank 0 through a loopback QP) does an RDMA FETCH_ADD of
//! `1 | active << 32` on one counter at rank 0, after sleeping its configured delay
//! (`--delays-us`, entry `(rank + epoch·rotate) mod len`). The rank whose fetched value shows
//! it arrived last RDMA-writes the release word `epoch | active_total << 32` to every other
//! rank; the others poll their local release word. The run ends at the first barrier where no
//! rank discovered anything.
//!
//! Outputs in `--out`: `wqes.<rank>.json` (every WQE this rank posted, per QP) and, from rank 0,
//! `bfs-truth.json`: per barrier round, each rank's arrival time (CLOCK_REALTIME ns, taken just
//! before its FETCH_ADD is posted), the slowest rank and the spread. Every rank checks its
//! vertices' levels against a serial BFS and exits non-zero on any difference.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sigmatrace_examples::cluster::{
    realtime_ns, write_json, Cluster, Region, RemoteRegion, SplitMix,
};
use sigmatrace_examples::dv::Mode;
use sigmatrace_examples::mlx5::{Backoff, WqeOp};
use sigmatrace_examples::workload::{
    list, num, parse_options, rank_main, FirstError, RankOptions, Res,
};

mod gpu;

const UNVISITED: u32 = u32::MAX;

const WORKLOAD: &str = "bfs";

struct Args {
    opts: RankOptions,
    vertices: u32,
    degree: u32,
    span: u32,
    seed: u64,
    delays_us: Vec<u64>,
    rotate: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        opts: RankOptions::default(),
        vertices: 4096,
        degree: 3,
        span: 48,
        seed: 1,
        delays_us: vec![0],
        rotate: false,
    };
    parse_options(|k, v| {
        match k {
            "--vertices" => a.vertices = num(k, v()?)?,
            "--degree" => a.degree = num(k, v()?)?,
            "--span" => a.span = num(k, v()?)?,
            "--seed" => a.seed = num(k, v()?)?,
            "--rotate" => a.rotate = true,
            "--delays-us" => a.delays_us = list(k, v()?)?,
            "-h" | "--help" => {
                println!("usage: bfs --rank R --ranks N --rendezvous DIR --out DIR [--mode initobj|devx|verbs] [--threads T] [--vertices V] [--degree D] [--span S] [--seed X] [--delays-us D0,D1,..] [--rotate] [--depth Q] [--self-observe DIR] [--gpu]");
                std::process::exit(0);
            }
            _ => return a.opts.take(k, v),
        }
        Ok(true)
    })?;
    a.opts.check()?;
    if a.vertices == 0 || !a.vertices.is_multiple_of(a.opts.ranks) || a.span == 0 {
        return Err("--vertices must be a positive multiple of --ranks; --span > 0".into());
    }
    if a.delays_us.is_empty() {
        a.delays_us = vec![0];
    }
    Ok(a)
}

/// The whole graph as adjacency lists (every rank builds it: generation is deterministic).
fn graph(a: &Args) -> Vec<Vec<u32>> {
    let v = a.vertices;
    let mut rng = SplitMix(a.seed);
    let mut adj = vec![Vec::new(); v as usize];
    for u in 0..v {
        for _ in 0..a.degree {
            let mut w = ((u as u64 + 1 + rng.below(a.span as u64)) % v as u64) as u32;
            if rng.below(512) == 0 {
                w = rng.below(v as u64) as u32;
            }
            if w != u {
                adj[u as usize].push(w);
                adj[w as usize].push(u);
            }
        }
    }
    adj
}

fn serial_bfs(adj: &[Vec<u32>]) -> Vec<u32> {
    let mut level = vec![UNVISITED; adj.len()];
    let mut q = std::collections::VecDeque::new();
    level[0] = 0;
    q.push_back(0u32);
    while let Some(u) = q.pop_front() {
        for &w in &adj[u as usize] {
            if level[w as usize] == UNVISITED {
                level[w as usize] = level[u as usize] + 1;
                q.push_back(w);
            }
        }
    }
    level
}

/// This rank's configured delay before barrier round `epoch` (µs).
fn delay_us(a: &Args, epoch: u32) -> u64 {
    let d = &a.delays_us;
    let k = (a.opts.rank as u64 + if a.rotate { epoch as u64 - 1 } else { 0 }) as usize;
    d[k % d.len()]
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct Mem {
    inbox: RemoteRegion,
    counter: RemoteRegion,
    release: RemoteRegion,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Arrival {
    epoch: u32,
    t_ns: u64,
    last: bool,
    delay_us: u64,
}

#[derive(Serialize)]
struct Round {
    epoch: u32,
    arrivals_ns: Vec<u64>,
    delays_us: Vec<u64>,
    slowest_rank: u32,
    spread_ns: u64,
    last_arriver: u32,
}

#[derive(Serialize)]
struct Truth {
    workload: &'static str,
    ranks: u32,
    mode: Mode,
    vertices: u32,
    levels: u32,
    reached: u64,
    barrier_rank: u32,
    barrier_counter: RemoteRegion,
    rounds: Vec<Round>,
}

/// Per-rank state shared by the worker threads.
struct Rank<'a> {
    a: &'a Args,
    c: &'a Cluster,
    nlocal: u32,
    words: usize,
    /// Local CSR: neighbours (global ids) of each local vertex.
    adj: Vec<Vec<u32>>,
    level: Vec<AtomicU32>,
    frontier: Vec<AtomicU64>,
    outbox: Region<AtomicU64>,
    inbox: Region<AtomicU64>,
    counter: Region<AtomicU64>,
    release: Region<AtomicU64>,
    scratch: Region<AtomicU64>,
    peers: Vec<Mem>,
    discovered: AtomicBool,
    active_total: AtomicU64,
    active_now: AtomicU64,
    arrivals: Mutex<Vec<Arrival>>,
    error: FirstError,
}

impl Rank<'_> {
    /// Expands this worker's share of the frontier into the outbox bitmaps.
    fn expand(&self, t: usize) {
        for w in (t..self.words).step_by(self.a.opts.threads) {
            let mut bits = self.frontier[w].load(Ordering::Relaxed);
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                let v = w as u32 * 64 + b;
                for &g in &self.adj[v as usize] {
                    let (owner, local) = (g % self.a.opts.ranks, g / self.a.opts.ranks);
                    let at = owner as usize * self.words + local as usize / 64;
                    self.outbox.as_slice()[at].fetch_or(1 << (local % 64), Ordering::Relaxed);
                }
            }
        }
    }

    /// Sends this worker's word range of every non-empty peer bitmap; waits for completion.
    fn send(&self, t: usize, parity: usize) -> Res<()> {
        let (lo, hi) = (
            self.words * t / self.a.opts.threads,
            self.words * (t + 1) / self.a.opts.threads,
        );
        if lo == hi {
            return Ok(());
        }
        let n = self.a.opts.ranks as usize;
        let me = self.a.opts.rank as usize;
        for p in 0..n {
            let range = &self.outbox.as_slice()[p * self.words + lo..p * self.words + hi];
            if range.iter().all(|x| x.load(Ordering::Relaxed) == 0) {
                continue;
            }
            self.discovered.store(true, Ordering::Relaxed);
            if p == me {
                continue;
            }
            let dst = self.peers[p].inbox;
            let slot = (parity * n + me) * self.words + lo;
            let w = WqeOp::Write {
                local: self.outbox.sge(p * self.words + lo, hi - lo),
                raddr: dst.addr + slot as u64 * 8,
                rkey: dst.rkey,
            };
            let link = self.c.link(p as u32);
            let i = link.poster.post(&w, true)?;
            link.poster.wait(i)?;
        }
        Ok(())
    }

    /// The RDMA-atomic barrier (worker 0 only). Returns the number of ranks that were active.
    fn barrier(&self, epoch: u32, active: bool) -> Res<u64> {
        let n = self.a.opts.ranks as u64;
        let delay = delay_us(self.a, epoch);
        if delay > 0 {
            std::thread::sleep(Duration::from_micros(delay));
        }
        let c0 = self.peers[0].counter;
        let add = 1 | (active as u64) << 32;
        let link = self.c.link(0);
        let t_ns = realtime_ns();
        link.poster.post_wait(&WqeOp::FetchAdd {
            local: self.scratch.sge(0, 1),
            raddr: c0.addr,
            rkey: c0.rkey,
            add,
        })?;
        let old = self.scratch.as_slice()[0].load(Ordering::Acquire);
        let before = old & 0xffff_ffff;
        if before < n * (epoch as u64 - 1) || before >= n * epoch as u64 {
            return Err(format!(
                "barrier {epoch}: fetched counter {old:#x} ({before} arrivals) outside [{}, {})",
                n * (epoch as u64 - 1),
                n * epoch as u64
            )
            .into());
        }
        let last = before == n * epoch as u64 - 1;
        let rel_local = &self.release.as_slice()[0];
        if last {
            let total = (old + add) >> 32;
            let rel = epoch as u64 | total << 32;
            self.scratch.as_slice()[1].store(rel, Ordering::Release);
            let mut posted = Vec::new();
            for p in 0..self.a.opts.ranks {
                if p == self.a.opts.rank {
                    continue;
                }
                let r = self.peers[p as usize].release;
                let link = self.c.link(p);
                let w = WqeOp::Write {
                    local: self.scratch.sge(1, 1),
                    raddr: r.addr,
                    rkey: r.rkey,
                };
                posted.push((link, link.poster.post(&w, true)?));
            }
            for (l, i) in posted {
                l.poster.wait(i)?;
            }
            rel_local.store(rel, Ordering::Release);
        } else {
            let start = Instant::now();
            let mut bo = Backoff::new();
            while rel_local.load(Ordering::Acquire) & 0xffff_ffff < epoch as u64 {
                if start.elapsed() > Duration::from_secs(120) {
                    return Err(format!("barrier {epoch}: no release within 120 s").into());
                }
                bo.snooze();
            }
        }
        let total = rel_local.load(Ordering::Acquire) >> 32;
        let prev = self.active_total.swap(total, Ordering::Relaxed);
        self.arrivals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arrival {
                epoch,
                t_ns,
                last,
                delay_us: delay,
            });
        Ok(total - prev)
    }

    /// Merges the inbox (and own outbox) of `parity` into the next frontier, level `lvl`.
    fn merge(&self, t: usize, parity: usize, lvl: u32) {
        let n = self.a.opts.ranks as usize;
        let me = self.a.opts.rank as usize;
        let ib = self.inbox.as_slice();
        let ob = self.outbox.as_slice();
        for w in (t..self.words).step_by(self.a.opts.threads) {
            let mut next = ob[me * self.words + w].load(Ordering::Relaxed);
            for s in 0..n {
                if s != me {
                    next |= ib[(parity * n + s) * self.words + w].swap(0, Ordering::Relaxed);
                }
            }
            let mut fresh = 0u64;
            let mut bits = next;
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                let v = w * 64 + b as usize;
                if v < self.nlocal as usize && self.level[v].load(Ordering::Relaxed) == UNVISITED {
                    self.level[v].store(lvl, Ordering::Relaxed);
                    fresh |= 1 << b;
                }
            }
            self.frontier[w].store(fresh, Ordering::Relaxed);
            for p in 0..n {
                ob[p * self.words + w].store(0, Ordering::Relaxed);
            }
        }
    }

    /// The persistent kernel: worker `t` of `threads`.
    fn worker(&self, t: usize, sync: &Barrier) -> u32 {
        let mut lvl = 0u32;
        let mut epoch = 0u32;
        loop {
            let parity = (lvl % 2) as usize;
            if !self.error.is_set() {
                self.expand(t);
            }
            sync.wait();
            if !self.error.is_set() {
                if let Err(e) = self.send(t, parity) {
                    self.error.set(e.to_string());
                }
            }
            sync.wait();
            epoch += 1;
            if t == 0 && !self.error.is_set() {
                let active = self.discovered.swap(false, Ordering::Relaxed);
                match self.barrier(epoch, active) {
                    Ok(n) => self.active_now.store(n, Ordering::Relaxed),
                    Err(e) => self.error.set(e.to_string()),
                }
            }
            sync.wait();
            if self.error.is_set() {
                return lvl;
            }
            if self.active_now.load(Ordering::Relaxed) == 0 {
                return lvl;
            }
            self.merge(t, parity, lvl + 1);
            sync.wait();
            lvl += 1;
        }
    }
}

fn run(a: &Args) -> Res<()> {
    let n = a.opts.ranks as usize;
    let nlocal = a.vertices / a.opts.ranks;
    let words = nlocal.div_ceil(64) as usize;
    let full = graph(a);
    let c = a.opts.join(a.opts.rank == 0)?;
    let global = |v: u32| v * a.opts.ranks + a.opts.rank;
    let r = Rank {
        a,
        c: &c,
        nlocal,
        words,
        adj: (0..nlocal)
            .map(|v| full[global(v) as usize].clone())
            .collect(),
        level: (0..nlocal).map(|_| AtomicU32::new(UNVISITED)).collect(),
        frontier: (0..words).map(|_| AtomicU64::new(0)).collect(),
        outbox: Region::new(&c.dev, n * words)?,
        inbox: Region::new(&c.dev, 2 * n * words)?,
        counter: Region::new(&c.dev, 1)?,
        release: Region::new(&c.dev, 1)?,
        scratch: Region::new(&c.dev, 2)?,
        peers: Vec::new(),
        discovered: AtomicBool::new(false),
        active_total: AtomicU64::new(0),
        active_now: AtomicU64::new(0),
        arrivals: Mutex::new(Vec::new()),
        error: FirstError::new(),
    };
    let mem = Mem {
        inbox: r.inbox.remote(),
        counter: r.counter.remote(),
        release: r.release.remote(),
    };
    let peers: Vec<Mem> = c.exchange("bfs-mem", &mem)?;
    let r = Rank { peers, ..r };
    if a.opts.rank == 0 {
        r.level[0].store(0, Ordering::Relaxed);
        r.frontier[0].store(1, Ordering::Relaxed);
    }
    let started = Instant::now();
    let levels = if a.opts.gpu {
        let (levels, arrivals) = gpu::run(&r)?;
        *r.arrivals.lock().unwrap_or_else(|e| e.into_inner()) = arrivals;
        levels
    } else {
        let sync = Barrier::new(a.opts.threads);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..a.opts.threads)
                .map(|t| {
                    let (r, sync) = (&r, &sync);
                    s.spawn(move || r.worker(t, sync))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or(0))
                .max()
                .unwrap_or(0)
        })
    };
    a.opts.workers_done(WORKLOAD, &r.error)?;
    let elapsed = started.elapsed();
    let reached = check_against_serial_bfs(&r, &full)?;
    std::fs::create_dir_all(&a.opts.out)?;
    let total = c.write_bookkeeping(
        &a.opts.out.join(format!("wqes.{}.json", a.opts.rank)),
        "bfs",
    )?;
    let arrivals = r.arrivals.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let all: Vec<(Vec<Arrival>, u64)> = c.exchange("bfs-arrivals", &(arrivals, reached))?;
    if a.opts.rank == 0 {
        let truth = Truth {
            workload: "bfs",
            ranks: a.opts.ranks,
            mode: a.opts.mode,
            vertices: a.vertices,
            levels,
            reached: all.iter().map(|x| x.1).sum(),
            barrier_rank: 0,
            barrier_counter: r.counter.remote(),
            rounds: rounds(&all),
        };
        write_json(&a.opts.out.join("bfs-truth.json"), &truth)?;
    }
    println!(
        "bfs rank {}/{} ({}{}): {} levels, {} local vertices reached, levels verified against serial BFS; {} WQEs posted; {:.1} ms",
        a.opts.rank,
        a.opts.ranks,
        a.opts.mode.name(),
        if a.opts.gpu { ", gpu" } else { "" },
        levels,
        reached,
        total,
        elapsed.as_secs_f64() * 1e3
    );
    c.exchange::<u32, u32>("bfs-done", &1)?;
    Ok(())
}

/// Compares every local vertex's level with the serial BFS of the whole graph; the number of
/// local vertices reached.
fn check_against_serial_bfs(r: &Rank, full: &[Vec<u32>]) -> Res<u64> {
    let a = r.a;
    let want = serial_bfs(full);
    let mut bad = 0;
    let mut reached = 0u64;
    for v in 0..r.nlocal {
        let got = r.level[v as usize].load(Ordering::Relaxed);
        let g = (v * a.opts.ranks + a.opts.rank) as usize;
        if got != want[g] {
            if bad < 5 {
                eprintln!(
                    "bfs rank {}: vertex {g} level {got}, serial BFS says {}",
                    a.opts.rank, want[g]
                );
            }
            bad += 1;
        }
        reached += (got != UNVISITED) as u64;
    }
    if bad > 0 {
        return Err(format!("{bad} vertices with a wrong level").into());
    }
    Ok(reached)
}

/// The barrier rounds of the truth file from every rank's arrivals: per epoch, the slowest
/// rank, the spread of arrival times, the last arriver and each rank's injected delay.
fn rounds(all: &[(Vec<Arrival>, u64)]) -> Vec<Round> {
    let rounds_n = all[0].0.len();
    let mut rounds = Vec::new();
    for e in 0..rounds_n {
        let arr: Vec<u64> = all.iter().map(|(v, _)| v[e].t_ns).collect();
        let max = *arr.iter().max().unwrap_or(&0);
        let min = *arr.iter().min().unwrap_or(&0);
        rounds.push(Round {
            epoch: e as u32 + 1,
            slowest_rank: arr.iter().position(|&t| t == max).unwrap_or(0) as u32,
            spread_ns: max - min,
            last_arriver: all.iter().position(|(v, _)| v[e].last).unwrap_or(0) as u32,
            delays_us: all.iter().map(|(v, _)| v[e].delay_us).collect(),
            arrivals_ns: arr,
        });
    }
    rounds
}

fn main() {
    rank_main("bfs", parse_args(), |a| a.opts.rank, run);
}
