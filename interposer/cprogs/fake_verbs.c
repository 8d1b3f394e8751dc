/*
 * fake_verbs: a program with its own in-process "provider" (a fake verbs_context whose data-path
 * functions only move entries between in-memory queues), driven through the real inline verbs
 * of <infiniband/verbs.h>: ibv_post_send/recv/srq_recv, ibv_poll_cq, ibv_req_notify_cq,
 * ibv_create_qp_ex/ibv_create_cq_ex, the ibv_wr_* API and ibv_start/next/end_poll. Under
 * LD_PRELOAD=libsigmatrace.so it hands its context to sigmatrace_instrument_context(), exactly
 * as the interposer would after ibv_open_device. Needs no device and no softnic; the
 * interposer's integration tests assert the log it leaves against the scenario below.
 *
 * usage: fake_verbs basic | threads N K | fork K | exec K | post K | killed K | dlsym | clock K MS | cqx N
 * Prints the provider's own counters; identical traced and untraced (except `clock`, which
 * also prints CLOCK_MONOTONIC_RAW read right before and right after each of its K posts, MS ms
 * apart: the untraced clock the debug clock skew is measured against). `cqx N`: N extended CQs,
 * each with its own set of wc_flags (never IBV_WC_EX_WITH_QP_NUM) and one QP; one signaled
 * send per QP, polled with ibv_start_poll; prints "cq <i> qpn <qpn> wr_id <id>".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAIL_ID 0xdeadull
#define RING 8192

/* rdma-core's struct verbs_qp (driver.h): what ibv_qp_to_qp_ex() looks at. */
struct fake_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qp_ex;
	};
	uint32_t comp_mask;
	void *xrcd;
	/* wr_* batch */
	uint64_t ids[64];
	uint32_t flags[64];
	enum ibv_wc_opcode ops[64];
	uint32_t lens[64];
	int n;
};
#define FAKE_VERBS_QP_EX 2

struct fake_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cq_ex;
	};
	struct ibv_wc ring[RING];
	unsigned head, tail;
	struct ibv_wc cur;
};

static struct {
	long sends, recvs, srq_recvs, polls, completions;
} prov;
static pthread_mutex_t prov_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_qpn = 0x300;

static void count(long *c, long n)
{
	pthread_mutex_lock(&prov_lock);
	*c += n;
	pthread_mutex_unlock(&prov_lock);
}

static struct fake_cq *fcq(struct ibv_cq *cq) { return (struct fake_cq *)cq; }

static void push(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len, uint32_t qpn)
{
	struct fake_cq *c = fcq(cq);
	struct ibv_wc *w = &c->ring[c->tail++ % RING];
	memset(w, 0, sizeof(*w));
	w->wr_id = wr_id;
	w->status = IBV_WC_SUCCESS;
	w->opcode = op;
	w->byte_len = len;
	w->qp_num = qpn;
}

static enum ibv_wc_opcode wc_op(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
	default: return IBV_WC_SEND;
	}
}

/* --- the fake provider's data path ------------------------------------------------------ */

/* `placed` mode: the WR id whose provider call raises SIGUSR1 (0 = none). */
static volatile uint64_t raise_at;

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	if (wr && raise_at && wr->wr_id == raise_at)
		raise(SIGUSR1); /* the handler runs here, inside the provider call */
	for (; wr; wr = wr->next) {
		if (wr->wr_id == FAIL_ID) {
			*bad = wr;
			return EINVAL;
		}
		uint32_t len = 0;
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		count(&prov.sends, 1);
		if (wr->send_flags & IBV_SEND_SIGNALED)
			push(qp->send_cq, wr->wr_id, wc_op(wr->opcode), len, qp->qp_num);
	}
	return 0;
}

