// TEST DOUBLE support — not CUDA. Lets the repository's CUDA kernels (examples/gpu/*.cu,
// observe/gpu/poller.cu) compile as host C++ (-DST_HOST) so that the libcuda test double
// (testkit/cuda-double) can run them on host threads when a workload launches them without a
// GPU: one pthread per GPU thread, the blocks of a grid one after the other, __syncthreads as a
// pthread barrier, __shared__ variables as statics (one block at a time), device atomics as
// GCC __atomic builtins, fences as full fences, %globaltimer from the double's simulated GPU
// clock. Kernels must not rely on more than that (no warp intrinsics, one block when blocks
// would have to run concurrently). Device functions become static (one copy per kernel file).
#pragma once
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define __global__
#define __device__ static
#define __forceinline__ inline
#define __shared__ static

struct st_dim3 {
    unsigned x, y, z;
};

struct st_host_block {
    pthread_barrier_t bar;
    int acc[2];
};

struct st_host_thread {
    st_dim3 tid, bid, bdim, gdim;
    st_host_block *blk;
    unsigned calls;
    void (*body)(void **);
    void **params;
};

static thread_local st_host_thread *st_host_self_ptr;
static inline st_host_thread *st_host_self() { return st_host_self_ptr; }

#define threadIdx (st_host_self()->tid)
#define blockIdx (st_host_self()->bid)
#define blockDim (st_host_self()->bdim)
#define gridDim (st_host_self()->gdim)

#define atomicAdd(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
#define atomicOr(p, v) __atomic_fetch_or((p), (v), __ATOMIC_SEQ_CST)
#define atomicExch(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
template <typename T>
static inline T atomicCAS(T *p, T expected, T desired) {
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected;
}
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// A barrier is also a compiler barrier: __shared__ statics (never address-taken in some kernels)
// must be re-read after it, as on the GPU.
static inline void st_host_barrier(st_host_block *b) {
    __asm__ __volatile__("" ::: "memory");
    pthread_barrier_wait(&b->bar);
    __asm__ __volatile__("" ::: "memory");
}
static inline void __syncthreads() { st_host_barrier(st_host_self()->blk); }
static inline int __syncthreads_or(int p) {
    st_host_thread *t = st_host_self();
    unsigned c = t->calls++;
    if (p) __atomic_store_n(&t->blk->acc[c % 2], 1, __ATOMIC_SEQ_CST);
    st_host_barrier(t->blk);
    int r = __atomic_load_n(&t->blk->acc[c % 2], __ATOMIC_SEQ_CST);
    if (t->tid.x == 0) __atomic_store_n(&t->blk->acc[(c + 1) % 2], 0, __ATOMIC_SEQ_CST);
    st_host_barrier(t->blk);
    return r;
}
static inline unsigned __byte_perm(unsigned x, unsigned, unsigned sel) {
    // Only the byte swap (selector 0x0123) is used.
    return sel == 0x0123 ? __builtin_bswap32(x) : (abort(), 0u);
}
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline void st_host_relax() { sched_yield(); }
static inline void __nanosleep(unsigned ns) {
    struct timespec ts = {0, (long)ns};
    nanosleep(&ts, 0);
}

// The double's simulated %globaltimer (sigmatrace_cuda_double_globaltimer); CLOCK_REALTIME if
// the loaded libcuda is not the double (never the case when these kernels run).
static inline unsigned long long st_host_globaltimer() {
    typedef unsigned long long (*gt_fn)(void);
    static gt_fn fn = 0;
    static int looked = 0;
    if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
        void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
        fn = h ? (gt_fn)dlsym(h, "sigmatrace_cuda_double_globaltimer") : 0;
        __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
    }
    if (fn) return fn();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void *st_host_thread_main(void *p) {
    st_host_self_ptr = (st_host_thread *)p;
    st_host_self_ptr->body(st_host_self_ptr->params);
    return 0;
}

// Runs `body` as a grid of blocks (x dimension only), each block's threads concurrently.
static inline int st_host_run(void (*body)(void **), void **params, const unsigned *grid,
                              const unsigned *block) {
    unsigned nt = block[0];
    if (nt == 0 || block[1] > 1 || block[2] > 1 || grid[1] > 1 || grid[2] > 1) return -1;
    st_host_thread *ts = (st_host_thread *)calloc(nt, sizeof(st_host_thread));
    pthread_t *th = (pthread_t *)calloc(nt, sizeof(pthread_t));
    st_host_block blk;
    int rc = 0;
    for (unsigned b = 0; b < grid[0] && rc == 0; b++) {
        pthread_barrier_init(&blk.bar, 0, nt);
        blk.acc[0] = blk.acc[1] = 0;
        unsigned started = 0;
        for (unsigned t = 0; t < nt; t++) {
            ts[t] = st_host_thread{{t, 0, 0}, {b, 0, 0}, {nt, 1, 1}, {grid[0], 1, 1}, &blk, 0, body, params};
            // A block whose threads cannot all start would deadlock at its first barrier.
            if (pthread_create(&th[t], 0, st_host_thread_main, &ts[t]) != 0) abort();
            started++;
        }
        for (unsigned t = 0; t < started; t++) pthread_join(th[t], 0);
        pthread_barrier_destroy(&blk.bar);
    }
    free(ts);
    free(th);
    return rc;
}

// Declares the host entry of kernel `name`: `name_host(params, grid, block)` (the launcher the
// double calls) and `name_params`, the byte size of each kernel parameter, 0-terminated.
#define ST_HOST_ENTRY(name, call, ...)                                                       \
    static void name##_body(void **p) { call; }                                              \
    extern "C" const unsigned long long name##_params[] = {__VA_ARGS__, 0};                  \
    extern "C" int name##_host(void **params, const unsigned *grid, const unsigned *block) { \
        return st_host_run(name##_body, params, grid, block);                                \
    }
