/*
 * hot_paths: drives the tracer's hot paths (one-WR ibv_post_send, one-completion ibv_poll_cq)
 * and every case where they must hand over to the ordinary recording, on a minimal in-process
 * device (as noop_bench: a verbs_context handed to sigmatrace_instrument_context()).
 *
 * usage: hot_paths polls        completions of every shape, one per poll and several per poll,
 *                               prints each completion it returned ("wc ...") and each empty
 *                               poll ("empty <cq>")
 *        hot_paths recvs        receive posts of every shape (one WR with one SGE: the hot path;
 *                               several SGEs or WRs, a refused one, other QPs, an SRQ (printed
 *                               with QPN 0), enough to fill
 *                               chunks), prints each WR the device accepted ("recv qpn wr_id bytes
 *                               num_sge") and each refusal ("fail qpn wr_id rc")
 *        hot_paths storm N      N receives and signaled one-SGE writes, each polled, while an
 *                               interval timer's SIGALRM handler posts an unsignaled write and a
 *                               receive on a second QP and polls
 *                               an empty CQ (inside the tracer or inside the provider call: both
 *                               happen); prints "storm main N handler M"
 *        hot_paths wrs          ibv_wr_* batches of every shape (one WR with one SGE: the hot
 *                               path; no setter, inline data, an SGE list, two WRs, two QPs'
 *                               batches interleaved, a poll, a post or another QP's setter inside
 *                               a batch, a refused and an aborted batch, fields without a compact
 *                               form, enough to fill chunks and time bases), prints each WR the
 *                               device accepted at wr_complete ("wr qpn wr_id opcode flags
 *                               remote_addr rkey bytes num_sge") and each refused batch ("wrfail
 *                               qpn first_wr_id rc")
 *        hot_paths wrstorm N    N signaled one-WR ibv_wr_* batches (write, one SGE), each polled,
 *                               while the SIGALRM handler posts an unsignaled write on a second
 *                               QP, builds and completes an unsignaled one-WR batch on a third
 *                               and polls an empty CQ; prints "wrstorm main N handler M"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define RING 64

struct cq {
	struct ibv_cq cq;
	struct ibv_wc ring[RING];
	unsigned head, tail; /* only the thread that owns the CQ (and its handler) touches it */
};

static int d_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)bad;
	for (; wr; wr = wr->next) {
		if (!(wr->send_flags & IBV_SEND_SIGNALED))
			continue;
		struct cq *c = (struct cq *)qp->send_cq;
		c->ring[c->tail++ % RING] = (struct ibv_wc){ .wr_id = wr->wr_id, .opcode = IBV_WC_RDMA_WRITE,
							     .byte_len = wr->sg_list[0].length,
							     .qp_num = qp->qp_num };
	}
	return 0;
}

/* Whether d_post_recv prints what it accepts (not in the storm: its handler posts too). */
static int print_recvs;

/* Accepts every receive WR but one with wr_id 13, refused with ENOMEM (and those after it). */
static int d_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		if (!print_recvs)
			continue;
		if (wr->wr_id == 13) {
			*bad = wr;
			printf("fail %#x %lu %d\n", qp->qp_num, (unsigned long)wr->wr_id, ENOMEM);
			return ENOMEM;
		}
		uint32_t bytes = 0;
		for (int i = 0; i < wr->num_sge; i++)
			bytes += wr->sg_list[i].length;
		printf("recv %#x %lu %u %d\n", qp->qp_num, (unsigned long)wr->wr_id, bytes, wr->num_sge);
	}
	return 0;
}

/* An SRQ's posts: as a QP's, printed with QPN 0. */
static int d_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	static struct ibv_qp none;
	(void)srq;
	return d_post_recv(&none, wr, bad);
}

static int d_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct cq *c = (struct cq *)cq;
	int got = 0;
	while (got < n && c->head != c->tail)
		wc[got++] = c->ring[c->head++ % RING];
	return got;
}

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "hot_paths: %s failed\n", what);
		exit(3);
	}
}

