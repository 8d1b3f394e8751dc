// SigmaTrace workload (real-GPU variant of `moe`): Mixture-of-Experts dispatch / combine
// all-to-all with expert-popularity skew, one persistent block per rank whose threads post
// their own RDMA WRITEs IBGDA-style (ibgda.cuh) into softnic's send rings. The algorithm, the
// WQEs and the ground truth are those of the CPU-thread mode in examples/src/bin/moe.rs; the
// host computes the routing (every (token, expert) pair per destination, in slot order).
//
// Per iteration: fill the token vectors; dispatch = one RDMA WRITE per remote pair into the
// expert rank's slot (thread t posts pairs j ≡ t mod T, every signal_every-th of its own and
// its last one signalled), then an 8-byte flag WRITE per peer; the expert rank applies each
// expert and writes the results back (combine), then a flag; every result is checked.
#include "ibgda.cuh"

struct MoePeer {                // 48 bytes
    u64 recv;
    u64 combine;
    u64 flags;
    u32 recv_rkey, combine_rkey, flags_rkey, pad;
    u64 pad2;
};

struct MoeArgs {
    u32 rank, nranks, ntokens, words;     // words: hidden bytes / 8
    u32 iters, max_slots, signal_every, pad;
    u32 tokens_lkey, results_lkey, flag_src_lkey, pad2;
    u64 *tokens;                // [ntokens * words], host-mapped, registered (RDMA source)
    u64 *recv;                  // [nranks * max_slots * words] (RDMA target)
    u64 *results;               // same shape (RDMA source)
    u64 *combine;               // same shape (RDMA target)
    u64 *flags;                 // [2 * nranks]: dispatch flags, then combine flags (RDMA target)
    u64 *flag_src;              // [1] (RDMA source)
    const MoePeer *peers;       // [nranks]
    const StQp *qps;            // [nranks] (qps[rank] unused)
    const u32 *send_ptr;        // [nranks + 1]: pairs this rank sends to each destination
    const u32 *send_token;      // token of each pair, in slot order
    const u32 *send_expert;     // expert of each pair
    const u32 *recv_ptr;        // [nranks + 1]: pairs each source sends to this rank
    const u32 *recv_expert;     // expert of each received pair, in slot order
    u32 *status;                // [4]: iterations done, error (0 ok), detail, detail
};

__device__ u64 moe_token_word(u32 src, u32 token, u32 i, u32 iter) {
    u64 x = (u64)src << 48 ^ (u64)token << 24 ^ (u64)i << 4 ^ (u64)iter;
    x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

__device__ u64 moe_expert(u32 e, u64 w) {
    u32 r = e % 63 + 1;
    return ((w << r) | (w >> (64 - r))) ^ ((u64)e + 1) * 0xd6e8feb86659fd93ull;
}

__device__ void moe_error(const MoeArgs &a, u32 code, u32 d1, u32 d2) {
    if (atomicCAS(&a.status[1], 0u, code) == 0u) {
        a.status[2] = d1;
        a.status[3] = d2;
    }
}

__device__ u64 moe_slot(const MoeArgs &a, u32 src, u32 j) {
    return ((u64)src * a.max_slots + j) * a.words;
}

// Thread t's share of `count` writes to `dst`: pairs j ≡ t (mod T); write j comes from
// `src + (off(j)) * 8` (lkey) to `raddr + slot(me, j) * 8`. Selectively signalled; waits for
// the last.
__device__ void moe_post_share(const MoeArgs &a, u32 dst, u32 count, bool dispatch, u64 raddr, u32 rkey) {
    u32 t = threadIdx.x, T = blockDim.x;
    u32 mine = count > t ? (count - t + T - 1) / T : 0;
    u64 last = ~0ull;
    u32 k = 0;
    for (u32 j = t; j < count; j += T, k++) {
        StWr wr;
        wr.opcode = ST_OP_RDMA_WRITE;
        if (dispatch) {
            wr.laddr = (u64)(a.tokens + (u64)a.send_token[a.send_ptr[dst] + j] * a.words);
            wr.lkey = a.tokens_lkey;
        } else {
            wr.laddr = (u64)(a.results + moe_slot(a, dst, j));
            wr.lkey = a.results_lkey;
        }
        wr.len = a.words * 8;
        wr.raddr = raddr + moe_slot(a, a.rank, j) * 8;
        wr.rkey = rkey;
        wr.add = 0;
        bool signal = (k + 1) % a.signal_every == 0 || k + 1 == mine;
        last = st_post(a.qps[dst], wr, signal);
        if (last == ~0ull) {
            moe_error(a, 1, dst, st_load_u32(&a.qps[dst].st->failed));
            return;
        }
    }
    if (last != ~0ull) {
        u32 f = st_wait(a.qps[dst], last);
        if (f) moe_error(a, 2, dst, f);
    }
}

// Thread 0: writes `value` into slot `base + rank` of every peer's flags, waits for all.
__device__ void moe_send_flags(const MoeArgs &a, u32 base, u64 value) {
    auto slot = [&](u32 d, u64 &raddr, u32 &rkey) {
        raddr = a.peers[d].flags + (u64)(base + a.rank) * 8;
        rkey = a.peers[d].flags_rkey;
    };
    u32 d;
    u32 f = st_write8_to_peers(a.qps, a.nranks, a.rank, a.flag_src, a.flag_src_lkey, value, slot,
                               &d);
    if (f) moe_error(a, 3, d, f);
}

__device__ void moe_wait_flags(const MoeArgs &a, u32 base, u64 value) {
    u64 start = st_globaltimer();
    for (u32 s = 0; s < a.nranks; s++) {
        if (s == a.rank) continue;
        while (st_load_u64(&a.flags[base + s]) < value) {
            if (st_expired(start)) {
                moe_error(a, 4, s, (u32)value);
                return;
            }
            st_relax();
        }
    }
}

__device__ void moe_check(const MoeArgs &a, u32 iter) {
    for (u32 d = 0; d < a.nranks; d++) {
        if (d == a.rank) continue;
        u32 n = a.send_ptr[d + 1] - a.send_ptr[d];
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            u32 tok = a.send_token[a.send_ptr[d] + j], e = a.send_expert[a.send_ptr[d] + j];
            u64 o = moe_slot(a, d, j);
            for (u32 i = 0; i < a.words; i++) {
                if (st_load_u64(&a.combine[o + i]) != moe_expert(e, moe_token_word(a.rank, tok, i, iter)))
                    moe_error(a, 5, tok, e);
            }
        }
    }
}

