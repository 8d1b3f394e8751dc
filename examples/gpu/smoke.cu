// SigmaTrace GPU smoke kernels for scripts/gpu-check.sh (and their runs against the libcuda
// TEST DOUBLE): a trivial kernel, host-mapped memory seen both ways while a kernel runs, a
// %globaltimer probe answering the host's clock requests, and a flood of IBGDA-style WQEs
// into a GPU-resident ring (no NIC behind it) for the device poller's capture at the highest
// post rate.
#include "ibgda.cuh"

struct SmokeAddArgs {
    const u64 *x;
    u64 *y;
    u32 n;
    u32 pad;
};

// y[i] = 3 x[i] + 1.
extern "C" __global__ void sigmatrace_smoke_add(SmokeAddArgs a) {
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += gridDim.x * blockDim.x)
        a.y[i] = 3 * a.x[i] + 1;
}

// Host-mapped cells: [0] host → device value, [1] device → host answer (2 v + 1), [2] host
// stop flag, [3] device: 1 done, 2 timed out.
struct SmokeMappedArgs {
    u64 *cell;
    u64 limit_ns;
};

// Waits until the host-mapped word `p` is non-zero and returns it; 0 once `limit_ns` have
// passed since `start`.
__device__ u64 smoke_wait_nonzero(u64 *p, u64 start, u64 limit_ns) {
    u64 v;
    while ((v = st_load_u64(p)) == 0) {
        if (st_globaltimer() - start > limit_ns) return 0;
        st_relax();
    }
    return v;
}

extern "C" __global__ void sigmatrace_smoke_mapped(SmokeMappedArgs a) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    u64 start = st_globaltimer();
    u64 v = smoke_wait_nonzero(&a.cell[0], start, a.limit_ns);
    if (v) {
        st_store_u64(&a.cell[1], 2 * v + 1);
        __threadfence_system();
    }
    bool stopped = v && smoke_wait_nonzero(&a.cell[2], start, a.limit_ns);
    st_store_u64(&a.cell[3], stopped ? 1 : 2);
    __threadfence_system();
}

// Clock probe (host-mapped): the host writes req; the kernel answers with %globaltimer in
// gpu_ns, then ack = req; stop = 1 ends it (or limit_ns without a request).
struct ClockCell {
    u64 req;
    u64 ack;
    u64 gpu_ns;
    u64 stop;
};

struct ClockArgs {
    ClockCell *cell;
    u64 limit_ns;
};

extern "C" __global__ void sigmatrace_clock_probe(ClockArgs a) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    u64 last = st_globaltimer();
    while (!st_load_u64(&a.cell->stop)) {
        u64 req = st_load_u64(&a.cell->req);
        if (req != st_load_u64(&a.cell->ack)) {
            st_store_u64(&a.cell->gpu_ns, st_globaltimer());
            __threadfence_system();
            st_store_u64(&a.cell->ack, req);
            last = st_globaltimer();
        } else if (st_globaltimer() - last > a.limit_ns) {
            return;
        }
        st_relax();
    }
}

// Flood: `count` RDMA WRITE WQEs posted IBGDA-style (reserve, write, wait for the earlier
// posts, DBR, doorbell) into a ring nobody executes; the ring wraps freely. out[0] = first
// %globaltimer, out[1] = last, out[2] = WQEs posted.
struct FloodArgs {
    u8 *wqe;
    u32 *dbrec;
    u64 *bf;
    u64 *counters;              // GPU memory: [0] reserve, [1] ready
    u64 *out;                   // host-mapped: [3]
    u32 nwqes;
    u32 qpn;
    u32 count;
    u32 pad;
};

extern "C" __global__ void sigmatrace_flood(FloodArgs a) {
    if (threadIdx.x == 0) st_store_u64(&a.out[0], st_globaltimer());
    for (;;) {
        u64 idx = atomicAdd(&a.counters[0], 1ull);
        if (idx >= a.count) break;
        u32 *w = (u32 *)(a.wqe + ((idx & (a.nwqes - 1)) << 6));
        st_store_be32(w + 0, (((u32)idx & 0xffffu) << 8) | ST_OP_RDMA_WRITE);
        st_store_be32(w + 1, (a.qpn << 8) | 3u);
        st_store_be32(w + 2, (idx & 63) == 63 ? ST_CE_ALWAYS : 0u);
        st_store_be32(w + 3, 0);
        st_store_be32(w + 4, (u32)(idx >> 32));
        st_store_be32(w + 5, (u32)idx * 64);
        st_store_be32(w + 6, 0x1234);
        st_store_be32(w + 7, 0);
        st_store_be32(w + 8, 64);
        st_store_be32(w + 9, 0x5678);
        st_store_be32(w + 10, 0);
        st_store_be32(w + 11, (u32)idx);
        while (st_load_u64(&a.counters[1]) != idx) st_relax();
        __threadfence();
        u32 pi = (u32)(idx + 1);
        *(volatile u32 *)(a.dbrec + 1) = st_bswap32(pi & 0xffffu);
        __threadfence();
        *(volatile u64 *)a.bf = ((u64)st_bswap32(a.qpn << 8) << 32) | st_bswap32((pi & 0xffffu) << 8);
        __threadfence();
        st_store_u64(&a.counters[1], idx + 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        st_store_u64(&a.out[1], st_globaltimer());
        st_store_u64(&a.out[2], st_load_u64(&a.counters[1]));
        __threadfence_system();
    }
}

#ifdef ST_HOST
ST_HOST_ENTRY(sigmatrace_smoke_add, sigmatrace_smoke_add(*(SmokeAddArgs *)p[0]), sizeof(SmokeAddArgs))
ST_HOST_ENTRY(sigmatrace_smoke_mapped, sigmatrace_smoke_mapped(*(SmokeMappedArgs *)p[0]), sizeof(SmokeMappedArgs))
ST_HOST_ENTRY(sigmatrace_clock_probe, sigmatrace_clock_probe(*(ClockArgs *)p[0]), sizeof(ClockArgs))
ST_HOST_ENTRY(sigmatrace_flood, sigmatrace_flood(*(FloodArgs *)p[0]), sizeof(FloodArgs))
#endif