/* Takes receive WRs until the one with FAIL_ID, which fails with `err`; `taken` counts them. */
static int take_recvs(struct ibv_recv_wr *wr, struct ibv_recv_wr **bad, int err, long *taken)
{
	for (; wr; wr = wr->next) {
		if (wr->wr_id == FAIL_ID) {
			*bad = wr;
			return err;
		}
		count(taken, 1);
	}
	return 0;
}

static int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	(void)qp;
	return take_recvs(wr, bad, EINVAL, &prov.recvs);
}

static int f_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	(void)srq;
	return take_recvs(wr, bad, ENOMEM, &prov.srq_recvs);
}

static int f_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fake_cq *c = fcq(cq);
	int got = 0;
	while (got < n && c->head != c->tail)
		wc[got++] = c->ring[c->head++ % RING];
	count(&prov.polls, 1);
	count(&prov.completions, got);
	return got;
}

static int f_req_notify(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;
}

/* --- ibv_wr_* ----------------------------------------------------------------------------- */

static struct fake_qp *fqp(struct ibv_qp_ex *q) { return (struct fake_qp *)q; }

static void b_start(struct ibv_qp_ex *q) { fqp(q)->n = 0; }
static void b_add(struct ibv_qp_ex *q, enum ibv_wc_opcode op)
{
	struct fake_qp *f = fqp(q);
	f->ids[f->n] = q->wr_id;
	f->flags[f->n] = q->wr_flags;
	f->ops[f->n] = op;
	f->lens[f->n] = 0;
	f->n++;
}
static void b_send(struct ibv_qp_ex *q) { b_add(q, IBV_WC_SEND); }
static void b_send_imm(struct ibv_qp_ex *q, __be32 imm) { (void)imm; b_add(q, IBV_WC_SEND); }
static void b_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra)
{
	(void)rkey;
	(void)ra;
	b_add(q, IBV_WC_RDMA_WRITE);
}
static void b_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t len)
{
	(void)lkey;
	(void)addr;
	fqp(q)->lens[fqp(q)->n - 1] = len;
}
static void b_inline(struct ibv_qp_ex *q, void *addr, size_t len)
{
	(void)addr;
	fqp(q)->lens[fqp(q)->n - 1] = len;
}
static int b_complete(struct ibv_qp_ex *q)
{
	struct fake_qp *f = fqp(q);
	for (int i = 0; i < f->n; i++)
		if (f->ids[i] == FAIL_ID) {
			f->n = 0;
			return EINVAL;
		}
	for (int i = 0; i < f->n; i++) {
		count(&prov.sends, 1);
		if (f->flags[i] & IBV_SEND_SIGNALED)
			push(q->qp_base.send_cq, f->ids[i], f->ops[i], f->lens[i], q->qp_base.qp_num);
	}
	f->n = 0;
	return 0;
}
static void b_abort(struct ibv_qp_ex *q) { fqp(q)->n = 0; }

/* --- ibv_cq_ex ----------------------------------------------------------------------------- */

static int x_next(struct ibv_cq_ex *cq)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	count(&prov.polls, 1);
	if (c->head == c->tail)
		return ENOENT;
	c->cur = c->ring[c->head++ % RING];
	cq->status = c->cur.status;
	cq->wr_id = c->cur.wr_id;
	count(&prov.completions, 1);
	return 0;
}
static int x_start(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	(void)attr;
	return x_next(cq);
}
static void x_end(struct ibv_cq_ex *cq) { (void)cq; }
static enum ibv_wc_opcode x_opcode(struct ibv_cq_ex *cq) { return ((struct fake_cq *)cq)->cur.opcode; }
static uint32_t x_vendor_err(struct ibv_cq_ex *cq) { (void)cq; return 0; }
static uint32_t x_byte_len(struct ibv_cq_ex *cq) { return ((struct fake_cq *)cq)->cur.byte_len; }
static uint32_t x_qp_num(struct ibv_cq_ex *cq) { return ((struct fake_cq *)cq)->cur.qp_num; }
static unsigned int x_wc_flags(struct ibv_cq_ex *cq) { (void)cq; return 0; }
static uint64_t x_ts(struct ibv_cq_ex *cq) { return 1000 + ((struct fake_cq *)cq)->cur.wr_id; }

