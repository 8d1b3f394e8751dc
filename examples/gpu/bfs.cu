// SigmaTrace workload (real-GPU variant of `bfs`): level-synchronous BFS across ranks, one
// persistent block per rank whose threads post their own RDMA WRITEs IBGDA-style (ibgda.cuh)
// into softnic's send rings, with the barrier built from RDMA atomics. The algorithm, the WQEs
// and the ground truth are those of the CPU-thread mode in examples/src/bin/bfs.rs:
//
// Each level: threads expand the local frontier into per-destination bitmaps (`stage`, GPU
// memory, device atomics), copy them to the registered outbox, and thread t RDMA-writes its
// word range [words*t/T, words*(t+1)/T) of every non-empty peer bitmap into that peer's inbox
// slot for this rank (double-buffered by level parity); then the barrier; then the merge.
// Barrier (thread 0): sleep the configured delay, FETCH_ADD `1 | active << 32` on the counter
// at rank 0 (rank 0 through its loopback QP); the last arriver RDMA-writes the release word
// `epoch | active_total << 32` to every other rank; the others poll their release word.
#include "ibgda.cuh"

#define BFS_UNVISITED 0xffffffffu

struct BfsPeer {                // 32 bytes
    u64 inbox;                  // peer's inbox base
    u64 release;                // peer's release word
    u32 inbox_rkey;
    u32 release_rkey;
    u64 pad;
};

struct BfsArgs {
    u32 rank, nranks, nlocal, words;
    u32 max_rounds;             // capacity of the arrival arrays
    u32 ndelays;
    u32 rotate;
    u32 outbox_lkey, scratch_lkey;
    u32 pad;
    u64 counter;                // barrier counter at rank 0
    u32 counter_rkey;
    u32 pad2;
    const u64 *delays_ns;       // [ndelays]
    const u32 *adj_ptr;         // [nlocal + 1]
    const u32 *adj;             // neighbours (global vertex ids)
    u32 *level;                 // [nlocal], host-mapped (result)
    u64 *frontier;              // [words], GPU memory
    u64 *stage;                 // [nranks * words], GPU memory
    u64 *outbox;                // [nranks * words], host-mapped, registered (RDMA source)
    u64 *inbox;                 // [2 * nranks * words], host-mapped, registered (RDMA target)
    u64 *scratch;               // [2], host-mapped, registered (FETCH_ADD landing, release source)
    u64 *release;               // [1], host-mapped, registered (RDMA target)
    const BfsPeer *peers;       // [nranks]
    const StQp *qps;            // [nranks]: to each rank; qps[rank] = loopback (rank 0)
    u64 *arrival_ns;            // [max_rounds] %globaltimer just before the FETCH_ADD
    u32 *arrival_last;          // [max_rounds] 1 = this rank arrived last
    u32 *status;                // [4]: levels, error (0 ok), detail, rounds
};

__device__ void bfs_error(const BfsArgs &a, u32 code, u32 detail) {
    if (atomicCAS(&a.status[1], 0u, code) == 0u) a.status[2] = detail;
}

__device__ void bfs_expand(const BfsArgs &a) {
    for (u32 w = threadIdx.x; w < a.words; w += blockDim.x) {
        u64 bits = a.frontier[w];
        while (bits) {
            u32 b = __ffsll((long long)bits) - 1;
            bits &= bits - 1;
            u32 v = w * 64 + b;
            for (u32 e = a.adj_ptr[v]; e < a.adj_ptr[v + 1]; e++) {
                u32 g = a.adj[e];
                u32 owner = g % a.nranks, local = g / a.nranks;
                atomicOr(&a.stage[owner * a.words + local / 64], 1ull << (local % 64));
            }
        }
    }
}

// Thread t's word range of every non-empty peer bitmap. Returns 1 if anything was discovered.
__device__ u32 bfs_send(const BfsArgs &a, u32 parity) {
    u32 t = threadIdx.x, T = blockDim.x;
    u32 lo = a.words * t / T, hi = a.words * (t + 1) / T;
    u32 found = 0;
    if (lo == hi) return 0;
    for (u32 p = 0; p < a.nranks; p++) {
        u32 any = 0;
        for (u32 w = lo; w < hi; w++) any |= a.outbox[p * a.words + w] != 0;
        if (!any) continue;
        found = 1;
        if (p == a.rank) continue;
        StWr wr;
        wr.opcode = ST_OP_RDMA_WRITE;
        wr.laddr = (u64)&a.outbox[p * a.words + lo];
        wr.lkey = a.outbox_lkey;
        wr.len = (hi - lo) * 8;
        wr.raddr = a.peers[p].inbox + ((u64)(parity * a.nranks + a.rank) * a.words + lo) * 8;
        wr.rkey = a.peers[p].inbox_rkey;
        wr.add = 0;
        u32 f = st_post_wait(a.qps[p], wr);
        if (f) bfs_error(a, 1, f);
    }
    return found;
}

