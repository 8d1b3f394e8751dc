/*
 * loopback: two RC QPs of one process connected to each other; N sends from A to B.
 *
 * Built twice by build.rs:
 *   loopback_linked  links libibverbs and calls the verbs directly;
 *   loopback_dlopen  (-DUSE_DLOPEN) does not link libibverbs: like NCCL it dlopen()s
 *                    libibverbs.so.1 (RTLD_LOCAL) and resolves every verb with
 *                    dlvsym(handle, name, "IBVERBS_1.1").
 * The data path is the inline verbs of <infiniband/verbs.h> in both. Run on softnic; the
 * interposer must record both identically.
 *
 * usage: loopback_{linked,dlopen} N          N sends from A to B (test)
 *        loopback_{linked,dlopen} rate N     N 8-byte RDMA writes, up to 64 outstanding, one in
 *                                            16 signaled; prints messages per second (benchmark)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VERBS(X)                                                                                              \
	X(struct ibv_device **, ibv_get_device_list, (int *))                                                  \
	X(void, ibv_free_device_list, (struct ibv_device **))                                                  \
	X(struct ibv_context *, ibv_open_device, (struct ibv_device *))                                        \
	X(int, ibv_close_device, (struct ibv_context *))                                                       \
	X(int, ibv_query_port, (struct ibv_context *, uint8_t, struct ibv_port_attr *))                        \
	X(struct ibv_pd *, ibv_alloc_pd, (struct ibv_context *))                                               \
	X(int, ibv_dealloc_pd, (struct ibv_pd *))                                                              \
	X(struct ibv_mr *, ibv_reg_mr, (struct ibv_pd *, void *, size_t, int))                                 \
	X(int, ibv_dereg_mr, (struct ibv_mr *))                                                                \
	X(struct ibv_cq *, ibv_create_cq, (struct ibv_context *, int, void *, struct ibv_comp_channel *, int)) \
	X(int, ibv_destroy_cq, (struct ibv_cq *))                                                              \
	X(struct ibv_qp *, ibv_create_qp, (struct ibv_pd *, struct ibv_qp_init_attr *))                        \
	X(int, ibv_modify_qp, (struct ibv_qp *, struct ibv_qp_attr *, int))                                    \
	X(int, ibv_destroy_qp, (struct ibv_qp *))

#define DECLARE(ret, name, args) static ret(*p_##name) args;
VERBS(DECLARE)

static void die(const char *what)
{
	fprintf(stderr, "loopback: %s failed\n", what);
	exit(1);
}

static void resolve(void)
{
#ifdef USE_DLOPEN
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		die("dlopen libibverbs.so.1");
#define RESOLVE(ret, name, args)                                                 \
	p_##name = (ret(*) args)dlvsym(h, #name, "IBVERBS_1.1");                 \
	if (!p_##name)                                                           \
		die("dlvsym " #name);
#else
#define RESOLVE(ret, name, args) p_##name = (ret(*) args)(name);
#endif
	VERBS(RESOLVE)
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, uint16_t lid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };
	if (p_ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 7;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = lid;
	a.ah_attr.port_num = 1;
	int rc = p_ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (rc) {
		fprintf(stderr, "loopback: RTR failed: %d (lid %u dest %u)\n", rc, lid, dest);
		exit(1);
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 7;
	a.max_rd_atomic = 1;
	if (p_ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Message rate: N RDMA writes of 8 bytes from A into B's buffer, <= 64 in flight. */
static void rate(struct ibv_qp *a, struct ibv_cq *cq, struct ibv_mr *mr, char *src, char *dst, long n)
{
	const long depth = 64, sig = 16;
	struct ibv_sge s = { (uintptr_t)src, 8, mr->lkey };
	long posted = 0, completed = 0;
	double t0 = now_s();
	while (completed < n) {
		while (posted < n && posted - completed < depth) {
			struct ibv_send_wr w = { .wr_id = posted, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
						 .send_flags = (posted % sig == sig - 1 || posted == n - 1) ? IBV_SEND_SIGNALED : 0 },
					   *bad;
			w.wr.rdma.remote_addr = (uintptr_t)dst;
			w.wr.rdma.rkey = mr->rkey;
			if (ibv_post_send(a, &w, &bad))
				die("ibv_post_send");
			posted++;
		}
		struct ibv_wc wc[16];
		int got = ibv_poll_cq(cq, 16, wc);
		if (got < 0)
			die("ibv_poll_cq");
		for (int i = 0; i < got; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				die("completion status");
			completed = (long)wc[i].wr_id + 1;
		}
	}
	double dt = now_s() - t0;
	printf("rate: %ld writes in %.3f s = %.0f msgs/s\n", n, dt, n / dt);
}

int main(int argc, char **argv)
{
	int rate_mode = argc > 2 && !strcmp(argv[1], "rate");
	long n = argc > 1 ? atol(argv[rate_mode ? 2 : 1]) : 100;
	resolve();
	struct ibv_device **list = p_ibv_get_device_list(NULL);
	if (!list || !list[0])
		die("ibv_get_device_list");
	struct ibv_context *ctx = p_ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_port_attr port;
	memset(&port, 0, sizeof(port));
	/* What the inline ibv_query_port() does, without naming the exported symbol. */
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
	if (vctx ? vctx->query_port(ctx, 1, &port, sizeof(port)) : p_ibv_query_port(ctx, 1, &port))
		die("ibv_query_port");
	struct ibv_pd *pd = p_ibv_alloc_pd(ctx);
	static char buf[2][4096];
	struct ibv_mr *mr = p_ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq = p_ibv_create_cq(ctx, rate_mode ? 256 : 2 * n + 2, NULL, NULL, 0);
	if (!pd || !mr || !cq)
		die("pd/mr/cq");
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq,
				       .cap = { .max_send_wr = rate_mode ? 64 : n, .max_recv_wr = rate_mode ? 1 : n,
						.max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	struct ibv_qp *a = p_ibv_create_qp(pd, &qa), *b = p_ibv_create_qp(pd, &qa);
	if (!a || !b)
		die("ibv_create_qp");
	connect_qp(a, b->qp_num, port.lid);
	connect_qp(b, a->qp_num, port.lid);

	if (rate_mode) {
		rate(a, cq, mr, buf[0], buf[1], n);
		return 0;
	}
	struct ibv_sge rs = { (uintptr_t)buf[1], 64, mr->lkey }, ss = { (uintptr_t)buf[0], 64, mr->lkey };
	for (long i = 0; i < n; i++) {
		struct ibv_recv_wr r = { .wr_id = 1000 + i, .sg_list = &rs, .num_sge = 1 }, *rbad;
		if (ibv_post_recv(b, &r, &rbad))
			die("ibv_post_recv");
	}
	int done = 0;
	for (long i = 0; i < n; i++) {
		struct ibv_send_wr s = { .wr_id = i, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED },
				   *sbad;
		if (ibv_post_send(a, &s, &sbad))
			die("ibv_post_send");
	}
	while (done < 2 * n) {
		struct ibv_wc wc[8];
		int got = ibv_poll_cq(cq, 8, wc);
		if (got < 0)
			die("ibv_poll_cq");
		for (int i = 0; i < got; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				die("completion status");
		done += got;
	}
	if (p_ibv_destroy_qp(a) || p_ibv_destroy_qp(b) || p_ibv_destroy_cq(cq) || p_ibv_dereg_mr(mr) ||
	    p_ibv_dealloc_pd(pd) || p_ibv_close_device(ctx))
		die("teardown");
	p_ibv_free_device_list(list);
	printf("loopback: %ld sends, %d completions\n", n, done);
	return 0;
}
