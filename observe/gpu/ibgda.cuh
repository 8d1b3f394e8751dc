// SigmaTrace GPU-side helpers: IBGDA-style posting of mlx5 send WQEs from GPU threads.
// Written for SigmaTrace from the formats in mlx5/README.md (no code copied).
// Compiled with NVRTC (no host headers): only built-in types are used. With ST_HOST defined the
// same source compiles as host C++ over examples/gpu/host_shim.h (the libcuda TEST DOUBLE runs
// kernels on host threads that way); nothing below changes meaning between the two.
#pragma once
#ifdef ST_HOST
#include "host_shim.h"
#endif

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define ST_OP_NOP 0x00u
#define ST_OP_RDMA_WRITE 0x08u
#define ST_OP_RDMA_READ 0x10u
#define ST_OP_ATOMIC_CS 0x11u
#define ST_OP_ATOMIC_FA 0x12u
#define ST_CE_ALWAYS 0x08u
// CQE opcodes (op_own >> 4).
#define ST_CQE_REQ_ERR 13u
#define ST_CQE_RESP_ERR 14u
#define ST_CQE_INVALID 15u
// How long any wait of a kernel may take before it gives up (ns of %globaltimer).
#define ST_WAIT_LIMIT_NS 60000000000ull

__device__ __forceinline__ u32 st_bswap32(u32 x) { return __byte_perm(x, 0, 0x0123); }
__device__ __forceinline__ u64 st_bswap64(u64 x) {
    return ((u64)st_bswap32((u32)x) << 32) | st_bswap32((u32)(x >> 32));
}
__device__ __forceinline__ u64 st_globaltimer() {
#ifdef ST_HOST
    return st_host_globaltimer();
#else
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}
// Inside spin loops: nothing on a GPU; on host threads (TEST DOUBLE) let the others run.
__device__ __forceinline__ void st_relax() {
#ifdef ST_HOST
    st_host_relax();
#endif
}

// Posting state of one QP, in GPU memory (device atomics only: nothing here needs PCIe
// atomics on host memory).
struct StQpState {              // 48 bytes
    u64 resv;                   // 0: next WQEBB to reserve
    u64 ready;                  // 8: WQEBBs published (doorbell rung); orders the posters
    u64 retired;                // 16: WQEBBs retired by CQEs
    u64 ci;                     // 24: CQ consumer index (free running)
    u32 lock;                   // 32: CQ consumer try-lock
    u32 failed;                 // 36: 0, or 1 << 16 | opcode << 8 | syndrome (error CQE), or 2 << 16 (timeout)
    u64 logged;                 // 40: bookkeeping entries written
};

// One posted WQE as its poster records it: the workload's own bookkeeping.
struct StLogEntry {             // 40 bytes
    u64 index;                  // 0: free-running WQEBB index
    u64 raddr;                  // 8
    u64 compare_add;            // 16
    u32 bytes;                  // 24
    u32 rkey;                   // 28
    u8 opcode;                  // 32
    u8 fm_ce_se;                // 33
    u8 ds;                      // 34
    u8 pad[5];                  // 35
};

// One send queue and its CQ as the host passes them: every pointer is a device address (ring,
// doorbell record and doorbell in host memory mapped for the GPU; state and log in GPU memory).
struct StQp {                   // 88 bytes
    u8 *wqe;                    // 0: WQEBB 0 of the send ring
    u32 *dbrec;                 // 8: QP doorbell record (2 x be32; SQ word at [1])
    u64 *bf;                    // 16: doorbell / BlueFlame register (8-byte doorbell)
    u8 *cqe;                    // 24: CQE ring
    u32 *cq_dbrec;              // 32: CQ doorbell record ([0] = consumer index)
    StQpState *st;              // 40
    StLogEntry *log;            // 48: log_cap entries
    u32 nwqes;                  // 56: ring depth in WQEBBs (power of two)
    u32 qpn;                    // 60
    u32 ncqes;                  // 64: power of two
    u32 cqe_size;               // 68: 64 or 128 (the CQE64 is the last 64 bytes)
    u32 log_cap;                // 72
    u32 signal_every;           // 76: every n-th WQEBB asks for a CQE (ring never fills unsignalled)
    u32 lkey_unused;            // 80
    u32 pad;                    // 84
};

