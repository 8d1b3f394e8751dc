//! Mixture-of-Experts dispatch / combine all-to-all, GPU-initiated style: worker threads per
//! rank (standing in for GPU threads) post their own RDMA WRITEs IBGDA-style (see
//! `sigmatrace_examples::mlx5`) to the ranks that host each token's experts, with a
//! configurable expert-popularity skew.
//!
//! ```text
//! moe --rank R --ranks N --rendezvous DIR --out DIR [--mode initobj|devx|verbs]
//!     [--threads T] [--tokens T] [--topk K] [--experts-per-rank E] [--hidden BYTES]
//!     [--zipf S | --expert-weights W0,W1,...] [--iters I] [--signal-every K] [--depth Q] [--self-observe DIR]
//!     [--gpu]
//! ```
//!
//! `--gpu`: the workers are a real kernel (`gpu/moe.cu`, one block of `--threads` threads)
//! posting into the same rings (mapped into the GPU); see `gpu.rs`.
//!
//! Experts `0 .. N·E` live on rank `e / E`; expert e's popularity is `1/(e+1)^S` (Zipf) or the
//! given weight, normalised. Routing is deterministic and exact: every rank sends expert e
//! `q_e` of its `T·K` (token, expert) pairs, `q_e` the largest-remainder apportionment of `T·K`
//! by the weights, and no token picks an expert twice. So the inter-node traffic follows the
//! configured skew up to rounding, and every rank can recompute every other rank's routing.
//!
//! Per iteration: dispatch = one RDMA WRITE of the token's hidden vector per remote pair into
//! the expert rank's receive slot, then an 8-byte flag WRITE per peer; the expert rank applies
//! its experts (a per-expert transform) and RDMA-writes each result back into the source's
//! combine slot (combine), then a flag. The source checks every combined result.
//!
//! Outputs in `--out`: `wqes.<rank>.json` (every WQE this rank posted, per QP) and, from rank 0,
//! `moe-truth.json`: bytes per (source rank, destination rank) — configured (from the weights),
//! realised payload, and everything posted (payload + flags) — with the skew of each
//! (max/mean over links i≠j, and over nodes of the bytes each node receives and sends).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::Serialize;
use sigmatrace_examples::cluster::{realtime_ns, write_json, Cluster, Region, RemoteRegion};
use sigmatrace_examples::dv::Mode;
use sigmatrace_examples::mlx5::{op, Backoff, WqeOp};
use sigmatrace_examples::skew::{self, Skew};
use sigmatrace_examples::workload::{
    list, num, parse_options, rank_main, FirstError, RankOptions, Res,
};

mod gpu;

const WORKLOAD: &str = "moe";

struct Args {
    opts: RankOptions,
    tokens: u32,
    topk: u32,
    experts_per_rank: u32,
    hidden: u32,
    zipf: f64,
    weights: Option<Vec<f64>>,
    iters: u32,
    signal_every: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        opts: RankOptions::default(),
        tokens: 512,
        topk: 2,
        experts_per_rank: 4,
        hidden: 256,
        zipf: 1.0,
        weights: None,
        iters: 2,
        signal_every: 8,
    };
    parse_options(|k, v| {
        match k {
            "--tokens" => a.tokens = num(k, v()?)?,
            "--topk" => a.topk = num(k, v()?)?,
            "--experts-per-rank" => a.experts_per_rank = num(k, v()?)?,
            "--hidden" => a.hidden = num(k, v()?)?,
            "--zipf" => a.zipf = num(k, v()?)?,
            "--iters" => a.iters = num(k, v()?)?,
            "--signal-every" => a.signal_every = num(k, v()?)?,
            "--expert-weights" => a.weights = Some(list(k, v()?)?),
            "-h" | "--help" => {
                println!("usage: moe --rank R --ranks N --rendezvous DIR --out DIR [--mode initobj|devx|verbs] [--threads T] [--tokens T] [--topk K] [--experts-per-rank E] [--hidden BYTES] [--zipf S | --expert-weights W0,..] [--iters I] [--signal-every K] [--depth Q] [--self-observe DIR] [--gpu]");
                std::process::exit(0);
            }
            _ => return a.opts.take(k, v),
        }
        Ok(true)
    })?;
    a.opts.check()?;
    if a.hidden == 0 || !a.hidden.is_multiple_of(8) || a.tokens == 0 || a.topk == 0 {
        return Err("--hidden must be a positive multiple of 8; --tokens, --topk > 0".into());
    }
    if a.topk > a.opts.ranks * a.experts_per_rank {
        return Err("--topk exceeds the number of experts".into());
    }
    a.signal_every = a.signal_every.max(1);
    Ok(a)
}