/* --- ibv_wr_* --------------------------------------------------------------------------- */

/* rdma-core's struct verbs_qp (driver.h): what ibv_qp_to_qp_ex() looks at. */
struct xqp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qp_ex;
	};
	uint32_t comp_mask;
	void *xrcd;
	/* the batch being built */
	struct xwr {
		uint64_t wr_id, raddr;
		uint32_t flags, rkey, bytes, opcode;
		int nsge;
	} wr[32];
	int n;
};

/* Whether x_complete prints what it accepts (not in the storm: its handler builds too). */
static int print_wrs;

#define WR_FAIL_ID (0xfa11ull << 32)

static struct xqp *xq(struct ibv_qp_ex *q) { return (struct xqp *)q; }

static void x_add(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint32_t rkey, uint64_t raddr)
{
	struct xqp *x = xq(q);
	check(x->n < 32, "batch length");
	x->wr[x->n++] = (struct xwr){ .wr_id = q->wr_id, .raddr = raddr, .flags = q->wr_flags,
				       .rkey = rkey, .opcode = op };
}
static void x_start(struct ibv_qp_ex *q) { xq(q)->n = 0; }
static void x_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr) { x_add(q, IBV_WR_RDMA_WRITE, rkey, raddr); }
static void x_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, __be32 imm)
{
	(void)imm;
	x_add(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr);
}
static void x_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr) { x_add(q, IBV_WR_RDMA_READ, rkey, raddr); }
static void x_send(struct ibv_qp_ex *q) { x_add(q, IBV_WR_SEND, 0, 0); }
/* The WR a setter sets (a setter without one sets a scratch WR: ignored). */
static struct xwr *x_last(struct ibv_qp_ex *q)
{
	static struct xwr none;
	return xq(q)->n > 0 ? &xq(q)->wr[xq(q)->n - 1] : &none;
}
static void x_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t len)
{
	(void)lkey, (void)addr;
	x_last(q)->bytes = len, x_last(q)->nsge = 1;
}
static void x_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
	uint32_t bytes = 0;
	for (size_t i = 0; i < n; i++)
		bytes += sg[i].length;
	x_last(q)->bytes = bytes, x_last(q)->nsge = (int)n;
}
static void x_inline(struct ibv_qp_ex *q, void *addr, size_t len)
{
	(void)addr;
	x_last(q)->bytes = (uint32_t)len, x_last(q)->nsge = 1;
}
static int x_complete(struct ibv_qp_ex *q)
{
	struct xqp *x = xq(q);
	int n = x->n;
	x->n = 0;
	for (int i = 0; i < n; i++)
		if (x->wr[i].wr_id == WR_FAIL_ID) {
			if (print_wrs)
				printf("wrfail %#x %lu %d\n", q->qp_base.qp_num, (unsigned long)x->wr[0].wr_id, EINVAL);
			return EINVAL;
		}
	struct cq *c = (struct cq *)q->qp_base.send_cq;
	for (int i = 0; i < n; i++) {
		struct xwr *w = &x->wr[i];
		if (print_wrs)
			printf("wr %#x %lu %u %u %lu %u %u %d\n", q->qp_base.qp_num, (unsigned long)w->wr_id,
			       w->opcode, w->flags, (unsigned long)w->raddr, w->rkey, w->bytes, w->nsge);
		if (w->flags & IBV_SEND_SIGNALED)
			c->ring[c->tail++ % RING] = (struct ibv_wc){ .wr_id = w->wr_id, .opcode = IBV_WC_RDMA_WRITE,
								     .byte_len = w->bytes, .qp_num = q->qp_base.qp_num };
	}
	return 0;
}
static void x_abort(struct ibv_qp_ex *q) { xq(q)->n = 0; }

/* The QPN of the next extended QP (see new_xqp). */
static uint32_t next_xqpn;

