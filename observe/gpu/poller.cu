// SigmaTrace device-side poller: a persistent one-block kernel that watches GPU-resident send
// rings and CQs and writes compact events stamped with %globaltimer into a host-mapped ring
// buffer, which sigmatrace-observe's DeviceDrain converts to log records. It only reads the
// program's queues. Layouts must match observe/src/device.rs (checked there).
#include "ibgda.cuh"

#define ST_EV_WQE 1
#define ST_EV_CQE 2
#define ST_EV_LOST 3
#define ST_EV_CLOCK 4
#define ST_EV_WQE_CONT 5
#define ST_MAX_QUEUES 1024

struct StRingHeader {          // 128 bytes, host-mapped
    u64 magic;                 // 0
    u32 version;               // 8
    u32 capacity;              // 12: events (power of two)
    u64 reserved_events;       // 16: device: events reserved so far
    u64 dropped;               // 24: device: events not written (ring full)
    u64 tail;                  // 32: host: events consumed
    u32 stop;                  // 40: host: 1 = exit
    u32 running;               // 44: device: 1 running, 2 exited
    u64 clock_req;             // 48: host: request number
    u64 clock_ack;             // 56: device: echoed request number
    u64 clock_gpu_ns;          // 64: device: %globaltimer when answering
    u64 heartbeat_ns;          // 72: device: latest %globaltimer
    u64 spare[6];              // 80..127
};

struct StEvent {               // 96 bytes
    u64 gpu_ns;                // 0
    u32 seq;                   // 8: event number + 1 (low 32 bits), stored last
    u16 kind;                  // 12
    u16 queue;                 // 14
    u32 aux;                   // 16: WQE index | WQEBBs << 16; CQE index; LOST count
    u32 aux2;                  // 20
    u64 spare;                 // 24
    u8 data[64];               // 32: WQEBB 0 of the WQE, or the CQE64
};

struct StWatch {               // 48 bytes, host-mapped
    u64 ring;                  // 0: device address of the ring
    u64 dbrec;                 // 8: device address of the doorbell record
    u32 depth;                 // 16: WQEBBs or CQEs
    u32 kind;                  // 20: 1 send ring, 3 CQ
    u32 number;                // 24: QPN / CQN
    u32 cqe_size;              // 28
    u32 start;                 // 32: first index to report
    u32 flags;                 // 36: bit 0 = the CQ's DBR consumer index is maintained
    u64 lost;                  // 40: device: entries lost (overwritten or ring full)
};

__device__ __forceinline__ u32 st_ld_be32(const u32 *p) { return st_bswap32(*(volatile const u32 *)p); }

// Counts events that could not be written (block-shared; thread 0 publishes it to the header,
// so no atomics are ever done on host-mapped memory, which needs PCIe atomics).
__shared__ unsigned long long s_dropped;

__device__ bool st_emit(StRingHeader *h, StEvent *ev, unsigned long long *s_resv, u16 kind, u16 queue,
                        u32 aux, u32 aux2, const u8 *src, u64 now) {
    u64 cap = h->capacity;
    for (;;) {
        u64 old = *(volatile unsigned long long *)s_resv;
        u64 tail = *(volatile u64 *)&h->tail;
        if (old - tail >= cap) {
            atomicAdd(&s_dropped, 1ull);
            return false;
        }
        if (atomicCAS(s_resv, old, old + 1) == old) {
            StEvent *e = ev + (old & (cap - 1));
            e->gpu_ns = now;
            e->kind = kind;
            e->queue = queue;
            e->aux = aux;
            e->aux2 = aux2;
            if (src) {
                const u64 *s = (const u64 *)src;
                u64 *d = (u64 *)e->data;
                for (int i = 0; i < 8; i++) d[i] = *(volatile const u64 *)(s + i);
            }
            __threadfence_system();
            *(volatile u32 *)&e->seq = (u32)(old + 1);
            return true;
        }
    }
}