/// Normalised expert weights.
fn weights(a: &Args) -> Result<Vec<f64>, String> {
    let n = (a.opts.ranks * a.experts_per_rank) as usize;
    let w: Vec<f64> = match &a.weights {
        Some(w) if w.len() != n => {
            return Err(format!(
                "--expert-weights needs {n} values (ranks × experts per rank)"
            ))
        }
        Some(w) => w.clone(),
        None => (0..n)
            .map(|e| 1.0 / ((e + 1) as f64).powf(a.zipf))
            .collect(),
    };
    let sum: f64 = w.iter().sum();
    if w.iter().any(|&x| x < 0.0 || !x.is_finite()) || sum <= 0.0 {
        return Err("expert weights must be finite, non-negative and not all zero".into());
    }
    Ok(w.iter().map(|x| x / sum).collect())
}

/// Largest-remainder apportionment of `total` by `w` (ties to the lower index).
fn apportion(total: u64, w: &[f64]) -> Vec<u64> {
    let exact: Vec<f64> = w.iter().map(|x| x * total as f64).collect();
    let mut q: Vec<u64> = exact.iter().map(|x| x.floor() as u64).collect();
    let mut left = total - q.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..w.len()).collect();
    order.sort_by(|&i, &j| {
        let (ri, rj) = (exact[i] - exact[i].floor(), exact[j] - exact[j].floor());
        rj.partial_cmp(&ri)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(i.cmp(&j))
    });
    for i in order {
        if left == 0 {
            break;
        }
        q[i] += 1;
        left -= 1;
    }
    q
}

/// Rank `src`'s (token, expert) pairs, grouped by expert.
fn routing(a: &Args, q: &[u64], src: u32) -> Vec<(u32, u32)> {
    let t = a.tokens as u64;
    let mut pairs = Vec::with_capacity((t * a.topk as u64) as usize);
    let mut cursor = (src as u64 * 7) % t;
    for (e, &n) in q.iter().enumerate() {
        for j in 0..n {
            pairs.push((((cursor + j) % t) as u32, e as u32));
        }
        cursor += n;
    }
    pairs
}

/// Pairs of `src` whose expert lives on `dst`, in slot order.
fn pairs_to(a: &Args, pairs: &[(u32, u32)], dst: u32) -> Vec<(u32, u32)> {
    pairs
        .iter()
        .copied()
        .filter(|&(_, e)| e / a.experts_per_rank == dst)
        .collect()
}

