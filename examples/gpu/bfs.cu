// SigmaTrace workload (real-GPU variant): persistent level-synchronous BFS across ranks, each
// GPU posting its own RDMA WRITEs IBGDA-style into send rings whose addresses the host passes
// in, with a barrier built from RDMA atomics. The CPU-thread stand-in runs on softnic in CI.
//
// Graph: CSR (row_ptr, col) of this rank's vertices [v0, v0 + nlocal); vertex v is owned by
// rank v / nlocal_all. Frontiers are bitmaps; discovering a remote vertex RDMA-writes one
// 8-byte word (the bit's word) into the owner's next-frontier bitmap with fetch-add semantics
// emulated by writing into a per-source slot that the owner ORs at the barrier.
#include "ibgda.cuh"

struct BfsArgs {
    const u32 *row_ptr;        // nlocal + 1
    const u32 *col;            // global vertex ids
    u32 nlocal;                // vertices per rank
    u32 rank, nranks;
    u32 *level;                // per local vertex, 0xffffffff = unvisited
    u64 *frontier;             // local bitmap, nlocal bits
    u64 *inbox;                // [nranks][nlocal/64] words written by peers (registered, lkey)
    u64 *outbox;               // [nranks][nlocal/64] staging words to send (registered, lkey)
    u64 inbox_raddr[64];       // peers' inbox base for this rank's slot
    u32 inbox_rkey[64];
    StQp qp[64];               // one RC QP per peer
    StCq cq[64];
    u64 barrier_raddr;         // counter at rank 0
    u32 barrier_rkey;
    u64 *scratch;              // 8-byte landing zone for atomics/reads (registered)
    u32 max_levels;
    u64 *barrier_arrival_ns;   // per level: %globaltimer at arrival (ground truth)
};

__device__ void bfs_barrier(BfsArgs &a, u32 epoch) {
    // Every rank adds 1 to the counter at rank 0, then polls it with RDMA READs until it
    // reaches nranks * epoch.
    __shared__ u64 seen;
    if (threadIdx.x == 0) {
        a.barrier_arrival_ns[epoch - 1] = st_globaltimer();
        u64 i = st_post_fetch_add(a.qp[0], (u64)a.scratch, a.barrier_raddr, a.barrier_rkey, 1);
        st_wait_cqe(a.cq[0], i);
        do {
            u64 r = st_post_read8(a.qp[0], (u64)a.scratch, a.barrier_raddr, a.barrier_rkey);
            st_wait_cqe(a.cq[0], r);
            seen = *(volatile u64 *)a.scratch;
        } while (seen < (u64)a.nranks * epoch);
    }
    __syncthreads();
}

extern "C" __global__ void sigmatrace_bfs(BfsArgs a) {
    u32 words = (a.nlocal + 63) / 64;
    for (u32 lvl = 0; lvl < a.max_levels; lvl++) {
        // Expand the local frontier.
        for (u32 v = threadIdx.x + blockIdx.x * blockDim.x; v < a.nlocal; v += blockDim.x * gridDim.x) {
            if (!(a.frontier[v / 64] >> (v % 64) & 1)) continue;
            for (u32 e = a.row_ptr[v]; e < a.row_ptr[v + 1]; e++) {
                u32 g = a.col[e];
                u32 owner = g / a.nlocal, local = g % a.nlocal;
                atomicOr((unsigned long long *)&a.outbox[owner * words + local / 64], 1ull << (local % 64));
            }
        }
        __syncthreads();
        // Send each peer its words (one RDMA WRITE per peer), signalled.
        if (threadIdx.x == 0 && blockIdx.x == 0) {
            for (u32 p = 0; p < a.nranks; p++) {
                if (p == a.rank) continue;
                u64 i = st_post_write(a.qp[p], (u64)&a.outbox[p * words], a.inbox_raddr[p], a.inbox_rkey[p],
                                      words * 8, true);
                st_wait_cqe(a.cq[p], i);
            }
        }
        if (blockIdx.x == 0) bfs_barrier(a, lvl + 1);
        // Merge peers' words into the next frontier and set levels.
        u32 any = 0;
        for (u32 w = threadIdx.x; w < words; w += blockDim.x) {
            u64 next = a.outbox[a.rank * words + w];
            for (u32 p = 0; p < a.nranks; p++) next |= a.inbox[p * words + w];
            u64 fresh = 0;
            for (u32 b = 0; b < 64; b++) {
                u32 v = w * 64 + b;
                if (v < a.nlocal && (next >> b & 1) && a.level[v] == 0xffffffffu) {
                    a.level[v] = lvl + 1;
                    fresh |= 1ull << b;
                }
            }
            a.frontier[w] = fresh;
            any |= fresh != 0;
            for (u32 p = 0; p < a.nranks; p++) a.outbox[p * words + w] = 0;
        }
        if (__syncthreads_or(any) == 0 && lvl + 1 >= a.max_levels) break;
    }
}
