//! `moe --gpu`: the persistent kernel `sigmatrace_moe` (`gpu/moe.cu`, one block of
//! `--threads` threads) runs every iteration — token fill, dispatch WRITEs, flags, expert
//! transform, combine WRITEs, flags, check — posting into this rank's QPs mapped into the
//! GPU. The host passes the routing (pairs per destination and per source, in slot order)
//! and reads back each QP's bookkeeping.

use sigmatrace_examples::gpu::{host_range, GpuRun, Mapped};
use sigmatrace_examples::kernels;
use sigmatrace_examples::workload::Res;

use super::{pairs_to, Rank};

/// `MoePeer` in gpu/moe.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct MoePeer {
    recv: u64,
    combine: u64,
    flags: u64,
    recv_rkey: u32,
    combine_rkey: u32,
    flags_rkey: u32,
    pad: u32,
    pad2: u64,
}

/// `MoeArgs` in gpu/moe.cu (checked against the host build's size).
#[repr(C)]
#[derive(Clone, Copy)]
struct MoeArgs {
    rank: u32,
    nranks: u32,
    ntokens: u32,
    words: u32,
    iters: u32,
    max_slots: u32,
    signal_every: u32,
    pad: u32,
    tokens_lkey: u32,
    results_lkey: u32,
    flag_src_lkey: u32,
    pad2: u32,
    tokens: u64,
    recv: u64,
    results: u64,
    combine: u64,
    flags: u64,
    flag_src: u64,
    peers: u64,
    qps: u64,
    send_ptr: u64,
    send_token: u64,
    send_expert: u64,
    recv_ptr: u64,
    recv_expert: u64,
    status: u64,
}

/// Runs the kernel over every iteration.
pub fn run(r: &Rank) -> Res<()> {
    let a = r.a;
    let me = a.opts.rank;
    let gr = GpuRun::open()?;
    let host = [
        host_range(r.tokens.as_slice()),
        host_range(r.recv.as_slice()),
        host_range(r.results.as_slice()),
        host_range(r.combine.as_slice()),
        host_range(r.flags.as_slice()),
        host_range(r.flag_src.as_slice()),
    ];
    let (mut send_ptr, mut send_token, mut send_expert) = (vec![0u32], Vec::new(), Vec::new());
    let (mut recv_ptr, mut recv_expert) = (vec![0u32], Vec::new());
    for p in 0..a.opts.ranks {
        if p != me {
            for (tok, e) in pairs_to(a, &r.routes[me as usize], p) {
                send_token.push(tok);
                send_expert.push(e);
            }
            recv_expert.extend(pairs_to(a, &r.routes[p as usize], me).iter().map(|x| x.1));
        }
        send_ptr.push(send_token.len() as u32);
        recv_ptr.push(recv_expert.len() as u32);
    }
    let peers: Vec<MoePeer> = r
        .peers
        .iter()
        .map(|m| MoePeer {
            recv: m.recv.addr,
            combine: m.combine.addr,
            flags: m.flags.addr,
            recv_rkey: m.recv.rkey,
            combine_rkey: m.combine.rkey,
            flags_rkey: m.flags.rkey,
            pad: 0,
            pad2: 0,
        })
        .collect();
    let args = |m: &Mapped| -> Res<MoeArgs> {
        Ok(MoeArgs {
            rank: me,
            nranks: a.opts.ranks,
            ntokens: a.tokens,
            words: r.words as u32,
            iters: a.iters,
            max_slots: r.max_slots as u32,
            signal_every: a.signal_every,
            pad: 0,
            tokens_lkey: r.tokens.lkey(),
            results_lkey: r.results.lkey(),
            flag_src_lkey: r.flag_src.lkey(),
            pad2: 0,
            tokens: m.dev(r.tokens.addr())?,
            recv: m.dev(r.recv.addr())?,
            results: m.dev(r.results.addr())?,
            combine: m.dev(r.combine.addr())?,
            flags: m.dev(r.flags.addr())?,
            flag_src: m.dev(r.flag_src.addr())?,
            peers: m.gpu.upload(&peers)?.ptr,
            qps: m.qps,
            send_ptr: m.gpu.upload(&send_ptr)?.ptr,
            send_token: m.gpu.upload(&send_token)?.ptr,
            send_expert: m.gpu.upload(&send_expert)?.ptr,
            recv_ptr: m.gpu.upload(&recv_ptr)?.ptr,
            recv_expert: m.gpu.upload(&recv_expert)?.ptr,
            status: m.status,
        })
    };
    let failed = |st: &[u32; 4]| {
        format!(
            "moe kernel failed: code {} details {} {:#x} after {} iterations",
            st[1], st[2], st[3], st[0]
        )
    };
    let kernel = (kernels::MOE_PTX, kernels::MOE_ENTRY);
    // SAFETY: the regions outlive the call.
    let (_, st) = unsafe { gr.run_workload(r.c, &a.opts, kernel, &host, args, failed)? };
    if st[0] != a.iters {
        return Err(format!("moe kernel ran {} of {} iterations", st[0], a.iters).into());
    }
    Ok(())
}