extern "C" __global__ void sigmatrace_device_poller(StWatch *watch, u32 nwatch, StRingHeader *h, StEvent *ev,
                                                    u64 clock_period_ns) {
    __shared__ unsigned long long s_resv;
    __shared__ u32 s_next[ST_MAX_QUEUES];
    __shared__ u32 s_stop;
    if (nwatch > ST_MAX_QUEUES) nwatch = ST_MAX_QUEUES;
    if (threadIdx.x == 0) {
        s_resv = *(volatile u64 *)&h->reserved_events;
        s_dropped = *(volatile u64 *)&h->dropped;
        s_stop = 0;
        *(volatile u32 *)&h->running = 1;
    }
    for (u32 q = threadIdx.x; q < nwatch; q += blockDim.x) s_next[q] = watch[q].start;
    __syncthreads();
    u64 last_clock = 0;
    u32 idle = 0;
    for (;;) {
        u32 found = 0;
        u64 now = st_globaltimer();
        for (u32 q = threadIdx.x; q < nwatch; q += blockDim.x) {
            StWatch w = watch[q];
            u32 next = s_next[q];
            if (w.kind == 1) {
                u32 pi = st_ld_be32((const u32 *)w.dbrec + 1) & 0xffffu;
                u32 avail = (pi - next) & 0xffffu;
                if (avail > w.depth) {
                    u32 lost = avail - w.depth;
                    st_emit(h, ev, &s_resv, ST_EV_LOST, (u16)q, lost, 1, 0, now);
                    watch[q].lost += lost;
                    next = (pi - w.depth) & 0xffffu;
                }
                while (next != pi) {
                    const u8 *slot = (const u8 *)w.ring + ((u64)(next & (w.depth - 1)) << 6);
                    u32 w0 = st_ld_be32((const u32 *)slot);
                    u32 w1 = st_ld_be32((const u32 *)slot + 1);
                    u32 ds = w1 & 0x3f;
                    u32 nbb = ds ? (ds + 3) / 4 : 1;
                    if (ds == 0 || ((w0 >> 8) & 0xffffu) != next || nbb > ((pi - next) & 0xffffu)) {
                        st_emit(h, ev, &s_resv, ST_EV_LOST, (u16)q, 1, 1, 0, now);
                        watch[q].lost += 1;
                        next = (next + 1) & 0xffffu;
                        continue;
                    }
                    if (!st_emit(h, ev, &s_resv, ST_EV_WQE, (u16)q, next | (nbb << 16), 0, slot, now)) {
                        watch[q].lost += nbb;
                    } else {
                        // Further WQEBBs of a multi-WQEBB WQE (wrapping at the ring end).
                        for (u32 k = 1; k < nbb; k++) {
                            u32 i = (next + k) & 0xffffu;
                            const u8 *more = (const u8 *)w.ring + ((u64)(i & (w.depth - 1)) << 6);
                            st_emit(h, ev, &s_resv, ST_EV_WQE_CONT, (u16)q, next | (k << 16), 0, more, now);
                        }
                    }
                    next = (next + nbb) & 0xffffu;
                    found++;
                }
            } else if (w.kind == 3) {
                if (w.flags & 1) {
                    // Entries below ci - depth were overwritten (the consumer passed them).
                    u32 ci = st_ld_be32((const u32 *)w.dbrec) & 0xffffffu;
                    u32 ahead = (ci - next) & 0xffffffu;
                    if (ahead < (1u << 23) && ahead > w.depth) {
                        u32 lost = ahead - w.depth;
                        st_emit(h, ev, &s_resv, ST_EV_LOST, (u16)q, lost, 3, 0, now);
                        watch[q].lost += lost;
                        next += lost;
                    }
                }
                for (u32 k = 0; k < w.depth; k++) {
                    const u8 *e = (const u8 *)w.ring + (u64)(next & (w.depth - 1)) * w.cqe_size +
                                  (w.cqe_size == 128 ? 64 : 0);
                    u8 op_own = *(volatile const u8 *)(e + 63);
                    u32 owner = (next & w.depth) != 0;
                    if ((op_own >> 4) == 15 || (op_own & 1) != owner) break;
                    __threadfence();
                    if (!st_emit(h, ev, &s_resv, ST_EV_CQE, (u16)q, next, 0, e, now)) watch[q].lost += 1;
                    next++;
                    found++;
                }
            }
            s_next[q] = next;
        }
        if (threadIdx.x == 0) {
            u64 t = st_globaltimer();
            *(volatile u64 *)&h->heartbeat_ns = t;
            u64 req = *(volatile u64 *)&h->clock_req;
            if (req != *(volatile u64 *)&h->clock_ack) {
                *(volatile u64 *)&h->clock_gpu_ns = st_globaltimer();
                __threadfence_system();
                *(volatile u64 *)&h->clock_ack = req;
            }
            if (clock_period_ns && t - last_clock >= clock_period_ns) {
                st_emit(h, ev, &s_resv, ST_EV_CLOCK, 0xffff, 0, 0, 0, t);
                last_clock = t;
            }
            *(volatile u64 *)&h->reserved_events = s_resv;
            *(volatile u64 *)&h->dropped = s_dropped;
            if (*(volatile u32 *)&h->stop) s_stop = 1;
        }
        idle = found ? 0 : idle + 1;
        if (idle > 64) __nanosleep(idle > 4096 ? 20000 : 1000);
        __syncthreads();
        // Every thread reads the stop flag between two barriers: thread 0 sets it only in the
        // next pass, so a slow warp cannot see it one pass early and leave the others waiting.
        u32 stop = s_stop;
        __syncthreads();
        if (stop) break;
    }
    if (threadIdx.x == 0) *(volatile u32 *)&h->running = 2;
}

#ifdef ST_HOST
// Host entry for the libcuda TEST DOUBLE (examples/gpu/host_shim.h).
ST_HOST_ENTRY(sigmatrace_device_poller,
              sigmatrace_device_poller(*(StWatch **)p[0], *(u32 *)p[1], *(StRingHeader **)p[2], *(StEvent **)p[3],
                                       *(u64 *)p[4]),
              sizeof(StWatch *), sizeof(u32), sizeof(StRingHeader *), sizeof(StEvent *), sizeof(u64))
#endif