/* --- objects -------------------------------------------------------------------------------- */

static struct ibv_device fake_dev = { .name = "fakedev0" };

static struct ibv_cq_ex *f_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
	struct fake_cq *c = calloc(1, sizeof(*c));
	struct ibv_cq_ex *x = &c->cq_ex;
	x->context = ctx;
	x->channel = a->channel;
	x->cqe = a->cqe;
	x->start_poll = x_start;
	x->next_poll = x_next;
	x->end_poll = x_end;
	x->read_opcode = x_opcode;
	x->read_vendor_err = x_vendor_err;
	x->read_wc_flags = x_wc_flags;
	if (a->wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
		x->read_byte_len = x_byte_len;
	if (a->wc_flags & IBV_WC_EX_WITH_QP_NUM)
		x->read_qp_num = x_qp_num;
	if (a->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
		x->read_completion_ts = x_ts;
	return x;
}

static struct fake_qp *new_qp(struct ibv_context *ctx, enum ibv_qp_type type, struct ibv_cq *cq)
{
	struct fake_qp *f = calloc(1, sizeof(*f));
	pthread_mutex_lock(&prov_lock);
	f->qp.qp_num = next_qpn++;
	pthread_mutex_unlock(&prov_lock);
	f->qp.context = ctx;
	f->qp.qp_type = type;
	f->qp.send_cq = cq;
	f->qp.recv_cq = cq;
	f->qp.state = IBV_QPS_RTS;
	return f;
}

static struct ibv_qp *f_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	struct fake_qp *f = new_qp(ctx, a->qp_type, a->send_cq);
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		struct ibv_qp_ex *q = &f->qp_ex;
		f->comp_mask = FAKE_VERBS_QP_EX;
		q->wr_start = b_start;
		q->wr_complete = b_complete;
		q->wr_abort = b_abort;
		q->wr_send = b_send;
		q->wr_send_imm = b_send_imm;
		q->wr_rdma_write = b_write;
		q->wr_set_sge = b_sge;
		q->wr_set_inline_data = b_inline;
	}
	return &f->qp;
}

static struct ibv_context *new_ctx(void)
{
	struct verbs_context *v = calloc(1, sizeof(*v));
	v->sz = sizeof(*v);
	v->context.abi_compat = (void *)UINTPTR_MAX;
	v->context.device = &fake_dev;
	v->context.async_fd = -1;
	v->context.ops.post_send = f_post_send;
	v->context.ops.post_recv = f_post_recv;
	v->context.ops.post_srq_recv = f_post_srq_recv;
	v->context.ops.poll_cq = f_poll_cq;
	v->context.ops.req_notify_cq = f_req_notify;
	v->create_qp_ex = f_create_qp_ex;
	v->create_cq_ex = f_create_cq_ex;
	struct ibv_context *ctx = &v->context;
	int (*instrument)(struct ibv_context *) = (int (*)(struct ibv_context *))dlsym(RTLD_DEFAULT, "sigmatrace_instrument_context");
	int (*active)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "sigmatrace_active");
	/* Tracing may be off (SIGMATRACE_DISABLE, or it disabled itself): then it refuses. */
	if (instrument && instrument(ctx) != 0 && active && active())
		fprintf(stderr, "fake_verbs: sigmatrace_instrument_context refused the context\n");
	return ctx;
}

static struct ibv_cq *new_cq(struct ibv_context *ctx)
{
	struct fake_cq *c = calloc(1, sizeof(*c));
	c->cq.context = ctx;
	c->cq.cqe = RING;
	return &c->cq;
}

/* --- scenarios -------------------------------------------------------------------------------- */

static void check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fake_verbs: unexpected result: %s\n", what);
		exit(3);
	}
}

