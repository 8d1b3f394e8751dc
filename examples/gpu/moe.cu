// SigmaTrace workload (real-GPU variant): Mixture-of-Experts dispatch/combine all-to-all with
// expert-popularity skew. Each rank routes its tokens to top-k experts (chosen by the host
// with a Zipf-like popularity, passed in `expert_of`), RDMA-writes each token's hidden vector
// to the expert owner's receive buffer (dispatch), the owner applies its expert, and writes
// the result back (combine). WQEs are posted IBGDA-style into rings passed by the host.
#include "ibgda.cuh"

struct MoeArgs {
    u32 rank, nranks;
    u32 ntokens, topk;
    u32 experts_per_rank;
    u32 hidden_bytes;          // bytes per token vector
    const u32 *expert_of;      // [ntokens * topk] global expert ids
    const u8 *tokens;          // [ntokens][hidden_bytes] (registered, lkey)
    u8 *recv;                  // receive slots (registered)
    u64 recv_raddr[64];        // peer p's receive area for tokens from this rank
    u32 recv_rkey[64];
    u64 combine_raddr[64];     // peer p's combine area for results destined to it
    u32 combine_rkey[64];
    const u32 *recv_count;     // [nranks] tokens received from each peer (after dispatch)
    StQp qp[64];
    StCq cq[64];
    u64 *bytes_to_rank;        // [nranks] ground truth: bytes dispatched to each rank
};

extern "C" __global__ void sigmatrace_moe_dispatch(MoeArgs a) {
    // One warp per (token, k) pair; lane 0 posts.
    u32 pairs = a.ntokens * a.topk;
    u32 warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    u32 nwarps = gridDim.x * blockDim.x / 32;
    for (u32 p = warp; p < pairs; p += nwarps) {
        if ((threadIdx.x & 31) != 0) continue;
        u32 t = p / a.topk;
        u32 e = a.expert_of[p];
        u32 dst = e / a.experts_per_rank;
        u64 laddr = (u64)(a.tokens + (u64)t * a.hidden_bytes);
        u64 raddr = a.recv_raddr[dst] + (u64)p * a.hidden_bytes;
        atomicAdd((unsigned long long *)&a.bytes_to_rank[dst], (unsigned long long)a.hidden_bytes);
        if (dst == a.rank) continue;
        bool signal = (p % 16) == 15 || p + nwarps >= pairs;
        u64 i = st_post_write(a.qp[dst], laddr, raddr, a.recv_rkey[dst], a.hidden_bytes, signal);
        if (signal) st_wait_cqe(a.cq[dst], i);
    }
}

extern "C" __global__ void sigmatrace_moe_combine(MoeArgs a) {
    // Apply the "expert" (scale bytes) to every received token and write it back.
    for (u32 src = 0; src < a.nranks; src++) {
        u32 n = a.recv_count[src];
        for (u32 j = blockIdx.x; j < n; j += gridDim.x) {
            u8 *slot = a.recv + ((u64)src * a.ntokens * a.topk + j) * a.hidden_bytes;
            for (u32 b = threadIdx.x; b < a.hidden_bytes; b += blockDim.x) slot[b] = (u8)(slot[b] * 2 + 1);
            __syncthreads();
            if (threadIdx.x == 0 && src != a.rank) {
                u64 i = st_post_write(a.qp[src], (u64)slot, a.combine_raddr[src] + (u64)j * a.hidden_bytes,
                                      a.combine_rkey[src], a.hidden_bytes, true);
                st_wait_cqe(a.cq[src], i);
            }
        }
    }
}