__device__ __forceinline__ void st_store_be32(u32 *p, u32 v) { *(volatile u32 *)p = st_bswap32(v); }
__device__ __forceinline__ u32 st_load_u32(const u32 *p) { return *(volatile const u32 *)p; }
__device__ __forceinline__ u64 st_load_u64(const u64 *p) { return *(volatile const u64 *)p; }
__device__ __forceinline__ void st_store_u64(u64 *p, u64 v) { *(volatile u64 *)p = v; }

__device__ __forceinline__ bool st_expired(u64 start) {
    return st_globaltimer() - start > ST_WAIT_LIMIT_NS;
}

__device__ __forceinline__ u32 st_fail(const StQp &q, u32 why) {
    atomicCAS(&q.st->failed, 0u, why);
    return st_load_u32(&q.st->failed);
}

// Consumes every CQE present unless another thread is doing so (try-lock), advancing `retired`
// (a CQE retires its WQE and every earlier one). Returns the QP's failure word (0 = healthy).
__device__ u32 st_progress(const StQp &q) {
    if (atomicCAS(&q.st->lock, 0u, 1u) != 0u) return st_load_u32(&q.st->failed);
    for (;;) {
        u64 n = st_load_u64(&q.st->ci);
        const u8 *e = q.cqe + (n & (q.ncqes - 1)) * q.cqe_size + (q.cqe_size - 64);
        u8 op_own = *(volatile const u8 *)(e + 63);
        u32 owner = (n & q.ncqes) != 0;
        if ((op_own >> 4) == ST_CQE_INVALID || (op_own & 1) != owner) break;
        __threadfence_system();
        u32 opcode = op_own >> 4;
        u16 ctr = (u16)((*(volatile const u8 *)(e + 60) << 8) | *(volatile const u8 *)(e + 61));
        u8 syndrome = *(volatile const u8 *)(e + 55);
        st_store_u64(&q.st->ci, n + 1);
        *(volatile u32 *)q.cq_dbrec = st_bswap32((u32)(n + 1) & 0xffffffu);
        if (opcode == ST_CQE_REQ_ERR || opcode == ST_CQE_RESP_ERR) {
            st_fail(q, (1u << 16) | (opcode << 8) | syndrome);
            break;
        }
        u64 r = st_load_u64(&q.st->retired);
        u64 done = r + (u16)(ctr - (u16)r) + 1;
        if (done > r) st_store_u64(&q.st->retired, done);
    }
    __threadfence();
    atomicExch(&q.st->lock, 0u);
    return st_load_u32(&q.st->failed);
}

// Waits until WQE `idx` (and every earlier one) retired; returns the failure word.
__device__ u32 st_wait(const StQp &q, u64 idx) {
    u64 start = st_globaltimer();
    while (st_load_u64(&q.st->retired) <= idx) {
        u32 f = st_progress(q);
        if (f) return f;
        if (st_expired(start)) return st_fail(q, 2u << 16);
        st_relax();
    }
    return 0;
}

// One work request: RDMA WRITE / READ of `len` bytes at `laddr` (lkey) to / from `raddr`
// (rkey), or an 8-byte fetch-and-add of `add` whose old value lands at `laddr`.
struct StWr {
    u32 opcode;
    u32 lkey;
    u64 laddr;
    u32 len;
    u32 rkey;
    u64 raddr;
    u64 add;
};

