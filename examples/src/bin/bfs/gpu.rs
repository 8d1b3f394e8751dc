//! `bfs --gpu`: the persistent kernel `sigmatrace_bfs` (`gpu/bfs.cu`, one block of `--threads`
//! threads) runs the same levels, WQEs and barrier as the CPU worker threads, posting into
//! this rank's QPs mapped into the GPU. The host prepares the graph and buffers, takes
//! `%globaltimer` pairs before and after the kernel, and turns the kernel's arrival stamps
//! into the same `Arrival`s (CLOCK_REALTIME) the CPU mode records.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use sigmatrace_examples::gpu::{host_range, GpuRun, Mapped};
use sigmatrace_examples::kernels;
use sigmatrace_examples::workload::Res;

use super::{delay_us, Arrival, Rank};

/// Barrier rounds the kernel can stamp.
const MAX_ROUNDS: u32 = 4096;

/// `BfsPeer` in gpu/bfs.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct BfsPeer {
    inbox: u64,
    release: u64,
    inbox_rkey: u32,
    release_rkey: u32,
    pad: u64,
}

/// `BfsArgs` in gpu/bfs.cu (176 bytes; checked against the host build's size).
#[repr(C)]
#[derive(Clone, Copy)]
struct BfsArgs {
    rank: u32,
    nranks: u32,
    nlocal: u32,
    words: u32,
    max_rounds: u32,
    ndelays: u32,
    rotate: u32,
    outbox_lkey: u32,
    scratch_lkey: u32,
    pad: u32,
    counter: u64,
    counter_rkey: u32,
    pad2: u32,
    delays_ns: u64,
    adj_ptr: u64,
    adj: u64,
    level: u64,
    frontier: u64,
    stage: u64,
    outbox: u64,
    inbox: u64,
    scratch: u64,
    release: u64,
    peers: u64,
    qps: u64,
    arrival_ns: u64,
    arrival_last: u64,
    status: u64,
}

/// Runs the kernel; returns (levels, arrivals).
pub fn run(r: &Rank) -> Res<(u32, Vec<Arrival>)> {
    let a = r.a;
    let gr = GpuRun::open()?;
    let arrival_ns: Vec<AtomicU64> = (0..MAX_ROUNDS).map(|_| AtomicU64::new(0)).collect();
    let arrival_last: Vec<AtomicU32> = (0..MAX_ROUNDS).map(|_| AtomicU32::new(0)).collect();
    let host = [
        host_range(r.outbox.as_slice()),
        host_range(r.inbox.as_slice()),
        host_range(r.scratch.as_slice()),
        host_range(r.release.as_slice()),
        host_range(&r.level),
        host_range(&arrival_ns),
        host_range(&arrival_last),
    ];
    let mut adj_ptr = vec![0u32];
    let mut adj = Vec::new();
    for n in &r.adj {
        adj.extend_from_slice(n);
        adj_ptr.push(adj.len() as u32);
    }
    let delays: Vec<u64> = a.delays_us.iter().map(|d| d * 1000).collect();
    let frontier: Vec<u64> = r
        .frontier
        .iter()
        .map(|f| f.load(Ordering::Relaxed))
        .collect();
    let peers: Vec<BfsPeer> = r
        .peers
        .iter()
        .map(|m| BfsPeer {
            inbox: m.inbox.addr,
            release: m.release.addr,
            inbox_rkey: m.inbox.rkey,
            release_rkey: m.release.rkey,
            pad: 0,
        })
        .collect();
    let args = |m: &Mapped| -> Res<BfsArgs> {
        let g = m.gpu;
        Ok(BfsArgs {
            rank: a.opts.rank,
            nranks: a.opts.ranks,
            nlocal: r.nlocal,
            words: r.words as u32,
            max_rounds: MAX_ROUNDS,
            ndelays: delays.len() as u32,
            rotate: a.rotate as u32,
            outbox_lkey: r.outbox.lkey(),
            scratch_lkey: r.scratch.lkey(),
            pad: 0,
            counter: r.peers[0].counter.addr,
            counter_rkey: r.peers[0].counter.rkey,
            pad2: 0,
            delays_ns: g.upload(&delays)?.ptr,
            adj_ptr: g.upload(&adj_ptr)?.ptr,
            adj: g.upload(&adj)?.ptr,
            level: m.dev(r.level.as_ptr() as u64)?,
            frontier: g.upload(&frontier)?.ptr,
            stage: g.alloc(a.opts.ranks as usize * r.words * 8)?.ptr,
            outbox: m.dev(r.outbox.addr())?,
            inbox: m.dev(r.inbox.addr())?,
            scratch: m.dev(r.scratch.addr())?,
            release: m.dev(r.release.addr())?,
            peers: g.upload(&peers)?.ptr,
            qps: m.qps,
            arrival_ns: m.dev(arrival_ns.as_ptr() as u64)?,
            arrival_last: m.dev(arrival_last.as_ptr() as u64)?,
            status: m.status,
        })
    };
    let failed = |st: &[u32; 4]| {
        format!(
            "bfs kernel failed: code {} detail {:#x} (round {})",
            st[1], st[2], st[3]
        )
    };
    let kernel = (kernels::BFS_PTX, kernels::BFS_ENTRY);
    // SAFETY: the regions, levels and arrival arrays outlive the call.
    let (report, st) = unsafe { gr.run_workload(r.c, &a.opts, kernel, &host, args, failed)? };
    let fit = report.clock.ok_or("no clock fit")?;
    let rounds = st[3].min(MAX_ROUNDS);
    let arrivals = (0..rounds)
        .map(|e| Arrival {
            epoch: e + 1,
            t_ns: fit.to_host(arrival_ns[e as usize].load(Ordering::Acquire)),
            last: arrival_last[e as usize].load(Ordering::Acquire) != 0,
            delay_us: delay_us(a, e + 1),
        })
        .collect();
    Ok((st[0], arrivals))
}