static struct ibv_qp *d_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a)
{
	struct xqp *x = calloc(1, sizeof(*x));
	x->qp.context = context;
	x->qp.qp_num = next_xqpn;
	x->qp.qp_type = a->qp_type;
	x->qp.send_cq = a->send_cq, x->qp.recv_cq = a->recv_cq;
	x->comp_mask = 2; /* VERBS_QP_EX */
	struct ibv_qp_ex *q = &x->qp_ex;
	q->wr_start = x_start, q->wr_complete = x_complete, q->wr_abort = x_abort;
	q->wr_rdma_write = x_write, q->wr_rdma_write_imm = x_write_imm, q->wr_rdma_read = x_read;
	q->wr_send = x_send;
	q->wr_set_sge = x_sge, q->wr_set_sge_list = x_sge_list, q->wr_set_inline_data = x_inline;
	return &x->qp;
}

static struct ibv_device dev = { .name = "hotdev0" };
static struct verbs_context ctx;

static void make_ctx(void)
{
	ctx.sz = sizeof(ctx);
	ctx.context.abi_compat = (void *)UINTPTR_MAX;
	ctx.context.device = &dev;
	ctx.context.ops.post_send = d_post_send;
	ctx.context.ops.post_recv = d_post_recv;
	ctx.context.ops.post_srq_recv = d_post_srq_recv;
	ctx.context.ops.poll_cq = d_poll_cq;
	ctx.create_qp_ex = d_create_qp_ex;
	int (*instr)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "sigmatrace_instrument_context");
	if (instr && instr(&ctx.context) != 0) {
		fprintf(stderr, "hot_paths: cannot instrument the context\n");
		exit(2);
	}
}

static struct cq *new_cq(void)
{
	struct cq *c = calloc(1, sizeof(*c));
	c->cq.context = &ctx.context;
	return c;
}

static struct ibv_qp *new_qp(struct cq *c, uint32_t qpn)
{
	struct ibv_qp *qp = calloc(1, sizeof(*qp));
	qp->context = &ctx.context;
	qp->qp_num = qpn;
	qp->qp_type = IBV_QPT_RC;
	qp->send_cq = qp->recv_cq = &c->cq;
	return qp;
}


/* --- polls ------------------------------------------------------------------------------ */

static void queue(struct cq *c, struct ibv_wc w) { c->ring[c->tail++ % RING] = w; }

/* Polls `n` entries at most from `c`, printing each completion returned (its immediate data
 * or invalidated rkey in host order, as the tracer records it) or the empty poll. */
static void poll(struct cq *c, int n)
{
	struct ibv_wc wc[8];
	int got = ibv_poll_cq(&c->cq, n, wc);
	check(got >= 0, "poll");
	if (got == 0)
		printf("empty %#lx\n", (unsigned long)(uintptr_t)c);
	for (int i = 0; i < got; i++) {
		struct ibv_wc *w = &wc[i];
		uint32_t imm = w->wc_flags & IBV_WC_WITH_IMM   ? ntohl(w->imm_data)
			       : w->wc_flags & IBV_WC_WITH_INV ? w->invalidated_rkey
							       : 0;
		printf("wc %#lx %lu %u %u %u %u %u %u %u %u %u\n", (unsigned long)(uintptr_t)c,
		       (unsigned long)w->wr_id, w->status, w->opcode, w->vendor_err, w->byte_len, imm,
		       w->qp_num, w->src_qp, w->wc_flags, w->slid);
	}
}

static struct ibv_wc plain(uint64_t id, uint32_t qpn)
{
	return (struct ibv_wc){ .wr_id = id, .opcode = IBV_WC_RECV, .byte_len = (uint32_t)id * 8,
				.qp_num = qpn, .src_qp = 0x77, .slid = 5 };
}

/* A send-side completion without flags (24-byte CompletionShort). Its source QP and LID are
 * receive-side fields, undefined here (mlx5 leaves them as the caller's array held them):
 * 0 here, other values in 64, 65 and 69. */
