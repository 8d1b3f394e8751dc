// SigmaTrace GPU-side helpers: IBGDA-style posting of mlx5 send WQEs from GPU threads.
// Written for SigmaTrace from the formats in mlx5/README.md (no code copied).
// Compiled with NVRTC (no host headers): only built-in types are used.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define ST_OP_RDMA_WRITE 0x08u
#define ST_OP_RDMA_READ 0x10u
#define ST_OP_ATOMIC_FA 0x12u
#define ST_OP_ATOMIC_CS 0x11u
#define ST_CE_ALWAYS 0x08u

__device__ __forceinline__ u32 st_bswap32(u32 x) { return __byte_perm(x, 0, 0x0123); }
__device__ __forceinline__ u64 st_bswap64(u64 x) {
    return ((u64)st_bswap32((u32)x) << 32) | st_bswap32((u32)(x >> 32));
}
__device__ __forceinline__ u64 st_globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One send queue as the host passes it: every pointer is a device address (GPU memory, or
// host-pinned / UAR memory mapped for the GPU).
struct StQp {
    u8 *wqe;           // WQEBB 0 of the send ring
    u32 *dbrec;        // QP doorbell record (2 x be32; SQ word at [1])
    u64 *bf;           // doorbell / BlueFlame register (8-byte doorbell)
    u64 *resv;         // slot reservation counter (WQEBBs)
    u64 *ready;        // WQEBBs whose doorbell has been rung (orders DBR updates)
    u32 nwqes;         // ring depth in WQEBBs (power of two)
    u32 qpn;
    u32 lkey;
    u32 pad;
};

__device__ __forceinline__ void st_store_be32(u32 *p, u32 v) { *(volatile u32 *)p = st_bswap32(v); }

// Writes the 16-byte ctrl segment.
__device__ __forceinline__ void st_ctrl(u32 *w, u32 opcode, u32 idx, u32 qpn, u32 ds, u32 fm_ce_se, u32 imm) {
    st_store_be32(w + 0, ((idx & 0xffffu) << 8) | opcode);
    st_store_be32(w + 1, (qpn << 8) | ds);
    st_store_be32(w + 2, fm_ce_se);  // signature 0, dci stream 0, fm_ce_se in the low byte
    st_store_be32(w + 3, imm);
}

// Publishes WQEBBs [idx, idx+n): waits for earlier posts, release-stores the DBR, rings the
// 8-byte doorbell {pi << 8, qpn << 8}, then lets the next post go.
__device__ __forceinline__ void st_submit(const StQp &q, u64 idx, u32 n) {
    while (*(volatile u64 *)q.ready != idx) {
    }
    __threadfence_system();
    u32 pi = (u32)(idx + n);
    *(volatile u32 *)(q.dbrec + 1) = st_bswap32(pi & 0xffffu);
    __threadfence_system();
    u64 db = ((u64)st_bswap32(q.qpn << 8) << 32) | st_bswap32(pi << 8);
    *(volatile u64 *)q.bf = db;
    __threadfence_system();
    *(volatile u64 *)q.ready = idx + n;
}

// RDMA WRITE of `len` bytes from `laddr` (lkey) to `raddr` (rkey). Returns the WQE index.
__device__ u64 st_post_write(const StQp &q, u64 laddr, u64 raddr, u32 rkey, u32 len, bool signal) {
    u64 idx = atomicAdd(q.resv, 1ull);
    u32 *w = (u32 *)(q.wqe + ((idx & (q.nwqes - 1)) << 6));
    st_ctrl(w, ST_OP_RDMA_WRITE, (u32)idx, q.qpn, 3, signal ? ST_CE_ALWAYS : 0, 0);
    st_store_be32(w + 4, (u32)(raddr >> 32));
    st_store_be32(w + 5, (u32)raddr);
    st_store_be32(w + 6, rkey);
    st_store_be32(w + 7, 0);
    st_store_be32(w + 8, len);
    st_store_be32(w + 9, q.lkey);
    st_store_be32(w + 10, (u32)(laddr >> 32));
    st_store_be32(w + 11, (u32)laddr);
    st_submit(q, idx, 1);
    return idx;
}

// Remote fetch-and-add of `add` on the 8-byte word at `raddr`; the old value lands at `laddr`.
__device__ u64 st_post_fetch_add(const StQp &q, u64 laddr, u64 raddr, u32 rkey, u64 add) {
    u64 idx = atomicAdd(q.resv, 1ull);
    u32 *w = (u32 *)(q.wqe + ((idx & (q.nwqes - 1)) << 6));
    st_ctrl(w, ST_OP_ATOMIC_FA, (u32)idx, q.qpn, 4, ST_CE_ALWAYS, 0);
    st_store_be32(w + 4, (u32)(raddr >> 32));
    st_store_be32(w + 5, (u32)raddr);
    st_store_be32(w + 6, rkey);
    st_store_be32(w + 7, 0);
    st_store_be32(w + 8, (u32)(add >> 32));
    st_store_be32(w + 9, (u32)add);
    st_store_be32(w + 10, 0);
    st_store_be32(w + 11, 0);
    st_store_be32(w + 12, 8);
    st_store_be32(w + 13, q.lkey);
    st_store_be32(w + 14, (u32)(laddr >> 32));
    st_store_be32(w + 15, (u32)laddr);
    st_submit(q, idx, 1);
    return idx;
}

// RDMA READ of 8 bytes (used to poll a remote barrier counter).
__device__ u64 st_post_read8(const StQp &q, u64 laddr, u64 raddr, u32 rkey) {
    u64 idx = atomicAdd(q.resv, 1ull);
    u32 *w = (u32 *)(q.wqe + ((idx & (q.nwqes - 1)) << 6));
    st_ctrl(w, ST_OP_RDMA_READ, (u32)idx, q.qpn, 3, ST_CE_ALWAYS, 0);
    st_store_be32(w + 4, (u32)(raddr >> 32));
    st_store_be32(w + 5, (u32)raddr);
    st_store_be32(w + 6, rkey);
    st_store_be32(w + 7, 0);
    st_store_be32(w + 8, 8);
    st_store_be32(w + 9, q.lkey);
    st_store_be32(w + 10, (u32)(laddr >> 32));
    st_store_be32(w + 11, (u32)laddr);
    st_submit(q, idx, 1);
    return idx;
}

// A completion queue the kernel polls directly (owner-bit rule: mlx5/README.md, "Completion queue entries").
struct StCq {
    u8 *cqe;      // CQE ring (64-byte CQEs)
    u32 *dbrec;   // CQ doorbell record ([0] = consumer index)
    u64 *ci;      // consumer index (free running)
    u32 ncqes;
    u32 pad;
};

// Waits for the CQE completing WQE index `wqe_idx` (requester CQEs in order) and consumes
// CQEs up to it. Returns the CQE opcode (0 = success).
__device__ u32 st_wait_cqe(const StCq &c, u64 wqe_idx) {
    for (;;) {
        u64 n = *(volatile u64 *)c.ci;
        const u8 *e = c.cqe + ((n & (c.ncqes - 1)) << 6);
        u8 op_own = *(volatile const u8 *)(e + 63);
        u32 owner = (u32)((n & c.ncqes) != 0);
        if ((op_own >> 4) != 15 && (op_own & 1) == owner) {
            __threadfence();
            u16 ctr = (u16)((*(volatile const u8 *)(e + 60) << 8) | *(volatile const u8 *)(e + 61));
            *(volatile u64 *)c.ci = n + 1;
            *(volatile u32 *)c.dbrec = st_bswap32((u32)(n + 1) & 0xffffffu);
            if (ctr == (u16)wqe_idx || (op_own >> 4) == 13) return op_own >> 4;
        }
    }
}
