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

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "hot_paths: %s failed\n", what);
		exit(3);
	}
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
	} else {
		fprintf(stderr, "usage: hot_paths polls | recvs | storm N\n");
		return 2;
	}
	return 0;
}