static void basic(void)
{
	char buf[4096];
	struct ibv_context *ctx = new_ctx();
	struct ibv_cq *cq = new_cq(ctx);
	struct ibv_qp *qp = &new_qp(ctx, IBV_QPT_RC, cq)->qp;
	struct ibv_qp *ud = &new_qp(ctx, IBV_QPT_UD, cq)->qp;
	struct ibv_wc wc[4];

	for (int i = 0; i < 5; i++)
		check(ibv_poll_cq(cq, 4, wc) == 0, "empty poll");

	/* 1. a chain of three */
	struct ibv_sge s0 = { (uintptr_t)buf, 100, 1 }, s1[2] = { { (uintptr_t)buf, 10, 1 }, { (uintptr_t)buf, 20, 1 } },
		       s2 = { (uintptr_t)buf, 8, 1 };
	struct ibv_send_wr w[3], *bad = NULL;
	memset(w, 0, sizeof(w));
	w[0] = (struct ibv_send_wr){ .wr_id = 1, .next = &w[1], .sg_list = &s0, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				     .send_flags = IBV_SEND_SIGNALED };
	w[0].wr.rdma.remote_addr = 0x1000;
	w[0].wr.rdma.rkey = 0x11;
	w[1] = (struct ibv_send_wr){ .wr_id = 2, .next = &w[2], .sg_list = s1, .num_sge = 2, .opcode = IBV_WR_SEND_WITH_IMM,
				     .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0xabcd) };
	w[2] = (struct ibv_send_wr){ .wr_id = 3, .sg_list = &s2, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD };
	w[2].wr.atomic.remote_addr = 0x2000;
	w[2].wr.atomic.rkey = 0x22;
	w[2].wr.atomic.compare_add = 5;
	check(ibv_post_send(qp, w, &bad) == 0, "chain");

	/* 2. a chain whose second WR fails */
	struct ibv_sge s3 = { (uintptr_t)buf, 7, 1 };
	struct ibv_send_wr f[2];
	memset(f, 0, sizeof(f));
	f[0] = (struct ibv_send_wr){ .wr_id = 4, .next = &f[1], .sg_list = &s3, .num_sge = 1, .opcode = IBV_WR_SEND,
				     .send_flags = IBV_SEND_SIGNALED };
	f[1] = (struct ibv_send_wr){ .wr_id = FAIL_ID, .sg_list = &s3, .num_sge = 1, .opcode = IBV_WR_SEND };
	check(ibv_post_send(qp, f, &bad) == EINVAL && bad == &f[1], "failing chain");

	/* 3. UD */
	struct ibv_sge s4 = { (uintptr_t)buf, 64, 1 };
	struct ibv_send_wr u = { .wr_id = 5, .sg_list = &s4, .num_sge = 1, .opcode = IBV_WR_SEND };
	u.wr.ud.ah = (struct ibv_ah *)0x5000;
	u.wr.ud.remote_qpn = 0x77;
	u.wr.ud.remote_qkey = 0x11111111;
	check(ibv_post_send(ud, &u, &bad) == 0, "ud");

	/* 4. receives and SRQ receives */
	struct ibv_sge r = { (uintptr_t)buf, 256, 1 }, rs = { (uintptr_t)buf, 512, 1 };
	struct ibv_recv_wr rw[2] = { { .wr_id = 10, .next = &rw[1], .sg_list = &r, .num_sge = 1 },
				     { .wr_id = 11, .sg_list = &r, .num_sge = 1 } },
			   *rbad = NULL;
	check(ibv_post_recv(qp, rw, &rbad) == 0, "recv");
	struct ibv_srq srq = { .context = ctx };
	struct ibv_recv_wr sw = { .wr_id = 12, .sg_list = &rs, .num_sge = 1 }, sf = { .wr_id = FAIL_ID };
	check(ibv_post_srq_recv(&srq, &sw, &rbad) == 0, "srq recv");
	check(ibv_post_srq_recv(&srq, &sf, &rbad) == ENOMEM, "srq fail");

	/* 5. completions: 1 and 2, then 4, then nothing */
	check(ibv_poll_cq(cq, 2, wc) == 2 && wc[0].wr_id == 1 && wc[1].wr_id == 2, "poll 2");
	check(ibv_poll_cq(cq, 4, wc) == 1 && wc[0].wr_id == 4, "poll 1");
	check(ibv_poll_cq(cq, 4, wc) == 0, "poll 0");

	/* 6. notification */
	check(ibv_req_notify_cq(cq, 1) == 0, "notify");

	/* 7. extended CQ and QP, the ibv_wr_* API */
	struct ibv_cq_init_attr_ex ca = { .cqe = 64,
					  .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM |
						      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
	check(cqx != NULL, "create_cq_ex");
	for (int i = 0; i < 3; i++)
		check(ibv_start_poll(cqx, &(struct ibv_poll_cq_attr){ 0 }) == ENOENT, "empty start_poll");
	struct ibv_qp_init_attr_ex qa = { .send_cq = ibv_cq_ex_to_cq(cqx), .recv_cq = ibv_cq_ex_to_cq(cqx),
					  .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
					  .qp_type = IBV_QPT_RC, .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					  .pd = (struct ibv_pd *)0x1,
					  .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
							    IBV_QP_EX_WITH_SEND_WITH_IMM };
	struct ibv_qp *xqp = ibv_create_qp_ex(ctx, &qa);
	check(xqp != NULL, "create_qp_ex");
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(xqp);
	check(qpx != NULL, "qp_to_qp_ex");

	ibv_wr_start(qpx);
	qpx->wr_id = 20;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, 0x33, 0x3000);
	ibv_wr_set_sge(qpx, 1, (uintptr_t)buf, 4096);
	qpx->wr_id = 21;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qpx, htonl(7));
	ibv_wr_set_inline_data(qpx, buf, 16);
	check(ibv_wr_complete(qpx) == 0, "batch 1");

	ibv_wr_start(qpx);
	qpx->wr_id = 22;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, 1, (uintptr_t)buf, 8);
	qpx->wr_id = FAIL_ID;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, 1, (uintptr_t)buf, 8);
	check(ibv_wr_complete(qpx) == EINVAL, "batch 2 fails");

	ibv_wr_start(qpx);
	qpx->wr_id = 23;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, 1, (uintptr_t)buf, 8);
	ibv_wr_abort(qpx);

	/* 8. extended polling: 20, 21, then nothing */
	check(ibv_start_poll(cqx, &(struct ibv_poll_cq_attr){ 0 }) == 0 && cqx->wr_id == 20, "start_poll");
	check(ibv_wc_read_byte_len(cqx) == 4096, "byte_len");
	check(ibv_next_poll(cqx) == 0 && cqx->wr_id == 21, "next_poll");
	check(ibv_next_poll(cqx) == ENOENT, "next_poll empty");
	ibv_end_poll(cqx);
}