static struct ibv_wc bare(uint64_t id, uint32_t qpn)
{
	return (struct ibv_wc){ .wr_id = id, .opcode = IBV_WC_RDMA_WRITE, .byte_len = 64,
				.qp_num = qpn };
}

static void polls(void)
{
	struct cq *a = new_cq(), *b = new_cq();
	struct ibv_wc w;
	/* First on its slot (ordinary path), then hot. */
	for (uint64_t id = 1; id <= 3; id++) {
		queue(a, plain(id, 0x40));
		poll(a, 1);
	}
	/* Each has no compact form or no compact record on the hot path, between hot ones. */
	w = plain(10, 0x40), w.status = IBV_WC_REM_ACCESS_ERR, w.vendor_err = 0x81;
	queue(a, w), poll(a, 1);
	queue(a, plain(11, 0x40)), poll(a, 1);
	w = plain(12, 0x40), w.wc_flags = IBV_WC_WITH_IMM, w.imm_data = htonl(0x01020304);
	queue(a, w), poll(a, 1);
	w = plain(13, 0x40), w.wc_flags = IBV_WC_WITH_INV, w.invalidated_rkey = 0xabcd;
	queue(a, w), poll(a, 1);
	w = plain(14, 0x40), w.src_qp = 0x1000000;
	queue(a, w), poll(a, 1);
	w = plain(15, 0x40), w.wc_flags = 0x100;
	queue(a, w), poll(a, 1);
	w = plain(16, 0x40), w.wc_flags = IBV_WC_GRH | IBV_WC_IP_CSUM_OK;
	queue(a, w), poll(a, 1);
	/* A successful one's vendor error is undefined (mlx5 writes it for error CQEs only): the
	 * caller's bytes, not recorded (0), and no reason to leave the compact form. */
	w = plain(17, 0x40), w.vendor_err = 0x5a;
	queue(a, w), poll(a, 1);
	/* The same QP on another CQ, and another QP: not bound yet, then hot. */
	queue(b, plain(20, 0x40)), poll(b, 1);
	queue(b, plain(21, 0x40)), poll(b, 1);
	queue(a, plain(22, 0x41)), poll(a, 1);
	queue(a, plain(23, 0x41)), poll(a, 1);
	/* Empty polls open a run: the next completion closes it first (not on the hot path), the
	 * one after is hot again. An empty poll of the other CQ keeps a run open meanwhile. */
	poll(a, 1), poll(a, 1), poll(b, 1);
	queue(a, plain(30, 0x40)), poll(a, 1);
	queue(a, plain(31, 0x40)), poll(a, 1);
	queue(b, plain(32, 0x40)), poll(b, 1);
	queue(a, plain(33, 0x40)), poll(a, 1);
	/* Several per poll: hot ones, then one that is not, then the rest. */
	queue(a, plain(40, 0x40)), queue(a, plain(41, 0x40));
	w = plain(42, 0x40), w.vendor_err = 7, w.status = IBV_WC_GENERAL_ERR;
	queue(a, w), queue(a, plain(43, 0x41)), queue(a, plain(44, 0x42));
	poll(a, 8);
	queue(a, plain(50, 0x42)), poll(a, 1);
	/* Short ones (hot and not), each between ones that differ from short in one field:
	 * a status without vendor error, a flag; and short ones with a LID or source QP (not
	 * recorded). */
	queue(a, bare(60, 0x40)), poll(a, 1);
	queue(a, bare(61, 0x40)), poll(a, 1);
	w = bare(62, 0x40), w.status = IBV_WC_WR_FLUSH_ERR;
	queue(a, w), poll(a, 1);
	queue(a, bare(63, 0x40)), poll(a, 1);
	w = bare(64, 0x40), w.slid = 1;
	queue(a, w), poll(a, 1);
	w = bare(65, 0x40), w.src_qp = 1;
	queue(a, w), poll(a, 1);
	w = bare(66, 0x40), w.wc_flags = IBV_WC_GRH;
	queue(a, w), poll(a, 1);
	queue(a, bare(67, 0x40)), queue(a, bare(68, 0x41)), poll(a, 8);
	w = bare(69, 0x40), w.src_qp = 0xdeadbeef, w.slid = 0x1234;
	queue(a, w), poll(a, 1);
	w = bare(70, 0x40), w.vendor_err = 0xa5;
	queue(a, w), poll(a, 1);
}

