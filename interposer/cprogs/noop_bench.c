/*
 * noop_bench: the hook cost alone. Two contexts of a no-op "device" built here (post_send
 * accepts and returns, poll_cq hands back one ready completion); one is handed to
 * sigmatrace_instrument_context() (when libsigmatrace.so is preloaded), the other is not.
 * The same loops run on both, interleaved, through the real inline ibv_post_send/ibv_poll_cq.
 *
 * usage: noop_bench time ROUNDS OPS [WAIT_MS]   median ns/op of each loop, traced and untraced
 *        noop_bench count OPS           run each loop once (for callgrind's inclusive counts)
 * The poll loops: a send-side completion (an RDMA write's: the short record) and, on a third
 * and fourth context, a receive completion (source QP and LID set: the compact record).
 * The wr loop: a one-WR ibv_wr_* batch (wr_start, wr_rdma_write, wr_set_sge, wr_complete),
 * as perftest's ib_write_bw posts, on an extended QP whose builders do nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int nop_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	(void)wr;
	(void)bad;
	return 0;
}

static int nop_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	(void)qp;
	(void)wr;
	(void)bad;
	return 0;
}

static int one_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	(void)n;
	/* The fields rdma-core's mlx5 writes for a successful RDMA write's completion
	 * (mlx5_parse_cqe, handle_good_req): not byte_len, vendor_err or the receive-side ones,
	 * which keep whatever the loop's uninitialised stack array held — as on hardware. */
	wc->wr_id = 7, wc->status = IBV_WC_SUCCESS, wc->opcode = IBV_WC_RDMA_WRITE;
	wc->wc_flags = 0, wc->qp_num = 0x42;
	(void)cq;
	return 1;
}

static int one_recv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	(void)n;
	/* Those it writes for a successful receive (handle_responder): not vendor_err. */
	wc->wr_id = 7, wc->status = IBV_WC_SUCCESS, wc->opcode = IBV_WC_RECV, wc->byte_len = 8;
	wc->wc_flags = 0, wc->qp_num = 0x42, wc->src_qp = 0x77, wc->slid = 5, wc->sl = 0;
	wc->dlid_path_bits = 0, wc->pkey_index = 0;
	(void)cq;
	return 1;
}

/* rdma-core's struct verbs_qp (driver.h): what ibv_qp_to_qp_ex() looks at. */
struct xqp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qp_ex;
	};
	uint32_t comp_mask;
	void *xrcd;
};

static void nop_wr(struct ibv_qp_ex *q) { (void)q; }
static void nop_wr_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr) { (void)q, (void)rkey, (void)raddr; }
static void nop_wr_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t len)
{
	(void)q, (void)lkey, (void)addr, (void)len;
}
static int nop_wr_complete(struct ibv_qp_ex *q) { (void)q; return 0; }

static struct ibv_qp *nop_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a)
{
	struct xqp *x = calloc(1, sizeof(*x));
	x->qp.context = context;
	x->qp.qp_num = 0x43;
	x->qp.qp_type = a->qp_type;
	x->comp_mask = 2; /* VERBS_QP_EX */
	x->qp_ex.wr_start = nop_wr, x->qp_ex.wr_abort = nop_wr, x->qp_ex.wr_complete = nop_wr_complete;
	x->qp_ex.wr_rdma_write = nop_wr_write, x->qp_ex.wr_set_sge = nop_wr_sge;
	return &x->qp;
}

struct dev {
	struct verbs_context v;
	struct ibv_qp qp;
	struct ibv_cq cq;
	struct ibv_qp_ex *qx;
};

static struct ibv_device fake = { .name = "noop0" };

static struct dev *make(int traced, int recv)
{
	struct dev *d = calloc(1, sizeof(*d));
	d->v.sz = sizeof(d->v);
	d->v.context.abi_compat = (void *)UINTPTR_MAX;
	d->v.context.device = &fake;
	d->v.context.ops.post_send = nop_post_send;
	d->v.context.ops.post_recv = nop_post_recv;
	d->v.context.ops.poll_cq = recv ? one_recv_poll_cq : one_poll_cq;
	d->v.create_qp_ex = nop_create_qp_ex;
	d->qp.context = &d->v.context;
	d->qp.qp_num = 0x42;
	d->qp.qp_type = IBV_QPT_RC;
	d->cq.context = &d->v.context;
	if (traced) {
		int (*instr)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "sigmatrace_instrument_context");
		if (!instr || instr(&d->v.context) != 0) {
			fprintf(stderr, "noop_bench: run with LD_PRELOAD=libsigmatrace.so\n");
			exit(2);
		}
	}
	struct ibv_qp_init_attr_ex a = { .send_cq = &d->cq, .recv_cq = &d->cq, .qp_type = IBV_QPT_RC,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE };
	/* Not ibv_qp_to_qp_ex(): the interposer would instrument the untraced QP there. */
	d->qx = (struct ibv_qp_ex *)ibv_create_qp_ex(&d->v.context, &a);
	if (!d->qx) {
		fprintf(stderr, "noop_bench: no extended QP\n");
		exit(2);
	}
	return d;
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec;
}

/* One RDMA write WR (8 bytes, signaled), like a message-rate loop posts. */
static char buf[64];
static struct ibv_sge sge = { (uintptr_t)buf, 8, 1 };