/* A signalled SEND of one SGE. */
static struct ibv_send_wr signalled_send(uint64_t id, struct ibv_sge *s)
{
	return (struct ibv_send_wr){ .wr_id = id, .sg_list = s, .num_sge = 1, .opcode = IBV_WR_SEND,
				     .send_flags = IBV_SEND_SIGNALED };
}

static void post_n(struct ibv_context *ctx, struct ibv_qp *qp, long n)
{
	(void)ctx;
	char buf[64];
	struct ibv_sge s = { (uintptr_t)buf, 64, 1 };
	struct ibv_wc wc[16];
	for (long i = 0; i < n; i++) {
		struct ibv_send_wr w = signalled_send((uint64_t)i, &s), *bad;
		check(ibv_post_send(qp, &w, &bad) == 0, "post");
		check(ibv_poll_cq(qp->send_cq, 16, wc) == 1 && wc[0].wr_id == (uint64_t)i, "poll");
	}
}

static uint64_t raw_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC_RAW, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void clock_probe(long n, long ms)
{
	struct ibv_context *ctx = new_ctx();
	struct ibv_qp *qp = &new_qp(ctx, IBV_QPT_RC, new_cq(ctx))->qp;
	char buf[64];
	struct ibv_sge s = { (uintptr_t)buf, 64, 1 };
	struct ibv_wc wc[16];
	for (long i = 0; i < n; i++) {
		struct ibv_send_wr w = signalled_send((uint64_t)i, &s), *bad;
		uint64_t before = raw_ns();
		check(ibv_post_send(qp, &w, &bad) == 0, "post");
		uint64_t after = raw_ns();
		check(ibv_poll_cq(qp->send_cq, 16, wc) == 1, "poll");
		printf("post %ld %llu %llu\n", i, (unsigned long long)before, (unsigned long long)after);
		usleep((useconds_t)ms * 1000);
	}
}