/* --- receive posts ---------------------------------------------------------------------- */

static void post_one(struct ibv_qp *qp, struct ibv_recv_wr *wr)
{
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(qp, wr, &bad);
	check(rc == 0 || (rc == ENOMEM && bad && bad->wr_id == 13), "post_recv");
}

static void recvs(void)
{
	static char buf[8192];
	struct cq *c = new_cq();
	struct ibv_qp *a = new_qp(c, 0x40), *b = new_qp(c, 0x41);
	struct ibv_sge sge[2] = { { (uintptr_t)buf, 100, 1 }, { (uintptr_t)buf + 4096, 200, 1 } };
	struct ibv_recv_wr w = { .sg_list = sge, .num_sge = 1 }, w2;
	/* The first on its slot (ordinary path), then hot. */
	for (uint64_t id = 1; id <= 3; id++)
		w.wr_id = id, post_one(a, &w);
	/* Two SGEs; two WRs; no SGE; a refused one; then hot again. */
	w.wr_id = 10, w.num_sge = 2, post_one(a, &w);
	w.num_sge = 1, w2 = w, w.wr_id = 11, w2.wr_id = 12, w.next = &w2, post_one(a, &w);
	w.next = NULL, w.wr_id = 12, w.num_sge = 0, post_one(a, &w);
	w.num_sge = 1, w.wr_id = 13, post_one(a, &w);
	w.wr_id = 14, post_one(a, &w);
	/* Another QP (not bound yet, then hot), the first again. */
	w.wr_id = 20, post_one(b, &w);
	w.wr_id = 21, post_one(b, &w);
	w.wr_id = 22, post_one(a, &w);
	/* Enough to fill chunks: the one that does not fit goes the ordinary way; every third
	 * to a shared receive queue. */
	struct ibv_srq *srq = calloc(1, sizeof(*srq));
	srq->context = &ctx.context;
	for (uint64_t id = 1000; id < 3000; id++) {
		w.wr_id = id, sge[0].length = (uint32_t)id;
		if (id % 3 == 0) {
			struct ibv_recv_wr *bad = NULL;
			check(ibv_post_srq_recv(srq, &w, &bad) == 0, "post_srq_recv");
		} else {
			post_one(id & 1 ? a : b, &w);
		}
	}
}

/* --- storm ------------------------------------------------------------------------------ */

static struct ibv_qp *storm_qp;
static struct cq *storm_cq;
static volatile sig_atomic_t handler_posts;
static char buf[64];
static struct ibv_sge sge = { (uintptr_t)buf, 8, 1 };

static void storm_handler(int sig)
{
	(void)sig;
	struct ibv_send_wr w = { .wr_id = (1ull << 40) + (uint64_t)handler_posts, .sg_list = &sge,
				 .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE },
			   *bad = NULL;
	w.wr.rdma.remote_addr = 0x2000;
	w.wr.rdma.rkey = 0x44;
	check(ibv_post_send(storm_qp, &w, &bad) == 0, "handler's write");
	struct ibv_recv_wr r = { .wr_id = w.wr_id, .sg_list = &sge, .num_sge = 1 }, *rbad = NULL;
	check(ibv_post_recv(storm_qp, &r, &rbad) == 0, "handler's receive");
	struct ibv_wc wc;
	check(ibv_poll_cq(&storm_cq->cq, 1, &wc) == 0, "handler's empty poll");
	handler_posts = handler_posts + 1;
}