// The barrier of round `epoch` (thread 0). Returns the number of ranks that were active.
__device__ u64 bfs_barrier(const BfsArgs &a, u32 epoch, u32 active, u64 *prev_total) {
    u64 n = a.nranks;
    u32 k = (a.rank + (a.rotate ? epoch - 1 : 0)) % a.ndelays;
    u64 t0 = st_globaltimer();
    while (st_globaltimer() - t0 < a.delays_ns[k]) st_relax();
    u64 add = 1ull | (u64)active << 32;
    StWr fa;
    fa.opcode = ST_OP_ATOMIC_FA;
    fa.laddr = (u64)&a.scratch[0];
    fa.lkey = a.scratch_lkey;
    fa.len = 8;
    fa.raddr = a.counter;
    fa.rkey = a.counter_rkey;
    fa.add = add;
    if (epoch <= a.max_rounds) a.arrival_ns[epoch - 1] = st_globaltimer();
    u32 f = st_post_wait(a.qps[0], fa);
    if (f) {
        bfs_error(a, 2, f);
        return 0;
    }
    u64 old = st_load_u64(&a.scratch[0]);
    u64 before = old & 0xffffffffull;
    if (before < n * (epoch - 1) || before >= n * epoch) {
        bfs_error(a, 3, (u32)before);
        return 0;
    }
    u32 last = before == n * epoch - 1;
    if (epoch <= a.max_rounds) a.arrival_last[epoch - 1] = last;
    if (last) {
        u64 rel = epoch | ((old + add) >> 32) << 32;
        auto release = [&](u32 p, u64 &raddr, u32 &rkey) {
            raddr = a.peers[p].release;
            rkey = a.peers[p].release_rkey;
        };
        u32 peer;
        u32 e = st_write8_to_peers(a.qps, a.nranks, a.rank, &a.scratch[1], a.scratch_lkey, rel,
                                   release, &peer);
        if (e) bfs_error(a, 4, e);
        st_store_u64(a.release, rel);
    } else {
        u64 start = st_globaltimer();
        while ((st_load_u64(a.release) & 0xffffffffull) < epoch) {
            if (st_expired(start)) {
                bfs_error(a, 5, epoch);
                return 0;
            }
            st_relax();
        }
    }
    u64 total = st_load_u64(a.release) >> 32;
    u64 active_now = total - *prev_total;
    *prev_total = total;
    return active_now;
}

__device__ void bfs_merge(const BfsArgs &a, u32 parity, u32 lvl) {
    u32 n = a.nranks, me = a.rank;
    for (u32 w = threadIdx.x; w < a.words; w += blockDim.x) {
        u64 next = a.stage[me * a.words + w];
        for (u32 s = 0; s < n; s++) {
            if (s == me) continue;
            u64 *in = &a.inbox[(parity * n + s) * a.words + w];
            next |= st_load_u64(in);
            st_store_u64(in, 0);
        }
        u64 fresh = 0, bits = next;
        while (bits) {
            u32 b = __ffsll((long long)bits) - 1;
            bits &= bits - 1;
            u32 v = w * 64 + b;
            if (v < a.nlocal && a.level[v] == BFS_UNVISITED) {
                a.level[v] = lvl;
                fresh |= 1ull << b;
            }
        }
        a.frontier[w] = fresh;
        for (u32 p = 0; p < n; p++) a.stage[p * a.words + w] = 0;
    }
}

extern "C" __global__ void sigmatrace_bfs(BfsArgs a) {
    __shared__ u32 s_found;
    __shared__ u64 s_active;
    __shared__ u64 s_total;
    if (threadIdx.x == 0) {
        s_found = 0;
        s_total = 0;
    }
    __syncthreads();
    u32 lvl = 0, epoch = 0;
    for (;;) {
        u32 parity = lvl % 2;
        bfs_expand(a);
        __syncthreads();
        for (u32 w = threadIdx.x; w < a.nranks * a.words; w += blockDim.x) a.outbox[w] = a.stage[w];
        __threadfence_system();
        __syncthreads();
        if (bfs_send(a, parity)) atomicOr(&s_found, 1u);
        __syncthreads();
        epoch++;
        if (threadIdx.x == 0) {
            s_active = a.status[1] ? 0 : bfs_barrier(a, epoch, s_found, &s_total);
            s_found = 0;
            a.status[3] = epoch;
        }
        __syncthreads();
        if (s_active == 0 || *(volatile u32 *)&a.status[1]) break;
        bfs_merge(a, parity, lvl + 1);
        __syncthreads();
        lvl++;
    }
    if (threadIdx.x == 0) a.status[0] = lvl;
    __threadfence_system();
}

#ifdef ST_HOST
ST_HOST_ENTRY(sigmatrace_bfs, sigmatrace_bfs(*(BfsArgs *)p[0]), sizeof(BfsArgs))
#endif