static void cq_ex_many(long n)
{
	/* wc_flags bits other than QP_NUM, spread over i: every CQ asks for a different set. */
	static const uint64_t bits[] = { IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_IMM, IBV_WC_EX_WITH_SRC_QP,
					 IBV_WC_EX_WITH_SLID, IBV_WC_EX_WITH_SL, IBV_WC_EX_WITH_DLID_PATH_BITS,
					 IBV_WC_EX_WITH_CVLAN };
	struct ibv_context *ctx = new_ctx();
	char buf[64];
	struct ibv_sge s = { (uintptr_t)buf, 64, 1 };
	for (long i = 0; i < n; i++) {
		uint64_t flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
		for (unsigned b = 0; b < sizeof(bits) / sizeof(bits[0]); b++)
			if (i & (1l << b))
				flags |= bits[b];
		struct ibv_cq_init_attr_ex ca = { .cqe = 16, .wc_flags = flags };
		struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
		check(cqx != NULL, "create_cq_ex");
		struct ibv_qp_init_attr_ex qa = { .send_cq = ibv_cq_ex_to_cq(cqx), .recv_cq = ibv_cq_ex_to_cq(cqx),
						  .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
						  .qp_type = IBV_QPT_RC,
						  .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
						  .pd = (struct ibv_pd *)0x1 };
		struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qa);
		check(qp != NULL, "create_qp_ex");
		struct ibv_send_wr w = { .wr_id = 100 + (uint64_t)i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		check(ibv_post_send(qp, &w, &bad) == 0, "post");
		check(ibv_start_poll(cqx, &(struct ibv_poll_cq_attr){ 0 }) == 0, "start_poll");
		printf("cq %ld qpn %u wr_id %llu\n", i, qp->qp_num, (unsigned long long)cqx->wr_id);
		ibv_end_poll(cqx);
	}
}

static void post_fresh(long n)
{
	struct ibv_context *ctx = new_ctx();
	struct ibv_qp *qp = &new_qp(ctx, IBV_QPT_RC, new_cq(ctx))->qp;
	post_n(ctx, qp, n);
}

struct thread_arg {
	struct ibv_context *ctx;
	long k;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;
	struct ibv_qp *qp = &new_qp(a->ctx, IBV_QPT_RC, new_cq(a->ctx))->qp;
	post_n(a->ctx, qp, a->k);
	return NULL;
}

/* Single-WR RDMA writes and sends (the tracer's compact-only path) with and without fields
 * the compact record cannot hold: a 64-bit remote address, a send flag above bit 4. */