// Posts `wr` IBGDA-style: reserve a WQEBB with an atomic add, wait for room, write the WQE
// with big-endian stores, record it, wait for the earlier posts, release-store the DBR, ring
// the 8-byte doorbell {be32(pi << 8), be32(qpn << 8)}, let the next post go. Returns the
// WQE's free-running index, or ~0 when the QP failed.
__device__ u64 st_post(const StQp &q, const StWr &wr, bool signal) {
    u64 idx = atomicAdd(&q.st->resv, 1ull);
    u64 start = st_globaltimer();
    while (idx + 1 - st_load_u64(&q.st->retired) > q.nwqes) {
        if (st_progress(q) || st_expired(start)) {
            st_fail(q, 2u << 16);
            return ~0ull;
        }
        st_relax();
    }
    if (q.signal_every && idx % q.signal_every == q.signal_every - 1) signal = true;
    u32 fm = signal ? ST_CE_ALWAYS : 0u;
    u32 ds = wr.opcode == ST_OP_ATOMIC_FA ? 4u : 3u;
    u32 *w = (u32 *)(q.wqe + ((idx & (q.nwqes - 1)) << 6));
    st_store_be32(w + 0, (((u32)idx & 0xffffu) << 8) | wr.opcode);
    st_store_be32(w + 1, (q.qpn << 8) | ds);
    st_store_be32(w + 2, fm);
    st_store_be32(w + 3, 0);
    st_store_be32(w + 4, (u32)(wr.raddr >> 32));
    st_store_be32(w + 5, (u32)wr.raddr);
    st_store_be32(w + 6, wr.rkey);
    st_store_be32(w + 7, 0);
    u32 d = 8;
    if (wr.opcode == ST_OP_ATOMIC_FA) {
        st_store_be32(w + 8, (u32)(wr.add >> 32));
        st_store_be32(w + 9, (u32)wr.add);
        st_store_be32(w + 10, 0);
        st_store_be32(w + 11, 0);
        d = 12;
    }
    st_store_be32(w + d, wr.len);
    st_store_be32(w + d + 1, wr.lkey);
    st_store_be32(w + d + 2, (u32)(wr.laddr >> 32));
    st_store_be32(w + d + 3, (u32)wr.laddr);
    for (u32 k = d + 4; k < 16; k++) st_store_be32(w + k, 0);
    if (idx < q.log_cap) {
        StLogEntry *l = q.log + idx;
        l->index = idx;
        l->raddr = wr.raddr;
        l->compare_add = wr.opcode == ST_OP_ATOMIC_FA ? wr.add : 0;
        l->bytes = wr.len;
        l->rkey = wr.rkey;
        l->opcode = (u8)wr.opcode;
        l->fm_ce_se = (u8)fm;
        l->ds = (u8)ds;
        atomicAdd(&q.st->logged, 1ull);
    }
    while (st_load_u64(&q.st->ready) != idx) {
        if (st_load_u32(&q.st->failed) || st_expired(start)) {
            st_fail(q, 2u << 16);
            return ~0ull;
        }
        st_relax();
    }
    __threadfence_system();
    u32 pi = (u32)(idx + 1);
    *(volatile u32 *)(q.dbrec + 1) = st_bswap32(pi & 0xffffu);
    __threadfence_system();
    u64 db = ((u64)st_bswap32(q.qpn << 8) << 32) | st_bswap32((pi & 0xffffu) << 8);
    *(volatile u64 *)q.bf = db;
    __threadfence_system();
    st_store_u64(&q.st->ready, idx + 1);
    return idx;
}

// Posts a signalled work request and waits for it; returns the failure word.
__device__ u32 st_post_wait(const StQp &q, const StWr &wr) {
    u64 i = st_post(q, wr, true);
    if (i == ~0ull) return st_load_u32(&q.st->failed);
    return st_wait(q, i);
}

// Stores `value` into the registered word `src` (`lkey`) and RDMA WRITEs it to each of the
// `nranks` ranks but `me` — rank p's word at the address and rkey `target(p, raddr, rkey)`
// sets — all posted (signalled) before any is waited for. Returns 0, or the error of the
// first rank whose write failed (1: it could not be posted), that rank in `*failed_rank`.
template <typename Target>
__device__ u32 st_write8_to_peers(const StQp *qps, u32 nranks, u32 me, u64 *src, u32 lkey,
                                  u64 value, Target target, u32 *failed_rank) {
    st_store_u64(src, value);
    __threadfence_system();
    u64 posted[64];
    for (u32 p = 0; p < nranks; p++) {
        if (p == me) continue;
        StWr wr;
        wr.opcode = ST_OP_RDMA_WRITE;
        wr.laddr = (u64)src;
        wr.lkey = lkey;
        wr.len = 8;
        target(p, wr.raddr, wr.rkey);
        wr.add = 0;
        posted[p] = st_post(qps[p], wr, true);
    }
    u32 err = 0;
    for (u32 p = 0; p < nranks; p++) {
        if (p == me) continue;
        u32 e = posted[p] == ~0ull ? 1 : st_wait(qps[p], posted[p]);
        if (e && !err) {
            err = e;
            *failed_rank = p;
        }
    }
    return err;
}