#define LOOP(name, body)                                                      \
	__attribute__((noinline)) void name(struct dev *d, long n)             \
	{                                                                     \
		struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, \
					  .opcode = IBV_WR_RDMA_WRITE,        \
					  .send_flags = IBV_SEND_SIGNALED };  \
		wr.wr.rdma.remote_addr = 0x1000;                              \
		wr.wr.rdma.rkey = 5;                                          \
		struct ibv_send_wr *bad;                                      \
		struct ibv_recv_wr rwr = { .wr_id = 9, .sg_list = &sge,       \
					   .num_sge = 1 };                    \
		struct ibv_recv_wr *rbad;                                     \
		(void)rwr;                                                    \
		(void)rbad;                                                   \
		struct ibv_wc wc;                                             \
		/* What a reused completion array holds where the provider  \
		 * writes nothing (garbage, as on hardware). */              \
		memset(&wc, 0xa5, sizeof(wc));                                \
		(void)bad;                                                    \
		(void)wr;                                                     \
		(void)wc;                                                     \
		for (long i = 0; i < n; i++) {                                \
			body;                                                 \
			__asm__ volatile("" ::: "memory");                    \
		}                                                             \
	}

LOOP(loop_post_traced, ibv_post_send(&d->qp, &wr, &bad))
LOOP(loop_post_untraced, ibv_post_send(&d->qp, &wr, &bad))
LOOP(loop_poll_traced, ibv_poll_cq(&d->cq, 1, &wc))
LOOP(loop_poll_untraced, ibv_poll_cq(&d->cq, 1, &wc))
LOOP(loop_both_traced, ibv_post_send(&d->qp, &wr, &bad); ibv_poll_cq(&d->cq, 1, &wc))
LOOP(loop_both_untraced, ibv_post_send(&d->qp, &wr, &bad); ibv_poll_cq(&d->cq, 1, &wc))
LOOP(loop_recv_traced, ibv_poll_cq(&d->cq, 1, &wc))
LOOP(loop_recv_untraced, ibv_poll_cq(&d->cq, 1, &wc))
LOOP(loop_postrecv_traced, ibv_post_recv(&d->qp, &rwr, &rbad))
LOOP(loop_postrecv_untraced, ibv_post_recv(&d->qp, &rwr, &rbad))
#define WR_BATCH                                                              \
	ibv_wr_start(d->qx);                                                  \
	d->qx->wr_id = 7, d->qx->wr_flags = IBV_SEND_SIGNALED;                \
	ibv_wr_rdma_write(d->qx, 5, 0x1000);                                  \
	ibv_wr_set_sge(d->qx, 1, (uintptr_t)buf, 8);                          \
	ibv_wr_complete(d->qx)
LOOP(loop_wr_traced, WR_BATCH)
LOOP(loop_wr_untraced, WR_BATCH)

typedef void (*loop_fn)(struct dev *, long);

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: noop_bench time ROUNDS OPS [WAIT_MS] | count OPS\n");
		return 2;
	}
	struct dev *t = make(1, 0), *u = make(0, 0), *rt = make(1, 1), *ru = make(0, 1);
	struct {
		const char *name;
		loop_fn traced, untraced;
		int recv;
	} loops[] = { { "post_send", loop_post_traced, loop_post_untraced, 0 },
		      { "poll_cq", loop_poll_traced, loop_poll_untraced, 0 },
		      { "post_send+poll_cq", loop_both_traced, loop_both_untraced, 0 },
		      { "poll_cq (receive)", loop_recv_traced, loop_recv_untraced, 1 },
		      { "post_recv", loop_postrecv_traced, loop_postrecv_untraced, 0 },
		      { "wr batch", loop_wr_traced, loop_wr_untraced, 0 } };
	const unsigned nloops = sizeof(loops) / sizeof(loops[0]);
	if (!strcmp(argv[1], "count")) {
		long ops = atol(argv[2]);
		for (unsigned l = 0; l < nloops; l++) {
			loops[l].traced(loops[l].recv ? rt : t, ops);
			loops[l].untraced(loops[l].recv ? ru : u, ops);
		}
		return 0;
	}
	int rounds = atoi(argv[2]);
	long ops = argc > 3 ? atol(argv[3]) : 1000000;
	/* One traced call creates the log; then give the interposer's background preparer time to
	 * get chunks ready (SIGMATRACE_PREFAULT_CHUNKS), as it would at a real program's rate. */
	loops[0].traced(t, 1);
	if (argc > 4)
		usleep(atoi(argv[4]) * 1000);
	double *tr = calloc(rounds, sizeof(double)), *un = calloc(rounds, sizeof(double));
	for (unsigned l = 0; l < nloops; l++) {
		struct dev *lt = loops[l].recv ? rt : t, *lu = loops[l].recv ? ru : u;
		loops[l].traced(lt, ops / 10); /* warm up */
		loops[l].untraced(lu, ops / 10);
		for (int r = 0; r < rounds; r++) {
			uint64_t a = now_ns();
			loops[l].traced(lt, ops);
			uint64_t b = now_ns();
			loops[l].untraced(lu, ops);
			uint64_t c = now_ns();
			tr[r] = (double)(b - a) / ops;
			un[r] = (double)(c - b) / ops;
		}
		qsort(tr, rounds, sizeof(double), cmp);
		qsort(un, rounds, sizeof(double), cmp);
		printf("%-18s traced %7.2f ns/op  untraced %7.2f ns/op  added %6.2f ns/op  (median of %d x %ld)\n",
		       loops[l].name, tr[rounds / 2], un[rounds / 2], tr[rounds / 2] - un[rounds / 2], rounds, ops);
	}
	return 0;
}