static void plain_sends(void)
{
	char buf[64];
	struct ibv_context *ctx = new_ctx();
	struct ibv_cq *cq = new_cq(ctx);
	struct ibv_qp *qp = &new_qp(ctx, IBV_QPT_RC, cq)->qp;
	struct ibv_sge s = { (uintptr_t)buf, 8, 1 };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	w.wr.rdma.remote_addr = 0xfedcba9876543210ull;
	w.wr.rdma.rkey = 0x33;
	check(ibv_post_send(qp, &w, &bad) == 0, "wide address");
	w.wr_id = 2;
	w.wr.rdma.remote_addr = 0x1000;
	w.send_flags = IBV_SEND_SIGNALED | (1 << 6);
	check(ibv_post_send(qp, &w, &bad) == 0, "wide flags");
	w.wr_id = 3;
	w.send_flags = IBV_SEND_SIGNALED;
	check(ibv_post_send(qp, &w, &bad) == 0, "plain write");
	w = (struct ibv_send_wr){ .wr_id = 4, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	check(ibv_post_send(qp, &w, &bad) == 0, "plain send");
	struct ibv_wc wc[8];
	check(ibv_poll_cq(cq, 8, wc) == 4, "four completions");
}

/* Single-WR writes the tracer records before the provider call: one the provider refuses,
 * and two during whose provider call a signal handler posts a write of its own (one of them
 * refused too). Then plain writes again. */
static struct ibv_qp *placed_qp;
static struct ibv_sge placed_sge;

static void placed_handler(int sig)
{
	(void)sig;
	struct ibv_send_wr w = { .wr_id = raise_at + 100, .sg_list = &placed_sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	w.wr.rdma.remote_addr = 0x2000;
	w.wr.rdma.rkey = 0x44;
	check(ibv_post_send(placed_qp, &w, &bad) == 0, "handler's write");
}

static void placed_sends(void)
{
	char buf[64];
	struct ibv_context *ctx = new_ctx();
	struct ibv_cq *cq = new_cq(ctx);
	struct ibv_qp *qp = &new_qp(ctx, IBV_QPT_RC, cq)->qp;
	placed_qp = qp;
	placed_sge = (struct ibv_sge){ (uintptr_t)buf, 8, 1 };
	signal(SIGUSR1, placed_handler);
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &placed_sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	w.wr.rdma.remote_addr = 0x1000;
	w.wr.rdma.rkey = 0x33;
	check(ibv_post_send(qp, &w, &bad) == 0, "write 1");
	w.wr_id = FAIL_ID;
	check(ibv_post_send(qp, &w, &bad) == EINVAL && bad == &w, "refused write");
	w.wr_id = 2;
	check(ibv_post_send(qp, &w, &bad) == 0, "write 2");
	w.wr_id = 3;
	raise_at = 3;
	check(ibv_post_send(qp, &w, &bad) == 0, "write 3 (handler posts 103)");
	w.wr_id = FAIL_ID;
	raise_at = FAIL_ID;
	bad = NULL;
	check(ibv_post_send(qp, &w, &bad) == EINVAL && bad == &w, "refused write (handler posts 0xdeae+99)");
	raise_at = 0;
	w.wr_id = 4;
	check(ibv_post_send(qp, &w, &bad) == 0, "write 4");
	w = (struct ibv_send_wr){ .wr_id = 5, .sg_list = &placed_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };
	check(ibv_post_send(qp, &w, &bad) == 0, "send 5");
	struct ibv_wc wc[16];
	check(ibv_poll_cq(cq, 16, wc) == 7, "seven completions");
	/* One poll whose completions the tracer's hot path takes in part: a second QP's first
	 * completion (its slot not yet bound) between two of the first QP's. */
	struct ibv_qp *qp2 = &new_qp(ctx, IBV_QPT_RC, cq)->qp;
	w.opcode = IBV_WR_RDMA_WRITE;
	w.wr.rdma.remote_addr = 0x1000;
	w.wr.rdma.rkey = 0x33;
	w.wr_id = 6;
	check(ibv_post_send(qp, &w, &bad) == 0, "write 6");
	w.wr_id = 7;
	check(ibv_post_send(qp2, &w, &bad) == 0, "write 7 on the second QP");
	w.wr_id = 8;
	check(ibv_post_send(qp, &w, &bad) == 0, "write 8");
	check(ibv_poll_cq(cq, 16, wc) == 3, "three completions");
}

static void dlsym_check(void)
{
	/* RTLD_NEXT from the main program must still mean "after the main program". */
	void *next = dlsym(RTLD_NEXT, "ibv_get_device_list");
	void *dflt = dlsym(RTLD_DEFAULT, "ibv_get_device_list");
	check(next != NULL && next == dflt, "RTLD_NEXT from the program == RTLD_DEFAULT");
	check(dlsym(RTLD_NEXT, "sigmatrace_no_such_symbol") == NULL && dlerror() != NULL, "missing symbol sets dlerror");
	/* libmlx5 is not loaded here: a probe must not find the interposer's global exports. */
	dlerror();
	check(dlsym(RTLD_DEFAULT, "mlx5dv_create_qp") == NULL && dlerror() != NULL, "mlx5dv probe finds nothing");
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	check(h != NULL, "dlopen libibverbs");
	void *v11 = dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1");
	void *v10 = dlvsym(h, "ibv_get_device_list", "IBVERBS_1.0");
	check(v11 != NULL && v10 != NULL && v11 != v10, "1.0 and 1.1 are different functions");
	printf("dlvsym 1.1 is %s\n", v11 == dflt ? "the global definition" : "the library's own");
	dlclose(h);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";
	long a = argc > 2 ? atol(argv[2]) : 0, b = argc > 3 ? atol(argv[3]) : 0;
	if (!strcmp(mode, "basic")) {
		basic();
	} else if (!strcmp(mode, "plain")) {
		plain_sends();
	} else if (!strcmp(mode, "placed")) {
		placed_sends();
	} else if (!strcmp(mode, "post")) {
		post_fresh(a);
	} else if (!strcmp(mode, "threads")) {
		struct ibv_context *ctx = new_ctx();
		pthread_t t[64];
		struct thread_arg arg = { ctx, b };
		for (long i = 0; i < a && i < 64; i++)
			pthread_create(&t[i], NULL, thread_main, &arg);
		for (long i = 0; i < a && i < 64; i++)
			pthread_join(t[i], NULL);
	} else if (!strcmp(mode, "fork")) {
		struct ibv_context *ctx = new_ctx();
		struct ibv_qp *qp = &new_qp(ctx, IBV_QPT_RC, new_cq(ctx))->qp;
		post_n(ctx, qp, a);
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			post_n(ctx, qp, a + 1);
			_exit(0);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child");
		post_n(ctx, qp, a + 2);
		printf("child %d\n", (int)pid);
	} else if (!strcmp(mode, "exec")) {
		post_fresh(a);
		fflush(stdout);
		char n[32];
		snprintf(n, sizeof(n), "%ld", a + 1);
		execl("/proc/self/exe", argv[0], "post", n, (char *)NULL);
		perror("exec");
		return 4;
	} else if (!strcmp(mode, "killed")) {
		post_fresh(a);
		fflush(stdout);
		raise(SIGKILL);
	} else if (!strcmp(mode, "dlsym")) {
		dlsym_check();
	} else if (!strcmp(mode, "clock")) {
		clock_probe(a, b);
	} else if (!strcmp(mode, "cqx")) {
		cq_ex_many(a);
	} else {
		fprintf(stderr, "usage: fake_verbs basic | threads N K | fork K | exec K | post K | killed K | dlsym | clock K MS | cqx N\n");
		return 2;
	}
	printf("provider: sends=%ld recvs=%ld srq_recvs=%ld polls=%ld completions=%ld\n", prov.sends, prov.recvs,
	       prov.srq_recvs, prov.polls, prov.completions);
	return 0;
}