extern "C" __global__ void sigmatrace_moe(MoeArgs a) {
    u32 me = a.rank, n = a.nranks;
    for (u32 iter = 0; iter < a.iters; iter++) {
        for (u32 tok = threadIdx.x; tok < a.ntokens; tok += blockDim.x)
            for (u32 i = 0; i < a.words; i++) a.tokens[(u64)tok * a.words + i] = moe_token_word(me, tok, i, iter);
        __threadfence_system();
        __syncthreads();
        for (u32 d = 0; d < n && !*(volatile u32 *)&a.status[1]; d++) {
            if (d == me) continue;
            moe_post_share(a, d, a.send_ptr[d + 1] - a.send_ptr[d], true, a.peers[d].recv, a.peers[d].recv_rkey);
        }
        __syncthreads();
        u64 v = 2ull * iter + 1;
        if (threadIdx.x == 0 && !a.status[1]) {
            moe_send_flags(a, 0, v);
            moe_wait_flags(a, 0, v);
        }
        __syncthreads();
        for (u32 s = 0; s < n && !*(volatile u32 *)&a.status[1]; s++) {
            if (s == me) continue;
            u32 cnt = a.recv_ptr[s + 1] - a.recv_ptr[s];
            for (u32 j = threadIdx.x; j < cnt; j += blockDim.x) {
                u32 e = a.recv_expert[a.recv_ptr[s] + j];
                u64 o = moe_slot(a, s, j);
                for (u32 i = 0; i < a.words; i++) a.results[o + i] = moe_expert(e, st_load_u64(&a.recv[o + i]));
            }
            __threadfence_system();
            moe_post_share(a, s, cnt, false, a.peers[s].combine, a.peers[s].combine_rkey);
        }
        __syncthreads();
        if (threadIdx.x == 0 && !a.status[1]) {
            moe_send_flags(a, n, v + 1);
            moe_wait_flags(a, n, v + 1);
        }
        __syncthreads();
        moe_check(a, iter);
        __syncthreads();
        if (*(volatile u32 *)&a.status[1]) break;
        if (threadIdx.x == 0) a.status[0] = iter + 1;
    }
    __threadfence_system();
}

#ifdef ST_HOST
ST_HOST_ENTRY(sigmatrace_moe, sigmatrace_moe(*(MoeArgs *)p[0]), sizeof(MoeArgs))
#endif