static void storm(long n)
{
	struct cq *c = new_cq();
	struct ibv_qp *qp = new_qp(c, 0x50);
	storm_cq = new_cq();
	storm_qp = new_qp(storm_cq, 0x51);
	struct sigaction sa = { .sa_handler = storm_handler };
	sigemptyset(&sa.sa_mask);
	check(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
	struct itimerval it = { { 0, 20 }, { 0, 20 } };
	check(setitimer(ITIMER_REAL, &it, NULL) == 0, "setitimer");
	struct ibv_send_wr w = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	w.wr.rdma.remote_addr = 0x1000;
	w.wr.rdma.rkey = 0x33;
	struct ibv_recv_wr r = { .sg_list = &sge, .num_sge = 1 }, *rbad = NULL;
	struct ibv_wc wc;
	for (long i = 0; i < n; i++) {
		w.wr_id = (uint64_t)i;
		r.wr_id = (uint64_t)i;
		check(ibv_post_recv(qp, &r, &rbad) == 0, "receive");
		check(ibv_post_send(qp, &w, &bad) == 0, "write");
		check(ibv_poll_cq(&c->cq, 1, &wc) == 1 && wc.wr_id == (uint64_t)i, "poll");
	}
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	printf("storm main %ld handler %ld\n", n, (long)handler_posts);
}

/* --- ibv_wr_* batches ------------------------------------------------------------------- */

/* An extended QP numbered `qpn` on `c`. */
static struct ibv_qp_ex *new_xqp(struct cq *c, uint32_t qpn)
{
	struct ibv_qp_init_attr_ex a = { .send_cq = &c->cq, .recv_cq = &c->cq, .qp_type = IBV_QPT_RC,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND };
	next_xqpn = qpn;
	struct ibv_qp *qp = ibv_create_qp_ex(&ctx.context, &a);
	check(qp != NULL, "create_qp_ex");
	struct ibv_qp_ex *q = ibv_qp_to_qp_ex(qp);
	check(q != NULL, "qp_to_qp_ex");
	return q;
}

/* Sets the next WR's id and flags. */
static void id(struct ibv_qp_ex *q, uint64_t wr_id, uint32_t flags) { q->wr_id = wr_id, q->wr_flags = flags; }

/* A one-WR batch: an RDMA write of `len` bytes (one SGE). */
static int write1(struct ibv_qp_ex *q, uint64_t wr_id, uint32_t flags, uint64_t raddr, uint32_t len)
{
	ibv_wr_start(q);
	id(q, wr_id, flags);
	ibv_wr_rdma_write(q, 0x33, raddr);
	ibv_wr_set_sge(q, 1, 0x1000, len);
	return ibv_wr_complete(q);
}

static void wrs(void)
{
	struct cq *c = new_cq();
	struct ibv_qp_ex *a = new_xqp(c, 0x60), *b = new_xqp(c, 0x61);
	struct ibv_sge sg[2] = { { 0x1000, 10, 1 }, { 0x2000, 20, 1 } };
	struct ibv_send_wr sw = { .wr_id = 999, .sg_list = sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE }, *bad;
	struct ibv_qp *p = new_qp(c, 0x62);
	char data[16];
	/* The first on its slot (ordinary path), then hot. */
	for (uint64_t i = 1; i <= 3; i++)
		check(write1(a, i, IBV_SEND_SIGNALED, 0x7000 + i, 8) == 0, "write");
	poll(c, 8);
	/* No setter; a send; a read; inline data; an SGE list; then hot again. */
	ibv_wr_start(a), id(a, 10, 0), ibv_wr_rdma_write(a, 0x34, 0x7100), check(ibv_wr_complete(a) == 0, "no setter");
	ibv_wr_start(a), id(a, 11, 0), ibv_wr_send(a), ibv_wr_set_sge(a, 1, 0x1000, 64);
	check(ibv_wr_complete(a) == 0, "send");
	ibv_wr_start(a), id(a, 12, 0), ibv_wr_rdma_read(a, 0x35, 0x7200), ibv_wr_set_sge(a, 1, 0x1000, 128);
	check(ibv_wr_complete(a) == 0, "read");
	ibv_wr_start(a), id(a, 13, 0), ibv_wr_rdma_write(a, 0x36, 0x7300), ibv_wr_set_inline_data(a, data, 16);
	check(ibv_wr_complete(a) == 0, "inline");
	ibv_wr_start(a), id(a, 14, 0), ibv_wr_rdma_write(a, 0x37, 0x7400), ibv_wr_set_sge_list(a, 2, sg);
	check(ibv_wr_complete(a) == 0, "sge list");
	check(write1(a, 15, 0, 0x7500, 8) == 0, "write");
	/* Two WRs in one batch; two QPs' batches interleaved. */
	ibv_wr_start(a), id(a, 20, 0), ibv_wr_rdma_write(a, 0x38, 0x7600), ibv_wr_set_sge(a, 1, 0x1000, 1);
	id(a, 21, IBV_SEND_SIGNALED), ibv_wr_rdma_write(a, 0x38, 0x7700), ibv_wr_set_sge(a, 1, 0x1000, 2);
	check(ibv_wr_complete(a) == 0, "two WRs");
	ibv_wr_start(a), id(a, 22, 0), ibv_wr_rdma_write(a, 0x39, 0x7800);
	ibv_wr_start(b), id(b, 23, 0), ibv_wr_rdma_write(b, 0x3a, 0x7900), ibv_wr_set_sge(b, 1, 0x1000, 3);
	ibv_wr_set_sge(a, 1, 0x1000, 4);
	check(ibv_wr_complete(b) == 0 && ibv_wr_complete(a) == 0, "interleaved");
	/* Three WRs, a poll after the second; 18 (more than are placed, and more than a batch
	 * keeps: the first 16 are written before wr_complete). */
	ibv_wr_start(a);
	for (uint64_t i = 24; i <= 26; i++) {
		id(a, i, 0), ibv_wr_rdma_write(a, 0x39, 0x7a00 + i), ibv_wr_set_sge(a, 1, 0x1000, (uint32_t)i);
		if (i == 25)
			poll(c, 8);
	}
	check(ibv_wr_complete(a) == 0, "three WRs");
	ibv_wr_start(a);
	for (uint64_t i = 100; i < 118; i++)
		id(a, i, 0), ibv_wr_rdma_write(a, 0x39, 0x7b00 + i), ibv_wr_set_sge(a, 1, 0x1000, (uint32_t)i);
	check(ibv_wr_complete(a) == 0, "18 WRs");
	/* Inside a batch: a poll, a post (hot and not), another QP's setter with no WR. */
	check(write1(a, 30, 0, 0x8000, 8) == 0, "write");
	ibv_wr_start(a), id(a, 31, 0), ibv_wr_rdma_write(a, 0x3b, 0x8100);
	poll(c, 8);
	ibv_wr_set_sge(a, 1, 0x1000, 5), check(ibv_wr_complete(a) == 0, "poll inside");
	for (uint64_t i = 32; i <= 34; i++) {
		ibv_wr_start(a), id(a, i, 0), ibv_wr_rdma_write(a, 0x3c, 0x8200 + i), ibv_wr_set_sge(a, 1, 0x1000, 6);
		sw.wr_id = 900 + i, check(ibv_post_send(p, &sw, &bad) == 0, "post inside");
		check(ibv_wr_complete(a) == 0, "post inside");
	}
	ibv_wr_start(a), id(a, 35, 0), ibv_wr_rdma_write(a, 0x3d, 0x8300);
	ibv_wr_set_sge(b, 1, 0x1000, 99); /* b has no WR: the device ignores it (below) */
	ibv_wr_set_sge(a, 1, 0x1000, 7), check(ibv_wr_complete(a) == 0, "other setter");
	ibv_wr_start(a), id(a, 36, 0), ibv_wr_rdma_write(a, 0x3d, 0x8380), ibv_wr_set_sge(a, 1, 0x1000, 7);
	ibv_wr_set_sge(b, 1, 0x1000, 99);
	check(ibv_wr_complete(a) == 0, "other setter after");
	/* Another QP's empty batch completed inside a batch, which is then aborted. */
	ibv_wr_start(a), id(a, 37, 0), ibv_wr_rdma_write(a, 0x3d, 0x8390), ibv_wr_set_sge(a, 1, 0x1000, 7);
	ibv_wr_start(b), check(ibv_wr_complete(b) == 0, "empty batch");
	ibv_wr_abort(a);
	/* Refused and aborted batches, each between hot ones. */
	check(write1(a, WR_FAIL_ID, 0, 0x8400, 8) == EINVAL, "refused");
	check(write1(a, 40, 0, 0x8500, 8) == 0, "write");
	ibv_wr_start(a), id(a, 41, 0), ibv_wr_rdma_write(a, 0x3e, 0x8600), ibv_wr_set_sge(a, 1, 0x1000, 8);
	ibv_wr_abort(a);
	check(write1(a, 42, 0, 0x8700, 8) == 0, "write");
	/* No compact form: flags beyond its 5 bits, an address beyond 48 bits; immediate data. */
	check(write1(a, 50, 1u << 5, 0x8800, 8) == 0, "flags");
	check(write1(a, 51, 0, 1ull << 48, 8) == 0, "address");
	ibv_wr_start(a), id(a, 52, 0), ibv_wr_rdma_write_imm(a, 0x3f, 0x8900, htonl(7));
	ibv_wr_set_sge(a, 1, 0x1000, 9), check(ibv_wr_complete(a) == 0, "imm");
	/* A time base out of reach (20 ms later: 2^24 TSC ticks are less), then enough to fill
	 * chunks. */
	usleep(20000);
	for (uint64_t i = 1000; i < 3000; i++)
		check(write1(i % 3 ? a : b, i, 0, 0x10000 + i, (uint32_t)i) == 0, "bulk");
}

static struct ibv_qp_ex *storm_xqp;

static void wrstorm_handler(int sig)
{
	storm_handler(sig);
	uint64_t id = (1ull << 40) + (uint64_t)handler_posts - 1;
	check(write1(storm_xqp, id, 0, 0x3000, 8) == 0, "handler's batch");
}

static void wrstorm(long n)
{
	struct cq *c = new_cq();
	struct ibv_qp_ex *q = new_xqp(c, 0x70);
	storm_cq = new_cq();
	storm_qp = new_qp(storm_cq, 0x71);
	storm_xqp = new_xqp(storm_cq, 0x72);
	struct sigaction sa = { .sa_handler = wrstorm_handler };
	sigemptyset(&sa.sa_mask);
	check(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
	struct itimerval it = { { 0, 20 }, { 0, 20 } };
	check(setitimer(ITIMER_REAL, &it, NULL) == 0, "setitimer");
	struct ibv_wc wc;
	for (long i = 0; i < n; i++) {
		check(write1(q, (uint64_t)i, IBV_SEND_SIGNALED, 0x1000, 8) == 0, "batch");
		check(ibv_poll_cq(&c->cq, 1, &wc) == 1 && wc.wr_id == (uint64_t)i, "poll");
	}
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	printf("wrstorm main %ld handler %ld\n", n, (long)handler_posts);
}

int main(int argc, char **argv)
{
	make_ctx();
	if (argc > 1 && !strcmp(argv[1], "recvs")) {
		print_recvs = 1;
		recvs();
	} else if (argc > 1 && !strcmp(argv[1], "polls")) {
		polls();
	} else if (argc > 2 && !strcmp(argv[1], "storm")) {
		storm(atol(argv[2]));
	} else if (argc > 1 && !strcmp(argv[1], "wrs")) {
		print_wrs = 1;
		wrs();
	} else if (argc > 2 && !strcmp(argv[1], "wrstorm")) {
		wrstorm(atol(argv[2]));
	} else {
		fprintf(stderr, "usage: hot_paths polls | recvs | storm N | wrs | wrstorm N\n");
		return 2;
	}
	return 0;
}