fn token_word(src: u32, token: u32, i: u32, iter: u32) -> u64 {
    let mut x = (src as u64) << 48 ^ (token as u64) << 24 ^ (i as u64) << 4 ^ iter as u64;
    x = (x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

/// What expert `e` does to one word of a hidden vector.
fn expert(e: u32, w: u64) -> u64 {
    w.rotate_left(e % 63 + 1) ^ (e as u64 + 1).wrapping_mul(0xd6e8_feb8_6659_fd93)
}

#[derive(Clone, Copy, Serialize, serde::Deserialize)]
struct Mem {
    recv: RemoteRegion,
    combine: RemoteRegion,
    flags: RemoteRegion,
}

struct Rank<'a> {
    a: &'a Args,
    c: &'a Cluster,
    words: usize,
    max_slots: usize,
    /// Every rank's routing (recomputed locally).
    routes: Vec<Vec<(u32, u32)>>,
    tokens: Region<AtomicU64>,
    recv: Region<AtomicU64>,
    results: Region<AtomicU64>,
    combine: Region<AtomicU64>,
    /// [0, N): dispatch flags from each source; [N, 2N): combine flags from each expert rank.
    flags: Region<AtomicU64>,
    flag_src: Region<AtomicU64>,
    peers: Vec<Mem>,
    error: FirstError,
}

impl Rank<'_> {
    fn slot_offset(&self, src: u32, j: usize) -> usize {
        (src as usize * self.max_slots + j) * self.words
    }

    /// Posts this worker's share of `(slot, local sge, raddr)` writes to `dst`, selectively
    /// signalled, and waits for them.
    fn post_share(&self, t: usize, dst: u32, writes: &[(usize, WqeOp)]) -> Res<()> {
        let link = self.c.link(dst);
        let mine: Vec<&WqeOp> = writes
            .iter()
            .filter(|(j, _)| j % self.a.opts.threads == t)
            .map(|(_, w)| w)
            .collect();
        let mut last = None;
        for (k, w) in mine.iter().enumerate() {
            let signal = (k as u32 + 1).is_multiple_of(self.a.signal_every) || k + 1 == mine.len();
            last = Some(link.poster.post(w, signal)?);
        }
        if let Some(i) = last {
            link.poster.wait(i)?;
        }
        Ok(())
    }

    fn send_flags(&self, base: usize, value: u64) -> Res<()> {
        self.flag_src.as_slice()[0].store(value, Ordering::Release);
        let mut posted = Vec::new();
        for d in 0..self.a.opts.ranks {
            if d == self.a.opts.rank {
                continue;
            }
            let f = self.peers[d as usize].flags;
            let w = WqeOp::Write {
                local: self.flag_src.sge(0, 1),
                raddr: f.addr + ((base + self.a.opts.rank as usize) * 8) as u64,
                rkey: f.rkey,
            };
            let link = self.c.link(d);
            posted.push((link, link.poster.post(&w, true)?));
        }
        for (l, i) in posted {
            l.poster.wait(i)?;
        }
        Ok(())
    }

    fn wait_flags(&self, base: usize, value: u64) -> Res<()> {
        let start = Instant::now();
        for s in 0..self.a.opts.ranks {
            if s == self.a.opts.rank {
                continue;
            }
            let f = &self.flags.as_slice()[base + s as usize];
            let mut bo = Backoff::new();
            while f.load(Ordering::Acquire) < value {
                if start.elapsed() > Duration::from_secs(120) {
                    return Err(format!("no flag {value} from rank {s} within 120 s").into());
                }
                bo.snooze();
            }
        }
        Ok(())
    }

    fn dispatch(&self, t: usize) -> Res<()> {
        let me = self.a.opts.rank;
        for d in 0..self.a.opts.ranks {
            if d == me {
                continue;
            }
            let p = self.peers[d as usize].recv;
            let writes: Vec<(usize, WqeOp)> = pairs_to(self.a, &self.routes[me as usize], d)
                .iter()
                .enumerate()
                .map(|(j, &(tok, _))| {
                    let w = WqeOp::Write {
                        local: self.tokens.sge(tok as usize * self.words, self.words),
                        raddr: p.addr + (self.slot_offset(me, j) * 8) as u64,
                        rkey: p.rkey,
                    };
                    (j, w)
                })
                .collect();
            self.post_share(t, d, &writes)?;
        }
        Ok(())
    }

    fn compute_and_combine(&self, t: usize) -> Res<()> {
        let me = self.a.opts.rank;
        for s in 0..self.a.opts.ranks {
            if s == me {
                continue;
            }
            let mine = pairs_to(self.a, &self.routes[s as usize], me);
            let rv = self.recv.as_slice();
            let rs = self.results.as_slice();
            for (j, &(_, e)) in mine.iter().enumerate() {
                if j % self.a.opts.threads != t {
                    continue;
                }
                let o = self.slot_offset(s, j);
                for i in 0..self.words {
                    rs[o + i].store(
                        expert(e, rv[o + i].load(Ordering::Relaxed)),
                        Ordering::Relaxed,
                    );
                }
            }
            let p = self.peers[s as usize].combine;
            let writes: Vec<(usize, WqeOp)> = (0..mine.len())
                .map(|j| {
                    let o = self.slot_offset(s, j);
                    let w = WqeOp::Write {
                        local: self.results.sge(o, self.words),
                        raddr: p.addr + (self.slot_offset(me, j) * 8) as u64,
                        rkey: p.rkey,
                    };
                    (j, w)
                })
                .collect();
            self.post_share(t, s, &writes)?;
        }
        Ok(())
    }

    /// Checks this worker's share of the combined results of iteration `iter`.
    fn check(&self, t: usize, iter: u32) -> Res<()> {
        let me = self.a.opts.rank;
        let cb = self.combine.as_slice();
        for d in 0..self.a.opts.ranks {
            if d == me {
                continue;
            }
            for (j, &(tok, e)) in pairs_to(self.a, &self.routes[me as usize], d)
                .iter()
                .enumerate()
            {
                if j % self.a.opts.threads != t {
                    continue;
                }
                let o = self.slot_offset(d, j);
                for i in 0..self.words as u32 {
                    let want = expert(e, token_word(me, tok, i, iter));
                    let got = cb[o + i as usize].load(Ordering::Relaxed);
                    if got != want {
                        return Err(format!(
                            "iteration {iter}: token {tok} expert {e} (rank {d}) word {i}: {got:#x}, expected {want:#x}"
                        )
                        .into());
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs one phase of worker `t` (skipped after a failure) and waits for the others.
    fn step(&self, t: usize, sync: &Barrier, f: impl FnOnce() -> Res<()>) {
        if !self.error.is_set() {
            if let Err(e) = f() {
                self.error.set(format!("worker {t}: {e}"));
            }
        }
        sync.wait();
    }

    fn worker(&self, t: usize, sync: &Barrier) {
        let me = self.a.opts.rank;
        for iter in 0..self.a.iters {
            let tk = self.tokens.as_slice();
            for tok in (t as u32..self.a.tokens).step_by(self.a.opts.threads) {
                for i in 0..self.words as u32 {
                    tk[tok as usize * self.words + i as usize]
                        .store(token_word(me, tok, i, iter), Ordering::Relaxed);
                }
            }
            sync.wait();
            self.step(t, sync, || self.dispatch(t));
            let v = 2 * iter as u64 + 1;
            self.step(t, sync, || {
                if t == 0 {
                    self.send_flags(0, v)?;
                }
                self.wait_flags(0, v)
            });
            self.step(t, sync, || self.compute_and_combine(t));
            let n = self.a.opts.ranks as usize;
            self.step(t, sync, || {
                if t == 0 {
                    self.send_flags(n, v + 1)?;
                }
                self.wait_flags(n, v + 1)
            });
            self.step(t, sync, || self.check(t, iter));
        }
    }
}

#[derive(Serialize)]
struct Matrix {
    bytes: Vec<Vec<f64>>,
    skew: Skew,
}

impl Matrix {
    fn new(bytes: Vec<Vec<f64>>) -> Matrix {
        let skew = skew::skew(&bytes);
        Matrix { bytes, skew }
    }
}

#[derive(Serialize)]
struct Truth {
    workload: &'static str,
    ranks: u32,
    mode: Mode,
    tokens: u32,
    topk: u32,
    experts_per_rank: u32,
    hidden: u32,
    iters: u32,
    zipf: Option<f64>,
    expert_weights: Vec<f64>,
    node_weights: Vec<f64>,
    pairs_per_expert: Vec<u64>,
    /// Bytes src → dst expected from the weights (dispatch + combine payload).
    configured: Matrix,
    /// Payload bytes src → dst as routed.
    payload: Matrix,
    /// Every byte this workload's RDMA WRITEs moved src → dst (payload + flags), from the
    /// bookkeeping.
    posted: Matrix,
    started_ns: u64,
}

fn run(a: &Args) -> Res<()> {
    let n = a.opts.ranks as usize;
    let w = weights(a)?;
    let q = apportion(a.tokens as u64 * a.topk as u64, &w);
    if let Some((e, &qe)) = q.iter().enumerate().find(|(_, &x)| x > a.tokens as u64) {
        return Err(format!(
            "expert {e} would get {qe} of {} tokens: too skewed for top-{} routing (lower the skew or --topk)",
            a.tokens, a.topk
        )
        .into());
    }
    let routes: Vec<Vec<(u32, u32)>> = (0..a.opts.ranks).map(|s| routing(a, &q, s)).collect();
    let words = (a.hidden / 8) as usize;
    let max_slots = (a.tokens * a.topk) as usize;
    let c = a.opts.join(false)?;
    let slots = n * max_slots * words;
    let r = Rank {
        a,
        c: &c,
        words,
        max_slots,
        routes,
        tokens: Region::new(&c.dev, a.tokens as usize * words)?,
        recv: Region::new(&c.dev, slots)?,
        results: Region::new(&c.dev, slots)?,
        combine: Region::new(&c.dev, slots)?,
        flags: Region::new(&c.dev, 2 * n)?,
        flag_src: Region::new(&c.dev, 1)?,
        peers: Vec::new(),
        error: FirstError::new(),
    };
    let mem = Mem {
        recv: r.recv.remote(),
        combine: r.combine.remote(),
        flags: r.flags.remote(),
    };
    let peers: Vec<Mem> = c.exchange("moe-mem", &mem)?;
    let r = Rank { peers, ..r };
    let started_ns = realtime_ns();
    let started = Instant::now();
    if a.opts.gpu {
        gpu::run(&r)?;
    } else {
        let sync = Barrier::new(a.opts.threads);
        std::thread::scope(|s| {
            for t in 0..a.opts.threads {
                let (r, sync) = (&r, &sync);
                s.spawn(move || r.worker(t, sync));
            }
        });
    }
    a.opts.workers_done(WORKLOAD, &r.error)?;
    let elapsed = started.elapsed();
    std::fs::create_dir_all(&a.opts.out)?;
    let total = c.write_bookkeeping(
        &a.opts.out.join(format!("wqes.{}.json", a.opts.rank)),
        "moe",
    )?;
    // Bytes this rank's WRITEs moved to each peer, from its own bookkeeping.
    let mut sent = vec![0u64; n];
    for l in c.links.iter().flatten() {
        for w in c.posted(l) {
            if w.opcode == op::RDMA_WRITE {
                sent[l.peer_rank as usize] += w.bytes as u64;
            }
        }
    }
    let all: Vec<Vec<u64>> = c.exchange("moe-sent", &sent)?;
    if a.opts.rank == 0 {
        let e = a.experts_per_rank as usize;
        let node_w: Vec<f64> = (0..n).map(|d| w[d * e..(d + 1) * e].iter().sum()).collect();
        let unit = (a.tokens as u64 * a.topk as u64 * a.hidden as u64 * a.iters as u64) as f64;
        let cnt = |s: usize, d: usize| pairs_to(a, &r.routes[s], d as u32).len() as f64;
        let m = |f: &dyn Fn(usize, usize) -> f64| -> Vec<Vec<f64>> {
            (0..n)
                .map(|i| (0..n).map(|j| if i == j { 0.0 } else { f(i, j) }).collect())
                .collect()
        };
        let hb = (a.hidden as u64 * a.iters as u64) as f64;
        let truth = Truth {
            workload: "moe",
            ranks: a.opts.ranks,
            mode: a.opts.mode,
            tokens: a.tokens,
            topk: a.topk,
            experts_per_rank: a.experts_per_rank,
            hidden: a.hidden,
            iters: a.iters,
            zipf: a.weights.is_none().then_some(a.zipf),
            expert_weights: w.clone(),
            node_weights: node_w.clone(),
            pairs_per_expert: q.clone(),
            configured: Matrix::new(m(&|i, j| unit * (node_w[j] + node_w[i]))),
            payload: Matrix::new(m(&|i, j| hb * (cnt(i, j) + cnt(j, i)))),
            posted: Matrix::new(m(&|i, j| all[i][j] as f64)),
            started_ns,
        };
        write_json(&a.opts.out.join("moe-truth.json"), &truth)?;
        println!(
            "moe: configured link skew {:.4}, node skew {:.4}; routed link skew {:.4}, node skew {:.4}",
            truth.configured.skew.link, truth.configured.skew.node_in, truth.payload.skew.link, truth.payload.skew.node_in
        );
    }
    println!(
        "moe rank {}/{} ({}{}): {} iterations of {} tokens × top-{} dispatched and combined, results verified; {} WQEs posted; {:.1} ms",
        a.opts.rank,
        a.opts.ranks,
        a.opts.mode.name(),
        if a.opts.gpu { ", gpu" } else { "" },
        a.iters,
        a.tokens,
        a.topk,
        total,
        elapsed.as_secs_f64() * 1e3
    );
    c.exchange::<u32, u32>("moe-done", &1)?;
    Ok(())
}

fn main() {
    rank_main("moe", parse_args(), |a| a.opts.rank, run);
}
